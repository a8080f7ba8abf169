//! One table's three-way delta from the rows each side changed since the
//! base, when both sides descend from the base's dataset ref (a branch
//! forked from the target, the usual case) or precede it there (a revert's
//! parent): Lance's row versions name those rows ([`row_delta::either_way`]),
//! so the merge reads O(changed rows + touched fragments) instead of
//! fingerprinting the three sides whole.
//!
//! The rule is the same row rule over the same fingerprints: a row either
//! side did not touch holds its base value there, so only the ids the
//! source changed can be anything but `Keep`. Images are fingerprinted in
//! the base's column order and types, so a row rewritten without a change
//! fingerprints as its base image.

use std::collections::{HashMap, HashSet};

use arrow::compute::cast;
use arrow_array::{ArrayRef, RecordBatch, StringArray};
use lance::Dataset;

use super::delta::{Hash128, KeyDelta, hash_rows, print_batch};
use crate::engine::storage::row_delta::{self, RowDelta};
use crate::engine::three_way::{RowChoice, choose};
use crate::protocol::{OmniError, Result};

/// What the lineage path decided for one table: the keyed delta, the
/// source rows it writes, and the id of every key it names.
pub struct LineageDelta {
    /// The row rule's decisions by id key.
    pub keyed: KeyDelta,
    /// The source images of the inserted and updated keys.
    pub rows: Vec<RecordBatch>,
    /// The id of each key of the delta (written, deleted and conflicting).
    pub ids: HashMap<Hash128, String>,
    /// Where the target holds each key of the delta it holds at all (the
    /// rows the merge's updates and deletes replace), or `None` when that is
    /// not known (a row of the base the target left alone is neither where
    /// the base held it nor where a compaction moved it).
    pub target_addresses: Option<HashMap<Hash128, u64>>,
    /// The three images of every conflicting key, which a strategy decides
    /// from without reading a side again.
    pub conflict_rows: ConflictRows,
}

/// The rows of a table's conflicting keys on the three sides of a merge,
/// in the base's column order and types: the base's image of each, the
/// source's and the target's (none where that side deleted the row).
#[derive(Debug, Default)]
pub struct ConflictRows {
    /// At the base.
    pub base: Vec<RecordBatch>,
    /// In the source.
    pub source: Vec<RecordBatch>,
    /// In the target.
    pub target: Vec<RecordBatch>,
}

/// One row image: its fingerprint and id.
type Image = (Hash128, String);

/// One side's changed rows since the base: the base images of the rows it
/// changed or removed (and their addresses there), and the images it holds
/// now (and their addresses in it).
struct Changed {
    before: HashMap<Hash128, Image>,
    before_addresses: HashMap<Hash128, u64>,
    before_rows: Vec<RecordBatch>,
    after: HashMap<Hash128, Image>,
    after_addresses: HashMap<Hash128, u64>,
    after_rows: Vec<RecordBatch>,
    /// Base rows this side moved unchanged (a compaction): base address to its own.
    moved: HashMap<u64, u64>,
}

impl Changed {
    /// Whether this side changed or removed `key` since the base.
    fn touched(&self, key: &Hash128) -> bool {
        self.before.contains_key(key) || self.after.contains_key(key)
    }
}

