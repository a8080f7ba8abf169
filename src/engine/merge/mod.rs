//! Branch merge planning: the outcome over the commit DAG, each table's
//! three-way delta, the merged result's validation, and the effects (a
//! chain of staged transactions per table, or a pointer adopting the
//! source's published version). Nothing here commits: planning reads, and
//! [`prepare`] stages uncommitted transactions; the merge writer
//! (`actors::saga::merge`) carries the plan through the pipeline.
//!
//! Per table, the three-way delta comes from the rows each side changed
//! since the base when both descend from the base's ref ([`lineage`]),
//! else from fingerprints of the three sides ([`spill`]). Then, over the
//! base, source and target pins:
//! - source unchanged (or equal to the target): nothing;
//! - target unchanged and the source's version lives on a ref the target may
//!   point at (main's, or the target's own): adopt the pointer, no data moves;
//! - otherwise the delta against the target, as a chain on the target's ref
//!   (forked first on a first touch): a strict insert of the new ids (a
//!   pure-insert interval is only that), an upsert of the changed ids, then
//!   deletes of at most [`DELETE_CHUNK`] ids each.

pub mod across;
pub mod delta;
pub mod lineage;
pub mod spill;
pub mod strategy;
pub mod validate;

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use lance::Dataset;
use serde::Serialize;
use tracing::{Instrument, info_span};

use crate::engine::committed;
use crate::engine::lang::catalog::Catalog;
use crate::engine::layout;
use crate::engine::manifest::{CommitRow, ManifestState, TableEntry, TableUpdate, merge_base};
use crate::engine::storage::{MergeMode, Reshaper, Root, StagePlan};
use crate::engine::write_plan::{self, PointerUpdate, Prepared};
use crate::protocol::{OmniError, Result};

use delta::Delta;

/// Ids per delete transaction of a merge chain (bounds the predicate).
pub const DELETE_CHUNK: usize = 8_192;

/// What a merge does, decided over the commit DAG.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The target already holds everything the source has: nothing written.
    AlreadyUpToDate,
    /// The target has nothing the source lacks: one commit on the target
    /// takes the source's changes (the target ref is not moved to the source head).
    FastForward,
    /// Both changed since the base: one three-way merge commit.
    Merged,
}

impl Outcome {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::AlreadyUpToDate => "already_up_to_date",
            Outcome::FastForward => "fast_forward",
            Outcome::Merged => "merged",
        }
    }
}

/// The merge base and outcome of merging the head `source` into `target`.
/// `commits` holds both branches' commit DAGs.
pub fn outcome(commits: &HashMap<String, CommitRow>, source: &str, target: &str) -> Result<(String, Outcome)> {
    let base = merge_base::merge_base(commits, source, target)
        .ok_or_else(|| OmniError::BadRequest(format!("commits {source} and {target} share no history to merge")))?;
    let outcome = if source == target || base == source {
        Outcome::AlreadyUpToDate
    } else if base == target {
        Outcome::FastForward
    } else {
        Outcome::Merged
    };
    Ok((base, outcome))
}

/// One table's part of a merge.
#[derive(Debug)]
pub struct TableMerge {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// The target's pin.
    pub target: TableEntry,
    /// The target table opened at its pin (validation and staging read it).
    pub target_ds: Arc<Dataset>,
    /// The source's pin.
    pub source: TableEntry,
    /// What changes, by id.
    pub delta: Delta,
    /// The source rows written (inserted and updated ids).
    pub rows: Vec<RecordBatch>,
    /// Whether the target adopts the source's pointer instead of writing.
    pub adopt: bool,
    /// When the delta came from row versions: where the target holds each
    /// id of the delta it holds (from the base's and the target's row
    /// versions), so the merge's writes need no lookup.
    pub located: Option<HashMap<String, u64>>,
    /// When the delta came from row versions: the three sides' rows of its
    /// conflicts, which a strategy decides from ([`strategy`]).
    pub conflict_rows: Option<lineage::ConflictRows>,
    /// For a merge across a schema change: how each side's rows are read
    /// in the merged shape (`rows` already are).
    pub shapes: Option<Box<Shapes>>,
}

/// A table's pin on one side of a merge across schemas, with what brings
/// its rows into the merged shape (`None`: they are in it).
#[derive(Debug, Clone)]
pub struct ShapedPin {
    /// The side's pin (under the side's own type name).
    pub entry: TableEntry,
    /// Its rows into the merged shape.
    pub shape: Option<Reshaper>,
}

