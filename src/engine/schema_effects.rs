//! A schema plan's effects on storage: which tables are created, rewritten,
//! edited in place, re-keyed or dropped, staged as exact transactions for
//! the writer pipeline, and the check of every existing row against a
//! tightened rule before anything is staged.
//!
//! | change | effect |
//! |---|---|
//! | add type | exact create at version 1 at a path verified empty |
//! | rename type | registration re-keyed (same id, path and data) |
//! | drop type | tombstone (older commits still read it until cleanup) |
//! | nullable add, rename, soft drop, nullability | one metadata-only `Merge`/`Project` |
//! | required add with a default, hard drop | a staged overwrite of the whole table |
//! | metadata, constraints, indexes | nothing on storage (the catalog changes) |

use std::collections::HashSet;
use std::sync::Arc;

use crate::engine::branch_name::MAIN;
use crate::engine::committed;
use crate::engine::integrity;
use crate::engine::lang::catalog::evolve::{ColumnChange, EvolvePlan, TableChange};
use crate::engine::lang::catalog::{Catalog, TypeDef};
use crate::engine::layout;
use crate::engine::manifest::{ManifestView, SchemaChange, SchemaCommit, TableEntry, TableReg};
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{Reshaper, Root, StagePlan, TxnIdentity, branches, table};
use crate::engine::validate::Validator;
use crate::engine::write_plan::{self, PreparedTable, TableEffect};
use crate::protocol::{OmniError, Result};

/// At most this many violating rows are named in a refusal.
const SHOWN_VIOLATIONS: usize = 20;

/// What one apply writes: the staged table effects, the registry delta its
/// commit publishes, and the datasets a hard drop deletes after the publish.
pub struct SchemaEffects {
    /// One exact transaction per created or changed table.
    pub prepared: write_plan::Prepared,
    /// Registrations, re-keys and tombstones, with both identities.
    pub commit: SchemaCommit,
    /// Paths of hard-dropped tables, removed once the apply is visible.
    pub hard_drops: Vec<String>,
}

/// Stage every table effect of `plan` against `view`, its branch's manifest.
/// On a named branch a table it has not written yet is forked first (after
/// the sidecar is armed, as any first write there); a new type's dataset is
/// created on its own and registered on that branch alone.
pub async fn prepare(root: &Root, view: &ManifestView, from: &str, plan: &EvolvePlan) -> Result<SchemaEffects> {
    let target = Some(view.branch.clone()).filter(|b| b != MAIN);
    let change = SchemaChange { from: from.to_string(), to: plan.target.identity() };
    let mut commit = SchemaCommit { change, registrations: vec![], tombstones: vec![] };
    let mut prepared = write_plan::Prepared::default();
    let mut hard_drops = Vec::new();
    for tc in &plan.tables {
        match (&tc.old_key, &tc.new_key) {
            (None, Some(new_key)) => {
                let (reg, t) = prepare_create(root, &plan.target, tc, new_key).await?;
                commit.registrations.push(reg);
                prepared.tables.push(t);
            }
            (Some(old_key), None) => {
                let entry = pinned(view, old_key)?;
                commit.tombstones.push(entry.table_id.clone());
                if tc.hard_drop {
                    hard_drops.push(entry.location.clone());
                }
            }
            (Some(old_key), Some(new_key)) => {
                let entry = pinned(view, old_key)?;
                if old_key != new_key {
                    commit.registrations.push(TableReg {
                        table_id: entry.table_id.clone(),
                        table_key: new_key.clone(),
                        location: entry.location.clone(),
                    });
                }
                if !tc.columns.is_empty() {
                    let keys = (old_key.as_str(), new_key.as_str());
                    prepared.tables.push(prepare_columns(root, &plan.target, tc, keys, entry, &target).await?);
                }
            }
            (None, None) => return Err(OmniError::Internal(format!("table {} has neither key", tc.table_id))),
        }
    }
    Ok(SchemaEffects { prepared, commit, hard_drops })
}

fn pinned<'v>(view: &'v ManifestView, key: &str) -> Result<&'v TableEntry> {
    view.state.tables.get(key).ok_or_else(|| {
        OmniError::Internal(format!("{key} is in the schema but not in the manifest of `{}`", view.branch))
    })
}

