//! What a writer captures before preparing, and what preparing produces.
//! The saga (`actors::saga::write`) drives these through the gates.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::engine::manifest::rows::CommitRow;
use crate::engine::manifest::{BranchId, ManifestView, TableEntry, TableUpdate};
use crate::engine::schema_store::SchemaState;
use lance::Dataset;

use crate::engine::storage::branches::CreatePlan;
use crate::engine::storage::{Root, StagePlan, StagedTxn, TxnIdentity, branches, table};
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

impl AuthorityToken {
    /// The authority of `view` (a branch's manifest) under the accepted
    /// schema `schema_identity`.
    pub fn of(view: &ManifestView, schema_identity: &str) -> Self {
        AuthorityToken {
            branch_id: view.branch_id.clone(),
            graph_head: view.state.head(&view.branch).map(str::to_string),
            schema_identity: schema_identity.to_string(),
        }
    }
}

/// Every table's manifest pin in `view`.
pub fn pins(view: &ManifestView) -> std::collections::BTreeMap<String, u64> {
    view.state.tables.iter().map(|(k, t)| (k.clone(), t.version)).collect()
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
    /// Tables already opened at their pins during this attempt (a pinned
    /// version never changes, so validation and staging share one handle).
    pub opened: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<Dataset>>>>,
}

impl Capture {
    /// A new capture of `view` under `schema`.
    pub fn new(root: Root, view: ManifestView, schema: Arc<SchemaState>, token: AuthorityToken) -> Self {
        Capture { root, view, schema, token, opened: Default::default() }
    }

    /// The table of `table_key` opened at its pin (once per capture).
    pub async fn pinned(&self, table_key: &str) -> Result<Arc<Dataset>> {
        let cached = self.opened.lock().ok().and_then(|m| m.get(table_key).cloned());
        if let Some(ds) = cached {
            return Ok(ds);
        }
        let ds = crate::engine::committed::open_pinned(&self.root, self.table(table_key)?).await?;
        if let Ok(mut m) = self.opened.lock() {
            m.insert(table_key.to_string(), ds.clone());
        }
        Ok(ds)
    }
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

    /// The native ref writes on this branch go to (`None` = main).
    pub fn target_branch(&self) -> Option<String> {
        Some(self.view.branch.clone()).filter(|b| b != "main")
    }

    /// Prepare `plan` on the table of `table_key`, whose pinned handle is `ds`:
    /// staged now when the table already lives on the target ref, or kept for
    /// after the fork on the first write to it on a named branch. `None` when
    /// the plan changes nothing.
    pub async fn prepare_table(
        &self,
        table_key: &str,
        ds: Arc<Dataset>,
        plan: StagePlan,
    ) -> Result<Option<PreparedTable>> {
        self.prepare_table_chain(table_key, ds, vec![plan]).await
    }

    /// [`Self::prepare_table`] for an ordered chain of plans on one table
    /// (see [`prepare_chain`]).
    pub async fn prepare_table_chain(
        &self,
        table_key: &str,
        ds: Arc<Dataset>,
        plans: Vec<StagePlan>,
    ) -> Result<Option<PreparedTable>> {
        let entry = self.table(table_key)?;
        prepare_chain(&self.root, table_key, entry, self.target_branch(), ds, plans).await
    }
}

/// Prepare an ordered chain of `plans` on the table `entry` pins, for the
/// target ref `target` (`None` = main); `ds` is the table at its pin. The
/// first transaction is staged now when the table already lives on the
/// target ref; the rest (and, on a first touch, all of them) keep their plan
/// and a pre-minted identity, to stage on the version the step before lands.
/// A table past [`table::needs_compaction`] gets a [`StagePlan::Compact`]
/// step last. `None` when the chain is empty or its only step changes nothing.
pub async fn prepare_chain(
    root: &Root,
    table_key: &str,
    entry: &TableEntry,
    target: Option<String>,
    ds: Arc<Dataset>,
    plans: Vec<StagePlan>,
) -> Result<Option<PreparedTable>> {
    let mut plans = plans.into_iter();
    let Some(first) = plans.next() else { return Ok(None) };
    // A write to a table with many small fragments also compacts them, as
    // the last transaction of its chain (an overwrite replaces them anyway).
    let compact = !matches!(first, StagePlan::Overwrite { .. }) && table::needs_compaction(&ds).await?;
    let identity = TxnIdentity::mint(entry.version);
    let uri = root.child_uri(&entry.location);
    let effect = if entry.branch == target {
        match table::stage(ds, first, &identity.uuid).await? {
            Some(staged) => TableEffect::Staged(Box::new(staged)),
            None => return Ok(None),
        }
    } else {
        if let StagePlan::Delete { ids } = &first
            && table::count_ids(&ds, ids).await? == 0
        {
            return Ok(None);
        }
        let fork = branches::plan(&uri, entry.branch.as_deref(), entry.version).await?;
        TableEffect::Fork { fork, plan: first, identity }
    };
    let then = plans
        .chain(compact.then_some(StagePlan::Compact(table::Compaction::SmallFragments)))
        .enumerate()
        .map(|(i, plan)| ChainStep { plan, identity: TxnIdentity::mint(entry.version + 1 + i as u64) })
        .collect();
    Ok(Some(PreparedTable {
        table_key: table_key.to_string(),
        uri,
        pin: entry.version,
        table_branch: target,
        effect,
        then,
    }))
}

