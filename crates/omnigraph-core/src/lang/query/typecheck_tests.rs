use super::*;
use crate::lang::catalog::compile_schema;
use crate::lang::query::ir::*;
use crate::lang::query::parse_queries;
use proptest::prelude::*;
use std::path::{Path, PathBuf};

const SCHEMA: &str = r#"
node Person {
    name: String @key
    age: I32?
    tags: [String]?
    status: enum(active, retired)?
    photo: Blob?
    born: Date?
    seen: DateTime?
}
node Company {
    name: String @key
    founded: I32?
}
node Doc {
    slug: String @key
    title: String @index
    body: String @index
    embedding: Vector(4)
}
node Chunk {
    text: String
    embedding: Vector(4) @embed("text")
}
edge Knows: Person -> Person {
    since: Date?
}
edge WorksAt: Person -> Company {
    role: String?
}
edge Rated: Person -> Doc {
    score: F64
}
"#;

fn catalog() -> Catalog {
    match compile_schema(SCHEMA) {
        Ok(c) => c,
        Err(e) => panic!("test schema does not compile: {e}"),
    }
}

/// Checks the single query in `src`; panics on parse errors.
fn check(src: &str) -> Result<QueryIr, Vec<Diagnostic>> {
    let queries = match parse_queries(src) {
        Ok(q) => q,
        Err(e) => panic!("parse error in test query: {e}\n{src}"),
    };
    assert_eq!(queries.len(), 1, "expected one query");
    check_query(&catalog(), &queries[0])
}

fn ok(src: &str) -> QueryIr {
    match check(src) {
        Ok(ir) => ir,
        Err(errs) => panic!("unexpected errors: {errs:?}\n{src}"),
    }
}

/// 1-based position of the `nth` (0-based) occurrence of `needle`.
fn pos_of(src: &str, needle: &str, nth: usize) -> Pos {
    let Some((offset, _)) = src.match_indices(needle).nth(nth) else { panic!("`{needle}` not found") };
    Pos::at(src, offset)
}

/// Asserts that checking `src` fails with `code` at the `nth` `needle`.
fn expect(src: &str, code: &str, needle: &str, nth: usize) {
    let errs = match check(src) {
        Ok(_) => panic!("expected {code}, query checked fine:\n{src}"),
        Err(e) => e,
    };
    let want = pos_of(src, needle, nth);
    assert!(
        errs.iter().any(|d| d.code.as_deref() == Some(code) && d.pos == want),
        "expected {code} at {}:{} (`{needle}`), got {errs:?}\n{src}",
        want.line,
        want.column
    );
    for d in &errs {
        assert!(!d.message.contains('\n'), "multi-line message: {d:?}");
    }
}

// ───────────────────────── fixtures ─────────────────────────

fn fixtures_root() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("OMNIGRAPH_SHARED_FIXTURES").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures")),
        Some(PathBuf::from("/work/shared/fixtures")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_dir())
}

fn gq_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            gq_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "gq") {
            out.push(p);
        }
    }
}

/// The schema of a fixture query file: `<stem>.pg` beside it, else
/// `schema.pg` in the parent directory (cookbooks' `queries/`).
fn schema_for(gq: &Path) -> Option<PathBuf> {
    let sibling = gq.with_extension("pg");
    if sibling.is_file() {
        return Some(sibling);
    }
    let parent = gq.parent()?.parent()?.join("schema.pg");
    parent.is_file().then_some(parent)
}

fn fixture_sources() -> Vec<(PathBuf, String)> {
    let Some(root) = fixtures_root() else { return Vec::new() };
    let mut files = Vec::new();
    gq_files(&root, &mut files);
    files.into_iter().filter_map(|f| std::fs::read_to_string(&f).ok().map(|s| (f, s))).collect()
}

