//! History benchmark: does the cost of a write, and of opening a snapshot,
//! stay flat as the commit history grows?
//! `cargo build --release && cargo run --release --example bench_history -- --bench`.
//!
//! For each row (in-process or as CLI processes; nothing, an `optimize`, or
//! an `optimize` and a `cleanup --keep 10` after every block), it makes `COMMITS` sequential one-row
//! insert commits on a fresh graph and prints, per block of `BLOCK` commits,
//! the mean write time and the median time of an open + snapshot at the
//! block's end, then `last_over_first` for both. Beside them, the raw-Lance floor
//! measured in the same run: the mean one-row append commit per block on a
//! bare dataset growing the same way (so a ratio holds on a noisy machine).
//! `manifest_bytes` gives, per block, the size of the Lance manifests an open
//! of main reads (Person's and `__manifest`'s): what grows with the history
//! if a table's row lineage stays inline.
//!
//! Each row ends with an interleaved comparison: a copy of the graph as the
//! first block left it and the graph as the last one did take turns (6 rounds
//! of 20 writes and 5 open + snapshot samples each, the order flipping every
//! round), so both are measured in the same minutes and the machine's drift
//! over the row's run cancels out of `interleaved.*_last_over_first`.
//!
//! With `OMNIGRAPH_BENCH_INSTRUCTIONS=1` (and valgrind installed), the CLI
//! rows also count the instructions of 8 `mutate` and 8 `snapshot` processes
//! after the first and the last block: wall time on a shared machine moves by
//! 2× within an hour, instruction counts only with the work.
//!
//! Environment: `OMNIGRAPH_BENCH_COMMITS` (default 1000),
//! `OMNIGRAPH_BENCH_BLOCK` (default 100), `OMNIGRAPH_BENCH_SNAPSHOTS`
//! (open + snapshot samples per block, default 5), `OMNIGRAPH_BENCH_ROWS` (a
//! comma-separated subset of `in_process,in_process_optimize,
//! in_process_cleanup,cli,cli_optimize,cli_cleanup`).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

#[path = "support/cli.rs"]
mod cli;
#[path = "support/fs_tree.rs"]
mod fs_tree;

use std::path::Path;
use std::time::Instant;

