//! The `__manifest` dataset: which version of each table is visible on each
//! graph branch, and the commit DAG. Visibility changes in exactly one place:
//! the publisher's exact append ([`publisher::publish`]).

pub mod merge_base;
pub mod publisher;
pub mod rows;
pub mod state;

use std::fmt;
use std::sync::Arc;

use lance::Dataset;
use serde::{Deserialize, Serialize};

use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};
pub use publisher::{Lineage, MemberCommit, Precondition, PublishRequest, Published, SchemaCommit, TableUpdate};
pub use rows::{CommitRow, ManifestRow, STAMP, STAMP_KEY, SchemaChange, TableReg};
pub use state::{HeadCheckpoint, ManifestState, TableEntry};

/// Path of the manifest dataset under the root.
pub const MANIFEST_DIR: &str = "__manifest";

/// URI of the manifest dataset of `root`.
pub fn uri(root: &Root) -> String {
    root.child_uri(MANIFEST_DIR)
}

/// A native Lance branch identifier: `(parent_version, uuid)` per fork level.
/// Two incarnations of one branch name have different identifiers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct BranchId(pub Vec<(u64, String)>);

impl fmt::Display for BranchId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("main");
        }
        let parts: Vec<String> = self.0.iter().map(|(v, id)| format!("{v}@{id}")).collect();
        f.write_str(&parts.join("/"))
    }
}

/// One read of `__manifest` on a branch: the dataset handle and the folded
/// state of its rows.
#[derive(Debug, Clone)]
pub struct ManifestView {
    /// The manifest dataset at the version read.
    pub dataset: Arc<Dataset>,
    /// Graph branch this view was read from.
    pub branch: String,
    /// Manifest version read.
    pub version: u64,
    /// Native branch identifier of that manifest branch.
    pub branch_id: BranchId,
    /// The folded state (shared: views are cloned per request, and the
    /// state grows with the history).
    pub state: Arc<ManifestState>,
}

impl ManifestView {
    /// This view after a physical-only compaction of its dataset: the same
    /// rows, hence the same state, at the compaction's version (so the next
    /// read needs no scan and fold of the whole history).
    pub fn compacted(self, dataset: Arc<Dataset>) -> ManifestView {
        ManifestView { version: dataset.version().version, dataset, ..self }
    }

    /// The pin of a table the schema has: its absence is a broken invariant
    /// (every type of the accepted schema is registered on every branch).
    pub fn schema_table(&self, key: &str) -> Result<&TableEntry> {
        self.state
            .tables
            .get(key)
            .ok_or_else(|| OmniError::Internal(format!("{key} is in the schema but not on `{}`", self.branch)))
    }
}

/// Refuse a manifest whose storage stamp is not [`STAMP`].
pub fn check_stamp(ds: &Dataset) -> Result<()> {
    let raw = table::schema_metadata(ds).get(STAMP_KEY).cloned();
    let stamp = raw.as_deref().and_then(|s| s.parse::<u32>().ok());
    match stamp {
        Some(s) if s == STAMP => Ok(()),
        Some(s) if s > STAMP => Err(OmniError::UnsupportedStorage(format!(
            "graph storage format {s} is newer than this binary supports ({STAMP}); upgrade omnigraph"
        ))),
        Some(s) => Err(OmniError::UnsupportedStorage(format!(
            "graph storage format {s} is older than this binary supports ({STAMP}); rebuild via export/import"
        ))),
        None => Err(OmniError::UnsupportedStorage(format!(
            "graph storage stamp `{STAMP_KEY}` is missing or unreadable ({raw:?}); rebuild via export/import"
        ))),
    }
}

/// Check main's storage stamp without reading the manifest's rows: the
/// cheap first read of an open (the fold is left to the branch actor, which
/// caches it).
pub async fn check_graph(root: &Root) -> Result<()> {
    open(root, "main", None).await.map(drop)
}

/// Read the manifest on `branch` at `version` (latest when `None`), checking the stamp.
pub async fn load(root: &Root, branch: &str, version: Option<u64>) -> Result<ManifestView> {
    view_of(open(root, branch, version).await?, branch).await
}

/// The manifest on `branch` at `version` as a read at that commit needs it:
/// the tables, schemas and heads restored from the version's checkpoint
/// (one small read, whatever the history's length), the whole history
/// folded only for a version written without one. Its commit history is
/// not loaded ([`ManifestState::commits`] refuses): walk history on
/// [`load`]'s view of the branch.
pub async fn load_at(root: &Root, branch: &str, version: u64) -> Result<ManifestView> {
    let dataset = open(root, branch, Some(version)).await?;
    let state = head_state(&dataset).await?;
    let branch_id = BranchId(table::branch_identifier(&dataset).await?);
    Ok(ManifestView { version, dataset, branch: branch.to_string(), branch_id, state: Arc::new(state) })
}

