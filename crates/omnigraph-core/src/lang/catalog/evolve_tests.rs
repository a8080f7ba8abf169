//! Schema-apply planning: each kind of difference, its flags and table
//! changes, id collisions after renames, and rename chains.

use super::*;
use crate::lang::catalog::compile_schema;
use serde_json::json;

fn compile(src: &str) -> Catalog {
    match compile_schema(src) {
        Ok(c) => c,
        Err(d) => panic!("schema failed to compile: {d}\n{src}"),
    }
}

/// Plans `new` over a freshly compiled `old`, as the first apply after init.
fn plan_of(old: &str, new: &str, allow_data_loss: bool) -> EvolvePlan {
    plan(&compile(old), compile(new), allow_data_loss)
}

fn kinds(p: &EvolvePlan) -> Vec<StepKind> {
    p.steps.iter().map(|s| s.kind).collect()
}

fn only_step(p: &EvolvePlan) -> &Step {
    assert_eq!(p.steps.len(), 1, "{:#?}", p.steps);
    &p.steps[0]
}

fn node_id(c: &Catalog, name: &str) -> String {
    c.node(name).unwrap().table_id.clone()
}

const BASE: &str = r#"
node Person {
    name: String @key
    age: I32?
}
node Company { name: String @key }
edge Knows: Person -> Person { since: Date? }
edge WorksAt: Person -> Company @card(0..1)
"#;

/// `BASE` with `Person`'s body replaced.
fn person(body: &str) -> String {
    format!(
        "node Person {{\n{body}\n}}\nnode Company {{ name: String @key }}\n\
         edge Knows: Person -> Person {{ since: Date? }}\nedge WorksAt: Person -> Company @card(0..1)\n"
    )
}

#[test]
fn identical_schemas_are_a_noop() {
    let accepted = compile(BASE);
    let p = plan(&accepted, compile(BASE), true);
    assert!(p.is_noop() && p.supported() && p.unsupported().is_empty());
    assert!(p.tables.is_empty());
    assert_eq!(p.target, accepted);
    assert_eq!(person("    name: String @key\n    age: I32?"), BASE.trim_start());
}

#[test]
fn add_node_type() {
    let p = plan_of(BASE, &format!("{BASE}\nnode City {{ name: String @key }}"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.type_name.as_str(), s.detail.as_str()), (StepKind::AddType, "City", "add node type City"));
    assert!(s.supported && !s.validates && !s.data_loss && s.property.is_none());
    assert_eq!(
        p.tables,
        [TableChange {
            kind: TypeKind::Node,
            table_id: id::table_id(TypeKind::Node, "City"),
            old_key: None,
            new_key: Some("node:City".into()),
            columns: vec![],
            validate: false,
            hard_drop: false,
        }]
    );
}

#[test]
fn add_edge_type() {
    let p = plan_of(BASE, &format!("{BASE}\nedge Likes: Person -> Company"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.detail.as_str()), (StepKind::AddType, "add edge type Likes: Person -> Company"));
    assert_eq!(p.tables.len(), 1);
    let t = &p.tables[0];
    assert_eq!((t.kind, t.old_key.as_deref(), t.new_key.as_deref()), (TypeKind::Edge, None, Some("edge:Likes")));
    assert_eq!(t.table_id, id::table_id(TypeKind::Edge, "Likes"));
}

#[test]
fn drop_type_soft_and_hard() {
    let new = BASE.replace("edge Knows: Person -> Person { since: Date? }", "");
    let accepted = compile(BASE);
    for hard in [false, true] {
        let p = plan(&accepted, compile(&new), hard);
        let s = only_step(&p);
        assert_eq!((s.kind, s.type_name.as_str()), (StepKind::DropType, "Knows"));
        assert!(s.supported && !s.validates);
        assert_eq!(s.data_loss, hard);
        let want = if hard { "hard: its data is deleted" } else { "soft: its data is kept but hidden" };
        assert_eq!(s.detail, format!("drop edge type Knows ({want})"));
        assert_eq!(
            p.tables,
            [TableChange {
                kind: TypeKind::Edge,
                table_id: accepted.edge("Knows").unwrap().table_id.clone(),
                old_key: Some("edge:Knows".into()),
                new_key: None,
                columns: vec![],
                validate: false,
                hard_drop: hard,
            }]
        );
    }
}

