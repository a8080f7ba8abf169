//! The change feed: first-parent blocks, cursors that only follow complete
//! commits and bind their scope, long polls, the cleanup gap, baselines,
//! the reference's shape, the HTTP and CLI surfaces, and a consumer that is
//! killed twice while writers commit.

use std::process::Command;
use std::time::Duration;

use omnigraph::{DiffFilter, FeedFrom, FeedPage, FeedRequest, FeedStart, Graph, OmniError, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::loaded_social_graph;
use crate::server::{call, get, post, start};

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn mutate(g: &Graph, branch: &str, src: &str) -> String {
    let out = g.mutate(src, None, Map::new(), &on(branch)).await.unwrap_or_else(|e| panic!("{src}: {e}"));
    out.commit_id.expect("a commit")
}

fn poll(from: FeedFrom) -> FeedRequest {
    FeedRequest { branch: None, from, filter: DiffFilter::default(), limit: None, wait: None }
}

fn start_at(s: FeedStart) -> FeedRequest {
    poll(FeedFrom::Start(s))
}

fn ids(page: &FeedPage) -> Vec<String> {
    page.blocks.iter().map(|b| b.cause.graph_commit_id.clone()).collect()
}

/// Main's first-parent history, oldest first.
async fn first_parent_history(g: &Graph) -> Vec<String> {
    let commits = g.commits("main", None).await.expect("commits");
    let by_id: std::collections::HashMap<&str, &omnigraph::CommitInfo> =
        commits.iter().map(|c| (c.commit_id.as_str(), c)).collect();
    let mut out = Vec::new();
    let mut at = commits.first().map(|c| c.commit_id.as_str());
    while let Some(id) = at {
        out.push(id.to_string());
        at = by_id[id].parent_commit_id.as_deref();
    }
    out.reverse();
    out
}

fn rejected(r: omnigraph::Result<FeedPage>) -> String {
    match r {
        Err(OmniError::BadRequest(m)) => m,
        other => panic!("expected a 400, got {other:?}"),
    }
}

#[tokio::test]
async fn polls_deliver_first_parent_blocks_and_cursors_only_after_whole_commits() {
    let (_dir, g) = loaded_social_graph().await;
    let now = g.changes_poll(&start_at(FeedStart::Now)).await.expect("now");
    assert_eq!((now.blocks.len(), now.caught_up), (0, Some(true)));
    let c0 = now.cursor.clone().expect("cursor");
    let two = r#"query q() { insert Person { name: "Dan", age: 5 } insert Person { name: "Eve", age: 6 } }"#;
    let commit = mutate(&g, "main", two).await;
    // A page that ends inside a block hands out no cursor.
    let partial = g.changes_poll(&FeedRequest { limit: Some(1), ..poll(FeedFrom::Cursor(c0.clone())) }).await;
    let partial = partial.expect("partial");
    assert_eq!((ids(&partial), partial.cursor.clone()), (vec![commit.clone()], None));
    assert_eq!(partial.blocks[0].changes[0].id, "Dan");
    let token = partial.next_page_token.clone().expect("page token");
    assert!(
        rejected(g.changes_poll(&poll(FeedFrom::Cursor(token.clone()))).await).starts_with("change cursor rejected:")
    );
    let rest = g.changes_poll(&FeedRequest { limit: Some(1), ..poll(FeedFrom::PageToken(token)) }).await.expect("rest");
    assert_eq!((rest.blocks[0].changes[0].id.as_str(), rest.caught_up), ("Eve", Some(true)));
    let c1 = rest.cursor.expect("cursor after the whole commit");
    let empty = g.changes_poll(&poll(FeedFrom::Cursor(c1.clone()))).await.expect("caught up");
    assert_eq!((empty.blocks.len(), empty.caught_up), (0, Some(true)));
    // Replaying a cursor is at-least-once: the same commit again.
    let again = g.changes_poll(&poll(FeedFrom::Cursor(c0.clone()))).await.expect("replay");
    assert_eq!(ids(&again), vec![commit.clone()]);
    // Oldest first from the beginning, the first commit included; a
    // physical-only commit (optimize's) is an empty block; a merge is one
    // block of what it brought, diffed against its first parent.
    g.branch_create("side", "main").await.expect("branch");
    mutate(&g, "side", r#"query q() { insert Person { name: "Sid" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Mo" } }"#).await;
    g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    g.optimize("main", None).await.expect("optimize");
    let history = first_parent_history(&g).await;
    let all = g.changes_poll(&start_at(FeedStart::Beginning)).await.expect("beginning");
    assert_eq!(ids(&all), history, "one block per first-parent commit, oldest first");
    let n = all.blocks.len();
    assert!(all.blocks[n - 1].changes.is_empty(), "optimize: {:?}", all.blocks[n - 1]);
    let merge = all.blocks.iter().find(|b| b.cause.merged_parent_commit_id.is_some()).expect("the merge's block");
    let merged: Vec<&str> = merge.changes.iter().map(|c| c.id.as_str()).collect();
    let shape: Vec<(String, Option<String>, usize)> = all
        .blocks
        .iter()
        .map(|b| (b.cause.graph_commit_id.clone(), b.cause.merged_parent_commit_id.clone(), b.changes.len()))
        .collect();
    assert_eq!(merged, ["Sid"], "{shape:?}");
    let loaded: usize = all.blocks.iter().map(|b| b.changes.len()).sum();
    assert!(loaded > 10, "the example data's load is replayed too: {loaded}");
    // after:COMMIT starts just after it; a commit off the chain is refused.
    let after = g.changes_poll(&start_at(FeedStart::After(commit.clone()))).await.expect("after");
    assert_eq!(ids(&after), history[history.iter().position(|c| *c == commit).expect("on main") + 1..].to_vec());
    let side_only = g.commits("side", None).await.expect("side")[0].commit_id.clone();
    assert!(rejected(g.changes_poll(&start_at(FeedStart::After(side_only))).await).contains("first-parent history"));
}

#[tokio::test]
async fn cursors_bind_their_branch_incarnation_and_filter() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feed", "main").await.expect("branch");
    let on_feed = |from| FeedRequest { branch: Some("feed".into()), ..poll(from) };
    let c = g.changes_poll(&on_feed(FeedFrom::Start(FeedStart::Now))).await.expect("now").cursor.expect("cursor");
    // Another branch, another filter, a tampered cursor.
    assert!(rejected(g.changes_poll(&poll(FeedFrom::Cursor(c.clone()))).await).contains("follows branch `feed`"));
    let ops = DiffFilter { ops: vec![omnigraph::ChangeOp::Insert], ..DiffFilter::default() };
    let filtered = FeedRequest { filter: ops.clone(), ..on_feed(FeedFrom::Cursor(c.clone())) };
    assert!(rejected(g.changes_poll(&filtered).await).contains("filter"));
    let mut tampered = c.clone().into_bytes();
    tampered[10] = if tampered[10] == b'a' { b'b' } else { b'a' };
    let tampered = String::from_utf8(tampered).expect("hex");
    assert!(
        rejected(g.changes_poll(&on_feed(FeedFrom::Cursor(tampered))).await).starts_with("change cursor rejected:")
    );
    // A filter keeps its blocks (every commit advances the feed) but only
    // the changes it selects.
    let fc = g.changes_poll(&FeedRequest { filter: ops.clone(), ..on_feed(FeedFrom::Start(FeedStart::Now)) }).await;
    let fc = fc.expect("filtered now").cursor.expect("cursor");
    mutate(&g, "feed", r#"query q() { update Person set { age: 40 } where name = "Alice" }"#).await;
    let page = g.changes_poll(&FeedRequest { filter: ops, ..on_feed(FeedFrom::Cursor(fc)) }).await.expect("filtered");
    assert_eq!((page.blocks.len(), page.blocks[0].changes.len()), (1, 0));
    // A recreated branch is another incarnation: its old cursors are refused.
    g.branch_delete("feed").await.expect("delete");
    g.branch_create("feed", "main").await.expect("recreate");
    assert!(rejected(g.changes_poll(&on_feed(FeedFrom::Cursor(c))).await).contains("deleted and recreated"));
    for bad in [
        FeedRequest { limit: Some(0), ..poll(FeedFrom::Start(FeedStart::Now)) },
        FeedRequest { wait: Some(Duration::from_secs(3600)), ..poll(FeedFrom::Start(FeedStart::Now)) },
    ] {
        rejected(g.changes_poll(&bad).await);
    }
    let unknown_type = DiffFilter { types: vec!["Nope".into()], ..DiffFilter::default() };
    let r = g.changes_poll(&FeedRequest { filter: unknown_type, ..poll(FeedFrom::Start(FeedStart::Now)) }).await;
    assert!(matches!(r, Err(OmniError::NotFound(_))), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poll_answers_when_a_commit_lands_and_empty_at_its_timeout() {
    let (_dir, g) = loaded_social_graph().await;
    let c = g.changes_poll(&start_at(FeedStart::Now)).await.expect("now").cursor.expect("cursor");
    // Nothing lands: the poll answers empty once its wait is over.
    let waited = FeedRequest { wait: Some(Duration::from_secs(1)), ..poll(FeedFrom::Cursor(c.clone())) };
    let t0 = std::time::Instant::now();
    let empty = g.changes_poll(&waited).await.expect("timeout");
    assert_eq!((empty.blocks.len(), empty.caught_up), (0, Some(true)));
    assert!(t0.elapsed() >= Duration::from_secs(1), "answered before its wait: {:?}", t0.elapsed());
    // A commit lands while a poll waits (a long wait): it answers with it.
    let waiter = {
        let (g, c) = (g.clone(), c.clone());
        tokio::spawn(async move {
            let req = FeedRequest { wait: Some(Duration::from_secs(60)), ..poll(FeedFrom::Cursor(c)) };
            g.changes_poll(&req).await
        })
    };
    // Wait until the poll waits (observed, not slept on), then commit.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while g.feed_waiters("main") == 0 {
        assert!(std::time::Instant::now() < deadline, "the poll never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let commit = mutate(&g, "main", r#"query q() { insert Person { name: "Late" } }"#).await;
    let page = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect("answered").expect("join");
    assert_eq!(ids(&page.expect("page")), vec![commit]);
    assert_eq!(g.feed_waiters("main"), 0, "a poll that answered waits no more");
}

#[tokio::test]
async fn a_cursor_cleanup_outran_is_a_gap_and_a_baseline_resumes() {
    let (_dir, g) = loaded_social_graph().await;
    let old = g.changes_poll(&start_at(FeedStart::Now)).await.expect("now").cursor.expect("cursor");
    let first = mutate(&g, "main", r#"query q() { insert Person { name: "Gone1" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Gone2" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Gone3" } }"#).await;
    g.cleanup(Some(1), None, true).await.expect("cleanup");
    match g.changes_poll(&poll(FeedFrom::Cursor(old.clone()))).await {
        Err(e @ OmniError::ChangeFeedGap { .. }) => {
            assert_eq!((e.http_status(), e.code()), (410, "change_feed_gap"));
            let gap = &e.to_json()["change_feed_gap"];
            assert_eq!(
                (gap["cursor"].as_str(), gap["first_unreadable_commit_id"].as_str()),
                (Some(&*old), Some(&*first))
            );
        }
        other => panic!("expected a gap, got {other:?}"),
    }
    // The baseline: the head exactly, and a cursor that resumes after it.
    let baseline = g.changes_baseline(None, &DiffFilter::default()).await.expect("baseline");
    let head = g.commit("main").await.expect("head").commit_id;
    assert_eq!(baseline.handshake.snapshot_commit_id, head);
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let (summary, text) = tokio::join!(baseline.export.run(tx), async {
        let mut text = Vec::new();
        while let Some(chunk) = rx.recv().await {
            text.extend_from_slice(&chunk.expect("chunk"));
        }
        String::from_utf8(text).expect("utf8")
    });
    summary.expect("export");
    assert!(text.contains("Gone3") && text.contains("Alice"), "{text}");
    let next = mutate(&g, "main", r#"query q() { insert Person { name: "After" } }"#).await;
    let resumed = g.changes_poll(&poll(FeedFrom::Cursor(baseline.handshake.resume_cursor))).await.expect("resume");
    assert_eq!(ids(&resumed), vec![next]);
}

/// A feed answer in the reference implementation's shape, pinned field for
/// field against a golden written from its docs
/// (docs/user/branching/changes.md: `{blocks: [{cause, changes}], cursor,
/// caught_up}`, a page token instead of a cursor mid-block).
#[tokio::test]
async fn feed_answers_in_the_reference_shape() {
    let (_dir, g) = loaded_social_graph().await;
    let c = g.changes_poll(&start_at(FeedStart::Now)).await.expect("now").cursor.expect("cursor");
    let parent = g.commit("main").await.expect("head").commit_id;
    let opts = WriteOptions { actor: Some("ann".into()), ..WriteOptions::default() };
    let src = r#"query q() { insert Person { name: "Dan", age: 5 } }"#;
    let commit = g.mutate(src, None, Map::new(), &opts).await.expect("insert").commit_id.expect("commit");
    let info = g.commit(&commit).await.expect("info");
    let view = omnigraph::engine::manifest::load(g.root(), "main", None).await.expect("view");
    let person = view.state.tables["node:Person"].table_id.clone();
    let page = g.changes_poll(&poll(FeedFrom::Cursor(c))).await.expect("poll");
    let cursor = page.cursor.clone().expect("cursor");
    let golden = json!({
        "blocks": [{
            "cause": {
                "graph_commit_id": commit, "parent_commit_id": parent, "authored_branch": "main",
                "actor_id": "ann", "authored_at": info.created_at_us,
            },
            "changes": [
                {"kind": "node", "type": {"id": person, "name": "Person"}, "id": "Dan", "op": "insert",
                 "after": {"properties": {"name": "Dan", "age": 5}}},
            ],
        }],
        "cursor": cursor,
        "caught_up": true,
    });
    assert_eq!(serde_json::to_value(&page).expect("json"), golden);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_over_http_and_the_cli() {
    let s = start().await;
    let (st, now) = get(&s, "/graphs/g/changes?start=now").await;
    assert_eq!((st, now["caught_up"].as_bool()), (200, Some(true)), "{now}");
    let c0 = now["cursor"].as_str().expect("cursor").to_string();
    let (st, out) =
        post(&s, "/graphs/g/mutate", json!({"query": r#"query q() { insert Person { name: "Dan" } }"#})).await;
    assert_eq!(st, 200, "{out}");
    let commit = out["graph_commit_id"].as_str().expect("commit").to_string();
    let (st, page) = get(&s, &format!("/graphs/g/changes?cursor={c0}&kind=node&op=insert")).await;
    assert_eq!(st, 400, "a cursor made without a filter, polled with one: {page}");
    let (st, page) = get(&s, &format!("/graphs/g/changes?cursor={c0}&wait=5")).await;
    assert_eq!((st, page["blocks"][0]["cause"]["graph_commit_id"].as_str()), (200, Some(commit.as_str())), "{page}");
    for (path, status, code) in [
        (format!("/graphs/g/changes?cursor={c0}&start=beginning"), 400, "bad_request"),
        (format!("/graphs/g/changes?cursor={c0}&page_token={c0}"), 400, "bad_request"),
        (format!("/graphs/g/changes?page_token={c0}"), 400, "bad_request"),
        ("/graphs/g/changes?start=later".into(), 400, "bad_request"),
        ("/graphs/g/changes?start=after:".into(), 400, "bad_request"),
        ("/graphs/g/changes?start=after:01ARZ3NDEKTSV4RRFFQ69G5FAV".into(), 400, "bad_request"),
        ("/graphs/g/changes?cursor=zz".into(), 400, "bad_request"),
        ("/graphs/g/changes?wait=x".into(), 400, "bad_request"),
        ("/graphs/g/changes?wait=3600".into(), 400, "bad_request"),
        ("/graphs/g/changes?bogus=1".into(), 400, "bad_request"),
        ("/graphs/g/changes?kind=vertex".into(), 400, "bad_request"),
        ("/graphs/g/changes?type=Nope".into(), 404, "not_found"),
        ("/graphs/g/changes?branch=missing".into(), 404, "not_found"),
        ("/graphs/g/changes?branch=..".into(), 400, "bad_request"),
    ] {
        let (st, err) = get(&s, &path).await;
        assert_eq!((st, err["code"].as_str()), (status, Some(code)), "{path}: {err}");
    }
    // Many consumers wait on one branch; one commit answers them all.
    let c1 = page["cursor"].as_str().expect("cursor").to_string();
    let waiters: Vec<_> = (0..20)
        .map(|_| {
            let url = format!("{}/graphs/g/changes?cursor={c1}&wait=30", s.base);
            tokio::spawn(async move { call("GET", &url, Some(crate::server::TOKEN), None).await })
        })
        .collect();
    let (st, out) =
        post(&s, "/graphs/g/mutate", json!({"query": r#"query q() { insert Person { name: "Eve" } }"#})).await;
    assert_eq!(st, 200, "{out}");
    let eve = out["graph_commit_id"].as_str().expect("commit").to_string();
    for w in waiters {
        let (st, page, _) = w.await.expect("join");
        let got: Vec<&str> = page["blocks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["cause"]["graph_commit_id"].as_str())
            .collect();
        assert_eq!((st, got), (200, vec![eve.as_str()]), "{page}");
    }
    // The baseline streams the snapshot, then one terminal record.
    let url = format!("{}/graphs/g/changes/baseline", s.base);
    let (st, body, headers) =
        call("POST", &url, Some(crate::server::TOKEN), Some(("application/json", "{}".into()))).await;
    assert_eq!(st, 200);
    assert_eq!(headers["content-type"], "application/x-ndjson; charset=utf-8");
    let text = body.as_str().expect("ndjson text").to_string();
    let (terminal, records) =
        text.trim_end().lines().collect::<Vec<_>>().split_last().map(|(t, r)| (*t, r.len())).expect("lines");
    let terminal: Value = serde_json::from_str(terminal).expect("terminal");
    assert_eq!(terminal["baseline"]["snapshot_commit_id"].as_str(), Some(eve.as_str()));
    assert!(records > 5 && text.contains("\"Dan\""), "{text}");
    for (body, status) in
        [(json!({"kind": ["vertex"]}), 400), (json!({"type": ["Nope"]}), 404), (json!({"bogus": 1}), 400)]
    {
        let (st, err, _) =
            call("POST", &url, Some(crate::server::TOKEN), Some(("application/json", body.to_string()))).await;
        assert_eq!(st, status, "{body}: {err}");
    }
    // The CLI answers in the same shape.
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let from_cli = cli(&["changes", "poll", "--cursor", &c0, "--json", &s.loc]);
    let (_, from_http) = get(&s, &format!("/graphs/g/changes?cursor={c0}")).await;
    assert_eq!(from_cli["blocks"], from_http["blocks"]);
    let snapshot = s._dir.path().join("snapshot.jsonl");
    let handshake = cli(&["changes", "baseline", "--out", &snapshot.to_string_lossy(), "--json", &s.loc]);
    assert_eq!(handshake["snapshot_commit_id"].as_str(), Some(eve.as_str()));
    let written = std::fs::read_to_string(&snapshot).expect("snapshot file");
    assert!(written.contains("\"Dan\"") && !written.contains("baseline"), "{written}");
    let resumed =
        cli(&["changes", "poll", "--cursor", handshake["resume_cursor"].as_str().unwrap_or(""), "--json", &s.loc]);
    assert_eq!((resumed["blocks"].as_array().map(Vec::len), resumed["caught_up"].as_bool()), (Some(0), Some(true)));
}

const ENV_CONSUMER: &str = "OMNIGRAPH_FEED_CONSUMER";

/// A consumer's durable state: the entities it has, keyed
/// `kind:type:id`, the commits it applied, and its cursor, saved together.
#[derive(serde::Serialize, serde::Deserialize, Default, Clone)]
struct Consumed {
    cursor: String,
    entities: std::collections::BTreeMap<String, Value>,
    applied: Vec<String>,
    replays: usize,
}

/// An entity as the consumer keeps it: properties and an edge's ends.
fn entity(properties: &Value, endpoints: Option<&Value>) -> Value {
    let mut props = properties.as_object().cloned().unwrap_or_default();
    props.remove("id");
    json!({ "properties": props, "endpoints": endpoints.cloned().unwrap_or(Value::Null) })
}

/// Snapshot records (load lines) as consumer entities.
fn from_records<'a>(lines: impl Iterator<Item = &'a str>) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).expect("record");
        let id = r["data"]["id"].as_str().expect("id").to_string();
        let (key, ends) = match r.get("edge") {
            Some(t) => {
                (format!("edge:{}:{id}", t.as_str().unwrap_or("")), Some(json!({"from": r["from"], "to": r["to"]})))
            }
            None => (format!("node:{}:{id}", r["type"].as_str().unwrap_or("")), None),
        };
        out.insert(key, entity(&r["data"], ends.as_ref()));
    }
    out
}

/// Apply one block's changes (the consumer's whole logic).
fn apply(state: &mut Consumed, block: &Value) {
    let id = block["cause"]["graph_commit_id"].as_str().expect("commit").to_string();
    if state.applied.contains(&id) {
        state.replays += 1;
        return;
    }
    for c in block["changes"].as_array().into_iter().flatten() {
        let key = format!(
            "{}:{}:{}",
            c["kind"].as_str().unwrap_or(""),
            c["type"]["name"].as_str().unwrap_or(""),
            c["id"].as_str().unwrap_or("")
        );
        match c.get("after") {
            Some(after) => {
                state.entities.insert(key, entity(&after["properties"], after.get("endpoints")));
            }
            None => {
                state.entities.remove(&key);
            }
        }
    }
    state.applied.push(id);
}

fn save(path: &std::path::Path, state: &Consumed) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(state).expect("state json")).expect("write state");
    std::fs::rename(&tmp, path).expect("install state");
}

fn load_state(path: &std::path::Path) -> Consumed {
    serde_json::from_slice(&std::fs::read(path).expect("state")).expect("state json")
}

/// The consumer process: runs only when re-executed by the consumer test
/// (the environment names the daemon, the state file and the stop file).
/// It follows branch `feed` with long polls, applies whole polls and saves
/// the state with the cursor after each, until told to stop and caught up.
#[test]
fn feed_consumer_child() {
    let Ok(spec) = std::env::var(ENV_CONSUMER) else { return };
    let parts: Vec<&str> = spec.split('\n').collect();
    let [base, state_path, stop_path] = parts[..] else { panic!("consumer spec: {spec}") };
    let (state_path, stop_path) = (std::path::Path::new(state_path), std::path::Path::new(stop_path));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        loop {
            let mut state = load_state(state_path);
            let stopping = stop_path.exists();
            let mut url = format!("{base}/graphs/g/changes?branch=feed&wait=2&cursor={}", state.cursor);
            let mut blocks: Vec<Value> = Vec::new();
            let cursor = loop {
                let (st, page, _) = call("GET", &url, Some(crate::server::TOKEN), None).await;
                assert_eq!(st, 200, "{page}");
                for b in page["blocks"].as_array().into_iter().flatten() {
                    match blocks.last_mut() {
                        Some(last) if last["cause"]["graph_commit_id"] == b["cause"]["graph_commit_id"] => {
                            let more = b["changes"].as_array().cloned().unwrap_or_default();
                            last["changes"].as_array_mut().expect("changes").extend(more);
                        }
                        _ => blocks.push(b.clone()),
                    }
                }
                match page["next_page_token"].as_str() {
                    Some(t) => url = format!("{base}/graphs/g/changes?branch=feed&page_token={t}"),
                    None => break page["cursor"].as_str().expect("terminal cursor").to_string(),
                }
            };
            let idle = blocks.is_empty();
            blocks.iter().for_each(|b| apply(&mut state, b));
            state.cursor = cursor;
            save(state_path, &state);
            if stopping && idle {
                return;
            }
        }
    });
}

fn spawn_consumer(base: &str, state: &std::path::Path, stop: &std::path::Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["feed::feed_consumer_child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(ENV_CONSUMER, format!("{base}\n{}\n{}", state.display(), stop.display()))
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the consumer")
}

/// Wait until the consumer has saved at least `n` applied commits.
async fn until_applied(state: &std::path::Path, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while load_state(state).applied.len() < n {
        assert!(std::time::Instant::now() < deadline, "the consumer never applied {n} commits");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A process follows the feed with long polls while 3 writers commit 300
/// writes on a branch; it is killed twice and restarts from its saved
/// cursor, and ends with exactly the head's entities.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_twice_ends_with_exactly_the_heads_entities() {
    let s = start().await;
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "feed"})).await.0, 200);
    let baseline_url = format!("{}/graphs/g/changes/baseline", s.base);
    let body = Some(("application/json", json!({"branch": "feed"}).to_string()));
    let (st, text, _) = call("POST", &baseline_url, Some(crate::server::TOKEN), body).await;
    assert_eq!(st, 200);
    let text = text.as_str().expect("ndjson").to_string();
    let (terminal, records) = text
        .trim_end()
        .lines()
        .collect::<Vec<_>>()
        .split_last()
        .map(|(t, r)| (t.to_string(), r.to_vec()))
        .expect("lines");
    let terminal: Value = serde_json::from_str(&terminal).expect("terminal");
    let (state_path, stop_path) = (s._dir.path().join("consumer.json"), s._dir.path().join("stop"));
    let initial = Consumed {
        cursor: terminal["baseline"]["resume_cursor"].as_str().expect("cursor").to_string(),
        entities: from_records(records.into_iter()),
        ..Consumed::default()
    };
    save(&state_path, &initial);
    let mut consumer = spawn_consumer(&s.base, &state_path, &stop_path);
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let base = s.base.clone();
            tokio::spawn(async move {
                let mut commits = Vec::new();
                for i in 0..100 {
                    let q = match i % 10 {
                        7 => {
                            format!(r#"query q() {{ update Person set {{ age: {i} }} where name = "w{w}-{}" }}"#, i - 1)
                        }
                        9 => format!(r#"query q() {{ delete Person where name = "w{w}-{}" }}"#, i - 3),
                        _ => format!(r#"query q() {{ insert Person {{ name: "w{w}-{i}", age: 1 }} }}"#),
                    };
                    let body = json!({"query": q, "branch": "feed"}).to_string();
                    let url = format!("{base}/graphs/g/mutate");
                    // An update or delete (a strict write) that loses a race
                    // for the branch head is a documented 409 `conflict` with
                    // no effect; a client sends it again, as this one does.
                    let mut answer = None;
                    for _ in 0..20 {
                        let req = Some(("application/json", body.clone()));
                        let (st, v, _) = call("POST", &url, Some(crate::server::TOKEN), req).await;
                        if st != 409 || v["read_set_conflict"].is_null() {
                            answer = Some((st, v));
                            break;
                        }
                    }
                    let (st, v) = answer.expect("a write that wins within 20 tries");
                    assert_eq!(st, 200, "{q}: {v}");
                    commits.push(v["graph_commit_id"].as_str().expect("commit").to_string());
                }
                commits
            })
        })
        .collect();
    for n in [30, 120] {
        until_applied(&state_path, n).await;
        consumer.kill().expect("kill the consumer");
        consumer.wait().expect("reap");
        consumer = spawn_consumer(&s.base, &state_path, &stop_path);
    }
    let mut written = Vec::new();
    for w in writers {
        written.extend(w.await.expect("writer"));
    }
    std::fs::write(&stop_path, b"").expect("stop");
    let status = tokio::task::spawn_blocking(move || consumer.wait()).await.expect("join").expect("wait");
    assert!(status.success(), "consumer: {status:?}");
    let state = load_state(&state_path);
    for c in &written {
        assert_eq!(state.applied.iter().filter(|a| *a == c).count(), 1, "commit {c} applied once");
    }
    let (st, text, _) = call(
        "POST",
        &baseline_url,
        Some(crate::server::TOKEN),
        Some(("application/json", json!({"branch": "feed"}).to_string())),
    )
    .await;
    assert_eq!(st, 200);
    let text = text.as_str().expect("ndjson").to_string();
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let head = from_records(lines[..lines.len() - 1].iter().copied());
    assert_eq!(state.entities, head, "the consumer's entities are the head's");
    assert!(head.keys().filter(|k| k.starts_with("node:Person:w")).count() >= 200, "{} entities", head.len());
}