use arrow_array::{RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use omnigraph::engine::storage::{StagePlan, TxnIdentity, table};
use omnigraph::{LoadMode, Omnigraph, WriteOptions};
use serde_json::{Map, Value, json};

const SCHEMA: &str = include_str!("social.pg");
const DATA: &str = include_str!("social.jsonl");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn insert_source(i: usize) -> String {
    format!(r#"query q() {{ insert Person {{ name: "h{i}", age: 1 }} }}"#)
}

/// One block's figures (milliseconds).
struct Block {
    write_mean_ms: f64,
    snapshot_ms: f64,
    /// CLI rows with `OMNIGRAPH_BENCH_INSTRUCTIONS=1`, first and last block:
    /// mean instructions of a `mutate` and of a `snapshot` process.
    instructions: Option<(u64, u64)>,
    /// Bytes of the Lance manifests an open of main reads: Person's (at its
    /// pin) and `__manifest`'s, after the block's maintenance.
    manifest_bytes: (u64, u64),
}

/// [`Block::manifest_bytes`] of the graph at `loc`.
async fn manifest_bytes(loc: &str) -> (u64, u64) {
    let root = omnigraph::engine::storage::Root::parse(loc).expect("root");
    let view = omnigraph::engine::manifest::load(&root, "main", None).await.expect("view");
    let person =
        omnigraph::engine::committed::open_pinned(&root, &view.state.tables["node:Person"]).await.expect("open");
    let bytes = |r: omnigraph::Result<u64>| r.expect("manifest size");
    (bytes(table::manifest_bytes(&person).await), bytes(table::manifest_bytes(&view.dataset).await))
}

/// Instruction samples per command at a measured block.
const INSTRUCTION_SAMPLES: usize = 8;

/// Instructions one process executes, counted by callgrind (the same for the
/// same binary, input and state whatever else the machine is doing, so a
/// growth in it is the history's, never the machine's). `None` without valgrind.
fn instructions(bin: &Path, args: &[&str]) -> Option<u64> {
    let out = std::process::Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(bin)
        .args(args)
        .output()
        .ok()?;
    assert!(out.status.success(), "{args:?} under callgrind: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stderr);
    text.lines().find_map(|l| l.split("Collected : ").nth(1)).and_then(|n| n.trim().parse().ok())
}

/// A new graph with the example data, at `dir/g`.
async fn fresh_graph(dir: &Path) -> String {
    let loc = dir.join("g").to_string_lossy().to_string();
    let g = Omnigraph::init(&loc, SCHEMA).await.expect("init");
    g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    drop(g);
    omnigraph::actors::runtime::quiesce(std::time::Duration::from_secs(60)).await;
    loc
}

/// What runs after every block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Maintenance {
    None,
    Optimize,
    /// Optimize, then `cleanup --keep KEEP --confirm`.
    OptimizeCleanup,
}

/// Commits a cleanup row keeps readable.
const KEEP: usize = 10;

impl Maintenance {
    /// The row name's suffix.
    fn of(row: &str) -> Maintenance {
        if row.ends_with("_cleanup") {
            Maintenance::OptimizeCleanup
        } else if row.ends_with("_optimize") {
            Maintenance::Optimize
        } else {
            Maintenance::None
        }
    }
}

/// In-process: one handle makes every write; each block ends with its
/// maintenance, then a fresh open + snapshot (what a new process pays).
async fn in_process(dir: &Path, commits: usize, block: usize, maint: Maintenance) -> (Vec<Block>, Value) {
    let loc = fresh_graph(dir).await;
    let mut g = Omnigraph::open(&loc).await.expect("open");
    let first = dir.join("first").to_string_lossy().to_string();
    let mut out = Vec::new();
    for b in 0..commits / block {
        if b == 1 {
            // The graph as the first block left it, kept for the interleaved comparison.
            drop(g);
            omnigraph::actors::runtime::quiesce(std::time::Duration::from_secs(60)).await;
            fs_tree::copy_dir(Path::new(&loc), Path::new(&first));
            g = Omnigraph::open(&loc).await.expect("open");
        }
        let start = Instant::now();
        for i in 0..block {
            g.mutate(&insert_source(b * block + i), None, Map::new(), &WriteOptions::default()).await.expect("write");
        }
        let write_mean_ms = ms(start) / block as f64;
        if maint != Maintenance::None {
            g.optimize("main", None).await.expect("optimize");
        }
        if maint == Maintenance::OptimizeCleanup {
            g.cleanup(Some(KEEP), None, true).await.expect("cleanup");
        }
        let mut samples = Vec::new();
        for _ in 0..snapshot_samples() {
            let start = Instant::now();
            open_and_snapshot(&loc).await;
            samples.push(ms(start));
        }
        let manifest_bytes = manifest_bytes(&loc).await;
        out.push(Block { write_mean_ms, snapshot_ms: median(samples), instructions: None, manifest_bytes });
    }
    drop(g);
    omnigraph::actors::runtime::quiesce(std::time::Duration::from_secs(60)).await;
    let sides = [
        Side::InProcess(Omnigraph::open(&first).await.expect("open")),
        Side::InProcess(Omnigraph::open(&loc).await.expect("open")),
    ];
    let locs = [first.as_str(), loc.as_str()];
    (out, interleave(&sides, &locs, block, commits).await)
}

/// One side of the interleaved comparison: a handle, or CLI processes.
enum Side {
    InProcess(omnigraph::Graph),
    Cli(std::path::PathBuf),
}

impl Side {
    async fn write(&self, loc: &str, i: usize) {
        match self {
            Side::InProcess(g) => {
                g.mutate(&insert_source(i), None, Map::new(), &WriteOptions::default()).await.expect("write");
            }
            Side::Cli(bin) => run_cli(bin, &["mutate", "-e", &insert_source(i), loc]),
        }
    }

    async fn snapshot(&self, loc: &str) {
        match self {
            Side::InProcess(_) => open_and_snapshot(loc).await,
            Side::Cli(bin) => run_cli(bin, &["snapshot", loc]),
        }
    }
}

/// What a new process pays to read: a fresh open of `loc` and a snapshot of main.
async fn open_and_snapshot(loc: &str) {
    let other = Omnigraph::open(loc).await.expect("open");
    other.snapshot("main").await.expect("snapshot");
}

fn run_cli(bin: &Path, args: &[&str]) {
    let out = std::process::Command::new(bin).args(args).output().expect("spawn omnigraph");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Rounds of the interleaved comparison, and writes per side in each.
const ROUNDS: usize = 6;
const ROUND_WRITES: usize = 20;

/// The graph as the first block left it and as the last one did, measured
/// alternately (the order flips every round) in the same minutes: the
/// machine's drift over the row's run cancels, only the history differs.
async fn interleave(sides: &[Side; 2], locs: &[&str; 2], block: usize, commits: usize) -> Value {
    let mut write_ms = [0.0f64; 2];
    let mut snapshots: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..ROUNDS {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let start = Instant::now();
            for k in 0..ROUND_WRITES {
                sides[side].write(locs[side], 2_000_000 + side * 100_000 + round * 1_000 + k).await;
            }
            write_ms[side] += ms(start);
            for _ in 0..snapshot_samples() {
                let start = Instant::now();
                sides[side].snapshot(locs[side]).await;
                snapshots[side].push(ms(start));
            }
        }
    }
    let writes = (ROUNDS * ROUND_WRITES) as f64;
    let (w0, w1) = (write_ms[0] / writes, write_ms[1] / writes);
    let [s0, s1] = snapshots.map(median);
    json!({
        "commits_before": [block, commits], "rounds": ROUNDS, "writes_per_round": ROUND_WRITES,
        "write_mean_ms": [round(w0), round(w1)], "write_last_over_first": round(w1 / w0),
        "snapshot_ms": [round(s0), round(s1)], "snapshot_last_over_first": round(s1 / s0),
    })
}

/// As CLI processes: one `omnigraph mutate` process per write, one
/// `omnigraph snapshot` process per block (after its maintenance processes).
fn cli(bin: &Path, loc: &str, commits: usize, block: usize, maint: Maintenance) -> (Vec<Block>, Value) {
    let run = |args: &[&str]| run_cli(bin, args);
    let first = Path::new(loc).with_file_name("first").to_string_lossy().to_string();
    let mut out = Vec::new();
    for b in 0..commits / block {
        if b == 1 {
            fs_tree::copy_dir(Path::new(loc), Path::new(&first));
        }
        let start = Instant::now();
        for i in 0..block {
            run(&["mutate", "-e", &insert_source(b * block + i), loc]);
        }
        let write_mean_ms = ms(start) / block as f64;
        if maint != Maintenance::None {
            run(&["optimize", loc]);
        }
        if maint == Maintenance::OptimizeCleanup {
            run(&["cleanup", "--keep", &KEEP.to_string(), "--confirm", loc]);
        }
        let samples = (0..snapshot_samples())
            .map(|_| {
                let start = Instant::now();
                run(&["snapshot", loc]);
                ms(start)
            })
            .collect();
        let measured = count_instructions() && (b == 0 || b + 1 == commits / block);
        let instructions = measured.then(|| block_instructions(bin, loc, b)).flatten();
        let manifest_bytes = tokio::runtime::Handle::current().block_on(manifest_bytes(loc));
        out.push(Block { write_mean_ms, snapshot_ms: median(samples), instructions, manifest_bytes });
    }
    let sides = [Side::Cli(bin.to_path_buf()), Side::Cli(bin.to_path_buf())];
    let interleaved = tokio::runtime::Handle::current().block_on(interleave(&sides, &[&first, loc], block, commits));
    (out, interleaved)
}

/// `OMNIGRAPH_BENCH_INSTRUCTIONS=1`: count instructions in the CLI rows.
fn count_instructions() -> bool {
    std::env::var("OMNIGRAPH_BENCH_INSTRUCTIONS").is_ok_and(|v| v == "1")
}

/// Mean instructions of [`INSTRUCTION_SAMPLES`] `mutate` processes (each one
/// more commit, so every in-write compaction of the cycle is in the mean)
/// and of as many `snapshot` processes.
fn block_instructions(bin: &Path, loc: &str, b: usize) -> Option<(u64, u64)> {
    let mut writes = 0;
    for i in 0..INSTRUCTION_SAMPLES {
        writes += instructions(bin, &["mutate", "-e", &insert_source(1_000_000 + b * 100 + i), loc])?;
    }
    let mut snapshots = 0;
    for _ in 0..INSTRUCTION_SAMPLES {
        snapshots += instructions(bin, &["snapshot", loc])?;
    }
    let n = INSTRUCTION_SAMPLES as u64;
    Some((writes / n, snapshots / n))
}

/// The raw-Lance floor: one-row append commits (staged, committed exactly)
/// on a bare dataset, mean per block.
async fn raw_lance_floor(dir: &Path, commits: usize, block: usize) -> Vec<f64> {
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
    let uri = dir.join("raw.lance").to_string_lossy().to_string();
    let batch = |id: String| {
        RecordBatch::try_new(schema.clone(), vec![std::sync::Arc::new(StringArray::from(vec![id]))]).expect("batch")
    };
    table::create_table(&uri, batch("seed".into())).await.expect("create");
    let mut out = Vec::new();
    for b in 0..commits / block {
        let start = Instant::now();
        for i in 0..block {
            let ds = table::open_table(&uri, None, None).await.expect("open");
            let identity = TxnIdentity::mint(ds.version().version);
            let plan = StagePlan::Append { batches: vec![batch(format!("r{b}-{i}"))] };
            let staged = table::stage(ds, plan, &identity.uuid).await.expect("stage").expect("staged");
            table::commit_exact(staged).await.expect("commit");
        }
        out.push(ms(start) / block as f64);
    }
    out
}

/// Open + snapshot samples per block (`OMNIGRAPH_BENCH_SNAPSHOTS`, default
/// 5): one sample on a busy machine is mostly noise.
fn snapshot_samples() -> usize {
    env_usize("OMNIGRAPH_BENCH_SNAPSHOTS", 5).max(1)
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn ms(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn row_json(row: &str, (blocks, interleaved): &(Vec<Block>, Value), block: usize, floor: &[f64]) -> Value {
    let ratio = |f: &dyn Fn(&Block) -> f64| match (blocks.first(), blocks.last()) {
        (Some(a), Some(z)) if f(a) > 0.0 => round(f(z) / f(a)),
        _ => 0.0,
    };
    json!({
        "figure": "history_cost_per_block", "row": row, "block_commits": block,
        "write_mean_ms": blocks.iter().map(|b| round(b.write_mean_ms)).collect::<Vec<_>>(),
        "snapshot_ms": blocks.iter().map(|b| round(b.snapshot_ms)).collect::<Vec<_>>(),
        "write_last_over_first": ratio(&|b| b.write_mean_ms),
        "snapshot_last_over_first": ratio(&|b| b.snapshot_ms),
        "write_over_floor": blocks.iter().zip(floor).map(|(b, f)| round(b.write_mean_ms / f)).collect::<Vec<_>>(),
        "instructions": instruction_json(blocks),
        "manifest_bytes": {
            "person": blocks.iter().map(|b| b.manifest_bytes.0).collect::<Vec<_>>(),
            "__manifest": blocks.iter().map(|b| b.manifest_bytes.1).collect::<Vec<_>>(),
        },
        "interleaved": interleaved,
    })
}

/// First and last block's instruction means and their ratios (`null` when
/// not counted).
fn instruction_json(blocks: &[Block]) -> Value {
    let (Some((w0, s0)), Some((w1, s1))) =
        (blocks.first().and_then(|b| b.instructions), blocks.last().and_then(|b| b.instructions))
    else {
        return Value::Null;
    };
    json!({
        "mutate_first": w0, "mutate_last": w1, "mutate_last_over_first": round(w1 as f64 / w0 as f64),
        "snapshot_first": s0, "snapshot_last": s1, "snapshot_last_over_first": round(s1 as f64 / s0 as f64),
    })
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("history benchmark: run with `cargo run --release --example bench_history -- --bench`");
        return;
    }
    let commits = env_usize("OMNIGRAPH_BENCH_COMMITS", 1000);
    let block = env_usize("OMNIGRAPH_BENCH_BLOCK", 100).max(1);
    let rows = std::env::var("OMNIGRAPH_BENCH_ROWS")
        .unwrap_or_else(|_| "in_process,in_process_optimize,in_process_cleanup,cli,cli_optimize,cli_cleanup".into());
    // Unoptimised Lance futures need more than tokio's 2 MiB worker stacks.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_stack_size(16 * 1024 * 1024)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        let floor = raw_lance_floor(tmp.path(), commits, block).await;
        println!(
            "{}",
            json!({"figure": "raw_lance_one_row_append_ms_per_block", "ms": floor.iter().map(|f| round(*f)).collect::<Vec<_>>()})
        );
        for row in rows.split(',').map(str::trim) {
            let dir = tempfile::tempdir().expect("tempdir");
            let maint = Maintenance::of(row);
            let measured = match row {
                "in_process" | "in_process_optimize" | "in_process_cleanup" => {
                    in_process(dir.path(), commits, block, maint).await
                }
                "cli" | "cli_optimize" | "cli_cleanup" => {
                    let loc = fresh_graph(dir.path()).await;
                    let bin = cli::cli_binary();
                    tokio::task::spawn_blocking(move || cli(&bin, &loc, commits, block, maint))
                        .await
                        .expect("cli row")
                }
                other => panic!("unknown row `{other}`"),
            };
            println!("{}", row_json(row, &measured, block, &floor));
        }
    });
}
