//! Parallel-branch write benchmark: `cargo run --example bench_branches -- --bench`.
//!
//! Prints one JSON object per figure: aggregate write throughput (one-row
//! insert mutations, each an atomic graph commit) with 1, 2, 4 and 8 writer
//! tasks on as many branches, against the same tasks all on one branch; and
//! the raw-Lance floor measured in the same run (sequential one-row
//! merge-insert commits on a bare dataset, the least work one graph write
//! does on its table before publishing).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::time::Instant;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use omnigraph::engine::storage::{MergeMode, TxnIdentity, table};
use omnigraph::{Graph, LoadMode, Omnigraph, WriteOptions};
use serde_json::{Map, json};

const SCHEMA: &str = include_str!("social.pg");
const DATA: &str = include_str!("social.jsonl");
/// Writes per task.
const WRITES: usize = 12;

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn insert(g: &Graph, branch: &str, name: &str) {
    let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} }}"#);
    g.mutate(&src, None, Map::new(), &on(branch)).await.expect("insert");
}

/// `tasks` writers, writer `i` on `branches[i % len]`; returns writes per second.
async fn run(g: &Graph, branches: &[String], tasks: usize, tag: &str) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let g = g.clone();
            let branch = branches[i % branches.len()].clone();
            let tag = tag.to_string();
            tokio::spawn(async move {
                for w in 0..WRITES {
                    insert(&g, &branch, &format!("{tag}-{i}-{w}")).await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("writer");
    }
    (tasks * WRITES) as f64 / start.elapsed().as_secs_f64()
}

/// Fresh branches `{tag}-0..n`, each forked for Person by one warm-up write.
async fn branches(g: &Graph, tag: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..n {
        let name = format!("{tag}-{i}");
        g.branch_create(&name, "main").await.expect("branch");
        insert(g, &name, &format!("{name}-warm")).await;
        out.push(name);
    }
    out
}

/// Sequential one-row merge-insert commits on a bare Lance dataset.
async fn raw_lance_floor(dir: &std::path::Path) -> f64 {
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
    let uri = dir.join("raw.lance").to_string_lossy().to_string();
    let batch =
        |id: String| RecordBatch::try_new(schema.clone(), vec![std::sync::Arc::new(StringArray::from(vec![id]))]);
    table::create_table(&uri, batch("seed".into()).expect("batch")).await.expect("create");
    let n = WRITES * 4;
    let start = Instant::now();
    for i in 0..n {
        let ds = table::open_table(&uri, None, None).await.expect("open");
        let identity = TxnIdentity::mint(ds.version().version);
        let staged = table::stage_merge_insert(
            ds,
            vec![batch(format!("r{i}")).expect("batch")],
            MergeMode::Upsert,
            &identity.uuid,
        )
        .await
        .expect("stage");
        table::commit_exact(staged).await.expect("commit");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("branch write benchmark: run with `cargo run --example bench_branches -- --bench`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let floor = raw_lance_floor(tmp.path()).await;
        println!("{}", json!({"figure": "raw_lance_one_row_commit", "writes_per_s": round(floor)}));
        let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), SCHEMA).await.expect("init");
        g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
        // One writer, one branch, 8 blocks: how throughput follows history
        // length (every commit adds `__manifest` rows that each write reads
        // until maintenance compacts it), separating that from contention.
        let solo = branches(&g, "solo", 1).await;
        let mut blocks = Vec::new();
        for b in 0..8 {
            blocks.push(round(run(&g, &solo, 1, &format!("s{b}")).await));
        }
        println!("{}", json!({"figure": "one_writer_throughput_per_block_of_12_commits", "writes_per_s": blocks}));
        for tasks in [1, 2, 4, 8] {
            let many = branches(&g, &format!("many{tasks}"), tasks).await;
            let parallel = run(&g, &many, tasks, &format!("m{tasks}")).await;
            let one = branches(&g, &format!("one{tasks}"), 1).await;
            let shared = run(&g, &one, tasks, &format!("o{tasks}")).await;
            println!(
                "{}",
                json!({
                    "figure": "aggregate_write_throughput", "writer_tasks": tasks,
                    "writes_per_s_on_separate_branches": round(parallel),
                    "writes_per_s_on_one_branch": round(shared),
                    "separate_over_floor": round(parallel / floor),
                    "one_over_floor": round(shared / floor),
                })
            );
        }
    });
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
