//! Ensure indices: the indexes the schema derives are built as one commit,
//! a second run builds nothing, every query answers the same before and
//! after (and rows written after a build are still found), a branch builds
//! on its own forks without touching main, and the CLI and HTTP surfaces.

use omnigraph::engine::committed::open_pinned;
use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::{Graph, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::loaded_social_graph;

const QUERIES: [&str; 3] = [
    "query q() { match { $p: Person { name: \"Bob\" } } return { $p.name, $p.age } }",
    "query q() { match { $p: Person $p.age > 30 } return { $p.name } order { $p.name } }",
    "query q() { match { $a: Person $a knows $b } return { $a.name, $b.name } order { $a.name } }",
];

async fn answers(g: &Graph, branch: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for q in QUERIES {
        let at = ReadTarget::Branch(branch.into());
        out.push(g.query_json(q, None, Map::new(), &at).await.unwrap_or_else(|e| panic!("{q}: {e}"))["rows"].clone());
    }
    out
}

/// The Lance operation that wrote the `Person` table's version main pins.
async fn last_person_operation(g: &Graph) -> String {
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let entry = &view.state.tables["node:Person"];
    let ds = open_pinned(g.root(), entry).await.expect("open");
    table::operation_at(&ds, entry.version).await.expect("operation").unwrap_or_default()
}

/// Index names of every table `branch` pins, by table key.
async fn index_names(g: &Graph, branch: &str) -> Vec<(String, Vec<String>)> {
    let view = manifest::load(g.root(), branch, None).await.expect("view");
    let mut out = Vec::new();
    for (key, entry) in &view.state.tables {
        let ds = open_pinned(g.root(), entry).await.expect("open");
        out.push((key.clone(), table::index_names(&ds).await.expect("indexes").into_iter().collect()));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_indices_builds_what_the_schema_derives_once_and_changes_no_answer() {
    let (_dir, g) = loaded_social_graph().await;
    let before = answers(&g, "main").await;
    let commits = g.commits("main", None).await.expect("commits").len();
    let r = g.ensure_indices("main", Some("ops")).await.expect("ensure");
    let commit = r.graph_commit_id.clone().expect("a commit");
    assert_eq!(g.commits("main", None).await.expect("commits").len(), commits + 1);
    let head = &g.commits("main", Some(1)).await.expect("head")[0];
    assert_eq!((head.commit_id.as_str(), head.actor.as_deref()), (commit.as_str(), Some("ops")));
    let names = index_names(&g, "main").await;
    let person = &names.iter().find(|(k, _)| k == "node:Person").expect("Person").1;
    assert_eq!(person, &["email_btree", "id_btree", "name_btree", "name_inverted"], "{names:?}");
    let knows = &names.iter().find(|(k, _)| k == "edge:Knows").expect("Knows").1;
    assert_eq!(knows, &["dst_btree", "id_btree", "src_btree"]);
    let report_person = r.tables.iter().find(|t| t.type_key == "node:Person").expect("report");
    assert_eq!(report_person.built, ["email_btree", "id_btree", "name_btree", "name_inverted"]);
    assert_eq!(answers(&g, "main").await, before, "an index changed an answer");
    let violations = omnigraph::recovery::invariants::violations(g.root(), "main").await.expect("check");
    assert!(violations.is_empty(), "after ensure: {violations:?}");
    // Nothing left to build: no commit.
    let again = g.ensure_indices("main", None).await.expect("again");
    assert!(again.graph_commit_id.is_none(), "{again:?}");
    assert!(again.tables.iter().all(|t| t.built.is_empty()));
    // Rows written after the build are found through the partly indexed table.
    let o = WriteOptions::default();
    g.mutate(r#"query q() { insert Person { name: "Zoe", age: 44 } }"#, None, Map::new(), &o).await.expect("insert");
    let q = "query q() { match { $p: Person { name: \"Zoe\" } } return { $p.age } }";
    let rows = g.query_json(q, None, Map::new(), &ReadTarget::default()).await.expect("query")["rows"].clone();
    assert_eq!(rows, json!([{"p.age": 44}]));
}

/// A branch created before the build forks the tables it builds on; main
/// keeps its own (unindexed) tables and answers; a branch created after a
/// build on main inherits the indexes and builds nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_builds_on_its_own_forks() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("early", "main").await.expect("early");
    let main_before = index_names(&g, "main").await;
    let r = g.ensure_indices("early", None).await.expect("ensure on early");
    assert!(r.graph_commit_id.is_some());
    assert_eq!(index_names(&g, "main").await, main_before, "building on a branch touched main");
    let snap = g.snapshot("early").await.expect("snapshot");
    assert!(snap.tables.iter().all(|t| t.table_branch.as_deref() == Some("early")), "{:?}", snap.tables);
    assert_eq!(answers(&g, "early").await, answers(&g, "main").await);
    g.ensure_indices("main", None).await.expect("ensure on main");
    g.branch_create("late", "main").await.expect("late");
    let late = g.ensure_indices("late", None).await.expect("ensure on late");
    assert!(late.graph_commit_id.is_none(), "an inherited, indexed table was rebuilt: {late:?}");
    let snap = g.snapshot("late").await.expect("snapshot");
    assert!(snap.tables.iter().all(|t| t.table_branch.is_none()), "nothing forked: {:?}", snap.tables);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_ensure_through_the_cli_and_http() {
    let (_dir, loc) = crate::common::temp_graph_dir();
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let ex = env!("CARGO_MANIFEST_DIR");
    for args in [
        vec!["init", "--schema", &format!("{ex}/examples/social.pg"), &loc],
        vec!["load", "--data", &format!("{ex}/examples/social.jsonl"), "--mode", "overwrite", &loc],
    ] {
        assert!(std::process::Command::new(bin).args(&args).output().expect("run").status.success());
    }
    let out = std::process::Command::new(bin).args(["index", "ensure", "--json", &loc]).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert!(v["graph_commit_id"].is_string(), "{v}");
    assert_eq!(v["branch"], "main");
    let again = std::process::Command::new(bin).args(["index", "ensure", &loc]).output().expect("run");
    assert!(String::from_utf8_lossy(&again.stdout).contains("no commit"));

    let s = crate::server::start().await;
    let (st, v) = crate::server::post(&s, "/graphs/g/indexes/ensure", json!({})).await;
    assert_eq!(st, 200, "{v}");
    assert!(v["graph_commit_id"].is_string() && v["actor_id"] == "alice", "{v}");
    let (st, v) = crate::server::post(&s, "/graphs/g/indexes/ensure", json!({"branch": "nope"})).await;
    assert_eq!(st, 404, "{v}");
    let (st, _) = crate::server::post(&s, "/graphs/g/optimize", json!({})).await;
    assert_eq!(st, 200);
}

/// A keyed insert on an indexed table finds an existing row through the
/// `id` index and the fragments the index does not cover yet: an insert of a
/// key the index holds, of one written after the build (the unindexed tail)
/// and of one a compaction moved each replaces that row and adds none; a
/// strict append of such ids stays a key conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_inserts_on_an_indexed_table_find_indexed_tail_and_compacted_rows() {
    use omnigraph::{LoadMode, OmniError};
    let (_dir, g) = loaded_social_graph().await;
    g.ensure_indices("main", None).await.expect("ensure");
    let main = WriteOptions::default();
    let at = ReadTarget::Branch("main".into());
    let count = async || {
        let q = "query q() { match { $p: Person } return { count($p) as n } }";
        g.query_json(q, None, Map::new(), &at).await.expect("count")["rows"][0]["n"].as_u64().unwrap_or(0)
    };
    let upsert = async |name: &str, age: i32| {
        let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: {age} }} }}"#);
        g.mutate(&src, None, Map::new(), &main).await.unwrap_or_else(|e| panic!("insert {name}: {e}"));
        let q = format!(r#"query q() {{ match {{ $p: Person {{ name: "{name}" }} }} return {{ $p.age }} }}"#);
        let rows = g.query_json(&q, None, Map::new(), &at).await.expect("age")["rows"].clone();
        assert_eq!(rows, json!([{"p.age": age}]), "{name}: one row, replaced");
    };
    for i in 0..3 {
        upsert(&format!("Tail{i}"), i).await;
    }
    let people = count().await;
    upsert("Alice", 70).await;
    upsert("Tail1", 71).await;
    g.optimize("main", None).await.expect("optimize");
    upsert("Tail0", 72).await;
    upsert("Tail2", 73).await;
    assert_eq!(count().await, people, "inserts of existing keys added rows");
    let line = r#"{"type": "Person", "data": {"name": "Tail1"}}"#;
    match g.load(line.as_bytes(), LoadMode::Append, &main).await {
        Err(OmniError::KeyConflict { id, .. }) => assert_eq!(id, "Tail1"),
        other => panic!("a strict append of an existing id: expected a key conflict, got {other:?}"),
    }
}

