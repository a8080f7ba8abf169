//! Maintenance: writes bound a table's small fragments themselves; optimize
//! compacts a long history into few fragments, no query answers differently,
//! time travel still reads the oldest commit, and a second run finds nothing
//! to do; branches compact only what they own; drifted tables are left for
//! repair; the CLI and HTTP surfaces.

use omnigraph::engine::committed::open_pinned;
use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::recovery::{invariants, list_pending};
use omnigraph::{Graph, ReadTarget, WriteOptions};
use serde_json::{Map, Value};

use crate::common::loaded_social_graph;
use crate::content::content;

const PEOPLE: &str = "query people() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }";

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn rows(g: &Graph, target: &ReadTarget) -> Vec<Value> {
    let out = g.query_json(PEOPLE, None, Map::new(), target).await.expect("query");
    out["rows"].as_array().expect("rows").clone()
}

/// `n` one-row commits on `branch`: inserts, with an update and a delete
/// every tenth commit (so deletion files need materialising too).
async fn small_commits(g: &Graph, branch: &str, n: usize) {
    for i in 0..n {
        let src = match i % 10 {
            9 => format!(r#"query q() {{ delete Person where name = "P{}" }}"#, i - 1),
            5 => format!(r#"query q() {{ update Person set {{ age: {} }} where name = "P{}" }}"#, i % 100, i - 1),
            _ => format!(r#"query q() {{ insert Person {{ name: "P{i}", age: 20 }} }}"#),
        };
        g.mutate(&src, None, Map::new(), &on(branch)).await.unwrap_or_else(|e| panic!("commit {i}: {e}"));
    }
}

/// One-row inserts on `branch` until Person holds at least three fragments,
/// so an optimize has neighbours to merge whichever phase of the writes'
/// own compaction sawtooth the commits ended in (two are not enough: the
/// loaded fragment keeps its index coverage, and Lance never merges an
/// indexed fragment with an unindexed one). Returns the commits it made.
async fn leave_something_to_compact(g: &Graph, branch: &str) -> usize {
    for i in 0..=table::COMPACT_ABOVE_SMALL_FRAGMENTS {
        if person_fragments(g, branch).await >= 3 {
            return i;
        }
        let src = format!(r#"query q() {{ insert Person {{ name: "T{i}", age: 30 }} }}"#);
        g.mutate(&src, None, Map::new(), &on(branch)).await.expect("top-up write");
    }
    panic!("Person never reached three fragments on {branch}");
}

/// Fragments of the Person table `branch` pins.
async fn person_fragments(g: &Graph, branch: &str) -> u64 {
    let (tables, _) = fragments(g, branch).await;
    tables.iter().find(|(k, _)| k == "node:Person").map(|t| t.1).expect("Person")
}

/// Fragments of every table `branch` pins, and of its `__manifest`.
async fn fragments(g: &Graph, branch: &str) -> (Vec<(String, u64)>, u64) {
    let view = manifest::load(g.root(), branch, None).await.expect("view");
    let mut tables = Vec::new();
    for (key, entry) in &view.state.tables {
        let ds = open_pinned(g.root(), entry).await.expect("open");
        tables.push((key.clone(), table::fragment_count(&ds)));
    }
    (tables, table::fragment_count(&view.dataset))
}

/// 300 small commits, then optimize: every table and `__manifest` ends with
/// a handful of fragments, every answer is the same, the first commit still
/// reads as it was, and a second optimize commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_compacts_a_long_history_without_changing_an_answer() {
    let (_dir, g) = loaded_social_graph().await;
    // Indexes first: the optimize's own ensure-indices then has nothing to build.
    g.ensure_indices("main", None).await.expect("indexes");
    let first = g.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let first_rows = rows(&g, &ReadTarget::Commit(first.clone())).await;
    let commits_before = g.commits("main", None).await.expect("commits").len();
    small_commits(&g, "main", 300).await;
    let topped_up = leave_something_to_compact(&g, "main").await;
    // The writes themselves bound the fragments (each one past the bound
    // also compacts), without a commit of their own.
    let person_before = person_fragments(&g, "main").await;
    assert!(person_before <= table::COMPACT_ABOVE_SMALL_FRAGMENTS as u64 + 1, "Person has {person_before} fragments");
    assert_eq!(g.commits("main", None).await.expect("commits").len(), commits_before + 300 + topped_up);
    let (content_before, rows_before) = (content(&g, "main").await, rows(&g, &ReadTarget::Branch("main".into())).await);

    let report = g.optimize("main", Some("ops")).await.expect("optimize");
    let commit = report.graph_commit_id.clone().expect("a maintenance commit");
    let person = report.tables.iter().find(|t| t.type_key == "node:Person").expect("Person");
    assert!(person.committed && person.fragments_removed >= 2 && person.fragments_added <= 2, "{report:?}");
    assert_eq!(person.published_dataset_version, person.lance_head_version);
    let (after, manifest_fragments) = fragments(&g, "main").await;
    assert!(after.iter().all(|(_, n)| *n <= 4), "{after:?}");
    assert!(manifest_fragments <= 4, "__manifest has {manifest_fragments} fragments");
    // The 300 commits left a tail outside the indexes: it is folded in
    // before the compaction (its own commit), and the fragments the
    // compaction rewrote after it (one more, published after the
    // `__manifest` compaction the report describes).
    let commit_of = |r: &Option<omnigraph::EnsureIndicesReport>| r.as_ref().and_then(|i| i.graph_commit_id.clone());
    let pre_fold = commit_of(&report.indexes_before).expect("a fold of the 300 rows");
    let fold = commit_of(&report.indexes).expect("a fold of the rewritten fragments");
    assert_eq!(report.manifest.fragments_after + 1, manifest_fragments);
    // The publishes bound `__manifest` themselves, so optimize may find it
    // at any point of that sawtooth; it never leaves more than it found.
    let manifest_bound = omnigraph::actors::branch::MANIFEST_COMPACT_ABOVE as u64 + 1;
    assert!(report.manifest.fragments_before <= manifest_bound, "{:?}", report.manifest);
    assert!(report.manifest.fragments_before >= report.manifest.fragments_after, "{:?}", report.manifest);

    assert_eq!(content(&g, "main").await, content_before);
    assert_eq!(rows(&g, &ReadTarget::Branch("main".into())).await, rows_before);
    assert_eq!(rows(&g, &ReadTarget::Commit(first)).await, first_rows, "time travel to the first commit");
    let head = g.commits("main", Some(3)).await.expect("commits");
    let heads: Vec<_> = head.iter().map(|c| (c.commit_id.as_str(), c.actor.as_deref())).collect();
    assert_eq!(heads, [(fold.as_str(), Some("ops")), (commit.as_str(), Some("ops")), (pre_fold.as_str(), Some("ops"))]);
    assert!(invariants::violations(g.root(), "main").await.expect("check").is_empty());
    assert!(list_pending(g.root()).await.expect("list").is_empty());

    let again = g.optimize("main", None).await.expect("second optimize");
    assert_eq!(again.graph_commit_id, None, "{again:?}");
    assert!(again.tables.iter().all(|t| !t.committed && t.skipped == Some("nothing_to_compact")), "{again:?}");
    g.mutate(r#"query q() { insert Person { name: "After", age: 1 } }"#, None, Map::new(), &on("main"))
        .await
        .expect("writable after optimize");
}

/// A write to a table past the small-fragment bound also compacts it, as
/// the last transaction of its own commit: the fragment count stays bounded
/// through a long run of one-row writes on main and on a branch (whose first
/// write forks the table), every row is there, and no sidecar is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_keep_a_table_s_small_fragments_bounded() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("b", "main").await.expect("branch");
    let bound = table::COMPACT_ABOVE_SMALL_FRAGMENTS as u64 + 1;
    for branch in ["main", "b"] {
        let mut most = 0;
        for i in 0..(3 * bound as usize) {
            let src = format!(r#"query q() {{ insert Person {{ name: "{branch}{i}" }} }}"#);
            g.mutate(&src, None, Map::new(), &on(branch)).await.expect("write");
            most = most.max(person_fragments(&g, branch).await);
        }
        assert!(most <= bound, "{branch}: Person reached {most} fragments");
        let names = rows(&g, &ReadTarget::Branch(branch.into())).await;
        assert_eq!(names.len(), 3 + 3 * bound as usize, "{branch}: every row is there");
        assert!(invariants::violations(g.root(), branch).await.expect("check").is_empty(), "{branch}");
    }
    assert!(list_pending(g.root()).await.expect("list").is_empty());
}

/// On a named branch, optimize compacts only the tables the branch owns (it
/// forked them by writing); the tables it still inherits, and main, stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_on_a_branch_compacts_only_its_own_tables() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("b", "main").await.expect("branch");
    small_commits(&g, "b", 30).await;
    leave_something_to_compact(&g, "b").await;
    let main_before = g.snapshot("main").await.expect("snapshot");
    let content_before = content(&g, "b").await;
    let report = g.optimize("b", None).await.expect("optimize b");
    let keys: Vec<&str> = report.tables.iter().map(|t| t.type_key.as_str()).collect();
    assert_eq!(keys, ["node:Person"], "only the forked table is the branch's own: {report:?}");
    assert!(report.tables[0].committed && report.graph_commit_id.is_some(), "{report:?}");
    assert_eq!(content(&g, "b").await, content_before);
    let main_after = g.snapshot("main").await.expect("snapshot");
    assert_eq!(main_after.head_commit_id, main_before.head_commit_id, "main did not move");
    let (tables, _) = fragments(&g, "b").await;
    assert!(tables.iter().all(|(_, n)| *n <= 4), "{tables:?}");
    for b in ["main", "b"] {
        assert!(invariants::violations(g.root(), b).await.expect("check").is_empty(), "{b}");
    }
}

/// A table whose Lance HEAD moved past its pin with no recovery record is
/// left alone (`drift_needs_repair`); the others are compacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_leaves_a_drifted_table_to_repair() {
    let (_dir, g) = loaded_social_graph().await;
    small_commits(&g, "main", 12).await;
    for i in 0..6 {
        let src = format!(r#"query q() {{ insert Company {{ name: "C{i}" }} }}"#);
        g.mutate(&src, None, Map::new(), &on("main")).await.expect("company");
    }
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let entry = &view.state.tables["node:Company"];
    let ds = table::open_table(&g.root().child_uri(&entry.location), None, None).await.expect("open");
    table::compact(ds, table::Compaction::Full).await.expect("drift").expect("compacted");
    let report = g.optimize("main", None).await.expect("optimize");
    let line = |k: &str| report.tables.iter().find(|t| t.type_key == k).cloned().expect(k);
    let company = line("node:Company");
    assert_eq!(company.skipped, Some("drift_needs_repair"), "{report:?}");
    assert!(company.lance_head_version > company.published_dataset_version);
    assert!(line("node:Person").committed, "{report:?}");
    // Repair classifies the drift as verified maintenance (a compaction)
    // next to optimize's own exact rewrites, and publishes it.
    let repaired = g.repair(true, false).await.expect("repair");
    assert_eq!(repaired.drift.len(), 1, "only Company drifted: {:?}", repaired.drift);
    assert!(repaired.drift[0].maintenance && repaired.published_commit_id.is_some(), "{:?}", repaired.drift);
    assert!(invariants::violations(g.root(), "main").await.expect("check").is_empty());
    let again = g.optimize("main", None).await.expect("optimize after repair");
    assert!(again.tables.iter().all(|t| t.skipped != Some("drift_needs_repair")), "{again:?}");
}

/// `omnigraph optimize --json` and `POST /graphs/{id}/optimize` answer the
/// same fields; an unknown branch is 404 and a bad body 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimize_through_the_cli_and_http() {
    let (_dir, g) = loaded_social_graph().await;
    small_commits(&g, "main", 8).await;
    let loc = g.root().uri().to_string();
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let out = std::process::Command::new(bin).args(["optimize", "--json", "--as", "ci", &loc]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(body["graph_commit_id"].is_string(), "{body}");
    assert_eq!(body["branch"], "main");
    let person = body["tables"].as_array().expect("tables").iter().find(|t| t["type_key"] == "node:Person").cloned();
    let person = person.expect("Person");
    for field in ["fragments_removed", "fragments_added", "published_dataset_version", "lance_head_version"] {
        assert!(person[field].is_u64(), "{field}: {person}");
    }
    assert_eq!(person["committed"], true);
    assert!(body["manifest"]["fragments_after"].is_u64(), "{body}");
    let out = std::process::Command::new(bin).args(["optimize", &loc]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("no table needed compaction"), "{text}");

    use crate::server::{call, post, start};
    let s = start().await;
    for i in 0..4 {
        let q = format!(r#"query q() {{ insert Person {{ name: "H{i}" }} }}"#);
        let (st, v) = post(&s, "/graphs/g/mutate", serde_json::json!({ "query": q })).await;
        assert_eq!(st, 200, "{v}");
    }
    let (st, v) = post(&s, "/graphs/g/optimize", serde_json::json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["graph_commit_id"].is_string() && v["actor_id"].is_string(), "{v}");
    let (st, v, _) = call("POST", &format!("{}/graphs/g/optimize", s.base), Some(crate::server::TOKEN), None).await;
    assert_eq!((st, v["graph_commit_id"].is_null()), (200, true), "an empty body optimizes main: {v}");
    let (st, v) = post(&s, "/graphs/g/optimize", serde_json::json!({ "branch": "nope" })).await;
    assert_eq!(st, 404, "{v}");
    let (st, v) = post(&s, "/graphs/g/optimize", serde_json::json!({ "branches": "main" })).await;
    assert_eq!(st, 400, "{v}");
}

/// Versions of the ref `location` / `branch` (`None` = main).
async fn version_count(g: &Graph, location: &str, branch: Option<&str>) -> usize {
    let ds = table::open_table(&g.root().child_uri(location), branch, None).await.expect("open");
    table::list_versions(&ds).await.expect("versions").len()
}

/// Cleanup keeps exactly what retained commits read: a dry run deletes
/// nothing; the real run removes old versions of `__manifest` and of the
/// tables (main's and a first-touch fork's), every head answers the same,
/// the newest commits and the merge base of a live branch still read as they
/// did, a cleaned commit is refused with an error naming it, the branch still
/// merges, and a second cleanup finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_removes_only_what_no_retained_commit_reads() {
    let (_dir, g) = loaded_social_graph().await;
    let first = g.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let first_rows = rows(&g, &ReadTarget::Commit(first.clone())).await;
    small_commits(&g, "main", 5).await;
    g.branch_create("b", "main").await.expect("branch");
    let base = g.snapshot("b").await.expect("snapshot").head_commit_id.expect("base");
    let base_rows = rows(&g, &ReadTarget::Commit(base.clone())).await;
    for i in 0..3 {
        let src = format!(r#"query q() {{ insert Person {{ name: "B{i}", age: 30 }} }}"#);
        g.mutate(&src, None, Map::new(), &on("b")).await.expect("write on b");
    }
    small_commits(&g, "main", 15).await;
    let newest: Vec<String> =
        g.commits("main", Some(3)).await.expect("commits").into_iter().map(|c| c.commit_id).collect();
    let mut readable = Vec::new();
    for id in newest.iter().chain(std::slice::from_ref(&base)) {
        readable.push((id.clone(), rows(&g, &ReadTarget::Commit(id.clone())).await));
    }
    let b_commits: Vec<String> = g.commits("b", Some(3)).await.expect("b").into_iter().map(|c| c.commit_id).collect();
    let (main_content, b_content) = (content(&g, "main").await, content(&g, "b").await);
    let person = manifest::load(g.root(), "main", None).await.expect("view").state.tables["node:Person"].clone();
    let counts = |g: &Graph| {
        let (g, loc) = (g.clone(), person.location.clone());
        async move {
            (
                version_count(&g, manifest::MANIFEST_DIR, None).await,
                version_count(&g, &loc, None).await,
                version_count(&g, &loc, Some("b")).await,
            )
        }
    };
    let before = counts(&g).await;

    let dry = g.cleanup(Some(3), None, false).await.expect("dry run");
    assert!(dry.dry_run && dry.versions_removed > 0 && dry.removed_commits > 0, "{dry:?}");
    assert_eq!(counts(&g).await, before, "a dry run deletes nothing");
    assert_eq!(rows(&g, &ReadTarget::Commit(first.clone())).await, first_rows, "the first commit still reads");

    let done = g.cleanup(Some(3), None, true).await.expect("cleanup");
    assert!(!done.dry_run, "{done:?}");
    assert_eq!(done.versions_removed, dry.versions_removed, "the dry run said what the run did");
    assert_eq!(done.retained_commits, dry.retained_commits);
    let after = counts(&g).await;
    assert!(after.0 < before.0 && after.1 < before.1, "manifest and Person lost versions: {before:?} -> {after:?}");
    assert!(after.2 <= before.2, "{before:?} -> {after:?}");
    let fork = done.tables.iter().find(|t| t.type_key == "node:Person" && t.table_branch.as_deref() == Some("b"));
    assert!(fork.is_some(), "the first-touch fork is a ref of its own: {done:?}");

    assert_eq!(content(&g, "main").await, main_content);
    assert_eq!(content(&g, "b").await, b_content);
    for (id, expected) in &readable {
        assert_eq!(&rows(&g, &ReadTarget::Commit(id.clone())).await, expected, "retained commit {id}");
    }
    assert_eq!(rows(&g, &ReadTarget::Commit(base.clone())).await, base_rows, "the merge base of b");
    for id in &b_commits {
        rows(&g, &ReadTarget::Commit(id.clone())).await;
    }
    let err = g.query_json(PEOPLE, None, Map::new(), &ReadTarget::Commit(first.clone())).await.expect_err("cleaned");
    assert!(matches!(&err, omnigraph::OmniError::CommitCleaned { commit_id } if *commit_id == first), "{err}");
    assert_eq!(err.http_status(), 410);
    assert!(err.to_string().contains(&first) && err.to_string().contains("cleanup"), "{err}");
    // A revert that would read a cleaned version is gone too, not unknown.
    let child =
        g.commits("main", None).await.expect("commits").into_iter().find(|c| c.parent_commit_id == Some(first.clone()));
    let child = child.expect("the first commit's child").commit_id;
    let err = g.commit_revert(&child, &omnigraph::RevertOptions::default()).await.expect_err("cleaned");
    assert_eq!(err.http_status(), 410, "{err}");
    for b in ["main", "b"] {
        assert!(invariants::violations(g.root(), b).await.expect("check").is_empty(), "{b}");
    }

    let again = g.cleanup(Some(3), None, true).await.expect("again");
    assert_eq!(again.versions_removed, 0, "{again:?}");
    // A looser policy later cannot bring cleaned commits back, and does not fail on them.
    let looser = g.cleanup(Some(10), None, true).await.expect("a looser policy");
    assert_eq!((looser.versions_removed, looser.retained_commits), (0, again.retained_commits), "{looser:?}");
    let merged = g.branch_merge("b", "main", &omnigraph::MergeOptions::default()).await.expect("merge after cleanup");
    assert_eq!(merged.report.outcome, omnigraph::MergeOutcome::Merged, "{:?}", merged.report);
    let main_rows = Value::from(rows(&g, &ReadTarget::Branch("main".into())).await).to_string();
    assert!(main_rows.contains("\"B2\""), "b's rows reached main: {main_rows}");
}

/// Cleanup refuses while a recovery sidecar is pending and deletes nothing;
/// policies are checked before anything is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_refuses_pending_recovery_and_bad_policies() {
    let (_dir, g) = loaded_social_graph().await;
    small_commits(&g, "main", 4).await;
    for (keep, older) in [(None, None), (Some(0), None), (None, Some("7x")), (None, Some("d"))] {
        let err = g.cleanup(keep, older, true).await.expect_err("bad policy");
        assert_eq!(err.http_status(), 400, "{keep:?} {older:?}: {err}");
    }
    let before = version_count(&g, manifest::MANIFEST_DIR, None).await;
    let name = "__recovery/01KPENDINGPENDINGPENDINGPEN.json";
    g.root().put(name, b"{}".to_vec()).await.expect("plant a sidecar");
    let err = g.cleanup(Some(1), None, true).await.expect_err("refused");
    assert!(matches!(err, omnigraph::OmniError::RecoveryRequired { .. }), "{err}");
    assert_eq!(version_count(&g, manifest::MANIFEST_DIR, None).await, before);
    g.root().delete(name).await.expect("remove it");
    assert!(list_pending(g.root()).await.expect("list").is_empty());
    let done = g.cleanup(Some(1), Some("1w"), true).await.expect("cleanup");
    assert_eq!(done.versions_removed, 0, "everything is younger than a week: {done:?}");
    let done = g.cleanup(Some(1), None, true).await.expect("cleanup");
    assert!(done.versions_removed > 0 && done.retained_commits == 1, "{done:?}");
    assert!(done.orphan_forks.is_empty(), "{done:?}");

    // A table fork of a branch that does not exist (what an interrupted
    // branch delete leaves) is reported by a dry run and deleted by a run.
    let person = manifest::load(g.root(), "main", None).await.expect("view").state.tables["node:Person"].clone();
    let uri = g.root().child_uri(&person.location);
    table::create_branch(&uri, None, person.version, "ghost").await.expect("plant a fork");
    let dry = g.cleanup(Some(1), None, false).await.expect("dry run");
    let ghost: Vec<_> =
        dry.orphan_forks.iter().map(|o| (o.type_key.as_str(), o.table_branch.as_str(), o.reclaimed)).collect();
    assert_eq!(ghost, [("node:Person", "ghost", false)], "{dry:?}");
    assert!(table::list_branches(&uri).await.expect("refs").contains_key("ghost"), "a dry run deletes nothing");
    let done = g.cleanup(Some(1), None, true).await.expect("cleanup");
    assert!(done.orphan_forks.iter().all(|o| o.reclaimed) && done.orphan_forks.len() == 1, "{done:?}");
    assert!(!table::list_branches(&uri).await.expect("refs").contains_key("ghost"));
    assert!(invariants::violations(g.root(), "main").await.expect("check").is_empty());
}

/// `omnigraph cleanup` and `POST /graphs/{id}/cleanup`: a dry run unless
/// confirmed, the same fields, 400 on a bad policy or body, and time travel
/// to a cleaned commit is 410 `gone`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_through_the_cli_and_http() {
    let (_dir, g) = loaded_social_graph().await;
    small_commits(&g, "main", 6).await;
    let loc = g.root().uri().to_string();
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().expect("run");
    let out = run(&["cleanup", "--keep", "2", "--json", &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let body: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(body["dry_run"], true, "{body}");
    for field in ["retained_commits", "removed_commits", "versions_removed", "bytes_removed"] {
        assert!(body[field].is_u64(), "{field}: {body}");
    }
    let line = &body["tables"][0];
    for field in ["versions_before", "versions_removed", "bytes_removed", "data_files_removed"] {
        assert!(line[field].is_u64(), "{field}: {line}");
    }
    let out = run(&["cleanup", &loc]);
    assert_eq!(out.status.code(), Some(2), "no policy is a usage error: {}", String::from_utf8_lossy(&out.stderr));
    let out = run(&["cleanup", "--keep", "2", "--confirm", &loc]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("removed") && text.contains("were cleaned"), "{text}");

    use crate::server::{post, start};
    let s = start().await;
    let mut commits = Vec::new();
    for i in 0..4 {
        let q = format!(r#"query q() {{ insert Person {{ name: "H{i}" }} }}"#);
        let (st, v) = post(&s, "/graphs/g/mutate", serde_json::json!({ "query": q })).await;
        assert_eq!(st, 200, "{v}");
        commits.push(v["graph_commit_id"].as_str().expect("commit").to_string());
    }
    for bad in [serde_json::json!({}), serde_json::json!({"keep": 0}), serde_json::json!({"older_than": "soon"})] {
        let (st, v) = post(&s, "/graphs/g/cleanup", bad.clone()).await;
        assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{bad}: {v}");
    }
    let (st, v) = post(&s, "/graphs/g/cleanup", serde_json::json!({"keep": 1, "confirmed": true})).await;
    assert_eq!(st, 400, "unknown fields are refused: {v}");
    let (st, v) = post(&s, "/graphs/g/cleanup", serde_json::json!({"keep": 1})).await;
    assert_eq!((st, v["dry_run"].as_bool()), (200, Some(true)), "{v}");
    let (st, v) = post(&s, "/graphs/g/cleanup", serde_json::json!({"keep": 1, "confirm": true})).await;
    assert_eq!((st, v["dry_run"].as_bool()), (200, Some(false)), "{v}");
    assert!(v["versions_removed"].as_u64().is_some_and(|n| n > 0), "{v}");
    let q = serde_json::json!({ "query": PEOPLE, "commit": commits[0] });
    let (st, v) = post(&s, "/graphs/g/query", q).await;
    assert_eq!((st, v["code"].as_str()), (410, Some("gone")), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains(&commits[0])), "{v}");
    let q = serde_json::json!({ "query": PEOPLE, "commit": commits[3] });
    let (st, v) = post(&s, "/graphs/g/query", q).await;
    assert_eq!(st, 200, "the head commit still reads: {v}");
}

#[tokio::test]
async fn an_open_after_cleanup_still_restores_the_head_checkpoint() {
    let (_dir, g) = loaded_social_graph().await;
    // Commit until the branch actor's __manifest compaction is the latest
    // version: the head's checkpoint is then a few versions back.
    let mut compacted = None;
    for i in 0..20 {
        let src = format!(r#"query q() {{ insert Person {{ name: "cp{i}", age: 1 }} }}"#);
        g.mutate(&src, None, Map::new(), &WriteOptions::default()).await.expect("mutate");
        g.runtime().view("main").await.expect("behind the compaction");
        let full = manifest::load(g.root(), "main", None).await.expect("view");
        if table::operation_at(&full.dataset, full.version).await.expect("op").as_deref() == Some("Rewrite") {
            compacted = Some(full);
            break;
        }
    }
    let full = compacted.expect("the manifest was compacted within 20 commits");
    g.cleanup(Some(1), None, true).await.expect("cleanup");
    let opened = manifest::load_cached(g.root(), "main", &mut None, false).await.expect("open");
    assert_eq!(opened.version, full.version);
    assert!(!opened.state.is_complete(), "cleanup removed the versions leading back to the head's checkpoint");
    assert_eq!(opened.state.tables, full.state.tables);
    assert_eq!(opened.state.heads, full.state.heads);
}

/// A one-column (`id`) batch of `n` ids from `from` on.
fn id_rows(from: usize, n: usize) -> arrow_array::RecordBatch {
    use std::sync::Arc;
    let schema =
        Arc::new(arrow_schema::Schema::new(vec![arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, false)]));
    let ids: Vec<String> = (from..from + n).map(|i| format!("r{i}")).collect();
    arrow_array::RecordBatch::try_new(schema, vec![Arc::new(arrow_array::StringArray::from(ids))]).expect("batch")
}

/// The after-publish `__manifest` compaction rewrites only the recent tail:
/// a settled fragment (past `TAIL_FRAGMENT_ROWS` rows) keeps its id and
/// files, the small ones after it become one, and no row changes.
#[tokio::test]
async fn a_tail_compaction_rewrites_only_the_small_fragments() {
    let dir = crate::scratch::tempdir();
    let uri = dir.path().join("log.lance").to_string_lossy().to_string();
    let settled = table::TAIL_FRAGMENT_ROWS + 100;
    let mut ds = table::create_table(&uri, id_rows(0, settled)).await.expect("create");
    for i in 0..9 {
        let appended = table::append_rows(ds, id_rows(settled + i, 1), Default::default()).await;
        ds = appended.unwrap_or_else(|_| panic!("append {i}")).dataset;
    }
    let first = ds.manifest().fragments[0].clone();
    assert_eq!((table::fragment_count(&ds), table::tail_fragment_count(&ds)), (10, 9));
    let compacted = table::compact(ds, table::Compaction::Below(table::TAIL_FRAGMENT_ROWS))
        .await
        .expect("compact")
        .expect("compacted");
    assert_eq!((table::fragment_count(&compacted), table::tail_fragment_count(&compacted)), (2, 1));
    assert_eq!(compacted.manifest().fragments[0], first, "the settled fragment was rewritten");
    assert_eq!(table::row_count(&compacted).await.expect("count"), settled as u64 + 9);
}

/// `__manifest`'s tiers: settled tail-sized fragments are left alone until
/// more than the next tier allows exist, then merged into fragments of that
/// tier's size, with no row changed; the policy the branch actor applies
/// after a publish ([`omnigraph::actors::branch::MANIFEST_TIERS`]).
#[tokio::test]
async fn settled_manifest_fragments_merge_at_the_next_tier() {
    use omnigraph::actors::branch::MANIFEST_TIERS;

    let dir = crate::scratch::tempdir();
    let uri = dir.path().join("log.lance").to_string_lossy().to_string();
    let settled = table::TAIL_FRAGMENT_ROWS;
    let bound = MANIFEST_TIERS[1].max_small;
    let mut ds = table::create_table(&uri, id_rows(0, settled)).await.expect("create");
    for i in 1..bound {
        let appended = table::append_rows(ds, id_rows(i * settled, settled), Default::default()).await;
        ds = appended.unwrap_or_else(|_| panic!("append {i}")).dataset;
    }
    assert_eq!(table::tier_due(&ds, &MANIFEST_TIERS), None, "{bound} settled fragments are within the bound");
    let appended = table::append_rows(ds, id_rows(bound * settled, settled), Default::default()).await;
    let ds = appended.unwrap_or_else(|_| panic!("the last append")).dataset;
    let scope = table::tier_due(&ds, &MANIFEST_TIERS).expect("the settled tier is due");
    assert_eq!(scope, table::Compaction::Below(MANIFEST_TIERS[1].target_rows));
    let compacted = table::compact(ds, scope).await.expect("compact").expect("compacted");
    let total = (bound + 1) * settled;
    let merged = table::fragment_count(&compacted) as usize;
    assert!(merged <= total.div_ceil(MANIFEST_TIERS[1].target_rows), "{} fragments became {merged}", bound + 1);
    assert_eq!(table::row_count(&compacted).await.expect("count"), total as u64);
    assert_eq!(table::tier_due(&compacted, &MANIFEST_TIERS), None);
}

/// Each delta index fold covers the small fragments of its time with a
/// segment of its own, so Lance can never merge them with later ones: a
/// write counts only the small neighbours one compaction could merge
/// before it plans one, or every write after a few folds would.
#[tokio::test]
async fn small_fragments_an_index_fold_left_behind_do_not_make_writes_compact() {
    use omnigraph::engine::lang::catalog::indexes::{IndexKind, IndexSpec};
    use omnigraph::engine::storage::TxnIdentity;
    use omnigraph::engine::storage::index_fold::FoldDepth;

    let dir = crate::scratch::tempdir();
    let uri = dir.path().join("t.lance").to_string_lossy().to_string();
    let spec = IndexSpec { column: "id".into(), kind: IndexKind::Btree };
    let mut ds = table::create_table(&uri, id_rows(0, table::SMALL_FRAGMENT_ROWS)).await.expect("create");
    let mut next = table::SMALL_FRAGMENT_ROWS;
    let mut append = |ds, n| {
        let from = next;
        next += n;
        let batch = id_rows(from, n);
        async move { table::append_rows(ds, batch, Default::default()).await.unwrap_or_else(|_| panic!("append")).dataset }
    };
    for fold in 0..=table::COMPACT_ABOVE_SMALL_FRAGMENTS {
        ds = append(ds, 100).await;
        let identity = TxnIdentity::mint(ds.version().version);
        let staged = table::stage_indices(ds.clone(), std::slice::from_ref(&spec), FoldDepth::Delta, &identity.uuid)
            .await
            .expect("stage fold")
            .unwrap_or_else(|| panic!("fold {fold} had a tail to cover"));
        ds = table::commit_exact(staged).await.expect("fold").dataset;
    }
    let small =
        ds.manifest().fragments.iter().filter(|f| f.physical_rows.is_some_and(|n| n < table::SMALL_FRAGMENT_ROWS));
    assert!(small.count() > table::COMPACT_ABOVE_SMALL_FRAGMENTS, "the folds left their small fragments behind");
    // Two new small fragments could merge, but with the stranded ones they
    // are not past the bound that one compaction's run must pass.
    for _ in 0..2 {
        ds = append(ds, 1).await;
    }
    assert!(!table::needs_compaction(&ds).await.expect("plan"), "stranded fragments made a two-fragment tail compact");
    for _ in 2..table::COMPACT_ABOVE_SMALL_FRAGMENTS {
        ds = append(ds, 1).await;
    }
    assert!(!table::needs_compaction(&ds).await.expect("plan"), "a tail within the bound");
    ds = append(ds, 1).await;
    assert!(table::needs_compaction(&ds).await.expect("plan"), "a tail past the bound compacts");
}

/// Inline row lineage bytes of the Lance manifests a branch's head reads:
/// Person's (at its pin) and `__manifest`'s.
async fn inline_lineage(g: &Graph) -> (u64, u64) {
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let person = open_pinned(g.root(), &view.state.tables["node:Person"]).await.expect("open");
    (table::inline_lineage_bytes(&person), table::inline_lineage_bytes(&view.dataset))
}

/// Whether every table `main` pins, and its `__manifest`, carries the row
/// lineage config.
async fn lineage_configured(g: &Graph) -> Vec<(String, bool)> {
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let mut out = vec![("__manifest".to_string(), table::has_lineage_config(&view.dataset))];
    for (key, entry) in &view.state.tables {
        let ds = open_pinned(g.root(), entry).await.expect("open");
        out.push((key.clone(), table::has_lineage_config(&ds)));
    }
    out
}

/// `n` one-row inserts of new people, named from `from` on.
async fn new_people(g: &Graph, from: usize, n: usize) {
    for i in from..from + n {
        let src = format!(r#"query q() {{ insert Person {{ name: "N{i}", age: 20 }} }}"#);
        g.mutate(&src, None, Map::new(), &on("main")).await.unwrap_or_else(|e| panic!("insert {i}: {e}"));
    }
}

/// A compaction moves the row lineage it merges (a run of about 10 bytes
/// per commit that wrote the rows, in each of two version sequences) out of
/// the manifest, which every open reads and every commit rewrites. After
/// 200 one-row inserts and an optimize, Person's and `__manifest`'s manifests
/// hold under 1 KiB of lineage; a graph as older binaries created it (no
/// lineage config) holds kilobytes after the same writes, which shows the
/// measure sees it. Its first optimize sets the config and compacts on it:
/// its lineage leaves the manifests too, with the same answers and time
/// travel to the first commit intact, and a second optimize finds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_keep_row_lineage_out_of_their_manifests() {
    let (_dir, g) = crate::common::social_graph().await;
    assert!(lineage_configured(&g).await.iter().all(|(_, set)| *set), "{:?}", lineage_configured(&g).await);
    new_people(&g, 0, 200).await;
    g.optimize("main", None).await.expect("optimize");
    let current = inline_lineage(&g).await;
    assert!(current.0 < 1024 && current.1 < 1024, "inline lineage (Person, __manifest): {current:?}");

    let (_old_dir, loc) = crate::common::temp_graph_dir();
    let root = omnigraph::engine::storage::Root::parse(&loc).expect("root");
    omnigraph::engine::init::init_without_lineage_config(&root, crate::common::SOCIAL_PG).await.expect("init");
    let old = omnigraph::Omnigraph::open(&loc).await.expect("open");
    let configured = lineage_configured(&old).await;
    assert!(configured.iter().all(|(_, set)| !*set), "{configured:?}");
    let first = old.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let first_rows = rows(&old, &ReadTarget::Commit(first.clone())).await;
    new_people(&old, 0, 200).await;
    leave_something_to_compact(&old, "main").await;
    let inline = inline_lineage(&old).await;
    assert!(inline.0 > 2048, "Person keeps its lineage inline without the config: {inline:?}");
    let (content_before, rows_before) =
        (content(&old, "main").await, rows(&old, &ReadTarget::Branch("main".into())).await);
    let report = old.optimize("main", None).await.expect("optimize");
    let person = report.tables.iter().find(|t| t.type_key == "node:Person").expect("Person");
    assert!(person.committed && person.fragments_removed >= 2 && person.fragments_added == 1, "{report:?}");
    assert!(report.tables.iter().all(|t| t.committed), "every table gets the config: {report:?}");
    let configured = lineage_configured(&old).await;
    assert!(configured.iter().all(|(_, set)| *set), "{configured:?}");
    let migrated = inline_lineage(&old).await;
    assert!(migrated.0 < 1024 && migrated.1 < 1024, "inline lineage after the migration: {migrated:?}");
    assert_eq!(content(&old, "main").await, content_before);
    assert_eq!(rows(&old, &ReadTarget::Branch("main".into())).await, rows_before);
    assert_eq!(rows(&old, &ReadTarget::Commit(first)).await, first_rows, "time travel to the first commit");
    assert!(invariants::violations(old.root(), "main").await.expect("check").is_empty());
    assert!(list_pending(old.root()).await.expect("list").is_empty());
    let again = old.optimize("main", None).await.expect("second optimize");
    assert_eq!(again.graph_commit_id, None, "the config is set once: {again:?}");
}

/// A table's latest version is asked by name (its next manifest absent, its
/// own unchanged), not by listing its versions: still true on a handle
/// nobody committed past, false once another handle commits, and
/// `latest_version` answers the same either way.
#[tokio::test]
async fn a_handle_knows_by_name_whether_it_is_still_the_latest_version() {
    let dir = crate::scratch::tempdir();
    let uri = dir.path().join("t.lance").to_string_lossy().to_string();
    let created = table::create_table(&uri, id_rows(0, 1)).await.expect("create");
    let committed = table::append_rows(created, id_rows(1, 1), Default::default()).await;
    let mine = committed.unwrap_or_else(|_| panic!("append")).dataset;
    assert!(table::still_latest(&mine).await, "the committing handle is the latest");
    let other = table::open_table(&uri, None, None).await.expect("open");
    assert!(table::still_latest(&other).await, "an open at latest is the latest");
    let theirs = table::append_rows(other, id_rows(2, 1), Default::default()).await;
    let theirs = theirs.unwrap_or_else(|_| panic!("append")).dataset;
    assert!(!table::still_latest(&mine).await, "another handle committed past it");
    assert_eq!(table::latest_version(&mine).await.expect("latest"), theirs.version().version);
    assert!(table::still_latest(&theirs).await);
    assert_eq!(table::latest_version(&theirs).await.expect("latest"), theirs.version().version);
}
