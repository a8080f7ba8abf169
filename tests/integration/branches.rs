//! Graph branches: isolation, name rules, lazy forks, delete, history.

use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::recovery::invariants;
use omnigraph::{Graph, LoadMode, OmniError, ReadTarget, WriteOptions};
use serde_json::Map;

use crate::common::loaded_social_graph;

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn insert_person(g: &Graph, branch: &str, name: &str) -> String {
    let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} }}"#);
    g.mutate(&src, None, Map::new(), &on(branch)).await.expect("insert").commit_id.expect("a commit")
}

async fn people(g: &Graph, target: ReadTarget) -> Vec<String> {
    let src = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let r = g.query(src, None, Map::new(), &target).await.expect("query");
    omnigraph::result_rows(&r).iter().map(|row| row["p.name"].as_str().unwrap_or_default().to_string()).collect()
}

fn head(b: &str) -> ReadTarget {
    ReadTarget::Branch(b.into())
}

async fn assert_clean(g: &Graph, branch: &str) {
    let v = invariants::violations(g.root(), branch).await.expect("check");
    assert!(v.is_empty(), "{branch}: {v:?}");
}

/// Names of the native refs the table of `key` has.
async fn forks_of(g: &Graph, key: &str) -> Vec<String> {
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let uri = g.root().child_uri(&view.state.tables[key].location);
    table::list_branches(&uri).await.expect("list").into_keys().collect()
}

#[tokio::test]
async fn writes_on_a_branch_and_on_main_are_isolated() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("create");
    insert_person(&g, "feature", "Zed").await;
    insert_person(&g, "main", "Mia").await;
    assert_eq!(people(&g, head("feature")).await, ["Alice", "Bob", "Carol", "Zed"]);
    assert_eq!(people(&g, head("main")).await, ["Alice", "Bob", "Carol", "Mia"]);
    assert_clean(&g, "main").await;
    assert_clean(&g, "feature").await;
    // Only the touched table forked; the branch's other tables still read main's.
    assert_eq!(forks_of(&g, "node:Person").await, ["feature"]);
    assert!(forks_of(&g, "node:Company").await.is_empty());
    let snap = g.snapshot("feature").await.expect("snapshot");
    let person = snap.tables.iter().find(|t| t.table_key == "node:Person").expect("person");
    assert_eq!(person.table_branch.as_deref(), Some("feature"));
}

#[tokio::test]
async fn a_branch_created_at_commit_c_reads_cs_data() {
    let (_dir, g) = loaded_social_graph().await;
    let c = insert_person(&g, "main", "Mia").await;
    g.branch_create("at-c", "main").await.expect("create");
    insert_person(&g, "main", "Later").await;
    assert_eq!(people(&g, head("at-c")).await, people(&g, ReadTarget::Commit(c.clone())).await);
    assert_eq!(people(&g, head("at-c")).await, ["Alice", "Bob", "Carol", "Mia"]);
    let info = g.branch_list().await.expect("list").into_iter().find(|b| b.name == "at-c").expect("listed");
    assert_eq!(info.head_commit_id.as_deref(), Some(c.as_str()));
    assert_eq!(info.from.as_deref(), Some("main"));
}

#[tokio::test]
async fn a_pure_read_branch_forks_nothing() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("readonly", "main").await.expect("create");
    people(&g, head("readonly")).await;
    g.snapshot("readonly").await.expect("snapshot");
    for key in ["node:Person", "node:Company", "edge:Knows", "edge:WorksAt"] {
        assert!(forks_of(&g, key).await.is_empty(), "{key} forked on a read");
    }
    // A delete that matches nothing on a fresh branch forks nothing either.
    let out = g
        .mutate(r#"query q() { delete Person where name = "Nobody" }"#, None, Map::new(), &on("readonly"))
        .await
        .expect("empty delete");
    assert_eq!(out.commit_id, None);
    assert!(forks_of(&g, "node:Person").await.is_empty());
}

