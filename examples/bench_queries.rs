//! Query latency benchmark: `cargo run --release --example bench_queries -- --bench [--only NAME]`.
//!
//! Prints one JSON object per figure: the p50 latency of every cookbook read
//! query (when the shared fixtures are present); of a 2-hop and a `{1,6}`
//! traversal on a generated graph of 1M nodes / 5M edges, beside the
//! raw-Lance floor measured in the same run (a projected scan of the edge
//! table, the least work a traversal over it must do); of `{1,100}` and
//! `{1,1000}` on a 4-person cycle; and of an equality lookup on a
//! 1,000,000-row table before and after its BTree index is built, beside a
//! raw-Lance filtered scan of the indexed table, then after 100,000 more rows
//! are appended (an unindexed tail) before and after `optimize` folds them
//! into the index; and of a `bm25` top-10 over
//! 100,000 documents beside Lance's own full-text search of the same index.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use omnigraph::engine::lang::query::parse_queries;
use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::{Graph, LoadMode, Omnigraph, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

const NODES: usize = 1_000_000;
const EDGES: usize = 5_000_000;
const RUNS: usize = 15;

fn p50(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples.get(samples.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

async fn time_query(g: &Graph, src: &str, name: &str, params: &Map<String, Value>) -> Option<f64> {
    let mut samples = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let t = Instant::now();
        g.query(src, Some(name), params.clone(), &ReadTarget::default()).await.ok()?;
        samples.push(t.elapsed());
    }
    Some(p50(samples))
}

async fn cookbooks() {
    let fixtures = std::env::var_os("OMNIGRAPH_SHARED_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    let params_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cookbook_params");
    for name in ["industry-intel", "pharma-intel", "second-brain"] {
        let dir = fixtures.join("cookbooks").join(name);
        let (Ok(schema), Ok(seed), Ok(spec)) = (
            std::fs::read_to_string(dir.join("schema.pg")),
            std::fs::read_to_string(dir.join("seed.jsonl")),
            std::fs::read_to_string(params_dir.join(format!("{name}.json"))),
        ) else {
            eprintln!("cookbook {name} not found; skipping");
            continue;
        };
        let spec: Value = serde_json::from_str(&spec).unwrap_or_default();
        let tmp = tempfile::tempdir().expect("tempdir");
        let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), &schema).await.expect("init");
        g.load(seed.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("seed");
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(dir.join("queries")).into_iter().flatten().flatten().map(|e| e.path()).collect();
        files.sort();
        for file in files {
            let src = std::fs::read_to_string(&file).unwrap_or_default();
            for q in parse_queries(&src).unwrap_or_default().iter().filter(|q| !q.is_mutation()) {
                let params = spec["queries"][&q.name]["params"].as_object().cloned().unwrap_or_default();
                if let Some(ms) = time_query(&g, &src, &q.name, &params).await {
                    println!("{}", json!({"bench": "cookbook_query", "cookbook": name, "query": q.name, "p50_ms": ms}));
                }
            }
        }
    }
}

async fn two_hop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let schema = "node Person { name: String @key }\nedge Knows: Person -> Person\n";
    let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), schema).await.expect("init");
    let mut data = String::with_capacity(NODES * 48 + EDGES * 56);
    for i in 0..NODES {
        data.push_str(&format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"p{i}\"}}}}\n"));
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..EDGES {
        // xorshift: a deterministic pseudo-random graph without a rand dependency.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (a, b) = (x % NODES as u64, (x >> 32) % NODES as u64);
        data.push_str(&format!("{{\"edge\":\"Knows\",\"from\":\"p{a}\",\"to\":\"p{b}\"}}\n"));
    }
    let t = Instant::now();
    g.load(data.as_bytes(), LoadMode::Append, &WriteOptions::default()).await.expect("load");
    let load_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    g.ensure_indices("main", None).await.expect("ensure indices");
    let index_ms = t.elapsed().as_secs_f64() * 1000.0;
    println!(
        "{}",
        json!({"bench": "generate_graph", "nodes": NODES, "edges": EDGES, "load_ms": load_ms, "index_build_ms": index_ms})
    );

    let fof =
        "query q($n: String) { match { $p: Person { name: $n } $p knows $f $f knows $g } return { count($g) as n } }";
    let deep = "query q($n: String) { match { $p: Person { name: $n } $p knows{1,6} $f } return { count($f) as n } }";
    let (hop_ms, deep_ms) = (from_people(&g, fof).await, from_people(&g, deep).await);

    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let knows = &view.state.tables["edge:Knows"];
    let mut floor = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let ds =
            table::open_table(&g.root().child_uri(&knows.location), None, Some(knows.version)).await.expect("open");
        table::scan_columns(&ds, &["src", "dst"]).await.expect("scan");
        floor.push(t.elapsed());
    }
    let floor_ms = p50(floor);
    println!(
        "{}",
        json!({"bench": "two_hop", "nodes": NODES, "edges": EDGES, "p50_ms": hop_ms,
               "raw_lance_edge_scan_p50_ms": floor_ms, "ratio": hop_ms / floor_ms.max(1e-9)})
    );
    println!(
        "{}",
        json!({"bench": "hops_1_6", "nodes": NODES, "edges": EDGES, "p50_ms": deep_ms,
               "raw_lance_edge_scan_p50_ms": floor_ms, "ratio": deep_ms / floor_ms.max(1e-9)})
    );
}

