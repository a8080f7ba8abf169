//! Work that grows with history stays out of reads and writes: a CLI query
//! and a CLI write on a branch, after many commits on main, list no
//! directory of versions (neither a table's nor `__manifest`'s) — every
//! version they need is named by the manifest or a version hint — so their
//! cost does not grow with the commits a long-lived graph keeps. Traced
//! with `strace` (`getdents64`, the call a directory listing makes). Nor do
//! they grow with the branches a graph keeps: creating a branch and its
//! first write read no other branch's ref (`openat` of Lance's ref files).

use std::process::Command;

use crate::strace::{fd_path, joined, strace_available};

/// The calls of `syscalls` one CLI run made (each on one line).
fn traced(syscalls: &str, args: &[&str], trace: &std::path::Path) -> Vec<String> {
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-e", &format!("trace={syscalls}"), "-o"])
        .arg(trace)
        .arg(env!("CARGO_BIN_EXE_omnigraph"))
        .args(args)
        .output()
        .expect("run strace");
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    joined(&std::fs::read_to_string(trace).expect("trace"))
}

/// The directories one CLI run under `root` listed, relative to `root`.
fn listed(root: &str, args: &[&str], trace: &std::path::Path) -> Vec<String> {
    let prefix = format!("{root}/");
    traced("getdents64", args, trace)
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

/// The native branch refs (Lance's `_refs/branches/<name>.json`) one CLI
/// run opened, by branch name.
fn refs_read(args: &[&str], trace: &std::path::Path) -> Vec<String> {
    traced("openat", args, trace)
        .iter()
        .filter(|c| c.starts_with("openat("))
        .filter_map(|c| c.split("/_refs/branches/").nth(1)?.split(".json").next().map(str::to_string))
        .collect()
}

/// A graph with 16 branches (8 of them written on, so tables have forks
/// too): creating one more, and its first write, read no other branch's
/// ref, where reading every ref made both cost O(branches) (a ref read per
/// branch, several times over: on S3 a request each). Listing the
/// branches does read them all (the tracer sees ref reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_a_branch_and_its_first_write_read_no_other_branch_s_ref() {
    if !strace_available() {
        return;
    }
    let (dir, g) = crate::common::loaded_social_graph().await;
    let branches = 16;
    for i in 0..branches {
        let name = format!("b{i:02}");
        g.branch_create(&name, "main").await.expect("create");
        if i % 2 == 0 {
            let insert = format!(r#"query q() {{ insert Person {{ name: "P{i}" }} }}"#);
            let opts = omnigraph::WriteOptions { branch: name, ..Default::default() };
            g.mutate(&insert, None, serde_json::Map::new(), &opts).await.expect("write");
        }
    }
    let loc = g.root().uri().to_string();
    drop(g);
    let trace = dir.path().join("trace.txt");
    let insert = r#"query q() { insert Person { name: "New" } }"#;
    for (what, args) in [
        ("a branch create", vec!["branch", "create", "fresh", "--from", "main", &loc]),
        ("the branch's first write", vec!["mutate", &loc, "--branch", "fresh", "-e", insert]),
    ] {
        let read = refs_read(&args, &trace);
        let others: Vec<&String> = read.iter().filter(|r| *r != "fresh").collect();
        assert!(others.is_empty(), "{what} read the refs of {others:?}");
    }
    let listed = refs_read(&["branch", "list", &loc], &trace);
    assert!(listed.len() > branches, "a branch list read {} refs of {} branches", listed.len(), branches + 1);
}