impl ShapedPin {
    /// `batches` of this pin in the merged shape.
    pub fn reshape(&self, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
        reshaped(self.shape.as_ref(), batches)
    }
}

/// `batches` through `shape`, or as they are.
pub fn reshaped(shape: Option<&Reshaper>, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    match shape {
        Some(shape) => batches.into_iter().map(|b| (shape.0)(b)).collect(),
        None => Ok(batches),
    }
}

/// How a merge across schemas reads one table on its three sides.
#[derive(Debug, Clone)]
pub struct Shapes {
    /// The base's pin, when the base had the type.
    pub base: Option<ShapedPin>,
    /// The source's (its entry is [`TableMerge::source`]).
    pub source: ShapedPin,
    /// The target's (a stand-in when only the source has the type).
    pub target: ShapedPin,
    /// The merged type's columns.
    pub merged: arrow_schema::SchemaRef,
}

/// A table's delta counts, as reported to clients.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Entities the source adds to the target.
    pub inserted: usize,
    /// Entities whose source row replaces the target's.
    pub updated: usize,
    /// Entities removed from the target.
    pub deleted: usize,
    /// Whether the source's published version is adopted as is (no data written).
    pub adopted: bool,
}

impl TableMerge {
    /// Add the entities this table's merge changes to `prepared`'s counts.
    fn count_into(&self, prepared: &mut Prepared) {
        let changed = (self.delta.inserted.len() + self.delta.updated.len() + self.delta.deleted.len()) as u64;
        if self.table_key.starts_with("edge:") {
            prepared.edges_affected += changed;
        } else {
            prepared.nodes_affected += changed;
        }
    }

    /// The counts clients see.
    pub fn report(&self) -> TableReport {
        TableReport {
            table_key: self.table_key.clone(),
            inserted: self.delta.inserted.len(),
            updated: self.delta.updated.len(),
            deleted: self.delta.deleted.len(),
            adopted: self.adopt,
        }
    }
}

/// Same version of the same data on the same ref.
pub(super) fn same(a: &TableEntry, b: &TableEntry) -> bool {
    a.location == b.location && a.version == b.version && a.branch == b.branch
}

/// Plan one table. `target_ref` is the target's native ref (`None` = main);
/// `budget` bounds the memory of its row fingerprints ([`spill`]). `None`
/// when the merge leaves the table as the target has it.
pub async fn plan_table(
    root: &Root,
    base: Option<&TableEntry>,
    source: &TableEntry,
    target: &TableEntry,
    target_ref: Option<&str>,
    budget: u64,
) -> Result<Option<TableMerge>> {
    if same(source, target) || base.is_some_and(|b| same(b, source)) {
        return Ok(None);
    }
    let source_ds = committed::open_pinned(root, source).await?;
    let target_ds = committed::open_pinned(root, target).await?;
    let base_ds = match base {
        Some(b) if !same(b, target) => Some(committed::open_pinned(root, b).await?),
        _ => None,
    };
    let key = source.table_key.as_str();
    let Some(Planned { delta, rows, located, conflict_rows }) =
        table_delta(key, (base_ds.as_deref(), base.is_some()), &source_ds, &target_ds, budget).await?
    else {
        // Churn that cancels out (#473): the merged table is the target's.
        return Ok(None);
    };
    // A pointer is adoptable when the target never changed the table, the
    // source's version lives on a ref the target may keep reading (main's, or
    // its own), and is newer than the target's: the manifest keeps the
    // highest version per table, and each ref numbers its versions on.
    let readable = source.branch.is_none() || source.branch.as_deref() == target_ref;
    let adopt = base.is_some_and(|b| same(b, target)) && readable && source.version > target.version;
    Ok(Some(TableMerge {
        table_key: source.table_key.clone(),
        target: target.clone(),
        target_ds,
        source: source.clone(),
        delta,
        rows,
        adopt,
        located,
        conflict_rows,
        shapes: None,
    }))
}

/// One table's delta as planned: what changes by id, the source rows
/// written, and what only the row versions tell ([`TableMerge::located`],
/// [`TableMerge::conflict_rows`]).
struct Planned {
    delta: Delta,
    rows: Vec<RecordBatch>,
    located: Option<HashMap<String, u64>>,
    conflict_rows: Option<lineage::ConflictRows>,
}

