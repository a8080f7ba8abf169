//! The ids of a keyed write's rows, and the rows of a batch by id: what
//! [`super::table`]'s keyed staging needs beside [`super::row_locate`].

use std::collections::HashSet;

use arrow_array::{BooleanArray, RecordBatch, StringArray};

use crate::protocol::{OmniError, Result};

/// The `id`s of `batches` when all are distinct (a batch repeating a key is
/// for the merge to refuse or fold, never an append), else `None`.
pub fn distinct_ids(batches: &[RecordBatch]) -> Option<Vec<&str>> {
    let mut seen = HashSet::new();
    for b in batches {
        let ids = b.column_by_name("id")?.as_any().downcast_ref::<StringArray>()?;
        for id in ids.iter() {
            if !seen.insert(id?) {
                return None;
            }
        }
    }
    Some(seen.into_iter().collect())
}

/// The non-null values of string `column` across `batches`.
pub fn string_values(batches: &[RecordBatch], column: &str) -> Result<HashSet<String>> {
    let mut out = HashSet::new();
    for b in batches {
        let values = b
            .column_by_name(column)
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| OmniError::Internal(format!("located rows lack a string `{column}` column")))?;
        out.extend(values.iter().flatten().map(str::to_string));
    }
    Ok(out)
}

/// The rows of `batches` whose `id` is in `ids`.
pub fn only_ids(batches: Vec<RecordBatch>, ids: &HashSet<String>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        let keep: BooleanArray = b
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| OmniError::Internal("keyed rows lack a string `id` column".to_string()))?
            .iter()
            .map(|id| Some(id.is_some_and(|id| ids.contains(id))))
            .collect();
        let kept = arrow::compute::filter_record_batch(&b, &keep)
            .map_err(|e| OmniError::Internal(format!("selecting keyed rows: {e}")))?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}
