//! The `__manifest` row kinds and their Arrow encoding.
//!
//! The dataset is append-only: a publish appends its rows under the exact
//! version guard (that guard, not a row merge, is the compare-and-swap), so
//! the kinds that change over time carry what orders them and the fold picks
//! the newest (see [`super::state`]):
//!
//! | kind | `object_id` | ordered by |
//! |---|---|---|
//! | table registration | `table:<table_id>` | `since` (`table_version` column); a rename appends a newer one |
//! | table version pointer | `table_version:<table_id>:<version:020>` | version |
//! | table tombstone | `table_tombstone:<table_id>:<version:020>` | version |
//! | graph commit | `<ULID>` | immutable |
//! | branch head | `graph_head:<branch>` | the manifest version it was written at (`table_version`; rows from before it was recorded: their commit's); every commit appends one |
//! | head move | `head_move:<operation id>` | immutable: a reset that moved a head to an existing commit, or a branch's soft delete or restore (the newest by manifest version decides whether it is hidden) |
//!
//! Graphs written before appends had one row per `object_id` (heads and
//! renames were merged in place); they fold the same way.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::builder::{StringBuilder, UInt64Builder};
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow_schema::{DataType, Field, Schema};
use serde::{Deserialize, Serialize};

use crate::protocol::{OmniError, Result};

/// Schema metadata key holding the storage format stamp.
pub const STAMP_KEY: &str = "omnigraph:internal_schema_version";
/// The one storage format version this binary reads and writes.
pub const STAMP: u32 = 4;
/// Lance's unenforced primary key field-metadata key.
pub const PK_METADATA: &str = "lance-schema:unenforced-primary-key";

/// A table registration: a node or edge type bound to its dataset path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableReg {
    /// Stable table id (from the catalog).
    pub table_id: String,
    /// Alias: `node:<Type>` or `edge:<Type>`.
    pub table_key: String,
    /// Path of the dataset relative to the graph root.
    pub location: String,
}

/// A pointer: table `table_id` is visible at `version` (held on Lance branch `branch`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableVersionRow {
    /// Stable table id.
    pub table_id: String,
    /// Lance version of the data table.
    pub version: u64,
    /// Native Lance branch holding that version (`None` = main).
    pub branch: Option<String>,
    /// Live rows at that version.
    pub row_count: u64,
}

/// A tombstone: the table is dropped as of `version`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TombstoneRow {
    /// Stable table id.
    pub table_id: String,
    /// Tombstone version (last published + 1).
    pub version: u64,
}

/// One graph commit in the commit DAG. Immutable once written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRow {
    /// ULID of the commit.
    pub commit_id: String,
    /// Previous head of the branch (`None` for genesis).
    pub parent: Option<String>,
    /// Second parent of a merge commit.
    pub merged_parent: Option<String>,
    /// Who made it.
    pub actor: Option<String>,
    /// Wall-clock creation time, microseconds since the epoch.
    pub created_at_us: i64,
    /// The `__manifest` version this commit produced.
    pub manifest_version: u64,
    /// The graph branch it was made on.
    pub branch: String,
    /// Set on a schema apply's commit: the schema it replaced and the one it
    /// made current (readers at older commits use the older catalog).
    pub schema_change: Option<SchemaChange>,
    /// The writer that made it (`mutation`, `load`, `merge`, `revert`,
    /// `cherry_pick`, `reset`, `schema_apply`, `optimize`, `ensure_indices`,
    /// `recovery`); `None` on commits from before it was recorded.
    pub operation: Option<String>,
    /// The commit a revert undid, a cherry-pick applied, or a reset (as a
    /// commit) took the content of.
    pub source_commit_id: Option<String>,
}

/// The accepted-schema identities a schema apply's commit moved between.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SchemaChange {
    /// Identity accepted before the apply.
    pub from: String,
    /// Identity accepted after it.
    pub to: String,
}

/// The mutable head pointer of one graph branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadRow {
    /// Graph branch name.
    pub branch: String,
    /// Commit id at the head.
    pub head_commit_id: String,
    /// The manifest version this row was written at: the newest row wins,
    /// which lets a reset move a head back to an older commit. `None` on
    /// rows from before it was recorded (ranked by their commit's version,
    /// which was then always the version they were written at).
    pub at: Option<u64>,
}