/// One table's delta by id and the source rows it writes (with where the
/// target holds the ids it replaces and the rows of its conflicts, when
/// the delta came from row versions); `None` when the merge changes
/// nothing there. `base` is the base's dataset when it is not
/// the target's, and whether the table existed at the base. When both sides
/// descend from the base's ref (the usual case), the rows each changed come
/// from Lance's row versions ([`lineage`]); otherwise the three sides are
/// fingerprinted whole within `budget` ([`spill`]).
async fn table_delta(
    key: &str,
    (base_ds, existed): (Option<&Dataset>, bool),
    source_ds: &Dataset,
    target_ds: &Dataset,
    budget: u64,
) -> Result<Option<Planned>> {
    let span = info_span!("merge.lineage", table = %key);
    let lineage = match (base_ds, existed) {
        (Some(b), _) => lineage::classify(b, source_ds, Some(target_ds)).instrument(span).await?,
        (None, true) => lineage::classify(target_ds, source_ds, None).instrument(span).await?,
        (None, false) => None,
    };
    let (keyed, known) = match lineage {
        Some(l) => (l.keyed, Some((l.rows, l.ids, l.target_addresses, l.conflict_rows))),
        None => {
            let sides = match (base_ds, existed) {
                (Some(ds), _) => spill::Base::At(spill::Side::whole(ds)),
                (None, true) => spill::Base::Target,
                (None, false) => spill::Base::Empty,
            };
            let span = info_span!("merge.fingerprints", table = %key, budget);
            (spill::classify_within(sides, source_ds, target_ds, budget).instrument(span).await?, None)
        }
    };
    if keyed.inserted.is_empty() && keyed.updated.is_empty() && keyed.deleted.is_empty() && keyed.conflicts.is_empty() {
        return Ok(None);
    }
    let planned = match known {
        Some((rows, ids, addresses, conflict_rows)) => {
            // Every key the target holds, conflicts too: a strategy may
            // decide one into an update or a delete.
            let located = addresses
                .map(|addresses| addresses.iter().filter_map(|(k, at)| Some((ids.get(k)?.clone(), *at))).collect());
            let delta = delta::resolve_with(key, keyed, &rows, source_ds, &ids)?;
            Planned { delta, rows, located, conflict_rows: Some(conflict_rows) }
        }
        None => {
            let written: std::collections::HashSet<u128> = keyed.inserted.union(&keyed.updated).copied().collect();
            let span = info_span!("merge.source_rows", table = %key, rows = written.len());
            let rows = delta::rows_with_keys(source_ds, &written).instrument(span).await?;
            let sides = [target_ds, source_ds, base_ds.unwrap_or(target_ds)];
            let delta = delta::resolve(key, keyed, &rows, sides).await?;
            Planned { delta, rows, located: None, conflict_rows: None }
        }
    };
    Ok(Some(planned))
}

/// The three pins of every table in the catalog, and each table's plan, in
/// catalog order (nodes first); `budget` as in [`plan_table`].
pub async fn plan_tables(
    root: &Root,
    catalog: &Catalog,
    base: &ManifestState,
    (source, target): (&ManifestState, &ManifestState),
    target_ref: Option<&str>,
    budget: u64,
) -> Result<Vec<TableMerge>> {
    let mut out = Vec::new();
    for layout in layout::tables(catalog) {
        let key = &layout.table_key;
        let missing = |side: &str| OmniError::Internal(format!("{key} is not in the {side} manifest"));
        let s = source.tables.get(key).ok_or_else(|| missing("source"))?;
        let t = target.tables.get(key).ok_or_else(|| missing("target"))?;
        if let Some(m) = plan_table(root, base.tables.get(key), s, t, target_ref, budget).await? {
            out.push(m);
        }
    }
    Ok(out)
}

