//! Write benchmark: every write path beside its raw-Lance floor, measured in
//! the same run so the ratios hold on a noisy machine.
//! `cargo build --release && cargo run --release --example bench_writes -- --bench`.
//!
//! Prints one JSON object per figure:
//! - `one_row_mutation`: p50/p99 latency of a one-row insert `mutate`, in-process
//!   and as a whole CLI process (with the process's peak RSS), beside the
//!   raw-Lance one-row merge-insert commit on a bare dataset, and the share of
//!   `link/hot-symbols.txt` the CLI binary links;
//! - `open_snapshot`: in-process open + snapshot, and the CLI `snapshot` process
//!   (with its peak RSS);
//! - `load`: entities/s and peak RSS of `load` (overwrite, append, merge) of N
//!   nodes + N edges for each N in-process, streamed from a line generator
//!   (the peak includes what the benchmark process already holds, given as
//!   `rss_before_mib`), beside one
//!   raw Lance write of the same rows; then the same loads as CLI processes
//!   reading files (`cli_process`: time and each process's own peak RSS);
//! - `concurrent_writers`: aggregate one-row writes/s with 1, 8 and 32 writer
//!   tasks on one branch and on as many branches, and how many publishes the
//!   one-branch writes took (a busy branch commits its writes in groups);
//! - `durability`: the one-row mutate (in-process and CLI) and 32 writers on
//!   one branch with `--durability fsync` and with `none`, each beside the
//!   raw-Lance one-row commit on a store of the same setting;
//! - `scale` (only when asked for: `OMNIGRAPH_BENCH_ONLY=scale`): for each N of
//!   `OMNIGRAPH_BENCH_SCALE_SIZES` (default `10000,1000000,10000000`), a graph of
//!   N persons and N `Knows` edges with its indexes built, then p50/p99 of a
//!   one-row insert, a key update, a key delete and a 1,000-row merge load
//!   (half new, half existing keys), in-process and as CLI processes (with
//!   their peak RSS), beside raw Lance on a bare N-row dataset (a one-row
//!   append, and a one-row keyed upsert); then each figure's p50 at the
//!   largest N over its p50 at the smallest (`scale_ratios`).
//!
//! Environment: `OMNIGRAPH_BENCH_LOAD_SIZES` (default `150000,1000000`),
//! `OMNIGRAPH_BENCH_MUTATIONS` (default 100), `OMNIGRAPH_BENCH_CLI_RUNS`
//! (default 30), `OMNIGRAPH_BENCH_ONLY` (one of
//! `mutation,open,load,concurrent,durability,scale`).

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

#[path = "support/cli.rs"]
mod cli;

