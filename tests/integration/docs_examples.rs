//! Runs every example of docs/queries.md against the example graph and
//! compares the rows the page shows.

use omnigraph::{ReadTarget, result_rows};
use serde_json::{Value, json};

use crate::common::loaded_social_graph;

/// (query source, params, expected rows) for each ```gq block followed by a ```json block.
fn examples(page: &str) -> Vec<(String, Value, Value)> {
    let mut out = Vec::new();
    let blocks: Vec<(&str, String)> = page
        .split("```")
        .collect::<Vec<_>>()
        .chunks(2)
        .filter_map(|c| c.get(1))
        .filter_map(|b| b.split_once('\n').map(|(lang, body)| (lang.trim(), body.to_string())))
        .collect();
    for pair in blocks.windows(2) {
        if let [("gq", src), ("json", expected)] = pair {
            let v: Value = serde_json::from_str(expected).expect("example json");
            let (params, rows) = match v {
                Value::Object(o) => {
                    (o.get("params").cloned().unwrap_or_default(), o.get("rows").cloned().unwrap_or_default())
                }
                rows => (Value::Null, rows),
            };
            out.push((src.clone(), params, rows));
        }
    }
    out
}

#[tokio::test]
async fn every_query_example_in_the_docs_returns_the_rows_shown() {
    let page = include_str!("../../docs/queries.md");
    let cases = examples(page);
    assert!(cases.len() >= 6, "found only {} examples", cases.len());
    let (_dir, g) = loaded_social_graph().await;
    for (src, params, expected) in cases {
        let params = params.as_object().cloned().unwrap_or_default();
        let r = g.query(&src, None, params, &ReadTarget::default()).await.unwrap_or_else(|e| panic!("{src}: {e}"));
        let rows: Vec<Value> = result_rows(&r).into_iter().map(Value::Object).collect();
        assert_eq!(Value::Array(rows), expected, "{src}");
    }
}

/// The command walk-through at the top of docs/branches.md runs as written
/// (as real processes, on a graph with the example data, `more.jsonl`
/// standing in for the reader's file).
#[test]
fn the_branch_walkthrough_in_the_docs_runs() {
    let block = first_sh_block(include_str!("../../docs/branches.md"));
    let (dir, loc) = example_graph_by_cli();
    let run = |args: &[&str]| run_ok(dir.path(), args);
    std::fs::write(dir.path().join("more.jsonl"), "{\"type\": \"Company\", \"data\": {\"name\": \"More\"}}\n")
        .expect("more.jsonl");
    let mut ran = 0;
    for line in block.lines().filter(|l| l.starts_with("omnigraph ")) {
        let words = shell_words(line);
        let args: Vec<&str> =
            words[1..].iter().map(|w| if w == "./g.graph" { loc.as_str() } else { w.as_str() }).collect();
        run(&args);
        ran += 1;
    }
    assert!(ran >= 6, "ran only {ran} commands");
}

/// The merge walk-through in docs/branches.md runs as written and ends with
/// both sides' changes on main.
#[test]
fn the_merge_walkthrough_in_the_docs_runs() {
    let page = include_str!("../../docs/branches.md");
    let block = page
        .split("```sh\n")
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains("branch merge --dry-run review "))
        .expect("the merge walk-through");
    let dir = crate::scratch::tempdir();
    let ex = format!("{}/examples", env!("CARGO_MANIFEST_DIR"));
    for f in ["social.pg", "social.jsonl"] {
        std::fs::copy(format!("{ex}/{f}"), dir.path().join(f)).expect("copy example");
    }
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let mut last = String::new();
    for line in block.lines().filter(|l| l.starts_with("omnigraph ")) {
        let words = shell_words(line);
        let out = std::process::Command::new(bin).args(&words[1..]).current_dir(dir.path()).output().expect("run");
        assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stderr));
        last = String::from_utf8_lossy(&out.stdout).to_string();
    }
    let rows: Value = serde_json::from_str(&last).expect("query json");
    let rows = rows["rows"].as_array().expect("rows").clone();
    let age = |name: &str| rows.iter().find(|r| r["p.name"] == name).map(|r| r["p.age"].clone());
    assert_eq!(age("Alice"), Some(serde_json::json!(32)), "{rows:?}");
    assert_eq!(age("Mia"), Some(serde_json::json!(20)), "{rows:?}");
}

