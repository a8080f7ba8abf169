//! One failing input per error code, pinning code, line and column, plus
//! parser round-trips of the grammar's less common forms.

use super::ast::{ConstraintKind, CoreType, Decl, Literal, Number};
use super::parse_schema;
use crate::lang::catalog::compile_schema;
use crate::lang::diag::Diagnostic;

fn err(src: &str) -> Diagnostic {
    match compile_schema(src) {
        Ok(_) => panic!("expected an error for:\n{src}"),
        Err(d) => d,
    }
}

/// Asserts `src` fails with `code` at `line:column`.
fn assert_err(src: &str, code: &str, line: u32, column: u32) -> Diagnostic {
    let d = err(src);
    assert_eq!((d.code.as_deref(), d.pos.line, d.pos.column), (Some(code), line, column), "unexpected diagnostic: {d}");
    d
}

#[test]
fn s01_unexpected_character() {
    assert_err("node A {\n  x: String $\n}", "S01", 2, 13);
}

#[test]
fn s02_unterminated_string_and_comment() {
    assert_err("node A {\n  x: String @description(\"abc\n}", "S02", 2, 26);
    assert_err("node A {}\n  /* never closed", "S02", 2, 3);
}

#[test]
fn s03_unexpected_token_says_what_was_expected() {
    let d = assert_err("node Person {\n  age {\n}", "S03", 2, 7);
    assert_eq!(d.message, "expected `:` after property name `age`, found `{`");
    assert_err("nodes A {}", "S03", 1, 1);
}

#[test]
fn s04_bad_number() {
    assert_err("edge E: A -> B @card(1..99999999999)", "S04", 1, 25);
    assert_err("node A @x(12abc) {}", "S04", 1, 11);
}

#[test]
fn s05_type_name_case() {
    assert_err("node person {}", "S05", 1, 6);
}

#[test]
fn s06_prop_name_case() {
    assert_err("node A {\n  Name: String\n}", "S06", 2, 3);
}

#[test]
fn s07_unknown_scalar() {
    assert_err("node A {\n  n: Integer\n}", "S07", 2, 6);
    assert_err("node A {\n  n: [Vector(3)]\n}", "S07", 2, 7);
}

#[test]
fn s08_duplicate_type() {
    assert_err("node A { x: String }\nnode A { y: String }", "S08", 2, 6);
    assert_err("node A { x: String }\nedge Knows: A -> A\nedge KNOWS: A -> A", "S08", 3, 6);
}

#[test]
fn s09_duplicate_prop() {
    assert_err("node A {\n  x: String\n  x: I32\n}", "S09", 3, 3);
    assert_err("interface I { x: String }\nnode A implements I {\n  x: I32\n}", "S09", 3, 3);
}

#[test]
fn s10_unknown_interface() {
    assert_err("node A implements Named {\n}", "S10", 1, 19);
}

#[test]
fn s11_unknown_node_type() {
    assert_err("node A { x: String }\nedge E: A -> B", "S11", 2, 14);
}

#[test]
fn s12_reserved_names() {
    assert_err("node A {\n  id: String\n}", "S12", 2, 3);
    assert_err("node A { x: String }\nedge E: A -> A {\n  src: String\n}", "S12", 3, 3);
    assert_err("node A {\n  x: String\n  _rowid: I64\n}", "S12", 3, 3);
}

#[test]
fn s13_unknown_prop_in_constraint() {
    assert_err("node A {\n  x: String\n  @key(y)\n}", "S13", 3, 8);
    assert_err("node A {\n  x: String\n  @unique(x, x)\n}", "S13", 3, 14);
    // src/dst are columns only for edges.
    assert_err("node A {\n  x: String\n  @unique(src)\n}", "S13", 3, 11);
}

#[test]
fn s14_misplaced_constraint() {
    assert_err("node A {\n  x: String\n}\nedge E: A -> A {\n  w: I32\n  @range(w, 0..1)\n}", "S14", 6, 3);
    assert_err("node A { x: String }\nedge E: A -> A {\n  w: I32 @key\n}", "S14", 3, 10);
    assert_err("node A @key { x: String }", "S14", 1, 8);
}

#[test]
fn s15_blob_constraint() {
    assert_err("node A {\n  b: Blob @index\n}", "S15", 2, 11);
}