#[path = "support/rss.rs"]
mod rss;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::{Int32Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use omnigraph::engine::lang::catalog::indexes::{IndexKind, IndexSpec};
use omnigraph::engine::storage::index_fold::FoldDepth;
use omnigraph::engine::storage::{MergeMode, TxnIdentity, table};
use omnigraph::{Graph, LoadMode, Omnigraph, OpenMode, WriteOptions};
use serde_json::{Map, Value, json};

/// The CLI's allocator, so that a load's figures here are a CLI load's.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const SCHEMA: &str = include_str!("social.pg");
const DATA: &str = include_str!("social.jsonl");

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn wanted(figure: &str) -> bool {
    std::env::var("OMNIGRAPH_BENCH_ONLY").map_or(true, |only| only == figure)
}

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

fn insert_source(name: &str) -> String {
    format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} }}"#)
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// `{p50_ms, p99_ms, n}` of `samples`.
fn percentiles(mut samples: Vec<Duration>) -> Value {
    samples.sort();
    let at = |q: f64| samples.get(((samples.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or_default();
    json!({ "p50_ms": ms(at(0.5)), "p99_ms": ms(at(0.99)), "n": samples.len() })
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `runs` CLI processes made by `args(i)`: latency percentiles plus the
/// median and largest peak RSS of one process.
fn cli_figures<F: Fn(usize) -> Vec<String>>(runs: usize, args: F) -> Value {
    let (mut times, mut rss): (Vec<Duration>, Vec<u64>) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs {
        let args = args(i);
        let run = cli::run_measured(&args.iter().map(String::as_str).collect::<Vec<_>>());
        times.push(run.elapsed);
        rss.push(run.peak_rss_kib);
    }
    rss.sort_unstable();
    let mib = |kib: u64| round(kib as f64 / 1024.0);
    let mut out = percentiles(times);
    out["peak_rss_mib_p50"] = json!(mib(rss.get(rss.len() / 2).copied().unwrap_or(0)));
    out["peak_rss_mib_max"] = json!(mib(rss.last().copied().unwrap_or(0)));
    out
}

async fn example_graph(loc: &str) -> Graph {
    let g = Omnigraph::init(loc, SCHEMA).await.expect("init");
    g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    g
}

/// One-row merge-insert commits on a bare dataset: the least a graph write
/// does on its table before publishing. Returns each commit's latency.
async fn raw_one_row_commits(dir: &Path, n: usize) -> Vec<Duration> {
    let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false)]));
    let uri = dir.join("raw-commits.lance").to_string_lossy().to_string();
    let batch = |id: String| RecordBatch::try_new(schema.clone(), vec![Arc::new(StringArray::from(vec![id]))]);
    table::create_table(&uri, batch("seed".into()).expect("batch")).await.expect("create");
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        let ds = table::open_table(&uri, None, None).await.expect("open");
        let identity = TxnIdentity::mint(ds.version().version);
        let rows = vec![batch(format!("r{i}")).expect("batch")];
        let staged = table::stage_merge_insert(ds, rows, MergeMode::Upsert, &identity.uuid).await.expect("stage");
        table::commit_exact(staged).await.expect("commit");
        out.push(start.elapsed());
    }
    out
}

/// The share of `link/hot-symbols.txt` the CLI binary defines (build.rs
/// orders those functions first; a stale list loses the CLI's locality).
/// `None` when `nm` cannot read the binary.
fn hot_symbols_linked() -> Option<f64> {
    let list = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/link/hot-symbols.txt")).ok()?;
    let out = std::process::Command::new("nm").arg("--defined-only").arg(cli::cli_binary()).output().ok()?;
    let nm = String::from_utf8_lossy(&out.stdout);
    let defined: std::collections::HashSet<&str> = nm.lines().filter_map(|l| l.split_whitespace().nth(2)).collect();
    let wanted: Vec<&str> = list.lines().filter(|l| !l.is_empty()).collect();
    let linked = wanted.iter().filter(|s| defined.contains(*s)).count();
    (out.status.success() && !wanted.is_empty()).then(|| round(linked as f64 / wanted.len() as f64))
}

/// `n` one-row inserts on main, one after the other; each one's latency.
async fn one_row_mutates(g: &Graph, n: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let start = Instant::now();
        g.mutate(&insert_source(&format!("m{i}")), None, Map::new(), &on("main")).await.expect("mutate");
        out.push(start.elapsed());
    }
    out
}

async fn mutation_figures(dir: &Path) {
    let n = env_usize("OMNIGRAPH_BENCH_MUTATIONS", 100);
    let floor = raw_one_row_commits(dir, n).await;
    let loc = dir.join("mutations").to_string_lossy().to_string();
    let g = example_graph(&loc).await;
    let in_process = one_row_mutates(&g, n).await;
    drop(g);
    omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    let cli = cli_figures(env_usize("OMNIGRAPH_BENCH_CLI_RUNS", 30), |i| {
        vec!["mutate".into(), "-e".into(), insert_source(&format!("c{i}")), loc.clone()]
    });
    let ratio = |a: &Value, b: &Value| round(a["p50_ms"].as_f64().unwrap_or(0.0) / b["p50_ms"].as_f64().unwrap_or(1.0));
    let (floor, in_process) = (percentiles(floor), percentiles(in_process));
    println!(
        "{}",
        json!({
            "figure": "one_row_mutation",
            "in_process": in_process, "cli_process": cli, "raw_lance_one_row_commit": floor,
            "in_process_over_floor_p50": ratio(&in_process, &floor),
            "hot_symbols_linked": hot_symbols_linked(),
        })
    );
}

