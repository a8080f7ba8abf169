//! Init, open, stamp policy, snapshot, schema files.

use std::collections::HashMap;
use std::sync::Arc;

use omnigraph::engine::manifest::{self, MANIFEST_DIR, STAMP_KEY, rows};
use omnigraph::engine::schema_store::{SCHEMA_IR, SCHEMA_PG, SCHEMA_STATE};
use omnigraph::engine::storage::{Root, table};
use omnigraph::{OmniError, Omnigraph, OpenMode};

use crate::common::{SOCIAL_PG, files_with_suffix, shared_fixtures, social_graph, temp_graph_dir};

#[tokio::test]
async fn init_creates_one_empty_table_per_type_and_a_genesis_commit() {
    let (_dir, g) = social_graph().await;
    let snap = g.snapshot("main").await.expect("snapshot");
    let keys: Vec<&str> = snap.tables.iter().map(|t| t.table_key.as_str()).collect();
    assert_eq!(keys, ["edge:Knows", "edge:WorksAt", "node:Company", "node:Person"]);
    assert!(snap.tables.iter().all(|t| t.version == 1 && t.row_count == 0 && t.table_branch.is_none()));
    assert_eq!(snap.storage_stamp, 4);
    assert_eq!(snap.manifest_version, 1);
    let commits = g.commits("main", None).await.expect("commits");
    assert_eq!(commits.len(), 1);
    assert_eq!(Some(commits[0].commit_id.clone()), snap.head_commit_id);
    assert_eq!(commits[0].parent_commit_id, None);
    assert_eq!(commits[0].actor.as_deref(), Some("omnigraph:init"));
    for f in [SCHEMA_PG, SCHEMA_IR, SCHEMA_STATE] {
        assert!(g.root().exists(f).await.expect("exists"), "{f} missing");
    }
    let schema = g.schema().await.expect("schema");
    assert_eq!(schema.source, SOCIAL_PG);
}

#[tokio::test]
async fn datasets_have_a_primary_key_on_id_and_stable_row_ids() {
    let (_dir, g) = social_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    for entry in view.state.tables.values() {
        let ds = table::open_table(&g.root().child_uri(&entry.location), None, Some(1)).await.expect("open");
        let pk: Vec<String> = ds.schema().unenforced_primary_key().iter().map(|f| f.name.clone()).collect();
        assert_eq!(pk, ["id"], "{}", entry.table_key);
        assert!(ds.manifest().uses_stable_row_ids(), "{}", entry.table_key);
        let id = ds.schema().field("id").expect("id field");
        assert!(!id.nullable, "{}: id must be non-null", entry.table_key);
    }
}

#[tokio::test]
async fn init_refuses_a_root_that_already_holds_a_graph() {
    let (_dir, g) = social_graph().await;
    let err = Omnigraph::init(g.root().uri(), SOCIAL_PG).await.err().expect("second init must fail");
    assert!(matches!(err, OmniError::AlreadyExists(_)), "{err}");
    // The existing graph is untouched.
    assert_eq!(g.commits("main", None).await.expect("commits").len(), 1);
}

#[tokio::test]
async fn init_with_a_bad_schema_creates_nothing() {
    let (_dir, loc) = temp_graph_dir();
    let err = Omnigraph::init(&loc, "node person { }").await.err().expect("bad schema");
    assert!(matches!(err, OmniError::Compile { .. }), "{err}");
    assert!(!std::path::Path::new(&loc).join(MANIFEST_DIR).exists());
}

#[tokio::test]
async fn open_round_trips_and_aliases_share_one_actor_tree() {
    let (dir, g) = social_graph().await;
    let alias = dir.path().join(".").join("graph");
    let g2 = Omnigraph::open(&alias.to_string_lossy()).await.expect("open alias");
    assert!(Arc::ptr_eq(g.runtime(), g2.runtime()), "aliases of one root must share the actor tree");
    let ro = Omnigraph::open_with(g.root().uri(), OpenMode::ReadOnly).await.expect("open ro");
    assert_eq!(ro.snapshot("main").await.expect("snap").tables.len(), 4);
}

#[tokio::test]
async fn open_of_a_missing_graph_is_a_clear_not_found() {
    let (_dir, loc) = temp_graph_dir();
    let err = Omnigraph::open(&loc).await.err().expect("no graph");
    assert!(matches!(err, OmniError::NotFound(_)), "{err}");
    assert!(err.to_string().contains("no graph at"), "{err}");
}

/// Write a `__manifest` whose stamp is `stamp` (a graph from another binary).
async fn graph_with_stamp(stamp: &str) -> (tempfile::TempDir, String) {
    let (dir, loc) = temp_graph_dir();
    let root = Root::parse(&loc).expect("root");
    let batch = rows::to_batch(&[]).expect("batch");
    let mut schema = (*batch.schema()).clone();
    schema.metadata = HashMap::from([(STAMP_KEY.to_string(), stamp.to_string())]);
    let batch = arrow_array::RecordBatch::try_new(Arc::new(schema), batch.columns().to_vec()).expect("schema");
    table::create_table(&root.child_uri(MANIFEST_DIR), batch).await.expect("manifest");
    (dir, loc)
}

#[tokio::test]
async fn open_refuses_an_older_stamp_with_the_rebuild_message() {
    let (_dir, loc) = graph_with_stamp("3").await;
    for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
        let err = Omnigraph::open_with(&loc, mode).await.err().expect("refused");
        assert!(matches!(err, OmniError::UnsupportedStorage(_)), "{err}");
        assert!(err.to_string().contains("rebuild via export/import"), "{err}");
    }
}

#[tokio::test]
async fn open_refuses_a_newer_stamp_with_the_upgrade_message() {
    let (_dir, loc) = graph_with_stamp("5").await;
    for mode in [OpenMode::ReadWrite, OpenMode::ReadOnly] {
        let err = Omnigraph::open_with(&loc, mode).await.err().expect("refused");
        assert!(matches!(err, OmniError::UnsupportedStorage(_)), "{err}");
        assert!(err.to_string().contains("upgrade omnigraph"), "{err}");
    }
}

#[tokio::test]
async fn every_fixture_schema_inits_and_reopens_with_one_empty_table_per_type() {
    let Some(fixtures) = shared_fixtures() else { return };
    let schemas = files_with_suffix(&fixtures, ".pg");
    assert!(!schemas.is_empty(), "no .pg files under {}", fixtures.display());
    for path in schemas {
        let source = std::fs::read_to_string(&path).expect("read schema");
        let (_dir, loc) = temp_graph_dir();
        let g = Omnigraph::init(&loc, &source).await.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let catalog = g.schema().await.expect("schema").catalog.clone();
        drop(g);
        let g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("reopen {}: {e}", path.display()));
        let snap = g.snapshot("main").await.expect("snapshot");
        assert_eq!(snap.tables.len(), catalog.nodes.len() + catalog.edges.len(), "{}", path.display());
        assert!(snap.tables.iter().all(|t| t.row_count == 0 && t.version == 1), "{}", path.display());
    }
}
