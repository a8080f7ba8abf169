//! The reference implementation's documented command lines, run unchanged
//! as real processes (tests/fixtures/reference_cli/commands.txt), and the
//! addressing forms' bad input.

use std::path::Path;
use std::process::{Command, Output};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/reference_cli");

/// One documented session: its name and its `(expected status, line)`s
/// (`None`: a setup step, which must succeed).
struct Session {
    name: String,
    lines: Vec<(Option<i32>, String)>,
}

fn sessions() -> Vec<Session> {
    let text = std::fs::read_to_string(format!("{FIXTURES}/commands.txt")).expect("commands.txt");
    let mut out: Vec<Session> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        if let Some(name) = line.strip_prefix("== ") {
            out.push(Session { name: name.to_string(), lines: Vec::new() });
            continue;
        }
        let (status, command) = line.split_once(' ').expect("STATUS COMMAND");
        let status = if status == "+" { None } else { Some(status.parse().expect("an exit status")) };
        out.last_mut().expect("a session first").lines.push((status, command.to_string()));
    }
    out
}

/// `line` run by a shell in `dir` with `env`, `omnigraph` being this
/// build's binary.
pub(crate) fn run_env(dir: &Path, line: &str, env: &[(&str, &str)]) -> Output {
    let bin = env!("CARGO_BIN_EXE_omnigraph");
    let line = line.strip_prefix("omnigraph ").map(|rest| format!("'{bin}' {rest}")).expect("an omnigraph line");
    let mut command = Command::new("bash");
    command.arg("-c").arg(line).current_dir(dir).env("OMNIGRAPH_HOME", dir);
    command.envs(env.iter().copied()).output().expect("bash")
}

pub(crate) fn run(dir: &Path, line: &str) -> Output {
    run_env(dir, line, &[])
}

/// `line` with the daemon's token in the environment.
fn run_with_token(dir: &Path, line: &str) -> Output {
    run_env(dir, line, &[("OMNIGRAPH_BEARER_TOKEN", crate::server::TOKEN)])
}

/// A fresh directory holding the fixture `files`.
pub(crate) fn with_files(files: &[&str]) -> tempfile::TempDir {
    let dir = crate::scratch::tempdir();
    for f in files {
        std::fs::copy(format!("{FIXTURES}/{f}"), dir.path().join(f)).expect("copy");
    }
    dir
}

/// Main's head commit, read as a script would (`commit list --json`).
fn head_commit(dir: &Path) -> String {
    let out = run(dir, "omnigraph commit list graph.omni --json");
    let commits: serde_json::Value = serde_json::from_slice(&out.stdout).expect("commit list JSON");
    commits[0]["graph_commit_id"].as_str().expect("a head commit").to_string()
}

