//! Branch control through the embedded handle (see `docs/branches.md`).

use super::Graph;
use crate::actors::saga::branch_control::{self, BranchInfo, DeletedBranch};
use crate::protocol::Result;

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
}
