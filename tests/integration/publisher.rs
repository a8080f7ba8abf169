//! The manifest publisher: row-level CAS, exact-head preconditions, linear chains.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray};
use omnigraph::engine::manifest::{self, BranchId, Lineage, Precondition, PublishRequest, TableUpdate, publisher};
use omnigraph::engine::storage::{MergeMode, Root, TxnIdentity, table};
use omnigraph::{CommitInfo, Graph, OmniError, Omnigraph};

use crate::common::social_graph;

/// One commit through the actor path: take the branch lease, capture the head
/// under it, publish with the exact-head precondition.
async fn publish_through_actors(g: &Graph, actor: &str) -> Result<String, OmniError> {
    let rt = g.runtime();
    let lease = rt.lease_branch("main").await?;
    let view = rt.view("main").await?;
    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![],
        expected_versions: BTreeMap::new(),
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: view.state.head("main").map(str::to_string),
        },
        lineage: Lineage::mint(Some(actor.to_string())),
    };
    Ok(rt.publish(req, &lease).await?.commit.commit_id)
}

/// The branch's history must be one chain: each commit's parent is the next
/// older commit, ending at genesis.
fn assert_linear(commits: &[CommitInfo]) {
    for pair in commits.windows(2) {
        assert_eq!(pair[0].parent_commit_id.as_deref(), Some(pair[1].commit_id.as_str()), "fork in {commits:#?}");
    }
    assert_eq!(commits.last().and_then(|c| c.parent_commit_id.clone()), None);
    let ids: HashSet<_> = commits.iter().map(|c| &c.commit_id).collect();
    assert_eq!(ids.len(), commits.len(), "duplicate commits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_publishers_through_one_handle_form_one_chain() {
    let (_dir, g) = social_graph().await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let g = g.clone();
            tokio::spawn(async move { publish_through_actors(&g, &format!("writer-{i}")).await })
        })
        .collect();
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.expect("join").expect("publish"));
    }
    let commits = g.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 9);
    assert_linear(&commits);
    let present: HashSet<_> = commits.iter().map(|c| c.commit_id.clone()).collect();
    assert!(acked.iter().all(|id| present.contains(id)), "an acknowledged commit is missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_concurrent_publishers_through_two_handles_form_one_chain() {
    let (_dir, g1) = social_graph().await;
    let g2 = Omnigraph::open(g1.root().uri()).await.expect("second handle");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let g = if i % 2 == 0 { g1.clone() } else { g2.clone() };
            tokio::spawn(async move { publish_through_actors(&g, &format!("writer-{i}")).await })
        })
        .collect();
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.expect("join").expect("publish"));
    }
    let commits = g2.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 9);
    assert_linear(&commits);
    let present: HashSet<_> = commits.iter().map(|c| c.commit_id.clone()).collect();
    assert!(acked.iter().all(|id| present.contains(id)));
}

/// Without actors (as two processes would), the Lance row-level CAS alone
/// keeps the chain linear: every acknowledged commit is present, every
/// refused one is absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raw_concurrent_publishes_without_actors_never_fork_or_lose_a_commit() {
    let (_dir, g) = social_graph().await;
    let loc = g.root().uri().to_string();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let loc = loc.clone();
            tokio::spawn(async move {
                let root = Root::parse(&loc).expect("root");
                let lineage = Lineage::mint(Some(format!("raw-{i}")));
                let id = lineage.commit_id.clone();
                let req = PublishRequest {
                    branch: "main".into(),
                    updates: vec![],
                    expected_versions: BTreeMap::new(),
                    precondition: Precondition::Any,
                    lineage,
                };
                (id, publisher::publish(&root, &req).await)
            })
        })
        .collect();
    let mut acked = HashSet::new();
    let mut refused = HashSet::new();
    for t in tasks {
        let (id, out) = t.await.expect("join");
        match out {
            Ok(p) => {
                assert_eq!(p.commit.commit_id, id);
                acked.insert(id);
            }
            Err(OmniError::ManifestConflict(_)) => {
                refused.insert(id);
            }
            Err(e) => panic!("unexpected publish error: {e}"),
        }
    }
    assert!(!acked.is_empty());
    let commits = g.commits("main", None).await.expect("commits");
    assert_linear(&commits);
    let present: HashSet<_> = commits.iter().map(|c| c.commit_id.clone()).collect();
    assert!(acked.is_subset(&present), "an acknowledged commit was lost");
    assert!(refused.is_disjoint(&present), "a refused commit became visible");
    assert_eq!(commits.len(), acked.len() + 1);
}

