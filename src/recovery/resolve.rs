//! Resolving one sidecar: find the write's visible outcome, classify each
//! table from Lance transaction history, then roll forward (publish the
//! sidecar's fixed delta under its original commit id and actor) or roll
//! back (restore each owned table to its pin and publish the restored HEAD
//! under the pre-minted rollback id, actor `omnigraph:recovery`).
//!
//! The caller holds the gates (branch and the sidecar's tables) that prove
//! the sidecar's owner is gone.

use std::collections::BTreeMap;

use tracing::info;

use super::audit::{self, AuditRow, RecoveryKind, TableOutcome};
use super::sidecar::{EffectPhase, SidecarBody, SidecarStore, SidecarTable};
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::actors::supervisor::ChildKey;
use crate::engine::manifest::{self, Lineage, ManifestView, Precondition, PublishRequest, TableUpdate};
use crate::engine::storage::{TxnIdentity, table};
use crate::protocol::{OmniError, Result};

/// Actor recorded on rollback commits.
pub const RECOVERY_ACTOR: &str = "omnigraph:recovery";

/// What a pass may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Roll forward or back (read-write open, the reconciler).
    Full,
    /// Roll forward only (write entry heal); roll-back-class sidecars are deferred.
    RollForwardOnly,
}

/// How a sidecar ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Its commit is visible.
    RolledForward,
    /// Its effects were compensated (or it had none).
    RolledBack,
    /// Left for a full pass.
    Deferred(String),
}

/// One table as observed against the fresh manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Observation {
    /// HEAD == pin.
    NoMovement,
    /// Our transaction is exactly at HEAD == pin + 1.
    OwnedAtHead { head: u64 },
    /// HEAD is our compensating restore on top of our transaction.
    Compensated { head: u64 },
}

fn restore_uuid(op: &str, table_key: &str) -> String {
    format!("omni-rollback-{op}-{}", table_key.replace(':', "-"))
}

async fn observe(t: &SidecarTable, pinned: u64, op: &str) -> Result<Observation> {
    let ds = table::open_table(&t.table_path, t.table_branch.as_deref(), None).await?;
    let head = ds.version().version;
    let fail = |why: String| Err(OmniError::RecoveryRequired { operation_id: op.to_string(), reason: why });
    if head < pinned {
        return fail(format!("{}: Lance HEAD v{head} is below the manifest pin v{pinned}", t.table_key));
    }
    if head == pinned {
        return Ok(Observation::NoMovement);
    }
    let ours = table::transaction_at(&ds, pinned + 1).await?;
    if ours.as_ref() != Some(&t.planned) {
        return fail(format!(
            "{}: v{} is a foreign transaction {ours:?}; kept for an operator",
            t.table_key,
            pinned + 1
        ));
    }
    if head == pinned + 1 {
        return Ok(Observation::OwnedAtHead { head });
    }
    let top = table::transaction_at(&ds, head).await?;
    let compensation = TxnIdentity { read_version: pinned + 1, uuid: restore_uuid(op, &t.table_key) };
    if head == pinned + 2 && top.as_ref() == Some(&compensation) {
        return Ok(Observation::Compensated { head });
    }
    fail(format!("{}: our effect at v{} is buried under v{head}; kept for an operator", t.table_key, pinned + 1))
}

/// Resolve the sidecar `name`. `leases` must hold the sidecar's branch and tables.
pub async fn process(
    rt: &Runtime,
    store: &SidecarStore,
    name: &str,
    mode: Mode,
    leases: &LeaseSet,
) -> Result<Resolution> {
    let Some(body) = store.read(name).await? else { return Ok(Resolution::RolledBack) };
    let op = body.operation_id.clone();
    let view = manifest::load(rt.root(), &body.branch, None).await?;
    if view.state.commits.contains_key(&body.lineage.commit_id) {
        return settle(
            rt,
            store,
            &body,
            RecoveryKind::RolledForward,
            Some(body.lineage.commit_id.clone()),
            forward_outcomes(&body),
        )
        .await;
    }
    if view.state.commits.contains_key(&body.rollback_commit_id) {
        return settle(rt, store, &body, RecoveryKind::RolledBack, Some(body.rollback_commit_id.clone()), vec![]).await;
    }
    let mut observed = Vec::with_capacity(body.tables.len());
    for t in &body.tables {
        let pinned =
            view.state.tables.get(&t.table_key).map(|e| e.version).ok_or_else(|| OmniError::RecoveryRequired {
                operation_id: op.clone(),
                reason: format!("{} is no longer in the manifest", t.table_key),
            })?;
        observed.push((t, pinned, observe(t, pinned, &op).await?));
    }
    let schema = rt.schema().await?;
    let authority_holds = view.branch_id == body.token.branch_id
        && view.state.head(&body.branch).map(str::to_string) == body.token.graph_head
        && schema.identity == body.token.schema_identity;
    let all_at_head = observed.iter().all(|(_, _, o)| matches!(o, Observation::OwnedAtHead { .. }));
    if body.phase == EffectPhase::EffectsConfirmed && all_at_head && authority_holds {
        return roll_forward(rt, store, &body, &view, leases).await;
    }
    if observed.iter().all(|(_, _, o)| *o == Observation::NoMovement) {
        info!(operation_id = %op, "sidecar had no effect; discarding it");
        return settle(rt, store, &body, RecoveryKind::RolledBack, None, vec![]).await;
    }
    if mode == Mode::RollForwardOnly {
        return Ok(Resolution::Deferred(format!("{op} needs a roll-back")));
    }
    roll_back(rt, store, &body, &view, observed, leases).await
}

