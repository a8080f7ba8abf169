//! The reflog: every move of a branch head, newest first.
//!
//! Most moves are already recorded where they happen: each commit row on a
//! branch's `__manifest` is a move from its parent to itself (a mutation, a
//! load, a merge, a revert…), and each head-move row one to an existing
//! commit (a reset) or a delete or restore of the branch (a deleted branch
//! stays on storage, hidden). Only a create and a purge leave nothing in a
//! manifest that outlives them (a purged branch's manifest goes with it),
//! so they write one small record each under `_refs/reflog/`, named by a
//! ULID (time-ordered), with a create-if-absent PUT.

use serde::{Deserialize, Serialize};

use super::manifest::ManifestState;
use super::manifest::state::{DELETE_MOVE, RESTORE_MOVE};
use super::storage::Root;
use crate::protocol::{OmniError, Result};

/// The directory of branch-control records under the graph root.
pub const REFLOG_DIR: &str = "_refs/reflog";

/// One move of a branch head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReflogEntry {
    /// The branch whose head moved.
    pub branch: String,
    /// The head before (`None`: the branch was created).
    pub old_head: Option<String>,
    /// The head after (`None`: the branch was deleted).
    pub new_head: Option<String>,
    /// What moved it: the commit's writer (`mutation`, `load`, `merge`,
    /// `revert`, …; `commit` on commits from before that was recorded),
    /// `reset`, `create`, `delete`, `restore` or `purge`.
    pub operation: String,
    /// Who moved it.
    pub actor_id: Option<String>,
    /// When, microseconds since the epoch.
    pub at_us: i64,
}

impl ReflogEntry {
    /// When, as RFC 3339.
    pub fn at(&self) -> String {
        chrono::DateTime::from_timestamp_micros(self.at_us)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default()
    }
}

/// The moves `branch`'s manifest records: its own commits and head moves
/// (the rows it inherited at creation are its parent's).
pub fn recorded(branch: &str, state: &ManifestState) -> Result<Vec<ReflogEntry>> {
    let commits = state.commits()?.values().filter(|c| c.branch == branch).map(|c| ReflogEntry {
        branch: branch.to_string(),
        old_head: c.parent.clone(),
        new_head: Some(c.commit_id.clone()),
        operation: c
            .operation
            .clone()
            .unwrap_or_else(|| if c.merged_parent.is_some() { "merge" } else { "commit" }.into()),
        actor_id: c.actor.clone(),
        at_us: c.created_at_us,
    });
    // A delete leaves the head in place but the branch gone; a restore
    // brings a branch back from nothing.
    let moves = state.head_moves().filter(|m| m.branch == branch).map(|m| ReflogEntry {
        branch: branch.to_string(),
        old_head: m.from.clone().filter(|_| m.operation != RESTORE_MOVE),
        new_head: Some(m.to.clone()).filter(|_| m.operation != DELETE_MOVE),
        operation: m.operation.clone(),
        actor_id: m.actor.clone(),
        at_us: m.at_us,
    });
    Ok(commits.chain(moves).collect())
}

/// Record a branch-control move (a create or a delete).
pub async fn record(root: &Root, entry: &ReflogEntry) -> Result<()> {
    let bytes = serde_json::to_vec(entry).map_err(|e| OmniError::Internal(format!("encoding a reflog entry: {e}")))?;
    let path = format!("{REFLOG_DIR}/{}.json", ulid::Ulid::new());
    if root.create(&path, bytes).await? {
        Ok(())
    } else {
        Err(OmniError::Internal(format!("reflog record {path} exists already")))
    }
}

/// Every branch-control record.
pub async fn control_moves(root: &Root) -> Result<Vec<ReflogEntry>> {
    Ok(control_records(root).await?.into_iter().map(|(_, e)| e).collect())
}

/// Every branch-control record with its path (cleanup prunes by path).
pub async fn control_records(root: &Root) -> Result<Vec<(String, ReflogEntry)>> {
    let mut out = Vec::new();
    for path in root.list(REFLOG_DIR).await? {
        if !path.ends_with(".json") {
            continue;
        }
        // Removed (expired) between the listing and the read: gone.
        let Some(bytes) = root.get(&path).await? else { continue };
        let entry = serde_json::from_slice(&bytes)
            .map_err(|e| OmniError::Internal(format!("the reflog record {path} is unreadable: {e}")))?;
        out.push((path, entry));
    }
    Ok(out)
}

/// `entries` newest first (ties: deletes after the commits they ended,
/// then by branch and new head, so one history always lists one way).
pub fn newest_first(mut entries: Vec<ReflogEntry>) -> Vec<ReflogEntry> {
    entries.sort_by(|a, b| {
        (b.at_us, b.new_head.is_none(), &b.branch, &b.new_head).cmp(&(
            a.at_us,
            a.new_head.is_none(),
            &a.branch,
            &a.new_head,
        ))
    });
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(branch: &str, new_head: Option<&str>, at_us: i64) -> ReflogEntry {
        ReflogEntry {
            branch: branch.into(),
            old_head: None,
            new_head: new_head.map(str::to_string),
            operation: "x".into(),
            actor_id: None,
            at_us,
        }
    }

    #[test]
    fn entries_list_newest_first_with_a_delete_after_its_last_commit() {
        let got = newest_first(vec![entry("a", Some("c1"), 1), entry("a", None, 2), entry("a", Some("c2"), 2)]);
        let heads: Vec<Option<&str>> = got.iter().map(|e| e.new_head.as_deref()).collect();
        assert_eq!(heads, vec![None, Some("c2"), Some("c1")]);
        assert_eq!(entry("a", None, 1_700_000_000_000_000).at(), "2023-11-14T22:13:20.000Z");
    }
}
