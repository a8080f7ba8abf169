//! EXPLAIN and PROFILE: the plan of a key lookup, a 2-hop traversal, a
//! `{1,6}` traversal, a bm25 search and an aggregation (golden shapes),
//! each operator's rows under PROFILE, the index each Lance read used and
//! the flags for a missing index and an unindexed tail; through the
//! embedded API, HTTP and the CLI.

use omnigraph::engine::query::{Insight, PlanNode};
use omnigraph::engine::read_limits::ReadLimits;
use omnigraph::{Graph, LoadMode, ReadTarget, WriteOptions};
use serde_json::{Value, json};

const SCHEMA: &str = "node Person {\n  name: String @key\n  bio: String @index\n  age: I32?\n}\n\
                      edge Knows: Person -> Person\n";

/// Persons p0..p9 (ages 20 + i % 3), each knowing the next.
fn people() -> Vec<String> {
    let mut lines = Vec::new();
    for i in 0..10 {
        let bio = if i % 2 == 0 { "graph databases and rust" } else { "cooking" };
        lines.push(format!(r#"{{"type":"Person","data":{{"name":"p{i}","bio":"{bio} {i}","age":{}}}}}"#, 20 + i % 3));
        if i > 0 {
            lines.push(format!(r#"{{"edge":"Knows","from":"p{}","to":"p{i}"}}"#, i - 1));
        }
    }
    lines
}

/// A graph of [`people`] at a fresh location, its indexes built.
async fn graph() -> (tempfile::TempDir, String, Graph) {
    let (dir, loc) = crate::common::temp_graph_dir();
    let g = omnigraph::Omnigraph::init(&loc, SCHEMA).await.expect("init");
    g.load(people().join("\n").as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    g.ensure_indices("main", None).await.expect("ensure");
    (dir, loc, g)
}

const LOOKUP: &str = "query q() { match { $p: Person { name: \"p3\" } } return { $p.age } }";
const TWO_HOPS: &str = "query q() { match { $a: Person { name: \"p2\" } $a knows $b $b knows $c } return { $c.name } }";
const VARIABLE: &str = "query q() { match { $a: Person { name: \"p2\" } $a knows{1,6} $b } return { $b.name } }";
const BM25: &str = "query q() { match { $p: Person } return { $p.name } order { bm25($p.bio, \"graph\") } limit 3 }";
const AGGREGATE: &str = "query q() { match { $p: Person } return { $p.age, count($p) as n } }";

async fn run(g: &Graph, query: &str, insight: Insight) -> (Vec<Value>, PlanNode) {
    let at = ReadTarget::Branch("main".into());
    let r = g
        .query_insight(query, None, Default::default(), &at, ReadLimits::default(), insight)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    let out = omnigraph::wire::read_output(&r, None, json!({"branch": "main"}));
    let rows = serde_json::to_value(&out).expect("json")["rows"].as_array().cloned().unwrap_or_default();
    (rows, r.plan.unwrap_or_else(|| panic!("{query}: no plan")))
}

/// The operators that say what a plan does, nested: our steps, Lance's
/// reads and index queries, joins, aggregates, sorts and limits. Exchange
/// and projection operators (which vary with the machine's cores) are
/// left out, and an operator repeated over itself (a partial and a final
/// aggregate) is shown once.
fn outline(node: &PlanNode) -> String {
    const KEEP: [&str; 12] = [
        "query",
        "materialize",
        "traverse",
        "text_search",
        "count_rows",
        "result",
        "FilteredReadExec",
        "ScalarIndexExec",
        "HashJoinExec",
        "AggregateExec",
        "SortExec",
        "GlobalLimitExec",
    ];
    fn kept(node: &PlanNode, parent: Option<&str>) -> Vec<String> {
        // `SortExec(TopK)` is a sort.
        let op = KEEP.iter().find(|k| node.op.starts_with(**k)).copied();
        let keep = op.is_some() && parent != op;
        let under = if keep { op } else { parent };
        let children: Vec<String> = node.children.iter().flat_map(|c| kept(c, under)).collect();
        match (keep, children.is_empty()) {
            (false, _) => children,
            (true, true) => vec![under.unwrap_or_default().to_string()],
            (true, false) => vec![format!("{}({})", under.unwrap_or_default(), children.join(","))],
        }
    }
    kept(node, None).join(",")
}

fn reads(plan: &PlanNode) -> Vec<&PlanNode> {
    plan.walk().into_iter().filter(|n| n.op == "FilteredReadExec").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_of_the_five_query_shapes_are_golden_and_profiles_count_rows() {
    let (_dir, _, g) = graph().await;
    let seek = "materialize(FilteredReadExec(ScalarIndexExec))";
    let hop = "materialize(HashJoinExec(AggregateExec(FilteredReadExec(ScalarIndexExec)),FilteredReadExec))";
    let cases = [
        (LOOKUP, format!("query({seek},result(SortExec))"), 1),
        (TWO_HOPS, format!("query({seek},traverse,{hop},traverse,{hop},result(SortExec))"), 1),
        (VARIABLE, format!("query({seek},traverse,materialize(HashJoinExec(FilteredReadExec)),result(SortExec))"), 6),
        (BM25, "query(text_search,result(SortExec(HashJoinExec(FilteredReadExec))))".into(), 3),
        (AGGREGATE, "query(result(SortExec(AggregateExec(FilteredReadExec))))".into(), 3),
    ];
    for (query, golden, rows) in &cases {
        let (none, explained) = run(&g, query, Insight::Explain).await;
        assert!(none.is_empty(), "EXPLAIN reads no rows: {none:?}");
        assert_eq!(outline(&explained), *golden, "{query}\n{}", explained.render());
        let (answer, profiled) = run(&g, query, Insight::Profile).await;
        assert_eq!(answer.len(), *rows, "{query}: {answer:?}");
        assert_eq!(outline(&profiled), *golden, "{query}\n{}", profiled.render());
        // Every operator of our own and every Lance read reports its rows.
        let result = profiled.children.last().expect("result");
        assert_eq!(result.op, "result");
        assert_eq!(result.children[0].rows, Some(*rows as u64), "{}", profiled.render());
        assert!(explained.walk().iter().all(|n| n.rows.is_none() && n.time_ms.is_none()), "{}", explained.render());
        for read in reads(&profiled) {
            assert!(read.rows.is_some() && read.time_ms.is_some(), "{}", profiled.render());
            assert!(read.detail.contains("table=node:Person") || read.detail.contains("table=edge:Knows"), "{read:?}");
        }
    }
}

/// The index a Lance read used and its coverage; a read a declared index
/// could have served is flagged while the index is not built, and one
/// served by an index with an unindexed tail says so, until the tail is
/// folded in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_name_their_index_and_flag_a_missing_index_and_a_tail() {
    let (_dir, loc) = crate::common::temp_graph_dir();
    let g = omnigraph::Omnigraph::init(&loc, SCHEMA).await.expect("init");
    let o = WriteOptions::default();
    g.load(people().join("\n").as_bytes(), LoadMode::Overwrite, &o).await.expect("load");
    let lookup_read = |plan: &PlanNode| reads(plan).into_iter().find(|r| r.detail.contains("p3")).cloned();
    let (_, plan) = run(&g, LOOKUP, Insight::Explain).await;
    let read = lookup_read(&plan).unwrap_or_else(|| panic!("{}", plan.render()));
    assert_eq!(read.flags, ["scan_could_use_index"], "{}", plan.render());
    assert!(read.index.is_none());

    g.ensure_indices("main", None).await.expect("ensure");
    let (_, plan) = run(&g, LOOKUP, Insight::Profile).await;
    let read = lookup_read(&plan).unwrap_or_else(|| panic!("{}", plan.render()));
    let index = read.index.clone().unwrap_or_else(|| panic!("{}", plan.render()));
    assert_eq!((index.name.as_str(), index.coverage, read.flags.len()), ("id_btree", 1.0, 0), "{}", plan.render());

    // Ten more people after the build: the lookup finds the new one through
    // the index and a scan of the unindexed fragment.
    let more: Vec<String> = (10..20)
        .map(|i| format!(r#"{{"type":"Person","data":{{"name":"p{i}","bio":"graph {i}","age":30}}}}"#))
        .collect();
    g.load(more.join("\n").as_bytes(), LoadMode::Append, &o).await.expect("append");
    let late = "query q() { match { $p: Person { name: \"p13\" } } return { $p.age } }";
    let (rows, plan) = run(&g, late, Insight::Profile).await;
    assert_eq!(rows, [json!({"p.age": 30})]);
    let read = reads(&plan).into_iter().find(|r| r.detail.contains("p13")).cloned().expect("read");
    let index = read.index.clone().unwrap_or_else(|| panic!("{}", plan.render()));
    assert_eq!((index.name.as_str(), index.coverage), ("id_btree", 0.5), "{}", plan.render());
    assert_eq!(read.flags, ["unindexed_tail"], "{}", plan.render());
    let (_, plan) = run(&g, BM25, Insight::Explain).await;
    let search = plan.walk().into_iter().find(|n| n.op == "text_search").cloned().expect("text_search");
    assert_eq!(search.index.as_ref().map(|i| (i.name.as_str(), i.coverage)), Some(("bio_inverted", 0.5)));
    assert_eq!(search.flags, ["unindexed_tail"]);

    g.ensure_indices("main", None).await.expect("fold");
    let (_, plan) = run(&g, late, Insight::Profile).await;
    let read = reads(&plan).into_iter().find(|r| r.detail.contains("p13")).cloned().expect("read");
    assert_eq!(read.index.map(|i| i.coverage), Some(1.0), "{}", plan.render());
    assert!(read.flags.is_empty(), "{}", plan.render());
}

/// `explain` / `profile` on `POST /query`, and `query --explain` / a bare
/// `--profile` on the CLI, on storage and through the daemon; both at once
/// is a typed 400 (exit 2); a bare `--profile` elsewhere is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_and_profile_over_http_and_the_cli() {
    let (dir, loc, g) = graph().await;
    drop(g);
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
            .args(args)
            .env("OMNIGRAPH_HOME", dir.path().join("home"))
            .output()
            .expect("run omnigraph")
    };
    let text = |o: &std::process::Output| (String::from_utf8_lossy(&o.stdout).to_string(), o.status.code());
    let (out, code) = text(&cli(&["query", "-e", LOOKUP, &loc, "--explain"]));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("query\n  materialize") && out.contains("FilteredReadExec: table=node:Person"), "{out}");
    assert!(out.contains("index=id_btree coverage=1.000") && !out.contains(" rows="), "{out}");
    assert!(!out.contains(&loc), "a plan never shows a storage path: {out}");
    let (out, code) = text(&cli(&["query", "-e", LOOKUP, &loc, "--profile"]));
    assert_eq!(code, Some(0), "{out}");
    let (rows, plan) = out.split_once("\n\nquery\n").unwrap_or_else(|| panic!("rows, then the plan: {out}"));
    assert!(rows.contains("p.age") && rows.contains("(1 row"), "{out}");
    assert!(plan.contains(" rows=1") && plan.contains("time="), "{out}");
    let o = cli(&["query", "-e", LOOKUP, &loc, "--profile", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o).0));
    assert_eq!((v["row_count"].as_u64(), v["plan"]["op"].as_str()), (Some(1), Some("query")), "{v}");
    let both = cli(&["query", "-e", LOOKUP, &loc, "--explain", "--profile"]);
    assert_eq!(both.status.code(), Some(2), "{}", String::from_utf8_lossy(&both.stderr));
    let elsewhere = cli(&["branch", "list", &loc, "--profile"]);
    assert_eq!(elsewhere.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&elsewhere.stderr).contains("a bare --profile profiles a `query`"));

    let s = crate::server::spawn(dir, loc, &[], &[]);
    let (st, v) = crate::server::post(&s, "/graphs/g/query", json!({"query": LOOKUP, "explain": true})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!((v["explain"].as_bool(), v["row_count"].as_u64()), (Some(true), Some(0)), "{v}");
    let plan: PlanNode = serde_json::from_value(v["plan"].clone()).expect("a plan tree");
    assert_eq!(outline(&plan), "query(materialize(FilteredReadExec(ScalarIndexExec)),result(SortExec))");
    let (st, v) = crate::server::post(&s, "/graphs/g/query", json!({"query": TWO_HOPS, "profile": true})).await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["rows"], json!([{"c.name": "p4"}]), "{v}");
    assert!(v.get("explain").is_none(), "{v}");
    let plan: PlanNode = serde_json::from_value(v["plan"].clone()).expect("a plan tree");
    assert_eq!(plan.walk().iter().filter(|n| n.op == "traverse").count(), 2, "{}", plan.render());
    let both = json!({"query": LOOKUP, "explain": true, "profile": true});
    let (st, v) = crate::server::post(&s, "/graphs/g/query", both).await;
    assert_eq!((st, v["code"].as_str()), (400, Some("bad_request")), "{v}");

    // The CLI through the daemon prints what it prints on storage.
    let remote = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["query", "-e", LOOKUP, "--server", &s.base, "--graph", "g", "--explain"])
        .env("OMNIGRAPH_BEARER_TOKEN", crate::server::TOKEN)
        .env("OMNIGRAPH_HOME", s._dir.path().join("home"))
        .output()
        .expect("run omnigraph");
    let out = String::from_utf8_lossy(&remote.stdout);
    assert_eq!(remote.status.code(), Some(0), "{out}{}", String::from_utf8_lossy(&remote.stderr));
    assert!(out.starts_with("query\n  materialize") && out.contains("index=id_btree"), "{out}");
}
