//! Crash shapes recovery must tell apart beyond a plain crash: a foreign
//! effect where ours was planned, our effect buried under a foreign one,
//! two sidecars claiming one fork, and a clone-only fork tree.

use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray};
use omnigraph::actors::saga::recovery::resolve::Resolution;
use omnigraph::engine::manifest;
use omnigraph::engine::storage::{MergeMode, StagePlan, TxnIdentity, table};
use omnigraph::recovery::sidecar::{SidecarStore, sidecar_name};
use omnigraph::recovery::{audit, list_pending};
use omnigraph::{Graph, OmniError, Omnigraph, OpenMode, WriteOptions};
use serde_json::Map;

use super::{Op, assert_clean_on, crash, serial, setup_on};

/// URI of the Company table (what `Op::LoadOverwrite` writes, one table).
async fn company(loc: &str) -> String {
    let root = omnigraph::engine::storage::Root::parse(loc).expect("root");
    let view = manifest::load(&root, "main", None).await.expect("view");
    root.child_uri(&view.state.tables["node:Company"].location)
}

/// Commit a one-row upsert to the Company table's main ref behind the
/// graph's back (a foreign writer).
async fn foreign_commit(uri: &str) -> u64 {
    foreign_commit_on(uri, None).await
}

/// [`foreign_commit`] on a table ref (`None` = main).
async fn foreign_commit_on(uri: &str, table_branch: Option<&str>) -> u64 {
    let ds = table::open_table(uri, table_branch, None).await.expect("open");
    let schema = table::arrow_schema(&ds);
    let cols: Vec<Arc<dyn arrow_array::Array>> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "id" | "name" => Arc::new(StringArray::from(vec!["Foreign"])) as Arc<dyn arrow_array::Array>,
            _ => arrow_array::new_null_array(f.data_type(), 1),
        })
        .collect();
    let batch = RecordBatch::try_new(schema, cols).expect("batch");
    let identity = TxnIdentity::mint(ds.version().version);
    let plan = StagePlan::Merge { batches: vec![batch], mode: MergeMode::Upsert };
    let staged = table::stage(ds, plan, &identity.uuid).await.expect("stage").expect("staged");
    table::commit_exact(staged).await.expect("commit").version
}

/// The sidecar on `branch` fails closed: a read-write open succeeds and
/// keeps it (reporting why), writes on `branch` are refused with
/// RecoveryRequired, and operators see the diagnosis.
async fn expect_fail_closed(loc: &str, branch: &str, what: &str) {
    let g = Omnigraph::open(loc).await.expect("a kept sidecar does not stop a read-write open");
    let resolutions = g.recover().await.expect("a pass reports a kept sidecar, it does not fail");
    match resolutions.as_slice() {
        [(_, Resolution::Kept { branch: b, reason, .. })] => {
            assert_eq!(b, branch);
            assert!(reason.contains(what), "{reason}");
        }
        other => panic!("expected one kept sidecar ({what}), got {other:?}"),
    }
    let opts = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
    match g.mutate(r#"query q() { insert Company { name: "Blocked" } }"#, None, Map::new(), &opts).await {
        Err(OmniError::RecoveryRequired { .. }) => {}
        other => panic!("a write on `{branch}` must be refused while its sidecar is kept: {other:?}"),
    }
    super::shut_down(g).await;
    let g = Omnigraph::open_with(loc, OpenMode::ReadOnly).await.expect("read-only open still works");
    assert_eq!(list_pending(g.root()).await.expect("list").len(), 1, "the sidecar is kept for an operator");
    let status = g.recovery_status().await.expect("status");
    let diagnosis = status.pending[0].diagnosis.clone().unwrap_or_default();
    assert!(diagnosis.starts_with("FailClosed") && diagnosis.contains(what), "operators see why: {diagnosis}");
    assert!(audit::read_all(g.root()).await.expect("audit").is_empty(), "nothing was resolved");
}

/// A crash at `failpoint`, then a foreign commit on the table: recovery must
/// classify it as `class`, fail closed and leave the foreign version on top.
async fn foreign_after(failpoint: &str, class: &str) {
    let (_dir, loc, ..) = setup_on(Op::LoadOverwrite, "main").await;
    crash(&loc, Op::LoadOverwrite, "main", failpoint).await;
    let uri = company(&loc).await;
    let foreign = foreign_commit(&uri).await;
    expect_fail_closed(&loc, "main", class).await;
    assert_eq!(table::head_version(&uri, None).await.expect("head"), foreign, "nothing restored through the winner");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_effects_fail_closed_untouched() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    // Where ours was planned (nothing of ours landed), and on top of ours.
    foreign_after("load.after_arm", "UnexpectedAtP1").await;
    foreign_after("load.after_table_commit", "UnexpectedMultistep").await;
}