/// The delta of `source` into `target` over `base` from row versions, or
/// `None` when a side does not descend from the base's ref or the three
/// do not share one schema (the caller fingerprints whole). `target` is
/// `None` when it is the base itself.
pub async fn classify(base: &Dataset, source: &Dataset, target: Option<&Dataset>) -> Result<Option<LineageDelta>> {
    let schema = base.schema();
    if source.schema() != schema || target.is_some_and(|t| t.schema() != schema) {
        return Ok(None);
    }
    let Some(s) = changed(base, source).await? else { return Ok(None) };
    let t = match target {
        Some(target) => match changed(base, target).await? {
            Some(t) => Some(t),
            None => return Ok(None),
        },
        None => None,
    };
    let mut keyed = KeyDelta::default();
    let mut ids = HashMap::new();
    let keys: HashSet<Hash128> = s.before.keys().chain(s.after.keys()).copied().collect();
    for key in keys {
        let b = s.before.get(&key).or_else(|| t.as_ref().and_then(|t| t.before.get(&key)));
        let now = s.after.get(&key);
        // A key the target did not touch holds its base value there.
        let then = match &t {
            Some(t) if t.touched(&key) => t.after.get(&key),
            _ => b,
        };
        let print = |side: Option<&Image>| side.map(|(p, _)| *p);
        let choice = choose(print(b).as_ref(), print(now).as_ref(), print(then).as_ref());
        let id = now.or(then).or(b).map(|(_, id)| id.clone());
        match choice {
            RowChoice::Keep => continue,
            RowChoice::TakeSource if then.is_none() => keyed.inserted.insert(key),
            RowChoice::TakeSource => keyed.updated.insert(key),
            RowChoice::Delete => keyed.deleted.insert(key),
            RowChoice::Conflict(kind) => {
                keyed.conflicts.push((key, kind));
                true
            }
        };
        ids.insert(key, id.ok_or_else(|| OmniError::Internal("a merged key has no image".into()))?);
    }
    let written: HashSet<Hash128> = keyed.inserted.union(&keyed.updated).copied().collect();
    let rows = rows_with(&s.after_rows, base, &written)?;
    let target_addresses = held_at(&s, t.as_ref(), target, ids.keys());
    let conflict_rows = conflict_rows(base, &keyed, &s, t.as_ref())?;
    Ok(Some(LineageDelta { keyed, rows, ids, target_addresses, conflict_rows }))
}

/// The three sides' images of `keyed`'s conflicts, from what each side
/// changed: a key conflicts only where both sides changed it, so both hold
/// its base image and their own.
fn conflict_rows(base: &Dataset, keyed: &KeyDelta, s: &Changed, t: Option<&Changed>) -> Result<ConflictRows> {
    let (Some(t), false) = (t, keyed.conflicts.is_empty()) else { return Ok(ConflictRows::default()) };
    let keys: HashSet<Hash128> = keyed.conflicts.iter().map(|(k, _)| *k).collect();
    Ok(ConflictRows {
        base: rows_with(&s.before_rows, base, &keys)?,
        source: rows_with(&s.after_rows, base, &keys)?,
        target: rows_with(&t.after_rows, base, &keys)?,
    })
}

/// Where the target holds each of `keys` it holds: where the target's own
/// change put it when the target touched the key, else where the base holds
/// it, which stays true while the target keeps that fragment (fragments
/// are immutable but for deletions, and a deletion is a change), or where
/// the target's compaction moved it. `None` when a base row is in neither.
fn held_at<'k>(
    s: &Changed,
    t: Option<&Changed>,
    target: Option<&Dataset>,
    keys: impl Iterator<Item = &'k Hash128>,
) -> Option<HashMap<Hash128, u64>> {
    let (Some(t), Some(target)) = (t, target) else {
        // The target is the base.
        return Some(s.before_addresses.clone());
    };
    let kept: HashSet<u64> = target.manifest.fragments.iter().map(|f| f.id).collect();
    let mut out = HashMap::new();
    for key in keys {
        let at = if t.touched(key) {
            t.after_addresses.get(key).copied()
        } else {
            match s.before_addresses.get(key) {
                Some(at) if kept.contains(&(at >> 32)) => Some(*at),
                // A fragment the target compacted: the row moved unchanged.
                Some(at) => Some(*t.moved.get(at)?),
                None => None,
            }
        };
        if let Some(at) = at {
            out.insert(*key, at);
        }
    }
    Some(out)
}

