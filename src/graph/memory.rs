//! What this process keeps in memory across requests, and its budget.

use serde::Serialize;

use crate::engine::storage::caches::{self, CacheReport, SessionsReport};
use crate::engine::{committed, query};

/// Every cache of the process with its size and capacity
/// (`GET /healthz?verbose=true` shows it as `memory`).
#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    /// The budget the caches divide (`serve --memory-budget`).
    pub budget_bytes: u64,
    /// Sum of every cache's bytes below.
    pub cached_bytes: u64,
    /// The Lance sessions: the shared read session and the private ones.
    pub sessions: SessionsReport,
    /// Edge-table adjacencies kept for traversals.
    pub adjacency: CacheReport,
    /// Dataset handles pinned at a version for reads.
    pub pinned_handles: HandlesReport,
}

/// The allocator's own counters, in bytes: what the heap holds live against
/// what the process keeps resident for it. A resident size that grows while
/// `allocated` stays level is the allocator keeping freed pages, not state
/// the daemon holds. The binary fills it (its allocator is its choice); an
/// embedder's daemon reports none.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct AllocatorReport {
    /// Bytes the program has allocated and not freed.
    pub allocated: u64,
    /// Bytes in pages that hold at least one live allocation.
    pub active: u64,
    /// Bytes of physical memory the allocator holds (its part of the RSS).
    pub resident: u64,
    /// Bytes the allocator's own bookkeeping takes.
    pub metadata: u64,
    /// Bytes of virtual memory released to the system but kept mapped.
    pub retained: u64,
}

/// How a daemon reads its allocator's counters (`None`: no such counters).
pub type AllocatorStats = fn() -> Option<AllocatorReport>;

/// A cache bounded by a count of entries.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct HandlesReport {
    /// Entries held.
    pub entries: u64,
    /// At most this many.
    pub capacity: u64,
}

/// Set the process's memory budget in bytes; before the first graph opens.
pub fn set_memory_budget(bytes: u64) {
    caches::set_budget(bytes);
}

/// The process's caches now.
pub async fn memory_report() -> MemoryReport {
    let capacities = caches::capacities();
    let sessions = caches::report().await;
    let (adjacency_bytes, adjacency_entries) = query::adjacency_cached();
    let adjacency =
        CacheReport { bytes: adjacency_bytes, entries: adjacency_entries, capacity_bytes: capacities.adjacency_bytes };
    let pinned_handles =
        HandlesReport { entries: committed::pinned_handles_open(), capacity: capacities.pinned_handles };
    let cached_bytes = [
        sessions.read_index,
        sessions.read_index_listings,
        sessions.read_metadata,
        sessions.private_index,
        sessions.private_metadata,
        adjacency,
    ]
    .iter()
    .map(|c| c.bytes)
    .sum();
    MemoryReport { budget_bytes: capacities.budget_bytes, cached_bytes, sessions, adjacency, pinned_handles }
}
