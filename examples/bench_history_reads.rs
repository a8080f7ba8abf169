//! History reads benchmark: does a diff cost what changed, not the table?
//! `cargo build --release --example bench_history_reads && ./target/release/examples/bench_history_reads`.
//!
//! On a fresh graph it loads `ROWS` entities of one type (default
//! 1,000,000) and compacts them, then commits an upsert of `CHANGED` of them
//! (default 1,000) twice: spread evenly over the table, then one run of
//! consecutive ids. It prints, as JSON, each commit's diff against its
//! parent with `--stat` and in full (wall time and peak RSS each), beside
//! the raw-Lance floor measured in the same run (a full scan of the table
//! at the head) and the ratios; then `COMMITS` one-row commits (default
//! 1,000) and one `changes poll` over all of them.
//!
//! The two shapes bound a diff's cost: a changed row's older image is read
//! from the compressed chunk that holds it, so changes spread one per
//! chunk over a compacted table read every chunk of its columns once,
//! while a run of changes reads a few.
//!
//! Environment: `OMNIGRAPH_BENCH_ROWS`, `OMNIGRAPH_BENCH_CHANGED`,
//! `OMNIGRAPH_BENCH_COMMITS`, `OMNIGRAPH_BENCH_SAMPLES` (timed runs of each
//! read, the median reported; default 3).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

#[path = "support/rss.rs"]
mod rss;

use std::time::Instant;

use futures::TryStreamExt;
use omnigraph::{DiffFilter, FeedFrom, FeedRequest, FeedStart, Graph, LoadMode, Omnigraph, WriteOptions};
use serde_json::{Map, json};

const SCHEMA: &str = "node Item {\n    name: String @key\n    n: I64?\n    note: String?\n}\n";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// `rows` load lines of items `from..from + rows`, with value `n`.
fn lines(from: usize, rows: usize, n: usize) -> String {
    (from..from + rows)
        .map(|i| {
            format!("{{\"type\": \"Item\", \"data\": {{\"name\": \"i{i:08}\", \"n\": {n}, \"note\": \"row {i}\"}}}}\n")
        })
        .collect()
}

/// The median wall time (ms) and the largest peak RSS growth (KiB) of
/// `samples` runs of `f`.
async fn measure<F, Fut, T>(samples: usize, mut f: F) -> (f64, u64, T)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (mut times, mut peak, mut last) = (Vec::new(), 0u64, None);
    for _ in 0..samples.max(1) {
        rss::reset_peak_rss();
        let base = rss::rss_kib();
        let t = Instant::now();
        let out = f().await;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        peak = peak.max(rss::peak_rss_kib().saturating_sub(base));
        last = Some(out);
    }
    times.sort_by(f64::total_cmp);
    (times[times.len() / 2], peak, last.expect("one sample"))
}

/// A full scan of the Item table at main's head: every column of every row.
async fn raw_full_scan(loc: &str) -> usize {
    let root = omnigraph::engine::storage::Root::parse(loc).expect("root");
    let view = omnigraph::engine::manifest::load(&root, "main", None).await.expect("view");
    let ds = omnigraph::engine::committed::open_pinned(&root, &view.state.tables["node:Item"]).await.expect("open");
    let stream = ds.scan().try_into_stream().await.expect("scan");
    let batches: Vec<arrow_array::RecordBatch> = stream.try_collect().await.expect("batches");
    batches.iter().map(|b| b.num_rows()).sum()
}

/// Where a diff's time goes (median ms of each step, run alone): resolving
/// one ref to its commit, loading one commit's manifest, opening one table
/// version, and the row delta between the two versions.
async fn breakdown(g: &Graph, loc: &str, before: &str, after: &str, samples: usize) -> serde_json::Value {
    use omnigraph::engine::{committed, manifest, storage::row_delta};
    let root = omnigraph::engine::storage::Root::parse(loc).expect("root");
    let (resolve_ms, _, row) = measure(samples, || g.commit(before)).await;
    let row = row.expect("commit");
    let (load_ms, _, _) = measure(samples, || manifest::load_at(&root, "main", row.manifest_version)).await;
    let a = manifest::load(&root, "main", Some(row.manifest_version)).await.expect("from");
    let b = manifest::load(&root, "main", Some(g.commit(after).await.expect("to").manifest_version)).await.expect("to");
    let (ea, eb) = (a.state.tables["node:Item"].clone(), b.state.tables["node:Item"].clone());
    let (open_ms, _, _) = measure(samples, || committed::open_pinned(&root, &ea)).await;
    let (f, t) =
        (committed::open_pinned(&root, &ea).await.expect("f"), committed::open_pinned(&root, &eb).await.expect("t"));
    let (delta_ms, _, _) = measure(samples, || row_delta::between(&f, &t)).await;
    let all = DiffFilter::default();
    let (engine_ms, _, _) = measure(samples, || omnigraph::engine::diff::changes(&root, &a, &b, &all)).await;
    json!({
        "resolve_ref": resolve_ms,
        "manifest_load": load_ms,
        "open_table_version": open_ms,
        "row_delta": delta_ms,
        "engine_diff_given_manifests": engine_ms,
    })
}

