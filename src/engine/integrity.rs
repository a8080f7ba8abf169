//! Cross-row rules checked against committed state at the pins before any
//! effect: `@unique` and `@card`. (Row-level rules live in `validate`.)

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use lance::Dataset;
use serde_json::Value;

use datafusion::prelude::{Expr, col, lit};

use crate::engine::committed;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::table;
use crate::engine::values::json_scalar;
use crate::protocol::{OmniError, Result};

/// `@unique` sets (single or composite, any column type): a tuple written by
/// `rows` may not be held by a committed row that stays live (one that is
/// neither among `rows` nor `replaced`). A tuple with a null is exempt.
pub async fn unique_against_committed(
    ds: &Arc<Dataset>,
    type_name: &str,
    uniques: &[Vec<String>],
    rows: &[EntityRow],
    replaced: impl Fn(&str) -> bool,
    lines: Option<&[u32]>,
) -> Result<()> {
    refuse(unique_clash(ds, type_name, uniques, rows, replaced, lines).await?.map(|c| c.message))
}

/// A broken rule's message as the write path's refusal.
fn refuse(broken: Option<String>) -> Result<()> {
    broken.map_or(Ok(()), |message| Err(OmniError::BadRequest(message)))
}

/// A written row whose `@unique` tuple a committed row already holds.
#[derive(Debug)]
pub struct UniqueClash {
    /// What was broken, for a person.
    pub message: String,
    /// The row written.
    pub writer: EntityRow,
    /// The committed row that holds the tuple.
    pub holder: EntityRow,
}

/// [`unique_against_committed`]'s first clash, with both rows.
pub async fn unique_clash(
    ds: &Arc<Dataset>,
    type_name: &str,
    uniques: &[Vec<String>],
    rows: &[EntityRow],
    replaced: impl Fn(&str) -> bool,
    lines: Option<&[u32]>,
) -> Result<Option<UniqueClash>> {
    let written: HashSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let schema = ds.schema();
    for set in uniques.iter().filter(|s| !s.is_empty()) {
        let mut by_tuple: HashMap<String, usize> = HashMap::new();
        let mut firsts: Vec<Value> = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            let tuple: Option<Vec<Value>> = set.iter().map(|c| r.column(c).filter(|v| !v.is_null())).collect();
            if let Some(tuple) = tuple {
                firsts.push(tuple[0].clone());
                by_tuple.insert(Value::Array(tuple).to_string(), i);
            }
        }
        if by_tuple.is_empty() {
            continue;
        }
        let first_type = schema
            .field(&set[0])
            .map(|f| f.data_type())
            .ok_or_else(|| OmniError::Internal(format!("{type_name} has no column `{}`", set[0])))?;
        let probe: Vec<Expr> = firsts.iter().filter_map(|v| json_scalar(&first_type, v).ok()).map(lit).collect();
        let batches = table::scan_expr(ds, Some(col(set[0].as_str()).in_list(probe, false))).await?;
        for committed in batches.iter().flat_map(rows::from_batch) {
            let tuple: Option<Vec<Value>> = set.iter().map(|c| committed.column(c).filter(|v| !v.is_null())).collect();
            let Some(tuple) = tuple else { continue };
            let key = Value::Array(tuple).to_string();
            let Some(&i) = by_tuple.get(&key) else { continue };
            let mine = &rows[i].id;
            let live = committed.id != *mine && !written.contains(committed.id.as_str()) && !replaced(&committed.id);
            if live {
                let at = lines.and_then(|l| l.get(i)).map(|n| format!("line {n}: ")).unwrap_or_default();
                let message = format!(
                    "{at}@unique({}) violated on {type_name}: {key} is already held by `{}` (writing `{mine}`)",
                    set.join(", "),
                    committed.id
                );
                return Ok(Some(UniqueClash { message, writer: rows[i].clone(), holder: committed }));
            }
        }
    }
    Ok(None)
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
    card: (u32, Option<u32>),
    written: &[EntityRow],
    removed: &HashSet<String>,
    sources: &HashSet<String>,
) -> Result<()> {
    refuse(card_breach(committed_edges, type_name, card, written, removed, sources).await?.map(|b| b.message))
}

/// A source node whose edge count leaves its `@card` bounds.
#[derive(Debug)]
pub struct CardBreach {
    /// What was broken, for a person.
    pub message: String,
    /// The source node.
    pub src: String,
    /// Its edges after the write, by id (sorted).
    pub edges: Vec<String>,
}

/// [`card_per_source`]'s first breach, with the source's edges.
pub async fn card_breach(
    committed_edges: Option<&Dataset>,
    type_name: &str,
    (min, max): (u32, Option<u32>),
    written: &[EntityRow],
    removed: &HashSet<String>,
    sources: &HashSet<String>,
) -> Result<Option<CardBreach>> {
    if min == 0 && max.is_none() {
        return Ok(None);
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
    let mut per_src: Vec<(String, HashSet<String>)> = per_src.into_iter().collect();
    // The same breach whatever the map's order.
    per_src.sort_by(|a, b| a.0.cmp(&b.0));
    for (src, ids) in per_src {
        let n = ids.len() as u64;
        if n < u64::from(min) || max.is_some_and(|m| n > u64::from(m)) {
            let bound = max.map_or(format!("{min}.."), |m| format!("{min}..{m}"));
            let message = format!("@card({bound}) violated on {type_name}: `{src}` would have {n} edges");
            let mut edges: Vec<String> = ids.into_iter().collect();
            edges.sort();
            return Ok(Some(CardBreach { message, src, edges }));
        }
    }
    Ok(None)
}
