//! JSONL parser tests: every fixture file loads (parse → validate → Arrow),
//! one failing case per parser rule, id derivation, and a no-panic property.

use super::jsonl::{DuplicateIds, JsonlParser, LoadRecord, parse_strict_json};
use crate::lang::catalog::{Catalog, TypeDef, compile_schema};
use crate::protocol::OmniError;
use crate::rows::{from_batch, to_batch_for};
use crate::validate::Validator;
use proptest::prelude::*;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The shared fixtures folder, or `None` (tests then skip with a notice).
fn fixtures_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("OMNIGRAPH_SHARED_FIXTURES").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")),
        Some(PathBuf::from("/work/shared/fixtures")),
    ];
    candidates.into_iter().flatten().find(|d| d.is_dir())
}

/// (schema path, data path) for every fixture data file.
fn fixture_pairs(dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut pairs = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("basic")) {
        for path in entries.flatten().map(|e| e.path()) {
            if path.extension().is_some_and(|e| e == "jsonl") {
                pairs.push((path.with_extension("pg"), path));
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(dir.join("cookbooks")) {
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
            if path.join("seed.jsonl").is_file() {
                pairs.push((path.join("schema.pg"), path.join("seed.jsonl")));
            }
        }
    }
    pairs.sort();
    pairs
}

#[test]
fn every_fixture_file_parses_validates_and_converts() {
    let Some(dir) = fixtures_dir() else {
        println!("NOTICE: shared fixtures not found; skipping fixture load test");
        return;
    };
    let pairs = fixture_pairs(&dir);
    assert!(pairs.len() >= 7, "expected the basic and cookbook fixtures, found {pairs:?}");
    for (schema_path, data_path) in pairs {
        let src = std::fs::read_to_string(&schema_path).expect("read schema");
        let catalog = compile_schema(&src).unwrap_or_else(|d| panic!("{}: {d:?}", schema_path.display()));
        let text = std::fs::read_to_string(&data_path).expect("read data");
        let mut parser = JsonlParser::new(&catalog);
        let mut by_type: BTreeMap<String, Vec<_>> = BTreeMap::new();
        let records: Vec<LoadRecord> = parser
            .parse_reader(text.as_bytes())
            .map(|r| r.unwrap_or_else(|e| panic!("{}: {e}", data_path.display())))
            .collect();
        let nonblank = text.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(records.len(), nonblank, "{}", data_path.display());
        for record in records {
            by_type.entry(record.type_name().to_string()).or_default().push(record.into_row());
        }
        let mut counted = 0;
        for (type_name, rows) in &by_type {
            let def = catalog.type_def(type_name).expect("known type");
            let validator = Validator::for_type(def).expect("validator");
            validator.validate(rows).unwrap_or_else(|e| panic!("{}: {e}", data_path.display()));
            let schema = match def {
                TypeDef::Node(n) => n.arrow_schema(),
                TypeDef::Edge(e) => e.arrow_schema(),
            };
            let batch =
                to_batch_for(type_name, &schema, rows).unwrap_or_else(|e| panic!("{}: {e}", data_path.display()));
            assert_eq!(batch.num_rows(), rows.len());
            let back = from_batch(&batch);
            assert_eq!(back.len(), rows.len());
            for (a, b) in rows.iter().zip(&back) {
                assert_eq!((&a.id, &a.src, &a.dst), (&b.id, &b.src, &b.dst));
            }
            counted += rows.len();
            println!("{}: {type_name}: {} rows", data_path.display(), rows.len());
        }
        assert_eq!(counted, nonblank);
    }
}

#[test]
fn fixture_test_jsonl_counts() {
    let Some(dir) = fixtures_dir() else {
        println!("NOTICE: shared fixtures not found; skipping");
        return;
    };
    let catalog =
        compile_schema(&std::fs::read_to_string(dir.join("basic/test.pg")).expect("schema")).expect("compile");
    let text = std::fs::read_to_string(dir.join("basic/test.jsonl")).expect("data");
    let mut parser = JsonlParser::new(&catalog);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for record in parser.parse_reader(text.as_bytes()) {
        *counts.entry(record.expect("valid").type_name().to_string()).or_default() += 1;
    }
    let expected_lines = text.lines().filter(|l| !l.trim().is_empty()).count();
    assert_eq!(counts.values().sum::<usize>(), expected_lines);
    assert!(counts.contains_key("Person") && counts.contains_key("Knows"), "{counts:?}");
}

const SCHEMA: &str = r#"
node Person {
    name: String @key
    age: I32?
    born: Date?
    seen: DateTime?
    avatar: Blob?
    tags: [String]?
    src: String?
}
node Pair {
    a: String
    b: I64
    note: String?
    @key(a, b)
}
node Memo {
    text: String
}
edge Knows: Person -> Person {
    since: Date?
}
edge WorksWith: Person -> Person
"#;

fn catalog() -> Catalog {
    compile_schema(SCHEMA).expect("schema compiles")
}

fn parse(line: &str) -> Result<Option<LoadRecord>, OmniError> {
    let catalog = catalog();
    let mut parser = JsonlParser::new(&catalog);
    parser.parse_line(7, line)
}

#[track_caller]
fn assert_bad(line: &str, needles: &[&str]) {
    match parse(line) {
        Err(OmniError::BadRequest(msg)) => {
            assert!(msg.starts_with("line 7: "), "{msg}");
            for needle in needles {
                assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
            }
        }
        other => panic!("expected BadRequest for {line}, got {other:?}"),
    }
}

#[test]
fn node_line_with_keyed_id() {
    let rec = parse(r#"{"type":"Person","data":{"name":"Alice","age":30}}"#).unwrap().unwrap();
    let LoadRecord::Node { type_name, id, row, minted } = rec else { panic!("node expected") };
    assert_eq!((type_name.as_str(), id.as_str(), row.id.as_str()), ("Person", "Alice", "Alice"));
    assert!(!minted, "a key-derived id is not minted");
    assert_eq!(row.props.get("age"), Some(&json!(30)));
    assert!(row.src.is_none() && row.dst.is_none());
    // A node property may be called `src`.
    assert!(parse(r#"{"type":"Person","data":{"name":"A","src":"x"}}"#).is_ok());
}

#[test]
fn blank_lines_are_skipped() {
    assert_eq!(parse("").unwrap(), None);
    assert_eq!(parse("   \t ").unwrap(), None);
}

#[test]
fn data_is_optional_for_unkeyed_and_edges() {
    let rec = parse(r#"{"type":"Memo"}"#).unwrap().unwrap();
    assert_eq!(rec.row().id.len(), 26, "ULID generated");
    let rec = parse(r#"{"edge":"Knows","from":"a","to":"b"}"#).unwrap().unwrap();
    assert_eq!(rec.row().id.len(), 26);
}

#[test]
fn composite_and_single_key_ids() {
    let rec = parse(r#"{"type":"Pair","data":{"b":2,"a":"x"}}"#).unwrap().unwrap();
    assert_eq!(rec.row().id, r#"["x","2"]"#);
    let rec = parse(r#"{"type":"Pair","data":{"id":"[\"x\",\"2\"]","a":"x","b":2}}"#).unwrap().unwrap();
    assert_eq!(rec.row().id, r#"["x","2"]"#);
    let rec = parse(r#"{"type":"Person","data":{"id":"Bob","name":"Bob"}}"#).unwrap().unwrap();
    assert_eq!(rec.row().id, "Bob");
}

#[test]
fn id_mismatch_is_refused() {
    assert_bad(
        r#"{"type":"Person","data":{"id":"Robert","name":"Bob"}}"#,
        &["type `Person`", "`data.id` `Robert`", "derived", "`Bob`"],
    );
    assert_bad(r#"{"type":"Pair","data":{"id":"x","a":"x","b":2}}"#, &["Pair", r#"["x","2"]"#]);
}

#[test]
fn missing_or_null_key_property() {
    assert_bad(r#"{"type":"Person","data":{"age":3}}"#, &["type `Person`", "missing key property `name`"]);
    assert_bad(r#"{"type":"Pair","data":{"a":"x"}}"#, &["missing key property `b`"]);
    assert_bad(r#"{"type":"Person","data":{"name":null}}"#, &["key property `name` cannot be null"]);
}

#[test]
fn unkeyed_node_keeps_given_id() {
    let rec = parse(r#"{"type":"Memo","data":{"id":"m1","text":"hi"}}"#).unwrap().unwrap();
    assert_eq!(rec.row().id, "m1");
}

#[test]
fn id_must_be_a_string() {
    assert_bad(r#"{"type":"Memo","data":{"id":1,"text":"hi"}}"#, &["`data.id` must be a string"]);
    assert_bad(r#"{"type":"Memo","data":{"id":"","text":"hi"}}"#, &["`data.id` must be a non-empty string"]);
}

#[test]
fn exactly_one_of_type_or_edge() {
    assert_bad(r#"{"type":"Memo","edge":"Knows"}"#, &["exactly one of `type` or `edge`", "not both"]);
    assert_bad(r#"{"data":{}}"#, &["exactly one of `type`"]);
}

#[test]
fn unexpected_top_level_keys() {
    assert_bad(r#"{"type":"Memo","from":"a"}"#, &["unexpected top-level key `from`", "node line"]);
    assert_bad(r#"{"edge":"Knows","from":"a","to":"b","type2":1}"#, &["unexpected top-level key `type2`", "edge line"]);
    assert_bad(r#"{"type":"Memo","_rowid":1}"#, &["unexpected top-level key `_rowid`"]);
}

#[test]
fn unknown_types() {
    assert_bad(r#"{"type":"Nobody"}"#, &["unknown node type `Nobody`"]);
    assert_bad(r#"{"type":"Knows"}"#, &["unknown node type `Knows`", "edge type"]);
    assert_bad(r#"{"edge":"Likes","from":"a","to":"b"}"#, &["unknown edge type `Likes`"]);
    assert_bad(r#"{"edge":"Person","from":"a","to":"b"}"#, &["unknown edge type `Person`", "node type"]);
    assert_bad(r#"{"type":3}"#, &["`type` must be a string"]);
}

#[test]
fn edge_names_match_case_insensitively() {
    let rec = parse(r#"{"edge":"worksWITH","from":"a","to":"b"}"#).unwrap().unwrap();
    let LoadRecord::Edge { edge_name, row, minted } = rec else { panic!("edge expected") };
    assert_eq!(edge_name, "WorksWith");
    assert!(minted, "an edge without data.id gets a minted id");
    assert_eq!((row.src.as_deref(), row.dst.as_deref()), (Some("a"), Some("b")));
}

#[test]
fn edge_endpoints_required_strings() {
    assert_bad(r#"{"edge":"Knows","to":"b"}"#, &["edge `Knows`", "missing required `from`"]);
    assert_bad(r#"{"edge":"Knows","from":"a"}"#, &["missing required `to`"]);
    assert_bad(r#"{"edge":"Knows","from":1,"to":"b"}"#, &["`from` must be a node id string"]);
    assert_bad(r#"{"edge":"Knows","from":"","to":"b"}"#, &["`from` must be a non-empty node id"]);
}

#[test]
fn edge_with_props_and_id() {
    let rec =
        parse(r#"{"edge":"Knows","from":"a","to":"b","data":{"id":"k1","since":"2020-01-01"}}"#).unwrap().unwrap();
    assert_eq!(rec.row().id, "k1");
    assert_eq!(rec.row().props.get("since"), Some(&json!("2020-01-01")));
}

#[test]
fn reserved_keys_in_data() {
    assert_bad(r#"{"edge":"Knows","from":"a","to":"b","data":{"src":"a"}}"#, &["`data.src` is reserved", "`from`"]);
    assert_bad(r#"{"edge":"Knows","from":"a","to":"b","data":{"dst":"a"}}"#, &["`data.dst` is reserved", "`to`"]);
    assert_bad(r#"{"type":"Memo","data":{"text":"x","_tombstone":true}}"#, &["`data._tombstone` is a reserved"]);
    assert_bad(r#"{"type":"Memo","data":{"text":"x","_rowaddr":1}}"#, &["`data._rowaddr` is a reserved"]);
}

#[test]
fn unknown_property() {
    assert_bad(r#"{"type":"Person","data":{"name":"A","height":3}}"#, &["unknown property `height`", "`Person`"]);
    assert_bad(r#"{"edge":"Knows","from":"a","to":"b","data":{"weight":1}}"#, &["unknown property `weight`", "Knows"]);
}

#[test]
fn data_must_be_an_object() {
    assert_bad(r#"{"type":"Memo","data":[1]}"#, &["`data` must be a JSON object"]);
}

#[test]
fn duplicate_members_anywhere() {
    assert_bad(r#"{"type":"Memo","type":"Memo"}"#, &["duplicate JSON member `type`"]);
    assert_bad(r#"{"type":"Memo","data":{"text":"a","text":"b"}}"#, &["duplicate JSON member `text`"]);
    assert_bad(r#"{"type":"Person","data":{"name":"a","tags":[{"x":1,"x":2}]}}"#, &["duplicate JSON member `x`"]);
    assert!(parse_strict_json(r#"{"a":{"b":1},"c":{"b":2}}"#).is_ok(), "same key in sibling objects is fine");
}

#[test]
fn invalid_json_and_non_objects() {
    assert_bad(r#"{"type":"Memo""#, &["invalid JSON"]);
    assert_bad(r#"{"type":"Memo"} {}"#, &["invalid JSON"]);
    assert_bad("[1,2]", &["expected a JSON object"]);
}

#[test]
fn value_types_are_checked_with_line_numbers() {
    assert_bad(r#"{"type":"Person","data":{"name":"A","age":"x"}}"#, &["type `Person`", "property `age`", "I32"]);
    assert_bad(r#"{"type":"Person","data":{"name":"A","age":3000000000}}"#, &["property `age`", "I32"]);
    assert_bad(r#"{"type":"Person","data":{"name":"A","born":"2024-13-01"}}"#, &["property `born`", "Date"]);
    assert_bad(r#"{"type":"Person","data":{"name":"A","avatar":"s3://x"}}"#, &["property `avatar`", "external blob"]);
    assert_bad(r#"{"type":"Person","data":{"name":"A","tags":["a",1]}}"#, &["property `tags`", "element 1"]);
}

#[test]
fn duplicate_ids_within_one_load() {
    let catalog = catalog();
    let mut parser = JsonlParser::new(&catalog);
    parser.parse_line(1, r#"{"type":"Person","data":{"name":"A"}}"#).unwrap();
    parser.parse_line(2, r#"{"type":"Memo","data":{"id":"A","text":"t"}}"#).unwrap();
    let err = parser.parse_line(5, r#"{"type":"Person","data":{"name":"A","age":1}}"#).unwrap_err();
    assert_eq!(err.to_string(), "bad request: line 5: duplicate id `A` for type Person (first seen on line 1)");
    assert_eq!(parser.seen_ids().count("Person"), 1);

    let mut dup = DuplicateIds::new();
    dup.check(3, "Knows", "k").unwrap();
    let err = dup.check(9, "Knows", "k").unwrap_err();
    assert!(err.to_string().contains("line 9: duplicate id `k` for type Knows (first seen on line 3)"), "{err}");
}

#[test]
fn minted_ids_are_counted_not_kept() {
    let catalog = catalog();
    let mut parser = JsonlParser::new(&catalog);
    let memo = parser.parse_line(1, r#"{"type":"Memo","data":{"text":"a"}}"#).unwrap().unwrap();
    assert!(memo.minted(), "an unkeyed node without data.id gets a minted id");
    let given = parser.parse_line(2, r#"{"type":"Memo","data":{"id":"m1","text":"b"}}"#).unwrap().unwrap();
    assert!(!given.minted());
    assert!(parser.parse_line(3, r#"{"edge":"Knows","from":"a","to":"b"}"#).unwrap().unwrap().minted());
    let edge = parser.parse_line(4, r#"{"edge":"Knows","from":"a","to":"b","data":{"id":"k1"}}"#).unwrap().unwrap();
    assert!(!edge.minted());
    assert_eq!((parser.seen_ids().count("Memo"), parser.seen_ids().count("Knows")), (2, 2));
    let mut seen = parser.into_seen_ids();
    assert_eq!(seen.take("Memo").keys().collect::<Vec<_>>(), vec!["m1"]);
    assert_eq!(seen.take("Knows").keys().collect::<Vec<_>>(), vec!["k1"]);
}

#[test]
fn reader_numbers_lines_and_reports_errors() {
    let catalog = catalog();
    let mut parser = JsonlParser::new(&catalog);
    let text = "{\"type\":\"Memo\",\"data\":{\"text\":\"a\"}}\n\n{\"type\":\"Nope\"}\r\n{\"edge\":\"Knows\",\"from\":\"a\",\"to\":\"b\"}";
    let results: Vec<_> = parser.parse_reader(text.as_bytes()).collect();
    assert_eq!(results.len(), 3);
    assert!(results[0].is_ok() && results[2].is_ok());
    let err = results[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("line 3: unknown node type `Nope`"), "{err}");

    let bytes: &[u8] = b"{\"type\":\"Memo\",\"data\":{\"text\":\"\xff\"}}\n";
    let results: Vec<_> = parser.parse_reader(bytes).collect();
    assert!(results[0].as_ref().unwrap_err().to_string().contains("line 1: is not valid UTF-8"));
}

#[test]
fn line_length_limit() {
    let catalog = catalog();
    let mut parser = JsonlParser::new(&catalog).with_max_line_bytes(10);
    let err = parser.parse_line(1, r#"{"type":"Memo","data":{"text":"long"}}"#).unwrap_err();
    assert!(matches!(err, OmniError::ResourceLimitExceeded { limit: 10, .. }), "{err:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_lines_never_panic(line in ".{0,200}") {
        let catalog = catalog();
        let mut parser = JsonlParser::new(&catalog);
        let _ = parser.parse_line(1, &line);
    }

    #[test]
    fn json_shaped_lines_never_panic(
        kind in prop::sample::select(vec!["type", "edge", "data", "from"]),
        name in prop::sample::select(vec!["Person", "Pair", "Memo", "knows", "X"]),
        key in prop::sample::select(vec!["name", "age", "a", "b", "id", "tags", "born", "seen", "avatar", "src"]),
        value in prop::sample::select(vec![
            "1", "-1", "1.5", "1e300", "\"x\"", "null", "true", "[1,\"a\"]", "{}", "\"2024-01-01\"", "\"base64:!!\"",
            "18446744073709551616", "[null]",
        ]),
    ) {
        let catalog = catalog();
        let mut parser = JsonlParser::new(&catalog);
        let line = format!(r#"{{"{kind}":"{name}","from":"a","to":"b","data":{{"{key}":{value}}}}}"#);
        if let Ok(Some(record)) = parser.parse_line(1, &line) {
            let def = catalog.type_def(record.type_name()).expect("type");
            let rows = vec![record.into_row()];
            let _ = Validator::for_type(def).map(|v| v.validate(&rows));
        }
    }
}

/// Each result as comparable data (generated ids aside, every line here
/// gives its id).
fn summary(results: Vec<Result<(usize, LoadRecord), OmniError>>) -> Vec<Result<(usize, String, String), String>> {
    results
        .into_iter()
        .map(|r| r.map(|(n, rec)| (n, rec.type_name().to_string(), rec.row().id.clone())).map_err(|e| e.to_string()))
        .collect()
}

#[test]
fn the_parallel_reader_yields_what_the_sequential_one_does_across_chunks() {
    use super::jsonl::PARALLEL_LINES;
    let catalog = catalog();
    let mut text: Vec<u8> = Vec::new();
    let mut persons = std::collections::HashSet::new();
    for i in 0..(2 * PARALLEL_LINES + 17) {
        let line = match i % 7 {
            0 => String::new(),
            1 => format!(r#"{{"edge":"Knows","from":"p{i}","to":"p0","data":{{"id":"k{i}"}}}}"#),
            2 if i % 1000 == 2 => r#"{"type":"Nope"}"#.to_string(),
            _ => {
                persons.insert(i % 3000);
                format!(r#"{{"type":"Person","data":{{"name":"p{}"}}}}"#, i % 3000)
            }
        };
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
    }
    text.extend_from_slice(b"{\"type\":\"Memo\",\"data\":{\"id\":\"m\",\"text\":\"\xff\"}}\n");
    text.extend_from_slice(br#"{"type":"Memo","data":{"id":"m2","text":"after"}}"#);
    let sequential = summary(JsonlParser::new(&catalog).parse_reader_numbered(text.as_slice()).collect());
    let mut parser = JsonlParser::new(&catalog);
    let parallel = summary(parser.parse_reader_parallel(text.as_slice()).collect());
    assert_eq!(parallel.len(), sequential.len());
    let first_difference = parallel.iter().zip(&sequential).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "the readers differ");
    // Duplicates (ids repeat every 3,000 lines), unknown types and the bad UTF-8 line are all there.
    let errors: Vec<&String> = parallel.iter().filter_map(|r| r.as_ref().err()).collect();
    let count = |needle: &str| errors.iter().filter(|e| e.contains(needle)).count();
    assert!(count("duplicate id `p") > 1000, "{} duplicates", count("duplicate id"));
    assert_eq!(count("unknown node type `Nope`"), 2);
    assert!(errors.last().is_some_and(|e| e.contains("is not valid UTF-8")), "{:?}", errors.last());
    assert_eq!(parallel.last().and_then(|r| r.as_ref().ok()).map(|r| r.2.as_str()), Some("m2"));
    assert_eq!(parser.seen_ids().count("Person"), persons.len());
}
