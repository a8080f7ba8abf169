//! Branch merge: the truth table of one change on each side, every conflict
//! kind, nested branches, edges with their endpoints, parallel merges, dry
//! runs, and the CLI and HTTP surfaces.

use omnigraph::engine::manifest;
use omnigraph::recovery::{invariants, list_pending};
use omnigraph::{ConflictKind, Graph, MergeOptions, MergeOutcome, OmniError, WriteOptions};
use serde_json::Map;

use crate::common::loaded_social_graph;

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn mutate(g: &Graph, branch: &str, src: &str) {
    g.mutate(src, None, Map::new(), &on(branch)).await.unwrap_or_else(|e| panic!("{src} on {branch}: {e}"));
}

/// One change a branch makes (on the example graph: Alice, Bob, Carol, Acme;
/// Knows Alice→Bob and Bob→Carol; WorksAt Alice→Acme and Carol→Acme).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Noop,
    AddEve30,
    AddEve31,
    RemoveCarol,
    SetBobAge40,
    SetBobAge41,
    SetCarolAge50,
    AddEdgeCarolAlice,
    RemoveAliceEdges,
    NetZero,
}

const CHANGES: [Change; 10] = [
    Change::Noop,
    Change::AddEve30,
    Change::AddEve31,
    Change::RemoveCarol,
    Change::SetBobAge40,
    Change::SetBobAge41,
    Change::SetCarolAge50,
    Change::AddEdgeCarolAlice,
    Change::RemoveAliceEdges,
    Change::NetZero,
];

