//! `commit revert`: one new commit that undoes one commit's changes,
//! through the embedded handle, HTTP and the CLI.

use omnigraph::{ConflictKind, Graph, MergeStrategy, OmniError, RevertOptions, WriteOptions};
use serde_json::{Map, json};

use crate::common::loaded_social_graph;
use crate::content::content;

async fn mutate(g: &Graph, branch: &str, src: &str) -> String {
    let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
    let out = g.mutate(src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("{src}: {e}"));
    out.commit_id.expect("a commit")
}

/// The commit a head is at.
async fn head(g: &Graph, branch: &str) -> omnigraph::CommitInfo {
    g.commits(branch, Some(1)).await.expect("commits").remove(0)
}

/// Reverting an update, a delete that cascaded to edges and an insert each
/// brings the graph back to what it held before that commit (exact
/// before-images), as one new single-parent commit; a dry run writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_undoes_one_commit_as_one_new_commit() {
    let (_dir, g) = loaded_social_graph().await;
    for change in [
        r#"query q() { update Person set { age: 40, role: "engineer" } where name = "Bob" }"#,
        r#"query q() { delete Person where name = "Carol" }"#,
        r#"query q() { insert Person { name: "Eve", age: 5 } insert Knows { from: "Eve", to: "Alice" } }"#,
    ] {
        let before = content(&g, "main").await;
        let commit = mutate(&g, "main", change).await;
        assert_ne!(content(&g, "main").await, before, "{change}");
        let dry = RevertOptions { dry_run: true, ..RevertOptions::default() };
        let planned = g.commit_revert(&commit, &dry).await.expect("dry run");
        assert!(planned.report.graph_commit_id.is_none() && !planned.report.tables.is_empty(), "{change}");
        assert_eq!(head(&g, "main").await.commit_id, commit, "{change}: a dry run writes nothing");

        let r = g.commit_revert(&commit, &RevertOptions::default()).await.unwrap_or_else(|e| panic!("{change}: {e}"));
        assert_eq!(content(&g, "main").await, before, "{change}: reverted");
        let now = head(&g, "main").await;
        assert_eq!(Some(&now.commit_id), r.report.graph_commit_id.as_ref());
        assert_eq!(
            (now.parent_commit_id.as_deref(), now.merged_parent_commit_id.as_deref()),
            (Some(commit.as_str()), None)
        );
        assert_eq!(
            (now.operation.as_deref(), now.source_commit_id.as_deref()),
            (Some("revert"), Some(commit.as_str()))
        );
        assert_eq!(r.commit_id, commit);
    }
}

