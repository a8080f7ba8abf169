//! Stored queries: `serve --queries DIR` serves each `query NAME` by name
//! (`GET /graphs/{id}/queries`, `POST /graphs/{id}/queries/{name}`),
//! answered as `/query` and `/mutate` answer; `invoke_query` gates them
//! (a denial is the 404 of an unknown name), then the query's own `read`
//! or `change`; a query that does not type-check stops the start; and
//! `omnigraph queries list|validate` offline.

use std::process::Command;

use serde_json::{Value, json};

use crate::server::{TOKEN, call, start_with, start_with_env};

const PEOPLE: &str = r#"query find($name: String) @description("A person's age by name") @instruction("Names are exact") {
    match { $p: Person { name: $name } }
    return { $p.name, $p.age }
}

query add($name: String, $age: I32?) {
    insert Person { name: $name, age: $age }
}
"#;

/// A directory holding `people.gq` (and `extra` files).
fn queries_dir(extra: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = crate::scratch::tempdir();
    std::fs::write(dir.path().join("people.gq"), PEOPLE).expect("people.gq");
    for (name, text) in extra {
        std::fs::write(dir.path().join(name), text).expect("extra");
    }
    dir
}

async fn post_as(s: &crate::server::Server, token: &str, path: &str, body: Value) -> (u16, Value) {
    let (st, v, _) =
        call("POST", &format!("{}{path}", s.base), Some(token), Some(("application/json", body.to_string()))).await;
    (st, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_queries_are_listed_and_run_by_name() {
    let dir = queries_dir(&[]);
    let s = start_with(&["--queries", dir.path().to_str().expect("path")]).await;
    let (st, v, _) = call("GET", &format!("{}/graphs/g/queries", s.base), Some(TOKEN), None).await;
    assert_eq!(st, 200, "{v}");
    let names: Vec<&Value> = v["queries"].as_array().expect("queries").iter().map(|q| &q["name"]).collect();
    assert_eq!(names, [&json!("add"), &json!("find")], "{v}");
    let find = &v["queries"][1];
    assert_eq!(
        (find["description"].clone(), find["instruction"].clone(), find["mutation"].clone(), find["tool_name"].clone()),
        (json!("A person's age by name"), json!("Names are exact"), json!(false), json!("find")),
        "{v}"
    );
    assert_eq!(find["params"], json!([{"name": "name", "kind": "string", "nullable": false}]));
    assert_eq!(v["queries"][0]["params"][1], json!({"name": "age", "kind": "int", "nullable": true}));

    let (st, r) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"params": {"name": "Alice"}})).await;
    assert_eq!((st, r["rows"].clone()), (200, json!([{"p.name": "Alice", "p.age": 31}])), "{r}");
    let inline = json!({"query": PEOPLE, "name": "find", "params": {"name": "Alice"}});
    let (_, same) = post_as(&s, TOKEN, "/graphs/g/query", inline).await;
    assert_eq!((r["rows"].clone(), r["query_name"].clone()), (same["rows"].clone(), same["query_name"].clone()));

    let (st, w) = post_as(&s, TOKEN, "/graphs/g/queries/add", json!({"params": {"name": "Zed", "age": 9}})).await;
    assert_eq!((st, w["affected_nodes"].clone()), (200, json!(1)), "{w}");
    let (_, r) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"params": {"name": "Zed"}})).await;
    assert_eq!(r["rows"], json!([{"p.name": "Zed", "p.age": 9}]), "{r}");

    // Bad input: 404 unknown, 400 the wrong kind, a snapshot for a write, a wrong type.
    let (st, unknown) = post_as(&s, TOKEN, "/graphs/g/queries/nope", json!({})).await;
    assert_eq!((st, unknown["code"].clone()), (404, json!("not_found")), "{unknown}");
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"expect_mutation": true})).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/add", json!({"snapshot": "x", "params": {"name": "Q"}})).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"params": {"name": 5}})).await;
    assert_eq!(st, 400, "{v}");
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"bogus": 1})).await;
    assert_eq!(st, 400, "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invoke_query_gates_stored_queries_and_a_denial_is_an_unknown_name() {
    let dir = queries_dir(&[]);
    let policy = dir.path().join("policy.yaml");
    let bundle = r#"version: 1
groups:
  all: [alice, bob]
protected_branches: [main]
rules:
  - id: read
    allow:
      actors: { group: all }
      actions: [read]
  - id: alice-invokes
    allow:
      actors: [alice]
      actions: [invoke_query, branch_create]
  - id: alice-writes-unprotected
    allow:
      actors: [alice]
      actions: [change]
      branch_scope: unprotected
"#;
    std::fs::write(&policy, bundle).expect("policy");
    let args = ["--queries", dir.path().to_str().expect("path"), "--policy", policy.to_str().expect("path")];
    let s = start_with_env(&args, &[]).await;
    let (st, denied) = post_as(&s, "bob-token", "/graphs/g/queries/find", json!({"params": {"name": "Alice"}})).await;
    let (_, unknown) = post_as(&s, "bob-token", "/graphs/g/queries/nope", json!({})).await;
    assert_eq!(st, 404, "{denied}");
    assert_eq!(
        denied["error"].as_str().map(|e| e.replace("find", "nope")),
        unknown["error"].as_str().map(String::from)
    );
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/find", json!({"params": {"name": "Alice"}})).await;
    assert_eq!(st, 200, "{v}");
    // A stored mutation also needs `change` where it writes.
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/queries/add", json!({"params": {"name": "Zed"}})).await;
    assert_eq!((st, v["action"].clone(), v["branch"].clone()), (403, json!("change"), json!("main")), "{v}");
    let (st, v) = post_as(&s, TOKEN, "/graphs/g/branches", json!({"name": "work"})).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) =
        post_as(&s, TOKEN, "/graphs/g/queries/add", json!({"params": {"name": "Zed"}, "branch": "work"})).await;
    assert_eq!(st, 200, "{v}");
    // Listing is a read: bob sees the catalog he cannot invoke.
    let (st, v, _) = call("GET", &format!("{}/graphs/g/queries", s.base), Some("bob-token"), None).await;
    assert_eq!((st, v["queries"].as_array().map(Vec::len)), (200, Some(2)), "{v}");
}

