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

use super::rollback;
use crate::actors::child_key::ChildKey;
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::engine::branch_name::MAIN;
use crate::engine::manifest::{self, ManifestView, Precondition, PublishRequest, TableUpdate};
use crate::engine::schema_store::{self, SchemaState};
use crate::engine::storage::table;
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};
use crate::recovery::audit::{self, AuditRow, RecoveryKind, TableOutcome};
use crate::recovery::classify::{Decision, Evidence, TableClass, classify, decide};
use crate::recovery::sidecar::{EffectPhase, SidecarBody, SidecarStore, SidecarTable};

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
    /// Its branch was deleted; its effects were discarded with it.
    OrphanDiscarded,
    /// Left for a full pass.
    Deferred {
        /// The operation.
        operation_id: String,
        /// The graph branch it writes.
        branch: String,
        /// Why a full pass is needed.
        reason: String,
    },
    /// Skipped: a write of this process still owns it.
    InFlight,
    /// Refused (fail closed): kept on disk for an operator. Writes on its
    /// branch stay refused; other branches are not affected.
    Kept {
        /// The operation.
        operation_id: String,
        /// The graph branch it writes.
        branch: String,
        /// Why it cannot be resolved.
        reason: String,
    },
}

impl Resolution {
    /// The unresolved intent this leaves on `branch`, if any, as the error a
    /// writer on that branch gets.
    pub fn blocks(&self, branch: &str) -> Option<OmniError> {
        match self {
            Resolution::Deferred { operation_id, branch: b, reason }
            | Resolution::Kept { operation_id, branch: b, reason }
                if b == branch =>
            {
                Some(OmniError::RecoveryRequired { operation_id: operation_id.clone(), reason: reason.clone() })
            }
            _ => None,
        }
    }
}

pub(super) fn restore_uuid(op: &str, table_key: &str) -> String {
    format!("omni-rollback-{op}-{}", table_key.replace(':', "-"))
}

/// What Lance shows for table `t` of `body` (see [`classify`]).
async fn evidence(body: &SidecarBody, t: &SidecarTable, pin: u64) -> Result<Evidence> {
    let mut e = Evidence { pin, head: None, txns: vec![], fork_matches: None };
    if let Some(plan) = &t.fork {
        let Some(found) = table::native_branch(&t.table_path, &body.branch).await? else { return Ok(e) };
        e.fork_matches = Some(found.parent_branch == plan.parent_branch && found.parent_version == plan.parent_version);
    }
    let ds = match table::open_table(&t.table_path, t.table_branch.as_deref(), None).await {
        Ok(ds) => ds,
        // A schema apply's new table with no version: never created, or only
        // the files of a create that did not land (recovery removes them).
        Err(OmniError::NotFound(_)) if t.is_create() => return Ok(e),
        Err(err) => return Err(err),
    };
    let head = ds.version().version;
    e.head = Some(head);
    // The chain, plus one more version: room for our compensating restore.
    let last = head.min(pin + 1 + t.chain.len() as u64 + 1);
    for v in pin + 1..=last {
        e.txns.push(table::transaction_at(&ds, v).await?);
    }
    Ok(e)
}

/// Classify table `t` of `body`.
async fn observe(body: &SidecarBody, t: &SidecarTable, pin: u64) -> Result<TableClass> {
    let compensation = restore_uuid(&body.operation_id, &t.table_key);
    Ok(classify(&evidence(body, t, pin).await?, &t.identities(), &compensation))
}

/// Remove a schema apply's new table `t` whole: its exact version-one
/// create (classified ours) or the files of a create that never landed. The
/// manifest registers it nowhere, and the apply verified the path empty
/// under its gates before arming, so everything there is the apply's.
pub(super) async fn remove_created(rt: &Runtime, body: &SidecarBody, t: &SidecarTable) -> Result<()> {
    let location = created_location(body, t)?;
    rt.root().delete_prefix(&location).await?;
    info!(operation_id = %body.operation_id, table = %t.table_key, "removed a rolled-back schema apply's new table");
    Ok(())
}

/// The path a schema apply registers for its new table `t`.
fn created_location(body: &SidecarBody, t: &SidecarTable) -> Result<String> {
    let regs = body.lineage.schema.as_ref().map(|s| s.registrations.as_slice()).unwrap_or_default();
    regs.iter().find(|r| r.table_key == t.table_key).map(|r| r.location.clone()).ok_or_else(|| {
        OmniError::RecoveryRequired {
            operation_id: body.operation_id.clone(),
            reason: format!("{} is created by the apply but its registration is missing", t.table_key),
        }
    })
}

