//! Undo: `branch reset` (a branch's content made equal to another
//! commit's, by moving its head on a branch other than main, or as a new
//! commit on main or with `as_commit`), branch restore (a deleted branch
//! brought back until cleanup purges it) and the reflog, through the
//! embedded handle, HTTP and the CLI.

use omnigraph::{Graph, OmniError, Omnigraph, ResetOptions, WriteOptions};
use serde_json::{Map, json};

use crate::common::loaded_social_graph;
use crate::content::{content, content_at};

async fn mutate(g: &Graph, branch: &str, src: &str) -> String {
    let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
    let out = g.mutate(src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("{src}: {e}"));
    out.commit_id.expect("a commit")
}

/// The commit ids reachable from a branch head, newest first.
async fn history(g: &Graph, branch: &str) -> Vec<String> {
    g.commits(branch, None).await.expect("commits").into_iter().map(|c| c.commit_id).collect()
}

const INSERT: &str = r#"query q() { insert Person { name: "Eve", age: 5 } insert Knows { from: "Eve", to: "Alice" } }"#;
const UPDATE: &str = r#"query q() { update Person set { age: 40, role: "engineer" } where name = "Bob" }"#;
const DELETE: &str = r#"query q() { delete Person where name = "Carol" }"#;

/// On a branch other than main the head moves: back to an earlier commit
/// (its content exactly, the later commits gone from its history), forward
/// again to a commit it left (undoing the reset), and a fresh handle sees
/// the same head. A dry run writes nothing; a write after a reset is the
/// child of the new head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_moves_a_branch_head_back_and_forward() {
    let (_dir, g) = loaded_social_graph().await;
    let main = content(&g, "main").await;
    g.branch_create("feature", "main").await.expect("branch");
    let c1 = mutate(&g, "feature", INSERT).await;
    let at_c1 = content(&g, "feature").await;
    mutate(&g, "feature", UPDATE).await;
    let c3 = mutate(&g, "feature", DELETE).await;
    let at_c3 = content(&g, "feature").await;
    let full = history(&g, "feature").await;

    let dry = ResetOptions { dry_run: true, ..ResetOptions::default() };
    let planned = g.branch_reset("feature", &c1, &dry).await.expect("dry run");
    assert!(planned.graph_commit_id.is_none() && !planned.tables.is_empty(), "{planned:?}");
    assert_eq!(history(&g, "feature").await, full, "a dry run writes nothing");

    let r = g.branch_reset("feature", &c1, &ResetOptions::default()).await.expect("reset");
    assert_eq!(serde_json::to_value(r.mode).expect("mode"), json!("moved_head"));
    assert_eq!((r.from_commit_id.as_str(), r.graph_commit_id.as_deref()), (c3.as_str(), Some(c1.as_str())));
    assert_eq!(content(&g, "feature").await, at_c1, "the branch holds c1's content");
    assert_eq!(history(&g, "feature").await, full[2..].to_vec(), "the later commits left its history");
    assert_eq!(content(&g, "main").await, main, "main is untouched");

    let r = g.branch_reset("feature", &c3, &ResetOptions::default()).await.expect("forward again");
    assert_eq!(r.graph_commit_id.as_deref(), Some(c3.as_str()));
    assert_eq!((content(&g, "feature").await, history(&g, "feature").await), (at_c3.clone(), full.clone()));
    let same = g.branch_reset("feature", &c3, &ResetOptions::default()).await.expect("no-op");
    assert_eq!((same.outcome, same.graph_commit_id), ("already_up_to_date", None));

    let loc = g.root().uri().to_string();
    drop(g);
    let g = Omnigraph::open(&loc).await.expect("reopen");
    assert_eq!((content(&g, "feature").await, history(&g, "feature").await), (at_c3, full.clone()));
    g.branch_reset("feature", &format!("{c3}~2"), &ResetOptions::default()).await.expect("reset by ref");
    let next = mutate(&g, "feature", r#"query q() { insert Company { name: "Initech" } }"#).await;
    let now = g.commits("feature", Some(1)).await.expect("commits").remove(0);
    assert_eq!((now.commit_id, now.parent_commit_id), (next, Some(c1)));
}

