//! Catalog tests: fixtures compile, lowering and desugaring, Arrow shapes,
//! id derivation, identity, id adoption, and no-panic properties.

use super::*;
use arrow_schema::{DataType, TimeUnit};
use proptest::prelude::*;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The shared fixtures folder, or `None` (tests then skip with a notice).
fn fixtures_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("OMNIGRAPH_SHARED_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"));
    dir.is_dir().then_some(dir)
}

fn pg_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            pg_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "pg") {
            out.push(path);
        }
    }
}

/// Every fixture `.pg` text, or empty when fixtures are absent.
fn fixture_sources() -> Vec<(PathBuf, String)> {
    let Some(dir) = fixtures_dir() else {
        return Vec::new();
    };
    let mut files = Vec::new();
    pg_files(&dir, &mut files);
    files.sort();
    files.into_iter().filter_map(|p| std::fs::read_to_string(&p).ok().map(|s| (p, s))).collect()
}

fn compile(src: &str) -> Catalog {
    match compile_schema(src) {
        Ok(c) => c,
        Err(d) => panic!("schema failed to compile: {d}"),
    }
}

const BASIC: &str = r#"
node Person {
    name: String @key
    age: I32?
}
node Company { name: String @key }
edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1)
"#;

#[test]
fn every_fixture_schema_compiles() {
    let sources = fixture_sources();
    if sources.is_empty() {
        eprintln!("skipping: shared fixtures not found (set OMNIGRAPH_SHARED_FIXTURES)");
        return;
    }
    for (path, src) in &sources {
        if let Err(d) = compile_schema(src) {
            panic!("{}: {d}", path.display());
        }
    }
    eprintln!("compiled {} fixture schemas", sources.len());
}

#[test]
fn lowers_basic_schema() {
    let c = compile(BASIC);
    let person = c.node("Person").unwrap();
    assert_eq!(person.key, vec!["name".to_string()]);
    assert_eq!(person.properties.len(), 2);
    assert!(person.properties[1].nullable);
    assert_eq!(person.properties[1].ty, ScalarType::I32);
    let works = c.edge("WorksAt").unwrap();
    assert_eq!((works.from_type.as_str(), works.to_type.as_str()), ("Person", "Company"));
    assert_eq!(works.card, Card { min: 0, max: Some(1) });
    assert_eq!(c.edge("Knows").unwrap().card, Card::default());
    assert_eq!(c.edge_ci("worksat").map(|e| e.name.as_str()), Some("WorksAt"));
    assert!(c.edge("worksat").is_none());
    let names: Vec<&str> = c.types().map(|t| t.name()).collect();
    assert_eq!(names, ["Person", "Company", "Knows", "WorksAt"]);
    assert_eq!(c.type_def("Knows").map(|t| t.kind()), Some(TypeKind::Edge));
    assert!(person.table_id.starts_with('n') && works.table_id.starts_with('e'));
}

#[test]
fn desugars_property_constraints_and_interfaces() {
    let c = compile(
        r#"
        interface Named { name: String @key @description("display name") }
        node Doc implements Named {
            title: String @index @unique
            body: String
            score: F64?
            n: U32
            emb: Vector(4) @embed("body", model = "mini") @index
            @index(title)
            @range(score, 0..1.5)
            @range(n, ..10)
            @check(title, "^[A-Z]")
        }
        node Tagged @description("t") @rename_from("Old") @ui(color = "red") { slug: String @custom(1, true, x) }
        edge Links: Doc -> Doc { @unique(src, dst) @index(dst) w: I32 @index }
        "#,
    );
    let doc = c.node("Doc").unwrap();
    assert_eq!(doc.implements, ["Named"]);
    assert_eq!(doc.properties[0].name, "name");
    assert_eq!(doc.properties[0].meta.description.as_deref(), Some("display name"));
    assert_eq!(doc.key, ["name"]);
    assert_eq!(doc.uniques, [vec!["title".to_string()]]);
    assert_eq!(doc.indexes, [vec!["title".to_string()], vec!["emb".to_string()]]);
    assert_eq!(doc.embeds, [EmbedSpec { prop: "emb".into(), source: "body".into(), model: Some("mini".into()) }]);
    assert_eq!(
        doc.ranges,
        [
            RangeConstraint { prop: "score".into(), min: Some(0.0), max: Some(1.5), integer: false },
            RangeConstraint { prop: "n".into(), min: None, max: Some(10.0), integer: true },
        ]
    );
    assert_eq!(doc.checks[0].pattern, "^[A-Z]");
    let tagged = c.node("Tagged").unwrap();
    assert_eq!(tagged.meta.rename_from.as_deref(), Some("Old"));
    assert_eq!(tagged.meta.annotations[0].name, "ui");
    assert_eq!(
        tagged.meta.annotations[0].args,
        [AnnotationArg { name: Some("color".into()), value: AnnotationValue::String("red".into()) }]
    );
    assert_eq!(tagged.properties[0].meta.annotations[0].args.len(), 3);
    let links = c.edge("Links").unwrap();
    assert_eq!(links.uniques, [vec!["src".to_string(), "dst".to_string()]]);
    assert_eq!(links.indexes, [vec!["w".to_string()], vec!["dst".to_string()]]);
    assert_eq!(c.interface("Named").unwrap().properties.len(), 1);
}

