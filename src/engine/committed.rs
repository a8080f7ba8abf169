//! Reads of committed rows at a manifest pin, for validation before effects
//! (key conflicts, uniqueness, referential integrity, cardinality).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{Array, StringArray};
use lance::Dataset;

use crate::engine::manifest::TableEntry;
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};

/// Values per `IN (...)` filter, so a predicate stays a reasonable size.
const IN_CHUNK: usize = 512;

/// Open a table exactly at its manifest pin.
pub async fn open_pinned(root: &Root, entry: &TableEntry) -> Result<Arc<Dataset>> {
    table::open_table(&root.child_uri(&entry.location), entry.branch.as_deref(), Some(entry.version)).await
}

/// A SQL string literal (single quotes doubled).
pub fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The distinct values of the string column `column` among rows whose
/// `filter_column` is one of `values`.
async fn matching(ds: &Dataset, filter_column: &str, values: &[String], column: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for chunk in values.chunks(IN_CHUNK) {
        let list: Vec<String> = chunk.iter().map(|v| sql_str(v)).collect();
        let filter = format!("{filter_column} IN ({})", list.join(", "));
        for batch in table::scan(ds, Some(&filter)).await? {
            let col = batch
                .column_by_name(column)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| OmniError::Internal(format!("{} has no string column `{column}`", ds.uri())))?;
            out.extend((0..col.len()).filter(|i| col.is_valid(*i)).map(|i| col.value(i).to_string()));
        }
    }
    Ok(out)
}

/// Above this many probes one full scan of the column beats filtered scans.
const FULL_SCAN_ABOVE: usize = 4 * IN_CHUNK;

/// Which of `ids` exist in the table.
pub async fn existing_ids(ds: &Dataset, ids: &[String]) -> Result<HashSet<String>> {
    if ids.len() <= FULL_SCAN_ABOVE {
        return Ok(matching(ds, "id", ids, "id").await?.into_iter().collect());
    }
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    let mut out = HashSet::new();
    for batch in table::scan_columns(ds, &["id"]).await? {
        let col = batch
            .column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .ok_or_else(|| OmniError::Internal(format!("{} has no string column `id`", ds.uri())))?;
        out.extend((0..col.len()).map(|i| col.value(i)).filter(|id| wanted.contains(id)).map(str::to_string));
    }
    Ok(out)
}

/// For each given value of the string column `column`, the ids of the rows holding it.
pub async fn ids_by_value(ds: &Dataset, column: &str, values: &[String]) -> Result<HashMap<String, Vec<String>>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    if values.len() > FULL_SCAN_ABOVE {
        let wanted: HashSet<&str> = values.iter().map(String::as_str).collect();
        for batch in table::scan_columns(ds, &[column, "id"]).await? {
            let get = |i: usize| batch.column(i).as_any().downcast_ref::<StringArray>().cloned();
            let (Some(vals), Some(ids)) = (get(0), get(1)) else {
                return Err(OmniError::Internal(format!("{} has no string column `{column}`", ds.uri())));
            };
            for i in 0..batch.num_rows() {
                if vals.is_valid(i) && wanted.contains(vals.value(i)) {
                    out.entry(vals.value(i).to_string()).or_default().push(ids.value(i).to_string());
                }
            }
        }
        return Ok(out);
    }
    for chunk in values.chunks(IN_CHUNK) {
        let list: Vec<String> = chunk.iter().map(|v| sql_str(v)).collect();
        let filter = format!("{column} IN ({})", list.join(", "));
        for batch in table::scan(ds, Some(&filter)).await? {
            let get = |name: &str| {
                batch
                    .column_by_name(name)
                    .and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned())
                    .ok_or_else(|| OmniError::Internal(format!("{} has no string column `{name}`", ds.uri())))
            };
            let (vals, ids) = (get(column)?, get("id")?);
            for i in 0..batch.num_rows() {
                if vals.is_valid(i) {
                    out.entry(vals.value(i).to_string()).or_default().push(ids.value(i).to_string());
                }
            }
        }
    }
    Ok(out)
}

/// The ids of edges whose `src` (or `dst`) is one of `nodes`, keyed by that endpoint.
pub async fn edges_by_endpoint(ds: &Dataset, endpoint: &str, nodes: &[String]) -> Result<HashMap<String, Vec<String>>> {
    ids_by_value(ds, endpoint, nodes).await
}