async fn open_figures(dir: &Path) {
    let loc = dir.join("open").to_string_lossy().to_string();
    drop(example_graph(&loc).await);
    omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    let runs = env_usize("OMNIGRAPH_BENCH_CLI_RUNS", 30);
    let mut in_process = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        let g = Omnigraph::open_with(&loc, OpenMode::ReadOnly).await.expect("open");
        g.snapshot("main").await.expect("snapshot");
        in_process.push(start.elapsed());
        drop(g);
        omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    }
    let cli = cli_figures(runs, |_| vec!["snapshot".into(), "--json".into(), loc.clone()]);
    let floor: Vec<Duration> = {
        let uri = format!("{loc}/__manifest");
        let mut v = Vec::with_capacity(runs);
        for _ in 0..runs {
            let start = Instant::now();
            let ds = table::open_table(&uri, None, None).await.expect("open manifest");
            table::scan(&ds, None).await.expect("scan manifest");
            v.push(start.elapsed());
        }
        v
    };
    println!(
        "{}",
        json!({
            "figure": "open_snapshot",
            "in_process_open_read_only_and_snapshot": percentiles(in_process),
            "cli_snapshot_process": cli,
            "raw_lance_open_and_scan_of_the_manifest": percentiles(floor),
        })
    );
}

/// JSONL of persons `lo..hi` and as many `Knows` edges among them (a ring),
/// generated line by line as it is read: a load's peak RSS is then its own,
/// not that of a whole input file held in memory (a CLI load streams its file).
struct LoadLines {
    lo: usize,
    hi: usize,
    age: usize,
    /// The next line: persons first, then edges.
    next: usize,
    line: Vec<u8>,
    at: usize,
}

fn load_lines(lo: usize, hi: usize, age: usize) -> LoadLines {
    LoadLines { lo, hi, age, next: 0, line: Vec::new(), at: 0 }
}

impl std::io::Read for LoadLines {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.at == self.line.len() {
            let (n, i) = (self.hi - self.lo, self.lo + self.next % (self.hi - self.lo).max(1));
            self.line = match self.next {
                k if k < n => format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\",\"age\":{}}}}}\n", self.age),
                k if k < 2 * n => {
                    let j = if i + 1 == self.hi { self.lo } else { i + 1 };
                    format!("{{\"edge\":\"Knows\",\"from\":\"p{i}\",\"to\":\"p{j}\"}}\n")
                }
                _ => return Ok(0),
            }
            .into_bytes();
            self.next += 1;
            self.at = 0;
        }
        let k = buf.len().min(self.line.len() - self.at);
        buf[..k].copy_from_slice(&self.line[self.at..self.at + k]);
        self.at += k;
        Ok(k)
    }
}

/// One raw Lance write of `n` node rows and `n` edge rows (fresh datasets).
async fn raw_load_floor(dir: &Path, n: usize) -> Duration {
    let nodes = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, true),
    ]));
    let edges = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("src", DataType::Utf8, false),
        Field::new("dst", DataType::Utf8, false),
    ]));
    let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
    let node_batch = RecordBatch::try_new(
        nodes,
        vec![
            Arc::new(StringArray::from(names.clone())),
            Arc::new(StringArray::from(names.clone())),
            Arc::new(Int32Array::from(vec![1; n])),
        ],
    )
    .expect("nodes");
    let dst: Vec<String> = (0..n).map(|i| format!("p{}", (i + 1) % n)).collect();
    let ids: Vec<String> = (0..n).map(|i| format!("e{i}")).collect();
    let edge_batch = RecordBatch::try_new(
        edges,
        vec![Arc::new(StringArray::from(ids)), Arc::new(StringArray::from(names)), Arc::new(StringArray::from(dst))],
    )
    .expect("edges");
    let start = Instant::now();
    let tag = ulid::Ulid::new();
    table::create_table(&dir.join(format!("raw-nodes-{tag}.lance")).to_string_lossy(), node_batch)
        .await
        .expect("raw nodes");
    table::create_table(&dir.join(format!("raw-edges-{tag}.lance")).to_string_lossy(), edge_batch)
        .await
        .expect("raw edges");
    start.elapsed()
}

