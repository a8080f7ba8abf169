//! Export round trip at scale: `cargo run --release --example bench_export`
//! (`OMNIGRAPH_BENCH_ROWS`, default 1,000,000 Person rows).
//!
//! Loads the rows into a fresh graph, exports it, loads the export into a
//! second graph and exports that, then prints one JSON object: rows, the
//! export's wall time and its peak RSS (measured on its own: the peak is
//! reset before it starts), the raw floor of scanning the same table, and
//! whether both exports hold exactly the same lines (rows and ids).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::time::Instant;

use omnigraph::engine::storage::table;
use omnigraph::{Graph, LoadMode, Omnigraph, ReadTarget, WriteOptions};
use serde_json::json;

const SCHEMA: &str = include_str!("social.pg");

#[path = "support/rss.rs"]
mod rss;
use rss::{peak_rss_kib, reset_peak_rss};

/// Export `g`'s main to `path`; the sorted hashes of its lines.
async fn export_to(g: &Graph, path: &std::path::Path) -> Vec<u64> {
    let export = g.export(&ReadTarget::Branch("main".into()), &[]).await.expect("plan");
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let mut hashes = Vec::new();
    let (summary, ()) = tokio::join!(export.run(tx), async {
        while let Some(chunk) = rx.recv().await {
            let chunk = chunk.expect("chunk");
            file.write_all(&chunk).expect("write");
            for line in chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let v: serde_json::Value = serde_json::from_slice(line).expect("a JSON line");
                let mut h = DefaultHasher::new();
                v.to_string().hash(&mut h);
                hashes.push(h.finish());
            }
        }
    });
    summary.expect("export");
    file.flush().expect("flush");
    hashes.sort_unstable();
    hashes
}

#[tokio::main]
async fn main() {
    let rows: usize = std::env::var("OMNIGRAPH_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut data = String::with_capacity(rows * 48);
    for i in 0..rows {
        data.push_str(&format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n", i % 100));
    }
    let g = Omnigraph::init(&dir.path().join("a").to_string_lossy(), SCHEMA).await.expect("init");
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    drop(data);

    let view = g.snapshot("main").await.expect("snapshot");
    let person = view.tables.iter().find(|t| t.table_key == "node:Person").expect("Person");
    let uri = g.root().child_uri(&person.table_path);
    let ds = table::open_table(&uri, None, Some(person.version)).await.expect("open");
    let floor = Instant::now();
    let scanned: usize = table::scan(&ds, None).await.expect("scan").iter().map(|b| b.num_rows()).sum();
    let floor_secs = floor.elapsed().as_secs_f64();

    reset_peak_rss();
    let started = Instant::now();
    let first = export_to(&g, &dir.path().join("a.jsonl")).await;
    let export_secs = started.elapsed().as_secs_f64();
    let export_peak_kib = peak_rss_kib();

    let copy = Omnigraph::init(&dir.path().join("b").to_string_lossy(), SCHEMA).await.expect("init copy");
    let text = std::fs::read(dir.path().join("a.jsonl")).expect("read export");
    copy.load(text.as_slice(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("reload");
    let second = export_to(&copy, &dir.path().join("b.jsonl")).await;
    println!(
        "{}",
        json!({
            "bench": "export_round_trip", "rows": rows, "exported": first.len(), "scanned_floor_rows": scanned,
            "export_secs": export_secs, "export_rows_per_sec": first.len() as f64 / export_secs,
            "export_peak_rss_mib": export_peak_kib / 1024, "raw_scan_floor_secs": floor_secs,
            "round_trip_identical": first == second,
        })
    );
}