#[test]
fn rename_type_keeps_its_table() {
    let accepted = compile(BASE);
    let new = BASE
        .replace("node Person {", "node Human @rename_from(\"Person\") {")
        .replace("Person -> Person", "Human -> Human")
        .replace("Person -> Company", "Human -> Company");
    let p = plan(&accepted, compile(&new), false);
    let s = only_step(&p);
    assert_eq!(
        (s.kind, s.type_name.as_str(), s.detail.as_str()),
        (StepKind::RenameType, "Human", "rename node type Person to Human")
    );
    assert!(s.supported && !s.validates);
    assert_eq!(node_id(&p.target, "Human"), node_id(&accepted, "Person"));
    assert_eq!(
        p.tables,
        [TableChange {
            kind: TypeKind::Node,
            table_id: node_id(&accepted, "Person"),
            old_key: Some("node:Person".into()),
            new_key: Some("node:Human".into()),
            columns: vec![],
            validate: false,
            hard_drop: false,
        }]
    );
    // The hint stays in the target catalog; the edges' renamed endpoint is no change.
    assert_eq!(p.target.node("Human").unwrap().meta.rename_from.as_deref(), Some("Person"));
    assert_eq!(p.target.node("Human").unwrap().properties, accepted.node("Person").unwrap().properties);
}

#[test]
fn rename_property() {
    let p = plan_of(BASE, &person("    name: String @key\n    years: I32? @rename_from(\"age\")"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.property.as_deref()), (StepKind::RenameProperty, Some("years")));
    assert_eq!(s.detail, "rename property `age` of Person to `years`");
    assert_eq!(p.tables.len(), 1);
    assert_eq!(p.tables[0].columns, [ColumnChange::Rename { from: "age".into(), to: "years".into() }]);
    assert_eq!(
        (p.tables[0].old_key.as_deref(), p.tables[0].new_key.as_deref()),
        (Some("node:Person"), Some("node:Person"))
    );
}

#[test]
fn add_nullable_property() {
    let p = plan_of(BASE, &person("    name: String @key\n    age: I32?\n    nickname: String?"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.property.as_deref()), (StepKind::AddProperty, Some("nickname")));
    assert_eq!(s.detail, "add nullable property `nickname: String?` to Person");
    assert!(s.supported && !s.validates);
    assert_eq!(p.tables[0].columns, [ColumnChange::Add { name: "nickname".into(), nullable: true, default: None }]);
    assert!(!p.tables[0].validate);
}

#[test]
fn add_required_property_needs_a_default() {
    let with = plan_of(
        BASE,
        &person("    name: String @key\n    age: I32?\n    rank: I32 @default(3)\n    vip: Bool @default(false)"),
        false,
    );
    assert!(with.supported(), "{:#?}", with.steps);
    assert_eq!(kinds(&with), [StepKind::AddProperty, StepKind::AddProperty]);
    assert_eq!(with.steps[0].detail, "add required property `rank: I32` to Person, filling existing rows with 3");
    assert_eq!(
        with.tables[0].columns,
        [
            ColumnChange::Add { name: "rank".into(), nullable: false, default: Some(json!(3)) },
            ColumnChange::Add { name: "vip".into(), nullable: false, default: Some(json!(false)) },
        ]
    );
    let without = plan_of(BASE, &person("    name: String @key\n    age: I32?\n    rank: I32"), false);
    let s = only_step(&without);
    assert!(!without.supported() && !s.supported);
    assert_eq!(without.unsupported(), [s]);
    assert_eq!(s.detail, "add property `rank: I32` to Person");
    let reason = s.reason.as_deref().unwrap();
    assert!(reason.contains("@default(<value>)") && reason.contains("nullable"), "{reason}");
    assert!(without.tables.is_empty(), "an unsupported add has no column change");
    let warned = crate::lang::catalog::warnings::schema_warnings("node T { k: String @key n: I32 @default(1) }");
    assert!(warned.is_empty(), "`@default` is a known annotation: {warned:?}");
}