#[test]
fn arrow_schema_for_nodes_and_edges() {
    let c = compile(BASIC);
    let person = c.arrow_schema("Person").unwrap();
    let id = person.field(0);
    assert_eq!((id.name().as_str(), id.data_type(), id.is_nullable()), ("id", &DataType::Utf8, false));
    assert_eq!(id.metadata().get(arrow::PRIMARY_KEY_METADATA).map(String::as_str), Some("true"));
    assert_eq!(person.field(1).name(), "name");
    assert!(!person.field(1).is_nullable());
    assert_eq!(person.field(2).data_type(), &DataType::Int32);
    assert!(person.field(2).is_nullable());
    let knows = c.arrow_schema("Knows").unwrap();
    let names: Vec<&str> = knows.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["id", "src", "dst", "since"]);
    assert!(!knows.field(1).is_nullable() && !knows.field(2).is_nullable());
    assert!(knows.field(0).metadata().contains_key(arrow::PRIMARY_KEY_METADATA));
    assert_eq!(knows.field(3).data_type(), &DataType::Date32);
    assert!(c.arrow_schema("Nope").is_none());
}

#[test]
fn arrow_type_mapping_covers_every_type() {
    let c = compile(
        "node T { a: String b: Blob c: Bool d: I32 e: I64 f: U32 g: U64 h: F32 i: F64 j: Date k: DateTime \
         l: Vector(3) m: enum(x, y) n: [I64]? }",
    );
    let s = c.arrow_schema("T").unwrap();
    let types: Vec<DataType> = s.fields().iter().skip(1).map(|f| f.data_type().clone()).collect();
    assert_eq!(types[0], DataType::Utf8);
    assert_eq!(types[1], DataType::LargeBinary);
    assert_eq!(types[2], DataType::Boolean);
    assert_eq!(
        &types[3..9],
        &[DataType::Int32, DataType::Int64, DataType::UInt32, DataType::UInt64, DataType::Float32, DataType::Float64]
    );
    assert_eq!(types[9], DataType::Date32);
    assert_eq!(types[10], DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())));
    assert!(matches!(&types[11], DataType::FixedSizeList(f, 3) if f.data_type() == &DataType::Float32));
    assert_eq!(types[12], DataType::Utf8);
    assert!(matches!(&types[13], DataType::List(f) if f.data_type() == &DataType::Int64));
    assert!(s.field(14).is_nullable() && !s.field(13).is_nullable());
}

fn kv(pairs: &[(&str, serde_json::Value)]) -> Vec<(String, serde_json::Value)> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

#[test]
fn derive_id_single_keys() {
    let c = compile(
        "node S { k: String @key } node I { k: I64 @key } node B { k: Bool @key } node D { k: Date @key } \
         node T { k: DateTime @key } node F { k: F32 @key } node G { k: F64 @key } node U { k: U32 @key } \
         node E { k: enum(a, b) @key } node N { k: String }",
    );
    let id = |t: &str, v: serde_json::Value| c.node(t).unwrap().derive_id(&kv(&[("k", v)]));
    assert_eq!(id("S", json!("Alice")), Ok("Alice".into()));
    assert_eq!(id("I", json!(-42)), Ok("-42".into()));
    assert_eq!(id("I", json!("9007199254740993")), Ok("9007199254740993".into()));
    assert_eq!(id("B", json!(true)), Ok("true".into()));
    assert_eq!(id("D", json!("1970-01-02")), Ok("1".into()));
    assert_eq!(id("D", json!(19000)), Ok("19000".into()));
    assert_eq!(id("T", json!("1970-01-01T00:00:01.250Z")), Ok("1250".into()));
    assert_eq!(id("T", json!(5)), Ok("5".into()));
    assert_eq!(id("F", json!(0.1)), Ok("0.1".into()));
    assert_eq!(id("F", json!(-0.0)), Ok("0".into()));
    assert_eq!(id("G", json!(2.5)), Ok("2.5".into()));
    assert_eq!(id("G", json!(3)), Ok("3".into()));
    assert_eq!(id("E", json!("b")), Ok("b".into()));
    assert!(id("E", json!("c")).is_err());
    assert!(id("U", json!(-1)).is_err());
    assert!(id("F", json!(1e300)).is_err(), "overflows f32 to infinity");
    assert!(id("S", json!(null)).is_err());
    assert!(id("D", json!("1970-13-01")).is_err());
    assert!(c.node("N").unwrap().derive_id(&kv(&[("k", json!("x"))])).is_err());
    assert!(c.node("S").unwrap().derive_id(&[]).is_err());
}

