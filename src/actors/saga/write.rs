//! The direct-publish write saga shared by mutation and load:
//!
//! `prepare` (stage effects; outside all gates unless the branch is busy) →
//! acquire leases (schema shared → branch → sorted tables) → `revalidate` →
//! `arm` (durable sidecar) → `fork` (first touch on a named branch: the table
//! actor creates the table's ref at the inherited version, then the plan is
//! staged on it) → `commit` (each table actor commits exactly) → `confirm`
//! (sidecar EffectsConfirmed) → `publish` (branch actor, one CAS) → `finish`
//! (delete the sidecar, release the leases).
//!
//! Before the first effect a changed authority is `ReadSetChanged`, which an
//! insert-only write answers by preparing again (bounded); after it, any
//! failure is `RecoveryRequired` and the sidecar stays for recovery.

use std::collections::BTreeMap;
use std::future::Future;

use serde::Serialize;
use tracing::{Instrument, debug, info_span};

use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::actors::supervisor::ChildKey;
use crate::engine::manifest::{Lineage, Precondition, PublishRequest, TableUpdate};
use crate::engine::storage::{StagedTxn, table};
use crate::engine::write_plan::{AuthorityToken, Capture, Prepared, PreparedTable, TableEffect};
use crate::protocol::{OmniError, Result};
use crate::recovery::resolve::{Mode, Resolution};
use crate::recovery::sidecar::{EffectPhase, SidecarBody, SidecarStore, SidecarTable, WriterKind};
use crate::recovery::sweep::sweep;
use crate::saga_failpoint;

/// Pre-effect attempts an insert-only write makes before giving up.
pub const MAX_PREPARE_ATTEMPTS: usize = 32;

/// Who writes where, under which caller precondition.
#[derive(Debug, Clone)]
pub struct WriteIntent {
    /// Mutation or load.
    pub kind: WriterKind,
    /// Graph branch.
    pub branch: String,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
    /// Caller precondition: the branch head must be exactly this commit.
    pub if_commit: Option<String>,
    /// Whether a pre-effect authority change is answered by preparing again
    /// (insert-only mutations, append/merge loads) or surfaced (strict writes).
    pub retry_on_conflict: bool,
}

/// The result of a write.
#[derive(Debug, Clone, Serialize)]
pub struct WriteOutcome {
    /// The commit created; `None` for a write with no effect.
    pub commit_id: Option<String>,
    /// Node entities affected.
    pub nodes_affected: u64,
    /// Edge entities affected.
    pub edges_affected: u64,
    /// New table pointers.
    pub tables: Vec<TableUpdate>,
}

/// Run the saga; `prepare` is called once per attempt with a fresh capture.
pub async fn run<F, Fut>(rt: &Runtime, intent: &WriteIntent, prepare: F) -> Result<WriteOutcome>
where
    F: Fn(Capture) -> Fut,
    Fut: Future<Output = Result<Prepared>>,
{
    let mut last = None;
    for attempt in 0..MAX_PREPARE_ATTEMPTS {
        // On a busy branch (or after losing a race once) the attempt holds
        // the branch gate while it prepares: nothing can move the head under
        // it, so no prepare is wasted and no writer starves through the
        // retry budget. An idle branch prepares outside the gates.
        let gated = attempt > 0 || rt.branch_contended(&intent.branch).await?;
        match attempt_once(rt, intent, &prepare, gated).await {
            Err(e @ OmniError::RecoveryRequired { .. }) => {
                // Let the reconciler resolve it in the background once our gates are free.
                if let Err(kick) = rt.reconcile_soon().await {
                    debug!(error = %kick, "could not ask for a recovery pass");
                }
                return Err(e);
            }
            Err(e @ OmniError::ReadSetChanged { .. }) if intent.retry_on_conflict => {
                debug!(attempt, error = %e, "authority changed before any effect; preparing again");
                last = Some(e);
            }
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| OmniError::Internal("write made no attempt".into())))
}

async fn attempt_once<F, Fut>(rt: &Runtime, intent: &WriteIntent, prepare: &F, gated: bool) -> Result<WriteOutcome>
where
    F: Fn(Capture) -> Fut,
    Fut: Future<Output = Result<Prepared>>,
{
    // The operation id is minted up front so every step's span carries it.
    let lineage = Lineage::mint(intent.actor.clone());
    let span =
        info_span!("saga", operation_id = %lineage.commit_id, kind = ?intent.kind, branch = %intent.branch, gated);
    attempt_steps(rt, intent, prepare, lineage, gated).instrument(span).await
}