#[test]
fn defaults_of_each_type_convert_to_json() {
    let body = "    name: String @key\n    age: I32?\n    a: String @default(\"x\")\n    b: enum(lo, hi) @default(hi)\n    \
                c: enum(lo, hi) @default(\"lo\")\n    d: Date @default(\"2024-02-29\")\n    \
                e: DateTime @default(\"2024-01-01T00:00:00Z\")\n    f: F64 @default(2)\n    g: F32 @default(1.5)\n    \
                h: U64 @default(7)\n    i: I64? @default(-4)";
    let p = plan_of(BASE, &person(body), false);
    assert!(p.supported(), "{:#?}", p.unsupported());
    let defaults: Vec<Option<Value>> = p.tables[0]
        .columns
        .iter()
        .map(|c| match c {
            ColumnChange::Add { default, .. } => default.clone(),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let want = [
        json!("x"),
        json!("hi"),
        json!("lo"),
        json!("2024-02-29"),
        json!("2024-01-01T00:00:00Z"),
        json!(2.0),
        json!(1.5),
        json!(7),
        json!(-4),
    ];
    assert_eq!(defaults, want.map(Some));
    assert!(matches!(&p.tables[0].columns[8], ColumnChange::Add { nullable: true, .. }));
}

#[test]
fn defaults_that_do_not_fit_are_unsupported() {
    let cases = [
        ("rank: I32 @default(\"x\")", "does not fit `rank: I32`: expected an integer that fits I32"),
        ("rank: I32 @default(3000000000)", "expected an integer that fits I32"),
        ("rank: U32 @default(-1)", "expected an integer that fits U32"),
        ("tier: enum(a, b) @default(c)", "expected one of a, b"),
        ("day: Date @default(\"2023-02-29\")", "expected a date string"),
        ("on: Bool @default(1)", "expected true or false"),
        ("w: F32 @default(true)", "expected a F32 number"),
        ("label: String @default(label)", "expected a string"),
        ("label: String @default(\"a\", \"b\")", "expects exactly one literal"),
        ("tags: [String] @default(\"a\")", "add `tags` nullable"),
        ("emb: Vector(3)", "add `emb` nullable"),
        ("tags: [String]? @default(\"a\")", "`@default` is not supported on [String] properties"),
        ("nick: String? @default(1)", "does not fit `nick: String`"),
    ];
    for (prop, want) in cases {
        let p = plan_of(BASE, &person(&format!("    name: String @key\n    age: I32?\n    {prop}")), false);
        let s = only_step(&p);
        assert_eq!(s.kind, StepKind::AddProperty);
        assert!(!s.supported, "{prop}");
        let reason = s.reason.as_deref().unwrap_or_default();
        assert!(reason.contains(want), "{prop}: {reason}");
        assert!(p.tables.is_empty());
    }
}

#[test]
fn drop_property_soft_and_hard() {
    let accepted = compile(BASE);
    for hard in [false, true] {
        let p = plan(&accepted, compile(&person("    name: String @key")), hard);
        let s = only_step(&p);
        assert_eq!((s.kind, s.property.as_deref(), s.data_loss), (StepKind::DropProperty, Some("age"), hard));
        assert!(s.supported);
        assert_eq!(p.tables[0].columns, [ColumnChange::Drop { name: "age".into(), hard }]);
        assert!(!p.tables[0].hard_drop, "only dropped types are hard-dropped tables");
    }
}

#[test]
fn dropping_or_changing_the_key_is_unsupported() {
    let p = plan_of(BASE, &person("    age: I32?"), true);
    let s = only_step(&p);
    assert_eq!((s.kind, s.property.as_deref()), (StepKind::ChangeKey, Some("name")));
    assert_eq!(s.detail, "drop key property `name` from Person");
    assert!(!s.supported && s.reason.as_deref().unwrap().contains("derived from the key"));
    assert!(p.tables.is_empty());

    let moved = plan_of(BASE, &person("    name: String\n    age: I32 @key"), false);
    assert_eq!(kinds(&moved), [StepKind::ChangeKey, StepKind::TightenNullability]);
    assert_eq!(moved.steps[0].detail, "change the key of Person from (name) to (age)");
    assert!(!moved.supported());

    // Composite ids follow declaration order, so reordering key properties re-identifies nodes.
    let old = "node P { a: String b: String @key(a, b) }";
    assert!(plan_of(old, "node P { a: String b: String @key(b, a) }", false).is_noop());
    let swapped = plan_of(old, "node P { b: String a: String @key(a, b) }", false);
    assert_eq!(kinds(&swapped), [StepKind::ChangeKey, StepKind::ChangeMetadata]);
    assert_eq!(swapped.steps[0].detail, "change the key of P from (a, b) to (b, a)");
    assert_eq!(swapped.steps[1].detail, "reorder the properties of P");

    // Renaming a key property keeps its id, so the key is unchanged.
    let renamed = plan_of(BASE, &person("    full: String @key @rename_from(\"name\")\n    age: I32?"), false);
    assert_eq!(kinds(&renamed), [StepKind::RenameProperty]);
    assert!(renamed.supported());
}

#[test]
fn enum_widen_and_narrow() {
    let old = "node T { k: String @key s: enum(a, b, c) }";
    let widen = plan_of(old, "node T { k: String @key s: enum(a, b, c, d) }", false);
    let s = only_step(&widen);
    assert_eq!((s.kind, s.detail.as_str()), (StepKind::WidenEnum, "widen enum `s` of T: add d"));
    assert!(s.supported && !s.validates);
    assert!(widen.tables.is_empty(), "widening is metadata-only");

    let narrow = plan_of(old, "node T { k: String @key s: enum(a, c, e) }", false);
    let s = only_step(&narrow);
    assert_eq!((s.kind, s.detail.as_str()), (StepKind::NarrowEnum, "narrow enum `s` of T: remove b, add e"));
    assert!(s.supported && s.validates);
    assert_eq!(narrow.tables.len(), 1);
    assert!(narrow.tables[0].validate && narrow.tables[0].columns.is_empty());

    let reorder = plan_of(old, "node T { k: String @key s: enum(c, b, a) }", false);
    assert_eq!(kinds(&reorder), [StepKind::ChangeMetadata]);
    assert!(reorder.tables.is_empty());
}

#[test]
fn relax_and_tighten_nullability() {
    let tighten = plan_of(BASE, &BASE.replace("since: Date?", "since: Date"), false);
    let s = only_step(&tighten);
    assert_eq!(
        (s.kind, s.type_name.as_str(), s.detail.as_str()),
        (StepKind::TightenNullability, "Knows", "make property `since` of Knows required")
    );
    assert!(s.supported && s.validates);
    let t = &tighten.tables[0];
    assert_eq!((t.kind, t.validate), (TypeKind::Edge, true));
    assert_eq!(t.columns, [ColumnChange::SetNullable { name: "since".into(), nullable: false }]);

    let p = plan_of("node T { k: String @key n: I32 }", "node T { k: String @key n: I32? }", false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.validates), (StepKind::RelaxNullability, false));
    assert_eq!(p.tables[0].columns, [ColumnChange::SetNullable { name: "n".into(), nullable: true }]);
    assert!(!p.tables[0].validate);
}

#[test]
fn rename_with_nullability_change_orders_columns() {
    let p = plan_of("node T { k: String @key n: I32 }", "node T { k: String @key m: I32? @rename_from(\"n\") }", false);
    assert_eq!(kinds(&p), [StepKind::RenameProperty, StepKind::RelaxNullability]);
    assert_eq!(
        p.tables[0].columns,
        [
            ColumnChange::Rename { from: "n".into(), to: "m".into() },
            ColumnChange::SetNullable { name: "m".into(), nullable: true },
        ]
    );
}

#[test]
fn add_and_remove_constraints() {
    let old = "node T { k: String @key a: String b: I32 c: String? }";
    let new = "node T { k: String @key a: String @unique b: I32 @index c: String? @range(b, 0..10) @check(a, \"^x\") }";
    let added = plan_of(old, new, false);
    assert_eq!(kinds(&added), [StepKind::AddConstraint; 4]);
    let flags: Vec<(&str, Option<&str>, bool)> =
        added.steps.iter().map(|s| (s.detail.as_str(), s.property.as_deref(), s.validates)).collect();
    assert_eq!(
        flags,
        [
            ("add @unique(a) to T", Some("a"), true),
            ("add @index(b) to T", Some("b"), false),
            ("add @range(b, 0..10) to T", Some("b"), true),
            ("add @check(a, \"^x\") to T", Some("a"), true),
        ]
    );
    assert_eq!(added.tables.len(), 1);
    assert!(added.tables[0].validate && added.tables[0].columns.is_empty());

    let removed = plan_of(new, old, false);
    assert_eq!(kinds(&removed), [StepKind::RemoveConstraint; 4]);
    assert!(removed.steps.iter().all(|s| s.supported && !s.validates && s.detail.starts_with("remove @")));
    assert!(removed.tables.is_empty(), "removing constraints needs no table change");

    let index_only = plan_of(old, "node T { k: String @key a: String b: I32 c: String? @index(c, a) }", false);
    assert_eq!(only_step(&index_only).detail, "add @index(a, c) to T");
    assert!(index_only.steps[0].property.is_none());
    assert!(index_only.tables.is_empty(), "a new index needs no validation");
}

#[test]
fn constraints_follow_property_renames() {
    let old = "node T { k: String @key a: String @unique b: I32 @range(b, 1..) @check(a, \"^x\") }";
    let new = "node T { k: String @key z: String @unique @rename_from(\"a\") b: I32 @range(b, 1..) @check(z, \"^x\") }";
    let p = plan_of(old, new, false);
    assert_eq!(kinds(&p), [StepKind::RenameProperty]);
    let changed = plan_of(old, &new.replace("1..", "2.."), false);
    assert_eq!(kinds(&changed), [StepKind::RenameProperty, StepKind::AddConstraint, StepKind::RemoveConstraint]);
    assert_eq!(changed.steps[1].detail, "add @range(b, 2..) to T");
    assert!(changed.tables[0].validate);
}

#[test]
fn edge_constraints_and_unique_sets() {
    let old = "node N { k: String @key } edge E: N -> N { w: I32? }";
    let p = plan_of(old, "node N { k: String @key } edge E: N -> N { w: I32? @unique(dst, src) }", false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.detail.as_str(), s.validates), (StepKind::AddConstraint, "add @unique(dst, src) to E", true));
    assert_eq!((p.tables[0].kind, p.tables[0].validate), (TypeKind::Edge, true));
    let same = plan_of(
        "node N { k: String @key } edge E: N -> N { @unique(src, dst) }",
        "node N { k: String @key } edge E: N -> N { @unique(dst, src) }",
        false,
    );
    assert!(same.is_noop(), "unique column sets are sets");
}

