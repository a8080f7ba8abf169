//! Cross-row rules checked against committed state at the pins before any
//! effect: `@unique` and `@card`. (Row-level rules live in `validate`.)

use std::collections::{HashMap, HashSet};

use lance::Dataset;
use serde_json::Value;

use crate::engine::committed;
use crate::engine::rows::EntityRow;
use crate::protocol::{OmniError, Result};

/// Single-column `@unique` sets over string values: a value written by
/// `rows` may not be held by a committed row that stays live (one that is
/// neither among `rows` nor in `replaced`).
pub async fn unique_against_committed(
    ds: &Dataset,
    type_name: &str,
    uniques: &[Vec<String>],
    rows: &[EntityRow],
    replaced: &HashSet<String>,
) -> Result<()> {
    let written: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    for set in uniques.iter().filter(|s| s.len() == 1) {
        let column = &set[0];
        let mut by_value: HashMap<String, &str> = HashMap::new();
        for r in rows {
            if let Some(Value::String(v)) = r.column(column) {
                by_value.insert(v, &r.id);
            }
        }
        if by_value.is_empty() {
            continue;
        }
        let values: Vec<String> = by_value.keys().cloned().collect();
        for (value, holders) in committed::ids_by_value(ds, column, &values).await? {
            let mine = by_value.get(&value).copied().unwrap_or_default();
            let live_other =
                holders.iter().find(|h| h.as_str() != mine && !written.contains(h.as_str()) && !replaced.contains(*h));
            if let Some(other) = live_other {
                return Err(OmniError::BadRequest(format!(
                    "@unique({column}) violated on {type_name}: `{value}` is already held by `{other}` (writing `{mine}`)"
                )));
            }
        }
    }
    Ok(())
}

/// Edge cardinality per source node after a write.
///
/// `written` are the edges written (new or replaced), `removed` the ids of
/// committed edges that go away, `sources` every source node whose edge set
/// changed. `committed` is the pinned edge table (`None` when the write
/// replaces the whole table).
pub async fn card_per_source(
    committed_edges: Option<&Dataset>,
    type_name: &str,
    (min, max): (u32, Option<u32>),
    written: &[EntityRow],
    removed: &HashSet<String>,
    sources: &HashSet<String>,
) -> Result<()> {
    if min == 0 && max.is_none() {
        return Ok(());
    }
    let mut per_src: HashMap<String, HashSet<String>> = sources.iter().map(|s| (s.clone(), HashSet::new())).collect();
    let written_ids: HashSet<&str> = written.iter().map(|r| r.id.as_str()).collect();
    if let Some(ds) = committed_edges {
        let srcs: Vec<String> = per_src.keys().cloned().collect();
        for (src, ids) in committed::edges_by_endpoint(ds, "src", &srcs).await? {
            let live = ids.into_iter().filter(|id| !removed.contains(id) && !written_ids.contains(id.as_str()));
            per_src.entry(src).or_default().extend(live);
        }
    }
    for r in written {
        if let Some(src) = &r.src {
            per_src.entry(src.clone()).or_default().insert(r.id.clone());
        }
    }
    for (src, ids) in per_src {
        let n = ids.len() as u64;
        if n < u64::from(min) || max.is_some_and(|m| n > u64::from(m)) {
            let bound = max.map_or(format!("{min}.."), |m| format!("{min}..{m}"));
            return Err(OmniError::BadRequest(format!(
                "@card({bound}) violated on {type_name}: `{src}` would have {n} edges"
            )));
        }
    }
    Ok(())
}
