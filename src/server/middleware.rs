//! What every answer passes through: a request id, a typed JSON body on
//! every error (framework rejections, unknown routes and wrong methods
//! included), no server filesystem path in any error body, and the flat
//! single-graph routes rewritten onto `/graphs/{id}/…`.

use std::sync::Arc;

use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::AppState;
use crate::protocol::error::status_code;

/// The header carrying the request id (the client's, when it sent a usable one).
pub(crate) const REQUEST_ID: &str = "x-request-id";

/// Error bodies larger than this are not rewritten (none of ours is).
const ERROR_BODY_LIMIT: usize = 256 * 1024;

/// The client's request id when it is short, visible ASCII; else a new ULID.
fn request_id(req: &Request) -> String {
    req.headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| ulid::Ulid::new().to_string())
}

/// One `tracing` span per request carrying its id (the write sagas' spans,
/// with the operation id, nest inside it); the id is echoed on the answer.
pub(crate) async fn log_request(req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let id = request_id(&req);
    let span = tracing::info_span!("http", request_id = %id, method = %req.method(), path = %req.uri().path());
    let started = std::time::Instant::now();
    let mut resp = next.run(req).instrument(span.clone()).await;
    span.in_scope(|| {
        tracing::info!(status = resp.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "request")
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

/// Every error answer as `{error, code, …}` JSON, with every served graph's
/// root location replaced by `<graph>`: axum's own rejections (plain text or
/// empty) get a body, and a storage error that names a file keeps no path.
pub(crate) async fn json_errors(State(s): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match to_bytes(body, ERROR_BODY_LIMIT).await {
        Ok(b) => b,
        Err(_) => {
            return (
                status,
                axum::Json(json!({"error": "error body unavailable", "code": status_code(status.as_u16())})),
            )
                .into_response();
        }
    };
    let is_json =
        parts.headers.get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let mut value = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v @ Value::Object(_)) if is_json => v,
        _ => {
            let text = String::from_utf8_lossy(&bytes).trim().to_string();
            let message = if text.is_empty() { default_message(status) } else { text };
            json!({ "error": message })
        }
    };
    if let Some(obj) = value.as_object_mut() {
        obj.entry("code").or_insert_with(|| status_code(status.as_u16()).into());
    }
    let text = scrub_paths(&s, &value.to_string());
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(text))
}

fn default_message(status: StatusCode) -> String {
    match status {
        StatusCode::NOT_FOUND => "no such route".to_string(),
        StatusCode::METHOD_NOT_ALLOWED => "method not allowed on this route".to_string(),
        s => s.canonical_reason().unwrap_or("error").to_lowercase(),
    }
}

/// `text` with every served root's location (as given, as a path, and as a
/// `file://` URI) replaced by `<graph>`.
fn scrub_paths(s: &AppState, text: &str) -> String {
    let mut out = text.to_string();
    for (root, graph) in s.graphs.values() {
        let mut forms = vec![graph.root().uri().to_string(), root.clone()];
        if let Some(path) = graph.root().uri().strip_prefix("file://") {
            forms.push(path.to_string());
        }
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        for f in forms.iter().filter(|f| f.len() > 1) {
            // Inside a JSON string a `/` may not be escaped, but a `\` is.
            out = out.replace(f.as_str(), "<graph>").replace(&f.replace('\\', "\\\\"), "<graph>");
        }
    }
    out
}

/// A graph id as one percent-encoded path segment (computed once per
/// server, not per request).
pub(crate) fn path_segment(id: &str) -> String {
    id.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Rewrite a flat route (`/snapshot`, `/query`, …) onto the default graph's
/// `/graphs/{id}/…` when the daemon has one, so a client configured with the
/// server's base URL works as with a single-graph server. Runs before
/// routing (it wraps the whole router).
/// `default_graph` is the id already encoded by [`path_segment`].
pub(crate) fn flat_to_graph(default_graph: Option<&str>, mut req: Request) -> Request {
    let Some(encoded) = default_graph else { return req };
    let path = req.uri().path();
    let is_own = path == "/"
        || path == "/healthz"
        || path == "/openapi.json"
        || path == "/graphs"
        || path.starts_with("/graphs/");
    if is_own {
        return req;
    }
    let rewritten = match req.uri().query() {
        Some(q) => format!("/graphs/{encoded}{path}?{q}"),
        None => format!("/graphs/{encoded}{path}"),
    };
    if let Ok(uri) = rewritten.parse::<Uri>() {
        *req.uri_mut() = uri;
    }
    req
}
