//! Counters of the maintenance the actors do without being asked: branch
//! actors compact their `__manifest` tail and rebase their cached state,
//! table actors commit the compactions writes chain onto their tables, and
//! a daemon's index folder ([`super::index_folder`]) folds unindexed rows
//! into the indexes.
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
    index_lag_rows: AtomicU64,
    index_fold_checks: AtomicU64,
    index_folds: AtomicU64,
    index_fold_failures: AtomicU64,
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
    /// The unindexed rows per table past which the index folder folds a
    /// branch's tails in the background (`serve --index-lag-rows`); 0 = off.
    pub index_lag_rows: u64,
    /// Branches the index folder measured after writes.
    pub index_fold_checks: u64,
    /// Background folds it committed.
    pub index_folds: u64,
    /// Background folds that failed (retried after the lag's worth of writes).
    pub index_fold_failures: u64,
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

    /// The index folder started with this lag bound.
    pub fn index_folder_started(&self, lag_rows: u64) {
        self.index_lag_rows.store(lag_rows, Ordering::Relaxed);
    }

    /// The index folder measured a branch's tails.
    pub fn index_fold_checked(&self) {
        self.index_fold_checks.fetch_add(1, Ordering::Relaxed);
    }

    /// The index folder committed a fold (`ok`) or failed to.
    pub fn index_folded(&self, ok: bool) {
        self.bump(if ok { &self.index_folds } else { &self.index_fold_failures });
    }

    /// The counts now.
    pub fn stats(&self) -> MaintenanceStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MaintenanceStats {
            manifest_compactions: get(&self.manifest_compactions),
            manifest_compaction_failures: get(&self.manifest_compaction_failures),
            state_rebases: get(&self.state_rebases),
            table_compactions: get(&self.table_compactions),
            index_lag_rows: get(&self.index_lag_rows),
            index_fold_checks: get(&self.index_fold_checks),
            index_folds: get(&self.index_folds),
            index_fold_failures: get(&self.index_fold_failures),
            last_at_ms: get(&self.last_at_ms),
        }
    }
}
