//! One entity through time: `history` across updates, a delete and a
//! re-insert (with a property filter and a limit), `blame` per property,
//! an edge's history, and the HTTP and CLI surfaces.

use std::process::Command;

use omnigraph::{ChangeOp, Graph, OmniError, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::loaded_social_graph;
use crate::server::{get, post, start};

async fn as_actor(g: &Graph, actor: &str, src: &str) -> String {
    let opts = WriteOptions { actor: Some(actor.into()), ..WriteOptions::default() };
    let out = g.mutate(src, None, Map::new(), &opts).await.unwrap_or_else(|e| panic!("{src}: {e}"));
    out.commit_id.expect("a commit")
}

#[tokio::test]
async fn history_and_blame_across_updates_a_delete_and_a_reinsert() {
    let (_dir, g) = loaded_social_graph().await;
    let loaded = g.commit("main").await.expect("head").commit_id;
    let ann = as_actor(&g, "ann", r#"query q() { update Person set { age: 32 } where name = "Alice" }"#).await;
    let bob = as_actor(&g, "bob", r#"query q() { update Person set { email: "a@b.c" } where name = "Alice" }"#).await;
    as_actor(&g, "zed", r#"query q() { update Person set { age: 28 } where name = "Bob" }"#).await;
    let cat = as_actor(&g, "cat", r#"query q() { delete Person where name = "Alice" }"#).await;
    let dan = as_actor(&g, "dan", r#"query q() { insert Person { name: "Alice", age: 40 } }"#).await;
    let h = g.entity_history("Person", "Alice", None, None, None).await.expect("history");
    let got: Vec<(&str, ChangeOp)> = h.entries.iter().map(|e| (e.graph_commit_id.as_str(), e.op)).collect();
    let want = [
        (dan.as_str(), ChangeOp::Insert),
        (cat.as_str(), ChangeOp::Delete),
        (bob.as_str(), ChangeOp::Update),
        (ann.as_str(), ChangeOp::Update),
        (loaded.as_str(), ChangeOp::Insert),
    ];
    assert_eq!(got, want, "newest first, Bob's update not among them");
    let e = &h.entries[3];
    let age = |i: &Option<omnigraph::ChangeImage>| i.as_ref().map(|i| i.properties["age"].clone());
    assert_eq!((e.actor_id.as_deref(), age(&e.before), age(&e.after)), (Some("ann"), Some(json!(31)), Some(json!(32))));
    assert!(h.entries[1].after.is_none() && h.entries[0].before.is_none());
    // Only the commits that changed `age` (an insert or delete sets every property).
    let aged = g.entity_history("Person", "Alice", Some("age"), None, None).await.expect("age");
    let ids: Vec<&str> = aged.entries.iter().map(|e| e.graph_commit_id.as_str()).collect();
    assert_eq!(ids, [dan.as_str(), cat.as_str(), ann.as_str(), loaded.as_str()]);
    let two = g.entity_history("Person", "Alice", None, None, Some(2)).await.expect("limit");
    assert_eq!(two.entries.len(), 2);
    // Blame: each property the head has, and who last set it.
    let eve = as_actor(&g, "eve", r#"query q() { update Person set { age: 41 } where name = "Alice" }"#).await;
    let b = g.blame("Person", "Alice", None).await.expect("blame");
    let lines: Vec<(&str, &str, Option<&str>)> =
        b.properties.iter().map(|l| (l.property.as_str(), l.graph_commit_id.as_str(), l.actor_id.as_deref())).collect();
    assert_eq!(lines, [("age", eve.as_str(), Some("eve")), ("name", dan.as_str(), Some("dan"))]);
    assert_eq!((b.type_name.as_str(), b.id.as_str()), ("Person", "Alice"));
    // Bad input.
    as_actor(&g, "cat", r#"query q() { delete Person where name = "Carol" }"#).await;
    assert!(matches!(g.blame("Person", "Carol", None).await, Err(OmniError::NotFound(_))));
    assert!(matches!(g.entity_history("Nope", "x", None, None, None).await, Err(OmniError::NotFound(_))));
    assert!(g.entity_history("Person", "Nobody", None, None, None).await.expect("none").entries.is_empty());
    assert!(matches!(g.entity_history("Person", "Alice", None, Some(".."), None).await, Err(OmniError::BadRequest(_))));
}

/// The example schema with Person's `age` renamed `years`, and `added`
/// (property lines) after it.
fn age_renamed_years(added: &str) -> String {
    include_str!("../../examples/social.pg")
        .replace("    age: I32?\n", &format!("    years: I32? @rename_from(\"age\")\n{added}"))
        .replace("@range(age,", "@range(years,")
}

/// A schema apply that renames, adds and drops properties changed no
/// entity's values: it is no entry of an entity's history, and a later
/// update is named by the new property name.
#[tokio::test]
async fn a_schema_apply_is_no_entry_of_an_entity_history() {
    let (_dir, g) = loaded_social_graph().await;
    g.schema_apply(&age_renamed_years("    nickname: String?\n"), true, None).await.expect("rename and add");
    let ann = as_actor(&g, "ann", r#"query q() { update Person set { years: 32 } where name = "Alice" }"#).await;
    let h = g.entity_history("Person", "Alice", None, None, None).await.expect("history");
    let got: Vec<(&str, ChangeOp)> = h.entries.iter().map(|e| (e.graph_commit_id.as_str(), e.op)).collect();
    assert_eq!(got.len(), 2, "the update and the load, not the schema apply: {got:?}");
    assert_eq!(got[0], (ann.as_str(), ChangeOp::Update));
    assert_eq!(got[1].1, ChangeOp::Insert);
    let years = |i: &Option<omnigraph::ChangeImage>| i.as_ref().map(|i| i.properties["years"].clone());
    assert_eq!((years(&h.entries[0].before), years(&h.entries[0].after)), (Some(json!(31)), Some(json!(32))));
}

/// `history --property` and `blame` follow a property back across its
/// rename: an update made under the old name is the new name's history.
#[tokio::test]
async fn history_and_blame_follow_a_renamed_property() {
    let (_dir, g) = loaded_social_graph().await;
    let early = as_actor(&g, "ann", r#"query q() { update Person set { age: 40 } where name = "Alice" }"#).await;
    g.schema_apply(&age_renamed_years(""), true, None).await.expect("rename");
    let late = as_actor(&g, "bob", r#"query q() { update Person set { role: "manager" } where name = "Alice" }"#).await;
    let h = g.entity_history("Person", "Alice", Some("years"), None, None).await.expect("history");
    let got: Vec<(&str, ChangeOp)> = h.entries.iter().map(|e| (e.graph_commit_id.as_str(), e.op)).collect();
    assert_eq!(got.len(), 2, "the update under `age`, then the load: {got:?}");
    assert_eq!(got[0], (early.as_str(), ChangeOp::Update));
    assert_eq!(got[1].1, ChangeOp::Insert);
    let age = |i: &Option<omnigraph::ChangeImage>| i.as_ref().map(|i| i.properties["age"].clone());
    assert_eq!((age(&h.entries[0].before), age(&h.entries[0].after)), (Some(json!(31)), Some(json!(40))));
    let b = g.blame("Person", "Alice", None).await.expect("blame");
    let years = b.properties.iter().find(|l| l.property == "years").expect("years, by its head name");
    assert_eq!((years.graph_commit_id.as_str(), years.actor_id.as_deref()), (early.as_str(), Some("ann")));
    assert!(b.properties.iter().all(|l| l.property != "age"), "{:?}", b.properties);
    let role = b.properties.iter().find(|l| l.property == "role").expect("role");
    assert_eq!(role.graph_commit_id, late);
}

#[tokio::test]
async fn an_edge_history_carries_its_endpoints() {
    let (_dir, g) = loaded_social_graph().await;
    let c = as_actor(&g, "ann", r#"query q() { insert Knows { from: "Carol", to: "Alice" } }"#).await;
    let changes = g.commit_changes(&c, &Default::default(), None, None).await.expect("changes");
    let edge = changes.changes.iter().find(|e| e.kind == "edge").expect("edge").id.clone();
    let h = g.entity_history("Knows", &edge, None, None, None).await.expect("history");
    assert_eq!(h.entries.len(), 1);
    let ends = h.entries[0].after.as_ref().and_then(|a| a.endpoints.clone()).expect("endpoints");
    assert_eq!((ends.from.as_str(), ends.to.as_str()), ("Carol", "Alice"));
    let b = g.blame("Knows", &edge, None).await.expect("blame");
    assert!(b.properties.iter().any(|l| l.property == "endpoints" && l.graph_commit_id == c), "{:?}", b.properties);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_and_blame_over_http_and_the_cli() {
    let s = start().await;
    let q = json!({"query": r#"query q() { update Person set { age: 33 } where name = "Alice" }"#});
    assert_eq!(post(&s, "/graphs/g/mutate", q).await.0, 200);
    let (st, h) = get(&s, "/graphs/g/history/Person/Alice?property=age&limit=5").await;
    assert_eq!((st, h["entries"].as_array().map(Vec::len)), (200, Some(2)), "{h}");
    assert_eq!(h["entries"][0]["after"]["properties"]["age"], 33);
    let (st, b) = get(&s, "/graphs/g/blame/Person/Alice").await;
    assert_eq!((st, b["type"].as_str(), b["id"].as_str()), (200, Some("Person"), Some("Alice")), "{b}");
    for (path, status) in [
        ("/graphs/g/history/Nope/x", 404),
        ("/graphs/g/history/Person/Alice?bogus=1", 400),
        ("/graphs/g/history/Person/Alice?limit=0", 400),
        ("/graphs/g/history/Person/Alice?branch=..", 400),
        ("/graphs/g/blame/Person/Nobody", 404),
        ("/graphs/g/blame/Person/Alice?branch=missing", 404),
    ] {
        let (st, err) = get(&s, path).await;
        assert_eq!(st, status, "{path}: {err}");
        assert!(err["code"].is_string(), "{path}: {err}");
    }
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    assert_eq!(cli(&["history", "Person", "Alice", "--property", "age", "--limit", "5", "--json", &s.loc]), h);
    assert_eq!(cli(&["blame", "Person", "Alice", "--json", &s.loc]), b);
}