/// p50 of `src` (one `$n: String` parameter) from RUNS spread-out people.
async fn from_people(g: &Graph, src: &str) -> f64 {
    let mut samples = Vec::new();
    for i in 0..RUNS {
        let params = json!({"n": format!("p{}", i * 997 % NODES)}).as_object().cloned().unwrap_or_default();
        let t = Instant::now();
        g.query(src, None, params, &ReadTarget::default()).await.expect("traversal");
        samples.push(t.elapsed());
    }
    p50(samples)
}

/// `{1,100}` and `{1,1000}` from every person of a 4-person cycle.
async fn deep_cycle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let schema = "node Person { name: String @key }\nedge Knows: Person -> Person\n";
    let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), schema).await.expect("init");
    let names = ["a", "b", "c", "d"];
    let mut data = String::new();
    for (i, n) in names.iter().enumerate() {
        data.push_str(&format!("{{\"type\":\"Person\",\"data\":{{\"name\":\"{n}\"}}}}\n"));
        let next = names[(i + 1) % names.len()];
        data.push_str(&format!("{{\"edge\":\"Knows\",\"from\":\"{n}\",\"to\":\"{next}\"}}\n"));
    }
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    for max in [100, 1000] {
        let src = format!("query q() {{ match {{ $p: Person $p knows{{1,{max}}} $f }} return {{ $f.name }} }}");
        let ms = time_query(&g, &src, "q", &Map::new()).await.unwrap_or(f64::NAN);
        println!("{}", json!({"bench": "cycle_hops", "persons": 4, "bounds": format!("{{1,{max}}}"), "p50_ms": ms}));
    }
}

/// Rows of the lookup table.
const LOOKUP_ROWS: usize = 1_000_000;