#[test]
fn every_fixture_query_typechecks() {
    let Some(root) = fixtures_root() else {
        println!("NOTICE: shared fixtures not found; skipping fixture typecheck test");
        return;
    };
    let mut files = Vec::new();
    gq_files(&root, &mut files);
    assert!(!files.is_empty(), "no .gq fixtures under {}", root.display());
    let mut checked = 0;
    let mut failures = Vec::new();
    for gq in &files {
        let Some(schema_path) = schema_for(gq) else {
            failures.push(format!("{}: no schema found", gq.display()));
            continue;
        };
        let schema_src = std::fs::read_to_string(&schema_path).unwrap_or_default();
        let catalog = match compile_schema(&schema_src) {
            Ok(c) => c,
            Err(e) => {
                failures.push(format!("{}: schema error {e}", schema_path.display()));
                continue;
            }
        };
        let src = std::fs::read_to_string(gq).unwrap_or_default();
        for (name, result) in check_source(&catalog, &src) {
            checked += 1;
            if let Err(errs) = result {
                for e in errs {
                    failures.push(format!("{}: query `{name}`: {e}", gq.display()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "fixture typecheck failures:\n{}", failures.join("\n"));
    assert!(checked > 100, "only {checked} fixture queries checked");
}

// ───────────────────────── one test per code ─────────────────────────

#[test]
fn t1_unknown_node_type() {
    expect("query q() {\n  match { $p: Persn }\n  return { $p.name }\n}", "T1", "Persn", 0);
}

#[test]
fn t2_unknown_binding_property() {
    expect("query q() {\n  match { $p: Person { nme: \"x\" } }\n  return { $p.name }\n}", "T2", "nme", 0);
}

#[test]
fn t3_literal_type_and_enum_value() {
    expect("query q() {\n  match { $p: Person { age: \"old\" } }\n  return { $p.name }\n}", "T3", "\"old\"", 0);
    expect("query q() {\n  match { $p: Person { status: \"bogus\" } }\n  return { $p.name }\n}", "T3", "\"bogus\"", 0);
    expect(
        "query q() {\n  match { $p: Person\n    $p.status = \"gone\" }\n  return { $p.name }\n}",
        "T3",
        "\"gone\"",
        0,
    );
    expect("query q() {\n  match { $p: Person { name: $who } }\n  return { $p.name }\n}", "T3", "$who", 0);
    expect(
        "query q() {\n  match { $p: Person\n $p.born > date(\"2020-13-01\") }\n  return { $p.name }\n}",
        "T3",
        "date(",
        0,
    );
    expect("query q() { insert Person { name: \"a\", age: 5000000000 } }", "T3", "5000000000", 0);
}

#[test]
fn t4_unknown_edge() {
    expect("query q() {\n  match { $p: Person\n    $p frends $f }\n  return { $f.name }\n}", "T4", "frends", 0);
}

#[test]
fn t5_endpoint_mismatch() {
    expect("query q() {\n  match { $c: Company\n    $c knows $f }\n  return { $f.name }\n}", "T5", "$c knows", 0);
    expect("query q() {\n  match { $p: Person\n  $d: Doc\n    $p knows $d }\n  return { $p.name }\n}", "T5", "$d }", 0);
}

#[test]
fn t6_unresolved_read_names() {
    expect("query q() {\n  match { $p: Person }\n  return { $q.name }\n}", "T6", "$q", 0);
    expect("query q() {\n  match { $p: Person }\n  return { $p.nme }\n}", "T6", "nme", 0);
    expect("query q() {\n  match { $p: Person }\n  return { $p.name }\n  order { nope }\n}", "T6", "nope", 0);
}

#[test]
fn t7_comparison_operands() {
    expect("query q() {\n  match { $p: Person\n    $p.age > \"old\" }\n  return { $p.name }\n}", "T7", ">", 0);
    expect("query q($n: I32) {\n  match { $p: Person { name: $n } }\n  return { $p.name }\n}", "T7", "$n }", 0);
    expect(
        "query q() {\n  match { $p: Person\n    $p.age starts_with \"1\" }\n  return { $p.name }\n}",
        "T7",
        "$p.age starts",
        0,
    );
    expect("query q() {\n  match { $p: Person\n    $p.photo = \"x\" }\n  return { $p.name }\n}", "T7", "=", 0);
}

#[test]
fn t8_aggregate_argument() {
    expect("query q() {\n  match { $p: Person }\n  return { sum($p.name) as s }\n}", "T8", "$p.name", 0);
    expect("query q() {\n  match { $p: Person }\n  return { avg($p) as s }\n}", "T8", "$p)", 0);
}

#[test]
fn t9_grouping_and_uncorrelated_not() {
    expect("query q() {\n  match { $p: Person\n    not { $c: Company } }\n  return { $p.name }\n}", "T9", "not", 0);
    expect("query q() {\n  match { $p: Person }\n  return { \"lit\"\n count($p) as n }\n}", "T9", "\"lit\"", 0);
}

#[test]
fn t10_unknown_mutation_type() {
    expect("query q() {\n  insert Persn { name: \"x\" }\n}", "T10", "Persn", 0);
    expect("query q() {\n  delete Nope where name = \"x\"\n}", "T10", "Nope", 0);
}

#[test]
fn t11_unavailable_mutation_property() {
    expect("query q() {\n  update Person set { name: \"y\" } where name = \"x\"\n}", "T11", "name", 0);
    expect("query q() {\n  update Person set { nme: 1 } where name = \"x\"\n}", "T11", "nme", 0);
    expect("query q() {\n  delete Person where photo = \"x\"\n}", "T11", "photo", 0);
}

#[test]
fn t12_missing_required() {
    expect("query q() {\n  insert Person { age: 3 }\n}", "T12", "Person", 0);
    expect("query q() {\n  insert Knows { from: \"a\" }\n}", "T12", "Knows", 0);
    expect("query q() {\n  insert Rated { from: \"a\", to: \"d\" }\n}", "T12", "Rated", 0);
}

#[test]
fn t13_duplicate_assignment() {
    expect("query q() {\n  insert Person { name: \"a\", name: \"b\" }\n}", "T13", "name", 1);
}

#[test]
fn t14_undeclared_mutation_param() {
    expect("query q() {\n  insert Person { name: $nm }\n}", "T14", "$nm", 0);
    expect("query q() {\n  delete Person where name = $who\n}", "T14", "$who", 0);
}

#[test]
fn t15_hop_bounds_and_nearest() {
    expect("query q() {\n  match { $p: Person\n    $p knows{0,2} $f }\n  return { $f.name }\n}", "T15", "{0,2}", 0);
    expect("query q() {\n  match { $p: Person\n    $p knows{1,} $f }\n  return { $f.name }\n}", "T15", "{1,}", 0);
    expect("query q() {\n  match { $p: Person\n    $p knows{3,2} $f }\n  return { $f.name }\n}", "T15", "{3,2}", 0);
    expect(
        "query q($v: Vector(4)) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { nearest($d.title, $v) }\n  limit 3\n}",
        "T15",
        "title",
        0,
    );
    expect(
        "query q($v: Vector(8)) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { nearest($d.embedding, $v) }\n  limit 3\n}",
        "T15",
        "$v)",
        0,
    );
}

#[test]
fn t16_update_edge() {
    expect("query q() {\n  update Knows set { since: date(\"2020-01-01\") } where from = \"a\"\n}", "T16", "Knows", 0);
}

#[test]
fn t17_nearest_needs_limit() {
    expect(
        "query q($v: Vector(4)) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { nearest($d.embedding, $v) }\n}",
        "T17",
        "nearest",
        0,
    );
}

#[test]
fn t18_alias_order_with_nearest() {
    expect(
        "query q($v: Vector(4)) {\n  match { $d: Doc }\n  return { $d.slug as s }\n  order { nearest($d.embedding, $v), s }\n  limit 3\n}",
        "T18",
        "s }",
        1,
    );
}

#[test]
fn t19_search_operands() {
    expect(
        "query q($q: String) {\n  match { $p: Person\n    search($p.age, $q) }\n  return { $p.name }\n}",
        "T19",
        "$p.age",
        0,
    );
    expect(
        "query q($q: I64) {\n  match { $p: Person\n    fuzzy($p.name, $q) }\n  return { $p.name }\n}",
        "T19",
        "$q)",
        0,
    );
    expect(
        "query q($q: String) {\n  match { $p: Person\n    fuzzy($p.name, $q, \"two\") }\n  return { $p.name }\n}",
        "T19",
        "\"two\"",
        0,
    );
}

#[test]
fn t20_match_text_and_bm25_operands() {
    expect(
        "query q() {\n  match { $p: Person\n    match_text($p.age, \"x\") }\n  return { $p.name }\n}",
        "T20",
        "$p.age",
        0,
    );
    expect(
        "query q($q: String) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { bm25($d.embedding, $q) }\n  limit 3\n}",
        "T20",
        "$d.embedding",
        0,
    );
}

#[test]
fn t21_rrf() {
    expect(
        "query q($v: Vector(4), $t: String) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { rrf(nearest($d.embedding, $v), bm25($d.title, $t)) }\n}",
        "T21",
        "rrf",
        0,
    );
    expect(
        "query q($v: Vector(4), $t: String) {\n  match { $d: Doc }\n  return { $d.slug }\n  order { rrf(nearest($d.embedding, $v), bm25($d.title, $t), 0) }\n  limit 3\n}",
        "T21",
        "0)",
        0,
    );
}

#[test]
fn t22_undirected_asymmetric() {
    expect("query q() {\n  match { $p: Person\n    $p <worksAt> $c }\n  return { $c.name }\n}", "T22", "worksAt", 0);
}

#[test]
fn t23_edge_binding_roles() {
    expect("query q() {\n  match { $p: Person\n    $p $w:knows{1,2} $f }\n  return { $f.name }\n}", "T23", "$w", 0);
    expect("query q() {\n  match { $p: Person\n    $p $w:knows $f }\n  return { $w }\n}", "T23", "$w }", 0);
    expect("query q() {\n  match { $p: Person\n    $p $p:knows $f }\n  return { $f.name }\n}", "T23", "$p:", 1);
}

#[test]
fn t24_blob_read() {
    expect("query q() {\n  match { $p: Person }\n  return { $p.photo }\n}", "T24", "$p.photo", 0);
    expect("query q() {\n  match { $p: Person }\n  return { $p.name }\n  order { $p.photo }\n}", "T24", "$p.photo", 0);
}

#[test]
fn all_errors_are_reported() {
    let src = "query q() {\n  match { $p: Persn\n    $x frends $y }\n  return { $z.name }\n}";
    let errs = check(src).err().unwrap_or_default();
    let codes: Vec<&str> = errs.iter().filter_map(|d| d.code.as_deref()).collect();
    assert_eq!(codes, ["T1", "T4", "T6"], "{errs:?}");
}

#[test]
fn check_source_reports_parse_errors_once() {
    let out = check_source(&catalog(), "query q( { }");
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0].1, Err(e) if e.len() == 1));
}

// ───────────────────────── IR shape ─────────────────────────

#[test]
fn ir_read_with_two_hops_and_filters() {
    let src = r#"query q($n: String, $min: I32) {
        match {
            $p: Person { name: $n }
            $p knows{1,2} $f
            $f worksAt $c
            $f.age >= $min
            $c.name != "Acme"
            $f.tags contains "x"
            not { $f knows $_ }
        }
        return { $f.name, $c.name as company, $f.born }
        order { $f.name desc }
        limit 5
    }"#;
    let ir = ok(src);
    assert_eq!(ir.params.len(), 2);
    assert_eq!(ir.params[1].ty, Type::scalar(ScalarType::I32));
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    let vars: Vec<(&str, &str, &str)> =
        r.pattern.vars.iter().map(|v| (v.name.as_str(), v.type_name.as_str(), v.table_key.as_str())).collect();
    assert_eq!(
        vars,
        [("p", "Person", "node:Person"), ("f", "Person", "node:Person"), ("c", "Company", "node:Company")]
    );
    assert_eq!(r.pattern.traversals.len(), 2);
    let t0 = &r.pattern.traversals[0];
    assert_eq!(
        (t0.edge_type.as_str(), t0.table_key.as_str(), t0.src.as_str(), t0.dst.as_str()),
        ("Knows", "edge:Knows", "p", "f")
    );
    assert_eq!((t0.min_hops, t0.max_hops, t0.direction), (1, 2, Direction::Out));
    assert_eq!(r.pattern.traversals[1].edge_type, "WorksAt");
    assert_eq!(r.pattern.filters.len(), 4);
    assert_eq!(r.pattern.filters[0].op, CmpOp::Eq);
    assert!(matches!(&r.pattern.filters[0].right, Operand::Param { name, .. } if name == "n"));
    assert!(matches!(&r.pattern.filters[1].left, Operand::Prop { var, prop, .. } if var == "f" && prop == "age"));
    assert_eq!(r.pattern.filters[1].op, CmpOp::Ge);
    assert!(matches!(&r.pattern.filters[2].right, Operand::Value { value: Value::String(s), .. } if s == "Acme"));
    assert_eq!(r.pattern.filters[3].op, CmpOp::ListContains);
    assert_eq!(r.pattern.not_blocks.len(), 1);
    let nb = &r.pattern.not_blocks[0];
    assert_eq!(nb.traversals.len(), 1);
    assert_eq!(nb.vars.len(), 1);
    assert!(nb.vars[0].anonymous);
    let cols: Vec<&str> = r.projections.iter().map(|p| p.column.as_str()).collect();
    assert_eq!(cols, ["f.name", "company", "f.born"]);
    assert_eq!(r.projections[2].ty, ResultType::Scalar(Type { scalar: ScalarType::Date, list: false, nullable: true }));
    assert!(matches!(&r.order[0], OrderKeyIr { key: OrderKey::Prop { var, .. }, descending: true } if var == "f"));
    assert_eq!(r.limit, Some(5));
    assert_eq!(ir.reads().into_iter().collect::<Vec<_>>(), ["Company", "Knows", "Person", "WorksAt"].map(String::from));
    assert!(ir.writes().is_empty());
    // Serialises.
    assert!(serde_json::to_string(&ir).is_ok_and(|s| s.contains("edge:Knows")));
}

#[test]
fn ir_literals_are_typed() {
    let src = r#"query q() {
        match {
            $p: Person
            $p.born >= date("1970-01-02")
            $p.seen < datetime("1970-01-01T00:00:01Z")
            $d: Doc
            $r: Company { founded: 1999 }
        }
        return { $p.name, $d.slug, $r.name }
    }"#;
    let ir = ok(src);
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    let rights: Vec<&Operand> = r.pattern.filters.iter().map(|f| &f.right).collect();
    assert!(rights.iter().any(|o| matches!(o, Operand::Value { value: Value::I64(1999), .. })));
    assert!(rights.iter().any(|o| matches!(o, Operand::Value { value: Value::Date(1), .. })));
    assert!(rights.iter().any(|o| matches!(o, Operand::Value { value: Value::DateTime(1000), .. })));
}

