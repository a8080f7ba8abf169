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
