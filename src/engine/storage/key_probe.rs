//! Proving keys absent from a table without reading it.
//!
//! A keyed write of new ids is an append; only a key that may exist needs
//! Lance's merge-insert, whose indexed path maps the index's stable row ids
//! to addresses through a row-id index of the whole table, built per
//! version (measured: 80 ms of a 100 ms one-row insert into 1M rows whose
//! large fragment had one deletion). The `id` BTree answers "which rows
//! hold these keys" from its own pages, and the fragments it does not cover
//! are few and small (rows written since the index was built), so together
//! they prove absence reading O(keys × log n + tail) rows.

use std::collections::HashSet;

use arrow_array::RecordBatch;
use datafusion::prelude::{col, lit};
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use lance::Dataset;
use lance::index::{DatasetIndexExt, DatasetIndexInternalExt};
use lance_index::metrics::NoOpMetricsCollector;
use lance_index::scalar::{SargableQuery, SearchResult};

use crate::protocol::{OmniError, Result};

/// The name of the key column's BTree index (`IndexSpec::name` of `id`).
const ID_INDEX: &str = "id_btree";

/// Whether no row of `ds` — live or deleted, as far as the index knows —
/// holds any of `keys` in `id`: the `id` index finds none of them among the
/// fragments it covers, and a scan of the others finds none. `None` when the
/// table has no `id` index (or one whose coverage is not recorded), so
/// nothing is proved. A key the index lists, even for a deleted row, counts
/// as present: the caller then merges, which tells them apart.
pub async fn ids_absent(ds: &Dataset, keys: &[&str]) -> Result<Option<bool>> {
    let ctx = |what: &str| format!("probing the id index of {}: {what}", ds.uri());
    let segments = ds.load_indices().await.map_err(|e| OmniError::storage(ctx("listing indexes"), e))?;
    let segments: Vec<_> = segments.iter().filter(|i| i.name == ID_INDEX).collect();
    if segments.is_empty() {
        return Ok(None);
    }
    let mut covered = Vec::with_capacity(segments.len());
    for segment in &segments {
        let Some(bitmap) = &segment.fragment_bitmap else { return Ok(None) };
        covered.push(bitmap);
    }
    let values: Vec<ScalarValue> = keys.iter().map(|k| ScalarValue::Utf8(Some(k.to_string()))).collect();
    let query = SargableQuery::IsIn(values);
    for segment in &segments {
        let index = ds
            .open_scalar_index("id", &segment.uuid, &NoOpMetricsCollector)
            .await
            .map_err(|e| OmniError::storage(ctx("opening the index"), e))?;
        let found = index
            .search(&query, &NoOpMetricsCollector)
            .await
            .map_err(|e| OmniError::storage(ctx("searching the index"), e))?;
        let empty = match &found {
            SearchResult::Exact(rows) | SearchResult::AtMost(rows) => rows.is_empty(),
            SearchResult::AtLeast(_) => false,
        };
        if !empty {
            return Ok(Some(false));
        }
    }
    let indexed = |id: u64| u32::try_from(id).is_ok_and(|id| covered.iter().any(|b| b.contains(id)));
    let tail: Vec<_> = ds.manifest.fragments.iter().filter(|f| !indexed(f.id)).cloned().collect();
    if tail.is_empty() {
        return Ok(Some(true));
    }
    Ok(Some(!any_in_fragments(ds, tail, keys).await?))
}

/// Whether a plain scan of `fragments` finds a live row holding one of `keys`.
async fn any_in_fragments(ds: &Dataset, fragments: Vec<lance_table::format::Fragment>, keys: &[&str]) -> Result<bool> {
    let ctx = || format!("scanning the unindexed fragments of {}", ds.uri());
    let list: Vec<_> = keys.iter().map(|k| lit(k.to_string())).collect();
    let mut scanner = ds.scan();
    scanner
        .with_fragments(fragments)
        .use_scalar_index(false)
        .project(&["id"])
        .map_err(|e| OmniError::storage(ctx(), e))?
        .filter_expr(col("id").in_list(list, false));
    let stream = scanner.try_into_stream().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(|e| OmniError::storage(ctx(), e))?;
    Ok(batches.iter().any(|b| b.num_rows() > 0))
}

/// The `id`s of `batches` when all are distinct (a batch repeating a key is
/// for the merge to refuse or fold, never an append), else `None`.
pub fn distinct_ids(batches: &[RecordBatch]) -> Option<Vec<&str>> {
    let mut seen = HashSet::new();
    for b in batches {
        let ids = b.column_by_name("id")?.as_any().downcast_ref::<arrow_array::StringArray>()?;
        for id in ids.iter() {
            if !seen.insert(id?) {
                return None;
            }
        }
    }
    Some(seen.into_iter().collect())
}
