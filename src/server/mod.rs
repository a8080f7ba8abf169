//! The `omnigraph serve` HTTP daemon (axum): the graph-scoped routes of the
//! Omnigraph project's API under `/graphs/{id}/`, over the same embedded
//! [`crate::Graph`] handle the CLI uses.

pub mod auth;
pub mod gate;
mod listener;
mod mcp_route;
mod middleware;
mod routes;
pub mod step_times;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Request;
use dashmap::DashMap;
use hyper::body::Incoming;
use tracing::{info, warn};

use crate::engine::read_limits::ReadLimits;
use crate::engine::stored_queries::Registry;
use crate::graph::{Graph, Omnigraph, OpenMode};
use crate::protocol::{OmniError, Result};
pub use auth::Auth;
pub use gate::Gate;

/// A setting for every served graph, and per graph id instead.
#[derive(Debug, Clone)]
pub struct PerGraph<T> {
    /// For every graph without its own.
    pub all: Option<T>,
    /// One graph's own.
    pub graphs: BTreeMap<String, T>,
}

impl<T> Default for PerGraph<T> {
    fn default() -> Self {
        PerGraph { all: None, graphs: BTreeMap::new() }
    }
}

impl<T> PerGraph<T> {
    /// Graph `id`'s (`None`: the server's, which is `all`).
    pub fn of(&self, id: Option<&str>) -> Option<&T> {
        match id {
            Some(id) => self.graphs.get(id).or(self.all.as_ref()),
            None => self.all.as_ref(),
        }
    }

    /// Whether anything is set.
    pub fn is_set(&self) -> bool {
        self.all.is_some() || !self.graphs.is_empty()
    }

    /// A graph id it names that `served` lacks.
    pub fn unserved(&self, mut served: impl FnMut(&str) -> bool) -> Option<&str> {
        self.graphs.keys().map(String::as_str).find(|id| !served(id))
    }
}

/// The stored queries a daemon serves (`serve --queries DIR`, `--graph-queries ID=DIR`).
pub type StoredQueries = PerGraph<Arc<Registry>>;

/// What the daemon serves.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to bind (port 0 picks one).
    pub bind: String,
    /// Graph id → root location.
    pub graphs: Vec<(String, String)>,
    /// Bearer tokens; empty only with `unauthenticated`.
    pub auth: Auth,
    /// Serve without authentication (actor `anonymous`).
    pub unauthenticated: bool,
    /// What an authenticated actor may do (no policy: everything).
    pub gate: Gate,
    /// Stored queries served by name: for every graph, and per graph id.
    pub queries: StoredQueries,
    /// Serve MCP at `/graphs/{id}/mcp` (and `/mcp`).
    pub mcp: bool,
    /// Concurrent writes allowed per actor before 429.
    pub max_inflight_writes_per_actor: usize,
    /// The graph the flat routes (`/snapshot`, `/query`, …) serve; `None`
    /// picks the only graph when there is one, else flat routes are 404.
    pub default_graph: Option<String>,
    /// The limits every read query runs under (a request may lower them).
    pub read_limits: ReadLimits,
    /// A read replica: open every graph read-only, run no recovery or
    /// maintenance, and answer every write 403.
    pub read_only: bool,
    /// A read replica's view of the branch heads is at most this old
    /// (`POST /graphs/{id}/refresh` refreshes it at once).
    pub refresh_interval: Duration,
    /// A connection must send a complete request head within this, from
    /// its accept and again after each answer (so it is also how long a
    /// keep-alive connection may sit idle) or it is closed.
    pub header_timeout: Duration,
    /// Connections served at once (capped to half the open-files limit);
    /// one more is closed at accept, never queued.
    pub max_connections: usize,
    /// After the shutdown signal, how long live connections get to finish
    /// before they are dropped.
    pub shutdown_timeout: Duration,
    /// Rows a table may hold outside an index its schema declares before
    /// the daemon folds them in (or builds a missing one), in the background
    /// (0: never; `optimize` and `index ensure` still do; `None`: the default
    /// for each graph's storage, [`crate::actors::index_folder::default_lag_rows`]).
    /// Not on a read replica.
    pub index_lag_rows: Option<u64>,
    /// The allocator's counters for `/healthz?verbose=true` (`memory.allocator`).
    pub allocator_stats: Option<crate::AllocatorStats>,
}

impl ServerConfig {
    /// Default [`ServerConfig::header_timeout`].
    pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    /// Default [`ServerConfig::max_connections`]: well under the usual
    /// open-files limits.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
    /// Default [`ServerConfig::shutdown_timeout`].
    pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);
}

/// Shared state of the running daemon.
pub(crate) struct AppState {
    pub(crate) graphs: BTreeMap<String, (String, Graph)>,
    pub(crate) auth: Auth,
    pub(crate) unauthenticated: bool,
    pub(crate) gate: Gate,
    /// Each served graph's stored queries (checked against its schema at start).
    pub(crate) queries: BTreeMap<String, Arc<Registry>>,
    /// Whether `/graphs/{id}/mcp` is served.
    pub(crate) mcp: bool,
    pub(crate) inflight: DashMap<String, usize>,
    pub(crate) max_inflight: usize,
    pub(crate) read_limits: ReadLimits,
    pub(crate) read_only: bool,
    /// What the accept loop counts (`/healthz?verbose=true`).
    pub(crate) connections: Arc<listener::ConnectionStats>,
    /// The allocator's counters, when the binary can read them.
    pub(crate) allocator_stats: Option<crate::AllocatorStats>,
}

