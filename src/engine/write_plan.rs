//! What a writer captures before preparing, and what preparing produces.
//! The saga (`actors::saga::write`) drives these through the gates.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::engine::manifest::{BranchId, ManifestView, TableEntry};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::{Root, StagedTxn};
use crate::protocol::{OmniError, Result};

/// The authority a write prepares against: the manifest branch incarnation,
/// the exact head, and the accepted schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthorityToken {
    /// Native Lance branch identifier of the manifest branch.
    pub branch_id: BranchId,
    /// Exact `graph_head:<branch>` (absent on a fresh branch).
    pub graph_head: Option<String>,
    /// Accepted schema identity.
    pub schema_identity: String,
}

/// One consistent read to prepare against: a manifest view and a schema.
#[derive(Debug, Clone)]
pub struct Capture {
    /// The graph root.
    pub root: Root,
    /// The branch's manifest at capture time.
    pub view: ManifestView,
    /// The accepted schema.
    pub schema: Arc<SchemaState>,
    /// The authority token derived from both.
    pub token: AuthorityToken,
}

impl Capture {
    /// The pinned table of `table_key`.
    pub fn table(&self, table_key: &str) -> Result<&TableEntry> {
        self.view
            .state
            .tables
            .get(table_key)
            .ok_or_else(|| OmniError::Internal(format!("{table_key} is in the schema but not in the manifest")))
    }

    /// Dataset URI of a pinned table.
    pub fn uri(&self, entry: &TableEntry) -> String {
        self.root.child_uri(&entry.location)
    }
}

/// One table's staged effect.
#[derive(Debug)]
pub struct PreparedTable {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// The manifest pin the transaction was staged against.
    pub pin: u64,
    /// Native Lance branch written (`None` = main).
    pub table_branch: Option<String>,
    /// The staged transaction.
    pub staged: StagedTxn,
}

/// Everything a prepare step produced.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Staged effects, one per touched table.
    pub tables: Vec<PreparedTable>,
    /// Node entities inserted, updated or deleted.
    pub nodes_affected: u64,
    /// Edge entities inserted, updated or deleted.
    pub edges_affected: u64,
}
