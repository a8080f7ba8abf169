//! A schema per branch: `schema apply --branch B` changes B alone; reads,
//! writes and time travel on each branch bind that branch's schema at that
//! commit; main keeps its own; merges across a schema change merge the
//! schemas and the rows in one commit (schema conflicts refused, nothing
//! written); two branches adding a type each never share its
//! table; a hard drop on main leaves the files a branch still reads. The
//! embedded handle, the CLI and HTTP.

use omnigraph::{Graph, ReadTarget, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::{SOCIAL_PG, loaded_social_graph};

async fn mutate(g: &Graph, branch: &str, src: &str) -> String {
    let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
    let out = g.mutate(src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("{branch}: {src}: {e}"));
    out.commit_id.expect("a commit")
}

async fn rows(g: &Graph, src: &str, at: ReadTarget) -> Vec<Map<String, Value>> {
    let r = g.query(src, None, Map::new(), &at).await.unwrap_or_else(|e| panic!("{src} at {at:?}: {e}"));
    omnigraph::result_rows(&r)
}

fn on(branch: &str) -> ReadTarget {
    ReadTarget::Branch(branch.into())
}

/// Person gains a nullable `nickname`, and a new type `Team`.
fn feature_schema() -> String {
    SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n")
        + "\nnode Team { name: String @key }\n"
}

/// Company gains a nullable `employees`.
fn main_schema() -> String {
    SOCIAL_PG.replace("    founded: Date?\n", "    founded: Date?\n    employees: I32?\n")
}

const NICKNAMES: &str = "query q() { match { $p: Person } return { $p.name, $p.nickname } order { $p.name } }";
const NAMES: &str = "query q() { match { $p: Person } return { $p.name } order { $p.name } }";

/// The walk-through: a branch adds a property and a type and writes rows
/// using them; main meanwhile adds a different property; each branch reads
/// and writes its own shape at every step, and time travel on the branch
/// to before its apply reads the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_branch_reads_and_writes_under_its_own_schema() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let before_apply = mutate(&g, "feature", r#"query q() { insert Person { name: "Dan", age: 30 } }"#).await;

    let r = g.schema_apply_on("feature", &feature_schema(), false, None).await.expect("apply on feature");
    assert!(r.applied && r.branch == "feature", "{r:?}");
    assert_eq!(g.schema_of("feature").await.expect("schema").source, feature_schema());
    assert_eq!(g.schema().await.expect("main").source, SOCIAL_PG, "main keeps its schema");

    mutate(&g, "feature", r#"query q() { update Person set { nickname: "Al" } where name = "Alice" }"#).await;
    mutate(&g, "feature", r#"query q() { insert Team { name: "Core" } }"#).await;
    let nick = rows(&g, NICKNAMES, on("feature")).await;
    assert_eq!(nick[0], json!({"p.name": "Alice", "p.nickname": "Al"}).as_object().cloned().expect("row"));
    let teams = rows(&g, "query q() { match { $t: Team } return { $t.name } }", on("feature")).await;
    assert_eq!(teams.len(), 1);

    // Main never sees the branch's shape, and writes under its own.
    let err = g.query(NICKNAMES, None, Map::new(), &on("main")).await.expect_err("main has no nickname");
    assert!(err.to_string().contains("nickname"), "{err}");
    let err = g
        .mutate(r#"query q() { insert Team { name: "X" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .expect_err("main has no Team");
    assert!(err.to_string().contains("Team"), "{err}");
    mutate(&g, "main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#).await;

    // Main applies a different change meanwhile; the branch keeps its own.
    g.schema_apply(&main_schema(), false, None).await.expect("apply on main");
    mutate(&g, "main", r#"query q() { insert Company { name: "Big", employees: 500 } }"#).await;
    let o = WriteOptions { branch: "feature".into(), ..WriteOptions::default() };
    let err = g
        .mutate(r#"query q() { insert Company { name: "Big", employees: 5 } }"#, None, Map::new(), &o)
        .await
        .expect_err("the branch has no employees");
    assert!(err.to_string().contains("employees"), "{err}");
    assert_eq!(g.schema_of("feature").await.expect("schema").source, feature_schema());

    // Time travel on the branch to before its apply reads the old shape.
    let old = ReadTarget::Commit(before_apply.clone());
    assert!(g.query(NICKNAMES, None, Map::new(), &old).await.is_err(), "the old commit has no nickname");
    let names: Vec<Value> = rows(&g, NAMES, old).await.into_iter().map(|r| r["p.name"].clone()).collect();
    assert_eq!(names, vec![json!("Alice"), json!("Bob"), json!("Carol"), json!("Dan")]);

    // A branch created from the branch inherits its schema; a fresh handle agrees.
    g.branch_create("child", "feature").await.expect("child");
    assert_eq!(g.schema_of("child").await.expect("schema").source, feature_schema());
    let reopened = omnigraph::Omnigraph::open(g.root().uri()).await.expect("reopen");
    assert_eq!(reopened.schema_of("feature").await.expect("schema").source, feature_schema());
    assert_eq!(reopened.schema().await.expect("main").source, main_schema());

    // `schema diff` between the branches lists the steps between their schemas.
    let diff = g.schema_diff("main", "feature").await.expect("diff");
    let details: Vec<String> = diff.steps.iter().map(|s| s.detail.clone()).collect();
    assert!(details.iter().any(|d| d.contains("nickname")), "{details:?}");
    assert!(details.iter().any(|d| d.contains("Team")), "{details:?}");
    assert!(details.iter().any(|d| d.contains("employees")), "{details:?}");
}

/// The walk-through of a merge across schema changes: a branch adds a
/// property and writes rows using it; main adds a different type and writes
/// meanwhile; the merge lands both on main in one commit, rows and schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_across_schema_changes_lands_both_sides_on_main() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let nicknames = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    g.schema_apply_on("feature", &nicknames, false, None).await.expect("apply on feature");
    mutate(&g, "feature", r#"query q() { update Person set { nickname: "Al" } where name = "Alice" }"#).await;
    mutate(&g, "feature", r#"query q() { insert Person { name: "Dan", age: 40, nickname: "D" } }"#).await;
    let teams = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    g.schema_apply(&teams, false, None).await.expect("apply on main");
    mutate(&g, "main", r#"query q() { insert Team { name: "Core" } }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#).await;
    let before_merge = g.commits("main", None).await.expect("commits");

    let r = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("merges");
    let steps: Vec<String> = r.report.schema_steps.iter().map(|s| s.detail.clone()).collect();
    assert!(steps.iter().any(|d| d.contains("nickname")) && steps.len() == 1, "{steps:?}");
    let after = g.commits("main", None).await.expect("commits");
    assert_eq!(after.len(), before_merge.len() + 1, "one merge commit");
    assert_eq!(after[0].commit_id, r.report.graph_commit_id.clone().expect("a commit"));

    let merged = g.schema().await.expect("main's schema");
    assert_eq!(Some(merged.identity.clone()), r.report.schema_identity);
    assert!(
        merged.catalog.node("Team").is_some()
            && merged.catalog.node("Person").is_some_and(|p| p.properties.iter().any(|p| p.name == "nickname"))
    );
    let nick: Vec<(Value, Value)> = rows(&g, NICKNAMES, on("main"))
        .await
        .into_iter()
        .map(|r| (r["p.name"].clone(), r["p.nickname"].clone()))
        .collect();
    let want = [
        ("Alice", json!("Al")),
        ("Bob", Value::Null),
        ("Carol", Value::Null),
        ("Dan", json!("D")),
        ("Mia", Value::Null),
    ];
    assert_eq!(nick, want.map(|(n, v)| (json!(n), v)).to_vec());
    let team_names = rows(&g, "query q() { match { $t: Team } return { $t.name } }", on("main")).await;
    assert_eq!(team_names.len(), 1);
    // Main writes the merged shape; the branch keeps its own schema.
    mutate(&g, "main", r#"query q() { update Person set { nickname: "M" } where name = "Mia" }"#).await;
    assert_eq!(g.schema_of("feature").await.expect("schema").source, nicknames);
    // Time travel on main to before the merge reads the old shape.
    let old = ReadTarget::Commit(before_merge[0].commit_id.clone());
    assert!(g.query(NICKNAMES, None, Map::new(), &old).await.is_err(), "no nickname before the merge");
    // A fresh handle reads the same.
    let reopened = omnigraph::Omnigraph::open(g.root().uri()).await.expect("reopen");
    assert_eq!(reopened.schema().await.expect("main").identity, merged.identity);
    // Merging again: nothing new.
    let again = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("again");
    assert_eq!(again.report.outcome, omnigraph::MergeOutcome::AlreadyUpToDate);
}

/// A rename on the branch, writes to the old name on main: the merge
/// brings main's rows under the new name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_on_a_branch_carries_rows_main_wrote_under_the_old_name() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let renamed = SOCIAL_PG
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    g.schema_apply_on("feature", &renamed, false, None).await.expect("apply on feature");
    mutate(&g, "feature", r#"query q() { update Person set { years: 32 } where name = "Alice" }"#).await;
    mutate(&g, "main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#).await;
    mutate(&g, "main", r#"query q() { update Person set { age: 28 } where name = "Bob" }"#).await;

    let r = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("merges");
    assert!(r.report.schema_steps.iter().any(|s| s.detail.contains("years")), "{:?}", r.report.schema_steps);
    let years = "query q() { match { $p: Person } return { $p.name, $p.years } order { $p.name } }";
    let got: Vec<(Value, Value)> =
        rows(&g, years, on("main")).await.into_iter().map(|r| (r["p.name"].clone(), r["p.years"].clone())).collect();
    let want = [("Alice", 32), ("Bob", 28), ("Carol", 45), ("Mia", 20)];
    assert_eq!(got, want.map(|(n, y)| (json!(n), json!(y))).to_vec());
    let err = g.query(NICKNAMES.replace("nickname", "age").as_str(), None, Map::new(), &on("main")).await;
    assert!(err.is_err(), "main has no `age` now");
}

/// Row conflicts across a schema change: the refusal lists each with its
/// values in the merged shape (a property the branch renamed under its new
/// name) and writes nothing; a resolution naming the renamed property, and
/// then a strategy, decide them in a merge that lands the merged schema and
/// the rows in one commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_conflicts_across_a_schema_change_show_merged_values_and_are_decided() {
    use omnigraph::{MergeOptions, MergeStrategy, OmniError};

    let (_dir, g) = loaded_social_graph().await;
    let renamed = feature_schema()
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    let carol = r#"query q() { update Person set { years: 50, nickname: "C" } where name = "Carol" }"#;
    for branch in ["a", "b"] {
        g.branch_create(branch, "main").await.expect("branch");
        g.schema_apply_on(branch, &renamed, false, None).await.expect("apply on the branch");
        mutate(&g, branch, carol).await;
    }
    g.schema_apply(&main_schema(), false, None).await.expect("apply on main");
    mutate(&g, "main", r#"query q() { update Person set { age: 60 } where name = "Carol" }"#).await;
    let main_head = g.commits("main", Some(1)).await.expect("head").remove(0).commit_id;

    let err = g.branch_merge("a", "main", &MergeOptions::default()).await.expect_err("refused");
    let OmniError::MergeConflicts(set) = &err else { panic!("expected merge conflicts, got {err}") };
    let values = |property: &str| {
        let c = set.conflicts.iter().find(|c| c.property.as_deref() == Some(property));
        c.map(|c| json!([c.base, c.ours, c.theirs]))
    };
    assert_eq!(values("years"), Some(json!([45, 60, 50])), "{err}");
    assert_eq!(values("nickname"), Some(json!([null, null, "C"])), "{err}");
    assert_eq!(values("age"), None, "the old name is not a property of the merged shape: {err}");
    assert_eq!(g.commits("main", Some(1)).await.expect("head").remove(0).commit_id, main_head, "nothing written");
    assert_eq!(g.schema().await.expect("main").source, main_schema());

    let years = |value: i64| {
        let r = json!({ "type": "Person", "id": "Carol", "property": "years", "value": value });
        serde_json::from_value::<omnigraph::Resolution>(r).expect("resolution")
    };
    let opts = MergeOptions { resolutions: vec![years(55)], ..MergeOptions::default() };
    let merged = g.branch_merge("a", "main", &opts).await.expect("resolved");
    assert_eq!((merged.report.conflicts_decided, merged.report.resolutions.len()), (1, 1), "{:?}", merged.report);
    assert!(merged.report.schema_identity.is_some(), "the merge lands a schema: {:?}", merged.report);
    let main = g.schema().await.expect("main").source.clone();
    assert!(main.contains("years: I32?") && main.contains("employees: I32?") && main.contains("node Team"), "{main}");
    let carol_now = "query q() { match { $p: Person { name: \"Carol\" } } return { $p.years, $p.nickname } }";
    let want = |years: i64| vec![json!({"p.years": years, "p.nickname": "C"}).as_object().cloned().expect("row")];
    assert_eq!(rows(&g, carol_now, on("main")).await, want(55));

    // The second branch conflicts with what the first landed; `theirs` decides.
    let err = g.branch_merge("b", "main", &MergeOptions::default()).await.expect_err("refused");
    assert!(matches!(&err, OmniError::MergeConflicts(_)), "{err}");
    let theirs = MergeOptions { strategy: Some(MergeStrategy::Theirs), ..MergeOptions::default() };
    let merged = g.branch_merge("b", "main", &theirs).await.expect("decided by the strategy");
    assert_eq!(merged.report.conflicts_decided, 1, "{:?}", merged.report);
    assert_eq!(rows(&g, carol_now, on("main")).await, want(50));
    let others =
        rows(&g, "query q() { match { $p: Person } return { $p.name, $p.years } order { $p.name } }", on("main"));
    let others: Vec<Value> = others.await.into_iter().map(|r| r["p.years"].clone()).collect();
    assert_eq!(others, [json!(31), json!(27), json!(50)], "every other row migrated under the new name");
}

/// Two branches each add a type named `Team`: each gets a table of its own
/// (distinct paths), and each branch's rows stay on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_branches_adding_one_type_name_never_share_its_table() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("a", "main").await.expect("a");
    g.branch_create("b", "main").await.expect("b");
    let with_team = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    g.schema_apply_on("a", &with_team, false, None).await.expect("apply on a");
    g.schema_apply_on("b", &with_team, false, None).await.expect("apply on b");
    let (ta, tb) = (g.schema_of("a").await.expect("a"), g.schema_of("b").await.expect("b"));
    let id = |s: &omnigraph::engine::schema_store::SchemaState| {
        s.catalog.node("Team").map(|n| n.table_id.clone()).expect("Team")
    };
    assert_ne!(id(&ta), id(&tb), "the two Team types share a table id");
    mutate(&g, "a", r#"query q() { insert Team { name: "OnA" } }"#).await;
    mutate(&g, "b", r#"query q() { insert Team { name: "OnB" } }"#).await;
    let q = "query q() { match { $t: Team } return { $t.name } }";
    assert_eq!(rows(&g, q, on("a")).await, vec![json!({"t.name": "OnA"}).as_object().cloned().expect("row")]);
    assert_eq!(rows(&g, q, on("b")).await, vec![json!({"t.name": "OnB"}).as_object().cloned().expect("row")]);
    // Main adds it too, as a third table.
    g.schema_apply(&with_team, false, None).await.expect("apply on main");
    assert!(rows(&g, q, on("main")).await.is_empty());
}

/// A hard drop on main while a branch exists: main loses the type, the
/// branch still reads it (its files stay for cleanup); a property added
/// with a default on a branch rewrites the branch's rows only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_drop_on_main_leaves_what_a_branch_reads() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("keep", "main").await.expect("branch");
    let companies = "query q() { match { $c: Company } return { $c.name } order { $c.name } }";
    let before = rows(&g, companies, on("keep")).await;
    assert!(!before.is_empty(), "the fixture has companies");
    let dropped = SOCIAL_PG
        .replace("node Company {\n    name: String @key\n    founded: Date?\n}\n", "")
        .replace("edge WorksAt: Person -> Company @card(0..1) {\n    title: String?\n}\n", "");
    assert_ne!(dropped, SOCIAL_PG);
    g.schema_apply(&dropped, true, None).await.expect("hard drop on main");
    assert!(g.query(companies, None, Map::new(), &on("main")).await.is_err(), "main has no Company");
    assert_eq!(rows(&g, companies, on("keep")).await, before, "the branch still reads its companies");

    let levelled = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    level: I32 @default(1)\n");
    g.schema_apply_on("keep", &levelled, false, None).await.expect("required add on the branch");
    let levels = "query q() { match { $p: Person } return { $p.level } }";
    let got = rows(&g, levels, on("keep")).await;
    assert!(!got.is_empty() && got.iter().all(|r| r["p.level"] == json!(1)), "{got:?}");
    assert!(g.query(levels, None, Map::new(), &on("main")).await.is_err(), "main has no level");
}

/// The CLI and HTTP: `schema apply --branch`, `schema show --branch`,
/// `GET /schema?branch=`, `POST /schema/apply {branch}`; an unknown branch
/// is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_branch_schemas_over_the_cli_and_http() {
    use crate::server::{get, post, start};
    let s = start().await;
    assert_eq!(post(&s, "/graphs/g/branches", json!({"name": "side"})).await.0, 200);
    let body = json!({"schema_source": feature_schema(), "branch": "side"});
    let (st, v) = post(&s, "/graphs/g/schema/apply", body).await;
    assert_eq!((st, v["applied"].clone(), v["branch"].clone()), (200, json!(true), json!("side")), "{v}");
    let (st, side) = get(&s, "/graphs/g/schema?branch=side").await;
    assert_eq!((st, side["schema_source"].clone()), (200, json!(feature_schema())), "{side}");
    let (st, main) = get(&s, "/graphs/g/schema").await;
    assert_eq!(st, 200);
    assert_ne!(main["schema_identity"], side["schema_identity"], "main kept its schema");
    let (st, v) = get(&s, "/graphs/g/schema?branch=nowhere").await;
    assert_eq!(st, 404, "{v}");
    let body = json!({"schema_source": SOCIAL_PG, "branch": "nowhere"});
    assert_eq!(post(&s, "/graphs/g/schema/apply", body).await.0, 404);

    let dir = crate::scratch::tempdir();
    let loc = dir.path().join("g").to_string_lossy().to_string();
    let schema = dir.path().join("next.pg");
    std::fs::write(&schema, feature_schema()).expect("write schema");
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let social = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    cli(&["init", "--schema", &social, &loc]);
    cli(&["branch", "create", "side", &loc]);
    let plan: Value = serde_json::from_str(&cli(&[
        "schema",
        "plan",
        "--json",
        "--branch",
        "side",
        "--schema",
        &schema.to_string_lossy(),
        &loc,
    ]))
    .expect("json");
    assert_eq!((plan["branch"].clone(), plan["applied"].clone()), (json!("side"), json!(false)), "{plan}");
    let schema_path = schema.to_string_lossy().to_string();
    let applied: Value =
        serde_json::from_str(&cli(&["schema", "apply", "--json", "--branch", "side", "--schema", &schema_path, &loc]))
            .expect("json");
    assert_eq!(applied["applied"], true, "{applied}");
    assert_eq!(cli(&["schema", "show", "--branch", "side", &loc]).trim_end(), feature_schema().trim_end());
    assert_eq!(cli(&["schema", "show", &loc]).trim_end(), SOCIAL_PG.trim_end());
}

/// After a schema apply, a cherry-pick of a branch commit whose parent is
/// the branch's own (not in the target's history) binds one schema on
/// every side and lands; a pick across a schema change is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cherry_picks_bind_each_side_its_schema() {
    let (_dir, g) = loaded_social_graph().await;
    g.schema_apply(&main_schema(), false, None).await.expect("apply on main");
    g.branch_create("b", "main").await.expect("b");
    mutate(&g, "b", r#"query q() { insert Company { name: "One", employees: 1 } }"#).await;
    let picked = mutate(&g, "b", r#"query q() { insert Company { name: "Two", employees: 2 } }"#).await;
    let opts = omnigraph::RevertOptions { branch: Some("main".into()), ..Default::default() };
    let r = g.commit_cherry_pick(&picked, &opts).await.expect("pick onto main");
    assert!(r.report.graph_commit_id.is_some(), "{:?}", r.report);
    let q = "query q() { match { $c: Company } return { $c.name, $c.employees } order { $c.name } }";
    let names: Vec<Value> = rows(&g, q, on("main")).await.into_iter().map(|r| r["c.name"].clone()).collect();
    assert!(names.contains(&json!("Two")) && !names.contains(&json!("One")), "{names:?}");

    g.branch_create("c", "main").await.expect("c");
    g.schema_apply_on(
        "c",
        &feature_schema().replace("    founded: Date?\n", "    founded: Date?\n    employees: I32?\n"),
        false,
        None,
    )
    .await
    .expect("apply on c");
    let across = mutate(&g, "c", r#"query q() { insert Team { name: "T" } }"#).await;
    let err = g.commit_cherry_pick(&across, &opts).await.expect_err("across a schema change");
    assert_eq!(err.http_status(), 409, "{err}");
}

/// Both sides change one property differently: the merge is a 409
/// `schema_conflict` naming the item with its base, ours and theirs
/// declarations, through the embedded handle, HTTP and the CLI; nothing
/// is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_property_changed_differently_on_both_sides_is_a_schema_conflict() {
    let described =
        |text: &str| SOCIAL_PG.replace("    age: I32?\n", &format!("    age: I32? @description(\"{text}\")\n"));
    let (dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    g.schema_apply_on("feature", &described("in years"), false, None).await.expect("apply on feature");
    g.schema_apply(&described("years since birth"), false, None).await.expect("apply on main");
    let main_head = g.commits("main", Some(1)).await.expect("head").remove(0).commit_id;

    let err = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect_err("conflict");
    assert_eq!((err.http_status(), err.code()), (409, "schema_conflict"), "{err}");
    let body = err.to_json();
    assert_eq!(
        body["schema_conflicts"],
        json!([{
            "type_name": "Person",
            "property": "age",
            "reason": "both sides changed it differently",
            "base": "age: I32?",
            "ours": "age: I32? @description(\"years since birth\")",
            "theirs": "age: I32? @description(\"in years\")",
        }]),
        "{body}"
    );
    assert!(err.to_string().contains("Person.age"), "{err}");
    assert_eq!(g.commits("main", Some(1)).await.expect("head").remove(0).commit_id, main_head, "nothing written");
    let loc = dir.path().join("graph").to_string_lossy().to_string();
    drop(g);

    // The CLI prints the same body with --json and exits non-zero.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["branch", "merge", "--into", "main", "--json", "feature", &loc])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(printed.contains("schema_conflict") && printed.contains("years since birth"), "{printed}");

    let s = crate::server::spawn(dir, loc, &[], &[]);
    let (st, v) = crate::server::post(&s, "/graphs/g/branches/merge", json!({"source": "feature"})).await;
    assert_eq!((st, v["code"].clone()), (409, json!("schema_conflict")), "{v}");
    assert_eq!(v["schema_conflicts"][0]["theirs"], json!("age: I32? @description(\"in years\")"), "{v}");
}

/// The walk-through as users drive it, over HTTP and through the CLI: one
/// branch adds a property and writes it, another renames `age` to `years`
/// and writes it, main adds a type and writes under the old name; both
/// merges land, and main reads every row in the merged shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merges_across_schema_changes_over_http_and_the_cli() {
    use crate::server::{post, start};
    let nicknames = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    let renamed = SOCIAL_PG
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    let teams = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    let writes = [
        ("feature", r#"query q() { update Person set { nickname: "Al" } where name = "Alice" }"#),
        ("ren", r#"query q() { update Person set { years: 28 } where name = "Bob" }"#),
        ("main", r#"query q() { insert Team { name: "Core" } }"#),
        ("main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#),
    ];
    let read = "query q() { match { $p: Person } return { $p.name, $p.years, $p.nickname } order { $p.name } }";
    let want = json!([
        {"p.name": "Alice", "p.years": 31, "p.nickname": "Al"},
        {"p.name": "Bob", "p.years": 28, "p.nickname": null},
        {"p.name": "Carol", "p.years": 45, "p.nickname": null},
        {"p.name": "Mia", "p.years": 20, "p.nickname": null},
    ]);

    let s = start().await;
    for name in ["feature", "ren"] {
        assert_eq!(post(&s, "/graphs/g/branches", json!({"name": name})).await.0, 200);
    }
    for (branch, schema) in [("feature", &nicknames), ("ren", &renamed), ("main", &teams)] {
        let (st, v) = post(&s, "/graphs/g/schema/apply", json!({"schema_source": schema, "branch": branch})).await;
        assert_eq!((st, v["applied"].clone()), (200, json!(true)), "{branch}: {v}");
    }
    for (branch, q) in writes {
        let (st, v) = post(&s, "/graphs/g/mutate", json!({"query": q, "branch": branch})).await;
        assert_eq!(st, 200, "{branch}: {v}");
    }
    for source in ["feature", "ren"] {
        let (st, v) = post(&s, "/graphs/g/branches/merge", json!({"source": source})).await;
        assert_eq!((st, v["outcome"].clone()), (200, json!("merged")), "{source}: {v}");
        assert!(v["schema_steps"].as_array().is_some_and(|a| !a.is_empty()), "{v}");
    }
    let (st, v) = post(&s, "/graphs/g/query", json!({"query": read})).await;
    assert_eq!((st, v["rows"].clone()), (200, want.clone()), "{v}");

    let dir = crate::scratch::tempdir();
    let loc = dir.path().join("g").to_string_lossy().to_string();
    let cli = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run");
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let example = |f: &str| format!("{}/examples/{f}", env!("CARGO_MANIFEST_DIR"));
    cli(&["init", "--schema", &example("social.pg"), &loc]);
    cli(&["load", "--mode", "overwrite", "--data", &example("social.jsonl"), &loc]);
    for name in ["feature", "ren"] {
        cli(&["branch", "create", name, &loc]);
    }
    for (branch, schema) in [("feature", &nicknames), ("ren", &renamed), ("main", &teams)] {
        let file = dir.path().join(format!("{branch}.pg"));
        std::fs::write(&file, schema).expect("schema file");
        cli(&["schema", "apply", "--branch", branch, "--schema", &file.to_string_lossy(), &loc]);
    }
    for (branch, q) in writes {
        cli(&["mutate", "--branch", branch, "-e", q, &loc]);
    }
    for source in ["feature", "ren"] {
        let out: Value =
            serde_json::from_str(&cli(&["branch", "merge", "--json", "--into", "main", source, &loc])).expect("json");
        assert_eq!(out["outcome"], "merged", "{out}");
    }
    let out: Value = serde_json::from_str(&cli(&["query", "-e", read, "--json", &loc])).expect("json");
    assert_eq!(out["rows"], want, "{out}");
}

/// A branch adds a node type and an edge type and writes both; main never
/// changed its schema (a fast-forward): the merge brings the types, their
/// rows and the branch's property to main. The other way round, main's
/// later schema merges into a branch (the target is not main).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_types_a_branch_wrote_arrive_on_main_and_main_merges_into_a_branch() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let teams = format!(
        "{}\nnode Team {{ name: String @key }}\nedge MemberOf: Person -> Team\n",
        SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n")
    );
    g.schema_apply_on("feature", &teams, false, None).await.expect("apply on feature");
    mutate(&g, "feature", r#"query q() { insert Team { name: "Core" } }"#).await;
    mutate(&g, "feature", r#"query q() { insert Person { name: "Dan", age: 40, nickname: "D" } }"#).await;
    mutate(&g, "feature", r#"query q() { insert MemberOf { from: "Dan", to: "Core" } }"#).await;

    let r = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("merges");
    assert_eq!(r.report.outcome, omnigraph::MergeOutcome::FastForward);
    let members = "query q() { match { $p: Person $p memberOf $t } return { $p.name, $p.nickname, $t.name } }";
    let got = rows(&g, members, on("main")).await;
    assert_eq!(
        got,
        vec![json!({"p.name": "Dan", "p.nickname": "D", "t.name": "Core"}).as_object().cloned().expect("row")]
    );
    mutate(&g, "main", r#"query q() { insert Team { name: "Ops" } }"#).await;
    assert_eq!(rows(&g, "query q() { match { $t: Team } return { $t.name } }", on("feature")).await.len(), 1);

    // Main moves on under a further change; a second branch merges it in.
    g.branch_create("later", "main").await.expect("branch");
    let more = teams.replace("node Team { name: String @key }", "node Team { name: String @key size: I32? }");
    g.schema_apply(&more, false, None).await.expect("apply on main");
    mutate(&g, "main", r#"query q() { update Team set { size: 3 } where name = "Core" }"#).await;
    mutate(&g, "later", r#"query q() { insert Team { name: "Late" } }"#).await;
    g.branch_merge("main", "later", &omnigraph::MergeOptions::default()).await.expect("main into later");
    assert_eq!(g.schema_of("later").await.expect("schema").identity, g.schema().await.expect("main").identity);
    let sizes = "query q() { match { $t: Team } return { $t.name, $t.size } order { $t.name } }";
    let got: Vec<Value> = rows(&g, sizes, on("later")).await.into_iter().map(Value::Object).collect();
    assert_eq!(
        got,
        vec![
            json!({"t.name": "Core", "t.size": 3}),
            json!({"t.name": "Late", "t.size": null}),
            json!({"t.name": "Ops", "t.size": null})
        ]
    );
    assert_eq!(rows(&g, sizes, on("main")).await.len(), 2, "main keeps its own rows");
}

/// Main tightens a rule (`age` at most 100) while a branch writes a row
/// that breaks it: the merge takes the tightened rule, and the branch's row
/// is a value conflict of the merged result; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_one_side_tightened_refuses_the_other_sides_rows_that_break_it() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let nicknames = SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    g.schema_apply_on("feature", &nicknames, false, None).await.expect("apply on feature");
    mutate(&g, "feature", r#"query q() { insert Person { name: "Old", age: 120, nickname: "O" } }"#).await;
    g.schema_apply(&SOCIAL_PG.replace("@range(age, 0..150)", "@range(age, 0..100)"), false, None)
        .await
        .expect("tighten on main");
    let main_head = g.commits("main", Some(1)).await.expect("head").remove(0).commit_id;
    let err = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect_err("refused");
    assert_eq!(err.http_status(), 409, "{err}");
    assert!(err.to_string().contains("Old"), "{err}");
    assert_eq!(g.commits("main", Some(1)).await.expect("head").remove(0).commit_id, main_head, "nothing written");
}

/// A type only the branch has merges after `cleanup` kept one version of
/// everything: the empty table its apply created (what the merge diffs the
/// branch's rows against) is the latest version of its main ref, which
/// cleanup never removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_type_a_branch_added_merges_after_cleanup() {
    let (_dir, g) = loaded_social_graph().await;
    g.branch_create("feature", "main").await.expect("branch");
    let teams = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    g.schema_apply_on("feature", &teams, false, None).await.expect("apply on feature");
    for name in ["Core", "Ops", "Web"] {
        mutate(&g, "feature", &format!(r#"query q() {{ insert Team {{ name: "{name}" }} }}"#)).await;
    }
    mutate(&g, "main", r#"query q() { insert Person { name: "Mia", age: 20 } }"#).await;
    let report = g.cleanup(Some(1), None, true).await.expect("cleanup");
    assert!(report.versions_removed > 0, "{report:?}");
    let r = g.branch_merge("feature", "main", &omnigraph::MergeOptions::default()).await.expect("merges");
    assert_eq!(r.report.outcome, omnigraph::MergeOutcome::Merged);
    let got = rows(&g, "query q() { match { $t: Team } return { $t.name } order { $t.name } }", on("main")).await;
    let names: Vec<&Value> = got.iter().map(|r| &r["t.name"]).collect();
    assert_eq!(names, [&json!("Core"), &json!("Ops"), &json!("Web")]);
}

/// A type only a deleted branch added is reclaimed once cleanup purges the
/// branch (its dataset was registered nowhere else); every other table
/// stays and main reads as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purging_a_branch_reclaims_the_types_only_it_added() {
    let (dir, g) = loaded_social_graph().await;
    g.branch_create("doomed", "main").await.expect("branch");
    let teams = format!("{SOCIAL_PG}\nnode Team {{ name: String @key }}\n");
    g.schema_apply_on("doomed", &teams, false, None).await.expect("apply on the branch");
    mutate(&g, "doomed", r#"query q() { insert Team { name: "Core" } }"#).await;
    let team_dir = {
        let schema = g.schema_of("doomed").await.expect("schema");
        let id = schema.catalog.node("Team").map(|n| n.table_id.clone()).expect("Team");
        dir.path().join("graph").join("nodes").join(id)
    };
    assert!(files_under(&team_dir) > 0, "the branch's Team dataset at {team_dir:?}");
    let people = "query q() { match { $p: Person } return { $p.name } order { $p.name } }";
    let before = rows(&g, people, on("main")).await;
    g.branch_delete("doomed").await.expect("delete");
    let kept = g.cleanup_with(Some(1), None, Some("7d"), true).await.expect("cleanup in the window");
    assert!(kept.dropped_tables.is_empty(), "a restorable branch keeps its tables: {kept:?}");
    assert!(files_under(&team_dir) > 0, "kept while the branch can be restored");

    let done = g.cleanup_with(Some(1), None, Some("0s"), true).await.expect("cleanup past the window");
    assert_eq!(done.branches_purged, ["doomed"], "{done:?}");
    let dropped: Vec<(&str, bool)> = done.dropped_tables.iter().map(|d| (d.type_key.as_str(), d.reclaimed)).collect();
    assert_eq!(dropped, [("node:Team", true)], "{done:?}");
    assert_eq!(rows(&g, people, on("main")).await, before, "main reads as before");
    let reopened = omnigraph::Omnigraph::open(g.root().uri()).await.expect("reopen");
    assert_eq!(rows(&reopened, people, on("main")).await, before);
    assert_eq!(files_under(&team_dir), 0, "the Team dataset is gone");
}

/// Files under `dir`, at any depth (0 when it does not exist).
fn files_under(dir: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries.flatten().map(|e| if e.path().is_dir() { files_under(&e.path()) } else { 1 }).sum()
}