/// The conflicts walk-through in docs/branches.md runs as written: the dry
/// runs exit 1 listing (or counting) the conflicts with their values, the
/// page's `resolve.json` decides them, and the result is what the page says.
#[test]
fn the_conflicts_walkthrough_in_the_docs_runs() {
    let page = include_str!("../../docs/branches.md");
    let sh = |marker: &str| {
        page.split("```sh\n").filter_map(|b| b.split("```").next()).find(|b| b.contains(marker)).expect(marker)
    };
    let block = sh("--resolve resolve.json");
    let resolve = page
        .split("```json\n")
        .filter_map(|b| b.split("```").next())
        .find(|b| b.contains(r#""id": "Eve", "take": "ours""#))
        .expect("resolve.json");
    let dir = crate::scratch::tempdir();
    let ex = format!("{}/examples", env!("CARGO_MANIFEST_DIR"));
    for f in ["social.pg", "social.jsonl"] {
        std::fs::copy(format!("{ex}/{f}"), dir.path().join(f)).expect("copy example");
    }
    std::fs::write(dir.path().join("resolve.json"), resolve).expect("resolve.json");
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let mut last = String::new();
    for line in block.lines().filter(|l| l.starts_with("omnigraph ")) {
        let words = shell_words(line);
        let out = std::process::Command::new(bin).args(&words[1..]).current_dir(dir.path()).output().expect("run");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        if line.contains("--dry-run") {
            assert_eq!(out.status.code(), Some(1), "{line}: {err}");
            if line.contains("--stat") {
                assert!(err.contains("divergent_insert") && err.contains("divergent_update"), "{err}");
            } else {
                assert!(err.contains("age: base 27, ours 41, theirs 40"), "{line}: {err}");
            }
            continue;
        }
        assert!(out.status.success(), "{line}: {err}");
        last = String::from_utf8_lossy(&out.stdout).to_string();
    }
    let rows: Value = serde_json::from_str(&last).expect("query json");
    let rows = rows["rows"].as_array().expect("rows").clone();
    let person =
        |name: &str| rows.iter().find(|r| r["p.name"] == name).map(|r| (r["p.age"].clone(), r["p.email"].clone()));
    assert_eq!(person("Bob"), Some((serde_json::json!(40), serde_json::json!("bob@fix.example"))), "{rows:?}");
    assert_eq!(person("Eve"), Some((serde_json::json!(2), Value::Null)), "{rows:?}");
}

/// The walk-through in docs/schema-evolution.md runs as written: the plan
/// writes nothing, the apply is one commit, the new type takes a write and
/// the new property reads as null on every existing row.
#[test]
fn the_schema_evolution_walkthrough_in_the_docs_runs() {
    let block = first_sh_block(include_str!("../../docs/schema-evolution.md"));
    let (dir, loc) = example_graph_by_cli();
    let run = |args: &[&str]| run_ok(dir.path(), args);
    let next = crate::common::SOCIAL_PG.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n")
        + "\nnode Team { name: String @key }\n";
    std::fs::write(dir.path().join("next.pg"), next).expect("next.pg");
    let commits = |out: String| serde_json::from_str::<Value>(&out).expect("json").as_array().expect("list").len();
    let before = commits(run(&["commit", "list", "--json", &loc]));
    let outputs = run_block(block, dir.path(), &loc);
    assert_eq!(outputs.len(), 4, "the walk-through has four commands");
    assert!(outputs[0].contains("add node type Team"), "plan output: {}", outputs[0]);
    let applied: Value = serde_json::from_str(&outputs[1]).expect("apply json");
    assert_eq!(applied["applied"], true, "{applied}");
    // The apply and the insert: two commits.
    assert_eq!(commits(run(&["commit", "list", "--json", &loc])), before + 2);
    let rows: Value = serde_json::from_str(&outputs[3]).expect("query json");
    let rows = rows["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows.iter().all(|r| r["p.nickname"].is_null()), "{rows:?}");
}

/// The merge walk-through of docs/schema-evolution.md ("Merging schema
/// changes") runs as written: a branch's property and main's new type both
/// land on main in one merge commit.
#[test]
fn the_schema_merge_walkthrough_in_the_docs_runs() {
    let page = include_str!("../../docs/schema-evolution.md");
    let section = page.split("## Merging schema changes").nth(1).expect("the section");
    let block = first_sh_block(section);
    let (dir, loc) = example_graph_by_cli();
    let social = crate::common::SOCIAL_PG;
    let feature = social.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n");
    std::fs::write(dir.path().join("feature.pg"), feature).expect("feature.pg");
    std::fs::write(dir.path().join("teams.pg"), format!("{social}\nnode Team {{ name: String @key }}\n"))
        .expect("teams.pg");
    let outputs = run_block(block, dir.path(), &loc);
    assert_eq!(outputs.len(), 8, "the walk-through has eight commands");
    let merged: Value = serde_json::from_str(&outputs[5]).expect("merge json");
    assert_eq!(merged["outcome"], "merged", "{merged}");
    assert!(merged["schema_steps"].to_string().contains("nickname"), "{merged}");
    let rows: Value = serde_json::from_str(&outputs[6]).expect("query json");
    assert_eq!(rows["rows"][0], serde_json::json!({"p.name": "Alice", "p.nickname": "Al"}), "{rows}");
    assert!(outputs[7].contains("nickname: String?") && outputs[7].contains("node Team"), "{}", outputs[7]);

    // Continued: a row conflict across a rename, shown and resolved in the merged shape.
    let years = outputs[7]
        .replace("    age: I32?\n", "    years: I32? @rename_from(\"age\")\n")
        .replace("@range(age, 0..150)", "@range(years, 0..150)");
    assert!(years.contains("@rename_from") && years.contains("@range(years"), "{years}");
    std::fs::write(dir.path().join("years.pg"), years).expect("years.pg");
    let carol = r#"[{"type": "Person", "id": "Carol", "property": "years", "value": 55}]"#;
    assert!(section.contains(&format!("echo '{carol}' > carol.json")), "the docs write this file");
    std::fs::write(dir.path().join("carol.json"), carol).expect("carol.json");
    let block = section.split("```sh\n").nth(2).and_then(|b| b.split("```").next()).expect("a second sh block");
    let outputs = run_block(block, dir.path(), &loc);
    assert_eq!(outputs.len(), 7, "the continuation has seven commands");
    let refused: Value = serde_json::from_str(&outputs[4]).expect("refusal json");
    let years = refused["merge_conflicts"].as_array().and_then(|cs| cs.iter().find(|c| c["property"] == "years"));
    let years = years.unwrap_or_else(|| panic!("a conflict on years: {refused}"));
    assert_eq!((&years["base"], &years["ours"], &years["theirs"]), (&json!(45), &json!(60), &json!(50)), "{refused}");
    let resolved: Value = serde_json::from_str(&outputs[5]).expect("merge json");
    assert_eq!(resolved["conflicts_decided"], 1, "{resolved}");
    let rows: Value = serde_json::from_str(&outputs[6]).expect("query json");
    assert_eq!(rows["rows"], json!([{"p.years": 55}]), "{rows}");
}

/// The walk-through of docs/undo.md runs as written: the bad load is
/// reverted (main holds what it held before), and the reset branch holds
/// main's content again (Alice is back).
#[test]
fn the_undo_walkthrough_in_the_docs_runs() {
    let block = first_sh_block(include_str!("../../docs/undo.md"));
    let (dir, loc) = example_graph_by_cli();
    let run = |args: &[&str]| run_ok(dir.path(), args);
    std::fs::write(
        dir.path().join("bad.jsonl"),
        "{\"type\": \"Person\", \"data\": {\"name\": \"Mallory\", \"age\": 99}}\n",
    )
    .expect("bad.jsonl");
    let names = |branch: &str| {
        let q = "query q() { match { $p: Person } return { $p.name } order { $p.name asc } }";
        let out = run(&["query", "-e", q, "--branch", branch, "--json", &loc]);
        serde_json::from_str::<Value>(&out).expect("query json")["rows"].clone()
    };
    let before = names("main");
    let outputs = run_block(block, dir.path(), &loc);
    assert_eq!(outputs.len(), 9, "the walk-through has nine commands");
    assert!(outputs[4].contains("its head moved"), "reset output: {}", outputs[4]);
    assert!(outputs[6].contains("deleted branch experiment"), "delete output: {}", outputs[6]);
    assert!(outputs[7].contains("restored branch experiment"), "restore output: {}", outputs[7]);
    assert_eq!(outputs[8], outputs[5], "the restored branch reads as before its delete");
    assert_eq!(names("main"), before, "the bad load is reverted");
    assert_eq!(names("experiment"), before, "the experiment holds main's content again");
    assert!(before.to_string().contains("Alice"), "{before}");
}

/// Run each `omnigraph` line of `block` in `dir` (`./g.graph` standing for
/// the graph at `loc`), asserting each succeeds: their outputs.
fn run_block(block: &str, dir: &std::path::Path, loc: &str) -> Vec<String> {
    let lines = block.lines().filter(|l| l.starts_with("omnigraph "));
    lines
        .map(|line| {
            // A command the docs mark `# exits 1` must fail with 1.
            let (line, comment) = line.split_once("  # ").unwrap_or((line, ""));
            let words = shell_words(line);
            let args: Vec<&str> = words[1..].iter().map(|w| if w == "./g.graph" { loc } else { w.as_str() }).collect();
            if !comment.starts_with("exits 1") {
                return run_ok(dir, &args);
            }
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(&args).current_dir(dir).output();
            let out = out.expect("run");
            assert_eq!(out.status.code(), Some(1), "omnigraph {args:?}: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8_lossy(&out.stdout).to_string()
        })
        .collect()
}

/// The first ```sh block of a docs page.
fn first_sh_block(page: &str) -> &str {
    page.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("an sh block")
}

/// A graph with the example data, made as the docs make it (`init`, then
/// `load`, as processes): its directory and location.
fn example_graph_by_cli() -> (tempfile::TempDir, String) {
    let (dir, loc) = crate::common::temp_graph_dir();
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    run_ok(dir.path(), &["init", "--schema", &schema, &loc]);
    run_ok(dir.path(), &["load", "--data", &data, "--mode", "overwrite", "-q", &loc]);
    (dir, loc)
}

/// Run the CLI in `dir`, asserting it succeeds; its stdout.
fn run_ok(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).current_dir(dir).output();
    let out = out.expect("run");
    assert!(out.status.success(), "omnigraph {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// Split a command line on spaces, keeping '…' quoted words whole.
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('\'') {
            let end = quoted.find('\'').expect("closing quote");
            out.push(quoted[..end].to_string());
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = rest[end..].trim_start();
        }
    }
    out
}

/// The change feed walk-through in docs/history.md runs as written: the
/// baseline's cursor (printed by its first line) stands in for `CURSOR`,
/// and the poll after a write delivers that write.
#[test]
fn the_change_feed_walkthrough_in_the_docs_runs() {
    let page = include_str!("../../docs/history.md");
    let section = page.split("## The change feed").nth(1).expect("the feed section");
    let block = first_sh_block(section);
    let (dir, loc) = example_graph_by_cli();
    let run = |args: &[&str]| run_ok(dir.path(), args);
    let mut cursor = String::new();
    let mut ran = Vec::new();
    for line in block.lines().filter(|l| l.starts_with("omnigraph ")) {
        let words = shell_words(line);
        let args: Vec<String> = words[1..]
            .iter()
            .map(|w| match w.as_str() {
                "./g.graph" => loc.clone(),
                "CURSOR" => cursor.clone(),
                w => w.to_string(),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        if args.contains(&"--cursor") {
            run(&["mutate", "-e", "query q() { insert Person { name: \"Fed\" } }", &loc]);
        }
        let out: serde_json::Value = serde_json::from_str(&run(&args)).expect("json");
        if let Some(c) = out["resume_cursor"].as_str() {
            cursor = c.to_string();
            let snapshot = std::fs::read_to_string(dir.path().join("snapshot.jsonl")).expect("snapshot");
            assert!(snapshot.contains("\"Alice\""), "{snapshot}");
        }
        if args.contains(&"--cursor") {
            assert_eq!(out["blocks"][0]["changes"][0]["id"], "Fed", "{out}");
        }
        ran.push(args[1].to_string());
    }
    assert_eq!(ran, ["baseline", "poll", "poll", "poll"]);
}
