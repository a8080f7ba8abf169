//! Runs every example of docs/queries.md against the example graph and
//! compares the rows the page shows.

use omnigraph::{LoadMode, ReadTarget, WriteOptions, result_rows};
use serde_json::Value;

use crate::common::social_graph;

/// (query source, params, expected rows) for each ```gq block followed by a ```json block.
fn examples(page: &str) -> Vec<(String, Value, Value)> {
    let mut out = Vec::new();
    let blocks: Vec<(&str, String)> = page
        .split("```")
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|c| c.get(1))
        .filter_map(|b| b.split_once('\n').map(|(lang, body)| (lang.trim(), body.to_string())))
        .collect();
    for pair in blocks.windows(2) {
        if let [("gq", src), ("json", expected)] = pair {
            let v: Value = serde_json::from_str(expected).expect("example json");
            let (params, rows) = match v {
                Value::Object(o) => {
                    (o.get("params").cloned().unwrap_or_default(), o.get("rows").cloned().unwrap_or_default())
                }
                rows => (Value::Null, rows),
            };
            out.push((src.clone(), params, rows));
        }
    }
    out
}

#[tokio::test]
async fn every_query_example_in_the_docs_returns_the_rows_shown() {
    let page = include_str!("../../docs/queries.md");
    let cases = examples(page);
    assert!(cases.len() >= 6, "found only {} examples", cases.len());
    let (_dir, g) = social_graph().await;
    let data = include_str!("../../examples/social.jsonl");
    g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    for (src, params, expected) in cases {
        let params = params.as_object().cloned().unwrap_or_default();
        let r = g.query(&src, None, params, &ReadTarget::default()).await.unwrap_or_else(|e| panic!("{src}: {e}"));
        let rows: Vec<Value> = result_rows(&r).into_iter().map(Value::Object).collect();
        assert_eq!(Value::Array(rows), expected, "{src}");
    }
}
