//! Indexes that stay complete: rows written after a build are folded into
//! the indexes by `optimize` / `index ensure` (answers never change), `index
//! status` reports each index's coverage through the embedded API, the CLI
//! and HTTP, and the daemon folds a tail past `--index-lag-rows` by itself.

use std::time::{Duration, Instant};

use omnigraph::{Graph, LoadMode, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

const SCHEMA: &str = "node Person {\n  name: String @key\n  age: I32 @index\n  embedding: Vector(4) @index\n}\n\
                      edge Knows: Person -> Person\n";

/// One person's JSONL line; person 37_123 points the other way from all.
fn person(i: u64, age: u64) -> String {
    let embedding =
        if i == 37_123 { "[0.0, 0.0, 0.0, 1.0]".to_string() } else { format!("[1.0, {}, 0.5, 0.0]", i % 13) };
    format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i:06}\",\"age\":{age},\"embedding\":{embedding}}}}}\n")
}

/// JSONL for persons `from..to` with their ages in `ages`, and a `Knows`
/// edge from each to the person before it.
fn batch(ages: &[u64], from: u64, to: u64) -> String {
    let mut out = String::new();
    for i in from..to {
        out.push_str(&person(i, ages[i as usize]));
        if i > 0 {
            out.push_str(&format!("{{\"edge\":\"Knows\",\"from\":\"p{i:06}\",\"to\":\"p{:06}\"}}\n", i - 1));
        }
    }
    out
}

/// Persons `from..to` again with a new age (a merge load: keyed updates).
fn updates(ages: &mut [u64], from: u64, to: u64, age: u64) -> String {
    (from..to)
        .map(|i| {
            ages[i as usize] = age;
            person(i, age)
        })
        .collect()
}

async fn rows(g: &Graph, q: &str) -> Value {
    let at = ReadTarget::Branch("main".into());
    g.query_json(q, None, Map::new(), &at).await.unwrap_or_else(|e| panic!("{q}: {e}"))["rows"].clone()
}

/// Answers a full scan gives for a graph of persons `0..n` aged `ages`,
/// checked on keys in the base, in the newest batch, among the updated
/// rows and across the whole table.
async fn assert_answers(g: &Graph, ages: &[u64], n: u64) {
    for i in [7, 150, n / 2, n - 1] {
        let q = format!("query q() {{ match {{ $p: Person {{ name: \"p{i:06}\" }} }} return {{ $p.age }} }}");
        assert_eq!(rows(g, &q).await, json!([{"p.age": ages[i as usize]}]), "lookup of p{i:06} at n = {n}");
    }
    let old = ages[..n as usize].iter().filter(|&&a| a >= 80).count();
    let q = "query q() { match { $p: Person $p.age >= 80 } return { count($p) as n } }";
    assert_eq!(rows(g, q).await, json!([{"n": old}]), "range count at n = {n}");
    for age in [95, 96] {
        let want = ages[..n as usize].iter().filter(|&&a| a == age).count();
        let q = format!("query q() {{ match {{ $p: Person {{ age: {age} }} }} return {{ count($p) as n }} }}");
        assert_eq!(rows(g, &q).await, json!([{"n": want}]), "age = {age} at n = {n}");
    }
    let last = n - 1;
    let q =
        format!("query q() {{ match {{ $a: Person {{ name: \"p{last:06}\" }} $a knows $b }} return {{ $b.name }} }}");
    assert_eq!(rows(g, &q).await, json!([{"b.name": format!("p{:06}", last - 1)}]), "edge lookup at n = {n}");
    if n > 37_123 {
        let q = "query q($v: Vector(4)) { match { $p: Person } return { $p.name } order { nearest($p.embedding, $v) } limit 1 }";
        let at = ReadTarget::Branch("main".into());
        let mut params = Map::new();
        params.insert("v".into(), json!([0.0, 0.0, 0.0, 1.0]));
        let r = g.query_json(q, None, params, &at).await.expect("nearest")["rows"].clone();
        assert_eq!(r, json!([{"p.name": "p037123"}]), "nearest at n = {n}");
    }
}