#[tokio::test]
async fn a_publish_whose_captured_head_moved_is_refused_and_changes_nothing() {
    let (_dir, g) = social_graph().await;
    let stale = manifest::load(g.root(), "main", None).await.expect("view");
    publish_through_actors(&g, "winner").await.expect("first publish");
    let before = manifest::load(g.root(), "main", None).await.expect("view");
    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![],
        expected_versions: BTreeMap::new(),
        precondition: Precondition::ExactHead {
            branch_id: stale.branch_id.clone(),
            head: stale.state.head("main").map(str::to_string),
        },
        lineage: Lineage::mint(Some("loser".into())),
    };
    let err = publisher::publish(g.root(), &req).await.expect_err("must refuse");
    match &err {
        OmniError::ReadSetChanged { member, expected, actual } => {
            assert_eq!(member, "graph_head:main");
            assert_eq!(Some(expected.as_str()), stale.state.head("main"));
            assert_eq!(Some(actual.as_str()), before.state.head("main"));
        }
        other => panic!("expected ReadSetChanged, got {other}"),
    }
    let after = manifest::load(g.root(), "main", None).await.expect("view");
    assert_eq!(after.version, before.version, "a refused publish must not write");
    assert!(!after.state.commits().expect("complete").contains_key(&req.lineage.commit_id));
}

#[tokio::test]
async fn a_different_branch_incarnation_is_refused() {
    let (_dir, g) = social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![],
        expected_versions: BTreeMap::new(),
        precondition: Precondition::ExactHead {
            branch_id: BranchId(vec![(1, "someone-else".into())]),
            head: view.state.head("main").map(str::to_string),
        },
        lineage: Lineage::mint(None),
    };
    let err = publisher::publish(g.root(), &req).await.expect_err("refused");
    assert!(matches!(&err, OmniError::ReadSetChanged { member, .. } if member == "branch_identifier:main"), "{err}");
}

#[tokio::test]
async fn an_expected_table_version_mismatch_is_refused() {
    let (_dir, g) = social_graph().await;
    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![],
        expected_versions: BTreeMap::from([("node:Person".to_string(), 7)]),
        precondition: Precondition::Any,
        lineage: Lineage::mint(None),
    };
    let err = publisher::publish(g.root(), &req).await.expect_err("refused");
    assert!(
        matches!(&err, OmniError::ReadSetChanged { member, expected, actual }
            if member == "node:Person" && expected == "v7" && actual == "v1"),
        "{err}"
    );
}

#[tokio::test]
async fn republishing_a_visible_commit_is_idempotent() {
    let (_dir, g) = social_graph().await;
    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![],
        expected_versions: BTreeMap::new(),
        precondition: Precondition::Any,
        lineage: Lineage::mint(Some("once".into())),
    };
    let first = publisher::publish(g.root(), &req).await.expect("publish");
    assert!(!first.already_visible);
    let again = publisher::publish(g.root(), &req).await.expect("republish");
    assert!(again.already_visible);
    assert_eq!(again.manifest_version, first.manifest_version);
    assert_eq!(g.commits("main", None).await.expect("commits").len(), 2);
}

fn person_batch(schema: arrow_schema::SchemaRef, names: &[&str]) -> RecordBatch {
    let cols = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "id" | "name" => Arc::new(StringArray::from(names.to_vec())) as arrow_array::ArrayRef,
            _ => arrow_array::new_null_array(f.data_type(), names.len()),
        })
        .collect();
    RecordBatch::try_new(schema, cols).expect("batch")
}

