//! What changed between two snapshots of a graph, entity by entity.
//!
//! A table pinned at the same dataset, ref and version on both sides changed
//! nothing and is not read. Otherwise each side's rows are fingerprinted by
//! id (the merge's delta scan, over the columns both sides share) and
//! classified: an id only in `to` is an insert, only in `from` a delete, in
//! both with another fingerprint an update. Only the changed rows are read
//! whole, in one filtered scan per side. Physical no-ops (a compaction, a
//! rewrite of identical rows) leave every fingerprint equal and report
//! nothing.
//!
//! When both sides pin versions of one dataset ref (one lineage: a branch's
//! history, a commit and its parent), Lance's row versions name the changed
//! rows instead ([`row_delta`]), and a diff costs O(rows and fragments
//! changed). Otherwise the fingerprint scan reads both versions of every
//! table that changed (32 bytes per row held): O(rows of the changed
//! tables), held in memory within the merge's fingerprint budget (spilled to
//! disk partitions past it), over the columns both sides share.

use std::collections::{BTreeMap, HashSet};

use lance::Dataset;
use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::engine::committed::open_pinned_for_read;
use crate::engine::layout;
use crate::engine::manifest::{ManifestView, TableEntry};
use crate::engine::merge::delta::{self, Hash128};
use crate::engine::merge::spill;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{Root, row_delta, table};
use crate::protocol::{OmniError, Result};

/// What happened to one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// Present only in `to`.
    Insert,
    /// Present on both sides with other values.
    Update,
    /// Present only in `from`.
    Delete,
}

impl std::str::FromStr for Op {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Op> {
        match s {
            "insert" => Ok(Op::Insert),
            "update" => Ok(Op::Update),
            "delete" => Ok(Op::Delete),
            other => Err(OmniError::BadRequest(format!("op `{other}`: expected insert, update or delete"))),
        }
    }
}

/// Which changes a diff reports. Empty lists mean every type and op.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffFilter {
    /// Type names (or table keys) to keep.
    pub types: Vec<String>,
    /// `node` or `edge` only.
    pub kind: Option<String>,
    /// Ops to keep.
    pub ops: Vec<Op>,
}

impl DiffFilter {
    /// Refuse a kind other than `node`/`edge`, and type names neither side has.
    pub fn check(&self, from: &ManifestView, to: &ManifestView) -> Result<()> {
        if let Some(k) = &self.kind
            && k != "node"
            && k != "edge"
        {
            return Err(OmniError::BadRequest(format!("kind `{k}`: expected node or edge")));
        }
        for t in &self.types {
            let known =
                [from, to].iter().any(|v| v.state.tables.keys().any(|key| key == t || layout::type_name(key) == t));
            if !known {
                return Err(OmniError::NotFound(format!("type `{t}` (on neither side of the diff)")));
            }
        }
        Ok(())
    }

    /// Whether the table `key` (`node:T`/`edge:E`) is one the filter keeps.
    pub fn keeps_table(&self, key: &str) -> bool {
        let kind_ok = self.kind.as_deref().is_none_or(|k| key.starts_with(&format!("{k}:")));
        let type_ok = self.types.is_empty() || self.types.iter().any(|t| t == key || t == layout::type_name(key));
        kind_ok && type_ok
    }

    fn keeps(&self, op: Op) -> bool {
        self.ops.is_empty() || self.ops.contains(&op)
    }
}

/// One property an update changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropertyChange {
    /// The property (`endpoints` for an edge whose ends moved).
    pub property: String,
    /// Its value in `from` (null when absent).
    pub before: Json,
    /// Its value in `to` (null when absent).
    pub after: Json,
}

