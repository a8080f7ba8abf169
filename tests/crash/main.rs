//! Crash tests: stop a write at every registered failpoint, then recover and
//! check the invariants. A crash is the death of a real process: the case
//! runs in a child process (this binary, re-executed for one case; see
//! [`child`]) that aborts at the failpoint; this process then reopens the
//! graph read-write (recovery) and checks every invariant.
//!
//! Failpoints are process-global, so every test here takes [`serial`].

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

mod ambiguous;
mod child;
#[path = "../support/content.rs"]
mod content;
mod durable_cut;
#[path = "../support/intercept.rs"]
mod intercept;
mod lance_hook;
mod points;
mod power_loss;
#[path = "../support/s3.rs"]
mod s3;
#[path = "../support/scratch.rs"]
mod scratch;
mod shapes;
mod simulate;

use std::collections::BTreeMap;
use std::time::Duration;

use omnigraph::engine::manifest;
use omnigraph::engine::storage::table;
use omnigraph::recovery::audit::{self, RecoveryKind};
use omnigraph::recovery::{invariants, list_pending};
use omnigraph::{Graph, LoadMode, OmniError, Omnigraph, WriteOptions};
use serde_json::Map;

const SCHEMA: &str = include_str!("../../examples/social.pg");
const BASE: &str = include_str!("../../examples/social.jsonl");

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    SERIAL.lock().await
}

/// The longest tests (about 400 of the binary's 560 CPU-seconds). They
/// need the process-global hooks (failpoints, the Lance store hook) to
/// themselves, so each runs in a child process of its own (this binary,
/// `--ignored --exact NAME`), all started at once by
/// [`a_long_case_runs_in_a_process_of_its_own`], beside the tests that take
/// [`serial`] here: the binary keeps both cores busy instead of one.
const OWN_PROCESS: [&str; 5] = [
    "power_loss::every_power_cut_of_every_writer_recovers_clean_with_nothing_acknowledged_lost",
    "power_loss::every_power_cut_of_a_mutation_or_load_on_main_recovers_clean",
    "durable_cut::every_durable_write_cut_of_every_writer_recovers_clean",
    "durable_cut::every_durable_write_cut_on_s3_recovers_clean",
    "a_load_killed_at_every_boundary_on_s3_recovers_clean",
];

