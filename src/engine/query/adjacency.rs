//! The adjacency of an edge table at a pinned version, built once and shared.
//!
//! Variable-length traversals walk an in-memory [`Adjacency`] (CSR and CSC)
//! instead of joining the edge table with itself once per hop. Building one
//! costs a projected scan of `src`/`dst`; a pinned version never changes, so
//! the structure is cached by (dataset, native branch, version, table id) and
//! every later query on the same snapshot of that table reuses it. The table
//! id keeps a dropped and re-created table apart even at the same path. The
//! cache holds at most the memory budget's adjacency share; the least
//! recently used entry goes first.

use std::sync::{Arc, Mutex, OnceLock};

use arrow_array::cast::AsArray;
use futures::TryStreamExt;

use crate::engine::committed::open_pinned_for_read;
use crate::engine::manifest::TableEntry;
use crate::engine::storage::Root;
use crate::engine::walk::Adjacency;
use crate::protocol::{OmniError, Result};

type Key = (String, Option<String>, u64, String);

/// Cached adjacencies, most recently used last.
type Entries = Mutex<Vec<(Key, Arc<Adjacency>)>>;

static CACHE: OnceLock<Entries> = OnceLock::new();

fn cache() -> &'static Entries {
    CACHE.get_or_init(Default::default)
}

/// The adjacency of the edge table `entry` pins, from the cache or built now.
pub(super) async fn adjacency(root: &Root, entry: &TableEntry) -> Result<Arc<Adjacency>> {
    let key: Key = (root.child_uri(&entry.location), entry.branch.clone(), entry.version, entry.table_id.clone());
    if let Some(hit) = lookup(&key) {
        return Ok(hit);
    }
    let built = Arc::new(build(root, entry).await?);
    insert(key, built.clone());
    Ok(built)
}

fn lookup(key: &Key) -> Option<Arc<Adjacency>> {
    let mut entries = cache().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let at = entries.iter().position(|(k, _)| k == key)?;
    let hit = entries.remove(at);
    let adj = hit.1.clone();
    entries.push(hit);
    Some(adj)
}

fn insert(key: Key, adj: Arc<Adjacency>) {
    let mut entries = cache().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    entries.retain(|(k, _)| k != &key);
    entries.push((key, adj));
    let capacity = crate::engine::storage::caches::capacities().adjacency_bytes as usize;
    let mut total: usize = entries.iter().map(|(_, a)| a.heap_bytes()).sum();
    while total > capacity && entries.len() > 1 {
        total -= entries.remove(0).1.heap_bytes();
    }
}

/// The adjacencies cached now: (bytes, entries).
pub fn cached() -> (u64, u64) {
    let entries = cache().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    (entries.iter().map(|(_, a)| a.heap_bytes() as u64).sum(), entries.len() as u64)
}

async fn build(root: &Root, entry: &TableEntry) -> Result<Adjacency> {
    let ds = open_pinned_for_read(root, entry).await?;
    let scan_err = |e: lance::Error| OmniError::Internal(format!("scanning the edges of {}: {e}", entry.table_key));
    let mut scan = ds.scan();
    scan.project(&["src", "dst"]).map_err(scan_err)?;
    let batches: Vec<_> = scan.try_into_stream().await.map_err(scan_err)?.try_collect().await.map_err(scan_err)?;
    let column = |b: &arrow_array::RecordBatch, name: &str| {
        b.column_by_name(name)
            .and_then(|c| c.as_string_opt::<i32>().cloned())
            .ok_or_else(|| OmniError::Internal(format!("{} has no string column `{name}`", entry.table_key)))
    };
    let mut cols = Vec::with_capacity(batches.len());
    for b in &batches {
        cols.push((column(b, "src")?, column(b, "dst")?));
    }
    // The CSR is a CPU-bound pass over every edge: off the async workers.
    tokio::task::spawn_blocking(move || {
        Adjacency::build(cols.iter().flat_map(|(s, d)| s.iter().zip(d.iter())).filter_map(|(s, d)| s.zip(d)))
    })
    .await
    .map_err(|e| OmniError::Internal(format!("building an adjacency: {e}")))
}
