//! Tests for the `.gq` parser.

use super::ast::*;
use super::parse_queries;
use crate::lang::diag::{Diagnostic, Pos};
use std::path::{Path, PathBuf};

// ----- helpers ---------------------------------------------------------------

fn fixtures_dir() -> Option<PathBuf> {
    if let Ok(d) = std::env::var("OMNIGRAPH_SHARED_FIXTURES") {
        let p = PathBuf::from(d);
        if p.is_dir() {
            return Some(p);
        }
    }
    let rel = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures");
    if rel.is_dir() {
        return Some(rel);
    }
    let abs = PathBuf::from("/work/shared/fixtures");
    abs.is_dir().then_some(abs)
}

fn gq_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            gq_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "gq") {
            out.push(p);
        }
    }
}

fn fixture_sources() -> Option<Vec<(PathBuf, String)>> {
    let dir = fixtures_dir()?;
    let mut files = Vec::new();
    gq_files(&dir, &mut files);
    Some(files.into_iter().filter_map(|p| std::fs::read_to_string(&p).ok().map(|s| (p, s))).collect())
}

fn one(src: &str) -> Query {
    let mut qs = parse_queries(src).unwrap_or_else(|e| panic!("parse failed: {e}\n{src}"));
    assert_eq!(qs.len(), 1);
    qs.remove(0)
}

fn read(src: &str) -> ReadQuery {
    match one(src).body {
        QueryBody::Read(r) => r,
        QueryBody::Mutation(_) => panic!("expected a read query"),
    }
}

fn muts(src: &str) -> Vec<Mutation> {
    match one(src).body {
        QueryBody::Mutation(m) => m,
        QueryBody::Read(_) => panic!("expected a mutation"),
    }
}

fn clauses(body: &str) -> Vec<Clause> {
    read(&format!("query q() {{ match {{ {body} }} return {{ 1 }} }}")).clauses
}

fn fail(src: &str) -> Diagnostic {
    match parse_queries(src) {
        Ok(q) => panic!("expected an error, parsed {q:?}"),
        Err(e) => e,
    }
}

fn assert_err(src: &str, code: &str, line: u32, column: u32) -> Diagnostic {
    let d = fail(src);
    assert_eq!(d.code.as_deref(), Some(code), "{d}");
    assert_eq!(d.pos, Pos { line, column }, "{d}");
    assert!(d.message.contains("expected"), "{d}");
    d
}

/// Position of the first occurrence of `needle` in `src`.
fn at(src: &str, needle: &str) -> Pos {
    Pos::at(src, src.find(needle).unwrap_or_else(|| panic!("{needle:?} not in source")))
}

fn p(line: u32, column: u32) -> Pos {
    Pos { line, column }
}

fn var(e: &Expr) -> &str {
    match &e.kind {
        ExprKind::Var(v) => &v.name,
        k => panic!("not a var: {k:?}"),
    }
}

fn prop(e: &Expr) -> (&str, &str) {
    match &e.kind {
        ExprKind::Prop(r) => (&r.var.name, &r.prop.name),
        k => panic!("not a prop: {k:?}"),
    }
}

// ----- fixtures ---------------------------------------------------------------

#[test]
fn every_fixture_query_file_parses() {
    let Some(files) = fixture_sources() else {
        eprintln!("skipping: shared fixtures not found (set OMNIGRAPH_SHARED_FIXTURES)");
        return;
    };
    assert!(!files.is_empty(), "no .gq fixtures found");
    let mut total = 0;
    for (path, src) in &files {
        let qs = parse_queries(src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!qs.is_empty(), "{} has no queries", path.display());
        total += qs.len();
    }
    assert!(total > 100, "only {total} queries");
}

#[test]
fn fixture_shapes() {
    let Some(files) = fixture_sources() else {
        eprintln!("skipping: shared fixtures not found (set OMNIGRAPH_SHARED_FIXTURES)");
        return;
    };
    let all: Vec<Query> = files.iter().flat_map(|(_, s)| parse_queries(s).unwrap_or_default()).collect();
    let q = Query::find(&all, "hybrid_search").expect("hybrid_search");
    assert_eq!(q.params.len(), 2);
    assert_eq!(q.params[0].ty.kind, ParamTypeKind::Vector(4));
    let QueryBody::Read(r) = &q.body else { panic!() };
    assert_eq!(r.limit.as_ref().map(|l| l.value), Some(3));
    let order = r.order.as_ref().expect("order");
    assert!(matches!(order.items[0].expr.kind, ExprKind::Rrf { .. }));
    let u = Query::find(&all, "unemployed").expect("unemployed");
    let QueryBody::Read(r) = &u.body else { panic!() };
    assert!(matches!(&r.clauses[1], Clause::Not(n) if matches!(&n.clauses[0],
        Clause::Traversal(t) if t.dst.is_anonymous() && t.edge.name == "worksAt")));
    assert!(all.iter().any(Query::is_mutation));
}