/// A later transaction of a table's chain: staged on the version the step
/// before it lands, under an identity minted (and armed) up front.
#[derive(Debug)]
pub struct ChainStep {
    /// What to stage.
    pub plan: StagePlan,
    /// The pre-minted identity (read version = the previous step's landing).
    pub identity: TxnIdentity,
}

/// A table pointer a write publishes with no physical effect: a version
/// already visible elsewhere (a merge adopting the source's state).
#[derive(Debug, Clone)]
pub struct PointerUpdate {
    /// The manifest pin it replaces (the publish expects it).
    pub expected_version: u64,
    /// The pointer.
    pub update: crate::engine::manifest::TableUpdate,
}

/// How one table's effect is held between prepare and commit.
#[derive(Debug)]
pub enum TableEffect {
    /// Staged against the pinned version of the ref the write targets.
    Staged(Box<StagedTxn>),
    /// The first write to this table on a named branch: the ref does not
    /// exist yet, and Lance files for it cannot be staged before it does. The
    /// saga forks after arming the sidecar, then stages `plan` on the fork
    /// under the pre-minted `identity`.
    Fork {
        /// Parent ref and the exact inherited version to fork from.
        fork: CreatePlan,
        /// What to stage on the fork.
        plan: StagePlan,
        /// The pre-minted transaction identity (read version = inherited pin).
        identity: TxnIdentity,
    },
}

/// One table's prepared effect.
#[derive(Debug)]
pub struct PreparedTable {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Dataset URI of the table.
    pub uri: String,
    /// The manifest pin the effect is based on.
    pub pin: u64,
    /// Native Lance branch written (`None` = main).
    pub table_branch: Option<String>,
    /// The staged transaction, or the plan to stage after a first-touch fork.
    pub effect: TableEffect,
    /// Further transactions committed after `effect`, contiguously.
    pub then: Vec<ChainStep>,
}

impl PreparedTable {
    /// The pre-minted identity of the table transaction.
    pub fn identity(&self) -> TxnIdentity {
        match &self.effect {
            TableEffect::Staged(s) => s.identity(),
            TableEffect::Fork { identity, .. } => identity.clone(),
        }
    }

    /// Every pre-minted identity of the chain, in commit order.
    pub fn chain(&self) -> Vec<TxnIdentity> {
        std::iter::once(self.identity()).chain(self.then.iter().map(|s| s.identity.clone())).collect()
    }

    /// The version the table lands at once its whole chain committed.
    pub fn landing_version(&self) -> u64 {
        self.pin + 1 + self.then.len() as u64
    }

    /// The fork this effect needs first, if it is a first touch.
    pub fn fork(&self) -> Option<&CreatePlan> {
        match &self.effect {
            TableEffect::Fork { fork, .. } => Some(fork),
            TableEffect::Staged(_) => None,
        }
    }
}

/// The result of a write.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteOutcome {
    /// The commit created; `None` for a write with no effect.
    pub commit_id: Option<String>,
    /// That commit as published (`None` with `commit_id`).
    #[serde(skip)]
    pub commit: Option<CommitRow>,
    /// Node entities affected.
    pub nodes_affected: u64,
    /// Edge entities affected.
    pub edges_affected: u64,
    /// New table pointers.
    pub tables: Vec<TableUpdate>,
    /// Rows written into new data files, per table key (a delete writes none).
    pub rows_written: std::collections::BTreeMap<String, u64>,
}

/// Everything a prepare step produced.
#[derive(Debug, Default)]
pub struct Prepared {
    /// Staged effects, one per touched table.
    pub tables: Vec<PreparedTable>,
    /// Pointers published without a physical effect.
    pub pointers: Vec<PointerUpdate>,
    /// Node entities inserted, updated or deleted.
    pub nodes_affected: u64,
    /// Edge entities inserted, updated or deleted.
    pub edges_affected: u64,
}