/// One entity's change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Change {
    /// `node` or `edge`.
    pub kind: &'static str,
    /// The node or edge type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The type's stable table id (kept across a rename; not in this shape).
    #[serde(skip)]
    pub type_id: String,
    /// The entity's id.
    pub id: String,
    /// What happened.
    pub op: Op,
    /// Its image in `from` (deletes and updates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<Json>,
    /// Its image in `to` (inserts and updates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<Json>,
    /// The properties an update changed (empty otherwise).
    pub changed: Vec<PropertyChange>,
}

impl Change {
    /// The frozen order: nodes before edges, then type, id, op.
    pub fn sort_key(&self) -> (u8, &str, &str, Op) {
        (u8::from(self.kind == "edge"), &self.type_name, &self.id, self.op)
    }
}

/// Counts of one type's changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TypeStats {
    /// `node` or `edge`.
    pub kind: &'static str,
    /// The type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// Entities inserted.
    pub inserted: u64,
    /// Entities updated.
    pub updated: u64,
    /// Entities deleted.
    pub deleted: u64,
}

/// A table on either side of a diff.
struct Pair<'v> {
    key: &'v str,
    from: Option<&'v TableEntry>,
    to: Option<&'v TableEntry>,
}

/// The tables `filter` keeps that may differ, nodes before edges, by type.
/// The two sides of a table are paired by table id (a renamed type is one
/// table under its new key), then the rest by key (a type dropped and made
/// again under its name).
fn pairs<'v>(from: &'v ManifestView, to: &'v ManifestView, filter: &DiffFilter) -> Vec<Pair<'v>> {
    let (mut rest_from, mut out): (BTreeMap<&'v str, &'v TableEntry>, Vec<Pair<'v>>) =
        (from.state.tables.iter().map(|(k, e)| (k.as_str(), e)).collect(), Vec::new());
    let mut rest_to = Vec::new();
    for (key, t) in &to.state.tables {
        match rest_from.iter().find(|(_, f)| f.table_id == t.table_id).map(|(k, _)| *k) {
            Some(k) => out.push(Pair { key, from: rest_from.remove(k), to: Some(t) }),
            None => rest_to.push((key.as_str(), t)),
        }
    }
    for (key, t) in rest_to {
        out.push(Pair { key, from: rest_from.remove(key), to: Some(t) });
    }
    out.extend(rest_from.into_iter().map(|(key, f)| Pair { key, from: Some(f), to: None }));
    out.retain(|p| filter.keeps_table(p.key) && !same_pin(p.from, p.to));
    out.sort_by_key(|p| (u8::from(p.key.starts_with("edge:")), layout::type_name(p.key).to_string()));
    out
}

/// Whether both sides of a pair are one table (the same table id), whose
/// columns keep their Lance field ids across a rename.
fn one_table(p: &Pair<'_>) -> bool {
    matches!((p.from, p.to), (Some(a), Some(b)) if a.table_id == b.table_id)
}

/// Whether two pins name the same table version (or both are absent).
pub fn same_pin(a: Option<&TableEntry>, b: Option<&TableEntry>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.location == b.location && a.branch == b.branch && a.version == b.version,
        (None, None) => true,
        _ => false,
    }
}

/// The keys of one table's changes, by op.
#[derive(Default)]
struct Classified {
    inserted: HashSet<Hash128>,
    updated: HashSet<Hash128>,
    deleted: HashSet<Hash128>,
}

/// The two sides' datasets (absent when the table is absent).
async fn open_pair(
    root: &Root,
    p: &Pair<'_>,
) -> Result<(Option<std::sync::Arc<Dataset>>, Option<std::sync::Arc<Dataset>>)> {
    let from = match p.from {
        Some(e) => Some(open_pinned_for_read(root, e).await?),
        None => None,
    };
    let to = match p.to {
        Some(e) => Some(open_pinned_for_read(root, e).await?),
        None => None,
    };
    Ok((from, to))
}

