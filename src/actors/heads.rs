//! Signals that a branch's head moved, for long polls of the change feed.
//!
//! A waiting poll holds one receiver and no task: it wakes when a publish
//! through this process's runtime moves the head it follows, then reads the
//! head again. Only branches someone waited on have a signal.

use dashmap::DashMap;
use tokio::sync::watch;

/// One watch per branch a poll waited on; its value counts publishes.
#[derive(Default)]
pub struct HeadSignals(DashMap<String, watch::Sender<u64>>);

impl HeadSignals {
    /// A receiver that changes at `branch`'s next publish.
    pub fn subscribe(&self, branch: &str) -> watch::Receiver<u64> {
        self.0.entry(branch.to_string()).or_insert_with(|| watch::channel(0).0).subscribe()
    }

    /// How many receivers wait on `branch` now.
    pub fn waiting(&self, branch: &str) -> usize {
        self.0.get(branch).map_or(0, |tx| tx.receiver_count())
    }

    /// `branch`'s head moved.
    pub fn moved(&self, branch: &str) {
        if let Some(tx) = self.0.get(branch) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// `branch` was deleted: wake its waiters (they find it gone) and drop
    /// its signal.
    pub fn forget(&self, branch: &str) {
        if let Some((_, tx)) = self.0.remove(branch) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_publish_wakes_the_waiters_of_its_branch_only() {
        let s = HeadSignals::default();
        let mut main = s.subscribe("main");
        let side = s.subscribe("side");
        assert_eq!((s.waiting("main"), s.waiting("nobody")), (1, 0));
        s.moved("main");
        s.moved("nobody-waits");
        assert!(main.has_changed().expect("open"));
        assert!(!side.has_changed().expect("open"));
        main.changed().await.expect("changed");
        s.forget("side");
        assert!(side.has_changed().unwrap_or(true));
    }
}