/// Equality lookups on an `@index` integer and on the String `@key`, before
/// and after `index ensure` builds their BTrees.
async fn indexed_lookup() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let schema = "node Item { name: String @key\n n: I64 @index }\n";
    let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), schema).await.expect("init");
    let mut data = String::with_capacity(LOOKUP_ROWS * 48);
    for i in 0..LOOKUP_ROWS {
        data.push_str(&format!("{{\"type\":\"Item\",\"data\":{{\"name\":\"i{i}\",\"n\":{}}}}}\n", i * 7));
    }
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    drop(data);
    let by_n = "query q($v: I64) { match { $i: Item { n: $v } } return { $i.name } }";
    let by_key = "query q($v: String) { match { $i: Item { name: $v } } return { $i.n } }";
    let lookup = |g: Graph, src: &'static str, rows: usize| async move {
        let mut samples = Vec::with_capacity(RUNS);
        for r in 0..RUNS {
            let i = r * 65_537 % rows;
            let v = if src == by_key { json!(format!("i{i}")) } else { json!(i * 7) };
            let params = json!({"v": v}).as_object().cloned().unwrap_or_default();
            let t = Instant::now();
            let out = g.query_json(src, None, params, &ReadTarget::default()).await.expect("lookup");
            samples.push(t.elapsed());
            assert_eq!(out["row_count"], 1, "one row holds {v}");
        }
        p50(samples)
    };
    let (scan_ms, key_scan_ms) =
        (lookup(g.clone(), by_n, LOOKUP_ROWS).await, lookup(g.clone(), by_key, LOOKUP_ROWS).await);
    let t = Instant::now();
    g.ensure_indices("main", None).await.expect("ensure indices");
    let build_ms = t.elapsed().as_secs_f64() * 1000.0;
    let (indexed_ms, key_indexed_ms) =
        (lookup(g.clone(), by_n, LOOKUP_ROWS).await, lookup(g.clone(), by_key, LOOKUP_ROWS).await);
    let floor_ms = raw_lance_lookup(&g, LOOKUP_ROWS).await;
    println!(
        "{}",
        json!({"bench": "indexed_equality", "rows": LOOKUP_ROWS, "unindexed_p50_ms": scan_ms,
               "indexed_p50_ms": indexed_ms, "speedup": scan_ms / indexed_ms.max(1e-9),
               "index_build_ms": build_ms, "raw_lance_indexed_p50_ms": floor_ms,
               "ratio_to_floor": indexed_ms / floor_ms.max(1e-9)})
    );
    println!(
        "{}",
        json!({"bench": "indexed_key_equality", "rows": LOOKUP_ROWS, "unindexed_p50_ms": key_scan_ms,
               "indexed_p50_ms": key_indexed_ms, "speedup": key_scan_ms / key_indexed_ms.max(1e-9)})
    );

    // 100,000 rows appended since the build, in 10 commits: the tail the
    // index does not cover until `optimize` folds it in.
    for c in 0..TAIL_COMMITS {
        let from = LOOKUP_ROWS + c * TAIL_ROWS / TAIL_COMMITS;
        let rows = (from..from + TAIL_ROWS / TAIL_COMMITS)
            .map(|i| format!("{{\"type\":\"Item\",\"data\":{{\"name\":\"i{i}\",\"n\":{}}}}}\n", i * 7));
        let data: String = rows.collect();
        g.load(data.as_bytes(), LoadMode::Append, &WriteOptions::default()).await.expect("append");
    }
    let total = LOOKUP_ROWS + TAIL_ROWS;
    let coverage = |s: &omnigraph::IndexStatus| s.tables[0].indexes.iter().map(|i| i.coverage).fold(1.0, f64::min);
    let before_cov = coverage(&g.index_status("main").await.expect("status"));
    let (tail_ms, key_tail_ms) = (lookup(g.clone(), by_n, total).await, lookup(g.clone(), by_key, total).await);
    let t = Instant::now();
    g.ensure_indices("main", None).await.expect("fold");
    let fold_ms = t.elapsed().as_secs_f64() * 1000.0;
    let t = Instant::now();
    g.optimize("main", None).await.expect("optimize");
    let optimize_ms = t.elapsed().as_secs_f64() * 1000.0;
    let after_cov = coverage(&g.index_status("main").await.expect("status"));
    let (folded_ms, key_folded_ms) = (lookup(g.clone(), by_n, total).await, lookup(g.clone(), by_key, total).await);
    let floor_ms = raw_lance_lookup(&g, total).await;
    println!(
        "{}",
        json!({"bench": "indexed_equality_after_appends", "rows": total, "appended_since_build": TAIL_ROWS,
               "min_coverage_before": before_cov, "p50_ms_before_optimize": tail_ms,
               "key_p50_ms_before_optimize": key_tail_ms, "fold_ms": fold_ms, "optimize_ms": optimize_ms,
               "min_coverage_after": after_cov, "p50_ms_after_optimize": folded_ms,
               "key_p50_ms_after_optimize": key_folded_ms, "raw_lance_indexed_p50_ms": floor_ms,
               "ratio_to_floor_before": tail_ms / floor_ms.max(1e-9),
               "ratio_to_floor_after": folded_ms / floor_ms.max(1e-9)})
    );
    // What the daemon's background fold costs at its default lag: a
    // 10,000-row tail of the 1.1M-row table folded into its four indexes.
    let from = total;
    let data: String = (from..from + 10_000)
        .map(|i| format!("{{\"type\":\"Item\",\"data\":{{\"name\":\"i{i}\",\"n\":{}}}}}\n", i * 7))
        .collect();
    g.load(data.as_bytes(), LoadMode::Append, &WriteOptions::default()).await.expect("append");
    let t = Instant::now();
    g.ensure_indices("main", None).await.expect("fold");
    let fold_10k_ms = t.elapsed().as_secs_f64() * 1000.0;
    println!(
        "{}",
        json!({"bench": "index_fold_at_default_lag", "rows": total + 10_000, "tail_rows": 10_000, "fold_ms": fold_10k_ms})
    );
}

