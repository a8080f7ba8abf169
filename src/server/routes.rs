//! Routes, request bodies and the error mapping of the daemon.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppState, gate, mcp_route, middleware};
use crate::engine::conflict_page::ConflictPage;
use crate::engine::diff::DiffFilter;
use crate::engine::feed::FeedStart;
use crate::engine::loader::LoadMode;
use crate::engine::manifest::STAMP;
use crate::engine::policy::{Action, Request};
use crate::engine::query::Insight;
use crate::engine::read_limits::ReadLimits;
use crate::engine::storage::durability;
use crate::graph::{Export, FeedFrom, FeedRequest, Graph, MergeOptions, ReadTarget, WriteOptions, wire};
use crate::protocol::OmniError;
use crate::protocol::error::status_code;

/// Default request body limit.
const BODY_LIMIT: usize = 1024 * 1024;
/// Body limit of the load routes.
const LOAD_BODY_LIMIT: usize = 32 * 1024 * 1024;
/// Header carrying the caller's head precondition.
const IF_COMMIT_HEADER: &str = "omnigraph-if-graph-commit";

/// The served routes (method, path, summary): the source of `/openapi.json`.
const ROUTES: &[(&str, &str, &str)] = &[
    ("get", "/healthz", "Liveness probe; `?verbose=true` adds each graph's actor counters"),
    ("get", "/openapi.json", "This document"),
    ("get", "/graphs", "List served graphs"),
    ("get", "/graphs/{id}/snapshot", "Snapshot of a branch head, or of any ref (`branch`)"),
    ("post", "/graphs/{id}/query", "Run a read query"),
    ("post", "/graphs/{id}/mutate", "Apply a mutation"),
    ("post", "/graphs/{id}/mutate/if-graph-commit", "Apply a mutation if the head is the given commit"),
    ("post", "/graphs/{id}/load", "Load JSONL from a JSON envelope"),
    ("post", "/graphs/{id}/load/ndjson", "Load an NDJSON body"),
    ("get", "/graphs/{id}/branches", "List branches"),
    ("post", "/graphs/{id}/branches", "Create a branch"),
    (
        "delete",
        "/graphs/{id}/branches/{branch}",
        "Delete a branch: hidden, restorable; `?purge=true` removes it for good",
    ),
    ("post", "/graphs/{id}/branches/{branch}/restore", "Restore a deleted branch at its last head or `at` a commit"),
    ("post", "/graphs/{id}/branches/merge", "Merge a branch into another (default main)"),
    ("post", "/graphs/{id}/optimize", "Compact a branch's tables and manifest (one maintenance commit)"),
    (
        "post",
        "/graphs/{id}/indexes/ensure",
        "Build the indexes a branch lacks and fold unindexed rows into the rest (one commit)",
    ),
    ("get", "/graphs/{id}/indexes", "How much of its table each index of a branch covers"),
    ("post", "/graphs/{id}/cleanup", "Remove versions no retained commit reads (dry run unless confirm)"),
    ("get", "/graphs/{id}/commits", "List commits, newest first (`branch` takes any ref)"),
    ("get", "/graphs/{id}/commits/{commit}", "One commit (any ref: a commit id, a tag, `main~2`, …)"),
    ("get", "/graphs/{id}/diff", "What changed between two refs (`from`, `to`), paged; `stat=true` counts per type"),
    ("get", "/graphs/{id}/commits/{commit}/changes", "The entities a commit changed against its first parent, paged"),
    ("post", "/graphs/{id}/commits/{commit}/revert", "Undo a commit's changes as one new commit on a branch"),
    (
        "post",
        "/graphs/{id}/commits/{commit}/cherry-pick",
        "Apply a commit's changes again as one new commit on a branch (`onto`)",
    ),
    ("get", "/graphs/{id}/changes", "Poll a branch's change feed (`cursor`, `start`, `page_token`; `wait` long-polls)"),
    (
        "post",
        "/graphs/{id}/changes/baseline",
        "An exact NDJSON snapshot, then the cursor that resumes the feed after it",
    ),
    ("get", "/graphs/{id}/history/{type}/{entity}", "The commits on a branch that changed one entity, newest first"),
    ("get", "/graphs/{id}/blame/{type}/{entity}", "For each property of an entity, the commit that last set it"),
    ("get", "/graphs/{id}/tags", "List tags"),
    ("post", "/graphs/{id}/tags", "Create a tag on a ref (default main's head); tags are immutable"),
    ("delete", "/graphs/{id}/tags/{name}", "Delete a tag (names may contain `/`)"),
    ("get", "/graphs/{id}/schema", "The accepted schema"),
    ("post", "/graphs/{id}/schema/apply", "Apply a schema change as one commit (`dry_run` only plans it)"),
    ("get", "/graphs/{id}/schema/diff", "The steps from the schema at one ref to the schema at another (`from`, `to`)"),
    ("get", "/graphs/{id}/recovery", "Pending recovery sidecars and the audit log"),
    ("get", "/graphs/{id}/healthz", "Liveness of one graph"),
    ("post", "/graphs/{id}/export", "Stream a branch head or a commit as load-ready NDJSON"),
    ("get", "/graphs/{id}/queries", "The stored queries, each with its typed parameters"),
    ("post", "/graphs/{id}/queries/{name}", "Run a stored query by name (`{params?, branch?, snapshot?}`)"),
    ("post", "/graphs/{id}/read", "Deprecated alias of /query"),
    ("post", "/graphs/{id}/change", "Deprecated alias of /mutate"),
    ("post", "/graphs/{id}/ingest", "Deprecated alias of /load"),
    ("post", "/graphs/{id}/mcp", "MCP over streamable HTTP (`serve --mcp`): stored queries and read-only tools"),
];

/// An OpenAPI 3 document of [`ROUTES`].
fn openapi_document() -> Value {
    let mut paths = Map::new();
    for (method, path, summary) in ROUTES {
        let entry = paths.entry(path.to_string()).or_insert_with(|| json!({}));
        if let Some(obj) = entry.as_object_mut() {
            let mut op = json!({"summary": summary, "responses": {"200": {"description": "OK"}}});
            if path.starts_with("/graphs") {
                op["security"] = json!([{"bearer_token": []}]);
            }
            obj.insert(method.to_string(), op);
        }
    }
    json!({
        "openapi": "3.0.3",
        "info": {"title": "omnigraph", "version": env!("CARGO_PKG_VERSION")},
        "components": {"securitySchemes": {"bearer_token": {"type": "http", "scheme": "bearer"}}},
        "paths": paths,
    })
}

async fn openapi() -> axum::Json<Value> {
    axum::Json(openapi_document())
}

