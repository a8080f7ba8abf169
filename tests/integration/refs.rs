//! Refs (branches, tags, commit ids, `REF~N`, `A...B`) through the one
//! resolver every read uses, and tags: embedded, CLI and HTTP.

use std::process::{Command, Output};

use omnigraph::{Graph, OmniError, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::{loaded_social_graph, temp_graph_dir};
use crate::server::{TOKEN, call, get, post, start};

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn insert(g: &Graph, branch: &str, name: &str) -> String {
    let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} }}"#);
    g.mutate(&src, None, Map::new(), &on(branch)).await.expect("insert").commit_id.expect("a commit")
}

async fn people(g: &Graph, target: ReadTarget) -> Vec<String> {
    let src = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let r = g.query(src, None, Map::new(), &target).await.unwrap_or_else(|e| panic!("query at {target:?}: {e}"));
    omnigraph::result_rows(&r).iter().map(|row| row["p.name"].as_str().unwrap_or_default().to_string()).collect()
}

async fn commit_of(g: &Graph, r: &str) -> String {
    g.commit(r).await.unwrap_or_else(|e| panic!("resolve {r}: {e}")).commit_id
}

#[tokio::test]
async fn every_kind_of_ref_resolves_and_reads() {
    let (_dir, g) = loaded_social_graph().await;
    let c0 = commit_of(&g, "main").await;
    let c1 = insert(&g, "main", "Ann").await;
    let c2 = insert(&g, "main", "Ben").await;
    // Ancestors walk first parents; `~` repeats and `~` alone is one.
    assert_eq!(commit_of(&g, "main~1").await, c1);
    assert_eq!(commit_of(&g, "main~2").await, c0);
    assert_eq!(commit_of(&g, "main~~").await, c0);
    assert_eq!(commit_of(&g, "main~0").await, c2);
    assert_eq!(commit_of(&g, &format!("{c2}~1")).await, c1);
    // Any read takes any ref, as a branch or as a commit.
    assert!(people(&g, ReadTarget::Branch("main~1".into())).await.contains(&"Ann".to_string()));
    assert!(!people(&g, ReadTarget::Commit("main~1".into())).await.contains(&"Ben".to_string()));
    // The merge base of two branches.
    g.branch_create("feature", "main").await.expect("branch");
    let f1 = insert(&g, "feature", "Fay").await;
    insert(&g, "main", "Max").await;
    assert_eq!(commit_of(&g, "main...feature").await, c2);
    assert_eq!(commit_of(&g, "feature...main~1").await, c2);
    assert_eq!(commit_of(&g, "feature").await, f1);
    // Tags name commits, and read as them.
    let tag = g.tag_create("v1", Some("main~2"), Some("first release"), Some("ann")).await.expect("tag");
    assert_eq!((tag.graph_commit_id.as_str(), tag.message.as_deref()), (c1.as_str(), Some("first release")));
    assert_eq!(commit_of(&g, "v1").await, c1);
    assert_eq!(people(&g, ReadTarget::Commit("v1".into())).await, people(&g, ReadTarget::Commit(c1.clone())).await);
    assert_eq!(commit_of(&g, "v1~1").await, c0);
    let snap = g.snapshot("v1").await.expect("snapshot at a tag");
    assert_eq!(snap.head_commit_id.as_deref(), Some(c1.as_str()));
    let history = g.commits("v1", None).await.expect("history from a tag");
    assert_eq!(history.iter().map(|c| c.commit_id.as_str()).take(2).collect::<Vec<_>>(), [&c1, &c0]);
    g.tag_create("release/x", Some("feature"), None, None).await.expect("tag with a slash");
    assert_eq!(commit_of(&g, "release/x").await, f1);
    // Reads by tag or commit id start no branch actor named after them.
    for name in ["v1", c1.as_str(), "release/x"] {
        let key = omnigraph::actors::child_key::ChildKey::Branch(name.to_string());
        assert!(!g.runtime().has_actor(&key), "a read at `{name}` started a branch actor");
    }
    // Tags and branches share one namespace.
    assert!(matches!(g.tag_create("feature", None, None, None).await, Err(OmniError::AlreadyExists(_))));
    assert!(matches!(g.branch_create("v1", "main").await, Err(OmniError::BranchConflict { .. })));
    assert_eq!(g.tags().await.expect("tags").iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["release/x", "v1"]);
}

