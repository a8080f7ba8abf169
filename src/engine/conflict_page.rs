//! A refused merge's answer: every conflict counted per type and kind, one
//! page of them listed with their values, and a token for the next page.
//!
//! A merge with many conflicts is classified whole each time (the counts
//! need all of them), but values are read only for the page answered. A
//! page token binds the two branch heads it was made for: once either
//! moves, the conflicts are another set, and the token is refused.

use serde::{Deserialize, Serialize};

use crate::engine::conflict_values::{self, Sides};
use crate::engine::storage::Root;
use crate::engine::three_way::{ConflictCursor, ConflictSet, MergeConflict};
use crate::engine::token;
use crate::protocol::{OmniError, Result};

/// Conflicts listed per page unless asked otherwise.
pub const DEFAULT_PAGE: usize = 1_000;
/// The most conflicts one page lists: as many as get their values, so every
/// listed row conflict carries them.
pub const MAX_PAGE: usize = conflict_values::VALUED_CONFLICTS;

/// Which page of a refused merge's conflicts to answer.
#[derive(Debug, Clone, Default)]
pub struct ConflictPage {
    /// A `next_page_token` of an earlier answer (`None`: the first page).
    pub token: Option<String>,
    /// Conflicts per page ([`DEFAULT_PAGE`]; 1 to [`MAX_PAGE`]).
    pub limit: Option<usize>,
}

/// What a page token carries: the heads the conflicts were found between,
/// and the last conflict of the page before.
#[derive(Debug, Serialize, Deserialize)]
struct PageToken {
    source_head: String,
    target_head: String,
    after: ConflictCursor,
}

/// The heads a page is read between: `(source, target)` commit ids.
pub type Heads<'a> = (&'a str, &'a str);

impl ConflictPage {
    /// Check the limit and the token's form before any work: a bad page
    /// request is refused at once (400).
    pub fn check(&self) -> Result<()> {
        self.limit()?;
        self.cursor(None).map(drop)
    }

    fn limit(&self) -> Result<usize> {
        match self.limit.unwrap_or(DEFAULT_PAGE) {
            n @ 1..=MAX_PAGE => Ok(n),
            n => Err(OmniError::BadRequest(format!("limit {n}: a page lists 1 to {MAX_PAGE} conflicts"))),
        }
    }

    /// The cursor the token resumes after; with `heads`, also checked to
    /// have been made between those heads.
    fn cursor(&self, heads: Option<Heads<'_>>) -> Result<Option<ConflictCursor>> {
        let Some(text) = &self.token else { return Ok(None) };
        let token: PageToken = token::decode(text).ok_or_else(|| {
            OmniError::BadRequest("page token rejected: it was not made by a merge of this graph".into())
        })?;
        if let Some((source, target)) = heads
            && (token.source_head != source || token.target_head != target)
        {
            return Err(OmniError::BadRequest(
                "page token rejected: a branch moved since the first page (its conflicts are another set); \
                 merge again without a token"
                    .into(),
            ));
        }
        Ok(Some(token.after))
    }
}

/// The refusal for `conflicts` (valueless, as classified and validated):
/// their counts and the asked page, with the values of its row conflicts
/// read at the three `sides`.
pub async fn refusal(
    root: &Root,
    sides: &Sides<'_>,
    heads: Heads<'_>,
    page: &ConflictPage,
    mut conflicts: Vec<MergeConflict>,
) -> Result<OmniError> {
    conflicts.sort();
    conflicts.dedup();
    let after = page.cursor(Some(heads))?;
    let (listed, next) = ConflictSet::page(&conflicts, after.as_ref(), page.limit()?);
    let mut valued = conflict_values::attach(root, sides, listed).await?;
    valued.sort();
    let next_page_token = match next {
        Some(after) => {
            let t = PageToken { source_head: heads.0.to_string(), target_head: heads.1.to_string(), after };
            Some(token::encode(&t).map_err(|e| OmniError::Internal(format!("encoding a page token: {e}")))?)
        }
        None => None,
    };
    Ok(OmniError::MergeConflicts(ConflictSet {
        conflicts: valued,
        stat: ConflictSet::count(&conflicts),
        next_page_token,
    }))
}
