//! Policies: `serve --policy` decides every route by the actor its token
//! names (403 `forbidden`, nothing written), `--default-deny` refuses all
//! but reads, a policy without tokens or a bad bundle stops the start; and
//! `omnigraph policy validate|test|explain` on the reference's documented
//! bundles, as real processes.

use std::process::Command;

use serde_json::{Value, json};

use crate::server::{TOKEN, call, spawn, start_with, start_with_env};

/// alice writes on unprotected branches and merges anywhere; bob reads
/// everything and nothing else; carol is named by no rule.
const POLICY: &str = r#"version: 1
groups:
  writers: [alice]
  readers: [bob]
protected_branches: [main]
rules:
  - id: alice-unprotected-data
    allow:
      actors: { group: writers }
      actions: [read, export, change]
      branch_scope: unprotected
  - id: alice-unprotected-branches
    allow:
      actors: { group: writers }
      actions: [branch_create, branch_delete, branch_reset, revert, cherry_pick, optimize, index_ensure, schema_apply]
      target_branch_scope: unprotected
  - id: alice-merges
    allow:
      actors: [alice]
      actions: [branch_merge]
      target_branch_scope: any
  - id: alice-graph-wide
    allow:
      actors: [alice]
      actions: [tag_create, tag_delete, cleanup]
  - id: alice-lists-graphs
    allow:
      actors: [alice]
      actions: [graph_list]
  - id: bob-reads
    allow:
      actors: { group: readers }
      actions: [read]
"#;

const BOB: &str = "bob-token";

async fn as_actor(
    s: &crate::server::Server,
    token: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let body = body.map(|b| ("application/json", b.to_string()));
    let (st, v, _) = call(method, &format!("{}{path}", s.base), Some(token), body).await;
    (st, v)
}

