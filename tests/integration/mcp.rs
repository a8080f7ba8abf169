//! MCP: `serve --mcp` (streamable HTTP at `/graphs/{id}/mcp`) and
//! `omnigraph mcp --server URL` (stdio), driven by a real MCP client (the
//! `rmcp` SDK's): the stored queries and the read-only built-ins are its
//! tools, a call runs as the caller's token under the daemon's policy (a
//! write outside the agent's branches is the daemon's 403), and arguments
//! that do not fit a tool's schema are MCP's invalid-params error.

use rmcp::model::{CallToolRequestParams, CallToolResult, ErrorCode};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceExt, model::Tool};
use serde_json::{Map, Value, json};

use crate::server::{Server, TOKEN, call, start_with};

const QUERIES: &str = r#"query find($name: String) @description("A person's age by name") {
    match { $p: Person { name: $name } }
    return { $p.name, $p.age }
}

query add($name: String, $age: I32?) {
    insert Person { name: $name, age: $age }
}
"#;

/// alice (an agent) reads, invokes stored queries, and writes only under
/// `agent/alice/`; bob is named by no rule.
const POLICY: &str = r#"version: 1
groups:
  agents: [alice]
protected_branches: [main]
rules:
  - id: agents-read-and-invoke
    allow:
      actors: { group: agents }
      actions: [read, invoke_query]
  - id: agents-write-their-branches
    allow:
      actors: { group: agents }
      actions: [change]
      branch_scope: { pattern: "agent/{actor}/*" }
  - id: agents-open-their-branches
    allow:
      actors: { group: agents }
      actions: [branch_create]
      target_branch_scope: { pattern: "agent/{actor}/*" }
"#;

const BRANCH: &str = "agent/alice/task";

/// A daemon serving MCP under [`POLICY`] with [`QUERIES`], and alice's branch.
async fn daemon() -> (Server, tempfile::TempDir) {
    let dir = crate::scratch::tempdir();
    std::fs::write(dir.path().join("people.gq"), QUERIES).expect("queries");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let (queries, policy) = (dir.path().to_str().expect("path"), policy.to_str().expect("path"));
    let s = start_with(&["--mcp", "--queries", queries, "--policy", policy]).await;
    let body = Some(("application/json", json!({"name": BRANCH}).to_string()));
    let (st, v, _) = call("POST", &format!("{}/graphs/g/branches", s.base), Some(TOKEN), body).await;
    assert_eq!(st, 200, "{v}");
    (s, dir)
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("an object")
}

async fn tool(client: &RunningService<RoleClient, ()>, name: &str, a: Value) -> Result<CallToolResult, ServiceError> {
    client.call_tool(CallToolRequestParams::new(name.to_string()).with_arguments(args(a))).await
}

/// What a successful call answered (the route's own JSON).
async fn answer(client: &RunningService<RoleClient, ()>, name: &str, a: Value) -> Value {
    let r = tool(client, name, a.clone()).await.unwrap_or_else(|e| panic!("{name} {a}: {e}"));
    assert_ne!(r.is_error, Some(true), "{name} {a}: {r:?}");
    r.structured_content.unwrap_or_else(|| panic!("{name}: no structured content"))
}

/// The invalid-params error a call with bad arguments gets: its data.
async fn refused(client: &RunningService<RoleClient, ()>, name: &str, a: Value) -> Value {
    match tool(client, name, a.clone()).await {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "{name} {a}: {e:?}");
            e.data.unwrap_or_default()
        }
        other => panic!("{name} {a}: expected invalid params, got {other:?}"),
    }
}

