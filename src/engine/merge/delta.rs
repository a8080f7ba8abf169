//! One table's three-way delta: a fingerprint of every row by `id` at the
//! base, source and target pins, the row rule applied per id, and the source
//! rows the merge writes.
//!
//! Memory grows with the number of rows (one id and a 16-byte fingerprint
//! each, per side) and with the size of the delta, never with the table's
//! data: rows are streamed one scan batch at a time, and only the chosen
//! source rows are kept.

use std::collections::{BTreeSet, HashMap, HashSet};

use arrow::compute::filter_record_batch;
use arrow::row::{RowConverter, SortField};
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use futures::StreamExt;
use lance::Dataset;
use sha2::{Digest, Sha256};

use crate::engine::storage::table;
use crate::engine::three_way::{ConflictKind, MergeConflict, RowChoice, choose};
use crate::protocol::{OmniError, Result};

/// A row's content fingerprint (SHA-256, truncated): equal rows, equal prints.
type Print = [u8; 16];

/// Every row's fingerprint by id, at the dataset's checked-out version.
pub async fn fingerprints(ds: &Dataset) -> Result<HashMap<String, Print>> {
    let mut out = HashMap::new();
    let mut stream = table::scan_stream(ds).await?;
    let mut converter: Option<RowConverter> = None;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let conv = match &mut converter {
            Some(c) => c,
            None => {
                let fields = batch.schema().fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
                converter.insert(RowConverter::new(fields).map_err(|e| arrow_err(ds, e))?)
            }
        };
        let rows = conv.convert_columns(batch.columns()).map_err(|e| arrow_err(ds, e))?;
        let ids = id_column(ds, &batch)?;
        for i in 0..batch.num_rows() {
            let digest = Sha256::digest(rows.row(i).as_ref());
            let mut print = [0u8; 16];
            print.copy_from_slice(&digest[..16]);
            out.insert(ids.value(i).to_string(), print);
        }
    }
    Ok(out)
}

fn arrow_err(ds: &Dataset, e: impl std::fmt::Display) -> OmniError {
    OmniError::Internal(format!("fingerprinting rows of {}: {e}", ds.uri()))
}

fn id_column<'b>(ds: &Dataset, batch: &'b RecordBatch) -> Result<&'b StringArray> {
    batch
        .column_by_name("id")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| OmniError::Internal(format!("{} has no string `id` column", ds.uri())))
}

/// What the row rule decided for one table.
#[derive(Debug, Default)]
pub struct Delta {
    /// Ids whose source row the merge writes, absent from the target.
    pub inserted: BTreeSet<String>,
    /// Ids whose source row replaces the target's.
    pub updated: BTreeSet<String>,
    /// Ids the merge deletes from the target.
    pub deleted: BTreeSet<String>,
    /// Row conflicts (none of them is written).
    pub conflicts: Vec<MergeConflict>,
}

impl Delta {
    /// Whether the merge changes nothing in this table.
    pub fn is_empty(&self) -> bool {
        self.inserted.is_empty() && self.updated.is_empty() && self.deleted.is_empty()
    }
}

/// Apply the row rule to every id of `base` ∪ `source` ∪ `target`.
pub fn classify(
    table_key: &str,
    base: &HashMap<String, Print>,
    source: &HashMap<String, Print>,
    target: &HashMap<String, Print>,
) -> Delta {
    let mut delta = Delta::default();
    let ids: HashSet<&String> = base.keys().chain(source.keys()).chain(target.keys()).collect();
    let mut ids: Vec<&String> = ids.into_iter().collect();
    ids.sort();
    for id in ids {
        let (t, s) = (target.get(id), source.get(id));
        match choose(base.get(id), s, t) {
            RowChoice::Keep => {}
            RowChoice::TakeSource if t.is_none() => {
                delta.inserted.insert(id.clone());
            }
            RowChoice::TakeSource => {
                delta.updated.insert(id.clone());
            }
            RowChoice::Delete => {
                delta.deleted.insert(id.clone());
            }
            RowChoice::Conflict(kind) => delta.conflicts.push(row_conflict(table_key, id, kind)),
        }
    }
    delta
}

fn row_conflict(table_key: &str, id: &str, kind: ConflictKind) -> MergeConflict {
    let what = match kind {
        ConflictKind::DivergentInsert => "was inserted on both branches with different values",
        ConflictKind::DeleteVsUpdate => "was deleted on one branch and updated on the other",
        _ => "was updated differently on both branches",
    };
    MergeConflict::new(table_key, Some(id), kind, format!("{table_key} `{id}` {what}"))
}

/// The rows of `ds` whose ids are in `ids`, streamed and filtered batch by batch.
pub async fn rows_with_ids(ds: &Dataset, ids: &HashSet<&str>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut stream = table::scan_stream(ds).await?;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let col = id_column(ds, &batch)?;
        let mask: BooleanArray =
            (0..batch.num_rows()).map(|i| Some(col.is_valid(i) && ids.contains(col.value(i)))).collect();
        let kept = filter_record_batch(&batch, &mask).map_err(|e| arrow_err(ds, e))?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}
