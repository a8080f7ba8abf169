//! Reads of committed rows at a manifest pin, for validation before effects
//! (key conflicts, uniqueness, referential integrity, cardinality).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use datafusion::scalar::ScalarValue;
use futures::TryStreamExt;
use lance::Dataset;

use crate::engine::manifest::TableEntry;
use crate::engine::storage::{Root, row_locate, table};
use crate::protocol::{OmniError, Result};

/// Values per `IN (...)` filter, so a predicate stays a reasonable size.
const IN_CHUNK: usize = 512;

/// Open a table exactly at its manifest pin.
pub async fn open_pinned(root: &Root, entry: &TableEntry) -> Result<Arc<Dataset>> {
    table::open_table(&root.child_uri(&entry.location), entry.branch.as_deref(), Some(entry.version)).await
}

/// Pinned handles kept for reads, keyed by (dataset, native branch,
/// version, table id): a version never changes, and the table id keeps a
/// re-created table apart from a dropped one at the same path. A version
/// cleanup removes is reachable only through a commit cleanup removed too,
/// which fails before any table is opened.
type PinnedKey = (String, Option<String>, u64, String);

/// [`open_pinned`] for a query: a handle already open at the same pin, or one
/// opened through the shared read session's caches.
pub async fn open_pinned_for_read(root: &Root, entry: &TableEntry) -> Result<Arc<Dataset>> {
    let handles = pinned_handles();
    let uri = root.child_uri(&entry.location);
    let key: PinnedKey = (uri.clone(), entry.branch.clone(), entry.version, entry.table_id.clone());
    if let Some(ds) = handles.get(&key) {
        return Ok(ds);
    }
    let ds = table::open_table_for_read(&uri, entry.branch.as_deref(), entry.version).await?;
    handles.insert(key, ds.clone());
    Ok(ds)
}

/// At most the budget's count of handles (each holds its version's
/// manifest); past it the least used one goes, so the pins every query
/// reads (the branch heads) stay open.
fn pinned_handles() -> &'static quick_cache::sync::Cache<PinnedKey, Arc<Dataset>> {
    static HANDLES: std::sync::OnceLock<quick_cache::sync::Cache<PinnedKey, Arc<Dataset>>> = std::sync::OnceLock::new();
    HANDLES.get_or_init(|| {
        let capacity = crate::engine::storage::caches::capacities().pinned_handles;
        quick_cache::sync::Cache::new(usize::try_from(capacity).unwrap_or(usize::MAX).max(1))
    })
}

/// Pinned handles kept for reads now.
pub fn pinned_handles_open() -> u64 {
    pinned_handles().len() as u64
}

/// A SQL string literal (single quotes doubled).
pub fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Above this many probes one full scan of the column beats filtered scans.
const FULL_SCAN_ABOVE: usize = 4 * IN_CHUNK;

/// At most this many values are looked up through the column's index
/// ([`row_locate::locate`]) when it has one, whatever the table's size.
const LOCATE_MAX: usize = 65_536;

/// Which of `ids` exist in the table.
pub async fn existing_ids(ds: &Dataset, ids: &[String]) -> Result<HashSet<String>> {
    // Usually none exists, which the index tells without reading a row.
    if ids.len() <= LOCATE_MAX {
        let keys: Vec<ScalarValue> = ids.iter().map(|v| ScalarValue::Utf8(Some(v.clone()))).collect();
        if row_locate::locate_addresses(ds, "id", &keys).await?.is_some_and(|a| a.is_empty()) {
            return Ok(HashSet::new());
        }
    }
    Ok(ids_by_value(ds, "id", ids).await?.into_keys().collect())
}

/// The smallest id of the table that `contains` holds, for a set of `count`
/// ids listed by `ids`. A set of at most [`LOCATE_MAX`] is looked up (through
/// the `id` index, else with filtered scans or one scan past
/// [`FULL_SCAN_ABOVE`]); a larger one (a bulk append load) is checked
/// against one streamed scan of the `id` column, so neither the set nor the
/// table's ids are copied.
pub async fn min_existing_id<'a>(
    ds: &Dataset,
    ids: impl Iterator<Item = &'a str>,
    count: usize,
    contains: impl Fn(&str) -> bool,
) -> Result<Option<String>> {
    if count <= LOCATE_MAX {
        let ids: Vec<String> = ids.map(str::to_string).collect();
        return Ok(existing_ids(ds, &ids).await?.into_iter().min());
    }
    let mut stream = table::scan_columns_stream(ds, &["id"]).await?;
    let mut min: Option<String> = None;
    while let Some(batch) = stream.try_next().await? {
        let column = strings(ds, &batch, "id")?;
        for id in column.iter().flatten().filter(|id| contains(id)) {
            if min.as_deref().is_none_or(|m| id < m) {
                min = Some(id.to_string());
            }
        }
    }
    Ok(min)
}

/// The string column `name` of `batch`.
fn strings(ds: &Dataset, batch: &RecordBatch, name: &str) -> Result<StringArray> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
        .ok_or_else(|| OmniError::Internal(format!("{} has no string column `{name}`", ds.uri())))
}

/// For each given value of the string column `column`, the ids of the rows holding it.
pub async fn ids_by_value(ds: &Dataset, column: &str, values: &[String]) -> Result<HashMap<String, Vec<String>>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    let wanted: HashSet<&str> = values.iter().map(String::as_str).collect();
    // Through the column's index when it has one: the rows found, not the table.
    let keys: Vec<ScalarValue> = values.iter().map(|v| ScalarValue::Utf8(Some(v.clone()))).collect();
    let located =
        if values.len() <= LOCATE_MAX { row_locate::locate(ds, column, &keys, &[column, "id"]).await? } else { None };
    let batches = if let Some(found) = located {
        found.rows
    } else if values.len() > FULL_SCAN_ABOVE {
        // One projected scan of the table beats many filtered ones.
        let columns: Vec<&str> = if column == "id" { vec!["id"] } else { vec![column, "id"] };
        table::scan_columns(ds, &columns).await?
    } else {
        let mut batches = Vec::new();
        for chunk in values.chunks(IN_CHUNK) {
            let list: Vec<String> = chunk.iter().map(|v| sql_str(v)).collect();
            batches.extend(table::scan(ds, Some(&format!("{column} IN ({})", list.join(", ")))).await?);
        }
        batches
    };
    for batch in &batches {
        let (vals, ids) = (strings(ds, batch, column)?, strings(ds, batch, "id")?);
        for i in (0..batch.num_rows()).filter(|i| vals.is_valid(*i) && wanted.contains(vals.value(*i))) {
            out.entry(vals.value(i).to_string()).or_default().push(ids.value(i).to_string());
        }
    }
    Ok(out)
}

/// The ids of edges whose `src` (or `dst`) is one of `nodes`, keyed by that endpoint.
pub async fn edges_by_endpoint(ds: &Dataset, endpoint: &str, nodes: &[String]) -> Result<HashMap<String, Vec<String>>> {
    ids_by_value(ds, endpoint, nodes).await
}