/// Run the ignored test `name` in a child process; assert that it passed.
async fn in_own_process(name: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let out = tokio::process::Command::new(exe)
        .args([name, "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .output()
        .await
        .expect("run the test in a process of its own");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && stdout.contains("test result: ok. 1 passed"),
        "{name}, in a process of its own, did not pass:\n{stdout}\n{stderr}"
    );
    print!("{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_case_runs_in_a_process_of_its_own() {
    futures::future::join_all(OWN_PROCESS.map(in_own_process)).await;
}

/// The writes the harness crashes.
#[derive(Debug, Clone, Copy)]
enum Op {
    MutationInsert,
    MutationUpdate,
    MutationDelete,
    LoadAppend,
    LoadMerge,
    LoadOverwrite,
    /// Merge the branch `feature` (an update, an insert and a delete that
    /// cascades to edges) into the branch under test: upsert + delete chains.
    Merge,
    /// Optimize the branch under test after [`SMALL_COMMITS`] on it: one
    /// `Rewrite` per table it owns, and no row changes.
    Optimize,
    /// [`Op::Optimize`] on a graph as binaries before the row lineage config
    /// created it: each table's chain sets the config, then compacts.
    /// (Not in the [`OPS`] matrix: it crosses the same optimize boundaries.)
    OptimizeOlderGraph,
    /// Build every index the schema derives on the branch under test (a
    /// fresh branch forks every table first): one `CreateIndex` per table.
    EnsureIndices,
    /// [`Op::MutationInsert`] on a Person table with more small fragments
    /// than a write leaves uncompacted: its chain ends with a compaction.
    /// (Not in the [`OPS`] matrix: it crosses the same mutation boundaries.)
    CompactingInsert,
    /// Apply [`SCHEMA_TARGET`] on main: one apply with every kind of table
    /// effect (a staged overwrite, a metadata-only column edit, a re-key, a
    /// version-one create, a tombstone). Not in the [`OPS`] matrix: it
    /// refuses to run while another branch exists.
    SchemaApply,
    /// [`Op::MutationInsert`] after `index ensure` on the branch: its new
    /// keys are proved absent through the `id` index, so the Person table's
    /// effect is an append, not a merge-insert.
    /// (Not in the [`OPS`] matrix: it crosses the same mutation boundaries.)
    IndexedInsert,
    /// [`Op::MutationUpdate`] after `index ensure`: the updated row is found
    /// through the indexes, and the Person effect is one `Update` of a
    /// deletion vector and the new row, not a merge-insert.
    /// (Not in the [`OPS`] matrix: it crosses the same mutation boundaries.)
    IndexedUpdate,
    /// [`Op::MutationDelete`] after `index ensure`: the row and its edges
    /// are found through the indexes and deleted by deletion vectors.
    /// (Not in the [`OPS`] matrix: it crosses the same mutation boundaries.)
    IndexedDelete,
    /// `index ensure` after a build and a write on the branch: nothing to
    /// build, the Person table's unindexed tail folded into its indexes as
    /// one `CreateIndex` (new segments, the ones they replace removed).
    /// (Not in the [`OPS`] matrix: it crosses the ensure-indices boundaries.)
    FoldIndices,
    /// [`GROUP`] as one group commit: three members commit (an insert, an
    /// edge to the node the first staged, an update), one is refused alone.
    /// (Not in the [`OPS`] matrix: it crosses the same mutation boundaries.)
    GroupCommit,
    /// [`Op::Merge`] into a branch that changed the same entities: Bob
    /// updated on both (decided by `--strategy theirs`), Carol deleted on
    /// the source and updated on the target (a resolution keeps ours). The
    /// decided rows ride the merge's chains. (Not in the [`OPS`] matrix: it
    /// crosses the same merge boundaries.)
    DecidedMerge,
    /// `commit revert` of [`REVERTED`] on the branch under test (written
    /// there by `prepare`): a deleted node and its edges re-inserted with
    /// their before-images, as the merge pipeline's chains. (Not in the
    /// [`OPS`] matrix: it crosses the merge boundaries.)
    Revert,
    /// `commit cherry-pick` of [`REVERTED`] (written on a branch `feature`
    /// by `prepare`) onto the branch under test: a node and its edges
    /// deleted there. (Not in the [`OPS`] matrix: it crosses the merge
    /// boundaries.)
    CherryPick,
    /// Merge the branch `feature` (which applied [`merge_source_schema`]
    /// and wrote rows using it: a new property set, a new type's rows) into
    /// main, which applied [`merge_target_schema`] and wrote meanwhile: one
    /// commit under the schema-apply authority with a column edit, a create
    /// followed by an insert, and merge chains. (Not in the [`OPS`] matrix:
    /// it crosses the schema apply's boundaries, on main.)
    SchemaMerge,
    /// `branch reset` of the branch under test to the commit before
    /// [`REVERTED`] (written there by `prepare`): a node and its edges
    /// re-inserted, on main as a new commit, on a fresh branch as a head
    /// move (the same chains, published with the head row naming the older
    /// commit). (Not in the [`OPS`] matrix: it crosses the merge boundaries.)
    Reset,
}

/// The commit [`Op::Revert`] undoes: a delete that cascades to edges (so
/// the revert re-inserts a node and its edges with their before-images).
/// A query cannot mix a delete with inserts and updates, so this is the
/// richest one commit.
const REVERTED: &str = r#"query q() { delete Person where name = "Carol" }"#;

/// What the branch under test holds for [`Op::DecidedMerge`]: changes to
/// the entities [`FEATURE_CHANGES`] changes too.
const TARGET_CHANGES: [&str; 2] = [
    r#"query q() { update Person set { age: 55 } where name = "Bob" }"#,
    r#"query q() { update Person set { age: 60 } where name = "Carol" }"#,
];

/// The ops a crash child can run besides the [`OPS`] matrix.
const EXTRA_OPS: [Op; 13] = [
    Op::DecidedMerge,
    Op::SchemaMerge,
    Op::Revert,
    Op::CherryPick,
    Op::Reset,
    Op::CompactingInsert,
    Op::SchemaApply,
    Op::OptimizeOlderGraph,
    Op::GroupCommit,
    Op::IndexedInsert,
    Op::IndexedUpdate,
    Op::IndexedDelete,
    Op::FoldIndices,
];

/// The members of [`Op::GroupCommit`]; the third is refused (its endpoint
/// does not exist), the others commit.
const GROUP: [&str; 4] = [
    r#"query q() { insert Person { name: "Zed", age: 9 } }"#,
    r#"query q() { insert Knows { from: "Zed", to: "Alice" } }"#,
    r#"query q() { insert Knows { from: "Nobody", to: "Alice" } }"#,
    r#"query q() { update Person set { age: 55 } where name = "Bob" }"#,
];

/// The commits [`Op::GroupCommit`] makes.
const GROUP_COMMITS: usize = 3;

/// The example schema evolved: Person gains a required `level` with a
/// default (an overwrite), Company a nullable `nickname` (a column edit),
/// Knows becomes Friends (a re-key), Team is new (a create), WorksAt goes
/// (a tombstone).
fn schema_target() -> String {
    SCHEMA
        .replace("    age: I32?\n", "    age: I32?\n    level: I32 @default(1)\n")
        .replace("    founded: Date?\n", "    founded: Date?\n    nickname: String?\n")
        .replace("edge Knows: Person -> Person {", "edge Friends: Person -> Person @rename_from(\"Knows\") {")
        .replace("edge WorksAt: Person -> Company @card(0..1) {\n    title: String?\n}\n", "")
        + "\nnode Team { name: String @key }\n"
}

/// What [`Op::SchemaMerge`]'s source applies: a property and a type.
fn merge_source_schema() -> String {
    SCHEMA.replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n") + "\nnode Team { name: String @key }\n"
}

/// What [`Op::SchemaMerge`]'s target applies meanwhile: another property.
fn merge_target_schema() -> String {
    SCHEMA.replace("    founded: Date?\n", "    founded: Date?\n    employees: I32?\n")
}

/// The schema [`Op::SchemaMerge`] leaves on its target: both changes.
fn merged_schema() -> String {
    merge_target_schema().replace("    age: I32?\n", "    age: I32?\n    nickname: String?\n")
        + "\nnode Team { name: String @key }\n"
}

/// [`Op::SchemaMerge`]'s writes on its source, then on its target.
const SCHEMA_MERGE_SOURCE: [&str; 2] = [
    r#"query q() { update Person set { nickname: "B" } where name = "Bob" insert Team { name: "Core" } }"#,
    r#"query q() { insert Person { name: "Zed", age: 9, nickname: "Z" } insert Knows { from: "Zed", to: "Alice" } }"#,
];
const SCHEMA_MERGE_TARGET: &str = r#"query q() { update Company set { employees: 5 } where name = "Acme" }"#;

const OPS: [Op; 9] = [
    Op::MutationInsert,
    Op::MutationUpdate,
    Op::MutationDelete,
    Op::LoadAppend,
    Op::LoadMerge,
    Op::LoadOverwrite,
    Op::Merge,
    Op::Optimize,
    Op::EnsureIndices,
];

/// The one-row commits [`Op::Optimize`] compacts (each adds a fragment).
const SMALL_COMMITS: [&str; 4] = [
    r#"query q() { insert Person { name: "S1", age: 1 } }"#,
    r#"query q() { insert Person { name: "S2", age: 2 } insert Knows { from: "S2", to: "Alice" } }"#,
    r#"query q() { update Person set { age: 3 } where name = "S1" }"#,
    r#"query q() { insert Knows { from: "S1", to: "S2" } }"#,
];

/// What the branch `feature` holds for [`Op::Merge`].
const FEATURE_CHANGES: [&str; 3] = [
    r#"query q() { update Person set { age: 77 } where name = "Bob" }"#,
    r#"query q() { insert Person { name: "Zed", age: 9 } insert Knows { from: "Zed", to: "Alice" } }"#,
    r#"query q() { delete Person where name = "Carol" }"#,
];

impl Op {
    fn prefix(self) -> &'static str {
        match self {
            Op::MutationInsert
            | Op::MutationUpdate
            | Op::MutationDelete
            | Op::CompactingInsert
            | Op::IndexedInsert
            | Op::IndexedUpdate
            | Op::IndexedDelete
            | Op::GroupCommit => "mutation",
            Op::Merge | Op::DecidedMerge | Op::Revert | Op::CherryPick | Op::Reset => "merge",
            Op::Optimize | Op::OptimizeOlderGraph => "optimize",
            Op::SchemaApply | Op::SchemaMerge => "schema_apply",
            Op::EnsureIndices | Op::FoldIndices => "ensure_indices",
            _ => "load",
        }
    }

    /// Whether a clean run changes the branch's rows (optimize does not:
    /// whether it applied shows in the history, not the content).
    fn changes_content(self) -> bool {
        !matches!(self, Op::Optimize | Op::OptimizeOlderGraph | Op::EnsureIndices | Op::FoldIndices)
    }

    /// Whether this op's saga crosses `boundary`.
    fn crosses(self, boundary: &str) -> bool {
        let kind = match self {
            Op::Merge | Op::DecidedMerge | Op::Revert | Op::CherryPick | Op::Reset => {
                omnigraph::recovery::sidecar::WriterKind::Merge
            }
            Op::Optimize | Op::OptimizeOlderGraph => omnigraph::recovery::sidecar::WriterKind::Optimize,
            Op::SchemaApply | Op::SchemaMerge => omnigraph::recovery::sidecar::WriterKind::SchemaApply,
            Op::EnsureIndices | Op::FoldIndices => omnigraph::recovery::sidecar::WriterKind::EnsureIndices,
            Op::LoadAppend | Op::LoadMerge | Op::LoadOverwrite => omnigraph::recovery::sidecar::WriterKind::Load,
            _ => omnigraph::recovery::sidecar::WriterKind::Mutation,
        };
        omnigraph::actors::saga::failpoints::crosses(kind, boundary)
    }

    async fn run(self, g: &Graph) -> Result<omnigraph::WriteOutcome, OmniError> {
        self.run_on(g, "main").await
    }

    async fn run_on(self, g: &Graph, branch: &str) -> Result<omnigraph::WriteOutcome, OmniError> {
        let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
        match self {
            Op::MutationInsert | Op::CompactingInsert | Op::IndexedInsert => {
                let src =
                    r#"query q() { insert Person { name: "Zed", age: 9 } insert Knows { from: "Zed", to: "Alice" } }"#;
                g.mutate(src, None, Map::new(), &o).await
            }
            Op::MutationUpdate | Op::IndexedUpdate => {
                let src = r#"query q() { update Person set { age: 99 } where name = "Bob" }"#;
                g.mutate(src, None, Map::new(), &o).await
            }
            Op::MutationDelete | Op::IndexedDelete => {
                g.mutate(r#"query q() { delete Person where name = "Bob" }"#, None, Map::new(), &o).await
            }
            Op::LoadAppend => {
                let data = "{\"type\": \"Company\", \"data\": {\"name\": \"Initech\"}}\n{\"edge\": \"WorksAt\", \"from\": \"Bob\", \"to\": \"Initech\"}\n";
                g.load(data.as_bytes(), LoadMode::Append, &o).await
            }
            Op::LoadMerge => {
                // Knows gets a two-step chain: a merge-insert of the edge
                // with a given id, then an append of the one with a minted id.
                let data = "{\"type\": \"Person\", \"data\": {\"name\": \"Bob\", \"age\": 28}}\n{\"type\": \"Company\", \"data\": {\"name\": \"Hooli\"}}\n{\"edge\": \"Knows\", \"from\": \"Bob\", \"to\": \"Carol\", \"data\": {\"id\": \"k-bob-carol\"}}\n{\"edge\": \"Knows\", \"from\": \"Carol\", \"to\": \"Bob\"}\n";
                g.load(data.as_bytes(), LoadMode::Merge, &o).await
            }
            Op::LoadOverwrite => {
                g.load("{\"type\": \"Company\", \"data\": {\"name\": \"Only\"}}\n".as_bytes(), LoadMode::Overwrite, &o)
                    .await
            }
            Op::Merge | Op::SchemaMerge => {
                let r = g.branch_merge("feature", branch, &omnigraph::MergeOptions::default()).await?;
                Ok(commit_only(r.report.graph_commit_id))
            }
            Op::Revert => {
                let reverted = g.commits(branch, Some(1)).await?.remove(0).commit_id;
                let opts = omnigraph::RevertOptions { branch: Some(branch.into()), ..Default::default() };
                let r = g.commit_revert(&reverted, &opts).await?;
                Ok(commit_only(r.report.graph_commit_id))
            }
            Op::CherryPick => {
                let picked = g.commits("feature", Some(1)).await?.remove(0).commit_id;
                let opts = omnigraph::RevertOptions { branch: Some(branch.into()), ..Default::default() };
                Ok(commit_only(g.commit_cherry_pick(&picked, &opts).await?.report.graph_commit_id))
            }
            Op::Reset => {
                let r = g.branch_reset(branch, &format!("{branch}~1"), &omnigraph::ResetOptions::default()).await?;
                Ok(commit_only(r.graph_commit_id))
            }
            Op::DecidedMerge => {
                let carol = serde_json::json!({ "type": "Person", "id": "Carol", "take": "ours" });
                let opts = omnigraph::MergeOptions {
                    strategy: Some(omnigraph::MergeStrategy::Theirs),
                    resolutions: vec![serde_json::from_value(carol).expect("resolution")],
                    ..omnigraph::MergeOptions::default()
                };
                let r = g.branch_merge("feature", branch, &opts).await?;
                assert_eq!(r.report.conflicts_decided, 2, "{:?}", r.report);
                Ok(commit_only(r.report.graph_commit_id))
            }
            Op::Optimize | Op::OptimizeOlderGraph => Ok(commit_only(g.optimize(branch, None).await?.graph_commit_id)),
            Op::SchemaApply => {
                Ok(commit_only(g.schema_apply_on(branch, &schema_target(), false, None).await?.graph_commit_id))
            }
            Op::EnsureIndices | Op::FoldIndices => {
                Ok(commit_only(g.ensure_indices(branch, None).await?.graph_commit_id))
            }
            Op::GroupCommit => {
                let requests: Vec<omnigraph::MutationRequest> = GROUP
                    .iter()
                    .map(|s| omnigraph::MutationRequest { source: s.to_string(), ..Default::default() })
                    .collect();
                let mut out = g.mutate_many(&requests, &o).await?;
                assert!(matches!(out[2], Err(OmniError::BadRequest(_))), "the third member: {:?}", out[2]);
                assert!(out.iter().enumerate().all(|(i, r)| i == 2 || r.is_ok()), "{out:?}");
                out.pop().expect("four answers")
            }
        }
    }

    /// What the graph needs before this op can run on `branch`: the merge's
    /// source branch, the commits an optimize compacts.
    async fn prepare(self, g: &Graph, branch: &str) {
        let (on, changes): (&str, &[&str]) = match self {
            Op::Merge => {
                g.branch_create("feature", "main").await.expect("feature");
                ("feature", &FEATURE_CHANGES)
            }
            Op::Revert | Op::Reset => (branch, std::slice::from_ref(&REVERTED)),
            Op::CherryPick => {
                g.branch_create("feature", "main").await.expect("feature");
                ("feature", std::slice::from_ref(&REVERTED))
            }
            Op::DecidedMerge => {
                g.branch_create("feature", "main").await.expect("feature");
                let o = WriteOptions { branch: "feature".into(), ..WriteOptions::default() };
                for src in FEATURE_CHANGES {
                    g.mutate(src, None, Map::new(), &o).await.expect("preparing the source");
                }
                (branch, &TARGET_CHANGES)
            }
            Op::SchemaMerge => {
                g.branch_create("feature", "main").await.expect("feature");
                g.schema_apply_on("feature", &merge_source_schema(), false, None).await.expect("apply on feature");
                let o = WriteOptions { branch: "feature".into(), ..WriteOptions::default() };
                for src in SCHEMA_MERGE_SOURCE {
                    g.mutate(src, None, Map::new(), &o).await.expect("preparing the source");
                }
                g.schema_apply_on(branch, &merge_target_schema(), false, None).await.expect("apply on the target");
                (branch, std::slice::from_ref(&SCHEMA_MERGE_TARGET))
            }
            Op::Optimize | Op::OptimizeOlderGraph => (branch, &SMALL_COMMITS),
            Op::IndexedInsert | Op::IndexedUpdate | Op::IndexedDelete | Op::FoldIndices => {
                // Indexes built on main and inherited: a named branch is made
                // again after the build, so its insert forks an indexed table.
                g.ensure_indices("main", None).await.expect("indexes");
                if branch != "main" {
                    g.branch_delete(branch).await.expect("drop the branch");
                    g.branch_create(branch, "main").await.expect("branch again");
                }
                if matches!(self, Op::FoldIndices) {
                    // The tail the fold covers, in a table the branch owns.
                    (branch, &SMALL_COMMITS[..2])
                } else {
                    return;
                }
            }
            Op::CompactingInsert => {
                // Small commits until the next write to Person compacts.
                let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
                for i in 0.. {
                    let view = manifest::load(g.root(), branch, None).await.expect("view");
                    let person = &view.state.tables["node:Person"];
                    let ds = omnigraph::engine::committed::open_pinned(g.root(), person).await.expect("open");
                    if table::needs_compaction(&ds).await.expect("plan") {
                        break;
                    }
                    let src = format!(r#"query q() {{ insert Person {{ name: "F{i}" }} }}"#);
                    g.mutate(&src, None, Map::new(), &o).await.expect("small commit");
                }
                return;
            }
            _ => return,
        };
        let o = WriteOptions { branch: on.into(), ..WriteOptions::default() };
        for src in changes {
            g.mutate(src, None, Map::new(), &o).await.expect("preparing change");
        }
    }
}

/// The outcome of a writer that reports only its commit.
fn commit_only(commit_id: Option<String>) -> omnigraph::WriteOutcome {
    omnigraph::WriteOutcome {
        commit_id,
        commit: None,
        nodes_affected: 0,
        edges_affected: 0,
        tables: vec![],
        rows_written: Default::default(),
    }
}

/// Process death: drop the last handle and wait until the actor tree is gone.
async fn shut_down(g: Graph) {
    let tree = std::sync::Arc::downgrade(g.runtime());
    drop(g);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while tree.upgrade().is_some() {
        assert!(tokio::time::Instant::now() < deadline, "the actor tree outlived its handles");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Crash `op` on `branch` of the graph at `loc` at `failpoint`: a child
/// process runs it and dies there. No handle on `loc` may be open here.
async fn crash(loc: &str, op: Op, branch: &'static str, failpoint: &str) {
    let (loc, point) = (loc.to_string(), failpoint.to_string());
    let action = child::Action::Write(op, branch.to_string());
    tokio::task::spawn_blocking(move || child::crash_in_child(&loc, &action, &point)).await.expect("crash child");
}

/// Table key → (pin, rows).
type Counts = BTreeMap<String, (u64, u64)>;
/// Table key → sorted rows.
type Content = BTreeMap<String, Vec<String>>;

/// The graph's content per table: every row without its id (generated ids
/// differ between runs), sorted. Equal content = equal outcome.
async fn counts(g: &Graph) -> BTreeMap<String, Vec<String>> {
    counts_on(g, "main").await
}

async fn counts_on(g: &Graph, branch: &str) -> BTreeMap<String, Vec<String>> {
    content::content(g, branch).await
}

async fn pins(g: &Graph) -> Counts {
    g.snapshot("main")
        .await
        .expect("snapshot")
        .tables
        .into_iter()
        .map(|t| (t.table_key, (t.version, t.row_count)))
        .collect()
}

/// Manifest pin == Lance HEAD for every table, no stray fork, and no sidecar left.
async fn assert_clean(g: &Graph, context: &str) {
    assert_clean_on(g, "main", context).await;
}

async fn assert_clean_on(g: &Graph, branch: &str, context: &str) {
    for b in ["main", branch] {
        let v = invariants::violations(g.root(), b).await.expect("check");
        assert!(v.is_empty(), "{context}: {b}: {v:?}");
    }
}

/// A graph with the example data, plus the row counts a clean run of `op` produces.
async fn setup(op: Op) -> (tempfile::TempDir, String, Content, Content, Vec<String>) {
    setup_on(op, "main").await
}

/// A graph with the example data (and `branch`, fresh, unless it is main),
/// the content before, the content a clean run of `op` on `branch` produces,
/// and the commits of `branch`.
async fn setup_on(op: Op, branch: &str) -> (tempfile::TempDir, String, Content, Content, Vec<String>) {
    setup_at(op, branch, None).await
}

/// [`setup_on`] with the graph at `loc` (an S3 location) instead of a
/// temporary directory; the expected after-state still comes from a local run.
async fn setup_at(
    op: Op,
    branch: &str,
    loc: Option<String>,
) -> (tempfile::TempDir, String, Content, Content, Vec<String>) {
    async fn base(loc: &str, branch: &str, op: Op) -> Graph {
        let g = if matches!(op, Op::OptimizeOlderGraph) {
            let root = omnigraph::engine::storage::Root::parse(loc).expect("root");
            omnigraph::engine::init::init_without_lineage_config(&root, SCHEMA).await.expect("init");
            Omnigraph::open(loc).await.expect("open")
        } else {
            Omnigraph::init(loc, SCHEMA).await.expect("init")
        };
        g.load(BASE.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("base");
        if branch != "main" {
            g.branch_create(branch, "main").await.expect("branch");
        }
        op.prepare(&g, branch).await;
        g
    }
    let dir = crate::scratch::tempdir();
    let loc = loc.unwrap_or_else(|| dir.path().join("g").to_string_lossy().to_string());
    let g = base(&loc, branch, op).await;
    let before = counts_on(&g, branch).await;
    let commits: Vec<String> =
        g.commits(branch, None).await.expect("commits").into_iter().map(|c| c.commit_id).collect();
    // The expected after-state, from a clean run on a scratch copy of the same data.
    let scratch = crate::scratch::tempdir();
    let s = base(&scratch.path().join("g").to_string_lossy(), branch, op).await;
    op.run_on(&s, branch).await.expect("clean run");
    let after = counts_on(&s, branch).await;
    drop(g);
    (dir, loc, before, after, commits)
}

/// A graph prepared for `op` on `branch` ([`setup_at`]) with no handle
/// open, main's content, and the content before and after a clean run: built
/// once per writer and copied for each crash case.
struct Template {
    _dir: tempfile::TempDir,
    loc: String,
    before: Content,
    after: Content,
    committed: Vec<String>,
    main_before: Content,
}

async fn template(op: Op, branch: &str, loc: Option<String>) -> Template {
    let (_dir, loc, before, after, committed) = setup_at(op, branch, loc).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    let main_before = counts(&g).await;
    shut_down(g).await;
    Template { _dir, loc, before, after, committed, main_before }
}

/// Crash cases at the same time: each child is a process of its own, and
/// this process only reopens and checks its own copy of the graph.
const PARALLEL_CASES: usize = 2;

/// Crash `op` on `branch` at each of `failpoints`, each on its own copy of
/// one [`Template`], [`PARALLEL_CASES`] at a time; the outcomes in order.
async fn crash_cases_on(op: Op, failpoints: &[String], branch: &'static str) -> Vec<&'static str> {
    use futures::StreamExt;
    let t = template(op, branch, None).await;
    let t = &t;
    futures::stream::iter(failpoints)
        .map(|point| async move {
            let (_copy, loc) = durable_cut::fresh_copy(&t.loc).await;
            crash_case_in(t, &loc, op, point, branch).await
        })
        .buffered(PARALLEL_CASES)
        .collect()
        .await
}

/// Crash `op` on `branch` of a graph at `loc` (an S3 location) at
/// `failpoint`, then [`crash_case_in`].
async fn crash_case_at(op: Op, failpoint: &str, branch: &'static str, loc: Option<String>) -> &'static str {
    let t = template(op, branch, loc).await;
    crash_case_in(&t, &t.loc, op, failpoint, branch).await
}

/// Crash `op` on `branch` of the graph at `loc` (a copy of `t`, or `t`
/// itself) at `failpoint`, reopen, and check every invariant (on `branch`
/// and on main, which must not have changed).
async fn crash_case_in(t: &Template, loc: &str, op: Op, failpoint: &str, branch: &'static str) -> &'static str {
    let Template { before, after, committed, main_before, .. } = t;
    crash(loc, op, branch, failpoint).await;
    let had_sidecar =
        !list_pending(&omnigraph::engine::storage::Root::parse(loc).expect("root")).await.expect("list").is_empty();

    let g = Omnigraph::open(loc).await.expect("reopen runs recovery");
    let context = format!("{op:?} on {branch} crashed at {failpoint}");
    assert_clean_on(&g, branch, &context).await;
    if branch != "main" {
        assert_eq!(&counts(&g).await, main_before, "{context}: main changed");
    }
    let now = counts_on(&g, branch).await;
    let history = kept_commits(&g, op, branch).await;
    assert!(committed.iter().all(|c| history.contains(c)), "{context}: a committed commit was rolled back");
    let outcome = if !op.changes_content() {
        assert_eq!(&now, before, "{context}: a maintenance write changed rows");
        // Applied = exactly the maintenance commit is new; invisible = no
        // new commit, or only the recovery's roll-back commit (none when
        // there was no effect to restore).
        let new_commits = history.iter().filter(|c| !committed.contains(c)).count();
        match (audit_kind(&g).await, new_commits) {
            (Some(RecoveryKind::RolledBack), 0 | 1) | (None, 0) => "invisible",
            (Some(RecoveryKind::RolledForward) | None, 1) => "applied",
            (kind, n) => panic!("{context}: {n} new commits after recovery {kind:?}"),
        }
    } else if now == *after && now != *before {
        "applied"
    } else if now == *before {
        "invisible"
    } else {
        panic!("{context}: half-applied: before {before:?}, after {after:?}, now {now:?}");
    };
    assert_schema_matches(&g, op, branch, outcome == "applied", &context).await;
    assert_lineage_matches(&g, op, outcome == "applied", &context).await;
    assert_group_matches(&g, op, branch, outcome == "applied", committed, &context).await;
    assert_reset_matches(&g, op, branch, outcome == "applied", committed, &context).await;
    let audit = audit::read_all(g.root()).await.expect("audit");
    if had_sidecar {
        assert_eq!(audit.len(), 1, "{context}: expected exactly one audit row, got {audit:?}");
        let expected_kind = if outcome == "applied" { RecoveryKind::RolledForward } else { RecoveryKind::RolledBack };
        assert_eq!(audit[0].recovery_kind, expected_kind, "{context}");
    } else {
        assert!(audit.is_empty(), "{context}: recovery ran without a sidecar: {audit:?}");
    }
    // Still writable, on the branch too (a first touch again if it was undone).
    let next = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
    g.mutate(r#"query q() { insert Company { name: "After" } }"#, None, Map::new(), &next)
        .await
        .unwrap_or_else(|e| panic!("{context}: next write failed: {e}"));
    assert_clean_on(&g, branch, &format!("{context}, then a write")).await;
    outcome
}

/// The commits `branch` keeps: those its head reaches, and for a reset
/// (which moves the head off commits without removing them) every commit
/// its manifest holds.
async fn kept_commits(g: &Graph, op: Op, branch: &str) -> Vec<String> {
    if matches!(op, Op::Reset) {
        let view = manifest::load(g.root(), branch, None).await.expect("view");
        return view.state.commits().expect("a complete state").keys().cloned().collect();
    }
    g.commits(branch, None).await.expect("commits").into_iter().map(|c| c.commit_id).collect()
}

/// After a schema apply's crash and recovery on `branch`: its schema is the
/// target exactly when the apply is applied, main's is untouched by an
/// apply on another branch, and no staging file is left.
async fn assert_schema_matches(g: &Graph, op: Op, branch: &str, applied: bool, context: &str) {
    let (after, before) = match op {
        Op::SchemaApply => (schema_target(), SCHEMA.to_string()),
        Op::SchemaMerge => (merged_schema(), merge_target_schema()),
        _ => return,
    };
    // As a schema plan sees it: a merged schema is stored as rendered text,
    // and a type it creates takes a table id of its own.
    use omnigraph::engine::lang::catalog::{compile_schema, evolve};
    let have = g.schema_of(branch).await.expect("schema");
    let want = if applied { &after } else { &before };
    let steps = evolve::plan(&compile_schema(want).expect("compiles"), have.catalog.clone(), false).steps;
    assert!(
        steps.is_empty(),
        "{context}: the branch's schema does not match the outcome (applied: {applied}): {steps:?}\n{}",
        have.source
    );
    if branch != "main" {
        assert_eq!(g.schema().await.expect("main's schema").source, SCHEMA, "{context}: main's schema changed");
    }
    let staged = omnigraph::engine::schema_store::staging_exists(g.root()).await.expect("staging");
    assert!(!staged, "{context}: schema staging files left");
}

/// After an [`Op::OptimizeOlderGraph`]'s crash and recovery: every table
/// `main` pins carries the row lineage config exactly when the optimize is
/// applied (a roll-back restores the version without it).
async fn assert_lineage_matches(g: &Graph, op: Op, applied: bool, context: &str) {
    if !matches!(op, Op::OptimizeOlderGraph) {
        return;
    }
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    for (key, entry) in &view.state.tables {
        let ds = omnigraph::engine::committed::open_pinned(g.root(), entry).await.expect("open");
        let set = table::has_lineage_config(&ds);
        assert_eq!(set, applied, "{context}: {key} has the lineage config: {set}, applied: {applied}");
    }
}

/// After an [`Op::Reset`]'s crash and recovery: applied on a branch other
/// than main, the head is the commit before the last one (moved, with no
/// new commit); on main, one new commit on top. Invisible, the head is
/// where it was, or (rolled back) a recovery commit on top of it.
async fn assert_reset_matches(g: &Graph, op: Op, branch: &str, applied: bool, before: &[String], context: &str) {
    if !matches!(op, Op::Reset) {
        return;
    }
    let history: Vec<String> =
        g.commits(branch, None).await.expect("commits").into_iter().map(|c| c.commit_id).collect();
    let rolled_back = audit_kind(g).await == Some(RecoveryKind::RolledBack);
    // A head move leaves the reverted commit (the newest); a commit (the
    // reset's on main, or a roll-back's that had effects to restore) lands
    // on top of the rest.
    let kept = if applied && branch != "main" { &before[1..] } else { before };
    let on_top = history.len().saturating_sub(kept.len());
    let allowed = usize::from(if applied { branch == "main" } else { rolled_back });
    assert!(on_top == allowed || !applied && on_top == 0, "{context}: {on_top} new commits: {history:?}");
    assert_eq!(&history[on_top..], kept, "{context}");
}

/// After an [`Op::GroupCommit`]'s crash and recovery: applied, every
/// committed member is its own commit, in one chain on top of the commits
/// before, published together; invisible, none is (a roll-back adds only
/// its own commit).
async fn assert_group_matches(g: &Graph, op: Op, branch: &str, applied: bool, before: &[String], context: &str) {
    if !matches!(op, Op::GroupCommit) {
        return;
    }
    let history = g.commits(branch, None).await.expect("commits");
    let new: Vec<&omnigraph::CommitInfo> = history.iter().filter(|c| !before.contains(&c.commit_id)).collect();
    if !applied {
        let restored = audit_kind(g).await == Some(RecoveryKind::RolledBack);
        assert!(new.len() <= usize::from(restored), "{context}: invisible, yet new commits {new:?}");
        return;
    }
    assert_eq!(new.len(), GROUP_COMMITS, "{context}: {new:?}");
    for pair in new.windows(2) {
        assert_eq!(pair[0].parent_commit_id.as_deref(), Some(pair[1].commit_id.as_str()), "{context}: {new:?}");
        assert_eq!(pair[0].manifest_version, pair[1].manifest_version, "{context}: one publish");
    }
    let below = new[GROUP_COMMITS - 1].parent_commit_id.as_ref();
    assert_eq!(below, before.first(), "{context}: the group is not on the head before it");
}

/// How the one recovery of a crash case resolved, if one ran.
async fn audit_kind(g: &Graph) -> Option<RecoveryKind> {
    audit::read_all(g.root()).await.expect("audit").first().map(|r| r.recovery_kind)
}

/// Run `write` with `failpoint` returning an error once (an error path, not
/// a crash); the write must end `RecoveryRequired`. Returns its operation id.
async fn fail_once_after_effects<F>(failpoint: &str, write: F) -> String
where
    F: std::future::Future<Output = Result<omnigraph::WriteOutcome, OmniError>>,
{
    fail::cfg(failpoint, "1*return").expect("cfg");
    let out = write.await;
    fail::remove(failpoint);
    match out {
        Err(OmniError::RecoveryRequired { operation_id, .. }) => operation_id,
        other => panic!("expected RecoveryRequired at {failpoint}, got {other:?}"),
    }
}

/// Park `op` after it prepared, land a load of `company` meanwhile, then let
/// `op` finish; returns its outcome.
async fn race_with_a_load(g: &Graph, op: Op, company: &str) -> Result<omnigraph::WriteOutcome, OmniError> {
    fail::cfg("mutation.after_prepare", "1*sleep(800)").expect("cfg");
    let parked = {
        let g = g.clone();
        tokio::spawn(async move { op.run(&g).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let racer = format!("{{\"type\": \"Company\", \"data\": {{\"name\": \"{company}\"}}}}\n");
    g.load(racer.as_bytes(), LoadMode::Merge, &WriteOptions::default()).await.expect("racing load");
    let out = parked.await.expect("join");
    fail::remove("mutation.after_prepare");
    out
}

/// Crash every writer at every boundary on `branch`; one report line per case.
async fn matrix(branch: &'static str, boundaries: &[&str]) -> Vec<String> {
    let mut report = Vec::new();
    for op in OPS {
        let names: Vec<String> =
            boundaries.iter().filter(|b| op.crosses(b)).map(|b| format!("{}.{b}", op.prefix())).collect();
        for (name, outcome) in names.iter().zip(crash_cases_on(op, &names, branch).await) {
            report.push(format!("{op:?} on {branch} @ {name}: {outcome}"));
        }
    }
    println!("crash matrix on {branch} ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    // A crash after the publish is acknowledged data: it must stay applied.
    assert!(report.iter().filter(|r| r.contains("after_publish")).all(|r| r.ends_with("applied")));
    report
}

/// A load killed at every saga boundary on S3 (a real S3-compatible server),
/// and a first load on a new branch killed around its fork, each recovered by
/// a fresh open there: the same invariants as on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by a_long_case_runs_in_a_process_of_its_own"]
async fn a_load_killed_at_every_boundary_on_s3_recovers_clean() {
    let _g = serial().await;
    if s3::server().is_none() {
        return;
    }
    let mut report = Vec::new();
    for op in [Op::LoadAppend, Op::LoadMerge] {
        for boundary in SAGA_BOUNDARIES {
            let name = format!("{}.{boundary}", op.prefix());
            let outcome = crash_case_at(op, &name, "main", s3::location("crash")).await;
            report.push(format!("{op:?} on S3 @ {name}: {outcome}"));
        }
    }
    // A first write on a new branch: its first-touch fork on S3.
    for boundary in ["after_fork", "after_table_commit", "after_confirm"] {
        let name = format!("load.{boundary}");
        let outcome = crash_case_at(Op::LoadAppend, &name, "feature", s3::location("crash")).await;
        report.push(format!("LoadAppend on S3 branch feature @ {name}: {outcome}"));
    }
    println!("S3 crash matrix ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert!(report.iter().filter(|r| r.contains("after_publish")).all(|r| r.ends_with("applied")));
    assert!(report.iter().any(|r| r.ends_with("invisible")), "no case rolled back");
}

/// Saga boundaries every write crosses, crashed on main for every writer.
const SAGA_BOUNDARIES: [&str; 7] = [
    "after_prepare",
    "after_leases",
    "after_revalidate",
    "after_arm",
    "after_table_commit",
    "after_confirm",
    "after_publish",
];

/// Saga boundaries only a first write to a table on a named branch crosses.
const FORK_BOUNDARIES: [&str; 1] = ["after_fork"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_failpoint_of_every_writer_recovers_clean() {
    let _s = serial().await;
    matrix("main", &SAGA_BOUNDARIES).await;
}

/// Every boundary a first write on a fresh branch crosses, for every writer:
/// each table it touches forks (after arming) before it stages and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_failpoint_of_a_first_write_on_a_new_branch_recovers_clean() {
    let _s = serial().await;
    let boundaries: Vec<&str> = SAGA_BOUNDARIES.iter().chain(&FORK_BOUNDARIES).copied().collect();
    let report = matrix("fresh", &boundaries).await;
    assert!(report.iter().filter(|r| r.contains("after_fork")).all(|r| r.ends_with("invisible")));
}

/// An error (not a crash) after the first effect returns RecoveryRequired and
/// leaves the sidecar; the reconciler rolls it back without a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_heals_a_failed_write_without_reopening() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, before, _after, _) = setup(Op::MutationInsert).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    fail_once_after_effects("mutation.after_table_commit", Op::MutationInsert.run(&g)).await;
    wait_for_no_sidecar(&g).await;
    assert_clean(&g, "after background roll-back").await;
    assert_eq!(counts(&g).await, before, "the failed write must be invisible");
    let audit = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].recovery_kind, RecoveryKind::RolledBack);
    let head = g.commits("main", Some(1)).await.expect("commits");
    assert_eq!(head[0].actor.as_deref(), Some("omnigraph:recovery"), "roll-back publishes under omnigraph:recovery");
    Op::MutationInsert.run(&g).await.expect("the next write on the branch succeeds");
    assert_clean(&g, "after the retry").await;
}

/// A write that fails after its effects are confirmed (before the publish)
/// is rolled forward by the reconciler under its original commit id and actor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_write_that_failed_to_publish_rolls_forward_keeping_id_and_actor() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, _before, after, _) = setup(Op::MutationInsert).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    let src = r#"query q() { insert Person { name: "Zed", age: 9 } insert Knows { from: "Zed", to: "Alice" } }"#;
    let opts = WriteOptions { actor: Some("alice".into()), ..WriteOptions::default() };
    let operation_id = fail_once_after_effects("mutation.after_confirm", g.mutate(src, None, Map::new(), &opts)).await;
    wait_for_no_sidecar(&g).await;
    assert_clean(&g, "after roll-forward").await;
    assert_eq!(counts(&g).await, after);
    let head = &g.commits("main", Some(1)).await.expect("commits")[0];
    assert_eq!(head.commit_id, operation_id, "roll-forward keeps the original commit id");
    assert_eq!(head.actor.as_deref(), Some("alice"), "roll-forward keeps the original actor");
    let audit = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(audit.len(), 1);
    assert_eq!(audit[0].recovery_kind, RecoveryKind::RolledForward);
}

async fn wait_for_no_sidecar(g: &Graph) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !list_pending(g.root()).await.expect("list").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the reconciler did not resolve the sidecar");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Killing the branch actor before the publish: either the restarted actor
/// takes the publish, or the publish meets the dead actor and the reconciler
/// rolls the confirmed write forward. Either way the write is fully applied
/// under its actor, and the graph stays writable without a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_branch_actor_before_publish_leaves_the_write_applied() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, _before, after, _) = setup(Op::MutationInsert).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    let actor = g.runtime().branch_actor("main").await.expect("actor");
    fail::cfg_callback("mutation.after_confirm", move || actor.kill()).expect("cfg");
    let src = r#"query q() { insert Person { name: "Zed", age: 9 } insert Knows { from: "Zed", to: "Alice" } }"#;
    let opts = WriteOptions { actor: Some("alice".into()), ..WriteOptions::default() };
    let out = g.mutate(src, None, Map::new(), &opts).await;
    fail::remove("mutation.after_confirm");
    let operation_id = match out {
        Ok(o) => o.commit_id.expect("commit"),
        Err(OmniError::RecoveryRequired { operation_id, .. }) => operation_id,
        Err(other) => panic!("unexpected error: {other}"),
    };
    wait_for_no_sidecar(&g).await;
    assert_clean(&g, "after the branch actor was killed").await;
    assert_eq!(counts(&g).await, after);
    let head = &g.commits("main", Some(1)).await.expect("commits")[0];
    assert_eq!((head.commit_id.as_str(), head.actor.as_deref()), (operation_id.as_str(), Some("alice")));
    g.mutate(r#"query q() { insert Company { name: "Later" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .expect("writable without reopening");
}

/// Killing a table actor between the two table commits of a two-table
/// mutation: the graph stays consistent and writable without reopening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_table_actor_between_two_commits_leaves_the_graph_consistent() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, before, after, _) = setup(Op::MutationInsert).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    // Tables commit in key order: edge:Knows first, then node:Person.
    let person = g.root().child_uri(&view.state.tables["node:Person"].location);
    let actor = g.runtime().table_actor(&person, "main").await.expect("actor");
    fail::cfg_callback("mutation.after_table_commit", move || actor.kill()).expect("cfg");
    let out = Op::MutationInsert.run(&g).await;
    fail::remove("mutation.after_table_commit");
    // Either the restarted actor took the second commit (the write applied)
    // or the commit met the dead actor (RecoveryRequired, healed in the
    // background). Both must end consistent, never half-applied.
    let expected = match out {
        Ok(_) => after,
        Err(OmniError::RecoveryRequired { .. }) => before,
        Err(other) => panic!("unexpected error: {other}"),
    };
    wait_for_no_sidecar(&g).await;
    assert_clean(&g, "after the table actor was killed").await;
    assert_eq!(counts(&g).await, expected);
    let before_retry = pins(&g).await;
    g.mutate(r#"query q() { insert Company { name: "Later" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .expect("writable without reopening");
    assert_ne!(pins(&g).await, before_retry);
}

/// A strict update that prepared before another write landed gets
/// ReadSetChanged with nothing changed; an insert-only write in the same
/// position is prepared again and lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_strict_update_racing_a_write_gets_read_set_changed() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, before, _after, _) = setup(Op::MutationUpdate).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    // The update parks after preparing; a load (its own failpoints) lands meanwhile.
    let err = race_with_a_load(&g, Op::MutationUpdate, "Racer").await.expect_err("the stale update must be refused");
    assert!(matches!(err, OmniError::ReadSetChanged { .. }), "{err}");
    let now = counts(&g).await;
    assert_eq!(now["node:Person"], before["node:Person"], "the refused update changed nothing");
    assert_ne!(now["node:Company"], before["node:Company"], "the racing load landed");
    assert_clean(&g, "after the race").await;

    // Same race for an insert-only mutation: prepared again, lands.
    race_with_a_load(&g, Op::MutationInsert, "Racer2").await.expect("an insert-only mutation is prepared again");
    assert_clean(&g, "after the insert race").await;
}

/// Killing the reconciler while it rolls a failed write back: the pass runs
/// beside the actor's mailbox, the supervisor restarts the actor, and the
/// graph ends consistent and writable without a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_reconciler_during_a_roll_back_leaves_the_graph_consistent() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, before, _after, _) = setup(Op::MutationInsert).await;
    let g = Omnigraph::open(&loc).await.expect("open");
    fail_once_after_effects("mutation.after_table_commit", Op::MutationInsert.run(&g)).await;
    // The failure asked for a background pass; kill the reconciler now.
    let reconciler = g.runtime().reconciler().await.expect("reconciler");
    reconciler.kill();
    // Whatever the pass reached, the next write's path (heal + a fresh
    // reconcile request after RecoveryRequired) converges.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !list_pending(g.root()).await.expect("list").is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the sidecar was never resolved");
        let _ = g.runtime().reconcile_soon().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_clean(&g, "after the reconciler was killed").await;
    assert_eq!(counts(&g).await, before, "the failed write stays invisible");
    let audit = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(audit.len(), 1, "exactly one audit row: {audit:?}");
    Op::MutationInsert.run(&g).await.expect("writable without reopening");
}

/// Branch control failpoints with a crash test below.
const CONTROL_CRASHES: [&str; 3] = ["branch_create.before_ref", "branch_create.after_ref", "branch_delete.after_ref"];

/// Crash branch create and delete between their physical steps: after a
/// reopen the branch either exists whole or not at all, no stray fork or
/// sidecar is left, and the name can be used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_inside_branch_create_and_delete_recovers_clean() {
    let _s = serial().await;
    for point in CONTROL_CRASHES {
        let (_dir, loc, before, _after, _) = setup_on(Op::MutationInsert, "b").await;
        let g = Omnigraph::open(&loc).await.expect("open");
        // Give the branch a fork, so a half-finished delete leaves one behind.
        Op::MutationInsert.run_on(&g, "b").await.expect("write on b");
        shut_down(g).await;
        let action = if point.starts_with("branch_create") {
            child::Action::BranchCreate { name: "c".into(), from: "b".into() }
        } else {
            child::Action::BranchDelete { name: "b".into(), purge: true }
        };
        let l = loc.clone();
        tokio::task::spawn_blocking(move || child::crash_in_child(&l, &action, point)).await.expect("crash child");

        let g = Omnigraph::open(&loc).await.expect("reopen");
        let live: Vec<String> = g.branch_list().await.expect("list").into_iter().map(|b| b.name).collect();
        let (name, from, exists) = match point {
            "branch_create.before_ref" => ("c", "b", false),
            "branch_create.after_ref" => ("c", "b", true),
            _ => ("b", "main", false),
        };
        assert_eq!(live.contains(&name.to_string()), exists, "{point}: branches {live:?}");
        if !exists {
            // Creating the name again reclaims whatever the crash left (a
            // clone-only tree, stale forks) and reads the parent's data.
            g.branch_create(name, from).await.unwrap_or_else(|e| panic!("{point}: recreate failed: {e}"));
        }
        assert_eq!(counts_on(&g, name).await, counts_on(&g, from).await, "{point}: `{name}` reads `{from}`");
        Op::MutationInsert.run_on(&g, name).await.unwrap_or_else(|e| panic!("{point}: write failed: {e}"));
        assert_clean_on(&g, name, point).await;
        assert_eq!(counts(&g).await, before, "{point}: main changed");
    }
}

/// Branch hide and restore failpoints with a crash test below.
const HIDE_CRASHES: [&str; 4] = [
    "branch_delete.before_hide",
    "branch_delete.after_hide",
    "branch_restore.before_show",
    "branch_restore.after_show",
];

/// Crash a branch delete (a hide) and a restore around their one append:
/// after a reopen the branch is visible or hidden, never between; no
/// sidecar is left; every pin is its Lance HEAD; and the branch's committed
/// data is never lost: a hidden branch restores to exactly what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_inside_branch_hide_and_restore_leaves_it_visible_or_hidden() {
    let _s = serial().await;
    for point in HIDE_CRASHES {
        let (_dir, loc, before, _after, _) = setup_on(Op::MutationInsert, "b").await;
        let g = Omnigraph::open(&loc).await.expect("open");
        Op::MutationInsert.run_on(&g, "b").await.expect("write on b");
        let held = counts_on(&g, "b").await;
        let restoring = point.starts_with("branch_restore");
        if restoring {
            g.branch_delete("b").await.expect("delete before the restore");
        }
        shut_down(g).await;
        let action = if restoring {
            child::Action::BranchRestore("b".into())
        } else {
            child::Action::BranchDelete { name: "b".into(), purge: false }
        };
        let l = loc.clone();
        tokio::task::spawn_blocking(move || child::crash_in_child(&l, &action, point)).await.expect("crash child");

        let g = Omnigraph::open(&loc).await.expect("reopen");
        let visible = g.branch_list().await.expect("list").iter().any(|b| b.name == "b");
        let expect_visible = matches!(point, "branch_delete.before_hide" | "branch_restore.after_show");
        assert_eq!(visible, expect_visible, "{point}: visible");
        assert!(list_pending(g.root()).await.expect("list").is_empty(), "{point}: a sidecar is left");
        if !visible {
            let err = g.snapshot("b").await.expect_err("a hidden branch reads as gone");
            assert!(matches!(err, OmniError::NotFound(_)), "{point}: {err}");
            g.branch_restore("b", None, None).await.unwrap_or_else(|e| panic!("{point}: restore failed: {e}"));
        }
        assert_eq!(counts_on(&g, "b").await, held, "{point}: b lost committed data");
        assert_clean_on(&g, "b", point).await;
        Op::MutationInsert.run_on(&g, "b").await.unwrap_or_else(|e| panic!("{point}: write failed: {e}"));
        assert_clean_on(&g, "b", point).await;
        assert_eq!(counts(&g).await, before, "{point}: main changed");
        shut_down(g).await;
    }
}

/// Tag failpoints with a crash test below.
const TAG_CRASHES: [&str; 4] =
    ["tag_create.before_record", "tag_create.after_record", "tag_delete.before_record", "tag_delete.after_record"];

/// Crash tag create and delete around their one durable record: after a
/// reopen the tag is absent or whole (naming the head it was made on, and
/// readable by time travel), no sidecar is left, and the name works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_inside_tag_create_and_delete_leaves_it_absent_or_whole() {
    let _s = serial().await;
    for point in TAG_CRASHES {
        let (_dir, loc, before, _after, _) = setup(Op::MutationInsert).await;
        let g = Omnigraph::open(&loc).await.expect("open");
        let head = g.commits("main", Some(1)).await.expect("commits")[0].commit_id.clone();
        let deleting = point.starts_with("tag_delete");
        if deleting {
            g.tag_create("t", None, None, None).await.expect("tag to delete");
        }
        shut_down(g).await;
        let action = if deleting { child::Action::TagDelete("t".into()) } else { child::Action::TagCreate("t".into()) };
        let l = loc.clone();
        tokio::task::spawn_blocking(move || child::crash_in_child(&l, &action, point)).await.expect("crash child");

        let g = Omnigraph::open(&loc).await.expect("reopen");
        let exists = matches!(point, "tag_create.after_record" | "tag_delete.before_record");
        let tags = g.tags().await.expect("tags");
        assert_eq!(tags.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), if exists { vec!["t"] } else { vec![] });
        assert!(list_pending(g.root()).await.expect("pending").is_empty(), "{point}: a sidecar was left");
        let residue: Vec<String> = g.root().list(omnigraph::engine::tags::TAGS_DIR).await.expect("list");
        assert_eq!(residue.len(), usize::from(exists), "{point}: {residue:?}");
        if exists {
            assert_eq!(tags[0].graph_commit_id, head, "{point}: the tag names another commit");
            assert_eq!(g.commit("t").await.expect("resolve").commit_id, head, "{point}");
            g.tag_delete("t").await.unwrap_or_else(|e| panic!("{point}: delete failed: {e}"));
        }
        // The name can be used again, and the tag reads its commit.
        g.tag_create("t", None, None, None).await.unwrap_or_else(|e| panic!("{point}: create failed: {e}"));
        let at_tag: Counts = g
            .snapshot("t")
            .await
            .expect("snapshot at the tag")
            .tables
            .into_iter()
            .map(|t| (t.table_key, (t.version, t.row_count)))
            .collect();
        assert_eq!(at_tag, pins(&g).await, "{point}: the tag reads another state than the head it named");
        assert_eq!(counts(&g).await, before, "{point}: main changed");
        assert_clean(&g, point).await;
    }
}

/// Cleanup failpoints with a crash test below.
const CLEANUP_CRASHES: [&str; 2] = ["cleanup.after_plan", "cleanup.between_tables"];

/// Every row of every commit in `ids`, by commit (time travel).
async fn rows_at(g: &Graph, ids: &[String]) -> BTreeMap<String, String> {
    const ALL: &str = "query q() { match { $p: Person } return { $p.name, $p.age } order { $p.name } }";
    let mut out = BTreeMap::new();
    for id in ids {
        let target = omnigraph::ReadTarget::Commit(id.clone());
        let r = g.query_json(ALL, None, Map::new(), &target).await.unwrap_or_else(|e| panic!("read {id}: {e}"));
        out.insert(id.clone(), r["rows"].to_string());
    }
    out
}

/// A graph for cleanup: main and a forked branch `b` with history on both.
/// Returns its place, the commits cleanup must retain (the newest two of
/// each branch and their merge base) with their rows, and both heads.
async fn cleanup_base() -> (tempfile::TempDir, String, CleanupKeeps) {
    let (dir, loc, ..) = setup_on(Op::Optimize, "b").await;
    let g = Omnigraph::open(&loc).await.expect("open");
    Op::MutationInsert.run_on(&g, "b").await.expect("fork Person on b");
    for src in SMALL_COMMITS {
        g.mutate(src, None, Map::new(), &WriteOptions::default()).await.expect("main commit");
    }
    let mut retained: Vec<String> = Vec::new();
    for b in ["main", "b"] {
        retained.extend(g.commits(b, Some(2)).await.expect("commits").into_iter().map(|c| c.commit_id));
    }
    retained.extend(g.merge_base("main", "b").await.expect("base"));
    let rows = rows_at(&g, &retained).await;
    let heads = (counts(&g).await, counts_on(&g, "b").await);
    shut_down(g).await;
    (dir, loc, CleanupKeeps { retained, rows, heads })
}

/// What an interrupted cleanup must keep.
struct CleanupKeeps {
    retained: Vec<String>,
    rows: BTreeMap<String, String>,
    heads: (Content, Content),
}

impl CleanupKeeps {
    /// Reopen the graph at `loc`: no sidecar (cleanup makes no commit), every
    /// pin its Lance HEAD, both heads and every retained commit as before, no
    /// audit row; the next cleanup finishes the job and converges. `partial`:
    /// the interrupted run may have removed nothing yet.
    async fn assert_kept(&self, loc: &str, partial: bool, context: &str) {
        let g = Omnigraph::open(loc).await.unwrap_or_else(|e| panic!("{context}: reopen failed: {e}"));
        assert!(list_pending(g.root()).await.expect("list").is_empty(), "{context}: a sidecar appeared");
        assert_clean_on(&g, "b", context).await;
        assert_eq!((counts(&g).await, counts_on(&g, "b").await), self.heads, "{context}: a head changed");
        assert_eq!(rows_at(&g, &self.retained).await, self.rows, "{context}: a retained commit changed");
        assert!(audit::read_all(g.root()).await.expect("audit").is_empty(), "{context}: cleanup is not a recovery");
        let done = g.cleanup(Some(2), None, true).await.unwrap_or_else(|e| panic!("{context}: cleanup again: {e}"));
        assert!(done.versions_removed > 0 || partial, "{context}: {done:?}");
        assert_eq!(rows_at(&g, &self.retained).await, self.rows, "{context}: after the second cleanup");
        assert_eq!(g.cleanup(Some(2), None, true).await.expect("third").versions_removed, 0, "{context}: converged");
        assert_clean_on(&g, "b", context).await;
        shut_down(g).await;
    }
}

/// Cleanup dies after planning and between two datasets: it has no sidecar
/// and makes no commit, so the reopened graph has none, every pin is its
/// Lance HEAD, both heads hold what they held, every retained commit (the
/// newest of each branch and their merge base) reads as before, no audit
/// row appears, and the next cleanup finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_inside_cleanup_loses_no_retained_commit() {
    let _s = serial().await;
    for point in CLEANUP_CRASHES {
        let (_dir, loc, keeps) = cleanup_base().await;
        let l = loc.clone();
        let action = child::Action::Cleanup(2);
        tokio::task::spawn_blocking(move || child::crash_in_child(&l, &action, point)).await.expect("crash child");
        keeps.assert_kept(&loc, point == "cleanup.between_tables", point).await;
    }
}

/// The branch-delete orphaning exception: a write on a branch crashes after
/// its first table commit (an unresolved sidecar that needs a roll-back);
/// deleting the branch in the same process discards it with exactly one
/// `OrphanedBranchDiscarded` audit row and reclaims its forks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_branch_discards_its_orphaned_write() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, _before, _after, _) = setup_on(Op::MutationInsert, "doomed").await;
    let g = Omnigraph::open(&loc).await.expect("open");
    let main_before = counts(&g).await;
    fail::cfg("mutation.after_table_commit", "panic").expect("cfg");
    let task = {
        let g = g.clone();
        tokio::spawn(async move { Op::MutationInsert.run_on(&g, "doomed").await })
    };
    assert!(task.await.is_err_and(|e| e.is_panic()));
    fail::remove("mutation.after_table_commit");
    let pending = list_pending(g.root()).await.expect("list");
    assert_eq!(pending.len(), 1, "the crashed write left its sidecar");

    let deleted = g.branch_delete("doomed").await.expect("delete proceeds past the orphan");
    assert_eq!(deleted.orphans_discarded.len(), 1);
    assert!(list_pending(g.root()).await.expect("list").is_empty());
    let audit = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(audit.len(), 1, "{audit:?}");
    assert_eq!(audit[0].recovery_kind, RecoveryKind::OrphanedBranchDiscarded);
    assert_eq!(audit[0].operation_id, deleted.orphans_discarded[0]);
    assert_eq!(counts(&g).await, main_before, "main never saw the write");
    assert_clean(&g, "after the orphan discard").await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    for t in view.state.tables.values() {
        let refs = table::list_branches(&g.root().child_uri(&t.location)).await.expect("refs");
        assert!(!refs.contains_key("doomed"), "{}: fork left behind", t.table_key);
    }
    // Recreating the name is a clean branch.
    g.branch_create("doomed", "main").await.expect("recreate");
    Op::MutationInsert.run_on(&g, "doomed").await.expect("write on the new incarnation");
    assert_clean_on(&g, "doomed", "new incarnation").await;
}

/// Writes on different branches run in parallel, not only both land: each
/// write stops inside its effect phase (after arming) until the other is
/// there too. Serialized writers would leave the first one waiting alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_on_two_branches_are_inside_their_effect_phases_at_once() {
    use std::sync::{Arc, Condvar, Mutex};
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, ..) = setup_on(Op::MutationInsert, "left").await;
    let g = Omnigraph::open(&loc).await.expect("open");
    g.branch_create("right", "main").await.expect("branch");
    let inside = Arc::new((Mutex::new((0usize, 0usize)), Condvar::new()));
    let probe = inside.clone();
    fail::cfg_callback("mutation.after_arm", move || {
        let (lock, cv) = &*probe;
        let mut state = lock.lock().expect("lock");
        state.0 += 1;
        state.1 = state.1.max(state.0);
        cv.notify_all();
        // Hold this write inside its effect phase until the other joins (or give up).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while state.1 < 2 && std::time::Instant::now() < deadline {
            state = cv.wait_timeout(state, Duration::from_millis(50)).expect("wait").0;
        }
        state.0 -= 1;
    })
    .expect("cfg");
    let writes: Vec<_> = ["left", "right"]
        .into_iter()
        .map(|b| {
            let g = g.clone();
            tokio::spawn(async move { Op::MutationInsert.run_on(&g, b).await })
        })
        .collect();
    for w in writes {
        w.await.expect("join").expect("both writes land");
    }
    fail::remove("mutation.after_arm");
    let peak = inside.0.lock().expect("lock").1;
    assert_eq!(peak, 2, "the two writes were never inside their effect phases at the same time");
    assert_clean_on(&g, "left", "parallel writes").await;
    assert_clean_on(&g, "right", "parallel writes").await;
}