/// The columns two sides share, as `(name in from, name in to)`: by Lance
/// field id when both are versions of one table (a rename keeps the id), by
/// name otherwise.
fn shared_columns(from: &Dataset, to: &Dataset, one_table: bool) -> Vec<(String, String)> {
    let theirs = &to.schema().fields;
    from.schema()
        .fields
        .iter()
        .filter_map(|f| {
            let t = theirs.iter().find(|t| if one_table { t.id == f.id } else { t.name == f.name })?;
            Some((f.name.clone(), t.name.clone()))
        })
        .collect()
}

/// The properties renamed from pin `from` to pin `to` of one type, as
/// `(name in from, name in to)` (a rename keeps the column's field id).
pub async fn renamed_columns(root: &Root, from: &TableEntry, to: &TableEntry) -> Result<Vec<(String, String)>> {
    if from.table_id != to.table_id {
        return Ok(Vec::new());
    }
    let (f, t) = (open_pinned_for_read(root, from).await?, open_pinned_for_read(root, to).await?);
    Ok(shared_columns(&f, &t, true).into_iter().filter(|(a, b)| a != b).collect())
}

/// Fingerprint both sides over their shared columns and classify each id
/// as the merge classifies (`to` as the source, `from` as the target and
/// base), in partitions spilled to disk past `budget` bytes of
/// fingerprints. A side alone is all inserts or all deletes.
async fn classify(from: Option<&Dataset>, to: Option<&Dataset>, one_table: bool, budget: u64) -> Result<Classified> {
    let (f, t) = match (from, to) {
        (Some(f), Some(t)) => (f, t),
        (Some(ds), None) | (None, Some(ds)) => {
            let keys: HashSet<Hash128> = delta::fingerprints_of(ds, &["id"]).await?.into_keys().collect();
            let mut out = Classified::default();
            if to.is_some() {
                out.inserted = keys
            } else {
                out.deleted = keys
            }
            return Ok(out);
        }
        (None, None) => return Ok(Classified::default()),
    };
    let names = |ds: &Dataset| ds.schema().fields.iter().map(|f| f.name.clone()).collect::<Vec<String>>();
    let k = if names(f) == names(t) {
        spill::classify_within(spill::Base::Target, t, f, budget).await?
    } else {
        let (before_cols, after_cols): (Vec<String>, Vec<String>) = shared_columns(f, t, one_table).into_iter().unzip();
        let before_refs: Vec<&str> = before_cols.iter().map(String::as_str).collect();
        let after_refs: Vec<&str> = after_cols.iter().map(String::as_str).collect();
        let (source, target) = (
            spill::Side { ds: t, columns: Some(&after_refs), shape: None },
            spill::Side { ds: f, columns: Some(&before_refs), shape: None },
        );
        spill::classify_sides(spill::Base::Target, source, target, budget).await?
    };
    Ok(Classified { inserted: k.inserted, updated: k.updated, deleted: k.deleted })
}

/// The two sides' rows of one table, compared on the properties both sides
/// have: `before`'s renamed to their names at `to`, and the properties only
/// one side has left out (a schema apply's added or dropped properties are
/// named once, in [`drift`], not as a change of every entity).
type Sides = (BTreeMap<String, EntityRow>, BTreeMap<String, EntityRow>);

fn aligned((mut before, mut after): Sides, from: &Dataset, to: &Dataset, one_table: bool) -> Sides {
    let shared = shared_columns(from, to, one_table);
    let all_shared = shared.iter().all(|(a, b)| a == b)
        && from.schema().fields.len() == shared.len()
        && to.schema().fields.len() == shared.len();
    if all_shared {
        return (before, after);
    }
    let keep: HashSet<&str> = shared.iter().map(|(_, b)| b.as_str()).collect();
    for row in before.values_mut() {
        let props = std::mem::take(&mut row.props);
        for (name, v) in props {
            if let Some((_, new)) = shared.iter().find(|(old, _)| *old == name) {
                row.props.insert(new.clone(), v);
            }
        }
    }
    for row in after.values_mut() {
        row.props.retain(|name, _| keep.contains(name.as_str()));
    }
    (before, after)
}