#[test]
fn ir_aggregates_and_ranks() {
    let ir = ok(
        "query q() { match { $p: Person  $p knows $f } return { $p.name  count($f) as friends  avg($f.age) } order { friends desc } limit 3 }",
    );
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    assert!(r.aggregate);
    assert_eq!(r.group_by, [0]);
    assert_eq!(r.projections[1].ty, ResultType::Scalar(Type::scalar(ScalarType::I64)));
    assert_eq!(r.projections[2].column, "avg(f.age)");
    assert!(matches!(&r.order[0].key, OrderKey::Column { index: 1, .. }));

    let ir = ok(
        "query h($vq: Vector(4), $tq: String) { match { $d: Doc } return { $d.slug } order { rrf(nearest($d.embedding, $vq), bm25($d.title, $tq), 60) } limit 3 }",
    );
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    let OrderKey::Rrf(rrf) = &r.order[0].key else { panic!("expected rrf") };
    assert!(r.order[0].descending);
    assert!(matches!(&rrf.first, RankIr::Nearest(n) if n.dim == 4 && !n.query_is_text));
    assert!(matches!(&rrf.second, RankIr::Bm25(b) if b.prop == "title"));
    assert!(matches!(&rrf.k, Some(Operand::Value { value: Value::I64(60), .. })));

    let ir =
        ok("query h() { match { $c: Chunk } return { $c.text } order { nearest($c.embedding, \"hello\") } limit 3 }");
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    assert!(matches!(&r.order[0].key, OrderKey::Nearest(n) if n.query_is_text));
}

