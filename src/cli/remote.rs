//! The CLI as a client of a running `omnigraph serve`: `--server URL
//! [--graph ID]` sends the command over HTTP instead of opening storage.
//! The answer is the HTTP body, which is what `--json` prints on the
//! embedded path too, so both print through the same code; a 4xx or 5xx
//! comes back as the server's own typed error ([`OmniError::Remote`]).

use omnigraph::{OmniError, Result};
use serde_json::Value;

use super::operator;

/// A daemon and the graph on it a command addresses.
pub struct Remote {
    base: String,
    graph: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Remote {
    /// `server` (an `http://` or `https://` URL, or the name of one of
    /// config.yaml's `servers`) and its graph `graph` (default `default`,
    /// the id `serve` gives a lone graph). The bearer token is the keyed
    /// one of the operator server the URL belongs to, else
    /// `OMNIGRAPH_BEARER_TOKEN` ([`operator::token_for`]).
    pub fn new(server: &str, graph: Option<&str>) -> Result<Remote> {
        let base =
            operator::config()?.server_url(server).map_err(|e| OmniError::BadRequest(format!("--server: {e}")))?;
        let token = operator::token_for(&base)?;
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| OmniError::Internal(format!("building the HTTP client: {e}")))?;
        Ok(Remote { base, graph: graph.unwrap_or("default").to_string(), token, http })
    }

    /// Where a write goes, for the target echo: `URL (graph ID)`.
    pub fn describe(&self) -> String {
        format!("{} (graph {})", self.base, self.graph)
    }

    fn url(&self, tail: &str) -> String {
        format!("{}/graphs/{}{tail}", self.base, self.graph)
    }

    /// `GET /graphs/{id}{tail}?query`.
    pub async fn get(&self, tail: &str, query: &[(&str, String)]) -> Result<Value> {
        self.answer(self.http.get(self.url(tail)).query(query)).await
    }

    /// `POST /graphs/{id}{tail}` with a JSON body (and extra headers).
    pub async fn post(&self, tail: &str, body: &Value, headers: &[(&str, &str)]) -> Result<Value> {
        let mut req = self.http.post(self.url(tail)).json(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.answer(req).await
    }

    /// `DELETE /graphs/{id}{tail}?query`.
    pub async fn delete(&self, tail: &str, query: &[(&str, String)]) -> Result<Value> {
        self.answer(self.http.delete(self.url(tail)).query(query)).await
    }

    /// `POST /graphs/{id}{tail}?query` with raw bytes of `content_type`.
    pub async fn post_bytes(
        &self,
        tail: &str,
        query: &[(&str, String)],
        content_type: &str,
        data: Vec<u8>,
    ) -> Result<Value> {
        let req = self.http.post(self.url(tail)).query(query).header("content-type", content_type).body(data);
        self.answer(req).await
    }

    /// `GET /graphs`: every graph the daemon serves.
    pub async fn graphs(&self) -> Result<Value> {
        self.answer(self.http.get(format!("{}/graphs", self.base))).await
    }

    async fn answer(&self, req: reqwest::RequestBuilder) -> Result<Value> {
        let response = self.send(req).await?;
        let status = response.status().as_u16();
        let body = self.body(response, status).await?;
        Ok(body)
    }

    /// `POST /graphs/{id}{tail}` answered with a stream (an export): the
    /// response, read chunk by chunk by the caller.
    pub async fn post_streamed(&self, tail: &str, body: &Value) -> Result<reqwest::Response> {
        self.send(self.http.post(self.url(tail)).json(body)).await
    }

    /// Send `req` with the token; a status other than 2xx is the server's
    /// typed error.
    async fn send(&self, mut req: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let response = req.send().await.map_err(|e| self.unreachable(&e))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let body = self.body(response, status).await?;
        Err(OmniError::Remote { status, body })
    }

    /// A response's JSON body (a text that is not JSON, as an error body).
    async fn body(&self, response: reqwest::Response, status: u16) -> Result<Value> {
        let text = response.text().await.map_err(|e| self.unreachable(&e))?;
        Ok(serde_json::from_str(&text).unwrap_or_else(
            |_| serde_json::json!({ "error": format!("the server answered {status}: {text}"), "code": "internal" }),
        ))
    }

    /// A transport failure, read like the daemon's own 503 (exit 1).
    pub fn unreachable(&self, e: &reqwest::Error) -> OmniError {
        let error = format!("cannot reach the server at {}: {}", self.base, root_cause(e));
        OmniError::Remote { status: 503, body: serde_json::json!({ "error": error, "code": "unavailable" }) }
    }
}

/// The innermost cause of a transport error (`connection refused`), which
/// says more than reqwest's outer `error sending request`.
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    cause.to_string()
}
