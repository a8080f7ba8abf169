//! Schema apply at scale: `cargo run --release --example bench_schema`
//! (`OMNIGRAPH_BENCH_ROWS`, default 1,000,000 Person rows).
//!
//! Prints one JSON object: the wall time and peak RSS (reset before each) of
//! two applies on that table, one adding a nullable property (metadata only)
//! and one adding a required property with a default (every row rewritten),
//! the latter also on a branch first (the table forked, then rewritten
//! there, main untouched), and the same rewrite (a second required
//! property) run by the `omnigraph` CLI beside this example as a process of
//! its own, on a branch and on main, whose peak RSS is the apply's alone;
//! beside the raw-Lance floor of the first (Lance's own all-null
//! `add_columns` on a bare copy of the table), and whether the graph answers
//! with the new shape afterwards. Last, a merge across schema changes: a
//! branch made before all that added a nullable `tag` and set it on
//! 100,000 rows (`OMNIGRAPH_BENCH_TAGGED`), merged into main (which applied
//! its own properties meanwhile): wall time and peak RSS of the one commit
//! that lands main's schema change and those rows.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::sync::Arc;
use std::time::Instant;

use lance::dataset::NewColumnTransform;
use omnigraph::engine::storage::table;
use omnigraph::{Graph, LoadMode, Omnigraph, ReadTarget, WriteOptions};
use serde_json::{Map, json};

const SCHEMA: &str = include_str!("social.pg");

