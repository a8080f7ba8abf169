//! Mutation and load: the direct-publish write path.

use std::collections::{BTreeMap, HashSet};

use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::recovery::list_pending;
use omnigraph::{Graph, LoadMode, OmniError, WriteOptions};
use serde_json::{Map, Value, json};

use crate::common::{
    files_with_suffix, graph_with, loaded_social_graph, shared_fixtures, social_graph, temp_graph_dir,
};

fn opts() -> WriteOptions {
    WriteOptions::default()
}

fn params(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Table key → (manifest pin, row count) on main.
async fn pins(g: &Graph) -> BTreeMap<String, (u64, u64)> {
    let snap = g.snapshot("main").await.expect("snapshot");
    snap.tables.into_iter().map(|t| (t.table_key, (t.version, t.row_count))).collect()
}

/// The steady-state invariant: no sidecar left, and every table's live Lance
/// HEAD equals its manifest pin.
pub async fn assert_consistent(g: &Graph) {
    assert!(list_pending(g.root()).await.expect("list").is_empty(), "a sidecar was left behind");
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    for t in view.state.tables.values() {
        let head = table::head_version(&g.root().child_uri(&t.location), None).await.expect("head");
        assert_eq!(head, t.version, "{}: Lance HEAD {head} != manifest pin {}", t.table_key, t.version);
    }
}

#[tokio::test]
async fn a_load_is_one_commit_across_every_type() {
    let (_dir, g) = loaded_social_graph().await;
    let p = pins(&g).await;
    assert_eq!(p["node:Person"], (2, 3));
    assert_eq!(p["node:Company"], (2, 1));
    assert_eq!(p["edge:Knows"], (2, 2));
    assert_eq!(p["edge:WorksAt"], (2, 2));
    let commits = g.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 2, "one load = one commit");
    assert_consistent(&g).await;
}

#[tokio::test]
async fn read_your_writes_inside_one_mutation() {
    let (_dir, g) = loaded_social_graph().await;
    let src = r#"
query add($name: String) {
    insert Person { name: $name, age: 20 }
    insert Knows { from: "Alice", to: $name }
    update Person set { age: 21 } where name = $name
}"#;
    let out = g.mutate(src, None, params(json!({"name": "Dora"})), &opts()).await.expect("mutate");
    assert!(out.commit_id.is_some());
    let p = pins(&g).await;
    assert_eq!(p["node:Person"].1, 4);
    assert_eq!(p["edge:Knows"].1, 3);
    // The update saw the pending insert: Dora is stored with age 21.
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let person = &view.state.tables["node:Person"];
    let ds = table::open_table(&g.root().child_uri(&person.location), None, Some(person.version)).await.expect("open");
    let rows = table::scan(&ds, Some("name = 'Dora'")).await.expect("scan");
    let ages = rows[0].column_by_name("age").expect("age");
    let ages = ages.as_any().downcast_ref::<arrow_array::Int32Array>().expect("i32");
    assert_eq!(ages.value(0), 21);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn a_failing_statement_leaves_every_head_untouched_and_the_next_write_works() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let src = r#"
query bad() {
    insert Person { name: "Eve", age: 40 }
    insert Knows { from: "Eve", to: "Nobody" }
}"#;
    let err = g.mutate(src, None, Map::new(), &opts()).await.expect_err("must fail");
    assert!(matches!(err, OmniError::BadRequest(_)), "{err}");
    assert!(err.to_string().contains("Nobody"), "{err}");
    assert_eq!(pins(&g).await, before);
    assert_consistent(&g).await;
    let ok = r#"query ok() { insert Person { name: "Eve", age: 40 } }"#;
    g.mutate(ok, None, Map::new(), &opts()).await.expect("next mutation");
    assert_eq!(pins(&g).await["node:Person"].1, 4);
}

