//! The embedded API end to end: `cargo run --example embedded`.
//!
//! Creates a graph in a temporary directory, loads the example data as one
//! commit, runs a mutation and a query, reads an older commit, and writes on
//! a branch.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use omnigraph::{LoadMode, Omnigraph, ReadTarget, WriteOptions, result_rows};

#[tokio::main]
async fn main() -> omnigraph::Result<()> {
    let dir = std::env::temp_dir().join(format!("omnigraph-embedded-{}", std::process::id()));
    let location = dir.to_string_lossy().to_string();
    let graph = Omnigraph::init(&location, include_str!("social.pg")).await?;

    let opts = WriteOptions { actor: Some("example".into()), ..WriteOptions::default() };
    let loaded = graph.load(include_str!("social.jsonl").as_bytes(), LoadMode::Overwrite, &opts).await?;
    println!(
        "loaded {} nodes, {} edges in commit {:?}",
        loaded.nodes_affected, loaded.edges_affected, loaded.commit_id
    );

    let mut params = serde_json::Map::new();
    params.insert("name".into(), "Dora".into());
    graph.mutate("query add($name: String) { insert Person { name: $name, age: 29 } }", None, params, &opts).await?;

    let people = "query people() { match { $p: Person } return { $p.name, $p.age } order { $p.name asc } }";
    let now = graph.query(people, None, serde_json::Map::new(), &ReadTarget::default()).await?;
    println!("at {}: {:?}", now.graph_commit_id, result_rows(&now));

    if let Some(first) = loaded.commit_id {
        let then = graph.query(people, None, serde_json::Map::new(), &ReadTarget::Commit(first)).await?;
        println!("at {} (time travel): {} people", then.graph_commit_id, result_rows(&then).len());
    }
    // A branch: write in isolation, read both sides, then delete it.
    graph.branch_create("review/dora", "main").await?;
    let review = WriteOptions { branch: "review/dora".into(), ..opts.clone() };
    graph
        .mutate(r#"query q() { update Person set { age: 30 } where name = "Dora" }"#, None, Default::default(), &review)
        .await?;
    let on_branch =
        graph.query(people, None, serde_json::Map::new(), &ReadTarget::Branch("review/dora".into())).await?;
    println!("on review/dora: {:?}", result_rows(&on_branch));
    println!("merge base with main: {:?}", graph.merge_base("main", "review/dora").await?);
    let deleted = graph.branch_delete("review/dora").await?;
    println!("deleted {} ({} table forks reclaimed)", deleted.name, deleted.forks_reclaimed.len());
    for c in graph.commits("main", None).await? {
        println!("{}  {}  {}", c.commit_id, c.actor.unwrap_or_default(), c.created_at);
    }
    drop(graph);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