/// A staged, exactly committed table write published with its expected pin:
/// the snapshot shows the new version and row count; the post-state the
/// publisher returns equals a fresh read.
#[tokio::test]
async fn a_committed_table_write_becomes_visible_only_through_the_publish() {
    let (_dir, g) = social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let person = view.state.tables["node:Person"].clone();
    let uri = g.root().child_uri(&person.location);
    let ds = table::open_table(&uri, None, Some(person.version)).await.expect("open");
    let batch = person_batch(table::arrow_schema(&ds), &["Alice", "Bob"]);
    let identity = TxnIdentity::mint(person.version);
    let staged = table::stage_merge_insert(ds, vec![batch], MergeMode::Upsert, &identity.uuid).await.expect("stage");
    assert_eq!(staged.identity(), identity);
    assert_eq!(table::head_version(&uri, None).await.expect("head"), 1, "staging must not commit");

    let rt = g.runtime();
    let _schema = rt.lease_schema(omnigraph::actors::LeaseMode::Shared).await.expect("schema lease");
    let branch = rt.lease_branch("main").await.expect("branch lease");
    let tlease = rt.lease_table(&uri, "main").await.expect("table lease");
    let committed = rt.commit("main", staged, &tlease).await.expect("commit");
    assert_eq!(committed.version, 2);
    assert_eq!(committed.identity, identity);
    assert_eq!(committed.row_count, 2);
    assert_eq!(
        g.snapshot("main").await.expect("snap").tables.iter().find(|t| t.table_key == "node:Person").map(|t| t.version),
        Some(1)
    );

    let req = PublishRequest {
        branch: "main".into(),
        updates: vec![TableUpdate::committed("node:Person", Some("main"), &committed)],
        expected_versions: BTreeMap::from([("node:Person".to_string(), 1)]),
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: view.state.head("main").map(str::to_string),
        },
        lineage: Lineage::mint(Some("alice".into())),
    };
    let published = rt.publish(req, &branch).await.expect("publish");
    let fresh = manifest::load(g.root(), "main", None).await.expect("view");
    assert_eq!(published.state.tables, fresh.state.tables, "publisher post-state must equal a fresh read");
    let snap = g.snapshot("main").await.expect("snap");
    let p = snap.tables.iter().find(|t| t.table_key == "node:Person").expect("person");
    assert_eq!((p.version, p.row_count), (2, 2));
    // The identity is recorded in Lance's transaction history at the landed version.
    let ds = table::open_table(&uri, None, None).await.expect("open");
    assert_eq!(table::transaction_at(&ds, 2).await.expect("txn"), Some(identity));
}

#[tokio::test]
async fn an_exact_commit_against_a_moved_head_is_refused_without_effect() {
    let (_dir, g) = social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let uri = g.root().child_uri(&view.state.tables["node:Person"].location);
    let ds = table::open_table(&uri, None, Some(1)).await.expect("open");
    let schema = table::arrow_schema(&ds);
    let a =
        table::stage_merge_insert(ds.clone(), vec![person_batch(schema.clone(), &["A"])], MergeMode::Upsert, "omni-a")
            .await
            .expect("stage a");
    let b = table::stage_merge_insert(ds, vec![person_batch(schema, &["B"])], MergeMode::Upsert, "omni-b")
        .await
        .expect("stage b");
    table::commit_exact(a).await.expect("first commit");
    // Lance would rebase b onto v2; the exact guard refuses instead.
    let err = table::commit_exact(b).await.expect_err("refused");
    assert!(matches!(err, OmniError::ReadSetChanged { .. }), "{err}");
    assert_eq!(table::head_version(&uri, None).await.expect("head"), 2);
}

#[tokio::test]
async fn strict_insert_of_an_existing_id_fails_at_staging() {
    let (_dir, g) = social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let uri = g.root().child_uri(&view.state.tables["node:Person"].location);
    let ds = table::open_table(&uri, None, Some(1)).await.expect("open");
    let schema = table::arrow_schema(&ds);
    let staged =
        table::stage_merge_insert(ds, vec![person_batch(schema.clone(), &["A"])], MergeMode::StrictInsert, "omni-1")
            .await
            .expect("stage");
    let committed = table::commit_exact(staged).await.expect("commit");
    let again = table::stage_merge_insert(
        committed.dataset,
        vec![person_batch(schema, &["A"])],
        MergeMode::StrictInsert,
        "omni-2",
    )
    .await;
    assert!(again.is_err(), "a strict insert of an existing id must fail before any effect");
    assert_eq!(table::head_version(&uri, None).await.expect("head"), 2);
}

