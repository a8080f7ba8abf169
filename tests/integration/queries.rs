//! The read path: exact results on the basic fixture, snapshot isolation,
//! time travel.

use omnigraph::{Graph, LoadMode, Omnigraph, ReadTarget, WriteOptions, result_rows};
use serde_json::{Map, Value, json};

use crate::common::{graph_with, loaded_social_graph, shared_fixtures, social_graph, temp_graph_dir};

async fn rows(g: &Graph, src: &str, name: &str, params: Value, target: &ReadTarget) -> Vec<Value> {
    let params = params.as_object().cloned().unwrap_or_default();
    let r = g.query(src, Some(name), params, target).await.unwrap_or_else(|e| panic!("{name}: {e}"));
    result_rows(&r).into_iter().map(Value::Object).collect()
}

/// Expectations worked out by hand from basic/test.jsonl:
/// people Alice 30, Bob 25, Charlie 35, Diana 28; companies Acme, Globex;
/// Alice knows Bob and Charlie, Bob knows Diana; Alice works at Acme, Bob at Globex.
#[tokio::test]
async fn every_basic_fixture_query_returns_exactly_the_expected_rows() {
    let Some(fixtures) = shared_fixtures() else { return };
    let basic = fixtures.join("basic");
    let schema = std::fs::read_to_string(basic.join("test.pg")).expect("schema");
    let data = std::fs::read_to_string(basic.join("test.jsonl")).expect("data");
    let src = std::fs::read_to_string(basic.join("test.gq")).expect("queries");
    let (_dir, loc) = temp_graph_dir();
    let g = Omnigraph::init(&loc, &schema).await.expect("init");
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    let main = ReadTarget::default();
    let cases: Vec<(&str, Value, Value)> = vec![
        ("get_person", json!({"name": "Alice"}), json!([{"p.name": "Alice", "p.age": 30}])),
        ("adults", json!({}), json!([{"p.name": "Charlie", "p.age": 35}])),
        (
            "friends_of",
            json!({"name": "Alice"}),
            json!([{"f.name": "Bob", "f.age": 25}, {"f.name": "Charlie", "f.age": 35}]),
        ),
        ("employees_of", json!({"company": "Acme"}), json!([{"p.name": "Alice"}])),
        ("friends_of_friends", json!({"name": "Alice"}), json!([{"fof.name": "Diana"}])),
        ("unemployed", json!({}), json!([{"p.name": "Charlie"}, {"p.name": "Diana"}])),
        ("friend_counts", json!({}), json!([{"p.name": "Alice", "friends": 2}, {"p.name": "Bob", "friends": 1}])),
        ("top_by_age", json!({}), json!([{"p.name": "Charlie", "p.age": 35}, {"p.name": "Alice", "p.age": 30}])),
        ("total_people", json!({}), json!([{"total": 4}])),
        (
            "age_stats",
            json!({}),
            json!([
                {"c.name": "Acme", "total_age": 30, "avg_age": 30.0, "youngest": 30, "oldest": 30, "headcount": 1},
                {"c.name": "Globex", "total_age": 25, "avg_age": 25.0, "youngest": 25, "oldest": 25, "headcount": 1}
            ]),
        ),
        ("top_connected", json!({}), json!([{"p.name": "Alice", "friends": 2}])),
    ];
    for (name, params, expected) in cases {
        let got = rows(&g, &src, name, params, &main).await;
        assert_eq!(Value::Array(got), expected, "query {name}");
    }
}

#[tokio::test]
async fn a_missing_or_undeclared_param_is_a_clear_error() {
    let (_dir, g) = social_graph().await;
    let src = "query q($name: String) { match { $p: Person { name: $name } } return { $p.name } }";
    let err = g.query(src, None, Map::new(), &ReadTarget::default()).await.expect_err("missing");
    assert!(err.to_string().contains("missing parameter `$name`"), "{err}");
    let extra = json!({"name": "A", "other": 1}).as_object().cloned().unwrap_or_default();
    let err = g.query(src, None, extra, &ReadTarget::default()).await.expect_err("undeclared");
    assert!(err.to_string().contains("`$other` is not declared"), "{err}");
}

