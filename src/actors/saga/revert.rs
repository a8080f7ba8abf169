//! The revert and cherry-pick writers: one new commit on a branch whose
//! effect is the inverse of one commit's changes (revert) or those changes
//! again (cherry-pick).
//!
//! A cherry-pick is the three-way merge of the commit into the branch with
//! its parent as the base: exactly its changes, applied where the branch
//! did not change the same entities. A revert is the mirror: the three-way
//! merge of the commit's parent into the branch,
//! with the commit itself as the base: measured from the commit, the parent
//! is exactly its changes undone, and the branch is everything written
//! since. So an entity a later commit changed again is a conflict (with the
//! commit's value as `base`, the branch's as `ours` and the reverted one as
//! `theirs`), strategies and resolutions decide them as in a merge, and
//! the result lands through the merge's pipeline as one single-parent
//! commit (a squash: the parent's history is the branch's already).

use tracing::{Instrument, info_span};

use super::gates::Gates;
use super::merge::{self, MergeReport, MergeRequest, Sides};
use crate::actors::lease::LeaseMode;
use crate::actors::runtime::Runtime;
use std::sync::Arc;

use crate::engine::manifest::{CommitRow, Lineage, ManifestState};
use crate::engine::merge::Outcome;
use crate::protocol::{OmniError, Result};

/// Which way a commit's changes go onto the branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Undo them.
    Revert,
    /// Apply them again.
    CherryPick,
}

/// What to revert or cherry-pick, and where.
#[derive(Debug, Clone)]
pub struct RevertRequest {
    /// Undo or apply again.
    pub direction: Direction,
    /// The commit whose changes are undone or applied.
    pub commit: CommitRow,
    /// The parent they are measured against (the first, or the mainline
    /// parent of a merge commit).
    pub parent: CommitRow,
    /// The tables at `commit` and at `parent` (read by the caller, which
    /// tells a version `cleanup` removed from an unknown one).
    pub states: (Arc<ManifestState>, Arc<ManifestState>),
    /// The branch (`target`), actor, dry run, page, strategy and
    /// resolutions, as a merge takes them (`source` names the commit).
    pub merge: MergeRequest,
}

/// Revert or cherry-pick `req.commit` on `req.merge.target`.
pub async fn run(rt: &Runtime, req: &RevertRequest) -> Result<MergeReport> {
    let m = &req.merge;
    m.page.check()?;
    for r in &m.resolutions {
        r.check().map_err(OmniError::BadRequest)?;
    }
    if let Some(change) = &req.commit.schema_change {
        return Err(OmniError::BadRequest(format!(
            "commit {} applied a schema change ({} to {}); {} moves data changes, not a schema",
            req.commit.commit_id,
            change.from,
            change.to,
            if req.direction == Direction::Revert { "a revert" } else { "a cherry-pick" }
        )));
    }
    let kind = if req.direction == Direction::Revert { "revert" } else { "cherry_pick" };
    let lineage = Lineage {
        operation: Some(kind.to_string()),
        source_commit_id: Some(req.commit.commit_id.clone()),
        ..Lineage::mint(m.actor.clone())
    };
    let span =
        info_span!("saga", operation_id = %lineage.commit_id, kind, commit = %req.commit.commit_id, branch = %m.target);
    attempt(rt, req, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &RevertRequest, lineage: Lineage) -> Result<MergeReport> {
    let m = &req.merge;
    merge::heal_target(rt, m).await?;
    let leases = Gates::schema(LeaseMode::Shared).branch(&m.target).acquire(rt).await?;
    let target = rt.history_view(&m.target).await?;
    let head = target.state.effective_head(&m.target).map(|c| c.commit_id.clone());
    let head = head.ok_or_else(|| OmniError::Internal(format!("branch `{}` has no commit", m.target)))?;
    // A revert merges the parent with the commit as base; a cherry-pick the reverse.
    let ((commit_state, parent_state), (c, p)) = (&req.states, (&req.commit, &req.parent));
    let ((base, base_state), (source, source_state)) = match req.direction {
        Direction::Revert => ((c, commit_state), (p, parent_state)),
        Direction::CherryPick => ((p, parent_state), (c, commit_state)),
    };
    let report = MergeReport::new(m, Outcome::Merged, &source.commit_id, &base.commit_id);
    let sides = Sides {
        base: base_state.clone(),
        source: source_state.clone(),
        source_branch: None,
        target: &target,
        heads: (req.commit.commit_id.clone(), head),
        source_is_newer: false,
        schema_exclusive: false,
    };
    merge::land(rt, m, sides, leases, lineage, report).await
}