#[test]
fn ir_mutations() {
    let ir = ok(r#"query m($n: String, $age: I32, $co: String) {
        insert Person { name: $n, age: $age, seen: now() }
        insert WorksAt { from: $n, to: $co, role: "eng" }
        update Person set { age: 41, status: "retired" } where name = $n
    }"#);
    let BodyIr::Mutation(m) = &ir.body else { panic!("expected mutation") };
    assert_eq!(m.statements.len(), 3);
    let StatementIr::Insert(i) = &m.statements[0] else { panic!("insert") };
    assert_eq!(
        (i.type_name.as_str(), i.table_key.as_str(), i.is_edge, i.upsert),
        ("Person", "node:Person", false, true)
    );
    assert_eq!(i.key, ["name"]);
    assert!(matches!(&i.assignments[2].value, Operand::Value { value: Value::Now, .. }));
    let StatementIr::Insert(e) = &m.statements[1] else { panic!("edge insert") };
    assert!(e.is_edge && !e.upsert);
    assert_eq!(e.table_key, "edge:WorksAt");
    assert!(matches!(&e.from, Some(Operand::Param { name, .. }) if name == "n"));
    assert!(matches!(&e.to, Some(Operand::Param { name, .. }) if name == "co"));
    assert_eq!(e.assignments.len(), 1);
    let StatementIr::Update(u) = &m.statements[2] else { panic!("update") };
    assert_eq!(u.assignments.len(), 2);
    assert_eq!((u.predicate.column.as_str(), u.predicate.op), ("name", CmpOp::Eq));
    assert_eq!(ir.writes().into_iter().collect::<Vec<_>>(), ["Person", "WorksAt"].map(String::from));
    assert_eq!(ir.params().len(), 3);

    let ir = ok("query d($a: String) { delete Person where name = $a  delete Knows where from = $a }");
    let BodyIr::Mutation(m) = &ir.body else { panic!("expected mutation") };
    let StatementIr::Delete(d) = &m.statements[0] else { panic!("delete") };
    assert!(!d.is_edge);
    assert_eq!(d.cascade_edges, ["Knows", "WorksAt", "Rated"]);
    let StatementIr::Delete(d) = &m.statements[1] else { panic!("delete") };
    assert!(d.is_edge);
    assert_eq!(d.predicate.column, "src");
    assert_eq!(ir.writes().into_iter().collect::<Vec<_>>(), ["Knows", "Person", "Rated", "WorksAt"].map(String::from));
}

