//! Durable-write cut: every mutating storage call (Lance's commits, renames,
//! ref files, our sidecars and audit) is counted; for each writer the
//! operation runs once per k = 1..N with the world stopped right after the
//! k-th durable write (every later write fails, as after a power cut), then
//! the process "restarts" and recovery must leave a clean graph.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use object_store::path::Path;
use omnigraph::engine::storage::Root;
use omnigraph::recovery::audit;
use omnigraph::{Omnigraph, OpenMode, WriteOptions};
use serde_json::Map;

use crate::intercept::{Intercept, Policy, injected};
use crate::lance_hook;

use super::{Content, Op, assert_clean_on, assert_schema_matches, counts_on, crash, serial, setup_on, shut_down};

/// The shared counter: writes up to `limit` pass, later ones fail.
#[derive(Debug)]
struct Cut {
    count: AtomicUsize,
    limit: AtomicUsize,
    stopped: AtomicBool,
}

impl Cut {
    fn new() -> Arc<Cut> {
        Arc::new(Cut {
            count: AtomicUsize::new(0),
            limit: AtomicUsize::new(usize::MAX),
            stopped: AtomicBool::new(false),
        })
    }

    /// Count from zero again, stopping after `limit` writes.
    fn arm(&self, limit: usize) {
        self.count.store(0, Ordering::SeqCst);
        self.limit.store(limit, Ordering::SeqCst);
    }

    fn admit(&self) -> object_store::Result<()> {
        if self.stopped.load(Ordering::SeqCst) {
            return Err(stopped());
        }
        let n = self.count.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= self.limit.load(Ordering::SeqCst) {
            self.stopped.store(true, Ordering::SeqCst);
        }
        if n > self.limit.load(Ordering::SeqCst) { Err(stopped()) } else { Ok(()) }
    }
}

fn stopped() -> object_store::Error {
    injected("write after the durable-write cut")
}

impl Policy for Cut {
    fn write(&self, _path: &Path) -> object_store::Result<()> {
        self.admit()
    }

    fn delete(&self, _path: &Path) -> object_store::Result<()> {
        self.admit()
    }
}

// The same copy the benchmarks use.
#[path = "../../examples/support/fs_tree.rs"]
mod fs_tree;
use fs_tree::copy_dir;

/// Run `op` on `branch` of the graph at `loc` with the world stopped after
/// `limit` durable writes; returns whether the write was acknowledged and how
/// many durable writes it attempted.
async fn run_cut(op: Op, branch: &'static str, loc: &str, limit: usize) -> (bool, usize) {
    cut_action(loc, limit, |g| Box::pin(async move { op.run_on(&g, branch).await.is_ok() })).await
}

/// A graph action under the cut, answering whether it was acknowledged.
pub(super) type Action = Box<dyn FnOnce(omnigraph::Graph) -> futures::future::BoxFuture<'static, bool>>;

/// Makes a fresh [`Action`] for each cut.
pub(super) type MakeAction = fn() -> Action;

/// Run `action` on the graph at `loc` with the world stopped after `limit`
/// durable writes, then "die"; returns (acknowledged, durable writes made).
async fn cut_action(
    loc: &str,
    limit: usize,
    action: impl FnOnce(omnigraph::Graph) -> futures::future::BoxFuture<'static, bool>,
) -> (bool, usize) {
    let cut = Cut::new();
    lance_hook::route(Some(cut.clone()));
    let root = Root::parse(loc).expect("root");
    let store = Intercept { inner: root.store().clone(), policy: cut.clone() };
    let g = Omnigraph::open_root(root.with_store(Arc::new(store)), OpenMode::ReadWrite).await.expect("open");
    cut.arm(limit);
    let acknowledged = action(g.clone()).await;
    let writes = cut.count.load(Ordering::SeqCst);
    shut_down(g).await;
    lance_hook::route::<Cut>(None);
    (acknowledged, writes.min(limit))
}

/// For `op` on `branch`: measure N, then cut at every k in 1..=N. Returns
/// (N, clean states).
async fn enumerate(op: Op, branch: &'static str) -> (usize, usize) {
    enumerate_at(op, branch, None).await
}

