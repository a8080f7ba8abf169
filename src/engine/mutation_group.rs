//! Preparing a group commit: mutations that queued on a busy branch, run in
//! arrival order against one capture, each seeing the rows of the members
//! before it, as if each had committed alone right after its predecessor.
//!
//! A member that fails on its own (validation, a missing endpoint, its
//! `--if-commit`) is rejected alone: the staging returns to the checkpoint
//! taken before it, and the members after it never see its rows. A member
//! that would push a table past the per-mutation admission limits together
//! with the members before it is deferred to the next group. What is left
//! stages as one transaction per touched table.

use std::collections::{BTreeMap, BTreeSet};

use crate::engine::lang::query::ir::MutationIr;
use crate::engine::mutation::{self, MutationArgs};
use crate::engine::staging::{MAX_ENTITIES_PER_TABLE, MutationStaging};
use crate::engine::write_plan::{Capture, Prepared};
use crate::protocol::{OmniError, Result};
use tracing::{Instrument, info_span};

/// One queued mutation.
pub struct Member<'a> {
    /// The mutation (insert/update-only: [`mutation::groupable`]).
    pub ir: &'a MutationIr,
    /// Its parameters and `now()`.
    pub args: &'a MutationArgs,
    /// Its caller's precondition: the head just before it in the chain.
    pub if_commit: Option<&'a str>,
    /// Its pre-minted graph commit (the head the next member sees).
    pub commit_id: &'a str,
}

/// What one member's part of the group is.
#[derive(Debug)]
pub enum MemberPlan {
    /// In the group's commit, with what it changed itself.
    Included(MemberEffect),
    /// It changes nothing: answered with no commit.
    Empty,
    /// Refused on its own; the other members go on.
    Rejected(OmniError),
    /// Over the per-table admission limits together with the members before
    /// it: the next group takes it.
    Deferred,
}

/// What one included member changed.
#[derive(Debug, Default)]
pub struct MemberEffect {
    /// Node entities it inserted or updated.
    pub nodes_affected: u64,
    /// Edge entities it inserted or updated.
    pub edges_affected: u64,
    /// Rows it put, per touched table key.
    pub rows: BTreeMap<String, u64>,
}

/// A prepared group: the combined plan and each member's part, in order.
#[derive(Debug)]
pub struct GroupPlan {
    /// One staged transaction per table any included member touched.
    pub prepared: Prepared,
    /// Each member's part, in the order given.
    pub members: Vec<MemberPlan>,
}

/// Run `members` in order against `capture` and stage what the included
/// ones changed. An error here is the whole group's (a storage failure
/// while staging); a member's own failure is its [`MemberPlan::Rejected`].
pub async fn prepare(capture: &Capture, members: &[Member<'_>]) -> Result<GroupPlan> {
    if let Some(m) = members.iter().find(|m| !mutation::groupable(m.ir)) {
        return Err(OmniError::Internal(format!("a group member deletes ({}): deletes commit alone", m.commit_id)));
    }
    let mut staging = MutationStaging::new(capture);
    let mut head = capture.view.state.effective_head(&capture.view.branch).map(|c| c.commit_id.clone());
    let mut plans = Vec::with_capacity(members.len());
    for m in members {
        // Past a deferred member every later one waits too: the chain keeps arrival order.
        if matches!(plans.last(), Some(MemberPlan::Deferred)) {
            plans.push(MemberPlan::Deferred);
            continue;
        }
        let actual = head.clone().unwrap_or_default();
        if let Some(expected) = m.if_commit.filter(|e| *e != actual) {
            let expected = expected.to_string();
            plans.push(MemberPlan::Rejected(OmniError::PreconditionFailed { expected, actual }));
            continue;
        }
        let before = staging.checkpoint();
        let plan = run_member(&mut staging, m).instrument(info_span!("prepare.member")).await;
        if !matches!(plan, MemberPlan::Included(_)) {
            staging.rewind(before);
        } else {
            head = Some(m.commit_id.to_string());
        }
        plans.push(plan);
    }
    let mut prepared = Prepared::default();
    for effect in plans.iter().filter_map(|p| if let MemberPlan::Included(e) = p { Some(e) } else { None }) {
        prepared.nodes_affected += effect.nodes_affected;
        prepared.edges_affected += effect.edges_affected;
    }
    prepared.tables = staging.stage_all().instrument(info_span!("prepare.stage")).await?;
    Ok(GroupPlan { prepared, members: plans })
}

/// One member on top of what the members before it staged.
async fn run_member(staging: &mut MutationStaging<'_>, m: &Member<'_>) -> MemberPlan {
    staging.take_touched();
    if let Err(e) = mutation::execute(staging, m.ir, m.args).await {
        return MemberPlan::Rejected(e);
    }
    let touched = staging.take_touched();
    if touched.is_empty() {
        return MemberPlan::Empty;
    }
    if let Some(plan) = over_limits(staging, &touched) {
        return plan;
    }
    if let Err(e) = mutation::validate_changeset(staging, Some(&touched)).await {
        return MemberPlan::Rejected(e);
    }
    let mut effect = MemberEffect::default();
    for t in staging.tables().filter(|t| touched.contains_key(&t.table_key)) {
        let ids = &touched[&t.table_key];
        let n = ids.len() as u64;
        if t.is_edge {
            effect.edges_affected += n;
        } else {
            effect.nodes_affected += n;
        }
        let put = ids.iter().filter(|id| t.pending.contains_key(*id)).count() as u64;
        effect.rows.insert(t.table_key.clone(), put);
    }
    MemberPlan::Included(effect)
}

/// A member over the entity limit on its own is refused as it would be
/// alone; one over it only with the members before it waits for the next
/// group.
fn over_limits(staging: &MutationStaging<'_>, touched: &BTreeMap<String, BTreeSet<String>>) -> Option<MemberPlan> {
    for t in staging.tables().filter(|t| touched.contains_key(&t.table_key)) {
        let own = touched[&t.table_key].len() as u64;
        if own > MAX_ENTITIES_PER_TABLE {
            return Some(MemberPlan::Rejected(OmniError::ResourceLimitExceeded {
                resource: format!("entities staged for {}", t.table_key),
                limit: MAX_ENTITIES_PER_TABLE,
                actual: own,
            }));
        }
        if (t.pending.len() + t.deleted.len()) as u64 > MAX_ENTITIES_PER_TABLE {
            return Some(MemberPlan::Deferred);
        }
    }
    None
}