#[test]
fn s16_vector_constraint() {
    assert_err("node A {\n  v: Vector(3) @key\n}", "S16", 2, 16);
}

#[test]
fn s17_nullable_key() {
    assert_err("node A {\n  x: String? @key\n}", "S17", 2, 14);
    assert_err("node A {\n  x: [String]\n  @key(x)\n}", "S17", 3, 8);
}

#[test]
fn s18_bad_embed() {
    assert_err("node A {\n  n: I32\n  v: Vector(3) @embed(\"n\")\n}", "S18", 3, 23);
    assert_err("node A {\n  t: String\n  s: String @embed(\"t\")\n}", "S18", 3, 13);
}

#[test]
fn s19_bad_check() {
    assert_err("node A {\n  x: String\n  @check(x, \"(abc\")\n}", "S19", 3, 13);
    assert_err("node A {\n  x: I32\n  @check(x, \"a\")\n}", "S19", 3, 10);
}

#[test]
fn s20_bad_card() {
    assert_err("node A { x: String }\nedge E: A -> A @card(3..1)", "S20", 2, 26);
}

#[test]
fn s21_bad_range() {
    assert_err("node A {\n  x: String\n  @range(x, 0..10)\n}", "S21", 3, 10);
    assert_err("node A {\n  x: I32\n  @range(x, 0.5..10)\n}", "S21", 3, 10);
    assert_err("node A {\n  x: F64\n  @range(x, 5..-1.5)\n}", "S21", 3, 10);
    assert_err("node A {\n  x: F64\n  @range(x, ..)\n}", "S21", 3, 13);
}

#[test]
fn s22_duplicate_key() {
    assert_err("node A {\n  x: String @key\n  y: String\n  @key(y)\n}", "S22", 4, 3);
}

#[test]
fn s23_bad_annotation_args() {
    assert_err("node A @description(1) {\n}", "S23", 1, 8);
    assert_err("node A {\n  x: String @description(\"a\") @description(\"b\")\n}", "S23", 2, 31);
}

#[test]
fn s24_bad_vector_dim() {
    assert_err("node A {\n  v: Vector(0)\n}", "S24", 2, 13);
}

#[test]
fn s25_duplicate_enum_value() {
    assert_err("node A {\n  e: enum(a, b, a)\n}", "S25", 2, 17);
}

#[test]
fn parses_every_grammar_form() {
    let src = r#"
        /* block */ interface Named { name: String @key }
        node Person @description("p") @rename_from("Human") @ui(color = "red", 3) implements Named {
            tags: [String]?
            mood: enum(i-owe, phase-1, a_b)?
            v: Vector(8) @embed("name", model = "m") @index
            age: I32
            @range(age, -5..150)
            @check(name, "^\w+$")
            @unique(name, age)
        }
        edge Knows: Person -> Person @card(0..) @weight { since: Date? @unique }
    "#;
    let schema = parse_schema(src).unwrap();
    assert_eq!(schema.decls.len(), 3);
    let Some(Decl::Node(node)) = schema.decls.get(1) else { panic!("node expected") };
    assert_eq!(node.annotations.len(), 3);
    assert!(matches!(node.annotations[2].named[0].1.value, Literal::Str(ref s) if s == "red"));
    assert!(matches!(&node.props[1].ty.core, CoreType::Enum(v) if v.len() == 3 && v[0].text == "i-owe"));
    assert!(node.props[1].ty.nullable);
    assert!(matches!(
        node.constraints[0].kind,
        ConstraintKind::Range { min: Some(Number::Int(-5)), max: Some(Number::Int(150)), .. }
    ));
    assert!(matches!(&node.constraints[1].kind, ConstraintKind::Check { pattern, .. } if pattern == "^\\w+$"));
    let Some(Decl::Edge(edge)) = schema.decls.get(2) else { panic!("edge expected") };
    assert_eq!(edge.card.as_ref().map(|c| (c.min, c.max)), Some((0, None)));
    assert_eq!(edge.annotations.len(), 1);
    assert_eq!(edge.props.len(), 1);
}

#[test]
fn empty_and_comment_only_sources_parse() {
    assert_eq!(parse_schema("").unwrap().decls.len(), 0);
    assert_eq!(parse_schema("// x\n/* y */").unwrap().decls.len(), 0);
}