async fn timed_load(g: &Graph, lines: LoadLines, mode: LoadMode, entities: usize) -> Value {
    rss::reset_peak_rss();
    let before = rss::rss_kib();
    let start = Instant::now();
    g.load(std::io::BufReader::new(lines), mode, &WriteOptions::default()).await.expect("load");
    let took = start.elapsed();
    json!({
        "seconds": round(took.as_secs_f64()),
        "entities_per_s": (entities as f64 / took.as_secs_f64()).round(),
        "peak_rss_mib": rss::peak_rss_kib() / 1024,
        "rss_before_mib": before / 1024,
    })
}

/// The same three loads as whole CLI processes reading files: each one's
/// time and its own peak RSS (a process of its own, so nothing the benchmark
/// holds counts).
fn cli_loads(dir: &Path, n: usize) -> Value {
    let loc = dir.join(format!("cli-load-{n}")).to_string_lossy().to_string();
    let schema = dir.join("social.pg");
    std::fs::write(&schema, SCHEMA).expect("schema file");
    cli::run_measured(&["init", "--schema", &schema.to_string_lossy(), &loc]);
    let mut out = Map::new();
    for (mode, lines) in
        [("overwrite", load_lines(0, n, 1)), ("append", load_lines(n, 2 * n, 1)), ("merge", load_lines(0, n, 2))]
    {
        let file = dir.join(format!("load-{n}-{mode}.jsonl"));
        let mut writer = std::io::BufWriter::new(std::fs::File::create(&file).expect("input file"));
        std::io::copy(&mut { lines }, &mut writer).expect("write input");
        drop(writer);
        let run = cli::run_measured(&["load", "--quiet", "--data", &file.to_string_lossy(), "--mode", mode, &loc]);
        let _ = std::fs::remove_file(&file);
        let took = run.elapsed.as_secs_f64();
        out.insert(
            mode.into(),
            json!({
                "seconds": round(took),
                "entities_per_s": (2.0 * n as f64 / took).round(),
                "peak_rss_mib": run.peak_rss_kib / 1024,
            }),
        );
    }
    Value::Object(out)
}

async fn load_figures(dir: &Path) {
    let sizes = std::env::var("OMNIGRAPH_BENCH_LOAD_SIZES").unwrap_or_else(|_| "150000,1000000".into());
    for n in sizes.split(',').filter_map(|s| s.trim().parse::<usize>().ok()) {
        let floor = raw_load_floor(dir, n).await;
        let loc = dir.join(format!("load-{n}")).to_string_lossy().to_string();
        let g = Omnigraph::init(&loc, SCHEMA).await.expect("init");
        let overwrite = timed_load(&g, load_lines(0, n, 1), LoadMode::Overwrite, 2 * n).await;
        let append = timed_load(&g, load_lines(n, 2 * n, 1), LoadMode::Append, 2 * n).await;
        let merge = timed_load(&g, load_lines(0, n, 2), LoadMode::Merge, 2 * n).await;
        let raw_s = floor.as_secs_f64();
        let over_floor = |v: &Value| round(v["seconds"].as_f64().unwrap_or(0.0) / raw_s);
        println!(
            "{}",
            json!({
                "figure": "load", "nodes": n, "edges": n,
                "overwrite": overwrite, "append": append, "merge": merge,
                "raw_lance_write_seconds": round(raw_s),
                "overwrite_over_floor": over_floor(&overwrite), "append_over_floor": over_floor(&append),
                "merge_over_floor": over_floor(&merge),
                "cli_process": cli_loads(dir, n),
            })
        );
        drop(g);
        omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    }
}