#[tokio::test]
async fn bad_and_unknown_refs_are_typed_errors_naming_them() {
    let (_dir, g) = loaded_social_graph().await;
    let read = |r: &str| {
        let g = g.clone();
        let r = r.to_string();
        async move {
            g.query("query q() { match { $p: Person } return { $p.name } }", None, Map::new(), &ReadTarget::Branch(r))
                .await
        }
    };
    match read("nope").await {
        Err(OmniError::NotFound(m)) => assert!(m.contains("`nope`"), "{m}"),
        other => panic!("unknown ref: {other:?}"),
    }
    match read("main~50").await {
        Err(OmniError::NotFound(m)) => assert!(m.contains("main~50"), "{m}"),
        other => panic!("too far back: {other:?}"),
    }
    for bad in ["main~x", "a...b...c", "../etc", "ma in", ""] {
        assert!(matches!(read(bad).await, Err(OmniError::BadRequest(_))), "{bad:?}");
    }
    // Tags: immutable, named by the branch rules, on refs that exist.
    g.tag_create("v1", None, None, None).await.expect("tag");
    assert!(matches!(g.tag_create("v1", None, None, None).await, Err(OmniError::AlreadyExists(_))));
    for bad in ["", "a//b", "../x", "has space", "main", "__x"] {
        assert!(matches!(g.tag_create(bad, None, None, None).await, Err(OmniError::BadRequest(_))), "{bad:?}");
    }
    assert!(matches!(g.tag_create("v2", Some("nope"), None, None).await, Err(OmniError::NotFound(_))));
    assert!(matches!(g.tag_delete("nope").await, Err(OmniError::NotFound(_))));
    assert!(matches!(g.tag_delete("../x").await, Err(OmniError::NotFound(_))));
}

#[tokio::test]
async fn a_tag_keeps_its_commit_through_cleanup_and_its_branch_alive() {
    let (_dir, g) = loaded_social_graph().await;
    let c0 = commit_of(&g, "main").await;
    let c1 = insert(&g, "main", "Ann").await;
    let old = people(&g, ReadTarget::Commit(c1.clone())).await;
    g.tag_create("keep", Some(&c1), None, None).await.expect("tag");
    for name in ["Ben", "Cal", "Dan"] {
        insert(&g, "main", name).await;
    }
    let preview = g.cleanup(Some(1), None, false).await.expect("preview");
    assert_eq!(preview.pinned_by_tags.iter().map(|p| p.tag.as_str()).collect::<Vec<_>>(), ["keep"]);
    g.cleanup(Some(1), None, true).await.expect("cleanup");
    // The tag still reads exactly what it named; an untagged old commit is gone.
    assert_eq!(people(&g, ReadTarget::Commit("keep".into())).await, old);
    let gone = g
        .query(
            "query q() { match { $p: Person } return { $p.name } }",
            None,
            Map::new(),
            &ReadTarget::Commit(c0.clone()),
        )
        .await;
    assert!(matches!(gone, Err(OmniError::CommitCleaned { .. })), "{gone:?}");
    // A tag on a branch's commit keeps the branch from being purged; a
    // delete only hides it, and the tag keeps reading.
    g.branch_create("b", "main").await.expect("branch");
    let b1 = insert(&g, "b", "Eve").await;
    g.tag_create("on-b", Some(&b1), None, None).await.expect("tag on b");
    g.branch_delete("b").await.expect("a delete hides");
    assert!(people(&g, ReadTarget::Commit("on-b".into())).await.contains(&"Eve".to_string()));
    let purge = omnigraph::DeleteOptions { purge: true, actor: None };
    assert!(matches!(g.branch_delete_with("b", &purge).await, Err(OmniError::BranchConflict { .. })));
    g.tag_delete("on-b").await.expect("untag");
    g.branch_delete_with("b", &purge).await.expect("purge once untagged");
}

fn omnigraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run omnigraph")
}

fn json_out(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    })
}

