//! Names of the supervisor's children (and of their gates).

/// Which child.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ChildKey {
    /// The schema actor.
    Schema,
    /// The actor of one graph branch.
    Branch(String),
    /// The actor of one table (by dataset URI) on one graph branch.
    Table {
        /// Dataset URI.
        uri: String,
        /// Graph branch.
        branch: String,
    },
    /// The reconciler.
    Reconciler,
}

impl ChildKey {
    /// The key of the table at `uri` on graph branch `branch`.
    pub fn table(uri: &str, branch: &str) -> Self {
        ChildKey::Table { uri: uri.to_string(), branch: branch.to_string() }
    }

    /// The name of this child's gate (leases carry it).
    pub fn gate_name(&self) -> String {
        match self {
            ChildKey::Schema => "schema".into(),
            ChildKey::Branch(b) => format!("branch:{b}"),
            ChildKey::Table { uri, branch } => format!("table:{uri}@{branch}"),
            ChildKey::Reconciler => "reconciler".into(),
        }
    }
}
