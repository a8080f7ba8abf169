//! The change feed's pure parts: where a poll starts, the cursor a caller
//! keeps, and which commits a poll delivers.
//!
//! A feed follows one branch's first-parent history, one block per commit,
//! oldest first. The caller owns its place in it: a cursor names the last
//! commit delivered whole and binds the graph, the branch incarnation and
//! the filter it was made for. A page that ends inside a commit's block
//! carries a page token instead, which also pins the head the poll captured
//! (its cut), so a partial block can never be checkpointed. Walking the
//! history is the graph's.

use serde::{Deserialize, Serialize};

use crate::protocol::{OmniError, Result};
use crate::token;

/// Where a first poll starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedStart {
    /// At the head: no replay.
    Now,
    /// Before the first commit: replay all of the branch's history.
    Beginning,
    /// Just after this commit on the branch's first-parent history.
    After(String),
}

impl std::str::FromStr for FeedStart {
    type Err = OmniError;

    fn from_str(text: &str) -> Result<FeedStart> {
        match text {
            "now" => Ok(FeedStart::Now),
            "beginning" => Ok(FeedStart::Beginning),
            _ => match text.strip_prefix("after:") {
                Some(id) if !id.is_empty() => Ok(FeedStart::After(id.to_string())),
                _ => Err(OmniError::BadRequest(format!(
                    "start `{}`: expected now, beginning or after:<commit id>",
                    text.escape_debug()
                ))),
            },
        }
    }
}

/// What a cursor or page token was made for; a request must match it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedScope {
    /// The graph (its first commit's id).
    pub graph: String,
    /// The branch followed.
    pub branch: String,
    /// That branch's incarnation (a deleted and recreated branch differs).
    pub incarnation: String,
    /// The filter, in a canonical text.
    pub filter: String,
}

/// A place in a feed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t")]
pub enum FeedToken {
    /// Durable: after the commit `last` (`None`: before the first commit).
    #[serde(rename = "cursor")]
    Cursor {
        /// What it binds.
        scope: FeedScope,
        /// The last commit delivered whole.
        last: Option<String>,
    },
    /// The rest of one poll: commits after `last` up to `cut`, resuming
    /// inside `block` at its diff page token `inner`.
    #[serde(rename = "page")]
    Page {
        /// What it binds.
        scope: FeedScope,
        /// The last commit delivered whole.
        last: Option<String>,
        /// The head the poll captured.
        cut: String,
        /// The commit whose block the page ended in.
        block: String,
        /// Where in that block.
        inner: String,
    },
}

impl FeedToken {
    /// The token as text.
    pub fn encode(&self) -> Result<String> {
        token::encode(self).map_err(|e| OmniError::Internal(format!("encoding a feed token: {e}")))
    }

    /// Read a token a caller gave back as `what` (`cursor` or `page
    /// token`), which must be of that kind and made for `scope`.
    pub fn decode(text: &str, what: &str, scope: &FeedScope) -> Result<FeedToken> {
        let rejected = |why: String| OmniError::BadRequest(format!("change cursor rejected: {why}"));
        let t: FeedToken =
            token::decode(text).ok_or_else(|| rejected(format!("this {what} was not made by this graph's feed")))?;
        let (kind, bound) = match &t {
            FeedToken::Cursor { scope, .. } => ("cursor", scope),
            FeedToken::Page { scope, .. } => ("page token", scope),
        };
        if kind != what {
            return Err(rejected(format!("a {kind} was given as a {what}")));
        }
        if bound.graph != scope.graph {
            return Err(rejected("it was made for another graph".into()));
        }
        if bound.branch != scope.branch {
            return Err(rejected(format!("it follows branch `{}`, not `{}`", bound.branch, scope.branch)));
        }
        if bound.incarnation != scope.incarnation {
            return Err(rejected(format!("branch `{}` was deleted and recreated since it was made", scope.branch)));
        }
        if bound.filter != scope.filter {
            return Err(rejected(format!("it was made for the filter {}, not {}", bound.filter, scope.filter)));
        }
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> FeedScope {
        FeedScope { graph: "G".into(), branch: "main".into(), incarnation: "main".into(), filter: "{}".into() }
    }

    #[test]
    fn starts_parse_and_bad_ones_are_refused() {
        assert_eq!("now".parse::<FeedStart>().ok(), Some(FeedStart::Now));
        assert_eq!("beginning".parse::<FeedStart>().ok(), Some(FeedStart::Beginning));
        assert_eq!("after:C1".parse::<FeedStart>().ok(), Some(FeedStart::After("C1".into())));
        for bad in ["", "later", "after:", "after"] {
            assert!(matches!(bad.parse::<FeedStart>(), Err(OmniError::BadRequest(_))), "{bad}");
        }
    }

    #[test]
    fn a_token_is_read_back_only_for_its_kind_and_scope() {
        let c = FeedToken::Cursor { scope: scope(), last: Some("C1".into()) };
        let text = c.encode().expect("encode");
        assert_eq!(FeedToken::decode(&text, "cursor", &scope()).expect("decode"), c);
        let refused = |what: &str, s: FeedScope| match FeedToken::decode(&text, what, &s) {
            Err(OmniError::BadRequest(m)) => m,
            other => panic!("expected a refusal, got {other:?}"),
        };
        assert!(refused("page token", scope()).contains("a cursor was given as a page token"));
        assert!(refused("cursor", FeedScope { graph: "H".into(), ..scope() }).contains("another graph"));
        assert!(refused("cursor", FeedScope { branch: "b".into(), ..scope() }).contains("follows branch `main`"));
        assert!(refused("cursor", FeedScope { incarnation: "x".into(), ..scope() }).contains("recreated"));
        assert!(refused("cursor", FeedScope { filter: "{op}".into(), ..scope() }).contains("filter"));
        for m in [refused("page token", scope()), refused("cursor", FeedScope { graph: "H".into(), ..scope() })] {
            assert!(m.starts_with("change cursor rejected: "), "{m}");
        }
        assert!(FeedToken::decode("00", "cursor", &scope()).is_err());
    }
}
