//! Export: the JSONL a graph exports loads back into an empty graph with the
//! same rows and the same ids (every cookbook and the example graph), through
//! the embedded API, the CLI and the daemon.

use std::collections::BTreeSet;

use omnigraph::{Graph, LoadMode, Omnigraph, ReadTarget, WriteOptions};
use serde_json::{Value, json};

use crate::common::{SOCIAL_PG, files_with_suffix, loaded_social_graph, shared_fixtures, temp_graph_dir};

/// The export of `g` at `target` (only `types` when given), as text.
async fn export_text(g: &Graph, target: &ReadTarget, types: &[String]) -> String {
    let export = g.export(target, types).await.expect("plan");
    let (tx, mut rx) = tokio::sync::mpsc::channel(4);
    let (summary, text) = tokio::join!(export.run(tx), async {
        let mut text = Vec::new();
        while let Some(chunk) = rx.recv().await {
            text.extend_from_slice(&chunk.expect("chunk"));
        }
        String::from_utf8(text).expect("utf-8")
    });
    summary.expect("export");
    text
}

/// Every line as parsed JSON, order-free.
fn lines(text: &str) -> BTreeSet<String> {
    text.lines().map(|l| serde_json::from_str::<Value>(l).expect("a JSON line").to_string()).collect()
}

/// Export `g`, load it into a fresh graph of `schema`, export that: both
/// exports hold exactly the same lines (rows and ids).
async fn assert_round_trip(g: &Graph, schema: &str, what: &str) -> usize {
    let first = export_text(g, &ReadTarget::Branch("main".into()), &[]).await;
    let (_tmp, loc) = temp_graph_dir();
    let copy = Omnigraph::init(&loc, schema).await.expect("init copy");
    copy.load(first.as_bytes(), LoadMode::Overwrite, &WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{what}: the export does not load: {e}"));
    let second = export_text(&copy, &ReadTarget::Branch("main".into()), &[]).await;
    assert_eq!(lines(&first), lines(&second), "{what}: the round trip changed rows or ids");
    first.lines().count()
}

#[tokio::test]
async fn an_export_loads_back_with_the_same_rows_and_ids() {
    let (_dir, g) = loaded_social_graph().await;
    let n = assert_round_trip(&g, SOCIAL_PG, "example graph").await;
    assert_eq!(n, 8, "4 nodes and 4 edges");
    // Nodes come before edges; every line carries its id.
    let text = export_text(&g, &ReadTarget::Branch("main".into()), &[]).await;
    let kinds: Vec<bool> = text.lines().map(|l| l.contains("\"edge\"")).collect();
    assert!(kinds.windows(2).all(|w| w[0] <= w[1]), "{text}");
    assert!(text.lines().all(|l| l.contains("\"id\"")), "{text}");
    // One type only, by name or by table key; an unknown one is refused.
    let only = export_text(&g, &ReadTarget::Branch("main".into()), &["Knows".into()]).await;
    assert!(only.lines().count() == 2 && only.lines().all(|l| l.contains("\"Knows\"")), "{only}");
    let same = export_text(&g, &ReadTarget::Branch("main".into()), &["edge:Knows".into()]).await;
    assert_eq!(lines(&only), lines(&same));
    let err = g.export(&ReadTarget::Branch("main".into()), &["Nobody".into()]).await.err().expect("refused");
    assert!(err.to_string().contains("Nobody"), "{err}");
}

#[tokio::test]
async fn an_export_at_a_commit_shows_that_commit() {
    let (_dir, g) = loaded_social_graph().await;
    let before = g.commits("main", Some(1)).await.expect("commits")[0].commit_id.clone();
    let src = r#"query q() { insert Person { name: "Later", age: 9 } }"#;
    g.mutate(src, None, serde_json::Map::new(), &WriteOptions::default()).await.expect("insert");
    let old = export_text(&g, &ReadTarget::Commit(before), &["Person".into()]).await;
    let now = export_text(&g, &ReadTarget::Branch("main".into()), &["Person".into()]).await;
    assert!(!old.contains("Later") && now.contains("Later"), "{old}\n---\n{now}");
}

#[tokio::test]
async fn every_cookbook_round_trips_through_export() {
    let Some(fixtures) = shared_fixtures() else { return };
    let mut checked = 0;
    for seed in files_with_suffix(&fixtures.join("cookbooks"), "seed.jsonl") {
        let dir = seed.parent().expect("cookbook dir");
        let schema = std::fs::read_to_string(dir.join("schema.pg")).expect("schema");
        let data = std::fs::read_to_string(&seed).expect("seed");
        let (_tmp, loc) = temp_graph_dir();
        let g = Omnigraph::init(&loc, &schema).await.expect("init");
        g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("seed");
        assert_round_trip(&g, &schema, &seed.display().to_string()).await;
        checked += 1;
    }
    assert!(checked > 0, "no cookbook seeds found");
}

#[tokio::test]
async fn the_daemon_and_the_cli_export_the_same_lines() {
    let s = crate::server::start().await;
    let url = format!("{}/graphs/g/export", s.base);
    let resp = reqwest::Client::new()
        .post(&url)
        .header("authorization", format!("Bearer {}", crate::server::TOKEN))
        .header("content-type", "application/json")
        .body(json!({"branch": "main", "type_names": ["Person"], "table_keys": ["edge:Knows"]}).to_string())
        .send()
        .await
        .expect("export");
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(resp.headers().get("content-type").and_then(|v| v.to_str().ok()), Some("application/x-ndjson"));
    let http = resp.text().await.expect("body");
    let (st, bad) =
        crate::server::post(&s, "/graphs/g/export", json!({"type_names": ["Nobody"], "branch": "main"})).await;
    assert_eq!((st, bad["code"].as_str()), (400, Some("bad_request")), "{bad}");
    let (st, bad) = crate::server::post(&s, "/graphs/g/export", json!({"branch": ".."})).await;
    assert_eq!(st, 400, "{bad}");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["export", "--type", "Person", "--type", "Knows", &s.loc])
        .output()
        .expect("cli export");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli = String::from_utf8(out.stdout).expect("utf-8");
    assert_eq!(lines(&http), lines(&cli));
    assert_eq!(lines(&cli).len(), 5, "3 people and 2 Knows edges: {cli}");
}
