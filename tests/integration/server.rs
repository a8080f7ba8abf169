//! The daemon, as a real process on 127.0.0.1:0, driven by an HTTP client.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

use crate::common::{SOCIAL_PG, temp_graph_dir};

pub(crate) const TOKEN: &str = "s3cret-token";

pub(crate) struct Server {
    child: Child,
    pub(crate) base: String,
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) loc: String,
}

impl Server {
    /// The daemon's stderr so far (for failure messages).
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("server.log")).unwrap_or_default()
    }

    /// The daemon's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait up to `limit` for the daemon to exit: its status, or `None` while
    /// it is still running at the deadline.
    pub(crate) async fn wait_exit(&mut self, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start `omnigraph serve` on a fresh graph loaded with the example data.
pub(crate) async fn start() -> Server {
    start_with(&[]).await
}

/// [`start`] with extra `serve` flags.
pub(crate) async fn start_with(extra: &[&str]) -> Server {
    start_with_env(extra, &[]).await
}

/// [`start_with`], the daemon also given `env`.
pub(crate) async fn start_with_env(extra: &[&str], env: &[(String, String)]) -> Server {
    let (dir, loc) = temp_graph_dir();
    {
        let g = omnigraph::Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
        let data = include_str!("../../examples/social.jsonl");
        g.load(data.as_bytes(), omnigraph::LoadMode::Overwrite, &omnigraph::WriteOptions::default())
            .await
            .expect("load");
    }
    spawn(dir, loc, extra, env)
}

/// `omnigraph serve --graph g=LOC` with `extra` flags and `env`, on an
/// existing graph (its tokens and log under `dir`).
pub(crate) fn spawn(dir: tempfile::TempDir, loc: String, extra: &[&str], env: &[(String, String)]) -> Server {
    let tokens = dir.path().join("tokens.json");
    std::fs::write(&tokens, json!({"alice": TOKEN, "bob": "bob-token"}).to_string()).expect("tokens");
    let mut child = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["serve", "--bind", "127.0.0.1:0", "--graph", &format!("g={loc}")])
        .args(extra)
        .env("OMNIGRAPH_SERVER_TOKENS_FILE", &tokens)
        .envs(env.iter().cloned())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("server.log")).map(Stdio::from).unwrap_or_else(|_| Stdio::null()))
        .spawn()
        .expect("spawn serve");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("listen line");
    let addr =
        line.trim().strip_prefix("OMNIGRAPH_LISTEN_ADDR=").unwrap_or_else(|| panic!("unexpected: {line}")).to_string();
    Server { child, base: format!("http://{addr}"), _dir: dir, loc }
}

pub(crate) async fn call(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<(&str, String)>,
) -> (u16, Value, reqwest::header::HeaderMap) {
    let client = reqwest::Client::new();
    let mut req = match method {
        "GET" => client.get(url),
        "DELETE" => client.delete(url),
        _ => client.post(url),
    };
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some((content_type, b)) = body {
        req = req.header("content-type", content_type).body(b);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await.expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)), headers)
}

pub(crate) async fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let (st, v, _) =
        call("POST", &format!("{}{path}", s.base), Some(TOKEN), Some(("application/json", body.to_string()))).await;
    (st, v)
}

