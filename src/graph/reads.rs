//! Read queries at a branch head or at a commit (time travel).

use super::{Graph, ReadTarget};
use crate::engine::lang::query::ir::BodyIr;
use crate::engine::lang::query::{parse_queries, typecheck};
use crate::engine::query::{DeclaredIndexes, Insight, QueryContext};
use crate::engine::read_limits::ReadLimits;
use crate::protocol::{OmniError, Result};

impl Graph {
    /// Run the read query `name` (or the file's only query) at `target`
    /// under the default [`ReadLimits`].
    pub async fn query(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
    ) -> Result<crate::engine::query::QueryResult> {
        self.query_limited(source, name, params, target, ReadLimits::default()).await
    }

    /// [`Graph::query`] under `limits`: past any of them the query stops with
    /// [`OmniError::ResourceLimitExceeded`] naming the limit.
    pub async fn query_limited(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
        limits: ReadLimits,
    ) -> Result<crate::engine::query::QueryResult> {
        self.query_insight(source, name, params, target, limits, Insight::Off).await
    }

    /// [`Graph::query_limited`] as an EXPLAIN (the plan, no rows) or a
    /// PROFILE (the rows, and the plan with each operator's figures), as
    /// `insight` asks: the result's `plan`.
    pub async fn query_insight(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
        limits: ReadLimits,
        insight: Insight,
    ) -> Result<crate::engine::query::QueryResult> {
        let at = self.read_at(target.as_ref_text()).await?;
        let (view, commit_id) = (at.view, at.commit_id);
        let schema = self.schema_at(&view, &commit_id).await?;
        let ir = compile_one(&schema.catalog, source, name)?;
        let BodyIr::Read(read) = &ir.body else {
            return Err(OmniError::BadRequest(format!("`{}` is a mutation; use `mutate`", ir.name)));
        };
        let params = crate::engine::query::bind_params(&ir.params, &params)?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let (root, commit_id) = (self.root(), commit_id.as_str());
        let declared_indexes = if insight == Insight::Off { Default::default() } else { declared(&schema.catalog) };
        let cx =
            QueryContext { root, view: &view, commit_id, params: &params, now_ms, limits, insight, declared_indexes };
        crate::engine::query::execute(cx, read).await
    }

    /// [`Graph::query`] as the JSON envelope `{columns, rows, row_count, graph_commit_id}`.
    pub async fn query_json(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
    ) -> Result<serde_json::Value> {
        let r = self.query(source, name, params, target).await?;
        let rows = result_rows(&r);
        Ok(serde_json::json!({
            "columns": r.columns, "row_count": rows.len(), "rows": rows, "graph_commit_id": r.graph_commit_id,
        }))
    }
}

/// The BTree indexes every table of `catalog` declares, by table key.
fn declared(catalog: &crate::engine::lang::catalog::Catalog) -> DeclaredIndexes {
    use crate::engine::lang::catalog::indexes::{IndexKind, desired};
    catalog
        .types()
        .map(|def| {
            let btrees = desired(def).into_iter().filter(|s| s.kind == IndexKind::Btree).map(|s| s.name());
            (crate::engine::layout::key_of(def), btrees.collect())
        })
        .collect()
}

/// Every row of a result as a JSON object keyed by column name (keys sorted;
/// [`super::wire::ordered_rows`] keeps the projection order).
pub fn result_rows(r: &crate::engine::query::QueryResult) -> Vec<serde_json::Map<String, serde_json::Value>> {
    super::wire::ordered_rows(r).into_iter().map(|row| row.0.into_iter().collect()).collect()
}

/// Parse and typecheck `source`, picking query `name` (or the only one).
pub(super) fn compile_one(
    catalog: &crate::engine::lang::catalog::Catalog,
    source: &str,
    name: Option<&str>,
) -> Result<crate::engine::lang::query::ir::QueryIr> {
    let compile = |diag| OmniError::Compile { file: "<query>".into(), diag };
    let queries = parse_queries(source).map_err(compile)?;
    let query = match name {
        Some(n) => queries.iter().find(|q| q.name == n).ok_or_else(|| OmniError::NotFound(format!("query `{n}`")))?,
        None if queries.len() == 1 => &queries[0],
        None => return Err(OmniError::BadRequest("the source holds several queries: pick one by name".into())),
    };
    typecheck::check_query(catalog, query).map_err(|diags| match diags.into_iter().next() {
        Some(d) => compile(d),
        None => OmniError::Internal("the typechecker refused a query without a diagnostic".into()),
    })
}