#[test]
fn cardinality_changes() {
    let with_card = |card: &str| BASE.replace("@card(0..1)", card);
    let cases = [("@card(0..2)", false), ("@card(1..1)", true), ("", false), ("@card(0..0)", true)];
    for (card, validates) in cases {
        let p = plan_of(BASE, &with_card(card), false);
        let s = only_step(&p);
        assert_eq!(
            (s.kind, s.type_name.as_str(), s.validates),
            (StepKind::ChangeCardinality, "WorksAt", validates),
            "{card}"
        );
        assert!(s.supported);
        assert_eq!(p.tables.len(), usize::from(validates), "{card}");
    }
    let from_unbounded = plan_of(&with_card(""), &with_card("@card(0..5)"), false);
    assert_eq!(only_step(&from_unbounded).detail, "change the cardinality of WorksAt from @card(0..) to @card(0..5)");
    assert!(from_unbounded.steps[0].validates);
}

/// `@merge` policies compile on types and properties, are refused with a
/// bad argument, and a change of one is a metadata step of `schema plan`.
#[test]
fn merge_policies_compile_and_plan() {
    use crate::three_way::MergePolicy;
    let new = "node T @merge(theirs) { k: String @key n: I32? @merge(newest) m: I32? }";
    let catalog = crate::lang::catalog::compile_schema(new).expect("compiles");
    let t = catalog.type_def("T").expect("T");
    assert_eq!(t.merge_policy(None), Some(MergePolicy::Theirs));
    assert_eq!(t.merge_policy(Some("n")), Some(MergePolicy::Newest));
    assert_eq!(t.merge_policy(Some("m")), Some(MergePolicy::Theirs), "a property without one takes the type's");
    for bad in ["node T @merge(mine) { k: String @key }", "node T @merge(ours) @merge(theirs) { k: String @key }"] {
        assert!(crate::lang::catalog::compile_schema(bad).is_err(), "{bad}");
    }
    let p = plan_of("node T { k: String @key n: I32? m: I32? }", new, false);
    let details: Vec<&str> = p.steps.iter().map(|s| s.detail.as_str()).collect();
    assert_eq!(details, ["change the merge policy of property `n` of T", "change the merge policy of T"]);
    assert!(p.supported() && p.tables.is_empty(), "a policy is metadata: no table is rewritten");
}

