//! Acknowledged means on disk: a CLI write syncs every file it creates and
//! every directory entry it changes before it prints its answer (traced with
//! `strace`), and the durability setting is reported where users look.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;

use serde_json::{Value, json};

use crate::common::{SOCIAL_PG, temp_graph_dir};
use crate::server::{get, post, spawn};
use crate::strace::{fd_path, joined, strace_available};

/// A graph with the example data; returns (dir, location).
async fn example_graph() -> (tempfile::TempDir, String) {
    let (dir, loc) = temp_graph_dir();
    let g = omnigraph::Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
    let data = include_str!("../../examples/social.jsonl");
    g.load(data.as_bytes(), omnigraph::LoadMode::Overwrite, &omnigraph::WriteOptions::default()).await.expect("load");
    (dir, std::fs::canonicalize(&loc).expect("canonical").to_string_lossy().to_string())
}

/// Run one CLI mutate on `loc` under strace (with `extra` flags); returns
/// the trace's lines and the answer printed.
fn traced_mutate(loc: &str, trace: &std::path::Path, extra: &[&str]) -> (Vec<String>, String) {
    let calls = "trace=openat,open,creat,mkdir,mkdirat,rename,renameat,renameat2,link,linkat,unlink,unlinkat,\
                 fsync,fdatasync,syncfs,sync,write";
    let out = Command::new("strace")
        .args(["-f", "-qq", "-y", "-s", "16", "-e", calls, "-o"])
        .arg(trace)
        .arg(env!("CARGO_BIN_EXE_omnigraph"))
        .args(extra)
        .args(["mutate", "--json", "-e", r#"query q() { insert Person { name: "Traced", age: 3 } }"#, loc])
        .output()
        .expect("run strace");
    assert!(out.status.success(), "traced mutate failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(trace).expect("trace");
    (joined(&text), String::from_utf8_lossy(&out.stdout).to_string())
}

/// The quoted path arguments of a call, in order.
fn quoted(call: &str) -> Vec<String> {
    call.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

fn parent(path: &str) -> String {
    std::path::Path::new(path).parent().map(|p| p.to_string_lossy().to_string()).unwrap_or_default()
}

/// A local store's in-flight name (`x#<digits>`): hidden from listings,
/// swept by recovery, and never what a commit refers to.
fn staging(path: &str) -> bool {
    path.rsplit_once('#').is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// What one traced process left unsynced under `root`: files it created
/// whose data was not synced, and directories whose changed entries were
/// not synced, before its answer (its first write to stdout) and before it
/// exited. Empty: every change it made was durable before it was reported.
fn unsynced(calls: &[String], root: &str) -> Vec<String> {
    let under = |p: &str| p == root || p.starts_with(&format!("{root}/"));
    // A file's content is named by the path that created it (an inode):
    // renames and links carry it to other names.
    let mut inode: HashMap<String, String> = HashMap::new();
    let mut synced: BTreeSet<String> = BTreeSet::new();
    // Per directory, the step of its last changed entry not yet synced.
    let mut dirty: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut answered = None;
    let mut problems = Vec::new();
    let check = |at: &str,
                 inode: &HashMap<String, String>,
                 synced: &BTreeSet<String>,
                 dirty: &BTreeMap<String, (usize, String)>| {
        let mut found = Vec::new();
        for (path, ino) in inode.iter().filter(|(p, _)| !staging(p)) {
            if !synced.contains(ino) {
                found.push(format!("{at}: the data of {path} was never synced"));
            }
        }
        for (dir, (_, what)) in dirty {
            found.push(format!("{at}: {dir} gained or lost an entry ({what}) and was not synced after"));
        }
        found
    };
    for (step, call) in calls.iter().enumerate() {
        let name = call.split('(').next().unwrap_or("");
        let ok = !call.contains(") = -1");
        let paths = quoted(call);
        match name {
            "openat" | "open" | "creat" if ok && call.contains("O_CREAT") => {
                if let Some(p) = paths.last().filter(|p| under(p)) {
                    inode.insert(p.clone(), p.clone());
                    if !staging(p) {
                        dirty.insert(parent(p), (step, format!("created {p}")));
                    }
                }
            }
            "mkdir" | "mkdirat" if ok => {
                if let Some(p) = paths.last().filter(|p| under(p)) {
                    dirty.insert(parent(p), (step, format!("made {p}")));
                }
            }
            "rename" | "renameat" | "renameat2" | "link" | "linkat" if ok && paths.len() == 2 => {
                let (from, to) = (&paths[0], &paths[1]);
                if under(to) {
                    let ino = inode.get(from).cloned().unwrap_or_else(|| from.clone());
                    inode.insert(to.clone(), ino);
                    dirty.insert(parent(to), (step, format!("{name} {from} -> {to}")));
                }
                if name.starts_with("rename") {
                    inode.remove(from);
                    if under(from) && !staging(from) {
                        dirty.insert(parent(from), (step, format!("renamed away {from}")));
                    }
                }
            }
            "unlink" | "unlinkat" if ok => {
                if let Some(p) = paths.last().filter(|p| under(p)) {
                    inode.remove(p);
                    if !staging(p) {
                        dirty.insert(parent(p), (step, format!("removed {p}")));
                    }
                }
            }
            "fsync" | "fdatasync" if ok => {
                if let Some(p) = fd_path(call) {
                    if let Some(ino) = inode.get(&p) {
                        synced.insert(ino.clone());
                    }
                    dirty.remove(&p);
                }
            }
            "syncfs" | "sync" if ok => {
                synced.extend(inode.values().cloned());
                dirty.clear();
            }
            "write" if answered.is_none() && call.starts_with("write(1<") => {
                answered = Some(step);
                problems.extend(check("before the answer", &inode, &synced, &dirty));
            }
            _ => {}
        }
    }
    let to_stdout: Vec<&String> = calls.iter().filter(|c| c.contains("(1<")).collect();
    assert!(answered.is_some(), "the process never wrote its answer; its calls on fd 1: {to_stdout:?}");
    problems.extend(check("at exit", &inode, &synced, &dirty));
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_mutate_syncs_every_file_and_directory_entry_it_makes_before_it_answers() {
    if !strace_available() {
        return;
    }
    let (dir, loc) = example_graph().await;
    let (calls, answer) = traced_mutate(&loc, &dir.path().join("trace"), &[]);
    let answer: Value = serde_json::from_str(&answer).expect("answer json");
    assert_eq!(answer["nodes_affected"], 1, "{answer}");
    let created = calls.iter().filter(|c| c.contains("O_CREAT") && c.contains(&loc)).count();
    assert!(created >= 5, "the trace saw the write's files ({created} created under the graph)");
    let problems = unsynced(&calls, &loc);
    assert!(problems.is_empty(), "unsynced changes:\n{}", problems.join("\n"));
}

/// The checker fails when nothing is synced: `--durability none`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_durability_none_the_trace_finds_the_writes_unsynced() {
    if !strace_available() {
        return;
    }
    let (dir, loc) = example_graph().await;
    let (calls, _) = traced_mutate(&loc, &dir.path().join("trace"), &["--durability", "none"]);
    let syncs = calls.iter().filter(|c| c.starts_with("fsync(") || c.starts_with("fdatasync(")).count();
    assert_eq!(syncs, 0, "durability none syncs nothing");
    let problems = unsynced(&calls, &loc);
    assert!(problems.iter().any(|p| p.starts_with("before the answer")), "{problems:?}");
}

fn snapshot_durability(loc: &str, extra: &[&str], env: &[(&str, &str)]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(extra)
        .args(["snapshot", "--json", loc])
        .envs(env.iter().copied())
        .output()
        .expect("run omnigraph");
    if !out.status.success() {
        // With --json the error is a JSON object on stdout; clap's on stderr.
        return Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    let snap: Value = serde_json::from_slice(&out.stdout).expect("snapshot json");
    Ok(snap["durability"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_reports_the_durability_the_flag_or_the_environment_chose() {
    let (_dir, loc) = example_graph().await;
    assert_eq!(snapshot_durability(&loc, &[], &[]).as_deref(), Ok("fsync"));
    assert_eq!(snapshot_durability(&loc, &["--durability", "none"], &[]).as_deref(), Ok("none"));
    assert_eq!(snapshot_durability(&loc, &[], &[("OMNIGRAPH_DURABILITY", "none")]).as_deref(), Ok("none"));
    let flag_wins = snapshot_durability(&loc, &["--durability", "fsync"], &[("OMNIGRAPH_DURABILITY", "none")]);
    assert_eq!(flag_wins.as_deref(), Ok("fsync"));
    let bad = snapshot_durability(&loc, &["--durability", "sometimes"], &[]).expect_err("refused");
    assert!(bad.contains("`fsync` or `none`"), "{bad}");
    let bad = snapshot_durability(&loc, &[], &[("OMNIGRAPH_DURABILITY", "maybe")]).expect_err("refused");
    assert!(bad.contains("OMNIGRAPH_DURABILITY") && bad.contains("maybe"), "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_reports_each_graphs_durability_and_takes_it_per_graph() {
    let (dir, loc) = example_graph().await;
    let config = dir.path().join("storage.json");
    std::fs::write(&config, json!({"graphs": {"g": {"durability": "none"}}}).to_string()).expect("config");
    let s = spawn(dir, loc, &["--storage-config", &config.to_string_lossy()], &[]);
    let (status, body) = get(&s, "/healthz").await;
    assert_eq!((status, body["durability"].as_str()), (200, Some("fsync")), "{body}");
    let (_, body) = get(&s, "/healthz?verbose=true").await;
    assert_eq!(body["graphs"]["g"]["durability"], "none", "{body}");
    let (_, body) = get(&s, "/graphs/g/healthz").await;
    assert_eq!(body["durability"], "none", "{body}");
    let (_, body) = get(&s, "/graphs/g/snapshot").await;
    assert_eq!(body["durability"], "none", "{body}");
    let write = json!({"query": r#"query q() { insert Person { name: "Nosync" } }"#});
    let (status, body) = post(&s, "/graphs/g/mutate", write).await;
    assert_eq!(status, 200, "a write with durability none: {body} {}", s.log());
}

#[test]
fn the_trace_parser_joins_split_calls_and_reads_padded_process_ids() {
    let text = "812   write(1<pipe:[9]>, \"{}\", 2) = 2\n\
                 45117 fsync(7</g/a#1> <unfinished ...>\n\
                 812   openat(AT_FDCWD</>, \"/g/b\", O_RDONLY) = 8</g/b>\n\
                 45117 <... fsync resumed>) = 0\n";
    let calls = joined(text);
    assert_eq!(calls[0], "write(1<pipe:[9]>, \"{}\", 2) = 2");
    assert_eq!(calls[2], "fsync(7</g/a#1>) = 0");
    assert_eq!(fd_path(&calls[2]).as_deref(), Some("/g/a#1"));
}
