//! `omnigraph repair`: find tables whose Lance HEAD moved past their
//! manifest pin outside any recorded write, classify the drift from Lance
//! transaction history, and (only when asked) publish it.
//!
//! Only compaction (`Rewrite`) and fragment reservation (`ReserveFragments`)
//! are verified maintenance: they preserve content. Anything else is
//! suspicious and is published only with `--force --confirm`.

use serde::Serialize;

use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::engine::manifest::{Lineage, Precondition, PublishRequest, TableUpdate};
use crate::engine::storage::table;
use crate::protocol::{OmniError, Result};
use crate::recovery::list_pending;

/// Actor recorded on repair commits.
pub const REPAIR_ACTOR: &str = "omnigraph:repair";

/// One drifted table.
#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Manifest pin.
    pub pinned: u64,
    /// Live Lance HEAD.
    pub head: u64,
    /// Operations found between them, oldest first.
    pub operations: Vec<String>,
    /// True when every operation is verified maintenance.
    pub maintenance: bool,
}

/// What repair found and did.
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    /// Drifted tables on `main`.
    pub drift: Vec<Drift>,
    /// The commit that published the drift, if any.
    pub published_commit_id: Option<String>,
}

const MAINTENANCE: &[&str] = &["Rewrite", "ReserveFragments"];

/// Classify drift on `main`; publish it when `confirm` (and `force` for suspicious drift).
pub async fn repair(rt: &Runtime, confirm: bool, force: bool) -> Result<RepairReport> {
    let _schema = rt.lease_schema(LeaseMode::Exclusive).await?;
    if let Some(name) = list_pending(rt.root()).await?.first() {
        return Err(OmniError::RecoveryRequired {
            operation_id: name.clone(),
            reason: "repair refuses while a recovery sidecar is pending; open the graph read-write to recover".into(),
        });
    }
    let mut leases = LeaseSet::default();
    leases.push(rt.lease_branch("main").await?)?;
    let view = rt.view("main").await?;
    let mut drift = Vec::new();
    for t in view.state.tables.values() {
        let uri = rt.root().child_uri(&t.location);
        let ds = table::open_table(&uri, t.branch.as_deref(), None).await?;
        let head = ds.version().version;
        if head <= t.version {
            continue;
        }
        let mut operations = Vec::new();
        for v in t.version + 1..=head {
            operations.push(table::operation_at(&ds, v).await?.unwrap_or_else(|| "<unknown>".into()));
        }
        let maintenance = operations.iter().all(|o| MAINTENANCE.contains(&o.as_str()));
        drift.push(Drift { table_key: t.table_key.clone(), pinned: t.version, head, operations, maintenance });
    }
    let suspicious = drift.iter().any(|d| !d.maintenance);
    if drift.is_empty() || !confirm || (suspicious && !force) {
        return Ok(RepairReport { drift, published_commit_id: None });
    }
    let mut updates = Vec::new();
    for d in &drift {
        let entry = &view.state.tables[&d.table_key];
        let ds =
            table::open_table(&rt.root().child_uri(&entry.location), entry.branch.as_deref(), Some(d.head)).await?;
        let row_count = table::row_count(&ds).await?;
        updates.push(TableUpdate::recovered(&d.table_key, entry.branch.as_deref(), d.head, row_count));
    }
    let request = PublishRequest {
        branch: "main".into(),
        updates,
        expected_versions: drift.iter().map(|d| (d.table_key.clone(), d.pinned)).collect(),
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: view.state.head("main").map(str::to_string),
        },
        lineage: Lineage { operation: Some("repair".into()), ..Lineage::mint(Some(REPAIR_ACTOR.into())) },
    };
    let gate = crate::actors::child_key::ChildKey::Branch("main".into()).gate_name();
    let lease = leases.on(&gate).ok_or_else(|| OmniError::Internal("repair holds no branch lease".into()))?;
    let published = rt.publish(request, lease).await?;
    Ok(RepairReport { drift, published_commit_id: Some(published.commit.commit_id) })
}