#[test]
fn metadata_changes() {
    let old = "node T @description(\"a\") { k: String @key n: I32? }";
    let p =
        plan_of(old, "node T @description(\"b\") @ui(x = 1) { k: String @key n: I32? @instruction(\"fill\") }", false);
    assert_eq!(kinds(&p), [StepKind::ChangeMetadata; 3]);
    let details: Vec<&str> = p.steps.iter().map(|s| s.detail.as_str()).collect();
    assert_eq!(
        details,
        [
            "change the instruction of property `n` of T",
            "change the description of T",
            "change the custom annotations of T"
        ]
    );
    assert_eq!(p.steps[0].property.as_deref(), Some("n"));
    assert!(p.supported() && p.tables.is_empty());

    let iface = plan_of(
        "interface I { k: String @key } node T implements I { n: I32? }",
        "interface I { k: String @key @description(\"d\") } node T implements I { n: I32? }",
        false,
    );
    assert_eq!(kinds(&iface), [StepKind::ChangeMetadata, StepKind::ChangeMetadata]);
    assert_eq!(iface.steps[0].detail, "change the description of property `k` of T");
    assert_eq!(iface.steps[1].detail, "change interface I");

    let embeds = plan_of(
        "node D { k: String @key body: String e: Vector(2) @embed(\"body\") }",
        "node D { k: String @key text: String @rename_from(\"body\") e: Vector(2) @embed(\"text\") }",
        false,
    );
    assert_eq!(kinds(&embeds), [StepKind::RenameProperty], "embed sources follow renames");
}

