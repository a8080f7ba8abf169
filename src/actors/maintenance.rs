//! Counters of the maintenance the actors do without being asked: branch
//! actors compact their `__manifest` tail and rebase their cached state,
//! table actors commit the compactions writes chain onto their tables.
//! Shared by one tree's actors and its runtime (`/healthz?verbose=true`).

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// The live counters (one per actor tree, kept across restarts).
#[derive(Debug, Default)]
pub struct Maintenance {
    manifest_compactions: AtomicU64,
    manifest_compaction_failures: AtomicU64,
    state_rebases: AtomicU64,
    table_compactions: AtomicU64,
    last_at_ms: AtomicU64,
}

/// What [`Maintenance`] has counted so far.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct MaintenanceStats {
    /// `__manifest` tail compactions after a publish.
    pub manifest_compactions: u64,
    /// Of those attempted, the ones that failed (retried after a later publish).
    pub manifest_compaction_failures: u64,
    /// Cached manifest states rebased on their checkpoint (kept flat).
    pub state_rebases: u64,
    /// Table compactions committed (a write's small-fragment step, or `optimize`).
    pub table_compactions: u64,
    /// When any of them last happened (ms since the Unix epoch; 0 = never).
    pub last_at_ms: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Maintenance {
    fn bump(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
        self.last_at_ms.store(now_ms(), Ordering::Relaxed);
    }

    /// A branch actor compacted its `__manifest` tail (`ok`) or failed to.
    pub fn manifest_compacted(&self, ok: bool) {
        self.bump(if ok { &self.manifest_compactions } else { &self.manifest_compaction_failures });
    }

    /// A branch actor rebased its cached state.
    pub fn state_rebased(&self) {
        self.bump(&self.state_rebases);
    }

    /// A table actor committed a compaction.
    pub fn table_compacted(&self) {
        self.bump(&self.table_compactions);
    }

    /// The counts now.
    pub fn stats(&self) -> MaintenanceStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MaintenanceStats {
            manifest_compactions: get(&self.manifest_compactions),
            manifest_compaction_failures: get(&self.manifest_compaction_failures),
            state_rebases: get(&self.state_rebases),
            table_compactions: get(&self.table_compactions),
            last_at_ms: get(&self.last_at_ms),
        }
    }
}
