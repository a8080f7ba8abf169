//! `omnigraph history` and `omnigraph blame`: one entity through time, in
//! the HTTP API's shapes.

use omnigraph::{Blame, EntityHistory, Result};

use super::{print_json, read_only};

/// `history TYPE ID`: the commits that changed it, newest first.
pub async fn history(
    graph: &str,
    (type_name, id): (&str, &str),
    property: Option<&str>,
    branch: &str,
    limit: Option<usize>,
    json: bool,
) -> Result<()> {
    let h = read_only(graph).await?.entity_history(type_name, id, property, Some(branch), limit).await?;
    if json { print_json(&h) } else { print_history(&h) }
}

/// `blame TYPE ID`: the commit that last set each property.
pub async fn blame(graph: &str, (type_name, id): (&str, &str), branch: &str, json: bool) -> Result<()> {
    let b = read_only(graph).await?.blame(type_name, id, Some(branch)).await?;
    if json { print_json(&b) } else { print_blame(&b) }
}

fn print_history(h: &EntityHistory) -> Result<()> {
    for e in &h.entries {
        let changed = match (&e.before, &e.after) {
            (Some(b), Some(a)) => {
                let names: Vec<&String> = a
                    .properties
                    .keys()
                    .chain(b.properties.keys())
                    .filter(|k| a.properties.get(*k) != b.properties.get(*k))
                    .collect();
                let mut names: Vec<&str> = names.into_iter().map(String::as_str).collect();
                names.sort();
                names.dedup();
                format!(" {}", names.join(", "))
            }
            _ => String::new(),
        };
        outln!("{} {:?} by {}{changed}", e.graph_commit_id, e.op, e.actor_id.as_deref().unwrap_or("-"));
    }
    Ok(())
}

fn print_blame(b: &Blame) -> Result<()> {
    for l in &b.properties {
        outln!("{:<20} {} by {}", l.property, l.graph_commit_id, l.actor_id.as_deref().unwrap_or("-"));
    }
    Ok(())
}