/// The daemon's router, and where its MCP endpoint (if served) keeps it.
pub(crate) fn router(state: Arc<AppState>) -> (Router, mcp_route::Inner) {
    let load_limit = DefaultBodyLimit::max(LOAD_BODY_LIMIT);
    let mut routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/openapi.json", get(openapi))
        .route("/graphs", get(list_graphs))
        .route("/graphs/{id}/snapshot", get(snapshot))
        .route("/graphs/{id}/refresh", post(refresh))
        .route("/graphs/{id}/query", post(query))
        .route("/graphs/{id}/mutate", post(mutate))
        .route("/graphs/{id}/mutate/if-graph-commit", post(mutate_if_commit))
        .route("/graphs/{id}/load", post(load_json).layer(load_limit))
        .route("/graphs/{id}/load/ndjson", post(load_ndjson).layer(load_limit))
        .route("/graphs/{id}/branches", get(branches).post(branch_create))
        .route("/graphs/{id}/branches/merge", post(branch_merge).delete(branch_delete_merge))
        .route("/graphs/{id}/branches/{*name}", axum::routing::delete(branch_delete).post(branch_action))
        .route("/graphs/{id}/optimize", post(optimize))
        .route("/graphs/{id}/cleanup", post(cleanup))
        .route("/graphs/{id}/indexes/ensure", post(ensure_indices))
        .route("/graphs/{id}/indexes", get(index_status))
        .route("/graphs/{id}/commits", get(commits))
        .route("/graphs/{id}/reflog", get(reflog))
        .route("/graphs/{id}/commits/{commit}", get(commit))
        .route("/graphs/{id}/commits/{commit}/changes", get(commit_changes))
        .route("/graphs/{id}/commits/{commit}/revert", post(commit_revert))
        .route("/graphs/{id}/commits/{commit}/cherry-pick", post(commit_cherry_pick))
        .route("/graphs/{id}/diff", get(diff))
        .route("/graphs/{id}/changes", get(changes_poll))
        .route("/graphs/{id}/changes/baseline", post(changes_baseline))
        .route("/graphs/{id}/history/{type}/{*entity}", get(entity_history))
        .route("/graphs/{id}/blame/{type}/{*entity}", get(blame))
        .route("/graphs/{id}/tags", get(tag_list).post(tag_create))
        .route("/graphs/{id}/tags/{*name}", axum::routing::delete(tag_delete))
        .route("/graphs/{id}/schema", get(schema))
        .route("/graphs/{id}/schema/apply", post(schema_apply))
        .route("/graphs/{id}/schema/diff", get(schema_diff))
        .route("/graphs/{id}/recovery", get(recovery))
        .route("/graphs/{id}/healthz", get(graph_healthz))
        .route("/graphs/{id}/export", post(export))
        .route("/graphs/{id}/queries", get(stored_catalog))
        .route("/graphs/{id}/queries/{name}", post(stored_invoke))
        // Older clients' names for query, mutate and load (deprecated there too).
        .route("/graphs/{id}/read", post(query).layer(axum::middleware::from_fn(deprecated)))
        .route("/graphs/{id}/change", post(mutate).layer(axum::middleware::from_fn(deprecated)))
        .route("/graphs/{id}/ingest", post(load_json).layer(load_limit).layer(axum::middleware::from_fn(deprecated)));
    let mut inner = mcp_route::Inner::default();
    let serves_mcp = state.mcp;
    if serves_mcp {
        let (mcp, cell) = mcp_route::service(BODY_LIMIT, state.auth.is_configured());
        let caller_first = axum::middleware::from_fn_with_state(state.clone(), authenticated);
        routes = routes.route("/graphs/{id}/mcp", axum::routing::any_service(mcp).layer(caller_first));
        inner = cell;
    }
    let app = routes
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(state.clone(), middleware::json_errors))
        .layer(axum::middleware::from_fn(middleware::log_request))
        .with_state(state);
    // The MCP endpoint's tools call the finished router (this one).
    if serves_mcp {
        inner.set(app.clone());
    }
    (app, inner)
}

