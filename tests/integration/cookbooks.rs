//! Every read query of every cookbook runs against its seed (with the
//! indexes `index ensure` builds); at least five per cookbook return exactly
//! the rows worked out by hand (tests/fixtures/cookbook_params/, see its
//! README). Only queries that need an embedding model are refused.

use std::path::Path;

use omnigraph::engine::lang::query::parse_queries;
use omnigraph::{LoadMode, Omnigraph, ReadTarget, WriteOptions, result_rows};
use serde_json::Value;

use crate::common::{files_with_suffix, shared_fixtures, temp_graph_dir};

/// A cookbook's graph: its schema, its seed loaded, the indexes built.
async fn cookbook_graph(dir: &Path) -> (tempfile::TempDir, omnigraph::Graph) {
    let schema = std::fs::read_to_string(dir.join("schema.pg")).expect("schema");
    let seed = std::fs::read_to_string(dir.join("seed.jsonl")).expect("seed");
    let (tmp, loc) = temp_graph_dir();
    let g = Omnigraph::init(&loc, &schema).await.expect("init");
    g.load(seed.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("seed");
    g.ensure_indices("main", None).await.expect("indexes");
    (tmp, g)
}

/// Embedding-based queries need a model, which the engine does not have:
/// it must refuse them with a typed message.
fn needs_model(message: &str) -> bool {
    message.contains("needs an embedding model")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cookbook_read_query_runs_and_the_worked_examples_match() {
    let Some(fixtures) = shared_fixtures() else { return };
    let params_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/cookbook_params");
    for name in ["industry-intel", "pharma-intel", "second-brain"] {
        let dir = fixtures.join("cookbooks").join(name);
        let spec: Value =
            serde_json::from_str(&std::fs::read_to_string(params_dir.join(format!("{name}.json"))).expect("params"))
                .expect("params json");
        let (_tmp, g) = cookbook_graph(&dir).await;
        let (mut ran, mut exact, mut refused) = (0, 0, 0);
        for file in files_with_suffix(&dir.join("queries"), ".gq") {
            let src = std::fs::read_to_string(&file).expect("gq");
            for q in parse_queries(&src).expect("parse").iter().filter(|q| !q.is_mutation()) {
                let case = &spec["queries"][&q.name];
                let params = case["params"].as_object().cloned().unwrap_or_default();
                let context = format!("{name}/{}: {}", file.file_name().unwrap_or_default().to_string_lossy(), q.name);
                match g.query(&src, Some(&q.name), params, &ReadTarget::default()).await {
                    Ok(r) => {
                        ran += 1;
                        if case["expected"].is_array() {
                            let rows: Vec<Value> = result_rows(&r).into_iter().map(Value::Object).collect();
                            assert_eq!(Value::Array(rows), case["expected"], "{context}");
                            exact += 1;
                        }
                    }
                    Err(e) if needs_model(&e.to_string()) => refused += 1,
                    Err(e) => panic!("{context}: {e}"),
                }
            }
        }
        println!("{name}: {ran} queries ran ({exact} exact), {refused} refused for want of an embedding model");
        assert!(exact >= 5, "{name}: only {exact} exact-result queries");
    }
}

/// Every read query the reference answered in `<cookbook>/expected.jsonl`
/// returns the same rows here, compared as its EXPECTED.md says: in order
/// when the query orders them, else as a multiset; floats to 9 significant
/// digits; date-times as instants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cookbook_read_query_returns_the_reference_rows() {
    let Some(fixtures) = shared_fixtures() else { return };
    let (mut compared, mut differ) = (0, Vec::new());
    for name in ["industry-intel", "pharma-intel", "second-brain"] {
        let dir = fixtures.join("cookbooks").join(name);
        let (_tmp, g) = cookbook_graph(&dir).await;
        let expected = std::fs::read_to_string(dir.join("expected.jsonl")).expect("expected.jsonl");
        for case in expected.lines().map(|l| serde_json::from_str::<Value>(l).expect("expected row")) {
            if case["status"] != "ok" {
                continue;
            }
            let (file, query) = (case["file"].as_str().unwrap_or(""), case["query"].as_str().unwrap_or(""));
            let src = std::fs::read_to_string(dir.join("queries").join(file)).expect("gq");
            let params = case["params"].as_object().cloned().unwrap_or_default();
            let r = g.query(&src, Some(query), params, &ReadTarget::default()).await;
            let got: Vec<Value> = match r {
                Ok(r) => {
                    let columns = r.columns.clone();
                    result_rows(&r)
                        .into_iter()
                        .map(|row| {
                            Value::Array(columns.iter().map(|c| row.get(c).cloned().unwrap_or(Value::Null)).collect())
                        })
                        .collect()
                }
                Err(e) => vec![Value::String(format!("error: {e}"))],
            };
            let want: Vec<Value> = case["rows"].as_array().cloned().unwrap_or_default();
            compared += 1;
            if !same_rows(got.clone(), want.clone(), case["ordered"] == true) {
                differ.push(format!("{name}/{file}: {query}\n  got  {got:?}\n  want {want:?}"));
            }
        }
    }
    println!("{compared} reference answers compared, {} differ", differ.len());
    assert!(compared >= 150, "only {compared} reference answers");
    assert!(differ.is_empty(), "{} of {compared} differ:\n{}", differ.len(), differ.join("\n"));
}

/// Rows equal under EXPECTED.md's rules.
fn same_rows(got: Vec<Value>, want: Vec<Value>, ordered: bool) -> bool {
    let canon = |rows: Vec<Value>| -> Vec<String> {
        let mut out: Vec<String> = rows.into_iter().map(|r| canonical(r).to_string()).collect();
        if !ordered {
            out.sort();
        }
        out
    };
    canon(got) == canon(want)
}

/// A value with floats rounded to 9 significant digits and date-times as
/// instants (nanoseconds since the epoch).
fn canonical(v: Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        Value::Object(m) => Value::Object(m.into_iter().map(|(k, v)| (k, canonical(v))).collect()),
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            Value::String(format!("{f:.8e}"))
        }
        Value::Number(n) => Value::String(format!("{:.8e}", n.as_f64().unwrap_or(f64::NAN))),
        Value::String(s) => match chrono::DateTime::parse_from_rfc3339(&s) {
            Ok(t) => Value::String(format!("instant:{}", t.timestamp_nanos_opt().unwrap_or(i64::MIN))),
            Err(_) => Value::String(s),
        },
        other => other,
    }
}
