//! `serve --mcp`: the MCP server ([`crate::mcp`]) at `/graphs/{id}/mcp`
//! (and `/mcp` by the flat rewrite), over MCP's streamable HTTP, stateless
//! (each POST is answered as JSON; no session to keep). Its tools call the
//! daemon's own router in process, with the caller's `Authorization`, so
//! every tool call passes the same tokens, policies and limits as the route
//! it stands for.

use std::sync::{Arc, RwLock};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{Method, Request, header};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};

use crate::engine::mcp_tools::RouteCall;
use crate::mcp::{Caller, Daemon, Handler};

/// The largest answer a tool call reads from a route.
const ANSWER_LIMIT: usize = 256 * 1024 * 1024;

/// The router the endpoint's tools call: set once the router that holds
/// the endpoint is built, cleared when the daemon stops (holding the
/// endpoint, it would otherwise keep the daemon's state, and so every
/// graph's actors, alive past the end).
#[derive(Clone, Default)]
pub(crate) struct Inner(Arc<RwLock<Option<Router>>>);

impl Inner {
    /// The router the tools call from now on.
    pub(crate) fn set(&self, router: Router) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(router);
    }

    /// Drop it (the daemon stopped).
    pub(crate) fn clear(&self) {
        self.0.write().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn get(&self) -> Option<Router> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The daemon's router, reached in process.
struct InProcess {
    router: Inner,
}

#[async_trait::async_trait]
impl Daemon for InProcess {
    async fn call(&self, caller: &Caller, call: &RouteCall) -> Result<(u16, Value), String> {
        let router = self.router.get().ok_or("the daemon is not serving")?;
        let graph = caller.graph.as_deref().ok_or("no graph in the MCP endpoint's path")?;
        let (method, uri, body) = match call {
            RouteCall::Get { path, query } => {
                let query = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(query).finish();
                (Method::GET, format!("/graphs/{graph}{path}?{query}"), Body::empty())
            }
            RouteCall::Post { path, body } => {
                (Method::POST, format!("/graphs/{graph}{path}"), Body::from(body.to_string()))
            }
        };
        let mut request = Request::builder().method(method).uri(uri).header(header::CONTENT_TYPE, "application/json");
        if let Some(auth) = &caller.authorization {
            request = request.header(header::AUTHORIZATION, auth);
        }
        let request = request.body(body).map_err(|e| format!("building the route request: {e}"))?;
        let response = match tower::ServiceExt::oneshot(router, request).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = response.status().as_u16();
        let bytes =
            to_bytes(response.into_body(), ANSWER_LIMIT).await.map_err(|e| format!("reading the answer: {e}"))?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| json!({"error": String::from_utf8_lossy(&bytes).trim().to_string()}));
        Ok((status, body))
    }
}

/// The endpoint's service, and where to put the finished router.
/// `open_hosts`: accept any `Host` (tokens guard the daemon); without
/// tokens only loopback names are accepted, so a web page cannot reach an
/// unauthenticated daemon by DNS rebinding.
pub(crate) fn service(
    body_limit: usize,
    open_hosts: bool,
) -> (StreamableHttpService<Handler, NeverSessionManager>, Inner) {
    let router = Inner::default();
    let handler = Handler::new(Arc::new(InProcess { router: router.clone() }));
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(body_limit);
    if open_hosts {
        config = config.disable_allowed_hosts();
    }
    let service =
        StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(NeverSessionManager::default()), config);
    (service, router)
}
