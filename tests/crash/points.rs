//! The failpoint registry, read from the source, and the crash cases of the
//! points outside the saga matrices: inside recovery (a crash of recovery
//! itself, re-entered by the next open) and inside the table and branch
//! actors' commit and publish handlers.

use std::collections::BTreeSet;
use std::path::Path;

use omnigraph::actors::saga::failpoints;
use omnigraph::recovery::audit::{self, RecoveryKind};
use omnigraph::recovery::list_pending;
use omnigraph::{Omnigraph, WriteOptions};
use serde_json::Map;

use super::child::{Action, crash_in_child};
use super::{
    CLEANUP_CRASHES, CONTROL_CRASHES, FORK_BOUNDARIES, HIDE_CRASHES, Op, SAGA_BOUNDARIES, SCHEMA_BOUNDARIES,
    TAG_CRASHES, assert_clean, assert_schema_matches, counts, crash, crash_cases_on, serial, setup, setup_on,
    shut_down,
};

/// Points inside the table / branch actors' handlers, crashed during a write.
const ACTOR_CRASHES: [&str; 4] =
    ["table.before_commit", "table.after_commit", "branch.before_publish", "branch.after_publish"];

/// Points only multi-transaction table chains cross (a merge's, a write's
/// that also compacts).
const CHAIN_CRASHES: [&str; 1] = ["chain.between_steps"];

/// Recovery points a roll-back crosses (after a crash that left effects of an Armed write).
const ROLL_BACK_CRASHES: [&str; 7] = [
    "recovery.before_restore",
    "recovery.after_restore",
    "recovery.before_publish",
    "recovery.after_publish",
    "recovery.before_audit",
    "recovery.after_audit",
    "recovery.after_sidecar_delete",
];

/// Recovery points a roll-forward crosses (after a crash of a confirmed write).
const ROLL_FORWARD_CRASHES: [&str; 5] = [
    "recovery.before_publish",
    "recovery.after_publish",
    "recovery.before_audit",
    "recovery.after_audit",
    "recovery.after_sidecar_delete",
];

/// Recovery points only a schema apply's recovery crosses.
const SCHEMA_RECOVERY_CRASHES: [&str; 1] = ["recovery.before_promote"];

/// Every failpoint named at a call site under `src/`: each
/// `saga_failpoint!(kind, "b")` once per saga writer, each `named_failpoint!("n")`.
fn registry() -> BTreeSet<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let saga = regex::Regex::new(r#"saga_failpoint!\([^,]+,\s*"([a-z_]+)"\)"#).expect("regex");
    let named = regex::Regex::new(r#"named_failpoint!\("([a-z_.]+)"\)"#).expect("regex");
    let mut out = BTreeSet::new();
    let mut files = vec![src];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).expect("read dir").map(|e| e.expect("entry").path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        for c in saga.captures_iter(&text) {
            for kind in failpoints::SAGA_WRITERS.into_iter().filter(|k| failpoints::crosses(*k, &c[1])) {
                out.insert(failpoints::name(kind, &c[1]));
            }
        }
        out.extend(named.captures_iter(&text).map(|c| c[1].to_string()));
    }
    out
}

#[test]
fn every_failpoint_in_the_source_has_a_crash_case() {
    let registry = registry();
    // Guard against a scan that finds nothing (a moved tree, a renamed macro).
    assert!(registry.contains("mutation.after_arm") && registry.contains("recovery.before_publish"), "{registry:?}");
    let mut covered: BTreeSet<String> = BTreeSet::new();
    for op in super::OPS {
        for b in SAGA_BOUNDARIES.iter().chain(&FORK_BOUNDARIES).filter(|b| op.crosses(b)) {
            covered.insert(format!("{}.{b}", op.prefix()));
        }
    }
    for b in
        SAGA_BOUNDARIES.iter().chain(&SCHEMA_BOUNDARIES).chain(&FORK_BOUNDARIES).filter(|b| Op::SchemaApply.crosses(b))
    {
        covered.insert(format!("{}.{b}", Op::SchemaApply.prefix()));
    }
    let named = CONTROL_CRASHES
        .iter()
        .chain(&ACTOR_CRASHES)
        .chain(&ROLL_BACK_CRASHES)
        .chain(&ROLL_FORWARD_CRASHES)
        .chain(&CHAIN_CRASHES)
        .chain(&CLEANUP_CRASHES)
        .chain(&TAG_CRASHES)
        .chain(&HIDE_CRASHES)
        .chain(&SCHEMA_RECOVERY_CRASHES);
    covered.extend(named.map(|s| s.to_string()));
    let missing: Vec<&String> = registry.difference(&covered).collect();
    assert!(missing.is_empty(), "failpoints without a crash case: {missing:?}");
    let stale: Vec<&String> = covered.difference(&registry).collect();
    assert!(stale.is_empty(), "crash cases of failpoints no longer in the source: {stale:?}");
    println!("{} failpoints, each with a crash case", registry.len());
}

