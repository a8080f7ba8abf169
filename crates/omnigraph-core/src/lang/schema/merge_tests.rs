//! Three-way schema merges and the renderer they store their result with.

use super::merge::{SchemaConflict, merge};
use super::{parse_schema, render};
use crate::lang::catalog::compile_schema;

const BASE: &str = r#"
interface Named { name: String @key }
node Person @description("Someone") {
    name: String @key
    email: String? @unique
    age: I32?
    role: enum(engineer, designer)?
    @range(age, 0..150)
    @check(email, "^[^@]+@[^@\\s]+$")
}
node Company implements Named { founded: Date? @description("Year \"founded\"") }
edge Knows: Person -> Person { since: Date? weight: F64? @merge(newest) }
edge WorksAt: Person -> Company @card(0..1)
"#;

fn merged(base: &str, ours: &str, theirs: &str) -> Result<String, Vec<SchemaConflict>> {
    let p = |s: &str| parse_schema(s).expect("parses");
    merge(&p(base), &p(ours), &p(theirs)).map(|s| render::schema(&s))
}

/// `BASE` with `from` replaced by `to` (which must occur once).
fn edit(from: &str, to: &str) -> String {
    assert_eq!(BASE.matches(from).count(), 1, "{from}");
    BASE.replacen(from, to, 1)
}

/// Whether two schemas differ in declaration order at most.
fn same_schema(a: &str, b: &str) -> bool {
    let c = |s: &str| compile_schema(s).expect("compiles");
    crate::lang::catalog::evolve::plan(&c(a), c(b), false).is_noop()
}

fn identity(src: &str) -> String {
    compile_schema(src).unwrap_or_else(|e| panic!("{e:?}\n{src}")).identity()
}

#[test]
fn rendering_parses_back_to_the_same_catalog() {
    let first = render::schema(&parse_schema(BASE).expect("parses"));
    let second = render::schema(&parse_schema(&first).expect("rendered text parses"));
    assert_eq!(first, second);
    assert_eq!(identity(&first), identity(BASE));
    let social = include_str!("../../../../../examples/social.pg");
    assert_eq!(identity(&render::schema(&parse_schema(social).expect("parses"))), identity(social));
}