#[test]
fn edge_names_resolve_case_insensitively_and_infer_direction() {
    let ir = ok("query q() { match { $c: Company  $p worksAt $c  $c worksat $q } return { $p.name, $q.name } }");
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    assert_eq!(r.pattern.traversals[0].direction, Direction::Out);
    assert_eq!(r.pattern.traversals[1].direction, Direction::In);
    assert_eq!(r.pattern.traversals[1].edge_type, "WorksAt");
    let ir = ok(
        "query q() { match { $p: Person  $p <knows> $f  $p $w:knows $g  $w.since > date(\"2020-01-01\") } return { $f.name, $w.since } }",
    );
    let BodyIr::Read(r) = &ir.body else { panic!("expected read") };
    assert_eq!(r.pattern.traversals[0].direction, Direction::Both);
    assert_eq!(r.pattern.traversals[1].edge_var.as_deref(), Some("w"));
    assert!(r.pattern.vars.iter().any(|v| v.name == "w" && v.kind == VarKind::Edge && v.table_key == "edge:Knows"));
}

// ───────────────────────── robustness ─────────────────────────

const TOKENS: &[&str] = &[
    "$_",
    "$p",
    "$x",
    "$w:",
    "not {",
    "}",
    "{",
    "Person",
    "Company",
    "Doc",
    "knows",
    "worksAt",
    "<knows>",
    "{0,}",
    "{1,3}",
    "\"x\"",
    "42",
    "1.5",
    "date(\"bad\")",
    "datetime(\"2020-01-01T00:00:00Z\")",
    "nearest($d.embedding, $q)",
    "bm25($d.title, $q)",
    "rrf(",
    "count(",
    "sum(",
    "now()",
    "[1, \"a\"]",
    "[[1]]",
    "contains",
    "starts_with",
    "=",
    ">",
    "as a",
    "order { a }",
    "limit 0",
    ".photo",
    ".embedding",
    ".age",
    "search(",
    "fuzzy(",
    "match_text(",
    "insert Person {",
    "update Knows set {",
    "delete Person where",
    "from:",
    "to:",
    ",",
    "(",
    ")",
    "18446744073709551615",
];