#[path = "support/rss.rs"]
mod rss;
use rss::{peak_rss_kib, reset_peak_rss};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Run the `omnigraph` CLI built beside this example with `args` until it
/// exits: (seconds, its peak RSS in MiB), `None` if there is no CLI or it
/// failed. The peak is the child's own `VmHWM`, read every 20 ms while it
/// runs (a child's `ru_maxrss` counts the parent's pages it was forked
/// with, so `wait4` would report this process's peak).
fn cli_peak(args: &[&str]) -> Option<(f64, u64)> {
    let exe = std::env::current_exe().ok()?.parent()?.parent()?.join("omnigraph");
    let started = Instant::now();
    let mut child = std::process::Command::new(exe).args(args).stdout(std::process::Stdio::null()).spawn().ok()?;
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    loop {
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        });
        peak_kib = peak_kib.max(hwm.unwrap_or(0));
        if let Some(status) = child.try_wait().ok()? {
            return status.success().then(|| (started.elapsed().as_secs_f64(), peak_kib / 1024));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Apply `source` on `branch`, timing it: (seconds, peak RSS MiB, steps).
async fn timed_apply(g: &Graph, branch: &str, source: &str) -> (f64, u64, serde_json::Value) {
    reset_peak_rss();
    let started = Instant::now();
    let r = g.schema_apply_on(branch, source, false, None).await.expect("apply");
    let secs = started.elapsed().as_secs_f64();
    assert!(r.applied, "the apply changed nothing");
    (secs, peak_rss_kib() / 1024, json!(r.steps.iter().map(|s| &s.detail).collect::<Vec<_>>()))
}

#[tokio::main]
async fn main() {
    let rows = env_usize("OMNIGRAPH_BENCH_ROWS", 1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let g = Omnigraph::init(&dir.path().join("g").to_string_lossy(), SCHEMA).await.expect("init");
    let lines: String = (0..rows)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n", i % 100))
        .collect();
    g.load(lines.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    drop(lines);

    // The branch the last figure merges: a property of its own, set on
    // every tenth row (its rows' other values unchanged).
    let tagged_rows = env_usize("OMNIGRAPH_BENCH_TAGGED", 100_000).min(rows);
    g.branch_create("tagged", "main").await.expect("branch");
    let tagged = SCHEMA.replace("    age: I32?\n", "    age: I32?\n    tag: String?\n");
    g.schema_apply_on("tagged", &tagged, false, None).await.expect("apply tag");
    let step = (rows / tagged_rows.max(1)).max(1);
    let tags: String = (0..tagged_rows)
        .map(|i| i * step)
        .map(|n| {
            format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{n}\",\"age\":{},\"tag\":\"t{n}\"}}}}\n", n % 100)
        })
        .collect();
    let on_tagged = WriteOptions { branch: "tagged".into(), ..WriteOptions::default() };
    g.load(tags.as_bytes(), LoadMode::Merge, &on_tagged).await.expect("tag rows");
    drop(tags);

    // The floor: Lance's own metadata-only all-null column on a bare copy.
    let snap = g.snapshot("main").await.expect("snapshot");
    let person = snap.tables.iter().find(|t| t.table_key == "node:Person").expect("Person");
    let ds =
        table::open_table(&g.root().child_uri(&person.table_path), None, Some(person.version)).await.expect("open");
    let batches = table::scan(&ds, None).await.expect("scan");
    let all = arrow::compute::concat_batches(&batches[0].schema(), &batches).expect("concat");
    drop(batches);
    let bare_uri = dir.path().join("bare.lance").to_string_lossy().to_string();
    let bare = table::create_table(&bare_uri, all).await.expect("bare");
    let mut bare = Arc::unwrap_or_clone(bare);
    let field = arrow_schema::Field::new("nickname", arrow_schema::DataType::Utf8, true);
    let floor = Instant::now();
    bare.add_columns(NewColumnTransform::AllNulls(Arc::new(arrow_schema::Schema::new(vec![field]))), None, None)
        .await
        .expect("floor");
    let floor_secs = floor.elapsed().as_secs_f64();

    let q = "query q() { match { $p: Person $p.level = 1 } return { count($p) as n } }";
    let counted = |target: ReadTarget| {
        let g = &g;
        async move {
            let out = g.query_json(q, None, Map::new(), &target).await.expect("query");
            out["rows"][0]["n"].as_u64().unwrap_or(0) as usize
        }
    };
    g.branch_create("side", "main").await.expect("branch");
    let levelled = SCHEMA.replace("    age: I32?\n", "    age: I32?\n    level: I32 @default(1)\n");
    let (branch_secs, branch_peak, branch_steps) = timed_apply(&g, "side", &levelled).await;
    let on_branch = counted(ReadTarget::Branch("side".into())).await;

    let nullable = SCHEMA.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    let (nullable_secs, nullable_peak, nullable_steps) = timed_apply(&g, "main", &nullable).await;
    let defaulted = nullable.replace("    nickname: String?\n", "    nickname: String?\n    level: I32 @default(1)\n");
    let (default_secs, default_peak, default_steps) = timed_apply(&g, "main", &defaulted).await;
    let on_main = counted(ReadTarget::default()).await;

    // The same kind of rewrite as processes of their own (the graph's
    // handle closed first): a second required property with a default.
    let loc = g.root().uri().to_string();
    g.branch_create("cli", "main").await.expect("branch");
    drop(g);
    let ranked = dir.path().join("ranked.pg");
    let ranked_source =
        defaulted.replace("    level: I32 @default(1)\n", "    level: I32 @default(1)\n    rank: I32 @default(2)\n");
    std::fs::write(&ranked, ranked_source).expect("schema file");
    let ranked = ranked.to_string_lossy().to_string();
    let cli_branch = cli_peak(&["schema", "apply", "--branch", "cli", "--schema", &ranked, &loc]);
    let cli_main = cli_peak(&["schema", "apply", "--schema", &ranked, &loc]);
    let figure = |m: Option<(f64, u64)>| m.map(|(secs, peak)| json!({"secs": secs, "peak_rss_mib": peak}));

    // The merge across schemas, in a fresh handle.
    let g = Omnigraph::open(&loc).await.expect("reopen");
    reset_peak_rss();
    let started = Instant::now();
    let merged = g.branch_merge("tagged", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    let merge_secs = started.elapsed().as_secs_f64();
    let merge_peak = peak_rss_kib() / 1024;
    let person = merged.report.tables.iter().find(|t| t.table_key == "node:Person");
    let merge_correct = person.is_some_and(|t| t.updated == tagged_rows && t.inserted == 0 && t.deleted == 0)
        && merged.report.schema_steps.len() == 1;
    println!(
        "{}",
        json!({
            "bench": "schema_apply", "rows": rows,
            "nullable_add": {"secs": nullable_secs, "peak_rss_mib": nullable_peak, "steps": nullable_steps},
            "required_add_with_default": {"secs": default_secs, "peak_rss_mib": default_peak, "steps": default_steps},
            "required_add_with_default_on_a_branch": {"secs": branch_secs, "peak_rss_mib": branch_peak, "steps": branch_steps},
            "cli_process_required_add_on_a_branch": figure(cli_branch),
            "cli_process_required_add_on_main": figure(cli_main),
            "merge_across_schemas": {
                "secs": merge_secs, "peak_rss_mib": merge_peak, "tagged_rows": tagged_rows,
                "outcome": merged.report.outcome, "correct": merge_correct,
            },
            "raw_lance_all_null_add_columns_floor_secs": floor_secs,
            "nullable_ratio_to_floor": nullable_secs / floor_secs,
            "correct": on_main == rows && on_branch == rows,
        })
    );
}