/// A new type's dataset: an exact create at version 1, at a path that must be empty.
async fn prepare_create(
    root: &Root,
    target: &Catalog,
    tc: &TableChange,
    key: &str,
) -> Result<(TableReg, PreparedTable)> {
    let location = layout::location(tc.kind, &tc.table_id);
    if !root.list(&location).await?.is_empty() {
        return Err(OmniError::AlreadyExists(format!(
            "the path of new type {key} ({location}) already holds files; the apply will not adopt them"
        )));
    }
    let schema = target
        .arrow_schema(layout::type_name(key))
        .ok_or_else(|| OmniError::Internal(format!("{key} is not in the target catalog")))?;
    let uri = root.child_uri(&location);
    let identity = TxnIdentity::mint(0);
    let staged = table::stage_create(&uri, &schema, &identity.uuid)?;
    let reg = TableReg { table_id: tc.table_id.clone(), table_key: key.to_string(), location };
    let t = PreparedTable {
        table_key: key.to_string(),
        uri,
        pin: 0,
        table_branch: None,
        effect: TableEffect::Staged(Box::new(staged)),
        then: vec![],
    };
    Ok((reg, t))
}

/// An existing table's column changes: metadata-only when no data must be
/// written, else a staged overwrite of every row in the target shape, on
/// `target` (the branch applied on; `None` = main).
async fn prepare_columns(
    root: &Root,
    catalog: &Catalog,
    tc: &TableChange,
    (old_key, new_key): (&str, &str),
    entry: &TableEntry,
    target: &Option<String>,
) -> Result<PreparedTable> {
    let schema = catalog
        .arrow_schema(layout::type_name(new_key))
        .ok_or_else(|| OmniError::Internal(format!("{new_key} is not in the target catalog")))?;
    let rewrites = tc
        .columns
        .iter()
        .any(|c| matches!(c, ColumnChange::Add { default: Some(_), .. } | ColumnChange::Drop { hard: true, .. }));
    let plan = if rewrites {
        // Batch by batch, as the scan reads them: a rewrite of a table of
        // any size holds about one batch in memory.
        let reshape = reshaper(layout::type_name(new_key), &tc.columns, &schema);
        StagePlan::Reshape { schema: Arc::new(schema), reshape }
    } else {
        StagePlan::EditColumns(column_edit(&tc.columns, &schema))
    };
    let identity = TxnIdentity::mint(entry.version);
    let uri = root.child_uri(&entry.location);
    let effect = if entry.branch == *target {
        let ds = committed::open_pinned(root, entry).await?;
        let staged = table::stage(ds, plan, &identity.uuid).await?;
        TableEffect::Staged(Box::new(
            staged.ok_or_else(|| OmniError::Internal(format!("{old_key}: the column change staged nothing")))?,
        ))
    } else {
        let fork = branches::plan(&uri, entry.branch.as_deref(), entry.version).await?;
        TableEffect::Fork { fork, plan, identity }
    };
    Ok(PreparedTable {
        table_key: old_key.to_string(),
        uri,
        pin: entry.version,
        table_branch: target.clone(),
        effect,
        then: vec![],
    })
}

/// What turns a batch of a table into `shape` (of type `type_name`) by
/// `columns`: renamed keys, dropped properties gone, defaults (else nulls)
/// for added ones.
pub fn reshaper(type_name: &str, columns: &[ColumnChange], shape: &arrow_schema::Schema) -> Reshaper {
    let (type_name, columns, shape) = (type_name.to_string(), columns.to_vec(), Arc::new(shape.clone()));
    Reshaper(Arc::new(move |batch: arrow_array::RecordBatch| {
        if let Some(done) = reshape_columns(&batch, &columns, &shape) {
            return Ok(done);
        }
        let mut rows: Vec<EntityRow> = rows::from_batch(&batch);
        reshape(&mut rows, &columns);
        rows::to_batch_for(&type_name, &shape, &rows)
    }))
}

/// [`reshape`] on whole Arrow columns, when no value needs writing:
/// renamed, dropped and all-null added columns, put in `shape`'s order.
/// `None` when a change writes a default or a column's type is not
/// `shape`'s (the row-by-row path then runs).
fn reshape_columns(
    batch: &arrow_array::RecordBatch,
    columns: &[ColumnChange],
    shape: &arrow_schema::SchemaRef,
) -> Option<arrow_array::RecordBatch> {
    let schema = batch.schema();
    let mut by_name: std::collections::HashMap<&str, arrow_array::ArrayRef> =
        schema.fields().iter().map(|f| f.name().as_str()).zip(batch.columns().iter().cloned()).collect();
    for c in columns {
        match c {
            ColumnChange::Rename { from, to } => {
                if let Some(column) = by_name.remove(from.as_str()) {
                    by_name.insert(to.as_str(), column);
                }
            }
            ColumnChange::Drop { name, .. } => {
                by_name.remove(name.as_str());
            }
            ColumnChange::Add { default: Some(_), .. } => return None,
            ColumnChange::Add { name, default: None, .. } => {
                let field = shape.field_with_name(name).ok()?;
                by_name.insert(name.as_str(), arrow_array::new_null_array(field.data_type(), batch.num_rows()));
            }
            ColumnChange::SetNullable { .. } => {}
        }
    }
    let wanted =
        shape.fields().iter().map(|f| by_name.remove(f.name().as_str()).filter(|c| c.data_type() == f.data_type()));
    let columns = wanted.collect::<Option<Vec<_>>>()?;
    arrow_array::RecordBatch::try_new(shape.clone(), columns).ok()
}

