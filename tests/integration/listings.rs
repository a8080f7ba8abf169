//! Work that grows with history stays out of reads and writes: a CLI query
//! and a CLI write on a branch, after many commits on main, list no
//! directory of versions (neither a table's nor `__manifest`'s) — every
//! version they need is named by the manifest or a version hint — so their
//! cost does not grow with the commits a long-lived graph keeps. Traced
//! with `strace` (`getdents64`, the call a directory listing makes).

use std::process::Command;

use crate::strace::{fd_path, joined, strace_available};

/// The directories one CLI run under `root` listed, relative to `root`.
fn listed(root: &str, args: &[&str], trace: &std::path::Path) -> Vec<String> {
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", "trace=getdents64", "-o"])
        .arg(trace)
        .arg(env!("CARGO_BIN_EXE_omnigraph"))
        .args(args)
        .output()
        .expect("run strace");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(trace).expect("trace");
    let prefix = format!("{root}/");
    joined(&text)
        .iter()
        .filter(|c| c.starts_with("getdents64("))
        .filter_map(|c| fd_path(c))
        .filter_map(|p| p.strip_prefix(&prefix).map(str::to_string))
        .collect()
}

fn run(args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph")).args(args).output().expect("run omnigraph");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn reads_and_writes_on_a_branch_list_no_versions_whatever_the_history() {
    if !strace_available() {
        return;
    }
    let (dir, loc) = crate::common::temp_graph_dir();
    let schema = format!("{}/examples/social.pg", env!("CARGO_MANIFEST_DIR"));
    let data = format!("{}/examples/social.jsonl", env!("CARGO_MANIFEST_DIR"));
    run(&["init", &loc, "--schema", &schema]);
    run(&["load", &loc, "--data", &data, "--mode", "overwrite", "-q"]);
    let loc = std::fs::canonicalize(&loc).expect("canonical").to_string_lossy().to_string();
    let insert = |name: &str| format!(r#"query q() {{ insert Person {{ name: "{name}" }} }}"#);
    for i in 0..12 {
        run(&["mutate", &loc, "-e", &insert(&format!("M{i}"))]);
    }
    run(&["branch", "create", "b", "--from", "main", &loc]);
    run(&["mutate", &loc, "--branch", "b", "-e", &insert("B0")]);
    for i in 12..16 {
        run(&["mutate", &loc, "-e", &insert(&format!("M{i}"))]);
    }
    let trace = dir.path().join("trace.txt");
    let count = r#"query q() { match { $p: Person } return { count($p) as n } }"#;
    let cases: [(&str, Vec<&str>); 4] = [
        ("a query on the branch", vec!["query", &loc, "--branch", "b", "-e", count]),
        (
            "a write on the branch",
            vec!["mutate", &loc, "--branch", "b", "-e", r#"query q() { insert Person { name: "B1" } }"#],
        ),
        ("a query on main", vec!["query", &loc, "-e", count]),
        ("a snapshot of the branch", vec!["snapshot", &loc, "--branch", "b"]),
    ];
    for (what, args) in cases {
        let dirs = listed(&loc, &args, &trace);
        // Pending recovery sidecars are found by listing `__recovery`, which
        // holds only writes in flight, not history.
        let history: Vec<&String> = dirs.iter().filter(|d| !d.starts_with("__recovery")).collect();
        assert!(history.is_empty(), "{what} listed {history:?}");
    }
    // The tracer sees listings: a cleanup preview lists tables' versions.
    let dirs = listed(&loc, &["cleanup", "--keep", "1", &loc], &trace);
    assert!(dirs.iter().any(|d| d.ends_with("/_versions")), "a cleanup preview listed no versions: {dirs:?}");
}
