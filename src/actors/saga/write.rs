//! The direct-publish write saga shared by mutation and load: the write-entry
//! heal, a capture of the authority token, the writer's `prepare` (outside
//! all gates unless the branch is busy), then the typestate
//! [`pipeline`](super::pipeline): leases (schema shared → branch → sorted
//! tables) → revalidate → arm (durable sidecar) → commit (first-touch forks,
//! then each table actor commits exactly) → confirm (EffectsConfirmed) →
//! publish (branch actor, one CAS) → finish (delete the sidecar, release the
//! leases).
//!
//! Before the first effect a changed authority is `ReadSetChanged`, which an
//! insert-only write answers by preparing again (bounded); after it, any
//! failure is `RecoveryRequired` and the sidecar stays for recovery.

use std::future::Future;

use tracing::{Instrument, debug, info_span};

use super::pipeline::{self, Attempt};
use super::recovery::resolve::Mode;
use super::recovery::sweep::{Scope, sweep};
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::engine::manifest::Lineage;
pub use crate::engine::write_plan::WriteOutcome;
use crate::engine::write_plan::{self, AuthorityToken, Capture, Prepared};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::WriterKind;

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
        match attempt_kicking(rt, intent, &prepare, gated).await {
            Err(e @ OmniError::ReadSetChanged { .. }) if intent.retry_on_conflict => {
                debug!(attempt, error = %e, "authority changed before any effect; preparing again");
                last = Some(e);
            }
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| OmniError::Internal("write made no attempt".into())))
}

/// One attempt; a `RecoveryRequired` answer asks the reconciler to resolve
/// the sidecar in the background once the gates are free.
pub(super) async fn attempt_kicking<F, Fut>(
    rt: &Runtime,
    intent: &WriteIntent,
    prepare: &F,
    gated: bool,
) -> Result<WriteOutcome>
where
    F: Fn(Capture) -> Fut,
    Fut: Future<Output = Result<Prepared>>,
{
    let out = attempt_once(rt, intent, prepare, gated).await;
    if let Err(OmniError::RecoveryRequired { .. }) = &out {
        kick_reconciler(rt).await;
    }
    out
}

/// Ask for a background recovery pass (the writer's answer does not wait).
pub(super) async fn kick_reconciler(rt: &Runtime) {
    if let Err(kick) = rt.reconcile_soon().await {
        debug!(error = %kick, "could not ask for a recovery pass");
    }
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
    heal(rt, &intent.branch).await?;
    let leases = if gated { pipeline::lease_branch(rt, &intent.branch).await? } else { LeaseSet::default() };
    let capture = capture(rt, intent).await?;
    let token = capture.token.clone();
    let pins = write_plan::pins(&capture.view);
    let plan = prepare(capture).instrument(info_span!("saga.prepare", branch = %intent.branch)).await?;
    let attempt = Attempt::new(rt, intent.kind, &intent.branch, lineage);
    let prepared = pipeline::Prepared::new(attempt, token, pins, plan, leases)?;
    if prepared.is_empty() {
        return Ok(WriteOutcome::default());
    }
    let armed = prepared.lease().await?.revalidate().await?.arm(intent.actor.clone()).await?;
    let done = armed.commit().await?.confirm().await?.publish().await?.finish().await?;
    Ok(WriteOutcome {
        commit: done.commits.into_iter().find(|c| c.commit_id == done.commit_id),
        commit_id: Some(done.commit_id),
        nodes_affected: done.nodes_affected,
        edges_affected: done.edges_affected,
        tables: done.tables,
        rows_written: done.rows_written,
    })
}

/// The write-entry heal: roll forward what is confirmed on `branch`. It
/// lists `__recovery/` once (a clean graph costs one listing). Only intents
/// relevant to this branch are healed or block it: a sidecar kept on
/// another branch leaves this one writable. A sidecar armed since then
/// belongs to a live writer, and the check under the gates settles it.
pub(super) async fn heal(rt: &Runtime, branch: &str) -> Result<()> {
    let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(branch)).await?;
    match healed.iter().find_map(|(_, r)| r.blocks(branch)) {
        Some(blocked) => Err(blocked),
        None => Ok(()),
    }
}

async fn capture(rt: &Runtime, intent: &WriteIntent) -> Result<Capture> {
    let capture = capture_branch(rt, &intent.branch).await?;
    let view = &capture.view;
    if let Some(expected) = &intent.if_commit {
        let actual = view.state.effective_head(&intent.branch).map(|c| c.commit_id.clone()).unwrap_or_default();
        if *expected != actual {
            return Err(OmniError::PreconditionFailed { expected: expected.clone(), actual });
        }
    }
    Ok(capture)
}

/// The branch's latest view and the accepted schema, with their token.
pub(super) async fn capture_branch(rt: &Runtime, branch: &str) -> Result<Capture> {
    let view = rt.view(branch).await?;
    let schema = rt.schema_of(&view).await?;
    let token = AuthorityToken::of(&view, &schema.identity);
    Ok(Capture::new(rt.root().clone(), view, schema, token))
}
