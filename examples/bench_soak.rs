//! Soak benchmark: a daemon (the release `omnigraph serve`) on 127.0.0.1
//! under N writers and M readers spread over three branches for a while, to
//! show that its memory and latency stay flat as commits accumulate.
//! `cargo build --release && cargo run --release --example bench_soak`.
//!
//! Knobs (environment): `OMNIGRAPH_BENCH_SOAK_SECS` (default 600),
//! `OMNIGRAPH_BENCH_SOAK_WRITERS` (8), `OMNIGRAPH_BENCH_SOAK_READERS` (4).
//! `--s3` runs the daemon on the S3-compatible test server
//! (`scripts/s3_server.py`); every argument after `--` is passed to `serve`
//! (e.g. `-- --memory-budget 64MiB`).
//!
//! Prints one JSON document: per tenth of the run the daemon's RSS (its last
//! sample in that tenth and the tenth's peak), write and read p50/p99, the
//! writes acknowledged and the daemon's own cache report
//! (`/healthz?verbose=true`); then the totals, the flatness ratios of the
//! last tenth over the second, and whether every acknowledged write is
//! present on its branch afterwards.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

#[path = "support/cli.rs"]
mod cli;
#[path = "../tests/support/s3.rs"]
mod s3;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use omnigraph::{LoadMode, Omnigraph, WriteOptions};
use serde_json::{Value, json};

const SCHEMA: &str = include_str!("social.pg");
const DATA: &str = include_str!("social.jsonl");
const BRANCHES: [&str; 3] = ["main", "soak-a", "soak-b"];
const INSERT: &str = "query w($n: String) { insert Person { name: $n } }";
const COUNT: &str = "query c() { match { $p: Person } return { count($p) as n } }";
const NAMES: &str = "query names() { match { $p: Person } return { $p.name } }";

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// One observation: when (seconds into the run), what, and how long it took.
#[derive(Clone, Copy)]
enum Sample {
    Write { at: f64, ms: f64 },
    Read { at: f64, ms: f64 },
    Failed { at: f64 },
}

/// The daemon process; killed on drop.
struct Daemon {
    child: Child,
    base: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_daemon(loc: &str, extra: &[String], log: &std::path::Path) -> Daemon {
    let mut child = Command::new(cli::cli_binary())
        .args(["serve", "--bind", "127.0.0.1:0", "--unauthenticated", "--graph", &format!("g={loc}")])
        .args(extra)
        .envs(s3::child_env(loc))
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log).map(Stdio::from).unwrap_or_else(|_| Stdio::null()))
        .spawn()
        .expect("spawn omnigraph serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("listen line");
    let addr = line.trim().strip_prefix("OMNIGRAPH_LISTEN_ADDR=").unwrap_or_else(|| panic!("daemon said {line:?}"));
    Daemon { base: format!("http://{addr}"), child }
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

async fn post(client: &reqwest::Client, url: &str, body: Value) -> Result<Value, String> {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

fn percentile(sorted: &[f64], p: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let at = ((sorted.len() - 1) as f64 * p).round() as usize;
    json!((sorted[at] * 100.0).round() / 100.0)
}

fn latencies(samples: &[Sample], read: bool) -> Vec<f64> {
    let mut v: Vec<f64> = samples
        .iter()
        .filter_map(|s| match (s, read) {
            (Sample::Write { ms, .. }, false) | (Sample::Read { ms, .. }, true) => Some(*ms),
            _ => None,
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v
}

/// Build the graph: the example data on main, two more branches.
async fn prepare(loc: &str) {
    let g = Omnigraph::init(loc, SCHEMA).await.expect("init");
    g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    for b in &BRANCHES[1..] {
        g.branch_create(b, "main").await.expect("branch");
    }
}

type Acked = Arc<Mutex<BTreeMap<&'static str, Vec<String>>>>;

fn writer(
    client: reqwest::Client,
    url: String,
    w: usize,
    start: Instant,
    until: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    acked: Acked,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let branch = BRANCHES[w % BRANCHES.len()];
        let mut n = 0u64;
        while Instant::now() < until {
            let name = format!("soak-{w}-{n}");
            n += 1;
            let body = json!({"query": INSERT, "params": {"n": name}, "branch": branch});
            let t = Instant::now();
            let res = post(&client, &url, body).await;
            let at = start.elapsed().as_secs_f64();
            let sample = match res {
                Ok(_) => {
                    acked.lock().expect("acked").entry(branch).or_default().push(name);
                    Sample::Write { at, ms: t.elapsed().as_secs_f64() * 1e3 }
                }
                Err(e) => {
                    eprintln!("write failed: {e}");
                    Sample::Failed { at }
                }
            };
            samples.lock().expect("samples").push(sample);
        }
    })
}

fn reader(
    client: reqwest::Client,
    url: String,
    r: usize,
    start: Instant,
    until: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut i = r;
        while Instant::now() < until {
            let branch = BRANCHES[i % BRANCHES.len()];
            i += 1;
            let t = Instant::now();
            let res = post(&client, &url, json!({"query": COUNT, "branch": branch})).await;
            let at = start.elapsed().as_secs_f64();
            let sample = match res {
                Ok(_) => Sample::Read { at, ms: t.elapsed().as_secs_f64() * 1e3 },
                Err(e) => {
                    eprintln!("read failed: {e}");
                    Sample::Failed { at }
                }
            };
            samples.lock().expect("samples").push(sample);
        }
    })
}

