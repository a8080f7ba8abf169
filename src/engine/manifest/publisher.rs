//! The manifest publisher: one exact append to `__manifest` per attempt,
//! admitted only as the next version of the manifest branch read. Two
//! commits on one branch therefore always conflict (the loser re-reads and
//! re-checks its precondition): that is the compare-and-swap. Appending
//! costs what the commit writes, not what the history holds.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use tracing::{Instrument, debug, info_span};

use super::rows::{
    self, CommitRow, HeadMoveRow, HeadRow, ManifestRow, SchemaChange, TableReg, TableVersionRow, TombstoneRow,
};
use super::state::ManifestState;
use super::{BranchId, ManifestView};
use crate::engine::storage::table::{self, RowAppendError};
use crate::engine::storage::{CommittedTxn, Root};
use crate::protocol::{OmniError, Result};

/// Retries on Lance write contention, each re-reading the manifest.
pub const PUBLISHER_RETRY_BUDGET: usize = 5;

/// A new version pointer for one table. Built only by
/// [`TableUpdate::committed`] (a write's landed transaction) or
/// [`TableUpdate::recovered`] (a version recovery found on storage), or
/// [`TableUpdate::adopted`] (a merge adopting a published version): the
/// sealed field keeps every other code path from inventing a pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableUpdate {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// New visible Lance version.
    pub version: u64,
    /// Native Lance branch holding it (`None` = main).
    pub branch: Option<String>,
    /// Live rows at that version.
    pub row_count: u64,
    #[serde(skip)]
    sealed: Sealed,
}

/// Private to this module: only its constructors can build a [`TableUpdate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Sealed;

impl TableUpdate {
    /// The pointer to a transaction that landed (the only way from a write to
    /// a publishable update).
    pub fn committed(table_key: &str, branch: Option<&str>, txn: &CommittedTxn) -> Self {
        Self::at(table_key, branch, txn.version, txn.row_count)
    }

    /// The pointer recovery or repair publishes for a version it read back
    /// from storage (a roll-back's restore, an adopted drift): never a
    /// version a write planned but did not observe.
    pub fn recovered(table_key: &str, branch: Option<&str>, version: u64, row_count: u64) -> Self {
        Self::at(table_key, branch, version, row_count)
    }

    /// The pointer a merge adopts: a version the source branch already
    /// published (`entry`), now made visible on the target with no data moved.
    pub fn adopted(entry: &super::TableEntry) -> Self {
        Self::at(&entry.table_key, entry.branch.as_deref(), entry.version, entry.row_count)
    }

    fn at(table_key: &str, branch: Option<&str>, version: u64, row_count: u64) -> Self {
        TableUpdate {
            table_key: table_key.to_string(),
            version,
            branch: branch.filter(|b| *b != "main").map(str::to_string),
            row_count,
            sealed: Sealed,
        }
    }
}

/// What the publisher must find before it writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Precondition {
    /// Append to whatever the head is (control-plane commits; never for
    /// validation-sensitive writes).
    Any,
    /// The branch must still be the same incarnation at exactly this head
    /// (`None` = the branch has no head row of its own yet).
    ExactHead {
        /// Captured native branch identifier of the manifest branch.
        branch_id: BranchId,
        /// Captured `graph_head:<branch>`.
        head: Option<String>,
    },
}

/// The lineage of the commit to create; the id is minted before publishing so
/// recovery can publish the same commit again idempotently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lineage {
    /// Pre-minted ULID.
    pub commit_id: String,
    /// Who makes it.
    pub actor: Option<String>,
    /// Second parent for merges.
    pub merged_parent: Option<String>,
    /// Creation time, µs since the epoch.
    pub created_at_us: i64,
    /// A schema apply's registry change, published with the commit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<SchemaCommit>,
    /// A group commit's later members, in arrival order: each its own graph
    /// commit, child of the one before, published in the same append (so
    /// all of them become visible together, at one manifest version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group: Vec<MemberCommit>,
    /// A reset's target: the publish makes no commit of its own, it moves
    /// the head to this existing commit (recorded as a head move under
    /// `commit_id`, which then names the operation, not a commit; the
    /// move's kind is `operation`, `reset` by default: a soft delete and a
    /// restore are head moves too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_to: Option<CommitRow>,
    /// The writer recorded on the commit rows (see [`CommitRow::operation`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Recorded on the commit row (see [`CommitRow::source_commit_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_commit_id: Option<String>,
}

