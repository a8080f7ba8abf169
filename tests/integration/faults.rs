//! Storage faults on the recovery sidecar path, through an `object_store`
//! wrapper: PUT failure aborts before effects, DELETE failure is swallowed
//! and healed later, LIST failure fails loudly.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use object_store::path::Path;
use omnigraph::engine::storage::Root;
use omnigraph::recovery::audit::{self, RecoveryKind};
use omnigraph::recovery::list_pending;
use omnigraph::{Graph, LoadMode, OmniError, Omnigraph, OpenMode, WriteOptions};
use serde_json::Map;

use crate::common::{SOCIAL_PG, temp_graph_dir};
use crate::intercept::{Intercept, Policy, injected};

/// Fails sidecar PUT / DELETE / LIST on demand; everything else passes through.
#[derive(Debug, Default)]
struct Faults {
    put: AtomicBool,
    delete: AtomicBool,
    list: AtomicBool,
}

fn sidecar(p: &Path) -> bool {
    p.as_ref().contains("__recovery")
}

impl Policy for Faults {
    fn write(&self, path: &Path) -> object_store::Result<()> {
        if sidecar(path) && self.put.load(Ordering::SeqCst) { Err(injected("PUT")) } else { Ok(()) }
    }

    fn delete(&self, path: &Path) -> object_store::Result<()> {
        if sidecar(path) && self.delete.load(Ordering::SeqCst) { Err(injected("DELETE")) } else { Ok(()) }
    }

    fn list(&self, prefix: Option<&Path>) -> object_store::Result<()> {
        if prefix.is_some_and(sidecar) && self.list.load(Ordering::SeqCst) { Err(injected("LIST")) } else { Ok(()) }
    }
}

/// A graph with the example data, reopened through a faulty store.
async fn faulty_graph() -> (tempfile::TempDir, Graph, Arc<Faults>) {
    let (dir, loc) = temp_graph_dir();
    {
        let g = Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
        let data = include_str!("../../examples/social.jsonl");
        g.load(data.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await.expect("load");
    }
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let root = Root::parse(&loc).expect("root");
    let faults = Arc::new(Faults::default());
    let store = Intercept { inner: root.store().clone(), policy: faults.clone() };
    let g = Omnigraph::open_root(root.with_store(Arc::new(store)), OpenMode::ReadWrite).await.expect("open");
    (dir, g, faults)
}

const INSERT: &str = r#"query q() { insert Company { name: "Faulty" } }"#;

async fn companies(g: &Graph) -> u64 {
    g.snapshot("main")
        .await
        .expect("snap")
        .tables
        .iter()
        .find(|t| t.table_key == "node:Company")
        .map_or(0, |t| t.row_count)
}

#[tokio::test]
async fn a_failed_sidecar_put_aborts_before_any_effect() {
    let (_dir, g, faults) = faulty_graph().await;
    let before = g.snapshot("main").await.expect("snap");
    faults.put.store(true, Ordering::SeqCst);
    let err = g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect_err("PUT fails");
    faults.put.store(false, Ordering::SeqCst);
    assert!(matches!(err, OmniError::Storage { .. }), "{err}");
    let after = g.snapshot("main").await.expect("snap");
    assert_eq!(before.tables, after.tables, "no effect");
    assert!(list_pending(g.root()).await.expect("list").is_empty());
    g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect("a later write succeeds");
    assert_eq!(companies(&g).await, 2);
}

#[tokio::test]
async fn a_failed_sidecar_delete_is_swallowed_and_healed_as_rolled_forward() {
    let (_dir, g, faults) = faulty_graph().await;
    faults.delete.store(true, Ordering::SeqCst);
    let out = g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect("the write is acknowledged");
    faults.delete.store(false, Ordering::SeqCst);
    assert!(out.commit_id.is_some());
    assert_eq!(list_pending(g.root()).await.expect("list").len(), 1, "the undeletable sidecar stays");
    assert_eq!(companies(&g).await, 2, "the acknowledged write is visible");
    // The next write's entry heal settles it.
    g.mutate(r#"query q() { insert Company { name: "Next" } }"#, None, Map::new(), &WriteOptions::default())
        .await
        .expect("next write");
    assert!(list_pending(g.root()).await.expect("list").is_empty());
    let rows = audit::read_all(g.root()).await.expect("audit");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].recovery_kind, RecoveryKind::RolledForward);
    assert_eq!(rows[0].graph_commit_id, out.commit_id);
    assert_eq!(companies(&g).await, 3);
}

#[tokio::test]
async fn a_failed_recovery_listing_fails_writes_loudly() {
    let (_dir, g, faults) = faulty_graph().await;
    faults.list.store(true, Ordering::SeqCst);
    let err = g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect_err("LIST fails");
    assert!(err.to_string().contains("injected LIST failure"), "{err}");
    let err = g.recover().await.expect_err("a recovery pass fails loudly too");
    assert!(err.to_string().contains("injected LIST failure"), "{err}");
    faults.list.store(false, Ordering::SeqCst);
    assert_eq!(companies(&g).await, 1, "nothing was written");
}

