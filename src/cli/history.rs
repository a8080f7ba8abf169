//! `omnigraph history` and `omnigraph blame`: one entity through time, in
//! the HTTP API's shapes, on the graph's storage or through a daemon
//! (`--server`; both print the same bytes).

use omnigraph::Result;
use serde_json::Value;

use super::address::GraphArg;
use super::{print_json, read_only, to_json, url_segment};

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
    let answer = match e.graph.remote()? {
        Some(remote) => {
            let mut q = vec![("branch", e.branch.clone())];
            q.extend(property.map(|p| ("property", p.to_string())));
            q.extend(limit.map(|l| ("limit", l.to_string())));
            remote.get(&e.path("history"), &q).await?
        }
        None => {
            let g = read_only(e.graph.uri()?).await?;
            to_json(&g.entity_history(&e.type_name, &e.id, property, Some(&e.branch), limit).await?)?
        }
    };
    if e.json { print_json(&answer) } else { print_history(&answer) }
}

/// `blame TYPE ID`: the commit that last set each property.
pub async fn blame(e: EntityArgs) -> Result<()> {
    let answer = match e.graph.remote()? {
        Some(remote) => remote.get(&e.path("blame"), &[("branch", e.branch.clone())]).await?,
        None => to_json(&read_only(e.graph.uri()?).await?.blame(&e.type_name, &e.id, Some(&e.branch)).await?)?,
    };
    if e.json { print_json(&answer) } else { print_blame(&answer) }
}

impl EntityArgs {
    /// `/{route}/{type}/{id}` on the graph.
    fn path(&self, route: &str) -> String {
        format!("/{route}/{}/{}", url_segment(&self.type_name), url_segment(&self.id))
    }
}

fn print_history(h: &Value) -> Result<()> {
    let empty = serde_json::Map::new();
    let props = |v: &Value| v["properties"].as_object().unwrap_or(&empty).clone();
    for e in h["entries"].as_array().into_iter().flatten() {
        let changed = match (e.get("before"), e.get("after")) {
            (Some(b), Some(a)) => {
                let (b, a) = (props(b), props(a));
                let mut names: Vec<&str> =
                    a.keys().chain(b.keys()).filter(|k| a.get(*k) != b.get(*k)).map(String::as_str).collect();
                names.sort();
                names.dedup();
                format!(" {}", names.join(", "))
            }
            _ => String::new(),
        };
        let op = e["op"].as_str().unwrap_or("-");
        let op = op.get(..1).map_or(String::new(), str::to_uppercase) + op.get(1..).unwrap_or_default();
        let (commit, actor) = (e["graph_commit_id"].as_str().unwrap_or("-"), e["actor_id"].as_str().unwrap_or("-"));
        outln!("{commit} {op} by {actor}{changed}");
    }
    Ok(())
}

fn print_blame(b: &Value) -> Result<()> {
    for l in b["properties"].as_array().into_iter().flatten() {
        let field = |f: &str| l[f].as_str().unwrap_or("-").to_string();
        outln!("{:<20} {} by {}", field("property"), field("graph_commit_id"), field("actor_id"));
    }
    Ok(())
}
