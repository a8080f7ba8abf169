//! Deep traversals and read limits through the daemon: bounded hops answer
//! with set semantics whatever their bounds, a hostile query is stopped with
//! a typed 413 naming the limit while a normal query keeps being served, and
//! `/healthz` answers afterwards.

use serde_json::{Value, json};

use crate::server::{Server, post, start};

async fn query(s: &Server, q: &str, limits: Value) -> (u16, Value) {
    post(s, "/graphs/g/query", json!({"query": q, "limits": limits})).await
}

fn column(r: &Value, col: &str) -> Vec<String> {
    r["rows"].as_array().into_iter().flatten().filter_map(|row| row[col].as_str().map(str::to_string)).collect()
}

fn limit_hit(r: &Value) -> &str {
    r["resource_limit"]["resource"].as_str().unwrap_or("")
}

async fn load(s: &Server, lines: &[String]) {
    let (st, r) = post(s, "/graphs/g/load", json!({"data": lines.join("\n"), "mode": "append"})).await;
    assert_eq!(st, 200, "load: {r}\n{}", s.log());
}

const FROM_ALICE: &str = "query q() { match { $p: Person { name: \"Alice\" } $p knows{MIN,MAX} $f } return { $f.name } order { $f.name asc } }";

fn from_alice(min: u32, max: u32) -> String {
    FROM_ALICE.replace("MIN", &min.to_string()).replace("MAX", &max.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_traversals_and_hostile_queries_never_take_the_daemon_down() {
    let s = start().await;
    // Four people on a cycle: Alice → Bob → Carol → Dave → Alice.
    load(
        &s,
        &[
            r#"{"type": "Person", "data": {"name": "Dave"}}"#.into(),
            r#"{"edge": "Knows", "from": "Carol", "to": "Dave"}"#.into(),
            r#"{"edge": "Knows", "from": "Dave", "to": "Alice"}"#.into(),
        ],
    )
    .await;
    // Alice is the walk's source, so it is visited from the start and the
    // cycle's return to it is pruned.
    let everyone = ["Bob", "Carol", "Dave"];
    let (st, r) = query(&s, &from_alice(1, 100), json!({})).await;
    assert_eq!((st, column(&r, "f.name")), (200, everyone.map(String::from).to_vec()), "{r}");
    let (st, r) = query(&s, &from_alice(3, 3), json!({})).await;
    assert_eq!((st, column(&r, "f.name")), (200, vec!["Dave".to_string()]), "{r}");
    let all = "query q() { match { $p: Person $p knows{1,1000} $f } return { count($f) as n } }";
    let (st, r) = query(&s, all, json!({})).await;
    assert_eq!((st, r["rows"][0]["n"].as_i64()), (200, Some(12)), "{r}");
    let (st, r) = query(&s, &from_alice(1000, 1000), json!({})).await;
    assert_eq!((st, column(&r, "f.name")), (200, Vec::<String>::new()), "each is reached within 3 hops: {r}");

    // 2,000 more people make a four-way cross product of 10^13 rows.
    let crowd: Vec<String> =
        (0..2000).map(|i| json!({"type": "Person", "data": {"name": format!("p{i}")}}).to_string()).collect();
    load(&s, &crowd).await;
    let hostile = "query q() { match { $a: Person $b: Person $c: Person $d: Person } return { count($a) as n } }";
    let (hostile_answer, normal_answer) = tokio::join!(query(&s, hostile, json!({"timeout_ms": 500})), async {
        // The normal query runs while the hostile one does.
        query(&s, &from_alice(1, 100), json!({})).await
    });
    let (st, r) = hostile_answer;
    assert_eq!((st, limit_hit(&r), r["code"].as_str()), (413, "query_time_ms", Some("payload_too_large")), "{r}");
    assert_eq!(r["resource_limit"]["limit"], json!(500), "{r}");
    let (st, r) = normal_answer;
    assert_eq!((st, column(&r, "f.name")), (200, everyone.map(String::from).to_vec()), "{r}");

    let pairs = "query q() { match { $a: Person $b: Person } return { $a.name, $b.name } }";
    let (st, r) = query(&s, pairs, json!({"max_rows": 1000})).await;
    assert_eq!((st, limit_hit(&r)), (413, "query_rows"), "{r}");
    assert_eq!(r["resource_limit"]["limit"], json!(1000), "{r}");
    let (st, r) = query(&s, pairs, json!({"memory_bytes": 4096})).await;
    assert_eq!((st, limit_hit(&r)), (413, "query_memory_bytes"), "{r}");
    // A traversal's reached pairs count against the row cap too.
    let (st, r) = query(&s, all, json!({"max_rows": 10})).await;
    assert_eq!((st, limit_hit(&r)), (413, "query_rows"), "{r}");
    // A malformed limit is a 400.
    let (st, r) = query(&s, all, json!({"timeout_ms": "soon"})).await;
    assert_eq!((st, r["code"].as_str()), (400, Some("bad_request")), "{r}");

    let (st, health) = crate::server::get(&s, "/healthz").await;
    assert_eq!((st, health["status"].as_str()), (200, Some("ok")));
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

/// The server's own limits bind every request: `serve --query-max-rows`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_limit_binds_a_request_that_asks_for_more() {
    let s = crate::server::start_with(&["--query-max-rows", "2"]).await;
    let q = "query q() { match { $p: Person } return { $p.name } }";
    let (st, r) = query(&s, q, json!({"max_rows": 1_000_000})).await;
    assert_eq!((st, limit_hit(&r), r["resource_limit"]["limit"].clone()), (413, "query_rows", json!(2)), "{r}");
    let (st, r) = query(&s, "query q() { match { $p: Person { name: \"Bob\" } } return { $p.name } }", json!({})).await;
    assert_eq!((st, column(&r, "p.name")), (200, vec!["Bob".to_string()]), "{r}");
}