/// Everything one client checks, as alice, `tag` keeping its rows apart.
async fn exercise(client: &RunningService<RoleClient, ()>, tag: &str) {
    let tools: Vec<Tool> = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["add", "find", "snapshot", "branches_list", "commits_list", "diff"]);
    let find = &tools[1];
    assert_eq!(find.description.as_deref(), Some("A person's age by name"));
    assert_eq!(find.input_schema["required"], json!(["name"]));
    assert_eq!(find.input_schema["properties"]["name"], json!({"type": "string"}));
    assert_eq!(tools[0].annotations.as_ref().and_then(|a| a.read_only_hint), Some(false));

    // A stored read, a stored write on the agent's branch, read back there.
    let rows = answer(client, "find", json!({"name": "Alice"})).await;
    assert_eq!(rows["rows"], json!([{"p.name": "Alice", "p.age": 31}]), "{rows}");
    let name = format!("Zed-{tag}");
    let wrote = answer(client, "add", json!({"name": name, "age": 9, "branch": BRANCH})).await;
    assert_eq!(wrote["affected_nodes"], json!(1), "{wrote}");
    let back = answer(client, "find", json!({"name": name, "branch": BRANCH})).await;
    assert_eq!(back["rows"], json!([{"p.name": name, "p.age": 9}]), "{back}");

    // A write outside alice's branches is the daemon's 403: nothing written.
    let denied = tool(client, "add", json!({"name": format!("Main-{tag}")})).await.expect("a tool result");
    assert_eq!(denied.is_error, Some(true), "{denied:?}");
    let body = denied.structured_content.expect("the daemon's error");
    assert_eq!(body["code"], json!("forbidden"), "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("alice") && e.contains("main")), "{body}");
    let none = answer(client, "find", json!({"name": format!("Main-{tag}")})).await;
    assert_eq!(none["rows"], json!([]), "{none}");

    // The read-only built-ins.
    let snap = answer(client, "snapshot", json!({"branch": BRANCH})).await;
    assert_eq!(snap["branch"], json!(BRANCH), "{snap}");
    let branches = answer(client, "branches_list", json!({})).await;
    assert!(branches.to_string().contains(BRANCH), "{branches}");
    let commits = answer(client, "commits_list", json!({"branch": BRANCH, "limit": 1})).await;
    assert_eq!(commits["commits"].as_array().map(Vec::len), Some(1), "{commits}");
    let diff = answer(client, "diff", json!({"from": "main", "to": BRANCH})).await;
    assert!(diff.to_string().contains(&name), "{diff}");

    // Arguments that do not fit: MCP's invalid params, typed.
    let wrong = refused(client, "find", json!({"name": 5})).await;
    assert_eq!(wrong["code"], json!("bad_request"), "{wrong}");
    assert!(wrong["error"].as_str().is_some_and(|e| e.contains("`name`")), "{wrong}");
    let missing = refused(client, "diff", json!({"from": "main"})).await;
    assert_eq!(missing["code"], json!("bad_request"), "{missing}");
    let unknown = refused(client, "nope", json!({})).await;
    assert_eq!(unknown["code"], json!("not_found"), "{unknown}");
    // A ref that does not exist is the daemon's own 404, as a tool error.
    let gone = tool(client, "snapshot", json!({"branch": "no-such-branch"})).await.expect("a tool result");
    assert_eq!(
        (gone.is_error, gone.structured_content.map(|b| b["code"].clone())),
        (Some(true), Some(json!("not_found")))
    );
}

/// A stateless streamable-HTTP client of `{base}{path}` with `token`.
fn http_client_config(s: &Server, path: &str, token: &str) -> StreamableHttpClientTransportConfig {
    let mut config = StreamableHttpClientTransportConfig::with_uri(format!("{}{path}", s.base)).auth_header(token);
    config.allow_stateless = true;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_over_http_runs_stored_queries_under_the_policy() {
    let (mut s, _dir) = daemon().await;
    let transport = StreamableHttpClientTransport::from_config(http_client_config(&s, "/graphs/g/mcp", TOKEN));
    let client = ().serve(transport).await.unwrap_or_else(|e| panic!("initialize: {e}\n{}", s.log()));
    exercise(&client, "http").await;
    client.cancel().await.expect("close");

    // No valid token: 401 before MCP, as on every route.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    let (st, v, _) =
        call("POST", &format!("{}/graphs/g/mcp", s.base), Some("wrong"), Some(("application/json", init.to_string())))
            .await;
    assert_eq!((st, v["code"].clone()), (401, json!("unauthorized")), "{v}");
    // The flat route reaches the lone graph's endpoint.
    let transport = StreamableHttpClientTransport::from_config(http_client_config(&s, "/mcp", TOKEN));
    let flat = ().serve(transport).await.expect("initialize at /mcp");
    let rows = answer(&flat, "find", json!({"name": "Alice"})).await;
    assert_eq!(rows["rows"][0]["p.name"], json!("Alice"), "{rows}");
    flat.cancel().await.expect("close");

    // The endpoint holds the router it calls: the daemon still stops cleanly.
    let pid = s.pid().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let status = s.wait_exit(std::time::Duration::from_secs(30)).await.expect("the daemon exits on SIGTERM");
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_over_stdio_reaches_the_daemon_as_its_token() {
    let (s, _dir) = daemon().await;
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"));
    command
        .args(["mcp", "--server", &s.base, "--graph", "g"])
        .env("OMNIGRAPH_BEARER_TOKEN", TOKEN)
        .env("OMNIGRAPH_HOME", s._dir.path().join("home"));
    let child = TokioChildProcess::new(command).expect("spawn omnigraph mcp");
    let client = ().serve(child).await.expect("initialize over stdio");
    exercise(&client, "stdio").await;
    client.cancel().await.expect("close");

    // bob's token: no rule names him, so he may not even read.
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"));
    command
        .args(["mcp", "--server", &s.base, "--graph", "g"])
        .env("OMNIGRAPH_BEARER_TOKEN", "bob-token")
        .env("OMNIGRAPH_HOME", s._dir.path().join("home"));
    let bob = ().serve(TokioChildProcess::new(command).expect("spawn")).await.expect("initialize");
    let tools = bob.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().all(|t| t.name != "find"), "bob may not list the stored queries");
    let denied = tool(&bob, "snapshot", json!({})).await.expect("a tool result");
    assert_eq!(denied.structured_content.map(|b| b["code"].clone()), Some(json!("forbidden")));
    bob.cancel().await.expect("close");
}