/// `tasks` writers, writer `i` on `branches[i % len]`, `writes` each; writes/s.
async fn throughput(g: &Graph, branches: &[String], tasks: usize, writes: usize, tag: &str) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let (g, branch, tag) = (g.clone(), branches[i % branches.len()].clone(), tag.to_string());
            tokio::spawn(async move {
                for w in 0..writes {
                    g.mutate(&insert_source(&format!("{tag}-{i}-{w}")), None, Map::new(), &on(&branch))
                        .await
                        .expect("insert");
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("writer");
    }
    (tasks * writes) as f64 / start.elapsed().as_secs_f64()
}

/// How many `__manifest` publishes main's newest `n` commits took (the
/// members of a group commit share one).
async fn publishes(g: &Graph, n: usize) -> usize {
    let commits = g.commits("main", Some(n)).await.expect("commits");
    commits.iter().map(|c| c.manifest_version).collect::<std::collections::BTreeSet<_>>().len()
}

/// Fresh branches `{tag}-0..n`, each forked for Person by one warm-up write.
async fn fresh_branches(g: &Graph, tag: &str, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let name = format!("{tag}-{i}");
        g.branch_create(&name, "main").await.expect("branch");
        g.mutate(&insert_source(&format!("{name}-warm")), None, Map::new(), &on(&name)).await.expect("warm");
        out.push(name);
    }
    out
}

async fn concurrency_figures(dir: &Path) {
    let floor = raw_one_row_commits(&dir.join("floor-concurrency"), 48).await;
    let floor_per_s = floor.len() as f64 / floor.iter().sum::<Duration>().as_secs_f64();
    for tasks in [1usize, 8, 32] {
        // About 320 commits per configuration (at least 2 per writer): long
        // enough that the first moment, when every writer races alone
        // before the branch is busy, does not set the figure.
        let writes = (320 / tasks).max(2);
        let loc = dir.join(format!("concurrent-{tasks}")).to_string_lossy().to_string();
        let g = example_graph(&loc).await;
        let one = throughput(&g, &["main".to_string()], tasks, writes, "one").await;
        let publishes = publishes(&g, tasks * writes).await;
        let many = fresh_branches(&g, "w", tasks).await;
        let separate = throughput(&g, &many, tasks, writes, "sep").await;
        println!(
            "{}",
            json!({
                "figure": "concurrent_writers", "writer_tasks": tasks, "writes_per_task": writes,
                "writes_per_s_on_one_branch": round(one), "writes_per_s_on_separate_branches": round(separate),
                "publishes_on_one_branch": publishes,
                "raw_lance_one_row_commits_per_s": round(floor_per_s),
                "one_branch_over_floor": round(one / floor_per_s), "separate_over_floor": round(separate / floor_per_s),
            })
        );
        drop(g);
        omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    }
}

/// One durability setting's figures on `loc` (created here): the raw-Lance
/// one-row commit floor, one-row mutates in-process and as CLI processes,
/// and 32 writers on one branch.
async fn durability_case(dir: &Path, durability: omnigraph::Durability) -> Value {
    use omnigraph::engine::storage::durability as setting;
    let home = dir.join(format!("durability-{durability}"));
    std::fs::create_dir_all(home.join("floor")).expect("mkdir");
    let home = std::fs::canonicalize(&home).expect("canonical");
    setting::register_root(&home.to_string_lossy(), durability);
    let floor = raw_one_row_commits(&home.join("floor"), 48).await;
    // Commits per second as the concurrency figure counts them (n over the total).
    let floor_per_s = floor.len() as f64 / floor.iter().sum::<Duration>().as_secs_f64();
    let floor = percentiles(floor);
    let n = env_usize("OMNIGRAPH_BENCH_MUTATIONS", 100);
    let loc = home.join("g").to_string_lossy().to_string();
    let g = example_graph(&loc).await;
    let in_process = one_row_mutates(&g, n).await;
    let writers = throughput(&g, &["main".to_string()], 32, 20, "d").await;
    drop(g);
    omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
    let cli = cli_figures(env_usize("OMNIGRAPH_BENCH_CLI_RUNS", 30), |i| {
        let flag = ["--durability".to_string(), durability.to_string()];
        flag.into_iter().chain(["mutate".into(), "-e".into(), insert_source(&format!("c{i}")), loc.clone()]).collect()
    });
    json!({
        "raw_lance_one_row_commit": floor, "in_process": percentiles(in_process), "cli_process": cli,
        "writes_per_s_32_writers_one_branch": round(writers),
        "raw_lance_one_row_commits_per_s": round(floor_per_s),
        "writers_over_floor": round(writers / floor_per_s),
    })
}

