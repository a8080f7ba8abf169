//! Diffs between any two refs, paged, and a commit's changes against its
//! first parent in the reference implementation's shape.
//!
//! A page token binds the two commits the first page resolved and the
//! filter, so later pages describe the same diff even when a branch head
//! moves in between; it also holds the position of the last change handed
//! out (pages never split an entity: each has one change).

use serde::{Deserialize, Serialize};

use super::Graph;
use super::refs::ReadAt;
use crate::engine::diff::{self, Change, DiffFilter, Op, PropertyDrift, TypeStats};
use crate::engine::manifest::CommitRow;
use crate::engine::token;
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
    /// Types whose properties differ between the two sides (a schema apply
    /// between them); absent when none do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema: Vec<PropertyDrift>,
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
    /// Types whose properties differ between the two sides; absent when
    /// none do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema: Vec<PropertyDrift>,
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
        token::encode(self).map_err(|e| OmniError::Internal(format!("encoding a page token: {e}")))
    }

    fn decode(text: &str) -> Result<PageToken> {
        token::decode(text)
            .ok_or_else(|| OmniError::BadRequest("page token rejected: it was not made by a diff of this graph".into()))
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
        let token = page_token.map(PageToken::decode).transpose()?;
        // A token pins the commits of the first page.
        let (from, to) = match &token {
            Some(t) => (t.from.as_str(), t.to.as_str()),
            None => (from, to),
        };
        let (a, b) = (self.read_at(from).await?, self.read_at(to).await?);
        filter.check(&a.view, &b.view)?;
        let schema = diff::drift(self.root(), &a.view, &b.view, filter).await?;
        Ok(DiffPage { schema, ..self.diff_page(a, b, filter, token, limit).await? })
    }

    /// One page of the diff between two resolved read points.
    async fn diff_page(
        &self,
        a: ReadAt,
        b: ReadAt,
        filter: &DiffFilter,
        token: Option<PageToken>,
        limit: Option<usize>,
    ) -> Result<DiffPage> {
        let limit = limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(OmniError::BadRequest(format!("limit {limit}: a page holds 1 to {MAX_PAGE} changes")));
        }
        if let Some(t) = &token
            && (t.filter != *filter || t.from != a.commit_id || t.to != b.commit_id)
        {
            return Err(OmniError::BadRequest("page token rejected: it was made for another diff or filter".into()));
        }
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
        Ok(DiffPage { from: a.commit_id, to: b.commit_id, changes, schema: Vec::new(), next_page_token })
    }

    /// Insert, update and delete counts per type from `from` to `to`.
    pub async fn diff_stats(&self, from: &str, to: &str, filter: &DiffFilter) -> Result<DiffStats> {
        let (a, b) = (self.read_at(from).await?, self.read_at(to).await?);
        filter.check(&a.view, &b.view)?;
        let stats = diff::stats(self.root(), &a.view, &b.view, filter).await?;
        let schema = diff::drift(self.root(), &a.view, &b.view, filter).await?;
        Ok(DiffStats { from: a.commit_id, to: b.commit_id, stats, schema })
    }

    /// The entities commit `commit` (any ref) changed against its first
    /// parent, in the reference implementation's shape: one page of at most
    /// `limit`. A token from another commit or filter is refused with the
    /// reference's `change cursor rejected:` prefix.
    pub async fn commit_changes(
        &self,
        commit: &str,
        filter: &DiffFilter,
        page_token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<CommitChanges> {
        let row = self.resolve_commit(commit).await?;
        let Some(parent) = row.parent.clone() else {
            return Err(OmniError::ParentlessCommit { graph_commit_id: row.commit_id });
        };
        let (a, b) = (self.read_at(&parent).await?, self.read_at(&row.commit_id).await?);
        filter.check(&a.view, &b.view)?;
        self.block_page(&row, a, b, filter, page_token, limit).await
    }

    /// One page of commit `row`'s block: its changes from `parent` to
    /// `this` (its own state). Token refusals carry the reference's
    /// `change cursor rejected:` prefix.
    pub(super) async fn block_page(
        &self,
        row: &CommitRow,
        parent: ReadAt,
        this: ReadAt,
        filter: &DiffFilter,
        page_token: Option<&str>,
        limit: Option<usize>,
    ) -> Result<CommitChanges> {
        let rejected = |e: OmniError| match e {
            OmniError::BadRequest(m) if m.starts_with("page token rejected: ") => OmniError::BadRequest(format!(
                "change cursor rejected: {}",
                m.strip_prefix("page token rejected: ").unwrap_or(&m)
            )),
            other => other,
        };
        let token = page_token.map(PageToken::decode).transpose().map_err(rejected)?;
        let page = self.diff_page(parent, this, filter, token, limit).await.map_err(rejected)?;
        let changes = page.changes.iter().map(EntityChange::from).collect();
        Ok(CommitChanges { cause: ChangeCause::of(row), changes, next_page_token: page.next_page_token })
    }
}