impl Lineage {
    /// The commit rows this lineage publishes on `branch` after `parent`, at
    /// `manifest_version`: its own, then each group member's, each the
    /// child of the one before.
    pub fn commit_rows(&self, branch: &str, parent: Option<String>, manifest_version: u64) -> Vec<CommitRow> {
        if self.reset_to.is_some() {
            return vec![];
        }
        let mut rows = vec![CommitRow {
            commit_id: self.commit_id.clone(),
            parent,
            merged_parent: self.merged_parent.clone(),
            actor: self.actor.clone(),
            created_at_us: self.created_at_us,
            manifest_version,
            branch: branch.to_string(),
            schema_change: self.schema.as_ref().map(|s| s.change.clone()),
            operation: self.operation.clone(),
            source_commit_id: self.source_commit_id.clone(),
        }];
        let mut parent = &self.commit_id;
        for m in &self.group {
            rows.push(CommitRow {
                commit_id: m.commit_id.clone(),
                parent: Some(parent.clone()),
                merged_parent: None,
                actor: m.actor.clone(),
                created_at_us: m.created_at_us,
                manifest_version,
                branch: branch.to_string(),
                schema_change: None,
                operation: self.operation.clone(),
                source_commit_id: None,
            });
            parent = &m.commit_id;
        }
        rows
    }
}

/// A later member of a group commit: its own commit in the chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberCommit {
    /// Pre-minted ULID.
    pub commit_id: String,
    /// Who makes it.
    pub actor: Option<String>,
    /// Creation time, µs since the epoch (above the member's before it:
    /// the history orders one version's commits by it).
    pub created_at_us: i64,
}

/// What a schema apply's commit changes in the table registry: part of its
/// fixed intent, so recovery publishes exactly the same delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaCommit {
    /// The accepted schema before and after.
    pub change: SchemaChange,
    /// New registrations (AddType) and re-keyed ones (RenameType: same id and path).
    pub registrations: Vec<TableReg>,
    /// Ids of the tables the apply drops.
    pub tombstones: Vec<String>,
}

impl Lineage {
    /// A fresh lineage intent for `actor`, minted now.
    pub fn mint(actor: Option<String>) -> Self {
        Lineage {
            commit_id: ulid::Ulid::new().to_string(),
            actor,
            merged_parent: None,
            created_at_us: chrono::Utc::now().timestamp_micros(),
            schema: None,
            group: vec![],
            reset_to: None,
            operation: None,
            source_commit_id: None,
        }
    }

    /// The commit that ends up at the head: the last member's of a group,
    /// or a reset's target.
    pub fn head_commit_id(&self) -> &str {
        if let Some(to) = &self.reset_to {
            return &to.commit_id;
        }
        self.group.last().map_or(&self.commit_id, |m| &m.commit_id)
    }

    /// The commit a publish of this lineage answers with: its own (a
    /// group's first), or a reset's target.
    pub fn published_commit_id(&self) -> &str {
        self.reset_to.as_ref().map_or(&self.commit_id, |to| &to.commit_id)
    }

    /// Whether this lineage's publish is visible in `state` (a complete
    /// state: recovery's check): its commit, or a reset's head move.
    pub fn visible_in(&self, state: &super::ManifestState) -> Result<bool> {
        Ok(state.commits()?.contains_key(&self.commit_id) || state.head_move(&self.commit_id).is_some())
    }
}

/// One publish.
#[derive(Debug, Clone)]
pub struct PublishRequest {
    /// Graph branch to commit on.
    pub branch: String,
    /// New table pointers.
    pub updates: Vec<TableUpdate>,
    /// Table key → version the writer's effects were based on.
    pub expected_versions: BTreeMap<String, u64>,
    /// Authority check.
    pub precondition: Precondition,
    /// The commit to create.
    pub lineage: Lineage,
}

