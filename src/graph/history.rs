//! Snapshots, commit history and the merge base of two branches.

use serde::Serialize;

use super::Graph;
use super::refs::Resolved;
use crate::engine::branch_name::MAIN;
use crate::engine::manifest::{self, CommitRow, ManifestView, STAMP};
use crate::engine::storage::table;
use crate::protocol::{OmniError, Result};

/// One table in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TableSnapshot {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Pinned Lance version.
    pub version: u64,
    /// Native Lance branch holding it (`None` = main).
    pub table_branch: Option<String>,
    /// Live rows at that version.
    pub row_count: u64,
    /// The table's dataset path, relative to the graph root.
    pub table_path: String,
}

/// What a branch head shows: every table's pin, the head commit, the stamp.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Graph branch.
    pub branch: String,
    /// Head commit id.
    pub head_commit_id: Option<String>,
    /// `__manifest` version read.
    pub manifest_version: u64,
    /// Storage format stamp.
    pub storage_stamp: u32,
    /// Tables sorted by key.
    pub tables: Vec<TableSnapshot>,
    /// How this graph's writes reach storage (`fsync`, `none`,
    /// `object_store`): see [`crate::engine::storage::Root::durability`].
    pub durability: &'static str,
}

/// One graph commit, as users see it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CommitInfo {
    /// Commit ULID.
    pub commit_id: String,
    /// First parent.
    pub parent_commit_id: Option<String>,
    /// Merged parent, for merge commits.
    pub merged_parent_commit_id: Option<String>,
    /// Who made it.
    pub actor: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// Creation time in microseconds since the Unix epoch.
    pub created_at_us: i64,
    /// `__manifest` version it produced.
    pub manifest_version: u64,
    /// The writer that made it (`None` on commits from before it was recorded).
    pub operation: Option<String>,
    /// The commit a revert undid, a cherry-pick applied or a reset took the
    /// content of.
    pub source_commit_id: Option<String>,
    /// Graph branch it was made on.
    pub branch: String,
}

impl From<&CommitRow> for CommitInfo {
    fn from(c: &CommitRow) -> Self {
        let created_at = chrono::DateTime::from_timestamp_micros(c.created_at_us)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        CommitInfo {
            commit_id: c.commit_id.clone(),
            parent_commit_id: c.parent.clone(),
            merged_parent_commit_id: c.merged_parent.clone(),
            actor: c.actor.clone(),
            created_at,
            created_at_us: c.created_at_us,
            manifest_version: c.manifest_version,
            branch: c.branch.clone(),
            operation: c.operation.clone(),
            source_commit_id: c.source_commit_id.clone(),
        }
    }
}

impl Graph {
    /// The state at a ref (a branch: its head; see [`Graph::resolve_ref`]).
    pub async fn snapshot(&self, target: &str) -> Result<Snapshot> {
        let view = self.read_at(target).await?.view;
        Ok(snapshot_of(&view, self.root().durability()))
    }

    /// Commits reachable from a ref (a branch: its head), newest first.
    pub async fn commits(&self, target: &str, limit: Option<usize>) -> Result<Vec<CommitInfo>> {
        let start = match self.resolve_ref(target).await? {
            Resolved::Head(b) => {
                let view = self.rt.history_view(&b).await?;
                match view.state.effective_head(&b) {
                    Some(head) => head.clone(),
                    None => return Ok(Vec::new()),
                }
            }
            Resolved::Commit(c) => *c,
        };
        let view = self.rt.history_view(&start.branch).await?;
        let history = view.state.history(&start.commit_id)?;
        Ok(history.into_iter().take(limit.unwrap_or(usize::MAX)).map(CommitInfo::from).collect())
    }

    /// The commit a ref names (a commit id, a tag, `main~2`, …).
    pub async fn commit(&self, target: &str) -> Result<CommitInfo> {
        self.resolve_commit(target).await.map(|c| CommitInfo::from(&c))
    }

    /// Commit `id` from `view`'s history when it holds it (a branch's own
    /// first parents, the usual case), else from whichever live branch
    /// recorded it ([`Self::find_commit`]).
    pub(super) async fn commit_in(&self, view: &ManifestView, id: &str) -> Result<CommitRow> {
        match view.state.commits()?.get(id) {
            Some(c) => Ok(c.clone()),
            None => self.find_commit(id).await,
        }
    }

    /// Find commit `id`: main first, then every live branch.
    pub(super) async fn find_commit(&self, id: &str) -> Result<CommitRow> {
        if let Some(c) = self.rt.history_view(MAIN).await?.state.commits()?.get(id) {
            return Ok(c.clone());
        }
        for name in table::branch_names(&manifest::uri(self.root())).await? {
            match self.rt.history_view(&name).await {
                Ok(view) => {
                    if let Some(c) = view.state.commits()?.get(id) {
                        return Ok(c.clone());
                    }
                }
                Err(OmniError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(OmniError::NotFound(format!("commit `{id}`")))
    }

    /// The manifest a found commit produced, as reads at it need it (no
    /// commit history: [`manifest::load_at`]). A commit still recorded on a
    /// live branch whose manifest version is gone was removed by cleanup.
    pub(super) async fn commit_view(&self, commit: &CommitRow) -> Result<ManifestView> {
        match manifest::load_at(self.root(), &commit.branch, commit.manifest_version).await {
            Err(OmniError::NotFound(what)) => {
                let live = commit.branch == MAIN
                    || table::native_branch(&manifest::uri(self.root()), &commit.branch).await?.is_some();
                Err(if live {
                    OmniError::CommitCleaned { commit_id: commit.commit_id.clone() }
                } else {
                    OmniError::NotFound(what)
                })
            }
            other => other,
        }
    }

    /// The merge base of two branches' heads: their best common ancestor commit.
    pub async fn merge_base(&self, a: &str, b: &str) -> Result<Option<String>> {
        let (va, vb) = (self.rt.history_view(a).await?, self.rt.history_view(b).await?);
        let (Some(ha), Some(hb)) = (va.state.effective_head(a), vb.state.effective_head(b)) else {
            return Ok(None);
        };
        let commits = manifest::merge_base::joint_dag(&va.state, &vb.state)?;
        Ok(manifest::merge_base::merge_base(&commits, &ha.commit_id, &hb.commit_id))
    }
}

pub(super) fn snapshot_of(view: &ManifestView, durability: &'static str) -> Snapshot {
    let tables = view
        .state
        .tables
        .values()
        .map(|t| TableSnapshot {
            table_key: t.table_key.clone(),
            version: t.version,
            table_branch: t.branch.clone(),
            row_count: t.row_count,
            table_path: t.location.clone(),
        })
        .collect();
    Snapshot {
        branch: view.branch.clone(),
        head_commit_id: view.state.effective_head(&view.branch).map(|c| c.commit_id.clone()),
        manifest_version: view.version,
        storage_stamp: STAMP,
        tables,
        durability,
    }
}
