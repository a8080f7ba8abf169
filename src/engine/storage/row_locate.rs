//! Finding the live rows that hold given values of an indexed column, by
//! the column's BTree index and a scan of only the fragments it does not
//! cover: what a keyed write or a key lookup reads, instead of the table.
//!
//! A BTree segment Lance 14 built answers with row addresses; one an older
//! Lance built, with stable row ids. Lance maps either through a row-id
//! index of the whole table, rebuilt at every version (it materialises the
//! row ids of every fragment with deletions), which a write pays once per
//! commit. Here an address is used as it is, and a row id is found in
//! each fragment's row-id sequence, loaded through the session's metadata
//! cache (keyed by fragment, not by version), so the cost follows the rows
//! found and the fragments the table has, never the rows it holds. An
//! answer that may be stale or approximate (row ids, which a rewrite moves
//! to rows with other values; an `AtMost` answer) is read back and
//! compared, so it never selects a wrong row; an exact answer in addresses
//! is used as it is (a rewrite of the indexed column withdraws the
//! fragment from the index's coverage, and deletion vectors are checked).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{BooleanArray, RecordBatch};
use datafusion::logical_expr::{BinaryExpr, Operator};
use datafusion::prelude::{Expr, col, lit};
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::ProjectionRequest;
use lance::dataset::TakeBuilder;
use lance::dataset::fragment::FileFragment;
use lance::dataset::rowids::load_row_id_sequence;
use lance::index::{DatasetIndexExt, DatasetIndexInternalExt};
use lance_index::frag_reuse::FRAG_REUSE_INDEX_NAME;
use lance_index::metrics::NoOpMetricsCollector;
use lance_index::scalar::{SargableQuery, SearchResult};
use lance_select::RowSetOps;
use lance_table::format::Fragment;
use tracing::{Instrument, info_span};

use crate::protocol::{OmniError, Result};

const ROW_ADDR: &str = "_rowaddr";

/// The live rows holding one of the looked-up values.
#[derive(Debug, Default)]
pub struct Located {
    /// Their row addresses, one per row of `rows`, in the same order.
    pub addresses: Vec<u64>,
    /// The rows (the requested columns and the looked-up one).
    pub rows: Vec<RecordBatch>,
}

impl Located {
    /// Number of rows found.
    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Whether no row was found.
    pub fn is_empty(&self) -> bool {
        self.addresses.is_empty()
    }
}

/// `column = v` or `column IN (v, …)` with literal values: the filters a
/// key lookup is. Anything else is `None`.
pub fn key_filter(filter: &Expr) -> Option<(String, Vec<ScalarValue>)> {
    let literal = |e: &Expr| match e {
        Expr::Literal(v, _) if !v.is_null() => Some(v.clone()),
        _ => None,
    };
    match filter {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => match (left.as_ref(), right.as_ref()) {
            (Expr::Column(c), v) | (v, Expr::Column(c)) => Some((c.name.clone(), vec![literal(v)?])),
            _ => None,
        },
        Expr::InList(list) if !list.negated => match list.expr.as_ref() {
            Expr::Column(c) => Some((c.name.clone(), list.list.iter().map(literal).collect::<Option<_>>()?)),
            _ => None,
        },
        _ => None,
    }
}

/// The live rows of `ds` whose `column` holds one of `values`, with the
/// columns `projection` names (every column when empty). `None` when
/// `column` has no BTree index with recorded coverage, or the index
/// answers in a form this cannot map (the caller then scans).
pub async fn locate(
    ds: &Dataset,
    column: &str,
    values: &[ScalarValue],
    projection: &[&str],
) -> Result<Option<Located>> {
    let Some(found) = find(ds, column, values).instrument(info_span!("locate.index", column)).await? else {
        return Ok(None);
    };
    let ds = &Arc::new(ds.clone());
    let mut columns: Vec<String> = match projection {
        [] => ds.schema().fields.iter().map(|f| f.name.clone()).collect(),
        some => some.iter().map(|c| c.to_string()).collect(),
    };
    columns.push(column.to_string());
    let mut seen = HashSet::new();
    columns.retain(|c| seen.insert(c.clone()));
    let mut located = take_matching(ds, &found.addresses, &columns, column, &found.values).await?;
    merge_into(&mut located, scan_tail(ds, &found, &columns, column).await?);
    Ok(Some(located))
}

