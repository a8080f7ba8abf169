//! The `omnigraph` binary, run as a real process.

use std::process::{Command, Output};

use crate::common::temp_graph_dir;

fn omnigraph(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run omnigraph")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn example_schema() -> String {
    format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn init_snapshot_commit_and_schema_commands_work_end_to_end() {
    let (_dir, loc) = temp_graph_dir();
    let schema = example_schema();
    let out = omnigraph(&["init", "--schema", &schema, &loc]);
    assert!(out.status.success(), "init failed: {}", stderr(&out));
    assert!(stdout(&out).contains("4 tables"), "{}", stdout(&out));

    let out = omnigraph(&["snapshot", "--json", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let snap: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("snapshot json");
    assert_eq!(snap["storage_stamp"], 4);
    assert_eq!(snap["branch"], "main");
    let tables = snap["tables"].as_array().expect("tables");
    assert_eq!(tables.len(), 4);
    assert!(tables.iter().all(|t| t["version"] == 1 && t["row_count"] == 0));
    let head = snap["head_commit_id"].as_str().expect("head").to_string();

    let out = omnigraph(&["snapshot", &loc]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("node:Person") && stdout(&out).contains(&head));

    let out = omnigraph(&["commit", "list", "--json", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let commits: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("commit json");
    assert_eq!(commits.as_array().map(Vec::len), Some(1));
    assert_eq!(commits[0]["commit_id"], head.as_str());
    assert_eq!(commits[0]["actor"], "omnigraph:init");

    let out = omnigraph(&["commit", "show", &head, &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&head) && stdout(&out).contains("omnigraph:init"));

    let out = omnigraph(&["schema", "show", &loc]);
    assert!(out.status.success());
    assert_eq!(stdout(&out), std::fs::read_to_string(&schema).expect("schema"));
}

/// An error is one clear line on stderr (after a write's target echo,
/// `omnigraph CMD → GRAPH (…)`), a non-zero exit, and no panic or backtrace.
fn assert_one_line_error(out: &Output, needle: &str) {
    assert!(!out.status.success());
    let err = stderr(out);
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
    let lines: Vec<&str> = err.trim().lines().filter(|l| !(l.starts_with("omnigraph ") && l.contains(" → "))).collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
}

#[test]
fn a_bad_graph_path_prints_one_clear_line() {
    let (_dir, loc) = temp_graph_dir();
    assert_one_line_error(&omnigraph(&["snapshot", &loc]), "no graph at");
    assert_one_line_error(&omnigraph(&["commit", "list", &loc]), "no graph at");
}

#[test]
fn bad_arguments_and_bad_schemas_fail_cleanly() {
    let (_dir, loc) = temp_graph_dir();
    assert_one_line_error(&omnigraph(&["init", "--schema", "/nonexistent.pg", &loc]), "cannot read /nonexistent.pg");
    let bad = tempfile::NamedTempFile::new().expect("tmp");
    std::fs::write(bad.path(), "node Person {\n  name String\n}\n").expect("write");
    let out = omnigraph(&["init", "--schema", &bad.path().to_string_lossy(), &loc]);
    assert_one_line_error(&out, "2:");
    assert_eq!(out.status.code(), Some(2));
    let out = omnigraph(&["init", "--schema", &example_schema(), &loc]);
    assert!(out.status.success());
    assert_one_line_error(&omnigraph(&["init", "--schema", &example_schema(), &loc]), "already exists");
    assert_one_line_error(
        &omnigraph(&["commit", "show", "01NOPE", &loc]),
        "no branch, tag or commit is named `01NOPE`",
    );
    let out = omnigraph(&["snapshot", "--json", &loc, "--branch", "nope"]);
    assert!(!out.status.success());
    let body: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json error body");
    assert_eq!(body["code"], "not_found");
    let out = omnigraph(&["frobnicate"]);
    assert!(!out.status.success());
}

#[test]
fn lint_reports_each_query_and_fails_only_on_errors() {
    let dir = crate::scratch::tempdir();
    let good = dir.path().join("good.gq");
    std::fs::write(
        &good,
        "query people($min: I32) { match { $p: Person  $p.age > $min } return { $p.name, $p.age as age } }\n\
         query hire($n: String) { insert Person { name: $n } }\n",
    )
    .expect("write");
    let out = omnigraph(&["lint", "--query", &good.to_string_lossy(), "--schema", &example_schema(), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(report["errors"], 0);
    let people = &report["queries"][0];
    assert_eq!(people["name"], "people");
    assert_eq!(people["kind"], "read");
    assert_eq!(people["params"][0], serde_json::json!({"name": "min", "type": "I32"}));
    assert_eq!(people["columns"][1], serde_json::json!({"name": "age", "type": "I32?"}));
    assert_eq!(people["reads"], serde_json::json!(["Person"]));
    assert_eq!(report["queries"][1]["writes"], serde_json::json!(["Person"]));

    let bad = dir.path().join("bad.gq");
    std::fs::write(&bad, "query q() {\n  match { $p: Persn }\n  return { $p.name }\n}\n").expect("write");
    let out = omnigraph(&["check", "--query", &bad.to_string_lossy(), "--schema", &example_schema()]);
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains(":2:") && text.contains("[T1]"), "{text}");
}

#[test]
fn load_mutate_and_query_work_end_to_end() {
    let (_dir, loc) = temp_graph_dir();
    assert!(omnigraph(&["init", "--schema", &example_schema(), &loc]).status.success());
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    let out = omnigraph(&["load", "--data", &data, "--mode", "overwrite", "--json", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let load: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!((load["nodes_affected"].as_u64(), load["edges_affected"].as_u64()), (Some(4), Some(4)));
    let head = load["commit_id"].as_str().expect("commit").to_string();

    let out = omnigraph(&[
        "mutate",
        "-e",
        "query q($n: String) { insert Person { name: $n, age: 5 } }",
        "--params",
        r#"{"n": "Kim"}"#,
        "--as",
        "bot",
        "--json",
        &loc,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stale =
        omnigraph(&["mutate", "-e", "query q() { insert Company { name: \"X\" } }", "--if-commit", &head, &loc]);
    assert_eq!(stale.status.code(), Some(4), "a stale --if-commit exits 4: {}", stderr(&stale));

    let q = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let out = omnigraph(&["query", "-e", q, "--format", "csv", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "p.name\nAlice\nBob\nCarol\nKim\n");
    let out = omnigraph(&["query", "-e", q, "--commit", &head, "--json", &loc]);
    let env: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(env["row_count"], 3, "time travel to the load commit");
    assert_eq!(env["graph_commit_id"], head.as_str());
    let out = omnigraph(&["query", "-e", q, "--format", "jsonl", &loc]);
    assert_eq!(stdout(&out).lines().count(), 4);
    let out = omnigraph(&["commit", "list", "--json", &loc]);
    let commits: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(commits[0]["actor"], "bot");
}

#[test]
fn branch_create_list_delete_and_branch_writes_work_end_to_end() {
    let (_dir, loc) = temp_graph_dir();
    assert!(omnigraph(&["init", "--schema", &example_schema(), &loc]).status.success());
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    assert!(omnigraph(&["load", "--data", &data, "--mode", "overwrite", "-q", &loc]).status.success());

    let out = omnigraph(&["branch", "create", "--json", "review/alice", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let created: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!((created["name"].as_str(), created["from"].as_str()), (Some("review/alice"), Some("main")));

    let person = "{\"type\": \"Person\", \"data\": {\"name\": \"Dee\", \"age\": 3}}\n";
    let file = std::path::Path::new(&loc).with_extension("dee.jsonl");
    std::fs::write(&file, person).expect("write data");
    let dee = file.to_string_lossy().to_string();
    let out = omnigraph(&["load", "--data", &dee, "--mode", "append", "--branch", "forked", &loc]);
    assert!(!out.status.success(), "a missing branch without --from");
    let out = omnigraph(&["load", "--data", &dee, "--mode", "append", "--branch", "forked", "--from", "main", &loc]);
    assert!(out.status.success(), "--from forks the missing branch: {}", stderr(&out));
    let out =
        omnigraph(&["load", "--data", &file.to_string_lossy(), "--mode", "append", "--branch", "review/alice", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out =
        omnigraph(&["mutate", "-e", "query q() { insert Company { name: \"Z\" } }", "--branch", "review/alice", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));

    let q = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
    let out = omnigraph(&["query", "-e", q, "--format", "csv", "--branch", "review/alice", &loc]);
    assert_eq!(stdout(&out), "p.name\nAlice\nBob\nCarol\nDee\n");
    let out = omnigraph(&["query", "-e", q, "--format", "csv", &loc]);
    assert_eq!(stdout(&out), "p.name\nAlice\nBob\nCarol\n", "main is isolated");

    let out = omnigraph(&["commit", "list", "--branch", "review/alice", "--json", &loc]);
    let commits: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    let branches: Vec<&str> = commits.as_array().expect("list").iter().filter_map(|c| c["branch"].as_str()).collect();
    assert_eq!(branches, ["review/alice", "review/alice", "main", "main"], "own commits first, then inherited");

    let out = omnigraph(&["branch", "list", "--json", &loc]);
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    let names: Vec<&str> =
        listed["branches"].as_array().expect("branches").iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["main", "forked", "review/alice"]);

    assert_one_line_error(&omnigraph(&["branch", "create", "review", &loc]), "path-prefix-disjoint");
    assert_one_line_error(&omnigraph(&["branch", "create", "bad name", &loc]), "invalid branch name");
    let out = omnigraph(&["branch", "create", "--json", "review/alice", &loc]);
    let err: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json error");
    assert_eq!(err["code"], "conflict");
    assert_eq!(err["branch_conflict"]["branch"], "review/alice");

    let out = omnigraph(&["branch", "delete", "--json", "review/alice", &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let deleted: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(deleted["restorable"], true, "{deleted}");
    assert_one_line_error(&omnigraph(&["branch", "delete", "review/alice", &loc]), "not found");
    let out = omnigraph(&["branch", "delete", "--purge", "--json", "forked", &loc]);
    let purged: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(purged["restorable"], false, "{purged}");
    assert_one_line_error(&omnigraph(&["snapshot", "--branch", "review/alice", &loc]), "not found");
}

/// A successful command never prints panic text: the CLI lets its actors
/// finish and exits without cancelling Lance's in-flight read tasks (which
/// used to print `panicked at …filtered_read.rs … JoinError::Cancelled` on
/// about one mutation in seven). 100 mutations in a row, so a one-in-seven
/// failure cannot pass by luck.
#[test]
fn a_hundred_cli_mutations_print_no_panic() {
    let (_dir, loc) = temp_graph_dir();
    let out = omnigraph(&["init", "--schema", &example_schema(), &loc]);
    assert!(out.status.success(), "init failed: {}", stderr(&out));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    let out = omnigraph(&["load", "--data", &data, "--mode", "overwrite", "-q", &loc]);
    assert!(out.status.success(), "load failed: {}", stderr(&out));
    let persons = || {
        let out = omnigraph(&["snapshot", "--json", &loc]);
        let snap: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("snapshot json");
        let tables = snap["tables"].as_array().expect("tables").clone();
        tables.into_iter().find(|t| t["table_key"] == "node:Person").expect("person")["row_count"].as_u64()
    };
    let loaded = persons().expect("row count");
    let mut panics = Vec::new();
    for i in 0..100 {
        let query = format!(r#"query q() {{ insert Person {{ name: "P{i}", age: {i} }} }}"#);
        let out = omnigraph(&["mutate", "-e", &query, &loc]);
        assert!(out.status.success(), "mutation {i} failed: {}", stderr(&out));
        let text = format!("{}{}", stdout(&out), stderr(&out));
        if text.contains("panicked") {
            panics.push(format!("mutation {i}: {text}"));
        }
    }
    assert!(panics.is_empty(), "{} of 100 mutations printed a panic:\n{}", panics.len(), panics.join("\n"));
    assert_eq!(persons(), Some(loaded + 100), "every mutation landed");
}

/// A misspelt known annotation compiles (unknown ones are custom metadata)
/// but `init` and `lint` warn, naming the closest known name.
#[test]
fn init_and_lint_warn_about_a_misspelt_annotation() {
    let (dir, loc) = temp_graph_dir();
    let schema = dir.path().join("s.pg");
    std::fs::write(&schema, "node A @indx {\n  name: String @key @uniqe\n}\n").expect("schema");
    let schema = schema.to_string_lossy().to_string();
    let out = omnigraph(&["init", "--schema", &schema, &loc]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("s.pg:1:8: [W01]") && err.contains("did you mean `@index`?"), "{err}");
    assert!(err.contains("did you mean `@unique`?"), "{err}");
    let query = dir.path().join("q.gq");
    std::fs::write(&query, "query q() { match { $a: A } return { $a.name } }").expect("query");
    let out = omnigraph(&["lint", "--query", &query.to_string_lossy(), "--schema", &schema]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("did you mean `@index`?"), "{}", stderr(&out));
    let (_d2, loc2) = temp_graph_dir();
    let out = omnigraph(&["init", "--schema", &schema, "--json", &loc2]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(v["warnings"].as_array().map(Vec::len), Some(2), "{v}");
}

#[test]
fn output_into_a_pipe_its_reader_closed_ends_quietly() {
    let (_dir, loc) = temp_graph_dir();
    assert!(omnigraph(&["init", "--schema", &example_schema(), &loc]).status.success());
    // `omnigraph snapshot --json | head -c0`: the reader is gone before the first write.
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["snapshot", "--json", &loc])
        .stdout(writer)
        .output()
        .expect("run omnigraph");
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}
