//! Diffs between any two refs: every op on nodes and edges, across a merge,
//! between branches and a tag, paging, filters, physical no-ops, and the
//! CLI and HTTP surfaces.

use std::process::Command;

use omnigraph::{ChangeOp, DiffFilter, Graph, LoadMode, OmniError, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::{loaded_social_graph, temp_graph_dir};
use crate::server::{get, post, start};

fn on(branch: &str) -> WriteOptions {
    WriteOptions { branch: branch.into(), ..WriteOptions::default() }
}

async fn mutate(g: &Graph, branch: &str, src: &str) -> String {
    let out = g.mutate(src, None, Map::new(), &on(branch)).await.unwrap_or_else(|e| panic!("{src}: {e}"));
    out.commit_id.expect("a commit")
}

async fn head(g: &Graph, r: &str) -> String {
    g.commit(r).await.expect("head").commit_id
}

/// `(kind, type, id, op)` of every change, in order.
fn shape(page: &omnigraph::DiffPage) -> Vec<(String, String, String, ChangeOp)> {
    page.changes.iter().map(|c| (c.kind.to_string(), c.type_name.clone(), c.id.clone(), c.op)).collect()
}

fn all() -> DiffFilter {
    DiffFilter::default()
}

#[tokio::test]
async fn every_op_on_nodes_and_edges_with_images_and_changed_properties() {
    let (_dir, g) = loaded_social_graph().await;
    let c0 = head(&g, "main").await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Dan", age: 5 } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 32 } where name = "Alice" }"#).await;
    mutate(&g, "main", r#"query q() { insert Knows { from: "Dan", to: "Alice" } }"#).await;
    mutate(&g, "main", r#"query q() { delete Person where name = "Carol" }"#).await;
    let page = g.diff(&c0, "main", &all(), None, None).await.expect("diff");
    assert_eq!((page.from.clone(), page.to.clone()), (c0.clone(), head(&g, "main").await));
    let changes = shape(&page);
    // Nodes first, by type then id; Carol's delete took her edges with it.
    let nodes: Vec<(&str, ChangeOp)> =
        changes.iter().take_while(|c| c.0 == "node").map(|c| (c.2.as_str(), c.3)).collect();
    assert_eq!(nodes, [("Alice", ChangeOp::Update), ("Carol", ChangeOp::Delete), ("Dan", ChangeOp::Insert)]);
    let mut edges: Vec<(&str, ChangeOp)> = changes.iter().skip(nodes.len()).map(|c| (c.1.as_str(), c.3)).collect();
    assert!(changes.iter().skip(nodes.len()).all(|c| c.0 == "edge"), "{changes:?}");
    assert!(edges.windows(2).all(|w| w[0].0 <= w[1].0), "edges by type: {edges:?}");
    edges.sort();
    assert_eq!(edges, [("Knows", ChangeOp::Insert), ("Knows", ChangeOp::Delete), ("WorksAt", ChangeOp::Delete)]);
    let alice = page.changes.iter().find(|c| c.id == "Alice").expect("Alice");
    assert_eq!(alice.changed.len(), 1, "{alice:?}");
    assert_eq!(
        (alice.changed[0].property.as_str(), &alice.changed[0].before, &alice.changed[0].after),
        ("age", &json!(31), &json!(32))
    );
    assert_eq!(alice.before.as_ref().and_then(|b| b["email"].as_str()), Some("alice@example.com"));
    let dan = page.changes.iter().find(|c| c.id == "Dan").expect("Dan");
    assert_eq!(
        (dan.op, dan.before.is_none(), dan.after.clone()),
        (ChangeOp::Insert, true, Some(json!({"id": "Dan", "name": "Dan", "age": 5})))
    );
    let carol = page.changes.iter().find(|c| c.id == "Carol").expect("Carol");
    assert_eq!((carol.op, carol.after.is_none()), (ChangeOp::Delete, true));
    let new_edge = page.changes.iter().find(|c| c.type_name == "Knows" && c.op == ChangeOp::Insert).expect("edge");
    assert_eq!(new_edge.after.as_ref().map(|a| a["endpoints"].clone()), Some(json!({"from": "Dan", "to": "Alice"})));
    let gone_edges = page.changes.iter().filter(|c| c.kind == "edge" && c.op == ChangeOp::Delete).count();
    assert_eq!(gone_edges, 2, "Bob->Carol and Carol@Acme: {:?}", shape(&page));
    // An edge updated through a keyed load is an edge update.
    let id = new_edge.id.clone();
    let line = format!(
        r#"{{"edge": "Knows", "from": "Dan", "to": "Alice", "data": {{"id": "{id}", "since": "2024-02-02"}}}}"#
    );
    let before_load = head(&g, "main").await;
    g.load(line.as_bytes(), LoadMode::Merge, &WriteOptions::default()).await.expect("merge load");
    let page = g.diff(&before_load, "main", &all(), None, None).await.expect("diff");
    assert_eq!(shape(&page), [("edge".into(), "Knows".into(), id, ChangeOp::Update)]);
    assert_eq!(page.changes[0].changed[0].property, "since");
    // The reverse diff swaps inserts and deletes.
    let back = g.diff("main", &c0, &all(), None, None).await.expect("reverse");
    assert!(back.changes.iter().any(|c| c.id == "Dan" && c.op == ChangeOp::Delete));
    assert!(back.changes.iter().any(|c| c.id == "Carol" && c.op == ChangeOp::Insert));
    // Counts per type match the changes.
    let stats = g.diff_stats(&c0, &before_load, &all()).await.expect("stats");
    let person = stats.stats.iter().find(|s| s.type_name == "Person").expect("person stats");
    assert_eq!((person.inserted, person.updated, person.deleted), (1, 1, 1));
}

#[tokio::test]
async fn branches_tags_merges_filters_pages_and_physical_noops() {
    let (_dir, g) = loaded_social_graph().await;
    g.tag_create("base", None, None, None).await.expect("tag");
    g.branch_create("feature", "main").await.expect("branch");
    for i in 0..7 {
        mutate(&g, "feature", &format!(r#"query q() {{ insert Person {{ name: "F{i}", age: {i} }} }}"#)).await;
    }
    mutate(&g, "main", r#"query q() { update Person set { age: 50 } where name = "Bob" }"#).await;
    // Between two branches and between a branch and a tag.
    let fb = g.diff("main", "feature", &all(), None, None).await.expect("main..feature");
    assert_eq!(fb.changes.len(), 8, "7 inserts on feature, Bob's age on main: {:?}", shape(&fb));
    let ft = g.diff("base", "feature", &all(), None, None).await.expect("base..feature");
    assert_eq!(ft.changes.iter().filter(|c| c.op == ChangeOp::Insert).count(), 7);
    assert!(ft.changes.iter().all(|c| c.op == ChangeOp::Insert));
    // Filters.
    let only_updates = DiffFilter { ops: vec![ChangeOp::Update], ..all() };
    assert_eq!(g.diff("main", "feature", &only_updates, None, None).await.expect("ops").changes.len(), 1);
    let only_edges = DiffFilter { kind: Some("edge".into()), ..all() };
    assert!(g.diff("main", "feature", &only_edges, None, None).await.expect("kind").changes.is_empty());
    let companies = DiffFilter { types: vec!["Company".into()], ..all() };
    assert!(g.diff("main", "feature", &companies, None, None).await.expect("type").changes.is_empty());
    // Pages of 3 concatenate to the whole diff and never repeat an entity.
    let mut paged = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = g.diff("main", "feature", &all(), token.as_deref(), Some(3)).await.expect("page");
        assert!(page.changes.len() <= 3);
        paged.extend(shape(&page));
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    assert_eq!(paged, shape(&fb));
    // A token bound to another filter is refused; a made-up one too.
    let first = g.diff("main", "feature", &all(), None, Some(3)).await.expect("first");
    let t = first.next_page_token.expect("more pages");
    assert!(matches!(g.diff("main", "feature", &only_updates, Some(&t), Some(3)).await, Err(OmniError::BadRequest(_))));
    assert!(matches!(g.diff("main", "feature", &all(), Some("zz"), None).await, Err(OmniError::BadRequest(_))));
    // Across the merge: main after it against before it is feature's inserts.
    let before_merge = head(&g, "main").await;
    g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    let merged = g.diff(&before_merge, "main", &all(), None, None).await.expect("across the merge");
    assert_eq!(merged.changes.len(), 7, "{:?}", shape(&merged));
    // A compaction is a commit but changes no entity.
    let before_optimize = head(&g, "main").await;
    g.optimize("main", None).await.expect("optimize");
    assert_ne!(head(&g, "main").await, before_optimize, "optimize made a commit");
    assert!(g.diff(&before_optimize, "main", &all(), None, None).await.expect("noop").changes.is_empty());
    // Bad input.
    assert!(matches!(g.diff("nope", "main", &all(), None, None).await, Err(OmniError::NotFound(_))));
    let unknown_type = DiffFilter { types: vec!["Nope".into()], ..all() };
    assert!(matches!(g.diff("main", "base", &unknown_type, None, None).await, Err(OmniError::NotFound(_))));
    let bad_kind = DiffFilter { kind: Some("vertex".into()), ..all() };
    assert!(matches!(g.diff("main", "base", &bad_kind, None, None).await, Err(OmniError::BadRequest(_))));
    assert!(matches!(g.diff("main", "base", &all(), None, Some(0)).await, Err(OmniError::BadRequest(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_and_http_answer_diffs_in_one_shape() {
    let (_dir, loc) = temp_graph_dir();
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    let run = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
    assert!(run(&["init", "--schema", &schema, &loc]).status.success());
    assert!(run(&["load", "--data", &data, "--mode", "overwrite", &loc]).status.success());
    let m = run(&["mutate", "-e", r#"query q() { insert Person { name: "Dan", age: 5 } }"#, &loc]);
    assert!(m.status.success(), "{}", String::from_utf8_lossy(&m.stderr));
    let out = run(&["diff", "main~1", "main", "--json", &loc]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        v["changes"][0],
        json!({"kind": "node", "type": "Person", "id": "Dan", "op": "insert", "after": {"id": "Dan", "name": "Dan", "age": 5}, "changed": []})
    );
    assert!(v.get("next_page_token").is_none(), "{v}");
    let stat: Value =
        serde_json::from_slice(&run(&["diff", "--stat", "main~1", "main", "--json", &loc]).stdout).expect("json");
    assert_eq!(stat["stats"], json!([{"kind": "node", "type": "Person", "inserted": 1, "updated": 0, "deleted": 0}]));
    let bad = run(&["diff", "--op", "upsert", "main~1", "main", "--json", &loc]);
    assert_eq!(bad.status.code(), Some(2));

    let s = start().await;
    let (st, _) =
        post(&s, "/graphs/g/mutate", json!({"query": r#"query q() { insert Person { name: "Dan", age: 5 } }"#})).await;
    assert_eq!(st, 200);
    let (st, body) = get(&s, "/graphs/g/diff?from=main~1&to=main").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(body["changes"], v["changes"], "the CLI's --json and the HTTP body agree");
    let (st, body) = get(&s, "/graphs/g/diff?from=main~1&to=main&stat=true&type=Person&op=insert,update").await;
    assert_eq!((st, body["stats"].clone()), (200, stat["stats"].clone()), "{body}");
    for (path, status) in [
        ("/graphs/g/diff?from=nope&to=main", 404),
        ("/graphs/g/diff?from=main&to=main~x", 400),
        ("/graphs/g/diff?from=main&to=main&op=upsert", 400),
        ("/graphs/g/diff?from=main&to=main&kind=vertex", 400),
        ("/graphs/g/diff?from=main&to=main&type=Nope", 404),
        ("/graphs/g/diff?from=main&to=main&page_token=zz", 400),
        ("/graphs/g/diff?from=main&to=main&limit=0", 400),
        ("/graphs/g/diff?from=main", 400),
    ] {
        let (st, err) = get(&s, path).await;
        assert_eq!(st, status, "{path}: {err}");
        assert!(err["code"].is_string() && err["error"].is_string(), "{path}: {err}");
    }
}

/// A commit's changes in the reference implementation's shape, pinned
/// field for field against a golden written from its docs
/// (docs/user/branching/changes.md: a cause block stated once, changes with
/// `type {id, name}` and images `{properties, endpoints?}`).
#[tokio::test]
async fn commit_changes_answer_in_the_reference_shape() {
    let (_dir, g) = loaded_social_graph().await;
    let history = g.commits("main", None).await.expect("commits");
    let genesis = history.last().expect("genesis").commit_id.clone();
    match g.commit_changes(&genesis, &all(), None, None).await {
        Err(e @ OmniError::ParentlessCommit { .. }) => {
            assert_eq!((e.http_status(), e.code()), (409, "parentless_commit"));
            assert_eq!(e.to_json()["change_diff_refusal"]["reason"], "parentless_commit");
        }
        other => panic!("genesis: {other:?}"),
    }
    let parent = head(&g, "main").await;
    let opts = WriteOptions { actor: Some("ann".into()), ..WriteOptions::default() };
    let src = r#"query q() { insert Person { name: "Dan", age: 5 } insert Knows { from: "Dan", to: "Alice" } }"#;
    let commit = g.mutate(src, None, Map::new(), &opts).await.expect("insert").commit_id.expect("commit");
    let info = g.commit(&commit).await.expect("info");
    let view = omnigraph::engine::manifest::load(g.root(), "main", None).await.expect("view");
    let type_id = |key: &str| view.state.tables[key].table_id.clone();
    let page = g.commit_changes(&commit, &all(), None, None).await.expect("changes");
    let edge_id = page.changes.iter().find(|c| c.kind == "edge").map(|c| c.id.clone()).expect("edge");
    let golden = json!({
        "cause": {
            "graph_commit_id": commit, "parent_commit_id": parent, "authored_branch": "main",
            "actor_id": "ann", "authored_at": info.created_at_us,
        },
        "changes": [
            {"kind": "node", "type": {"id": type_id("node:Person"), "name": "Person"}, "id": "Dan", "op": "insert",
             "after": {"properties": {"name": "Dan", "age": 5}}},
            {"kind": "edge", "type": {"id": type_id("edge:Knows"), "name": "Knows"}, "id": edge_id, "op": "insert",
             "after": {"properties": {}, "endpoints": {"from": "Dan", "to": "Alice"}}},
        ],
    });
    assert_eq!(serde_json::to_value(&page).expect("json"), golden);
    // An update carries both images; a merge commit names its merged parent;
    // a physical-only commit is an empty block.
    mutate(&g, "main", r#"query q() { update Person set { age: 6 } where name = "Dan" }"#).await;
    let update = g.commit_changes("main", &all(), None, None).await.expect("update");
    let dan = &update.changes[0];
    assert_eq!(
        (
            dan.before.as_ref().map(|b| b.properties["age"].clone()),
            dan.after.as_ref().map(|a| a.properties["age"].clone())
        ),
        (Some(json!(5)), Some(json!(6)))
    );
    g.branch_create("side", "main").await.expect("branch");
    mutate(&g, "side", r#"query q() { insert Person { name: "Sid" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Mo" } }"#).await;
    g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    let merge = g.commit_changes("main", &all(), None, None).await.expect("merge changes");
    assert!(merge.cause.merged_parent_commit_id.is_some(), "{:?}", merge.cause);
    assert_eq!(merge.changes.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["Sid"]);
    g.optimize("main", None).await.expect("optimize");
    assert!(g.commit_changes("main", &all(), None, None).await.expect("optimize block").changes.is_empty());
    // Pages, and a token of another commit.
    let first = g.commit_changes(&commit, &all(), None, Some(1)).await.expect("page 1");
    let token = first.next_page_token.expect("a second page");
    let second = g.commit_changes(&commit, &all(), Some(&token), Some(1)).await.expect("page 2");
    assert_eq!((first.changes[0].kind, second.changes[0].kind, second.next_page_token), ("node", "edge", None));
    match g.commit_changes("main", &all(), Some(&token), Some(1)).await {
        Err(OmniError::BadRequest(m)) => assert!(m.starts_with("change cursor rejected:"), "{m}"),
        other => panic!("foreign token: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_changes_over_http_and_the_cli() {
    let s = start().await;
    let (st, out) =
        post(&s, "/graphs/g/mutate", json!({"query": r#"query q() { insert Person { name: "Dan", age: 5 } }"#})).await;
    assert_eq!(st, 200, "{out}");
    let commit = out["graph_commit_id"].as_str().expect("commit").to_string();
    let (st, body) =
        get(&s, &format!("/graphs/g/commits/{commit}/changes?kind=node&type=Person&op=insert&op=update")).await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(
        (body["cause"]["graph_commit_id"].as_str(), body["changes"][0]["id"].as_str()),
        (Some(commit.as_str()), Some("Dan"))
    );
    let (st, body) = get(&s, "/graphs/g/commits").await;
    let genesis =
        body["commits"].as_array().and_then(|c| c.last()).map(|c| c["graph_commit_id"].clone()).expect("genesis");
    assert_eq!(st, 200);
    for (path, status, code) in [
        (format!("/graphs/g/commits/{}/changes", genesis.as_str().unwrap_or_default()), 409, "parentless_commit"),
        (format!("/graphs/g/commits/{commit}/changes?bogus=1"), 400, "bad_request"),
        (format!("/graphs/g/commits/{commit}/changes?op=upsert"), 400, "bad_request"),
        (format!("/graphs/g/commits/{commit}/changes?page_token=zz"), 400, "bad_request"),
        (format!("/graphs/g/commits/{commit}/changes?limit=x"), 400, "bad_request"),
        ("/graphs/g/commits/nope/changes".to_string(), 404, "not_found"),
    ] {
        let (st, err) = get(&s, &path).await;
        assert_eq!((st, err["code"].as_str()), (status, Some(code)), "{path}: {err}");
    }
    // The CLI prints the same answer.
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["commit", "changes", &commit, "--json", &s.loc])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let cli: Value = serde_json::from_slice(&out.stdout).expect("json");
    let (_, http) = get(&s, &format!("/graphs/g/commits/{commit}/changes")).await;
    assert_eq!(cli, http);
}

/// The row-version path (Lance's `_row_created_at_version` /
/// `_row_last_updated_at_version` and deletion vectors) answers exactly what
/// fingerprinting both sides answers (in memory, and spilled to disk
/// partitions), for every commit of a history with every kind of write,
/// and for the whole range at once, in both directions; and it is the
/// path a one-lineage diff takes.
#[tokio::test]
async fn row_versions_and_fingerprints_agree_on_every_commit() {
    use omnigraph::engine::{diff, manifest};
    let (_dir, g) = loaded_social_graph().await;
    let start = head(&g, "main").await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Dan", age: 5 } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 32 } where name = "Alice" }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 27 } where name = "Bob" }"#).await; // identical
    mutate(&g, "main", r#"query q() { insert Knows { from: "Dan", to: "Alice" } }"#).await;
    mutate(&g, "main", r#"query q() { delete Person where name = "Carol" }"#).await;
    let upsert = concat!(
        r#"{"type": "Person", "data": {"name": "Dan", "age": 6}}"#,
        "\n",
        r#"{"type": "Person", "data": {"name": "Bob", "age": 27, "email": "bob@example.com", "role": "designer"}}"#,
        "\n",
        r#"{"type": "Company", "data": {"name": "Initech"}}"#,
    );
    g.load(upsert.as_bytes(), LoadMode::Merge, &WriteOptions::default()).await.expect("upsert");
    g.branch_create("side", "main").await.expect("branch");
    mutate(&g, "side", r#"query q() { insert Person { name: "Sid" } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 7 } where name = "Dan" }"#).await;
    g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect("merge");
    g.optimize("main", None).await.expect("optimize");
    mutate(&g, "main", r#"query q() { delete Person where name = "Dan" }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Dan", age: 9 } }"#).await;
    let commits = g.commits("main", None).await.expect("commits");
    let view = |v: u64| manifest::load(g.root(), "main", Some(v));
    let mut pairs: Vec<(u64, u64)> = commits
        .iter()
        .filter(|c| c.branch == "main")
        .filter_map(|c| {
            let parent = commits.iter().find(|p| Some(&p.commit_id) == c.parent_commit_id.as_ref())?;
            (parent.branch == "main").then_some((parent.manifest_version, c.manifest_version))
        })
        .collect();
    let first = commits.iter().find(|c| c.commit_id == start).expect("start").manifest_version;
    pairs.push((first, commits[0].manifest_version));
    assert!(pairs.len() >= 12, "{pairs:?}");
    let mut changed = 0;
    for (a, b) in pairs {
        let (a, b) = (view(a).await.expect("from"), view(b).await.expect("to"));
        let fast = diff::changes(g.root(), &a, &b, &all()).await.expect("row versions");
        let slow = diff::changes_by_fingerprint(g.root(), &a, &b, &all(), 256 << 20).await.expect("fingerprints");
        assert_eq!(fast, slow, "v{} → v{}", a.version, b.version);
        // A budget of one byte: every table's fingerprints spill to disk partitions.
        let spilled = diff::changes_by_fingerprint(g.root(), &a, &b, &all(), 1).await.expect("spilled");
        assert_eq!(fast, spilled, "v{} → v{} spilled", a.version, b.version);
        // Backwards (a head against its past): the same range read the other way.
        let back = diff::changes(g.root(), &b, &a, &all()).await.expect("row versions backwards");
        let slow = diff::changes_by_fingerprint(g.root(), &b, &a, &all(), 256 << 20).await.expect("fingerprints");
        assert_eq!(back, slow, "v{} → v{}", b.version, a.version);
        changed += fast.len();
    }
    assert!(changed > 15, "the history changed {changed} entities");
    // One lineage: the row delta applies, and holds only the changed row.
    let before = view(commits[1].manifest_version).await.expect("before");
    let after = view(commits[0].manifest_version).await.expect("after");
    let open = |v: &manifest::ManifestView| {
        let e = v.state.tables["node:Person"].clone();
        let root = g.root().clone();
        async move { omnigraph::engine::committed::open_pinned(&root, &e).await.expect("open") }
    };
    let (f, t) = (open(&before).await, open(&after).await);
    let delta = omnigraph::engine::storage::row_delta::between(&f, &t).await.expect("delta").expect("one lineage");
    let rows = |b: &[arrow_array::RecordBatch]| b.iter().map(|b| b.num_rows()).sum::<usize>();
    assert_eq!((rows(&delta.after), rows(&delta.before)), (1, 0), "the re-insert of Dan only");
    // And backwards, from the newer side: the row left behind.
    let back = omnigraph::engine::storage::row_delta::either_way(&t, &f).await.expect("delta").expect("one lineage");
    assert_eq!((rows(&back.after), rows(&back.before)), (0, 1), "the re-insert of Dan, undone");
    assert_eq!(back.before_addresses, delta.after_addresses, "where the newer side holds it");
    // A compaction moved rows without changing them: they cancel, and the
    // delta reads none of their values.
    for name in ["Eve", "Fay", "Gus"] {
        mutate(&g, "main", &format!(r#"query q() {{ insert Person {{ name: "{name}" }} }}"#)).await;
    }
    let (before, after) = (g.commit("main").await.expect("before"), {
        g.optimize("main", None).await.expect("optimize");
        g.commit("main").await.expect("after")
    });
    let (before, after) =
        (view(before.manifest_version).await.expect("v"), view(after.manifest_version).await.expect("v"));
    let (f, t) = (open(&before).await, open(&after).await);
    let ids = |d: &lance::Dataset| d.manifest.fragments.iter().map(|f| f.id).collect::<Vec<_>>();
    assert!(ids(&f).len() > ids(&t).len(), "optimize compacted Person: {:?} -> {:?}", ids(&f), ids(&t));
    let delta = omnigraph::engine::storage::row_delta::between(&f, &t).await.expect("delta").expect("one lineage");
    assert_eq!((rows(&delta.after), rows(&delta.before)), (0, 0), "moved rows cancel");
}

/// A diff across schema applies: a renamed property is reported under its
/// new name (an update of it is one change of it, and rows it did not
/// touch are no change), an added and a dropped property are named as on
/// one side only, and a renamed type is one type under its new name.
#[tokio::test]
async fn a_diff_across_a_schema_apply_follows_renames_and_names_one_sided_properties() {
    let (_dir, g) = loaded_social_graph().await;
    let c0 = head(&g, "main").await;
    let pg = include_str!("../../examples/social.pg");
    let renamed = pg
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n    nickname: String?\n")
        .replace("    founded: Date?\n", "")
        .replace("@range(age,", "@range(years,");
    g.schema_apply(&renamed, true, None).await.expect("rename, add, drop");
    mutate(&g, "main", r#"query q() { update Person set { years: 32 } where name = "Alice" }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { nickname: "B" } where name = "Bob" }"#).await;
    {
        let page = g.diff(&c0, "main", &all(), None, None).await.expect("diff");
        let people: Vec<(&str, ChangeOp, Vec<&str>)> = page
            .changes
            .iter()
            .filter(|c| c.type_name == "Person")
            .map(|c| (c.id.as_str(), c.op, c.changed.iter().map(|p| p.property.as_str()).collect()))
            .collect();
        // Bob's new `nickname` is a property `from` lacks: named in `schema`, not compared.
        assert_eq!(people, [("Alice", ChangeOp::Update, vec!["years"])]);
        assert!(
            page.changes.iter().all(|c| c.type_name != "Company"),
            "a dropped property is no change: {:?}",
            page.changes
        );
        let alice = page.changes.iter().find(|c| c.id == "Alice").expect("Alice");
        assert_eq!((alice.changed[0].before.clone(), alice.changed[0].after.clone()), (json!(31), json!(32)));
        let schema = serde_json::to_value(&page.schema).expect("json");
        let person = schema.as_array().and_then(|s| s.iter().find(|d| d["type"] == "Person")).expect("Person drift");
        assert_eq!(person["renamed"], json!([{"from": "age", "to": "years"}]), "{schema}");
        assert_eq!(person["only_in_to"], json!(["nickname"]), "{schema}");
    }
    let stats = g.diff_stats(&c0, "main", &all()).await.expect("stats");
    assert!(stats.schema.iter().any(|d| d.type_name == "Person"), "{:?}", stats.schema);
    // The fingerprint path follows the rename too.
    let view = |c: omnigraph::CommitInfo| omnigraph::engine::manifest::load(g.root(), "main", Some(c.manifest_version));
    let a = view(g.commit(&c0).await.expect("c0")).await.expect("from");
    let b = view(g.commit("main").await.expect("head")).await.expect("to");
    let fast = omnigraph::engine::diff::changes(g.root(), &a, &b, &all()).await.expect("row versions");
    let slow = omnigraph::engine::diff::changes_by_fingerprint(g.root(), &a, &b, &all(), 256 << 20)
        .await
        .expect("fingerprints");
    assert_eq!(fast, slow);
    // And in bounded memory: a budget of one byte spills every table's
    // fingerprints over the columns the two sides share.
    let spilled = omnigraph::engine::diff::changes_by_fingerprint(g.root(), &a, &b, &all(), 1).await.expect("spilled");
    assert_eq!(fast, spilled);
    // A renamed type: one type under its new name, no delete and insert.
    let c1 = head(&g, "main").await;
    let human = renamed
        .replace("node Person @description", "node Human @rename_from(\"Person\") @description")
        .replace("Person -> Person", "Human -> Human")
        .replace("Person -> Company", "Human -> Company");
    g.schema_apply(&human, false, None).await.expect("rename the type");
    mutate(&g, "main", r#"query q() { update Human set { years: 33 } where name = "Alice" }"#).await;
    let page = g.diff(&c1, "main", &all(), None, None).await.expect("diff");
    let got: Vec<(&str, &str, ChangeOp)> =
        page.changes.iter().map(|c| (c.type_name.as_str(), c.id.as_str(), c.op)).collect();
    assert_eq!(got, [("Human", "Alice", ChangeOp::Update)]);
}
