//! Undo through the embedded handle: `commit revert`, `commit
//! cherry-pick` (see `docs/history.md`, "Revert and cherry-pick") and
//! `branch reset` (`docs/undo.md`).

use super::Graph;
use crate::actors::saga::merge::{MergeReport, MergeRequest};
use crate::actors::saga::reset::{self, ResetReport, ResetRequest};
use crate::actors::saga::revert::{self, Direction, RevertRequest};
use crate::engine::conflict_page::ConflictPage;
use crate::engine::resolution::Resolution;
use crate::engine::three_way::MergeStrategy;
use crate::protocol::{OmniError, Result};

/// How to revert a commit.
#[derive(Debug, Clone, Default)]
pub struct RevertOptions {
    /// The branch that receives the revert commit (`None`: main).
    pub branch: Option<String>,
    /// Of a merge commit: which parent's side to go back to (1: the first,
    /// 2: the merged one). Required for a merge commit, refused otherwise.
    pub mainline: Option<u8>,
    /// Actor recorded on the revert commit.
    pub actor: Option<String>,
    /// Report the outcome and any conflicts; write nothing.
    pub dry_run: bool,
    /// How conflicts with later changes are decided (`None`: the schema's
    /// `@merge` policies; refused where there is none).
    pub strategy: Option<MergeStrategy>,
    /// Decisions for named conflicts.
    pub resolutions: Vec<Resolution>,
    /// Which page of the conflicts a refusal lists.
    pub page: ConflictPage,
}

/// A revert's or cherry-pick's report: the merge it ran, and the commit it
/// moved.
#[derive(Debug, Clone)]
pub struct RevertResult {
    /// The three-way merge that undid the commit (`source_commit_id`: the
    /// parent gone back to; `base_commit_id`: the reverted commit).
    pub report: MergeReport,
    /// The commit reverted or cherry-picked.
    pub commit_id: String,
    /// The parent of a merge commit gone back to.
    pub mainline: Option<u8>,
}

/// How to reset a branch.
#[derive(Debug, Clone, Default)]
pub struct ResetOptions {
    /// Land as a new commit whose content equals the target's, even on a
    /// branch other than main (main always does).
    pub as_commit: bool,
    /// Refuse with [`OmniError::PreconditionFailed`] unless the branch head
    /// is this commit id (a compare-and-swap).
    pub if_commit: Option<String>,
    /// Actor recorded on the commit or the head move.
    pub actor: Option<String>,
    /// Report what would change; write nothing.
    pub dry_run: bool,
}

impl Graph {
    /// Make `branch`'s content equal to `to`'s (any ref naming a commit).
    /// On a branch other than main its head moves to that commit; on main,
    /// or with `as_commit`, one new commit carries the content (see
    /// `docs/undo.md`).
    pub async fn branch_reset(&self, branch: &str, to: &str, opts: &ResetOptions) -> Result<ResetReport> {
        if !opts.dry_run {
            self.require_writable()?;
        }
        let target = self.resolve_commit(to).await?;
        // Read here: a version `cleanup` removed is 410 `gone`.
        let to_state = self.commit_view(&target).await?.state;
        let req = ResetRequest {
            branch: branch.to_string(),
            to: target,
            to_state,
            as_commit: opts.as_commit,
            if_commit: opts.if_commit.clone(),
            actor: opts.actor.clone(),
            dry_run: opts.dry_run,
        };
        reset::run(&self.rt, &req).await
    }

    /// Undo the changes of `commit` (any ref naming a commit) as one new
    /// commit on the branch: inserts deleted, deletes re-inserted with their
    /// exact before-images, updates set back. A later change to the same
    /// entity is a conflict, refused with its values unless a strategy or
    /// resolution decides it; nothing is written then.
    pub async fn commit_revert(&self, commit: &str, opts: &RevertOptions) -> Result<RevertResult> {
        self.move_commit(commit, opts, Direction::Revert).await
    }

    /// Apply the changes of `commit` (any ref naming a commit) again as one
    /// new commit on `opts.branch`: the three-way merge of the commit into
    /// the branch with its parent as base. A change the branch made to the
    /// same entity is a conflict, as in a merge.
    pub async fn commit_cherry_pick(&self, commit: &str, opts: &RevertOptions) -> Result<RevertResult> {
        self.move_commit(commit, opts, Direction::CherryPick).await
    }

    async fn move_commit(&self, commit: &str, opts: &RevertOptions, direction: Direction) -> Result<RevertResult> {
        if !opts.dry_run {
            self.require_writable()?;
        }
        let reverted = self.resolve_commit(commit).await?;
        let parent_id = parent_of(&reverted, opts.mainline)?;
        let Some(parent_id) = parent_id else {
            return Err(OmniError::ParentlessCommit { graph_commit_id: reverted.commit_id.clone() });
        };
        let parent = self.find_commit(&parent_id).await?;
        let merge = MergeRequest {
            source: reverted.commit_id.clone(),
            target: opts.branch.clone().unwrap_or_else(|| crate::engine::branch_name::MAIN.to_string()),
            actor: opts.actor.clone(),
            dry_run: opts.dry_run,
            squash: true,
            memory_bytes: None,
            page: opts.page.clone(),
            strategy: opts.strategy,
            resolutions: opts.resolutions.clone(),
        };
        // Both versions read here: one `cleanup` removed is 410 `gone`.
        let states = (self.commit_view(&reverted).await?.state, self.commit_view(&parent).await?.state);
        let req = RevertRequest { direction, commit: reverted.clone(), parent, states, merge };
        let report = revert::run(&self.rt, &req).await?;
        Ok(RevertResult { report, commit_id: reverted.commit_id, mainline: opts.mainline })
    }
}

/// The parent `commit`'s changes are measured against: the first, or the
/// `mainline` one of a merge commit.
fn parent_of(commit: &crate::engine::manifest::CommitRow, mainline: Option<u8>) -> Result<Option<String>> {
    match (mainline, &commit.merged_parent) {
        (None, None) | (Some(1), Some(_)) => Ok(commit.parent.clone()),
        (Some(2), Some(merged)) => Ok(Some(merged.clone())),
        (None, Some(_)) => Err(OmniError::BadRequest(format!(
            "commit {} is a merge: say which parent to measure its changes against with mainline 1 or 2",
            commit.commit_id
        ))),
        (Some(n), Some(_)) => Err(OmniError::BadRequest(format!("mainline {n}: a merge has parents 1 and 2"))),
        (Some(_), None) => Err(OmniError::BadRequest(format!(
            "commit {} is not a merge: mainline applies to merge commits only",
            commit.commit_id
        ))),
    }
}
