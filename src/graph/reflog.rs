//! The reflog through the embedded handle (see `docs/undo.md`, "Reflog").

use super::Graph;
use crate::engine::branch_name::MAIN;
use crate::engine::manifest;
use crate::engine::reflog::{self, ReflogEntry};
use crate::engine::storage::table;
use crate::protocol::{OmniError, Result};

impl Graph {
    /// Every move of a branch head (of `branch`, or of every branch),
    /// newest first, at most `limit`: its commits, resets, creation,
    /// deletion, restores and purge. A branch neither live nor with a recorded move is `NotFound`.
    pub async fn reflog(&self, branch: Option<&str>, limit: Option<usize>) -> Result<Vec<ReflogEntry>> {
        let mut names = vec![MAIN.to_string()];
        names.extend(table::branch_names(&manifest::uri(self.root())).await?);
        let mut entries = Vec::new();
        for name in names.iter().filter(|n| branch.is_none_or(|b| b == n.as_str())) {
            // A deleted branch's moves stay listed while it can be restored.
            match self.rt.peek(name, true).await {
                Ok(view) => entries.extend(reflog::recorded(name, &view.state)?),
                // Deleted between the listing and the read.
                Err(OmniError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        let control = reflog::control_moves(self.root()).await?;
        entries.extend(control.into_iter().filter(|e| branch.is_none_or(|b| b == e.branch)));
        // A live branch may have none (created before creates were recorded).
        if let Some(b) = branch
            && entries.is_empty()
            && !names.iter().any(|n| n == b)
        {
            return Err(OmniError::NotFound(format!("branch `{b}` (no move of it is recorded)")));
        }
        let mut out = reflog::newest_first(entries);
        out.truncate(limit.unwrap_or(usize::MAX));
        Ok(out)
    }
}
