//! The mutations waiting on a busy branch for its next group commit.
//!
//! A mutation that finds its branch's gate held or awaited joins the
//! branch's queue, then waits for either its answer or the gate. Whoever
//! gets the gate and finds its own write unanswered leads: it takes the
//! queue (up to [`MAX_GROUP_MEMBERS`], in arrival order) and commits those
//! writes as one group ([`crate::actors::saga::group`]). One queue per
//! branch per process, shared by every handle on the root through the
//! runtime.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;
use tokio::sync::oneshot;

use crate::engine::lang::query::ir::MutationIr;
use crate::engine::mutation::MutationArgs;
use crate::engine::write_plan::WriteOutcome;
use crate::protocol::Result;

/// Most writes one group commit takes: its leader prepares them one after
/// the other, so a larger group delays its first member's answer more.
pub const MAX_GROUP_MEMBERS: usize = 64;

/// A mutation waiting for a group commit.
pub struct QueuedWrite {
    /// Its place in the process's arrival order (to leave the queue by).
    pub id: u64,
    /// The mutation (insert/update-only).
    pub ir: Arc<MutationIr>,
    /// Its parameters and `now()`.
    pub args: MutationArgs,
    /// Actor recorded on its commit.
    pub actor: Option<String>,
    /// Its caller's precondition on the head just before it.
    pub if_commit: Option<String>,
    /// Groups that gave it back before any effect (authority changed).
    pub attempts: usize,
    /// Where its outcome goes.
    pub reply: oneshot::Sender<Result<WriteOutcome>>,
}

impl QueuedWrite {
    /// A new queued write and the receiver of its outcome.
    pub fn new(
        ir: Arc<MutationIr>,
        args: MutationArgs,
        actor: Option<String>,
        if_commit: Option<String>,
    ) -> (Self, oneshot::Receiver<Result<WriteOutcome>>) {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (reply, rx) = oneshot::channel();
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        (QueuedWrite { id, ir, args, actor, if_commit, attempts: 0, reply }, rx)
    }

    /// Send the outcome (a caller that gave up is not waiting for it).
    pub fn answer(self, out: Result<WriteOutcome>) {
        drop(self.reply.send(out));
    }
}

/// Every branch's queue.
#[derive(Default)]
pub struct WriteQueues {
    queues: DashMap<String, VecDeque<QueuedWrite>>,
}

impl WriteQueues {
    /// Queue `w` on `branch`; returns its id.
    pub fn push(&self, branch: &str, w: QueuedWrite) -> u64 {
        let id = w.id;
        self.queues.entry(branch.to_string()).or_default().push_back(w);
        id
    }

    /// Take up to `max` writes of `branch`, oldest first.
    pub fn take(&self, branch: &str, max: usize) -> Vec<QueuedWrite> {
        let Some(mut q) = self.queues.get_mut(branch) else { return vec![] };
        let n = q.len().min(max);
        q.drain(..n).collect()
    }

    /// Give `writes` back to the front of `branch`'s queue, in their order
    /// (a group deferred them: they stay ahead of later arrivals).
    pub fn put_back(&self, branch: &str, writes: Vec<QueuedWrite>) {
        if writes.is_empty() {
            return;
        }
        let mut q = self.queues.entry(branch.to_string()).or_default();
        for w in writes.into_iter().rev() {
            q.push_front(w);
        }
    }

    /// Take the write `id` out of `branch`'s queue, if no group took it yet.
    pub fn remove(&self, branch: &str, id: u64) -> bool {
        let Some(mut q) = self.queues.get_mut(branch) else { return false };
        let before = q.len();
        q.retain(|w| w.id != id);
        q.len() != before
    }

    /// Writes waiting on `branch`.
    pub fn len(&self, branch: &str) -> usize {
        self.queues.get(branch).map_or(0, |q| q.len())
    }

    /// Writes waiting on every branch.
    pub fn total(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    /// Whether no write waits on `branch`.
    pub fn is_empty(&self, branch: &str) -> bool {
        self.len(branch) == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{QueuedWrite, WriteQueues};
    use crate::engine::lang::query::ir::MutationIr;
    use crate::engine::mutation::MutationArgs;

    fn write() -> QueuedWrite {
        let ir = Arc::new(MutationIr { statements: vec![] });
        QueuedWrite::new(ir, MutationArgs { params: Default::default(), now_ms: 0 }, None, None).0
    }

    #[test]
    fn a_queue_keeps_arrival_order_through_take_and_put_back() {
        let q = WriteQueues::default();
        let ids: Vec<u64> = (0..5).map(|_| q.push("main", write())).collect();
        q.push("other", write());
        let taken = q.take("main", 3);
        assert_eq!(taken.iter().map(|w| w.id).collect::<Vec<_>>(), ids[..3]);
        // Deferred members go back ahead of the ones that stayed.
        let back: Vec<QueuedWrite> = taken.into_iter().skip(1).collect();
        q.put_back("main", back);
        let rest: Vec<u64> = q.take("main", 10).iter().map(|w| w.id).collect();
        assert_eq!(rest, [ids[1], ids[2], ids[3], ids[4]]);
        assert_eq!((q.len("main"), q.len("other")), (0, 1));
    }

    #[test]
    fn a_write_leaves_its_queue_only_while_no_group_took_it() {
        let q = WriteQueues::default();
        let (a, b) = (q.push("main", write()), q.push("main", write()));
        assert!(q.remove("main", b));
        assert!(!q.remove("main", b), "removed twice");
        let taken = q.take("main", 10);
        assert_eq!(taken.len(), 1);
        assert!(!q.remove("main", a), "a taken write cannot leave");
        assert!(q.is_empty("main"));
    }
}
