//! Gates as leases.
//!
//! Each gate (the schema gate, a branch gate, a table gate) keeps a FIFO
//! [`LeaseTable`]. A writer asks the owning actor for a lease through its
//! mailbox; the actor enqueues the request and the table grants it once
//! compatible. The granted [`Lease`] releases itself on drop, so a lease is
//! freed when its holder finishes, errors, panics or is aborted. A lease that
//! is granted to a caller who already gave up is dropped with the undelivered
//! reply and therefore released too.
//!
//! The table outlives the actor that serves it (the supervisor hands the same
//! table to a restarted actor), so killing an actor neither frees leases that
//! are still held nor strands queued requests.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use ractor::RpcReplyPort;

/// How a lease shares its gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseMode {
    /// Compatible with other shared leases (data writers on the schema gate).
    Shared,
    /// Excludes every other lease (schema apply, full recovery, branch and table gates).
    Exclusive,
}

struct Waiter {
    id: u64,
    mode: LeaseMode,
    reply: RpcReplyPort<Lease>,
}

/// The state of one gate: who holds it and who waits, in arrival order.
#[derive(Default)]
pub struct LeaseTable {
    next_id: u64,
    holders: HashMap<u64, LeaseMode>,
    waiting: VecDeque<Waiter>,
}

/// A gate's shared lease table, named for diagnostics.
#[derive(Clone)]
pub struct Gate {
    name: Arc<str>,
    table: Arc<Mutex<LeaseTable>>,
}

/// A grant ready to be delivered once the gate's lock is released.
type Delivery = (RpcReplyPort<Lease>, Lease);

impl Gate {
    /// A new, free gate.
    pub fn new(name: impl Into<Arc<str>>) -> Self {
        Gate { name: name.into(), table: Arc::default() }
    }

    /// The gate's name (e.g. `branch:main`).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn lock(&self) -> MutexGuard<'_, LeaseTable> {
        // A poisoned lock only means a holder panicked while releasing; the
        // table itself is always left consistent, so keep serving it.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queue a request; it is answered on `reply` when granted.
    pub fn enqueue(&self, mode: LeaseMode, reply: RpcReplyPort<Lease>) {
        let deliveries = {
            let mut t = self.lock();
            let id = t.next_id;
            t.next_id += 1;
            t.waiting.push_back(Waiter { id, mode, reply });
            self.pump(&mut t)
        };
        deliver(deliveries);
    }

    /// Whether lease `id` is currently held on this gate.
    pub fn holds(&self, id: u64) -> bool {
        self.lock().holders.contains_key(&id)
    }

    /// Number of current holders and waiters (for tests and diagnostics).
    pub fn load(&self) -> (usize, usize) {
        let t = self.lock();
        (t.holders.len(), t.waiting.len())
    }

    fn release(&self, id: u64) {
        let deliveries = {
            let mut t = self.lock();
            t.holders.remove(&id);
            self.pump(&mut t)
        };
        deliver(deliveries);
    }

    /// Grant waiters from the front while they are compatible with the holders.
    fn pump(&self, t: &mut LeaseTable) -> Vec<Delivery> {
        let mut out = Vec::new();
        while let Some(front) = t.waiting.front() {
            let compatible = match front.mode {
                LeaseMode::Exclusive => t.holders.is_empty(),
                LeaseMode::Shared => t.holders.values().all(|m| *m == LeaseMode::Shared),
            };
            if !compatible {
                break;
            }
            let Some(w) = t.waiting.pop_front() else { break };
            if w.reply.is_closed() {
                continue;
            }
            t.holders.insert(w.id, w.mode);
            let lease = Lease { id: w.id, mode: w.mode, gate: self.clone() };
            out.push((w.reply, lease));
        }
        out
    }
}

/// Send grants outside the gate's lock: a grant whose caller is gone comes
/// back and is dropped here, which releases it (and re-locks the gate).
fn deliver(deliveries: Vec<Delivery>) {
    for (reply, lease) in deliveries {
        drop(reply.send(lease));
    }
}

/// A held gate. Dropping it releases the gate.
pub struct Lease {
    id: u64,
    mode: LeaseMode,
    gate: Gate,
}

impl Lease {
    /// The lease id, presented with every effect message to the gate's actor.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Shared or exclusive.
    pub fn mode(&self) -> LeaseMode {
        self.mode
    }

    /// Name of the gate this lease holds.
    pub fn gate_name(&self) -> &str {
        self.gate.name()
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Lease({} #{} {:?})", self.gate.name(), self.id, self.mode)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.gate.release(self.id);
    }
}

/// The leases of one write, in acquisition order (schema → branch → tables);
/// released in reverse order on drop.
#[derive(Debug, Default)]
pub struct LeaseSet {
    leases: Vec<Lease>,
}

impl LeaseSet {
    /// Add the next lease in gate order.
    pub fn push(&mut self, lease: Lease) {
        self.leases.push(lease);
    }

    /// The lease held on the gate named `name`, if any.
    pub fn on(&self, name: &str) -> Option<&Lease> {
        self.leases.iter().find(|l| l.gate_name() == name)
    }

    /// The lease held on `key`'s gate, or an internal error naming it.
    pub fn require(&self, key: &crate::actors::supervisor::ChildKey) -> crate::protocol::Result<&Lease> {
        let gate = key.gate_name();
        self.on(&gate).ok_or_else(|| crate::protocol::OmniError::Internal(format!("no lease held on {gate}")))
    }
}

impl Drop for LeaseSet {
    fn drop(&mut self) {
        while let Some(l) = self.leases.pop() {
            drop(l);
        }
    }
}