/// How one type's properties differ between the two sides of a diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PropertyDrift {
    /// `node` or `edge`.
    pub kind: &'static str,
    /// The type (its name on the `to` side).
    #[serde(rename = "type")]
    pub type_name: String,
    /// Properties renamed: `{from, to}` (changes use the new names).
    pub renamed: Vec<Renamed>,
    /// Properties only the `from` side has.
    pub only_in_from: Vec<String>,
    /// Properties only the `to` side has.
    pub only_in_to: Vec<String>,
}

/// One renamed property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Renamed {
    /// Its name on the `from` side.
    pub from: String,
    /// Its name on the `to` side.
    pub to: String,
}

/// For each type `filter` keeps whose properties differ between the two
/// sides (a schema apply between them): what was renamed, dropped, added.
pub async fn drift(
    root: &Root,
    from: &ManifestView,
    to: &ManifestView,
    filter: &DiffFilter,
) -> Result<Vec<PropertyDrift>> {
    let mut out = Vec::new();
    for p in pairs(from, to, filter) {
        let (Some(f), Some(t)) = open_pair(root, &p).await? else { continue };
        let shared = shared_columns(&f, &t, one_table(&p));
        let props = |ds: &Dataset| -> Vec<String> {
            ds.schema()
                .fields
                .iter()
                .map(|f| f.name.clone())
                .filter(|n| !matches!(n.as_str(), "id" | "src" | "dst"))
                .collect()
        };
        let only_in_from: Vec<String> = props(&f).into_iter().filter(|n| !shared.iter().any(|(a, _)| a == n)).collect();
        let only_in_to: Vec<String> = props(&t).into_iter().filter(|n| !shared.iter().any(|(_, b)| b == n)).collect();
        let renamed: Vec<Renamed> =
            shared.into_iter().filter(|(a, b)| a != b).map(|(from, to)| Renamed { from, to }).collect();
        if !(renamed.is_empty() && only_in_from.is_empty() && only_in_to.is_empty()) {
            let (kind, type_name) = (kind_of(p.key), layout::type_name(p.key).to_string());
            out.push(PropertyDrift { kind, type_name, renamed, only_in_from, only_in_to });
        }
    }
    Ok(out)
}

/// Insert, update and delete counts per type.
pub async fn stats(root: &Root, from: &ManifestView, to: &ManifestView, filter: &DiffFilter) -> Result<Vec<TypeStats>> {
    let mut out = Vec::new();
    for p in pairs(from, to, filter) {
        let (f, t) = open_pair(root, &p).await?;
        let (mut inserted, mut updated, mut deleted) = (0u64, 0u64, 0u64);
        match lineage_changes(&p, f.as_deref(), t.as_deref()).await? {
            Some(table) => {
                for c in table.iter().filter(|c| filter.keeps(c.op)) {
                    *match c.op {
                        Op::Insert => &mut inserted,
                        Op::Update => &mut updated,
                        Op::Delete => &mut deleted,
                    } += 1;
                }
            }
            None => {
                let c = classify(f.as_deref(), t.as_deref(), one_table(&p), spill::DEFAULT_BUDGET).await?;
                let count = |op: Op, keys: &HashSet<Hash128>| if filter.keeps(op) { keys.len() as u64 } else { 0 };
                (inserted, updated, deleted) =
                    (count(Op::Insert, &c.inserted), count(Op::Update, &c.updated), count(Op::Delete, &c.deleted));
            }
        }
        if inserted + updated + deleted > 0 {
            let (kind, type_name) = (kind_of(p.key), layout::type_name(p.key).to_string());
            out.push(TypeStats { kind, type_name, inserted, updated, deleted });
        }
    }
    Ok(out)
}

/// Every change `filter` keeps, in the frozen order.
pub async fn changes(root: &Root, from: &ManifestView, to: &ManifestView, filter: &DiffFilter) -> Result<Vec<Change>> {
    changes_by(root, from, to, filter, None).await
}