/// A move of a branch head to a commit that already exists (a reset),
/// written beside the head row it moved: the record recovery and a
/// re-publish find the move by, and the reflog reads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeadMoveRow {
    /// The operation that moved it (its sidecar's id).
    pub operation_id: String,
    /// Graph branch name.
    pub branch: String,
    /// The head before the move.
    pub from: Option<String>,
    /// The head after it.
    pub to: String,
    /// What moved it: `reset`, or `delete` / `restore` (a soft delete
    /// hides the branch with its head in place; a restore shows it again).
    pub operation: String,
    /// Who moved it.
    pub actor: Option<String>,
    /// Wall-clock time of the move, microseconds since the epoch.
    pub at_us: i64,
    /// The manifest version the move landed at.
    pub manifest_version: u64,
}

/// Any `__manifest` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestRow {
    /// Table registration, landed at manifest version `since` (0 on rows
    /// from before registrations were versioned: one per table then).
    Table {
        /// The registration.
        reg: TableReg,
        /// Manifest version it landed at: the newest registration of a table id wins.
        since: u64,
    },
    /// Table version pointer.
    TableVersion(TableVersionRow),
    /// Table tombstone.
    Tombstone(TombstoneRow),
    /// Graph commit.
    Commit(CommitRow),
    /// Branch head.
    Head(HeadRow),
    /// A head moved to an existing commit.
    HeadMove(HeadMoveRow),
}

#[derive(Serialize, Deserialize)]
struct CommitMeta {
    parent: Option<String>,
    merged_parent: Option<String>,
    actor: Option<String>,
    created_at_us: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema_change: Option<SchemaChange>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source_commit_id: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct HeadMoveMeta {
    from: Option<String>,
    to: String,
    operation: String,
    actor: Option<String>,
    at_us: i64,
}

/// The Arrow schema of `__manifest`, carrying the storage stamp.
pub fn manifest_schema() -> Schema {
    let pk = HashMap::from([(PK_METADATA.to_string(), "true".to_string())]);
    let fields = vec![
        Field::new("object_id", DataType::Utf8, false).with_metadata(pk),
        Field::new("object_type", DataType::Utf8, false),
        Field::new("location", DataType::Utf8, true),
        Field::new("metadata", DataType::Utf8, true),
        Field::new("table_key", DataType::Utf8, false),
        Field::new("table_id", DataType::Utf8, true),
        Field::new("table_version", DataType::UInt64, true),
        Field::new("table_branch", DataType::Utf8, true),
        Field::new("row_count", DataType::UInt64, true),
    ];
    let meta = HashMap::from([(STAMP_KEY.to_string(), STAMP.to_string())]);
    Schema::new_with_metadata(fields, meta)
}

/// Row key of a table version pointer.
pub fn table_version_key(table_id: &str, version: u64) -> String {
    format!("table_version:{table_id}:{version:020}")
}

/// Row key of a branch head.
pub fn head_key(branch: &str) -> String {
    format!("graph_head:{branch}")
}

/// One encoded row, column by column.
#[derive(Default)]
struct Cols {
    object_id: String,
    object_type: &'static str,
    location: Option<String>,
    metadata: Option<String>,
    table_key: String,
    table_id: Option<String>,
    table_version: Option<u64>,
    table_branch: Option<String>,
    row_count: Option<u64>,
}

impl ManifestRow {
    fn encode(&self) -> Cols {
        match self {
            ManifestRow::Table { reg: t, since } => Cols {
                object_id: format!("table:{}", t.table_id),
                object_type: "table",
                location: Some(t.location.clone()),
                table_key: t.table_key.clone(),
                table_id: Some(t.table_id.clone()),
                table_version: Some(*since),
                ..Default::default()
            },
            ManifestRow::TableVersion(v) => Cols {
                object_id: table_version_key(&v.table_id, v.version),
                object_type: "table_version",
                table_id: Some(v.table_id.clone()),
                table_version: Some(v.version),
                table_branch: v.branch.clone(),
                row_count: Some(v.row_count),
                ..Default::default()
            },
            ManifestRow::Tombstone(t) => Cols {
                object_id: format!("table_tombstone:{}:{:020}", t.table_id, t.version),
                object_type: "table_tombstone",
                table_id: Some(t.table_id.clone()),
                table_version: Some(t.version),
                ..Default::default()
            },
            ManifestRow::Commit(c) => Cols {
                object_id: c.commit_id.clone(),
                object_type: "graph_commit",
                metadata: serde_json::to_string(&CommitMeta {
                    parent: c.parent.clone(),
                    merged_parent: c.merged_parent.clone(),
                    actor: c.actor.clone(),
                    created_at_us: c.created_at_us,
                    schema_change: c.schema_change.clone(),
                    operation: c.operation.clone(),
                    source_commit_id: c.source_commit_id.clone(),
                })
                .ok(),
                table_version: Some(c.manifest_version),
                table_branch: Some(c.branch.clone()),
                ..Default::default()
            },
            ManifestRow::Head(h) => Cols {
                object_id: head_key(&h.branch),
                object_type: "graph_head",
                metadata: Some(h.head_commit_id.clone()),
                table_version: h.at,
                table_branch: Some(h.branch.clone()),
                ..Default::default()
            },
            ManifestRow::HeadMove(m) => Cols {
                object_id: format!("head_move:{}", m.operation_id),
                object_type: "head_move",
                metadata: serde_json::to_string(&HeadMoveMeta {
                    from: m.from.clone(),
                    to: m.to.clone(),
                    operation: m.operation.clone(),
                    actor: m.actor.clone(),
                    at_us: m.at_us,
                })
                .ok(),
                table_version: Some(m.manifest_version),
                table_branch: Some(m.branch.clone()),
                ..Default::default()
            },
        }
    }
}

/// Encode rows as one record batch in the manifest schema.
pub fn to_batch(rows: &[ManifestRow]) -> Result<RecordBatch> {
    let mut cols: [StringBuilder; 7] = Default::default();
    let mut versions = UInt64Builder::new();
    let mut counts = UInt64Builder::new();
    for row in rows {
        let c = row.encode();
        cols[0].append_value(&c.object_id);
        cols[1].append_value(c.object_type);
        cols[2].append_option(c.location);
        cols[3].append_option(c.metadata);
        cols[4].append_value(&c.table_key);
        cols[5].append_option(c.table_id);
        cols[6].append_option(c.table_branch);
        versions.append_option(c.table_version);
        counts.append_option(c.row_count);
    }
    let [oid, otype, loc, meta, key, tid, branch] = cols.map(|mut b| Arc::new(b.finish()) as ArrayRef);
    let columns = vec![
        oid,
        otype,
        loc,
        meta,
        key,
        tid,
        Arc::new(versions.finish()) as ArrayRef,
        branch,
        Arc::new(counts.finish()) as ArrayRef,
    ];
    RecordBatch::try_new(Arc::new(manifest_schema()), columns)
        .map_err(|e| OmniError::Internal(format!("encoding manifest rows: {e}")))
}

/// Decode manifest rows; unknown row kinds are skipped (forward tolerance).
pub fn from_batches(batches: &[RecordBatch]) -> Result<Vec<ManifestRow>> {
    let mut rows = Vec::new();
    for batch in batches {
        let view = BatchView::new(batch)?;
        for i in 0..batch.num_rows() {
            if let Some(row) = view.row(i)? {
                rows.push(row);
            }
        }
    }
    Ok(rows)
}

/// Typed column access to one manifest batch.
struct BatchView<'a> {
    object_id: &'a StringArray,
    object_type: &'a StringArray,
    location: &'a StringArray,
    metadata: &'a StringArray,
    table_key: &'a StringArray,
    table_id: &'a StringArray,
    table_version: &'a UInt64Array,
    table_branch: &'a StringArray,
    row_count: &'a UInt64Array,
}

