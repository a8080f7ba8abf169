//! `omnigraph history` and `omnigraph blame`: one entity through time, in
//! the HTTP API's shapes.

use omnigraph::{Blame, EntityHistory, Result};

use super::address::GraphArg;
use super::{print_json, read_only};

/// The entity a `history` or `blame` is about, and where.
#[derive(clap::Args)]
pub struct EntityArgs {
    /// The branch walked (its first parents).
    #[arg(long, default_value = "main")]
    branch: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// The node or edge type.
    #[arg(value_name = "TYPE")]
    type_name: String,
    /// The entity's id.
    id: String,
    #[command(flatten)]
    graph: GraphArg,
}

/// `history TYPE ID`: the commits that changed it, newest first.
pub async fn history(e: EntityArgs, property: Option<&str>, limit: Option<usize>) -> Result<()> {
    let g = read_only(e.graph.uri()?).await?;
    let h = g.entity_history(&e.type_name, &e.id, property, Some(&e.branch), limit).await?;
    if e.json { print_json(&h) } else { print_history(&h) }
}

/// `blame TYPE ID`: the commit that last set each property.
pub async fn blame(e: EntityArgs) -> Result<()> {
    let b = read_only(e.graph.uri()?).await?.blame(&e.type_name, &e.id, Some(&e.branch)).await?;
    if e.json { print_json(&b) } else { print_blame(&b) }
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