/// [`changes`] by fingerprints alone, never from row versions, holding
/// about `budget` bytes of fingerprints per table at a time: the reference
/// the row-version path is checked against.
pub async fn changes_by_fingerprint(
    root: &Root,
    from: &ManifestView,
    to: &ManifestView,
    filter: &DiffFilter,
    budget: u64,
) -> Result<Vec<Change>> {
    changes_by(root, from, to, filter, Some(budget)).await
}

/// [`changes`]: from row versions where they apply unless a fingerprint
/// `budget` is forced, else by fingerprints within that budget (default
/// the merge's).
async fn changes_by(
    root: &Root,
    from: &ManifestView,
    to: &ManifestView,
    filter: &DiffFilter,
    forced: Option<u64>,
) -> Result<Vec<Change>> {
    let budget = forced.unwrap_or(spill::DEFAULT_BUDGET);
    let mut out = Vec::new();
    for p in pairs(from, to, filter) {
        let (f, t) = open_pair(root, &p).await?;
        let fast = if forced.is_none() { lineage_changes(&p, f.as_deref(), t.as_deref()).await? } else { None };
        let mut table = match fast {
            Some(table) => table,
            None => fingerprint_changes(&p, f.as_deref(), t.as_deref(), filter, budget).await?,
        };
        table.retain(|c| filter.keeps(c.op));
        table.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        out.extend(table);
    }
    Ok(out)
}

/// One table's changes from Lance's row versions, when both sides are
/// versions of one dataset ref, in either order ([`row_delta`]): the cost
/// follows the rows changed. `None` when that does not apply.
async fn lineage_changes(p: &Pair<'_>, f: Option<&Dataset>, t: Option<&Dataset>) -> Result<Option<Vec<Change>>> {
    let (Some(f), Some(t)) = (f, t) else { return Ok(None) };
    let Some(delta) = row_delta::either_way(f, t).await? else { return Ok(None) };
    let type_id = p.to.or(p.from).map(|e| e.table_id.clone()).unwrap_or_default();
    let (before, after) = aligned((rows::by_id(&delta.before), rows::by_id(&delta.after)), f, t, one_table(p));
    Ok(Some(table_changes(p.key, &type_id, before, after)))
}

/// One table's changes by fingerprinting both sides whole (another
/// lineage, an absent side) within `budget`: only the rows of the ops
/// `filter` keeps are read whole.
async fn fingerprint_changes(
    p: &Pair<'_>,
    f: Option<&Dataset>,
    t: Option<&Dataset>,
    filter: &DiffFilter,
    budget: u64,
) -> Result<Vec<Change>> {
    let c = classify(f, t, one_table(p), budget).await?;
    let wanted = |op: Op, keys: &HashSet<Hash128>| if filter.keeps(op) { keys.clone() } else { HashSet::new() };
    let (updated, inserted, deleted) =
        (wanted(Op::Update, &c.updated), wanted(Op::Insert, &c.inserted), wanted(Op::Delete, &c.deleted));
    let after_keys: HashSet<Hash128> = inserted.union(&updated).copied().collect();
    let before_keys: HashSet<Hash128> = deleted.union(&updated).copied().collect();
    let mut sides = (rows_of(f, &before_keys).await?, rows_of(t, &after_keys).await?);
    if let (Some(f), Some(t)) = (f, t) {
        sides = aligned(sides, f, t, one_table(p));
    }
    let type_id = p.to.or(p.from).map(|e| e.table_id.clone()).unwrap_or_default();
    Ok(table_changes(p.key, &type_id, sides.0, sides.1))
}

/// Entity `id` in the table `entry` pins (`None` when the table or the
/// entity is absent there): one filtered scan.
pub async fn entity_at(root: &Root, entry: Option<&TableEntry>, id: &str) -> Result<Option<EntityRow>> {
    let Some(entry) = entry else { return Ok(None) };
    let batches = entity_batches_at(root, entry, id).await?;
    Ok(batches.iter().flat_map(rows::from_batch).next())
}

