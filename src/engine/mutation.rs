//! Executing a checked mutation (`.gq` insert / update / delete) into the
//! staging accumulator, validating the whole changeset against committed
//! state plus pending rows, and staging one transaction per touched table.
//!
//! Semantics: a keyed node insert upserts by the id derived from `@key`; an
//! unkeyed insert is a strict insert with a ULID id; an edge insert needs
//! existing endpoints (committed or pending in the same query); an update
//! rewrites the rows its one predicate matches (key properties are
//! immutable); a node delete cascades to incident edges. `now()` is the
//! request's timestamp, resolved once.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use datafusion::prelude::{Expr, col, lit};
use serde_json::{Map, Value as Json};

use crate::engine::integrity;
use crate::engine::lang::catalog::{Catalog, TypeDef};
use crate::engine::lang::query::ir::{
    AssignmentIr, CmpOp, DeleteIr, InsertIr, MutationIr, Operand, PredicateIr, StatementIr, UpdateIr,
};
use crate::engine::layout;
use crate::engine::rows::{self, EntityRow};
use crate::engine::staging::MutationStaging;
use crate::engine::validate;
use crate::engine::values;
use crate::engine::write_plan::{Capture, Prepared};
use crate::protocol::{OmniError, Result};

/// Request-scoped inputs: parameter values and the one `now()`.
#[derive(Debug, Clone)]
pub struct MutationArgs {
    /// Parameter values by name (without `$`).
    pub params: Map<String, Json>,
    /// `now()` in epoch milliseconds.
    pub now_ms: i64,
}

/// Whether every statement is an insert (such a write is prepared again on
/// a pre-effect conflict; strict updates and deletes surface it).
pub fn insert_only(ir: &MutationIr) -> bool {
    ir.statements.iter().all(|s| matches!(s, StatementIr::Insert(_)))
}

/// Whether `ir` may share a group commit: it inserts or updates only, so a
/// group's table effects stay appends and upserts (a mutation is
/// insert/update-only or delete-only by the language).
pub fn groupable(ir: &MutationIr) -> bool {
    ir.statements.iter().all(|s| !matches!(s, StatementIr::Delete(_)))
}

/// Execute, validate and stage `ir` against `capture`.
pub async fn prepare(capture: &Capture, ir: &MutationIr, args: &MutationArgs) -> Result<Prepared> {
    let mut staging = MutationStaging::new(capture);
    execute(&mut staging, ir, args).await?;
    validate_changeset(&staging, None).await?;
    let mut prepared = Prepared::default();
    for t in staging.tables() {
        let n = (t.pending.len() + t.deleted.len()) as u64;
        if t.is_edge {
            prepared.edges_affected += n;
        } else {
            prepared.nodes_affected += n;
        }
    }
    prepared.tables = staging.stage_all().await?;
    Ok(prepared)
}

/// Run `ir`'s statements into `staging`: every read sees what is staged
/// already (earlier statements, and a group's earlier members).
pub async fn execute(staging: &mut MutationStaging<'_>, ir: &MutationIr, args: &MutationArgs) -> Result<()> {
    let catalog = &staging.capture().schema.catalog;
    for statement in &ir.statements {
        match statement {
            StatementIr::Insert(i) => insert(staging, catalog, i, args).await?,
            StatementIr::Update(u) => update(staging, catalog, u, args).await?,
            StatementIr::Delete(d) => delete(staging, catalog, d, args).await?,
        }
    }
    Ok(())
}

/// The JSON value of an operand (params by name, literals converted, `now()` bound).
fn resolve(op: &Operand, args: &MutationArgs) -> Result<Json> {
    match op {
        Operand::Param { name, ty } => match args.params.get(name) {
            Some(v) => Ok(v.clone()),
            None if ty.nullable => Ok(Json::Null),
            None => Err(OmniError::BadRequest(format!("missing parameter `${name}`"))),
        },
        Operand::Value { value, .. } => Ok(values::literal_json(value, args.now_ms)),
        Operand::Prop { var, prop, .. } => {
            Err(OmniError::BadRequest(format!("`${var}.{prop}` cannot be used as a value in a mutation")))
        }
    }
}