/// A copy of the graph at `base` in a fresh place of the same kind (a
/// temporary directory, or a new prefix on the S3 server).
pub(super) async fn fresh_copy(base: &str) -> (tempfile::TempDir, String) {
    let dir = crate::scratch::tempdir();
    if !base.starts_with("s3://") {
        let loc = dir.path().join("g");
        copy_dir(std::path::Path::new(base), &loc);
        return (dir, loc.to_string_lossy().to_string());
    }
    let loc = super::s3::location("cut").expect("S3 location");
    let (from, to) = (Root::parse(base).expect("root"), Root::parse(&loc).expect("root"));
    for name in from.list("").await.expect("list") {
        let bytes = from.get(&name).await.expect("get").expect("listed object");
        to.put(&name, bytes.to_vec()).await.expect("put");
    }
    (dir, loc)
}

/// [`enumerate`] on the graph at `loc` when given (an S3 location).
async fn enumerate_at(op: Op, branch: &'static str, loc: Option<String>) -> (usize, usize) {
    let (base_dir, base_loc, before, after, committed) = super::setup_at(op, branch, loc).await;
    let (_probe, probe_loc) = fresh_copy(&base_loc).await;
    let (ok, n) = run_cut(op, branch, &probe_loc, usize::MAX).await;
    assert!(ok && n > 0, "{op:?}: the uncut run must succeed ({n} writes)");
    let expected = Expected { op, branch, before, after, committed };
    let mut clean = 0;
    for k in 1..=n {
        let (_case, loc) = fresh_copy(&base_loc).await;
        let (acknowledged, _) = run_cut(op, branch, &loc, k).await;
        expected
            .assert_recovered(&loc, acknowledged, &format!("{op:?} on {branch} cut after durable write {k}/{n}"))
            .await;
        clean += 1;
    }
    drop(base_dir);
    (n, clean)
}

/// What a write under test must leave after any interruption.
pub(super) struct Expected {
    pub op: Op,
    pub branch: &'static str,
    /// Content of the branch before the write, and after a clean run of it.
    pub before: Content,
    pub after: Content,
    /// The branch's commits before the write.
    pub committed: Vec<String>,
}