/// Refuse a request without a valid token before it reaches the MCP
/// endpoint (a 401, as on every route); the endpoint's tools then ask each
/// route as the same caller.
async fn authenticated(
    State(s): State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match s.actor(request.headers()) {
        Ok(_) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Any failure of a request, rendered as `{error, code?, <typed detail>}`.
pub(crate) enum ApiError {
    Omni(OmniError),
    Status { status: StatusCode, code: &'static str, message: String, retry_after: Option<u64> },
}

impl From<OmniError> for ApiError {
    fn from(e: OmniError) -> Self {
        ApiError::Omni(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Omni(e) => {
                let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(e.to_json())).into_response()
            }
            ApiError::Status { status, code, message, retry_after } => {
                let mut resp = (status, axum::Json(json!({"error": message, "code": code}))).into_response();
                if let Some(secs) = retry_after
                    && let Ok(v) = secs.to_string().parse()
                {
                    resp.headers_mut().insert(header::RETRY_AFTER, v);
                }
                resp
            }
        }
    }
}

type ApiResult = Result<axum::Json<Value>, ApiError>;

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::Omni(OmniError::BadRequest(message.into()))
}

/// A body, with an oversized one reported as 413 JSON instead of plain text.
fn body(b: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    b.map_err(|r| ApiError::Status {
        status: r.status(),
        code: status_code(r.status().as_u16()),
        message: r.body_text(),
        retry_after: None,
    })
}

fn json_body<T: for<'de> Deserialize<'de>>(b: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body(b)?;
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

/// A JSON body, or `T::default()` for an empty one.
fn json_body_or_default<T: Default + for<'de> Deserialize<'de>>(
    b: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    if b.as_ref().is_ok_and(|b| b.is_empty()) { Ok(T::default()) } else { json_body(b) }
}

impl AppState {
    fn graph(&self, id: &str) -> Result<&Graph, ApiError> {
        self.graphs.get(id).map(|(_, g)| g).ok_or_else(|| ApiError::Omni(OmniError::NotFound(format!("graph `{id}`"))))
    }

    /// The authenticated actor (`anonymous` when serving unauthenticated).
    fn actor(&self, headers: &HeaderMap) -> Result<String, ApiError> {
        if self.unauthenticated && !self.auth.is_configured() {
            return Ok("anonymous".into());
        }
        let header = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        Ok(self.auth.actor(header)?)
    }

    /// Admit one write for `actor`, or 429 with Retry-After.
    fn admit(self: &Arc<Self>, actor: &str) -> Result<WriteSlot, ApiError> {
        let mut n = self.inflight.entry(actor.to_string()).or_insert(0);
        if *n >= self.max_inflight {
            return Err(ApiError::Status {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: status_code(429),
                message: format!("actor `{actor}` already has {} writes in flight", *n),
                retry_after: Some(1),
            });
        }
        *n += 1;
        Ok(WriteSlot { state: self.clone(), actor: actor.to_string() })
    }
}

/// What every write route starts with, in this order: the authenticated
/// caller, its parsed body, and an admission slot held for the request.
struct Admitted<T> {
    actor: String,
    body: T,
    _slot: WriteSlot,
}

impl AppState {
    /// Authenticate, then `parse` the body, then authorize what it asks
    /// (`request`) on graph `id`, then admit the write.
    fn admit_write<T>(
        self: &Arc<Self>,
        headers: &HeaderMap,
        id: &str,
        parse: impl FnOnce() -> Result<T, ApiError>,
        request: impl FnOnce(&T) -> Request,
    ) -> Result<Admitted<T>, ApiError> {
        let actor = self.actor(headers)?;
        let body = parse()?;
        self.gate.check(&actor, Some(id), &request(&body))?;
        let slot = self.admit(&actor)?;
        Ok(Admitted { actor, body, _slot: slot })
    }

    /// Authenticate, then authorize `request` on graph `id` (`None`: a
    /// server action): the actor.
    fn allow(&self, headers: &HeaderMap, id: Option<&str>, request: &Request) -> Result<String, ApiError> {
        let actor = self.actor(headers)?;
        self.gate.check(&actor, id, request)?;
        Ok(actor)
    }

    /// Authenticate, then authorize a read of graph `id` at `reference`
    /// (a branch, a commit, any ref; `None`: graph-wide): the actor.
    async fn reader(&self, headers: &HeaderMap, id: &str, reference: Option<&str>) -> Result<String, ApiError> {
        let actor = self.actor(headers)?;
        self.read_allowed(&actor, id, reference).await?;
        Ok(actor)
    }

    /// Whether `actor` may read graph `id` at `reference`. Under a policy a
    /// ref counts as a read of the branches it names (`B~2` of `B`, `A...B`
    /// of both); a commit id or a tag names no branch, so only a rule
    /// without a branch scope (or scope `any`) allows it.
    async fn read_allowed(&self, actor: &str, id: &str, reference: Option<&str>) -> Result<(), ApiError> {
        if !self.gate.has_policy() {
            return Ok(self.gate.check(actor, Some(id), &gate::read(None))?);
        }
        let Some(reference) = reference else { return Ok(self.gate.check(actor, Some(id), &gate::read(None))?) };
        let live = self.graph(id)?.branch_list().await?;
        for part in reference.split("...") {
            let name = part.split(['~', '^']).next().unwrap_or(part);
            let branch = live.iter().any(|b| b.name == name).then_some(name);
            self.gate.check(actor, Some(id), &gate::read(branch))?;
        }
        Ok(())
    }
}

/// One admitted write; frees its slot on drop.
struct WriteSlot {
    state: Arc<AppState>,
    actor: String,
}

impl Drop for WriteSlot {
    fn drop(&mut self) {
        if let Some(mut n) = self.state.inflight.get_mut(&self.actor) {
            *n = n.saturating_sub(1);
        }
    }
}

#[derive(Deserialize)]
struct HealthParams {
    /// Also report every served graph's actor counters (authenticated).
    verbose: Option<bool>,
}

async fn healthz(State(s): State<Arc<AppState>>, headers: HeaderMap, Query(q): Query<HealthParams>) -> ApiResult {
    let mut out = json!({
        "status": "ok", "version": env!("CARGO_PKG_VERSION"), "internal_schema_version": STAMP,
        "read_only": s.read_only, "durability": durability::default().as_str(),
    });
    if q.verbose == Some(true) {
        s.actor(&headers)?;
        let mut graphs = Map::new();
        for (id, (_, g)) in &s.graphs {
            let stats = g.runtime().stats().await.map_err(ApiError::Omni)?;
            let mut entry =
                serde_json::to_value(stats).map_err(|e| ApiError::Omni(OmniError::Internal(e.to_string())))?;
            entry["durability"] = json!(g.root().durability());
            graphs.insert(id.clone(), entry);
        }
        out["graphs"] = Value::Object(graphs);
        out["connections"] =
            serde_json::to_value(&*s.connections).map_err(|e| ApiError::Omni(OmniError::Internal(e.to_string())))?;
        let memory = crate::graph::memory::memory_report().await;
        out["memory"] = serde_json::to_value(memory).map_err(|e| ApiError::Omni(OmniError::Internal(e.to_string())))?;
        if let Some(allocator) = s.allocator_stats.and_then(|read| read()) {
            out["memory"]["allocator"] = json!(allocator);
        }
        out["steps"] = serde_json::to_value(super::step_times::report())
            .map_err(|e| ApiError::Omni(OmniError::Internal(e.to_string())))?;
    }
    Ok(axum::Json(out))
}

/// Marks a deprecated alias's answers (`Deprecation: true`, and a `Link` to
/// the route that replaces it), as the reference server does.
async fn deprecated(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let successor = match req.uri().path().rsplit('/').next() {
        Some("read") => "query",
        Some("change") => "mutate",
        _ => "load",
    };
    let mut resp = next.run(req).await;
    let headers = resp.headers_mut();
    headers.insert("deprecation", axum::http::HeaderValue::from_static("true"));
    if let Ok(v) = axum::http::HeaderValue::from_str(&format!("<{successor}>; rel=\"successor-version\"")) {
        headers.insert(header::LINK, v);
    }
    resp
}

/// Liveness of one graph (a client whose base URL is the graph's prefix).
async fn graph_healthz(State(s): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let durability = s.graph(&id)?.root().durability();
    Ok(axum::Json(json!({
        "status": "ok", "version": env!("CARGO_PKG_VERSION"), "internal_schema_version": STAMP, "graph_id": id,
        "durability": durability,
    })))
}

async fn list_graphs(State(s): State<Arc<AppState>>, headers: HeaderMap) -> ApiResult {
    s.allow(&headers, None, &Request::of(Action::GraphList))?;
    let graphs: Vec<Value> = s.graphs.iter().map(|(id, (root, _))| json!({"graph_id": id, "uri": root})).collect();
    Ok(axum::Json(json!({ "graphs": graphs })))
}

#[derive(Deserialize)]
struct BranchParam {
    branch: Option<String>,
    /// At most this many (commit lists).
    limit: Option<usize>,
}

async fn snapshot(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    let at = q.branch.as_deref().unwrap_or("main");
    s.reader(&headers, &id, Some(at)).await?;
    let snap = s.graph(&id)?.snapshot(at).await?;
    Ok(axum::Json(wire::snapshot_json(&snap)))
}

/// Drop every cached branch view (a read replica's refresh on demand), then
/// answer the branch's snapshot as read from storage now.
async fn refresh(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    s.actor(&headers)?;
    s.graph(&id)?;
    crate::actors::replica::refresh();
    snapshot(State(s), Path(id), Query(q), headers).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryBody {
    #[serde(alias = "query_source")]
    query: String,
    #[serde(alias = "query_name")]
    name: Option<String>,
    #[serde(default)]
    params: Map<String, Value>,
    branch: Option<String>,
    #[serde(alias = "snapshot")]
    commit: Option<String>,
    /// Limits for this query, each at most the server's.
    limits: Option<ReadLimits>,
    /// Answer the plan instead of running the query (EXPLAIN).
    #[serde(default)]
    explain: bool,
    /// Run the query and answer its plan with each operator's figures too
    /// (PROFILE).
    #[serde(default)]
    profile: bool,
}

async fn query(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let actor = s.actor(&headers)?;
    let q: QueryBody = json_body(b)?;
    let at = q.commit.as_deref().or(q.branch.as_deref()).unwrap_or("main");
    s.read_allowed(&actor, &id, Some(at)).await?;
    let target = ReadTarget::of(q.commit, q.branch);
    let limits = s.read_limits.tightened_by(q.limits.unwrap_or_else(ReadLimits::unlimited));
    let insight = Insight::from_flags(q.explain, q.profile)?;
    let r = s.graph(&id)?.query_insight(&q.query, q.name.as_deref(), q.params, &target, limits, insight).await?;
    let target = target_json(&target);
    // Serialized from the struct, so each row keeps its projection order.
    Ok(axum::Json(wire::read_output(&r, q.name.as_deref(), target)).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MutateBody {
    #[serde(alias = "query_source")]
    query: String,
    #[serde(alias = "query_name")]
    name: Option<String>,
    #[serde(default)]
    params: Map<String, Value>,
    branch: Option<String>,
}

async fn run_mutation(
    s: Arc<AppState>,
    id: String,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
    if_commit: Option<String>,
) -> ApiResult {
    let on = |m: &MutateBody| Request::on(Action::Change, m.branch.as_deref().unwrap_or("main"));
    let Admitted { actor, body: m, _slot } = s.admit_write(&headers, &id, || json_body::<MutateBody>(b), on)?;
    let opts = WriteOptions { branch: m.branch.unwrap_or_else(|| "main".into()), actor: Some(actor), if_commit };
    let out = s.graph(&id)?.mutate(&m.query, m.name.as_deref(), m.params, &opts).await?;
    Ok(axum::Json(wire::mutation_json(&out, &opts.branch, m.name.as_deref())))
}

async fn mutate(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    if headers.contains_key(IF_COMMIT_HEADER) {
        return Err(bad("the Omnigraph-If-Graph-Commit header belongs on /mutate/if-graph-commit"));
    }
    run_mutation(s, id, headers, b, None).await
}

async fn mutate_if_commit(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let expected = headers
        .get(IF_COMMIT_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| bad("missing the Omnigraph-If-Graph-Commit header"))?;
    run_mutation(s, id, headers, b, Some(expected)).await
}

fn parse_mode(mode: Option<&str>) -> Result<LoadMode, ApiError> {
    Ok(mode.unwrap_or("merge").parse()?)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadBody {
    data: String,
    mode: Option<String>,
    branch: Option<String>,
    from: Option<String>,
}

/// Where a load goes: the branch, and the base to fork it from if missing.
struct LoadTarget {
    branch: Option<String>,
    from: Option<String>,
}

async fn run_load(
    s: &Arc<AppState>,
    id: &str,
    actor: String,
    data: &[u8],
    mode: LoadMode,
    to: LoadTarget,
) -> ApiResult {
    let g = s.graph(id)?;
    let branch = to.branch.unwrap_or_else(|| "main".into());
    s.gate.check(&actor, Some(id), &Request::on(Action::Change, &branch))?;
    if let Some(base) = &to.from
        && s.gate.has_policy()
        && !g.branch_list().await?.iter().any(|b| b.name == branch)
    {
        s.gate.check(&actor, Some(id), &Request::into(Action::BranchCreate, Some(base), &branch))?;
    }
    let _slot = s.admit(&actor)?;
    let created = match &to.from {
        Some(base) => g.ensure_branch(&branch, base).await?,
        None => false,
    };
    let opts = WriteOptions { branch: branch.clone(), actor: Some(actor.clone()), if_commit: None };
    let out = g.load(data, mode, &opts).await?;
    let mut body = wire::load_json(&out, g.root().uri(), mode.as_str(), &branch);
    if let Some(obj) = body.as_object_mut() {
        obj.insert("branch".into(), json!(branch));
        obj.insert("base_branch".into(), json!(to.from));
        obj.insert("branch_created".into(), json!(created));
        obj.insert("actor_id".into(), json!(actor));
    }
    Ok(axum::Json(body))
}

async fn load_json(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let actor = s.actor(&headers)?;
    let l: LoadBody = json_body(b)?;
    let mode = parse_mode(l.mode.as_deref())?;
    run_load(&s, &id, actor, l.data.as_bytes(), mode, LoadTarget { branch: l.branch, from: l.from }).await
}

#[derive(Deserialize)]
struct NdjsonParams {
    branch: Option<String>,
    mode: Option<String>,
    from: Option<String>,
}

async fn load_ndjson(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<NdjsonParams>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let actor = s.actor(&headers)?;
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !content_type.starts_with("application/x-ndjson") {
        return Err(ApiError::Status {
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code: status_code(415),
            message: format!("expected Content-Type application/x-ndjson, got `{content_type}`"),
            retry_after: None,
        });
    }
    let data = body(b)?;
    let mode = parse_mode(q.mode.as_deref())?;
    run_load(&s, &id, actor, &data, mode, LoadTarget { branch: q.branch, from: q.from }).await
}

async fn branches(State(s): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> ApiResult {
    s.reader(&headers, &id, None).await?;
    let list = s.graph(&id)?.branch_list().await?;
    let names: Vec<&str> = list.iter().map(|b| b.name.as_str()).collect();
    Ok(axum::Json(json!({ "branches": names, "details": list })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBranchBody {
    name: String,
    from: Option<String>,
}

async fn branch_create(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let into =
        |r: &CreateBranchBody| Request::into(Action::BranchCreate, Some(r.from.as_deref().unwrap_or("main")), &r.name);
    let Admitted { actor, body: req, _slot } =
        s.admit_write(&headers, &id, || json_body::<CreateBranchBody>(b), into)?;
    let g = s.graph(&id)?;
    let from = req.from.unwrap_or_else(|| "main".into());
    let info = g.branch_create_as(&req.name, &from, Some(&actor)).await?;
    let mut body = wire::branch_created_json(&info, &from, g.root().uri());
    body["actor_id"] = json!(actor);
    Ok(axum::Json(body))
}

/// `?purge=true|false` of `DELETE /graphs/{id}/branches/{name}` (parsed
/// here, so bad input is a typed JSON 400 like every other).
fn purge_param(query: Option<&str>) -> Result<bool, OmniError> {
    match query.unwrap_or("") {
        "" | "purge=false" => Ok(false),
        "purge=true" => Ok(true),
        other => Err(OmniError::BadRequest(format!("query `{other}`: a branch delete takes `?purge=true|false`"))),
    }
}

async fn branch_delete(
    State(s): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult {
    let actor = s.allow(&headers, Some(&id), &Request::into(Action::BranchDelete, None, &name))?;
    let purge = purge_param(query.as_deref())?;
    let _slot = s.admit(&actor)?;
    let g = s.graph(&id)?;
    let opts = crate::DeleteOptions { purge, actor: Some(actor.clone()) };
    let deleted = g.branch_delete_with(&name, &opts).await?;
    let mut body = wire::branch_deleted_json(&deleted, g.root().uri());
    body["actor_id"] = json!(actor);
    Ok(axum::Json(body))
}

/// The body of `POST /graphs/{id}/branches/{name}/reset`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ResetBody {
    to: String,
    if_commit: Option<String>,
    #[serde(default)]
    as_commit: bool,
    #[serde(default)]
    dry_run: bool,
}

/// The body of `POST /graphs/{id}/branches/{name}/restore` (optional).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RestoreBody {
    at: Option<String>,
}

/// `POST /graphs/{id}/branches/{name}/reset` and `…/restore` (the branch
/// name may hold slashes, so the action is the path's last segment).
async fn branch_action(
    State(s): State<Arc<AppState>>,
    Path((id, path)): Path<(String, String)>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    if let Some(name) = path.strip_suffix("/restore") {
        let into = |_: &RestoreBody| Request::into(Action::BranchCreate, None, name);
        let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_or_default(b), into)?;
        let g = s.graph(&id)?;
        return Ok(axum::Json(wire::restored_json(&g.branch_restore(name, req.at.as_deref(), Some(&actor)).await?)));
    }
    let Some(name) = path.strip_suffix("/reset") else {
        return Err(OmniError::NotFound(format!(
            "no branch action at `/branches/{path}` (POST `/branches/NAME/reset` or `/branches/NAME/restore`)"
        ))
        .into());
    };
    let into = |_: &ResetBody| Request::into(Action::BranchReset, None, name);
    let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_body(b), into)?;
    let opts = crate::graph::ResetOptions {
        as_commit: req.as_commit,
        if_commit: req.if_commit,
        actor: Some(actor.clone()),
        dry_run: req.dry_run,
    };
    let g = s.graph(&id)?;
    Ok(axum::Json(wire::reset_json(&g.branch_reset(name, &req.to, &opts).await?, Some(&actor))))
}

/// `DELETE /branches/merge` deletes a branch named `merge` (the merge
/// route shadows the wildcard for that one name).
async fn branch_delete_merge(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    q: RawQuery,
    headers: HeaderMap,
) -> ApiResult {
    branch_delete(State(s), Path((id, "merge".to_string())), q, headers).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MergeBody {
    source: String,
    target: Option<String>,
    #[serde(default)]
    delete_branch: bool,
    #[serde(default)]
    dry_run: bool,
    #[serde(default)]
    squash: bool,
    /// A refusal's `next_page_token`: list the conflicts after it.
    page_token: Option<String>,
    /// Conflicts a refusal lists (default 1000).
    limit: Option<usize>,
    /// `fail` (default), `ours` or `theirs`.
    strategy: Option<String>,
    /// Decisions for named row conflicts.
    #[serde(default)]
    resolutions: Vec<crate::engine::resolution::Resolution>,
}

async fn branch_merge(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let into =
        |r: &MergeBody| Request::into(Action::BranchMerge, Some(&r.source), r.target.as_deref().unwrap_or("main"));
    let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_body::<MergeBody>(b), into)?;
    let g = s.graph(&id)?;
    let target = req.target.unwrap_or_else(|| "main".into());
    let opts = MergeOptions {
        actor: Some(actor.clone()),
        dry_run: req.dry_run,
        squash: req.squash,
        delete_branch: req.delete_branch,
        memory_bytes: None,
        page: ConflictPage { token: req.page_token, limit: req.limit },
        strategy: req.strategy.as_deref().map(str::parse).transpose()?,
        resolutions: req.resolutions,
    };
    let result = g.branch_merge(&req.source, &target, &opts).await?;
    Ok(axum::Json(wire::merge_json(&result, Some(&actor))))
}

/// The body of `revert` (`branch?`, default main) and `cherry-pick`
/// (`onto`), with how each runs: `{mainline?, dry_run?, strategy?,
/// resolutions?, page_token?, limit?}`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct MoveBody {
    branch: Option<String>,
    onto: Option<String>,
    mainline: Option<u8>,
    #[serde(default)]
    dry_run: bool,
    strategy: Option<String>,
    #[serde(default)]
    resolutions: Vec<crate::engine::resolution::Resolution>,
    page_token: Option<String>,
    limit: Option<usize>,
}

/// `POST /graphs/{id}/commits/{commit}/revert` (an empty body: revert on main).
async fn commit_revert(
    State(s): State<Arc<AppState>>,
    Path((id, commit)): Path<(String, String)>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    move_commit(&s, &id, &commit, &headers, b, false).await
}

/// `POST /graphs/{id}/commits/{commit}/cherry-pick` (`onto` required).
async fn commit_cherry_pick(
    State(s): State<Arc<AppState>>,
    Path((id, commit)): Path<(String, String)>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    move_commit(&s, &id, &commit, &headers, b, true).await
}

/// Revert (`pick` false) or cherry-pick `commit`.
async fn move_commit(
    s: &Arc<AppState>,
    id: &str,
    commit: &str,
    headers: &HeaderMap,
    b: Result<Bytes, BytesRejection>,
    pick: bool,
) -> ApiResult {
    let into = |r: &MoveBody| match pick {
        true => Request::into(Action::CherryPick, None, r.onto.as_deref().unwrap_or_default()),
        false => Request::into(Action::Revert, None, r.branch.as_deref().unwrap_or("main")),
    };
    let Admitted { actor, body: req, _slot } =
        s.admit_write(headers, id, || json_body_or_default::<MoveBody>(b), into)?;
    let branch = match (pick, req.branch, req.onto) {
        (false, branch, None) => branch,
        (true, None, Some(onto)) => Some(onto),
        (false, _, Some(_)) => return Err(bad("a revert names its branch as `branch`, not `onto`")),
        (true, _, _) => return Err(bad("a cherry-pick names the branch it lands on as `onto` (and no `branch`)")),
    };
    let opts = crate::graph::RevertOptions {
        branch,
        mainline: req.mainline,
        actor: Some(actor.clone()),
        dry_run: req.dry_run,
        strategy: req.strategy.as_deref().map(str::parse).transpose()?,
        resolutions: req.resolutions,
        page: ConflictPage { token: req.page_token, limit: req.limit },
    };
    let g = s.graph(id)?;
    Ok(axum::Json(match pick {
        true => wire::cherry_pick_json(&g.commit_cherry_pick(commit, &opts).await?, Some(&actor)),
        false => wire::revert_json(&g.commit_revert(commit, &opts).await?, Some(&actor)),
    }))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct OptimizeBody {
    branch: Option<String>,
}
// `POST /indexes/ensure` takes the same body: `{branch?}`.

/// `POST /graphs/{id}/optimize` with `{branch?}` (an empty body = main).
async fn optimize(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let into = |r: &OptimizeBody| Request::into(Action::Optimize, None, r.branch.as_deref().unwrap_or("main"));
    let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_or_default(b), into)?;
    let g = s.graph(&id)?;
    let report = g.optimize(req.branch.as_deref().unwrap_or("main"), Some(&actor)).await?;
    let mut body = serde_json::to_value(&report).map_err(|e| OmniError::Internal(e.to_string()))?;
    body["actor_id"] = json!(actor);
    Ok(axum::Json(body))
}

/// `POST /graphs/{id}/indexes/ensure` with `{branch?}` (an empty body = main).
async fn ensure_indices(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let into = |r: &OptimizeBody| Request::into(Action::IndexEnsure, None, r.branch.as_deref().unwrap_or("main"));
    let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_or_default(b), into)?;
    let report = s.graph(&id)?.ensure_indices(req.branch.as_deref().unwrap_or("main"), Some(&actor)).await?;
    let mut body = serde_json::to_value(&report).map_err(|e| OmniError::Internal(e.to_string()))?;
    body["actor_id"] = json!(actor);
    Ok(axum::Json(body))
}

/// `GET /graphs/{id}/indexes?branch=`: each index's coverage of its table.
async fn index_status(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    let at = q.branch.as_deref().unwrap_or("main");
    s.reader(&headers, &id, Some(at)).await?;
    let status = s.graph(&id)?.index_status(at).await?;
    Ok(axum::Json(serde_json::to_value(&status).map_err(|e| OmniError::Internal(e.to_string()))?))
}

/// A JSON body, or `T::default()` for an empty one.
fn json_or_default<T: serde::de::DeserializeOwned + Default>(b: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = body(b)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes).map_err(|e| bad(format!("invalid JSON body: {e}")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CleanupBody {
    keep: Option<usize>,
    older_than: Option<String>,
    reflog_expiry: Option<String>,
    #[serde(default)]
    confirm: bool,
}

/// `POST /graphs/{id}/cleanup` with `{keep?, older_than?, reflog_expiry?,
/// confirm?}`: a dry run unless `confirm` is true.
async fn cleanup(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let all = |_: &CleanupBody| Request::of(Action::Cleanup);
    let Admitted { body: req, _slot, .. } = s.admit_write(&headers, &id, || json_or_default(b), all)?;
    let g = s.graph(&id)?;
    let report = g.cleanup_with(req.keep, req.older_than.as_deref(), req.reflog_expiry.as_deref(), req.confirm).await?;
    Ok(axum::Json(serde_json::to_value(&report).map_err(|e| OmniError::Internal(e.to_string()))?))
}

async fn commits(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    let at = q.branch.as_deref().unwrap_or("main");
    s.reader(&headers, &id, Some(at)).await?;
    let list = s.graph(&id)?.commits(at, q.limit).await?;
    Ok(axum::Json(json!({ "commits": list.iter().map(wire::commit_json).collect::<Vec<_>>() })))
}

/// `GET /graphs/{id}/reflog?branch=&limit=`.
async fn reflog(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    s.reader(&headers, &id, q.branch.as_deref()).await?;
    let entries = s.graph(&id)?.reflog(q.branch.as_deref(), q.limit).await?;
    Ok(axum::Json(wire::reflog_json(&entries)))
}

async fn commit(
    State(s): State<Arc<AppState>>,
    Path((id, commit)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    s.reader(&headers, &id, Some(&commit)).await?;
    let c = s.graph(&id)?.commit(&commit).await?;
    Ok(axum::Json(wire::commit_json(&c)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DiffParams {
    from: String,
    to: String,
    /// Comma-separated type names.
    #[serde(rename = "type")]
    types: Option<String>,
    kind: Option<String>,
    /// Comma-separated ops.
    op: Option<String>,
    page_token: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    stat: bool,
}

fn comma_list(text: Option<&str>) -> Vec<String> {
    text.map(|t| t.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()).unwrap_or_default()
}

async fn diff(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<DiffParams>,
    headers: HeaderMap,
) -> ApiResult {
    let actor = s.reader(&headers, &id, Some(&q.from)).await?;
    s.read_allowed(&actor, &id, Some(&q.to)).await?;
    let ops = comma_list(q.op.as_deref()).iter().map(|o| o.parse()).collect::<Result<Vec<_>, OmniError>>()?;
    let filter = DiffFilter { types: comma_list(q.types.as_deref()), kind: q.kind, ops };
    let g = s.graph(&id)?;
    if q.stat {
        return Ok(axum::Json(json!(g.diff_stats(&q.from, &q.to, &filter).await?)));
    }
    Ok(axum::Json(json!(g.diff(&q.from, &q.to, &filter, q.page_token.as_deref(), q.limit).await?)))
}

/// The parameters of a change route: the filter (`kind`, `type`, `op`,
/// each repeatable or comma-separated) and, once each, the others `allowed`
/// names; any other parameter is refused.
fn change_params(query: Option<&str>, allowed: &[&str]) -> Result<(DiffFilter, HashMap<String, String>), OmniError> {
    let (mut filter, mut kinds, mut rest) = (DiffFilter::default(), Vec::new(), HashMap::new());
    for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let values = value.split(',').map(str::trim).filter(|v| !v.is_empty()).map(String::from);
        match key.as_ref() {
            "kind" => kinds.extend(values),
            "type" => filter.types.extend(values),
            "op" => {
                for v in values {
                    filter.ops.push(v.parse()?);
                }
            }
            other if allowed.contains(&other) => {
                if rest.insert(other.to_string(), value.into_owned()).is_some() {
                    return Err(OmniError::BadRequest(format!("parameter `{other}` given twice")));
                }
            }
            other => return Err(OmniError::BadRequest(format!("unknown parameter `{other}`"))),
        }
    }
    filter.kind = one_kind(kinds)?;
    Ok((filter, rest))
}

/// The `kind` filter from a list of kinds: both kinds is no filter.
fn one_kind(mut kinds: Vec<String>) -> Result<Option<String>, OmniError> {
    kinds.sort();
    kinds.dedup();
    match kinds.as_slice() {
        [one] if one == "node" || one == "edge" => Ok(Some(one.clone())),
        [] => Ok(None),
        [a, b] if a == "edge" && b == "node" => Ok(None),
        _ => Err(OmniError::BadRequest(format!("kind {kinds:?}: expected node and/or edge"))),
    }
}

/// A count parameter.
fn count_param(name: &str, value: Option<&String>) -> Result<Option<usize>, OmniError> {
    value.map(|v| v.parse().map_err(|_| OmniError::BadRequest(format!("{name} `{v}` is not a count")))).transpose()
}

async fn commit_changes(
    State(s): State<Arc<AppState>>,
    Path((id, commit)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult {
    s.reader(&headers, &id, Some(&commit)).await?;
    let (filter, rest) = change_params(query.as_deref(), &["page_token", "limit"])?;
    let limit = count_param("limit", rest.get("limit"))?;
    let page =
        s.graph(&id)?.commit_changes(&commit, &filter, rest.get("page_token").map(String::as_str), limit).await?;
    Ok(axum::Json(json!(page)))
}

/// `?branch=&cursor=|start=|page_token=&limit=&wait=` and the filter: one
/// poll of a branch's change feed (no place given: `start=now`).
async fn changes_poll(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult {
    let actor = s.actor(&headers)?;
    let allowed = ["branch", "cursor", "start", "page_token", "limit", "wait"];
    let (filter, mut rest) = change_params(query.as_deref(), &allowed)?;
    s.read_allowed(&actor, &id, Some(rest.get("branch").map_or("main", String::as_str))).await?;
    let places = [rest.remove("cursor"), rest.remove("start"), rest.remove("page_token")];
    let from = match places {
        [Some(c), None, None] => FeedFrom::Cursor(c),
        [None, Some(st), None] => FeedFrom::Start(st.parse()?),
        [None, None, Some(t)] => FeedFrom::PageToken(t),
        [None, None, None] => FeedFrom::Start(FeedStart::Now),
        _ => return Err(bad("give one of cursor, start and page_token")),
    };
    let limit = count_param("limit", rest.get("limit"))?;
    let wait = count_param("wait", rest.get("wait"))?.map(|secs| std::time::Duration::from_secs(secs as u64));
    let req = FeedRequest { branch: rest.remove("branch"), from, filter, limit, wait };
    Ok(axum::Json(json!(s.graph(&id)?.changes_poll(&req).await?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HistoryParams {
    property: Option<String>,
    branch: Option<String>,
    limit: Option<usize>,
}

/// `?property=&branch=&limit=`: `{entries}`, newest first.
async fn entity_history(
    State(s): State<Arc<AppState>>,
    Path((id, type_name, entity)): Path<(String, String, String)>,
    Query(q): Query<HistoryParams>,
    headers: HeaderMap,
) -> ApiResult {
    s.reader(&headers, &id, Some(q.branch.as_deref().unwrap_or("main"))).await?;
    let g = s.graph(&id)?;
    let h = g.entity_history(&type_name, &entity, q.property.as_deref(), q.branch.as_deref(), q.limit).await?;
    Ok(axum::Json(json!(h)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BlameParams {
    branch: Option<String>,
}

/// `?branch=`: `{type, id, properties}`.
async fn blame(
    State(s): State<Arc<AppState>>,
    Path((id, type_name, entity)): Path<(String, String, String)>,
    Query(q): Query<BlameParams>,
    headers: HeaderMap,
) -> ApiResult {
    s.reader(&headers, &id, Some(q.branch.as_deref().unwrap_or("main"))).await?;
    Ok(axum::Json(json!(s.graph(&id)?.blame(&type_name, &entity, q.branch.as_deref()).await?)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct BaselineBody {
    branch: Option<String>,
    #[serde(default)]
    kind: Vec<String>,
    #[serde(default, rename = "type")]
    types: Vec<String>,
    #[serde(default)]
    op: Vec<String>,
}

/// NDJSON: the snapshot's records, then `{"baseline": {snapshot_commit_id,
/// resume_cursor}}`, written only after every record was.
async fn changes_baseline(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let actor = s.actor(&headers)?;
    let req: BaselineBody = json_body_or_default(b)?;
    s.gate.check(&actor, Some(&id), &Request::on(Action::Export, req.branch.as_deref().unwrap_or("main")))?;
    let ops = req.op.iter().map(|o| o.parse()).collect::<Result<Vec<_>, OmniError>>()?;
    let filter = DiffFilter { types: req.types, kind: one_kind(req.kind)?, ops };
    let baseline = s.graph(&id)?.changes_baseline(req.branch.as_deref(), &filter).await?;
    let mut trailer = serde_json::to_vec(&json!({ "baseline": baseline.handshake }))
        .map_err(|e| ApiError::Omni(OmniError::Internal(format!("the baseline record: {e}"))))?;
    trailer.push(b'\n');
    Ok(ndjson(baseline.export, Some(Bytes::from(trailer)), "application/x-ndjson; charset=utf-8"))
}

async fn tag_list(State(s): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> ApiResult {
    s.reader(&headers, &id, None).await?;
    let tags = s.graph(&id)?.tags().await?;
    Ok(axum::Json(wire::tags_json(&tags)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTagBody {
    name: String,
    /// The ref tagged (default main's head).
    #[serde(rename = "ref", alias = "commit", alias = "target")]
    target: Option<String>,
    message: Option<String>,
}

async fn tag_create(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let tag = |_: &CreateTagBody| Request::of(Action::TagCreate);
    let Admitted { actor, body: req, _slot } = s.admit_write(&headers, &id, || json_body(b), tag)?;
    let g = s.graph(&id)?;
    let tag = g.tag_create(&req.name, req.target.as_deref(), req.message.as_deref(), Some(&actor)).await?;
    Ok(axum::Json(wire::tag_json(&tag)))
}

async fn tag_delete(
    State(s): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult {
    let actor = s.allow(&headers, Some(&id), &Request::of(Action::TagDelete))?;
    let _slot = s.admit(&actor)?;
    let tag = s.graph(&id)?.tag_delete(&name).await?;
    Ok(axum::Json(wire::tag_json(&tag)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaDiffParams {
    from: String,
    to: String,
}

/// `GET /graphs/{id}/schema/diff?from=&to=` (any refs).
async fn schema_diff(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<SchemaDiffParams>,
    headers: HeaderMap,
) -> ApiResult {
    let actor = s.reader(&headers, &id, Some(&q.from)).await?;
    s.read_allowed(&actor, &id, Some(&q.to)).await?;
    Ok(axum::Json(json!(s.graph(&id)?.schema_diff(&q.from, &q.to).await?)))
}

/// `GET /graphs/{id}/schema?branch=`: the schema `branch` (default main)
/// has at its head.
async fn schema(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(q): Query<BranchParam>,
    headers: HeaderMap,
) -> ApiResult {
    let at = q.branch.as_deref().unwrap_or(crate::engine::branch_name::MAIN);
    s.reader(&headers, &id, Some(at)).await?;
    let schema = s.graph(&id)?.schema_of(at).await?;
    Ok(axum::Json(wire::schema_json(&schema)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaApplyBody {
    schema_source: String,
    /// The branch whose schema changes (default main).
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    allow_data_loss: bool,
    #[serde(default)]
    dry_run: bool,
}

/// `POST /graphs/{id}/schema/apply` with `{schema_source, branch?,
/// allow_data_loss?, dry_run?}`: `{branch, applied, supported, step_count,
/// steps, manifest_version, graph_commit_id, …}`.
async fn schema_apply(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult {
    // A dry run writes nothing: it is a read of the branch.
    let into = |r: &SchemaApplyBody| {
        let branch = r.branch.as_deref().unwrap_or(crate::engine::branch_name::MAIN);
        if r.dry_run { Request::on(Action::Read, branch) } else { Request::into(Action::SchemaApply, None, branch) }
    };
    let Admitted { body: req, actor, _slot } =
        s.admit_write(&headers, &id, || json_body::<SchemaApplyBody>(b), into)?;
    let graph = s.graph(&id)?;
    let branch = req.branch.as_deref().unwrap_or(crate::engine::branch_name::MAIN);
    let report = if req.dry_run {
        graph.schema_plan_on(branch, &req.schema_source, req.allow_data_loss).await?
    } else {
        graph.schema_apply_on(branch, &req.schema_source, req.allow_data_loss, Some(&actor)).await?
    };
    Ok(axum::Json(serde_json::to_value(&report).map_err(|e| OmniError::Internal(e.to_string()))?))
}

async fn recovery(State(s): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> ApiResult {
    s.reader(&headers, &id, None).await?;
    let status = s.graph(&id)?.recovery_status().await?;
    Ok(axum::Json(serde_json::to_value(status).unwrap_or_default()))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ExportBody {
    branch: Option<String>,
    #[serde(alias = "commit")]
    snapshot: Option<String>,
    #[serde(default)]
    type_names: Vec<String>,
    #[serde(default)]
    table_keys: Vec<String>,
}

/// NDJSON of every (or the named) table, streamed batch by batch; the
/// request is checked (branch, commit, types) before the first byte.
async fn export(
    State(s): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let actor = s.actor(&headers)?;
    let req: ExportBody = json_body_or_default(b)?;
    // An export at a commit names no branch.
    let branch = if req.snapshot.is_some() { None } else { Some(req.branch.as_deref().unwrap_or("main")) };
    let request = Request { action: Action::Export, branch: branch.map(str::to_string), target_branch: None };
    s.gate.check(&actor, Some(&id), &request)?;
    let target = ReadTarget::of(req.snapshot, req.branch);
    let types: Vec<String> = req.type_names.into_iter().chain(req.table_keys).collect();
    let plan = s.graph(&id)?.export(&target, &types).await?;
    Ok(ndjson(plan, None, "application/x-ndjson"))
}

/// Stream an export as the response body, then `trailer` once every record
/// was written (a failed export ends the body abnormally, without it).
fn ndjson(plan: Export, trailer: Option<Bytes>, content_type: &'static str) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        match plan.run(tx.clone()).await {
            Ok(_) => {
                if let Some(t) = trailer {
                    let _ = tx.send(Ok(t)).await;
                }
            }
            // Mid-stream: the client sees the body end abnormally.
            Err(e) => {
                let _ = tx.send(Err(e)).await;
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    let mut resp = Response::new(axum::body::Body::from_stream(stream));
    resp.headers_mut().insert(header::CONTENT_TYPE, axum::http::HeaderValue::from_static(content_type));
    resp
}

/// `GET /graphs/{id}/queries`: the stored-query catalog (a read of main).
async fn stored_catalog(State(s): State<Arc<AppState>>, Path(id): Path<String>, headers: HeaderMap) -> ApiResult {
    s.reader(&headers, &id, Some(crate::engine::branch_name::MAIN)).await?;
    s.graph(&id)?;
    let catalog = s.queries.get(&id).map(|r| r.catalog()).unwrap_or_default();
    Ok(axum::Json(json!({ "queries": catalog })))
}

/// The body of `POST /graphs/{id}/queries/{name}` (optional).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct InvokeBody {
    #[serde(default)]
    params: Map<String, Value>,
    branch: Option<String>,
    snapshot: Option<String>,
    /// The kind the caller expects (`query NAME` false, `mutate NAME` true).
    expect_mutation: Option<bool>,
}

/// `POST /graphs/{id}/queries/{name}`: run a stored query, answered as
/// `/query` or `/mutate` answers. Gated by `invoke_query` (a denial is the
/// same 404 as an unknown name, so names cannot be probed), then by the
/// query's own `read` or `change`.
async fn stored_invoke(
    State(s): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let actor = s.actor(&headers)?;
    let req: InvokeBody = json_or_default(b)?;
    let unknown = || ApiError::Omni(OmniError::NotFound(format!("stored query `{name}`")));
    s.gate.check(&actor, Some(&id), &Request::of(Action::InvokeQuery)).map_err(|_| unknown())?;
    let stored = s.queries.get(&id).and_then(|r| r.get(&name)).ok_or_else(unknown)?;
    let mutation = stored.decl.is_mutation();
    if req.expect_mutation.is_some_and(|m| m != mutation) {
        let kind = if mutation { "a mutation" } else { "a read" };
        return Err(bad(format!("stored query `{name}` is {kind}")));
    }
    let g = s.graph(&id)?;
    if mutation {
        if req.snapshot.is_some() {
            return Err(bad(format!("stored query `{name}` is a mutation: it writes a branch, not a snapshot")));
        }
        let branch = req.branch.unwrap_or_else(|| "main".into());
        s.gate.check(&actor, Some(&id), &Request::on(Action::Change, &branch))?;
        let _slot = s.admit(&actor)?;
        let opts = WriteOptions { branch, actor: Some(actor), if_commit: None };
        let out = g.mutate(&stored.source, Some(&name), req.params, &opts).await?;
        return Ok(axum::Json(wire::mutation_json(&out, &opts.branch, Some(&name))).into_response());
    }
    let at = req.snapshot.as_deref().or(req.branch.as_deref()).unwrap_or("main");
    s.read_allowed(&actor, &id, Some(at)).await?;
    let target = ReadTarget::of(req.snapshot, req.branch);
    let r = g.query_insight(&stored.source, Some(&name), req.params, &target, s.read_limits, Insight::Off).await?;
    let target = target_json(&target);
    Ok(axum::Json(wire::read_output(&r, Some(&name), target)).into_response())
}

/// A read's `target` as its answer names it.
fn target_json(target: &ReadTarget) -> Value {
    match target {
        ReadTarget::Branch(b) => json!({ "branch": b }),
        ReadTarget::Commit(c) => json!({ "snapshot": c }),
    }
}