/// Every built index's coverage on `main`: `(type_key/index, coverage,
/// unindexed fragments, segments)`.
async fn coverage(g: &Graph) -> Vec<(String, f64, u64, u64)> {
    let status = g.index_status("main").await.expect("status");
    let mut out = Vec::new();
    for t in &status.tables {
        for i in t.indexes.iter().filter(|i| i.built) {
            let expected = if i.total_rows == 0 { 1.0 } else { i.indexed_rows as f64 / i.total_rows as f64 };
            assert_eq!(i.coverage, expected, "{i:?}");
            out.push((format!("{}/{}", t.type_key, i.index), i.coverage, i.unindexed_fragments, i.segments));
        }
    }
    out
}

/// The PROFILE of person `i`'s key lookup: the coverage of the index its
/// Lance read used, and the read's flags.
async fn lookup_profile(g: &Graph, i: u64) -> (f64, Vec<String>) {
    let q = format!("query q() {{ match {{ $p: Person {{ name: \"p{i:06}\" }} }} return {{ $p.age }} }}");
    let at = ReadTarget::Branch("main".into());
    let limits = omnigraph::engine::read_limits::ReadLimits::default();
    let r = g.query_insight(&q, None, Map::new(), &at, limits, omnigraph::engine::query::Insight::Profile).await;
    let plan = r.expect("profile").plan.expect("a plan");
    let read = plan.walk().into_iter().find(|n| n.op == "FilteredReadExec" && n.detail.contains(&format!("p{i:06}")));
    let read = read.unwrap_or_else(|| panic!("no lookup read in\n{}", plan.render()));
    let index = read.index.as_ref().unwrap_or_else(|| panic!("no index served the lookup:\n{}", plan.render()));
    assert_eq!(index.name, "id_btree", "{}", plan.render());
    (index.coverage, read.flags.clone())
}

/// Build the indexes on 10,000 persons, write 50,000 more in 50 commits
/// with keyed updates of 100 rows every tenth, and an `index ensure` every
/// tenth (a delta fold: one more segment per index, covering the tail);
/// answers equal a full scan's after each. `optimize` then merges every
/// index into one segment covering its whole table; the answers stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_fold_their_tails_through_fifty_commits_and_optimize() {
    let (_dir, loc) = crate::common::temp_graph_dir();
    let g = omnigraph::Omnigraph::init(&loc, SCHEMA).await.expect("init");
    let o = WriteOptions::default();
    let mut ages: Vec<u64> = (0..60_000).map(|i| i % 90).collect();
    g.load(batch(&ages, 0, 10_000).as_bytes(), LoadMode::Overwrite, &o).await.expect("base");
    let built = g.ensure_indices("main", None).await.expect("ensure");
    assert!(built.graph_commit_id.is_some());
    let full = coverage(&g).await;
    assert_eq!(full.len(), 8, "{full:?}");
    assert!(full.iter().all(|(_, c, f, s)| *c == 1.0 && *f == 0 && *s == 1), "{full:?}");
    let mut n = 10_000;
    for c in 0..50 {
        let load = g.load(batch(&ages, n, n + 1_000).as_bytes(), LoadMode::Append, &o).await;
        load.unwrap_or_else(|e| panic!("append {c}: {e}"));
        n += 1_000;
        if c % 10 == 3 {
            let (from, age) = (100 + c * 10, 95 + c % 2);
            g.load(updates(&mut ages, from, from + 100, age).as_bytes(), LoadMode::Merge, &o).await.expect("update");
        }
        if c % 10 == 6 {
            let r = g.ensure_indices("main", None).await.expect("delta fold");
            let person = r.tables.iter().find(|t| t.type_key == "node:Person").expect("Person");
            assert!(person.built.is_empty() && person.folded.len() == 5, "{r:?}");
            let delta = coverage(&g).await;
            assert!(delta.iter().all(|(_, c, f, _)| *c == 1.0 && *f == 0), "after a delta fold: {delta:?}");
            let id = delta.iter().find(|(k, ..)| k == "node:Person/id_btree").expect("id");
            // A BTree's delta merges with the newest segments no bigger
            // than all newer rows: about log2(rows / tail) of them stay.
            assert!((1..=2).contains(&id.3), "a delta fold keeps the BTree's segments few: {delta:?}");
        }
        assert_answers(&g, &ages, n).await;
    }
    let partial = coverage(&g).await;
    let person: Vec<_> = partial.iter().filter(|(k, ..)| k.starts_with("node:Person")).collect();
    assert!(person.iter().all(|(_, c, f, _)| *c < 1.0 && *f > 0), "3 commits since the last fold: {partial:?}");
    let (coverage_before, flags) = lookup_profile(&g, n - 1).await;
    assert!(coverage_before < 1.0 && flags == ["unindexed_tail"], "{coverage_before} {flags:?}");

    let report = g.optimize("main", None).await.expect("optimize");
    let folded = |r: &Option<omnigraph::EnsureIndicesReport>| {
        let r = r.as_ref().expect("an ensure-indices run");
        assert!(r.graph_commit_id.is_some(), "{r:?}");
        let person = r.tables.iter().find(|t| t.type_key == "node:Person").expect("Person");
        assert!(person.built.is_empty(), "{person:?}");
        person.folded.clone()
    };
    // Every tail before the compaction; after it, the BTrees (row
    // addresses) lose the rewritten fragments, the others follow their rows.
    let all = ["age_btree", "embedding_vector", "id_btree", "name_btree", "name_inverted"];
    assert_eq!(folded(&report.indexes_before), all);
    assert_eq!(folded(&report.indexes), ["age_btree", "id_btree", "name_btree"]);
    let after = coverage(&g).await;
    assert!(after.iter().all(|(_, c, f, s)| *c == 1.0 && *f == 0 && *s == 1), "after optimize: {after:?}");
    assert_answers(&g, &ages, n).await;
    // The same lookup's PROFILE: an index scan with no unindexed tail.
    assert_eq!(lookup_profile(&g, n - 1).await, (1.0, vec![]));
    let violations = omnigraph::recovery::invariants::violations(g.root(), "main").await.expect("check");
    assert!(violations.is_empty(), "{violations:?}");
    // Complete indexes: nothing left to fold, so no commit.
    let again = g.ensure_indices("main", None).await.expect("again");
    assert!(again.graph_commit_id.is_none(), "{again:?}");
}