#[test]
fn property_type_change_is_unsupported() {
    let p = plan_of(BASE, &person("    name: String @key\n    age: I64?"), false);
    let s = only_step(&p);
    assert_eq!(
        (s.kind, s.detail.as_str()),
        (StepKind::ChangePropertyType, "change the type of `age` of Person from I32 to I64")
    );
    assert!(!s.supported && s.reason.is_some());
    let list = plan_of(BASE, &person("    name: String @key\n    age: [I32]"), false);
    assert_eq!(kinds(&list), [StepKind::ChangePropertyType, StepKind::TightenNullability]);
    assert_eq!(list.steps[0].detail, "change the type of `age` of Person from I32 to [I32]");
}

#[test]
fn endpoint_changes() {
    let p = plan_of(BASE, &BASE.replace("Knows: Person -> Person", "Knows: Person -> Company"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.type_name.as_str()), (StepKind::ChangeEndpoints, "Knows"));
    assert_eq!(s.detail, "change the endpoints of Knows from Person -> Person to Person -> Company");
    assert!(!s.supported);
}

#[test]
fn reordering_properties_is_metadata() {
    let p = plan_of("node T { k: String @key a: I32? b: I32? }", "node T { k: String @key b: I32? a: I32? }", false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.detail.as_str()), (StepKind::ChangeMetadata, "reorder the properties of T"));
    assert!(p.tables.is_empty());
    let inserted = plan_of("node T { k: String @key a: I32? }", "node T { k: String @key x: I32? a: I32? }", false);
    assert_eq!(kinds(&inserted), [StepKind::AddProperty], "an insertion is not a reorder");
}

