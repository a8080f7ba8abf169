//! The calls existing Omnigraph clients make (the TypeScript SDK's routes,
//! bodies and the fields it reads), against a real `omnigraph serve`,
//! through both base URLs a client may be configured with: the server's
//! root (flat single-graph routes) and the graph's `/graphs/{id}` prefix.

use serde_json::{Value, json};

use crate::server::{TOKEN, call, start};

/// POST `body` to `url` (with the test token); status, JSON body, raw text
/// and headers.
async fn post_raw(url: &str, body: Value) -> (u16, Value, String, reqwest::header::HeaderMap) {
    let resp = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null), text, headers)
}

async fn get_json(url: &str) -> (u16, Value) {
    let (st, v, _) = call("GET", url, Some(TOKEN), None).await;
    (st, v)
}

/// Every SDK-shaped call, against `base` (a server root or a graph prefix).
async fn sdk_calls(base: &str, tag: &str) {
    let (st, health) = get_json(&format!("{base}/healthz")).await;
    assert_eq!((st, health["status"].as_str()), (200, Some("ok")), "{tag}: {health}");

    let (st, snap) = get_json(&format!("{base}/snapshot?branch=main")).await;
    assert_eq!(st, 200, "{tag}: {snap}");
    assert_eq!(snap["graph_branch"], "main", "{tag}: {snap}");
    assert_eq!(snap["manifest_version"], snap["graph_manifest_version"], "{tag}: {snap}");
    assert!(snap["manifest_version"].is_u64(), "{tag}: {snap}");
    let person = snap["tables"].as_array().and_then(|t| t.iter().find(|t| t["table_key"] == "node:Person")).cloned();
    let person = person.unwrap_or_else(|| panic!("{tag}: no Person table: {snap}"));
    assert!(person["table_path"].as_str().is_some_and(|p| !p.is_empty() && !p.starts_with('/')), "{tag}: {person}");
    assert!(person["table_version"].is_u64(), "{tag}: {person}");
    assert!(snap["datasets"].as_array().is_some_and(|d| !d.is_empty()), "{tag}: {snap}");

    // /read: the legacy body names, rows in projection order, deprecated.
    let q = "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }";
    let (st, read, text, headers) =
        post_raw(&format!("{base}/read"), json!({"query_source": q, "query_name": "q", "params": {}})).await;
    assert_eq!(st, 200, "{tag}: {text}");
    assert_eq!(headers.get("deprecation").and_then(|v| v.to_str().ok()), Some("true"), "{tag}");
    assert_eq!(read["query_name"], "q", "{tag}: {read}");
    let people = person["row_count"].as_u64().expect("Person rows");
    assert_eq!(read["row_count"].as_u64(), Some(people), "{tag}: {read}");
    let first = text.find("\"rows\"").map(|i| &text[i..]).unwrap_or_default();
    let (name_at, age_at) = (first.find("\"p.name\"").or(first.find("\"name\"")), first.find("age\""));
    assert!(matches!((name_at, age_at), (Some(n), Some(a)) if n < a), "{tag}: rows not in projection order: {text}");
    let (st, read, _, _) = post_raw(&format!("{base}/query"), json!({"query": q, "name": "q"})).await;
    assert_eq!((st, read["row_count"].as_u64()), (200, Some(people)), "{tag}: {read}");

    // /change and /mutate answer with the fields clients read.
    let m = format!(r#"query add() {{ insert Person {{ name: "{tag}-1", age: 30 }} }}"#);
    let (st, change, _, headers) =
        post_raw(&format!("{base}/change"), json!({"query_source": m, "query_name": "add"})).await;
    assert_eq!(st, 200, "{tag}: {change}");
    assert!(headers.contains_key("deprecation"), "{tag}");
    assert_eq!((change["affected_nodes"].as_u64(), change["affected_edges"].as_u64()), (Some(1), Some(0)), "{tag}");
    assert_eq!((change["branch"].as_str(), change["query_name"].as_str()), (Some("main"), Some("add")), "{tag}");
    assert!(change["graph_commit_id"].is_string(), "{tag}: {change}");
    let m = format!(r#"query add() {{ insert Person {{ name: "{tag}-2", age: 31 }} }}"#);
    let (st, mutate, _, headers) = post_raw(&format!("{base}/mutate"), json!({"query": m})).await;
    assert_eq!((st, mutate["affected_nodes"].as_u64()), (200, Some(1)), "{tag}: {mutate}");
    assert!(headers.contains_key("x-request-id"), "{tag}: every answer carries a request id");
    let echoed = reqwest::Client::new()
        .get(format!("{base}/snapshot"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("x-request-id", "client-req-42")
        .send()
        .await
        .expect("request");
    assert_eq!(echoed.headers().get("x-request-id").and_then(|v| v.to_str().ok()), Some("client-req-42"), "{tag}");

    // /ingest and /load: uri, mode, and the rows this load wrote per table.
    let line = format!(r#"{{"type": "Company", "data": {{"name": "{tag}-co"}}}}"#);
    let (st, ingest, _, headers) = post_raw(&format!("{base}/ingest"), json!({"data": line, "mode": "merge"})).await;
    assert_eq!(st, 200, "{tag}: {ingest}");
    assert!(headers.contains_key("deprecation"), "{tag}");
    assert_eq!(ingest["mode"], "merge", "{tag}: {ingest}");
    assert!(ingest["uri"].is_string(), "{tag}: {ingest}");
    let company =
        ingest["tables"].as_array().and_then(|t| t.iter().find(|t| t["table_key"] == "node:Company")).cloned();
    let company = company.unwrap_or_else(|| panic!("{tag}: {ingest}"));
    assert_eq!(company["rows_loaded"], 1, "{tag}: rows_loaded counts this load's rows: {company}");
    let line = format!(r#"{{"type": "Company", "data": {{"name": "{tag}-co2"}}}}"#);
    let (st, load, _, _) = post_raw(&format!("{base}/load"), json!({"data": line, "mode": "append"})).await;
    assert_eq!((st, load["mode"].as_str()), (200, Some("append")), "{tag}: {load}");

    // Commits: graph_commit_id, created_at in epoch microseconds.
    let (st, commits) = get_json(&format!("{base}/commits?branch=main")).await;
    assert_eq!(st, 200, "{tag}: {commits}");
    let newest = commits["commits"][0].clone();
    assert_eq!(newest["graph_commit_id"], load["graph_commit_id"], "{tag}: {commits}");
    let micros = newest["created_at"].as_i64().unwrap_or_else(|| panic!("{tag}: created_at not an integer: {newest}"));
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as i64;
    assert!((now_us - micros).abs() < 3_600_000_000, "{tag}: created_at {micros} is not epoch microseconds");
    assert!(newest["manifest_version"].is_u64(), "{tag}: {newest}");
    let id = newest["graph_commit_id"].as_str().expect("id");
    let (st, one) = get_json(&format!("{base}/commits/{id}")).await;
    assert_eq!((st, one["graph_commit_id"].as_str()), (200, Some(id)), "{tag}: {one}");

    // Branches: create and delete answer with the graph's uri.
    let name = format!("sdk-{tag}");
    let (st, created, _, _) = post_raw(&format!("{base}/branches"), json!({"name": name, "from": "main"})).await;
    assert_eq!((st, created["name"].as_str()), (200, Some(name.as_str())), "{tag}: {created}");
    assert!(created["uri"].is_string(), "{tag}: {created}");
    let (st, list) = get_json(&format!("{base}/branches")).await;
    assert!(st == 200 && list["branches"].as_array().is_some_and(|b| b.contains(&json!(name))), "{tag}: {list}");
    let (st, deleted, _) = call("DELETE", &format!("{base}/branches/{name}"), Some(TOKEN), None).await;
    assert_eq!((st, deleted["name"].as_str()), (200, Some(name.as_str())), "{tag}: {deleted}");
    assert!(deleted["uri"].is_string(), "{tag}: {deleted}");

    let (st, schema) = get_json(&format!("{base}/schema")).await;
    assert!(st == 200 && schema["schema_source"].as_str().is_some_and(|s| s.contains("node Person")), "{tag}");
}

#[tokio::test]
async fn sdk_calls_work_through_the_flat_and_the_prefixed_base_url() {
    let s = start().await;
    sdk_calls(&s.base, "flat").await;
    sdk_calls(&format!("{}/graphs/g", s.base), "prefixed").await;
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

/// The CLI's `--json` spells fields as the HTTP answers do.
#[test]
fn cli_json_uses_the_http_field_names() {
    let (_dir, loc) = crate::common::temp_graph_dir();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    run(&["init", "--schema", &schema, "--json", &loc]);
    let load = run(&["load", "--data", &data, "--mode", "overwrite", "--json", &loc]);
    assert_eq!((load["mode"].as_str(), load["affected_nodes"].as_u64()), (Some("overwrite"), Some(4)), "{load}");
    let commits = run(&["commit", "list", "--json", &loc]);
    assert_eq!(commits[0]["graph_commit_id"], load["graph_commit_id"], "{commits}");
    assert!(commits[0]["created_at"].is_i64(), "{commits}");
    let snap = run(&["snapshot", "--json", &loc]);
    assert!(snap["graph_manifest_version"].is_u64() && snap["tables"][0]["table_path"].is_string(), "{snap}");
    for args in [vec!["snapshot", "--branch", "..", &loc], vec!["commit", "list", "--branch", "a//b", &loc]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(&args).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("invalid branch name") && !err.contains(&loc), "{args:?}: {err}");
    }
}
