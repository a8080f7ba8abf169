//! The gates an operation takes, named up front and taken in gate order.
//!
//! Every writer, branch control and recovery names its gates in a [`Gates`]
//! and takes them here, so the order (schema → branches sorted → tables
//! sorted by gate name) is produced in one place rather than rebuilt by each
//! caller; [`LeaseSet::push`] still refuses an out-of-order lease loudly.

use std::collections::BTreeSet;

use crate::actors::child_key::ChildKey;
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::engine::manifest::ManifestView;
use crate::protocol::Result;

/// A set of gates to take: the schema gate in a mode, branch gates, table
/// gates, named in any order.
#[derive(Debug, Default, Clone)]
pub struct Gates {
    schema: Option<LeaseMode>,
    branches: BTreeSet<String>,
    /// `(gate name, uri, branch)`: ordered by gate name, the lease order.
    tables: BTreeSet<(String, String, String)>,
}

/// How [`Gates::take`] waits for a busy gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Queue for each gate.
    Queue,
    /// Take each gate only if it is free now.
    Try,
}

impl Gates {
    /// The schema gate in `mode`.
    pub fn schema(mode: LeaseMode) -> Self {
        Gates { schema: Some(mode), ..Gates::default() }
    }

    /// No gate yet (add branches and tables).
    pub fn none() -> Self {
        Gates::default()
    }

    /// Also `branch`'s gate.
    pub fn branch(mut self, branch: &str) -> Self {
        self.branches.insert(branch.to_string());
        self
    }

    /// Also the gate of the table at `uri` on graph branch `branch`.
    pub fn table(mut self, uri: &str, branch: &str) -> Self {
        let gate = ChildKey::table(uri, branch).gate_name();
        self.tables.insert((gate, uri.to_string(), branch.to_string()));
        self
    }

    /// Also the gates of every table in `uris` on `branch`.
    pub fn tables<'u>(self, uris: impl IntoIterator<Item = &'u str>, branch: &str) -> Self {
        uris.into_iter().fold(self, |g, uri| g.table(uri, branch))
    }

    /// Also the gate of every table visible in `view`, on `branch` (the
    /// all-catalog envelope).
    pub fn catalog(self, rt: &Runtime, view: &ManifestView, branch: &str) -> Self {
        self.tables(table_uris(rt, view).iter().map(String::as_str), branch)
    }

    /// Take every named gate `leases` does not hold yet, in gate order,
    /// queueing for each.
    pub async fn take(self, rt: &Runtime, leases: &mut LeaseSet) -> Result<()> {
        let taken = self.take_with(rt, leases, Wait::Queue).await?;
        debug_assert!(taken, "a queued take always ends holding every gate");
        Ok(())
    }

    /// Every named gate in a new lease set, queueing for each.
    pub async fn acquire(self, rt: &Runtime) -> Result<LeaseSet> {
        let mut leases = LeaseSet::default();
        self.take(rt, &mut leases).await?;
        Ok(leases)
    }

    /// Every named gate in a new lease set if each is free now; `None` (and
    /// nothing held) if one of them is busy.
    pub async fn try_acquire(self, rt: &Runtime) -> Result<Option<LeaseSet>> {
        let mut leases = LeaseSet::default();
        Ok(self.take_with(rt, &mut leases, Wait::Try).await?.then_some(leases))
    }

    /// Take the gates not held yet; `false` when `wait` is [`Wait::Try`] and
    /// one is busy (the ones taken so far stay in `leases`).
    async fn take_with(self, rt: &Runtime, leases: &mut LeaseSet, wait: Wait) -> Result<bool> {
        for gate in self.in_order() {
            if leases.on(&gate.name()).is_some() {
                continue;
            }
            let lease = match (gate, wait) {
                (GateRef::Schema(mode), Wait::Queue) => Some(rt.lease_schema(mode).await?),
                (GateRef::Schema(mode), Wait::Try) => rt.try_lease_schema(mode).await?,
                (GateRef::Branch(b), Wait::Queue) => Some(rt.lease_branch(b).await?),
                (GateRef::Branch(b), Wait::Try) => rt.try_lease_branch(b).await?,
                (GateRef::Table { uri, branch, .. }, Wait::Queue) => Some(rt.lease_table(uri, branch).await?),
                (GateRef::Table { uri, branch, .. }, Wait::Try) => rt.try_lease_table(uri, branch).await?,
            };
            let Some(lease) = lease else { return Ok(false) };
            leases.push(lease)?;
        }
        Ok(true)
    }

    /// Every named gate in gate order: schema, branches sorted, tables sorted
    /// by gate name.
    fn in_order(&self) -> impl Iterator<Item = GateRef<'_>> {
        let schema = self.schema.map(GateRef::Schema);
        let branches = self.branches.iter().map(|b| GateRef::Branch(b));
        let tables = self.tables.iter().map(|(gate, uri, branch)| GateRef::Table { gate, uri, branch });
        schema.into_iter().chain(branches).chain(tables)
    }
}

/// Every table dataset visible in `view`, sorted.
pub fn table_uris(rt: &Runtime, view: &ManifestView) -> Vec<String> {
    let mut uris: Vec<String> = view.state.tables.values().map(|t| rt.root().child_uri(&t.location)).collect();
    uris.sort_unstable();
    uris
}

/// One gate of a [`Gates`].
#[derive(Debug, Clone, Copy)]
enum GateRef<'g> {
    Schema(LeaseMode),
    Branch(&'g str),
    Table { gate: &'g str, uri: &'g str, branch: &'g str },
}

impl GateRef<'_> {
    /// The gate's name, as its lease carries it.
    fn name(&self) -> String {
        match self {
            GateRef::Schema(_) => ChildKey::Schema.gate_name(),
            GateRef::Branch(b) => ChildKey::Branch(b.to_string()).gate_name(),
            GateRef::Table { gate, .. } => gate.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Gates;
    use crate::actors::lease::LeaseMode;

    #[test]
    fn gates_named_in_any_order_are_taken_in_gate_order() {
        let gates = Gates::schema(LeaseMode::Shared)
            .table("t/b.lance", "x")
            .branch("z")
            .table("t/a.lance", "x")
            .branch("m")
            .table("t/a.lance", "m")
            .branch("z");
        let names: Vec<String> = gates.in_order().map(|g| g.name()).collect();
        assert_eq!(
            names,
            ["schema", "branch:m", "branch:z", "table:t/a.lance@m", "table:t/a.lance@x", "table:t/b.lance@x"]
        );
        assert!(Gates::none().in_order().next().is_none());
    }
}