/// Each table of `body` with its pin and class, and the decision over them.
async fn classify_sidecar<'b>(
    rt: &Runtime,
    body: &'b SidecarBody,
    view: &ManifestView,
) -> Result<(Vec<(&'b SidecarTable, u64, TableClass)>, Decision)> {
    let mut observed = Vec::with_capacity(body.tables.len());
    for t in &body.tables {
        let pinned = match view.state.tables.get(&t.table_key) {
            Some(e) => e.version,
            None if t.is_create() => 0,
            None => {
                return Err(OmniError::RecoveryRequired {
                    operation_id: body.operation_id.clone(),
                    reason: format!("{} is no longer in the manifest", t.table_key),
                });
            }
        };
        observed.push((t, pinned, observe(body, t, pinned).await?));
    }
    let schema = rt.schema_of(view).await?;
    let authority_holds = view.branch_id == body.token.branch_id
        && view.state.head(&body.branch).map(str::to_string) == body.token.graph_head
        && schema.identity == body.token.schema_identity;
    let classes: Vec<(&str, TableClass)> = observed.iter().map(|(t, _, c)| (t.table_key.as_str(), c.clone())).collect();
    let decision = decide(body.phase == EffectPhase::EffectsConfirmed, authority_holds, &classes);
    Ok((observed, decision))
}

/// What recovery would do with `body` now, and why, from storage alone (reads
/// only; for operators: `recovery list` shows it beside each pending sidecar).
pub async fn diagnose(rt: &Runtime, body: &SidecarBody) -> Result<String> {
    let view = match manifest::load(rt.root(), &body.branch, None).await {
        Ok(view) => view,
        Err(OmniError::NotFound(_)) if body.branch != "main" => {
            return Ok("OrphanedBranchDiscarded: its branch was deleted".into());
        }
        Err(e) => return Err(e),
    };
    if body.lineage.visible_in(&view.state)? {
        return Ok("RolledForward: its commit is visible; only the cleanup is left".into());
    }
    if view.state.commits()?.contains_key(&body.rollback_commit_id) {
        return Ok("RolledBack: its compensation is visible; only the cleanup is left".into());
    }
    let (observed, decision) = classify_sidecar(rt, body, &view).await?;
    let tables: Vec<String> = observed.iter().map(|(t, _, c)| format!("{}={c}", t.table_key)).collect();
    let verdict = match decision {
        Decision::RollForward => "RollForward".to_string(),
        Decision::NoMovement => "NoMovement: discard".to_string(),
        Decision::RollBack { why } => format!("RollBack ({why})"),
        Decision::FailClosed(reason) => format!("FailClosed ({reason})"),
    };
    Ok(format!("{verdict}: {}", tables.join(", ")))
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
    let view = match manifest::load(rt.root(), &body.branch, None).await {
        Ok(view) => view,
        // The branch was deleted: its authority is gone, so are the effects.
        Err(OmniError::NotFound(_)) if body.branch != "main" => return discard_orphan(rt, store, &body, leases).await,
        Err(e) => return Err(e),
    };
    if body.lineage.visible_in(&view.state)? {
        promote_schema(rt, &body).await?;
        return settle(
            rt,
            store,
            &body,
            RecoveryKind::RolledForward,
            Some(body.lineage.published_commit_id().to_string()),
            forward_outcomes(&body),
        )
        .await;
    }
    if view.state.commits()?.contains_key(&body.rollback_commit_id) {
        discard_schema(rt, &body).await?;
        return settle(rt, store, &body, RecoveryKind::RolledBack, Some(body.rollback_commit_id.clone()), vec![]).await;
    }
    let (observed, decision) = classify_sidecar(rt, &body, &view).await?;
    info!(operation_id = %op, ?decision, "classified");
    let why = match decision {
        Decision::RollForward => return roll_forward(rt, store, &body, &view, leases).await,
        Decision::FailClosed(reason) => return Err(OmniError::RecoveryRequired { operation_id: op, reason }),
        Decision::NoMovement => {
            // A first touch that crashed before its ref may have left a clone-only tree.
            for (t, _, _) in &observed {
                if t.fork.is_some() {
                    reclaim_fork(rt, t, &body.branch, leases).await?;
                }
                if t.is_create() {
                    remove_created(rt, &body, t).await?;
                }
            }
            discard_schema(rt, &body).await?;
            return settle(rt, store, &body, RecoveryKind::RolledBack, None, vec![]).await;
        }
        Decision::RollBack { why } => why,
    };
    if view.branch_id != body.token.branch_id && body.tables.iter().any(|t| t.fork.is_some()) {
        // The name was recreated: a ref under it may belong to the new incarnation.
        return Err(OmniError::RecoveryRequired {
            operation_id: op,
            reason: format!("branch `{}` was recreated since this write; its forks are kept", body.branch),
        });
    }
    if mode == Mode::RollForwardOnly {
        return Ok(Resolution::Deferred {
            reason: format!("{op} needs a roll-back ({why})"),
            operation_id: op,
            branch: body.branch.clone(),
        });
    }
    let planned = rollback::Planned::new(rt, store, &body, &view, observed, leases);
    planned.reclaim_forks().await?.restore_tables().await?.publish().await?.settle().await
}

fn forward_outcomes(body: &SidecarBody) -> Vec<TableOutcome> {
    body.tables
        .iter()
        .map(|t| TableOutcome {
            table_key: t.table_key.clone(),
            from_version: t.expected_version,
            to_version: t.confirmed.as_ref().map_or(t.landing_version(), |c| c.version),
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
    let mut updates: Vec<TableUpdate> = body.tables.iter().filter_map(|t| t.confirmed.clone()).collect();
    updates.extend(body.pointers.iter().map(|p| p.update.clone()));
    let mut expected: BTreeMap<String, u64> =
        body.tables.iter().filter(|t| !t.is_create()).map(|t| (t.table_key.clone(), t.expected_version)).collect();
    expected.extend(body.pointers.iter().map(|p| (p.update.table_key.clone(), p.expected_version)));
    let request = PublishRequest {
        branch: body.branch.clone(),
        updates,
        expected_versions: expected,
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: body.token.graph_head.clone(),
        },
        lineage: body.lineage.clone(),
    };
    publish(rt, request, leases).await?;
    promote_schema(rt, body).await?;
    info!(operation_id = %body.operation_id, "rolled forward");
    settle(
        rt,
        store,
        body,
        RecoveryKind::RolledForward,
        Some(body.lineage.published_commit_id().to_string()),
        forward_outcomes(body),
    )
    .await
}

/// A schema apply whose commit is visible: make its staged schema current
/// (the sweep then swaps the schema actor's catalog).
async fn promote_schema(rt: &Runtime, body: &SidecarBody) -> Result<()> {
    // Only main's schema lives in the schema files; a branch's is archived.
    let Some(schema) = body.lineage.schema.as_ref().filter(|_| body.branch == MAIN) else { return Ok(()) };
    named_failpoint!("recovery.before_promote");
    SchemaState::promote(rt.root(), &schema.change.to).await
}

/// A schema apply rolled back: its staged schema files go.
pub(super) async fn discard_schema(rt: &Runtime, body: &SidecarBody) -> Result<()> {
    if body.lineage.schema.is_some() && body.branch == MAIN {
        schema_store::discard_staging(rt.root()).await?;
    }
    Ok(())
}

pub(super) async fn publish(rt: &Runtime, request: PublishRequest, leases: &LeaseSet) -> Result<()> {
    let lease = leases.require(&ChildKey::Branch(request.branch.clone()))?;
    named_failpoint!("recovery.before_publish");
    rt.publish(request, lease).await?;
    named_failpoint!("recovery.after_publish");
    Ok(())
}

/// Remove `branch`'s fork of `t` (and any clone-only tree) through its table actor.
pub(super) async fn reclaim_fork(rt: &Runtime, t: &SidecarTable, branch: &str, leases: &LeaseSet) -> Result<()> {
    let lease = leases.require(&ChildKey::table(&t.table_path, branch))?;
    if rt.reclaim_table_fork(&t.table_path, branch, lease).await? {
        info!(table = %t.table_key, branch, "reclaimed a first-touch fork");
    }
    Ok(())
}

/// Whether another pending sidecar also plans to fork `t` on this branch: a
/// no-effect claimant then leaves the ref to the survivor.
pub(super) async fn claimed_elsewhere(store: &SidecarStore, body: &SidecarBody, t: &SidecarTable) -> Result<bool> {
    for name in crate::recovery::list_pending(store.root()).await? {
        if name == body.object_name() {
            continue;
        }
        if let Some(other) = store.read(&name).await?
            && other.branch == body.branch
            && other.tables.iter().any(|o| o.fork.is_some() && o.table_path == t.table_path)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Discard a sidecar whose branch was deleted (the branch-delete orphaning
/// exception): its effects are unreachable with the branch's authority gone.
/// Reclaims any fork it made, records an `OrphanedBranchDiscarded` audit row,
/// deletes the sidecar. `leases` must hold the branch and the sidecar's tables.
pub async fn discard_orphan(
    rt: &Runtime,
    store: &SidecarStore,
    body: &SidecarBody,
    leases: &LeaseSet,
) -> Result<Resolution> {
    for t in body.tables.iter().filter(|t| t.fork.is_some()) {
        reclaim_fork(rt, t, &body.branch, leases).await?;
    }
    info!(operation_id = %body.operation_id, branch = %body.branch, "discarded a write orphaned by its branch's deletion");
    settle(rt, store, body, RecoveryKind::OrphanedBranchDiscarded, None, vec![]).await
}

/// Record the audit row, then delete the sidecar.
pub(super) async fn settle(
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
    named_failpoint!("recovery.before_audit");
    audit::record(rt.root(), &row).await?;
    named_failpoint!("recovery.after_audit");
    store.delete(&body.object_name()).await?;
    named_failpoint!("recovery.after_sidecar_delete");
    Ok(match kind {
        RecoveryKind::RolledForward => Resolution::RolledForward,
        RecoveryKind::OrphanedBranchDiscarded => Resolution::OrphanDiscarded,
        RecoveryKind::RolledBack => Resolution::RolledBack,
    })
}
