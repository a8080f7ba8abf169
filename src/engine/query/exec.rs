//! Building and running the DataFusion plan of one read query.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, FixedSizeListArray, Float32Array, Float64Array, RecordBatch};
use arrow_schema::DataType;
use datafusion::common::JoinType;
use datafusion::dataframe::DataFrame;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::session_state::{SessionState, SessionStateBuilder};
use datafusion::functions::string::expr_fn as string_fn;
use datafusion::functions_aggregate::expr_fn as agg;
use datafusion::functions_nested::expr_fn::array_has;
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, SortExpr, Volatility, create_udf};
use datafusion::physical_plan::{ExecutionPlan, execute_stream};
use datafusion::prelude::{Expr, SessionConfig, SessionContext, ident, lit};
use futures::StreamExt;
use lance::datafusion::LanceTableProvider;
use serde_json::Value as Json;

use super::params::ParamValues;
use super::plan_tree::{DeclaredIndexes, Insight, PlanNode, Recorder};
use crate::engine::committed::open_pinned_for_read;
use crate::engine::lang::catalog::arrow::scalar_data_type;
use crate::engine::lang::query::ast::AggFunc;
use crate::engine::lang::query::ir::{
    CmpOp, Direction, FilterIr, MatchIr, NearestIr, Operand, OrderKey, ProjExpr, ReadIr, Type, VarIr, VarKind,
};
use crate::engine::manifest::{ManifestView, TableEntry};
use crate::engine::read_limits::{Meter, QUERY_MEMORY_BYTES, ReadLimits};
use crate::engine::storage::{Root, table};
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
    /// The plan, when the run was an EXPLAIN or a PROFILE.
    pub plan: Option<PlanNode>,
    /// Whether the run was an EXPLAIN (the plan only: no rows were read).
    pub explained: bool,
}

pub(super) type DfResult<T> = std::result::Result<T, datafusion::error::DataFusionError>;

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
    pub(super) meter: Arc<Meter>,
    /// The plan's steps, when EXPLAIN or PROFILE asks for them.
    pub(super) recorder: Recorder,
}

/// Where and how one query runs: the snapshot, its commit, the bound
/// parameters, the clock and the limits.
pub struct QueryContext<'a> {
    /// The graph root.
    pub root: &'a Root,
    /// The manifest snapshot read.
    pub view: &'a ManifestView,
    /// The graph commit the snapshot belongs to.
    pub commit_id: &'a str,
    /// Bound parameter values.
    pub params: &'a ParamValues,
    /// `now()` in milliseconds since the epoch, fixed for the query.
    pub now_ms: i64,
    /// The limits the query runs under.
    pub limits: ReadLimits,
    /// Whether to report the plan (EXPLAIN) or run and profile it (PROFILE).
    pub insight: Insight,
    /// The indexes each table declares, for the plan's flags (empty when
    /// `insight` is off).
    pub declared_indexes: DeclaredIndexes,
}

/// Execute `ir` on the snapshot `cx.view`, stopped with
/// [`OmniError::ResourceLimitExceeded`] past any of `cx.limits`.
pub async fn execute(cx: QueryContext<'_>, ir: &ReadIr) -> Result<QueryResult> {
    let meter = Arc::new(cx.limits.meter());
    let run = run(&cx, ir, meter.clone());
    match cx.limits.time_budget() {
        Some(budget) => tokio::time::timeout(budget, run).await.map_err(|_| meter.time_exceeded())?,
        None => run.await,
    }
}