/// The metadata-only edit of `columns`, ending in `schema`'s column order.
fn column_edit(columns: &[ColumnChange], schema: &arrow_schema::Schema) -> table::ColumnEdit {
    let mut edit =
        table::ColumnEdit { order: schema.fields().iter().map(|f| f.name().clone()).collect(), ..Default::default() };
    for c in columns {
        match c {
            ColumnChange::Add { name, .. } => {
                if let Ok(field) = schema.field_with_name(name) {
                    edit.adds.push(field.clone().with_nullable(true));
                }
            }
            ColumnChange::Drop { name, .. } => edit.drops.push(name.clone()),
            ColumnChange::Rename { from, to } => edit.renames.push((from.clone(), to.clone())),
            ColumnChange::SetNullable { name, nullable } => edit.nullability.push((name.clone(), *nullable)),
        }
    }
    edit
}

/// Rows read at the pin, in the target's shape: renamed keys, dropped
/// properties gone, defaults where a new required property has one.
fn reshape(rows: &mut [EntityRow], columns: &[ColumnChange]) {
    for row in rows {
        for c in columns {
            match c {
                ColumnChange::Rename { from, to } => {
                    if let Some(v) = row.props.remove(from) {
                        row.props.insert(to.clone(), v);
                    }
                }
                ColumnChange::Drop { name, .. } => {
                    row.props.remove(name);
                }
                ColumnChange::Add { name, default: Some(v), .. } => {
                    row.props.insert(name.clone(), v.clone());
                }
                ColumnChange::Add { .. } | ColumnChange::SetNullable { .. } => {}
            }
        }
    }
}

/// Check every row of each table a tightened rule applies to, in its target
/// shape, against the target type (row rules, `@unique`, `@card`). A
/// violation refuses the apply with the violating ids named.
pub async fn validate(root: &Root, view: &ManifestView, plan: &EvolvePlan) -> Result<()> {
    let mut problems = Vec::new();
    for tc in plan.tables.iter().filter(|t| t.validate) {
        let (Some(old_key), Some(new_key)) = (&tc.old_key, &tc.new_key) else { continue };
        let type_name = layout::type_name(new_key);
        let def = plan
            .target
            .type_def(type_name)
            .ok_or_else(|| OmniError::Internal(format!("{new_key} is not in the target catalog")))?;
        let ds = committed::open_pinned(root, pinned(view, old_key)?).await?;
        let mut rows: Vec<EntityRow> = table::scan(&ds, None).await?.iter().flat_map(rows::from_batch).collect();
        reshape(&mut rows, &tc.columns);
        let validator = Validator::for_type(def)?;
        for row in &rows {
            problems.extend(validator.row_violations(row).into_iter().map(|v| v.to_string()));
        }
        if let Err(v) = validator.check_unique(&rows) {
            problems.push(v.to_string());
        }
        if let TypeDef::Edge(edge) = def
            && let Err(e) = card(root, view, plan, edge, &rows).await
        {
            problems.push(e.to_string());
        }
    }
    if problems.is_empty() {
        return Ok(());
    }
    let total = problems.len();
    problems.truncate(SHOWN_VIOLATIONS);
    Err(OmniError::BadRequest(format!(
        "the new schema tightens a rule that {total} existing row(s) break; nothing was applied: {}",
        problems.join("; ")
    )))
}

/// `@card` over every edge, counting each live source node (a node with no
/// edge counts 0 against the minimum).
async fn card(
    root: &Root,
    view: &ManifestView,
    plan: &EvolvePlan,
    edge: &crate::engine::lang::catalog::EdgeType,
    rows: &[EntityRow],
) -> Result<()> {
    let mut sources: HashSet<String> = rows.iter().filter_map(|r| r.src.clone()).collect();
    if edge.card.min > 0 {
        // The source type by its accepted key: a renamed type is still pinned under it.
        let from = plan.target.node(&edge.from_type).map(|n| n.table_id.clone());
        let entry = view.state.tables.values().find(|t| Some(&t.table_id) == from.as_ref());
        if let Some(entry) = entry {
            let ds = committed::open_pinned(root, entry).await?;
            for b in table::scan_columns(&ds, &["id"]).await? {
                sources.extend(rows::from_batch(&b).into_iter().map(|r| r.id));
            }
        }
    }
    let card = (edge.card.min, edge.card.max);
    integrity::card_per_source(None, &edge.name, card, rows, &HashSet::new(), &sources).await
}