/// On main a reset lands as a new commit whose content equals the target's
/// (so does `as_commit` on any branch); `if_commit` refuses a moved head
/// with 412 and writes nothing; a head cannot move to a commit the branch
/// never held, which `as_commit` makes a commit instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_main_is_a_commit_and_if_commit_guards_it() {
    let (_dir, g) = loaded_social_graph().await;
    let c1 = mutate(&g, "main", UPDATE).await;
    let at_c1 = content(&g, "main").await;
    g.branch_create("feature", "main").await.expect("branch");
    let c2 = mutate(&g, "main", DELETE).await;

    let guarded = ResetOptions { if_commit: Some(c1.clone()), ..ResetOptions::default() };
    let err = g.branch_reset("main", &c1, &guarded).await.expect_err("the head moved");
    assert!(matches!(err, OmniError::PreconditionFailed { .. }), "{err}");
    assert_eq!(history(&g, "main").await[0], c2, "a refused reset writes nothing");

    let guarded = ResetOptions { if_commit: Some(c2.clone()), ..ResetOptions::default() };
    let r = g.branch_reset("main", &c1, &guarded).await.expect("reset");
    assert_eq!(serde_json::to_value(r.mode).expect("mode"), json!("commit"));
    assert_eq!(content(&g, "main").await, at_c1);
    let now = g.commits("main", Some(1)).await.expect("commits").remove(0);
    assert_eq!((now.operation.as_deref(), now.source_commit_id.as_deref()), (Some("reset"), Some(c1.as_str())));
    assert_eq!((Some(now.commit_id), now.parent_commit_id), (r.graph_commit_id, Some(c2.clone())));

    // The branch forked before c2: c2 is not in its history.
    let err = g.branch_reset("feature", &c2, &ResetOptions::default()).await.expect_err("not its history");
    assert!(matches!(&err, OmniError::BadRequest(m) if m.contains("as_commit")), "{err}");
    let as_commit = ResetOptions { as_commit: true, ..ResetOptions::default() };
    mutate(&g, "feature", INSERT).await;
    let r = g.branch_reset("feature", &c2, &as_commit).await.expect("as a commit");
    assert_eq!(serde_json::to_value(r.mode).expect("mode"), json!("commit"));
    let c2_version = g.commits("main", None).await.expect("commits").into_iter().find(|c| c.commit_id == c2);
    let expected = content_at(&g, "main", c2_version.map(|c| c.manifest_version)).await;
    assert_eq!(content(&g, "feature").await, expected);
    assert_ne!(expected, at_c1, "c2 deleted Carol");
}

