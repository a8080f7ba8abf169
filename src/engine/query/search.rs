//! Text search and ranked ordering in a read query, through each table's
//! inverted index at the snapshot's pinned version.
//!
//! - `search(f, q)`: rows with any token of `q` in `f`; `fuzzy(f, q, n?)`:
//!   any token within `n` edits (by token length when absent);
//!   `match_text(f, q)`: `q`'s tokens as a phrase. Each is a semi-join of the
//!   binding frame with the matching ids.
//! - `order { bm25(f, q) }`: the matching rows, best BM25 score first
//!   (the typechecker makes score keys descending unless written `asc`).
//! - `order { rrf(r1, r2, k?) }`: reciprocal rank fusion, `Σ 1 / (k + rank)`
//!   over both rankings (rank 1 = best; `k` = 60 unless given), best first;
//!   a row missing from one ranking gets only the other's term.
//!
//! A search on a column without an inverted index is refused (a typed
//! error naming `omnigraph index ensure`), never answered by a guess.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{Array, Float64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};
use datafusion::common::JoinType;
use datafusion::dataframe::DataFrame;
use datafusion::prelude::{Expr, ident};
use serde_json::Value as Json;

use super::exec::{Planner, df_err, var_col};
use super::plan_tree::PlanNode;
use crate::engine::lang::query::ir::{Bm25Ir, MatchIr, OrderKey, RankIr, TextSearchIr, TextSearchKind};
use crate::engine::storage::table::{self, TextQuery};
use crate::protocol::{OmniError, Result};

/// Column of the ranked-order score (higher = better).
pub(super) const RANK_COL: &str = "__rank";

/// The `k` of reciprocal rank fusion when the query gives none.
const RRF_DEFAULT_K: f64 = 60.0;