pub(crate) async fn get(s: &Server, path: &str) -> (u16, Value) {
    let (st, v, _) = call("GET", &format!("{}{path}", s.base), Some(TOKEN), None).await;
    (st, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_success_path() {
    let s = start().await;
    let (st, health) = call("GET", &format!("{}/healthz", s.base), None, None).await.clone_tuple();
    assert_eq!((st, health["status"].clone(), health["internal_schema_version"].clone()), (200, json!("ok"), json!(4)));
    // The verbose form needs credentials and shows each graph's actor counters.
    let (st, _, _) = call("GET", &format!("{}/healthz?verbose=true", s.base), None, None).await;
    assert_eq!(st, 401);
    let (st, verbose) = get(&s, "/healthz?verbose=true").await;
    assert_eq!(st, 200, "{verbose}");
    let actors = verbose["graphs"]["g"]["actors"].as_array().expect("actor counters");
    assert!(
        actors.iter().any(|a| a["actor"] == "branch:main" && a["alive"] == true && a["restarts"] == 0),
        "{verbose}"
    );
    assert!(actors.iter().all(|a| a["mailbox"].is_u64()), "{verbose}");
    assert_eq!(verbose["graphs"]["g"]["supervisor_restarts"], 0, "{verbose}");
    assert!(verbose["graphs"]["g"]["reconciler_passes"].is_u64(), "{verbose}");
    let (st, doc, _) = call("GET", &format!("{}/openapi.json", s.base), None, None).await;
    assert_eq!(st, 200);
    assert!(doc["paths"]["/graphs/{id}/query"]["post"].is_object(), "{doc}");
    let (st, graphs) = get(&s, "/graphs").await;
    assert_eq!((st, graphs["graphs"][0]["graph_id"].clone()), (200, json!("g")));
    let (st, snap) = get(&s, "/graphs/g/snapshot?branch=main").await;
    assert_eq!(st, 200);
    assert_eq!(snap["tables"].as_array().map(Vec::len), Some(4));
    let head = snap["head_commit_id"].as_str().expect("head").to_string();
    // The field names existing clients read.
    assert_eq!((snap["graph_branch"].clone(), snap["internal_schema_version"].clone()), (json!("main"), json!(4)));
    assert_eq!(snap["datasets"].as_array().map(Vec::len), Some(4));
    assert!(snap["graph_manifest_version"].is_u64() && snap["datasets"][0]["dataset_version"].is_u64(), "{snap}");

    let q = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let (st, r) = post(&s, "/graphs/g/query", json!({"query": q})).await;
    assert_eq!((st, r["row_count"].clone(), r["graph_commit_id"].clone()), (200, json!(3), json!(head)));
    assert_eq!(r["target"], json!({"branch": "main"}));

    let m = r#"query m($n: String) { insert Person { name: $n } }"#;
    let (st, out) = post(&s, "/graphs/g/mutate", json!({"query": m, "params": {"n": "Dee"}})).await;
    assert_eq!(st, 200, "{out}");
    let commit = out["graph_commit_id"].as_str().expect("commit").to_string();
    let (st, c) = get(&s, &format!("/graphs/g/commits/{commit}")).await;
    assert_eq!((st, c["actor"].clone()), (200, json!("alice")), "the actor comes from the token");
    assert_eq!((c["graph_commit_id"].clone(), c["actor_id"].clone()), (json!(commit), json!("alice")));
    assert_eq!((c["graph_branch"].clone(), c["parent_commit_id"].clone()), (json!("main"), json!(head)));
    assert_eq!(out["commit"], c, "a mutation answers with its commit, as GET /commits/{{id}} shows it");
    let (st, list) = get(&s, "/graphs/g/commits?branch=main").await;
    assert_eq!((st, list["commits"][0]["commit_id"].clone()), (200, json!(commit)));
    // The write's steps are timed: its commit and publish each closed once.
    let (_, verbose) = get(&s, "/healthz?verbose=true").await;
    for step in ["saga.commit", "saga.publish"] {
        let t = &verbose["steps"][step];
        assert!(t["count"].as_u64().is_some_and(|n| n >= 1), "{step}: {verbose}");
        let (wall, busy) = (t["wall_ms"].as_f64().unwrap_or(-1.0), t["busy_ms"].as_f64().unwrap_or(-1.0));
        assert!(wall > 0.0 && busy > 0.0 && busy <= wall, "{step}: {t}");
    }

    let url = format!("{}/graphs/g/mutate/if-graph-commit", s.base);
    let body = json!({"query": m, "params": {"n": "Eve"}}).to_string();
    let client = reqwest::Client::new();
    let stale = client
        .post(&url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .header("Omnigraph-If-Graph-Commit", &head)
        .body(body.clone())
        .send()
        .await
        .expect("send");
    assert_eq!(stale.status().as_u16(), 412);
    let v: Value = serde_json::from_str(&stale.text().await.expect("text")).expect("json");
    assert_eq!(v["precondition_failure"]["expected"], json!(head));
    assert_eq!(v["code"], "precondition_failed", "every error carries a code");
    let fresh = client
        .post(&url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("Omnigraph-If-Graph-Commit", &commit)
        .body(body)
        .send()
        .await
        .expect("send");
    assert_eq!(fresh.status().as_u16(), 200);

    let (st, out) = post(
        &s,
        "/graphs/g/load",
        json!({"data": "{\"type\": \"Company\", \"data\": {\"name\": \"Hooli\"}}\n", "mode": "append"}),
    )
    .await;
    assert_eq!((st, out["nodes_affected"].clone()), (200, json!(1)), "{out}");
    let nd = "{\"type\": \"Company\", \"data\": {\"name\": \"Initech\"}}\n".to_string();
    let (st, out, _) = call(
        "POST",
        &format!("{}/graphs/g/load/ndjson?mode=merge", s.base),
        Some(TOKEN),
        Some(("application/x-ndjson", nd.clone())),
    )
    .await;
    assert_eq!((st, out["nodes_affected"].clone()), (200, json!(1)), "{out}");
    let (st, _, _) =
        call("POST", &format!("{}/graphs/g/load/ndjson", s.base), Some(TOKEN), Some(("text/plain", nd))).await;
    assert_eq!(st, 415);

    let (st, schema) = get(&s, "/graphs/g/schema").await;
    assert_eq!((st, schema["schema_source"].clone()), (200, json!(SOCIAL_PG)));
    let (st, rec) = get(&s, "/graphs/g/recovery").await;
    assert_eq!((st, rec["pending"].clone()), (200, json!([])));
    let (st, br) = get(&s, "/graphs/g/branches").await;
    assert_eq!((st, br["branches"].clone()), (200, json!(["main"])));

    // Branch lifecycle: create (name with `/`), write on it, read it, delete it.
    let (st, created) = post(&s, "/graphs/g/branches", json!({"name": "review/alice"})).await;
    assert_eq!((st, created["name"].clone(), created["from"].clone()), (200, json!("review/alice"), json!("main")));
    assert_eq!(created["actor_id"], "alice", "the actor comes from the token");
    let insert = json!({"query": "query q() { insert Company { name: \"OnBranch\" } }", "branch": "review/alice"});
    assert_eq!(post(&s, "/graphs/g/mutate", insert).await.0, 200);
    let (st, snap) = get(&s, "/graphs/g/snapshot?branch=review/alice").await;
    assert_eq!((st, snap["branch"].clone()), (200, json!("review/alice")));
    let (st, list) = get(&s, "/graphs/g/commits?branch=review/alice").await;
    assert_eq!((st, list["commits"][0]["branch"].clone()), (200, json!("review/alice")));
    assert_eq!(list["commits"][1]["branch"], "main", "inherited history follows");
    let (_, one) = get(&s, "/graphs/g/commits?branch=review/alice&limit=1").await;
    assert_eq!(one["commits"].as_array().map(Vec::len), Some(1));
    let (st, br) = get(&s, "/graphs/g/branches").await;
    assert_eq!((st, br["branches"].clone()), (200, json!(["main", "review/alice"])));
    let (st, del, _) = call("DELETE", &format!("{}/graphs/g/branches/review/alice", s.base), Some(TOKEN), None).await;
    assert_eq!((st, del["name"].clone()), (200, json!("review/alice")), "{del}");
    assert_eq!((del["restorable"].clone(), del["forks_reclaimed"].clone()), (json!(true), json!([])), "{del}");
    let (st, br) = get(&s, "/graphs/g/branches").await;
    assert_eq!((st, br["branches"].clone()), (200, json!(["main"])));

    // A load with `from` forks its missing branch first; without it, 404.
    let line = "{\"type\": \"Company\", \"data\": {\"name\": \"Forked\"}}\n".to_string();
    let url = |q: &str| format!("{}/graphs/g/load/ndjson?{q}", s.base);
    let (st, _, _) =
        call("POST", &url("branch=ingest"), Some(TOKEN), Some(("application/x-ndjson", line.clone()))).await;
    assert_eq!(st, 404, "a missing branch without `from`");
    let (st, out, _) =
        call("POST", &url("branch=ingest&from=main"), Some(TOKEN), Some(("application/x-ndjson", line.clone()))).await;
    assert_eq!(
        (st, out["branch_created"].clone(), out["base_branch"].clone()),
        (200, json!(true), json!("main")),
        "{out}"
    );
    let (st, out, _) =
        call("POST", &url("branch=ingest&from=main&mode=merge"), Some(TOKEN), Some(("application/x-ndjson", line)))
            .await;
    assert_eq!((st, out["branch_created"].clone()), (200, json!(false)), "an existing branch is not recreated");
}

trait CloneTuple {
    fn clone_tuple(self) -> (u16, Value);
}

impl CloneTuple for (u16, Value, reqwest::header::HeaderMap) {
    fn clone_tuple(self) -> (u16, Value) {
        (self.0, self.1)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_have_their_status_and_json_body() {
    let s = start().await;
    let url = format!("{}/graphs/g/snapshot", s.base);
    assert_eq!(call("GET", &url, None, None).await.0, 401, "missing token");
    let (st, body, _) = call("GET", &url, Some("wrong"), None).await;
    assert_eq!((st, body["code"].clone()), (401, json!("unauthorized")));
    assert_eq!(get(&s, "/graphs/nope/snapshot").await.0, 404);
    let (st, _, _) = call(
        "POST",
        &format!("{}/graphs/g/query", s.base),
        Some(TOKEN),
        Some(("application/json", "{not json".into())),
    )
    .await;
    assert_eq!(st, 400, "malformed JSON");
    let (st, body) = post(&s, "/graphs/g/query", json!({"query": 42})).await;
    assert_eq!((st, body["code"].clone()), (400, json!("bad_request")), "wrong types");
    let big = json!({"query": "x".repeat(2 * 1024 * 1024)});
    assert_eq!(post(&s, "/graphs/g/query", big).await.0, 413, "over the 1 MiB body limit");
    let (st, body) =
        post(&s, "/graphs/g/query", json!({"query": "query q() {\n match { $p: Persn }\n return { $p.name } }"})).await;
    assert_eq!(st, 400);
    assert_eq!((body["line"].clone(), body["diagnostic_code"].clone()), (json!(2), json!("T1")), "{body}");
    let dup = json!({"data": "{\"type\": \"Person\", \"data\": {\"name\": \"Alice\"}}\n", "mode": "append"});
    let (st, body) = post(&s, "/graphs/g/load", dup).await;
    assert_eq!(
        (st, body["code"].clone(), body["key_conflict"]["entity_id"].clone()),
        (409, json!("conflict"), json!("Alice"))
    );
    assert_eq!(body["key_conflict"]["entity_kind"], "node");
    let (st, body) = post(&s, "/graphs/g/branches", json!({"name": "bad name"})).await;
    assert_eq!((st, body["code"].clone()), (400, json!("bad_request")), "invalid branch name");
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "dup"})).await.0, 200);
    let (st, body) = post(&s, "/graphs/g/branches", json!({"name": "dup"})).await;
    assert_eq!((st, body["branch_conflict"]["branch"].clone()), (409, json!("dup")), "existing branch");
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "x", "from": "nope"})).await.0, 404);
    let (st, _, _) = call("DELETE", &format!("{}/graphs/g/branches/nope", s.base), Some(TOKEN), None).await;
    assert_eq!(st, 404, "deleting an unknown branch");
    let (st, _, _) = call("DELETE", &format!("{}/graphs/g/branches/main", s.base), Some(TOKEN), None).await;
    assert_eq!(st, 400, "main cannot be deleted");
    assert_eq!(get(&s, "/graphs/g/snapshot?branch=nope").await.0, 404, "unknown branch");
    let mut src = String::from("query big() {\n");
    for i in 0..8_193 {
        src.push_str(&format!("insert Company {{ name: \"c{i}\" }}\n"));
    }
    src.push('}');
    let (st, body) = post(&s, "/graphs/g/mutate", json!({"query": src})).await;
    assert_eq!((st, body["resource_limit"]["limit"].clone()), (413, json!(8192)));
    let (st, _, _) = call(
        "POST",
        &format!("{}/graphs/g/mutate", s.base),
        Some(TOKEN),
        Some(("application/json", json!({"query": "query q() { insert Company { name: \"z\" } }"}).to_string())),
    )
    .await;
    assert_eq!(st, 200);
    let client = reqwest::Client::new();
    let resp = client
        .post(format!("{}/graphs/g/mutate", s.base))
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("Omnigraph-If-Graph-Commit", "x")
        .body(json!({"query": "query q() { insert Company { name: \"y\" } }"}).to_string())
        .send()
        .await
        .expect("send");
    assert_eq!(resp.status().as_u16(), 400, "the plain route rejects the precondition header");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_lose_no_acknowledged_write() {
    let s = start().await;
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "side"})).await.0, 200);
    let branch_of = |i: usize| if i % 4 < 2 { "main" } else { "side" };
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let base = s.base.clone();
            let token = if i % 2 == 0 { TOKEN } else { "bob-token" };
            let branch = branch_of(i);
            tokio::spawn(async move {
                let q = format!("query q() {{ insert Company {{ name: \"w{i}\" }} }}");
                let body = json!({"query": q, "branch": branch}).to_string();
                let (st, v, _) =
                    call("POST", &format!("{base}/graphs/g/mutate"), Some(token), Some(("application/json", body)))
                        .await;
                (i, st, v)
            })
        })
        .collect();
    let mut acked = Vec::new();
    let mut commits: Vec<(usize, String)> = Vec::new();
    for t in tasks {
        let (i, st, v) = t.await.expect("join");
        match st {
            200 => {
                acked.push(i);
                commits.push((i, v["graph_commit_id"].as_str().unwrap_or_default().to_string()));
            }
            429 => {}
            other => panic!("unexpected status {other}: {v}\nserver log:\n{}", s.log()),
        }
    }
    assert!(acked.iter().any(|i| branch_of(*i) == "main") && acked.iter().any(|i| branch_of(*i) == "side"));
    for branch in ["main", "side"] {
        let q = "query q() { match { $c: Company } return { $c.name } }";
        let (_, r) = post(&s, "/graphs/g/query", json!({"query": q, "branch": branch})).await;
        let names: Vec<String> = r["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|row| row["c.name"].as_str().map(str::to_string))
            .collect();
        for i in &acked {
            let expected = usize::from(branch_of(*i) == branch);
            let w = format!("w{i}");
            assert_eq!(names.iter().filter(|n| **n == w).count(), expected, "{w} on {branch}: {names:?}");
        }
        // Each acknowledged write is its own commit, once in the branch's history
        // (the writes queued on a busy branch commit as groups).
        let (_, h) = get(&s, &format!("/graphs/g/commits?branch={branch}")).await;
        let ids: Vec<&str> =
            h["commits"].as_array().into_iter().flatten().filter_map(|c| c["commit_id"].as_str()).collect();
        for (i, id) in commits.iter().filter(|(i, _)| branch_of(*i) == branch) {
            assert_eq!(ids.iter().filter(|c| *c == id).count(), 1, "w{i}'s commit {id} on {branch}: {ids:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_writes_exits_cleanly_and_keeps_every_acknowledged_write() {
    let mut s = start().await;
    let base = s.base.clone();
    let writer = tokio::spawn(async move {
        let mut acked = Vec::new();
        for i in 0..200 {
            let body = json!({"query": format!("query q() {{ insert Company {{ name: \"s{i}\" }} }}")}).to_string();
            let client = reqwest::Client::new();
            let sent = client
                .post(format!("{base}/graphs/g/mutate"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(body)
                .send()
                .await;
            match sent {
                Ok(r) if r.status().as_u16() == 200 => acked.push(format!("s{i}")),
                _ => break,
            }
        }
        acked
    });
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let pid = s.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let status = s.child.wait().expect("wait");
    assert!(status.success(), "exit status {status:?}");
    let acked = writer.await.expect("join");
    let g = omnigraph::Omnigraph::open(&s.loc).await.expect("reopen");
    assert!(
        omnigraph::recovery::list_pending(g.root()).await.expect("list").is_empty(),
        "a clean shutdown leaves no sidecar"
    );
    let q = "query q() { match { $c: Company } return { $c.name } }";
    let r = g.query(q, None, serde_json::Map::new(), &omnigraph::ReadTarget::default()).await.expect("query");
    let names: Vec<String> =
        omnigraph::result_rows(&r).iter().filter_map(|row| row["c.name"].as_str().map(str::to_string)).collect();
    for w in &acked {
        assert!(names.contains(w), "acknowledged write {w} is missing after restart");
    }
}