#[tokio::test]
async fn every_writer_forks_on_first_touch_and_stays_isolated() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("w", "main").await.expect("create");
    // Delete (cascading to edges), update, append and overwrite loads, all first touches.
    g.mutate(r#"query q() { delete Person where name = "Bob" }"#, None, Map::new(), &on("w")).await.expect("delete");
    assert_eq!(people(&g, head("w")).await, ["Alice", "Carol"]);
    g.mutate(r#"query q() { update Person set { age: 77 } where name = "Alice" }"#, None, Map::new(), &on("w"))
        .await
        .expect("update");
    g.load("{\"type\": \"Company\", \"data\": {\"name\": \"Initech\"}}\n".as_bytes(), LoadMode::Append, &on("w"))
        .await
        .expect("append");
    g.load("{\"type\": \"Company\", \"data\": {\"name\": \"Only\"}}\n".as_bytes(), LoadMode::Overwrite, &on("w"))
        .await
        .expect("overwrite");
    assert_eq!(people(&g, head("main")).await, ["Alice", "Bob", "Carol"], "main is untouched");
    let companies = "query q() { match { $c: Company } return { $c.name } }";
    let on_w = g.query(companies, None, Map::new(), &head("w")).await.expect("query");
    assert_eq!(omnigraph::result_rows(&on_w).len(), 1);
    let on_main = g.query(companies, None, Map::new(), &head("main")).await.expect("query");
    assert_eq!(omnigraph::result_rows(&on_main).len(), 1, "main keeps its one company");
    assert_clean(&g, "w").await;
    assert_clean(&g, "main").await;
}

#[tokio::test]
async fn branches_of_branches_inherit_and_isolate() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("a", "main").await.expect("a");
    insert_person(&g, "a", "OnA").await;
    g.branch_create("b", "a").await.expect("b from a");
    insert_person(&g, "b", "OnB").await;
    insert_person(&g, "a", "OnA2").await;
    assert_eq!(people(&g, head("b")).await, ["Alice", "Bob", "Carol", "OnA", "OnB"]);
    assert_eq!(people(&g, head("a")).await, ["Alice", "Bob", "Carol", "OnA", "OnA2"]);
    assert_clean(&g, "b").await;
    // a has a dependent, so it cannot go first.
    let err = g.branch_delete("a").await.expect_err("a has a child");
    assert!(matches!(err, OmniError::BranchConflict { .. }), "{err}");
    g.branch_delete("b").await.expect("delete b");
    g.branch_delete("a").await.expect("delete a: its only child is deleted (hidden)");
    assert!(!forks_of(&g, "node:Person").await.is_empty(), "a delete hides: the forks stay, restorable");
    let purge = omnigraph::DeleteOptions { purge: true, actor: None };
    g.branch_delete_with("a", &purge).await.expect("purge deleted a, and its deleted child first");
    assert!(forks_of(&g, "node:Person").await.is_empty(), "forks reclaimed with their branches");
    assert!(matches!(g.branch_restore("b", None, None).await, Err(OmniError::Gone(_))), "b went with a");
}

#[tokio::test]
async fn each_refused_name_class_has_a_clear_error() {
    let (_dir, g) = loaded_social_graph().await;
    for bad in ["", "main", "main/x", "__internal", "/lead", "trail/", "a//b", "a/../b", "..", "a\tb", "sp ace", "ü"] {
        let err = g.branch_create(bad, "main").await.expect_err(bad);
        assert!(matches!(err, OmniError::BadRequest(_)), "{bad:?}: {err}");
        assert_eq!(err.http_status(), 400);
        assert!(err.to_string().contains("invalid branch name"), "{bad:?}: {err}");
    }
    g.branch_create("review/alice", "main").await.expect("create");
    for overlapping in ["review", "review/alice/x", "review/alice"] {
        let err = g.branch_create(overlapping, "main").await.expect_err(overlapping);
        assert!(matches!(err, OmniError::BranchConflict { .. }), "{overlapping}: {err}");
        assert_eq!(err.http_status(), 409);
    }
    g.branch_create("review/bob", "main").await.expect("a sibling is disjoint");
    assert!(matches!(g.branch_create("x", "nope").await, Err(OmniError::NotFound(_))));
    assert!(matches!(g.branch_delete("main").await, Err(OmniError::BadRequest(_))));
    assert!(matches!(g.branch_delete("nope").await, Err(OmniError::NotFound(_))));
    assert!(matches!(g.snapshot("nope").await, Err(OmniError::NotFound(_))));
    let write = g.mutate(r#"query q() { insert Company { name: "X" } }"#, None, Map::new(), &on("nope")).await;
    assert!(matches!(write, Err(OmniError::NotFound(_))), "{write:?}");
}

#[tokio::test]
async fn delete_then_recreate_reads_the_new_parent_not_the_old_fork() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("tmp", "main").await.expect("create");
    insert_person(&g, "tmp", "Gone").await;
    let deleted = g.branch_delete("tmp").await.expect("delete");
    assert!(deleted.restorable && deleted.forks_reclaimed.is_empty(), "a delete hides: {deleted:?}");
    let gone = g.snapshot("tmp").await;
    assert!(matches!(gone, Err(OmniError::NotFound(_))), "{gone:?}");
    assert!(!g.branch_list().await.expect("list").iter().any(|b| b.name == "tmp"));
    g.branch_create("tmp", "main").await.expect("recreate");
    assert_eq!(people(&g, head("tmp")).await, ["Alice", "Bob", "Carol"]);
    insert_person(&g, "tmp", "Again").await;
    assert_eq!(people(&g, head("tmp")).await, ["Again", "Alice", "Bob", "Carol"]);
    assert_clean(&g, "tmp").await;
}

