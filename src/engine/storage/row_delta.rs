//! The rows one version of a table changed against an older version of the
//! same dataset ref, read from what Lance records per row: stable row ids,
//! `_row_created_at_version` and `_row_last_updated_at_version`, and the
//! deletion vectors of the fragments a version touched.
//!
//! Rows inserted or rewritten in the range are found by the row version
//! columns (Lance prunes fragments by their version metadata before reading
//! data); rows gone are found by comparing fragment deletion vectors; the
//! older image of both is taken by row id. So the cost follows the rows and
//! fragments the range touched, not the table. A rewrite that changed no
//! value (compaction, an identical upsert) comes back too: callers compare
//! the two images.

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use futures::TryStreamExt;
use lance::Dataset;

use crate::protocol::{OmniError, Result};

/// Lance's per-row system columns, which are not entity properties.
const SYSTEM_COLUMNS: [&str; 3] = ["_rowid", "_row_created_at_version", "_row_last_updated_at_version"];

/// The changed rows of a range: each side's images of them.
pub struct RowDelta {
    /// Rows live at the newer version that the range inserted or rewrote.
    pub after: Vec<RecordBatch>,
    /// The older version's images of rows the range rewrote or removed.
    pub before: Vec<RecordBatch>,
}

/// The rows `to` changed against `from`, or `None` when the fast path does
/// not apply: not one dataset ref, `from` newer than `to`, or a version
/// without stable row ids.
pub async fn between(from: &Dataset, to: &Dataset) -> Result<Option<RowDelta>> {
    let (v0, v1) = (from.version().version, to.version().version);
    let same_ref = from.uri() == to.uri() && from.manifest.branch == to.manifest.branch;
    if !same_ref || v0 > v1 || !from.manifest.uses_stable_row_ids() || !to.manifest.uses_stable_row_ids() {
        return Ok(None);
    }
    let err = |e: lance::Error| OmniError::storage(format!("reading the row delta of {} v{v0}..v{v1}", to.uri()), e);
    let delta = to.delta().with_begin_version(v0).with_end_version(v1).build().map_err(err)?;
    let (mut after, mut old_ids) = (Vec::new(), Vec::new());
    let mut upserted = delta.get_upserted_rows().await.map_err(err)?;
    while let Some(batch) = upserted.try_next().await.map_err(err)? {
        let (ids, created) = (u64_column(&batch, "_rowid")?, u64_column(&batch, "_row_created_at_version")?);
        // A row created at or before `from` was rewritten: its old image is
        // taken below by its (stable) row id.
        old_ids.extend((0..batch.num_rows()).filter(|i| created.value(*i) <= v0).map(|i| ids.value(i)));
        after.push(without_system_columns(&batch)?);
    }
    let mut deleted = delta.get_deleted_row_ids().await.map_err(err)?;
    while let Some(batch) = deleted.try_next().await.map_err(err)? {
        let ids = u64_column(&batch, "_rowid")?;
        old_ids.extend((0..ids.len()).map(|i| ids.value(i)));
    }
    old_ids.sort_unstable();
    old_ids.dedup();
    let mut before = Vec::new();
    for chunk in old_ids.chunks(8192) {
        before.push(from.take_rows(chunk, from.schema().clone()).await.map_err(err)?);
    }
    Ok(Some(RowDelta { after, before }))
}

fn u64_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a arrow_array::UInt64Array> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .ok_or_else(|| OmniError::Internal(format!("a row delta batch has no u64 `{name}` column")))
}

/// `batch` without Lance's system columns, the others in their order.
fn without_system_columns(batch: &RecordBatch) -> Result<RecordBatch> {
    let keep: Vec<usize> = batch
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !SYSTEM_COLUMNS.contains(&f.name().as_str()))
        .map(|(i, _)| i)
        .collect();
    batch.project(&keep).map_err(|e| OmniError::Internal(format!("projecting a row delta batch: {e}")))
}
