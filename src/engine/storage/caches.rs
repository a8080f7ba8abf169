//! The process's Lance sessions and their capacities under one memory budget.
//!
//! Two kinds of session exist. Reads share one session (its index and
//! metadata caches keep BTree pages and manifests across queries). Every
//! other open (a writer's staging, an actor's dataset kept across commits,
//! recovery) gets a private session, so no manifest a writer verifies comes
//! from another handle's cache. Lance's defaults give each session
//! gigabytes; an actor that keeps one dataset open across thousands of
//! commits would fill its private metadata cache with every version's
//! manifest. So every session here is created with capacities from
//! [`CacheCapacities`], and the private ones are tracked (weakly) so their
//! bytes can be reported.
//!
//! Every metadata cache is an [`IdleCache`]: what it holds is mostly per
//! version or per data file, dead once superseded, and dropping what no one
//! read for a minute keeps it at what the live versions need instead of
//! filling toward its bound.
//!
//! The private sessions share one index cache. What it holds is keyed by
//! content that never changes (a segment's pages by the segment's uuid, a
//! table's index listing by version and manifest e-tag), so sharing it
//! cannot show a writer a stale fact; and a keyed write's lookup then finds
//! the BTree segments the writes before it opened, instead of reading every
//! segment's lookup and page from storage again: that cost grew with the
//! segments a table had gathered, and a write's latency with the daemon's
//! age.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use lance::Dataset;
use lance::dataset::builder::DatasetBuilder;
use lance::session::{CacheSpec, Session};
use serde::Serialize;

use super::idle_cache::{IDLE, IdleCache};
use super::index_cache::IndexCache;
use crate::engine::memory_budget::{CacheCapacities, DEFAULT_BUDGET};

/// The budget in bytes; set once at process start, before the first open.
static BUDGET: AtomicU64 = AtomicU64::new(DEFAULT_BUDGET);

/// Set the process's memory budget. Caches already created keep their
/// capacities: call this before the first graph is opened.
pub fn set_budget(bytes: u64) {
    BUDGET.store(bytes, Ordering::SeqCst);
}

/// The capacities every cache of this process gets.
pub fn capacities() -> CacheCapacities {
    CacheCapacities::split(BUDGET.load(Ordering::SeqCst))
}

/// The index cache in `cell`, made on first use with `bytes` in all, of
/// which `listings` for index listings (pages and listings apart).
fn index_cache(cell: &'static OnceLock<Arc<IndexCache>>, bytes: u64, listings: u64) -> Arc<IndexCache> {
    cell.get_or_init(|| Arc::new(IndexCache::new(bytes.saturating_sub(listings), listings))).clone()
}

/// The read session's index cache.
fn read_index_cache() -> Arc<IndexCache> {
    static CACHE: OnceLock<Arc<IndexCache>> = OnceLock::new();
    let c = capacities();
    index_cache(&CACHE, c.read_index_bytes, c.read_index_listings_bytes)
}

/// The index cache every private session shares (see the module doc).
fn private_index_cache() -> Arc<IndexCache> {
    static CACHE: OnceLock<Arc<IndexCache>> = OnceLock::new();
    let c = capacities();
    index_cache(&CACHE, c.private_index_bytes, c.private_index_listings_bytes)
}

/// The session every read-path open shares.
pub fn read_session() -> Arc<Session> {
    static SESSION: OnceLock<Arc<Session>> = OnceLock::new();
    SESSION
        .get_or_init(|| {
            let c = capacities();
            // Lance's own registry: a query only reads, so it keeps Lance's
            // direct local reads (the synced store is for writes, see
            // `super::durability`).
            let registry = Arc::new(lance::io::ObjectStoreRegistry::default());
            Arc::new(session(read_index_cache(), c.read_metadata_bytes, registry))
        })
        .clone()
}

/// Private sessions alive in this process (weak: a session lives as long as
/// the datasets opened through it).
fn private_sessions() -> &'static Mutex<Vec<Weak<Session>>> {
    static SESSIONS: OnceLock<Mutex<Vec<Weak<Session>>>> = OnceLock::new();
    SESSIONS.get_or_init(Default::default)
}