/// Boundaries only a schema apply crosses: its staged schema files written
/// (before the confirmation) and promoted (after the publish).
const SCHEMA_BOUNDARIES: [&str; 2] = ["after_schema_staging", "after_promote"];

/// A schema apply dies at every boundary it crosses: recovery leaves it
/// invisible (old schema, no new table, no staging) or applied (new schema
/// current, every effect published under its commit), never half; from the
/// publish on it is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_failpoint_of_a_schema_apply_recovers_clean() {
    let _s = serial().await;
    schema_apply_crashes("main").await;
}

/// The same on a fresh branch: every table is forked after arming, then
/// the overwrite, the column edit, the re-key, the create and the tombstone
/// land there alone; main keeps its schema and rows at every point.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_failpoint_of_a_schema_apply_on_a_branch_recovers_clean() {
    let _s = serial().await;
    schema_apply_crashes("fresh").await;
}

/// Crash a schema apply on `branch` at every boundary it crosses there (a
/// fork on a branch, the schema files' promotion on main), and check the
/// outcome each must have.
async fn schema_apply_crashes(branch: &'static str) {
    let on_main = branch == "main";
    let names: Vec<String> = SAGA_BOUNDARIES
        .iter()
        .chain(&SCHEMA_BOUNDARIES)
        .chain(&FORK_BOUNDARIES)
        .filter(|b| Op::SchemaApply.crosses(b))
        .filter(|b| if on_main { **b != "after_fork" } else { **b != "after_promote" })
        .map(|b| format!("schema_apply.{b}"))
        .collect();
    let outcomes = crash_cases_on(Op::SchemaApply, &names, branch).await;
    let report: Vec<String> = names
        .iter()
        .zip(outcomes)
        .map(|(name, outcome)| format!("SchemaApply on {branch} @ {name}: {outcome}"))
        .collect();
    println!("schema apply crashes on {branch} ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert_eq!(report.len(), 9, "{report:?}");
    for (point, want) in [
        ("after_arm", "invisible"),
        ("after_schema_staging", "invisible"),
        ("after_fork", "invisible"),
        ("after_confirm", "applied"),
        ("after_publish", "applied"),
        ("after_promote", "applied"),
    ] {
        let found: Vec<&String> = report.iter().filter(|r| r.contains(&format!("schema_apply.{point}:"))).collect();
        let absent = if on_main { point == "after_fork" } else { point == "after_promote" };
        assert_eq!(found.is_empty(), absent, "{point}: {report:?}");
        assert!(found.iter().all(|r| r.ends_with(want)), "{point}: {report:?}");
    }
}

/// A merge across schema changes dies at every boundary it crosses (the
/// schema apply's, on main): recovery leaves main with its own schema and
/// rows, or with the merged schema and every merged row, never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_at_every_failpoint_of_a_merge_across_schemas_recovers_clean() {
    let _s = serial().await;
    let names: Vec<String> = SAGA_BOUNDARIES
        .iter()
        .chain(&SCHEMA_BOUNDARIES)
        .filter(|b| Op::SchemaMerge.crosses(b))
        .map(|b| format!("schema_apply.{b}"))
        .collect();
    let outcomes = crash_cases_on(Op::SchemaMerge, &names, "main").await;
    let report: Vec<String> =
        names.iter().zip(outcomes).map(|(name, outcome)| format!("SchemaMerge @ {name}: {outcome}")).collect();
    println!("merge across schemas crashes ({} cases, 0 violations):\n{}", report.len(), report.join("\n"));
    assert_eq!(report.len(), 9, "{report:?}");
    for (point, want) in [("after_arm", "invisible"), ("after_confirm", "applied"), ("after_promote", "applied")] {
        let found = report.iter().find(|r| r.contains(&format!("schema_apply.{point}:"))).expect(point);
        assert!(found.ends_with(want), "{point}: {report:?}");
    }
}