/// Drift that no write recorded: repair classifies it from Lance history and
/// publishes suspicious drift only with force + confirm.
#[tokio::test]
async fn repair_classifies_and_publishes_uncovered_drift_only_when_forced() {
    use omnigraph::engine::manifest;
    use omnigraph::engine::storage::{MergeMode, table};
    let (_dir, g, _faults) = faulty_graph().await;
    let view = manifest::load(g.root(), "main", None).await.expect("view");
    let company = view.state.tables["node:Company"].clone();
    let uri = g.root().child_uri(&company.location);
    let ds = table::open_table(&uri, None, Some(company.version)).await.expect("open");
    let schema = table::arrow_schema(&ds);
    let cols: Vec<arrow_array::ArrayRef> = schema
        .fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "id" | "name" => Arc::new(arrow_array::StringArray::from(vec!["Rogue"])) as arrow_array::ArrayRef,
            _ => arrow_array::new_null_array(f.data_type(), 1),
        })
        .collect();
    let batch = arrow_array::RecordBatch::try_new(schema, cols).expect("batch");
    let staged = table::stage_merge_insert(ds, vec![batch], MergeMode::Upsert, "omni-rogue").await.expect("stage");
    table::commit_exact(staged).await.expect("a commit outside any write");

    let err = g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect_err("drift blocks writes");
    assert!(err.to_string().contains("omnigraph repair"), "{err}");
    let dry = g.repair(false, false).await.expect("dry run");
    assert_eq!(dry.drift.len(), 1);
    assert!(!dry.drift[0].maintenance, "an Update is not maintenance");
    assert_eq!(dry.published_commit_id, None);
    let unforced = g.repair(true, false).await.expect("confirm without force");
    assert_eq!(unforced.published_commit_id, None, "suspicious drift needs --force");
    let forced = g.repair(true, true).await.expect("forced");
    assert!(forced.published_commit_id.is_some());
    assert_eq!(companies(&g).await, 2);
    g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect("writable after repair");
}

/// A sidecar this binary cannot read (not JSON, or another schema version)
/// is refused loudly by a read-write open and kept on disk; a read-only open
/// still works and `recovery_status` lists it as unreadable.
#[tokio::test]
async fn an_unreadable_sidecar_is_refused_loudly_and_kept() {
    for (body, needle) in [
        ("{not json".to_string(), "not valid JSON"),
        (r#"{"schema_version": 99, "operation_id": "x"}"#.to_string(), "schema version Some(99)"),
    ] {
        let (_dir, loc) = temp_graph_dir();
        Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
        let root = Root::parse(&loc).expect("root");
        let name = format!("__recovery/{}.json", ulid::Ulid::new());
        root.put(&name, body.into_bytes()).await.expect("plant");
        let err = Omnigraph::open(&loc).await.err().expect("a read-write open must refuse");
        assert!(err.to_string().contains(needle) && err.to_string().contains("kept"), "{err}");
        assert_eq!(list_pending(&root).await.expect("list"), vec![name.clone()], "the sidecar stays on disk");
        let g = Omnigraph::open_with(&loc, OpenMode::ReadOnly).await.expect("read-only open");
        let status = g.recovery_status().await.expect("status");
        assert_eq!(status.pending.len(), 1);
        assert!(status.pending[0].error.as_deref().is_some_and(|e| e.contains(needle)), "{:?}", status.pending[0]);
    }
}

/// A sidecar PUT cut short by a kill leaves the local store's staging file
/// (`<op>.json#<n>`, often empty), which listings hide and no delete can
/// address: a read-write open removes it; a read-only open leaves it; real
/// sidecars and other files are untouched.
#[tokio::test]
async fn a_read_write_open_removes_sidecar_staging_residue() {
    let (_dir, loc) = temp_graph_dir();
    Omnigraph::init(&loc, SOCIAL_PG).await.expect("init");
    let dir = std::path::Path::new(&loc).join("__recovery");
    std::fs::create_dir_all(&dir).expect("recovery dir");
    let residue = dir.join(format!("{}.json#1", ulid::Ulid::new()));
    std::fs::write(&residue, b"").expect("plant an empty residue");
    let partial = dir.join(format!("{}.json#42", ulid::Ulid::new()));
    std::fs::write(&partial, b"{\"schema_ver").expect("plant a torn residue");
    let keep = dir.join("README#notes");
    std::fs::write(&keep, b"an operator's note").expect("plant a non-residue");

    let g = Omnigraph::open_with(&loc, OpenMode::ReadOnly).await.expect("read-only open");
    assert!(residue.exists() && partial.exists(), "a read-only open never writes");
    drop(g);
    let g = Omnigraph::open(&loc).await.expect("a read-write open succeeds past residue");
    assert!(!residue.exists() && !partial.exists(), "the residue is gone after a read-write open");
    assert!(keep.exists(), "a name without a numeric suffix is not residue");
    assert!(list_pending(g.root()).await.expect("list").is_empty());
    g.mutate(INSERT, None, Map::new(), &WriteOptions::default()).await.expect("writable");
}