fn assign(row: &mut EntityRow, assignments: &[AssignmentIr], args: &MutationArgs) -> Result<()> {
    for a in assignments {
        let v = resolve(&a.value, args)?;
        if v.is_null() {
            row.props.remove(&a.prop);
        } else {
            row.props.insert(a.prop.clone(), v);
        }
    }
    Ok(())
}

async fn insert(staging: &mut MutationStaging<'_>, catalog: &Catalog, i: &InsertIr, args: &MutationArgs) -> Result<()> {
    let mut row = EntityRow::node(String::new());
    assign(&mut row, &i.assignments, args)?;
    if i.is_edge {
        let endpoint = |op: &Option<Operand>, side: &str| -> Result<String> {
            let v = op.as_ref().ok_or_else(|| OmniError::BadRequest(format!("edge insert needs `{side}`")))?;
            match resolve(v, args)? {
                Json::String(s) => Ok(s),
                other => Err(OmniError::BadRequest(format!("edge `{side}` must be a node id string, got {other}"))),
            }
        };
        let (src, dst) = (endpoint(&i.from, "from")?, endpoint(&i.to, "to")?);
        for (side, id, node_type) in [("from", &src, &i.from_type), ("to", &dst, &i.to_type)] {
            let node_type = node_type.as_deref().unwrap_or_default();
            let live = staging.live_ids(&layout::node_key(node_type), node_type, std::slice::from_ref(id)).await?;
            if !live.contains(id) {
                return Err(OmniError::BadRequest(format!(
                    "insert {}: `{side}` node `{id}` does not exist in {node_type}",
                    i.type_name
                )));
            }
        }
        row.id = ulid::Ulid::new().to_string();
        row.src = Some(src);
        row.dst = Some(dst);
        return staging.put(&i.table_key, &i.type_name, true, row, false).await;
    }
    row.id = if i.upsert {
        let node = catalog
            .node(&i.type_name)
            .ok_or_else(|| OmniError::BadRequest(format!("unknown node type `{}`", i.type_name)))?;
        let key: Vec<(String, Json)> =
            i.key.iter().map(|k| (k.clone(), row.props.get(k).cloned().unwrap_or(Json::Null))).collect();
        node.derive_id(&key).map_err(|e| OmniError::BadRequest(format!("insert {}: {e}", i.type_name)))?
    } else {
        ulid::Ulid::new().to_string()
    };
    staging.put(&i.table_key, &i.type_name, false, row, i.upsert).await
}

async fn update(
    staging: &mut MutationStaging<'_>,
    _catalog: &Catalog,
    u: &UpdateIr,
    args: &MutationArgs,
) -> Result<()> {
    let schema = staging.table(&u.table_key, &u.type_name, false).await?.schema().clone();
    let filter = predicate_expr(&schema, &u.predicate, args)?;
    for mut row in staging.select(&u.table_key, &u.type_name, false, Some(filter)).await? {
        assign(&mut row, &u.assignments, args)?;
        staging.put(&u.table_key, &u.type_name, false, row, true).await?;
    }
    Ok(())
}

async fn delete(staging: &mut MutationStaging<'_>, catalog: &Catalog, d: &DeleteIr, args: &MutationArgs) -> Result<()> {
    let schema = staging.table(&d.table_key, &d.type_name, d.is_edge).await?.schema().clone();
    let filter = predicate_expr(&schema, &d.predicate, args)?;
    let ids: Vec<String> =
        staging.select(&d.table_key, &d.type_name, d.is_edge, Some(filter)).await?.into_iter().map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    staging.delete(&d.table_key, &d.type_name, d.is_edge, ids.clone()).await?;
    if d.is_edge {
        return Ok(());
    }
    for edge_name in &d.cascade_edges {
        let Some(edge) = catalog.edge(edge_name) else { continue };
        let key = layout::edge_key(&edge.name);
        let list: Vec<Expr> = ids.iter().map(|id| lit(id.clone())).collect();
        let mut incident = HashSet::new();
        for (endpoint, node_type) in [("src", &edge.from_type), ("dst", &edge.to_type)] {
            if *node_type != d.type_name {
                continue;
            }
            let filter = col(endpoint).in_list(list.clone(), false);
            incident.extend(staging.select(&key, &edge.name, true, Some(filter)).await?.into_iter().map(|r| r.id));
        }
        if !incident.is_empty() {
            staging.delete(&key, &edge.name, true, incident).await?;
        }
    }
    Ok(())
}