/// Every acknowledged write present on its branch (a name query per branch).
async fn check_present(client: &reqwest::Client, base: &str, acked: &BTreeMap<&'static str, Vec<String>>) -> Value {
    let mut missing = 0usize;
    let mut per_branch = serde_json::Map::new();
    for (branch, names) in acked {
        let got = post(client, &format!("{base}/graphs/g/query"), json!({"query": NAMES, "branch": branch}))
            .await
            .expect("names query");
        let present: BTreeSet<&str> =
            got["rows"].as_array().into_iter().flatten().filter_map(|r| r["p.name"].as_str()).collect();
        let lost = names.iter().filter(|n| !present.contains(n.as_str())).count();
        missing += lost;
        per_branch.insert(branch.to_string(), json!({"acknowledged": names.len(), "missing": lost}));
    }
    json!({"branches": per_branch, "missing": missing, "all_present": missing == 0})
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (own, serve_extra) = match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.clone(), vec![]),
    };
    let on_s3 = own.iter().any(|a| a == "--s3");
    let secs = env_or("OMNIGRAPH_BENCH_SOAK_SECS", 600);
    let (writers, readers) =
        (env_or("OMNIGRAPH_BENCH_SOAK_WRITERS", 8) as usize, env_or("OMNIGRAPH_BENCH_SOAK_READERS", 4) as usize);
    let dir = tempfile::tempdir().expect("tempdir");
    let loc = if on_s3 {
        s3::location("soak").expect("--s3 needs the S3 test server (pip install 'moto[server]')")
    } else {
        dir.path().join("g").to_string_lossy().into_owned()
    };
    prepare(&loc).await;
    let daemon = spawn_daemon(&loc, &serve_extra, &dir.path().join("serve.log"));
    let pid = daemon.child.id();
    let client = reqwest::Client::new();
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let samples: Arc<Mutex<Vec<Sample>>> = Arc::default();
    let acked: Acked = Arc::default();
    let mut tasks = Vec::new();
    let (mutate, query) = (format!("{}/graphs/g/mutate", daemon.base), format!("{}/graphs/g/query", daemon.base));
    for w in 0..writers {
        tasks.push(writer(client.clone(), mutate.clone(), w, start, until, samples.clone(), acked.clone()));
    }
    for r in 0..readers {
        tasks.push(reader(client.clone(), query.clone(), r, start, until, samples.clone()));
    }
    // The sampler: RSS every 250 ms, the daemon's own report once per tenth.
    let tenth = secs as f64 / 10.0;
    let mut rss: Vec<(f64, f64)> = Vec::new();
    let mut reports: Vec<Value> = Vec::new();
    let health = format!("{}/healthz?verbose=true", daemon.base);
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let at = start.elapsed().as_secs_f64();
        rss.push((at, rss_mib(pid)));
        if at >= tenth * (reports.len() + 1) as f64 {
            let report = match client.get(&health).send().await {
                Ok(r) => r.json::<Value>().await.unwrap_or(Value::Null),
                Err(_) => Value::Null,
            };
            reports.push(json!({"memory": report["memory"], "graph": report["graphs"]["g"], "steps": report["steps"]}));
        }
    }
    for t in tasks {
        t.await.expect("task");
    }
    let samples = samples.lock().expect("samples").clone();
    let acked = acked.lock().expect("acked").clone();
    let presence = check_present(&client, &daemon.base, &acked).await;
    // The same one-row write, alone, in this daemon and in a fresh one on the
    // same graph: a daemon that carried state from the run would be slower.
    let aged = idle_write_p50(&client, &daemon.base, "aged").await;
    drop(daemon);
    let fresh_daemon = spawn_daemon(&loc, &serve_extra, &dir.path().join("fresh.log"));
    let fresh = idle_write_p50(&client, &fresh_daemon.base, "fresh").await;
    drop(fresh_daemon);
    let rows = tenths(&samples, &rss, &reports, tenth);
    let ratio = |key: &str| {
        let (second, last) = (rows[1][key].as_f64(), rows[9][key].as_f64());
        match (second, last) {
            (Some(s), Some(l)) if s > 0.0 => json!((l / s * 1000.0).round() / 1000.0),
            _ => Value::Null,
        }
    };
    let failures = samples.iter().filter(|s| matches!(s, Sample::Failed { .. })).count();
    let out = json!({
        "storage": if on_s3 { "s3" } else { "local" },
        "secs": secs, "writers": writers, "readers": readers, "branches": BRANCHES.len(),
        "serve_args": serve_extra,
        "tenths": rows,
        "acknowledged_writes": acked.values().map(Vec::len).sum::<usize>(),
        "reads": samples.iter().filter(|s| matches!(s, Sample::Read { .. })).count(),
        "failed_requests": failures,
        "presence": presence,
        "idle_write_p50_ms": {"aged_daemon": aged, "fresh_daemon": fresh,
            "aged_over_fresh": ((aged / fresh) * 1000.0).round() / 1000.0},
        "flatness": {
            "rss_last_over_second": ratio("rss_mib"),
            "write_p50_last_over_second": ratio("write_p50_ms"),
            "write_p99_last_over_second": ratio("write_p99_ms"),
            "read_p50_last_over_second": ratio("read_p50_ms"),
            "rss_last_mib": rows[9]["rss_mib"],
        },
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}

/// Median of 30 one-row writes on main, one at a time.
async fn idle_write_p50(client: &reqwest::Client, base: &str, tag: &str) -> f64 {
    let mut ms = Vec::new();
    for n in 0..30 {
        let body = json!({"query": INSERT, "params": {"n": format!("idle-{tag}-{n}")}, "branch": "main"});
        let t = Instant::now();
        post(client, &format!("{base}/graphs/g/mutate"), body).await.expect("idle write");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    (ms[ms.len() / 2] * 100.0).round() / 100.0
}

/// Per step the daemon times (`/healthz?verbose`'s `steps`), what this
/// tenth added: spans closed and their mean wall and busy ms.
fn step_deltas(before: Option<&Value>, now: Option<&Value>) -> Value {
    let Some(now) = now.and_then(|r| r["steps"].as_object()) else { return Value::Null };
    let field = |step: &str, f: &str| before.map_or(0.0, |b| b["steps"][step][f].as_f64().unwrap_or(0.0));
    let mut out = serde_json::Map::new();
    for (step, t) in now {
        let count = t["count"].as_f64().unwrap_or(0.0) - field(step, "count");
        if count <= 0.0 {
            continue;
        }
        let mean = |f: &str| ((t[f].as_f64().unwrap_or(0.0) - field(step, f)) / count * 100.0).round() / 100.0;
        out.insert(step.clone(), json!({"count": count, "wall_ms": mean("wall_ms"), "busy_ms": mean("busy_ms")}));
    }
    Value::Object(out)
}

/// One row per tenth of the run.
fn tenths(samples: &[Sample], rss: &[(f64, f64)], reports: &[Value], tenth: f64) -> Vec<Value> {
    (0..10)
        .map(|k| {
            let (from, to) = (tenth * k as f64, tenth * (k + 1) as f64);
            let inside = |at: f64| at >= from && (at < to || k == 9);
            let here: Vec<Sample> = samples
                .iter()
                .copied()
                .filter(|s| match s {
                    Sample::Write { at, .. } | Sample::Read { at, .. } | Sample::Failed { at } => inside(*at),
                })
                .collect();
            let (writes, reads) = (latencies(&here, false), latencies(&here, true));
            let rss_here: Vec<f64> = rss.iter().filter(|(at, _)| inside(*at)).map(|(_, m)| *m).collect();
            let last = rss_here.last().copied().unwrap_or(0.0);
            let peak = rss_here.iter().copied().fold(0.0, f64::max);
            json!({
                "tenth": k + 1,
                "rss_mib": (last * 10.0).round() / 10.0,
                "rss_peak_mib": (peak * 10.0).round() / 10.0,
                "writes": writes.len(),
                "write_p50_ms": percentile(&writes, 0.5),
                "write_p99_ms": percentile(&writes, 0.99),
                "reads": reads.len(),
                "read_p50_ms": percentile(&reads, 0.5),
                "read_p99_ms": percentile(&reads, 0.99),
                "daemon_memory": reports.get(k).cloned().unwrap_or(Value::Null),
                "steps": step_deltas(reports.get(k.wrapping_sub(1)), reports.get(k)),
            })
        })
        .collect()
}
