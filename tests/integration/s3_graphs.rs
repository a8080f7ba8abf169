//! Graphs on a real S3-compatible server (`scripts/s3_server.py`, started by
//! `tests/support/s3.rs`): every writer, branches and forks, the CLI with the standard AWS environment, the daemon, a two-process commit
//! race, a read-only process that sends no write, and the refusals (no
//! credentials, a server without conditional writes).

use std::process::{Command, Output};

use omnigraph::recovery::{invariants, list_pending};
use omnigraph::{Graph, LoadMode, MergeOptions, Omnigraph, OpenMode, ReadTarget, WriteOptions};
use serde_json::{Map, Value};

use crate::common::SOCIAL_PG;
use crate::s3;

const DATA: &str = include_str!("../../examples/social.jsonl");
const PEOPLE: &str = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn names(g: &Graph, branch: &str) -> Vec<String> {
    let out = g.query_json(PEOPLE, None, Map::new(), &ReadTarget::Branch(branch.into())).await.expect("query");
    out["rows"].as_array().expect("rows").iter().map(|r| r["p.name"].as_str().unwrap_or_default().to_string()).collect()
}

async fn assert_clean(g: &Graph, branches: &[&str], context: &str) {
    for b in branches {
        let v = invariants::violations(g.root(), b).await.expect("invariants");
        assert!(v.is_empty(), "{context}: {b}: {v:?}");
    }
    assert!(list_pending(g.root()).await.expect("pending").is_empty(), "{context}: a sidecar was left");
}