impl Planner<'_> {
    /// Keep only the rows whose `s.var` matches the text search `s`.
    pub(super) async fn text_filter(&self, df: DataFrame, m: &MatchIr, s: &TextSearchIr) -> Result<DataFrame> {
        let q = self.text_operand(&s.query)?;
        let query = match &s.kind {
            TextSearchKind::Search => TextQuery::Match(q),
            TextSearchKind::MatchText => TextQuery::Phrase(q),
            TextSearchKind::Fuzzy { max_edits } => {
                let edits = match max_edits {
                    None => None,
                    Some(op) => Some(
                        self.operand_json(op)?
                            .as_u64()
                            .and_then(|n| u32::try_from(n).ok())
                            .ok_or_else(|| OmniError::BadRequest("fuzzy max_edits must be a small integer".into()))?,
                    ),
                };
                TextQuery::Fuzzy(q, edits)
            }
        };
        let scores = self.scores(table_of(m, &s.var)?, &s.var, &s.prop, &query).await?;
        let tag = self.fresh("search");
        let ids = self.score_frame(&tag, scores.into_iter().map(|(id, _)| (id, 0.0)))?;
        let on = [var_col(&s.var, "id").eq(ident(format!("{tag}.id")))];
        df.join_on(ids, JoinType::LeftSemi, on).map_err(df_err)
    }

    /// Add [`RANK_COL`] for a `bm25` or `rrf` order key (a `bm25` keeps only
    /// the matching rows).
    pub(super) async fn with_rank(&self, df: DataFrame, key: &OrderKey, m: &MatchIr) -> Result<DataFrame> {
        let (var, ranks) = match key {
            OrderKey::Bm25(b) => (b.var.clone(), self.bm25(m, b).await?),
            OrderKey::Rrf(r) => {
                let k = match &r.k {
                    None => RRF_DEFAULT_K,
                    Some(op) => self
                        .operand_json(op)?
                        .as_f64()
                        .filter(|k| *k > 0.0)
                        .ok_or_else(|| OmniError::BadRequest("rrf k must be a positive integer".into()))?,
                };
                let (var, first) = self.ranking(&df, m, &r.first).await?;
                let (_, second) = self.ranking(&df, m, &r.second).await?;
                let mut fused: HashMap<String, f64> = HashMap::new();
                for ranking in [first, second] {
                    for (rank, (id, _)) in ranking.into_iter().enumerate() {
                        *fused.entry(id).or_default() += 1.0 / (k + rank as f64 + 1.0);
                    }
                }
                (var, fused.into_iter().collect())
            }
            _ => return Ok(df),
        };
        let tag = self.fresh("rank");
        let frame = self.score_frame(&tag, ranks)?;
        let join = if matches!(key, OrderKey::Bm25(_)) { JoinType::Inner } else { JoinType::Left };
        let joined = df.join_on(frame, join, [var_col(&var, "id").eq(ident(format!("{tag}.id")))]).map_err(df_err)?;
        let cols: Vec<Expr> =
            joined
                .schema()
                .fields()
                .iter()
                .filter(|f| f.name() != &format!("{tag}.id"))
                .map(|f| {
                    if f.name() == &format!("{tag}.score") { ident(f.name()).alias(RANK_COL) } else { ident(f.name()) }
                })
                .collect();
        joined.select(cols).map_err(df_err)
    }

    /// One ranking of `rrf`, best first: `(variable, [(id, score)])`.
    async fn ranking(&self, df: &DataFrame, m: &MatchIr, r: &RankIr) -> Result<(String, Vec<(String, f64)>)> {
        match r {
            RankIr::Bm25(b) => {
                let mut scores = self.bm25(m, b).await?;
                scores.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                Ok((b.var.clone(), scores))
            }
            RankIr::Nearest(n) => {
                let udf = self.cosine_udf(n, df)?;
                let id = format!("{}.id", n.var);
                let dist = df
                    .clone()
                    .select(vec![ident(&id), udf.call(vec![var_col(&n.var, &n.prop)]).alias("__d")])
                    .map_err(df_err)?;
                let batches = self.collect_step(dist, "materialize", "nearest distances").await?;
                let mut out: Vec<(String, f64)> = Vec::new();
                for b in &batches {
                    let ids = b.column(0).as_any().downcast_ref::<StringArray>();
                    let ds = b.column(1).as_any().downcast_ref::<Float64Array>();
                    let (Some(ids), Some(ds)) = (ids, ds) else {
                        return Err(OmniError::Internal("nearest ranking: unexpected column types".into()));
                    };
                    out.extend(
                        (0..b.num_rows()).filter(|i| !ds.is_null(*i)).map(|i| (ids.value(i).into(), ds.value(i))),
                    );
                }
                out.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
                out.dedup_by(|a, b| a.0 == b.0);
                Ok((n.var.clone(), out))
            }
        }
    }

    /// BM25 scores of `b.var`'s table for `b.query` on `b.prop`.
    async fn bm25(&self, m: &MatchIr, b: &Bm25Ir) -> Result<Vec<(String, f64)>> {
        let q = self.text_operand(&b.query)?;
        let scores = self.scores(table_of(m, &b.var)?, &b.var, &b.prop, &TextQuery::Match(q)).await?;
        Ok(scores.into_iter().map(|(id, s)| (id, f64::from(s))).collect())
    }

    async fn scores(&self, table_key: &str, var: &str, prop: &str, q: &TextQuery) -> Result<Vec<(String, f32)>> {
        let started = std::time::Instant::now();
        let ds = self.pinned(table_key).await?;
        let scores = table::full_text_scores(&ds, prop, q).await?.ok_or_else(|| {
            OmniError::BadRequest(format!(
                "full-text search on `{var}.{prop}` requires a full-text index; none exists yet (run \
                 `omnigraph index ensure` or `optimize` to build indexes)"
            ))
        })?;
        if self.recorder.on() {
            let mut step = PlanNode::step("text_search", format!("table={table_key} {var}.{prop} {q:?}"));
            let index = format!("{prop}_inverted");
            let coverage = self.recorder.coverage(&ds).await?;
            if let Some(c) = coverage.iter().find(|c| c.index == index) {
                step.served_by(c);
            }
            if self.recorder.profiling() {
                step.rows = Some(scores.len() as u64);
                step.time_ms = Some(started.elapsed().as_secs_f64() * 1e3);
            }
            self.recorder.push(step);
        }
        Ok(scores)
    }

    fn text_operand(&self, op: &crate::engine::lang::query::ir::Operand) -> Result<String> {
        match self.operand_json(op)? {
            Json::String(s) => Ok(s),
            other => Err(OmniError::BadRequest(format!("a text search needs a string, got {other}"))),
        }
    }

    /// A two-column frame `{tag}.id`, `{tag}.score`.
    fn score_frame(&self, tag: &str, rows: impl IntoIterator<Item = (String, f64)>) -> Result<DataFrame> {
        let (ids, scores): (Vec<String>, Vec<f64>) = rows.into_iter().unzip();
        let schema = Arc::new(Schema::new(vec![
            Field::new(format!("{tag}.id"), DataType::Utf8, false),
            Field::new(format!("{tag}.score"), DataType::Float64, false),
        ]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(StringArray::from(ids)), Arc::new(Float64Array::from(scores))])
                .map_err(|e| OmniError::Internal(format!("building a score frame: {e}")))?;
        self.ctx.read_batch(batch).map_err(df_err)
    }
}

/// The table key of variable `var` of `m`.
fn table_of<'m>(m: &'m MatchIr, var: &str) -> Result<&'m str> {
    m.vars
        .iter()
        .find(|v| v.name == var)
        .map(|v| v.table_key.as_str())
        .ok_or_else(|| OmniError::Internal(format!("text search on unbound variable {var}")))
}
