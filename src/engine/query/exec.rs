//! Building and running the DataFusion plan of one read query.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, RecordBatch};
use arrow_schema::DataType;
use datafusion::common::JoinType;
use datafusion::dataframe::DataFrame;
use datafusion::functions::string::expr_fn as string_fn;
use datafusion::functions_aggregate::expr_fn as agg;
use datafusion::functions_nested::expr_fn::array_has;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, SortExpr, Volatility, create_udf};
use datafusion::prelude::{Expr, SessionContext, ident, lit};
use lance::datafusion::LanceTableProvider;
use serde_json::Value as Json;

use super::params::ParamValues;
use crate::engine::committed::open_pinned;
use crate::engine::lang::catalog::arrow::scalar_data_type;
use crate::engine::lang::query::ast::AggFunc;
use crate::engine::lang::query::ir::{
    CmpOp, Direction, FilterIr, MatchIr, NearestIr, Operand, OrderKey, ProjExpr, ReadIr, TraversalIr, Type, VarIr,
    VarKind,
};
use crate::engine::manifest::ManifestView;
use crate::engine::storage::Root;
use crate::engine::values::{json_scalar, literal_json};
use crate::protocol::{OmniError, Result};

/// Rows of a read query and the commit they were read from.
#[derive(Debug, Clone)]
pub struct QueryResult {
    /// Output column names, in order.
    pub columns: Vec<String>,
    /// The rows.
    pub batches: Vec<RecordBatch>,
    /// The graph commit the snapshot belongs to.
    pub graph_commit_id: String,
}

type DfResult<T> = std::result::Result<T, datafusion::error::DataFusionError>;

pub(super) fn df_err(e: datafusion::error::DataFusionError) -> OmniError {
    OmniError::Internal(format!("query execution: {e}"))
}

/// The column of `var`'s property `prop` in the binding frame.
pub(super) fn var_col(var: &str, prop: &str) -> Expr {
    ident(format!("{var}.{prop}"))
}

/// Column name of the nearest-distance score.
const NEAREST_COL: &str = "__nearest";

/// The plan builder of one read query at one snapshot.
pub(super) struct Planner<'a> {
    pub(super) ctx: SessionContext,
    pub(super) root: &'a Root,
    pub(super) view: &'a ManifestView,
    params: &'a ParamValues,
    now_ms: i64,
    fresh: std::sync::atomic::AtomicU32,
}

/// Execute `ir` on the snapshot `view` (read at commit `commit_id`).
pub async fn execute(
    root: &Root,
    view: &ManifestView,
    commit_id: &str,
    ir: &ReadIr,
    params: &ParamValues,
    now_ms: i64,
) -> Result<QueryResult> {
    let p = Planner { ctx: SessionContext::new(), root, view, params, now_ms, fresh: Default::default() };
    let df = p.match_frame(&ir.pattern, &[]).await?;
    let df = p.finish(df, ir).await?;
    let columns: Vec<String> = ir.projections.iter().map(|c| c.column.clone()).collect();
    let batches = df.collect().await.map_err(df_err)?;
    Ok(QueryResult { columns, batches, graph_commit_id: commit_id.to_string() })
}