async fn attempt_steps<F, Fut>(
    rt: &Runtime,
    intent: &WriteIntent,
    prepare: &F,
    lineage: Lineage,
    gated: bool,
) -> Result<WriteOutcome>
where
    F: Fn(Capture) -> Fut,
    Fut: Future<Output = Result<Prepared>>,
{
    let store = SidecarStore::new(rt.root().clone());
    // The heal lists `__recovery/` once (a clean graph costs one listing).
    // Only what it had to defer is still pending: a sidecar armed since then
    // belongs to a live writer, and the check under the gates settles it.
    for (_, resolution) in sweep(rt, Mode::RollForwardOnly).await? {
        if let Resolution::Deferred { operation_id, branch, reason } = resolution
            && branch == intent.branch
        {
            return Err(OmniError::RecoveryRequired { operation_id, reason });
        }
    }
    let mut leases = if gated { acquire_branch(rt, intent).await? } else { LeaseSet::default() };
    let capture = capture(rt, intent).await?;
    let token = capture.token.clone();
    let pins: BTreeMap<String, u64> = capture.view.state.tables.iter().map(|(k, t)| (k.clone(), t.version)).collect();
    let prepared = prepare(capture).instrument(info_span!("saga.prepare", branch = %intent.branch)).await?;
    saga_failpoint!(intent.kind, "after_prepare");
    if prepared.tables.is_empty() {
        return Ok(WriteOutcome { commit_id: None, nodes_affected: 0, edges_affected: 0, tables: vec![] });
    }
    if !gated {
        leases = acquire_branch(rt, intent).await?;
    }
    acquire_tables(rt, intent, &prepared, &mut leases).await?;
    saga_failpoint!(intent.kind, "after_leases");
    revalidate(rt, &store, intent, &token, &pins, &prepared).await?;
    saga_failpoint!(intent.kind, "after_revalidate");
    effects(rt, &store, intent, token, prepared, &leases, lineage).await
}

/// The recovery barrier: a pending sidecar on this branch blocks the write.
async fn refuse_if_recovery_pending(rt: &Runtime, store: &SidecarStore, branch: &str) -> Result<()> {
    for name in rt.pending_sidecars().await? {
        match store.read(&name).await {
            Ok(Some(body)) if body.branch != branch => continue,
            Ok(None) => continue,
            Ok(Some(body)) => {
                return Err(OmniError::RecoveryRequired {
                    operation_id: body.operation_id,
                    reason: format!(
                        "an unresolved {:?} on branch `{branch}` must be recovered first",
                        body.writer_kind
                    ),
                });
            }
            Err(e) => {
                return Err(OmniError::RecoveryRequired { operation_id: name, reason: e.to_string() });
            }
        }
    }
    Ok(())
}

async fn capture(rt: &Runtime, intent: &WriteIntent) -> Result<Capture> {
    let view = rt.view(&intent.branch).await?;
    let schema = rt.schema().await?;
    let head = view.state.head(&intent.branch).map(str::to_string);
    if let Some(expected) = &intent.if_commit {
        let actual = view.state.effective_head(&intent.branch).map(|c| c.commit_id.clone()).unwrap_or_default();
        if *expected != actual {
            return Err(OmniError::PreconditionFailed { expected: expected.clone(), actual });
        }
    }
    let token = AuthorityToken {
        branch_id: view.branch_id.clone(),
        graph_head: head,
        schema_identity: schema.identity.clone(),
    };
    Ok(Capture::new(rt.root().clone(), view, schema, token))
}

/// The schema (shared) and branch gates, in gate order.
async fn acquire_branch(rt: &Runtime, intent: &WriteIntent) -> Result<LeaseSet> {
    let mut leases = LeaseSet::default();
    leases.push(rt.lease_schema(LeaseMode::Shared).await?);
    leases.push(rt.lease_branch(&intent.branch).await?);
    Ok(leases)
}

/// The touched tables' gates, sorted, after the branch gate.
async fn acquire_tables(rt: &Runtime, intent: &WriteIntent, prepared: &Prepared, leases: &mut LeaseSet) -> Result<()> {
    let mut uris: Vec<&str> = prepared.tables.iter().map(|t| t.uri.as_str()).collect();
    uris.sort_unstable();
    for uri in uris {
        leases.push(rt.lease_table(uri, &intent.branch).await?);
    }
    Ok(())
}