/// Over HTTP and through the CLI: the answer's fields, 412 on a moved head,
/// 400 on a bad body, 404 on an unknown ref or action.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_over_http_and_the_cli() {
    use crate::server::{get, post, start};
    let s = start().await;
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "feature"})).await.0, 200);
    let (_, commits) = get(&s, "/graphs/g/commits?branch=feature").await;
    let base = commits["commits"][0]["graph_commit_id"].as_str().expect("commit").to_string();
    let insert = json!({"query": INSERT, "branch": "feature"});
    let (st, v) = post(&s, "/graphs/g/mutate", insert).await;
    assert_eq!(st, 200, "{v}");
    let head = v["graph_commit_id"].as_str().expect("commit").to_string();

    let (st, v) = post(&s, "/graphs/g/branches/feature/reset", json!({"to": base, "if_commit": base})).await;
    assert_eq!((st, v["code"].clone()), (412, json!("precondition_failed")), "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/feature/reset", json!({"to": base, "hard": true})).await;
    assert_eq!((st, v["code"].clone()), (400, json!("bad_request")), "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/feature/reset", json!({"to": "nope"})).await;
    assert_eq!(st, 404, "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/feature/rebase", json!({"to": base})).await;
    assert_eq!(st, 404, "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/feature/reset", json!({"to": base, "if_commit": head})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["mode"].clone(), v["from_commit_id"].clone(), v["graph_commit_id"].clone(), v["outcome"].clone()),
        (json!("moved_head"), json!(head), json!(base), json!("reset")),
        "{v}"
    );
    assert!(v["operation_id"].is_string() && v["actor_id"].is_string(), "{v}");
    let read = json!({"query": r#"query q() { match { $p: Person { name: "Eve" } } return { $p.age } }"#, "branch": "feature"});
    assert_eq!(post(&s, "/graphs/g/query", read).await.1["rows"], json!([]));

    // The CLI on a graph of its own.
    let (dir, g) = loaded_social_graph().await;
    let loc = g.root().uri().to_string();
    let before = mutate(&g, "main", UPDATE).await;
    mutate(&g, "main", DELETE).await;
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).current_dir(dir.path()).output().expect("run");
    let out = run(&["branch", "reset", "main", "--to", "main~1", "--dry-run", &loc]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("would reset main"), "{said}");
    let out = run(&["branch", "reset", "main", "--to", &before, "--json", &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((v["mode"].clone(), v["to_commit_id"].clone()), (json!("commit"), json!(before)), "{v}");
    let out = run(&["branch", "reset", "main", "--to", &before, "--if-commit", &before, &loc]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "a moved head: {err}");
}

/// The reflog lists every move of a head, newest first, with the old head
/// to go back to: commits (by writer), a reset's head move, and a branch's
/// creation and deletion (which outlive it); `limit` keeps the newest, an
/// unknown branch is 404, and HTTP and the CLI answer the same fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reflog_records_every_move_of_a_head() {
    let (dir, g) = loaded_social_graph().await;
    let fork = history(&g, "main").await[0].clone();
    g.branch_create("feature", "main").await.expect("branch");
    let c1 = mutate(&g, "feature", INSERT).await;
    let c2 = mutate(&g, "feature", UPDATE).await;
    g.branch_reset("feature", &c1, &ResetOptions::default()).await.expect("reset");
    let moves = |log: &[omnigraph::ReflogEntry]| -> Vec<(String, Option<String>, Option<String>)> {
        log.iter().map(|e| (e.operation.clone(), e.old_head.clone(), e.new_head.clone())).collect()
    };
    let s = |v: &str| Some(v.to_string());
    let log = g.reflog(Some("feature"), None).await.expect("reflog");
    assert_eq!(
        moves(&log),
        vec![
            ("reset".into(), s(&c2), s(&c1)),
            ("mutation".into(), s(&c1), s(&c2)),
            ("mutation".into(), s(&fork), s(&c1)),
            ("create".into(), None, s(&fork)),
        ]
    );
    assert!(log.iter().all(|e| e.branch == "feature"), "{log:?}");
    let newest = g.reflog(Some("feature"), Some(1)).await.expect("limit");
    assert_eq!(moves(&newest), moves(&log[..1]));

    g.branch_delete("feature").await.expect("delete");
    let log = g.reflog(Some("feature"), None).await.expect("a deleted branch's reflog");
    assert_eq!(moves(&log[..2]), vec![("delete".into(), s(&c1), None), ("reset".into(), s(&c2), s(&c1))]);
    assert_eq!(log.len(), 5, "a deleted branch keeps its moves until it is purged: {log:?}");
    g.branch_delete_with("feature", &omnigraph::DeleteOptions { purge: true, actor: None }).await.expect("purge");
    let log = g.reflog(Some("feature"), None).await.expect("a purged branch's reflog");
    assert_eq!(moves(&log), vec![("purge".into(), s(&c1), None), ("create".into(), None, s(&fork))]);
    let all = g.reflog(None, None).await.expect("every branch");
    let main: Vec<&str> = all.iter().filter(|e| e.branch == "main").map(|e| e.operation.as_str()).collect();
    assert_eq!(main, vec!["load", "init"], "{all:?}");
    let err = g.reflog(Some("nope"), None).await.expect_err("unknown");
    assert!(matches!(err, OmniError::NotFound(_)), "{err}");

    let loc = g.root().uri().to_string();
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let out = std::process::Command::new(bin)
        .args(["reflog", "--branch", "feature", "--json", &loc])
        .current_dir(dir.path())
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["entries"][0]["operation"], json!("purge"), "{v}");
    assert_eq!(v["entries"][0]["old_head"], json!(c1), "{v}");
    assert!(v["entries"][0]["at"].as_str().is_some_and(|t| t.contains('T')), "{v}");

    use crate::server::{get, start};
    let s = start().await;
    let (st, v) = get(&s, "/graphs/g/reflog?branch=main&limit=1").await;
    assert_eq!(st, 200, "{v}");
    let e = &v["entries"][0];
    assert_eq!((e["branch"].clone(), e["new_head"].is_string()), (json!("main"), true), "{v}");
    assert!(e.as_object().is_some_and(|o| o.contains_key("actor_id") && o.contains_key("old_head")), "{v}");
    assert_eq!(get(&s, "/graphs/g/reflog?branch=nope").await.0, 404);
}