/// What main and the branch list hold (as bob reads them).
async fn state(s: &crate::server::Server) -> (Value, Value) {
    let (_, commits) = as_actor(s, BOB, "GET", "/graphs/g/commits?branch=main", None).await;
    let (_, branches) = as_actor(s, BOB, "GET", "/graphs/g/branches", None).await;
    (commits["commits"][0]["commit_id"].clone(), branches["branches"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_action_by_the_policy() {
    let dir = crate::scratch::tempdir();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    // carol has a token but no rule names her.
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, json!({"alice": TOKEN, "bob": BOB, "carol": "carol-token"}).to_string()).expect("tokens");
    let env = [("OMNIGRAPH_SERVER_TOKENS_FILE".to_string(), tokens.display().to_string())];
    let s = start_with_env(&["--policy", policy.to_str().expect("path")], &env).await;
    let m = |branch: &str| json!({"query": "query q() { insert Person { name: \"Zed\" } }", "branch": branch});
    let ok = |(st, v): (u16, Value), what: &str| assert_eq!(st, 200, "{what}: {v}");
    ok(
        as_actor(&s, TOKEN, "POST", "/graphs/g/branches", Some(json!({"name": "feature"}))).await,
        "alice creates feature",
    );
    ok(as_actor(&s, TOKEN, "POST", "/graphs/g/mutate", Some(m("feature"))).await, "alice writes feature");
    let head = state(&s).await.0;
    let head = head.as_str().expect("main's head").to_string();
    let before = state(&s).await;

    // (actor token, method, path, body, the action a denial names)
    let denied: Vec<(&str, &str, String, Option<Value>, &str)> = vec![
        (BOB, "POST", "/graphs/g/mutate".into(), Some(m("feature")), "change"),
        (TOKEN, "POST", "/graphs/g/mutate".into(), Some(m("main")), "change"),
        ("carol-token", "GET", "/graphs/g/snapshot?branch=feature".into(), None, "read"),
        (TOKEN, "GET", "/graphs/g/snapshot?branch=main".into(), None, "read"),
        (
            TOKEN,
            "POST",
            "/graphs/g/query".into(),
            Some(json!({"query": "query q() { match { $p: Person } return { $p.name } }", "commit": head})),
            "read",
        ),
        (TOKEN, "GET", "/graphs/g/commits?branch=main~1".into(), None, "read"),
        (TOKEN, "GET", format!("/graphs/g/diff?from={head}&to=feature"), None, "read"),
        (BOB, "POST", "/graphs/g/load".into(), Some(json!({"data": "", "branch": "feature"})), "change"),
        (TOKEN, "POST", "/graphs/g/load".into(), Some(json!({"data": "", "branch": "main"})), "change"),
        (BOB, "POST", "/graphs/g/branches".into(), Some(json!({"name": "other"})), "branch_create"),
        (BOB, "DELETE", "/graphs/g/branches/feature".into(), None, "branch_delete"),
        (TOKEN, "DELETE", "/graphs/g/branches/main".into(), None, "branch_delete"),
        (TOKEN, "POST", "/graphs/g/branches/main/reset".into(), Some(json!({"to": "feature"})), "branch_reset"),
        (
            BOB,
            "POST",
            "/graphs/g/branches/merge".into(),
            Some(json!({"source": "feature", "target": "main"})),
            "branch_merge",
        ),
        (
            TOKEN,
            "POST",
            "/graphs/g/schema/apply".into(),
            Some(json!({"schema_source": crate::common::SOCIAL_PG})),
            "schema_apply",
        ),
        (TOKEN, "POST", "/graphs/g/optimize".into(), Some(json!({})), "optimize"),
        (TOKEN, "POST", "/graphs/g/indexes/ensure".into(), Some(json!({"branch": "main"})), "index_ensure"),
        (TOKEN, "POST", format!("/graphs/g/commits/{head}/revert"), Some(json!({})), "revert"),
        (TOKEN, "POST", format!("/graphs/g/commits/{head}/cherry-pick"), Some(json!({"onto": "main"})), "cherry_pick"),
        (BOB, "POST", "/graphs/g/tags".into(), Some(json!({"name": "v1"})), "tag_create"),
        (BOB, "DELETE", "/graphs/g/tags/v1".into(), None, "tag_delete"),
        (BOB, "POST", "/graphs/g/cleanup".into(), Some(json!({"keep": 1, "confirm": true})), "cleanup"),
        (BOB, "POST", "/graphs/g/export".into(), Some(json!({"branch": "main"})), "export"),
        (TOKEN, "POST", "/graphs/g/export".into(), Some(json!({"branch": "main"})), "export"),
        (BOB, "GET", "/graphs".into(), None, "graph_list"),
    ];
    for (token, method, path, body, action) in denied {
        let (st, v) = as_actor(&s, token, method, &path, body).await;
        let what = format!("{method} {path} as {token}");
        assert_eq!(
            (st, v["code"].clone(), v["action"].clone()),
            (403, json!("forbidden"), json!(action)),
            "{what}: {v}"
        );
        assert!(!v.to_string().contains("alice-"), "{what}: a denial never shows a rule: {v}");
    }
    assert_eq!(state(&s).await, before, "the denied requests wrote nothing");

    let allowed: Vec<(&str, &str, String, Option<Value>)> = vec![
        (BOB, "GET", "/graphs/g/snapshot?branch=main".into(), None),
        (
            BOB,
            "POST",
            "/graphs/g/query".into(),
            Some(json!({"query": "query q() { match { $p: Person } return { $p.name } }", "commit": head})),
        ),
        (TOKEN, "GET", "/graphs/g/snapshot?branch=feature".into(), None),
        (TOKEN, "GET", "/graphs/g/commits?branch=feature~1".into(), None),
        (TOKEN, "POST", "/graphs/g/export".into(), Some(json!({"branch": "feature"}))),
        (
            TOKEN,
            "POST",
            "/graphs/g/schema/apply".into(),
            Some(json!({"schema_source": crate::common::SOCIAL_PG, "branch": "feature"})),
        ),
        (TOKEN, "POST", "/graphs/g/optimize".into(), Some(json!({"branch": "feature"}))),
        (TOKEN, "POST", "/graphs/g/tags".into(), Some(json!({"name": "v1"}))),
        (TOKEN, "DELETE", "/graphs/g/tags/v1".into(), None),
        (TOKEN, "POST", "/graphs/g/cleanup".into(), Some(json!({"keep": 5}))),
        (TOKEN, "GET", "/graphs".into(), None),
        (TOKEN, "POST", "/graphs/g/branches/merge".into(), Some(json!({"source": "feature", "target": "main"}))),
        (TOKEN, "DELETE", "/graphs/g/branches/feature".into(), None),
    ];
    for (token, method, path, body) in allowed {
        let (st, v) = as_actor(&s, token, method, &path, body).await;
        assert_eq!(st, 200, "{method} {path} as {token}: {v}");
    }
    let q = json!({"query": "query q() { match { $p: Person { name: \"Zed\" } } return { $p.name } }"});
    let (_, rows) = as_actor(&s, BOB, "POST", "/graphs/g/query", Some(q)).await;
    assert_eq!(rows["row_count"], 1, "the merge alice was allowed landed: {rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_deny_refuses_all_but_reads() {
    let s = start_with(&["--default-deny"]).await;
    let (st, v) = as_actor(
        &s,
        TOKEN,
        "POST",
        "/graphs/g/mutate",
        Some(json!({"query": "query q() { insert Person { name: \"Zed\" } }"})),
    )
    .await;
    assert_eq!((st, v["action"].clone()), (403, json!("change")), "{v}");
    assert!(v["error"].as_str().is_some_and(|e| e.contains("alice") && e.contains("main")), "{v}");
    let (st, v) = as_actor(&s, TOKEN, "GET", "/graphs/g/snapshot", None).await;
    assert_eq!(st, 200, "{v}");
    let (st, v) = as_actor(&s, TOKEN, "GET", "/graphs", None).await;
    assert_eq!((st, v["action"].clone()), (403, json!("graph_list")), "{v}");
}

/// Start `serve` with `args` and no tokens unless `tokens`: its exit status
/// and stderr, for a start that must be refused.
fn refused_start(args: &[&str], tokens: bool) -> String {
    let (dir, loc) = crate::common::temp_graph_dir();
    let tokens_file = dir.path().join("tokens.json");
    std::fs::write(&tokens_file, json!({"alice": TOKEN}).to_string()).expect("tokens");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_omnigraph"));
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--graph", &format!("g={loc}")]).args(args);
    cmd.env_remove("OMNIGRAPH_SERVER_TOKENS_FILE").env_remove("OMNIGRAPH_SERVER_BEARER_TOKEN");
    if tokens {
        cmd.env("OMNIGRAPH_SERVER_TOKENS_FILE", &tokens_file);
    }
    let out = cmd.output().expect("run serve");
    assert!(!out.status.success(), "serve {args:?} started");
    assert!(String::from_utf8_lossy(&out.stdout).is_empty(), "it never listened");
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_without_tokens_or_a_bad_bundle_stops_the_start() {
    let dir = crate::scratch::tempdir();
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, POLICY).expect("policy");
    let err = refused_start(&["--unauthenticated", "--policy", good.to_str().expect("path")], false);
    assert!(err.contains("bearer tokens"), "{err}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, POLICY.replace("[branch_merge]", "[branch_merge, fly]")).expect("bad");
    let err = refused_start(&["--policy", bad.to_str().expect("path")], true);
    assert!(err.contains("bad.yaml") && err.contains("fly"), "{err}");
    let unknown = dir.path().join("unknown.yaml");
    std::fs::write(&unknown, POLICY.replace("{ group: readers }", "{ group: nobody }")).expect("unknown");
    let err = refused_start(&["--policy", unknown.to_str().expect("path")], true);
    let line = POLICY.lines().position(|l| l.contains("id: bob-reads")).map(|i| i + 1).expect("line");
    assert!(err.contains(&format!("unknown.yaml:{line}")) && err.contains("nobody"), "{err}");
    let err = refused_start(&["--graph-policy", &format!("other={}", good.display())], true);
    assert!(err.contains("other"), "{err}");
}

/// `omnigraph ARGS` in `dir`: exit code and stdout.
fn run(dir: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).current_dir(dir).output().expect("run");
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

#[test]
fn the_policy_tools_run_the_reference_bundles_unchanged() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/policy");
    let dir = std::path::Path::new(fixtures);
    let (code, out, err) = run(dir, &["policy", "validate", "reference.policy.yaml", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["valid"].clone(), v["rules"].clone(), v["actors"].clone()), (json!(true), json!(3), json!(4)), "{v}");
    let (code, _, err) = run(dir, &["policy", "validate", "reference.cluster.policy.yaml"]);
    assert_eq!(code, 0, "{err}");

    let (code, out, err) =
        run(dir, &["policy", "test", "reference.policy.yaml", "--tests", "reference.policy.tests.yaml", "--json"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["passed"].clone(), v["failed"].clone()), (json!(2), json!(0)), "{v}");

    let explain = ["policy", "explain", "reference.policy.yaml", "--actor", "act-alice", "--action", "schema_apply"];
    let (code, out, err) = run(dir, &[&explain[..], &["--target-branch", "main", "--json"]].concat());
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((v["allowed"].clone(), v["rule"].clone()), (json!(true), json!("admins-can-apply-schema")), "{v}");
    let (code, out, _) = run(dir, &[&explain[..], &["--target-branch", "feature"]].concat());
    assert_eq!((code, out.lines().next()), (0, Some("deny")), "{out}");
    let (code, _, err) = run(dir, &["policy", "explain", "reference.policy.yaml", "--actor", "a", "--action", "fly"]);
    assert_eq!(code, 2, "an unknown action is a usage error: {err}");
    assert!(err.contains("fly") && err.contains("branch_merge"), "{err}");
}

#[test]
fn the_policy_tools_report_failures_with_exit_1() {
    let dir = crate::scratch::tempdir();
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/policy");
    let policy = format!("{fixtures}/reference.policy.yaml");
    let failing = dir.path().join("failing.yaml");
    let cases = "version: 1\ncases:\n  - id: carol-merges-main\n    actor: act-carol\n    action: branch_merge\n    target_branch: main\n    expect: allow\n  - id: carol-writes-main\n    actor: act-carol\n    action: change\n    branch: main\n    expect: allow\n";
    std::fs::write(&failing, cases).expect("cases");
    let (code, out, _) = run(dir.path(), &["policy", "test", &policy, "--tests", failing.to_str().expect("path")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ok carol-merges-main") && out.contains("FAILED carol-writes-main"), "{out}");
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "version: 1\ngroups:\n  g: [a]\nrules:\n  - id: r\n    allow:\n      actors: { group: h }\n      actions: [read]\n").expect("bad");
    let (code, out, _) = run(dir.path(), &["policy", "validate", bad.to_str().expect("path"), "--json"]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((code, v["valid"].clone(), v["line"].clone()), (1, json!(false), json!(5)), "{v}");
}

/// The flat single-graph rewrite keeps the gate: a flat route is the
/// graph's route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flat_routes_are_gated_as_their_graph_routes() {
    let dir = crate::scratch::tempdir();
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let (gdir, loc) = crate::common::temp_graph_dir();
    omnigraph::Omnigraph::init(&loc, crate::common::SOCIAL_PG).await.expect("init");
    let s = spawn(gdir, loc, &["--policy", policy.to_str().expect("path")], &[]);
    let (st, v) =
        as_actor(&s, TOKEN, "POST", "/mutate", Some(json!({"query": "query q() { insert Person { name: \"Zed\" } }"})))
            .await;
    assert_eq!((st, v["action"].clone(), v["branch"].clone()), (403, json!("change"), json!("main")), "{v}");
}

/// docs/agents.md's walk-through, with the policy and the requests of the
/// page: each agent writes only its own branches, only the reviewer merges
/// into main.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_walkthrough_in_the_docs_runs() {
    let page = include_str!("../../docs/agents.md");
    let yaml = page.split("```yaml\n").nth(1).and_then(|b| b.split("```").next()).expect("the policy block");
    let tokens: Value = serde_json::from_str(
        page.split("```json\n").nth(1).and_then(|b| b.split("```").next()).expect("the tokens block"),
    )
    .expect("tokens json");
    let block = page.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("the sh block");
    let (gdir, loc) = crate::common::temp_graph_dir();
    omnigraph::Omnigraph::init(&loc, crate::common::SOCIAL_PG).await.expect("init");
    let policy = gdir.path().join("agents.policy.yaml");
    std::fs::write(&policy, yaml).expect("policy");
    let tokens_file = gdir.path().join("agent-tokens.json");
    std::fs::write(&tokens_file, tokens.to_string()).expect("tokens");
    let env = [("OMNIGRAPH_SERVER_TOKENS_FILE".to_string(), tokens_file.display().to_string())];
    let s = spawn(gdir, loc, &["--policy", policy.to_str().expect("path")], &env);
    // Each `curl` line: its token variable, body and route; the comment
    // before it says the status it answers.
    let (mut expect, mut ran) = (200, 0);
    for line in block.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            expect = if comment.contains("403") { 403 } else { 200 };
            continue;
        }
        let Some(rest) = line.strip_prefix("curl -H \"Authorization: Bearer $") else { continue };
        let token = match &rest[..1] {
            "A" => "token-a",
            "B" => "token-b",
            _ => "token-r",
        };
        let body = rest.split("-d '").nth(1).and_then(|b| b.split('\'').next()).expect("a body");
        let path = rest.rsplit("localhost:8080").next().expect("a route").replace("/graphs/social/", "/graphs/g/");
        let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{body}: {e}"));
        let (st, v) = as_actor(&s, token, "POST", &path, Some(body)).await;
        assert_eq!(st, expect, "{line}: {v}");
        if st == 403 {
            assert_eq!(v["code"], "forbidden", "{v}");
        }
        ran += 1;
    }
    assert_eq!(ran, 6, "the walk-through has six requests");
    let q = json!({"query": "query q() { match { $p: Person } return { $p.name } }"});
    let (_, rows) = as_actor(&s, "token-r", "POST", "/graphs/g/query", Some(q)).await;
    assert_eq!(rows["rows"], json!([{"p.name": "Ada"}]), "{rows}");
    let (_, commits) = as_actor(&s, "token-r", "GET", "/graphs/g/commits?branch=main", None).await;
    assert_eq!(commits["commits"][0]["actor"], "reviewer", "{commits}");
}

/// A write on a local graph under `--policy` runs only if the bundle allows
/// its actor (`--as`) the write; a denied one writes nothing (exit 1, 403's
/// code with `--json`), one without an actor is refused (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_cli_writes_obey_a_policy() {
    let (dir, loc) = crate::common::temp_graph_dir();
    omnigraph::Omnigraph::init(&loc, crate::common::SOCIAL_PG).await.expect("init");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("policy");
    let p = policy.to_str().expect("path");
    let insert = "query q() { insert Person { name: \"Zed\" } }";
    let (code, _, err) = run(dir.path(), &["branch", "create", "--as", "alice", "--policy", p, "feature", &loc]);
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = run(dir.path(), &["mutate", "--as", "bob", "--policy", p, "--json", "-e", insert, &loc]);
    let v: Value = serde_json::from_str(&out).expect("json");
    assert_eq!((code, v["code"].clone(), v["action"].clone()), (1, json!("forbidden"), json!("change")), "{v}");
    let (code, _, err) = run(dir.path(), &["mutate", "--as", "alice", "--policy", p, "-e", insert, &loc]);
    assert_eq!(code, 1, "alice may not write main: {err}");
    assert!(err.contains("forbidden") && err.contains("main"), "{err}");
    let (code, _, err) = run(dir.path(), &["mutate", "--policy", p, "-e", insert, "--branch", "feature", &loc]);
    assert_eq!(code, 2, "no actor: {err}");
    let (code, _, err) =
        run(dir.path(), &["mutate", "--as", "alice", "--policy", p, "--branch", "feature", "-e", insert, &loc]);
    assert_eq!(code, 0, "{err}");
    let g = omnigraph::Omnigraph::open(&loc).await.expect("open");
    let names = |branch: &'static str| {
        let g = &g;
        async move {
            let q = "query q() { match { $p: Person } return { $p.name } }";
            let target = omnigraph::ReadTarget::Branch(branch.into());
            let r = g.query(q, None, serde_json::Map::new(), &target).await.expect("query");
            omnigraph::result_rows(&r).len()
        }
    };
    assert_eq!((names("main").await, names("feature").await), (0, 1), "only the allowed write landed");
}