fn cli(args: &[&str]) -> std::process::Output {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// The coverage of `index` on `table` in an `index status --json` /
/// `GET /graphs/{id}/indexes` answer.
fn coverage_of(status: &Value, table: &str, index: &str) -> Value {
    let tables = status["tables"].as_array().unwrap_or_else(|| panic!("no tables: {status}"));
    let t = tables.iter().find(|t| t["type_key"] == table).unwrap_or_else(|| panic!("no {table}: {status}"));
    let indexes = t["indexes"].as_array().unwrap_or_else(|| panic!("no indexes: {status}"));
    indexes.iter().find(|i| i["index"] == index).cloned().unwrap_or_else(|| panic!("no {index}: {status}"))
}

fn people(from: u64, to: u64) -> String {
    (from..to)
        .map(|i| format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"n{i:05}\",\"age\":{}}}}}\n", i % 90))
        .collect()
}

/// `index status` through the CLI (JSON and text) on a graph whose
/// indexes miss one write; then the daemon with `--index-lag-rows 300`
/// answers the same shape over HTTP, folds a 400-row tail by itself (a
/// commit by `omnigraph:index-fold`, counted on `/healthz?verbose`), leaves
/// a tail under the bound alone, and builds again the indexes an overwrite
/// of 350 rows dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn index_status_and_the_daemons_background_fold() {
    let (dir, loc) = crate::common::temp_graph_dir();
    let ex = env!("CARGO_MANIFEST_DIR");
    cli(&["init", "--schema", &format!("{ex}/examples/social.pg"), &loc]);
    cli(&["load", "--data", &format!("{ex}/examples/social.jsonl"), "--mode", "overwrite", &loc]);
    let before: Value = serde_json::from_slice(&cli(&["index", "status", "--json", &loc]).stdout).expect("json");
    let missing = coverage_of(&before, "node:Person", "name_btree");
    assert_eq!((missing["built"].clone(), missing["coverage"].clone()), (json!(false), json!(0.0)), "{before}");
    cli(&["index", "ensure", &loc]);
    cli(&["mutate", "-e", "query q() { insert Person { name: \"Zed\", age: 3 } }", &loc]);
    let status: Value = serde_json::from_slice(&cli(&["index", "status", "--json", &loc]).stdout).expect("json");
    assert_eq!(status["branch"], "main");
    let name = coverage_of(&status, "node:Person", "name_btree");
    let (total, indexed) = (name["total_rows"].as_u64().expect("total"), name["indexed_rows"].as_u64().expect("rows"));
    assert_eq!((name["kind"].clone(), name["built"].clone(), total - indexed), (json!("btree"), json!(true), 1));
    assert_eq!(name["unindexed_fragments"], 1, "{status}");
    assert_eq!(name["coverage"].as_f64(), Some(indexed as f64 / total as f64));
    let company = coverage_of(&status, "node:Company", "id_btree");
    assert_eq!(company["coverage"], 1.0, "an untouched table is covered: {status}");
    let text = String::from_utf8_lossy(&cli(&["index", "status", &loc]).stdout).to_string();
    assert!(text.contains("name_btree") && text.contains("1 unindexed fragments"), "{text}");

    let s = crate::server::spawn(dir, loc, &["--index-lag-rows", "300"], &[]);
    let (st, http) = crate::server::get(&s, "/graphs/g/indexes?branch=main").await;
    assert_eq!((st, coverage_of(&http, "node:Person", "name_btree")), (200, name), "{http}");
    let (st, v) = crate::server::get(&s, "/graphs/g/indexes?branch=nope").await;
    assert_eq!((st, v["code"].clone()), (404, json!("not_found")), "{v}");
    let load = |from, to| json!({"data": people(from, to), "mode": "append"});
    let (st, v) = crate::server::post(&s, "/graphs/g/load", load(0, 400)).await;
    assert_eq!(st, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let folded = loop {
        let (_, status) = crate::server::get(&s, "/graphs/g/indexes").await;
        if coverage_of(&status, "node:Person", "name_btree")["coverage"] == 1.0 {
            break status;
        }
        assert!(Instant::now() < deadline, "no background fold of a 401-row tail: {status}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for i in ["id_btree", "name_btree", "name_inverted"] {
        assert_eq!(coverage_of(&folded, "node:Person", i)["unindexed_fragments"], 0, "{i}: {folded}");
    }
    let (_, health) = crate::server::get(&s, "/healthz?verbose=true").await;
    let m = &health["graphs"]["g"]["maintenance"];
    assert_eq!((m["index_lag_rows"].clone(), m["index_folds"].clone()), (json!(300), json!(1)), "{health}");
    assert_eq!(m["index_fold_failures"], 0, "{health}");
    let (_, commits) = crate::server::get(&s, "/graphs/g/commits?branch=main").await;
    assert_eq!(commits["commits"][0]["actor"], "omnigraph:index-fold", "{commits}");
    // A tail under the bound stays until optimize or the next large write.
    let (st, _) = crate::server::post(&s, "/graphs/g/load", load(400, 420)).await;
    assert_eq!(st, 200);
    let (_, status) = crate::server::get(&s, "/graphs/g/indexes").await;
    let name = coverage_of(&status, "node:Person", "name_btree");
    assert_eq!(
        name["total_rows"].as_u64().zip(name["indexed_rows"].as_u64()).map(|(t, i)| t - i),
        Some(20),
        "{status}"
    );
    // An overwrite drops a table's indexes; past the bound they are built again.
    let (st, v) = crate::server::post(&s, "/graphs/g/load", json!({"data": people(0, 350), "mode": "overwrite"})).await;
    assert_eq!(st, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, status) = crate::server::get(&s, "/graphs/g/indexes").await;
        let name = coverage_of(&status, "node:Person", "name_btree");
        if name["built"] == true && name["coverage"] == 1.0 {
            assert_eq!(name["total_rows"], 350, "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "indexes not rebuilt after an overwrite: {status}\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, health) = crate::server::get(&s, "/healthz?verbose=true").await;
    assert_eq!(health["graphs"]["g"]["maintenance"]["index_folds"], 2, "{health}");
}
