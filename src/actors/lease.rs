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

use super::child_key::ChildKey;

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

    /// Grant a lease now if nobody waits and it is compatible with the
    /// holders; otherwise nothing (the caller does not queue).
    pub fn try_grant(&self, mode: LeaseMode) -> Option<Lease> {
        let mut t = self.lock();
        if !t.waiting.is_empty() || !compatible(mode, &t.holders) {
            return None;
        }
        let id = t.next_id;
        t.next_id += 1;
        t.holders.insert(id, mode);
        Some(Lease { id, mode, gate: self.clone() })
    }

    /// Whether lease `id` is currently held on this gate.
    pub fn holds(&self, id: u64) -> bool {
        self.lock().holders.contains_key(&id)
    }

    /// Whether lease `id` is held on this gate in exclusive mode.
    pub fn holds_exclusive(&self, id: u64) -> bool {
        self.lock().holders.get(&id) == Some(&LeaseMode::Exclusive)
    }

    /// Whether nothing but the one map that names it holds this gate (no
    /// actor serves it, no lease is held or queued): forgetting it loses
    /// nothing, since the next use of its key makes a fresh, equivalent one.
    /// Only meaningful on the map's own copy.
    pub fn unused(&self) -> bool {
        Arc::strong_count(&self.table) == 1 && self.load() == (0, 0)
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
            if !compatible(front.mode, &t.holders) {
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

/// Whether a lease in `mode` may be held beside `holders`.
fn compatible(mode: LeaseMode, holders: &HashMap<u64, LeaseMode>) -> bool {
    match mode {
        LeaseMode::Exclusive => holders.is_empty(),
        LeaseMode::Shared => holders.values().all(|m| *m == LeaseMode::Shared),
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

/// A gate's place in the acquisition order: schema, then branches, then
/// tables; within a kind, by name.
fn order_key(gate: &str) -> (u8, &str) {
    let kind = if gate == "schema" {
        0
    } else if gate.starts_with("branch:") {
        1
    } else {
        2
    };
    (kind, gate)
}

impl LeaseSet {
    /// Add the next lease. Leases must come in gate order (schema → branches
    /// sorted → tables sorted), which is what makes deadlock impossible; a
    /// lease out of order is refused loudly (and released at once).
    pub fn push(&mut self, lease: Lease) -> crate::protocol::Result<()> {
        if let Some(last) = self.leases.last()
            && order_key(last.gate_name()) >= order_key(lease.gate_name())
        {
            return Err(crate::protocol::OmniError::Internal(format!(
                "lease order violated: {} taken after {} (the order is schema, branches sorted, tables sorted)",
                lease.gate_name(),
                last.gate_name()
            )));
        }
        self.leases.push(lease);
        Ok(())
    }

    /// Whether no lease is held.
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The lease held on the gate named `name`, if any.
    pub fn on(&self, name: &str) -> Option<&Lease> {
        self.leases.iter().find(|l| l.gate_name() == name)
    }

    /// The lease held on `key`'s gate, or an internal error naming it.
    pub fn require(&self, key: &ChildKey) -> crate::protocol::Result<&Lease> {
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

#[cfg(test)]
mod tests {
    use super::{Gate, LeaseMode, LeaseSet};

    #[test]
    fn a_lease_set_refuses_leases_out_of_gate_order() {
        let (schema, b, t1, t2) =
            (Gate::new("schema"), Gate::new("branch:b"), Gate::new("table:x@b"), Gate::new("table:y@b"));
        let take = |g: &Gate| g.try_grant(LeaseMode::Exclusive).expect("free");
        let mut set = LeaseSet::default();
        set.push(take(&schema)).expect("schema first");
        set.push(take(&b)).expect("then the branch");
        set.push(take(&t2)).expect("then a table");
        let err = set.push(take(&t1)).expect_err("a table sorting before the last one");
        assert!(err.to_string().contains("lease order violated"), "{err}");
        assert_eq!(t1.load(), (0, 0), "the refused lease is released");
        drop(set);
        let mut set = LeaseSet::default();
        set.push(take(&t1)).expect("a table alone");
        assert!(set.push(take(&b)).is_err(), "a branch after a table");
        drop(set);
        let mut set = LeaseSet::default();
        set.push(take(&b)).expect("branch");
        assert!(set.push(schema.try_grant(LeaseMode::Shared).expect("free")).is_err(), "the schema after a branch");
    }
}