/// Durability's price: the same figures with `fsync` and with `none`.
async fn durability_figures(dir: &Path) {
    let fsync = durability_case(dir, omnigraph::Durability::Fsync).await;
    let none = durability_case(dir, omnigraph::Durability::None).await;
    let p50 = |v: &Value, at: &str| v[at]["p50_ms"].as_f64().unwrap_or(f64::NAN);
    let writers = |v: &Value| v["writes_per_s_32_writers_one_branch"].as_f64().unwrap_or(f64::NAN);
    let none_floor_per_s = none["raw_lance_one_row_commits_per_s"].as_f64().unwrap_or(f64::NAN);
    println!(
        "{}",
        json!({
            "figure": "durability", "fsync": fsync, "none": none,
            "cli_p50_fsync_over_none": round(p50(&fsync, "cli_process") / p50(&none, "cli_process")),
            "in_process_p50_fsync_over_none": round(p50(&fsync, "in_process") / p50(&none, "in_process")),
            "writers_fsync_over_unsynced_floor": round(writers(&fsync) / none_floor_per_s),
        })
    );
}

/// The one-row writes of the scale figure, as `.gq` sources.
const SCALE_QUERIES: &str = r#"
query ins($n: String) { insert Person { name: $n, age: 1 } }
query upd($n: String, $a: I32) { update Person set { age: $a } where name = $n }
query del($n: String) { delete Person where name = $n }
"#;

/// A key of the `n`-person graph for the `i`-th write of kind `salt`, spread
/// over the table (and apart from the other kinds' keys).
fn spread_key(n: usize, i: usize, salt: usize) -> String {
    format!("p{}", (i * 7_919 + salt * 104_729 + n / 3) % n)
}

/// JSONL of a 1,000-row merge load: 500 existing persons (new ages) and 500
/// new ones.
fn merge_batch(n: usize, round: usize, tag: &str) -> String {
    let (mut out, age) = (String::new(), round % 150);
    for i in 0..500 {
        let name = spread_key(n, round * 500 + i, 3);
        out.push_str(&format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"{name}\",\"age\":{age}}}}}\n"));
        out.push_str(&format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"{tag}{round}_{i}\",\"age\":1}}}}\n"));
    }
    out
}

/// A graph of `n` persons and `n` edges at `loc`, indexes built.
async fn scale_graph(loc: &str, n: usize) -> Graph {
    let g = Omnigraph::init(loc, SCHEMA).await.expect("init");
    g.load(std::io::BufReader::new(load_lines(0, n, 1)), LoadMode::Overwrite, &WriteOptions::default())
        .await
        .expect("load");
    g.ensure_indices("main", None).await.expect("indexes");
    g
}