impl Expected {
    /// Reopen the graph at `loc` (recovery runs) and check that it is clean,
    /// the write invisible XOR fully applied, an acknowledged write present,
    /// no committed commit rolled back, one audit row at most, and that the
    /// next write succeeds.
    pub(super) async fn assert_recovered(&self, loc: &str, acknowledged: bool, context: &str) {
        let Expected { op, branch, before, after, committed } = self;
        let g = Omnigraph::open(loc).await.unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
        assert_clean_on(&g, branch, context).await;
        let now = counts_on(&g, branch).await;
        assert!(now == *before || now == *after, "{context}: half-applied");
        assert_schema_matches(&g, *op, branch, now == *after && now != *before, context).await;
        if acknowledged {
            assert_eq!(now, *after, "{context}: an acknowledged write was lost");
        }
        let history: Vec<String> =
            g.commits(branch, None).await.expect("commits").into_iter().map(|c| c.commit_id).collect();
        assert!(committed.iter().all(|c| history.contains(c)), "{context}: a committed commit was rolled back");
        if acknowledged {
            // Also for a write that changes no row (optimize): its commit stays.
            assert!(history.len() > committed.len(), "{context}: an acknowledged commit was lost");
        }
        let audit = audit::read_all(g.root()).await.expect("audit");
        assert!(audit.len() <= 1, "{context}: one resolution, one audit row at most: {audit:?}");
        let next = WriteOptions { branch: branch.to_string(), ..WriteOptions::default() };
        g.mutate(r#"query q() { insert Company { name: "After" } }"#, None, Map::new(), &next)
            .await
            .unwrap_or_else(|e| panic!("{context}: next write failed: {e}"));
        shut_down(g).await;
    }
}

/// Every writer, on the branch it is cut on (a first write on a fresh branch
/// forks its tables; a merge into main and into a fresh branch).
pub(super) const WRITERS: [(Op, &str); 10] = [
    (Op::MutationInsert, "main"),
    (Op::MutationDelete, "main"),
    (Op::LoadAppend, "main"),
    (Op::LoadMerge, "main"),
    (Op::LoadOverwrite, "main"),
    (Op::MutationInsert, "fresh"),
    (Op::Merge, "main"),
    (Op::Merge, "fresh"),
    (Op::Optimize, "main"),
    (Op::EnsureIndices, "main"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by a_long_case_runs_in_a_process_of_its_own"]
async fn every_durable_write_cut_of_every_writer_recovers_clean() {
    let _s = serial().await;
    let mut report = Vec::new();
    for (op, branch) in WRITERS {
        let (n, clean) = enumerate(op, branch).await;
        assert_eq!(clean, n);
        report.push(format!("{op:?} on {branch}: N = {n} durable writes, {clean} clean states"));
    }
    println!("durable-write cut (0 violations):\n{}", report.join("\n"));
}

/// The durable-write cut on S3: a mutation and a load on main, and a first
/// write on a new branch (its fork), stopped after every durable write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by a_long_case_runs_in_a_process_of_its_own"]
async fn every_durable_write_cut_on_s3_recovers_clean() {
    let _s = serial().await;
    if super::s3::server().is_none() {
        return;
    }
    let mut report = Vec::new();
    for (op, branch) in [(Op::MutationInsert, "main"), (Op::LoadMerge, "main"), (Op::MutationInsert, "fresh")] {
        let (n, clean) = enumerate_at(op, branch, super::s3::location("cut-base")).await;
        assert_eq!(clean, n);
        report.push(format!("{op:?} on {branch} on S3: N = {n} durable writes, {clean} clean states"));
    }
    println!("durable-write cut on S3 (0 violations):\n{}", report.join("\n"));
}

/// A schema apply (every kind of table effect, the staged schema files and
/// their promotion) cut at every durable write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durable_write_cut_of_a_schema_apply_recovers_clean() {
    let _s = serial().await;
    let (n, clean) = enumerate(Op::SchemaApply, "main").await;
    assert_eq!(clean, n);
    println!("schema apply durable-write cut (0 violations): N = {n} durable writes, {clean} clean states");
}

/// Open the graph at `loc` read-write (running recovery) with the world
/// stopped after `limit` durable writes; returns the writes attempted.
async fn open_cut(loc: &str, limit: usize) -> usize {
    let cut = Cut::new();
    cut.arm(limit);
    lance_hook::route(Some(cut.clone()));
    let root = Root::parse(loc).expect("root");
    let store = Intercept { inner: root.store().clone(), policy: cut.clone() };
    if let Ok(g) = Omnigraph::open_root(root.with_store(Arc::new(store)), OpenMode::ReadWrite).await {
        shut_down(g).await;
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    lance_hook::route::<Cut>(None);
    cut.count.load(Ordering::SeqCst).min(limit)
}

/// Recovery itself is cut at every durable write (the restore, the publish,
/// the audit append, the sidecar delete): the next open finishes the job
/// with exactly one audit row, whichever way the write resolves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durable_write_cut_of_recovery_itself_recovers_clean_with_one_audit_row() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let mut report = Vec::new();
    for (failpoint, rolls_forward) in [("mutation.after_table_commit", false), ("mutation.after_confirm", true)] {
        let (base_dir, base_loc, before, after, _) = setup_on(Op::MutationInsert, "main").await;
        crash(&base_loc, Op::MutationInsert, "main", failpoint).await;
        let base = std::path::Path::new(&base_loc);
        let probe = crate::scratch::tempdir();
        copy_dir(base, &probe.path().join("g"));
        let n = open_cut(&probe.path().join("g").to_string_lossy(), usize::MAX).await;
        assert!(n > 0, "recovery made no durable write");
        for k in 1..=n {
            let case = crate::scratch::tempdir();
            let loc = case.path().join("g").to_string_lossy().to_string();
            copy_dir(base, std::path::Path::new(&loc));
            open_cut(&loc, k).await;
            let context = format!("recovery of a crash at {failpoint} cut after durable write {k}/{n}");
            let g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
            assert_clean_on(&g, "main", &context).await;
            let expected = if rolls_forward { &after } else { &before };
            assert_eq!(&counts_on(&g, "main").await, expected, "{context}");
            let audit = audit::read_all(g.root()).await.expect("audit");
            assert_eq!(audit.len(), 1, "{context}: exactly one audit row: {audit:?}");
        }
        report.push(format!("recovery after {failpoint}: N = {n} durable writes, {n} clean states"));
        drop(base_dir);
    }
    println!("recovery durable-write cut (0 violations):\n{}", report.join("\n"));
}

/// The branch exists whole: it reads `from`'s head (or its own writes), is
/// consistent, and takes a write.
async fn assert_whole(g: &omnigraph::Graph, name: &str, context: &str) {
    assert_clean_on(g, name, context).await;
    Op::MutationInsert.run_on(g, name).await.unwrap_or_else(|e| panic!("{context}: write on {name}: {e}"));
    assert_clean_on(g, name, context).await;
}

/// A graph with main and a branch `b` whose tables are forked (one write on
/// it): what branch create (`c`) and delete (`b`) run on.
pub(super) async fn branch_base() -> (tempfile::TempDir, String) {
    let (base_dir, base_loc, ..) = setup_on(Op::MutationInsert, "b").await;
    let g = Omnigraph::open(&base_loc).await.expect("open");
    Op::MutationInsert.run_on(&g, "b").await.expect("fork tables on b");
    shut_down(g).await;
    (base_dir, base_loc)
}

/// The branch-control actions: (what, the branch it names, the action).
pub(super) const BRANCH_ACTIONS: [(&str, &str, MakeAction); 2] = [
    ("create c", "c", || Box::new(|g| Box::pin(async move { g.branch_create("c", "main").await.is_ok() }))),
    ("delete b", "b", || Box::new(|g| Box::pin(async move { g.branch_delete("b").await.is_ok() }))),
];

/// After an interrupted branch create or delete the branch is whole or
/// absent (as acknowledged, if it was), and an absent name can be created
/// again cleanly.
pub(super) async fn assert_branch_outcome(loc: &str, what: &str, name: &str, acknowledged: bool, context: &str) {
    let g = Omnigraph::open(loc).await.unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
    let live = g.branch_list().await.expect("list").iter().any(|b| b.name == name);
    match (what.starts_with("create"), acknowledged, live) {
        (true, true, false) => panic!("{context}: an acknowledged create was lost"),
        (false, true, true) => panic!("{context}: an acknowledged delete was undone"),
        _ => {}
    }
    if !live {
        g.branch_create(name, "main").await.unwrap_or_else(|e| panic!("{context}: recreate failed: {e}"));
        assert_eq!(counts_on(&g, name).await, counts_on(&g, "main").await, "{context}: fresh name reads main");
    }
    assert_whole(&g, name, context).await;
    shut_down(g).await;
}

/// Branch create and delete (no sidecar: the ref is the authority) cut at
/// every durable write: after a restart the branch is either whole or absent,
/// and an absent name can be created again cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_durable_write_cut_of_branch_create_and_delete_recovers_clean() {
    let _s = serial().await;
    let (base_dir, base_loc) = branch_base().await;
    let mut report = Vec::new();
    for (what, name, action) in BRANCH_ACTIONS {
        let (_probe, probe_loc) = fresh_copy(&base_loc).await;
        let (ok, n) = cut_action(&probe_loc, usize::MAX, action()).await;
        assert!(ok && n > 0, "{what}: the uncut run must succeed ({n} writes)");
        for k in 1..=n {
            let (_case, loc) = fresh_copy(&base_loc).await;
            let (acknowledged, _) = cut_action(&loc, k, action()).await;
            let context = format!("{what} cut after durable write {k}/{n}");
            assert_branch_outcome(&loc, what, name, acknowledged, &context).await;
        }
        report.push(format!("{what}: N = {n} durable writes, {n} clean states"));
    }
    drop(base_dir);
    println!("branch control durable-write cut (0 violations):\n{}", report.join("\n"));
}