const SEED_QUERIES: &str = r#"
query a($name: String) { match { $p: Person { name: $name } $p knows $f $f.age > 30 } return { $f.name, count($p) as n } order { n desc } limit 3 }
query b($q: String, $v: Vector(4)) { match { $d: Doc search($d.title, $q) } return { $d.slug } order { rrf(nearest($d.embedding, $v), bm25($d.title, $q)) } limit 3 }
query c($n: String) { insert Person { name: $n, age: 3 } insert Knows { from: $n, to: $n } }
query d($n: String) { delete Person where name = $n }
query e() { match { $p: Person not { $p worksAt $_ } $p $w:knows $g } return { $p.name, $w.since } }
"#;

fn corpus() -> Vec<String> {
    let mut out: Vec<String> = vec![SEED_QUERIES.to_string()];
    out.extend(fixture_sources().into_iter().map(|(_, s)| s));
    out
}

fn mutate(src: &str, ops: &[(u8, usize, usize)]) -> String {
    let mut chars: Vec<char> = src.chars().collect();
    for &(kind, at, which) in ops {
        let len = chars.len().max(1);
        let at = at % len;
        match kind % 3 {
            0 => {
                let end = (at + which % 12).min(chars.len());
                if at < end {
                    chars.drain(at..end);
                }
            }
            1 => {
                let tok = TOKENS.get(which % TOKENS.len()).copied().unwrap_or("");
                let at = at.min(chars.len());
                chars.splice(at..at, format!(" {tok} ").chars());
            }
            _ => {
                // Swap one identifier-ish character for another.
                if let Some(c) = chars.get_mut(at) {
                    *c = match *c {
                        'a'..='y' => ((*c as u8) + 1) as char,
                        'A'..='Y' => ((*c as u8) + 1) as char,
                        '1' => '0',
                        other => other,
                    };
                }
            }
        }
    }
    chars.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_queries_never_panic(
        pick in 0usize..1000,
        ops in proptest::collection::vec((0u8..3, 0usize..100_000, 0usize..1000), 1..6),
    ) {
        let corpus = corpus();
        let src = corpus.get(pick % corpus.len().max(1)).cloned().unwrap_or_default();
        let mutated = mutate(&src, &ops);
        let cat = catalog();
        for (_, result) in check_source(&cat, &mutated) {
            if let Err(errs) = result {
                prop_assert!(!errs.is_empty());
                for e in errs {
                    prop_assert!(e.code.is_some());
                    prop_assert!(e.pos.line >= 1);
                }
            }
        }
        // Also against the fixture's own schema when it exists.
        if let Some(root) = fixtures_root() {
            let schema = std::fs::read_to_string(root.join("cookbooks/second-brain/schema.pg")).unwrap_or_default();
            if let Ok(cat) = compile_schema(&schema) {
                let _ = check_source(&cat, &mutated);
            }
        }
    }
}

#[test]
fn a_single_string_key_is_the_id_key() {
    let q = ok("query q() { match { $p: Person $c: Chunk $p rated $d } return { $p.name } }");
    let BodyIr::Read(r) = &q.body else { panic!("a read") };
    let key = |name: &str| r.pattern.vars.iter().find(|v| v.name == name).and_then(|v| v.id_key.clone());
    assert_eq!(key("p").as_deref(), Some("name"));
    assert_eq!(key("d").as_deref(), Some("slug"));
    assert_eq!(key("c"), None, "unkeyed");
}
