//! Group commit: the mutations that arrive while a branch is busy commit
//! together, through one run of the [`pipeline`](super::pipeline).
//!
//! - A mutation on an idle branch runs alone ([`super::write`]). One that
//!   finds the branch gate held or awaited (or loses the race to it) joins
//!   the branch's [`WriteQueues`] and waits for its answer or the gate.
//! - Whoever gets the gate with its own write unanswered leads: it takes the
//!   queue in arrival order and prepares every member against one capture,
//!   each seeing its predecessors' rows ([`mutation_group`]). A member that
//!   fails on its own is answered with its error; the rest go on.
//! - The included members stage one transaction per touched table and
//!   publish once: one sidecar whose lineage names every member's commit,
//!   one `__manifest` append holding each member's own graph commit, child
//!   of the one before, in arrival order. Recovery rolls the whole group
//!   forward or back, as it does any write.
//! - All members of a group become visible together, at one manifest
//!   version: a read at any member's commit sees the whole group.

use std::sync::Arc;

use tracing::{Instrument, info_span};

use super::pipeline::{self, Attempt, Finished};
use super::write::{self, MAX_PREPARE_ATTEMPTS, WriteIntent, WriteOutcome};
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::actors::write_queue::{MAX_GROUP_MEMBERS, QueuedWrite};
use crate::engine::lang::query::ir::MutationIr;
use crate::engine::manifest::{Lineage, MemberCommit};
use crate::engine::mutation::{self, MutationArgs};
use crate::engine::mutation_group::{self, GroupPlan, Member, MemberEffect, MemberPlan};
use crate::engine::write_plan::{self, Capture};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::WriterKind;

/// Run the mutation `ir` as `intent` says: alone on an idle branch, else in
/// the branch's next group commit. A delete always commits alone.
pub async fn mutate(
    rt: &Arc<Runtime>,
    intent: &WriteIntent,
    ir: Arc<MutationIr>,
    args: MutationArgs,
) -> Result<WriteOutcome> {
    let prepare = |capture: Capture| {
        let (ir, args) = (ir.clone(), args.clone());
        async move { mutation::prepare(&capture, &ir, &args).await }
    };
    if !mutation::groupable(&ir) {
        return write::run(rt, intent, prepare).await;
    }
    if !rt.branch_contended(&intent.branch).await? {
        match write::attempt_kicking(rt, intent, &prepare, false).await {
            // Another write moved the head first: the branch is busy.
            Err(OmniError::ReadSetChanged { .. }) if intent.retry_on_conflict => {}
            other => return other,
        }
    }
    join(rt, intent, ir, args).await
}

/// Queue the write on its branch and wait: for its answer from a group
/// another write leads, or for the branch gate, to lead one itself.
async fn join(
    rt: &Arc<Runtime>,
    intent: &WriteIntent,
    ir: Arc<MutationIr>,
    args: MutationArgs,
) -> Result<WriteOutcome> {
    // Heal before queueing: under a leader's branch gate recovery cannot run.
    write::heal(rt, &intent.branch).await?;
    let (w, mut rx) = QueuedWrite::new(ir, args, intent.actor.clone(), intent.if_commit.clone());
    let id = rt.write_queues().push(&intent.branch, w);
    let _leave = LeaveOnDrop { rt, branch: &intent.branch, id };
    loop {
        let leases = tokio::select! {
            biased;
            out = &mut rx => return answered(out),
            leases = pipeline::lease_branch(rt, &intent.branch) => leases,
        };
        let leases = match leases {
            Ok(leases) => leases,
            // Still queued: nothing of it ran. Taken by a group: its answer is coming.
            Err(e) if rt.write_queues().remove(&intent.branch, id) => return Err(e),
            Err(_) => return answered(rx.await),
        };
        if let Ok(out) = rx.try_recv() {
            return out;
        }
        // The group runs as a task of its own: its members' answers must
        // not depend on this caller staying (a dropped HTTP request).
        let (leader_rt, branch) = (rt.clone(), intent.branch.clone());
        let led = tokio::spawn(async move {
            let members = leader_rt.write_queues().take(&branch, MAX_GROUP_MEMBERS);
            let left = commit_group(&leader_rt, &branch, members, leases).await;
            leader_rt.write_queues().put_back(&branch, left);
        });
        if let Err(e) = led.await {
            tracing::error!(error = %e, branch = %intent.branch, "a group commit's leader stopped");
        }
    }
}

/// Takes a write out of its queue when its caller stops waiting (a dropped
/// request): no later group commits a write nobody waits for. Once a group
/// took it, it is past leaving: that group answers it.
struct LeaveOnDrop<'a> {
    rt: &'a Runtime,
    branch: &'a str,
    id: u64,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        self.rt.write_queues().remove(self.branch, self.id);
    }
}

/// A queued write's answer; a group that stopped before answering (a
/// panic) leaves its outcome to the branch history and recovery.
fn answered(
    out: std::result::Result<Result<WriteOutcome>, tokio::sync::oneshot::error::RecvError>,
) -> Result<WriteOutcome> {
    out.unwrap_or_else(|_| {
        Err(OmniError::Internal(
            "the group commit carrying this write stopped before answering; check the branch history".into(),
        ))
    })
}

/// Commit `members` as groups on `branch`, in order, until every one is
/// answered: the deterministic entry for a caller holding several writes.
pub async fn commit_together(rt: &Runtime, branch: &str, mut members: Vec<QueuedWrite>) -> Result<()> {
    write::heal(rt, branch).await?;
    while !members.is_empty() {
        let leases = pipeline::lease_branch(rt, branch).await?;
        members = commit_group(rt, branch, members, leases).await;
    }
    Ok(())
}

