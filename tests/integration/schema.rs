//! Schema evolution through the CLI, as real processes: for each supported
//! change kind, plan (writes nothing), apply (one commit), query the new
//! shape, and time-travel to the commit before the apply, where the old
//! shape still answers. Refusals (unsupported steps, tightened rules broken
//! by existing rows, live branches) write nothing. The embedded and HTTP
//! surfaces are covered at the end.

use std::process::Output;

use serde_json::{Value, json};

use crate::common::{SOCIAL_PG, temp_graph_dir};

fn omnigraph(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run omnigraph")
}

fn ok_json(args: &[&str]) -> Value {
    let out = omnigraph(args);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "omnigraph {args:?}: {said}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e})"))
}

/// A graph holding the example schema and data; returns its location, the
/// directory (kept alive) and the head commit before any apply.
fn example_graph() -> (tempfile::TempDir, String, String) {
    let (dir, loc) = temp_graph_dir();
    let ex = env!("CARGO_MANIFEST_DIR");
    ok_json(&["init", "--json", "--schema", &format!("{ex}/examples/social.pg"), &loc]);
    let data = format!("{ex}/examples/social.jsonl");
    ok_json(&["load", "--json", "--data", &data, "--mode", "overwrite", &loc]);
    let head = ok_json(&["snapshot", "--json", &loc])["head_commit_id"].as_str().expect("head").to_string();
    (dir, loc, head)
}

fn query(loc: &str, src: &str, commit: Option<&str>) -> Output {
    let mut args = vec!["query", "--json", "-e", src];
    if let Some(c) = commit {
        args.extend(["--commit", c]);
    }
    args.push(loc);
    omnigraph(&args)
}

fn rows(loc: &str, src: &str, commit: Option<&str>) -> Value {
    let out = query(loc, src, commit);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{src} at {commit:?}: {said}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("query json");
    v["rows"].clone()
}

fn commit_count(loc: &str) -> usize {
    ok_json(&["commit", "list", "--json", loc]).as_array().expect("commit list").len()
}

/// Write `schema` next to the graph and return its path.
fn schema_file(dir: &tempfile::TempDir, schema: &str) -> String {
    let path = dir.path().join("target.pg");
    std::fs::write(&path, schema).expect("write schema");
    path.to_string_lossy().to_string()
}

/// One supported change: the target schema, the step kind the plan must
/// show, a query of the new shape with its rows, and a query of the old
/// shape that answers at the commit before the apply.
struct Case {
    name: &'static str,
    schema: String,
    kind: &'static str,
    new_query: &'static str,
    new_rows: Value,
    old_query: &'static str,
    old_rows: Value,
}

fn social(edit: impl Fn(&str) -> String) -> String {
    edit(SOCIAL_PG)
}