/// A sidecar that fails closed on branch `x` is relevant only to writers on
/// `x`: main (and another branch) stay writable in the same process and
/// after a reopen, while `x` stays refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sidecar_kept_on_one_branch_leaves_other_branches_writable() {
    let _s = serial().await;
    let (_dir, loc, ..) = setup_on(Op::LoadOverwrite, "x").await;
    {
        let g = Omnigraph::open(&loc).await.expect("open");
        g.branch_create("y", "main").await.expect("branch y");
        super::shut_down(g).await;
    }
    crash(&loc, Op::LoadOverwrite, "x", "load.after_fork").await;
    let uri = company(&loc).await;
    foreign_commit_on(&uri, Some("x")).await;
    expect_fail_closed(&loc, "x", "UnexpectedAtP1").await;
    let g = Omnigraph::open(&loc).await.expect("open");
    for branch in ["main", "y"] {
        let opts = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
        g.mutate(r#"query q() { insert Company { name: "Free" } }"#, None, Map::new(), &opts)
            .await
            .unwrap_or_else(|e| panic!("a write on {branch} is blocked by x's sidecar: {e}"));
        // Every invariant but "no sidecar": x's is kept on purpose.
        let v = omnigraph::recovery::invariants::violations(g.root(), branch).await.expect("check");
        let other: Vec<&String> = v.iter().filter(|m| !m.starts_with("sidecar ")).collect();
        assert!(other.is_empty(), "{branch} beside a kept sidecar: {other:?}");
    }
    assert_eq!(list_pending(g.root()).await.expect("list").len(), 1, "x's sidecar is still kept");
}

/// Two pending sidecars claim the same untouched fork: the first discards
/// only itself, the survivor removes the fork; both leave one audit row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn competing_claims_on_one_fork_leave_it_to_the_last_survivor() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, ..) = setup_on(Op::LoadOverwrite, "b").await;
    crash(&loc, Op::LoadOverwrite, "b", "load.after_fork").await;
    let root = omnigraph::engine::storage::Root::parse(&loc).expect("root");
    let store = SidecarStore::new(root.clone());
    let names = list_pending(&root).await.expect("list");
    assert_eq!(names.len(), 1);
    let mut twin = store.read(&names[0]).await.expect("read").expect("body");
    twin.operation_id = ulid::Ulid::new().to_string();
    let bytes = serde_json::to_vec(&twin).expect("encode");
    root.put(&sidecar_name(&twin.operation_id), bytes).await.expect("second claim");
    let uri = company(&loc).await;
    assert!(table::list_branches(&uri).await.expect("refs").contains_key("b"), "the untouched fork exists");

    let g: Graph = Omnigraph::open(&loc).await.expect("recovery resolves both");
    assert_clean_on(&g, "b", "competing claims").await;
    assert!(!table::list_branches(&uri).await.expect("refs").contains_key("b"), "the survivor removed the fork");
    assert_eq!(audit::read_all(g.root()).await.expect("audit").len(), 2, "one row per sidecar");
    Op::LoadOverwrite.run_on(&g, "b").await.expect("the first touch works again");
}

/// A crash between Lance's clone and its ref write leaves a clone-only tree
/// under an Armed sidecar: recovery reclaims it and discards the sidecar.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_only_fork_tree_under_a_sidecar_is_reclaimed() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, before, ..) = setup_on(Op::LoadOverwrite, "b").await;
    crash(&loc, Op::LoadOverwrite, "b", "load.after_arm").await;
    let uri = company(&loc).await;
    let pin = table::head_version(&uri, None).await.expect("head");
    table::create_branch(&uri, None, pin, "b").await.expect("clone");
    std::fs::remove_file(std::path::Path::new(&uri).join("_refs/branches/b.json")).expect("tear");
    assert!(std::path::Path::new(&uri).join("tree/b").exists());

    let g = Omnigraph::open(&loc).await.expect("recovery");
    assert_clean_on(&g, "b", "clone-only tree").await;
    assert!(!std::path::Path::new(&uri).join("tree/b").exists(), "the clone-only tree was reclaimed");
    assert_eq!(super::counts_on(&g, "b").await, before, "the write stays invisible");
    Op::LoadOverwrite.run_on(&g, "b").await.expect("the first touch works again");
}

/// A first write on a branch of a branch forks one table from the parent
/// branch's fork and another from main; a crash after the first commit rolls
/// both back and the graph is writable again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_first_write_on_a_nested_branch_recovers_clean() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (_dir, loc, ..) = setup_on(Op::LoadOverwrite, "a").await;
    {
        let g = Omnigraph::open(&loc).await.expect("open");
        // Fork node:Person on `a` (the mutation also touches edge:Knows).
        Op::MutationUpdate.run_on(&g, "a").await.expect("write on a");
        g.branch_create("ab", "a").await.expect("nested branch");
        super::shut_down(g).await;
    }
    let before = super::counts_on(&Omnigraph::open(&loc).await.expect("open"), "ab").await;
    crash(&loc, Op::MutationInsert, "ab", "mutation.after_table_commit").await;
    let g = Omnigraph::open(&loc).await.expect("recovery");
    for b in ["main", "a", "ab"] {
        assert_clean_on(&g, b, "nested first touch").await;
    }
    assert_eq!(super::counts_on(&g, "ab").await, before, "the crashed write is invisible");
    Op::MutationInsert.run_on(&g, "ab").await.expect("the first touch works again");
    assert_clean_on(&g, "ab", "after the retry").await;
}