/// A later change to an entity the reverted commit changed is a conflict:
/// refused with the commit's value as `base`, the branch's as `ours` and the
/// reverted one as `theirs`, nothing written; `--strategy theirs` reverts
/// it anyway. A merge commit needs a mainline; the first commit has no
/// parent to go back to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_changes_conflict_and_merges_need_a_mainline() {
    let (_dir, g) = loaded_social_graph().await;
    let first = g.commits("main", None).await.expect("commits").pop().expect("the first commit").commit_id;
    let commit = mutate(&g, "main", r#"query q() { update Person set { age: 40 } where name = "Bob" }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 41 } where name = "Bob" }"#).await;
    let before = content(&g, "main").await;
    let err = g.commit_revert(&commit, &RevertOptions::default()).await.expect_err("conflict");
    let OmniError::MergeConflicts(set) = &err else { panic!("{err}") };
    let c = &set.conflicts[0];
    assert_eq!((c.kind, c.property.as_deref()), (ConflictKind::DivergentUpdate, Some("age")), "{err}");
    assert_eq!((c.base.clone(), c.ours.clone(), c.theirs.clone()), (Some(json!(40)), Some(json!(41)), Some(json!(27))));
    assert_eq!(content(&g, "main").await, before, "a refused revert writes nothing");
    let theirs = RevertOptions { strategy: Some(MergeStrategy::Theirs), ..RevertOptions::default() };
    let r = g.commit_revert(&commit, &theirs).await.expect("decided");
    assert_eq!(r.report.conflicts_decided, 1);
    let q = r#"query q() { match { $p: Person { name: "Bob" } } return { $p.age } }"#;
    let rows = g.query(q, None, Map::new(), &omnigraph::ReadTarget::default()).await.expect("query");
    assert_eq!(omnigraph::result_rows(&rows)[0]["p.age"], json!(27));

    // A merge commit: refused without a mainline; with 1, its changes go.
    g.branch_create("side", "main").await.expect("branch");
    mutate(&g, "side", r#"query q() { insert Person { name: "Sid", age: 3 } }"#).await;
    mutate(&g, "main", r#"query q() { insert Company { name: "Initech" } }"#).await;
    let merged = g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    let merge_commit = merged.report.graph_commit_id.expect("a merge commit");
    let with_sid = content(&g, "main").await;
    assert!(with_sid["node:Person"].iter().any(|p| p.contains("Sid")));
    let err = g.commit_revert(&merge_commit, &RevertOptions::default()).await.expect_err("mainline");
    assert!(matches!(&err, OmniError::BadRequest(m) if m.contains("mainline")), "{err}");
    let one = RevertOptions { mainline: Some(1), ..RevertOptions::default() };
    g.commit_revert(&merge_commit, &one).await.expect("revert the merge");
    let after = content(&g, "main").await;
    assert!(!after["node:Person"].iter().any(|p| p.contains("Sid")), "the merged insert is gone");
    assert!(after["node:Company"].iter().any(|c| c.contains("Initech")), "main's own change stays");
    let two = RevertOptions { mainline: Some(2), ..RevertOptions::default() };
    let err = g.commit_revert(&commit, &two).await.expect_err("not a merge");
    assert!(matches!(&err, OmniError::BadRequest(m) if m.contains("not a merge")), "{err}");
    let err = g.commit_revert(&first, &RevertOptions::default()).await.expect_err("no parent");
    assert!(matches!(err, OmniError::ParentlessCommit { .. }), "{err}");
    let err = g.commit_revert("nope", &RevertOptions::default()).await.expect_err("unknown");
    assert!(matches!(err, OmniError::NotFound(_)), "{err}");
}

/// Over HTTP and through the CLI: the answer's fields, a conflict as a 409
/// with its values (the CLI lists it and exits 1), a revert on a branch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_over_http_and_the_cli() {
    use crate::server::{get, post, start};
    let s = start().await;
    let update = json!({"query": r#"query q() { update Person set { age: 40 } where name = "Bob" }"#});
    assert_eq!(post(&s, "/graphs/g/mutate", update).await.0, 200);
    let (_, commits) = get(&s, "/graphs/g/commits").await;
    let commit = commits["commits"][0]["graph_commit_id"].as_str().expect("commit").to_string();
    let (st, v) = post(&s, &format!("/graphs/g/commits/{commit}/revert"), json!({"dry_run": true})).await;
    assert_eq!((st, v["dry_run"].clone(), v["graph_commit_id"].clone()), (200, json!(true), json!(null)), "{v}");
    let (st, v) = post(&s, "/graphs/g/commits/main/revert", json!({"mainline": 2})).await;
    assert_eq!((st, v["code"].clone()), (400, json!("bad_request")), "{v}");
    let (st, v) = post(&s, &format!("/graphs/g/commits/{commit}/revert"), json!({"branch": "main"})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!((v["reverted_commit_id"].clone(), v["branch"].clone()), (json!(commit), json!("main")), "{v}");
    let (_, commits) = get(&s, "/graphs/g/commits").await;
    assert_eq!(commits["commits"][0]["graph_commit_id"], v["graph_commit_id"]);
    // Reverting it again conflicts with nothing: Bob is back at 27 already,
    // so it sets him to 40 once more... as a revert of the revert.
    let again = v["graph_commit_id"].as_str().expect("commit").to_string();
    let (st, v) = post(&s, &format!("/graphs/g/commits/{again}/revert"), json!({})).await;
    assert_eq!(st, 200, "{v}");
    let read = json!({"query": r#"query q() { match { $p: Person { name: "Bob" } } return { $p.age } }"#});
    assert_eq!(post(&s, "/graphs/g/query", read).await.1["rows"], json!([{"p.age": 40}]));

    // The CLI on a graph of its own: a conflict lists its values and exits 1.
    let (dir, g) = loaded_social_graph().await;
    let loc = g.root().uri().to_string();
    let commit = mutate(&g, "main", r#"query q() { update Person set { age: 40 } where name = "Bob" }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 41 } where name = "Bob" }"#).await;
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).current_dir(dir.path()).output().expect("run");
    let out = run(&["commit", "revert", &commit, &loc]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("divergent_update:") && err.contains("age: base 40, ours 41, theirs 27"), "{err}");
    let out = run(&["commit", "revert", "--strategy", "theirs", "--json", &commit, &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((v["conflicts_decided"].clone(), v["strategy"].clone()), (json!(1), json!("theirs")), "{v}");
}

/// Cherry-pick: a commit's changes applied again on another branch as one
/// new single-parent commit. Onto a branch equal to the commit's parent it
/// yields the commit's own contents; a change the branch made to the same
/// entity is a conflict (nothing written) that a strategy decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cherry_pick_applies_one_commits_changes_onto_another_branch() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("x", "main").await.expect("branch");
    g.branch_create("y", "main").await.expect("branch");
    let commit = mutate(
        &g,
        "main",
        r#"query q() { update Person set { age: 40 } where name = "Bob" insert Person { name: "Eve", age: 5 } }"#,
    )
    .await;
    let r = g
        .commit_cherry_pick(&commit, &RevertOptions { branch: Some("x".into()), ..RevertOptions::default() })
        .await
        .expect("cherry-pick");
    assert_eq!(content(&g, "x").await, content(&g, "main").await, "x was main's parent: it now holds the commit");
    let now = head(&g, "x").await;
    assert_eq!(
        (Some(&now.commit_id), now.merged_parent_commit_id.as_deref()),
        (r.report.graph_commit_id.as_ref(), None)
    );
    assert_eq!(
        (now.operation.as_deref(), now.source_commit_id.as_deref()),
        (Some("cherry_pick"), Some(commit.as_str()))
    );

    mutate(&g, "y", r#"query q() { update Person set { age: 50 } where name = "Bob" }"#).await;
    let before = content(&g, "y").await;
    let onto_y = RevertOptions { branch: Some("y".into()), ..RevertOptions::default() };
    let err = g.commit_cherry_pick(&commit, &onto_y).await.expect_err("conflict");
    let OmniError::MergeConflicts(set) = &err else { panic!("{err}") };
    assert_eq!((set.conflicts[0].ours.clone(), set.conflicts[0].theirs.clone()), (Some(json!(50)), Some(json!(40))));
    assert_eq!(content(&g, "y").await, before, "nothing written");
    let theirs = RevertOptions { strategy: Some(MergeStrategy::Theirs), ..onto_y };
    assert_eq!(g.commit_cherry_pick(&commit, &theirs).await.expect("decided").report.conflicts_decided, 1);

    // Over HTTP and the CLI.
    let s = crate::server::start().await;
    let insert = json!({"query": r#"query q() { insert Person { name: "Hal", age: 9 } }"#, "branch": "main"});
    assert_eq!(crate::server::post(&s, "/graphs/g/branches", json!({"name": "z"})).await.0, 200);
    assert_eq!(crate::server::post(&s, "/graphs/g/mutate", insert).await.0, 200);
    let (st, v) = crate::server::post(&s, "/graphs/g/commits/main/cherry-pick", json!({"onto": "z"})).await;
    assert_eq!((st, v["onto"].clone()), (200, json!("z")), "{v}");
    assert!(v["picked_commit_id"].is_string() && v["graph_commit_id"].is_string(), "{v}");
    let (st, v) = crate::server::post(&s, "/graphs/g/commits/main/cherry-pick", json!({})).await;
    assert_eq!(st, 400, "`onto` is required: {v}");
    let loc = g.root().uri().to_string();
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let out = std::process::Command::new(bin)
        .args(["commit", "cherry-pick", &commit, "--onto", "y", "--dry-run", "--json", &loc])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    // y holds the commit's changes already (decided by theirs above): picking it again changes nothing.
    assert_eq!(
        (v["dry_run"].clone(), v["tables"].clone(), v["picked_commit_id"].clone()),
        (json!(true), json!([]), json!(commit))
    );
}

const BOB_40: &str = r#"query q() { update Person set { age: 40 } where name = "Bob" }"#;
const BOB_41: &str = r#"query q() { update Person set { age: 41 } where name = "Bob" }"#;
const NO_BOB: &str = r#"query q() { delete Person where name = "Bob" }"#;

/// The commit undone (`revert`) or picked (`cherry-pick`), the later
/// changes it meets on the branch, and the conflict kind that follows.
struct KindCase {
    kind: &'static str,
    commit: &'static str,
    later: &'static [&'static str],
}

/// A revert meets each conflict kind: with a later change of the same
/// property or entity (divergent update, delete vs update), with a later
/// insert of an entity it would bring back (divergent insert), and in the
/// result's validation (an edge left without its endpoint, a duplicate
/// unique value, a second edge where the cardinality allows one).
const REVERT_KINDS: [KindCase; 6] = [
    KindCase { kind: "divergent_update", commit: BOB_40, later: &[BOB_41] },
    KindCase { kind: "delete_vs_update", commit: BOB_40, later: &[NO_BOB] },
    KindCase {
        kind: "divergent_insert",
        commit: r#"query q() { delete Person where name = "Carol" }"#,
        later: &[r#"query q() { insert Person { name: "Carol", age: 50 } }"#],
    },
    KindCase {
        kind: "orphan_edge",
        commit: r#"query q() { insert Person { name: "Eve", age: 5 } }"#,
        later: &[r#"query q() { insert Knows { from: "Eve", to: "Alice" } }"#],
    },
    KindCase {
        kind: "unique_violation",
        commit: r#"query q() { update Person set { email: "bob2@example.com" } where name = "Bob" }"#,
        later: &[r#"query q() { update Person set { email: "bob@example.com" } where name = "Alice" }"#],
    },
    KindCase {
        kind: "cardinality_violation",
        commit: r#"query q() { delete WorksAt where title = "Staff Engineer" }"#,
        later: &[r#"query q() { insert Company { name: "Initech" } insert WorksAt { from: "Alice", to: "Initech" } }"#],
    },
];

/// A cherry-pick meets the same kinds: the picked commit's change against
/// the branch's own since their common parent.
const PICK_KINDS: [KindCase; 6] = [
    KindCase { kind: "divergent_update", commit: BOB_40, later: &[BOB_41] },
    KindCase { kind: "delete_vs_update", commit: BOB_40, later: &[NO_BOB] },
    KindCase {
        kind: "divergent_insert",
        commit: r#"query q() { insert Person { name: "Eve", age: 5 } }"#,
        later: &[r#"query q() { insert Person { name: "Eve", age: 6 } }"#],
    },
    KindCase {
        kind: "orphan_edge",
        commit: r#"query q() { insert Knows { from: "Carol", to: "Alice" } }"#,
        later: &[r#"query q() { delete Person where name = "Carol" }"#],
    },
    KindCase {
        kind: "unique_violation",
        commit: r#"query q() { update Person set { email: "x@example.com" } where name = "Bob" }"#,
        later: &[r#"query q() { update Person set { email: "x@example.com" } where name = "Alice" }"#],
    },
    KindCase {
        kind: "cardinality_violation",
        commit: r#"query q() { insert WorksAt { from: "Bob", to: "Acme" } }"#,
        later: &[r#"query q() { insert Company { name: "Initech" } insert WorksAt { from: "Bob", to: "Initech" } }"#],
    },
];

/// Every conflict kind, for a revert and for a cherry-pick, over HTTP (409
/// `conflict` naming the kind; the branch's head unmoved and no sidecar
/// left) and through the CLI (a dry run lists it and exits 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_and_cherry_pick_conflicts_of_every_kind() {
    use crate::server::{get, post, start};
    let s = start().await;
    let mutate = |branch: String, q: &'static str| {
        let s = &s;
        async move {
            let (st, v) = post(s, "/graphs/g/mutate", json!({"query": q, "branch": branch})).await;
            assert_eq!(st, 200, "{q}: {v}");
            v["graph_commit_id"].as_str().expect("commit").to_string()
        }
    };
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    for (pick, cases) in [(false, &REVERT_KINDS), (true, &PICK_KINDS)] {
        for (i, case) in cases.iter().enumerate() {
            let branch = format!("{}{i}", if pick { "pick" } else { "revert" });
            let ctx = format!("{branch}: {}", case.kind);
            assert_eq!(post(&s, "/graphs/g/branches", json!({"name": branch})).await.0, 200, "{ctx}");
            // A cherry-pick's commit is made on a branch of its own from the same parent.
            let home = if pick { format!("{branch}-src") } else { branch.clone() };
            if pick {
                assert_eq!(post(&s, "/graphs/g/branches", json!({"name": home})).await.0, 200, "{ctx}");
            }
            let commit = mutate(home.clone(), case.commit).await;
            let mut head = commit.clone();
            for q in case.later {
                head = mutate(branch.clone(), q).await;
            }
            let (route, body) = match pick {
                true => ("cherry-pick", json!({"onto": branch})),
                false => ("revert", json!({"branch": branch})),
            };
            let (st, v) = post(&s, &format!("/graphs/g/commits/{commit}/{route}"), body).await;
            assert_eq!((st, v["code"].clone()), (409, json!("conflict")), "{ctx}: {v}");
            let kinds: Vec<&str> =
                v["merge_conflicts"].as_array().into_iter().flatten().filter_map(|c| c["kind"].as_str()).collect();
            assert!(kinds.contains(&case.kind), "{ctx}: {kinds:?}");
            let (_, commits) = get(&s, &format!("/graphs/g/commits?branch={branch}&limit=1")).await;
            assert_eq!(commits["commits"][0]["graph_commit_id"], json!(head), "{ctx}: a refused write moved the head");
            let (_, recovery) = get(&s, "/graphs/g/recovery").await;
            assert_eq!(recovery["pending"], json!([]), "{ctx}: a refused write left a sidecar");

            let flag = if pick { "--onto" } else { "--branch" };
            let sub = if pick { "cherry-pick" } else { "revert" };
            let (code, err) = cli(&["commit", sub, "--dry-run", flag, &branch, &commit, &s.loc]);
            assert_eq!(code, Some(1), "{ctx}: {err}");
            assert!(err.contains(&format!("{}:", case.kind)), "{ctx}: {err}");
        }
    }
}