#[tokio::test]
async fn commit_list_on_a_branch_shows_inherited_then_own_newest_first() {
    let (_dir, g) = loaded_social_graph().await;
    let main_before: Vec<String> = g.commits("main", None).await.expect("c").into_iter().map(|c| c.commit_id).collect();
    g.branch_create("hist", "main").await.expect("create");
    let own1 = insert_person(&g, "hist", "H1").await;
    let own2 = insert_person(&g, "hist", "H2").await;
    insert_person(&g, "main", "NotInHistory").await;
    let listed: Vec<String> = g.commits("hist", None).await.expect("c").into_iter().map(|c| c.commit_id).collect();
    let mut expected = vec![own2.clone(), own1.clone()];
    expected.extend(main_before.iter().cloned());
    assert_eq!(listed, expected);
    assert_eq!(g.commits("hist", Some(1)).await.expect("c")[0].commit_id, own2);
    let shown = g.commit(&own1).await.expect("show a branch commit");
    assert_eq!(shown.branch, "hist");
    assert_eq!(shown.parent_commit_id.as_deref(), Some(main_before[0].as_str()));
    // Time travel to a branch commit.
    assert_eq!(people(&g, ReadTarget::Commit(own1)).await, ["Alice", "Bob", "Carol", "H1"]);
}

#[tokio::test]
async fn merge_base_is_the_fork_point_until_histories_share_more() {
    let (_dir, g) = loaded_social_graph().await;
    let fork_point = g.commits("main", Some(1)).await.expect("c")[0].commit_id.clone();
    g.branch_create("mb", "main").await.expect("create");
    assert_eq!(g.merge_base("main", "mb").await.expect("base").as_deref(), Some(fork_point.as_str()));
    insert_person(&g, "mb", "B1").await;
    insert_person(&g, "main", "M1").await;
    assert_eq!(g.merge_base("mb", "main").await.expect("base").as_deref(), Some(fork_point.as_str()));
    g.branch_create("mb2", "mb").await.expect("nested");
    let on_mb = g.commits("mb", Some(1)).await.expect("c")[0].commit_id.clone();
    insert_person(&g, "mb2", "C1").await;
    assert_eq!(g.merge_base("mb2", "mb").await.expect("base").as_deref(), Some(on_mb.as_str()));
    assert_eq!(g.merge_base("mb2", "main").await.expect("base").as_deref(), Some(fork_point.as_str()));
}

#[tokio::test]
async fn concurrent_writes_on_different_branches_all_land() {
    let (_dir, g) = loaded_social_graph().await;
    for b in ["p1", "p2", "p3"] {
        g.branch_create(b, "main").await.expect("create");
    }
    let mut tasks = Vec::new();
    for b in ["p1", "p2", "p3", "main"] {
        for i in 0..3 {
            let g = g.clone();
            tasks.push(tokio::spawn(async move { insert_person(&g, b, &format!("{b}-{i}")).await }));
        }
    }
    for t in tasks {
        t.await.expect("join");
    }
    for b in ["p1", "p2", "p3", "main"] {
        let names = people(&g, head(b)).await;
        assert_eq!(names.len(), 6, "{b}: {names:?}");
        assert!(names.iter().filter(|n| n.starts_with(b)).count() == 3, "{b}: {names:?}");
        assert_clean(&g, b).await;
    }
}

#[tokio::test]
async fn deleting_a_branch_retires_its_actors() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("gone", "main").await.expect("create");
    insert_person(&g, "gone", "X").await;
    let key = omnigraph::actors::child_key::ChildKey::Branch("gone".into());
    assert!(g.runtime().has_actor(&key));
    g.branch_delete("gone").await.expect("delete");
    for _ in 0..50 {
        if !g.runtime().has_actor(&key) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the deleted branch's actor is still running");
}

