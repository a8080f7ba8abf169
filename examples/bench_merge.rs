//! Branch merge at scale: `cargo run --release --example bench_merge`
//! (`OMNIGRAPH_BENCH_ROWS`, default 1,000,000 Person rows on main;
//! `OMNIGRAPH_BENCH_CHANGES`, default 10,000 updated + 10,000 inserted on a branch;
//! `OMNIGRAPH_BENCH_MERGE_MEMORY`, the merge's fingerprint budget in bytes,
//! default the merge's own: a smaller one makes it spill to disk partitions;
//! `OMNIGRAPH_BENCH_INDEXED=0`: main without indexes, default with them).
//!
//! Prints one JSON object: the merge's wall time and peak RSS (the peak is
//! reset before it starts), beside the raw-Lance floor of committing the
//! same rows (one merge-insert on `id` into a bare copy of the table), and
//! whether main holds exactly the expected rows afterwards. Then two
//! three-way merges of the same size into the grown main (`three_way`): one
//! whose branch and main updated different rows (conflict-free), and one
//! where both updated the same rows, every conflict decided by
//! `--strategy theirs`; each with its wall time, peak RSS and a check.
//! Last (`revert`), a load of `OMNIGRAPH_BENCH_REVERT_ROWS` new rows
//! (default 100,000) as one commit, reverted by `commit revert`, beside the
//! raw-Lance floor of the same deletes (one delete of those ids in a bare
//! copy of the table).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::time::Instant;

use omnigraph::engine::storage::{MergeMode, table};
use omnigraph::{Graph, LoadMode, MergeOptions, Omnigraph, WriteOptions};
use serde_json::json;

const SCHEMA: &str = include_str!("social.pg");

#[path = "support/rss.rs"]
mod rss;
use rss::{peak_rss_kib, reset_peak_rss, rss_kib};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn person_lines(range: std::ops::Range<usize>, age: impl Fn(usize) -> usize) -> String {
    range.map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n", age(i))).collect()
}

/// The Person table of `branch`: its dataset at the pin.
async fn person(g: &Graph, branch: &str) -> std::sync::Arc<lance::Dataset> {
    let snap = g.snapshot(branch).await.expect("snapshot");
    let t = snap.tables.iter().find(|t| t.table_key == "node:Person").expect("Person");
    table::open_table(&g.root().child_uri(&t.table_path), t.table_branch.as_deref(), Some(t.version))
        .await
        .expect("open")
}

#[tokio::main]
async fn main() {
    // `OMNIGRAPH_LOG=info` prints each saga and merge step's time on stderr.
    if std::env::var_os("OMNIGRAPH_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("OMNIGRAPH_LOG"))
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(std::io::stderr)
            .init();
    }
    let rows = env_usize("OMNIGRAPH_BENCH_ROWS", 1_000_000);
    let changes = env_usize("OMNIGRAPH_BENCH_CHANGES", 10_000).min(rows);
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Omnigraph::init(&dir.path().join("g").to_string_lossy(), SCHEMA).await.expect("init");
    g.load(person_lines(0..rows, |i| i % 100).as_bytes(), LoadMode::Overwrite, &WriteOptions::default())
        .await
        .expect("load main");
    // Main's indexes built, as `index ensure` or a daemon's background fold
    // leaves them (`OMNIGRAPH_BENCH_INDEXED=0`: none, every lookup scans).
    let indexed = std::env::var("OMNIGRAPH_BENCH_INDEXED").map_or(true, |v| v != "0");
    if indexed {
        g.ensure_indices("main", None).await.expect("indexes");
    }
    g.branch_create("feature", "main").await.expect("branch");
    let feature = WriteOptions { branch: "feature".into(), ..WriteOptions::default() };
    // Updates of existing rows (age 120) and new rows (age 130), in load chunks.
    let updates = person_lines(0..changes, |_| 120);
    let inserts = person_lines(rows..rows + changes, |_| 130);
    for chunk in [updates, inserts] {
        let lines: Vec<&str> = chunk.lines().collect();
        for part in lines.chunks(5_000) {
            g.load(part.join("\n").as_bytes(), LoadMode::Merge, &feature).await.expect("load feature");
        }
    }

    // The floor: one merge-insert of the same rows into a bare copy of main's table.
    let changed = table::scan(&*person(&g, "feature").await, Some("age >= 120")).await.expect("changed rows");
    let all = table::scan(&*person(&g, "main").await, None).await.expect("main rows");
    let bare_uri = dir.path().join("bare.lance").to_string_lossy().to_string();
    let schema = changed[0].schema();
    let all = arrow::compute::concat_batches(&schema, &all).expect("concat main");
    let bare = table::create_table(&bare_uri, all).await.expect("bare");
    let changed_batch = arrow::compute::concat_batches(&schema, &changed).expect("concat");
    let floor = Instant::now();
    let staged = table::stage_merge_insert(bare, vec![changed_batch], MergeMode::Upsert, "floor").await.expect("stage");
    table::commit_exact(staged).await.expect("floor");
    let floor_secs = floor.elapsed().as_secs_f64();

    reset_peak_rss();
    let rss_before_kib = rss_kib();
    let started = Instant::now();
    let memory_bytes = std::env::var("OMNIGRAPH_BENCH_MERGE_MEMORY").ok().and_then(|v| v.parse().ok());
    let r = g
        .branch_merge("feature", "main", &MergeOptions { memory_bytes, ..MergeOptions::default() })
        .await
        .expect("merge");
    let merge_secs = started.elapsed().as_secs_f64();
    let merge_peak_kib = peak_rss_kib();

    let main_rows = table::row_count(&*person(&g, "main").await).await.expect("count");
    let moved = table::scan(&*person(&g, "main").await, Some("age >= 120")).await.expect("check");
    let moved: usize = moved.iter().map(|b| b.num_rows()).sum();
    // Conflicting rows: the branch's first `changes` rows also changed on main.
    let clean = three_way(&g, "clean", changes, (140, changes..2 * changes, 145), None).await;
    let decided =
        three_way(&g, "decided", changes, (141, 0..changes, 146), Some(omnigraph::MergeStrategy::Theirs)).await;
    let reverted = revert_load(&g, dir.path(), rows + changes, env_usize("OMNIGRAPH_BENCH_REVERT_ROWS", 100_000)).await;
    println!(
        "{}",
        json!({
            "bench": "branch_merge", "main_rows": rows, "updated": changes, "inserted": changes, "indexed": indexed,
            "outcome": r.report.outcome, "tables": r.report.tables, "memory_budget_bytes": memory_bytes,
            "merge_secs": merge_secs, "merge_peak_rss_mib": merge_peak_kib / 1024,
            "rss_before_merge_mib": rss_before_kib / 1024,
            "raw_lance_merge_insert_floor_secs": floor_secs,
            "ratio_to_floor": merge_secs / floor_secs,
            "main_rows_after": main_rows, "changed_rows_on_main": moved,
            "correct": main_rows as usize == rows + changes && moved == 2 * changes,
            "three_way": { "conflict_free": clean, "conflicts_decided_by_theirs": decided },
            "revert": reverted,
        })
    );
}