/// `column op value` as a DataFusion expression with the literal cast to the
/// column's Arrow type, usable both as a Lance filter and over a MemTable.
fn predicate_expr(schema: &arrow_schema::Schema, p: &PredicateIr, args: &MutationArgs) -> Result<Expr> {
    let field = schema
        .field_with_name(&p.column)
        .map_err(|_| OmniError::BadRequest(format!("unknown column `{}`", p.column)))?;
    let value = resolve(&p.value, args)?;
    let scalar = values::json_scalar(field.data_type(), &value)
        .map_err(|e| OmniError::BadRequest(format!("where {} {:?}: {e}", p.prop, p.op)))?;
    let (c, v) = (col(&p.column), lit(scalar));
    Ok(match p.op {
        CmpOp::Eq => c.eq(v),
        CmpOp::Ne => c.not_eq(v),
        CmpOp::Gt => c.gt(v),
        CmpOp::Ge => c.gt_eq(v),
        CmpOp::Lt => c.lt(v),
        CmpOp::Le => c.lt_eq(v),
        other => return Err(OmniError::BadRequest(format!("operator {other:?} is not allowed in a mutation `where`"))),
    })
}

/// Row rules on every pending row; `@unique` against committed + pending;
/// `@card` for every touched edge table. `only` (a group member's touched
/// ids per table) limits the check to those tables, and the probes of
/// committed rows (`@unique`, `@card`) to those ids: the members before
/// passed them already, and an insert or update cannot make an earlier
/// member's row clash with a committed row another pending row replaces.
pub async fn validate_changeset(
    staging: &MutationStaging<'_>,
    only: Option<&BTreeMap<String, BTreeSet<String>>>,
) -> Result<()> {
    let catalog = &staging.capture().schema.catalog;
    for t in staging.tables() {
        let own = match only.map(|o| o.get(&t.table_key)) {
            Some(None) => continue,
            own => own.flatten(),
        };
        let rows: Vec<EntityRow> = t.pending.values().cloned().collect();
        // The rows probed against committed ones: the member's, or all.
        let own_rows: Vec<EntityRow>;
        let probed: &[EntityRow] = match own {
            Some(ids) => {
                own_rows = ids.iter().filter_map(|id| t.pending.get(id).cloned()).collect();
                &own_rows
            }
            None => &rows,
        };
        let def = catalog
            .type_def(&t.type_name)
            .ok_or_else(|| OmniError::Internal(format!("{} is not in the catalog", t.type_name)))?;
        let uniques = match def {
            TypeDef::Node(n) => {
                validate::validate_node_rows(n, &rows)?;
                &n.uniques
            }
            TypeDef::Edge(e) => {
                validate::validate_edge_rows(e, &rows)?;
                &e.uniques
            }
        };
        validate::check_unique_within(&t.type_name, &rows, uniques)?;
        if !uniques.is_empty() && !probed.is_empty() {
            // A committed row another pending row rewrites holds its new values.
            let replaced = |id: &str| t.deleted.contains(id) || t.pending.contains_key(id);
            integrity::unique_against_committed(t.dataset(), &t.type_name, uniques, probed, replaced, None).await?;
        }
        if let TypeDef::Edge(e) = def {
            let mut sources: HashSet<String> = probed.iter().filter_map(|r| r.src.clone()).collect();
            let removed: HashSet<String> = t.deleted.iter().cloned().collect();
            if !removed.is_empty() {
                let ids: Vec<Expr> = removed.iter().map(|id| lit(id.clone())).collect();
                let gone =
                    crate::engine::storage::table::scan_expr(t.dataset(), Some(col("id").in_list(ids, false))).await?;
                sources.extend(gone.iter().flat_map(rows::from_batch).filter_map(|r| r.src));
            }
            let deleted_nodes: HashSet<String> = staging
                .tables()
                .filter(|n| !n.is_edge && n.type_name == e.from_type)
                .flat_map(|n| n.deleted.iter().cloned())
                .collect();
            sources.retain(|s| !deleted_nodes.contains(s));
            let card = (e.card.min, e.card.max);
            integrity::card_per_source(Some(t.dataset()), &t.type_name, card, &rows, &removed, &sources).await?;
        }
    }
    Ok(())
}