async fn run(cx: &QueryContext<'_>, ir: &ReadIr, meter: Arc<Meter>) -> Result<QueryResult> {
    let ctx = session(cx.limits)?;
    let (root, view, params, now_ms) = (cx.root, cx.view, cx.params, cx.now_ms);
    let recorder = Recorder::new(cx.insight, cx.declared_indexes.clone());
    let p = Planner { ctx, root, view, params, now_ms, fresh: Default::default(), meter, recorder };
    let columns: Vec<String> = ir.projections.iter().map(|c| c.column.clone()).collect();
    let graph_commit_id = cx.commit_id.to_string();
    let explained = cx.insight == Insight::Explain;
    if let Some(batches) = p.whole_type_count(ir, &columns).await? {
        let plan = p.recorder.on().then(|| p.recorder.finish(None));
        return Ok(QueryResult { columns, batches, graph_commit_id, plan, explained });
    }
    let df = p.match_frame(&ir.pattern, &[]).await?;
    let df = p.finish(df, ir).await?;
    let (batches, plan) = match cx.insight {
        Insight::Off => (p.collect(df).await?, None),
        Insight::Explain => {
            let plan = df.create_physical_plan().await.map_err(|e| p.exec_err(e))?;
            (Vec::new(), Some(p.recorder.describe(&plan).await?))
        }
        Insight::Profile => {
            let (batches, plan) = p.run_plan(df).await?;
            (batches, Some(p.recorder.describe(&plan).await?))
        }
    };
    let plan = plan.map(|r| p.recorder.finish(Some(r)));
    Ok(QueryResult { columns, batches, graph_commit_id, plan, explained })
}

/// A DataFusion session whose memory pool holds at most the memory limit.
/// Sessions are cloned from one built once: building a state registers
/// every built-in function, a fixed cost a point lookup would pay each time.
fn session(limits: ReadLimits) -> Result<SessionContext> {
    static BASE: std::sync::OnceLock<SessionState> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| SessionContext::new_with_config(SessionConfig::new()).state()).clone();
    let mut builder = SessionStateBuilder::new_from_existing(base);
    if let Some(bytes) = limits.memory_bytes {
        let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        builder = builder
            .with_runtime_env(RuntimeEnvBuilder::new().with_memory_limit(bytes, 1.0).build_arc().map_err(df_err)?);
    }
    Ok(SessionContext::new_with_state(builder.build()))
}