#[test]
fn new_type_with_a_renamed_types_old_name_gets_a_fresh_id() {
    let accepted = compile("node Person { name: String @key }");
    let renamed = plan(&accepted, compile("node Human @rename_from(\"Person\") { name: String @key }"), false);
    assert_eq!(kinds(&renamed), [StepKind::RenameType]);
    let accepted = renamed.target;
    let person_id = id::table_id(TypeKind::Node, "Person");
    assert_eq!(node_id(&accepted, "Human"), person_id);

    let src = "node Human { name: String @key }\nnode Person { name: String @key }";
    let p = plan(&accepted, compile(src), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.type_name.as_str()), (StepKind::AddType, "Person"));
    let fresh = node_id(&p.target, "Person");
    assert_eq!(fresh, id::table_id(TypeKind::Node, "Person#2"));
    assert_eq!(node_id(&p.target, "Human"), person_id);
    assert_eq!(p.tables.len(), 1);
    assert_eq!((p.tables[0].table_id.as_str(), p.tables[0].old_key.as_deref()), (fresh.as_str(), None));

    // Next apply: the re-derived id is adopted by name and stays.
    let again = plan(&p.target, compile(src), false);
    assert!(again.is_noop());
    assert_eq!(node_id(&again.target, "Person"), fresh);
}

#[test]
fn new_property_with_a_renamed_propertys_old_name_gets_a_fresh_id() {
    let accepted = compile("node T { k: String @key n: I32? }");
    let renamed = plan(&accepted, compile("node T { k: String @key m: I32? @rename_from(\"n\") }"), false);
    let accepted = renamed.target;
    let p = plan(&accepted, compile("node T { k: String @key m: I32? n: String? }"), false);
    let s = only_step(&p);
    assert_eq!((s.kind, s.property.as_deref()), (StepKind::AddProperty, Some("n")));
    let t = p.target.node("T").unwrap();
    assert_eq!(t.properties[1].prop_id, id::prop_id("T", "n"), "m keeps n's original id");
    assert_eq!(t.properties[2].prop_id, id::prop_id("T", "n#2"));
}

#[test]
fn reserved_ids_are_avoided() {
    let accepted = compile("node A { k: String @key }");
    let reserved = [id::table_id(TypeKind::Node, "B")];
    let p = plan_reserving(&accepted, compile("node A { k: String @key } node B { k: String @key }"), false, &reserved);
    assert_eq!(kinds(&p), [StepKind::AddType]);
    assert_eq!(node_id(&p.target, "B"), id::table_id(TypeKind::Node, "B#2"));
}