#[test]
fn every_documented_command_line_runs_as_printed() {
    let (mut failures, mut ran) = (Vec::new(), 0);
    let mut outputs: Vec<(String, String)> = Vec::new();
    for session in sessions() {
        let dir = crate::scratch::tempdir();
        for entry in std::fs::read_dir(FIXTURES).expect("fixtures") {
            let path = entry.expect("entry").path();
            std::fs::copy(&path, dir.path().join(path.file_name().expect("name"))).expect("copy");
        }
        for (want, line) in &session.lines {
            let line = if line.contains("<commit-id>") {
                line.replace("<commit-id>", &head_commit(dir.path()))
            } else {
                line.clone()
            };
            let out = run(dir.path(), &line);
            let got = out.status.code().unwrap_or(-1);
            if got != want.unwrap_or(0) {
                let err = String::from_utf8_lossy(&out.stderr).lines().take(3).collect::<Vec<_>>().join(" / ");
                failures.push(format!("{}: `{line}` exited {got}, not {}: {err}", session.name, want.unwrap_or(0)));
            }
            ran += usize::from(want.is_some());
            outputs.push((line, String::from_utf8_lossy(&out.stdout).to_string()));
        }
        if session.name.ends_with("cli/index.md") {
            let exported = std::fs::read_to_string(dir.path().join("people.jsonl")).expect("the export");
            // Main's people: the inline insert is there, the branch's load is not.
            assert!(exported.contains("\"Inline\"") && !exported.contains("\"Dan\""), "{exported}");
        }
    }
    assert!(failures.is_empty(), "{} of {ran} lines failed:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(ran, 42, "every documented line ran");
    let output = |needle: &str| {
        let found = outputs.iter().find(|(l, _)| l.contains(needle));
        found.map(|(_, o)| o.clone()).unwrap_or_else(|| panic!("no line with `{needle}`"))
    };
    assert!(output("omnigraph version").starts_with("omnigraph "), "{}", output("omnigraph version"));
    let engineers = output("find_people --query");
    assert!(engineers.contains("Alice") && !engineers.contains("Bob"), "{engineers}");
    assert!(output("--query queries.gq get_person").contains("Alice"));
    let employees = output("query list_employees");
    assert!(employees.contains("Alice") && employees.contains("Acme"), "{employees}");
    assert!(output("branch list --uri").contains("feature-x"));
}

/// Each addressing mistake is one line naming the fix, with the usage
/// status (2), never a panic.
#[test]
fn addressing_mistakes_are_usage_errors() {
    let dir = with_files(&["schema.pg", "queries.gq"]);
    assert!(run(dir.path(), "omnigraph init --schema schema.pg g").status.success());
    let cases = [
        ("omnigraph snapshot g --store g", "cannot be used with"),
        ("omnigraph snapshot --store g --uri g", "cannot be used multiple times"),
        ("omnigraph snapshot", "no graph given"),
        ("omnigraph branch list", "no graph given"),
        ("omnigraph query --query queries.gq get_person g --store g", "given twice"),
        ("omnigraph query --query queries.gq", "no graph given"),
        ("omnigraph query get_person --name find_people --query queries.gq --store g", "named twice"),
    ];
    for (line, says) in cases {
        let out = run(dir.path(), line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "`{line}`: {err}");
        assert!(err.contains(says) && !err.contains("panicked"), "`{line}`: {err}");
    }
    // The deprecated spellings run, with one warning line.
    let read = run(dir.path(), r#"omnigraph read --query queries.gq get_person --params '{"name":"x"}' g"#);
    let err = String::from_utf8_lossy(&read.stderr);
    assert!(read.status.success() && err.contains("`omnigraph read` is deprecated"), "{err}");
    let v = run(dir.path(), "omnigraph -v");
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), format!("omnigraph {}", env!("CARGO_PKG_VERSION")));
}