#[test]
fn a_change_on_one_side_is_taken_from_either_side() {
    let ours = edit("node Company", "node Team { name: String @key }\nnode Company");
    let theirs = edit("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    let out = merged(BASE, &ours, &theirs).expect("merges");
    assert!(out.contains("node Team {") && out.contains("nickname: String?"), "{out}");
    // Both ways round, the same schema.
    let other = merged(BASE, &theirs, &ours).expect("merges");
    assert!(same_schema(&out, &other), "{out}\n{other}");
    assert_eq!(merged(BASE, BASE, &theirs).map(|s| identity(&s)), Ok(identity(&theirs)));
    assert_eq!(merged(BASE, &ours, BASE).map(|s| identity(&s)), Ok(identity(&ours)));
}

#[test]
fn properties_added_to_one_type_on_both_sides_are_both_kept() {
    let ours = edit("    age: I32?\n", "    age: I32?\n    city: String?\n");
    let theirs = edit("    age: I32?\n", "    age: I32?\n    nickname: String? @index\n");
    let out = merged(BASE, &ours, &theirs).expect("merges");
    let at = |text: &str| out.find(text).unwrap_or_else(|| panic!("{text}: {out}"));
    // Both added after `age`: ours' first, then theirs', both before `role`.
    assert!(at("age: I32?") < at("city: String?"), "{out}");
    assert!(at("city: String?") < at("nickname: String? @index"), "{out}");
    assert!(at("nickname: String? @index") < at("role:"), "{out}");
    identity(&out);
}

#[test]
fn the_same_change_on_both_sides_is_taken_once() {
    let both = edit("    age: I32?\n", "    age: I32?\n    city: String?\n");
    let out = merged(BASE, &both, &both).expect("merges");
    assert_eq!(out.matches("city:").count(), 1, "{out}");
    assert_eq!(identity(&out), identity(&both));
}

#[test]
fn a_rename_on_one_side_meets_a_change_of_the_old_name_on_the_other() {
    let theirs = edit("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    let ours = edit("    age: I32?\n", "    age: I32? @description(\"In years\")\n");
    // Both changed `age`: ours its description, theirs its name.
    let conflicts = merged(BASE, &ours, &theirs).expect_err("both changed age");
    assert_eq!(conflicts.len(), 1, "{conflicts:?}");
    assert_eq!(conflicts[0].property.as_deref(), Some("age"));
    // A rename alone, beside an unrelated change, is taken.
    let ours = edit("node Company", "node Team { name: String @key }\nnode Company");
    let out = merged(BASE, &ours, &theirs).expect("merges");
    assert!(out.contains("years: I32? @rename_from(\"age\")") && out.contains("@range(years, 0..150)"), "{out}");
    assert!(!out.contains("age:") && !out.contains("@range(age"), "{out}");
    identity(&out);
}

#[test]
fn one_property_changed_two_ways_is_a_conflict_with_all_three_declarations() {
    let ours = edit("    age: I32?\n", "    age: I64?\n");
    let theirs = edit("    age: I32?\n", "    age: String?\n");
    let conflicts = merged(BASE, &ours, &theirs).expect_err("conflicts");
    assert_eq!(
        conflicts,
        vec![SchemaConflict {
            type_name: "Person".into(),
            property: Some("age".into()),
            reason: "both sides changed it differently".into(),
            base: Some("age: I32?".into()),
            ours: Some("age: I64?".into()),
            theirs: Some("age: String?".into()),
        }]
    );
}

#[test]
fn a_drop_against_a_change_and_two_different_additions_conflict() {
    let ours = edit("since: Date? weight", "since: DateTime? weight");
    let theirs = edit("edge Knows: Person -> Person { since: Date? weight: F64? @merge(newest) }\n", "");
    let conflicts = merged(BASE, &ours, &theirs).expect_err("conflicts");
    assert_eq!(conflicts.len(), 1);
    assert_eq!((conflicts[0].type_name.as_str(), conflicts[0].theirs.as_deref()), ("Knows", None));
    assert!(conflicts[0].ours.as_deref().is_some_and(|d| d.contains("since: DateTime?")));

    let ours = edit("node Company", "node Team { name: String @key }\nnode Company");
    let theirs = edit("node Company", "node Team { name: String @key size: I32? }\nnode Company");
    // Added on both sides: what they share once, each side's additions kept.
    let out = merged(BASE, &ours, &theirs).expect("merges");
    assert!(out.contains("node Team {\n    name: String @key\n    size: I32?\n}"), "{out}");
    let ours = edit("node Company", "node Team { name: String @key size: I64? }\nnode Company");
    let conflicts = merged(BASE, &ours, &theirs).expect_err("conflicts");
    assert_eq!((conflicts[0].type_name.as_str(), conflicts[0].property.as_deref()), ("Team", Some("size")));
    assert_eq!(conflicts[0].reason, "both sides added it differently");
}

#[test]
fn headers_merge_whole_and_constraints_as_sets() {
    let ours = edit("edge WorksAt: Person -> Company @card(0..1)", "edge WorksAt: Person -> Company @card(1..1)");
    let theirs = edit("edge WorksAt: Person -> Company @card(0..1)", "edge WorksAt: Person -> Company @card(0..3)");
    let conflicts = merged(BASE, &ours, &theirs).expect_err("conflicts");
    assert_eq!(conflicts[0].type_name, "WorksAt");
    assert!(conflicts[0].property.is_none());

    // Ours adds an index, theirs removes the range: both taken.
    let ours = edit("    @range(age, 0..150)\n", "    @range(age, 0..150)\n    @index(age)\n");
    let theirs = edit("    @range(age, 0..150)\n", "");
    let out = merged(BASE, &ours, &theirs).expect("merges");
    assert!(out.contains("@index(age)") && !out.contains("@range"), "{out}");
    identity(&out);
}