/// The effects of a conflict-free merge: per table either a pointer or a
/// chain (a strict insert of the new rows, an upsert of the changed ones,
/// then the deletes in chunks).
pub async fn prepare(root: &Root, merges: Vec<TableMerge>, target_ref: Option<String>) -> Result<Prepared> {
    let mut prepared = Prepared::default();
    for m in merges {
        m.count_into(&mut prepared);
        if m.adopt {
            let update = TableUpdate::adopted(&m.source);
            prepared.pointers.push(PointerUpdate { expected_version: m.target.version, update });
            continue;
        }
        // New ids as a strict insert (an id the target holds after all fails
        // the merge instead of being overwritten), then changed ids as an upsert.
        let plans = match &m.located {
            Some(located) => located_plans(&m, located)?,
            None => looked_up_plans(&m)?,
        };
        let table =
            write_plan::prepare_chain(root, &m.table_key, &m.target, target_ref.clone(), m.target_ds, plans).await?;
        prepared.tables.extend(table);
    }
    Ok(prepared)
}

/// The effects of a conflict-free merge across a schema change, on top of
/// the schema apply's (`applied`: one effect per created or reshaped
/// table). A table the apply already changes takes the merge's
/// transactions after its own, staged on the reshaped version; any other
/// gets a chain of its own. Rows are always looked up by id (a reshape
/// moves every row, so no address the plan read stays valid).
pub async fn prepare_onto(
    root: &Root,
    merges: Vec<TableMerge>,
    target_ref: Option<String>,
    mut applied: Prepared,
) -> Result<Prepared> {
    for m in merges {
        m.count_into(&mut applied);
        let plans = looked_up_plans(&m)?;
        let reshaped =
            applied.tables.iter_mut().find(|t| t.table_key == m.target.table_key || t.table_key == m.table_key);
        match reshaped {
            Some(t) => {
                let first = t.pin + 1 + t.then.len() as u64;
                let steps = plans.into_iter().enumerate().map(|(i, plan)| write_plan::ChainStep {
                    plan,
                    identity: crate::engine::storage::TxnIdentity::mint(first + i as u64),
                });
                t.then.extend(steps);
            }
            None => {
                let key = m.target.table_key.clone();
                let chain = write_plan::prepare_chain(root, &key, &m.target, target_ref.clone(), m.target_ds, plans);
                applied.tables.extend(chain.await?);
            }
        }
    }
    Ok(applied)
}

/// A table merge's chain when the target's rows are looked up: a strict
/// insert of the new ids, an upsert of the changed ones, deletes by id.
fn looked_up_plans(m: &TableMerge) -> Result<Vec<StagePlan>> {
    let (new_rows, changed_rows) = delta::split_by_ids(&m.rows, &m.delta.inserted)?;
    let mut plans = Vec::new();
    if !new_rows.is_empty() {
        plans.push(StagePlan::Merge { batches: new_rows, mode: MergeMode::StrictInsert });
    }
    if !changed_rows.is_empty() {
        plans.push(StagePlan::Merge { batches: changed_rows, mode: MergeMode::Upsert });
    }
    let deleted: Vec<String> = m.delta.deleted.iter().cloned().collect();
    for chunk in deleted.chunks(DELETE_CHUNK) {
        plans.push(StagePlan::Delete { ids: chunk.to_vec() });
    }
    Ok(plans)
}

/// The same chain when the merge knows where the target holds every id it
/// replaces (`located`): the new rows appended (the row versions prove
/// their ids absent from the target: absent at the base, and not written
/// by the target since), the changed rows replacing theirs, the deleted
/// rows deleted, all by address.
fn located_plans(m: &TableMerge, located: &HashMap<String, u64>) -> Result<Vec<StagePlan>> {
    let at = |ids: &mut dyn Iterator<Item = &String>| -> Result<Vec<u64>> {
        ids.map(|id| {
            located.get(id).copied().ok_or_else(|| {
                OmniError::Internal(format!("{}: the merge replaces `{id}` but does not know where", m.table_key))
            })
        })
        .collect()
    };
    let (new_rows, changed_rows) = delta::split_by_ids(&m.rows, &m.delta.inserted)?;
    let mut plans = Vec::new();
    if !new_rows.is_empty() {
        plans.push(StagePlan::Append { batches: new_rows });
    }
    if !changed_rows.is_empty() {
        plans.push(StagePlan::Rewrite { addresses: at(&mut m.delta.updated.iter())?, batches: changed_rows });
    }
    let deleted: Vec<&String> = m.delta.deleted.iter().collect();
    for chunk in deleted.chunks(DELETE_CHUNK) {
        plans.push(StagePlan::Rewrite { addresses: at(&mut chunk.iter().copied())?, batches: vec![] });
    }
    Ok(plans)
}