/// A publish that became visible.
#[derive(Debug, Clone)]
pub struct Published {
    /// The commit row as written (or as found, when already visible).
    pub commit: CommitRow,
    /// The folded post-publish state (no re-scan needed).
    pub state: Arc<ManifestState>,
    /// `__manifest` version after the publish.
    pub manifest_version: u64,
    /// True when the commit was already visible (an idempotent re-publish).
    pub already_visible: bool,
    /// The full post-publish view, when this call wrote it (callers that
    /// cache views keep it instead of re-reading the manifest).
    pub view: Option<ManifestView>,
}

/// Publish `req` on `root`: up to [`PUBLISHER_RETRY_BUDGET`] retries on write
/// contention; an authority or expected-version mismatch is never retried.
pub async fn publish(root: &Root, req: &PublishRequest) -> Result<Published> {
    publish_from(root, req, None).await
}

/// [`publish`], with the first attempt on `current` (a view the caller just
/// read at the latest version); retries always re-read.
pub async fn publish_from(root: &Root, req: &PublishRequest, current: Option<ManifestView>) -> Result<Published> {
    let span = info_span!("publish", commit_id = %req.lineage.commit_id, branch = %req.branch);
    async {
        let mut last = String::new();
        let mut current = current;
        for attempt in 0..=PUBLISHER_RETRY_BUDGET {
            let view = match current.take() {
                Some(v) => v,
                None => super::load(root, &req.branch, None).await?,
            };
            if let Some(found) = already_visible(&view, req) {
                return Ok(found);
            }
            check_precondition(&view, req)?;
            check_expected_versions(&view.state, req)?;
            let new_rows = pending_rows(&view, req)?;
            let batch = rows::to_batch(&new_rows)?;
            // The post-publish state is folded before the append: its
            // checkpoint rides in the append's transaction.
            let mut post = (*view.state).clone();
            post.apply(new_rows)?;
            let commit = post
                .commit(req.lineage.published_commit_id())
                .cloned()
                .ok_or_else(|| OmniError::Internal("published commit missing from post-state".into()))?;
            match table::append_rows(view.dataset.clone(), batch, checkpoint_properties(&post)?).await {
                Ok(committed) => {
                    let post = Arc::new(post);
                    let post_view = ManifestView {
                        dataset: committed.dataset,
                        branch: view.branch.clone(),
                        version: committed.version,
                        branch_id: view.branch_id.clone(),
                        state: post.clone(),
                    };
                    return Ok(Published {
                        commit,
                        state: post,
                        manifest_version: committed.version,
                        already_visible: false,
                        view: Some(post_view),
                    });
                }
                Err(RowAppendError::Contention(msg)) => {
                    debug!(attempt, %msg, "manifest write contention; re-reading");
                    last = msg;
                }
                Err(RowAppendError::Failed(e)) => return Err(e),
            }
        }
        Err(OmniError::ManifestConflict(format!(
            "exhausted {PUBLISHER_RETRY_BUDGET} retries publishing on `{}`: {last}",
            req.branch
        )))
    }
    .instrument(span)
    .await
}

/// The transaction properties recording `post`'s head checkpoint (none
/// while it has no checkpoint: the next open folds the rows).
fn checkpoint_properties(post: &ManifestState) -> Result<HashMap<String, String>> {
    post.checkpoint().map_or_else(|| Ok(HashMap::new()), |cp| cp.to_properties())
}

/// The commit `req` publishes, if already visible. On a head state only a
/// head commit is found: the writers' commit ids are fresh, and recovery,
/// which re-publishes, checks visibility on a complete state under the
/// gates first ([`crate::engine::manifest::load`]).
fn already_visible(view: &ManifestView, req: &PublishRequest) -> Option<Published> {
    // A reset's target exists before it: only its head move shows it landed.
    if req.lineage.reset_to.is_some() {
        view.state.head_move(&req.lineage.commit_id)?;
    }
    // A group's commits land in one append: its head commit stands for all.
    let head = view.state.commit(req.lineage.head_commit_id())?;
    let commit = view.state.commit(&req.lineage.commit_id).unwrap_or(head).clone();
    Some(Published {
        commit,
        state: view.state.clone(),
        manifest_version: view.version,
        already_visible: true,
        view: None,
    })
}

