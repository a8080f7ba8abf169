//! One table's three-way delta: a fingerprint of every row, keyed by a hash
//! of its `id`, at the base, source and target pins; the row rule applied
//! per id; and the rows the merge writes.
//!
//! A fingerprint is 32 bytes per row and side (a 128-bit id key and a
//! 128-bit row fingerprint), never the row's data: rows are streamed one scan
//! batch at a time, fingerprints come from DataFusion's vectorised hash
//! kernel, and id strings are only materialised for the rows the merge
//! changes. [`super::spill`] keeps the maps of a large table within a budget.

use std::collections::{BTreeSet, HashMap, HashSet};

use arrow::compute::filter_record_batch;
use arrow::row::{RowConverter, SortField};
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use futures::StreamExt;
use lance::Dataset;
use sha2::{Digest, Sha256};

use crate::engine::storage::{Reshaper, table};
use crate::engine::three_way::{ConflictKind, MergeConflict, RowChoice, choose};
use crate::protocol::{OmniError, Result};

/// 128 bits of hash: two independently seeded 64-bit hashes. Two different
/// values collide with probability about 2^-128.
pub type Hash128 = u128;

/// Row fingerprints by id key, for one side of the merge.
pub type Prints = HashMap<Hash128, Hash128>;

const SEEDS: [u64; 2] = [0x6f6d_6e69_6772_6170, 0x9e37_79b9_7f4a_7c15];

/// The 128-bit hash of each row over `columns` (nulls included), in
/// DataFusion's kernel; `None` for a column type the kernel does not hash.
pub fn hash_rows(columns: &[ArrayRef], rows: usize) -> Option<Vec<Hash128>> {
    use datafusion::common::hash_utils::{RandomState, create_hashes};
    let mut halves = [vec![0u64; rows], vec![0u64; rows]];
    for (seed, half) in SEEDS.into_iter().zip(halves.iter_mut()) {
        create_hashes(columns, &RandomState::with_seed(seed), half).ok()?;
    }
    let [a, b] = halves;
    Some(a.into_iter().zip(b).map(|(a, b)| (u128::from(a) << 64) | u128::from(b)).collect())
}

/// SHA-256 (truncated) of each row's Arrow row encoding: the slower path,
/// for column types the hash kernel refuses.
fn encoded_prints(ds: &Dataset, batch: &RecordBatch, converter: &mut Option<RowConverter>) -> Result<Vec<Hash128>> {
    let conv = match converter {
        Some(c) => c,
        None => {
            let fields = batch.schema().fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
            converter.insert(RowConverter::new(fields).map_err(|e| arrow_err(ds, e))?)
        }
    };
    let rows = conv.convert_columns(batch.columns()).map_err(|e| arrow_err(ds, e))?;
    Ok((0..batch.num_rows())
        .map(|i| {
            let digest = Sha256::digest(rows.row(i).as_ref());
            let mut print = [0u8; 16];
            print.copy_from_slice(&digest[..16]);
            u128::from_le_bytes(print)
        })
        .collect())
}

/// The id key of every row of `batch`.
fn id_keys(ds: &Dataset, batch: &RecordBatch) -> Result<Vec<Hash128>> {
    let ids = batch.column_by_name("id").cloned().ok_or_else(|| no_id(ds))?;
    hash_rows(&[ids], batch.num_rows()).ok_or_else(|| no_id(ds))
}

fn no_id(ds: &Dataset) -> OmniError {
    OmniError::Internal(format!("{} has no hashable `id` column", ds.uri()))
}

fn arrow_err(ds: &Dataset, e: impl std::fmt::Display) -> OmniError {
    OmniError::Internal(format!("fingerprinting rows of {}: {e}", ds.uri()))
}

/// Every row's id key and fingerprint, one scan batch at a time.
pub struct PrintScan<'d> {
    ds: &'d Dataset,
    stream: futures::stream::BoxStream<'static, Result<RecordBatch>>,
    converter: Option<RowConverter>,
    shape: Option<Reshaper>,
}

impl<'d> PrintScan<'d> {
    /// A scan of `ds` at its checked-out version.
    pub async fn new(ds: &'d Dataset) -> Result<Self> {
        Ok(PrintScan { ds, stream: table::scan_stream(ds).await?, converter: None, shape: None })
    }

    /// A scan of only `columns` (which hold `id`): fingerprints over the
    /// columns two versions of a table share.
    pub async fn of_columns(ds: &'d Dataset, columns: &[&str]) -> Result<Self> {
        Ok(PrintScan { ds, stream: table::scan_columns_stream(ds, columns).await?, converter: None, shape: None })
    }

