//! A daemon's caches stay under its `--memory-budget` however many commits
//! it serves, and its background maintenance keeps its per-branch state flat
//! (both read from `/healthz?verbose=true`).

use serde_json::{Value, json};

use crate::server::{Server, TOKEN, call, get, post, start_with};

const BUDGET: u64 = 16 << 20;
const WRITES: usize = 2_000;
const READS: usize = 2_000;
const TASKS: usize = 8;

/// `TASKS` writers insert `WRITES` people over main and a branch while as
/// many readers count them; returns the names each branch acknowledged.
async fn load(s: &Server) -> Vec<(String, String)> {
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let base = s.base.clone();
        tasks.push(tokio::spawn(async move {
            let branch = if t % 2 == 0 { "main" } else { "side" };
            let mut acked = Vec::new();
            for n in 0..WRITES / TASKS {
                let name = format!("p{t}-{n}");
                let body = json!({"query": "query w($n: String) { insert Person { name: $n } }",
                    "params": {"n": name}, "branch": branch});
                let resp = send(&format!("{base}/graphs/g/mutate"), body).await;
                assert_eq!(resp.0, 200, "write {name}: {}", resp.1);
                acked.push((branch.to_string(), name));
                let count = json!({"query": "query c() { match { $p: Person } return { count($p) as n } }",
                    "branch": branch});
                for _ in 0..READS / WRITES {
                    let resp = send(&format!("{base}/graphs/g/query"), count.clone()).await;
                    assert_eq!(resp.0, 200, "read: {}", resp.1);
                }
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    all
}

async fn send(url: &str, body: Value) -> (u16, Value) {
    let (st, v, _) = call("POST", url, Some(TOKEN), Some(("application/json", body.to_string()))).await;
    (st, v)
}

fn bytes(v: &Value, path: &[&str]) -> u64 {
    path.iter().fold(v, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn caches_stay_under_a_small_budget_through_thousands_of_commits() {
    let s = start_with(&["--memory-budget", "16MiB"]).await;
    let (st, created) = post(&s, "/graphs/g/branches", json!({"name": "side"})).await;
    assert_eq!(st, 200, "{created}");
    let acked = load(&s).await;
    let (st, health) = get(&s, "/healthz?verbose=true").await;
    assert_eq!(st, 200, "{health}");
    let memory = &health["memory"];
    assert_eq!(bytes(memory, &["budget_bytes"]), BUDGET, "{memory}");
    let cached = bytes(memory, &["cached_bytes"]);
    assert!(cached <= BUDGET, "caches hold {cached} bytes over a {BUDGET}-byte budget: {memory}");
    let caches = [
        &["sessions", "read_index"][..],
        &["sessions", "read_index_listings"],
        &["sessions", "read_metadata"],
        &["sessions", "private_index"],
    ];
    for cache in caches.into_iter().chain([&["adjacency"][..]]) {
        let (held, cap) =
            (bytes(memory, &[cache, &["bytes"]].concat()), bytes(memory, &[cache, &["capacity_bytes"]].concat()));
        assert!(held <= cap, "{cache:?} holds {held} over its capacity {cap}: {memory}");
    }
    // Reads saw a new version at nearly every commit: their index listings
    // went to their own cache, whose bound held them (checked above) and
    // which drops the ones no read asked for in the last minute, so by now
    // it may hold none.
    // Private sessions are the datasets actors and writers keep open: one
    // per table actor and branch actor at most, not one per commit.
    let sessions = bytes(memory, &["sessions", "private_sessions"]);
    assert!(sessions <= 32, "{sessions} private sessions alive after {WRITES} commits: {memory}");
    assert!(bytes(memory, &["pinned_handles", "entries"]) <= bytes(memory, &["pinned_handles", "capacity"]));
    // The allocator's own counters: live heap within the pages in use,
    // within what it holds resident.
    let (allocated, active, resident) = (
        bytes(memory, &["allocator", "allocated"]),
        bytes(memory, &["allocator", "active"]),
        bytes(memory, &["allocator", "resident"]),
    );
    assert!(0 < allocated && allocated <= active && active <= resident, "{memory}");
    // The branch actors kept their cached state flat and compacted their
    // `__manifest` tails by themselves; nothing is left queued.
    let graph = &health["graphs"]["g"];
    assert!(bytes(graph, &["maintenance", "state_rebases"]) > 0, "{graph}");
    assert!(bytes(graph, &["maintenance", "manifest_compactions"]) > 0, "{graph}");
    assert_eq!(bytes(graph, &["queued_writes"]), 0, "{graph}");
    // And every acknowledged write is there.
    for branch in ["main", "side"] {
        let (st, rows) = post(
            &s,
            "/graphs/g/query",
            json!({"query": "query n() { match { $p: Person } return { $p.name } }", "branch": branch}),
        )
        .await;
        assert_eq!(st, 200, "{rows}");
        let names: std::collections::BTreeSet<&str> =
            rows["rows"].as_array().into_iter().flatten().filter_map(|r| r["p.name"].as_str()).collect();
        let missing: Vec<&String> =
            acked.iter().filter(|(b, n)| b == branch && !names.contains(n.as_str())).map(|(_, n)| n).collect();
        assert!(missing.is_empty(), "{} acknowledged writes missing on {branch}: {missing:?}", missing.len());
    }
}

#[tokio::test]
async fn a_memory_budget_that_is_not_a_size_is_refused_at_start() {
    let (dir, loc) = crate::common::temp_graph_dir();
    omnigraph::Omnigraph::init(&loc, crate::common::SOCIAL_PG).await.expect("init");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["serve", "--bind", "127.0.0.1:0", "--unauthenticated", "--graph", &format!("g={loc}")])
        .args(["--memory-budget", "lots"])
        .output()
        .expect("run serve");
    drop(dir);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`lots` is not a size"), "{stderr}");
}
