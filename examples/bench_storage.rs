//! Storage-request benchmark: how many object-store requests one open, one
//! single-row insert (cold, then again on the warm handle), one key lookup
//! and one snapshot cost, on local disk and
//! on an S3-compatible server (`scripts/s3_server.py`, started here when
//! python3 and moto are installed).
//! `cargo run --release --example bench_storage`.
//!
//! Local requests are counted by a wrapper around every store (the graph
//! root's and each one Lance opens). S3 requests are counted by the server
//! itself (its request log), so nothing the client does escapes the count.
//! Each figure is the median over `OMNIGRAPH_BENCH_REPEAT` (default 5) runs;
//! every run starts from a process with no open handle on the graph.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

// Shared with the tests, which use more of it than this benchmark does.
#[allow(dead_code)]
#[path = "../tests/support/intercept.rs"]
mod intercept;
#[path = "../tests/support/s3.rs"]
mod s3;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use intercept::{Intercept, Policy};
use lance_io::object_store::WrappingObjectStore;
use object_store::ObjectStore;
use object_store::path::Path;
use omnigraph::engine::storage::{Root, io_hook};
use omnigraph::{Graph, LoadMode, Omnigraph, OpenMode, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

const SCHEMA: &str = include_str!("social.pg");
const DATA: &str = include_str!("social.jsonl");
const LOOKUP: &str = r#"query q() { match { $p: Person { name: "Alice" } } return { $p.age } }"#;

/// Requests by kind.
#[derive(Debug, Default)]
struct Counter {
    reads: AtomicU64,
    writes: AtomicU64,
    lists: AtomicU64,
    deletes: AtomicU64,
}

impl Policy for Counter {
    fn write(&self, _: &Path) -> object_store::Result<()> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn delete(&self, _: &Path) -> object_store::Result<()> {
        self.deletes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn read(&self, _: &Path) -> object_store::Result<()> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn list(&self, _: Option<&Path>) -> object_store::Result<()> {
        self.lists.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

impl Counter {
    fn take(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("reads", self.reads.swap(0, Ordering::Relaxed)),
            ("writes", self.writes.swap(0, Ordering::Relaxed)),
            ("lists", self.lists.swap(0, Ordering::Relaxed)),
            ("deletes", self.deletes.swap(0, Ordering::Relaxed)),
        ])
    }
}

/// Lance's stores, counted; paginated listings fall back to counted plain ones.
#[derive(Debug)]
struct CountLance(Arc<Counter>);

impl WrappingObjectStore for CountLance {
    fn wrap(&self, _prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Intercept { inner: original, policy: self.0.clone() })
    }

    fn wrap_paginated(
        &self,
        _prefix: &str,
        _original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        None
    }
}

/// Where requests are counted.
enum Meter {
    Client(Arc<Counter>),
    Server(&'static s3::S3Server, String),
}

impl Meter {
    fn root(&self, loc: &str) -> Root {
        let root = Root::parse(loc).expect("root");
        match self {
            Meter::Client(c) => {
                let inner = root.store().clone();
                root.with_store(Arc::new(Intercept { inner, policy: c.clone() }))
            }
            Meter::Server(..) => root,
        }
    }

    /// Requests since the last call: by kind, and the total.
    fn take(&self, mark: &mut usize) -> Value {
        let by_kind: BTreeMap<&str, u64> = match self {
            Meter::Client(c) => c.take(),
            Meter::Server(server, prefix) => {
                let log = s3::requests(server);
                let mut out = BTreeMap::new();
                let trace = std::env::var_os("OMNIGRAPH_BENCH_TRACE").is_some();
                // A bulk delete (`POST /bucket?delete`) names its keys in
                // its body only: counted too (one graph is measured at a time).
                let ours = |l: &&String| l.contains(prefix.as_str()) || l.contains("?delete");
                for line in log[*mark..].iter().filter(ours) {
                    if trace {
                        eprintln!("  {line}");
                    }
                    let kind = match line.split(' ').next().unwrap_or_default() {
                        "GET" if line.contains("list-type=") => "lists",
                        "GET" | "HEAD" => "reads",
                        "DELETE" => "deletes",
                        "POST" if line.contains("?delete") => "deletes",
                        _ => "writes",
                    };
                    *out.entry(kind).or_default() += 1;
                }
                *mark = log.len();
                out
            }
        };
        let total: u64 = by_kind.values().sum();
        json!({ "total": total, "by_kind": by_kind })
    }
}

/// With `OMNIGRAPH_BENCH_TRACE` set, S3 requests are printed (to stderr)
/// under the operation that made them.
fn trace(op: &str) {
    if std::env::var_os("OMNIGRAPH_BENCH_TRACE").is_some() {
        eprintln!("{op}:");
    }
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Let every actor tree of dropped handles stop, so the next open is cold.
async fn settle() {
    omnigraph::actors::runtime::quiesce(std::time::Duration::from_secs(30)).await;
}

async fn open(meter: &Meter, loc: &str, mode: OpenMode) -> Graph {
    Omnigraph::open_root(meter.root(loc), mode).await.expect("open")
}

/// One backend's figures: each operation's median request count.
async fn measure(meter: Meter, loc: &str, repeat: usize) -> Value {
    {
        let g = Omnigraph::init(loc, SCHEMA).await.expect("init");
        g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    }
    settle().await;
    let mut mark = match &meter {
        Meter::Server(server, _) => s3::requests(server).len(),
        Meter::Client(c) => {
            c.take();
            0
        }
    };
    let mut runs: BTreeMap<&str, Vec<Value>> = BTreeMap::new();
    for i in 0..repeat {
        let g = open(&meter, loc, OpenMode::ReadWrite).await;
        trace("open_read_write");
        runs.entry("open_read_write").or_default().push(meter.take(&mut mark));
        let insert = format!(r#"query q() {{ insert Person {{ name: "n{i}", age: 1 }} }}"#);
        g.mutate(&insert, None, Map::new(), &WriteOptions::default()).await.expect("insert");
        trace("single_insert");
        runs.entry("single_insert").or_default().push(meter.take(&mut mark));
        // The same again on the now-warm handle: what a long-running daemon pays.
        let insert = format!(r#"query q() {{ insert Person {{ name: "w{i}", age: 1 }} }}"#);
        g.mutate(&insert, None, Map::new(), &WriteOptions::default()).await.expect("warm insert");
        trace("warm_insert");
        runs.entry("warm_insert").or_default().push(meter.take(&mut mark));
        g.query(LOOKUP, None, Map::new(), &ReadTarget::Branch("main".into())).await.expect("lookup");
        trace("key_lookup_query");
        runs.entry("key_lookup_query").or_default().push(meter.take(&mut mark));
        g.snapshot("main").await.expect("snapshot");
        trace("snapshot");
        runs.entry("snapshot").or_default().push(meter.take(&mut mark));
        drop(g);
        settle().await;
        meter.take(&mut mark);
        let g = open(&meter, loc, OpenMode::ReadOnly).await;
        trace("open_read_only");
        runs.entry("open_read_only").or_default().push(meter.take(&mut mark));
        drop(g);
        settle().await;
        meter.take(&mut mark);
    }
    let figures: Map<String, Value> = runs
        .into_iter()
        .map(|(op, samples)| {
            let totals: Vec<u64> = samples.iter().map(|s| s["total"].as_u64().unwrap_or(0)).collect();
            let mid = median(totals.clone());
            let example = samples.iter().find(|s| s["total"].as_u64() == Some(mid)).cloned().unwrap_or(Value::Null);
            (op.to_string(), json!({ "median_requests": mid, "runs": totals, "median_run": example["by_kind"] }))
        })
        .collect();
    Value::Object(figures)
}

fn main() {
    let repeat = std::env::var("OMNIGRAPH_BENCH_REPEAT").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let rt =
        tokio::runtime::Builder::new_multi_thread().thread_stack_size(16 << 20).enable_all().build().expect("runtime");
    let out = rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        let counter = Arc::new(Counter::default());
        io_hook::set(Some(Arc::new(CountLance(counter.clone()))));
        let loc = dir.path().join("g").to_string_lossy().to_string();
        let local = measure(Meter::Client(counter), &loc, repeat).await;
        io_hook::set(None);
        let s3 = match s3::server() {
            Some(server) => {
                let loc = s3::location("bench").expect("location");
                // The location's unique segment: listings name it URL-encoded.
                let prefix = loc.trim_start_matches("s3://").split('/').nth(1).unwrap_or_default().to_string();
                measure(Meter::Server(server, prefix), &loc, repeat).await
            }
            None => json!("skipped: no S3 server (pip install 'moto[server]')"),
        };
        json!({ "benchmark": "storage_requests", "repeat": repeat, "local": local, "s3": s3 })
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
}
