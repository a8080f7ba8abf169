//! Branch control through the embedded handle (see `docs/branches.md`).

use super::Graph;
use crate::actors::saga::branch_control::{self, BranchInfo, DeletedBranch};
use crate::protocol::{OmniError, Result};

impl Graph {
    /// Create branch `name` from the current head of `from`. Reads of the new
    /// branch see exactly `from`'s head; writes to it are isolated from `from`.
    pub async fn branch_create(&self, name: &str, from: &str) -> Result<BranchInfo> {
        self.require_writable()?;
        branch_control::create(&self.rt, name, from).await
    }

    /// Every live branch, main first.
    pub async fn branch_list(&self) -> Result<Vec<BranchInfo>> {
        branch_control::list(&self.rt).await
    }

    /// Delete branch `name` and every table fork made for it.
    pub async fn branch_delete(&self, name: &str) -> Result<DeletedBranch> {
        self.require_writable()?;
        branch_control::delete(&self.rt, name).await
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