#[test]
fn rename_hints_claiming_a_held_type_or_property_are_unsupported() {
    let accepted = compile("node Person { name: String @key nick: String? }");
    let p = plan(
        &accepted,
        compile(
            "node Human @rename_from(\"Person\") { name: String @key }\nnode Person { name: String @key nick: String? }",
        ),
        false,
    );
    let s = only_step(&p);
    assert_eq!((s.kind, s.type_name.as_str(), s.supported), (StepKind::RenameType, "Human", false));
    assert!(s.reason.as_deref().unwrap().contains("already matched by `Person`"));
    assert_ne!(node_id(&p.target, "Human"), node_id(&p.target, "Person"));
    assert_eq!(node_id(&p.target, "Person"), node_id(&accepted, "Person"));
    assert_eq!(p.target.node("Human").unwrap().properties[0].prop_id, id::prop_id("Human", "name"));
    assert!(p.tables.is_empty());

    let props = plan(
        &accepted,
        compile("node Person { name: String @key nick: String? alias: String? @rename_from(\"nick\") }"),
        false,
    );
    let s = only_step(&props);
    assert_eq!((s.kind, s.property.as_deref(), s.supported), (StepKind::RenameProperty, Some("alias"), false));
    let person = props.target.node("Person").unwrap();
    assert_ne!(person.properties[1].prop_id, person.properties[2].prop_id);
}

#[test]
fn stale_rename_hint_is_named_in_the_add() {
    let p = plan_of(
        "node A { k: String @key }",
        "node A { k: String @key } node B @rename_from(\"Gone\") { k: String @key }",
        false,
    );
    assert_eq!(only_step(&p).detail, "add node type B (its @rename_from(\"Gone\") names no accepted node type)");
}

#[test]
fn removing_the_hint_after_a_rename_is_a_noop() {
    let old = "node Person { name: String @key age: I32? } edge Knows: Person -> Person";
    let first = plan_of(
        old,
        "node Human @rename_from(\"Person\") { name: String @key years: I32? @rename_from(\"age\") } edge Knows: Human -> Human",
        false,
    );
    assert_eq!(kinds(&first), [StepKind::RenameType, StepKind::RenameProperty]);
    assert!(first.supported());
    let second =
        plan(&first.target, compile("node Human { name: String @key years: I32? } edge Knows: Human -> Human"), false);
    assert!(second.is_noop(), "{:#?}", second.steps);
    assert!(second.tables.is_empty());
    assert_eq!(node_id(&second.target, "Human"), node_id(&first.target, "Human"));
}

#[test]
fn steps_serialise_in_snake_case_without_empty_fields() {
    let p = plan_of(BASE, &format!("{BASE}\nnode City {{ name: String @key }}"), false);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(
        json,
        json!({"steps": [{
            "kind": "add_type", "type_name": "City", "detail": "add node type City",
            "supported": true, "data_loss": false, "validates": false
        }]})
    );
    let bad = plan_of(BASE, &person("    name: String @key\n    age: I64?"), false);
    let step = serde_json::to_value(&bad.steps[0]).unwrap();
    assert_eq!(step["kind"], "change_property_type");
    assert_eq!(step["property"], "age");
    assert!(step["reason"].is_string());
}

#[test]
fn steps_are_ordered_by_type_then_change() {
    let new = "node Company { name: String @key }\nnode Person { name: String @key nick: String? }\n\
               edge WorksAt: Person -> Company @card(0..1)\nnode City { name: String @key }";
    let p = plan_of(BASE, new, false);
    let order: Vec<(StepKind, &str)> = p.steps.iter().map(|s| (s.kind, s.type_name.as_str())).collect();
    assert_eq!(
        order,
        [
            (StepKind::AddProperty, "Person"),
            (StepKind::DropProperty, "Person"),
            (StepKind::AddType, "City"),
            (StepKind::DropType, "Knows"),
        ]
    );
    let ids: Vec<&str> = p.tables.iter().map(|t| t.table_id.as_str()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
    assert_eq!(p.tables.len(), 3);
}