/// Rows appended after the lookup table's build, and in how many commits.
const TAIL_ROWS: usize = 100_000;
const TAIL_COMMITS: usize = 10;

/// p50 of Lance's own filtered scan (`n = v`, projecting `name`) of the
/// lookup table main pins, over `rows` rows: the floor of an equality lookup.
async fn raw_lance_lookup(g: &Graph, rows: usize) -> f64 {
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let item = &view.state.tables["node:Item"];
    let ds = table::open_table(&g.root().child_uri(&item.location), None, Some(item.version)).await.expect("open");
    let mut floor = Vec::new();
    for r in 0..RUNS {
        let t = Instant::now();
        let mut scan = ds.scan();
        scan.filter(&format!("n = {}", r * 65_537 % rows * 7)).expect("filter");
        scan.project(&["name"]).expect("project");
        let batches: Vec<_> =
            futures::TryStreamExt::try_collect(scan.try_into_stream().await.expect("scan")).await.expect("rows");
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);
        floor.push(t.elapsed());
    }
    p50(floor)
}

/// Documents of the full-text figure.
const DOCS: usize = 100_000;

/// `order { bm25(…) } limit 10` over generated titles, beside Lance's own
/// full-text search (top 10) on the same index in the same run.
async fn bm25_top10() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let schema = "node Doc { slug: String @key\n title: String @index }\n";
    let g = Omnigraph::init(&tmp.path().join("g").to_string_lossy(), schema).await.expect("init");
    let mut x: u64 = 0x1234_5678_9ABC_DEF1;
    let mut word = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        format!("w{}", x % 5_000)
    };
    let mut data = String::with_capacity(DOCS * 96);
    for i in 0..DOCS {
        let title: Vec<String> = (0..8).map(|_| word()).collect();
        data.push_str(&json!({"type": "Doc", "data": {"slug": format!("d{i}"), "title": title.join(" ")}}).to_string());
        data.push('\n');
    }
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    g.ensure_indices("main", None).await.expect("ensure indices");
    let src = "query q($q: String) { match { $d: Doc } return { $d.slug } order { bm25($d.title, $q) } limit 10 }";
    let terms: Vec<String> = (0..RUNS).map(|i| format!("w{} w{}", i * 37 % 5_000, i * 91 % 5_000)).collect();
    let mut samples = Vec::new();
    for t in &terms {
        let params = json!({"q": t}).as_object().cloned().unwrap_or_default();
        let start = Instant::now();
        let out = g.query_json(src, None, params, &ReadTarget::default()).await.expect("bm25");
        samples.push(start.elapsed());
        assert_eq!(out["row_count"], 10, "{t}");
    }
    let ours = p50(samples);
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let doc = &view.state.tables["node:Doc"];
    let ds = table::open_table(&g.root().child_uri(&doc.location), None, Some(doc.version)).await.expect("open");
    let mut floor = Vec::new();
    for t in &terms {
        use lance_index::scalar::FullTextSearchQuery;
        let start = Instant::now();
        let mut scan = ds.scan();
        scan.project(&["slug"]).expect("project");
        let query = FullTextSearchQuery::new(t.clone()).with_column("title".into()).expect("column");
        scan.full_text_search(query.limit(Some(10))).expect("fts");
        let batches: Vec<_> =
            futures::TryStreamExt::try_collect(scan.try_into_stream().await.expect("scan")).await.expect("rows");
        assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10, "{t}");
        floor.push(start.elapsed());
    }
    let floor_ms = p50(floor);
    println!(
        "{}",
        json!({"bench": "bm25_top10", "docs": DOCS, "p50_ms": ours, "raw_lance_fts_top10_p50_ms": floor_ms,
               "ratio": ours / floor_ms.max(1e-9)})
    );
}

fn main() {
    // `cargo test --all-targets` runs bench binaries too; only `--bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        println!("query benchmark: run with `cargo run --example bench_queries -- --bench`");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    // `--only NAME` runs one figure: lookup, cycle, bm25, hops or cookbooks.
    let args: Vec<String> = std::env::args().collect();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let run = |name: &str| only.as_deref().is_none_or(|o| o == name);
    rt.block_on(async {
        if run("lookup") {
            indexed_lookup().await;
        }
        if run("cycle") {
            deep_cycle().await;
        }
        if run("bm25") {
            bm25_top10().await;
        }
        if run("hops") {
            two_hop().await;
        }
        if run("cookbooks") {
            cookbooks().await;
        }
    });
}
