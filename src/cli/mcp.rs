//! `omnigraph mcp --server URL [--graph ID]`: an MCP server on stdio whose
//! tools call a running daemon's routes over HTTP with this process's token
//! (the `--server` token rules of every remote command), so the daemon's
//! policies decide what the agent behind it may do.

use std::sync::Arc;

use omnigraph::engine::mcp_tools::RouteCall;
use omnigraph::mcp::{Caller, Daemon, Handler};
use omnigraph::{OmniError, Result};
use rmcp::ServiceExt;
use serde_json::Value;

use super::remote::Remote;

/// The daemon, over HTTP.
struct OverHttp(Remote);

#[async_trait::async_trait]
impl Daemon for OverHttp {
    async fn call(&self, _caller: &Caller, call: &RouteCall) -> std::result::Result<(u16, Value), String> {
        let answer = match call {
            RouteCall::Get { path, query } => {
                let query: Vec<(&str, String)> = query.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                self.0.get(path, &query).await
            }
            RouteCall::Post { path, body } => self.0.post(path, body, &[]).await,
        };
        match answer {
            Ok(body) => Ok((200, body)),
            // The daemon's typed error (or a transport failure, read as its 503).
            Err(OmniError::Remote { status, body }) => Ok((status, body)),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Serve MCP on stdin/stdout until the client closes it.
pub async fn run(server: &str, graph: Option<&str>) -> Result<()> {
    let handler = Handler::new(Arc::new(OverHttp(Remote::new(server, graph)?)));
    let running = handler
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| OmniError::BadRequest(format!("the MCP client did not initialize: {e}")))?;
    running.waiting().await.map_err(|e| OmniError::Internal(format!("the MCP session ended abnormally: {e}")))?;
    Ok(())
}