/// A deleted branch is hidden from every read, write and listing, and a
/// restore brings it back exactly (at its last head, or at a commit of its
/// history), in this handle and a fresh one. Restoring a branch that exists
/// is 409, a name never deleted 404; creating a branch of a deleted one's
/// name takes the name (the old one is purged: its restore is 410).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_branch_is_hidden_and_restored_exactly() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let c1 = mutate(&g, "feature", INSERT).await;
    let at_c1 = content(&g, "feature").await;
    let c2 = mutate(&g, "feature", UPDATE).await;
    let at_c2 = content(&g, "feature").await;
    let full = history(&g, "feature").await;

    let deleted = g.branch_delete("feature").await.expect("delete");
    assert!(deleted.restorable && deleted.head_commit_id.as_deref() == Some(c2.as_str()), "{deleted:?}");
    assert!(!g.branch_list().await.expect("list").iter().any(|b| b.name == "feature"));
    assert!(matches!(g.snapshot("feature").await, Err(OmniError::NotFound(_))));
    let on_feature = WriteOptions { branch: "feature".into(), ..Default::default() };
    let write = g.mutate(DELETE, None, Map::new(), &on_feature).await;
    assert!(matches!(write, Err(OmniError::NotFound(_))), "a hidden branch takes no write: {write:?}");
    assert!(matches!(g.branch_delete("feature").await, Err(OmniError::NotFound(_))), "deleted once");

    let loc = g.root().uri().to_string();
    drop(g);
    let g = Omnigraph::open(&loc).await.expect("reopen");
    assert!(matches!(g.snapshot("feature").await, Err(OmniError::NotFound(_))), "hidden in a fresh handle");
    let r = g.branch_restore("feature", None, Some("ops")).await.expect("restore");
    assert_eq!((r.head_commit_id.as_str(), r.deleted_head_commit_id.as_str()), (c2.as_str(), c2.as_str()));
    assert_eq!(r.actor_id.as_deref(), Some("ops"));
    assert_eq!((content(&g, "feature").await, history(&g, "feature").await), (at_c2.clone(), full.clone()));
    let err = g.branch_restore("feature", None, None).await.expect_err("it exists");
    assert_eq!(err.http_status(), 409, "{err}");
    assert_eq!(g.branch_restore("nope", None, None).await.expect_err("never deleted").http_status(), 404);

    g.branch_delete("feature").await.expect("delete again");
    let err = g.branch_restore("feature", Some("01NOTACOMMIT"), None).await.expect_err("not in its history");
    assert_eq!(err.http_status(), 404, "{err}");
    let r = g.branch_restore("feature", Some(&c1), None).await.expect("restore at c1");
    assert_eq!((r.head_commit_id.as_str(), r.deleted_head_commit_id.as_str()), (c1.as_str(), c2.as_str()));
    assert_eq!(content(&g, "feature").await, at_c1, "restored at an earlier head of its history");
    let next = mutate(&g, "feature", r#"query q() { insert Company { name: "Initech" } }"#).await;
    let now = g.commits("feature", Some(1)).await.expect("commits").remove(0);
    assert_eq!((now.commit_id, now.parent_commit_id), (next, Some(c1.clone())));

    g.branch_delete("feature").await.expect("delete a third time");
    g.branch_create("feature", "main").await.expect("a new branch takes the name");
    assert_eq!(content(&g, "feature").await, content(&g, "main").await, "the new one starts at main");
    g.branch_delete_with("feature", &omnigraph::DeleteOptions { purge: true, actor: None }).await.expect("purge");
    let err = g.branch_restore("feature", None, None).await.expect_err("purged");
    assert!(matches!(err, OmniError::Gone(_)) && err.http_status() == 410, "{err}");
}

/// Cleanup keeps what a deleted branch and a reset-away head read inside
/// the reflog window (restore and reset back answer exactly after a
/// `--keep 1` cleanup), and past it purges the deleted branch (410) and
/// lets the reset-away head go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_keeps_what_the_reflog_window_can_restore() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("gone", "main").await.expect("branch");
    mutate(&g, "gone", INSERT).await;
    mutate(&g, "gone", UPDATE).await;
    let held = content(&g, "gone").await;
    g.branch_create("moved", "main").await.expect("branch");
    let m1 = mutate(&g, "moved", INSERT).await;
    let m2 = mutate(&g, "moved", DELETE).await;
    let at_m2 = content(&g, "moved").await;
    g.branch_reset("moved", &m1, &ResetOptions::default()).await.expect("reset");
    g.branch_delete("gone").await.expect("delete");

    let dry = g.cleanup_with(Some(1), None, Some("0s"), false).await.expect("dry run");
    assert_eq!(dry.branches_purged, ["gone"], "{dry:?}");
    let done = g.cleanup(Some(1), None, true).await.expect("cleanup inside the window");
    assert!(done.versions_removed > 0 && done.branches_purged.is_empty(), "{done:?}");
    g.branch_restore("gone", None, None).await.expect("restore after cleanup");
    assert_eq!(content(&g, "gone").await, held, "cleanup kept what the deleted branch reads");
    g.branch_reset("moved", &m2, &ResetOptions::default()).await.expect("reset back");
    assert_eq!(content(&g, "moved").await, at_m2, "cleanup kept the reset-away head");
    g.branch_reset("moved", &m1, &ResetOptions::default()).await.expect("reset again");
    g.branch_delete("gone").await.expect("delete again");

    let done = g.cleanup_with(Some(1), None, Some("0s"), true).await.expect("cleanup past the window");
    assert_eq!(done.branches_purged, ["gone"], "{done:?}");
    assert!(done.reflog_records_pruned >= 2, "the create records went: {done:?}");
    let err = g.branch_restore("gone", None, None).await.expect_err("purged");
    assert_eq!(err.http_status(), 410, "{err}");
    let err = g.branch_reset("moved", &m2, &ResetOptions::default()).await.expect_err("the reset-away head went");
    assert_eq!(err.http_status(), 410, "{err}");
    let view = omnigraph::engine::manifest::load(g.root(), "main", None).await.expect("view");
    for t in view.state.tables.values() {
        let uri = g.root().child_uri(&t.location);
        let forks = omnigraph::engine::storage::table::list_branches(&uri).await.expect("forks");
        assert!(!forks.contains_key("gone"), "{}: the purge reclaimed the fork", t.table_key);
    }
}