#[test]
fn derive_id_composite_orders_by_declaration() {
    let c = compile("node P { first: String last: String age: I32 @key(age, first) }");
    let p = c.node("P").unwrap();
    assert_eq!(p.key, ["age", "first"]);
    let id = p.derive_id(&kv(&[("age", json!(30)), ("first", json!("Al\"ice")), ("last", json!("x"))]));
    assert_eq!(id, Ok(r#"["Al\"ice","30"]"#.to_string()));
}

#[test]
fn identity_is_stable_and_sensitive() {
    let a = compile(BASIC);
    assert_eq!(a.identity(), compile(BASIC).identity());
    assert_eq!(a.identity().len(), 64);
    let b = compile(&BASIC.replace("age: I32?", "age: I64?"));
    assert_ne!(a.identity(), b.identity());
    let json = serde_json::to_string(&a).unwrap();
    let back: Catalog = serde_json::from_str(&json).unwrap();
    assert_eq!(back, a);
}

#[test]
fn adopt_ids_follows_rename_from() {
    let old = compile("node Human { name: String @key }");
    let mut new = compile("node Person @rename_from(\"Human\") { full_name: String @key @rename_from(\"name\") }");
    let before = new.node("Person").unwrap().table_id.clone();
    new.adopt_ids(&old);
    let person = new.node("Person").unwrap();
    let human = old.node("Human").unwrap();
    assert_ne!(before, person.table_id);
    assert_eq!(person.table_id, human.table_id);
    assert_eq!(person.properties[0].prop_id, human.properties[0].prop_id);
}

/// Random edits of a source: delete, insert or duplicate a span of chars.
fn mutate(src: &str, ops: &[(u8, usize, usize, char)]) -> String {
    let mut chars: Vec<char> = src.chars().collect();
    for &(op, a, b, ch) in ops {
        let len = chars.len().max(1);
        let (start, span) = (a % len, b % 16);
        let end = (start + span).min(chars.len());
        match op % 3 {
            0 if start < end => {
                chars.drain(start..end);
            }
            1 => chars.insert(start.min(chars.len()), ch),
            _ => {
                let copy: Vec<char> = chars.get(start..end).map(<[char]>::to_vec).unwrap_or_default();
                let at = end.min(chars.len());
                chars.splice(at..at, copy);
            }
        }
    }
    chars.into_iter().collect()
}

/// Char soup biased towards `.pg` punctuation and keywords.
fn pg_soup() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just("node ".to_string()),
            Just("edge ".to_string()),
            Just("interface ".to_string()),
            Just("@key".to_string()),
            Just("@range(".to_string()),
            Just("enum(".to_string()),
            Just("Vector(".to_string()),
            Just("->".to_string()),
            Just("..".to_string()),
            "[a-zA-Z0-9_@(){}\\[\\]:,?=\\-.\" /*\\\\\n]{1,4}",
        ],
        0..40,
    )
    .prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_strings_never_panic(src in any::<String>()) {
        let _ = compile_schema(&src);
    }

    #[test]
    fn token_soup_never_panics(src in pg_soup()) {
        let _ = compile_schema(&src);
    }

    #[test]
    fn mutated_fixtures_never_panic(
        pick in any::<usize>(),
        ops in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>(), any::<char>()), 1..8),
    ) {
        let mut sources: Vec<String> = fixture_sources().into_iter().map(|(_, s)| s).collect();
        sources.push(BASIC.to_string());
        let base = sources.get(pick % sources.len()).cloned().unwrap_or_default();
        let _ = compile_schema(&mutate(&base, &ops));
    }
}