/// Under the gates: nothing new to recover, the token still holds, and every
/// touched table's live HEAD equals its manifest pin.
async fn revalidate(
    rt: &Runtime,
    store: &SidecarStore,
    intent: &WriteIntent,
    token: &AuthorityToken,
    pins: &BTreeMap<String, u64>,
    prepared: &Prepared,
) -> Result<()> {
    refuse_if_recovery_pending(rt, store, &intent.branch).await?;
    let view = rt.view(&intent.branch).await?;
    let changed = |member: &str, expected: String, actual: String| {
        Err(OmniError::ReadSetChanged { member: member.to_string(), expected, actual })
    };
    if view.branch_id != token.branch_id {
        return changed("branch_identifier", token.branch_id.to_string(), view.branch_id.to_string());
    }
    let head = view.state.head(&intent.branch).map(str::to_string);
    if head != token.graph_head {
        let show = |h: &Option<String>| h.clone().unwrap_or_else(|| "<none>".into());
        return changed(&format!("graph_head:{}", intent.branch), show(&token.graph_head), show(&head));
    }
    let schema = rt.schema().await?;
    if schema.identity != token.schema_identity {
        return changed("schema_identity", token.schema_identity.clone(), schema.identity.clone());
    }
    for t in &prepared.tables {
        let now = view.state.tables.get(&t.table_key).map(|e| e.version);
        if now != Some(t.pin) || pins.get(&t.table_key) != Some(&t.pin) {
            return changed(&t.table_key, format!("v{}", t.pin), now.map_or("<dropped>".into(), |v| format!("v{v}")));
        }
        if t.fork().is_none() {
            let live = rt.table_head(&t.uri, &intent.branch).await?;
            if live != t.pin {
                return Err(OmniError::Drift { table: t.table_key.clone(), pinned: t.pin, head: live });
            }
        } else if table::list_branches(&t.uri).await?.contains_key(&intent.branch) {
            // A first touch needs the target ref absent (a clone-only tree
            // without a ref is garbage the fork reclaims); a ref the manifest
            // does not point at is a leftover no sidecar claims.
            return Err(OmniError::BranchConflict {
                branch: intent.branch.clone(),
                reason: format!(
                    "{} has a stale fork for this branch that the manifest does not point at; \
                     delete and recreate the branch to reclaim it",
                    t.table_key
                ),
            });
        }
    }
    Ok(())
}

/// Why the effect phase stopped.
enum EffectError {
    /// The first table commit was refused before anything landed: no effect
    /// exists, the sidecar is gone, and the attempt may be prepared again.
    NoEffect(OmniError),
    /// Something failed after the sidecar was armed.
    AfterArm(OmniError),
}

impl From<OmniError> for EffectError {
    fn from(e: OmniError) -> Self {
        EffectError::AfterArm(e)
    }
}

async fn effects(
    rt: &Runtime,
    store: &SidecarStore,
    intent: &WriteIntent,
    token: AuthorityToken,
    prepared: Prepared,
    leases: &LeaseSet,
    lineage: Lineage,
) -> Result<WriteOutcome> {
    let op = lineage.commit_id.clone();
    let mut tables = prepared.tables;
    tables.sort_by(|a, b| a.table_key.cmp(&b.table_key));
    let body = SidecarBody {
        schema_version: 0,
        operation_id: op.clone(),
        writer_kind: intent.kind,
        branch: intent.branch.clone(),
        actor: intent.actor.clone(),
        started_at_us: lineage.created_at_us,
        phase: EffectPhase::Armed,
        token: token.clone(),
        tables: tables
            .iter()
            .map(|t| SidecarTable {
                table_key: t.table_key.clone(),
                table_path: t.uri.clone(),
                table_branch: t.table_branch.clone(),
                expected_version: t.pin,
                planned: t.identity(),
                confirmed: None,
                fork: t.fork().cloned(),
            })
            .collect(),
        lineage: lineage.clone(),
        rollback_commit_id: ulid::Ulid::new().to_string(),
    };
    let _live = rt.track_live(&op);
    // A failed PUT here means nothing was armed and nothing happened.
    let armed = store.arm(body).instrument(info_span!("saga.arm", operation_id = %op)).await?;
    let counts = (prepared.nodes_affected, prepared.edges_affected);
    match apply(rt, store, intent, token, tables, armed, lineage, leases).await {
        Ok(landed) => {
            Ok(WriteOutcome { commit_id: Some(op), nodes_affected: counts.0, edges_affected: counts.1, tables: landed })
        }
        Err(EffectError::NoEffect(e)) => Err(e),
        Err(EffectError::AfterArm(e)) => Err(OmniError::RecoveryRequired { operation_id: op, reason: e.to_string() }),
    }
}