fn cases() -> Vec<Case> {
    let names = json!([{"p.name": "Alice"}, {"p.name": "Bob"}, {"p.name": "Carol"}]);
    let ages = json!([{"p.age": 31}, {"p.age": 27}, {"p.age": 45}]);
    vec![
        Case {
            name: "add a node type",
            schema: format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n"),
            kind: "add_type",
            new_query: "query q() { match { $t: Team } return { $t.name } }",
            new_rows: json!([]),
            old_query: "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            old_rows: names.clone(),
        },
        Case {
            name: "add an edge type",
            schema: format!("{SOCIAL_PG}\nedge Mentors: Person -> Person\n"),
            kind: "add_type",
            new_query: "query q() { match { $a: Person $a mentors $b } return { $b.name } }",
            new_rows: json!([]),
            old_query: "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            old_rows: names.clone(),
        },
        Case {
            name: "add a nullable property",
            schema: social(|s| s.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n")),
            kind: "add_property",
            new_query: "query q() { match { $p: Person } return { $p.name, $p.nickname } order { $p.name } }",
            new_rows: json!([
                {"p.name": "Alice", "p.nickname": null},
                {"p.name": "Bob", "p.nickname": null},
                {"p.name": "Carol", "p.nickname": null}
            ]),
            old_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            old_rows: ages.clone(),
        },
        Case {
            name: "add a required property with a default",
            schema: social(|s| s.replace("    age: I32?\n", "    age: I32?\n    level: I32 @default(1)\n")),
            kind: "add_property",
            new_query: "query q() { match { $p: Person } return { $p.level } order { $p.name } }",
            new_rows: json!([{"p.level": 1}, {"p.level": 1}, {"p.level": 1}]),
            old_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            old_rows: ages.clone(),
        },
        Case {
            name: "rename a type",
            schema: social(|s| {
                s.replace("node Person @description", "node Human @rename_from(\"Person\") @description")
                    .replace("Person -> Person", "Human -> Human")
                    .replace("Person -> Company", "Human -> Company")
            }),
            kind: "rename_type",
            new_query: "query q() { match { $p: Human } return { $p.name } order { $p.name } }",
            new_rows: names.clone(),
            old_query: "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            old_rows: names.clone(),
        },
        Case {
            name: "rename a property",
            schema: social(|s| {
                s.replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
                    .replace("@range(age,", "@range(years,")
            }),
            kind: "rename_property",
            new_query: "query q() { match { $p: Person } return { $p.years } order { $p.name } }",
            new_rows: json!([{"p.years": 31}, {"p.years": 27}, {"p.years": 45}]),
            old_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            old_rows: ages.clone(),
        },
        Case {
            name: "drop a property (soft)",
            schema: social(|s| {
                s.replace("    email: String? @unique\n", "").replace("    @check(email, \"^[^@]+@[^@]+$\")\n", "")
            }),
            kind: "drop_property",
            new_query: "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            new_rows: names.clone(),
            old_query: "query q() { match { $p: Person } return { $p.email } order { $p.name } }",
            old_rows: json!([{"p.email": "alice@example.com"}, {"p.email": "bob@example.com"}, {"p.email": null}]),
        },
        Case {
            name: "drop a type (soft)",
            schema: social(|s| s.replace("edge WorksAt: Person -> Company @card(0..1) {\n    title: String?\n}\n", "")),
            kind: "drop_type",
            new_query: "query q() { match { $p: Person } return { $p.name } order { $p.name } }",
            new_rows: names.clone(),
            old_query: "query q() { match { $p: Person $p worksAt $c } return { $p.name } order { $p.name } }",
            old_rows: json!([{"p.name": "Alice"}, {"p.name": "Carol"}]),
        },
        Case {
            name: "widen an enum, add an index, drop a check, change a description",
            schema: social(|s| {
                s.replace("enum(engineer, designer, manager)", "enum(engineer, designer, manager, intern)")
                    .replace("    @check(email, \"^[^@]+@[^@]+$\")\n", "    @index(age)\n")
                    .replace("Someone in the network", "A person")
            }),
            kind: "widen_enum",
            new_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            new_rows: ages.clone(),
            old_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            old_rows: ages.clone(),
        },
        Case {
            name: "tighten a rule every row keeps",
            schema: social(|s| s.replace("    age: I32?\n", "    age: I32\n").replace("0..150", "18..99")),
            kind: "tighten_nullability",
            new_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            new_rows: ages.clone(),
            old_query: "query q() { match { $p: Person } return { $p.age } order { $p.name } }",
            old_rows: ages,
        },
    ]
}

#[test]
fn every_supported_change_plans_applies_queries_and_time_travels() {
    for case in cases() {
        let (dir, loc, before) = example_graph();
        let file = schema_file(&dir, &case.schema);
        let commits = commit_count(&loc);
        let plan = ok_json(&["schema", "plan", "--json", "--schema", &file, &loc]);
        let kinds: Vec<&str> =
            plan["steps"].as_array().expect("steps").iter().filter_map(|s| s["kind"].as_str()).collect();
        assert!(kinds.contains(&case.kind), "{}: plan kinds {kinds:?}", case.name);
        assert_eq!(plan["supported"], true, "{}: {plan}", case.name);
        assert_eq!(plan["applied"], false, "{}", case.name);
        assert_eq!(plan["step_count"], json!(kinds.len()), "{}", case.name);
        assert_eq!(commit_count(&loc), commits, "{}: a plan wrote a commit", case.name);

        let applied = ok_json(&["schema", "apply", "--json", "--schema", &file, &loc]);
        assert_eq!(applied["applied"], true, "{}: {applied}", case.name);
        let commit = applied["graph_commit_id"].as_str().expect("commit id").to_string();
        assert!(applied["manifest_version"].as_u64().is_some(), "{}: {applied}", case.name);
        assert_eq!(commit_count(&loc), commits + 1, "{}: one commit per apply", case.name);
        let head = ok_json(&["snapshot", "--json", &loc])["head_commit_id"].clone();
        assert_eq!(head, json!(commit), "{}", case.name);
        let shown = omnigraph(&["schema", "show", &loc]);
        assert_eq!(String::from_utf8_lossy(&shown.stdout), case.schema, "{}: accepted source", case.name);
        // `schema diff` from the commit before the apply to the head lists the plan's steps.
        let diff = ok_json(&["schema", "diff", "--json", &before, "main", &loc]);
        assert_eq!(diff["steps"], plan["steps"], "{}: schema diff", case.name);
        assert_eq!((diff["from"].clone(), diff["to"].clone()), (json!(before), json!(commit)), "{}", case.name);
        let said = String::from_utf8_lossy(&omnigraph(&["schema", "diff", &before, "main", &loc]).stdout).to_string();
        assert!(said.contains(&format!("{} step(s) from {before} to {commit}", kinds.len())), "{}: {said}", case.name);

        assert_eq!(rows(&loc, case.new_query, None), case.new_rows, "{}: new shape", case.name);
        assert_eq!(rows(&loc, case.old_query, Some(&before)), case.old_rows, "{}: time travel", case.name);
        // Applying the same schema again changes nothing.
        let again = ok_json(&["schema", "apply", "--json", "--schema", &file, &loc]);
        assert_eq!(again["applied"], false, "{}: {again}", case.name);
        assert_eq!(commit_count(&loc), commits + 1, "{}", case.name);
        assert!(!dir.path().join("graph/_schema.pg.staging").exists(), "{}: staging left", case.name);
        assert!(std::fs::read_dir(dir.path().join("graph/__recovery")).map_or(true, |mut d| d.next().is_none()));
    }
}

/// The new shape is writable at once, and the old shape's names are gone
/// from the head: a query naming a dropped or renamed thing fails to compile.
#[test]
fn the_head_speaks_only_the_new_shape() {
    let (dir, loc, before) = example_graph();
    let target = SOCIAL_PG
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n    nickname: String?\n")
        .replace("@range(age,", "@range(years,");
    let file = schema_file(&dir, &target);
    ok_json(&["schema", "apply", "--json", "--schema", &file, &loc]);
    let old = query(&loc, "query q() { match { $p: Person } return { $p.age } }", None);
    assert!(!old.status.success(), "a renamed property still answers at the head");
    let insert = r#"query q() { insert Person { name: "Dan", years: 40, nickname: "D" } }"#;
    ok_json(&["mutate", "--json", "-e", insert, &loc]);
    let got = rows(&loc, "query q() { match { $p: Person } return { $p.nickname } order { $p.name } }", None);
    assert_eq!(got, json!([{"p.nickname": null}, {"p.nickname": null}, {"p.nickname": null}, {"p.nickname": "D"}]));
    // The commit before the apply never learns the new names.
    let new_at_old = query(&loc, "query q() { match { $p: Person } return { $p.years } }", Some(&before));
    assert!(!new_at_old.status.success(), "the old commit answered a property it never had");
}

#[test]
fn refusals_name_the_problem_and_write_nothing() {
    let (dir, loc, _) = example_graph();
    let commits = commit_count(&loc);
    let unchanged = |why: &str| {
        assert_eq!(commit_count(&loc), commits, "{why}: a commit was written");
        let shown = omnigraph(&["schema", "show", &loc]);
        assert_eq!(String::from_utf8_lossy(&shown.stdout), SOCIAL_PG, "{why}: the schema changed");
        assert!(!dir.path().join("graph/_schema.pg.staging").exists(), "{why}: staging left");
    };

    // A type change needs a data conversion we do not do.
    let file = schema_file(
        &dir,
        &SOCIAL_PG.replace("    age: I32?\n", "    age: String?\n").replace("    @range(age, 0..150)\n", ""),
    );
    let plan = ok_json(&["schema", "plan", "--json", "--schema", &file, &loc]);
    assert_eq!(plan["supported"], false, "{plan}");
    let out = omnigraph(&["schema", "apply", "--schema", &file, &loc]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("age"), "{}", String::from_utf8_lossy(&out.stderr));
    unchanged("type change");

    // A required property without a default.
    let file = schema_file(&dir, &SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    level: I32\n"));
    assert_eq!(omnigraph(&["schema", "apply", "--schema", &file, &loc]).status.code(), Some(2));
    unchanged("required without default");

    // A tightened range Carol (45) breaks: refused with her id named.
    let file = schema_file(&dir, &SOCIAL_PG.replace("0..150", "0..40"));
    let out = omnigraph(&["schema", "apply", "--schema", &file, &loc]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Carol") && err.contains("1 existing row"), "{err}");
    unchanged("tightened range");

    // A live branch no longer blocks an apply on main: it keeps its own schema.
    ok_json(&["branch", "create", "--json", "feature", &loc]);
    let file = schema_file(&dir, &format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n"));
    ok_json(&["schema", "apply", "--json", "--schema", &file, &loc]);
    let shown = omnigraph(&["schema", "show", "--branch", "feature", &loc]);
    assert_eq!(String::from_utf8_lossy(&shown.stdout), SOCIAL_PG, "the branch's schema changed");
}

/// A hard drop is marked as data loss in the plan and rewrites the table
/// without the column; soft is the default.
#[test]
fn hard_drops_need_allow_data_loss() {
    let (dir, loc, before) = example_graph();
    let target =
        SOCIAL_PG.replace("    email: String? @unique\n", "").replace("    @check(email, \"^[^@]+@[^@]+$\")\n", "");
    let file = schema_file(&dir, &target);
    let soft = ok_json(&["schema", "plan", "--json", "--schema", &file, &loc]);
    let step = |v: &Value| v["steps"].as_array().expect("steps").iter().find(|s| s["kind"] == "drop_property").cloned();
    assert_eq!(step(&soft).expect("drop step")["data_loss"], false);
    let hard = ok_json(&["schema", "plan", "--json", "--allow-data-loss", "--schema", &file, &loc]);
    assert_eq!(step(&hard).expect("drop step")["data_loss"], true);
    ok_json(&["schema", "apply", "--json", "--allow-data-loss", "--schema", &file, &loc]);
    let names = rows(&loc, "query q() { match { $p: Person } return { $p.name } order { $p.name } }", None);
    assert_eq!(names, json!([{"p.name": "Alice"}, {"p.name": "Bob"}, {"p.name": "Carol"}]));
    // The versions before the apply stay until cleanup removes them.
    let old = rows(&loc, "query q() { match { $p: Person } return { $p.email } order { $p.name } }", Some(&before));
    assert_eq!(old[0]["p.email"], "alice@example.com");
}

/// `POST /graphs/{id}/schema/apply` plans (`dry_run`), applies and refuses
/// with the documented shapes; `GET /schema` shows the accepted source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_apply_over_http() {
    use crate::server::{get, post, start};
    let s = start().await;
    let target = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    let (st, plan) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": target, "dry_run": true})).await;
    assert_eq!(st, 200, "{plan}");
    assert_eq!(
        (plan["applied"].clone(), plan["supported"].clone(), plan["step_count"].clone()),
        (json!(false), json!(true), json!(1))
    );
    assert_eq!(plan["steps"][0]["kind"], "add_type");
    let (_, shown) = get(&s, "/graphs/g/schema").await;
    assert_eq!(shown["schema_source"], SOCIAL_PG, "a dry run changed the schema");

    let (st, applied) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": target})).await;
    assert_eq!(st, 200, "{applied} {}", s.log());
    assert_eq!(applied["applied"], true);
    let commit = applied["graph_commit_id"].as_str().expect("commit").to_string();
    assert_eq!(applied["manifest_version"], applied["graph_manifest_version"]);
    let (_, shown) = get(&s, "/graphs/g/schema").await;
    assert_eq!(shown["schema_source"], json!(target));
    let (_, commits) = get(&s, "/graphs/g/commits").await;
    assert_eq!(commits["commits"][0]["graph_commit_id"], json!(commit));
    let insert = json!({"query": r#"query q() { insert Team { name: "Core" } }"#});
    assert_eq!(post(&s, "/graphs/g/mutate", insert).await.0, 200);
    let read = json!({"query": "query q() { match { $t: Team } return { $t.name } }"});
    let (st, rows) = post(&s, "/graphs/g/query", read).await;
    assert_eq!((st, rows["rows"].clone()), (200, json!([{"t.name": "Core"}])), "{rows}");

    // Schema diff between any two refs: the apply's step forward, its soft
    // drop backward, nothing between two commits of one schema.
    let (st, d) = get(&s, &format!("/graphs/g/schema/diff?from={commit}~1&to=main")).await;
    assert_eq!(st, 200, "{d}");
    assert_eq!((d["step_count"].clone(), d["steps"][0]["kind"].clone()), (json!(1), json!("add_type")), "{d}");
    assert_eq!(d["to_schema_identity"], applied["schema_identity"], "{d}");
    assert_eq!(d["from"], commits["commits"][1]["graph_commit_id"], "{d}");
    let (_, back) = get(&s, &format!("/graphs/g/schema/diff?from=main&to={commit}~1")).await;
    assert_eq!(
        (back["step_count"].clone(), back["steps"][0]["kind"].clone()),
        (json!(1), json!("drop_type")),
        "{back}"
    );
    let (_, same) = get(&s, &format!("/graphs/g/schema/diff?from={commit}&to=main")).await;
    assert_eq!((same["step_count"].clone(), same["steps"].clone()), (json!(0), json!([])), "{same}");
    let (st, err) = get(&s, "/graphs/g/schema/diff?from=nope&to=main").await;
    assert_eq!((st, err["code"].clone()), (404, json!("not_found")), "{err}");
    let (st, err) = get(&s, "/graphs/g/schema/diff?from=main").await;
    assert_eq!(st, 400, "`to` is required: {err}");

    let unsupported =
        SOCIAL_PG.replace("    age: I32?\n", "    age: String?\n").replace("    @range(age, 0..150)\n", "");
    let (st, err) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": unsupported})).await;
    assert_eq!((st, err["code"].clone()), (400, json!("bad_request")), "{err}");
    let (st, err) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": "node {"})).await;
    assert_eq!(st, 400, "{err}");
    let (st, err) = post(&s, "/graphs/g/schema/apply", json!({"source": target})).await;
    assert_eq!(st, 400, "unknown field: {err}");
    let (st, err) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": SOCIAL_PG, "branch": 7})).await;
    assert_eq!((st, err["code"].clone()), (400, json!("bad_request")), "a branch that is not a string: {err}");
    assert_eq!(get(&s, "/healthz").await.0, 200);
}

/// Readers running throughout an apply bind one catalog to one snapshot:
/// a query of the old shape answers in full until the apply is visible and
/// is refused by the compiler after it, never with a storage error; a read
/// at the commit before the apply answers the same throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_never_pair_a_snapshot_with_the_other_sides_catalog() {
    let (_dir, g) = crate::common::loaded_social_graph().await;
    let before = g.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let target = SOCIAL_PG
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n    nickname: String?\n")
        .replace("@range(age,", "@range(years,");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for at in [omnigraph::ReadTarget::default(), omnigraph::ReadTarget::Commit(before.clone())] {
        let (g, stop) = (g.clone(), stop.clone());
        readers.push(tokio::spawn(async move {
            let src = "query q() { match { $p: Person } return { $p.age } order { $p.name } }";
            let (mut answered, mut refused) = (0, 0);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || answered + refused < 5 {
                match g.query_json(src, None, serde_json::Map::new(), &at).await {
                    Ok(v) => {
                        assert_eq!(v["rows"], json!([{"p.age": 31}, {"p.age": 27}, {"p.age": 45}]));
                        answered += 1;
                    }
                    Err(omnigraph::OmniError::Compile { .. }) => refused += 1,
                    Err(e) => panic!("a reader at {at:?} failed with {e}"),
                }
            }
            (answered, refused)
        }));
    }
    // The rename there, back, and there again.
    let back = SOCIAL_PG.replace("    age: I32?\n", "    age: I32? @rename_from(\"years\")\n");
    for (i, src) in [&target, &back, &target].into_iter().enumerate() {
        tokio::task::yield_now().await;
        g.schema_apply(src, false, None).await.unwrap_or_else(|e| panic!("apply {i}: {e}"));
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let head = readers.remove(0).await.expect("head reader");
    let old = readers.remove(0).await.expect("time-travel reader");
    assert_eq!(old.1, 0, "the commit before the applies must always answer: {old:?}");
    assert!(head.0 + head.1 >= 5, "{head:?}");
}

/// A soft-dropped type stays readable by time travel until `cleanup` drops
/// the commits that read it; then its dataset is deleted. A hard-dropped
/// type's dataset goes with the apply, and cleanup copes with its absence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_reclaims_dropped_tables_once_nothing_retained_reads_them() {
    let (dir, g) = crate::common::loaded_social_graph().await;
    let before = g.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let works_at =
        g.snapshot("main").await.expect("snapshot").tables.into_iter().find(|t| t.table_key == "edge:WorksAt");
    let path = dir.path().join("graph").join(works_at.expect("WorksAt").table_path);
    let dropped = SOCIAL_PG.replace("edge WorksAt: Person -> Company @card(0..1) {\n    title: String?\n}\n", "");
    g.schema_apply(&dropped, false, None).await.expect("soft drop");
    let q = "query q() { match { $p: Person $p worksAt $c } return { $p.name } order { $p.name } }";
    let at = omnigraph::ReadTarget::Commit(before.clone());
    // Retained: the soft-dropped table is kept whole.
    let r = g.cleanup(Some(10), None, true).await.expect("cleanup keep 10");
    assert!(r.dropped_tables.is_empty(), "{:?}", r.dropped_tables);
    assert_eq!(g.query_json(q, None, serde_json::Map::new(), &at).await.expect("time travel")["row_count"], 2);
    // Only the head retained: nothing reads it, so it goes.
    let dry = g.cleanup(Some(1), None, false).await.expect("dry run");
    assert_eq!(dry.dropped_tables.len(), 1, "{:?}", dry.dropped_tables);
    assert!(!dry.dropped_tables[0].reclaimed && files_under(&path) > 0);
    let r = g.cleanup(Some(1), None, true).await.expect("cleanup keep 1");
    assert_eq!((r.dropped_tables[0].type_key.as_str(), r.dropped_tables[0].reclaimed), ("edge:WorksAt", true));
    assert_eq!(files_under(&path), 0, "the dropped table's dataset is still there");
    let err = g.query_json(q, None, serde_json::Map::new(), &at).await.expect_err("cleaned commit");
    assert!(matches!(err, omnigraph::OmniError::CommitCleaned { .. }), "{err}");
    // Hard: the dataset goes with the apply; a later cleanup is fine.
    let company =
        g.snapshot("main").await.expect("snapshot").tables.into_iter().find(|t| t.table_key == "node:Company");
    let company = dir.path().join("graph").join(company.expect("Company").table_path);
    let no_company = dropped.replace("node Company {\n    name: String @key\n    founded: Date?\n}\n", "");
    g.schema_apply(&no_company, true, None).await.expect("hard drop");
    assert_eq!(files_under(&company), 0, "a hard drop keeps the dataset");
    g.cleanup(Some(5), None, true).await.expect("cleanup after a hard drop");
}

/// Files (not directories) under `path`; 0 when it does not exist.
fn files_under(path: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(path) else { return 0 };
    entries.flatten().map(|e| if e.path().is_dir() { files_under(&e.path()) } else { 1 }).sum()
}

/// After a schema apply, an open still restores each head from its
/// checkpoint (no fold of the history), and a fresh handle binds the applied
/// schema at the head and the original one at a commit before the apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_apply_opens_restore_the_checkpoint_and_bind_each_side_its_schema() {
    use omnigraph::engine::manifest;
    let (dir, g) = crate::common::loaded_social_graph().await;
    let before = g.snapshot("main").await.expect("snapshot").head_commit_id.expect("head");
    let target = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    g.schema_apply(&target, false, None).await.expect("apply");
    let insert = r#"query q() { insert Person { name: "Nia", age: 9, nickname: "n" } }"#;
    g.mutate(insert, None, serde_json::Map::new(), &omnigraph::WriteOptions::default()).await.expect("mutate");
    g.runtime().view("main").await.expect("settled");
    let head = manifest::load_cached(g.root(), "main", &mut None, false).await.expect("head view");
    let full = manifest::load(g.root(), "main", None).await.expect("full view");
    assert!(!head.state.is_complete(), "the open folded the history instead of restoring its checkpoint");
    let tip = full.state.head("main").expect("head").to_string();
    assert_eq!(head.state.schema_applied_at(&tip), full.state.schema_applied_at(&tip));
    assert_eq!(head.state.original_schema(), full.state.original_schema());
    assert_eq!(head.state.checkpoint(), full.state.checkpoint());
    drop(g);

    let g = omnigraph::Omnigraph::open(&dir.path().join("graph").to_string_lossy()).await.expect("reopen");
    let nick = "query q() { match { $p: Person } return { $p.nickname } order { $p.name } }";
    let rows = g.query_json(nick, None, serde_json::Map::new(), &Default::default()).await.expect("head read");
    assert_eq!(rows["rows"].as_array().map(Vec::len), Some(4), "{rows}");
    let at = omnigraph::ReadTarget::Commit(before);
    let err = g.query_json(nick, None, serde_json::Map::new(), &at).await.expect_err("the old schema has no nickname");
    assert!(matches!(err, omnigraph::OmniError::Compile { .. }), "{err}");
}
