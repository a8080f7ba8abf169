//! Bearer-token authentication: tokens come from `OMNIGRAPH_SERVER_TOKENS_FILE`
//! (JSON `{actor: token}`) or `OMNIGRAPH_SERVER_BEARER_TOKEN` (actor
//! `default`). Only SHA-256 digests are kept, compared in constant time; the
//! actor recorded on commits comes from the token, never from the client.

use sha2::{Digest, Sha256};

use crate::protocol::{OmniError, Result};

/// The configured tokens (as digests) and their actors.
#[derive(Debug, Clone, Default)]
pub struct Auth {
    tokens: Vec<([u8; 32], String)>,
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Equal without an early exit, so timing does not reveal a prefix.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Auth {
    /// Tokens from the environment; empty when none is configured.
    pub fn from_env() -> Result<Auth> {
        let mut tokens = Vec::new();
        if let Ok(path) = std::env::var("OMNIGRAPH_SERVER_TOKENS_FILE") {
            let text = std::fs::read_to_string(&path)
                .map_err(|e| OmniError::BadRequest(format!("cannot read OMNIGRAPH_SERVER_TOKENS_FILE {path}: {e}")))?;
            let map: std::collections::BTreeMap<String, String> = serde_json::from_str(&text)
                .map_err(|e| OmniError::BadRequest(format!("{path} must be a JSON object {{actor: token}}: {e}")))?;
            tokens.extend(map.into_iter().map(|(actor, token)| (digest(&token), actor)));
        }
        if let Ok(token) = std::env::var("OMNIGRAPH_SERVER_BEARER_TOKEN") {
            tokens.push((digest(&token), "default".to_string()));
        }
        Ok(Auth { tokens })
    }

    /// Tokens given directly (actor, token).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Auth {
        Auth { tokens: pairs.into_iter().map(|(actor, token)| (digest(token), actor.to_string())).collect() }
    }

    /// Whether any token is configured.
    pub fn is_configured(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The actor of an `Authorization` header value, or `Unauthorized`.
    pub fn actor(&self, header: Option<&str>) -> Result<String> {
        let token = header.and_then(|h| h.strip_prefix("Bearer ")).ok_or(OmniError::Unauthorized)?;
        let d = digest(token.trim());
        let mut found = None;
        for (known, actor) in &self.tokens {
            if constant_time_eq(known, &d) {
                found = Some(actor.clone());
            }
        }
        found.ok_or(OmniError::Unauthorized)
    }
}