/// A schema apply that fails after its effects (an error, not a crash)
/// leaves its sidecar; the reconciler resolves it without a reopen: rolled
/// back when unconfirmed (old schema, created table gone), rolled forward
/// when confirmed (the schema actor then serves the new catalog).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_resolves_a_failed_schema_apply_without_reopening() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    for (point, applied) in [("schema_apply.after_table_commit", false), ("schema_apply.after_confirm", true)] {
        let (_dir, loc, before, after, _) = setup(Op::SchemaApply).await;
        let g = Omnigraph::open(&loc).await.expect("open");
        fail_once_after_effects(point, Op::SchemaApply.run(&g)).await;
        // Writes on every branch wait for the schema apply's recovery.
        let early = r#"query q() { insert Company { name: "Early" } }"#;
        let blocked = g.mutate(early, None, Map::new(), &WriteOptions::default()).await;
        match blocked {
            Err(OmniError::RecoveryRequired { .. }) | Ok(_) => {}
            Err(other) => panic!("{point}: a write during the pending apply failed with {other}"),
        }
        wait_for_no_sidecar(&g).await;
        let context = format!("reconciler after {point}");
        assert_clean(&g, &context).await;
        let now = counts(&g).await;
        let without_early = |mut c: Content| {
            for rows in c.values_mut() {
                rows.retain(|r| !r.contains("Early"));
            }
            c
        };
        assert_eq!(without_early(now), if applied { after.clone() } else { before.clone() }, "{context}");
        assert_schema_matches(&g, Op::SchemaApply, "main", applied, &context).await;
        let audit = audit::read_all(g.root()).await.expect("audit");
        assert_eq!(audit.len(), 1, "{context}: {audit:?}");
        g.mutate(r#"query q() { insert Company { name: "After" } }"#, None, Map::new(), &WriteOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{context}: next write failed: {e}"));
        shut_down(g).await;
    }
}