#[test]
fn a_stored_query_that_does_not_type_check_stops_the_start() {
    let dir =
        queries_dir(&[("broken.gq", "query broken() {\n    match { $p: Person }\n    return { $p.height }\n}\n")]);
    let (gdir, loc) = crate::common::temp_graph_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["init", "--schema", concat!(env!("CARGO_MANIFEST_DIR"), "/examples/social.pg"), &loc])
        .output()
        .expect("init");
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["serve", "--unauthenticated", "--bind", "127.0.0.1:0", "--graph", &format!("g={loc}")])
        .args(["--queries", dir.path().to_str().expect("path")])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started: {err}");
    assert!(err.contains("broken.gq:3") && err.contains("height"), "{err}");
    drop(gdir);
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_queries_commands_list_and_validate_a_directory() {
    let dir = queries_dir(&[]);
    let d = dir.path().to_str().expect("path");
    let schema = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/social.pg");
    let (code, out, err) = run(&["queries", "list", d]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("mutation add($name: string, $age: int?)"), "{out}");
    assert!(
        out.contains(
            "read     find($name: string)\n  description: A person's age by name\n  instruction: Names are exact"
        ),
        "{out}"
    );
    let (code, out, _) = run(&["queries", "list", "--json", d]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((code, v["queries"][1]["name"].clone()), (0, json!("find")), "{v}");
    let (code, out, err) = run(&["queries", "validate", d, "--schema", schema]);
    assert_eq!((code, out.trim()), (0, "valid: 2 queries"), "{err}");
    std::fs::write(dir.path().join("zdup.gq"), "\n\nquery find() { match { $p: Person } return { $p.name } }\n")
        .expect("dup");
    let (code, _, err) = run(&["queries", "validate", d]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("zdup.gq:3") && err.contains("people.gq"), "{err}");
    std::fs::remove_file(dir.path().join("zdup.gq")).expect("rm");
    std::fs::write(dir.path().join("wrong.gq"), "query w() {\n    match { $p: Person }\n    return { $p.height }\n}\n")
        .expect("w");
    let (code, out, _) = run(&["queries", "validate", "--json", d, "--schema", schema]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((code, v["valid"].clone()), (1, json!(false)), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("wrong.gq:3")), "{v}");
}
