//! Read-replica freshness: how long a branch actor may answer reads from
//! the manifest view it read last, without looking at storage again.
//!
//! By default (a writer) it may not: every view checks the manifest's latest
//! version, so a process reads its own writes and everyone else's at once. A
//! read replica (`serve --read-only`) sets an interval: on object storage each
//! check is a listing and a read, and a replica converges within the interval
//! instead. [`refresh`] makes every branch actor check on its next read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The interval in milliseconds; 0 = check on every read.
static INTERVAL_MS: AtomicU64 = AtomicU64::new(0);
/// Bumped by [`refresh`]; a view read under an older epoch is stale.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// Let branch actors of this process reuse a view for up to `interval`.
pub fn set_refresh_interval(interval: Duration) {
    INTERVAL_MS.store(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX), Ordering::SeqCst);
}

/// Make every branch actor of this process re-check storage on its next read.
pub fn refresh() {
    EPOCH.fetch_add(1, Ordering::SeqCst);
}

/// When (and under which epoch) a view was last checked against storage.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checked {
    at: Instant,
    epoch: u64,
}

impl Checked {
    /// A check starting now.
    pub(crate) fn now() -> Checked {
        Checked { at: Instant::now(), epoch: EPOCH.load(Ordering::SeqCst) }
    }

    /// Whether a view checked then may still be answered from.
    pub(crate) fn is_fresh(&self) -> bool {
        let interval = INTERVAL_MS.load(Ordering::SeqCst);
        interval > 0
            && self.epoch == EPOCH.load(Ordering::SeqCst)
            && self.at.elapsed() < Duration::from_millis(interval)
    }
}
