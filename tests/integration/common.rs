//! Shared test helpers.

use std::path::PathBuf;

use omnigraph::{Graph, Omnigraph};

/// The bundled example schema.
pub const SOCIAL_PG: &str = include_str!("../../examples/social.pg");

/// A fresh temporary directory and the graph location inside it.
pub fn temp_graph_dir() -> (tempfile::TempDir, String) {
    let dir = crate::scratch::tempdir();
    let loc = dir.path().join("graph").to_string_lossy().to_string();
    (dir, loc)
}

/// A new graph from the example schema.
pub async fn social_graph() -> (tempfile::TempDir, Graph) {
    let (dir, loc) = temp_graph_dir();
    let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
    (dir, g)
}

/// The example graph loaded with the example data (one overwrite commit).
pub async fn loaded_social_graph() -> (tempfile::TempDir, Graph) {
    let (dir, g) = social_graph().await;
    let data = include_str!("../../examples/social.jsonl");
    g.load(data.as_bytes(), omnigraph::LoadMode::Overwrite, &omnigraph::WriteOptions::default()).await.expect("load");
    (dir, g)
}

/// A new graph of `schema` holding the JSONL `lines` (one overwrite commit).
pub async fn graph_with(schema: &str, lines: &[&str]) -> (tempfile::TempDir, Graph) {
    let (dir, loc) = temp_graph_dir();
    let g = Omnigraph::init(&loc, schema).await.expect("init");
    let data = lines.join("\n");
    g.load(data.as_bytes(), omnigraph::LoadMode::Overwrite, &omnigraph::WriteOptions::default()).await.expect("load");
    (dir, g)
}

/// The shared conformance corpus, or `None` (with a notice) when absent.
pub fn shared_fixtures() -> Option<PathBuf> {
    let dir = std::env::var_os("OMNIGRAPH_SHARED_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    if dir.is_dir() {
        Some(dir)
    } else {
        eprintln!("NOTICE: shared fixtures not found at {}; skipping conformance test", dir.display());
        None
    }
}

/// Every file under `dir` (recursively) whose name ends with `suffix`, sorted.
pub fn files_with_suffix(dir: &std::path::Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}