    /// The same scan with each batch brought into `shape` first.
    pub fn shaped(self, shape: Option<Reshaper>) -> Self {
        PrintScan { shape, ..self }
    }

    /// The next batch's `(id key, fingerprint)` pairs; `None` at the end.
    pub async fn next(&mut self) -> Result<Option<Vec<(Hash128, Hash128)>>> {
        let Some(batch) = self.stream.next().await else { return Ok(None) };
        let batch = match &self.shape {
            Some(shape) => (shape.0)(batch?)?,
            None => batch?,
        };
        let (keys, prints) = prints_with(self.ds, &batch, &mut self.converter)?;
        Ok(Some(keys.into_iter().zip(prints).collect()))
    }
}

/// Each row of `batch` (a batch of `ds`): its id key and its fingerprint.
pub fn print_batch(ds: &Dataset, batch: &RecordBatch) -> Result<(Vec<Hash128>, Vec<Hash128>)> {
    prints_with(ds, batch, &mut None)
}

fn prints_with(
    ds: &Dataset,
    batch: &RecordBatch,
    converter: &mut Option<RowConverter>,
) -> Result<(Vec<Hash128>, Vec<Hash128>)> {
    let prints = match hash_rows(batch.columns(), batch.num_rows()) {
        Some(p) => p,
        None => encoded_prints(ds, batch, converter)?,
    };
    Ok((id_keys(ds, batch)?, prints))
}

/// Every row's fingerprint by id key, at the dataset's checked-out version.
pub async fn fingerprints(ds: &Dataset) -> Result<Prints> {
    collect_prints(PrintScan::new(ds).await?).await
}

/// [`fingerprints`] over only `columns` (which hold `id`).
pub async fn fingerprints_of(ds: &Dataset, columns: &[&str]) -> Result<Prints> {
    collect_prints(PrintScan::of_columns(ds, columns).await?).await
}

/// Every pair a scan yields, as a map.
pub async fn collect_prints(mut scan: PrintScan<'_>) -> Result<Prints> {
    let mut out = Prints::new();
    while let Some(pairs) = scan.next().await? {
        out.extend(pairs);
    }
    Ok(out)
}

/// What the row rule decided for one table, by id key.
#[derive(Debug, Default)]
pub struct KeyDelta {
    /// Keys whose source row is written, absent from the target.
    pub inserted: HashSet<Hash128>,
    /// Keys whose source row replaces the target's.
    pub updated: HashSet<Hash128>,
    /// Keys deleted from the target.
    pub deleted: HashSet<Hash128>,
    /// Keys both sides changed differently, and how.
    pub conflicts: Vec<(Hash128, ConflictKind)>,
}

impl KeyDelta {
    /// Add the decisions of another part of the same table (a disjoint set of keys).
    pub fn extend(&mut self, other: KeyDelta) {
        self.inserted.extend(other.inserted);
        self.updated.extend(other.updated);
        self.deleted.extend(other.deleted);
        self.conflicts.extend(other.conflicts);
    }
}

/// Apply the row rule to every id of `base` ∪ `source` ∪ `target`: each id
/// is visited once, from the first map that holds it (no union is built).
pub fn classify(base: &Prints, source: &Prints, target: &Prints) -> KeyDelta {
    let mut delta = KeyDelta::default();
    let keys = target
        .keys()
        .chain(source.keys().filter(|k| !target.contains_key(*k)))
        .chain(base.keys().filter(|k| !target.contains_key(*k) && !source.contains_key(*k)));
    for key in keys {
        let (t, s) = (target.get(key), source.get(key));
        match choose(base.get(key), s, t) {
            RowChoice::Keep => {}
            RowChoice::TakeSource if t.is_none() => {
                delta.inserted.insert(*key);
            }
            RowChoice::TakeSource => {
                delta.updated.insert(*key);
            }
            RowChoice::Delete => {
                delta.deleted.insert(*key);
            }
            RowChoice::Conflict(kind) => delta.conflicts.push((*key, kind)),
        }
    }
    delta
}

/// What the row rule decided for one table, by id.
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

fn row_conflict(table_key: &str, id: &str, kind: ConflictKind) -> MergeConflict {
    let what = match kind {
        ConflictKind::DivergentInsert => "was inserted on both branches with different values",
        ConflictKind::DeleteVsUpdate => "was deleted on one branch and updated on the other",
        _ => "was updated differently on both branches",
    };
    MergeConflict::new(table_key, Some(id), kind, format!("{table_key} `{id}` {what}"))
}

