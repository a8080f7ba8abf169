//! Diffs between any two refs, paged.
//!
//! A page token binds the two commits the first page resolved and the
//! filter, so later pages describe the same diff even when a branch head
//! moves in between; it also holds the position of the last change handed
//! out (pages never split an entity: each has one change).

use serde::{Deserialize, Serialize};

use super::Graph;
use crate::engine::diff::{self, Change, DiffFilter, Op, TypeStats};
use crate::protocol::{OmniError, Result};

/// Changes per page unless asked otherwise.
pub const DEFAULT_PAGE: usize = 1000;
/// The most changes one page holds.
pub const MAX_PAGE: usize = 10_000;

/// One page of a diff: `{from, to, changes, next_page_token?}`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffPage {
    /// The commit `from` resolved to.
    pub from: String,
    /// The commit `to` resolved to.
    pub to: String,
    /// This page's changes, in the frozen order.
    pub changes: Vec<Change>,
    /// The token of the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// A diff's counts: `{from, to, stats}`.
#[derive(Debug, Clone, Serialize)]
pub struct DiffStats {
    /// The commit `from` resolved to.
    pub from: String,
    /// The commit `to` resolved to.
    pub to: String,
    /// Per type with any change.
    pub stats: Vec<TypeStats>,
}

/// What a page token carries.
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct PageToken {
    from: String,
    to: String,
    filter: DiffFilter,
    after: (u8, String, String, Op),
}

impl PageToken {
    fn encode(&self) -> Result<String> {
        let json = serde_json::to_vec(self).map_err(|e| OmniError::Internal(format!("encoding a page token: {e}")))?;
        Ok(json.iter().map(|b| format!("{b:02x}")).collect())
    }

    fn decode(text: &str) -> Result<PageToken> {
        let bad = || OmniError::BadRequest("page token rejected: it was not made by a diff of this graph".into());
        if !text.len().is_multiple_of(2) || text.len() > 8192 {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> =
            (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect();
        serde_json::from_slice(&bytes.ok_or_else(bad)?).map_err(|_| bad())
    }
}

impl Graph {
    /// The changes from `from` to `to` (any refs) that `filter` keeps, one
    /// page of at most `limit` ([`DEFAULT_PAGE`]; at most [`MAX_PAGE`]).
    pub async fn diff(
        &self,
        from: &str,
        to: &str,
        filter: &DiffFilter,
        page_token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<DiffPage> {
        let limit = limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(OmniError::BadRequest(format!("limit {limit}: a page holds 1 to {MAX_PAGE} changes")));
        }
        let token = page_token.map(PageToken::decode).transpose()?;
        if let Some(t) = &token
            && t.filter != *filter
        {
            return Err(OmniError::BadRequest("page token rejected: it was made for another filter".into()));
        }
        // A token pins the commits of the first page.
        let (from, to) = match &token {
            Some(t) => (t.from.as_str(), t.to.as_str()),
            None => (from, to),
        };
        let (a, b) = (self.read_at(from).await?, self.read_at(to).await?);
        filter.check(&a.view, &b.view)?;
        let all = diff::changes(self.root(), &a.view, &b.view, filter).await?;
        let start = match &token {
            Some(t) => {
                let after = (t.after.0, t.after.1.as_str(), t.after.2.as_str(), t.after.3);
                all.partition_point(|c| c.sort_key() <= after)
            }
            None => 0,
        };
        let changes: Vec<Change> = all.iter().skip(start).take(limit).cloned().collect();
        let next_page_token = match changes.last() {
            Some(last) if start + changes.len() < all.len() => {
                let (k, t, id, op) = last.sort_key();
                let after = (k, t.to_string(), id.to_string(), op);
                let next =
                    PageToken { from: a.commit_id.clone(), to: b.commit_id.clone(), filter: filter.clone(), after };
                Some(next.encode()?)
            }
            _ => None,
        };
        Ok(DiffPage { from: a.commit_id, to: b.commit_id, changes, next_page_token })
    }

    /// Insert, update and delete counts per type from `from` to `to`.
    pub async fn diff_stats(&self, from: &str, to: &str, filter: &DiffFilter) -> Result<DiffStats> {
        let (a, b) = (self.read_at(from).await?, self.read_at(to).await?);
        filter.check(&a.view, &b.view)?;
        let stats = diff::stats(self.root(), &a.view, &b.view, filter).await?;
        Ok(DiffStats { from: a.commit_id, to: b.commit_id, stats })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_tokens_round_trip_and_refuse_tampering() {
        let t = PageToken {
            from: "A".into(),
            to: "B".into(),
            filter: DiffFilter::default(),
            after: (0, "Person".into(), "p1".into(), Op::Update),
        };
        let text = t.encode().expect("encode");
        assert_eq!(PageToken::decode(&text).expect("decode"), t);
        for bad in ["", "zz", "abc", &text[..text.len() - 2], "7b7d"] {
            assert!(matches!(PageToken::decode(bad), Err(OmniError::BadRequest(_))), "{bad:?}");
        }
    }
}