/// The rows `side` changed since `base`, fingerprinted as the base's.
async fn changed(base: &Dataset, side: &Dataset) -> Result<Option<Changed>> {
    // A side older than the base (a revert's parent) is the range read backwards.
    let Some(RowDelta { before, after, after_addresses, before_addresses, moved }) =
        row_delta::either_way(base, side).await?
    else {
        return Ok(None);
    };
    let before_rows = normalised(base, &before)?;
    let after_rows = normalised(base, &after)?;
    let (before, keys) = prints(base, &before_rows)?;
    let before_addresses = paired(keys, before_addresses, "base images", base)?;
    let (after, keys) = prints(base, &after_rows)?;
    let after_addresses = paired(keys, after_addresses, "newer images", side)?;
    Ok(Some(Changed { before, before_addresses, before_rows, after, after_addresses, after_rows, moved }))
}

/// Each image's key with its address: the two lists are in one row order.
fn paired(keys: Vec<Hash128>, addresses: Vec<u64>, what: &str, ds: &Dataset) -> Result<HashMap<Hash128, u64>> {
    if keys.len() != addresses.len() {
        let (n, m) = (keys.len(), addresses.len());
        return Err(OmniError::Internal(format!("{}: {n} {what} for {m} addresses", ds.uri())));
    }
    Ok(keys.into_iter().zip(addresses).collect())
}

/// `batches` in `base`'s column order and types.
pub(super) fn normalised(base: &Dataset, batches: &[RecordBatch]) -> Result<Vec<RecordBatch>> {
    let schema = std::sync::Arc::new(arrow_schema::Schema::from(base.schema()));
    let mut out = Vec::with_capacity(batches.len());
    for batch in batches.iter().filter(|b| b.num_rows() > 0) {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for field in schema.fields() {
            let column = batch.column_by_name(field.name()).ok_or_else(|| {
                OmniError::Internal(format!("changed rows of {} lack `{}`", base.uri(), field.name()))
            })?;
            columns.push(cast(column, field.data_type()).map_err(|e| arrow_err(base, e))?);
        }
        out.push(RecordBatch::try_new(schema.clone(), columns).map_err(|e| arrow_err(base, e))?);
    }
    Ok(out)
}

/// Each row's `(fingerprint, id)` by id key, and the keys in row order.
fn prints(base: &Dataset, batches: &[RecordBatch]) -> Result<(HashMap<Hash128, Image>, Vec<Hash128>)> {
    let (mut out, mut order) = (HashMap::new(), Vec::new());
    for batch in batches {
        let (keys, prints) = print_batch(base, batch)?;
        let ids = string_ids(base, batch)?;
        for ((key, print), id) in keys.into_iter().zip(prints).zip(ids.iter()) {
            let id = id.ok_or_else(|| OmniError::Internal(format!("a row of {} has no id", base.uri())))?;
            out.insert(key, (print, id.to_string()));
            order.push(key);
        }
    }
    Ok((out, order))
}

/// The rows of `batches` whose id keys are in `keys`.
fn rows_with(batches: &[RecordBatch], base: &Dataset, keys: &HashSet<Hash128>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    for batch in batches {
        let ids = batch.column_by_name("id").cloned().ok_or_else(|| arrow_err(base, "no `id` column"))?;
        let row_keys = hash_rows(&[ids], batch.num_rows()).ok_or_else(|| arrow_err(base, "an unhashable `id`"))?;
        let mask: arrow_array::BooleanArray = row_keys.iter().map(|k| Some(keys.contains(k))).collect();
        let kept = arrow::compute::filter_record_batch(batch, &mask).map_err(|e| arrow_err(base, e))?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

fn string_ids<'b>(base: &Dataset, batch: &'b RecordBatch) -> Result<&'b StringArray> {
    batch
        .column_by_name("id")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        .ok_or_else(|| arrow_err(base, "no string `id` column"))
}

fn arrow_err(ds: &Dataset, e: impl std::fmt::Display) -> OmniError {
    OmniError::Internal(format!("classifying the changed rows of {}: {e}", ds.uri()))
}