/// Raw Lance on a bare `n`-row dataset: one-row appends and one-row keyed
/// upserts (Lance's merge-insert by `id`, its index built), `runs` each.
async fn raw_scale_floor(dir: &Path, n: usize, runs: usize) -> (Value, Value) {
    let schema =
        Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, false), Field::new("age", DataType::Int32, true)]));
    let batch = |ids: Vec<String>| {
        let len = ids.len();
        RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(StringArray::from(ids)), Arc::new(Int32Array::from(vec![1; len]))],
        )
        .expect("batch")
    };
    let uri = dir.join(format!("raw-scale-{n}.lance")).to_string_lossy().to_string();
    table::create_table(&uri, batch((0..n).map(|i| format!("p{i}")).collect())).await.expect("raw create");
    let ds = table::open_table(&uri, None, None).await.expect("open");
    let identity = TxnIdentity::mint(ds.version().version);
    let spec = IndexSpec { column: "id".into(), kind: IndexKind::Btree };
    let staged = table::stage_indices(ds, &[spec], FoldDepth::Delta, &identity.uuid).await.expect("stage index");
    if let Some(staged) = staged {
        table::commit_exact(staged).await.expect("index");
    }
    let (mut append, mut upsert) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..runs {
        let start = Instant::now();
        let ds = table::open_table(&uri, None, None).await.expect("open");
        assert!(table::append_rows(ds, batch(vec![format!("raw{i}")]), Default::default()).await.is_ok(), "append");
        append.push(start.elapsed());
        let start = Instant::now();
        let ds = table::open_table(&uri, None, None).await.expect("open");
        let identity = TxnIdentity::mint(ds.version().version);
        let rows = vec![batch(vec![spread_key(n, i, 1)])];
        let staged = table::stage_merge_insert(ds, rows, MergeMode::Upsert, &identity.uuid).await.expect("stage");
        table::commit_exact(staged).await.expect("commit");
        upsert.push(start.elapsed());
    }
    (percentiles(append), percentiles(upsert))
}

/// In-process writes on the scale graph: `runs` of each one-row kind and
/// `runs / 4` (at least 2) merge loads.
async fn scale_in_process(g: &Graph, n: usize, runs: usize) -> Value {
    let params = |pairs: Value| pairs.as_object().cloned().unwrap_or_default();
    let timed = |samples: &mut Vec<Duration>, start: Instant| samples.push(start.elapsed());
    let (mut ins, mut upd, mut del, mut merge) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let start = Instant::now();
        g.mutate(SCALE_QUERIES, Some("ins"), params(json!({"n": format!("new{i}")})), &on("main")).await.expect("ins");
        timed(&mut ins, start);
        let start = Instant::now();
        let p = params(json!({"n": spread_key(n, i, 0), "a": i as i32}));
        g.mutate(SCALE_QUERIES, Some("upd"), p, &on("main")).await.expect("upd");
        timed(&mut upd, start);
        let start = Instant::now();
        g.mutate(SCALE_QUERIES, Some("del"), params(json!({"n": spread_key(n, i, 2)})), &on("main"))
            .await
            .expect("del");
        timed(&mut del, start);
    }
    for round in 0..(runs / 4).max(2) {
        let data = merge_batch(n, round, "mrg");
        let start = Instant::now();
        g.load(data.as_bytes(), LoadMode::Merge, &WriteOptions::default()).await.expect("merge load");
        timed(&mut merge, start);
    }
    json!({"insert": percentiles(ins), "update": percentiles(upd), "delete": percentiles(del),
           "merge_load_1000": percentiles(merge)})
}

/// The same writes as CLI processes (other keys than the in-process ones).
fn scale_cli(dir: &Path, loc: &str, n: usize, runs: usize) -> Value {
    let queries = dir.join("scale-queries.gq");
    std::fs::write(&queries, SCALE_QUERIES).expect("queries");
    let q = queries.to_string_lossy().to_string();
    let mutate = |name: &str, params: Value| -> Vec<String> {
        ["mutate", loc, "--query", &q, "--name", name, "--params", &params.to_string()].map(String::from).to_vec()
    };
    let ins = cli_figures(runs, |i| mutate("ins", json!({"n": format!("cli{i}")})));
    // Keys past any the in-process writes took (they take fewer than 1,000).
    let upd = cli_figures(runs, |i| mutate("upd", json!({"n": spread_key(n, 1000 + i, 0), "a": i})));
    let del = cli_figures(runs, |i| mutate("del", json!({"n": spread_key(n, 1000 + i, 2)})));
    let merge = cli_figures((runs / 4).max(2), |round| {
        let file = dir.join(format!("scale-merge-{round}.jsonl"));
        std::fs::write(&file, merge_batch(n, 1000 + round, "cmrg")).expect("merge file");
        ["load", loc, "--mode", "merge", "-q", "--data", &file.to_string_lossy()].map(String::from).to_vec()
    });
    json!({"insert": ins, "update": upd, "delete": del, "merge_load_1000": merge})
}