/// The commit a block of changes belongs to (the reference's cause block).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCause {
    /// The commit.
    pub graph_commit_id: String,
    /// Its first parent, which it is diffed against.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent_commit_id: Option<String>,
    /// Its merged parent, for a merge commit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merged_parent_commit_id: Option<String>,
    /// The branch it was made on.
    pub authored_branch: String,
    /// Who made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// When, in microseconds since the Unix epoch.
    pub authored_at: i64,
}

impl ChangeCause {
    /// The cause block of commit `row`.
    pub(super) fn of(row: &CommitRow) -> ChangeCause {
        ChangeCause {
            graph_commit_id: row.commit_id.clone(),
            parent_commit_id: row.parent.clone(),
            merged_parent_commit_id: row.merged_parent.clone(),
            authored_branch: row.branch.clone(),
            actor_id: row.actor.clone(),
            authored_at: row.created_at_us,
        }
    }
}

/// A type as the reference names it: a stable id (kept across a rename) and
/// its name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeType {
    /// Stable type id.
    pub id: String,
    /// Type name.
    pub name: String,
}

/// An edge's ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeEndpoints {
    /// Source node id.
    pub from: String,
    /// Destination node id.
    pub to: String,
}

/// One entity image: its properties (without `id`), and an edge's ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeImage {
    /// Every non-null property.
    pub properties: serde_json::Map<String, serde_json::Value>,
    /// An edge's ends (absent for nodes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<ChangeEndpoints>,
}

/// One entity change in the reference's shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntityChange {
    /// `node` or `edge`.
    pub kind: &'static str,
    /// The type.
    #[serde(rename = "type")]
    pub entity_type: ChangeType,
    /// The entity's id.
    pub id: String,
    /// What happened.
    pub op: Op,
    /// The image before (updates and deletes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<ChangeImage>,
    /// The image after (inserts and updates).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<ChangeImage>,
}

/// An [`EntityChange`] as an answer carries it (its `kind` owned).
#[derive(Deserialize)]
struct EntityChangeWire {
    kind: String,
    #[serde(rename = "type")]
    entity_type: ChangeType,
    id: String,
    op: Op,
    before: Option<ChangeImage>,
    after: Option<ChangeImage>,
}

impl<'de> Deserialize<'de> for EntityChange {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<EntityChange, D::Error> {
        let w = EntityChangeWire::deserialize(d)?;
        let kind = match w.kind.as_str() {
            "node" => "node",
            "edge" => "edge",
            other => return Err(serde::de::Error::custom(format!("an entity kind `{other}`: expected node or edge"))),
        };
        Ok(EntityChange { kind, entity_type: w.entity_type, id: w.id, op: w.op, before: w.before, after: w.after })
    }
}

/// One page of a commit's changes: `{cause, changes, next_page_token?}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitChanges {
    /// The commit.
    pub cause: ChangeCause,
    /// This page's changes, in the frozen order.
    pub changes: Vec<EntityChange>,
    /// The token of the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

impl From<&Change> for EntityChange {
    fn from(c: &Change) -> Self {
        EntityChange {
            kind: c.kind,
            entity_type: ChangeType { id: c.type_id.clone(), name: c.type_name.clone() },
            id: c.id.clone(),
            op: c.op,
            before: c.before.as_ref().map(change_image),
            after: c.after.as_ref().map(change_image),
        }
    }
}

/// A diff image (`id`, properties, `endpoints`) in the reference's shape.
fn change_image(image: &serde_json::Value) -> ChangeImage {
    let mut properties = image.as_object().cloned().unwrap_or_default();
    properties.remove("id");
    let endpoints = properties.remove("endpoints").and_then(|e| {
        Some(ChangeEndpoints { from: e["from"].as_str()?.to_string(), to: e["to"].as_str()?.to_string() })
    });
    ChangeImage { properties, endpoints }
}