/// Entity `id`'s row in `entry`'s table, as stored (no batch or empty ones
/// when it has none).
pub async fn entity_batches_at(root: &Root, entry: &TableEntry, id: &str) -> Result<Vec<arrow_array::RecordBatch>> {
    let ds = open_pinned_for_read(root, entry).await?;
    let filter = datafusion::prelude::col("id").eq(datafusion::prelude::lit(id.to_string()));
    table::scan_expr(&ds, Some(filter)).await
}

/// The change of one entity of table `key` from `before` (its image at
/// pin `from`) to `after` (at pin `to`), as a diff reports it: across a
/// schema change, compared on the properties both pins share, under the
/// names `to` gives them. `None` when the two are equal.
pub async fn entity_change(
    root: &Root,
    key: &str,
    (from, before): (Option<&TableEntry>, Option<EntityRow>),
    (to, after): (Option<&TableEntry>, Option<EntityRow>),
) -> Result<Option<Change>> {
    let by_id = |r: Option<EntityRow>| r.map(|r| (r.id.clone(), r)).into_iter().collect::<BTreeMap<_, _>>();
    let mut sides = (by_id(before), by_id(after));
    if let (Some(f), Some(t)) = (from, to)
        && !sides.0.is_empty()
        && !sides.1.is_empty()
    {
        let (fd, td) = (open_pinned_for_read(root, f).await?, open_pinned_for_read(root, t).await?);
        sides = aligned(sides, &fd, &td, f.table_id == t.table_id);
    }
    let type_id = to.or(from).map(|e| e.table_id.clone()).unwrap_or_default();
    Ok(table_changes(key, &type_id, sides.0, sides.1).into_iter().next())
}

/// The rows of `ds` with `keys`, by id.
async fn rows_of(ds: Option<&Dataset>, keys: &HashSet<Hash128>) -> Result<BTreeMap<String, EntityRow>> {
    let Some(ds) = ds.filter(|_| !keys.is_empty()) else { return Ok(BTreeMap::new()) };
    let batches = delta::rows_with_keys(ds, keys).await?;
    Ok(rows::by_id(&batches))
}

fn kind_of(key: &str) -> &'static str {
    if key.starts_with("edge:") { "edge" } else { "node" }
}

/// One table's changes from the changed rows of each side: an id on both
/// sides is an update (only updated keys were read from both).
fn table_changes(
    key: &str,
    type_id: &str,
    mut before: BTreeMap<String, EntityRow>,
    after: BTreeMap<String, EntityRow>,
) -> Vec<Change> {
    let (kind, type_name) = (kind_of(key), layout::type_name(key).to_string());
    let edge = kind == "edge";
    let mut out = Vec::new();
    let change = |id: String, op, before: Option<&EntityRow>, after: Option<&EntityRow>, changed| Change {
        kind,
        type_name: type_name.clone(),
        type_id: type_id.to_string(),
        id,
        op,
        before: before.map(|r| r.image(edge)),
        after: after.map(|r| r.image(edge)),
        changed,
    };
    for (id, now) in after {
        match before.remove(&id) {
            Some(was) => {
                let changed = changed_properties(&was, &now, edge);
                // Equal on every property read: a physical rewrite only.
                if !changed.is_empty() {
                    out.push(change(id, Op::Update, Some(&was), Some(&now), changed));
                }
            }
            None => out.push(change(id, Op::Insert, None, Some(&now), Vec::new())),
        }
    }
    for (id, was) in before {
        out.push(change(id, Op::Delete, Some(&was), None, Vec::new()));
    }
    out
}