/// Bytes read from the node tables of one graph, counted while routed.
#[derive(Debug)]
struct NodeTableReads {
    prefix: String,
    bytes: std::sync::atomic::AtomicU64,
}

impl crate::intercept::Policy for NodeTableReads {
    fn served(&self, path: &object_store::path::Path, bytes: u64) {
        if path.as_ref().contains(&self.prefix) {
            self.bytes.fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl NodeTableReads {
    fn take(&self) -> u64 {
        self.bytes.swap(0, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Stops routing Lance's stores through a policy when dropped.
struct Unroute;

impl Drop for Unroute {
    fn drop(&mut self) {
        omnigraph::engine::storage::io_hook::set(None);
    }
}

/// Every one-row keyed write into a 200,000-row indexed table finds its
/// rows through the indexes and the unindexed tail, reading neither the
/// table nor a whole key column (an index page or two, a row's chunks): each
/// is measured against a scan of the whole `id` column, what proving a key
/// absent costs without the index. A new
/// key (or one whose row was deleted) is appended; an existing key, in the
/// index or in the tail, replaces its row in one `Update`; the table ends
/// with one row per key and the values written. Merges of a branch (a
/// fast-forward and a three-way one) read the rows the branch changed, not
/// the table (a branch names its inherited files through a base path; they
/// are still unchanged fragments).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_writes_read_the_index_not_the_table() {
    use std::sync::Arc;
    let (_dir, loc) = crate::common::temp_graph_dir();
    let counter = Arc::new(NodeTableReads {
        prefix: format!("{}/nodes/", loc.trim_start_matches('/')),
        bytes: Default::default(),
    });
    let policy = counter.clone();
    let wrap = move |_: &str, inner: Arc<dyn object_store::ObjectStore>| {
        Arc::new(crate::intercept::Intercept { inner, policy: policy.clone() }) as Arc<dyn object_store::ObjectStore>
    };
    omnigraph::engine::storage::io_hook::set(Some(Arc::new(crate::intercept::WrapLance(wrap))));
    let _unroute = Unroute;
    let schema = "node Person { name: String @key\n age: I32? }\n";
    let g = omnigraph::Omnigraph::init(&loc, schema).await.expect("init");
    let rows: String = (0..200_000)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i:07}\",\"age\":{}}}}}\n", i % 100))
        .collect();
    g.load(rows.as_bytes(), omnigraph::LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    g.ensure_indices("main", None).await.expect("indexes");
    let main = WriteOptions::default();
    g.mutate(r#"query q() { insert Person { name: "tail", age: 1 } }"#, None, Map::new(), &main).await.expect("tail");

    // Each write: its table operation and the node-table bytes it read.
    let write = async |src: String| {
        counter.take();
        g.mutate(&src, None, Map::new(), &main).await.unwrap_or_else(|e| panic!("{src}: {e}"));
        (last_person_operation(&g).await, counter.take())
    };
    let insert = |name: &str| format!(r#"query q() {{ insert Person {{ name: "{name}", age: 2 }} }}"#);
    let mut reads = Vec::new();
    for (what, src, op) in [
        ("a new key", insert("fresh"), "Append"),
        ("an indexed key", insert("p0000007"), "Update"),
        ("a key in the tail", insert("tail"), "Update"),
        ("an update by key", r#"query q() { update Person set { age: 77 } where name = "p0000008" }"#.into(), "Update"),
        ("a delete by key", r#"query q() { delete Person where name = "p0000009" }"#.into(), "Delete"),
        ("a deleted key", insert("p0000009"), "Append"),
    ] {
        let (operation, read) = write(src).await;
        assert_eq!(operation, op, "{what}");
        reads.push((what, read));
    }
    // An append load of 3,000 new keys is checked through the index too.
    let more: String =
        (0..3_000).map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"q{i:07}\"}}}}\n")).collect();
    counter.take();
    g.load(more.as_bytes(), omnigraph::LoadMode::Append, &main).await.expect("append load");
    reads.push(("a 3,000-row append load", counter.take()));
    // Merges read the change a branch made (Lance's row versions), not
    // its table: a fast-forward, then a three-way merge (main moved too).
    let side = WriteOptions { branch: "side".into(), ..WriteOptions::default() };
    for (what, writes, on_main) in [
        (
            "a fast-forward merge",
            [insert("side-new"), r#"query q() { delete Person where name = "p0000011" }"#.into()],
            None,
        ),
        (
            "a three-way merge",
            [r#"query q() { update Person set { age: 55 } where name = "p0000010" }"#.into(), insert("side-new2")],
            Some(r#"query q() { update Person set { age: 66 } where name = "p0000012" }"#),
        ),
    ] {
        g.branch_create("side", "main").await.expect("branch");
        for src in writes {
            g.mutate(&src, None, Map::new(), &side).await.unwrap_or_else(|e| panic!("{src}: {e}"));
        }
        if let Some(src) = on_main {
            g.mutate(src, None, Map::new(), &main).await.expect("main moves");
        }
        counter.take();
        g.branch_merge("side", "main", &omnigraph::MergeOptions::default()).await.expect(what);
        reads.push((what, counter.take()));
        g.branch_delete("side").await.expect("delete the branch");
    }
    // What proving a key absent costs without the index: the whole column.
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let ds = open_pinned(g.root(), &view.state.tables["node:Person"]).await.expect("open");
    table::scan_columns(&ds, &["id"]).await.expect("scan");
    let column = counter.take();
    println!("keyed writes read {reads:?} bytes of the node tables; a scan of the id column {column}");
    assert!(column > 200_000, "a whole `id` column of 200,000 rows read only {column} bytes: the counter missed reads");
    for (what, read) in reads {
        assert!(read * 10 < column, "{what} read {read} bytes, a whole-column scan {column}");
    }
    let at = ReadTarget::Branch("main".into());
    let count = g.query_json("query q() { match { $p: Person } return { count($p) as n } }", None, Map::new(), &at);
    // The merges added two keys and deleted one.
    assert_eq!(count.await.expect("count")["rows"][0]["n"], json!(203_003));
    let merged = [("p0000010", 55), ("p0000012", 66), ("side-new", 2), ("side-new2", 2)];
    for (name, age) in [("p0000007", 2), ("p0000008", 77), ("tail", 2), ("p0000009", 2)].into_iter().chain(merged) {
        let q = format!(r#"query q() {{ match {{ $p: Person {{ name: "{name}" }} }} return {{ $p.age }} }}"#);
        let rows = g.query_json(&q, None, Map::new(), &at).await.expect("values")["rows"].clone();
        assert_eq!(rows, json!([{"p.age": age}]), "{name}");
    }
    let q = r#"query q() { match { $p: Person { name: "p0000011" } } return { $p.age } }"#;
    assert_eq!(g.query_json(q, None, Map::new(), &at).await.expect("deleted")["rows"], json!([]));
}

/// Updates and deletes whose `where` compares an indexed non-key column
/// (an `I32 @index` several rows share) find every such row through the
/// index, in the indexed part and in the unindexed tail, and no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_by_an_indexed_property_find_every_row_holding_it() {
    let schema = "node Item { slug: String @key\n rank: I32 @index\n tag: String? }\n";
    let lines: Vec<String> =
        (0..60).map(|i| format!(r#"{{"type": "Item", "data": {{"slug": "s{i}", "rank": {}}}}}"#, i % 10)).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (_dir, g) = crate::common::graph_with(schema, &lines).await;
    g.ensure_indices("main", None).await.expect("indexes");
    let main = WriteOptions::default();
    let at = ReadTarget::Branch("main".into());
    // Two more rank-7 rows in the unindexed tail.
    for slug in ["t1", "t2"] {
        let src = format!(r#"query q() {{ insert Item {{ slug: "{slug}", rank: 7 }} }}"#);
        g.mutate(&src, None, Map::new(), &main).await.expect("tail row");
    }
    let out = g.mutate(r#"query q() { update Item set { tag: "seven" } where rank = 7 }"#, None, Map::new(), &main);
    assert_eq!(out.await.expect("update").nodes_affected, 8);
    let out = g.mutate(r#"query q() { delete Item where rank = 3 }"#, None, Map::new(), &main).await.expect("delete");
    assert_eq!(out.nodes_affected, 6);
    let q = "query q() { match { $i: Item } return { $i.rank, $i.tag, count($i) as n } order { $i.rank } }";
    let rows = g.query_json(q, None, Map::new(), &at).await.expect("groups")["rows"].clone();
    let groups: Vec<(i64, Option<String>, u64)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (r["i.rank"].as_i64().unwrap_or(-1), r["i.tag"].as_str().map(str::to_string), r["n"].as_u64().unwrap_or(0))
        })
        .collect();
    let expected: Vec<(i64, Option<String>, u64)> = (0..10)
        .filter(|r| *r != 3)
        .map(|r| if r == 7 { (7, Some("seven".to_string()), 8) } else { (r, None, 6) })
        .collect();
    assert_eq!(groups, expected);
}