/// Lance creates a ref in two steps (clone the tree, then write its
/// `BranchContents`). A crash between them leaves a clone-only tree: a
/// graph branch create of that name, and a first write forking a table,
/// both reclaim it and succeed.
#[tokio::test]
async fn clone_only_trees_left_by_a_torn_native_create_are_reclaimed() {
    let (_dir, g) = loaded_social_graph().await;
    let manifest_uri = manifest::uri(g.root());
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let person = g.root().child_uri(&view.state.tables["node:Person"].location);
    for uri in [&manifest_uri, &person] {
        table::create_branch(uri, None, table::head_version(uri, None).await.expect("head"), "torn")
            .await
            .expect("ref");
        let contents = std::path::Path::new(uri).join("_refs/branches/torn.json");
        std::fs::remove_file(&contents).expect("tear the ref off its tree");
        assert!(std::path::Path::new(uri).join("tree/torn").exists(), "the clone-only tree stays");
    }
    g.branch_create("torn", "main").await.expect("create over a clone-only manifest tree");
    insert_person(&g, "torn", "T").await;
    assert_eq!(people(&g, head("torn")).await, ["Alice", "Bob", "Carol", "T"]);
    assert_clean(&g, "torn").await;
}

/// A table fork the manifest does not point at (left by a delete that
/// stopped half way) is reclaimed when the name is created again.
#[tokio::test]
async fn a_recreated_branch_reclaims_stale_forks_of_its_name() {
    let (_dir, g) = loaded_social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let person = g.root().child_uri(&view.state.tables["node:Person"].location);
    table::create_branch(&person, None, view.state.tables["node:Person"].version, "stale").await.expect("stale fork");
    g.branch_create("stale", "main").await.expect("create reclaims");
    assert!(forks_of(&g, "node:Person").await.is_empty());
    insert_person(&g, "stale", "S").await;
    assert_eq!(people(&g, head("stale")).await, ["Alice", "Bob", "Carol", "S"]);
    assert_clean(&g, "stale").await;
}

#[tokio::test]
async fn racing_creates_of_one_name_make_exactly_one_branch() {
    let (_dir, g) = loaded_social_graph().await;
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let g = g.clone();
            tokio::spawn(async move { g.branch_create("race", "main").await })
        })
        .collect();
    let mut created = 0;
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => created += 1,
            Err(OmniError::BranchConflict { .. }) => {}
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!(created, 1);
    assert_eq!(g.branch_list().await.expect("list").iter().filter(|b| b.name == "race").count(), 1);
}

/// Writes racing a purging delete of their branch either land before it
/// (and are deleted with it) or find the branch gone; nothing is left behind.
#[tokio::test]
async fn writes_racing_a_branch_delete_leave_nothing_behind() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("doomed", "main").await.expect("create");
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move {
                let src = format!(r#"query q() {{ insert Person {{ name: "w{i}", age: 1 }} }}"#);
                g.mutate(&src, None, Map::new(), &on("doomed")).await
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    g.branch_delete_with("doomed", &omnigraph::DeleteOptions { purge: true, actor: None }).await.expect("delete");
    for w in writers {
        match w.await.expect("join") {
            Ok(_) | Err(OmniError::NotFound(_)) => {}
            Err(e) => panic!("a racing write must land or find the branch gone: {e}"),
        }
    }
    assert!(matches!(g.snapshot("doomed").await, Err(OmniError::NotFound(_))));
    for key in ["node:Person", "node:Company", "edge:Knows", "edge:WorksAt"] {
        assert!(forks_of(&g, key).await.is_empty(), "{key}: a fork outlived its branch");
    }
    assert_clean(&g, "main").await;
    assert_eq!(people(&g, head("main")).await, ["Alice", "Bob", "Carol"]);
}

/// Every commit adds a `__manifest` fragment; the branch actor compacts them
/// (physically only) so a write's cost does not grow with history, while
/// every commit stays readable and time travel still works.
#[tokio::test]
async fn the_manifest_stays_compact_and_history_survives_compaction() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("long", "main").await.expect("create");
    let first = insert_person(&g, "long", "n0").await;
    for i in 1..45 {
        insert_person(&g, "long", &format!("n{i}")).await;
    }
    let view = manifest::load(g.root(), "long", None).await.expect("view");
    let fragments = view.dataset.get_fragments().len();
    assert!(fragments <= omnigraph::actors::branch::MANIFEST_COMPACT_ABOVE + 1, "{fragments} fragments");
    assert_eq!(g.commits("long", None).await.expect("commits").len(), 45 + 2, "own 45 + inherited 2");
    let then = people(&g, ReadTarget::Commit(first)).await;
    assert_eq!(then, ["Alice", "Bob", "Carol", "n0"], "time travel across compactions");
    assert_eq!(people(&g, head("long")).await.len(), 48);
    assert_clean(&g, "long").await;
}