/// Everything after the sidecar is armed: commit each table exactly, confirm,
/// publish once, finish. Any failure leaves the sidecar for recovery.
#[allow(clippy::too_many_arguments)]
async fn apply(
    rt: &Runtime,
    store: &SidecarStore,
    intent: &WriteIntent,
    token: AuthorityToken,
    tables: Vec<PreparedTable>,
    armed: crate::recovery::sidecar::ArmedSidecar,
    lineage: Lineage,
    leases: &LeaseSet,
) -> std::result::Result<Vec<TableUpdate>, EffectError> {
    let op = lineage.commit_id.clone();
    saga_failpoint!(intent.kind, "after_arm");
    let expected: BTreeMap<String, u64> = tables.iter().map(|t| (t.table_key.clone(), t.pin)).collect();
    let staged = stage_forks(rt, intent, tables, leases).await?;
    let mut landed = Vec::with_capacity(staged.len());
    let forked = staged.iter().any(|t| t.forked);
    for t in staged {
        let lease = leases.require(&ChildKey::table(&t.uri, &intent.branch))?;
        let committed = match rt.commit(&intent.branch, t.txn, lease).await {
            Ok(c) => c,
            Err(e @ OmniError::ReadSetChanged { .. }) if landed.is_empty() && !forked => {
                // The exact guard refused before anything landed (and no fork exists).
                store.delete(&armed.body().object_name()).await?;
                return Err(EffectError::NoEffect(e));
            }
            Err(e) => return Err(OmniError::Internal(format!("committing {}: {e}", t.table_key)).into()),
        };
        landed.push(TableUpdate::committed(&t.table_key, t.table_branch.as_deref(), &committed));
        saga_failpoint!(intent.kind, "after_table_commit");
    }
    let confirmed =
        armed.confirm(store, landed.clone()).instrument(info_span!("saga.confirm", operation_id = %op)).await?;
    saga_failpoint!(intent.kind, "after_confirm");
    let request = PublishRequest {
        branch: intent.branch.clone(),
        updates: landed.clone(),
        expected_versions: expected,
        precondition: Precondition::ExactHead { branch_id: token.branch_id, head: token.graph_head },
        lineage,
    };
    rt.publish(request, leases.require(&ChildKey::Branch(intent.branch.clone()))?).await?;
    saga_failpoint!(intent.kind, "after_publish");
    confirmed.finish(store).instrument(info_span!("saga.finish", operation_id = %op)).await;
    Ok(landed)
}

/// A table whose transaction is staged on the ref it commits to.
struct ReadyTable {
    table_key: String,
    uri: String,
    table_branch: Option<String>,
    /// Whether this write created the ref (a first touch).
    forked: bool,
    txn: StagedTxn,
}

/// With the sidecar armed: create every first-touch fork at its exact
/// inherited version, then stage its plan on the fork under the pre-minted
/// identity. Returns every table with its staged transaction, in order.
async fn stage_forks(
    rt: &Runtime,
    intent: &WriteIntent,
    tables: Vec<PreparedTable>,
    leases: &LeaseSet,
) -> std::result::Result<Vec<ReadyTable>, EffectError> {
    let mut out = Vec::with_capacity(tables.len());
    for t in tables {
        let PreparedTable { table_key, uri, table_branch, effect, .. } = t;
        let (forked, txn) = match effect {
            TableEffect::Staged(txn) => (false, *txn),
            TableEffect::Fork { fork, plan, identity } => {
                let lease = leases.require(&ChildKey::table(&uri, &intent.branch))?;
                let span = info_span!("saga.fork", table = %table_key, from_version = fork.parent_version);
                let ds = rt.fork_table(&uri, &intent.branch, fork, lease).instrument(span).await?;
                saga_failpoint!(intent.kind, "after_fork");
                let staged = table::stage(ds, plan, &identity.uuid).await?;
                let txn = staged.ok_or_else(|| {
                    OmniError::Internal(format!("{table_key}: the planned effect staged nothing on the fork"))
                })?;
                (true, txn)
            }
        };
        out.push(ReadyTable { table_key, uri, table_branch, forked, txn });
    }
    Ok(out)
}