async fn mutate(g: &Graph, branch: &str, src: &str) {
    g.mutate(src, None, Map::new(), &on(branch)).await.unwrap_or_else(|e| panic!("{src} on {branch}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_writer_branches_and_time_travel_work_on_s3() {
    let Some(loc) = s3::location("writers") else { return };
    let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init on S3");
    let loaded = g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    assert_eq!(names(&g, "main").await, ["Alice", "Bob", "Carol"]);
    mutate(&g, "main", r#"query q() { insert Person { name: "Dan", age: 40 } }"#).await;

    // A branch, its first-touch fork, a merge back.
    g.branch_create("feature", "main").await.expect("branch");
    mutate(&g, "feature", r#"query q() { insert Person { name: "Eve", age: 31 } }"#).await;
    mutate(&g, "feature", r#"query q() { update Person set { age: 41 } where name = "Bob" }"#).await;
    assert_eq!(names(&g, "main").await, ["Alice", "Bob", "Carol", "Dan"]);
    let merged = g.branch_merge("feature", "main", &MergeOptions::default()).await.expect("merge");
    assert_eq!(merged.report.outcome, omnigraph::MergeOutcome::FastForward);
    assert_eq!(names(&g, "main").await, ["Alice", "Bob", "Carol", "Dan", "Eve"]);

    // Schema apply, indexes, optimize, cleanup.
    g.branch_delete("feature").await.expect("delete branch");
    let target = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    level: I32 @default(1)\n");
    g.schema_apply(&target, false, None).await.expect("schema apply");
    let built = g.ensure_indices("main", None).await.expect("ensure indices");
    assert!(serde_json::to_value(&built).expect("json")["tables"].as_array().is_some_and(|t| !t.is_empty()));
    g.optimize("main", None).await.expect("optimize");
    let levels = g
        .query_json(
            "query q() { match { $p: Person { name: \"Eve\" } } return { $p.level } }",
            None,
            Map::new(),
            &ReadTarget::Branch("main".into()),
        )
        .await
        .expect("query level");
    assert_eq!(levels["rows"][0]["p.level"], 1);
    g.cleanup(Some(100), None, true).await.expect("cleanup");
    assert_clean(&g, &["main"], "after every writer").await;

    // Time travel to the load's commit, in a fresh handle.
    drop(g);
    let g = Omnigraph::open_with(&loc, OpenMode::ReadOnly).await.expect("reopen read-only");
    let commit = loaded.commit_id.expect("load commit");
    let then = g.query_json(PEOPLE, None, Map::new(), &ReadTarget::Commit(commit)).await.expect("time travel");
    assert_eq!(then["row_count"], 3);
    assert_eq!(names(&g, "main").await, ["Alice", "Bob", "Carol", "Dan", "Eve"]);
}

fn omnigraph(args: &[&str], env: &[(String, String)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().cloned())
        .output()
        .expect("run omnigraph")
}

fn ok(o: &Output, what: &str) -> String {
    assert!(o.status.success(), "{what}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).to_string()
}

#[test]
fn the_cli_uses_the_standard_aws_environment_or_storage_options() {
    let Some(server) = s3::server() else { return };
    let loc = format!("s3://{}/{}/cli", s3::BUCKET, ulid::Ulid::new().to_string().to_lowercase());
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    let env = s3::env(server);
    ok(&omnigraph(&["init", "--schema", &schema, &loc], &env), "init with the AWS environment");
    ok(&omnigraph(&["load", "--data", &data, "--mode", "overwrite", "--yes", &loc], &env), "load");
    let snap: Value =
        serde_json::from_str(&ok(&omnigraph(&["snapshot", "--json", &loc], &env), "snapshot")).expect("snapshot json");
    assert_eq!(snap["storage_stamp"], 4, "the stamp is read from the bucket: {snap}");
    assert!(snap["tables"].as_array().is_some_and(|t| t.iter().any(|t| t["row_count"] == 3)), "{snap}");

    // The same through --storage-option alone, with no AWS environment.
    let mut args: Vec<String> = Vec::new();
    for (k, v) in &env {
        args.push("--storage-option".into());
        args.push(format!("{}={v}", k.to_ascii_lowercase()));
    }
    let q = |extra: &[&str]| {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend_from_slice(extra);
        omnigraph(&a, &[])
    };
    let out = ok(&q(&["query", "--json", "-e", PEOPLE, &loc]), "query with --storage-option");
    let v: Value = serde_json::from_str(&out).expect("query json");
    assert_eq!(v["row_count"], 3, "{v}");

    // No credentials: refused at once, naming the fix, never asking a metadata service.
    let bare = [("AWS_ENDPOINT_URL".to_string(), server.endpoint.clone()), ("AWS_ALLOW_HTTP".into(), "true".into())];
    let out = omnigraph(&["snapshot", "--json", &loc], &bare);
    assert!(!out.status.success());
    let err: Value = serde_json::from_slice(&out.stdout).expect("error json");
    let msg = err["error"].as_str().unwrap_or_default();
    assert!(msg.contains("no S3 credentials") && msg.contains("allow_instance_metadata"), "{err}");
    assert_eq!(err["code"], "bad_request");

    // A bad option names itself; a secret never appears in an error.
    let out = omnigraph(&["--storage-option", "aws_secret_acces_key=hunter2", "snapshot", &loc], &env);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("unknown storage option"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}

#[test]
fn a_server_without_conditional_writes_is_refused_for_writing() {
    let Some(server) = s3::unconditional_server() else { return };
    let loc = format!("s3://{}/{}/g", s3::UNCONDITIONAL_BUCKET, ulid::Ulid::new().to_string().to_lowercase());
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let out = omnigraph(&["init", "--json", "--schema", &schema, &loc], &s3::env(server));
    assert!(!out.status.success(), "init must be refused");
    let err: Value = serde_json::from_slice(&out.stdout).expect("error json");
    assert!(err["error"].as_str().unwrap_or_default().contains("conditional writes"), "{err}");
    let written: Vec<String> =
        s3::requests(server).into_iter().filter(|r| r.starts_with("PUT") && r.contains("__manifest")).collect();
    assert!(written.is_empty(), "nothing of the graph may be written: {written:?}");
}

#[test]
fn two_processes_racing_commits_on_one_bucket_lose_nothing() {
    let Some(server) = s3::server() else { return };
    let env = s3::env(server);
    let loc = format!("s3://{}/{}/race", s3::BUCKET, ulid::Ulid::new().to_string().to_lowercase());
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    ok(&omnigraph(&["init", "--schema", &schema, &loc], &env), "init");
    const PER_PROCESS: usize = 6;
    let racers: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let (env, loc) = (env.clone(), loc.clone());
            std::thread::spawn(move || {
                (0..PER_PROCESS)
                    .map(|i| {
                        let q = format!(r#"query q() {{ insert Company {{ name: "{who}{i}" }} }}"#);
                        let out = omnigraph(&["mutate", "--json", "-e", &q, &loc], &env);
                        (format!("{who}{i}"), out)
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut won = Vec::new();
    for r in racers {
        for (name, out) in r.join().expect("racer") {
            if out.status.success() {
                won.push(name);
            } else {
                // A lost race is a clean, typed refusal, never a partial write.
                let err: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                let code = err["code"].as_str().unwrap_or_default().to_string();
                assert!(
                    ["manifest_conflict", "read_set_changed", "conflict", "recovery_required"].contains(&code.as_str()),
                    "{name}: {err} {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    assert!(!won.is_empty(), "no write succeeded");
    let q = "query q() { match { $c: Company } return { $c.name } order { $c.name asc } }";
    let out = ok(&omnigraph(&["query", "--json", "-e", q, &loc], &env), "query");
    let v: Value = serde_json::from_str(&out).expect("json");
    let mut found: Vec<String> = v["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["c.name"].as_str().unwrap_or_default().to_string())
        .collect();
    found.sort();
    won.sort();
    assert_eq!(found, won, "exactly the acknowledged writes are visible");
    let out = ok(&omnigraph(&["commit", "list", "--json", &loc], &env), "commits");
    let commits: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(commits.as_array().map(Vec::len), Some(1 + won.len()), "one commit per acknowledged write");
    let _ = ok(&omnigraph(&["recovery", "list", "--json", &loc], &env), "recovery list");
    println!("commit race on S3: {} of {} writes won", won.len(), 2 * PER_PROCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_open_sends_no_write_to_the_bucket() {
    let Some(loc) = s3::location("readonly") else { return };
    let server = s3::server().expect("server");
    let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
    g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    drop(g);
    let prefix = loc.trim_start_matches("s3://").to_string();
    let before = s3::requests(server).len();
    let g = Omnigraph::open_with(&loc, OpenMode::ReadOnly).await.expect("open read-only");
    assert_eq!(names(&g, "main").await, ["Alice", "Bob", "Carol"]);
    g.snapshot("main").await.expect("snapshot");
    drop(g);
    let writes: Vec<String> = s3::requests(server)[before..]
        .iter()
        .filter(|r| r.contains(&prefix) && !r.starts_with("GET") && !r.starts_with("HEAD"))
        .cloned()
        .collect();
    assert!(writes.is_empty(), "a read-only open wrote: {writes:?}");
}

async fn replica_names(replica: &crate::server::Server) -> Vec<String> {
    let (st, out) = crate::server::post(replica, "/graphs/g/query", serde_json::json!({ "query": PEOPLE })).await;
    assert_eq!(st, 200, "{out}");
    out["rows"].as_array().expect("rows").iter().map(|r| r["p.name"].as_str().unwrap_or_default().to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_replica_beside_a_writer_converges_and_never_writes() {
    let Some(loc) = s3::location("replica") else { return };
    let server = s3::server().expect("server");
    let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
    g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");

    // The replica signs with its own key, so its requests can be told apart.
    const REPLICA_KEY: &str = "replica-reader";
    let env: Vec<(String, String)> = s3::env(server)
        .into_iter()
        .map(|(k, v)| if k == "AWS_ACCESS_KEY_ID" { (k, REPLICA_KEY.to_string()) } else { (k, v) })
        .collect();
    let dir = crate::scratch::tempdir();
    let replica = crate::server::spawn(dir, loc.clone(), &["--read-only", "--refresh-interval-ms", "500"], &env);
    let (st, health) = crate::server::get(&replica, "/healthz").await;
    assert_eq!((st, health["read_only"].clone()), (200, Value::Bool(true)), "{health}");
    assert_eq!(replica_names(&replica).await, ["Alice", "Bob", "Carol"]);

    // A commit of the writer's reaches the replica within its interval.
    mutate(&g, "main", r#"query q() { insert Person { name: "Dan", age: 40 } }"#).await;
    let written = std::time::Instant::now();
    let deadline = written + std::time::Duration::from_secs(20);
    while replica_names(&replica).await.len() < 4 {
        assert!(std::time::Instant::now() < deadline, "the replica never saw the commit: {}", replica.log());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    println!("replica converged {} ms after the commit (interval 500 ms)", written.elapsed().as_millis());

    // On demand: a refresh answers the new head, and reads see it at once.
    let head = mutate_head(&g, r#"query q() { insert Person { name: "Eve", age: 31 } }"#).await;
    let (st, snap) = crate::server::post(&replica, "/graphs/g/refresh", serde_json::json!({})).await;
    assert_eq!((st, snap["head_commit_id"].as_str()), (200, Some(head.as_str())), "{snap}");
    assert_eq!(replica_names(&replica).await, ["Alice", "Bob", "Carol", "Dan", "Eve"]);

    // Every write is refused, typed, and nothing reaches the bucket.
    let person = r#"{"type": "Person", "data": {"name": "Zed"}}"#.to_string() + "\n";
    let writes = [
        ("/graphs/g/mutate", serde_json::json!({"query": r#"query q() { insert Person { name: "Zed" } }"#})),
        ("/graphs/g/load", serde_json::json!({"data": person, "mode": "append"})),
        ("/graphs/g/branches", serde_json::json!({"name": "x"})),
        ("/graphs/g/optimize", serde_json::json!({})),
        ("/graphs/g/indexes/ensure", serde_json::json!({})),
        ("/graphs/g/cleanup", serde_json::json!({"confirm": true})),
        ("/graphs/g/schema/apply", serde_json::json!({"schema_source": SOCIAL_PG})),
    ];
    for (path, body) in writes {
        let (st, out) = crate::server::post(&replica, path, body).await;
        assert_eq!((st, out["code"].as_str()), (403, Some("forbidden")), "{path}: {out}");
    }
    let (st, rec) = crate::server::get(&replica, "/graphs/g/recovery").await;
    assert_eq!(st, 200, "{rec}");
    drop(replica);
    let replica_requests: Vec<String> =
        s3::requests(server).into_iter().filter(|r| r.ends_with(&format!(" {REPLICA_KEY}"))).collect();
    assert!(!replica_requests.is_empty(), "the replica's requests were not logged");
    let replica_writes: Vec<&String> =
        replica_requests.iter().filter(|r| !r.starts_with("GET ") && !r.starts_with("HEAD ")).collect();
    assert!(replica_writes.is_empty(), "the replica wrote to the bucket: {replica_writes:?}");
    println!("replica: {} storage requests, 0 writes", replica_requests.len());
}

async fn mutate_head(g: &Graph, src: &str) -> String {
    g.mutate(src, None, Map::new(), &on("main")).await.expect("mutate").commit_id.expect("commit")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_daemon_takes_a_graphs_storage_options_from_its_config_file() {
    let Some(loc) = s3::location("daemon") else { return };
    let server = s3::server().expect("server");
    {
        let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
        g.load(DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    }
    // No AWS environment at all: the file carries the endpoint and the keys.
    let dir = crate::scratch::tempdir();
    let options: serde_json::Map<String, Value> =
        s3::env(server).into_iter().map(|(k, v)| (k.to_ascii_lowercase(), Value::String(v))).collect();
    let config = dir.path().join("storage.json");
    std::fs::write(&config, serde_json::json!({ "graphs": { "g": options } }).to_string()).expect("config");
    let config = config.to_string_lossy().to_string();
    let no_aws = [("AWS_CONFIG_FILE".to_string(), "/nonexistent".to_string())];
    let daemon = crate::server::spawn(dir, loc.clone(), &["--storage-config", &config], &no_aws);
    let (st, out) = crate::server::post(
        &daemon,
        "/graphs/g/mutate",
        serde_json::json!({"query": r#"query q() { insert Person { name: "Dan", age: 40 } }"#}),
    )
    .await;
    assert_eq!(st, 200, "{out} {}", daemon.log());
    assert_eq!(replica_names(&daemon).await, ["Alice", "Bob", "Carol", "Dan"]);

    // A config entry for a graph the daemon does not serve is refused.
    let other = std::env::temp_dir().join(format!("omnigraph-storage-{}.json", ulid::Ulid::new()));
    std::fs::write(&other, serde_json::json!({ "graphs": { "other": {} } }).to_string()).expect("config");
    let out = omnigraph(
        &[
            "serve",
            "--graph",
            &format!("g={loc}"),
            "--storage-config",
            &other.to_string_lossy(),
            "--bind",
            "127.0.0.1:0",
        ],
        &[],
    );
    let _ = std::fs::remove_file(&other);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("names graph `other`, which no --graph serves"), "{text}");
}