/// Open every graph (recovery runs at open); a graph that fails to open is
/// reported and not served.
async fn open_graphs(specs: &[(String, String)], mode: OpenMode) -> BTreeMap<String, (String, Graph)> {
    let mut out = BTreeMap::new();
    for (id, root) in specs {
        match Omnigraph::open_with(root, mode).await {
            Ok(g) => {
                out.insert(id.clone(), (root.clone(), g));
            }
            Err(e) => warn!(graph = %id, root = %root, error = %e, "graph failed to open; not serving it"),
        }
    }
    out
}

/// Each served graph's stored queries, every one type-checked against the
/// graph's main schema: one that does not check stops the start, naming
/// its file and line.
async fn stored_queries(
    config: &StoredQueries,
    graphs: &BTreeMap<String, (String, Graph)>,
) -> Result<BTreeMap<String, Arc<Registry>>> {
    if let Some(id) = config.unserved(|id| graphs.contains_key(id)) {
        return Err(OmniError::BadRequest(format!("--graph-queries names graph `{id}`, which is not served")));
    }
    let mut out = BTreeMap::new();
    for (id, (_, g)) in graphs {
        let Some(registry) = config.of(Some(id)) else { continue };
        let schema = g.schema().await?;
        registry
            .check(&schema.catalog)
            .map_err(|e| OmniError::BadRequest(format!("stored queries of graph `{id}`: {e}")))?;
        out.insert(id.clone(), registry.clone());
    }
    Ok(out)
}

/// Bind, print the bound address, and serve until `shutdown` completes; then
/// stop accepting, let in-flight requests finish for at most
/// [`ServerConfig::shutdown_timeout`], drop what is left and return (the
/// graphs are closed once this returns).
pub async fn serve(config: ServerConfig, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
    if !config.auth.is_configured() && !config.unauthenticated {
        return Err(OmniError::BadRequest(
            "no bearer token configured: set OMNIGRAPH_SERVER_TOKENS_FILE or OMNIGRAPH_SERVER_BEARER_TOKEN, or pass --unauthenticated"
                .into(),
        ));
    }
    if config.gate.has_policy() && !config.auth.is_configured() {
        return Err(OmniError::BadRequest(
            "a policy needs bearer tokens to know who asks: set OMNIGRAPH_SERVER_TOKENS_FILE or \
             OMNIGRAPH_SERVER_BEARER_TOKEN"
                .into(),
        ));
    }
    if let Some(id) = config.gate.policies.unserved(|id| config.graphs.iter().any(|(g, _)| g == id)) {
        return Err(OmniError::BadRequest(format!("--graph-policy names graph `{id}`, which no --graph serves")));
    }
    if config.max_connections == 0 {
        return Err(OmniError::BadRequest("max_connections must be at least 1".into()));
    }
    if config.header_timeout.is_zero() {
        return Err(OmniError::BadRequest("header_timeout must be more than zero".into()));
    }
    let limits = listener::Limits {
        header_timeout: config.header_timeout,
        max_connections: listener::cap_to_descriptor_limit(config.max_connections),
        shutdown_timeout: config.shutdown_timeout,
    };
    let mode = if config.read_only {
        // A replica never writes: no background recovery (a pending sidecar
        // is reported by `/recovery`, resolved by the writer), and views of
        // the heads are reused for the refresh interval.
        crate::actors::runtime::set_background_recovery(false);
        crate::actors::replica::set_refresh_interval(config.refresh_interval);
        OpenMode::ReadOnly
    } else {
        OpenMode::ReadWrite
    };
    let graphs = open_graphs(&config.graphs, mode).await;
    for (id, (_, g)) in graphs.iter().filter(|_| !config.read_only) {
        let lag = config.index_lag_rows.unwrap_or_else(|| crate::actors::index_folder::default_lag_rows(g.root()));
        if lag == 0 {
            continue;
        }
        if let Err(e) = g.fold_indexes_in_background(lag) {
            warn!(graph = %id, error = %e, "background index folding not started");
        }
    }
    let queries = stored_queries(&config.queries, &graphs).await?;
    let state = Arc::new(AppState {
        graphs,
        auth: config.auth.clone(),
        unauthenticated: config.unauthenticated,
        gate: config.gate.clone(),
        queries,
        mcp: config.mcp,
        inflight: DashMap::new(),
        max_inflight: config.max_inflight_writes_per_actor.max(1),
        read_limits: config.read_limits,
        read_only: config.read_only,
        connections: Arc::default(),
        allocator_stats: config.allocator_stats,
    });
    let listener = tokio::net::TcpListener::bind(&config.bind)
        .await
        .map_err(|e| OmniError::BadRequest(format!("cannot bind {}: {e}", config.bind)))?;
    let addr: SocketAddr = listener.local_addr().map_err(|e| OmniError::Internal(e.to_string()))?;
    println!("OMNIGRAPH_LISTEN_ADDR={addr}");
    info!(%addr, graphs = state.graphs.len(), "serving");
    let default_graph = match &config.default_graph {
        Some(id) if !state.graphs.contains_key(id) => {
            return Err(OmniError::BadRequest(format!("--default-graph `{id}` is not among the served graphs")));
        }
        Some(id) => Some(id.clone()),
        None if state.graphs.len() == 1 => state.graphs.keys().next().cloned(),
        None => None,
    };
    let default_graph = default_graph.as_deref().map(middleware::path_segment);
    let connections = Arc::clone(&state.connections);
    let (router, mcp) = routes::router(state);
    let app = tower::ServiceExt::map_request(router, move |req: Request<Incoming>| {
        middleware::flat_to_graph(default_graph.as_deref(), req.map(axum::body::Body::new))
    });
    info!(
        header_timeout = ?limits.header_timeout,
        max_connections = limits.max_connections,
        shutdown_timeout = ?limits.shutdown_timeout,
        "connection limits"
    );
    listener::serve(listener, app, limits, connections, shutdown).await;
    mcp.clear();
    Ok(())
}
