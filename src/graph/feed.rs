//! The change feed: one branch's commits in first-parent order, each a
//! block of the entities it changed against its first parent, and the
//! baseline a consumer starts from.
//!
//! The caller owns its place ([`FeedToken`]): a poll resolves where it
//! starts, captures the branch head as its cut, and hands out a cursor only
//! after complete commits. With `wait`, a poll that finds nothing new waits
//! on the branch's head signal (no task of its own) until a commit lands or
//! the wait ends.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::diff::{ChangeCause, DEFAULT_PAGE, EntityChange, MAX_PAGE};
use super::refs::ReadAt;
use super::{Export, Graph, ReadTarget};
use crate::engine::branch_name::{self, MAIN};
use crate::engine::diff::DiffFilter;
use crate::engine::feed::{FeedScope, FeedStart, FeedToken};
use crate::engine::manifest::{CommitRow, ManifestView};
use crate::protocol::{OmniError, Result};

/// The longest a poll waits for a commit.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// How often a waiting poll reads the head again, for commits its own
/// process did not publish (another process's, a replica's source's).
fn recheck_every(writable: bool) -> Duration {
    if writable { Duration::from_secs(1) } else { Duration::from_millis(200) }
}

/// Where a poll starts.
#[derive(Debug, Clone)]
pub enum FeedFrom {
    /// A cursor from an earlier poll or a baseline.
    Cursor(String),
    /// A first poll.
    Start(FeedStart),
    /// The next page of a poll that ended inside a block.
    PageToken(String),
}

/// One poll.
#[derive(Debug, Clone)]
pub struct FeedRequest {
    /// The branch followed (default main).
    pub branch: Option<String>,
    /// Where it starts.
    pub from: FeedFrom,
    /// Which changes blocks carry (blocks themselves are never skipped).
    pub filter: DiffFilter,
    /// Changes per page (default [`DEFAULT_PAGE`], at most [`MAX_PAGE`]).
    pub limit: Option<usize>,
    /// How long to wait for a commit when there is none (at most [`MAX_WAIT`]).
    pub wait: Option<Duration>,
}

/// One commit's block: `{cause, changes}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChangeBlock {
    /// The commit.
    pub cause: ChangeCause,
    /// Its changes (this page's part of them).
    pub changes: Vec<EntityChange>,
}

/// One poll's answer: `{blocks, next_page_token?, cursor?, caught_up?}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FeedPage {
    /// Blocks, oldest first; the last may be partial when
    /// `next_page_token` is set.
    pub blocks: Vec<ChangeBlock>,
    /// Continues this poll inside its last block; never a cursor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
    /// Where to resume after this page's complete blocks (terminal pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// On a terminal page: whether the head the poll captured was reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caught_up: Option<bool>,
}

/// A baseline's handshake: the commit its snapshot is exactly, and the
/// cursor that resumes the feed right after it.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineHandshake {
    /// The commit the snapshot reads.
    pub snapshot_commit_id: String,
    /// Resume the feed here once the snapshot is installed.
    pub resume_cursor: String,
}

/// A baseline: the export to stream, then its handshake.
pub struct Baseline {
    /// Every entity the filter's kinds and types select, at the commit.
    pub export: Export,
    /// Sent after the last snapshot record.
    pub handshake: BaselineHandshake,
}

/// A poll's resolved start: the last commit delivered whole, and where
/// inside a block a page token resumes (its cut, block and inner token).
struct Position {
    last: Option<String>,
    resume: Option<(String, String, String)>,
}

