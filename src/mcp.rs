//! The MCP server (the `rmcp` crate): a graph's stored queries and its
//! read-only built-ins as MCP tools ([`crate::engine::mcp_tools`]). Every
//! tool call is a request to the daemon's own routes, made as the caller,
//! so the daemon's tokens, policies and errors apply unchanged. Two ways in
//! share this handler: `serve --mcp` (streamable HTTP at `/graphs/{id}/mcp`,
//! the routes reached in process) and `omnigraph mcp --server URL` (stdio,
//! the routes reached over HTTP).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::engine::mcp_tools::{self, RouteCall};
use crate::engine::stored_queries::CatalogEntry;

/// Who calls a tool, as the transport saw them.
#[derive(Debug, Clone, Default)]
pub struct Caller {
    /// The graph addressed (its id as a path segment); `None`: the
    /// daemon's own choice (the stdio server's `--graph`).
    pub graph: Option<String>,
    /// The caller's `Authorization` header; `None`: the daemon's own token.
    pub authorization: Option<String>,
}

/// A daemon's routes, as the MCP server reaches them.
#[async_trait::async_trait]
pub trait Daemon: Send + Sync + 'static {
    /// Make `call` as `caller`: the answer's status and JSON body, or why
    /// no answer came.
    async fn call(&self, caller: &Caller, call: &RouteCall) -> Result<(u16, Value), String>;
}

/// The MCP server of one daemon.
#[derive(Clone)]
pub struct Handler {
    daemon: Arc<dyn Daemon>,
}

impl Handler {
    /// Serve the routes of `daemon`.
    pub fn new(daemon: Arc<dyn Daemon>) -> Handler {
        Handler { daemon }
    }

    /// The stored queries `caller` may list (none when the daemon serves
    /// none or will not say).
    async fn catalog(&self, caller: &Caller) -> Result<Vec<CatalogEntry>, ErrorData> {
        let list = RouteCall::Get { path: "/queries".into(), query: Vec::new() };
        match self.daemon.call(caller, &list).await {
            Ok((200, body)) => serde_json::from_value(body["queries"].clone())
                .map_err(|e| ErrorData::internal_error(format!("the daemon's query catalog: {e}"), None)),
            Ok(_) => Ok(Vec::new()),
            Err(e) => Err(unreachable(e)),
        }
    }
}

/// A transport that reached no daemon.
fn unreachable(reason: String) -> ErrorData {
    ErrorData::internal_error(reason.clone(), Some(json!({"code": "unavailable", "error": reason})))
}

/// The caller of a request: from its HTTP request when it came over HTTP.
fn caller_of(context: &RequestContext<RoleServer>) -> Caller {
    let Some(parts) = context.extensions.get::<axum::http::request::Parts>() else { return Caller::default() };
    let mut segments = parts.uri.path().split('/').skip(1);
    let graph = match (segments.next(), segments.next()) {
        (Some("graphs"), Some(id)) => Some(id.to_string()),
        _ => None,
    };
    let authorization =
        parts.headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(String::from);
    Caller { graph, authorization }
}

fn tool(spec: mcp_tools::ToolSpec) -> Tool {
    // A stored mutation may delete: the reference's hints.
    let annotations = ToolAnnotations::new().read_only(spec.read_only).destructive(!spec.read_only);
    Tool::new(spec.name, spec.description, Arc::new(spec.input_schema)).annotate(annotations)
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("omnigraph", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "A versioned property graph. Stored queries are tools by name; snapshot, branches_list, \
                 commits_list and diff read any branch or ref.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let catalog = self.catalog(&caller_of(&context)).await?;
        Ok(ListToolsResult::with_all_items(mcp_tools::tools(&catalog).into_iter().map(tool).collect()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&context);
        let catalog = self.catalog(&caller).await?;
        let args = request.arguments.unwrap_or_default();
        let call = match mcp_tools::plan(&request.name, &args, &catalog) {
            Ok(Some(call)) => call,
            Ok(None) => {
                let error = format!("unknown tool `{}`", request.name);
                return Err(ErrorData::invalid_params(
                    error.clone(),
                    Some(json!({"code": "not_found", "error": error})),
                ));
            }
            Err(e) => {
                let error = e.to_string();
                return Err(ErrorData::invalid_params(
                    error.clone(),
                    Some(json!({"code": "bad_request", "error": error})),
                ));
            }
        };
        let (status, body) = self.daemon.call(&caller, &call).await.map_err(unreachable)?;
        // The daemon's own answer either way: its rows, or its `{error, code}`.
        let result = if (200..300).contains(&status) {
            CallToolResult::structured(body)
        } else {
            CallToolResult::structured_error(body)
        };
        Ok(result.into())
    }
}