impl Planner<'_> {
    pub(super) fn fresh(&self, stem: &str) -> String {
        let n = self.fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        format!("__{stem}{n}")
    }

    /// The snapshot's pin of `table_key`.
    pub(super) fn entry(&self, table_key: &str) -> Result<&TableEntry> {
        self.view
            .state
            .tables
            .get(table_key)
            .ok_or_else(|| OmniError::NotFound(format!("{table_key} in this snapshot")))
    }

    /// `count($n)` of every node of one type, unfiltered (`match { $n: T }
    /// return { count($n) }`): Lance's row count at the pin, read from
    /// fragment metadata (physical rows less deletions) instead of a scan
    /// of the table's ids. Readers that poll a growing table's size would
    /// otherwise pay O(rows) each time. `None` for any other query.
    async fn whole_type_count(&self, ir: &ReadIr, columns: &[String]) -> Result<Option<Vec<RecordBatch>>> {
        let m = &ir.pattern;
        let [var] = m.vars.as_slice() else { return Ok(None) };
        let plain = m.traversals.is_empty() && m.filters.is_empty() && m.searches.is_empty() && m.not_blocks.is_empty();
        let counts_var = |e: &ProjExpr| {
            matches!(e, ProjExpr::Agg { func: AggFunc::Count, arg }
                if matches!(arg.as_ref(), ProjExpr::Node { var: v } if *v == var.name))
        };
        let only_counts = !ir.projections.is_empty() && ir.projections.iter().all(|p| counts_var(&p.expr));
        if var.kind != VarKind::Node || !plain || !only_counts || !ir.group_by.is_empty() || ir.limit == Some(0) {
            return Ok(None);
        }
        let mut step = PlanNode::step("count_rows", format!("table={} from fragment metadata", var.table_key));
        step.est_rows = Some(self.entry(&var.table_key)?.row_count);
        if self.recorder.insight() == Insight::Explain {
            self.recorder.push(step);
            return Ok(Some(Vec::new()));
        }
        let ds = self.pinned(&var.table_key).await?;
        let n = ds.count_rows(None).await.map_err(|e| OmniError::storage(format!("counting {}", var.type_name), e))?;
        let n =
            i64::try_from(n).map_err(|_| OmniError::Internal(format!("{} rows overflow a count", var.type_name)))?;
        let fields: Vec<arrow_schema::Field> =
            columns.iter().map(|c| arrow_schema::Field::new(c, DataType::Int64, false)).collect();
        let arrays: Vec<ArrayRef> =
            columns.iter().map(|_| Arc::new(arrow_array::Int64Array::from(vec![n])) as ArrayRef).collect();
        let batch = RecordBatch::try_new(Arc::new(arrow_schema::Schema::new(fields)), arrays)
            .map_err(|e| OmniError::Internal(format!("count of {}: {e}", var.type_name)))?;
        step.rows = self.recorder.profiling().then_some(1);
        self.recorder.push(step);
        Ok(Some(vec![batch]))
    }

    /// The table of `table_key` opened at the snapshot's pin.
    pub(super) async fn pinned(&self, table_key: &str) -> Result<Arc<lance::Dataset>> {
        let entry = self.entry(table_key)?;
        self.recorder.table(&entry.location, table_key);
        open_pinned_for_read(self.root, entry).await
    }

    /// A scan of `table_key` at its pin with every column renamed `{prefix}.{col}`.
    pub(super) async fn table_frame(&self, table_key: &str, prefix: &str) -> Result<DataFrame> {
        let ds = self.pinned(table_key).await?;
        let provider = LanceTableProvider::new(ds, false, false);
        let df = self.ctx.read_table(Arc::new(provider)).map_err(df_err)?;
        let cols: Vec<Expr> =
            df.schema().fields().iter().map(|f| ident(f.name()).alias(format!("{prefix}.{}", f.name()))).collect();
        df.select(cols).map_err(df_err)
    }

    pub(super) fn var_frame<'v>(&'v self, var: &'v VarIr) -> impl Future<Output = Result<DataFrame>> + 'v {
        self.table_frame(&var.table_key, &var.name)
    }

    /// Run `df` into memory (its rows charged against the row cap) and
    /// return it as a frame again, with the distinct ids `var` binds in it.
    pub(super) async fn materialize(&self, df: DataFrame, var: &str) -> Result<(DataFrame, Vec<String>)> {
        let (frame, batches) = self.buffered(df, &format!("${var}")).await?;
        let col = format!("{var}.id");
        let mut ids: BTreeSet<String> = BTreeSet::new();
        for b in &batches {
            let c = b
                .column_by_name(&col)
                .and_then(|c| c.as_string_opt::<i32>())
                .ok_or_else(|| OmniError::Internal(format!("the binding frame has no string column `{col}`")))?;
            ids.extend(c.iter().flatten().map(str::to_string));
        }
        Ok((frame, ids.into_iter().collect()))
    }

    /// Run `df` into memory, its rows charged against the row cap as they
    /// stream, and return it as a frame again, with the batches (a
    /// `materialize` step of the plan, `what` saying what it holds).
    async fn buffered(&self, df: DataFrame, what: &str) -> Result<(DataFrame, Vec<RecordBatch>)> {
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = self.collect_step(df, "materialize", what).await?;
        let table = datafusion::datasource::MemTable::try_new(schema, vec![batches.clone()]).map_err(df_err)?;
        Ok((self.ctx.read_table(Arc::new(table)).map_err(df_err)?, batches))
    }

    /// [`Self::collect`], recorded as the plan's step `op` (`detail`) with
    /// the rows it produced when profiling.
    pub(super) async fn collect_step(&self, df: DataFrame, op: &str, detail: &str) -> Result<Vec<RecordBatch>> {
        if !self.recorder.on() {
            return self.collect(df).await;
        }
        let started = std::time::Instant::now();
        let (batches, plan) = self.run_plan(df).await?;
        let mut step = PlanNode::step(op, detail.to_string()).with_children(vec![self.recorder.describe(&plan).await?]);
        if self.recorder.profiling() {
            step.rows = Some(batches.iter().map(|b| b.num_rows() as u64).sum());
            step.time_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        }
        self.recorder.push(step);
        Ok(batches)
    }

    /// Execute `df` to completion under the meter: the rows it yields are
    /// charged against the row cap as they stream, and a refused memory
    /// reservation is the memory limit, not an internal error.
    pub(super) async fn collect(&self, df: DataFrame) -> Result<Vec<RecordBatch>> {
        Ok(self.run_plan(df).await?.0)
    }

    /// [`Self::collect`], with the physical plan it ran (its operators hold
    /// their figures).
    async fn run_plan(&self, df: DataFrame) -> Result<(Vec<RecordBatch>, Arc<dyn ExecutionPlan>)> {
        let task = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await.map_err(|e| self.exec_err(e))?;
        let mut stream = execute_stream(plan.clone(), task).map_err(|e| self.exec_err(e))?;
        let (mut rows, mut out) = (0u64, Vec::new());
        while let Some(batch) = stream.next().await {
            let batch = batch.map_err(|e| self.exec_err(e))?;
            rows += batch.num_rows() as u64;
            self.meter.check_rows(rows)?;
            self.meter.check_time()?;
            out.push(batch);
        }
        Ok((out, plan))
    }

    fn exec_err(&self, e: datafusion::error::DataFusionError) -> OmniError {
        match (e.find_root(), self.meter.limits().memory_bytes) {
            // The pool refused a reservation: it is at its limit.
            (datafusion::error::DataFusionError::ResourcesExhausted(_), Some(limit)) => {
                OmniError::ResourceLimitExceeded { resource: QUERY_MEMORY_BYTES.into(), limit, actual: limit }
            }
            _ => df_err(e),
        }
    }

    /// The binding frame of a match pattern. A filter applies as soon as
    /// every variable it reads is bound, so a traversal walks only from the
    /// sources that survive it.
    async fn match_frame(&self, m: &MatchIr, scope: &[VarIr]) -> Result<DataFrame> {
        let mut bound: BTreeSet<String> = BTreeSet::new();
        let mut df: Option<DataFrame> = None;
        let mut pending: Vec<&FilterIr> = m.filters.iter().collect();
        let var = |name: &str| {
            m.vars
                .iter()
                .find(|v| v.name == name)
                .ok_or_else(|| OmniError::Internal(format!("unbound variable {name}")))
        };
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
                df = Some(self.cross(df, self.var_frame(var(&t.src)?).await?)?);
                bound.insert(t.src.clone());
            }
            let current = df.take().ok_or_else(|| OmniError::Internal("empty binding frame".into()))?;
            let current = self.apply_ready(current, &mut pending, &bound, &m.vars)?;
            let dst = if bound.contains(&t.dst) { None } else { Some(var(&t.dst)?) };
            let hetero = dst.is_some_and(|d| var(&t.src).is_ok_and(|s| s.table_key != d.table_key));
            df = Some(self.traverse(current, &t, dst, hetero).await?);
            bound.insert(t.dst.clone());
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
        for f in pending {
            df = df.filter(self.keyed_filter_expr(f, &m.vars)?).map_err(df_err)?;
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

    /// Apply (and take out of `pending`) every filter whose variables are all bound.
    fn apply_ready(
        &self,
        mut df: DataFrame,
        pending: &mut Vec<&FilterIr>,
        bound: &BTreeSet<String>,
        vars: &[VarIr],
    ) -> Result<DataFrame> {
        let ready = |f: &FilterIr| {
            [&f.left, &f.right].iter().all(|op| match op {
                Operand::Prop { var, .. } => bound.contains(var),
                _ => true,
            })
        };
        let mut keep = Vec::new();
        for f in pending.drain(..) {
            if ready(f) {
                df = df.filter(self.keyed_filter_expr(f, vars)?).map_err(df_err)?;
            } else {
                keep.push(f);
            }
        }
        *pending = keep;
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
            let any =
                self.collect_step(sub.limit(0, Some(1)).map_err(df_err)?, "materialize", "not { } has a match").await?;
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

    /// [`Self::filter_expr`], plus `id = v` when `f` is an equality on a
    /// variable's id key: the same rows, and Lance answers it from the
    /// BTree on `id`.
    fn keyed_filter_expr(&self, f: &FilterIr, vars: &[VarIr]) -> Result<Expr> {
        let e = self.filter_expr(f)?;
        let (prop, value) = match (&f.left, &f.right) {
            (p @ Operand::Prop { .. }, v) | (v, p @ Operand::Prop { .. }) if !matches!(v, Operand::Prop { .. }) => {
                (p, v)
            }
            _ => return Ok(e),
        };
        let Operand::Prop { var, prop, .. } = prop else { return Ok(e) };
        let keyed = vars.iter().any(|v| &v.name == var && v.id_key.as_ref() == Some(prop));
        if f.op != CmpOp::Eq || !keyed {
            return Ok(e);
        }
        Ok(e.and(var_col(var, "id").eq(self.operand_expr(value, Some(&DataType::Utf8))?)))
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
        let fused = ir.order.iter().any(|k| matches!(k.key, OrderKey::Rrf(_)));
        if let (Some(n), Some(limit), false) = (&nearest, ir.limit, fused) {
            df = self.nearest_candidates(df, n, &ir.pattern, limit as usize).await?;
        }
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
            // A node without a vector has no distance: never nearer than one with.
            let nulls_first = !k.descending && !matches!(k.key, OrderKey::Nearest(_));
            sort.push(e.sort(!k.descending, nulls_first));
        }
        // Ties break by the bound ids, so results are deterministic.
        let ids: Vec<String> =
            df.schema().fields().iter().map(|f| f.name().clone()).filter(|n| n.ends_with(".id")).collect();
        sort.extend(ids.iter().map(|n| ident(n).sort(true, true)));
        if !sort.is_empty() {
            // Without a limit the sort holds the whole frame: charge its rows
            // to the cap as they stream, not after the sort has buffered them
            // (a cross product would otherwise run into the time budget first).
            if ir.limit.is_none() && self.meter.limits().max_rows.is_some() {
                df = self.buffered(df, "rows to sort").await?.0;
            }
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

    /// The query vector of `nearest`.
    fn query_vector(&self, n: &NearestIr) -> Result<Vec<f64>> {
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
        Ok(q)
    }

    /// Narrow the frame to the nodes the vector index ranks nearest, when
    /// the frame holds every node of the table (the index ranks the whole
    /// table; a filtered frame is already small and ranked by brute force).
    /// Twice the limit plus slack are kept, so ties at the boundary are
    /// still broken by id over the exact distances computed next.
    async fn nearest_candidates(&self, df: DataFrame, n: &NearestIr, m: &MatchIr, limit: usize) -> Result<DataFrame> {
        let Some(v) = m.vars.iter().find(|v| v.name == n.var) else { return Ok(df) };
        let rows = self.entry(&v.table_key)?.row_count;
        let q = self.query_vector(n)?;
        // Without an index there is nothing to narrow by: keep the frame
        // streaming rather than materialise it for nothing.
        let ds = self.pinned(&v.table_key).await?;
        if !table::index_names(&ds).await?.contains(&format!("{}_vector", n.prop)) {
            return Ok(df);
        }
        let (df, ids) = self.materialize(df, &n.var).await?;
        if (ids.len() as u64) < rows {
            return Ok(df);
        }
        let q: Vec<f32> = q.iter().map(|x| *x as f32).collect();
        let Some(best) = table::nearest_ids(&ds, &n.prop, &q, limit.saturating_mul(2) + 16).await? else {
            return Ok(df);
        };
        let best: Vec<Expr> = best.into_iter().map(lit).collect();
        df.filter(var_col(&n.var, "id").in_list(best, false)).map_err(df_err)
    }

    /// Cosine distance to the query vector, computed per row.
    pub(super) fn cosine_udf(&self, n: &NearestIr, df: &DataFrame) -> Result<ScalarUDF> {
        let q = self.query_vector(n)?;
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
pub(super) fn drop_prefixed(df: DataFrame, prefix: &str) -> Result<DataFrame> {
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