fn column<'a, T: 'static>(batch: &'a RecordBatch, name: &str) -> Result<&'a T> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| OmniError::Internal(format!("__manifest column `{name}` is missing or mistyped")))
}

fn opt_str(a: &StringArray, i: usize) -> Option<String> {
    a.is_valid(i).then(|| a.value(i).to_string())
}

fn opt_u64(a: &UInt64Array, i: usize) -> Option<u64> {
    a.is_valid(i).then(|| a.value(i))
}

impl<'a> BatchView<'a> {
    fn new(batch: &'a RecordBatch) -> Result<Self> {
        Ok(BatchView {
            object_id: column(batch, "object_id")?,
            object_type: column(batch, "object_type")?,
            location: column(batch, "location")?,
            metadata: column(batch, "metadata")?,
            table_key: column(batch, "table_key")?,
            table_id: column(batch, "table_id")?,
            table_version: column(batch, "table_version")?,
            table_branch: column(batch, "table_branch")?,
            row_count: column(batch, "row_count")?,
        })
    }

    fn required<T>(&self, i: usize, what: &str, v: Option<T>) -> Result<T> {
        v.ok_or_else(|| OmniError::Internal(format!("__manifest row `{}` lacks {what}", self.object_id.value(i))))
    }

    fn row(&self, i: usize) -> Result<Option<ManifestRow>> {
        let table_id = || self.required(i, "table_id", opt_str(self.table_id, i));
        let version = || self.required(i, "table_version", opt_u64(self.table_version, i));
        let row = match self.object_type.value(i) {
            "table" => ManifestRow::Table {
                reg: TableReg {
                    table_id: table_id()?,
                    table_key: self.table_key.value(i).to_string(),
                    location: self.required(i, "location", opt_str(self.location, i))?,
                },
                since: opt_u64(self.table_version, i).unwrap_or(0),
            },
            "table_version" => ManifestRow::TableVersion(TableVersionRow {
                table_id: table_id()?,
                version: version()?,
                branch: opt_str(self.table_branch, i),
                row_count: opt_u64(self.row_count, i).unwrap_or(0),
            }),
            "table_tombstone" => ManifestRow::Tombstone(TombstoneRow { table_id: table_id()?, version: version()? }),
            "graph_commit" => {
                let raw = self.required(i, "metadata", opt_str(self.metadata, i))?;
                let meta: CommitMeta = serde_json::from_str(&raw)
                    .map_err(|e| OmniError::Internal(format!("commit {} metadata: {e}", self.object_id.value(i))))?;
                ManifestRow::Commit(CommitRow {
                    commit_id: self.object_id.value(i).to_string(),
                    parent: meta.parent,
                    merged_parent: meta.merged_parent,
                    actor: meta.actor,
                    created_at_us: meta.created_at_us,
                    manifest_version: version()?,
                    branch: self.required(i, "table_branch", opt_str(self.table_branch, i))?,
                    schema_change: meta.schema_change,
                    operation: meta.operation,
                    source_commit_id: meta.source_commit_id,
                })
            }
            "graph_head" => ManifestRow::Head(HeadRow {
                branch: self.required(i, "table_branch", opt_str(self.table_branch, i))?,
                head_commit_id: self.required(i, "metadata", opt_str(self.metadata, i))?,
                at: opt_u64(self.table_version, i),
            }),
            "head_move" => {
                let id = self.object_id.value(i);
                let raw = self.required(i, "metadata", opt_str(self.metadata, i))?;
                let meta: HeadMoveMeta = serde_json::from_str(&raw)
                    .map_err(|e| OmniError::Internal(format!("head move {id} metadata: {e}")))?;
                ManifestRow::HeadMove(HeadMoveRow {
                    operation_id: id.strip_prefix("head_move:").unwrap_or(id).to_string(),
                    branch: self.required(i, "table_branch", opt_str(self.table_branch, i))?,
                    from: meta.from,
                    to: meta.to,
                    operation: meta.operation,
                    actor: meta.actor,
                    at_us: meta.at_us,
                    manifest_version: version()?,
                })
            }
            _ => return Ok(None),
        };
        Ok(Some(row))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_through_arrow() {
        let rows = vec![
            ManifestRow::Table {
                reg: TableReg { table_id: "n1".into(), table_key: "node:Person".into(), location: "nodes/n1".into() },
                since: 2,
            },
            ManifestRow::TableVersion(TableVersionRow {
                table_id: "n1".into(),
                version: 3,
                branch: Some("b".into()),
                row_count: 7,
            }),
            ManifestRow::Tombstone(TombstoneRow { table_id: "n1".into(), version: 4 }),
            ManifestRow::Commit(CommitRow {
                commit_id: "01ABC".into(),
                parent: Some("01AAA".into()),
                merged_parent: None,
                actor: Some("alice".into()),
                created_at_us: 42,
                manifest_version: 9,
                branch: "main".into(),
                schema_change: Some(SchemaChange { from: "a".into(), to: "b".into() }),
                operation: Some("schema_apply".into()),
                source_commit_id: Some("01AAA".into()),
            }),
            ManifestRow::Head(HeadRow { branch: "main".into(), head_commit_id: "01ABC".into(), at: None }),
            ManifestRow::Head(HeadRow { branch: "b".into(), head_commit_id: "01AAA".into(), at: Some(10) }),
            ManifestRow::HeadMove(HeadMoveRow {
                operation_id: "01OP".into(),
                branch: "b".into(),
                from: Some("01ABC".into()),
                to: "01AAA".into(),
                operation: "reset".into(),
                actor: None,
                at_us: 43,
                manifest_version: 10,
            }),
        ];
        let batch = to_batch(&rows).expect("encode");
        assert_eq!(from_batches(&[batch]).expect("decode"), rows);
    }
}