impl Change {
    async fn apply(self, g: &Graph, branch: &str) {
        let statements: &[&str] = match self {
            Change::Noop => &[],
            Change::AddEve30 => &[r#"query q() { insert Person { name: "Eve", age: 30 } }"#],
            Change::AddEve31 => &[r#"query q() { insert Person { name: "Eve", age: 31 } }"#],
            Change::RemoveCarol => &[r#"query q() { delete Person where name = "Carol" }"#],
            Change::SetBobAge40 => &[r#"query q() { update Person set { age: 40 } where name = "Bob" }"#],
            Change::SetBobAge41 => &[r#"query q() { update Person set { age: 41 } where name = "Bob" }"#],
            Change::SetCarolAge50 => &[r#"query q() { update Person set { age: 50 } where name = "Carol" }"#],
            Change::AddEdgeCarolAlice => &[r#"query q() { insert Knows { from: "Carol", to: "Alice" } }"#],
            Change::RemoveAliceEdges => &[r#"query q() { delete Knows where from = "Alice" }"#],
            Change::NetZero => &[
                r#"query q() { insert Person { name: "Zed", age: 5 } }"#,
                r#"query q() { delete Person where name = "Zed" }"#,
            ],
        };
        for s in statements {
            mutate(g, branch, s).await;
        }
    }
}

/// What merging a source change into a target change must give.
#[derive(Debug, PartialEq)]
enum Expect {
    UpToDate,
    /// A fast-forward or a merge whose result equals both changes applied in turn.
    Outcome(MergeOutcome),
    Conflict(ConflictKind),
}

fn expected(source: Change, target: Change) -> Expect {
    use Change::*;
    match (source, target) {
        (Noop, _) => Expect::UpToDate,
        (_, Noop) => Expect::Outcome(MergeOutcome::FastForward),
        (AddEve30, AddEve31) | (AddEve31, AddEve30) => Expect::Conflict(ConflictKind::DivergentInsert),
        (SetBobAge40, SetBobAge41) | (SetBobAge41, SetBobAge40) => Expect::Conflict(ConflictKind::DivergentUpdate),
        (RemoveCarol, SetCarolAge50) | (SetCarolAge50, RemoveCarol) => Expect::Conflict(ConflictKind::DeleteVsUpdate),
        (RemoveCarol, AddEdgeCarolAlice) | (AddEdgeCarolAlice, RemoveCarol) => {
            Expect::Conflict(ConflictKind::OrphanEdge)
        }
        _ => Expect::Outcome(MergeOutcome::Merged),
    }
}

use crate::content::content;

async fn assert_clean(g: &Graph, branch: &str) {
    let v = invariants::violations(g.root(), branch).await.expect("check");
    assert!(v.is_empty(), "{branch}: {v:?}");
}

/// The 10 × 10 truth table: each cell puts one change on a source branch and
/// one on a target branch (both from main), merges source into target and
/// checks the outcome, and for every non-conflict the merged graph against
/// an oracle branch that applied both changes one after the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_merge_truth_table_of_one_change_per_side() {
    let mut cells = 0;
    for (i, s) in CHANGES.iter().enumerate() {
        // A graph per source change: a row's 30 branches, not the table's 300.
        let (_dir, g) = loaded_social_graph().await;
        for (j, t) in CHANGES.iter().enumerate() {
            let (src, dst, oracle) = (format!("s{i}x{j}"), format!("t{i}x{j}"), format!("o{i}x{j}"));
            for b in [&src, &dst, &oracle] {
                g.branch_create(b, "main").await.expect("branch");
            }
            s.apply(&g, &src).await;
            t.apply(&g, &dst).await;
            if matches!(expected(*s, *t), Expect::Outcome(_)) {
                s.apply(&g, &oracle).await;
                t.apply(&g, &oracle).await;
            }
            let before = content(&g, &dst).await;
            let cell = format!("source {s:?} into target {t:?}");
            let got = g.branch_merge(&src, &dst, &MergeOptions::default()).await;
            match (expected(*s, *t), got) {
                (Expect::UpToDate, Ok(r)) => {
                    assert_eq!(r.report.outcome, MergeOutcome::AlreadyUpToDate, "{cell}");
                    assert!(r.report.graph_commit_id.is_none(), "{cell}: an up-to-date merge writes nothing");
                    assert_eq!(content(&g, &dst).await, before, "{cell}");
                }
                (Expect::Outcome(outcome), Ok(r)) => {
                    assert_eq!(r.report.outcome, outcome, "{cell}");
                    let commit = r.report.graph_commit_id.clone().expect("a merge commit");
                    let head = &g.commits(&dst, Some(1)).await.expect("commits")[0];
                    assert_eq!(head.commit_id, commit, "{cell}");
                    assert_eq!(
                        head.merged_parent_commit_id.as_deref(),
                        Some(r.report.source_commit_id.as_str()),
                        "{cell}"
                    );
                    assert_eq!(content(&g, &dst).await, content(&g, &oracle).await, "{cell}: merged graph");
                }
                (Expect::Conflict(kind), Err(OmniError::MergeConflicts(set))) => {
                    let conflicts = &set.conflicts;
                    assert!(conflicts.iter().any(|c| c.kind == kind), "{cell}: {conflicts:?}");
                    assert_eq!(content(&g, &dst).await, before, "{cell}: a refused merge writes nothing");
                }
                (want, got) => panic!("{cell}: expected {want:?}, got {got:?}"),
            }
            assert_clean(&g, &dst).await;
            assert!(list_pending(g.root()).await.expect("list").is_empty(), "{cell}: a sidecar was left");
            cells += 1;
        }
    }
    assert_eq!(cells, 100);
}

/// What a decided conflict cell adds on top of the target's change:
/// `theirs` takes the source's side of the conflicting entity, and under
/// either strategy the source's changes that do not conflict are merged as
/// always (deleting Carol on the source deleted her edges, which the target
/// left alone). `None` where a strategy cannot decide (a conflict from
/// validating the merged result).
fn decided_fix(source: Change, target: Change, theirs: bool) -> Option<Vec<&'static str>> {
    use Change::*;
    let carol_edges =
        [r#"query q() { delete Knows where to = "Carol" }"#, r#"query q() { delete WorksAt where from = "Carol" }"#];
    let fix: Vec<&str> = match (source, target) {
        (AddEve30, AddEve31) => vec![r#"query q() { update Person set { age: 30 } where name = "Eve" }"#],
        (AddEve31, AddEve30) => vec![r#"query q() { update Person set { age: 31 } where name = "Eve" }"#],
        (SetBobAge40, SetBobAge41) => vec![r#"query q() { update Person set { age: 40 } where name = "Bob" }"#],
        (SetBobAge41, SetBobAge40) => vec![r#"query q() { update Person set { age: 41 } where name = "Bob" }"#],
        (RemoveCarol, SetCarolAge50) if theirs => vec![r#"query q() { delete Person where name = "Carol" }"#],
        (RemoveCarol, SetCarolAge50) => return Some(carol_edges.to_vec()),
        (SetCarolAge50, RemoveCarol) => {
            vec![r#"query q() { insert Person { name: "Carol", age: 50, role: "manager" } }"#]
        }
        _ => return None,
    };
    Some(if theirs { fix } else { vec![] })
}

/// The truth table's conflict cells under `--strategy ours` and `theirs`:
/// each row conflict is decided for one side in one merge commit (checked
/// against an oracle branch), an orphaned edge is refused under both, and a
/// divergent update keeps the properties only one side changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_truth_tables_conflict_cells_under_ours_and_theirs() {
    let (_dir, g) = loaded_social_graph().await;
    let with = |strategy| MergeOptions { strategy: Some(strategy), ..MergeOptions::default() };
    let mut cells = 0;
    for (i, s) in CHANGES.iter().enumerate() {
        for (j, t) in CHANGES.iter().enumerate() {
            let Expect::Conflict(kind) = expected(*s, *t) else { continue };
            for strategy in [omnigraph::MergeStrategy::Ours, omnigraph::MergeStrategy::Theirs] {
                let name = format!("{i}x{j}{}", strategy.as_str());
                let (src, dst, oracle) = (format!("s{name}"), format!("t{name}"), format!("o{name}"));
                for b in [&src, &dst, &oracle] {
                    g.branch_create(b, "main").await.expect("branch");
                }
                s.apply(&g, &src).await;
                t.apply(&g, &dst).await;
                t.apply(&g, &oracle).await;
                let cell = format!("source {s:?} into target {t:?} under {strategy:?}");
                let before = content(&g, &dst).await;
                let got = g.branch_merge(&src, &dst, &with(strategy)).await;
                let theirs = strategy == omnigraph::MergeStrategy::Theirs;
                let Some(fix) = decided_fix(*s, *t, theirs) else {
                    let err = got.expect_err(&cell);
                    assert!(
                        matches!(&err, OmniError::MergeConflicts(set) if set.conflicts.iter().all(|c| c.kind == kind)),
                        "{cell}: {err}"
                    );
                    assert_eq!(content(&g, &dst).await, before, "{cell}: a refused merge writes nothing");
                    continue;
                };
                for q in fix {
                    mutate(&g, &oracle, q).await;
                }
                let r = got.unwrap_or_else(|e| panic!("{cell}: {e}"));
                assert_eq!((r.report.outcome, r.report.conflicts_decided), (MergeOutcome::Merged, 1), "{cell}");
                let head = &g.commits(&dst, Some(1)).await.expect("commits")[0];
                assert_eq!(Some(&head.commit_id), r.report.graph_commit_id.as_ref(), "{cell}: one merge commit");
                assert_eq!(content(&g, &dst).await, content(&g, &oracle).await, "{cell}: merged graph");
                assert_clean(&g, &dst).await;
                cells += 1;
            }
        }
    }
    assert_eq!(cells, 12, "6 row-conflict cells under two strategies");

    // Property by property: both set Bob's age; only the source his email,
    // only the target his role.
    for (strategy, age) in [(omnigraph::MergeStrategy::Ours, 41), (omnigraph::MergeStrategy::Theirs, 40)] {
        let (src, dst) = (format!("ps{}", strategy.as_str()), format!("pt{}", strategy.as_str()));
        g.branch_create(&src, "main").await.expect("branch");
        g.branch_create(&dst, "main").await.expect("branch");
        mutate(&g, &src, r#"query q() { update Person set { age: 40, email: "bob@new.example" } where name = "Bob" }"#)
            .await;
        mutate(&g, &dst, r#"query q() { update Person set { age: 41, role: "engineer" } where name = "Bob" }"#).await;
        let r = g.branch_merge(&src, &dst, &with(strategy)).await.expect("decided");
        assert_eq!(r.report.conflicts_decided, 1);
        let q = r#"query q() { match { $p: Person { name: "Bob" } } return { $p.age, $p.email, $p.role } }"#;
        let target = omnigraph::ReadTarget::Branch(dst.clone());
        let bob = g.query(q, None, Map::new(), &target).await.expect("query");
        let row = omnigraph::result_rows(&bob);
        assert_eq!(
            (&row[0]["p.age"], &row[0]["p.email"], &row[0]["p.role"]),
            (&serde_json::json!(age), &serde_json::json!("bob@new.example"), &serde_json::json!("engineer")),
            "{strategy:?}: {row:?}"
        );
    }
}

/// A branch of a branch merges into its parent, then the parent into main;
/// each merge is one commit with the merged head as second parent, and a
/// fast-forward is still a new commit on the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_branches_merge_into_their_parent_then_main() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("team", "main").await.expect("team");
    mutate(&g, "team", r#"query q() { insert Person { name: "Tess", age: 33 } }"#).await;
    g.branch_create("team-alice", "team").await.expect("nested");
    mutate(&g, "team-alice", r#"query q() { insert Knows { from: "Tess", to: "Alice" } }"#).await;
    mutate(&g, "team-alice", r#"query q() { update Person set { age: 32 } where name = "Alice" }"#).await;
    mutate(&g, "main", r#"query q() { insert Company { name: "Initech" } }"#).await;

    let into_team = g.branch_merge("team-alice", "team", &MergeOptions::default()).await.expect("into team");
    assert_eq!(into_team.report.outcome, MergeOutcome::FastForward);
    let team_head = g.commits("team", Some(1)).await.expect("commits")[0].clone();
    assert_eq!(team_head.merged_parent_commit_id.as_deref(), Some(into_team.report.source_commit_id.as_str()));
    assert_ne!(team_head.commit_id, into_team.report.source_commit_id, "a fast-forward is a new commit");

    let into_main = g.branch_merge("team", "main", &MergeOptions::default()).await.expect("into main");
    assert_eq!(into_main.report.outcome, MergeOutcome::Merged);
    let src = "query q() { match { $a: Person $a knows $b } return { $a.name, $b.name } order { $a.name asc } }";
    let r = g.query(src, None, Map::new(), &omnigraph::ReadTarget::Branch("main".into())).await.expect("query");
    let pairs: Vec<String> = omnigraph::result_rows(&r)
        .iter()
        .map(|row| format!("{}>{}", row["a.name"].as_str().unwrap_or(""), row["b.name"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(pairs, ["Alice>Bob", "Bob>Carol", "Tess>Alice"]);
    let names = content(&g, "main").await["node:Company"].len();
    assert_eq!(names, 2, "main kept its own change (Initech) beside the merged ones");
    for b in ["main", "team", "team-alice"] {
        assert_clean(&g, b).await;
    }
    // Merging again changes nothing.
    let again = g.branch_merge("team", "main", &MergeOptions::default()).await.expect("again");
    assert_eq!(again.report.outcome, MergeOutcome::AlreadyUpToDate);
    // After the merge, the merged branches can go; main keeps the data.
    let before = content(&g, "main").await;
    g.branch_delete("team-alice").await.expect("delete nested");
    g.branch_delete("team").await.expect("delete team");
    assert_eq!(content(&g, "main").await, before);
    assert_clean(&g, "main").await;
}

/// A merge into a branch whose tables the source changed and the target did
/// not adopts the source's published versions: no data is rewritten.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_merged_into_a_branch_adopts_unchanged_tables_by_pointer() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    mutate(&g, "feature", r#"query q() { insert Company { name: "Initech" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#).await;
    let r = g.branch_merge("main", "feature", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.report.outcome, MergeOutcome::Merged);
    let person = r.report.tables.iter().find(|t| t.table_key == "node:Person").expect("person merged");
    assert!(person.adopted, "{:?}", r.report.tables);
    assert_eq!(person.inserted, 1);
    let snap = g.snapshot("feature").await.expect("snapshot");
    let main_snap = g.snapshot("main").await.expect("snapshot");
    let pin = |s: &omnigraph::Snapshot, k: &str| {
        let t = s.tables.iter().find(|t| t.table_key == k).expect("table");
        (t.table_branch.clone(), t.version)
    };
    assert_eq!(pin(&snap, "node:Person"), pin(&main_snap, "node:Person"), "the pointer is main's version");
    assert_eq!(content(&g, "feature").await["node:Company"].len(), 2);
    assert_clean(&g, "feature").await;
}

/// Edges arrive with their endpoints, and the rules of the merged graph hold:
/// `@unique` across both sides and `@card` per source node are conflicts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_results_keep_unique_and_cardinality_rules() {
    let (_dir, g) = loaded_social_graph().await;
    for b in ["a", "b", "c", "d"] {
        g.branch_create(b, "main").await.expect("branch");
    }
    mutate(&g, "a", r#"query q() { insert Person { name: "Dan", email: "same@example.com" } }"#).await;
    mutate(&g, "b", r#"query q() { insert Person { name: "Eve", email: "same@example.com" } }"#).await;
    let err = g.branch_merge("a", "b", &MergeOptions::default()).await.expect_err("unique");
    assert_kinds(&err, &[ConflictKind::UniqueViolation]);

    mutate(&g, "c", r#"query q() { insert WorksAt { from: "Bob", to: "Acme" } }"#).await;
    mutate(
        &g,
        "d",
        r#"query q() { insert Company { name: "Initech" } insert WorksAt { from: "Bob", to: "Initech" } }"#,
    )
    .await;
    let err = g.branch_merge("c", "d", &MergeOptions::default()).await.expect_err("card");
    assert_kinds(&err, &[ConflictKind::CardinalityViolation]);

    // A node and its edges in one merge: the edge's endpoint arrives with it.
    g.branch_create("e", "main").await.expect("branch");
    mutate(&g, "e", r#"query q() { insert Person { name: "Finn" } insert Knows { from: "Finn", to: "Bob" } }"#).await;
    let r = g.branch_merge("e", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(r.report.outcome, MergeOutcome::FastForward);
    assert_eq!(content(&g, "main").await["edge:Knows"].len(), 3);
    assert_clean(&g, "main").await;
}

fn assert_kinds(err: &OmniError, kinds: &[ConflictKind]) {
    let OmniError::MergeConflicts(set) = err else { panic!("expected merge conflicts, got {err}") };
    let conflicts = &set.conflicts;
    let mut got: Vec<ConflictKind> = conflicts.iter().map(|c| c.kind).collect();
    got.sort();
    let mut want = kinds.to_vec();
    want.sort();
    assert_eq!(got, want, "{conflicts:?}");
    assert_eq!(err.http_status(), 409);
    let body = err.to_json();
    assert_eq!(body["code"], "conflict");
    assert_eq!(body["merge_conflicts"].as_array().map(Vec::len), Some(kinds.len()), "{body}");
}

/// Every conflict is reported together, and a dry run reports the outcome
/// and counts without writing a sidecar or a commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_conflicts_are_reported_together_and_a_dry_run_writes_nothing() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("x", "main").await.expect("branch");
    mutate(&g, "x", r#"query q() { update Person set { age: 1 } where name = "Bob" }"#).await;
    mutate(&g, "x", r#"query q() { insert Person { name: "Eve", age: 1 } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 2 } where name = "Bob" }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Eve", age: 2 } }"#).await;
    let head = g.commits("main", Some(1)).await.expect("commits")[0].commit_id.clone();
    let dry = MergeOptions { dry_run: true, ..MergeOptions::default() };
    let err = g.branch_merge("x", "main", &dry).await.expect_err("conflicts");
    assert_kinds(&err, &[ConflictKind::DivergentInsert, ConflictKind::DivergentUpdate]);
    // Each row conflict carries its values: `ours` the target's, `theirs`
    // the source's, `base` the merge base's; an update per property.
    let body = err.to_json();
    let of =
        |kind: &str| body["merge_conflicts"].as_array().and_then(|a| a.iter().find(|c| c["kind"] == kind)).cloned();
    let update = of("divergent_update").expect("update");
    let values = |c: &serde_json::Value, f: &str| (c["base"][f].clone(), c["ours"][f].clone(), c["theirs"][f].clone());
    assert_eq!(update["property"], "age", "{update}");
    assert_eq!(
        (update["base"].clone(), update["ours"].clone(), update["theirs"].clone()),
        (27.into(), 2.into(), 1.into())
    );
    let insert = of("divergent_insert").expect("insert");
    assert!(insert.get("property").is_none(), "{insert}");
    assert_eq!(values(&insert, "age"), (serde_json::Value::Null, 2.into(), 1.into()), "{insert}");
    assert_eq!((insert["ours"]["id"].clone(), insert["theirs"]["id"].clone()), ("Eve".into(), "Eve".into()));
    let err = g.branch_merge("x", "main", &MergeOptions::default()).await.expect_err("conflicts");
    assert_kinds(&err, &[ConflictKind::DivergentInsert, ConflictKind::DivergentUpdate]);
    assert_eq!(g.commits("main", Some(1)).await.expect("commits")[0].commit_id, head);

    g.branch_create("y", "main").await.expect("branch");
    mutate(&g, "y", r#"query q() { insert Person { name: "Gus", age: 3 } }"#).await;
    mutate(&g, "y", r#"query q() { delete Person where name = "Carol" }"#).await;
    let r = g.branch_merge("y", "main", &dry).await.expect("dry run");
    assert!(r.report.dry_run && r.report.graph_commit_id.is_none());
    assert_eq!(r.report.outcome, MergeOutcome::FastForward);
    let person = r.report.tables.iter().find(|t| t.table_key == "node:Person").expect("person");
    assert_eq!((person.inserted, person.updated, person.deleted), (1, 0, 1));
    assert_eq!(g.commits("main", Some(1)).await.expect("commits")[0].commit_id, head, "a dry run commits nothing");
    assert!(list_pending(g.root()).await.expect("list").is_empty(), "a dry run arms no sidecar");
}

/// Two merges into two different targets run at once; both land, each clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merges_into_two_targets_run_in_parallel() {
    let (_dir, g) = loaded_social_graph().await;
    for b in ["s1", "t1", "s2", "t2"] {
        g.branch_create(b, "main").await.expect("branch");
    }
    mutate(&g, "s1", r#"query q() { insert Person { name: "One" } }"#).await;
    mutate(&g, "s2", r#"query q() { insert Company { name: "Two" } }"#).await;
    let opts = MergeOptions::default();
    let (a, b) = tokio::join!(g.branch_merge("s1", "t1", &opts), g.branch_merge("s2", "t2", &opts));
    assert_eq!(a.expect("first").report.outcome, MergeOutcome::FastForward);
    assert_eq!(b.expect("second").report.outcome, MergeOutcome::FastForward);
    assert_eq!(content(&g, "t1").await["node:Person"].len(), 4);
    assert_eq!(content(&g, "t2").await["node:Company"].len(), 2);
    assert_clean(&g, "t1").await;
    assert_clean(&g, "t2").await;
}

/// A merge racing writes on its target: each write either lands before the
/// merge captured the target (and is merged around) or after it published;
/// nothing is lost and the target stays clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_racing_writes_on_the_target_loses_nothing() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("src", "main").await.expect("branch");
    mutate(&g, "src", r#"query q() { insert Person { name: "Merged", age: 1 } }"#).await;
    let writer = {
        let g = g.clone();
        tokio::spawn(async move {
            for i in 0..5 {
                mutate(&g, "main", &format!(r#"query q() {{ insert Company {{ name: "C{i}" }} }}"#)).await;
            }
        })
    };
    let merged = g.branch_merge("src", "main", &MergeOptions::default()).await.expect("merge");
    writer.await.expect("writer");
    assert!(merged.report.graph_commit_id.is_some());
    let c = content(&g, "main").await;
    assert_eq!(c["node:Company"].len(), 6, "every racing write landed");
    assert!(c["node:Person"].iter().any(|r| r.contains("Merged")), "the merge landed");
    assert_clean(&g, "main").await;
}

/// Merging with `delete_branch` removes the source after the merge; merging
/// a branch into itself or from a missing branch is refused before anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_branch_after_merge_and_bad_requests() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("gone", "main").await.expect("branch");
    mutate(&g, "gone", r#"query q() { insert Person { name: "Hal" } }"#).await;
    let opts = MergeOptions { delete_branch: true, ..MergeOptions::default() };
    let r = g.branch_merge("gone", "main", &opts).await.expect("merge");
    assert_eq!((r.branch_deleted, r.branch_delete_error.as_deref()), (Some(true), None));
    assert!(g.branch_list().await.expect("list").iter().all(|b| b.name != "gone"));
    assert!(content(&g, "main").await["node:Person"].iter().any(|r| r.contains("Hal")));
    assert_clean(&g, "main").await;
    let same = g.branch_merge("main", "main", &MergeOptions::default()).await.expect_err("self");
    assert_eq!(same.http_status(), 400);
    let missing = g.branch_merge("nope", "main", &MergeOptions::default()).await.expect_err("missing");
    assert_eq!(missing.http_status(), 404, "{missing}");
}

/// A squash merge: one single-parent commit on the target with the source's
/// net changes; the source is untouched, and merging it again later (after
/// more changes) takes only what the target does not yet hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_squash_merge_records_no_merged_parent() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("work", "main").await.expect("branch");
    mutate(&g, "work", r#"query q() { insert Person { name: "Ivy", age: 20 } }"#).await;
    mutate(&g, "work", r#"query q() { update Person set { age: 21 } where name = "Ivy" }"#).await;
    mutate(&g, "main", r#"query q() { insert Company { name: "Side" } }"#).await;
    let (main_before, work_head) = (g.commit("main").await.expect("main"), g.commit("work").await.expect("work"));
    let opts = MergeOptions { squash: true, ..MergeOptions::default() };
    let r = g.branch_merge("work", "main", &opts).await.expect("squash");
    assert_eq!((r.report.outcome, r.report.squash), (MergeOutcome::Merged, true));
    let squashed = g.commit("main").await.expect("main");
    assert_eq!(Some(&squashed.commit_id), r.report.graph_commit_id.as_ref());
    assert_eq!(squashed.parent_commit_id.as_ref(), Some(&main_before.commit_id));
    assert_eq!(squashed.merged_parent_commit_id, None, "a squash records no merged parent");
    assert_eq!(g.commit("work").await.expect("work").commit_id, work_head.commit_id, "the source is untouched");
    let people = content(&g, "main").await["node:Person"].clone();
    assert!(people.iter().any(|r| r.contains("Ivy") && r.contains("21")), "the net change: {people:?}");
    assert_clean(&g, "main").await;
    // The next merge of the same source finds the old base again: what the
    // squash brought is already on main, equal, so only the new change moves.
    mutate(&g, "work", r#"query q() { insert Person { name: "Jay" } }"#).await;
    let again = g.branch_merge("work", "main", &MergeOptions::default()).await.expect("merge again");
    let person = again.report.tables.iter().find(|t| t.table_key == "node:Person").expect("Person");
    assert_eq!((person.inserted, person.updated, person.deleted), (1, 0, 0), "{:?}", again.report.tables);
    assert!(g.commit("main").await.expect("main").merged_parent_commit_id.is_some());
    assert_clean(&g, "main").await;
}

/// Over HTTP: a conflict-free merge answers the outcome and commit; a
/// conflicting one is 409 with every conflict; a dry run writes nothing;
/// `DELETE /branches/merge` still deletes a branch named `merge`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_over_http() {
    use crate::server::{call, get, post, start};
    let s = start().await;
    for b in ["left", "right", "merge"] {
        let (st, _) = post(&s, "/graphs/g/branches", serde_json::json!({ "name": b })).await;
        assert_eq!(st, 200);
    }
    let mutate = |branch: &'static str, q: &'static str| {
        let s = &s;
        async move {
            let (st, v) = post(s, "/graphs/g/mutate", serde_json::json!({ "query": q, "branch": branch })).await;
            assert_eq!(st, 200, "{v}");
        }
    };
    mutate("left", r#"query q() { update Person set { age: 60 } where name = "Bob" }"#).await;
    mutate("right", r#"query q() { update Person set { age: 61 } where name = "Bob" }"#).await;
    let (st, v) = post(&s, "/graphs/g/branches/merge", serde_json::json!({ "source": "left", "dry_run": true })).await;
    assert_eq!((st, v["outcome"].as_str(), v["dry_run"].as_bool()), (200, Some("fast_forward"), Some(true)), "{v}");
    assert!(v["graph_commit_id"].is_null());
    let (st, v) = post(&s, "/graphs/g/branches/merge", serde_json::json!({ "source": "left" })).await;
    assert_eq!((st, v["outcome"].as_str(), v["target"].as_str()), (200, Some("fast_forward"), Some("main")), "{v}");
    let commit = v["graph_commit_id"].as_str().expect("commit").to_string();
    let (_, shown) = get(&s, &format!("/graphs/g/commits/{commit}")).await;
    assert_eq!(shown["merged_parent_commit_id"], v["source_commit_id"], "{shown}");
    let (st, v) =
        post(&s, "/graphs/g/branches/merge", serde_json::json!({ "source": "right", "target": "main" })).await;
    assert_eq!((st, v["code"].as_str()), (409, Some("conflict")), "{v}");
    let conflicts = v["merge_conflicts"].as_array().expect("merge_conflicts");
    assert_eq!(conflicts.len(), 1, "{v}");
    assert_eq!(conflicts[0]["kind"], "divergent_update");
    assert_eq!(conflicts[0]["type_name"], "Person");
    assert_eq!(conflicts[0]["entity_kind"], "node");
    assert_eq!(conflicts[0]["entity_id"], "Bob");
    let values =
        |c: &serde_json::Value| (c["property"].clone(), c["base"].clone(), c["ours"].clone(), c["theirs"].clone());
    assert_eq!(values(&conflicts[0]), ("age".into(), 27.into(), 60.into(), 61.into()), "{v}");
    // A squash over HTTP: one commit without a merged parent.
    mutate("merge", r#"query q() { insert Company { name: "Squashed" } }"#).await;
    let (st, v) = post(&s, "/graphs/g/branches/merge", serde_json::json!({ "source": "merge", "squash": true })).await;
    assert_eq!((st, v["squash"].as_bool()), (200, Some(true)), "{v}");
    let (_, shown) = get(&s, &format!("/graphs/g/commits/{}", v["graph_commit_id"].as_str().expect("commit"))).await;
    assert!(shown["merged_parent_commit_id"].is_null(), "{shown}");
    let (st, v) = post(&s, "/graphs/g/branches/merge", serde_json::json!({ "source": "nope" })).await;
    assert_eq!(st, 404, "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/merge", serde_json::json!({ "target": "main" })).await;
    assert_eq!(st, 400, "{v}");
    let (st, _, _) =
        call("DELETE", &format!("{}/graphs/g/branches/merge", s.base), Some(crate::server::TOKEN), None).await;
    assert_eq!(st, 200, "{}", s.log());
}

/// A large conflict set pages: each page lists the next conflicts in order,
/// with the counts of all; a page token is refused once a branch moves, a
/// forged token or a bad limit at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_page_in_order_with_counts_and_tokens_bound_to_both_heads() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("x", "main").await.expect("branch");
    for (branch, age) in [("x", 1), ("main", 2)] {
        let inserts: String = (0..5).map(|i| format!("insert Person {{ name: \"P{i}\", age: {age} }} ")).collect();
        mutate(&g, branch, &format!("query q() {{ {inserts}}}")).await;
        mutate(&g, branch, &format!("query q() {{ update Person set {{ age: {age} }} where name = \"Bob\" }}")).await;
    }
    let paged = |token: Option<String>, limit: Option<usize>| MergeOptions {
        dry_run: true,
        page: omnigraph::ConflictPage { token, limit },
        ..MergeOptions::default()
    };
    let refusal = |e: OmniError| match e {
        OmniError::MergeConflicts(set) => set,
        other => panic!("expected conflicts, got {other}"),
    };
    let whole = refusal(g.branch_merge("x", "main", &paged(None, None)).await.expect_err("conflicts"));
    let ids = |set: &omnigraph::ConflictSet| -> Vec<(ConflictKind, Option<String>)> {
        set.conflicts.iter().map(|c| (c.kind, c.entity_id.clone())).collect()
    };
    assert_eq!((whole.total(), whole.conflicts.len(), whole.next_page_token.as_deref()), (6, 6, None));
    let stat: Vec<(String, ConflictKind, usize)> =
        whole.stat.iter().map(|c| (c.type_name.clone(), c.kind, c.count)).collect();
    assert_eq!(
        stat,
        [("Person".into(), ConflictKind::DivergentInsert, 5), ("Person".into(), ConflictKind::DivergentUpdate, 1)]
    );
    let (mut seen, mut token, mut pages) = (Vec::new(), None, 0);
    loop {
        let set = refusal(g.branch_merge("x", "main", &paged(token.clone(), Some(4))).await.expect_err("conflicts"));
        assert_eq!((set.total(), &set.stat), (6, &whole.stat), "every page counts all");
        assert!(set.conflicts.iter().all(|c| c.ours.is_some()), "a page's row conflicts carry values");
        seen.extend(ids(&set));
        pages += 1;
        match set.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!((pages, seen), (2, ids(&whole)), "two pages hold every conflict once, in order");

    let first = refusal(g.branch_merge("x", "main", &paged(None, Some(2))).await.expect_err("conflicts"));
    let stale = first.next_page_token.expect("more pages");
    for bad in [paged(Some("00ff".into()), None), paged(None, Some(0)), paged(None, Some(1_001))] {
        let err = g.branch_merge("x", "main", &bad).await.expect_err("refused");
        assert!(matches!(err, OmniError::BadRequest(_)), "{err}");
    }
    mutate(&g, "main", r#"query q() { insert Person { name: "Zed", age: 9 } }"#).await;
    let err = g.branch_merge("x", "main", &paged(Some(stale), Some(2))).await.expect_err("refused");
    assert!(matches!(&err, OmniError::BadRequest(m) if m.contains("moved")), "{err}");
}

/// Through the CLI: `branch merge --json` prints the HTTP answer's fields;
/// a conflict exits 1 and prints every conflict (as JSON with `--json`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_through_the_cli() {
    let (dir, g) = loaded_social_graph().await;
    let loc = g.root().uri().to_string();
    g.branch_create("a", "main").await.expect("branch");
    g.branch_create("b", "main").await.expect("branch");
    mutate(&g, "a", r#"query q() { delete Person where name = "Carol" }"#).await;
    mutate(&g, "a", r#"query q() { update Person set { age: 50 } where name = "Bob" }"#).await;
    mutate(&g, "b", r#"query q() { update Person set { age: 51 } where name = "Bob" }"#).await;
    mutate(&g, "b", r#"query q() { insert Knows { from: "Carol", to: "Alice" } }"#).await;
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).output().expect("run");
    let out = run(&["branch", "merge", "--into", "b", "--json", "a", &loc]);
    assert_eq!(out.status.code(), Some(1));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let mut kinds: Vec<&str> =
        body["merge_conflicts"].as_array().expect("conflicts").iter().filter_map(|c| c["kind"].as_str()).collect();
    kinds.sort();
    assert_eq!(kinds, ["divergent_update", "orphan_edge"], "{body}");
    let orphan = body["merge_conflicts"].as_array().and_then(|a| a.iter().find(|c| c["kind"] == "orphan_edge"));
    let edge = orphan.map(|c| c["rows"][0]["endpoints"].clone()).unwrap_or_default();
    assert_eq!(edge, serde_json::json!({"from": "Carol", "to": "Alice"}), "the orphaned edge's row: {body}");
    let out = run(&["branch", "merge", "--into", "b", "a", &loc]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("divergent_update:") && err.contains("orphan_edge:"), "{err}");
    // `theirs` decides Bob's update; the orphaned edge still refuses the merge.
    let out = run(&["branch", "merge", "--into", "b", "--json", "--strategy", "theirs", "a", &loc]);
    assert_eq!(out.status.code(), Some(1));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<&str> =
        body["merge_conflicts"].as_array().expect("conflicts").iter().filter_map(|c| c["kind"].as_str()).collect();
    assert_eq!(kinds, ["orphan_edge"], "{body}");
    // `--resolve FILE` decides Bob by name; a file that is no resolution list is a usage error.
    let file = dir.path().join("resolve.json");
    std::fs::write(&file, r#"[{"type": "Person", "id": "Bob", "take": "base"}]"#).expect("write");
    let out = run(&["branch", "merge", "--into", "b", "--json", "--resolve", file.to_str().expect("path"), "a", &loc]);
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let kinds: Vec<&str> =
        body["merge_conflicts"].as_array().expect("conflicts").iter().filter_map(|c| c["kind"].as_str()).collect();
    assert_eq!((out.status.code(), kinds), (Some(1), vec!["orphan_edge"]), "{body}");
    std::fs::write(&file, r#"{"type": "Person"}"#).expect("write");
    let out = run(&["branch", "merge", "--into", "b", "--resolve", file.to_str().expect("path"), "a", &loc]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a resolution list"));
    // `--stat` counts them per type and kind instead.
    let out = run(&["branch", "merge", "--into", "b", "--stat", "a", &loc]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let counted =
        |t: &str, k: &str| err.lines().any(|l| l.contains(t) && l.contains(k) && l.trim_end().ends_with(" 1"));
    assert!(counted("Person", "divergent_update") && counted("Knows", "orphan_edge"), "{err}");
    assert!(!err.contains("divergent_update:"), "--stat lists no conflict: {err}");
    // One per page: the first page's token reaches the second.
    let page = |extra: &[&str]| {
        let out = run(&[&["branch", "merge", "--into", "b", "--json", "--limit", "1"], extra, &["a", &loc]].concat());
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let first = page(&[]);
    assert_eq!(
        (first["conflict_count"].as_u64(), first["merge_conflicts"].as_array().map(Vec::len)),
        (Some(2), Some(1))
    );
    let token = first["next_page_token"].as_str().expect("a second page").to_string();
    let second = page(&["--page-token", &token]);
    assert_eq!(second["next_page_token"], serde_json::Value::Null, "{second}");
    let kinds: Vec<&serde_json::Value> = [&first, &second].iter().map(|p| &p["merge_conflicts"][0]["kind"]).collect();
    assert_eq!(kinds, ["orphan_edge", "divergent_update"], "in order: edge:Knows sorts before node:Person");

    let out = run(&["branch", "merge", "--json", "--delete-branch", "--as", "ci", "a", &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(body["outcome"], "fast_forward");
    assert_eq!(body["branch_deleted"], true);
    assert_eq!(body["actor_id"], "ci");
    let person = body["tables"].as_array().expect("tables").iter().find(|t| t["table_key"] == "node:Person").cloned();
    assert_eq!(person.map(|p| p["deleted"].clone()), Some(serde_json::json!(1)), "{body}");
    let out = run(&["branch", "merge", "--into", "b", "b", &loc]);
    assert_eq!(out.status.code(), Some(2), "merging a branch into itself is a usage error");
}

/// A merged row that breaks a row rule (`@range` here) is a
/// `value_constraint_violation`. Every write validates its rows, so no merge
/// of two valid branches produces one until schemas can change; this feeds
/// the merged-result check a row directly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merged_row_breaking_a_row_rule_is_a_value_constraint_violation() {
    use omnigraph::engine::merge::{TableMerge, delta::Delta, validate};
    use omnigraph::engine::rows::{EntityRow, to_batch};
    let (_dir, g) = loaded_social_graph().await;
    let schema = g.schema().await.expect("schema");
    let target = manifest::load(g.root(), "main", None).await.expect("view").state;
    let entry = target.tables["node:Person"].clone();
    let arrow = schema.catalog.node("Person").expect("Person").arrow_schema();
    let row = EntityRow::node("Old").with("name", serde_json::json!("Old")).with("age", serde_json::json!(200));
    let merge = TableMerge {
        table_key: "node:Person".into(),
        target: entry.clone(),
        target_ds: omnigraph::engine::committed::open_pinned(g.root(), &entry).await.expect("open"),
        source: entry,
        delta: Delta { inserted: ["Old".to_string()].into(), ..Delta::default() },
        rows: vec![to_batch(&arrow, &[row]).expect("batch")],
        adopt: false,
        located: None,
        conflict_rows: None,
        shapes: None,
    };
    let conflicts = validate::merged_result(g.root(), &schema.catalog, &target, &[merge]).await.expect("validate");
    let kinds: Vec<ConflictKind> = conflicts.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ConflictKind::ValueConstraintViolation], "{conflicts:?}");
    assert!(conflicts[0].message.contains("age"), "{conflicts:?}");
}

/// Every conflict kind a merge of two valid branches can produce, each
/// through the daemon as a 409 with its `merge_conflicts` entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reachable_conflict_kind_over_http() {
    use crate::server::{post, start};
    let s = start().await;
    let scenarios: [(&str, &str, &str); 5] = [
        (
            "divergent_insert",
            r#"query q() { insert Person { name: "Eve", age: 1 } }"#,
            r#"query q() { insert Person { name: "Eve", age: 2 } }"#,
        ),
        (
            "divergent_update",
            r#"query q() { update Person set { age: 1 } where name = "Bob" }"#,
            r#"query q() { update Person set { age: 2 } where name = "Bob" }"#,
        ),
        (
            "delete_vs_update",
            r#"query q() { delete Person where name = "Carol" }"#,
            r#"query q() { update Person set { age: 3 } where name = "Carol" }"#,
        ),
        (
            "unique_violation",
            r#"query q() { insert Person { name: "Dan", email: "x@example.com" } }"#,
            r#"query q() { insert Person { name: "Fay", email: "x@example.com" } }"#,
        ),
        (
            "cardinality_violation",
            r#"query q() { insert WorksAt { from: "Bob", to: "Acme" } }"#,
            r#"query q() { insert Company { name: "Initech" } insert WorksAt { from: "Bob", to: "Initech" } }"#,
        ),
    ];
    for (i, (kind, on_source, on_target)) in scenarios.iter().enumerate() {
        let (src, dst) = (format!("src{i}"), format!("dst{i}"));
        for (b, q) in [(&src, on_source), (&dst, on_target)] {
            let (st, v) = post(&s, "/graphs/g/branches", serde_json::json!({ "name": b })).await;
            assert_eq!(st, 200, "{v}");
            let (st, v) = post(&s, "/graphs/g/mutate", serde_json::json!({ "query": q, "branch": b })).await;
            assert_eq!(st, 200, "{kind}: {v}");
        }
        let body = serde_json::json!({ "source": src, "target": dst });
        let (st, v) = post(&s, "/graphs/g/branches/merge", body).await;
        assert_eq!((st, v["code"].as_str()), (409, Some("conflict")), "{kind}: {v}");
        let kinds: Vec<&str> =
            v["merge_conflicts"].as_array().expect("list").iter().filter_map(|c| c["kind"].as_str()).collect();
        assert_eq!(kinds, [*kind], "{v}");
        let c = &v["merge_conflicts"][0];
        assert_eq!((&c["type"], &c["type_name"]), (&c["type_name"], &c["type_name"]), "{c}");
        assert_eq!(c["id"], c["entity_id"], "{c}");
        assert_eq!((v["conflict_count"].as_u64(), v["conflict_stat"][0]["kind"].as_str()), (Some(1), Some(*kind)));
        // A validation conflict carries the rows behind it.
        let rows = c["rows"].as_array().cloned().unwrap_or_default();
        match *kind {
            "unique_violation" => {
                let mut ids: Vec<&str> = rows.iter().filter_map(|r| r["id"].as_str()).collect();
                ids.sort();
                assert_eq!(ids, ["Dan", "Fay"], "{c}");
                assert!(rows.iter().all(|r| r["email"] == "x@example.com"), "{c}");
            }
            "cardinality_violation" => {
                assert_eq!(rows.len(), 2, "Bob's two WorksAt edges: {c}");
                assert!(rows.iter().all(|r| r["endpoints"]["from"] == "Bob"), "{c}");
            }
            _ => assert!(rows.is_empty() && c.get("ours").is_some(), "a row conflict carries values: {c}"),
        }
        // A strategy decides a row conflict, never a validation one.
        let body = serde_json::json!({ "source": src, "target": dst, "strategy": "theirs", "dry_run": true });
        let (st, v) = post(&s, "/graphs/g/branches/merge", body).await;
        if rows.is_empty() {
            assert_eq!(
                (st, v["conflicts_decided"].as_u64(), v["strategy"].as_str()),
                (200, Some(1), Some("theirs")),
                "{v}"
            );
        } else {
            assert_eq!(st, 409, "{kind} under theirs: {v}");
        }
    }
    let body = serde_json::json!({ "source": "src0", "target": "dst0", "strategy": "mine" });
    let (st, v) = post(&s, "/graphs/g/branches/merge", body).await;
    assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{v}");
}

/// Resolutions over HTTP: one merge decides a divergent insert, a
/// divergent update (one property, by value) and a delete against update,
/// each as named; a resolution naming no conflict, or leaving one open, is a
/// 400; one whose decision orphans an edge is refused with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolutions_decide_three_conflict_kinds_in_one_merge_over_http() {
    use crate::server::{get, post, start};
    let s = start().await;
    let on = |b: &str, q: &str| serde_json::json!({ "query": q, "branch": b });
    for b in ["src", "dst"] {
        let (st, v) = post(&s, "/graphs/g/branches", serde_json::json!({ "name": b })).await;
        assert_eq!(st, 200, "{v}");
    }
    for (b, q) in [
        ("src", r#"query q() { insert Person { name: "Eve", age: 1 } }"#),
        ("dst", r#"query q() { insert Person { name: "Eve", age: 2 } }"#),
        ("src", r#"query q() { update Person set { age: 10, email: "bob@src.example" } where name = "Bob" }"#),
        ("dst", r#"query q() { update Person set { age: 20 } where name = "Bob" }"#),
        ("src", r#"query q() { delete Person where name = "Carol" }"#),
        ("dst", r#"query q() { update Person set { age: 3 } where name = "Carol" }"#),
    ] {
        let (st, v) = post(&s, "/graphs/g/mutate", on(b, q)).await;
        assert_eq!(st, 200, "{v}");
    }
    let merge = |resolutions: serde_json::Value| serde_json::json!({ "source": "src", "target": "dst", "resolutions": resolutions });
    let eve = serde_json::json!({ "type": "Person", "id": "Eve", "take": "theirs" });
    let bob = serde_json::json!({ "type": "Person", "id": "Bob", "property": "age", "value": 77 });
    let carol = serde_json::json!({ "type": "Person", "id": "Carol", "take": "ours" });
    let before = get(&s, "/graphs/g/snapshot?branch=dst").await;
    // Refused before anything is written: a resolution naming no conflict,
    // one conflict left open, a malformed resolution.
    let nobody = serde_json::json!({ "type": "Person", "id": "Nobody", "take": "ours" });
    for (bad, says) in [
        (serde_json::json!([eve, bob, carol, nobody]), "Person `Nobody` names no conflict"),
        (serde_json::json!([eve, bob]), "Person `Carol` (delete_vs_update) unresolved"),
        (serde_json::json!([{ "type": "Person", "id": "Eve" }]), "neither `take` nor `value`"),
    ] {
        let (st, v) = post(&s, "/graphs/g/branches/merge", merge(bad)).await;
        assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{v}");
        assert!(v["error"].as_str().is_some_and(|e| e.contains(says)), "{says}: {v}");
    }
    assert_eq!(get(&s, "/graphs/g/snapshot?branch=dst").await, before, "a refused merge writes nothing");

    let (st, v) = post(&s, "/graphs/g/branches/merge", merge(serde_json::json!([eve, bob, carol]))).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["conflicts_decided"], 3, "{v}");
    let outcomes: Vec<(&str, &str)> = v["resolutions"]
        .as_array()
        .expect("resolutions")
        .iter()
        .map(|r| (r["id"].as_str().unwrap_or(""), r["outcome"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(outcomes, [("Eve", "written"), ("Bob", "written"), ("Carol", "kept")]);
    let q = "query q() { match { $p: Person } return { $p.name, $p.age, $p.email } order { $p.name asc } }";
    let (st, r) = post(&s, "/graphs/g/query", serde_json::json!({ "query": q, "branch": "dst" })).await;
    assert_eq!(st, 200, "{r}");
    let people: Vec<String> = r["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|p| format!("{} {} {}", p["p.name"].as_str().unwrap_or(""), p["p.age"], p["p.email"]))
        .collect();
    assert_eq!(
        people,
        [
            "Alice 31 \"alice@example.com\"",
            // Bob: the resolved age, and the email only the source changed.
            "Bob 77 \"bob@src.example\"",
            "Carol 3 null",
            "Eve 1 null",
        ],
        "{r}"
    );
}

/// The first row `q` answers on `branch`.
async fn first_row(g: &Graph, branch: &str, q: &str) -> Map<String, serde_json::Value> {
    let target = omnigraph::ReadTarget::Branch(branch.to_string());
    let r = g.query(q, None, Map::new(), &target).await.expect("query");
    omnigraph::result_rows(&r).into_iter().next().expect("a row")
}

/// `@merge` policies in the schema decide a merge given no strategy: the
/// type's for a whole entity and for its properties, a property's own over
/// it, `newest` by which head was authored later; a strategy given for the
/// merge overrides them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_policies_in_the_schema_decide_unless_a_strategy_is_given() {
    const SCHEMA: &str = "node Person @merge(theirs) {\n  name: String @key\n  age: I32?\n  \
                          email: String? @merge(ours)\n}\nnode Doc @merge(newest) {\n  slug: String @key\n  body: String?\n}\n";
    let lines = [
        r#"{"type": "Person", "data": {"name": "Bob", "age": 30, "email": "b@base"}}"#,
        r#"{"type": "Doc", "data": {"slug": "d", "body": "base"}}"#,
    ];
    let (_dir, g) = crate::common::graph_with(SCHEMA, &lines).await;
    let bob_q = r#"query q() { match { $p: Person { name: "Bob" } } return { $p.age, $p.email } }"#;
    for (i, (strategy, want)) in [
        (None, (serde_json::json!(41), serde_json::json!("t@x"))),
        (Some(omnigraph::MergeStrategy::Ours), (serde_json::json!(40), serde_json::json!("t@x"))),
        (Some(omnigraph::MergeStrategy::Theirs), (serde_json::json!(41), serde_json::json!("s@x"))),
    ]
    .into_iter()
    .enumerate()
    {
        let (src, dst) = (format!("s{i}"), format!("t{i}"));
        g.branch_create(&src, "main").await.expect("branch");
        g.branch_create(&dst, "main").await.expect("branch");
        mutate(&g, &src, r#"query q() { update Person set { age: 41, email: "s@x" } where name = "Bob" }"#).await;
        mutate(&g, &src, r#"query q() { insert Person { name: "Eve", age: 1 } }"#).await;
        mutate(&g, &dst, r#"query q() { update Person set { age: 40, email: "t@x" } where name = "Bob" }"#).await;
        mutate(&g, &dst, r#"query q() { insert Person { name: "Eve", age: 2 } }"#).await;
        let opts = MergeOptions { strategy, ..MergeOptions::default() };
        let r = g.branch_merge(&src, &dst, &opts).await.unwrap_or_else(|e| panic!("{strategy:?}: {e}"));
        assert_eq!((r.report.conflicts_decided, r.report.strategy), (2, strategy));
        let bob = first_row(&g, &dst, bob_q).await;
        assert_eq!((bob["p.age"].clone(), bob["p.email"].clone()), want, "{strategy:?}");
    }
    // A strategy of `fail` given for the merge overrides the policies too.
    g.branch_create("sf", "main").await.expect("branch");
    g.branch_create("tf", "main").await.expect("branch");
    mutate(&g, "sf", r#"query q() { update Person set { age: 41 } where name = "Bob" }"#).await;
    mutate(&g, "tf", r#"query q() { update Person set { age: 40 } where name = "Bob" }"#).await;
    let fail = MergeOptions { strategy: Some(omnigraph::MergeStrategy::Fail), ..MergeOptions::default() };
    assert!(matches!(g.branch_merge("sf", "tf", &fail).await, Err(OmniError::MergeConflicts(_))));

    // `newest`: the side whose head was authored later wins.
    let doc_q = r#"query q() { match { $d: Doc { slug: "d" } } return { $d.body } }"#;
    for (src, dst, later) in [("ns1", "nt1", "target"), ("ns2", "nt2", "source")] {
        g.branch_create(src, "main").await.expect("branch");
        g.branch_create(dst, "main").await.expect("branch");
        let (first, second) = if later == "target" { (src, dst) } else { (dst, src) };
        mutate(&g, first, &format!(r#"query q() {{ update Doc set {{ body: "{first}" }} where slug = "d" }}"#)).await;
        mutate(&g, second, &format!(r#"query q() {{ update Doc set {{ body: "{second}" }} where slug = "d" }}"#)).await;
        g.branch_merge(src, dst, &MergeOptions::default()).await.expect("decided by newest");
        let body = first_row(&g, dst, doc_q).await["d.body"].clone();
        assert_eq!(body, serde_json::json!(second), "the {later}'s later change wins");
    }
}

/// A resolution whose decision orphans an edge: the merged result is
/// validated after the resolutions, so the merge is refused with the
/// orphan and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resolution_that_orphans_an_edge_is_refused_and_writes_nothing() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("src", "main").await.expect("branch");
    g.branch_create("dst", "main").await.expect("branch");
    mutate(&g, "src", r#"query q() { delete Person where name = "Carol" }"#).await;
    mutate(&g, "dst", r#"query q() { update Person set { age: 3 } where name = "Carol" }"#).await;
    mutate(&g, "dst", r#"query q() { insert Knows { from: "Alice", to: "Carol" } }"#).await;
    let before = content(&g, "dst").await;
    let carol: omnigraph::Resolution =
        serde_json::from_value(serde_json::json!({ "type": "Person", "id": "Carol", "take": "theirs" })).expect("r");
    let opts = MergeOptions { resolutions: vec![carol], ..MergeOptions::default() };
    let err = g.branch_merge("src", "dst", &opts).await.expect_err("orphan");
    let OmniError::MergeConflicts(set) = &err else { panic!("{err}") };
    let kinds: Vec<ConflictKind> = set.conflicts.iter().map(|c| c.kind).collect();
    assert_eq!(kinds, [ConflictKind::OrphanEdge], "{err}");
    assert_eq!(set.conflicts[0].rows[0]["endpoints"]["to"], "Carol", "{err}");
    assert_eq!(content(&g, "dst").await, before, "nothing written");
    assert!(list_pending(g.root()).await.expect("list").is_empty(), "no sidecar");
}

/// The one kind two valid branches cannot produce: a row breaking a rule
/// (written around omnigraph's validation, here straight through the storage
/// adapter and published exactly, as a foreign tool could) is caught by the
/// merge's check of the merged result and answered over HTTP as a 409
/// `value_constraint_violation`; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_breaking_row_written_around_validation_is_a_value_constraint_conflict_over_http() {
    use std::collections::BTreeMap;

    use omnigraph::engine::manifest::{Lineage, Precondition, PublishRequest, TableUpdate};
    use omnigraph::engine::rows::{EntityRow, to_batch};
    use omnigraph::engine::storage::{MergeMode, TxnIdentity, table};

    let (dir, loc) = crate::common::temp_graph_dir();
    {
        let g = omnigraph::Omnigraph::init(&loc, crate::common::SOCIAL_PG).await.expect("init");
        let data = include_str!("../../examples/social.jsonl");
        g.load(data.as_bytes(), omnigraph::LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
        g.branch_create("dst", "main").await.expect("branch");
        // The foreign write on main: Person `Old`, aged 200 against @range(age, 0..150).
        let view = manifest::load(g.root(), "main", None).await.expect("view");
        let person = view.state.tables["node:Person"].clone();
        let uri = g.root().child_uri(&person.location);
        let ds = table::open_table(&uri, None, Some(person.version)).await.expect("open");
        let row = EntityRow::node("Old").with("name", serde_json::json!("Old")).with("age", serde_json::json!(200));
        let batch = to_batch(&table::arrow_schema(&ds), &[row]).expect("batch");
        let identity = TxnIdentity::mint(person.version);
        let staged =
            table::stage_merge_insert(ds, vec![batch], MergeMode::Upsert, &identity.uuid).await.expect("stage");
        let rt = g.runtime();
        let _schema = rt.lease_schema(omnigraph::actors::LeaseMode::Shared).await.expect("schema lease");
        let branch = rt.lease_branch("main").await.expect("branch lease");
        let committed =
            rt.commit("main", staged, &rt.lease_table(&uri, "main").await.expect("lease")).await.expect("commit");
        let req = PublishRequest {
            branch: "main".into(),
            updates: vec![TableUpdate::committed("node:Person", None, &committed)],
            expected_versions: BTreeMap::from([("node:Person".to_string(), person.version)]),
            precondition: Precondition::ExactHead {
                branch_id: view.branch_id.clone(),
                head: view.state.head("main").map(str::to_string),
            },
            lineage: Lineage::mint(Some("foreign".into())),
        };
        rt.publish(req, &branch).await.expect("publish");
    }
    let s = crate::server::spawn(dir, loc, &[], &[]);
    let before = crate::server::get(&s, "/graphs/g/snapshot?branch=dst").await;
    let body = serde_json::json!({ "source": "main", "target": "dst" });
    let (st, v) = crate::server::post(&s, "/graphs/g/branches/merge", body).await;
    assert_eq!((st, v["code"].as_str()), (409, Some("conflict")), "{v}");
    let conflicts = v["merge_conflicts"].as_array().expect("list");
    assert_eq!(conflicts.len(), 1, "{v}");
    assert_eq!(conflicts[0]["kind"], "value_constraint_violation", "{v}");
    assert_eq!(conflicts[0]["entity_id"], "Old", "{v}");
    assert!(conflicts[0]["message"].as_str().is_some_and(|m| m.contains("age")), "{v}");
    assert_eq!(conflicts[0]["rows"][0]["id"], "Old", "the row that breaks the rule: {v}");
    let after = crate::server::get(&s, "/graphs/g/snapshot?branch=dst").await;
    assert_eq!(before, after, "a refused merge writes nothing");
}

/// A merge whose row fingerprints spill to disk partitions (a one-byte
/// budget: the most partitions) finds the same delta, the same conflicts and
/// the same merged graph as one that holds them in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_spilled_to_disk_partitions_equals_one_in_memory() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("s", "main").await.expect("branch");
    let people = |prefix: &str, n: usize| -> String {
        let rows: Vec<String> =
            (0..n).map(|i| format!("insert Person {{ name: \"{prefix}{i}\", age: {i} }}")).collect();
        format!("query q() {{ {} }}", rows.join(" "))
    };
    mutate(&g, "main", &people("M", 120)).await;
    mutate(&g, "s", &people("S", 150)).await;
    mutate(&g, "s", r#"query q() { update Person set { age: 77 } where name = "Bob" }"#).await;
    mutate(&g, "s", r#"query q() { delete Person where name = "Carol" }"#).await;
    mutate(&g, "s", r#"query q() { insert Knows { from: "S1", to: "Alice" } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 5 } where name = "Alice" }"#).await;
    for t in ["t1", "t2"] {
        g.branch_create(t, "main").await.expect("branch");
    }
    let spill = MergeOptions { memory_bytes: Some(1), ..MergeOptions::default() };
    let dry = |o: &MergeOptions| MergeOptions { dry_run: true, ..o.clone() };
    let counts = |r: &omnigraph::MergeResult| -> Vec<(String, usize, usize, usize, bool)> {
        r.report.tables.iter().map(|t| (t.table_key.clone(), t.inserted, t.updated, t.deleted, t.adopted)).collect()
    };
    let in_memory = g.branch_merge("s", "t1", &dry(&MergeOptions::default())).await.expect("dry run");
    let spilled = g.branch_merge("s", "t2", &dry(&spill)).await.expect("dry run");
    assert_eq!(counts(&in_memory), counts(&spilled));
    let person = counts(&spilled).into_iter().find(|t| t.0 == "node:Person").expect("person");
    assert_eq!((person.1, person.2, person.3), (150, 1, 1), "{person:?}");

    g.branch_merge("s", "t1", &MergeOptions::default()).await.expect("merge in memory");
    g.branch_merge("s", "t2", &spill).await.expect("merge spilled");
    assert_eq!(content(&g, "t1").await, content(&g, "t2").await);
    assert_clean(&g, "t2").await;

    // The same conflicts either way.
    mutate(&g, "main", r#"query q() { update Person set { age: 2 } where name = "Bob" }"#).await;
    mutate(&g, "s", r#"query q() { insert Person { name: "Eve", age: 1 } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Eve", age: 2 } }"#).await;
    let conflicts = |e: OmniError| match e {
        OmniError::MergeConflicts(set) => set.conflicts,
        other => panic!("expected conflicts, got {other}"),
    };
    let a = conflicts(g.branch_merge("s", "main", &dry(&MergeOptions::default())).await.expect_err("conflicts"));
    let b = conflicts(g.branch_merge("s", "main", &dry(&spill)).await.expect_err("conflicts"));
    assert_eq!(a, b);
    assert_eq!(a.len(), 2, "{a:?}");
}

/// The lineage path names where the target holds every key of the delta
/// the target holds, exactly (the id at each address is the key's), and
/// no address for a key the target does not hold: where the target's own
/// writes put a row, where the base held one the target left alone, and
/// where the target's compaction moved it (Alice's row, checked).
async fn assert_locates_every_key(
    key: &str,
    fast: &omnigraph::engine::merge::lineage::LineageDelta,
    base: &lance::Dataset,
    target: &lance::Dataset,
) {
    use omnigraph::engine::storage::table;
    let held = fast.target_addresses.as_ref().unwrap_or_else(|| panic!("{key}: the target's rows are not located"));
    let mut at = std::collections::HashMap::new();
    for batch in table::scan_columns(target, &["id", "_rowaddr"]).await.expect("target rows") {
        let ids = batch.column_by_name("id").expect("id");
        let ids = ids.as_any().downcast_ref::<arrow_array::StringArray>().expect("string ids");
        let addrs = batch.column_by_name("_rowaddr").expect("_rowaddr");
        let addrs = addrs.as_any().downcast_ref::<arrow_array::UInt64Array>().expect("u64 addresses");
        at.extend(addrs.values().iter().copied().zip(ids.iter().map(|id| id.expect("an id").to_string())));
    }
    let held_ids: std::collections::HashSet<&String> = at.values().collect();
    for (k, id) in &fast.ids {
        match held.get(k) {
            Some(a) => assert_eq!(at.get(a), Some(id), "{key}: `{id}` located at {a:#x}"),
            None => assert!(!held_ids.contains(id), "{key}: the target holds `{id}`, not located"),
        }
    }
    let base_fragments: std::collections::HashSet<u64> = base.manifest.fragments.iter().map(|f| f.id).collect();
    if key == "node:Person" {
        // Alice: updated on the source only, her fragment compacted on the target.
        let alice = fast.ids.iter().find(|(_, id)| *id == "Alice").map(|(k, _)| held[k]).expect("Alice located");
        assert!(!base_fragments.contains(&(alice >> 32)), "{key}: Alice did not move ({alice:#x})");
    }
}

/// The merge's row-version path (each side's changed rows since the base,
/// [`omnigraph::engine::merge::lineage`]) decides exactly what fingerprinting
/// the three sides whole decides, on branches whose writes take every
/// staging shape (appends, index-found updates and deletes, merge loads, a
/// delete then a re-insert, an identical update) while the target changes
/// the same and other rows and compacts: and it applies to every table
/// either side touched, across the source's and target's refs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_versions_and_fingerprints_classify_a_merge_alike() {
    use omnigraph::engine::committed::open_pinned;
    use omnigraph::engine::merge::{lineage, spill};
    let (_dir, g) = loaded_social_graph().await;
    g.ensure_indices("main", None).await.expect("indexes");
    g.branch_create("feature", "main").await.expect("feature");
    let base = manifest::load(g.root(), "main", None).await.expect("base view");
    for src in [
        r#"query q() { insert Person { name: "Eve", age: 30 } }"#,
        r#"query q() { update Person set { age: 40 } where name = "Bob" }"#,
        r#"query q() { update Person set { age: 29 } where name = "Alice" }"#,
        r#"query q() { delete Person where name = "Carol" }"#,
        r#"query q() { insert Knows { from: "Eve", to: "Alice" } }"#,
        r#"query q() { delete Person where name = "Eve" }"#,
        r#"query q() { insert Person { name: "Eve", age: 31 } }"#,
    ] {
        mutate(&g, "feature", src).await;
    }
    let data = "{\"type\": \"Company\", \"data\": {\"name\": \"Initech\"}}\n{\"type\": \"Person\", \"data\": {\"name\": \"Alice\", \"age\": 33}}\n";
    g.load(data.as_bytes(), omnigraph::LoadMode::Merge, &on("feature")).await.expect("merge load");
    for src in [
        r#"query q() { update Person set { age: 41 } where name = "Bob" }"#,
        r#"query q() { insert Person { name: "Mia", age: 3 } }"#,
        r#"query q() { update Person set { age: 51 } where name = "Carol" }"#,
    ] {
        mutate(&g, "main", src).await;
    }
    g.optimize("main", None).await.expect("optimize");
    let (source, target) = (
        manifest::load(g.root(), "feature", None).await.expect("source"),
        manifest::load(g.root(), "main", None).await.expect("target"),
    );
    let mut compared = 0;
    for (key, s) in &source.state.tables {
        let (b, t) = (&base.state.tables[key], &target.state.tables[key]);
        if s.version == b.version && s.branch == b.branch {
            continue;
        }
        let (b, s, t) = (
            open_pinned(g.root(), b).await.expect("base"),
            open_pinned(g.root(), s).await.expect("source"),
            open_pinned(g.root(), t).await.expect("target"),
        );
        let fast = lineage::classify(&b, &s, Some(&t)).await.expect("lineage").unwrap_or_else(|| panic!("{key}"));
        let slow = spill::classify_within(spill::Base::At(spill::Side::whole(&b)), &s, &t, 256 << 20)
            .await
            .expect("fingerprints");
        let sorted = |d: &omnigraph::engine::merge::delta::KeyDelta| {
            let set =
                |s: &std::collections::HashSet<u128>| s.iter().copied().collect::<std::collections::BTreeSet<_>>();
            let mut conflicts = d.conflicts.clone();
            conflicts.sort_by_key(|(k, _)| *k);
            (set(&d.inserted), set(&d.updated), set(&d.deleted), conflicts)
        };
        assert_eq!(sorted(&fast.keyed), sorted(&slow), "{key}");
        assert_locates_every_key(key, &fast, &b, &t).await;
        compared += 1;
    }
    assert!(compared >= 3, "{compared} tables compared");
    // Bob (updated on both) and Carol (deleted against updated) conflict.
    let err = g.branch_merge("feature", "main", &MergeOptions::default()).await.expect_err("conflicts");
    let OmniError::MergeConflicts(set) = err else { panic!("{err:?}") };
    let conflicts = set.conflicts;
    let kinds: Vec<_> = conflicts.iter().map(|c| c.kind).collect();
    assert!(
        kinds.contains(&ConflictKind::DivergentUpdate) && kinds.contains(&ConflictKind::DeleteVsUpdate),
        "{kinds:?}"
    );
}