/// A read replica started on an S3 graph with a pending sidecar (a writer
/// killed after its table commit) reports the sidecar and does not resolve
/// it: it answers the last published state and sends no write; the writer's
/// next open resolves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_replica_reports_a_pending_sidecar_and_never_resolves_it() {
    let _g = serial().await;
    let Some(server) = s3::server() else { return };
    let loc = s3::location("replica-pending").expect("location");
    {
        let g = Omnigraph::init(&loc, SCHEMA).await.expect("init");
        g.load(BASE.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
        shut_down(g).await;
    }
    crash(&loc, Op::MutationInsert, "main", "mutation.after_table_commit").await;
    let root = omnigraph::engine::storage::Root::parse(&loc).expect("root");
    assert_eq!(list_pending(&root).await.expect("pending").len(), 1, "the killed write left its sidecar");

    const KEY: &str = "replica-pending";
    let env: Vec<(String, String)> = s3::env(server)
        .into_iter()
        .map(|(k, v)| if k == "AWS_ACCESS_KEY_ID" { (k, KEY.to_string()) } else { (k, v) })
        .collect();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_omnigraph"))
        .args(["serve", "--read-only", "--unauthenticated", "--bind", "127.0.0.1:0", "--graph", &format!("g={loc}")])
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn the replica");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().expect("stdout")), &mut line)
        .expect("listen line");
    let base = format!("http://{}", line.trim().trim_start_matches("OMNIGRAPH_LISTEN_ADDR="));
    let client = reqwest::Client::new();
    let get = |path: &str| {
        let req = client.get(format!("{base}{path}"));
        async move {
            serde_json::from_str::<serde_json::Value>(&req.send().await.expect("request").text().await.expect("body"))
                .expect("json")
        }
    };
    let status = get("/graphs/g/recovery").await;
    let pending = status["pending"].as_array().map(Vec::len);
    let q = serde_json::json!({"query": "query q() { match { $p: Person } return { $p.name } }"});
    let read = client
        .post(format!("{base}/graphs/g/query"))
        .header("content-type", "application/json")
        .body(q.to_string())
        .send()
        .await
        .expect("query");
    let read: serde_json::Value = serde_json::from_str(&read.text().await.expect("body")).expect("json");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(pending, Some(1), "the replica reports the sidecar: {status}");
    assert_eq!(read["row_count"], 3, "the replica answers the last published state: {read}");
    assert!(status["audit"].as_array().is_some_and(Vec::is_empty), "the replica resolved nothing: {status}");
    assert_eq!(list_pending(&root).await.expect("pending").len(), 1, "the sidecar is still there");
    let writes: Vec<String> = s3::requests(server)
        .into_iter()
        .filter(|r| r.ends_with(&format!(" {KEY}")) && !r.starts_with("GET ") && !r.starts_with("HEAD "))
        .collect();
    assert!(writes.is_empty(), "the replica wrote: {writes:?}");

    let g = Omnigraph::open(&loc).await.expect("the writer's open recovers");
    assert_clean(&g, "after the writer's recovery").await;
    assert_eq!(audit::read_all(g.root()).await.expect("audit").len(), 1);
}