/// The rows of `ds` whose id keys are in `keys`, streamed and filtered batch
/// by batch.
pub async fn rows_with_keys(ds: &Dataset, keys: &HashSet<Hash128>) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    if keys.is_empty() {
        return Ok(out);
    }
    let mut stream = table::scan_stream(ds).await?;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        let mask: BooleanArray = id_keys(ds, &batch)?.iter().map(|k| Some(keys.contains(k))).collect();
        let kept = filter_record_batch(&batch, &mask).map_err(|e| arrow_err(ds, e))?;
        if kept.num_rows() > 0 {
            out.push(kept);
        }
    }
    Ok(out)
}

/// Split `rows` into those whose `id` is in `ids` and the rest (the batches
/// of each side keep their order).
pub fn split_by_ids(rows: &[RecordBatch], ids: &BTreeSet<String>) -> Result<(Vec<RecordBatch>, Vec<RecordBatch>)> {
    let (mut inside, mut outside) = (Vec::new(), Vec::new());
    for batch in rows {
        let column = batch
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| OmniError::Internal("merge rows without a string `id` column".into()))?;
        let mask: BooleanArray = column.iter().map(|id| Some(id.is_some_and(|id| ids.contains(id)))).collect();
        let not: BooleanArray = mask.iter().map(|m| m.map(|m| !m)).collect();
        for (mask, side) in [(mask, &mut inside), (not, &mut outside)] {
            let kept = filter_record_batch(batch, &mask)
                .map_err(|e| OmniError::Internal(format!("splitting merge rows: {e}")))?;
            if kept.num_rows() > 0 {
                side.push(kept);
            }
        }
    }
    Ok((inside, outside))
}

/// The rows of `ds` whose ids are in `ids`.
pub async fn rows_with_ids(ds: &Dataset, ids: &HashSet<&str>) -> Result<Vec<RecordBatch>> {
    let keys = ids_to_keys(ids.iter().copied());
    rows_with_keys(ds, &keys).await
}

fn ids_to_keys<'s>(ids: impl Iterator<Item = &'s str>) -> HashSet<Hash128> {
    let ids: Vec<&str> = ids.collect();
    let column: ArrayRef = std::sync::Arc::new(StringArray::from(ids.clone()));
    hash_rows(&[column], ids.len()).unwrap_or_default().into_iter().collect()
}

/// The id strings of `keys`, read from the rows of the datasets that hold
/// them (`sides`, in order; each key is looked up until found).
async fn ids_of(sides: &[&Dataset], keys: &HashSet<Hash128>) -> Result<HashMap<Hash128, String>> {
    let mut found = HashMap::with_capacity(keys.len());
    for ds in sides {
        let missing: HashSet<Hash128> = keys.iter().filter(|k| !found.contains_key(*k)).copied().collect();
        for batch in rows_with_keys(ds, &missing).await? {
            let ids = batch
                .column_by_name("id")
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| no_id(ds))?;
            for (i, key) in id_keys(ds, &batch)?.into_iter().enumerate() {
                found.insert(key, ids.value(i).to_string());
            }
        }
    }
    Ok(found)
}

/// Turn the keyed delta into ids: inserted and updated ids from the source
/// rows the merge writes (`rows`), deleted ids from the target, conflict ids
/// from whichever side holds the entity.
pub async fn resolve(table_key: &str, keyed: KeyDelta, rows: &[RecordBatch], sides: [&Dataset; 3]) -> Result<Delta> {
    let [target, source, base] = sides;
    let wanted: HashSet<Hash128> =
        keyed.deleted.iter().chain(keyed.conflicts.iter().map(|(k, _)| k)).copied().collect();
    let ids = ids_of(&[target, source, base], &wanted).await?;
    resolve_with(table_key, keyed, rows, source, &ids)
}

/// [`resolve`] with the ids of the deleted and conflicting keys known.
pub fn resolve_with(
    table_key: &str,
    keyed: KeyDelta,
    rows: &[RecordBatch],
    source: &Dataset,
    ids: &HashMap<Hash128, String>,
) -> Result<Delta> {
    let mut delta = Delta::default();
    for batch in rows {
        let column = batch
            .column_by_name("id")
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
            .ok_or_else(|| no_id(source))?;
        for (i, key) in id_keys(source, batch)?.into_iter().enumerate() {
            let set = if keyed.inserted.contains(&key) { &mut delta.inserted } else { &mut delta.updated };
            set.insert(column.value(i).to_string());
        }
    }
    let id = |k: &Hash128| {
        ids.get(k).cloned().ok_or_else(|| OmniError::Internal(format!("{table_key}: an id key matched no row")))
    };
    for k in &keyed.deleted {
        delta.deleted.insert(id(k)?);
    }
    for (k, kind) in &keyed.conflicts {
        delta.conflicts.push(row_conflict(table_key, &id(k)?, *kind));
    }
    delta.conflicts.sort();
    Ok(delta)
}