/// A write dies inside the table actor's commit or the branch actor's publish
/// handler: recovery leaves it invisible or applied, never half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_inside_the_commit_and_publish_handlers_recovers_clean() {
    let _s = serial().await;
    let points: Vec<String> = ACTOR_CRASHES.iter().map(|p| p.to_string()).collect();
    let mut report = Vec::new();
    for (op, branch) in [(Op::MutationInsert, "main"), (Op::LoadOverwrite, "main"), (Op::MutationInsert, "fresh")] {
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("actor handler crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert!(report.iter().filter(|r| r.contains("branch.after_publish")).all(|r| r.ends_with("applied")));
    assert!(report.iter().filter(|r| r.contains("table.before_commit")).all(|r| r.ends_with("invisible")));
}

/// A write dies between two transactions of a table's chain: a merge after
/// its upsert landed, before its delete; a mutation after its insert landed,
/// before the compaction it carries. Recovery accepts the contiguous prefix
/// as the write's own and rolls it back; on a fresh target it removes the
/// fork the write made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_the_transactions_of_a_chain_recovers_clean() {
    let _s = serial().await;
    let points: Vec<String> = CHAIN_CRASHES.iter().map(|p| p.to_string()).collect();
    let mut report = Vec::new();
    for (op, branch) in [(Op::Merge, "main"), (Op::Merge, "fresh"), (Op::CompactingInsert, "main")] {
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("chain crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert!(report.iter().all(|r| r.ends_with("invisible")), "{report:?}");
}

/// A merge whose row conflicts a strategy and a resolution decided dies at
/// every boundary it crosses, on main and into a fresh branch, and between
/// its chains' transactions: recovery leaves it invisible or applies the
/// exact decision (the decided rows ride the merge's own chains). The armed
/// sidecar records the decision.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_decided_merge_recovers_the_exact_decision() {
    let _s = serial().await;
    let op = Op::DecidedMerge;
    let mut report = Vec::new();
    for branch in ["main", "fresh"] {
        let mut points = boundary_points(op, branch);
        points.extend(CHAIN_CRASHES.iter().map(|p| p.to_string()));
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("decided merge crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert_outcomes(
        &report,
        &[
            ("on main @ merge.after_arm", "invisible"),
            ("on main @ merge.after_publish", "applied"),
            ("on fresh @ merge.after_confirm", "applied"),
            ("on main @ chain.between_steps", "invisible"),
        ],
    );

    // The armed sidecar records the decision: the merge is parked just after
    // it armed, its sidecar read, then it finishes.
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, ..) = setup_on(op, "main").await;
    let g = Omnigraph::open(&loc).await.expect("open");
    fail::cfg("merge.after_arm", "1*sleep(3000)").expect("cfg");
    let parked = {
        let g = g.clone();
        tokio::spawn(async move { op.run(&g).await })
    };
    let store = omnigraph::recovery::sidecar::SidecarStore::new(g.root().clone());
    let body = loop {
        let names = list_pending(g.root()).await.expect("list");
        if let Some(name) = names.first()
            && let Some(body) = store.read(name).await.expect("read")
        {
            break body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    parked.await.expect("join").expect("the parked merge finishes");
    fail::remove("merge.after_arm");
    let decision = body.decision.expect("a decided merge's sidecar records its decision");
    assert_eq!(
        (decision.strategy, decision.decided, decision.resolutions, decision.resolutions_digest.len()),
        (Some(omnigraph::MergeStrategy::Theirs), 2, 1, 64)
    );
}

/// A revert (a node and its edges, deleted by the commit, re-inserted)
/// dies at every boundary it crosses, on main and on a fresh branch (whose
/// tables the reverted commit forked), and so do a cherry-pick of such a
/// delete onto main and a reset to the commit before it (on main a new
/// commit, on a fresh branch a head move): recovery leaves each invisible
/// or applied whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_revert_cherry_pick_or_reset_recovers_clean() {
    let _s = serial().await;
    let mut report = Vec::new();
    let cases = [
        (Op::Revert, "main"),
        (Op::Revert, "fresh"),
        (Op::CherryPick, "main"),
        (Op::Reset, "main"),
        (Op::Reset, "fresh"),
    ];
    for (op, branch) in cases {
        // Each table's chain is one insert (no step between transactions),
        // and the reverted commit forked the fresh branch's tables already.
        let points = boundary_points(op, "main");
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("revert, cherry-pick and reset crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert_outcomes(
        &report,
        &[
            ("Revert on main @ merge.after_arm", "invisible"),
            ("Revert on main @ merge.after_publish", "applied"),
            ("CherryPick on main @ merge.after_table_commit", "invisible"),
            ("CherryPick on main @ merge.after_confirm", "applied"),
            ("Reset on fresh @ merge.after_arm", "invisible"),
            ("Reset on fresh @ merge.after_publish", "applied"),
        ],
    );
}

/// Each named case of a crash report (a line containing it) ended as wanted
/// (`invisible` or `applied`).
fn assert_outcomes(report: &[String], cases: &[(&str, &str)]) {
    for (case, want) in cases {
        let got = report.iter().find(|r| r.contains(case));
        assert!(got.is_some_and(|r| r.ends_with(want)), "{case}: want {want}: {report:?}");
    }
}

/// The failpoints of every saga boundary `op` crosses on `branch`, with the
/// fork's on a branch other than main.
fn boundary_points(op: Op, branch: &str) -> Vec<String> {
    let boundaries = SAGA_BOUNDARIES.iter().chain(if branch == "main" { &[][..] } else { &FORK_BOUNDARIES[..] });
    boundaries.filter(|b| op.crosses(b)).map(|b| format!("{}.{b}", op.prefix())).collect()
}

/// Keyed writes on an indexed table, staged from the rows the indexes find
/// (an insert of a new key as an `Append`, an update as one `Update` of a
/// deletion vector and the new row, a delete that cascades to edges as
/// deletion vectors), die at every boundary they cross on main and on a
/// fresh branch: recovery leaves each invisible or applied, like the
/// merge-insert and Lance delete they replace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_keyed_writes_staged_from_the_index_recovers_clean() {
    let _s = serial().await;
    let ops = [(Op::IndexedInsert, "Append"), (Op::IndexedUpdate, "Update"), (Op::IndexedDelete, "Delete")];
    // The shapes under test: the clean run's Person effect, on main and on
    // a branch whose write forks the indexed table.
    for (op, shape) in ops {
        for branch in ["main", "fresh"] {
            let (_dir, loc, ..) = setup_on(op, branch).await;
            let g = Omnigraph::open(&loc).await.expect("open");
            op.run_on(&g, branch).await.expect("clean run");
            let view = omnigraph::engine::manifest::load(g.root(), branch, None).await.expect("view");
            let person = &view.state.tables["node:Person"];
            let ds = omnigraph::engine::committed::open_pinned(g.root(), person).await.expect("open Person");
            let operation = omnigraph::engine::storage::table::operation_at(&ds, person.version).await;
            assert_eq!(operation.expect("operation").as_deref(), Some(shape), "{op:?} on {branch}");
            shut_down(g).await;
        }
    }
    let mut report = Vec::new();
    for (op, _) in ops {
        for branch in ["main", "fresh"] {
            let points = boundary_points(op, branch);
            for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
                report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
            }
        }
    }
    println!("keyed write crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    for op in ["IndexedInsert", "IndexedUpdate", "IndexedDelete"] {
        for (case, want) in [
            ("on main @ mutation.after_arm", "invisible"),
            ("on main @ mutation.after_publish", "applied"),
            ("on fresh @ mutation.after_fork", "invisible"),
        ] {
            let case = format!("{op} {case}");
            assert!(report.iter().any(|r| r.contains(&case) && r.ends_with(want)), "{case} -> {want}: {report:?}");
        }
    }
}

/// A fold of unindexed rows into existing indexes (an `index ensure` that
/// builds nothing) dies at every boundary it crosses on main and on a branch
/// that owns its Person table: recovery leaves it invisible or applied, and
/// the indexes answer every query the same either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_an_index_fold_recovers_clean() {
    let _s = serial().await;
    let op = Op::FoldIndices;
    for branch in ["main", "fresh"] {
        let (_dir, loc, ..) = setup_on(op, branch).await;
        let g = Omnigraph::open(&loc).await.expect("open");
        let report = g.ensure_indices(branch, None).await.expect("clean run");
        let person = report.tables.iter().find(|t| t.type_key == "node:Person").expect("Person");
        assert!(person.built.is_empty() && person.folded.contains(&"id_btree".to_string()), "{report:?}");
        let status = g.index_status(branch).await.expect("status");
        assert!(status.tables.iter().flat_map(|t| &t.indexes).all(|i| i.coverage == 1.0), "{status:?}");
        shut_down(g).await;
    }
    let mut report = Vec::new();
    for branch in ["main", "fresh"] {
        let points: Vec<String> =
            SAGA_BOUNDARIES.iter().filter(|b| op.crosses(b)).map(|b| format!("{}.{b}", op.prefix())).collect();
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("index fold crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    for (case, want) in [
        ("on main @ ensure_indices.after_arm", "invisible"),
        ("on main @ ensure_indices.after_publish", "applied"),
        ("on fresh @ ensure_indices.after_table_commit", "invisible"),
        ("on fresh @ ensure_indices.after_confirm", "applied"),
    ] {
        assert!(report.iter().any(|r| r.contains(case) && r.ends_with(want)), "{case} -> {want}: {report:?}");
    }
}

/// An optimize of a graph an older binary created (each table's chain sets
/// the row lineage config, then compacts on it) dies at every boundary it
/// crosses and between a table's two transactions: recovery leaves it
/// invisible (no table configured, no new commit but a roll-back's) or
/// applied (every table configured under the one maintenance commit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_an_optimize_that_sets_the_lineage_config_recovers_clean() {
    let _s = serial().await;
    let op = Op::OptimizeOlderGraph;
    let points: Vec<String> = SAGA_BOUNDARIES
        .iter()
        .filter(|b| op.crosses(b))
        .map(|b| format!("{}.{b}", op.prefix()))
        .chain(CHAIN_CRASHES.iter().map(|p| p.to_string()))
        .collect();
    let outcomes = crash_cases_on(op, &points, "main").await;
    let report: Vec<String> = points.iter().zip(&outcomes).map(|(p, o)| format!("{op:?} @ {p}: {o}")).collect();
    println!("older-graph optimize crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    for (point, want) in [
        ("optimize.after_arm", "invisible"),
        ("optimize.after_publish", "applied"),
        ("chain.between_steps", "invisible"),
    ] {
        let got = points.iter().position(|p| p == point).map(|i| outcomes[i]);
        assert_eq!(got, Some(want), "{point}: {report:?}");
    }
}