/// The latest manifest on `branch`, reusing `cache` when the branch is still
/// the same incarnation at the same version (opening the dataset is one
/// small read; scanning and folding grows with history, so a branch actor
/// pays it once per new version instead of once per request). With
/// `complete` false, a head state restored from the version's checkpoint
/// will do (no scan at all); with it true, the commit history is loaded too.
pub async fn load_cached(
    root: &Root,
    branch: &str,
    cache: &mut Option<ManifestView>,
    complete: bool,
) -> Result<ManifestView> {
    // The cached version still the branch's latest (asked by name, not by
    // listing `__manifest`'s versions): nothing to open.
    if let Some(c) = cache.as_ref()
        && (c.state.is_complete() || !complete)
        && table::still_latest(&c.dataset).await
    {
        return Ok(c.clone());
    }
    let dataset = open(root, branch, None).await?;
    let branch_id = BranchId(table::branch_identifier(&dataset).await?);
    if let Some(c) = cache.as_ref()
        && c.version == dataset.version().version
        && c.branch_id == branch_id
        && (c.state.is_complete() || !complete)
    {
        return Ok(c.clone());
    }
    let state = if complete { fold(&dataset).await? } else { head_state(&dataset).await? };
    let view = ManifestView {
        version: dataset.version().version,
        dataset,
        branch: branch.to_string(),
        branch_id,
        state: Arc::new(state),
    };
    *cache = Some(view.clone());
    Ok(view)
}

/// Versions of physical-only operations (a `__manifest` compaction is a
/// `ReserveFragments` then a `Rewrite`, after an `UpdateConfig` on a graph
/// an older binary created) a restore looks past for the checkpoint of the
/// rows they kept.
const CHECKPOINT_LOOKBACK: u64 = 4;

/// Lance operations that keep every row as it was.
const PHYSICAL_ONLY: [&str; 3] = ["Rewrite", "ReserveFragments", "UpdateConfig"];

/// The head state recorded at the dataset's version: the checkpoint of the
/// publish that produced it, or of the publish before a run of compactions
/// (which keep the rows). `None` when there is none to trust (a graph
/// written by an older binary, a schema apply recorded, or versions
/// cleaned): the caller folds the rows instead.
async fn restore_checkpoint(dataset: &Dataset) -> Result<Option<ManifestState>> {
    let mut version = dataset.version().version;
    for _ in 0..=CHECKPOINT_LOOKBACK {
        let Ok(Some((operation, props))) = table::transaction_properties_at(dataset, version).await else {
            return Ok(None);
        };
        if let Some(cp) = HeadCheckpoint::from_properties(&props)? {
            return ManifestState::restore(cp).map(Some);
        }
        if !PHYSICAL_ONLY.contains(&operation.as_str()) || version <= 1 {
            return Ok(None);
        }
        version -= 1;
    }
    Ok(None)
}

/// The manifest dataset on `branch` at `version` (latest when `None`), stamp checked.
async fn open(root: &Root, branch: &str, version: Option<u64>) -> Result<Arc<Dataset>> {
    let dataset = table::open_table(&uri(root), Some(branch), version).await.map_err(|e| match e {
        OmniError::NotFound(_) if branch == "main" && version.is_none() => {
            OmniError::NotFound(format!("no graph at {}", root.uri()))
        }
        OmniError::NotFound(_) => OmniError::NotFound(format!(
            "branch `{branch}`{}",
            version.map(|v| format!(" at manifest version {v}")).unwrap_or_default()
        )),
        other => other,
    })?;
    check_stamp(&dataset)?;
    Ok(dataset)
}

/// Decode and fold a manifest dataset handle already open on `branch`.
pub async fn view_of(dataset: Arc<Dataset>, branch: &str) -> Result<ManifestView> {
    let state = Arc::new(fold(&dataset).await?);
    let branch_id = BranchId(table::branch_identifier(&dataset).await?);
    Ok(ManifestView { version: dataset.version().version, dataset, branch: branch.to_string(), branch_id, state })
}

/// The head state of the dataset's version: restored from its checkpoint,
/// or folded whole for a version written without one.
async fn head_state(dataset: &Dataset) -> Result<ManifestState> {
    match restore_checkpoint(dataset).await? {
        Some(state) => Ok(state),
        None => fold(dataset).await,
    }
}

/// The complete state: every row of the dataset's version, folded.
async fn fold(dataset: &Dataset) -> Result<ManifestState> {
    let batches = table::scan(dataset, None).await?;
    ManifestState::fold(rows::from_batches(&batches)?)
}