#[tokio::test]
async fn node_delete_cascades_to_incident_edges() {
    let (_dir, g) = loaded_social_graph().await;
    let src = r#"query rm($n: String) { delete Person where name = $n }"#;
    let out = g.mutate(src, None, params(json!({"n": "Bob"})), &opts()).await.expect("delete");
    assert_eq!(out.nodes_affected, 1);
    assert_eq!(out.edges_affected, 2, "Alice->Bob and Bob->Carol");
    let p = pins(&g).await;
    assert_eq!(p["node:Person"].1, 2);
    assert_eq!(p["edge:Knows"].1, 0);
    assert_eq!(p["edge:WorksAt"].1, 2);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn a_zero_match_write_commits_nothing() {
    let (_dir, g) = loaded_social_graph().await;
    let before = g.commits("main", None).await.expect("commits").len();
    let src = r#"query rm() { delete Person where name = "Nobody" }"#;
    let out = g.mutate(src, None, Map::new(), &opts()).await.expect("delete");
    assert_eq!(out.commit_id, None);
    assert_eq!(g.commits("main", None).await.expect("commits").len(), before);
}

#[tokio::test]
async fn validation_rules_refuse_with_no_effect() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let cases = [
        (r#"query q() { insert Person { name: "X", age: 200 } }"#, "range"),
        (r#"query q() { insert Person { name: "X", email: "not-an-email" } }"#, "check"),
        (r#"query q() { insert Person { name: "X", email: "alice@example.com" } }"#, "@unique"),
        (
            r#"query q() { insert WorksAt { from: "Bob", to: "Acme" }  insert WorksAt { from: "Bob", to: "Acme" } }"#,
            "@card",
        ),
        (r#"query q() { insert Knows { from: "Alice", to: "Ghost" } }"#, "Ghost"),
    ];
    for (src, needle) in cases {
        let err = g.mutate(src, None, Map::new(), &opts()).await.err().unwrap_or_else(|| panic!("{src} must fail"));
        assert!(err.to_string().contains(needle), "{src}: {err}");
        assert_eq!(pins(&g).await, before, "{src} changed something");
    }
    let err = g
        .load(r#"{"type": "Person", "data": {"name": "Y", "role": "pilot"}}"#.as_bytes(), LoadMode::Merge, &opts())
        .await
        .expect_err("enum");
    assert!(err.to_string().contains("role"), "{err}");
    assert_eq!(pins(&g).await, before);
    // A load's validation errors name the line of the row that broke the rule.
    let lines = [
        (
            r#"{"type": "Person", "data": {"name": "r", "age": 200}}"#,
            "line 2: type `Person`, id `r`, property `age`: violates @range(age, 0..150)",
        ),
        (r#"{"type": "Person", "data": {"name": "s", "email": "alice@example.com"}}"#, "line 2: @unique(email)"),
        (
            r#"{"type": "Person", "data": {"name": "t", "role": "pilot"}}"#,
            "line 2: type `Person`, id `t`, property `role`",
        ),
    ];
    for (second, needle) in lines {
        let data = format!("{}\n{second}\n", r#"{"type": "Person", "data": {"name": "q", "age": 3}}"#);
        let err = g.load(data.as_bytes(), LoadMode::Merge, &opts()).await.expect_err("invalid line 2");
        assert!(err.to_string().contains(needle), "{second}: {err}");
    }
    assert_eq!(pins(&g).await, before);
    assert_consistent(&g).await;
}

/// A load's edges are checked against the nodes it loads and the committed
/// ones (which an overwrite of the type replaces), and `@card` counts the
/// loaded edges with the committed ones per source.
#[tokio::test]
async fn a_load_checks_edge_endpoints_and_card_against_the_load_and_committed_rows() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let refused = [
        // `from` missing everywhere.
        (LoadMode::Merge, vec![r#"{"edge": "Knows", "from": "Ghost", "to": "Bob"}"#], "`from` node `Ghost`"),
        // `to` missing; the smallest missing id is named.
        (
            LoadMode::Merge,
            vec![
                r#"{"edge": "Knows", "from": "Bob", "to": "Zed"}"#,
                r#"{"edge": "Knows", "from": "Bob", "to": "Yan"}"#,
            ],
            "`to` node `Yan`",
        ),
        // An overwrite of Person drops Bob, whom the loaded edge names.
        (
            LoadMode::Overwrite,
            vec![r#"{"type": "Person", "data": {"name": "Dan"}}"#, r#"{"edge": "Knows", "from": "Dan", "to": "Bob"}"#],
            "`to` node `Bob`",
        ),
        // Two WorksAt from Bob in one load (@card(0..1)).
        (
            LoadMode::Merge,
            vec![
                r#"{"edge": "WorksAt", "from": "Bob", "to": "Acme", "data": {"id": "w1"}}"#,
                r#"{"edge": "WorksAt", "from": "Bob", "to": "Acme", "data": {"id": "w2"}}"#,
            ],
            "`Bob` would have 2 edges",
        ),
        // Alice already works at Acme.
        (LoadMode::Append, vec![r#"{"edge": "WorksAt", "from": "Alice", "to": "Acme"}"#], "`Alice` would have 2 edges"),
    ];
    for (mode, lines, needle) in refused {
        let data = lines.join("\n");
        let err = g.load(data.as_bytes(), mode, &opts()).await.expect_err(needle);
        assert!(err.to_string().contains(needle), "{data}: {err}");
        assert_eq!(pins(&g).await, before, "{data} changed something");
    }
    // Endpoints split between the load and committed rows are accepted.
    let data = [
        r#"{"type": "Person", "data": {"name": "Dan"}}"#,
        r#"{"edge": "Knows", "from": "Dan", "to": "Alice"}"#,
        r#"{"edge": "Knows", "from": "Carol", "to": "Dan"}"#,
        r#"{"edge": "WorksAt", "from": "Dan", "to": "Acme"}"#,
    ]
    .join("\n");
    let out = g.load(data.as_bytes(), LoadMode::Merge, &opts()).await.expect("valid load");
    assert_eq!((out.nodes_affected, out.edges_affected), (1, 3));
    assert_consistent(&g).await;
}

/// A merge load stages rows whose ids it minted (edges without `data.id`)
/// as an append after the merge-insert of the rest: two transactions on one
/// table, one commit, and the same rows as one merge-insert would give.
#[tokio::test]
async fn a_merge_load_appends_minted_ids_and_merges_given_ones() {
    let (_dir, g) = loaded_social_graph().await;
    let data = [
        r#"{"type": "Person", "data": {"name": "Bob", "age": 28}}"#,
        r#"{"edge": "Knows", "from": "Alice", "to": "Carol", "data": {"id": "k1"}}"#,
        r#"{"edge": "Knows", "from": "Carol", "to": "Alice"}"#,
    ]
    .join("\n");
    let (before, commits) = (pins(&g).await, g.commits("main", None).await.expect("commits").len());
    let out = g.load(data.as_bytes(), LoadMode::Merge, &opts()).await.expect("merge");
    assert_eq!((out.nodes_affected, out.edges_affected), (1, 2));
    let after = pins(&g).await;
    assert_eq!(after["edge:Knows"], (before["edge:Knows"].0 + 2, 4), "merge-insert, then append");
    assert_eq!(after["node:Person"], (before["node:Person"].0 + 1, 3), "an upsert of a keyed node");
    assert_eq!(g.commits("main", None).await.expect("commits").len(), commits + 1, "one commit");
    assert_consistent(&g).await;

    // Again: k1 is updated in place, the id-less edge is a new edge again.
    g.load(data.replace("Carol\", \"data", "Bob\", \"data").as_bytes(), LoadMode::Merge, &opts())
        .await
        .expect("merge again");
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let knows = &view.state.tables["edge:Knows"];
    let ds = table::open_table(&g.root().child_uri(&knows.location), None, Some(knows.version)).await.expect("open");
    let batches = table::scan_columns(&ds, &["id", "dst"]).await.expect("scan");
    let rows: Vec<(String, String)> = batches
        .iter()
        .flat_map(|b| {
            let col = |n: &str| {
                b.column_by_name(n)
                    .expect("column")
                    .as_any()
                    .downcast_ref::<arrow_array::StringArray>()
                    .expect("utf8")
                    .clone()
            };
            let (id, dst) = (col("id"), col("dst"));
            (0..b.num_rows()).map(move |i| (id.value(i).to_string(), dst.value(i).to_string()))
        })
        .collect();
    assert_eq!(rows.len(), 5, "{rows:?}");
    let k1: Vec<_> = rows.iter().filter(|(id, _)| id == "k1").collect();
    assert_eq!(k1, vec![&("k1".to_string(), "Bob".to_string())], "k1 updated in place");
    assert_consistent(&g).await;
}

#[tokio::test]
async fn the_admission_limit_refuses_an_oversized_mutation_before_arming() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let mut src = String::from("query big() {\n");
    for i in 0..8_193 {
        src.push_str(&format!("  insert Company {{ name: \"c{i}\" }}\n"));
    }
    src.push('}');
    let err = g.mutate(&src, None, Map::new(), &opts()).await.expect_err("limit");
    match err {
        OmniError::ResourceLimitExceeded { limit, actual, .. } => assert_eq!((limit, actual), (8_192, 8_193)),
        other => panic!("expected ResourceLimitExceeded, got {other}"),
    }
    assert_eq!(pins(&g).await, before);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn strict_append_of_an_existing_id_is_a_key_conflict() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let err = g
        .load(r#"{"type": "Person", "data": {"name": "Alice"}}"#.as_bytes(), LoadMode::Append, &opts())
        .await
        .expect_err("conflict");
    assert!(
        matches!(&err, OmniError::KeyConflict { entity_kind: "node", type_name, id } if type_name == "Person" && id == "Alice"),
        "{err}"
    );
    assert_eq!(pins(&g).await, before);
}

/// A keyed insert commits through a merge-insert; its version's manifest
/// (which every open of the table reads) carries no 32 KiB bloom filter of
/// the inserted keys, which only Lance's retries would use.
#[tokio::test]
async fn a_keyed_insert_leaves_a_small_manifest() {
    let (_dir, g) = loaded_social_graph().await;
    g.mutate(r#"query q() { insert Person { name: "Dana", age: 33 } }"#, None, Map::new(), &opts())
        .await
        .expect("insert");
    let view = omnigraph::engine::manifest::load(g.root(), "main", None).await.expect("view");
    let entry = &view.state.tables["node:Person"];
    let person = omnigraph::engine::committed::open_pinned(g.root(), entry).await.expect("open");
    let operation = table::operation_at(&person, entry.version).await.expect("operation");
    assert_eq!(operation.as_deref(), Some("Update"), "the insert is a merge-insert");
    let bytes = table::manifest_bytes(&person).await.expect("size");
    assert!(bytes < 16 * 1024, "Person's manifest after a keyed insert: {bytes} bytes");
}

/// A large append (past the size where the key check streams the table's
/// ids instead of probing them) names the smallest id that already exists,
/// and a large append of new ids lands whole.
#[tokio::test]
async fn a_large_strict_append_checks_every_id_against_the_table() {
    let (_dir, g) = loaded_social_graph().await;
    let person = |name: &str| format!(r#"{{"type": "Person", "data": {{"name": "{name}"}}}}"#);
    let fresh: Vec<String> = (0..3_000).map(|i| person(&format!("N{i:04}"))).collect();
    let mut clashing = fresh.clone();
    clashing[2_500] = person("Bob");
    clashing[1_000] = person("Carol");
    let before = pins(&g).await;
    let err = g.load(clashing.join("\n").as_bytes(), LoadMode::Append, &opts()).await.expect_err("conflict");
    assert!(
        matches!(&err, OmniError::KeyConflict { entity_kind: "node", type_name, id } if type_name == "Person" && id == "Bob"),
        "{err}"
    );
    assert_eq!(pins(&g).await, before);
    let out = g.load(fresh.join("\n").as_bytes(), LoadMode::Append, &opts()).await.expect("fresh ids");
    assert_eq!(out.nodes_affected, 3_000);
    assert_consistent(&g).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_strict_loads_of_one_id_have_exactly_one_winner() {
    let (_dir, g) = social_graph().await;
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let g = g.clone();
            tokio::spawn(async move {
                g.load(r#"{"type": "Company", "data": {"name": "Solo"}}"#.as_bytes(), LoadMode::Append, &opts()).await
            })
        })
        .collect();
    let (mut won, mut conflicts) = (0, 0);
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => won += 1,
            Err(OmniError::KeyConflict { .. }) => conflicts += 1,
            Err(other) => panic!("unexpected: {other}"),
        }
    }
    assert_eq!((won, conflicts), (1, 15));
    assert_eq!(pins(&g).await["node:Company"].1, 1);
    assert_eq!(g.commits("main", None).await.expect("commits").len(), 2);
    assert_consistent(&g).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_concurrent_strict_loads_of_disjoint_ids_all_land() {
    let (_dir, g) = social_graph().await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move {
                let line = format!(r#"{{"type": "Company", "data": {{"name": "c{i}"}}}}"#);
                g.load(line.as_bytes(), LoadMode::Append, &opts()).await
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("join").expect("load");
    }
    assert_eq!(pins(&g).await["node:Company"].1, 16);
    let commits = g.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 17);
    for pair in commits.windows(2) {
        assert_eq!(pair[0].parent_commit_id.as_deref(), Some(pair[1].commit_id.as_str()));
    }
    assert_consistent(&g).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_insert_mutations_form_one_linear_chain() {
    let (_dir, g) = loaded_social_graph().await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move {
                let src = format!(r#"query q() {{ insert Company {{ name: "m{i}" }} }}"#);
                g.mutate(&src, None, Map::new(), &opts()).await
            })
        })
        .collect();
    let mut ids = HashSet::new();
    for t in tasks {
        ids.insert(t.await.expect("join").expect("mutate").commit_id.expect("commit"));
    }
    let commits = g.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 10);
    for pair in commits.windows(2) {
        assert_eq!(pair[0].parent_commit_id.as_deref(), Some(pair[1].commit_id.as_str()));
    }
    let present: HashSet<String> = commits.iter().map(|c| c.commit_id.clone()).collect();
    assert!(ids.is_subset(&present));
    assert_eq!(pins(&g).await["node:Company"].1, 9);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn a_strict_update_whose_head_moved_gets_read_set_changed() {
    let (_dir, g) = loaded_social_graph().await;
    // Capture a stale precondition, then move the head.
    let head = g.snapshot("main").await.expect("snap").head_commit_id.expect("head");
    g.mutate(r#"query q() { insert Company { name: "Other" } }"#, None, Map::new(), &opts()).await.expect("mutate");
    let before = pins(&g).await;
    let stale = WriteOptions { if_commit: Some(head.clone()), ..opts() };
    let err = g
        .mutate(r#"query q() { update Person set { age: 50 } where name = "Alice" }"#, None, Map::new(), &stale)
        .await
        .expect_err("precondition");
    assert!(matches!(&err, OmniError::PreconditionFailed { expected, .. } if *expected == head), "{err}");
    assert_eq!(err.exit_code(), 4);
    assert_eq!(pins(&g).await, before);
}

#[tokio::test]
async fn a_mixed_mutation_is_rejected_before_any_io() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let src = r#"query mix() {
    insert Company { name: "New" }
    delete Person where name = "Bob"
}"#;
    let err = g.mutate(src, None, Map::new(), &opts()).await.expect_err("D2");
    let msg = err.to_string();
    assert!(msg.contains("mix") && msg.contains("split it into separate mutations"), "{msg}");
    assert_eq!(pins(&g).await, before);
}

#[tokio::test]
async fn every_cookbook_seed_loads_with_overwrite_and_reloads_stably() {
    let Some(fixtures) = shared_fixtures() else { return };
    for seed in files_with_suffix(&fixtures.join("cookbooks"), "seed.jsonl") {
        let dir = seed.parent().expect("cookbook dir");
        let schema = std::fs::read_to_string(dir.join("schema.pg")).expect("schema");
        let data = std::fs::read_to_string(&seed).expect("seed");
        let (_tmp, loc) = temp_graph_dir();
        let g = omnigraph::Omnigraph::init(&loc, &schema).await.expect("init");
        g.load(data.as_bytes(), LoadMode::Overwrite, &opts())
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", seed.display()));
        let first: BTreeMap<String, u64> = pins(&g).await.into_iter().map(|(k, (_, n))| (k, n)).collect();
        let lines = data.lines().filter(|l| !l.trim().is_empty()).count() as u64;
        assert_eq!(first.values().sum::<u64>(), lines, "{}", seed.display());
        g.load(data.as_bytes(), LoadMode::Overwrite, &opts()).await.expect("second overwrite");
        let second: BTreeMap<String, u64> = pins(&g).await.into_iter().map(|(k, (_, n))| (k, n)).collect();
        assert_eq!(first, second, "{}", seed.display());
        let nodes: String = data.lines().filter(|l| l.contains("\"type\"")).map(|l| format!("{l}\n")).collect();
        let before = pins(&g).await;
        g.load(nodes.as_bytes(), LoadMode::Merge, &opts()).await.expect("merge nodes");
        let after = pins(&g).await;
        for (k, (_, n)) in &after {
            assert_eq!(*n, before[k].1, "{}: merge of node lines changed {k}", seed.display());
        }
        assert_consistent(&g).await;
    }
}

#[tokio::test]
async fn a_missing_required_property_is_refused_with_no_effect() {
    let (_dir, loc) = temp_graph_dir();
    let g = omnigraph::Omnigraph::init(&loc, "node Task { title: String\n done: Bool }\n").await.expect("init");
    let before = pins(&g).await;
    let err = g
        .load(r#"{"type": "Task", "data": {"title": "write docs"}}"#.as_bytes(), LoadMode::Append, &opts())
        .await
        .expect_err("done is required");
    assert!(err.to_string().contains("done"), "{err}");
    assert_eq!(pins(&g).await, before);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn the_staged_bytes_limit_refuses_a_mutation_before_arming() {
    let (_dir, g) = loaded_social_graph().await;
    let before = pins(&g).await;
    let big = "x".repeat(7 * 1024 * 1024);
    let mut params = Map::new();
    let mut src = String::from("query big($a: String, $b: String, $c: String, $d: String, $e: String) {\n");
    for p in ["a", "b", "c", "d", "e"] {
        params.insert(p.to_string(), Value::String(format!("{p}{big}")));
        src.push_str(&format!("  insert Company {{ name: ${p} }}\n"));
    }
    src.push('}');
    let err = g.mutate(&src, None, params, &opts()).await.expect_err("over 32 MiB");
    match err {
        OmniError::ResourceLimitExceeded { resource, limit, actual } => {
            assert!(resource.contains("bytes") && resource.contains("node:Company"), "{resource}");
            assert_eq!(limit, 32 * 1024 * 1024);
            assert!(actual > limit);
        }
        other => panic!("expected ResourceLimitExceeded, got {other}"),
    }
    assert_eq!(pins(&g).await, before);
    assert_consistent(&g).await;
}

#[tokio::test]
async fn a_composite_unique_is_checked_against_committed_rows() {
    let schema = "node P { name: String @key }\nedge Corr: P -> P { @unique(src, dst) }\n";
    let lines = [
        r#"{"type": "P", "data": {"name": "a"}}"#,
        r#"{"type": "P", "data": {"name": "b"}}"#,
        r#"{"edge": "Corr", "from": "a", "to": "b"}"#,
    ];
    let (_dir, g) = graph_with(schema, &lines).await;
    let before = pins(&g).await;
    let again = "{\"edge\": \"Corr\", \"from\": \"a\", \"to\": \"b\"}\n";
    let err = g.load(again.as_bytes(), LoadMode::Merge, &opts()).await.expect_err("duplicate pair");
    assert!(err.to_string().contains("@unique(src, dst)"), "{err}");
    let err = g
        .mutate(r#"query q() { insert Corr { from: "a", to: "b" } }"#, None, Map::new(), &opts())
        .await
        .expect_err("duplicate pair");
    assert!(err.to_string().contains("@unique(src, dst)"), "{err}");
    assert_eq!(pins(&g).await, before);
    g.mutate(r#"query q() { insert Corr { from: "b", to: "a" } }"#, None, Map::new(), &opts())
        .await
        .expect("a new pair");
}