#[test]
fn the_cli_creates_lists_resolves_and_deletes_tags() {
    let (_dir, loc) = temp_graph_dir();
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    assert!(omnigraph(&["init", "--schema", &schema, &loc]).status.success());
    assert!(omnigraph(&["load", "--data", &data, "--mode", "overwrite", &loc]).status.success());
    let made = omnigraph(&["tag", "create", "v1", "-m", "first", "--json", &loc]);
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let tag = json_out(&made);
    let keys: std::collections::BTreeSet<&str> = tag.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, ["actor_id", "created_at", "graph_commit_id", "message", "name"].into(), "the tag's fields");
    assert_eq!((tag["name"].clone(), tag["message"].clone()), (json!("v1"), json!("first")));
    // NAME REF GRAPH: a tag on a ref.
    assert!(omnigraph(&["tag", "create", "v0", "v1", &loc]).status.success());
    let listed = json_out(&omnigraph(&["tag", "list", "--json", &loc]));
    assert_eq!(listed["tags"].as_array().map(Vec::len), Some(2), "{listed}");
    let shown = json_out(&omnigraph(&["commit", "show", "v1", "--json", &loc]));
    assert_eq!(shown["graph_commit_id"], tag["graph_commit_id"], "{shown}");
    // Again: a conflict, as JSON with the HTTP code.
    let again = omnigraph(&["tag", "create", "v1", "--json", &loc]);
    assert_eq!(again.status.code(), Some(1));
    assert_eq!(json_out(&again)["code"], "conflict");
    let deleted = json_out(&omnigraph(&["tag", "delete", "v1", "--json", &loc]));
    assert_eq!(deleted["name"], "v1");
    let unknown = omnigraph(&["tag", "delete", "v1", "--json", &loc]);
    assert_eq!(json_out(&unknown)["code"], "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_tags_and_refs_answer_success_and_typed_errors() {
    let s = start().await;
    let (st, made) = post(&s, "/graphs/g/tags", json!({"name": "v1", "message": "m"})).await;
    assert_eq!(st, 200, "{made}");
    assert!(made["actor_id"].is_string(), "{made}");
    let (st, listed) = get(&s, "/graphs/g/tags").await;
    assert_eq!((st, listed["tags"][0]["name"].clone()), (200, json!("v1")), "{listed}");
    let (st, c) = get(&s, "/graphs/g/commits/v1").await;
    assert_eq!((st, c["graph_commit_id"].clone()), (200, made["graph_commit_id"].clone()), "{c}");
    let (st, snap) = get(&s, "/graphs/g/snapshot?branch=v1").await;
    assert_eq!((st, snap["head_commit_id"].clone()), (200, made["graph_commit_id"].clone()), "{snap}");
    let q = json!({"query": "query q() { match { $p: Person } return { count($p) as n } }", "branch": "v1"});
    let (st, rows) = post(&s, "/graphs/g/query", q).await;
    assert_eq!(st, 200, "{rows}");
    // Typed 4xx for every bad input.
    for (body, status, code) in [
        (json!({"name": "v1"}), 409, "conflict"),
        (json!({"name": "../x"}), 400, "bad_request"),
        (json!({"name": "v2", "ref": "nope"}), 404, "not_found"),
        (json!({"name": "v2", "ref": "main~99"}), 404, "not_found"),
        (json!({"name": "v2", "ref": "a...b...c"}), 400, "bad_request"),
        (json!({"nam": "v2"}), 400, "bad_request"),
    ] {
        let (st, err) = post(&s, "/graphs/g/tags", body.clone()).await;
        assert_eq!((st, err["code"].as_str()), (status, Some(code)), "{body}: {err}");
        assert!(!err["error"].as_str().unwrap_or_default().contains(&s.loc), "a path leaked: {err}");
    }
    for path in ["/graphs/g/commits/nope", "/graphs/g/commits/main~99", "/graphs/g/snapshot?branch=nope"] {
        let (st, err) = get(&s, path).await;
        assert_eq!((st, err["code"].as_str()), (404, Some("not_found")), "{path}: {err}");
    }
    let (st, err) = get(&s, "/graphs/g/commits/main~x").await;
    assert_eq!((st, err["code"].as_str()), (400, Some("bad_request")), "{err}");
    let url = format!("{}/graphs/g/tags/v1", s.base);
    let (st, deleted, _) = call("DELETE", &url, Some(TOKEN), None).await;
    assert_eq!((st, deleted["name"].clone()), (200, json!("v1")), "{deleted}");
    let (st, err, _) = call("DELETE", &url, Some(TOKEN), None).await;
    assert_eq!((st, err["code"].as_str()), (404, Some("not_found")), "{err}");
}