/// Commit `members` as one group under `leases` (the schema and branch
/// gates) and answer each; returns the members to try again in a later
/// group (deferred, or given back before any effect), in order.
async fn commit_group(rt: &Runtime, branch: &str, members: Vec<QueuedWrite>, leases: LeaseSet) -> Vec<QueuedWrite> {
    if members.is_empty() {
        return members;
    }
    let lineages = mint_chain(&members);
    let span = info_span!("saga.group", operation_id = %lineages[0].commit_id, branch, members = members.len());
    let capture = match write::capture_branch(rt, branch).instrument(span.clone()).await {
        Ok(c) => c,
        Err(e) => return answer_all(members, &e),
    };
    let plan = prepare(&capture, &members, &lineages).instrument(span.clone()).await;
    let plan = match plan {
        Ok(plan) => plan,
        // Over a byte limit together: half the group now, the rest after.
        Err(OmniError::ResourceLimitExceeded { .. }) if members.len() > 1 => {
            let mut members = members;
            let later = members.split_off(members.len() / 2);
            let mut left = Box::pin(commit_group(rt, branch, members, leases)).await;
            left.extend(later);
            return left;
        }
        Err(e) => return answer_all(members, &e),
    };
    run(rt, branch, capture, plan, members.into_iter().zip(lineages).collect(), leases).instrument(span).await
}

/// Each member's pre-minted commit, in arrival order; creation times rise
/// strictly (the history orders one manifest version's commits by them).
fn mint_chain(members: &[QueuedWrite]) -> Vec<Lineage> {
    let mut last = i64::MIN;
    members
        .iter()
        .map(|m| {
            let mut l = Lineage::mint(m.actor.clone());
            l.created_at_us = l.created_at_us.max(last.saturating_add(1));
            last = l.created_at_us;
            l
        })
        .collect()
}

async fn prepare(capture: &Capture, members: &[QueuedWrite], lineages: &[Lineage]) -> Result<GroupPlan> {
    let inputs: Vec<Member<'_>> = members
        .iter()
        .zip(lineages)
        .map(|(m, l)| Member { ir: &m.ir, args: &m.args, if_commit: m.if_commit.as_deref(), commit_id: &l.commit_id })
        .collect();
    mutation_group::prepare(capture, &inputs)
        .instrument(info_span!("saga.prepare", operation_id = %lineages[0].commit_id, members = inputs.len()))
        .await
}

/// Answer the members the plan leaves out, run the pipeline for the
/// included ones, and answer them; returns the members for a later group.
async fn run(
    rt: &Runtime,
    branch: &str,
    capture: Capture,
    plan: GroupPlan,
    members: Vec<(QueuedWrite, Lineage)>,
    leases: LeaseSet,
) -> Vec<QueuedWrite> {
    let mut included = Vec::new();
    let mut deferred = Vec::new();
    for ((m, lineage), part) in members.into_iter().zip(plan.members) {
        match part {
            MemberPlan::Included(effect) => included.push((m, lineage, effect)),
            MemberPlan::Empty => m.answer(Ok(WriteOutcome::default())),
            MemberPlan::Rejected(e) => m.answer(Err(e)),
            MemberPlan::Deferred => deferred.push(m),
        }
    }
    let Some((_, first, _)) = included.first() else { return deferred };
    let mut lineage = first.clone();
    lineage.group = included[1..]
        .iter()
        .map(|(_, l, _)| MemberCommit {
            commit_id: l.commit_id.clone(),
            actor: l.actor.clone(),
            created_at_us: l.created_at_us,
        })
        .collect();
    let actor = lineage.actor.clone();
    let attempt = Attempt::new(rt, WriterKind::Mutation, branch, lineage);
    let pins = write_plan::pins(&capture.view);
    let out = async {
        let prepared = pipeline::Prepared::new(attempt, capture.token, pins, plan.prepared, leases)?;
        let armed = prepared.lease().await?.revalidate().await?.arm(actor).await?;
        armed.commit().await?.confirm().await?.publish().await?.finish().await
    }
    .await;
    match out {
        Ok(done) => {
            for (m, lineage, effect) in included {
                m.answer(Ok(outcome(&done, lineage, effect)));
            }
            deferred
        }
        Err(e @ OmniError::ReadSetChanged { .. }) => {
            let mut again = Vec::with_capacity(included.len() + deferred.len());
            for (mut m, ..) in included {
                m.attempts += 1;
                if m.attempts >= MAX_PREPARE_ATTEMPTS { m.answer(Err(e.clone())) } else { again.push(m) }
            }
            again.extend(deferred);
            again
        }
        Err(e) => {
            if matches!(e, OmniError::RecoveryRequired { .. }) {
                write::kick_reconciler(rt).await;
            }
            answer_all(included.into_iter().map(|(m, ..)| m).collect(), &e);
            deferred
        }
    }
}

/// A member's own outcome: its commit, its counts, the pointers of the
/// tables it touched.
fn outcome(done: &Finished, lineage: Lineage, effect: MemberEffect) -> WriteOutcome {
    WriteOutcome {
        commit: done.commits.iter().find(|c| c.commit_id == lineage.commit_id).cloned(),
        commit_id: Some(lineage.commit_id),
        nodes_affected: effect.nodes_affected,
        edges_affected: effect.edges_affected,
        tables: done.tables.iter().filter(|t| effect.rows.contains_key(&t.table_key)).cloned().collect(),
        rows_written: effect.rows,
    }
}

/// Answer every member with `e` (the group failed as a whole).
fn answer_all(members: Vec<QueuedWrite>, e: &OmniError) -> Vec<QueuedWrite> {
    for m in members {
        m.answer(Err(e.clone()));
    }
    vec![]
}