fn check_precondition(view: &ManifestView, req: &PublishRequest) -> Result<()> {
    let Precondition::ExactHead { branch_id, head } = &req.precondition else {
        return Ok(());
    };
    if *branch_id != view.branch_id {
        return Err(OmniError::ReadSetChanged {
            member: format!("branch_identifier:{}", req.branch),
            expected: branch_id.to_string(),
            actual: view.branch_id.to_string(),
        });
    }
    let actual = view.state.head(&req.branch);
    if head.as_deref() != actual {
        return Err(OmniError::ReadSetChanged {
            member: rows::head_key(&req.branch),
            expected: head.clone().unwrap_or_else(|| "<none>".into()),
            actual: actual.unwrap_or("<none>").to_string(),
        });
    }
    Ok(())
}

fn check_expected_versions(state: &ManifestState, req: &PublishRequest) -> Result<()> {
    for (key, expected) in &req.expected_versions {
        let actual = state.tables.get(key).map(|t| t.version);
        if actual != Some(*expected) {
            return Err(OmniError::ReadSetChanged {
                member: key.clone(),
                expected: format!("v{expected}"),
                actual: actual.map_or("<dropped>".to_string(), |v| format!("v{v}")),
            });
        }
    }
    Ok(())
}

fn pending_rows(view: &ManifestView, req: &PublishRequest) -> Result<Vec<ManifestRow>> {
    let mut out = Vec::with_capacity(req.updates.len() + 2);
    let mut ids: std::collections::HashMap<&str, &str> =
        view.state.tables.iter().map(|(k, e)| (k.as_str(), e.table_id.as_str())).collect();
    if let Some(schema) = &req.lineage.schema {
        for reg in &schema.registrations {
            ids.retain(|_, id| *id != reg.table_id);
            ids.insert(&reg.table_key, &reg.table_id);
            out.push(ManifestRow::Table { reg: reg.clone(), since: view.version + 1 });
        }
        for table_id in &schema.tombstones {
            let latest = view.state.latest_versions.get(table_id).copied().unwrap_or(0);
            out.push(ManifestRow::Tombstone(TombstoneRow { table_id: table_id.clone(), version: latest + 1 }));
        }
    }
    for u in &req.updates {
        let table_id = *ids
            .get(u.table_key.as_str())
            .ok_or_else(|| OmniError::NotFound(format!("table {} is not registered", u.table_key)))?;
        let latest = view.state.latest_versions.get(table_id).copied().unwrap_or(0);
        if u.version <= latest {
            return Err(OmniError::ReadSetChanged {
                member: u.table_key.clone(),
                expected: format!("a version above v{latest}"),
                actual: format!("v{}", u.version),
            });
        }
        out.push(ManifestRow::TableVersion(TableVersionRow {
            table_id: table_id.to_string(),
            version: u.version,
            branch: u.branch.clone(),
            row_count: u.row_count,
        }));
    }
    let parent = view.state.effective_head(&req.branch).map(|c| c.commit_id.clone());
    let at = view.version + 1;
    if let Some(to) = &req.lineage.reset_to {
        // The target's row again, so a head state restored after this
        // publish holds its head commit.
        out.push(ManifestRow::Commit(to.clone()));
        out.push(ManifestRow::HeadMove(HeadMoveRow {
            operation_id: req.lineage.commit_id.clone(),
            branch: req.branch.clone(),
            from: parent.clone(),
            to: to.commit_id.clone(),
            operation: req.lineage.operation.clone().unwrap_or_else(|| "reset".into()),
            actor: req.lineage.actor.clone(),
            at_us: req.lineage.created_at_us,
            manifest_version: at,
        }));
    }
    out.extend(req.lineage.commit_rows(&req.branch, parent, at).into_iter().map(ManifestRow::Commit));
    let head_commit_id = req.lineage.head_commit_id().to_string();
    out.push(ManifestRow::Head(HeadRow { branch: req.branch.clone(), head_commit_id, at: Some(at) }));
    Ok(out)
}