/// The diff from `before` to `after` (`changed` rows updated): `--stat`
/// and in full, each `{ms, peak_rss_growth_kib}`.
async fn diff_figures(
    g: &Graph,
    before: &str,
    after: &str,
    changed: usize,
    samples: usize,
) -> (serde_json::Value, serde_json::Value) {
    let all = DiffFilter::default();
    let (stat_ms, stat_kib, stats) = measure(samples, || g.diff_stats(before, after, &all)).await;
    let updated: u64 = stats.expect("stat").stats.iter().map(|s| s.updated).sum();
    assert_eq!(updated as usize, changed, "the diff counts every changed row");
    let full = || async {
        let mut n = 0;
        let mut token: Option<String> = None;
        loop {
            let page = g.diff(before, after, &all, token.as_deref(), Some(10_000)).await.expect("diff");
            n += page.changes.len();
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => return n,
            }
        }
    };
    let (full_ms, full_kib, n) = measure(samples, full).await;
    assert_eq!(n, changed);
    (json!({"ms": stat_ms, "peak_rss_growth_kib": stat_kib}), json!({"ms": full_ms, "peak_rss_growth_kib": full_kib}))
}

async fn commit_of(g: &Graph) -> String {
    g.commit("main").await.expect("head").commit_id
}

#[tokio::main]
async fn main() {
    let rows = env_usize("OMNIGRAPH_BENCH_ROWS", 1_000_000);
    let changed = env_usize("OMNIGRAPH_BENCH_CHANGED", 1_000);
    let commits = env_usize("OMNIGRAPH_BENCH_COMMITS", 1_000);
    let samples = env_usize("OMNIGRAPH_BENCH_SAMPLES", 3);
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = dir.path().join("g").to_string_lossy().to_string();
    let g = Omnigraph::init(&loc, SCHEMA).await.expect("init");
    let t = Instant::now();
    for start in (0..rows).step_by(200_000) {
        let text = lines(start, 200_000.min(rows - start), 0);
        g.load(text.as_bytes(), LoadMode::Append, &WriteOptions::default()).await.expect("load");
    }
    g.optimize("main", None).await.expect("optimize");
    let load_s = t.elapsed().as_secs_f64();
    let before = commit_of(&g).await;
    // `changed` rows spread over the table, upserted in one commit.
    let step = (rows / changed.max(1)).max(1);
    let upsert: String = (0..changed)
        .map(|k| {
            let i = (k * step) % rows;
            format!("{{\"type\": \"Item\", \"data\": {{\"name\": \"i{i:08}\", \"n\": 1, \"note\": \"row {i}\"}}}}\n")
        })
        .collect();
    g.load(upsert.as_bytes(), LoadMode::Merge, &WriteOptions::default()).await.expect("upsert");
    let after = commit_of(&g).await;
    let (spread_stat, spread_full) = diff_figures(&g, &before, &after, changed, samples).await;
    // The same number of rows, one run of consecutive ids, in one commit.
    g.load(lines(rows / 2, changed.min(rows / 2), 2).as_bytes(), LoadMode::Merge, &WriteOptions::default())
        .await
        .expect("clustered upsert");
    let clustered = commit_of(&g).await;
    let (run_stat, run_full) = diff_figures(&g, &after, &clustered, changed.min(rows / 2), samples).await;
    let all = DiffFilter::default();
    let (scan_ms, scan_kib, scanned) = measure(samples, || raw_full_scan(&loc)).await;
    assert_eq!(scanned, rows);
    let breakdown = breakdown(&g, &loc, &before, &after, samples).await;
    // The feed over `commits` one-row commits.
    let now = FeedRequest {
        branch: None,
        from: FeedFrom::Start(FeedStart::Now),
        filter: all.clone(),
        limit: None,
        wait: None,
    };
    let cursor = g.changes_poll(&now).await.expect("now").cursor.expect("cursor");
    let t = Instant::now();
    for i in 0..commits {
        let src = format!(r#"query q() {{ insert Item {{ name: "c{i}", n: 2 }} }}"#);
        g.mutate(&src, None, Map::new(), &WriteOptions::default()).await.expect("commit");
    }
    let commit_s = t.elapsed().as_secs_f64();
    let poll = || async {
        let mut req = FeedRequest {
            branch: None,
            from: FeedFrom::Cursor(cursor.clone()),
            filter: all.clone(),
            limit: Some(10_000),
            wait: None,
        };
        let mut blocks = 0;
        loop {
            let page = g.changes_poll(&req).await.expect("poll");
            blocks += page.blocks.len();
            match (page.next_page_token, page.caught_up) {
                (Some(t), _) => req.from = FeedFrom::PageToken(t),
                (None, Some(false)) => req.from = FeedFrom::Cursor(page.cursor.expect("cursor")),
                _ => return blocks,
            }
        }
    };
    let (poll_ms, poll_kib, blocks) = measure(1, poll).await;
    assert_eq!(blocks, commits);
    let out = json!({
        "rows": rows,
        "changed": changed,
        "load_s": load_s,
        "spread": {"diff_stat": spread_stat, "diff_full": spread_full},
        "clustered": {"diff_stat": run_stat, "diff_full": run_full},
        "raw_lance_full_scan": {"ms": scan_ms, "peak_rss_growth_kib": scan_kib},
        "full_scan_over_diff": {
            "spread_stat": scan_ms / spread_stat["ms"].as_f64().unwrap_or(f64::NAN),
            "spread_full": scan_ms / spread_full["ms"].as_f64().unwrap_or(f64::NAN),
            "clustered_stat": scan_ms / run_stat["ms"].as_f64().unwrap_or(f64::NAN),
            "clustered_full": scan_ms / run_full["ms"].as_f64().unwrap_or(f64::NAN),
        },
        "diff_breakdown_ms": breakdown,
        "feed": {
            "commits": commits,
            "commit_s": commit_s,
            "poll_ms": poll_ms,
            "poll_ms_per_commit": poll_ms / commits.max(1) as f64,
            "peak_rss_growth_kib": poll_kib,
        },
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}