/// A new private session: its own metadata cache of the budget's private
/// capacity, the private sessions' shared index cache, and the process's
/// object-store registry (local writes synced, see [`super::durability`]).
pub fn private_session() -> Arc<Session> {
    let c = capacities();
    let registry = super::durability::registry();
    Arc::new(session(private_index_cache(), c.private_metadata_bytes, registry))
}

/// A session with `index` as its index cache and a metadata cache of
/// `metadata_bytes` whose idle entries expire.
fn session(index: Arc<IndexCache>, metadata_bytes: u64, registry: Arc<lance::io::ObjectStoreRegistry>) -> Session {
    let metadata = Arc::new(IdleCache::new(metadata_bytes, IDLE));
    Session::with_cache_backends(CacheSpec::Backend(index), CacheSpec::Backend(metadata), registry)
}

/// `builder` with a new private session.
pub fn private(builder: DatasetBuilder) -> DatasetBuilder {
    builder.with_session(private_session())
}

/// Remember the private session of a dataset just opened, for the report.
pub fn track(ds: &Dataset) {
    let session = ds.session();
    let mut all = private_sessions().lock().unwrap_or_else(|p| p.into_inner());
    // Dead entries go at every open past a few dozen: the walk is nothing
    // beside the open itself, and the list stays at the live sessions.
    if all.len() >= 64 {
        all.retain(|w| w.strong_count() > 0);
    }
    if !all.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(&session))) {
        all.push(Arc::downgrade(&session));
    }
}

/// One cache's size now.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CacheReport {
    /// Bytes its entries weigh.
    pub bytes: u64,
    /// Entries it holds.
    pub entries: u64,
    /// Its capacity in bytes.
    pub capacity_bytes: u64,
}

/// The Lance sessions of this process.
#[derive(Debug, Clone, Serialize)]
pub struct SessionsReport {
    /// The shared read session's index cache: index pages.
    pub read_index: CacheReport,
    /// The shared read session's index cache: tables' index listings (one
    /// per table and version read; bounded apart from the pages).
    pub read_index_listings: CacheReport,
    /// The shared read session's metadata cache.
    pub read_metadata: CacheReport,
    /// Private sessions alive (each is one open dataset and its successors).
    pub private_sessions: u64,
    /// The index cache they share (index pages and listings).
    pub private_index: CacheReport,
    /// Their metadata caches together.
    pub private_metadata: CacheReport,
}

fn cache_report(stats: lance_core::cache::CacheStats, capacity: u64) -> CacheReport {
    CacheReport { bytes: stats.size_bytes as u64, entries: stats.num_entries as u64, capacity_bytes: capacity }
}

/// The sessions' sizes now.
pub async fn report() -> SessionsReport {
    let c = capacities();
    let read = read_session();
    let live: Vec<Arc<Session>> = {
        let mut all = private_sessions().lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.iter().filter_map(Weak::upgrade).collect()
    };
    let n = live.len() as u64;
    let mut metadata = CacheReport { capacity_bytes: c.private_metadata_bytes * n, ..Default::default() };
    for s in &live {
        let m = s.metadata_cache_stats().await;
        (metadata.bytes, metadata.entries) =
            (metadata.bytes + m.size_bytes as u64, metadata.entries + m.num_entries as u64);
    }
    let private = private_index_cache();
    let ((page_bytes, pages), (listing_bytes, listings)) = (private.pages().await, private.listings().await);
    let index = CacheReport {
        bytes: page_bytes + listing_bytes,
        entries: pages + listings,
        capacity_bytes: c.private_index_bytes,
    };
    let read_index = read_index_cache();
    let ((page_bytes, pages), (listing_bytes, listings)) = (read_index.pages().await, read_index.listings().await);
    let listings_capacity = c.read_index_listings_bytes;
    SessionsReport {
        read_index: CacheReport {
            bytes: page_bytes,
            entries: pages,
            capacity_bytes: c.read_index_bytes.saturating_sub(listings_capacity),
        },
        read_index_listings: CacheReport { bytes: listing_bytes, entries: listings, capacity_bytes: listings_capacity },
        read_metadata: cache_report(read.metadata_cache_stats().await, c.read_metadata_bytes),
        private_sessions: n,
        private_index: index,
        private_metadata: metadata,
    }
}
