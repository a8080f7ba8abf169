//! Planning a merge across a schema change: each table's three-way delta
//! with every side's rows brought into the merged schema first.
//!
//! The merged catalog comes from the three-way merge of the sides' schemas
//! (`lang::schema::merge`). A merged type is found on each side by its name,
//! else by its `@rename_from`; each side's batches are reshaped into the
//! merged type's columns (renamed, defaults or nulls for properties that
//! side lacks, dropped ones gone) before they are fingerprinted, so a row
//! counts as changed on a side only when its values in the merged shape
//! differ from the base's. The source's rows the merge writes are reshaped
//! the same way. Row versions cannot classify across shapes, so every
//! table takes the fingerprint path ([`super::spill`]), and the target is
//! always written (never a pointer adopted): its own shape may change in
//! the same commit.

use std::collections::HashSet;

use lance::Dataset;
use tracing::{Instrument, info_span};

use super::delta::{self, Hash128};
use super::spill::{self, Base, Side};
use super::{ShapedPin, Shapes, TableMerge, same};
use crate::engine::committed;
use crate::engine::lang::catalog::Catalog;
use crate::engine::lang::catalog::evolve;
use crate::engine::layout;
use crate::engine::manifest::{ManifestState, TableEntry};
use crate::engine::schema_effects;
use crate::engine::storage::{Reshaper, Root};
use crate::protocol::{OmniError, Result};

/// The catalogs of a merge across a schema change: each side's and the merged one.
#[derive(Clone, Copy)]
pub struct Catalogs<'a> {
    /// The merge base's.
    pub base: &'a Catalog,
    /// The source's.
    pub source: &'a Catalog,
    /// The target's, before the merge.
    pub target: &'a Catalog,
    /// What the target's becomes.
    pub merged: &'a Catalog,
}

/// The states of a merge's three sides.
#[derive(Clone, Copy)]
pub struct States<'a> {
    /// The merge base's.
    pub base: &'a ManifestState,
    /// The source's.
    pub source: &'a ManifestState,
    /// The target's.
    pub target: &'a ManifestState,
}

/// Every merged table the source changed, planned against the target in
/// the merged shape, in catalog order; `budget` bounds each table's
/// fingerprints as in [`super::plan_table`].
pub async fn plan_tables(root: &Root, c: Catalogs<'_>, s: States<'_>, budget: u64) -> Result<Vec<TableMerge>> {
    // Each side's way to the merged shape, planned once for every table.
    let sides = [(c.source, s.source), (c.target, s.target), (c.base, s.base)].map(|(catalog, state)| SideShape {
        catalog,
        state,
        plan: evolve::plan(catalog, c.merged.clone(), false),
    });
    let mut out = Vec::new();
    for table in layout::tables(c.merged) {
        let key = table.table_key.as_str();
        let span = info_span!("merge.across", table = %key);
        if let Some(m) = plan_table(root, c.merged, &sides, key, budget).instrument(span).await? {
            out.push(m);
        }
    }
    Ok(out)
}

/// One side of a merge across schemas: its catalog, its state, and its
/// schema plan to the merged catalog.
struct SideShape<'a> {
    catalog: &'a Catalog,
    state: &'a ManifestState,
    plan: evolve::EvolvePlan,
}

