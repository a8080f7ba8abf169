//! The reset writer: make a branch's content equal to another commit's.
//!
//! Two modes, named in the answer:
//! - `moved_head` (a branch other than main, by default): the branch head
//!   moves to the target commit. The commits after it stay in the manifest
//!   (the head move records where the head was) but leave the branch's
//!   history.
//! - `commit` (main, or `as_commit` anywhere): one new single-parent commit
//!   whose content equals the target's, so history stays linear.
//!
//! Either way the tables reach the target's content through the merge's
//! pipeline: the three-way merge of the target into the branch with the
//! branch's own head as the base, so every difference is the target's side
//! and nothing conflicts (exact transactions, a sidecar, the same recovery).
//! Only the publish differs: a head move publishes the new table pins with
//! a head row naming the target and a head-move record instead of a commit
//! (`Lineage::reset_to`).

use std::sync::Arc;

use serde::Serialize;
use tracing::{Instrument, info_span};

use super::gates::Gates;
use super::merge::{self, MergeReport, MergeRequest, Sides};
use crate::actors::lease::LeaseMode;
use crate::actors::runtime::Runtime;
use crate::engine::branch_name::MAIN;
use crate::engine::conflict_page::ConflictPage;
use crate::engine::manifest::{CommitRow, Lineage, ManifestState};
use crate::engine::merge::{Outcome, TableReport};
use crate::protocol::{OmniError, Result};

/// How a reset lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResetMode {
    /// The branch head moved to the target commit.
    MovedHead,
    /// A new commit whose content equals the target's.
    Commit,
}

/// What to reset, and to what.
#[derive(Debug, Clone)]
pub struct ResetRequest {
    /// The branch reset.
    pub branch: String,
    /// The commit it is reset to.
    pub to: CommitRow,
    /// The tables at `to` (read by the caller, which tells a version
    /// `cleanup` removed from an unknown one).
    pub to_state: Arc<ManifestState>,
    /// Land as a new commit even on a branch other than main.
    pub as_commit: bool,
    /// Refuse (412) unless the branch head is this commit.
    pub if_commit: Option<String>,
    /// Actor recorded on the commit or the head move.
    pub actor: Option<String>,
    /// Report what would change; write nothing.
    pub dry_run: bool,
}

/// What a reset did (or, for a dry run, would do).
#[derive(Debug, Clone, Serialize)]
pub struct ResetReport {
    /// The branch reset.
    pub branch: String,
    /// How it landed.
    pub mode: ResetMode,
    /// `reset`, or `already_up_to_date` when the head was the target.
    pub outcome: &'static str,
    /// The head before the reset.
    pub from_commit_id: String,
    /// The commit reset to.
    pub to_commit_id: String,
    /// The head after it: the new commit, or the target for a head move
    /// (`None` for a dry run or when nothing was written).
    pub graph_commit_id: Option<String>,
    /// The operation id (a head move's record in the reflog).
    pub operation_id: String,
    /// Per changed table: what the reset writes.
    pub tables: Vec<TableReport>,
    /// Whether nothing was written because this was a dry run.
    pub dry_run: bool,
}

/// Reset `req.branch` to `req.to`.
pub async fn run(rt: &Runtime, req: &ResetRequest) -> Result<ResetReport> {
    let mode = if req.as_commit || req.branch == MAIN { ResetMode::Commit } else { ResetMode::MovedHead };
    let mut lineage = Lineage {
        operation: Some("reset".into()),
        source_commit_id: Some(req.to.commit_id.clone()),
        ..Lineage::mint(req.actor.clone())
    };
    if mode == ResetMode::MovedHead {
        lineage.reset_to = Some(req.to.clone());
    }
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "reset", branch = %req.branch, to = %req.to.commit_id);
    attempt(rt, req, mode, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &ResetRequest, mode: ResetMode, lineage: Lineage) -> Result<ResetReport> {
    let m = MergeRequest {
        source: req.to.commit_id.clone(),
        target: req.branch.clone(),
        actor: req.actor.clone(),
        dry_run: req.dry_run,
        squash: true,
        memory_bytes: None,
        page: ConflictPage::default(),
        strategy: None,
        resolutions: vec![],
    };
    merge::heal_target(rt, &m).await?;
    let leases = Gates::schema(LeaseMode::Shared).branch(&req.branch).acquire(rt).await?;
    let target = rt.history_view(&req.branch).await?;
    let head = target.state.effective_head(&req.branch).cloned();
    let head = head.ok_or_else(|| OmniError::Internal(format!("branch `{}` has no commit", req.branch)))?;
    if let Some(expected) = &req.if_commit
        && *expected != head.commit_id
    {
        return Err(OmniError::PreconditionFailed { expected: expected.clone(), actual: head.commit_id });
    }
    check_target(req, mode, &target.state, &head)?;
    let mut report = ResetReport {
        branch: req.branch.clone(),
        mode,
        outcome: "reset",
        from_commit_id: head.commit_id.clone(),
        to_commit_id: req.to.commit_id.clone(),
        graph_commit_id: None,
        operation_id: lineage.commit_id.clone(),
        tables: vec![],
        dry_run: req.dry_run,
    };
    if head.commit_id == req.to.commit_id {
        report.outcome = "already_up_to_date";
        return Ok(report);
    }
    let sides = Sides {
        base: target.state.clone(),
        source: req.to_state.clone(),
        source_branch: None,
        target: &target,
        heads: (req.to.commit_id.clone(), head.commit_id.clone()),
        source_is_newer: false,
        schema_exclusive: false,
    };
    let merged = MergeReport::new(&m, Outcome::Merged, &req.to.commit_id, &head.commit_id);
    let merged = merge::land(rt, &m, sides, leases, lineage, merged).await?;
    report.tables = merged.tables;
    report.graph_commit_id = match mode {
        ResetMode::Commit => merged.graph_commit_id,
        ResetMode::MovedHead => merged.graph_commit_id.map(|_| req.to.commit_id.clone()),
    };
    Ok(report)
}

/// A reset keeps the branch's schema: the target must bind the one its head
/// binds. A head move needs the target in the branch's own history (its
/// manifest holds the target's ancestry); any other commit lands as a commit.
fn check_target(req: &ResetRequest, mode: ResetMode, state: &ManifestState, head: &CommitRow) -> Result<()> {
    let (ours, theirs) = (state.schema_applied_at(&head.commit_id), req.to_state.schema_applied_at(&req.to.commit_id));
    if ours != theirs {
        return Err(OmniError::BadRequest(format!(
            "commit {} was written under another schema than branch `{}`'s head; a reset does not change the schema",
            req.to.commit_id, req.branch
        )));
    }
    if mode == ResetMode::MovedHead && !state.commits()?.contains_key(&req.to.commit_id) {
        return Err(OmniError::BadRequest(format!(
            "commit {} is not in the history of branch `{}`, so its head cannot move there; reset with as_commit \
             (`--as-commit`) to make its content a new commit",
            req.to.commit_id, req.branch
        )));
    }
    Ok(())
}
