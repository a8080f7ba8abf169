//! A merge strategy applied to one table's row conflicts: each conflicting
//! entity is read at the base, the source and the target, decided
//! ([`three_way::decide`]), and the decision joins the table's delta as
//! any other row the merge writes. So the decided rows land in the same
//! pre-minted chain as the rest of the merge: one commit, no intermediate
//! state, and recovery rolls forward exactly what was decided.

use std::collections::{BTreeSet, HashMap, HashSet};

use arrow_array::RecordBatch;
use lance::Dataset;

use super::TableMerge;
use super::delta;
use crate::engine::committed;
use crate::engine::manifest::TableEntry;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::Root;
use crate::engine::three_way::{self, Decision, MergeStrategy};
use crate::protocol::{OmniError, Result};

/// Decide every row conflict of `m` under `strategy` (nothing for
/// [`MergeStrategy::Fail`]); `base` is the table's pin at the merge base.
/// Returns how many conflicts were decided; `m.delta.conflicts` is left
/// empty and its delta and rows hold the decisions.
pub async fn decide_table(
    root: &Root,
    base: Option<&TableEntry>,
    m: &mut TableMerge,
    strategy: MergeStrategy,
) -> Result<usize> {
    if strategy == MergeStrategy::Fail || m.delta.conflicts.is_empty() {
        return Ok(0);
    }
    // A target that is the merge base changed nothing, so it has no conflict.
    assert!(m.located.is_none(), "{}: a conflict where the target is the merge base", m.table_key);
    let ids: HashSet<&str> = m.delta.conflicts.iter().filter_map(|c| c.entity_id.as_deref()).collect();
    let source_ds = committed::open_pinned(root, &m.source).await?;
    let base_ds = match base {
        Some(b) => Some(committed::open_pinned(root, b).await?),
        None => None,
    };
    let (source_rows, source_batches) = read(&source_ds, &ids).await?;
    let (target_rows, _) = read(&m.target_ds, &ids).await?;
    let base_rows = match &base_ds {
        Some(ds) => read(ds, &ids).await?.0,
        None => HashMap::new(),
    };
    let mut whole = BTreeSet::new();
    let mut merged = Vec::new();
    let mut decided = 0;
    for c in std::mem::take(&mut m.delta.conflicts) {
        let id = c
            .entity_id
            .clone()
            .ok_or_else(|| OmniError::Internal(format!("{}: a row conflict without an id", m.table_key)))?;
        let (b, s, t) = (base_rows.get(&id), source_rows.get(&id), target_rows.get(&id));
        let Some(decision) = three_way::decide(c.kind, strategy, b, s, t) else { continue };
        decided += 1;
        match decision {
            Decision::Keep => continue,
            Decision::Delete => {
                m.delta.deleted.insert(id);
                continue;
            }
            // The source's own row is written as it is stored; a merged one is built.
            Decision::Write(row) if Some(&row) == s => {
                whole.insert(id.clone());
            }
            Decision::Write(row) => merged.push(row),
        }
        if t.is_some() { &mut m.delta.updated } else { &mut m.delta.inserted }.insert(id);
    }
    // Written in the target's column order and types, as the merge's other rows.
    let (exact, _) = delta::split_by_ids(&source_batches, &whole)?;
    m.rows.extend(super::lineage::normalised(&m.target_ds, &exact)?);
    if !merged.is_empty() {
        let schema = arrow_schema::Schema::from(m.target_ds.schema());
        m.rows.push(rows::to_batch(&schema, &merged)?);
    }
    Ok(decided)
}

/// The rows of `ds` whose ids are in `ids`, by id, and as stored.
async fn read(ds: &Dataset, ids: &HashSet<&str>) -> Result<(HashMap<String, EntityRow>, Vec<RecordBatch>)> {
    let batches = delta::rows_with_ids(ds, ids).await?;
    let rows = batches.iter().flat_map(rows::from_batch).map(|r| (r.id.clone(), r)).collect();
    Ok((rows, batches))
}