/// The addresses of the live rows of `ds` whose `column` holds one of
/// `values`, as [`locate`] finds them, without reading the rows the index
/// names when its answer is exact: what a keyed write needs to replace them.
pub async fn locate_addresses(ds: &Dataset, column: &str, values: &[ScalarValue]) -> Result<Option<Vec<u64>>> {
    let Some(found) = find(ds, column, values).instrument(info_span!("locate.index", column)).await? else {
        return Ok(None);
    };
    let ds = &Arc::new(ds.clone());
    let columns = [column.to_string()];
    let mut addresses = if found.exact {
        found.addresses.clone()
    } else {
        take_matching(ds, &found.addresses, &columns, column, &found.values).await?.addresses
    };
    addresses.extend(scan_tail(ds, &found, &columns, column).await?.addresses);
    Ok(Some(addresses))
}

/// What a column's index says about some of its values.
struct Found {
    /// Addresses of the live rows it lists, ascending.
    addresses: Vec<u64>,
    /// Whether those rows hold the values for sure (every segment answered
    /// exactly, in row addresses): else each is read back and compared.
    exact: bool,
    /// The fragments it does not cover.
    tail: Vec<Fragment>,
    /// The values, in the column's type.
    values: HashSet<ScalarValue>,
}

/// Above this many values a lookup reads its index pages through the
/// shared read session, whose cache is ten times the writers' shared one:
/// 500 keys spread over a million rows touch every page of the index.
const SHARED_PAGES_ABOVE: usize = 32;

/// Search `column`'s BTree segments for `values`.
async fn find(ds: &Dataset, column: &str, values: &[ScalarValue]) -> Result<Option<Found>> {
    let shared;
    let ds = if values.len() > SHARED_PAGES_ABOVE {
        let uri = super::table::table_uri(ds);
        shared = super::table::open_table_for_read(&uri, ds.manifest.branch.as_deref(), ds.version().version).await?;
        &*shared
    } else {
        ds
    };
    let name = format!("{column}_btree");
    let segments_all = ds.load_indices().await.map_err(|e| storage_err(ds, "listing indexes", e))?;
    let segments: Vec<_> = segments_all.iter().filter(|i| i.name == name).collect();
    // A compaction that deferred remapping leaves addresses only Lance's
    // fragment-reuse index translates.
    let deferred = segments_all.iter().any(|i| i.name == FRAG_REUSE_INDEX_NAME);
    if segments.is_empty() || deferred || !ds.manifest.uses_stable_row_ids() {
        return Ok(None);
    }
    let Some(data_type) = ds.schema().field(column).map(|f| f.data_type()) else { return Ok(None) };
    // A value the column's type cannot hold is for the scan to judge.
    let Ok(values) = values.iter().map(|v| v.cast_to(&data_type)).collect::<std::result::Result<Vec<_>, _>>() else {
        return Ok(None);
    };
    let mut covered = Vec::with_capacity(segments.len());
    let (mut addresses, mut row_ids, mut exact) = (Vec::new(), Vec::new(), true);
    let query = SargableQuery::IsIn(values.clone());
    let present: HashSet<u64> = ds.manifest.fragments.iter().map(|f| f.id).collect();
    for segment in &segments {
        let Some(bitmap) = &segment.fragment_bitmap else { return Ok(None) };
        covered.push(bitmap);
        let index = ds
            .open_scalar_index(column, &segment.uuid, &NoOpMetricsCollector)
            .await
            .map_err(|e| storage_err(ds, "opening an index", e))?;
        let found =
            index.search(&query, &NoOpMetricsCollector).await.map_err(|e| storage_err(ds, "searching an index", e))?;
        let set = match found {
            SearchResult::Exact(set) => set,
            SearchResult::AtMost(set) => {
                exact = false;
                set
            }
            SearchResult::AtLeast(_) => return Ok(None),
        };
        let set = set.true_rows();
        if set.len().is_none() {
            return Ok(None);
        }
        let Some(found) = set.row_addrs() else { return Ok(None) };
        let found = found.map(u64::from);
        if segment.results_are_row_addrs() {
            // Lance 14's BTree stores row addresses: only those of fragments
            // the segment still covers (a rewrite of the column withdraws a
            // fragment) and the table still holds are rows.
            let current = |a: &u64| present.contains(&(a >> 32)) && bitmap.contains((a >> 32) as u32);
            addresses.extend(found.filter(current));
        } else {
            // A row id may have moved to a row with other values since.
            exact = false;
            row_ids.extend(found);
        }
    }
    addresses.extend(addresses_of(ds, row_ids).await?);
    addresses.sort_unstable();
    addresses.dedup();
    live_only(ds, &mut addresses).await?;
    let indexed = |id: u64| u32::try_from(id).is_ok_and(|id| covered.iter().any(|b| b.contains(id)));
    let tail = ds.manifest.fragments.iter().filter(|f| !indexed(f.id)).cloned().collect();
    Ok(Some(Found { addresses, exact, tail, values: values.into_iter().collect() }))
}