// ----- error codes ------------------------------------------------------------

#[test]
fn q01_unexpected_character() {
    assert_err("query q() {\n  match { $p: Person # }", "Q01", 2, 22);
    let d = assert_err("query q() { match { $p.a > -1 } return { 1 } }", "Q01", 1, 28);
    assert!(d.message.contains("negative"));
}

#[test]
fn q02_unterminated_string() {
    assert_err("query q() {\n match { $p: P { a: \"abc", "Q02", 2, 21);
}

#[test]
fn q03_invalid_escape() {
    assert_err(r#"query q() { match { $p: P { a: "ab\q" } } return { 1 } }"#, "Q03", 1, 35);
}

#[test]
fn q04_unterminated_comment() {
    assert_err("query q() {}\n  /* never closed", "Q04", 2, 3);
}

#[test]
fn q05_number_out_of_range() {
    assert_err("query q() { match { $p.a > 99999999999999999999 } return { 1 } }", "Q05", 1, 28);
    assert_err("query q($v: Vector(4294967296)) { match { $p: P } return { 1 } }", "Q05", 1, 20);
}

#[test]
fn q06_invalid_variable() {
    assert_err("query q($Name: String) {}", "Q06", 1, 9);
}

#[test]
fn q07_expected_query() {
    assert_err("// c\nquerry q() {}", "Q07", 2, 1);
}

#[test]
fn q08_expected_token() {
    let d = assert_err("query q() {\n  match $p: Person }", "Q08", 2, 9);
    assert!(d.message.contains("`{`") && d.message.contains("variable `$p`"), "{d}");
    assert_err("query q() { match { $p: P } return { $p }", "Q08", 1, 42);
}

#[test]
fn q09_expected_identifier() {
    assert_err("query Q() {}", "Q09", 1, 7);
    assert_err("query q() { match { $p: P } return { $p as 3 } }", "Q09", 1, 44);
}

#[test]
fn q10_expected_type_name() {
    assert_err("query q() { match { $p: person } return { $p } }", "Q10", 1, 25);
    assert_err("query q() { insert person { a: 1 } }", "Q10", 1, 20);
}

#[test]
fn q11_unknown_param_type() {
    assert_err("query q($a: Int) {}", "Q11", 1, 13);
}

#[test]
fn q12_bad_annotation() {
    assert_err("query q() @summary(\"x\") {}", "Q12", 1, 11);
    assert_err("query q() @description(\"x\") @description(\"y\") {}", "Q12", 1, 29);
}

#[test]
fn q13_bad_body_start() {
    assert_err("query q() {\n  return { 1 }\n}", "Q13", 2, 3);
    assert_err("query q() {}", "Q13", 1, 12);
}

#[test]
fn q14_empty_block() {
    assert_err("query q() { match { } return { 1 } }", "Q14", 1, 21);
    assert_err("query q() { match { $p: P } return { } }", "Q14", 1, 38);
    assert_err("query q() { match { not { } } return { 1 } }", "Q14", 1, 27);
    assert_err("query q() { insert P { } }", "Q14", 1, 24);
}

#[test]
fn q15_bad_clause_start() {
    assert_err("query q() { match { $p: P\n  ) } return { 1 } }", "Q15", 2, 3);
}

#[test]
fn q16_bad_edge_name() {
    assert_err("query q() { match { $a Knows $b } return { 1 } }", "Q16", 1, 24);
    assert_err("query q() { match { $a $w: Knows $b } return { 1 } }", "Q16", 1, 28);
}

#[test]
fn q17_expected_expression() {
    assert_err("query q() { match { $p: P } return { $p, ) } }", "Q17", 1, 42);
}

#[test]
fn q18_missing_filter_operator() {
    assert_err("query q() { match { $p.age 3 } return { 1 } }", "Q18", 1, 28);
}

#[test]
fn q19_bad_rrf_argument() {
    assert_err(
        "query q() { match { $d: D } return { 1 } order { rrf(search($d.t, \"x\"), bm25($d.t, \"x\")) } limit 1 }",
        "Q19",
        1,
        54,
    );
}

#[test]
fn q20_bad_nearest_argument() {
    assert_err(
        "query q($v: Vector(2)) { match { $d: D } return { 1 } order { nearest($d, $v) } limit 1 }",
        "Q20",
        1,
        71,
    );
}

#[test]
fn q21_bad_value() {
    assert_err("query q() { insert P { a: $x.name } }", "Q21", 1, 27);
    assert_err("query q() { match { $p: P { a: count($p) } } return { 1 } }", "Q21", 1, 32);
    assert_err("query q() { match { $p.a = [1, $x] } return { 1 } }", "Q21", 1, 32);
}

#[test]
fn q22_bad_where_operator() {
    assert_err("query q() { delete P where name contains \"x\" }", "Q22", 1, 33);
}

#[test]
fn q23_nesting_too_deep() {
    let deep_not =
        format!("query q() {{ match {{ {} $p: P {} }} return {{ 1 }} }}", "not { ".repeat(65), "} ".repeat(65));
    assert_eq!(fail(&deep_not).code.as_deref(), Some("Q23"));
    let ok_not =
        format!("query q() {{ match {{ $p: P {} $p: P {} }} return {{ 1 }} }}", "not { ".repeat(64), "} ".repeat(64));
    assert!(parse_queries(&ok_not).is_ok());
    // `[` number 65 opens at column 1 + 27 + 64 = 92.
    let deep_list =
        format!("query q() {{ match {{ $p.a = {}1{} }} return {{ 1 }} }}", "[".repeat(100), "]".repeat(100));
    assert_err(&deep_list, "Q23", 1, 92);
    let deep_call =
        format!("query q() {{ match {{ $p: P }} return {{ {}$p{} }} }}", "count(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(fail(&deep_call).code.as_deref(), Some("Q23"));
}

#[test]
fn q24_duplicate_query() {
    assert_err("query a() { match { $p: P } return { 1 } }\nquery a() { match { $p: P } return { 1 } }", "Q24", 2, 7);
}

#[test]
fn q25_duplicate_param() {
    assert_err("query a($x: String, $x: I32) {}", "Q25", 1, 21);
}

#[test]
fn q26_unknown_function() {
    assert_err("query q() { match { $p: P } return { lower($p.name) } }", "Q26", 1, 38);
}

#[test]
fn q27_expected_integer() {
    assert_err("query q() { match { $p: P } return { 1 } limit \"x\" }", "Q27", 1, 48);
    assert_err("query q() { match { $a knows{x,2} $b } return { 1 } }", "Q27", 1, 30);
}

#[test]
fn d2_mixed_mutation_rejected() {
    let src = "query foo($n: String) {\n  insert P { name: $n }\n  update P set { a: 1 } where name = $n\n  delete P where name = $n\n}";
    let d = assert_err_d2(src, 4, 3);
    assert_eq!(d.message, "query `foo` mixes insert/update with delete; split it into separate mutations (D₂)");
    // Delete first: the insert is the offending statement.
    assert_err_d2("query bar() {\n  delete P where a = 1\n  insert P { a: 2 }\n}", 3, 3);
    // Homogeneous bodies are fine.
    assert!(parse_queries("query a() { delete P where a = 1 delete Q where b = 2 }").is_ok());
    assert!(parse_queries("query a() { insert P { a: 1 } update P set { b: 2 } where a = 1 }").is_ok());
}

fn assert_err_d2(src: &str, line: u32, column: u32) -> Diagnostic {
    let d = fail(src);
    assert_eq!(d.code.as_deref(), Some("D2"), "{d}");
    assert_eq!(d.pos, p(line, column));
    assert!(d.message.contains("split it into separate mutations"));
    d
}

// ----- shapes -----------------------------------------------------------------

#[test]
fn header_params_and_annotations() {
    let q = one(
        "query find($p: String, $q: I64?, $tags: [String], $v: Vector(8)?, $d: DateTime)\n  @description(\"Finds \\\"x\\\"\")\n  @instruction(\"use it\")\n{ match { $a: A } return { $a } }",
    );
    assert_eq!(q.name, "find");
    assert_eq!(q.pos, p(1, 1));
    assert_eq!(q.name_pos, p(1, 7));
    assert_eq!(q.description.as_deref(), Some("Finds \"x\""));
    assert_eq!(q.instruction.as_deref(), Some("use it"));
    let kinds: Vec<(ParamTypeKind, bool)> = q.params.iter().map(|p| (p.ty.kind, p.ty.nullable)).collect();
    assert_eq!(
        kinds,
        vec![
            (ParamTypeKind::Scalar(BaseType::String), false),
            (ParamTypeKind::Scalar(BaseType::I64), true),
            (ParamTypeKind::List(BaseType::String), false),
            (ParamTypeKind::Vector(8), true),
            (ParamTypeKind::Scalar(BaseType::DateTime), false),
        ]
    );
    assert_eq!(q.params[1].pos, p(1, 24));
    assert_eq!(q.params[1].ty.pos, p(1, 28));
    assert!(!q.is_mutation());
    assert!(q.param("tags").is_some());
}

#[test]
fn several_queries_and_find() {
    let qs = parse_queries(
        "// one\nquery a() { match { $p: P } return { $p } }\n/* two\n */ query b() { insert P { x: 1 } }",
    )
    .unwrap();
    assert_eq!(qs.len(), 2);
    assert_eq!(Query::find(&qs, "b").map(|q| q.pos), Some(p(4, 5)));
    assert!(Query::find(&qs, "b").is_some_and(Query::is_mutation));
    assert!(Query::find(&qs, "c").is_none());
    assert!(parse_queries("  // nothing\n").unwrap().is_empty());
}

#[test]
fn binding_with_props() {
    let c = clauses("$p: Person { name: $name, age: 30, ok: true, }");
    let Clause::Binding(b) = &c[0] else { panic!("{c:?}") };
    assert_eq!(b.var.name, "p");
    assert_eq!(b.type_name.name, "Person");
    assert_eq!(b.type_name.pos, p(1, 25));
    assert_eq!(b.props.len(), 3);
    assert_eq!(b.props[0].prop.name, "name");
    assert_eq!(var(&b.props[0].value), "name");
    assert_eq!(b.props[1].value.kind, ExprKind::Literal(Literal::Int(30)));
    let src = "query q() { match { $p: Person { name: $name, age: 30, ok: true, } } return { 1 } }";
    assert_eq!(b.props[1].value.pos, at(src, "30"));
    assert_eq!(b.props[1].value.pos, p(1, 52));
    assert_eq!(b.props[2].value.kind, ExprKind::Literal(Literal::Bool(true)));
}

#[test]
fn traversals_all_forms() {
    let c =
        clauses("$a knows $b\n $a <knows> $_\n $a $w:knows $c\n $a knows{1,3} $d\n $a knows{2,} $e\n $a $v:<knows> $f");
    let t: Vec<&Traversal> = c
        .iter()
        .map(|c| match c {
            Clause::Traversal(t) => t,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(t.len(), 6);
    assert_eq!((t[0].src.name.as_str(), t[0].edge.name.as_str(), t[0].dst.name.as_str()), ("a", "knows", "b"));
    assert!(!t[0].undirected && t[0].hops.is_none() && t[0].edge_var.is_none());
    assert!(t[1].undirected && t[1].dst.is_anonymous());
    assert_eq!(t[1].edge.pos, p(2, 6));
    assert_eq!(t[2].edge_var.as_ref().map(|v| v.name.as_str()), Some("w"));
    assert_eq!(t[2].edge.name, "knows");
    assert_eq!(t[3].hops, Some(HopBounds { min: 1, max: Some(3), pos: p(4, 10) }));
    assert_eq!(t[4].hops.as_ref().map(|h| (h.min, h.max)), Some((2, None)));
    assert_eq!(t[4].pos, p(5, 2));
    assert!(t[5].undirected && t[5].edge_var.as_ref().is_some_and(|v| v.name == "v") && t[5].edge.name == "knows");
}

#[test]
fn multi_hop_chain_splits_into_hops() {
    let c = clauses("$p knows $mid knows{1,2} $fof worksAt $c\n$c.name = \"x\"");
    assert_eq!(c.len(), 4);
    let hops: Vec<(String, String, String)> = c[..3]
        .iter()
        .map(|c| match c {
            Clause::Traversal(t) => (t.src.name.clone(), t.edge.name.clone(), t.dst.name.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        hops,
        vec![
            ("p".into(), "knows".into(), "mid".into()),
            ("mid".into(), "knows".into(), "fof".into()),
            ("fof".into(), "worksAt".into(), "c".into()),
        ]
    );
    assert!(matches!(&c[3], Clause::Filter(_)));
    // Sequential clauses stay separate.
    let c = clauses("$p knows $mid\n $mid knows $fof");
    assert_eq!(c.len(), 2);
}

#[test]
fn filters_every_operator() {
    let c = clauses(
        "$p.a = 1 $p.a != 1.5 $p.a > $x $p.a >= 2 $p.a < 3 $p.a <= 4 $p.tags contains \"x\" $p.name starts_with \"A\" $p.a < $q.b",
    );
    let ops: Vec<FilterOp> = c
        .iter()
        .map(|c| match c {
            Clause::Filter(f) => f.op,
            other => panic!("{other:?}"),
        })
        .collect();
    use FilterOp::*;
    assert_eq!(ops, vec![Eq, Ne, Gt, Ge, Lt, Le, Contains, StartsWith, Lt]);
    let Clause::Filter(f) = &c[1] else { panic!() };
    assert_eq!(prop(&f.left), ("p", "a"));
    assert_eq!(f.right.kind, ExprKind::Literal(Literal::Float(1.5)));
    assert_eq!(f.op_pos, p(1, 35));
    assert_eq!(f.pos, p(1, 30));
    let Clause::Filter(f) = &c[8] else { panic!() };
    assert_eq!(prop(&f.right), ("q", "b"));
}

#[test]
fn not_blocks_nest() {
    let c = clauses("$p: P\n not { $p knows $f\n not { $f.age > 3 } }");
    let Clause::Not(n) = &c[1] else { panic!("{c:?}") };
    assert_eq!(n.pos, p(2, 2));
    assert_eq!(n.clauses.len(), 2);
    assert!(matches!(&n.clauses[1], Clause::Not(inner) if inner.pos == p(3, 2)));
}

#[test]
fn text_search_clauses() {
    let c = clauses(
        "search($d.title, $q)\n fuzzy($d.title, $q, 2)\n fuzzy($d.t, \"x\")\n match_text($d.body, $q)\n search($d.t, $q) = true",
    );
    assert!(
        matches!(&c[0], Clause::TextSearch(Expr { kind: ExprKind::Search { field, .. }, .. }) if prop(field) == ("d", "title"))
    );
    assert!(
        matches!(&c[1], Clause::TextSearch(Expr { kind: ExprKind::Fuzzy { max_edits: Some(m), .. }, pos }) if m.kind == ExprKind::Literal(Literal::Int(2)) && *pos == p(2, 2))
    );
    assert!(matches!(&c[2], Clause::TextSearch(Expr { kind: ExprKind::Fuzzy { max_edits: None, .. }, .. })));
    assert!(matches!(&c[3], Clause::TextSearch(Expr { kind: ExprKind::MatchText { .. }, .. })));
    assert!(matches!(&c[4], Clause::Filter(_)));
}

#[test]
fn return_projections_aliases_and_aggregates() {
    let r = read(
        "query q() { match { $p: P }\n return {\n $p.name\n count($f) as friends, sum($p.age) as total\n avg($p.age) min($p.age) as lo, max($p.age)\n $p\n } }",
    );
    assert_eq!(r.projections.len(), 7);
    assert_eq!(prop(&r.projections[0].expr), ("p", "name"));
    assert_eq!(r.projections[0].pos, p(3, 2));
    let aggs: Vec<Option<AggFunc>> = r
        .projections
        .iter()
        .map(|pr| match &pr.expr.kind {
            ExprKind::Agg { func, .. } => Some(*func),
            _ => None,
        })
        .collect();
    use AggFunc::*;
    assert_eq!(aggs, vec![None, Some(Count), Some(Sum), Some(Avg), Some(Min), Some(Max), None]);
    assert_eq!(r.projections[1].alias.as_ref().map(|a| (a.name.as_str(), a.pos)), Some(("friends", p(4, 15))));
    assert!(r.projections[3].alias.is_none());
    assert_eq!(r.projections[4].alias.as_ref().map(|a| a.name.as_str()), Some("lo"));
    assert_eq!(var(&r.projections[6].expr), "p");
}

#[test]
fn order_and_limit() {
    let r = read(
        "query q($v: Vector(4), $t: String) { match { $d: D } return { $d.a as score }\n order { score desc, $d.a asc, $d.b, nearest($d.e, $v), bm25($d.t, $t), rrf(nearest($d.e, $v), bm25($d.t, $t), 60) }\n limit 5 }",
    );
    let o = r.order.expect("order");
    assert_eq!(o.pos, p(2, 2));
    assert_eq!(o.items.len(), 6);
    assert!(matches!(&o.items[0].expr.kind, ExprKind::Alias(n) if n.name == "score"));
    assert_eq!(o.items[0].direction, Some(Direction::Desc));
    assert_eq!(o.items[1].direction, Some(Direction::Asc));
    assert_eq!(o.items[2].direction, None);
    assert!(
        matches!(&o.items[3].expr.kind, ExprKind::Nearest { prop, query } if prop.prop.name == "e" && var(query) == "v")
    );
    assert!(matches!(&o.items[4].expr.kind, ExprKind::Bm25 { .. }));
    let ExprKind::Rrf { first, second, k } = &o.items[5].expr.kind else { panic!() };
    assert!(matches!(first.kind, ExprKind::Nearest { .. }));
    assert!(matches!(second.kind, ExprKind::Bm25 { .. }));
    assert_eq!(k.as_ref().map(|k| k.kind.clone()), Some(ExprKind::Literal(Literal::Int(60))));
    assert_eq!(r.limit, Some(Limit { value: 5, pos: p(3, 2) }));
    // Order needs commas between keys.
    assert_err("query q() { match { $d: D } return { 1 } order { $d.a $d.b } }", "Q08", 1, 55);
}

#[test]
fn literals() {
    let c = clauses(
        r#"$p.a = "t\t\"q\"\\ \u{1F600}" $p.b = 0 $p.c = 18446744073709551615 $p.d = 0.25 $p.e = false $p.f = date("2024-01-02") $p.g = datetime("2024-01-02T03:04:05Z") $p.h = now() $p.i = [1, "a", [true], date("2020-01-01")] $p.j = []"#,
    );
    let rights: Vec<ExprKind> = c
        .iter()
        .map(|c| match c {
            Clause::Filter(f) => f.right.kind.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    let l = |l: Literal| ExprKind::Literal(l);
    assert_eq!(rights[0], l(Literal::String("t\t\"q\"\\ 😀".into())));
    assert_eq!(rights[1], l(Literal::Int(0)));
    assert_eq!(rights[2], l(Literal::Int(u64::MAX)));
    assert_eq!(rights[3], l(Literal::Float(0.25)));
    assert_eq!(rights[4], l(Literal::Bool(false)));
    assert_eq!(rights[5], l(Literal::Date("2024-01-02".into())));
    assert_eq!(rights[6], l(Literal::DateTime("2024-01-02T03:04:05Z".into())));
    assert_eq!(rights[7], ExprKind::Now);
    let ExprKind::Literal(Literal::List(items)) = &rights[8] else { panic!() };
    assert_eq!(items.len(), 4);
    assert!(matches!(&items[2].kind, ExprKind::Literal(Literal::List(inner)) if inner.len() == 1));
    assert_eq!(items[3].kind, l(Literal::Date("2020-01-01".into())));
    assert_eq!(rights[9], l(Literal::List(vec![])));
}

#[test]
fn keywords_are_contextual() {
    // Property names that look like keywords.
    let c = clauses("$e: Event { match: 1, date: 2 } $e.when >= $since $e.order = $e.limit");
    assert!(matches!(&c[0], Clause::Binding(b) if b.props[0].prop.name == "match" && b.props[1].prop.name == "date"));
    assert_eq!(c.len(), 3);
    // `$a contains $b` is a traversal over an edge named `contains`, as in
    // the reference grammar; with a literal it is a filter.
    let c = clauses("$a contains $b $a contains \"x\"");
    assert!(matches!(&c[0], Clause::Traversal(t) if t.edge.name == "contains"));
    assert!(matches!(&c[1], Clause::Filter(f) if f.op == FilterOp::Contains));
}

#[test]
fn insert_update_delete_shapes() {
    let m = muts(
        "query m($n: String, $a: I32) {\n  insert Person { name: $n, age: $a created: now() }\n  insert WorksAt { from: $n, to: \"acme\" }\n  update Person set { age: 31, } where name = $n\n}",
    );
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].pos, p(2, 3));
    assert_eq!(m[0].type_name.name, "Person");
    let MutationKind::Insert { assignments } = &m[0].kind else { panic!() };
    assert_eq!(assignments.len(), 3);
    assert_eq!(assignments[2].prop.name, "created");
    assert_eq!(assignments[2].value.kind, ExprKind::Now);
    assert_eq!(assignments[1].pos, p(2, 29));
    let MutationKind::Insert { assignments } = &m[1].kind else { panic!() };
    assert_eq!(assignments[0].prop.name, "from");
    assert_eq!(assignments[1].value.kind, ExprKind::Literal(Literal::String("acme".into())));
    let MutationKind::Update { assignments, predicate } = &m[2].kind else { panic!() };
    assert_eq!(assignments[0].value.kind, ExprKind::Literal(Literal::Int(31)));
    assert_eq!(predicate.prop.name, "name");
    assert_eq!(predicate.op, FilterOp::Eq);
    assert_eq!(var(&predicate.value), "n");
    assert_eq!(predicate.pos, p(4, 40));

    let m = muts("query d($id: String) { delete Knows where from != $id delete Person where age <= 3 }");
    assert!(m.iter().all(Mutation::is_delete));
    let MutationKind::Delete { predicate } = &m[1].kind else { panic!() };
    assert_eq!((predicate.prop.name.as_str(), predicate.op), ("age", FilterOp::Le));
}

#[test]
fn serializes_to_json() {
    let qs = parse_queries("query a($x: String?) { match { $p: P { n: $x } } return { $p.n as n } limit 1 }").unwrap();
    let json = serde_json::to_value(&qs).unwrap();
    assert_eq!(json[0]["name"], "a");
    assert_eq!(json[0]["params"][0]["ty"]["nullable"], true);
}

#[test]
fn comments_everywhere() {
    let q = one("query /* a */ q( /* b */ ) // c\n{ match { $p: P // d\n /* e */ } return { $p /* f */ } }");
    assert_eq!(q.name, "q");
}

// ----- robustness -------------------------------------------------------------

mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use std::time::{Duration, Instant};

    fn corpus() -> &'static [String] {
        static CORPUS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        CORPUS.get_or_init(load_corpus)
    }

    fn load_corpus() -> Vec<String> {
        let mut v: Vec<String> = fixture_sources().unwrap_or_default().into_iter().map(|(_, s)| s).collect();
        v.push(
            "query q($v: Vector(4)) @description(\"d\") { match { $a: A { x: [1, \"s\"] } $a $w:knows{1,2} $b not { $b <likes> $_ } search($a.t, \"x\") } return { count($a) as n } order { rrf(nearest($a.e, $v), bm25($a.t, \"q\")) } limit 3 }\nquery m() { update A set { x: now() } where y = date(\"2020-01-01\") }".to_string(),
        );
        v
    }

    fn check(src: &str) {
        let start = Instant::now();
        let _ = parse_queries(src);
        assert!(start.elapsed() < Duration::from_secs(2), "slow input");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arbitrary_strings_never_panic(s in "\\PC{0,400}") {
            check(&s);
        }

        #[test]
        fn grammar_soup_never_panics(parts in proptest::collection::vec(
            prop_oneof![
                Just("query"), Just("match"), Just("return"), Just("not"), Just("{"), Just("}"),
                Just("("), Just(")"), Just("["), Just("]"), Just("$a"), Just("$_"), Just(":"),
                Just("Person"), Just("knows"), Just("<"), Just(">"), Just(","), Just("1"),
                Just("\"s\""), Just("count"), Just("rrf"), Just("nearest"), Just("."), Just("="),
                Just("insert"), Just("delete"), Just("where"), Just("set"), Just("?"), Just("@description"),
            ],
            0..120,
        )) {
            check(&parts.join(" "));
        }

        #[test]
        fn mutated_fixtures_never_panic(
            pick in any::<prop::sample::Index>(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..16),
        ) {
            let corpus = corpus();
            let base = &corpus[pick.index(corpus.len())];
            let mut bytes = base.as_bytes().to_vec();
            for (at, b, mode) in edits {
                if bytes.is_empty() {
                    bytes.push(b);
                    continue;
                }
                let i = at.index(bytes.len());
                match mode {
                    0 => bytes[i] = b,
                    1 => bytes.insert(i, b),
                    _ => {
                        bytes.remove(i);
                    }
                }
            }
            let s = String::from_utf8_lossy(&bytes);
            check(&s);
        }
    }
}
