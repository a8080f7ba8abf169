//! Text search through the inverted indexes `index ensure` builds: refused
//! (typed) without an index, then `search`, `fuzzy`, `match_text`, `bm25`
//! ordering and `rrf` fusion with `nearest`, at the snapshot's versions
//! (rows written after the build are found too).

use omnigraph::{Graph, OmniError, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

const SCHEMA: &str = r#"
node Doc {
    slug: String @key
    title: String @index
    embedding: Vector(3)?
}
"#;

const DOCS: [&str; 5] = [
    r#"{"type": "Doc", "data": {"slug": "a", "title": "graph databases in rust", "embedding": [1.0, 0.0, 0.0]}}"#,
    r#"{"type": "Doc", "data": {"slug": "b", "title": "a rust tutorial", "embedding": [0.0, 1.0, 0.0]}}"#,
    r#"{"type": "Doc", "data": {"slug": "c", "title": "cooking with graphite", "embedding": [0.0, 0.0, 1.0]}}"#,
    r#"{"type": "Doc", "data": {"slug": "d", "title": "graph theory basics", "embedding": [0.9, 0.1, 0.0]}}"#,
    r#"{"type": "Doc", "data": {"slug": "e", "title": "the rust graph engine for graph people", "embedding": [0.5, 0.5, 0.0]}}"#,
];

async fn slugs(g: &Graph, src: &str, params: Value) -> Result<Vec<String>, OmniError> {
    let params = params.as_object().cloned().unwrap_or_default();
    let out = g.query_json(src, None, params, &ReadTarget::default()).await?;
    Ok(out["rows"].as_array().expect("rows").iter().map(|r| r["d.slug"].as_str().expect("slug").to_string()).collect())
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_search_runs_through_the_built_indexes() {
    let (_dir, g) = crate::common::graph_with(SCHEMA, &DOCS).await;
    let search = "query q($q: String) { match { $d: Doc search($d.title, $q) } return { $d.slug } }";
    let err = slugs(&g, search, json!({"q": "rust"})).await.expect_err("no index yet");
    assert!(err.to_string().contains("requires a full-text index"), "{err}");

    g.ensure_indices("main", None).await.expect("ensure");
    assert_eq!(sorted(slugs(&g, search, json!({"q": "rust"})).await.expect("search")), ["a", "b", "e"]);
    // Any token matches.
    assert_eq!(sorted(slugs(&g, search, json!({"q": "theory cooking"})).await.expect("or")), ["c", "d"]);
    // Fuzzy: `grap` is one edit from `graph`.
    let fuzzy = "query q($q: String) { match { $d: Doc fuzzy($d.title, $q, 1) } return { $d.slug } }";
    assert_eq!(sorted(slugs(&g, fuzzy, json!({"q": "grap"})).await.expect("fuzzy")), ["a", "d", "e"]);
    let exact = slugs(&g, search, json!({"q": "grap"})).await.expect("no fuzz");
    assert!(exact.is_empty(), "{exact:?}");
    // A phrase: the tokens in order.
    let phrase = "query q($q: String) { match { $d: Doc match_text($d.title, $q) } return { $d.slug } }";
    assert_eq!(slugs(&g, phrase, json!({"q": "rust graph"})).await.expect("phrase"), ["e"]);
    // bm25: only matching rows, best first (short titles score higher).
    let bm25 = "query q($q: String) { match { $d: Doc } return { $d.slug } order { bm25($d.title, $q) } limit 2 }";
    let top = slugs(&g, bm25, json!({"q": "graph"})).await.expect("bm25");
    assert_eq!(top.len(), 2);
    assert!(top.iter().all(|s| ["a", "d", "e"].contains(&s.as_str())), "{top:?}");
    let all = "query q($q: String) { match { $d: Doc } return { $d.slug } order { bm25($d.title, $q) } limit 10 }";
    assert_eq!(sorted(slugs(&g, all, json!({"q": "graph"})).await.expect("bm25 all")), ["a", "d", "e"]);
    // rrf: fusion of the vector ranking and the BM25 ranking.
    let rrf = "query q($v: Vector(3), $q: String) { match { $d: Doc } return { $d.slug } \
               order { rrf(nearest($d.embedding, $v), bm25($d.title, $q)) } limit 3 }";
    let fused = slugs(&g, rrf, json!({"v": [1.0, 0.0, 0.0], "q": "graph"})).await.expect("rrf");
    assert_eq!(fused.len(), 3, "{fused:?}");
    assert!(["a", "d"].contains(&fused[0].as_str()), "closest and a graph match first: {fused:?}");
    // Rows written after the build are searched too.
    let add = r#"query q() { insert Doc { slug: "f", title: "rust again" } }"#;
    g.mutate(add, None, Map::new(), &WriteOptions::default()).await.expect("insert");
    assert_eq!(sorted(slugs(&g, search, json!({"q": "rust"})).await.expect("search")), ["a", "b", "e", "f"]);
}

/// `nearest` through the vector index answers what brute force answers:
/// the same graph read at the commit before `index ensure` (no index) and
/// at the head (IVF_FLAT, every partition probed), filtered and not; a
/// node without a vector is never nearer than one with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nearest_through_the_vector_index_matches_brute_force() {
    let schema = "node Item {\n    slug: String @key\n    kind: String?\n    embedding: Vector(4)? @index\n}\n";
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut unit = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % 2001) as f64 / 1000.0 - 1.0
    };
    let lines: Vec<String> = (0..600)
        .map(|i| {
            let embedding = if i % 50 == 7 { Value::Null } else { json!([unit(), unit(), unit(), unit()]) };
            let kind = if i % 3 == 0 { "a" } else { "b" };
            json!({"type": "Item", "data": {"slug": format!("i{i:03}"), "kind": kind, "embedding": embedding}})
                .to_string()
        })
        .collect();
    let refs: Vec<&str> = lines.iter().map(String::as_str).collect();
    let (_dir, g) = crate::common::graph_with(schema, &refs).await;
    let head = |g: &Graph| {
        let g = g.clone();
        async move {
            let q = "query q() { match { $i: Item } return { count($i) as n } }";
            let out = g.query_json(q, None, Map::new(), &ReadTarget::default()).await.expect("count");
            out["graph_commit_id"].as_str().expect("commit").to_string()
        }
    };
    let before = head(&g).await;
    let report = g.ensure_indices("main", None).await.expect("ensure");
    let items = report.tables.iter().find(|t| t.type_key == "node:Item").expect("Item");
    assert!(items.built.contains(&"embedding_vector".to_string()), "{report:?}");
    let after = head(&g).await;
    assert_ne!(before, after);
    let ranked = |at: String, src: &'static str, v: Value| {
        let g = g.clone();
        async move {
            let params = json!({"v": v}).as_object().cloned().unwrap_or_default();
            let out = g.query_json(src, None, params, &ReadTarget::Commit(at)).await.expect("nearest");
            out["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| r["i.slug"].as_str().expect("slug").to_string())
                .collect::<Vec<_>>()
        }
    };
    let all =
        "query q($v: Vector(4)) { match { $i: Item } return { $i.slug } order { nearest($i.embedding, $v) } limit 10 }";
    let some = "query q($v: Vector(4)) { match { $i: Item { kind: \"a\" } } return { $i.slug } order { nearest($i.embedding, $v) } limit 7 }";
    let nulls: Vec<String> = (0..600).filter(|i| i % 50 == 7).map(|i| format!("i{i:03}")).collect();
    for q in [[1.0, 0.0, 0.0, 0.0], [-0.3, 0.2, 0.9, -0.1], [0.5, 0.5, -0.5, 0.5]] {
        for src in [all, some] {
            let brute = ranked(before.clone(), src, json!(q)).await;
            let indexed = ranked(after.clone(), src, json!(q)).await;
            assert_eq!(brute, indexed, "{src} {q:?}");
            assert!(brute.len() >= 7 && brute.iter().all(|s| !nulls.contains(s)), "{brute:?}");
        }
    }
}