/// A schema apply on main proceeds while a branch is deleted (hidden), and
/// that branch comes back under its own schema, not main's new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_deleted_before_a_schema_apply_comes_back_under_its_own_schema() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("old", "main").await.expect("branch");
    mutate(&g, "old", INSERT).await;
    g.branch_delete("old").await.expect("delete");
    let schema = include_str!("../../examples/social.pg");
    let evolved = schema.replacen("    founded: Date?\n", "    founded: Date?\n    employees: I32?\n", 1);
    assert_ne!(schema, evolved, "the fixture has a Company type");
    g.schema_apply(&evolved, false, None).await.expect("apply with a deleted branch");
    g.branch_restore("old", None, None).await.expect("restore");
    assert_eq!(g.schema_of("old").await.expect("schema").source, schema, "it keeps the schema it had");
    assert_eq!(g.schema().await.expect("main").source, evolved);
    mutate(&g, "old", r#"query q() { insert Person { name: "Back", age: 1 } }"#).await;
}

/// HTTP and the CLI: `DELETE` hides (restorable) or with `purge=true`
/// removes for good; `POST …/restore` brings a hidden branch back and
/// answers 410 once purged; the CLI prints the same fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_over_http_and_the_cli() {
    use crate::server::{call, post, start};
    let delete = |s: &crate::server::Server, path: &str| {
        let url = format!("{}{path}", s.base);
        async move {
            let (st, v, _) = call("DELETE", &url, Some(crate::server::TOKEN), None).await;
            (st, v)
        }
    };
    let s = start().await;
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "team/a"})).await.0, 200);
    let (st, v) = delete(&s, "/graphs/g/branches/team/a").await;
    assert_eq!((st, v["restorable"].clone()), (200, json!(true)), "{v}");
    let head = v["head_commit_id"].clone();
    let (st, v) = post(&s, "/graphs/g/branches/team/a/restore", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!((v["branch"].clone(), v["head_commit_id"].clone()), (json!("team/a"), head), "{v}");
    assert!(v["operation_id"].is_string() && v["actor_id"].is_string(), "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/team/a/restore", json!({"at": 5})).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = delete(&s, "/graphs/g/branches/team/a?purge=maybe").await;
    assert_eq!((st, v["code"].clone()), (400, json!("bad_request")), "{v}");
    let (st, v) = delete(&s, "/graphs/g/branches/team/a?purge=true").await;
    assert_eq!((st, v["restorable"].clone()), (200, json!(false)), "{v}");
    let (st, v) = post(&s, "/graphs/g/branches/team/a/restore", json!({})).await;
    assert_eq!((st, v["code"].clone()), (410, json!("gone")), "{v}");

    let (dir, g) = loaded_social_graph().await;
    let loc = g.root().uri().to_string();
    g.branch_create("x", "main").await.expect("branch");
    drop(g);
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let run = |args: &[&str]| std::process::Command::new(bin).args(args).current_dir(dir.path()).output().expect("run");
    let out = run(&["branch", "delete", "x", "--json", &loc]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["restorable"], json!(true), "{v}");
    let out = run(&["branch", "restore", "x", "--json", &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["branch"], json!("x"), "{v}");
    let out = run(&["branch", "delete", "--purge", "x", &loc]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("purged branch x"), "{out:?}");
    let out = run(&["branch", "restore", "x", &loc]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(1) && err.contains("gone"), "{err}");
}