fn forward_outcomes(body: &SidecarBody) -> Vec<TableOutcome> {
    body.tables
        .iter()
        .map(|t| TableOutcome {
            table_key: t.table_key.clone(),
            from_version: t.expected_version,
            to_version: t.confirmed.as_ref().map_or(t.planned.target_version(), |c| c.version),
        })
        .collect()
}

async fn roll_forward(
    rt: &Runtime,
    store: &SidecarStore,
    body: &SidecarBody,
    view: &ManifestView,
    leases: &LeaseSet,
) -> Result<Resolution> {
    let updates: Vec<TableUpdate> = body.tables.iter().filter_map(|t| t.confirmed.clone()).collect();
    let request = PublishRequest {
        branch: body.branch.clone(),
        updates,
        expected_versions: body.tables.iter().map(|t| (t.table_key.clone(), t.expected_version)).collect(),
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: body.token.graph_head.clone(),
        },
        lineage: body.lineage.clone(),
    };
    publish(rt, request, leases).await?;
    info!(operation_id = %body.operation_id, "rolled forward");
    settle(rt, store, body, RecoveryKind::RolledForward, Some(body.lineage.commit_id.clone()), forward_outcomes(body))
        .await
}

async fn roll_back(
    rt: &Runtime,
    store: &SidecarStore,
    body: &SidecarBody,
    view: &ManifestView,
    observed: Vec<(&SidecarTable, u64, Observation)>,
    leases: &LeaseSet,
) -> Result<Resolution> {
    let op = &body.operation_id;
    let mut updates = Vec::new();
    let mut outcomes = Vec::new();
    let mut expected = BTreeMap::new();
    for (t, pinned, o) in observed {
        let head = match o {
            Observation::NoMovement => continue,
            Observation::Compensated { head } => head,
            Observation::OwnedAtHead { head } => {
                let ds = table::open_table(&t.table_path, t.table_branch.as_deref(), Some(head)).await?;
                let staged = table::stage_restore(ds, pinned, &restore_uuid(op, &t.table_key));
                let gate = ChildKey::Table { uri: t.table_path.clone(), branch: body.branch.clone() }.gate_name();
                let lease = leases
                    .on(&gate)
                    .ok_or_else(|| OmniError::Internal(format!("recovery holds no lease on {gate}")))?;
                rt.commit(&body.branch, staged, lease).await?.version
            }
        };
        let ds = table::open_table(&t.table_path, t.table_branch.as_deref(), Some(head)).await?;
        let row_count = table::row_count(&ds).await?;
        updates.push(TableUpdate {
            table_key: t.table_key.clone(),
            version: head,
            branch: t.table_branch.clone(),
            row_count,
        });
        outcomes.push(TableOutcome { table_key: t.table_key.clone(), from_version: head - 1, to_version: pinned });
        expected.insert(t.table_key.clone(), pinned);
    }
    let lineage = Lineage {
        commit_id: body.rollback_commit_id.clone(),
        actor: Some(RECOVERY_ACTOR.into()),
        ..Lineage::mint(None)
    };
    let request = PublishRequest {
        branch: body.branch.clone(),
        updates,
        expected_versions: expected,
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: view.state.head(&body.branch).map(str::to_string),
        },
        lineage,
    };
    publish(rt, request, leases).await?;
    info!(operation_id = %op, "rolled back");
    settle(rt, store, body, RecoveryKind::RolledBack, Some(body.rollback_commit_id.clone()), outcomes).await
}

async fn publish(rt: &Runtime, request: PublishRequest, leases: &LeaseSet) -> Result<()> {
    let gate = ChildKey::Branch(request.branch.clone()).gate_name();
    let lease = leases.on(&gate).ok_or_else(|| OmniError::Internal(format!("recovery holds no lease on {gate}")))?;
    rt.publish(request, lease).await.map(|_| ())
}

/// Record the audit row, then delete the sidecar.
async fn settle(
    rt: &Runtime,
    store: &SidecarStore,
    body: &SidecarBody,
    kind: RecoveryKind,
    commit: Option<String>,
    tables: Vec<TableOutcome>,
) -> Result<Resolution> {
    let row = AuditRow {
        graph_commit_id: commit,
        recovery_kind: kind,
        recovery_for_actor: body.actor.clone(),
        operation_id: body.operation_id.clone(),
        writer_kind: format!("{:?}", body.writer_kind),
        tables,
        created_at_us: chrono::Utc::now().timestamp_micros(),
    };
    audit::record(rt.root(), &row).await?;
    store.delete(&body.object_name()).await?;
    Ok(match kind {
        RecoveryKind::RolledForward => Resolution::RolledForward,
        _ => Resolution::RolledBack,
    })
}