/// An effectful load or mutation answers with the commit it published
/// (as `commit show` prints it), a write that matched nothing with
/// `"commit": null`.
#[test]
fn writes_answer_with_their_commit() {
    let dir = with_files(&["schema.pg", "people.jsonl"]);
    assert!(run(dir.path(), "omnigraph init --schema schema.pg graph.omni").status.success());
    let json = |line: &str| -> serde_json::Value {
        let out = run(dir.path(), line);
        assert!(out.status.success(), "`{line}`: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let before = head_commit(dir.path());
    let load = json("omnigraph load --data people.jsonl --mode merge --json graph.omni");
    assert_eq!(load["commit"]["graph_commit_id"], load["graph_commit_id"], "{load}");
    assert_eq!(load["commit"]["parent_commit_id"], serde_json::json!(before), "{load}");
    let shown = json(&format!("omnigraph commit show {} --json graph.omni", head_commit(dir.path())));
    assert_eq!(load["commit"], shown, "the commit as `commit show` prints it");
    let update =
        r#"omnigraph mutate --json -e 'query q() { update Person set { age: 1 } where name = "Alice" }' graph.omni"#;
    let changed = json(update);
    assert_eq!(changed["commit"]["parent_commit_id"], load["graph_commit_id"], "{changed}");
    let none = json(
        r#"omnigraph mutate --json -e 'query q() { update Person set { age: 1 } where name = "Nobody" }' graph.omni"#,
    );
    assert!(none["commit"].is_null() && none["graph_commit_id"].is_null(), "{none}");
}

/// Every write says where it goes on stderr (`--quiet` silences it); a
/// destructive write on a remote graph is refused without `--yes` when no
/// terminal can answer, before anything is read or written.
#[test]
fn writes_echo_their_target_and_remote_destruction_needs_consent() {
    let dir = with_files(&["schema.pg", "people.jsonl"]);
    let init = run(dir.path(), "omnigraph init --schema schema.pg g");
    assert_eq!(String::from_utf8_lossy(&init.stderr).lines().next(), Some("omnigraph init → g (direct, local)"));
    let load = run(dir.path(), "omnigraph load --data people.jsonl --mode overwrite --store g");
    let err = String::from_utf8_lossy(&load.stderr);
    assert!(load.status.success() && err.contains("omnigraph load → g (direct, local)"), "{err}");
    let quiet = run(dir.path(), "omnigraph load --data people.jsonl --mode merge --quiet g");
    assert!(quiet.status.success() && quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
    let read = run(dir.path(), "omnigraph snapshot g");
    assert!(read.stderr.is_empty(), "a read echoes nothing: {}", String::from_utf8_lossy(&read.stderr));
    for line in [
        "omnigraph branch delete --purge feature s3://bucket/g",
        "omnigraph load --data people.jsonl --mode overwrite s3://bucket/g",
        "omnigraph cleanup --keep 1 --confirm --store s3://bucket/g",
    ] {
        let out = run(dir.path(), &format!("{line} < /dev/null"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "`{line}`: {err}");
        assert!(err.contains("(direct, remote)") && err.contains("pass --yes"), "`{line}`: {err}");
    }
}

/// The subcommands a `--help` lists under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let Some(start) = help.find("Commands:\n") else { return Vec::new() };
    help[start + "Commands:\n".len()..]
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// Every command and subcommand's `--help` ends with an example; a
/// mistyped command or flag names the closest one; completions come for
/// bash, zsh and fish and know the commands.
#[test]
fn help_has_examples_typos_get_suggestions_and_shells_complete() {
    let dir = crate::scratch::tempdir();
    let help = |path: &str| {
        let out = run(dir.path(), &format!("omnigraph {path} --help"));
        assert!(out.status.success(), "`{path} --help`");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let (mut seen, mut missing) = (0, Vec::new());
    let mut queue: Vec<String> = subcommands(&help(""));
    assert!(queue.len() > 20, "{queue:?}");
    while let Some(path) = queue.pop() {
        let text = help(&path);
        let children = subcommands(&text);
        queue.extend(children.iter().map(|c| format!("{path} {c}")));
        seen += 1;
        if !text.contains("Example:\n  omnigraph ") {
            missing.push(path);
        }
    }
    assert!(missing.is_empty(), "{} of {seen} commands lack an example: {missing:?}", missing.len());
    for (typo, tip) in [("qurey", "'query'"), ("query --pramas x", "'--params'"), ("brnch", "'branch'")] {
        let out = run(dir.path(), &format!("omnigraph {typo}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code() == Some(2) && err.contains("similar") && err.contains(tip), "{typo}: {err}");
    }
    for shell in ["bash", "zsh", "fish"] {
        let out = run(dir.path(), &format!("omnigraph completions {shell}"));
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && script.contains("omnigraph") && script.contains("changes"), "{shell}");
    }
    assert_eq!(run(dir.path(), "omnigraph completions tcsh").status.code(), Some(2));
}

/// The same reads, run on the graph's storage and through a daemon serving
/// it (`--server URL --graph g`), print the same bytes, before and after
/// writes sent through the daemon; the daemon's errors come back typed.
#[test]
fn the_cli_through_a_server_prints_what_it_prints_on_storage() {
    let dir = with_files(&["schema.pg", "people.jsonl", "queries.gq", "next.pg"]);
    let graph = dir.path().join("g").to_string_lossy().to_string();
    assert!(run(dir.path(), &format!("omnigraph init --schema schema.pg -q {graph}")).status.success());
    assert!(run(dir.path(), &format!("omnigraph load --data people.jsonl --mode merge -q {graph}")).status.success());
    let daemon_dir = crate::scratch::tempdir();
    let server = crate::server::spawn(daemon_dir, graph.clone(), &[], &[]);
    let remote = format!("--server {} --graph g", server.base);
    let reads = [
        "snapshot",
        "snapshot --json",
        "commit list",
        "commit list --json --limit 2",
        "commit show main",
        "commit show main~1 --json",
        r#"query get_person --query queries.gq --params '{"name":"Alice"}'"#,
        r#"query get_person --query queries.gq --params '{"name":"Alice"}' --json"#,
        "query find_people --query queries.gq --params '{\"title\":\"Engineer\"}' --format csv",
        "query find_people --query queries.gq --params '{\"title\":\"Engineer\"}' --format jsonl",
        "query --query queries.gq --name get_person --params '{\"name\":\"Bob\"}' --snapshot main~1",
        "branch list",
        "branch list --json",
        "commit changes main",
        "commit changes main --json --kind node",
        "changes poll --start beginning",
        "changes poll --start beginning --json --limit 2",
        "export --branch main",
        "export --type Person --commit main~1",
        "tag list",
        "tag list --json",
        "diff main~1 main",
        "diff main~1 main --json --limit 1",
        "diff main~1 main --stat --type Person",
        "history Person Alice",
        "history Person Alice --json --property title",
        "blame Person Alice",
        "blame Person Alice --json",
        "schema show",
        "schema show --json",
        "schema plan --schema next.pg",
        "schema plan --schema next.pg --json",
    ];
    let compare = |round: &str| {
        for read in reads {
            let direct = run(dir.path(), &format!("omnigraph {read} --store {graph}"));
            let served = run_with_token(dir.path(), &format!("omnigraph {read} {remote}"));
            let (a, b) = (String::from_utf8_lossy(&direct.stdout), String::from_utf8_lossy(&served.stdout));
            assert!(direct.status.success(), "{round} `{read}`: {}", String::from_utf8_lossy(&direct.stderr));
            assert!(served.status.success(), "{round} `{read}` --server: {}", String::from_utf8_lossy(&served.stderr));
            assert_eq!(a, b, "{round}: `{read}` prints the same bytes on storage and through the server");
        }
    };
    compare("after the load");
    let m = r#"omnigraph mutate --json -e 'query m($n: String) { insert Person { name: $n, title: "Engineer" } }' --params '{"n":"Dee"}'"#;
    let out = run_with_token(dir.path(), &format!("{m} {remote}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("(server, remote)"), "{err}");
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(answer["commit"]["actor_id"], "alice", "written by the token's actor: {answer}");
    compare("after a write through the server");
    // Branches and a load, through the daemon.
    let json_of = |line: &str| -> serde_json::Value {
        let out = run_with_token(dir.path(), &format!("{line} {remote}"));
        assert!(out.status.success(), "`{line}`: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).expect("JSON")
    };
    let created = json_of("omnigraph branch create --from main side --json");
    assert_eq!(created["name"], "side", "{created}");
    let loaded = json_of("omnigraph load --data people.jsonl --mode merge --branch side --json");
    assert_eq!(loaded["branch"], "side", "{loaded}");
    compare("with a branch");
    let merged = json_of("omnigraph branch merge side --into main --json");
    assert!(merged["outcome"].is_string(), "{merged}");
    let deleted = json_of("omnigraph branch delete side --json --yes");
    assert_eq!(deleted["name"], "side", "{deleted}");
    compare("after a merge and a delete");
    let tagged = json_of("omnigraph tag create v1 main~1 -m first --json");
    assert_eq!((tagged["name"].as_str(), tagged["message"].as_str()), (Some("v1"), Some("first")), "{tagged}");
    compare("with a tag");
    assert_eq!(json_of("omnigraph tag delete v1 --json")["name"], "v1");
    // A baseline: the same file and handshake both ways.
    let direct = run(dir.path(), &format!("omnigraph changes baseline --out a.jsonl --json --store {graph}"));
    assert!(direct.status.success(), "{}", String::from_utf8_lossy(&direct.stderr));
    let served = json_of("omnigraph changes baseline --out b.jsonl --json");
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&direct.stdout).expect("JSON"), served);
    let (a, b) = (std::fs::read(dir.path().join("a.jsonl")), std::fs::read(dir.path().join("b.jsonl")));
    assert!(a.as_ref().is_ok_and(|a| !a.is_empty()), "the baseline wrote records");
    assert_eq!(a.ok(), b.ok(), "a served baseline writes the records, not the handshake");
    // A schema apply through the daemon, then every read again.
    let applied = json_of("omnigraph schema apply --schema next.pg --json");
    assert_eq!(applied["applied"], true, "{applied}");
    compare("after a schema apply through the server");
    let as_bob = run_with_token(dir.path(), &format!("{m} --as bob {remote}"));
    assert_eq!(as_bob.status.code(), Some(2), "{}", String::from_utf8_lossy(&as_bob.stderr));
    // A lost --if-commit race: exit 4 with the server's precondition body.
    let stale = run_with_token(dir.path(), &format!("{m} --if-commit 01STALE {remote}"));
    assert_eq!(stale.status.code(), Some(4), "{}", String::from_utf8_lossy(&stale.stderr));
    let body: serde_json::Value = serde_json::from_slice(&stale.stdout).expect("the error body");
    assert_eq!(body["precondition_failure"]["expected"], "01STALE", "{body}");
    // A 4xx and a refused token: the server's typed error, exit 2 and 1.
    let bad = run_with_token(dir.path(), &format!("omnigraph query -e 'query q( {{' {remote}"));
    assert_eq!(bad.status.code(), Some(2), "{}", String::from_utf8_lossy(&bad.stderr));
    let denied = run(dir.path(), &format!("omnigraph snapshot {remote}"));
    let err = String::from_utf8_lossy(&denied.stderr);
    assert!(denied.status.code() == Some(1) && err.contains("unauthorized"), "{err}");
    let graphs = run_with_token(dir.path(), &format!("omnigraph graphs list --server {} --json", server.base));
    let listed: serde_json::Value = serde_json::from_slice(&graphs.stdout).expect("graphs JSON");
    assert_eq!(listed["graphs"][0]["graph_id"], "g", "{listed}");
    // Mistakes: two addresses, a storage-only command, a server that is down.
    for (line, code, says) in [
        (format!("omnigraph snapshot --store {graph} {remote}"), 2, "given twice"),
        (format!("omnigraph optimize {remote}"), 2, "storage"),
        (format!("omnigraph cleanup --keep 1 {remote}"), 2, "storage"),
        (format!("omnigraph init --schema schema.pg {remote}"), 2, "storage"),
        (format!("omnigraph repair {remote}"), 2, "storage"),
        ("omnigraph snapshot --server http://127.0.0.1:1".to_string(), 1, "cannot reach the server"),
        ("omnigraph snapshot --server 127.0.0.1:1".to_string(), 2, "http://"),
    ] {
        let out = run_with_token(dir.path(), &line);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "`{line}`: {err}");
        assert!(err.contains(says) && err.trim().lines().count() == 1 && !err.contains("panicked"), "`{line}`: {err}");
    }
}