#[tokio::test]
async fn a_staged_create_lands_as_version_one_with_its_identity_and_only_once() {
    let dir = crate::scratch::tempdir();
    let uri = dir.path().join("t").to_string_lossy().to_string();
    let schema = arrow_schema::Schema::new(vec![
        arrow_schema::Field::new("id", arrow_schema::DataType::Utf8, false)
            .with_metadata([("lance-schema:unenforced-primary-key".to_string(), "true".to_string())].into()),
    ]);
    let staged = table::stage_create(&uri, &schema, "omni-create").expect("stage");
    assert_eq!(staged.identity(), TxnIdentity { read_version: 0, uuid: "omni-create".into() });
    let committed = table::commit_exact(staged).await.expect("create");
    assert_eq!((committed.version, committed.row_count), (1, 0));
    assert!(committed.dataset.manifest().uses_stable_row_ids());
    let again = table::stage_create(&uri, &schema, "omni-again").expect("stage");
    let err = table::commit_exact(again).await.expect_err("a second create must fail");
    assert!(matches!(err, OmniError::AlreadyExists(_)), "{err}");
    assert_eq!(table::head_version(&uri, None).await.expect("head"), 1);
}

/// The head state an open restores from `branch`'s latest checkpoint, next
/// to the full fold of its rows; `None` when the open had to fold.
async fn restored_beside_full(g: &Graph, branch: &str) -> (Option<manifest::ManifestView>, manifest::ManifestView) {
    // Behind the actor's after-publish compaction: the version is settled.
    g.runtime().view(branch).await.expect("view");
    let head = manifest::load_cached(g.root(), branch, &mut None, false).await.expect("head view");
    let full = manifest::load(g.root(), branch, None).await.expect("full view");
    assert_eq!(head.version, full.version);
    assert_eq!(head.state.tables, full.state.tables, "{branch} v{}", full.version);
    assert_eq!(head.state.heads, full.state.heads);
    assert_eq!(head.state.latest_versions, full.state.latest_versions);
    assert_eq!(head.state.registrations, full.state.registrations);
    assert_eq!(
        head.state.effective_head(branch).map(|c| &c.commit_id),
        full.state.effective_head(branch).map(|c| &c.commit_id)
    );
    assert_eq!(head.state.checkpoint(), full.state.checkpoint());
    ((!head.state.is_complete()).then_some(head), full)
}

#[tokio::test]
async fn an_open_restores_the_head_state_from_the_checkpoint_not_the_history() {
    let (_dir, g) = crate::common::loaded_social_graph().await;
    let insert = |i: usize| format!(r#"query q() {{ insert Person {{ name: "cp{i}", age: 1 }} }}"#);
    let opts = omnigraph::WriteOptions::default();
    let mut rewrites = 0;
    for i in 0..20 {
        g.mutate(&insert(i), None, serde_json::Map::new(), &opts).await.expect("mutate");
        let (restored, full) = restored_beside_full(&g, "main").await;
        assert!(restored.is_some(), "commit {i}: the open folded the history instead of restoring");
        let op = table::operation_at(&full.dataset, full.version).await.expect("operation");
        rewrites += usize::from(op.as_deref() == Some("Rewrite"));
    }
    assert!(rewrites > 0, "the manifest was never compacted: the look-back past a Rewrite went untested");
    // History questions load the history: every commit is listed.
    assert_eq!(g.commits("main", None).await.expect("commits").len(), 22);
    g.branch_create("feat", "main").await.expect("branch");
    restored_beside_full(&g, "feat").await;
    let on_feat = omnigraph::WriteOptions { branch: "feat".into(), ..opts.clone() };
    g.mutate(&insert(100), None, serde_json::Map::new(), &on_feat).await.expect("mutate feat");
    assert!(restored_beside_full(&g, "feat").await.0.is_some(), "a branch's own publish records a checkpoint");
    assert_eq!(
        g.merge_base("main", "feat").await.expect("base"),
        g.snapshot("main").await.expect("snap").head_commit_id
    );
}