/// The rows of the fragments the index does not cover holding the values.
async fn scan_tail(ds: &Arc<Dataset>, found: &Found, columns: &[String], column: &str) -> Result<Located> {
    if found.tail.is_empty() {
        return Ok(Located::default());
    }
    let filter = col(column).in_list(found.values.iter().cloned().map(lit).collect(), false);
    let span = info_span!("locate.tail", fragments = found.tail.len());
    scan_with_addresses(ds, found.tail.clone(), columns, filter).instrument(span).await
}

/// The addresses of the rows with stable ids `row_ids`, found in each
/// fragment's row-id sequence (an id the index kept for a row compaction
/// moved is found where the row is now, and one a rewrite copied in
/// several fragments everywhere: the deletion vectors pick the live one).
async fn addresses_of(ds: &Dataset, mut row_ids: Vec<u64>) -> Result<Vec<u64>> {
    row_ids.sort_unstable();
    row_ids.dedup();
    let (Some(&low), Some(&high)) = (row_ids.first(), row_ids.last()) else { return Ok(vec![]) };
    let mut out = Vec::new();
    for fragment in ds.manifest.fragments.iter() {
        if fragment.row_id_meta.is_none() {
            continue;
        }
        let sequence = load_row_id_sequence(ds, fragment).await.map_err(|e| storage_err(ds, "loading row ids", e))?;
        if sequence.row_id_range().is_none_or(|r| *r.end() < low || *r.start() > high) {
            continue;
        }
        let mut offset = 0u64;
        for segment in sequence.segments() {
            if let Some(range) = segment.range() {
                let from = row_ids.partition_point(|id| id < range.start());
                for id in row_ids[from..].iter().take_while(|id| *id <= range.end()) {
                    if let Some(position) = segment.position(*id) {
                        out.push((fragment.id << 32) | (offset + position as u64));
                    }
                }
            }
            offset += segment.len() as u64;
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Refuse `addresses` unless each is a live row of `ds` (its fragment
/// holds it and has not deleted it): the invariant a located write rests on.
pub async fn assert_live(ds: &Dataset, addresses: &[u64]) -> Result<()> {
    let mut live = addresses.to_vec();
    live.sort_unstable();
    live.dedup();
    let wanted = live.len();
    let rows = |id: u64| ds.manifest.fragments.iter().find(|f| f.id == id).and_then(|f| f.physical_rows);
    live.retain(|a| rows(a >> 32).is_some_and(|n| (*a & 0xffff_ffff) < n as u64));
    live_only(ds, &mut live).await?;
    if live.len() != wanted || wanted != addresses.len() {
        return Err(OmniError::Internal(format!(
            "{}: {} of {} located rows are not live rows (or repeat)",
            ds.uri(),
            addresses.len() - live.len(),
            addresses.len()
        )));
    }
    Ok(())
}

/// Drop the addresses whose fragment deleted them.
async fn live_only(ds: &Dataset, addresses: &mut Vec<u64>) -> Result<()> {
    let mut by_fragment: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for a in addresses.iter() {
        by_fragment.entry(a >> 32).or_default().push(*a);
    }
    let mut live = Vec::with_capacity(addresses.len());
    let mut shared: Option<Arc<Dataset>> = None;
    for (id, addrs) in by_fragment {
        let Some(fragment) = ds.manifest.fragments.iter().find(|f| f.id == id) else { continue };
        if fragment.deletion_file.is_none() {
            live.extend(addrs);
            continue;
        }
        let ds = shared.get_or_insert_with(|| Arc::new(ds.clone()));
        let deleted = FileFragment::new(ds.clone(), fragment.clone())
            .get_deletion_vector()
            .await
            .map_err(|e| storage_err(ds, "reading a deletion vector", e))?;
        live.extend(addrs.into_iter().filter(|a| !deleted.as_ref().is_some_and(|d| d.contains(*a as u32))));
    }
    *addresses = live;
    Ok(())
}

/// The rows at `addresses` whose `column` holds a wanted value.
async fn take_matching(
    ds: &Arc<Dataset>,
    addresses: &[u64],
    columns: &[String],
    column: &str,
    wanted: &HashSet<ScalarValue>,
) -> Result<Located> {
    if addresses.is_empty() {
        return Ok(Located::default());
    }
    let take = async {
        let schema = ds.schema().project(columns)?;
        let projection = ProjectionRequest::Schema(Arc::new(schema)).into_projection_plan(ds.clone())?;
        TakeBuilder::try_new_from_addresses(ds.clone(), addresses.to_vec(), Arc::new(projection))?.execute().await
    };
    let batch = take.await.map_err(|e| storage_err(ds, "taking located rows", e))?;
    if batch.num_rows() != addresses.len() {
        return Err(OmniError::Internal(format!(
            "a take of {} rows of {} returned {}",
            addresses.len(),
            ds.uri(),
            batch.num_rows()
        )));
    }
    let values = batch
        .column_by_name(column)
        .ok_or_else(|| OmniError::Internal(format!("a take of `{column}` from {} lacks it", ds.uri())))?;
    let mut keep = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let v = ScalarValue::try_from_array(values, i).map_err(|e| storage_err(ds, "reading a located value", e))?;
        keep.push(wanted.contains(&v));
    }
    let mask = BooleanArray::from(keep);
    let kept: Vec<u64> = addresses.iter().zip(mask.values().iter()).filter(|(_, k)| *k).map(|(a, _)| *a).collect();
    let rows = arrow::compute::filter_record_batch(&batch, &mask)
        .map_err(|e| OmniError::Internal(format!("filtering located rows: {e}")))?;
    Ok(Located { addresses: kept, rows: vec![rows] })
}

/// A filtered scan of `fragments` with each row's address.
async fn scan_with_addresses(
    ds: &Arc<Dataset>,
    fragments: Vec<Fragment>,
    columns: &[String],
    filter: Expr,
) -> Result<Located> {
    let scan = async {
        let mut scanner = ds.scan();
        scanner.with_fragments(fragments).use_scalar_index(false).with_row_address();
        scanner.project(columns)?;
        scanner.filter_expr(filter);
        scanner.try_into_stream().await?.try_collect::<Vec<_>>().await
    };
    let batches = scan.await.map_err(|e| storage_err(ds, "scanning unindexed fragments", e))?;
    let mut located = Located::default();
    for batch in batches {
        let Some(addrs) = batch.column_by_name(ROW_ADDR).and_then(|c| c.as_primitive_opt::<UInt64Type>()) else {
            return Err(OmniError::Internal(format!("a scan of {} returned no row addresses", ds.uri())));
        };
        located.addresses.extend(addrs.values().iter().copied());
        let keep: Vec<usize> =
            (0..batch.num_columns()).filter(|i| batch.schema().field(*i).name() != ROW_ADDR).collect();
        let rows = batch.project(&keep).map_err(|e| OmniError::Internal(format!("projecting scanned rows: {e}")))?;
        located.rows.push(rows);
    }
    Ok(located)
}

/// Add `more` (rows of fragments the index does not cover) to `into`.
fn merge_into(into: &mut Located, more: Located) {
    into.addresses.extend(more.addresses);
    into.rows.extend(more.rows.into_iter().filter(|b| b.num_rows() > 0));
}

fn storage_err(ds: &Dataset, what: &str, e: impl std::fmt::Display) -> OmniError {
    OmniError::storage(format!("{what} of {}", ds.uri()), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equality_and_in_lists_of_literals_are_key_filters_and_nothing_else_is() {
        let (c, v) = key_filter(&col("id").eq(lit("a"))).expect("eq");
        assert_eq!((c.as_str(), v.len()), ("id", 1));
        let (c, v) = key_filter(&lit(3i32).eq(col("age"))).expect("flipped");
        assert_eq!((c.as_str(), v), ("age", vec![ScalarValue::Int32(Some(3))]));
        let (c, v) = key_filter(&col("src").in_list(vec![lit("a"), lit("b")], false)).expect("in");
        assert_eq!((c.as_str(), v.len()), ("src", 2));
        assert!(key_filter(&col("src").in_list(vec![lit("a")], true)).is_none(), "NOT IN");
        assert!(key_filter(&col("age").gt(lit(3))).is_none(), "range");
        assert!(key_filter(&col("id").eq(lit(ScalarValue::Utf8(None)))).is_none(), "= NULL matches nothing");
        assert!(key_filter(&col("a").eq(col("b"))).is_none(), "two columns");
    }
}