impl Planner<'_> {
    pub(super) fn fresh(&self, stem: &str) -> String {
        let n = self.fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        format!("__{stem}{n}")
    }

    /// The table of `table_key` opened at the snapshot's pin.
    pub(super) async fn pinned(&self, table_key: &str) -> Result<Arc<lance::Dataset>> {
        let entry = self
            .view
            .state
            .tables
            .get(table_key)
            .ok_or_else(|| OmniError::NotFound(format!("{table_key} in this snapshot")))?;
        open_pinned(self.root, entry).await
    }

    /// A scan of `table_key` at its pin with every column renamed `{prefix}.{col}`.
    async fn table_frame(&self, table_key: &str, prefix: &str) -> Result<DataFrame> {
        let ds = self.pinned(table_key).await?;
        let provider = LanceTableProvider::new(ds, false, false);
        let df = self.ctx.read_table(Arc::new(provider)).map_err(df_err)?;
        let cols: Vec<Expr> =
            df.schema().fields().iter().map(|f| ident(f.name()).alias(format!("{prefix}.{}", f.name()))).collect();
        df.select(cols).map_err(df_err)
    }

    fn var_frame<'v>(&'v self, var: &'v VarIr) -> impl Future<Output = Result<DataFrame>> + 'v {
        self.table_frame(&var.table_key, &var.name)
    }

    /// The (s, d) pairs one traversal connects, oriented from the written
    /// `src` to the written `dst`, with the edge's columns when it is bound.
    async fn hop_frame(&self, t: &TraversalIr, tag: &str) -> Result<DataFrame> {
        let prefix = t.edge_var.clone().unwrap_or_else(|| tag.to_string());
        let edges = self.table_frame(&t.table_key, &prefix).await?;
        let (s, d) = (format!("{tag}.s"), format!("{tag}.d"));
        let orient = |df: DataFrame, from: &str, to: &str| -> DfResult<DataFrame> {
            let mut cols = vec![var_col(&prefix, from).alias(&s), var_col(&prefix, to).alias(&d)];
            if t.edge_var.is_some() {
                cols.extend(df.schema().fields().iter().map(|f| ident(f.name())));
            }
            df.select(cols)
        };
        let one = match t.direction {
            Direction::Out => orient(edges, "src", "dst"),
            Direction::In => orient(edges, "dst", "src"),
            Direction::Both => {
                orient(edges.clone(), "src", "dst").and_then(|a| orient(edges, "dst", "src").and_then(|b| a.union(b)))
            }
        }
        .map_err(df_err)?;
        if t.min_hops == 1 && t.max_hops == 1 {
            return Ok(one);
        }
        self.expand_hops(one, t, tag).await
    }

    /// Bounded reachability with set semantics: each (source, destination)
    /// pair once, for any walk length in `min..=max`. Evaluated level by
    /// level in memory (never as a plan nested `max` joins deep, which
    /// overflowed the stack), and it stops as soon as further levels can add
    /// nothing: the levels repeat with some period once a level's pair set
    /// equals an earlier one's, so after one full period past `min` every
    /// later level is already counted.
    async fn expand_hops(&self, one: DataFrame, t: &TraversalIr, tag: &str) -> Result<DataFrame> {
        let (s, d) = (format!("{tag}.s"), format!("{tag}.d"));
        let batches = one.select(vec![ident(&s), ident(&d)]).and_then(|f| f.distinct()).map_err(df_err)?;
        let batches = batches.collect().await.map_err(df_err)?;
        let step = pairs_of(&batches)?;
        let reached = walk_levels(&step, t.min_hops, t.max_hops);
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new(&s, DataType::Utf8, true),
            arrow_schema::Field::new(&d, DataType::Utf8, true),
        ]));
        let (src, dst): (Vec<&str>, Vec<&str>) = reached.iter().map(|(a, b)| (a.as_str(), b.as_str())).unzip();
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow_array::StringArray::from(src)), Arc::new(arrow_array::StringArray::from(dst))],
        )
        .map_err(|e| OmniError::Internal(format!("building the reached pairs: {e}")))?;
        self.ctx.read_batch(batch).map_err(df_err)
    }

    /// The binding frame of a match pattern.
    async fn match_frame(&self, m: &MatchIr, scope: &[VarIr]) -> Result<DataFrame> {
        let mut bound: BTreeSet<String> = BTreeSet::new();
        let mut df: Option<DataFrame> = None;
        let var = |name: &str| m.vars.iter().find(|v| v.name == name);
        for t in &m.traversals {
            let mut t = t.clone();
            if !bound.contains(&t.src) && bound.contains(&t.dst) {
                std::mem::swap(&mut t.src, &mut t.dst);
                t.direction = match t.direction {
                    Direction::Out => Direction::In,
                    Direction::In => Direction::Out,
                    Direction::Both => Direction::Both,
                };
            }
            if !bound.contains(&t.src) {
                let v = var(&t.src).ok_or_else(|| OmniError::Internal(format!("unbound variable {}", t.src)))?;
                df = Some(self.cross(df, self.var_frame(v).await?)?);
                bound.insert(t.src.clone());
            }
            let tag = self.fresh("hop");
            let hop = self.hop_frame(&t, &tag).await?;
            let current = df.take().ok_or_else(|| OmniError::Internal("empty binding frame".into()))?;
            let joined = current
                .join_on(hop, JoinType::Inner, [var_col(&t.src, "id").eq(ident(format!("{tag}.s")))])
                .map_err(df_err)?;
            let joined = if bound.contains(&t.dst) {
                joined.filter(var_col(&t.dst, "id").eq(ident(format!("{tag}.d")))).map_err(df_err)?
            } else {
                let v = var(&t.dst).ok_or_else(|| OmniError::Internal(format!("unbound variable {}", t.dst)))?;
                let dst = self.var_frame(v).await?;
                bound.insert(t.dst.clone());
                joined
                    .join_on(dst, JoinType::Inner, [ident(format!("{tag}.d")).eq(var_col(&t.dst, "id"))])
                    .map_err(df_err)?
            };
            df = Some(drop_prefixed(joined, &format!("{tag}."))?);
            if let Some(ev) = &t.edge_var {
                bound.insert(ev.clone());
            }
        }
        let unbound: Vec<&VarIr> =
            m.vars.iter().filter(|v| v.kind == VarKind::Node && !bound.contains(&v.name)).collect();
        for v in unbound {
            df = Some(self.cross(df, self.var_frame(v).await?)?);
            bound.insert(v.name.clone());
        }
        let mut df = df.ok_or_else(|| OmniError::BadRequest("the match binds no variable".into()))?;
        for f in &m.filters {
            df = df.filter(self.filter_expr(f)?).map_err(df_err)?;
        }
        for s in &m.searches {
            df = self.text_filter(df, m, s).await?;
        }
        let visible: Vec<VarIr> = scope.iter().chain(m.vars.iter()).cloned().collect();
        for block in &m.not_blocks {
            df = Box::pin(self.anti_join(df, &bound, &visible, block)).await?;
        }
        Ok(df)
    }

    fn cross(&self, left: Option<DataFrame>, right: DataFrame) -> Result<DataFrame> {
        match left {
            None => Ok(right),
            Some(l) => l.join_on(right, JoinType::Inner, std::iter::empty()).map_err(df_err),
        }
    }

    /// `not { block }`: drop the outer rows for which the block (correlated on
    /// the outer variables it mentions) has a match.
    async fn anti_join(
        &self,
        df: DataFrame,
        outer: &BTreeSet<String>,
        visible: &[VarIr],
        block: &MatchIr,
    ) -> Result<DataFrame> {
        let mut refs: Vec<String> = mentioned(block).into_iter().filter(|v| outer.contains(v)).collect();
        refs.sort();
        let mut inner = block.clone();
        for name in &refs {
            let v = visible
                .iter()
                .find(|v| &v.name == name)
                .ok_or_else(|| OmniError::Internal(format!("outer variable {name} is not in scope")))?;
            inner.vars.push(v.clone());
        }
        let sub = Box::pin(self.match_frame(&inner, visible)).await?;
        if refs.is_empty() {
            let any = sub.limit(0, Some(1)).map_err(df_err)?.collect().await.map_err(df_err)?;
            let exists = any.iter().any(|b| b.num_rows() > 0);
            return if exists { df.filter(lit(false)).map_err(df_err) } else { Ok(df) };
        }
        let tag = self.fresh("not");
        let keys: Vec<Expr> = refs.iter().map(|r| var_col(r, "id").alias(format!("{tag}.{r}"))).collect();
        let sub = sub.select(keys).and_then(|s| s.distinct()).map_err(df_err)?;
        let on: Vec<Expr> = refs.iter().map(|r| var_col(r, "id").eq(ident(format!("{tag}.{r}")))).collect();
        df.join_on(sub, JoinType::LeftAnti, on).map_err(df_err)
    }

    fn operand_type(&self, op: &Operand) -> Option<DataType> {
        match op {
            Operand::Prop { .. } => None,
            Operand::Param { ty, .. } | Operand::Value { ty, .. } => Some(arrow_type(ty)),
        }
    }

    pub(super) fn operand_json(&self, op: &Operand) -> Result<Json> {
        match op {
            Operand::Param { name, .. } => Ok(self.params.get(name).cloned().unwrap_or(Json::Null)),
            Operand::Value { value, .. } => Ok(literal_json(value, self.now_ms)),
            Operand::Prop { var, prop, .. } => Err(OmniError::Internal(format!("{var}.{prop} is not a value"))),
        }
    }

    fn operand_expr(&self, op: &Operand, as_type: Option<&DataType>) -> Result<Expr> {
        if let Operand::Prop { var, prop, .. } = op {
            return Ok(var_col(var, prop));
        }
        let dt = as_type.cloned().or_else(|| self.operand_type(op)).unwrap_or(DataType::Utf8);
        let v = self.operand_json(op)?;
        let scalar = json_scalar(&dt, &v).map_err(|e| OmniError::BadRequest(format!("bad value {v}: {e}")))?;
        Ok(lit(scalar))
    }

    fn filter_expr(&self, f: &FilterIr) -> Result<Expr> {
        // Literals take the type of the property they are compared with.
        let prop_type = |op: &Operand| match op {
            Operand::Prop { ty, .. } => Some(arrow_type(ty)),
            _ => None,
        };
        let left_hint = prop_type(&f.right).filter(|_| !matches!(f.op, CmpOp::ListContains));
        let right_hint = match f.op {
            CmpOp::ListContains => match &f.left {
                Operand::Prop { ty, .. } => Some(arrow_type(&ty.element())),
                _ => None,
            },
            _ => prop_type(&f.left),
        };
        let l = self.operand_expr(&f.left, left_hint.as_ref())?;
        let r = self.operand_expr(&f.right, right_hint.as_ref())?;
        Ok(match f.op {
            CmpOp::Eq => l.eq(r),
            CmpOp::Ne => l.not_eq(r),
            CmpOp::Gt => l.gt(r),
            CmpOp::Ge => l.gt_eq(r),
            CmpOp::Lt => l.lt(r),
            CmpOp::Le => l.lt_eq(r),
            CmpOp::ListContains => array_has(l, r),
            CmpOp::StringContains => string_fn::contains(l, r),
            CmpOp::StartsWith => string_fn::starts_with(l, r),
        })
    }

    /// Aggregation or plain projection, order, limit.
    async fn finish(&self, df: DataFrame, ir: &ReadIr) -> Result<DataFrame> {
        let mut df = df;
        let nearest = ir.order.iter().find_map(|k| match &k.key {
            OrderKey::Nearest(n) => Some(n.clone()),
            _ => None,
        });
        if let Some(n) = &nearest {
            let udf = self.cosine_udf(n, &df)?;
            df = df.with_column(NEAREST_COL, udf.call(vec![var_col(&n.var, &n.prop)])).map_err(df_err)?;
        }
        if let Some(k) = ir.order.iter().find(|k| matches!(k.key, OrderKey::Bm25(_) | OrderKey::Rrf(_))) {
            df = self.with_rank(df, &k.key, &ir.pattern).await?;
        }
        if ir.aggregate {
            return self.finish_aggregate(df, ir);
        }
        let columns = frame_columns(&df);
        let mut sort: Vec<SortExpr> = Vec::new();
        for k in &ir.order {
            let e = match &k.key {
                OrderKey::Prop { var, prop, .. } => var_col(var, prop),
                OrderKey::Column { index, .. } => self.projection_expr(&ir.projections[*index].expr, &columns)?,
                OrderKey::Nearest(_) => ident(NEAREST_COL),
                // The score: descending (best first) unless written `asc`.
                OrderKey::Bm25(_) | OrderKey::Rrf(_) => ident(super::search::RANK_COL),
            };
            sort.push(e.sort(!k.descending, !k.descending));
        }
        // Ties break by the bound ids, so results are deterministic.
        let ids: Vec<String> =
            df.schema().fields().iter().map(|f| f.name().clone()).filter(|n| n.ends_with(".id")).collect();
        sort.extend(ids.iter().map(|n| ident(n).sort(true, true)));
        if !sort.is_empty() {
            df = df.sort(sort).map_err(df_err)?;
        }
        if let Some(n) = ir.limit {
            df = df.limit(0, Some(n as usize)).map_err(df_err)?;
        }
        let cols: Vec<Expr> = ir
            .projections
            .iter()
            .map(|p| self.projection_expr(&p.expr, &columns).map(|e| e.alias(&p.column)))
            .collect::<Result<_>>()?;
        df.select(cols).map_err(df_err)
    }

    fn finish_aggregate(&self, df: DataFrame, ir: &ReadIr) -> Result<DataFrame> {
        let columns = frame_columns(&df);
        let mut group = Vec::new();
        let mut aggs = Vec::new();
        for (i, p) in ir.projections.iter().enumerate() {
            let e = self.projection_expr(&p.expr, &columns)?.alias(&p.column);
            if ir.group_by.contains(&i) { group.push(e) } else { aggs.push(e) }
        }
        let mut df = df.aggregate(group, aggs).map_err(df_err)?;
        let mut sort: Vec<SortExpr> = Vec::new();
        for k in &ir.order {
            if let OrderKey::Column { name, .. } = &k.key {
                sort.push(ident(name).sort(!k.descending, !k.descending));
            } else if let OrderKey::Prop { var, prop, .. } = &k.key
                && let Some(p) = ir
                    .projections
                    .iter()
                    .find(|p| matches!(&p.expr, ProjExpr::Prop { var: v, prop: q } if v == var && q == prop))
            {
                sort.push(ident(&p.column).sort(!k.descending, !k.descending));
            }
        }
        sort.extend(ir.group_by.iter().map(|i| ident(&ir.projections[*i].column).sort(true, true)));
        if !sort.is_empty() {
            df = df.sort(sort).map_err(df_err)?;
        }
        if let Some(n) = ir.limit {
            df = df.limit(0, Some(n as usize)).map_err(df_err)?;
        }
        let cols: Vec<Expr> = ir.projections.iter().map(|p| ident(&p.column)).collect();
        df.select(cols).map_err(df_err)
    }

    fn projection_expr(&self, e: &ProjExpr, columns: &[String]) -> Result<Expr> {
        Ok(match e {
            ProjExpr::Prop { var, prop } => var_col(var, prop),
            ProjExpr::Node { var } => node_struct(var, columns),
            ProjExpr::Param { name } => {
                let v = self.params.get(name).cloned().unwrap_or(Json::Null);
                lit(json_to_scalar_guess(&v))
            }
            ProjExpr::Value(v) => lit(json_to_scalar_guess(&literal_json(v, self.now_ms))),
            ProjExpr::Agg { func, arg } => {
                let a = match arg.as_ref() {
                    // count($p) counts bound nodes: their ids.
                    ProjExpr::Node { var } => var_col(var, "id"),
                    other => self.projection_expr(other, columns)?,
                };
                match func {
                    AggFunc::Count => agg::count(a),
                    AggFunc::Sum => agg::sum(a),
                    AggFunc::Avg => agg::avg(a),
                    AggFunc::Min => agg::min(a),
                    AggFunc::Max => agg::max(a),
                }
            }
            ProjExpr::Rank(_) => ident(NEAREST_COL),
        })
    }

    /// Cosine distance to the query vector, by brute force (no vector index).
    pub(super) fn cosine_udf(&self, n: &NearestIr, df: &DataFrame) -> Result<ScalarUDF> {
        if n.query_is_text {
            return Err(OmniError::BadRequest(format!(
                "nearest({}.{}) with a text query needs an embedding model; pass a vector",
                n.var, n.prop
            )));
        }
        let q: Vec<f64> = match self.operand_json(&n.query)? {
            Json::Array(items) => items.iter().filter_map(Json::as_f64).collect(),
            other => return Err(OmniError::BadRequest(format!("nearest needs a vector, got {other}"))),
        };
        if q.len() != n.dim as usize {
            return Err(OmniError::BadRequest(format!("nearest needs a vector of {} numbers, got {}", n.dim, q.len())));
        }
        let name = format!("{}.{}", n.var, n.prop);
        let dt = df.schema().field_with_unqualified_name(&name).map_err(df_err)?.data_type().clone();
        let qnorm = q.iter().map(|x| x * x).sum::<f64>().sqrt();
        let f = Arc::new(move |args: &[ColumnarValue]| -> DfResult<ColumnarValue> {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let list = arrays
                .first()
                .and_then(|a| a.as_any().downcast_ref::<FixedSizeListArray>())
                .ok_or_else(|| datafusion::error::DataFusionError::Internal("nearest: not a vector column".into()))?;
            let out: Float64Array = (0..list.len())
                .map(|i| {
                    if list.is_null(i) {
                        return None;
                    }
                    let row = list.value(i);
                    let vals = row.as_any().downcast_ref::<Float32Array>()?;
                    let (mut dot, mut norm) = (0.0, 0.0);
                    for (a, b) in vals.values().iter().zip(&q) {
                        dot += f64::from(*a) * b;
                        norm += f64::from(*a) * f64::from(*a);
                    }
                    let denom = norm.sqrt() * qnorm;
                    (denom > 0.0).then(|| 1.0 - dot / denom)
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        });
        Ok(create_udf("cosine_distance", vec![dt], DataType::Float64, Volatility::Immutable, f))
    }
}

fn frame_columns(df: &DataFrame) -> Vec<String> {
    df.schema().fields().iter().map(|f| f.name().clone()).collect()
}

/// A whole node: a struct of its `id` and every property, named as declared.
fn node_struct(var: &str, columns: &[String]) -> Expr {
    let prefix = format!("{var}.");
    let args = columns
        .iter()
        .filter_map(|c| c.strip_prefix(&prefix).map(|prop| (prop, c)))
        .flat_map(|(prop, c)| [lit(prop.to_string()), ident(c)])
        .collect();
    datafusion::functions::core::expr_fn::named_struct(args)
}

/// Drop every column whose name starts with `prefix`.
fn drop_prefixed(df: DataFrame, prefix: &str) -> Result<DataFrame> {
    let keep: Vec<Expr> =
        df.schema().fields().iter().filter(|f| !f.name().starts_with(prefix)).map(|f| ident(f.name())).collect();
    df.select(keep).map_err(df_err)
}

/// Variables a block mentions (traversal endpoints and filter properties).
fn mentioned(m: &MatchIr) -> HashSet<String> {
    let mut out = HashSet::new();
    for t in &m.traversals {
        out.insert(t.src.clone());
        out.insert(t.dst.clone());
    }
    for f in &m.filters {
        for op in [&f.left, &f.right] {
            if let Operand::Prop { var, .. } = op {
                out.insert(var.clone());
            }
        }
    }
    for b in &m.not_blocks {
        out.extend(mentioned(b));
    }
    let own: HashSet<String> = m.vars.iter().map(|v| v.name.clone()).collect();
    out.retain(|v| !own.contains(v));
    out
}

fn arrow_type(t: &Type) -> DataType {
    let base = scalar_data_type(&t.scalar);
    if t.list { DataType::List(Arc::new(arrow_schema::Field::new("item", base, true))) } else { base }
}

fn json_to_scalar_guess(v: &Json) -> datafusion::scalar::ScalarValue {
    use datafusion::scalar::ScalarValue as S;
    match v {
        Json::Bool(b) => S::Boolean(Some(*b)),
        Json::Number(n) => n.as_i64().map(|i| S::Int64(Some(i))).unwrap_or(S::Float64(n.as_f64())),
        Json::String(s) => S::Utf8(Some(s.clone())),
        Json::Null => S::Null,
        other => S::Utf8(Some(other.to_string())),
    }
}

/// The (source, destination) id pairs of a two-column string frame.
fn pairs_of(batches: &[RecordBatch]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for b in batches {
        let col = |i: usize| {
            let c = arrow::compute::cast(b.column(i), &DataType::Utf8)
                .map_err(|e| OmniError::Internal(format!("hop ids as text: {e}")))?;
            Ok::<_, OmniError>(c)
        };
        let (a, z) = (col(0)?, col(1)?);
        let (a, z) = (a.as_string::<i32>(), z.as_string::<i32>());
        for i in 0..b.num_rows() {
            if a.is_valid(i) && z.is_valid(i) {
                out.push((a.value(i).to_string(), z.value(i).to_string()));
            }
        }
    }
    Ok(out)
}

/// Every pair joined by a walk of `min..=max` steps over `step`, level by
/// level, stopping early once the levels repeat and a whole period past
/// `min` has been counted (see [`Planner::expand_hops`]).
fn walk_levels(step: &[(String, String)], min: u32, max: u32) -> BTreeSet<(String, String)> {
    let mut next: HashMap<&str, Vec<&str>> = HashMap::new();
    for (a, z) in step {
        next.entry(a.as_str()).or_default().push(z.as_str());
    }
    let mut level: BTreeSet<(String, String)> = step.iter().cloned().collect();
    let mut seen: HashMap<BTreeSet<(String, String)>, u32> = HashMap::new();
    let mut reached = BTreeSet::new();
    let mut stop_at = max;
    for depth in 1..=max {
        if depth >= min {
            reached.extend(level.iter().cloned());
        }
        if depth >= stop_at || level.is_empty() {
            break;
        }
        if let Some(first) = seen.insert(level.clone(), depth) {
            // Levels repeat every `p` from `first` on: once `p` consecutive
            // levels at or past `min` are counted, every later one was.
            let p = depth - first;
            stop_at = stop_at.min(depth.max(min.max(first) + p - 1));
        }
        let mut following = BTreeSet::new();
        for (a, z) in &level {
            for z2 in next.get(z.as_str()).into_iter().flatten() {
                following.insert((a.clone(), (*z2).to_string()));
            }
        }
        level = following;
    }
    reached
}

#[cfg(test)]
mod tests {
    use super::walk_levels;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn walks_count_each_length_in_range_and_stop_at_the_fixpoint() {
        let chain = pairs(&[("a", "b"), ("b", "c"), ("c", "d")]);
        assert_eq!(walk_levels(&chain, 2, 2), pairs(&[("a", "c"), ("b", "d")]).into_iter().collect());
        assert_eq!(walk_levels(&chain, 1, 3).len(), 6);
        assert!(walk_levels(&chain, 4, 9).is_empty());
        // A 2-cycle: odd lengths give a↔b, even lengths give a→a, b→b; a
        // huge bound ends after one period.
        let cycle = pairs(&[("a", "b"), ("b", "a")]);
        assert_eq!(walk_levels(&cycle, 1, u32::MAX).len(), 4);
        assert_eq!(walk_levels(&cycle, 2, 2), pairs(&[("a", "a"), ("b", "b")]).into_iter().collect());
        // Past `min` only: min = 5 on the 2-cycle still sees both parities.
        assert_eq!(walk_levels(&cycle, 5, u32::MAX).len(), 4);
        assert_eq!(walk_levels(&cycle, 5, 5), pairs(&[("a", "b"), ("b", "a")]).into_iter().collect());
        // A 3-cycle with min 4: lengths 4, 5, 6 give all three shifts.
        let tri = pairs(&[("a", "b"), ("b", "c"), ("c", "a")]);
        assert_eq!(walk_levels(&tri, 4, 1_000_000).len(), 9);
        assert_eq!(walk_levels(&tri, 4, 4).len(), 3);
    }
}