async fn scale_figures(dir: &Path) {
    let sizes: Vec<usize> = std::env::var("OMNIGRAPH_BENCH_SCALE_SIZES")
        .unwrap_or_else(|_| "10000,1000000,10000000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let runs = env_usize("OMNIGRAPH_BENCH_SCALE_RUNS", 20);
    let mut rows: Vec<Value> = Vec::new();
    for &n in &sizes {
        let loc = dir.join(format!("scale-{n}")).to_string_lossy().to_string();
        let start = Instant::now();
        let g = scale_graph(&loc, n).await;
        let build_s = round(start.elapsed().as_secs_f64());
        let in_process = scale_in_process(&g, n, runs).await;
        drop(g);
        omnigraph::actors::runtime::quiesce(Duration::from_secs(60)).await;
        let cli = scale_cli(dir, &loc, n, env_usize("OMNIGRAPH_BENCH_CLI_RUNS", 10));
        let (append, upsert) = raw_scale_floor(dir, n, runs).await;
        let row = json!({
            "figure": "scale", "nodes": n, "edges": n, "build_s": build_s,
            "in_process": in_process, "cli_process": cli,
            "raw_lance_one_row_append": append, "raw_lance_one_row_keyed_upsert": upsert,
        });
        println!("{row}");
        rows.push(row);
        let _ = std::fs::remove_dir_all(&loc);
    }
    if let (Some(small), Some(large)) = (rows.first(), rows.last()) {
        let ratio = |path: &[&str]| {
            let at = |row: &Value| path.iter().fold(row, |v, k| &v[*k])["p50_ms"].as_f64().unwrap_or(f64::NAN);
            round(at(large) / at(small))
        };
        let peak = |row: &Value, op: &str| row["cli_process"][op]["peak_rss_mib_max"].as_f64().unwrap_or(f64::NAN);
        let mut ratios = Map::new();
        for side in ["in_process", "cli_process"] {
            for op in ["insert", "update", "delete", "merge_load_1000"] {
                ratios.insert(format!("{side}_{op}_p50"), json!(ratio(&[side, op])));
            }
        }
        for op in ["insert", "update", "delete", "merge_load_1000"] {
            ratios.insert(format!("cli_{op}_peak_rss"), json!(round(peak(large, op) / peak(small, op))));
        }
        ratios.insert("raw_lance_one_row_append_p50".into(), json!(ratio(&["raw_lance_one_row_append"])));
        ratios.insert("raw_lance_one_row_keyed_upsert_p50".into(), json!(ratio(&["raw_lance_one_row_keyed_upsert"])));
        println!(
            "{}",
            json!({"figure": "scale_ratios", "from_nodes": small["nodes"], "to_nodes": large["nodes"], "ratios": ratios})
        );
    }
}

fn main() {
    cli::serve_measure_request();
    if !std::env::args().any(|a| a == "--bench") {
        println!("write benchmark: run with `cargo run --release --example bench_writes -- --bench`");
        return;
    }
    let rt =
        tokio::runtime::Builder::new_multi_thread().thread_stack_size(16 << 20).enable_all().build().expect("runtime");
    rt.block_on(async {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("floor-concurrency")).expect("mkdir");
        if wanted("mutation") {
            mutation_figures(tmp.path()).await;
        }
        if wanted("open") {
            open_figures(tmp.path()).await;
        }
        if wanted("concurrent") {
            concurrency_figures(tmp.path()).await;
        }
        if wanted("load") {
            load_figures(tmp.path()).await;
        }
        if wanted("durability") {
            durability_figures(tmp.path()).await;
        }
        // Minutes of data generation at 10M: only when asked for by name.
        if std::env::var("OMNIGRAPH_BENCH_ONLY").is_ok_and(|o| o == "scale") {
            scale_figures(tmp.path()).await;
        }
    });
}