impl Graph {
    /// Poll the change feed of a branch: see [`FeedRequest`].
    pub async fn changes_poll(&self, req: &FeedRequest) -> Result<FeedPage> {
        let branch = req.branch.as_deref().unwrap_or(MAIN);
        branch_name::validate_ref(branch)?;
        let wait = req.wait.unwrap_or_default();
        if wait > MAX_WAIT {
            return Err(OmniError::BadRequest(format!("wait {}s: at most {}s", wait.as_secs(), MAX_WAIT.as_secs())));
        }
        let limit = req.limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(OmniError::BadRequest(format!("limit {limit}: a page holds 1 to {MAX_PAGE} changes")));
        }
        let head = self.rt.history_view(branch).await?;
        req.filter.check(&head, &head)?;
        let scope = self.feed_scope(&head, &req.filter).await?;
        let at = self.feed_position(&head, &scope, &req.from).await?;
        let deadline = tokio::time::Instant::now() + wait;
        // The first page reads the view the position was resolved on.
        let mut first = Some(head);
        loop {
            // Subscribe before reading the head, so a commit landing in
            // between still wakes the wait below.
            let mut moved = self.rt.head_moves(branch);
            let view = match first.take() {
                Some(v) => v,
                None => self.rt.history_view(branch).await?,
            };
            let page = self.feed_page(&view, &scope, &at, req, limit).await?;
            let now = tokio::time::Instant::now();
            if !page.blocks.is_empty() || page.cursor.is_none() || now >= deadline {
                return Ok(page);
            }
            let recheck = (now + recheck_every(self.mode == super::OpenMode::ReadWrite)).min(deadline);
            tokio::select! {
                _ = moved.changed() => {}
                _ = tokio::time::sleep_until(recheck) => {}
            }
        }
    }

    /// How many polls of `branch`'s feed wait for a commit now.
    pub fn feed_waiters(&self, branch: &str) -> usize {
        self.rt.head_waiters(branch)
    }

    /// An exact snapshot of `branch` (default main) at its head, of the
    /// kinds and types `filter` selects, and the cursor that resumes the
    /// feed (with `filter`) right after it.
    pub async fn changes_baseline(&self, branch: Option<&str>, filter: &DiffFilter) -> Result<Baseline> {
        let branch = branch.unwrap_or(MAIN);
        branch_name::validate_ref(branch)?;
        let head = self.rt.history_view(branch).await?;
        filter.check(&head, &head)?;
        let scope = self.feed_scope(&head, filter).await?;
        let commit = head_commit(&head)?;
        let export = self.export(&ReadTarget::Commit(commit.commit_id.clone()), &[]).await?;
        let export = export.keep(|t| filter.keeps_table(&t.table_key));
        let resume_cursor = FeedToken::Cursor { scope, last: Some(commit.commit_id.clone()) }.encode()?;
        Ok(Baseline { export, handshake: BaselineHandshake { snapshot_commit_id: commit.commit_id, resume_cursor } })
    }

    /// What a cursor of `head`'s branch with `filter` binds.
    async fn feed_scope(&self, head: &ManifestView, filter: &DiffFilter) -> Result<FeedScope> {
        let graph = self.genesis_commit().await?;
        let mut canonical = filter.clone();
        canonical.types.sort();
        canonical.types.dedup();
        canonical.ops.sort();
        canonical.ops.dedup();
        let filter = serde_json::to_string(&canonical).map_err(|e| OmniError::Internal(format!("a filter: {e}")))?;
        Ok(FeedScope { graph, branch: head.branch.clone(), incarnation: head.branch_id.to_string(), filter })
    }

    /// The graph's first commit: what makes its cursors its own.
    async fn genesis_commit(&self) -> Result<String> {
        let id = self
            .genesis
            .get_or_try_init(|| async {
                let main = self.rt.history_view(MAIN).await?;
                let commits = main.state.commits()?;
                let first = commits.values().filter(|c| c.parent.is_none()).min_by_key(|c| c.manifest_version);
                first
                    .map(|c| c.commit_id.clone())
                    .ok_or_else(|| OmniError::Internal("main has no parentless commit".into()))
            })
            .await?;
        Ok(id.clone())
    }

    /// Resolve where a poll starts.
    async fn feed_position(&self, head: &ManifestView, scope: &FeedScope, from: &FeedFrom) -> Result<Position> {
        let last = match from {
            FeedFrom::Cursor(text) => match FeedToken::decode(text, "cursor", scope)? {
                FeedToken::Cursor { last, .. } => last,
                FeedToken::Page { .. } => return Err(OmniError::Internal("decode let a page token through".into())),
            },
            FeedFrom::PageToken(text) => match FeedToken::decode(text, "page token", scope)? {
                FeedToken::Page { last, cut, block, inner, .. } => {
                    return Ok(Position { last, resume: Some((cut, block, inner)) });
                }
                FeedToken::Cursor { .. } => return Err(OmniError::Internal("decode let a cursor through".into())),
            },
            FeedFrom::Start(FeedStart::Now) => Some(head_commit(head)?.commit_id),
            FeedFrom::Start(FeedStart::Beginning) => None,
            FeedFrom::Start(FeedStart::After(id)) => {
                let (_, found) = self.first_parents(head, &head_commit(head)?.commit_id, Some(id.as_str())).await?;
                if !found {
                    return Err(OmniError::BadRequest(format!(
                        "start after:{id}: no commit `{id}` on branch `{}`'s first-parent history",
                        scope.branch
                    )));
                }
                Some(id.clone())
            }
        };
        Ok(Position { last, resume: None })
    }

    /// The commits from `from` back along first parents, newest first,
    /// stopping before `stop` (and whether `stop` was met).
    async fn first_parents(
        &self,
        view: &ManifestView,
        from: &str,
        stop: Option<&str>,
    ) -> Result<(Vec<CommitRow>, bool)> {
        let mut out = Vec::new();
        let mut next = Some(from.to_string());
        while let Some(id) = next {
            if stop == Some(id.as_str()) {
                return Ok((out, true));
            }
            let row = self.commit_in(view, &id).await?;
            next = row.parent.clone();
            out.push(row);
        }
        Ok((out, stop.is_none()))
    }

    /// One page from `at`: complete blocks while the page has room, then
    /// the part of one more that fits.
    async fn feed_page(
        &self,
        view: &ManifestView,
        scope: &FeedScope,
        at: &Position,
        req: &FeedRequest,
        limit: usize,
    ) -> Result<FeedPage> {
        let cut = match &at.resume {
            Some((cut, _, _)) => cut.clone(),
            None => head_commit(view)?.commit_id,
        };
        let (mut chain, found) = self.first_parents(view, &cut, at.last.as_deref()).await?;
        if !found {
            let last = at.last.as_deref().unwrap_or_default();
            return Err(OmniError::BadRequest(format!(
                "change cursor rejected: commit `{last}` is no longer on branch `{}`'s first-parent history",
                scope.branch
            )));
        }
        chain.reverse();
        let gap = |commit: &CommitRow| {
            let cursor = match &req.from {
                FeedFrom::Cursor(c) => Some(c.clone()),
                _ => None,
            };
            let id = commit.commit_id.clone();
            move |e: OmniError| match e {
                OmniError::CommitCleaned { .. } => OmniError::ChangeFeedGap { cursor, first_unreadable_commit_id: id },
                other => other,
            }
        };
        let (mut blocks, mut budget, mut last) = (Vec::new(), limit, at.last.clone());
        let mut parent: Option<ReadAt> = None;
        for row in &chain {
            if budget == 0 {
                let cursor = FeedToken::Cursor { scope: scope.clone(), last }.encode()?;
                return Ok(FeedPage { blocks, next_page_token: None, cursor: Some(cursor), caught_up: Some(false) });
            }
            let this = self.commit_view(row).await.map_err(gap(row))?;
            let this = ReadAt { view: this, commit_id: row.commit_id.clone() };
            let before = match parent.take() {
                Some(p) => p,
                None => self.parent_of(view, row, &this).await.map_err(gap(row))?,
            };
            let inner = at.resume.as_ref().filter(|(_, block, _)| *block == row.commit_id).map(|(_, _, t)| t.as_str());
            let page = self.block_page(row, before, this.clone(), &req.filter, inner, Some(budget)).await?;
            budget = budget.saturating_sub(page.changes.len().max(1));
            blocks.push(ChangeBlock { cause: page.cause, changes: page.changes });
            if let Some(inner) = page.next_page_token {
                let (block, cut) = (row.commit_id.clone(), cut.clone());
                let token = FeedToken::Page { scope: scope.clone(), last, cut, block, inner }.encode()?;
                return Ok(FeedPage { blocks, next_page_token: Some(token), cursor: None, caught_up: None });
            }
            last = Some(row.commit_id.clone());
            parent = Some(this);
        }
        let cursor = FeedToken::Cursor { scope: scope.clone(), last }.encode()?;
        Ok(FeedPage { blocks, next_page_token: None, cursor: Some(cursor), caught_up: Some(true) })
    }

    /// What `row` is diffed against: its first parent's state, or, for the
    /// graph's first commit, an empty graph (everything in it is new).
    async fn parent_of(&self, branch: &ManifestView, row: &CommitRow, this: &ReadAt) -> Result<ReadAt> {
        let Some(parent) = &row.parent else {
            let mut empty = (*this.view.state).clone();
            empty.tables.clear();
            let view = ManifestView { state: std::sync::Arc::new(empty), ..this.view.clone() };
            return Ok(ReadAt { view, commit_id: String::new() });
        };
        let parent_row = self.commit_in(branch, parent).await?;
        let view = self.commit_view(&parent_row).await?;
        Ok(ReadAt { view, commit_id: parent.clone() })
    }
}

/// The head commit of a view's branch.
fn head_commit(view: &ManifestView) -> Result<CommitRow> {
    let head = view.state.effective_head(&view.branch).cloned();
    head.ok_or_else(|| OmniError::NotFound(format!("a head commit on branch `{}`", view.branch)))
}