async fn plan_table(
    root: &Root,
    merged: &Catalog,
    [source, target, base]: &[SideShape<'_>; 3],
    key: &str,
    budget: u64,
) -> Result<Option<TableMerge>> {
    let Some(source) = on_side(source, merged, key)? else { return Ok(None) };
    let target = on_side(target, merged, key)?;
    let base = on_side(base, merged, key)?;
    if base.as_ref().is_some_and(|b| same(&b.entry, &source.entry))
        || target.as_ref().is_some_and(|t| same(&t.entry, &source.entry))
    {
        return Ok(None);
    }
    let source_ds = committed::open_pinned(root, &source.entry).await?;
    // A type only the source has: its table as the schema apply created it
    // (empty, on its main ref) stands for the target's.
    let target = target.unwrap_or_else(|| ShapedPin {
        entry: TableEntry { branch: None, version: 1, ..source.entry.clone() },
        shape: source.shape.clone(),
    });
    let target_entry = &target.entry;
    let target_ds = committed::open_pinned(root, target_entry).await?;
    let base_ds = match &base {
        Some(b) if !same(&b.entry, target_entry) => Some(committed::open_pinned(root, &b.entry).await?),
        _ => None,
    };
    let sides = match (&base, &base_ds) {
        (Some(b), Some(ds)) => Base::At(Side { ds, columns: None, shape: b.shape.as_ref() }),
        (Some(_), None) => Base::Target,
        (None, _) => Base::Empty,
    };
    let shaped = |ds, shape| Side { ds, columns: None, shape };
    let keyed = spill::classify_sides(
        sides,
        shaped(&source_ds, source.shape.as_ref()),
        shaped(&target_ds, target.shape.as_ref()),
        budget,
    )
    .await?;
    if keyed.inserted.is_empty() && keyed.updated.is_empty() && keyed.deleted.is_empty() && keyed.conflicts.is_empty() {
        return Ok(None);
    }
    let written: HashSet<Hash128> = keyed.inserted.union(&keyed.updated).copied().collect();
    let rows = source.reshape(delta::rows_with_keys(&source_ds, &written).await?)?;
    let all: [&Dataset; 3] = [&target_ds, &source_ds, base_ds.as_deref().unwrap_or(&target_ds)];
    let delta = delta::resolve(key, keyed, &rows, all).await?;
    let merged = merged_type_columns(merged, layout::type_name(key))?;
    Ok(Some(TableMerge {
        table_key: key.to_string(),
        target: target.entry.clone(),
        target_ds,
        source: source.entry.clone(),
        delta,
        rows,
        adopt: false,
        located: None,
        conflict_rows: None,
        shapes: Some(Box::new(Shapes { base, source, target, merged })),
    }))
}

/// Merged table `key` on a side: found by the merged type's name, else by
/// its `@rename_from`; `None` when the side has no such type or no table
/// for it.
fn on_side(side: &SideShape<'_>, merged: &Catalog, key: &str) -> Result<Option<ShapedPin>> {
    let name = layout::type_name(key);
    let prefix = key.strip_suffix(name).unwrap_or_default();
    let hint = merged.type_def(name).and_then(|d| d.meta().rename_from.clone());
    let side_name = if side.catalog.type_def(name).is_some() {
        name.to_string()
    } else {
        match hint.filter(|h| side.catalog.type_def(h).is_some()) {
            Some(h) => h,
            None => return Ok(None),
        }
    };
    let Some(entry) = side.state.tables.get(&format!("{prefix}{side_name}")) else { return Ok(None) };
    let shape = shaper(side, merged, &side_name, name)?;
    Ok(Some(ShapedPin { entry: entry.clone(), shape }))
}

/// What brings a batch of `side_type` into `merged_type`'s shape; `None`
/// when the shapes are already the same.
fn shaper(side: &SideShape<'_>, merged: &Catalog, side_type: &str, merged_type: &str) -> Result<Option<Reshaper>> {
    let wanted = merged_type_columns(merged, merged_type)?;
    let change = side.plan.tables.iter().find(|t| t.new_key.as_deref().map(layout::type_name) == Some(merged_type));
    let columns = change.map(|t| t.columns.as_slice()).unwrap_or_default();
    let names = |s: &arrow_schema::Schema| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
    let same_columns = side.catalog.arrow_schema(side_type).is_some_and(|have| names(&have) == names(&wanted));
    if columns.is_empty() && same_columns {
        return Ok(None);
    }
    Ok(Some(schema_effects::reshaper(merged_type, columns, &wanted)))
}

/// The merged catalog's columns for `merged_type`.
fn merged_type_columns(merged: &Catalog, merged_type: &str) -> Result<arrow_schema::SchemaRef> {
    merged
        .arrow_schema(merged_type)
        .map(std::sync::Arc::new)
        .ok_or_else(|| OmniError::Internal(format!("{merged_type} is not in the merged catalog")))
}