/// Property `name` of `row` (`endpoints` for an edge's ends; null when
/// absent), as [`changed_properties`] reports it.
pub fn property_value(row: &EntityRow, name: &str, edge: bool) -> Json {
    match name {
        "endpoints" if edge => json!({ "from": row.src, "to": row.dst }),
        _ => row.props.get(name).cloned().unwrap_or(Json::Null),
    }
}

/// The properties whose values differ (an absent property is null).
pub fn changed_properties(was: &EntityRow, now: &EntityRow, edge: bool) -> Vec<PropertyChange> {
    let names: std::collections::BTreeSet<&String> = was.props.keys().chain(now.props.keys()).collect();
    let value = |r: &EntityRow, n: &str| r.props.get(n).cloned().unwrap_or(Json::Null);
    let mut out: Vec<PropertyChange> = names
        .into_iter()
        .filter_map(|n| {
            let (before, after) = (value(was, n), value(now, n));
            (before != after).then(|| PropertyChange { property: n.clone(), before, after })
        })
        .collect();
    if edge && (was.src != now.src || was.dst != now.dst) {
        out.push(PropertyChange {
            property: "endpoints".into(),
            before: json!({ "from": was.src, "to": was.dst }),
            after: json!({ "from": now.src, "to": now.dst }),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, props: &[(&str, Json)]) -> EntityRow {
        let mut r = EntityRow::node(id);
        r.props = props.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        r
    }

    #[test]
    fn ids_on_one_or_both_sides_are_inserts_deletes_and_updates() {
        let before: BTreeMap<String, EntityRow> = [
            ("a".into(), row("a", &[("age", json!(1)), ("name", json!("A"))])),
            ("b".into(), row("b", &[("age", json!(2))])),
            ("d".into(), row("d", &[("age", json!(4))])),
        ]
        .into();
        let after: BTreeMap<String, EntityRow> = [
            ("a".into(), row("a", &[("age", json!(5)), ("name", json!("A"))])),
            ("b".into(), row("b", &[("age", json!(2))])),
            ("c".into(), row("c", &[("age", json!(3))])),
        ]
        .into();
        let changes = table_changes("node:Person", "n1", before, after);
        let ops: Vec<(&str, Op)> = changes.iter().map(|c| (c.id.as_str(), c.op)).collect();
        // `b` was read on both sides but equal: no change.
        assert_eq!(ops, [("a", Op::Update), ("c", Op::Insert), ("d", Op::Delete)]);
        assert_eq!(changes[0].changed, [PropertyChange { property: "age".into(), before: json!(1), after: json!(5) }]);
        assert_eq!(changes[1].after, Some(json!({"id": "c", "age": 3})));
        assert_eq!((changes[2].before.clone(), changes[2].after.clone()), (Some(json!({"id": "d", "age": 4})), None));
    }

    #[test]
    fn an_edge_image_carries_its_endpoints_and_moved_ends_are_a_change() {
        let mut was = EntityRow::node("e");
        (was.src, was.dst) = (Some("a".into()), Some("b".into()));
        let mut now = was.clone();
        now.dst = Some("c".into());
        assert_eq!(was.image(true), json!({"id": "e", "endpoints": {"from": "a", "to": "b"}}));
        let changed = changed_properties(&was, &now, true);
        assert_eq!(changed.len(), 1);
        assert_eq!(changed[0].property, "endpoints");
    }

    #[test]
    fn ops_parse_and_the_order_puts_nodes_first() {
        assert_eq!("update".parse::<Op>().ok(), Some(Op::Update));
        assert!(matches!("upsert".parse::<Op>(), Err(OmniError::BadRequest(_))));
        let c = |kind, t: &str, id: &str| Change {
            kind,
            type_name: t.into(),
            type_id: String::new(),
            id: id.into(),
            op: Op::Insert,
            before: None,
            after: None,
            changed: vec![],
        };
        let mut v = [c("edge", "A", "1"), c("node", "B", "2"), c("node", "A", "3")];
        v.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        assert_eq!(v.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["3", "2", "1"]);
    }
}