/// Rows `0..changes` updated to `age` on a new branch `name`, rows
/// `on_main` updated to `main_age` on main, then the branch merged into
/// main under `strategy`: the merge's wall time, peak RSS, conflicts
/// decided, and whether main holds the branch's `changes` rows afterwards.
async fn three_way(
    g: &Graph,
    name: &str,
    changes: usize,
    (age, on_main, main_age): (usize, std::ops::Range<usize>, usize),
    strategy: Option<omnigraph::MergeStrategy>,
) -> serde_json::Value {
    g.branch_create(name, "main").await.expect("branch");
    for (branch, lines) in [(name, person_lines(0..changes, |_| age)), ("main", person_lines(on_main, |_| main_age))] {
        let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
        let lines: Vec<&str> = lines.lines().collect();
        for part in lines.chunks(5_000) {
            g.load(part.join("\n").as_bytes(), LoadMode::Merge, &o).await.expect("load");
        }
    }
    reset_peak_rss();
    let started = Instant::now();
    let r = g.branch_merge(name, "main", &MergeOptions { strategy, ..MergeOptions::default() }).await.expect("merge");
    let secs = started.elapsed().as_secs_f64();
    let peak_kib = peak_rss_kib();
    let held = table::scan(&*person(g, "main").await, Some(&format!("age = {age}"))).await.expect("check");
    let held: usize = held.iter().map(|b| b.num_rows()).sum();
    json!({
        "outcome": r.report.outcome, "rows_changed_on_branch": changes, "conflicts_decided": r.report.conflicts_decided,
        "merge_secs": secs, "merge_peak_rss_mib": peak_kib / 1024, "correct": held == changes,
    })
}

/// `n` new rows (from `first`, age 150) loaded on main as one commit, then
/// that commit reverted: the revert's wall time and peak RSS beside the
/// raw-Lance floor of deleting the same ids from a bare copy of the table,
/// and whether main holds exactly what it held before the load.
async fn revert_load(g: &Graph, dir: &std::path::Path, first: usize, n: usize) -> serde_json::Value {
    let before = table::row_count(&*person(g, "main").await).await.expect("count");
    let loaded = g
        .load(person_lines(first..first + n, |_| 150).as_bytes(), LoadMode::Merge, &WriteOptions::default())
        .await
        .expect("load");
    let commit = loaded.commit_id.expect("a commit");
    let rows = table::scan(&*person(g, "main").await, None).await.expect("main rows");
    let schema = rows[0].schema();
    let bare = table::create_table(
        &dir.join("bare-revert.lance").to_string_lossy(),
        arrow::compute::concat_batches(&schema, &rows).expect("concat"),
    )
    .await
    .expect("bare");
    let mut ids = Vec::with_capacity(n);
    for b in table::scan(&bare, Some("age = 150")).await.expect("loaded rows") {
        let col = b.column_by_name("id").expect("id");
        let col = col.as_any().downcast_ref::<arrow::array::StringArray>().expect("string ids");
        ids.extend(col.iter().flatten().map(str::to_string));
    }
    let floor = Instant::now();
    let staged = table::stage_delete(bare, &ids, "floor").await.expect("stage").expect("rows to delete");
    table::commit_exact(staged).await.expect("floor");
    let floor_secs = floor.elapsed().as_secs_f64();

    reset_peak_rss();
    let started = Instant::now();
    let r = g.commit_revert(&commit, &omnigraph::RevertOptions::default()).await.expect("revert");
    let secs = started.elapsed().as_secs_f64();
    let peak_kib = peak_rss_kib();
    let after = table::row_count(&*person(g, "main").await).await.expect("count");
    let left = table::scan(&*person(g, "main").await, Some("age = 150")).await.expect("check");
    let left: usize = left.iter().map(|b| b.num_rows()).sum();
    json!({
        "rows_reverted": n, "deleted_ids": ids.len(), "tables": r.report.tables, "revert_secs": secs,
        "revert_peak_rss_mib": peak_kib / 1024, "raw_lance_delete_floor_secs": floor_secs,
        "ratio_to_floor": secs / floor_secs, "correct": after == before && left == 0,
    })
}