/// A group commit (three members commit, one is refused alone) dies at
/// every boundary of its one saga, on main and as the first write of a
/// fresh branch (forks), and inside the commit and publish handlers:
/// recovery leaves every member visible, each its own commit in one chain,
/// or none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_in_a_group_commit_recovers_every_member_or_none() {
    let _s = serial().await;
    let op = Op::GroupCommit;
    let mut report = Vec::new();
    for branch in ["main", "fresh"] {
        let mut points = boundary_points(op, branch);
        if branch == "main" {
            points.extend(ACTOR_CRASHES.iter().map(|p| p.to_string()));
        }
        for (point, outcome) in points.iter().zip(crash_cases_on(op, &points, branch).await) {
            report.push(format!("{op:?} on {branch} @ {point}: {outcome}"));
        }
    }
    println!("group commit crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert_outcomes(
        &report,
        &[
            ("on main @ mutation.after_arm", "invisible"),
            ("on main @ mutation.after_confirm", "applied"),
            ("on main @ branch.after_publish", "applied"),
            ("on fresh @ mutation.after_fork", "invisible"),
        ],
    );
}

/// Recovery itself dies at each of its points; the next open re-enters it and
/// ends with the same outcome as an uninterrupted recovery, exactly one
/// audit row, and a writable graph.
async fn recovery_crash(op: Op, write_point: &str, recovery_point: &str, kind: RecoveryKind) {
    let (_dir, loc, before, after, committed) = setup(op).await;
    crash(&loc, op, "main", write_point).await;
    let root = omnigraph::engine::storage::Root::parse(&loc).expect("root");
    assert_eq!(list_pending(&root).await.expect("list").len(), 1, "{write_point} left its sidecar");
    let l = loc.clone();
    let point = recovery_point.to_string();
    tokio::task::spawn_blocking(move || crash_in_child(&l, &Action::Open, &point)).await.expect("crash child");

    let context = format!("recovery crashed at {recovery_point} after {write_point}");
    let g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
    assert_clean(&g, &context).await;
    let expected = if kind == RecoveryKind::RolledForward { &after } else { &before };
    assert_eq!(&counts(&g).await, expected, "{context}: wrong outcome");
    assert_schema_matches(&g, op, "main", kind == RecoveryKind::RolledForward, &context).await;
    let history: Vec<String> =
        g.commits("main", None).await.expect("commits").into_iter().map(|c| c.commit_id).collect();
    assert!(committed.iter().all(|c| history.contains(c)), "{context}: a committed commit was rolled back");
    let rows = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(rows.len(), 1, "{context}: expected one audit row, got {rows:?}");
    assert_eq!(rows[0].recovery_kind, kind, "{context}");
    g.mutate(r#"query q() { insert Company { name: "After" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{context}: next write failed: {e}"));
    assert_clean(&g, &format!("{context}, then a write")).await;
    shut_down(g).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_roll_back_is_re_entered_cleanly() {
    let _s = serial().await;
    for point in ROLL_BACK_CRASHES {
        recovery_crash(Op::MutationInsert, "mutation.after_table_commit", point, RecoveryKind::RolledBack).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_roll_forward_is_re_entered_cleanly() {
    let _s = serial().await;
    for point in ROLL_FORWARD_CRASHES {
        recovery_crash(Op::MutationInsert, "mutation.after_confirm", point, RecoveryKind::RolledForward).await;
    }
}

/// Recovery of a confirmed schema apply dies before promoting its schema
/// files (after its roll-forward publish, and when the crash came after the
/// writer's own publish): the next open promotes them, with one audit row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_recovery_promotes_a_schema_is_re_entered_cleanly() {
    let _s = serial().await;
    for write_point in ["schema_apply.after_confirm", "schema_apply.after_publish"] {
        for point in SCHEMA_RECOVERY_CRASHES.iter().chain(&["recovery.after_publish", "recovery.before_audit"]) {
            if write_point.ends_with("after_publish") && *point == "recovery.after_publish" {
                continue; // the commit is visible already: recovery does not publish
            }
            recovery_crash(Op::SchemaApply, write_point, point, RecoveryKind::RolledForward).await;
        }
    }
}

/// Recovery of an unconfirmed schema apply (a new table created, an
/// existing one rewritten) dies while it rolls back: re-entered, it removes
/// the created table and restores the rewritten one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_inside_a_schema_apply_roll_back_is_re_entered_cleanly() {
    let _s = serial().await;
    for point in
        ["recovery.before_restore", "recovery.after_restore", "recovery.before_publish", "recovery.after_audit"]
    {
        recovery_crash(Op::SchemaApply, "schema_apply.after_schema_staging", point, RecoveryKind::RolledBack).await;
    }
}