#[tokio::test]
async fn full_text_functions_refuse_without_an_index() {
    let (_dir, g) = social_graph().await;
    let src = r#"query q() { match { $p: Person  search($p.name, "ali") } return { $p.name } }"#;
    let err = g.query(src, None, Map::new(), &ReadTarget::default()).await.expect_err("no index");
    assert!(err.to_string().contains("requires a full-text index") && err.to_string().contains("p.name"), "{err}");
}

#[tokio::test]
async fn a_query_at_an_old_commit_sees_that_commits_data() {
    let (_dir, g) = loaded_social_graph().await;
    let old = g.snapshot("main").await.expect("snap").head_commit_id.expect("head");
    let src = "query people() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let before = rows(&g, src, "people", json!({}), &ReadTarget::default()).await;
    g.mutate(r#"query q() { insert Person { name: "Zoe" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .expect("insert");
    let now = rows(&g, src, "people", json!({}), &ReadTarget::default()).await;
    assert_eq!(now.len(), before.len() + 1);
    let then = rows(&g, src, "people", json!({}), &ReadTarget::Commit(old.clone())).await;
    assert_eq!(then, before, "time travel must show the old commit's data");
    let r = g.query(src, None, Map::new(), &ReadTarget::Commit(old.clone())).await.expect("query");
    assert_eq!(r.graph_commit_id, old);
}

#[tokio::test]
async fn a_query_planned_before_a_write_returns_the_pre_write_result() {
    let (_dir, g) = loaded_social_graph().await;
    let head = g.snapshot("main").await.expect("snap").head_commit_id.expect("head");
    let src = "query people() { match { $p: Person } return { count($p) as n } }";
    // A read bound to the head commit keeps that view while writes land.
    let pinned = ReadTarget::Commit(head);
    let opts = WriteOptions::default();
    let write = g.mutate(r#"query q() { insert Person { name: "Yan" } }"#, None, Map::new(), &opts);
    let (read, written) = tokio::join!(rows(&g, src, "people", json!({}), &pinned), write);
    written.expect("write");
    assert_eq!(read, vec![json!({"n": 3})]);
    assert_eq!(rows(&g, src, "people", json!({}), &ReadTarget::default()).await, vec![json!({"n": 4})]);
}

/// `nearest` ranks by exact cosine distance, after the filters, top-k by `limit`.
#[tokio::test]
async fn nearest_ranks_by_cosine_distance_after_filters() {
    let schema = "node Doc { slug: String @key\n kind: String\n embedding: Vector(3) }\n";
    let lines = [
        r#"{"type": "Doc", "data": {"slug": "x", "kind": "a", "embedding": [1.0, 0.0, 0.0]}}"#,
        r#"{"type": "Doc", "data": {"slug": "xy", "kind": "a", "embedding": [1.0, 1.0, 0.0]}}"#,
        r#"{"type": "Doc", "data": {"slug": "y", "kind": "a", "embedding": [0.0, 1.0, 0.0]}}"#,
        r#"{"type": "Doc", "data": {"slug": "x2", "kind": "b", "embedding": [2.0, 0.1, 0.0]}}"#,
        r#"{"type": "Doc", "data": {"slug": "z", "kind": "a", "embedding": [0.0, 0.0, 1.0]}}"#,
    ];
    let (_dir, g) = graph_with(schema, &lines).await;
    let src = r#"query near($q: Vector(3)) {
        match { $d: Doc { kind: "a" } }
        return { $d.slug }
        order { nearest($d.embedding, $q) }
        limit 2
    }"#;
    let got = rows(&g, src, "near", json!({"q": [1.0, 0.1, 0.0]}), &ReadTarget::default()).await;
    // Kind "b" (x2, the closest overall) is filtered out before the top-k.
    assert_eq!(got, vec![json!({"d.slug": "x"}), json!({"d.slug": "xy"})]);
}

#[tokio::test]
async fn returning_a_bound_node_gives_its_id_and_properties() {
    let (_dir, g) = loaded_social_graph().await;
    let src = r#"query q() { match { $c: Company } return { $c, count($c) as n } }"#;
    let got = rows(&g, src, "q", json!({}), &ReadTarget::default()).await;
    assert_eq!(got, vec![json!({"c": {"id": "Acme", "name": "Acme", "founded": "2001-04-01"}, "n": 1})]);
}

/// Undirected hops, edge bindings (one row per edge) and list membership.
#[tokio::test]
async fn undirected_hops_edge_bindings_and_list_contains() {
    let schema = "node P { name: String @key\n tags: [String]? }\nedge Likes: P -> P { weight: I32? }\n";
    let lines = [
        r#"{"type": "P", "data": {"name": "a", "tags": ["x", "y"]}}"#,
        r#"{"type": "P", "data": {"name": "b", "tags": ["y"]}}"#,
        r#"{"type": "P", "data": {"name": "c"}}"#,
        r#"{"edge": "Likes", "from": "a", "to": "b", "data": {"weight": 1}}"#,
        r#"{"edge": "Likes", "from": "a", "to": "b", "data": {"weight": 2}}"#,
        r#"{"edge": "Likes", "from": "c", "to": "a", "data": {"weight": 3}}"#,
    ];
    let (_dir, g) = graph_with(schema, &lines).await;
    let main = ReadTarget::default();
    let undirected =
        r#"query q() { match { $x: P { name: "a" }  $x <likes> $y } return { $y.name } order { $y.name asc } }"#;
    let got = rows(&g, undirected, "q", json!({}), &main).await;
    // Unbound: each neighbour once, though two edges reach b.
    assert_eq!(got, vec![json!({"y.name": "b"}), json!({"y.name": "c"})]);
    let bound =
        r#"query q() { match { $x: P { name: "a" }  $x $w:likes $y } return { $w.weight } order { $w.weight desc } }"#;
    let got = rows(&g, bound, "q", json!({}), &main).await;
    assert_eq!(got, vec![json!({"w.weight": 2}), json!({"w.weight": 1})], "one row per edge");
    let tagged = r#"query q() { match { $x: P  $x.tags contains "y" } return { $x.name } }"#;
    let got = rows(&g, tagged, "q", json!({}), &main).await;
    assert_eq!(got, vec![json!({"x.name": "a"}), json!({"x.name": "b"})]);
}

/// `count($p)` of a whole type is answered from Lance's fragment metadata,
/// not a scan: it must still equal the rows a listing returns through
/// inserts, deletes (deletion vectors), a merge from a branch, compaction
/// (deletions materialised) and at an old commit.
#[tokio::test]
async fn a_whole_type_count_equals_the_listed_rows_through_every_kind_of_write() {
    let (_dir, g) = loaded_social_graph().await;
    let opts = WriteOptions::default();
    let count = "query c() { match { $p: Person } return { count($p) as n, count($p) as m } }";
    let list = "query l() { match { $p: Person } return { $p.name } }";
    let check = |at: ReadTarget, step: &'static str| {
        let g = &g;
        async move {
            let listed = rows(g, list, "l", json!({}), &at).await.len();
            let counted = rows(g, count, "c", json!({}), &at).await;
            assert_eq!(counted, vec![json!({"n": listed, "m": listed})], "{step}");
            listed
        }
    };
    let start = g.snapshot("main").await.expect("snap").head_commit_id.expect("head");
    let before = check(ReadTarget::default(), "loaded").await;
    let people: String =
        (0..40).map(|i| format!("{{\"type\": \"Person\", \"data\": {{\"name\": \"p{i}\"}}}}\n")).collect();
    g.load(people.as_bytes(), LoadMode::Append, &opts).await.expect("append");
    assert_eq!(check(ReadTarget::default(), "appended").await, before + 40);
    let delete = r#"query d() { delete Person where name = "p3" }"#;
    g.mutate(delete, None, Map::new(), &opts).await.expect("delete");
    g.mutate(r#"query d() { delete Person where name = "p4" }"#, None, Map::new(), &opts).await.expect("delete");
    assert_eq!(check(ReadTarget::default(), "deleted").await, before + 38);
    g.branch_create("side", "main").await.expect("branch");
    let on_side = WriteOptions { branch: "side".into(), ..WriteOptions::default() };
    g.mutate(r#"query q() { insert Person { name: "side-1" } }"#, None, Map::new(), &on_side).await.expect("insert");
    g.mutate(r#"query d() { delete Person where name = "p5" }"#, None, Map::new(), &on_side).await.expect("delete");
    assert_eq!(check(ReadTarget::Branch("side".into()), "on the branch").await, before + 38);
    g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    assert_eq!(check(ReadTarget::default(), "merged").await, before + 38);
    g.optimize("main", None).await.expect("optimize");
    assert_eq!(check(ReadTarget::default(), "compacted").await, before + 38);
    assert_eq!(check(ReadTarget::Commit(start), "time travel").await, before);
}
