//! Branch control through the embedded handle (see `docs/branches.md`).

use super::Graph;
use crate::actors::saga::branch_control::{self, BranchInfo, DeleteOptions, DeletedBranch};
use crate::actors::saga::branch_restore::{self, RestoredBranch};
use crate::actors::saga::merge::{self, MergeReport, MergeRequest};
use crate::engine::conflict_page::ConflictPage;
use crate::engine::resolution::Resolution;
use crate::engine::three_way::MergeStrategy;
use crate::protocol::{OmniError, Result};

impl Graph {
    /// Create branch `name` from the current head of `from`. Reads of the new
    /// branch see exactly `from`'s head; writes to it are isolated from `from`.
    pub async fn branch_create(&self, name: &str, from: &str) -> Result<BranchInfo> {
        self.branch_create_as(name, from, None).await
    }

    /// [`Graph::branch_create`], recording `actor` in the reflog.
    pub async fn branch_create_as(&self, name: &str, from: &str, actor: Option<&str>) -> Result<BranchInfo> {
        self.require_writable()?;
        branch_control::create(&self.rt, name, from, actor.map(str::to_string)).await
    }

    /// Every live branch, main first.
    pub async fn branch_list(&self) -> Result<Vec<BranchInfo>> {
        branch_control::list(&self.rt).await
    }

    /// Delete branch `name`: hidden from every read and write, restorable
    /// with [`Graph::branch_restore`] until `cleanup` purges it past the
    /// reflog window (see `docs/undo.md`, "Branch restore").
    pub async fn branch_delete(&self, name: &str) -> Result<DeletedBranch> {
        self.branch_delete_with(name, &DeleteOptions::default()).await
    }

    /// [`Graph::branch_delete`] with options: `purge` removes the branch and
    /// every table fork made for it now, for good.
    pub async fn branch_delete_with(&self, name: &str, opts: &DeleteOptions) -> Result<DeletedBranch> {
        self.require_writable()?;
        branch_control::delete(&self.rt, name, opts).await
    }

    /// Bring back deleted branch `name` at the head it had, or at commit
    /// `at` of its history (a head its reflog names). A branch purged since
    /// is [`OmniError::Gone`].
    pub async fn branch_restore(&self, name: &str, at: Option<&str>, actor: Option<&str>) -> Result<RestoredBranch> {
        self.require_writable()?;
        let mut restored = branch_restore::restore(&self.rt, name, at, actor.map(str::to_string)).await?;
        // A head of its history other than the last: restored, then reset
        // there (a crash between leaves it restored at its last head).
        if let Some(at) = at.filter(|at| *at != restored.head_commit_id) {
            let opts = super::ResetOptions { actor: actor.map(str::to_string), ..super::ResetOptions::default() };
            let reset = self.branch_reset(name, at, &opts).await?;
            restored.head_commit_id = reset.graph_commit_id.unwrap_or(reset.to_commit_id);
        }
        Ok(restored)
    }

    /// Merge the head of `source` into `target` (see `docs/branches.md`,
    /// "Merge"): one commit on `target` whose second parent is that head, or
    /// nothing when the target is up to date. Conflicts are refused all
    /// together with [`OmniError::MergeConflicts`], before anything is written.
    pub async fn branch_merge(&self, source: &str, target: &str, opts: &MergeOptions) -> Result<MergeResult> {
        if !opts.dry_run {
            self.require_writable()?;
        }
        let req = MergeRequest {
            source: source.to_string(),
            target: target.to_string(),
            actor: opts.actor.clone(),
            dry_run: opts.dry_run,
            squash: opts.squash,
            memory_bytes: opts.memory_bytes,
            page: opts.page.clone(),
            strategy: opts.strategy,
            resolutions: opts.resolutions.clone(),
        };
        let report = merge::run(&self.rt, &req).await?;
        let deleted = if opts.delete_branch && !opts.dry_run {
            Some(merge::delete_merged_source(&self.rt, source, opts.actor.clone()).await)
        } else {
            None
        };
        Ok(MergeResult {
            report,
            branch_deleted: deleted.as_ref().map(|d| d.0),
            branch_delete_error: deleted.and_then(|d| d.1),
        })
    }

    /// Create `name` from `from` unless it exists (what `load --from` does
    /// before loading). Returns whether this call created it.
    pub async fn ensure_branch(&self, name: &str, from: &str) -> Result<bool> {
        match self.rt.view(name).await {
            Ok(_) => return Ok(false),
            Err(OmniError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        match self.branch_create(name, from).await {
            Ok(_) => Ok(true),
            // Created concurrently by someone else: it exists, which is all we need.
            Err(OmniError::BranchConflict { reason, .. }) if reason.contains("already exists") => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// How to merge.
#[derive(Debug, Clone, Default)]
pub struct MergeOptions {
    /// Actor recorded on the merge commit.
    pub actor: Option<String>,
    /// Report the outcome, per-table counts and conflicts; write nothing.
    pub dry_run: bool,
    /// One commit on the target with the source's net changes and no merged
    /// parent (the source branch is untouched).
    pub squash: bool,
    /// Delete the source branch after a successful merge (a failure to
    /// delete does not fail the merge).
    pub delete_branch: bool,
    /// Memory one table's row fingerprints may hold before the merge spills
    /// them to partitions on disk (`None`: 256 MiB). A smaller budget trades
    /// speed for memory; the result is the same.
    pub memory_bytes: Option<u64>,
    /// Which page of the conflicts a refusal lists (`next_page_token` of
    /// the refusal before, and a page size).
    pub page: ConflictPage,
    /// How row conflicts are decided; `None` (the default): by the schema's
    /// `@merge` policies, and refused where there is none.
    pub strategy: Option<MergeStrategy>,
    /// Decisions for named row conflicts, applied in the merge commit
    /// (over the strategy; see `docs/branches.md`, "Resolutions").
    pub resolutions: Vec<Resolution>,
}

/// A merge's report, and what became of the source branch.
#[derive(Debug, Clone)]
pub struct MergeResult {
    /// What the merge did.
    pub report: MergeReport,
    /// With `delete_branch`: whether the source was deleted.
    pub branch_deleted: Option<bool>,
    /// With `delete_branch`: why the source could not be deleted.
    pub branch_delete_error: Option<String>,
}
