//! The recovery audit log, `_graph_commit_recoveries.lance`: one row per
//! resolved sidecar, written before the sidecar is deleted. Idempotent by
//! operation id, so re-entry after a failed delete writes no second row.

use std::sync::Arc;

use arrow_array::builder::StringBuilder;
use arrow_array::{Array, ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use serde::{Deserialize, Serialize};

use crate::engine::committed::sql_str;
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};

/// Dataset path of the audit log under the root.
pub const AUDIT_DIR: &str = "_graph_commit_recoveries.lance";

/// How a sidecar was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RecoveryKind {
    /// The write's own commit was published (or found published).
    RolledForward,
    /// The write's effects were compensated.
    RolledBack,
    /// The branch the write targeted was deleted; its effects are unreachable.
    OrphanedBranchDiscarded,
}

/// One table's movement during a recovery.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableOutcome {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Observed Lance HEAD before recovery.
    pub from_version: u64,
    /// Logical version after recovery.
    pub to_version: u64,
}

/// One audit row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRow {
    /// The commit that settled it (the original on roll-forward, the rollback commit otherwise).
    pub graph_commit_id: Option<String>,
    /// Resolution.
    pub recovery_kind: RecoveryKind,
    /// The sidecar's actor.
    pub recovery_for_actor: Option<String>,
    /// The sidecar's operation id.
    pub operation_id: String,
    /// Writer kind (`Mutation`, `Load`, …).
    pub writer_kind: String,
    /// Per-table movements.
    pub tables: Vec<TableOutcome>,
    /// When it was recorded (µs since the epoch).
    pub created_at_us: i64,
}

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("graph_commit_id", DataType::Utf8, true),
        Field::new("recovery_kind", DataType::Utf8, false),
        Field::new("recovery_for_actor", DataType::Utf8, true),
        Field::new("operation_id", DataType::Utf8, false),
        Field::new("sidecar_writer_kind", DataType::Utf8, false),
        Field::new("per_table_outcomes_json", DataType::Utf8, false),
        Field::new("created_at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
    ])
}

fn kind_name(k: RecoveryKind) -> &'static str {
    match k {
        RecoveryKind::RolledForward => "RolledForward",
        RecoveryKind::RolledBack => "RolledBack",
        RecoveryKind::OrphanedBranchDiscarded => "OrphanedBranchDiscarded",
    }
}

fn to_batch(row: &AuditRow) -> Result<RecordBatch> {
    let mut s: [StringBuilder; 6] = Default::default();
    s[0].append_option(row.graph_commit_id.clone());
    s[1].append_value(kind_name(row.recovery_kind));
    s[2].append_option(row.recovery_for_actor.clone());
    s[3].append_value(&row.operation_id);
    s[4].append_value(&row.writer_kind);
    s[5].append_value(serde_json::to_string(&row.tables).map_err(|e| OmniError::Internal(e.to_string()))?);
    let mut cols: Vec<ArrayRef> = s.into_iter().map(|mut b| Arc::new(b.finish()) as ArrayRef).collect();
    cols.push(Arc::new(TimestampMicrosecondArray::from(vec![row.created_at_us]).with_timezone("UTC")));
    RecordBatch::try_new(Arc::new(schema()), cols).map_err(|e| OmniError::Internal(format!("audit row: {e}")))
}

/// The audit dataset, if a version of it was ever committed. A create cut
/// short before its first commit leaves only unreferenced files: absent.
async fn open_audit(root: &Root) -> Result<Option<Arc<lance::Dataset>>> {
    match table::open_table(&root.child_uri(AUDIT_DIR), None, None).await {
        Ok(ds) => Ok(Some(ds)),
        Err(OmniError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Append `row` unless a row for its operation id exists already.
pub async fn record(root: &Root, row: &AuditRow) -> Result<()> {
    let uri = root.child_uri(AUDIT_DIR);
    if let Some(ds) = open_audit(root).await? {
        let existing = table::scan(&ds, Some(&format!("operation_id = {}", sql_str(&row.operation_id)))).await?;
        if existing.iter().any(|b| b.num_rows() > 0) {
            return Ok(());
        }
    }
    table::append_or_create(&uri, to_batch(row)?).await
}

/// Every audit row, oldest first.
pub async fn read_all(root: &Root) -> Result<Vec<AuditRow>> {
    let Some(ds) = open_audit(root).await? else { return Ok(vec![]) };
    let mut out = Vec::new();
    for batch in table::scan(&ds, None).await? {
        let s = |name: &str| -> Result<StringArray> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                .ok_or_else(|| OmniError::Internal(format!("audit column `{name}` missing")))
        };
        let (commit, kind, actor, op, writer, tables) = (
            s("graph_commit_id")?,
            s("recovery_kind")?,
            s("recovery_for_actor")?,
            s("operation_id")?,
            s("sidecar_writer_kind")?,
            s("per_table_outcomes_json")?,
        );
        let at = batch
            .column_by_name("created_at")
            .and_then(|c| c.as_any().downcast_ref::<TimestampMicrosecondArray>().cloned())
            .ok_or_else(|| OmniError::Internal("audit column `created_at` missing".into()))?;
        for i in 0..batch.num_rows() {
            let recovery_kind = match kind.value(i) {
                "RolledForward" => RecoveryKind::RolledForward,
                "RolledBack" => RecoveryKind::RolledBack,
                _ => RecoveryKind::OrphanedBranchDiscarded,
            };
            out.push(AuditRow {
                graph_commit_id: commit.is_valid(i).then(|| commit.value(i).to_string()),
                recovery_kind,
                recovery_for_actor: actor.is_valid(i).then(|| actor.value(i).to_string()),
                operation_id: op.value(i).to_string(),
                writer_kind: writer.value(i).to_string(),
                tables: serde_json::from_str(tables.value(i)).unwrap_or_default(),
                created_at_us: at.value(i),
            });
        }
    }
    out.sort_by_key(|r| r.created_at_us);
    Ok(out)
}
