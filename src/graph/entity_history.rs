//! One entity's history along a branch's first parents, and blame: which
//! commit last set each of its properties.
//!
//! The walk goes from the branch head back through first parents. A commit
//! whose manifest pins the entity's table where its parent did changed
//! nothing of it and is passed over without a read; otherwise the entity is
//! read at both pins (one filtered scan each, the older read reused by the
//! next step) and compared as a diff compares it. A merge commit is diffed
//! against its first parent, so what a merge brought is the merge's. The
//! walk ends at the first commit cleanup removed.

use serde::Serialize;

use super::Graph;
use super::diff::{ChangeImage, EntityChange};
use crate::engine::branch_name::{self, MAIN};
use crate::engine::diff::{self, Op};
use crate::engine::layout;
use crate::engine::manifest::{CommitRow, ManifestView, TableEntry};
use crate::protocol::{OmniError, Result};

/// One commit that changed the entity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryEntry {
    /// The commit.
    pub graph_commit_id: String,
    /// Who made it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// When, in microseconds since the Unix epoch.
    pub authored_at: i64,
    /// What it did to the entity.
    pub op: Op,
    /// The entity before it (absent for an insert).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<ChangeImage>,
    /// The entity after it (absent for a delete).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<ChangeImage>,
}

/// An entity's history, newest first: `{entries}`.
#[derive(Debug, Clone, Serialize)]
pub struct EntityHistory {
    /// Each commit that changed it.
    pub entries: Vec<HistoryEntry>,
}

/// Who last set one property.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlameLine {
    /// The property (`endpoints` for an edge's ends).
    pub property: String,
    /// The commit that last set it.
    pub graph_commit_id: String,
    /// Its actor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<String>,
    /// When, in microseconds since the Unix epoch.
    pub authored_at: i64,
}

/// Blame of one entity: `{type, id, properties}`.
#[derive(Debug, Clone, Serialize)]
pub struct Blame {
    /// The type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The entity.
    pub id: String,
    /// Each property it has at the head, by name.
    pub properties: Vec<BlameLine>,
}

impl Graph {
    /// The commits on `branch` (default main) that changed entity `id` of
    /// type `type_name`, newest first, at most `limit`; with `property`,
    /// only those that changed it.
    pub async fn entity_history(
        &self,
        type_name: &str,
        id: &str,
        property: Option<&str>,
        branch: Option<&str>,
        limit: Option<usize>,
    ) -> Result<EntityHistory> {
        let limit = limit.unwrap_or(usize::MAX);
        if limit == 0 {
            return Err(OmniError::BadRequest("limit 0: ask for at least one entry".into()));
        }
        let mut entries = Vec::new();
        self.walk_entity(type_name, id, branch, property.is_some(), |row, change, names| {
            let touched = match property {
                Some(p) => change.op != Op::Update || change.changed.iter().any(|c| names.head(&c.property) == p),
                None => true,
            };
            if touched {
                let c = EntityChange::from(&change);
                entries.push(HistoryEntry {
                    graph_commit_id: row.commit_id.clone(),
                    actor_id: row.actor.clone(),
                    authored_at: row.created_at_us,
                    op: change.op,
                    before: c.before,
                    after: c.after,
                });
            }
            entries.len() < limit
        })
        .await?;
        Ok(EntityHistory { entries })
    }

    /// For each property entity `id` of `type_name` has at `branch`'s head
    /// (default main), the commit that last set it.
    pub async fn blame(&self, type_name: &str, id: &str, branch: Option<&str>) -> Result<Blame> {
        let mut open: Vec<String> = Vec::new();
        let mut lines: Vec<BlameLine> = Vec::new();
        let mut first = true;
        let walked = self.walk_entity(type_name, id, branch, true, |row, change, names| {
            if first {
                first = false;
                // The newest change shows the entity as the head has it.
                open = match change.after.as_ref().and_then(|a| a.as_object()) {
                    Some(image) => image.keys().filter(|k| *k != "id").map(|k| names.head(k).to_string()).collect(),
                    None => return false,
                };
            }
            let set: Vec<String> = match change.op {
                Op::Insert => open.clone(),
                Op::Update => change.changed.iter().map(|c| names.head(&c.property).to_string()).collect(),
                // Deleted before it was inserted again: set by that insert.
                Op::Delete => Vec::new(),
            };
            for p in set {
                if !open.contains(&p) {
                    continue;
                }
                open.retain(|o| *o != p);
                let line = BlameLine {
                    property: p,
                    graph_commit_id: row.commit_id.clone(),
                    actor_id: row.actor.clone(),
                    authored_at: row.created_at_us,
                };
                lines.push(line);
            }
            !open.is_empty()
        });
        let key = walked.await?;
        if lines.is_empty() && open.is_empty() && !self.entity_exists(&key, id, branch).await? {
            let what = layout::type_name(&key);
            return Err(OmniError::NotFound(format!("{what} `{id}` on branch `{}`", branch.unwrap_or(MAIN))));
        }
        lines.sort_by(|a, b| a.property.cmp(&b.property));
        Ok(Blame { type_name: layout::type_name(&key).to_string(), id: id.to_string(), properties: lines })
    }

    /// Whether entity `id` of table `key` exists at `branch`'s head.
    async fn entity_exists(&self, key: &str, id: &str, branch: Option<&str>) -> Result<bool> {
        let view = self.rt.view(branch.unwrap_or(MAIN)).await?;
        Ok(diff::entity_at(self.root(), view.state.tables.get(key), id).await?.is_some())
    }

    /// Visit each change of entity `id` along `branch`'s first parents,
    /// newest first, while `visit` answers true; the entity's table key.
    /// A change names properties as the newer of its two commits does;
    /// with `follow_renames`, `visit` also gets the head's name of each
    /// (a property renamed since is followed back under its old names).
    async fn walk_entity(
        &self,
        type_name: &str,
        id: &str,
        branch: Option<&str>,
        follow_renames: bool,
        mut visit: impl FnMut(&CommitRow, diff::Change, &HeadNames) -> bool,
    ) -> Result<String> {
        let branch = branch.unwrap_or(MAIN);
        branch_name::validate_ref(branch)?;
        let view = self.rt.history_view(branch).await?;
        let key = table_key(&view, type_name)?;
        let head = view.state.effective_head(branch).cloned();
        let head = head.ok_or_else(|| OmniError::NotFound(format!("a head commit on branch `{branch}`")))?;
        let mut row = head;
        let mut this = self.pinned(&row, &key).await?;
        let mut after = diff::entity_at(self.root(), this.as_ref(), id).await?;
        let mut names = HeadNames::default();
        loop {
            let parent = match &row.parent {
                Some(p) => Some(self.commit_in(&view, p).await?),
                None => None,
            };
            let before_pin = match &parent {
                Some(p) => match self.pinned(p, &key).await {
                    Ok(pin) => pin,
                    // History ends where cleanup removed it.
                    Err(OmniError::CommitCleaned { .. }) => return Ok(key),
                    Err(e) => return Err(e),
                },
                None => None,
            };
            let same = diff::same_pin(this.as_ref(), before_pin.as_ref());
            let before =
                if same { after.clone() } else { diff::entity_at(self.root(), before_pin.as_ref(), id).await? };
            let change = if same {
                None
            } else {
                let (older, newer) = ((before_pin.as_ref(), before.clone()), (this.as_ref(), after.clone()));
                diff::entity_change(self.root(), &key, older, newer).await?
            };
            if let Some(change) = change
                && !visit(&row, change, &names)
            {
                return Ok(key);
            }
            if follow_renames
                && !same
                && let (Some(older), Some(newer)) = (before_pin.as_ref(), this.as_ref())
            {
                names.step_back(&diff::renamed_columns(self.root(), older, newer).await?);
            }
            let Some(p) = parent else { return Ok(key) };
            (row, this, after) = (p, before_pin, before);
        }
    }

    /// The pin of table `key` in commit `row`'s manifest (`None`: absent).
    async fn pinned(&self, row: &CommitRow, key: &str) -> Result<Option<TableEntry>> {
        Ok(self.commit_view(row).await?.state.tables.get(key).cloned())
    }
}

/// The head's name of each property renamed since the commit a walk has
/// reached (a name absent here is the head's too).
#[derive(Debug, Default)]
struct HeadNames(std::collections::HashMap<String, String>);

impl HeadNames {
    /// The head's name of property `name` as the current commit names it.
    fn head<'n>(&'n self, name: &'n str) -> &'n str {
        self.0.get(name).map_or(name, String::as_str)
    }

    /// Step back over a commit that renamed `renamed` (`(older, newer)`):
    /// the older names now stand for the head's names of the newer ones.
    fn step_back(&mut self, renamed: &[(String, String)]) {
        let moved: Vec<(String, String)> =
            renamed.iter().map(|(older, newer)| (older.clone(), self.head(newer).to_string())).collect();
        for (_, newer) in renamed {
            self.0.remove(newer);
        }
        self.0.extend(moved);
    }
}

/// The table key of `type_name` (a node or edge type, or a table key).
fn table_key(view: &ManifestView, type_name: &str) -> Result<String> {
    let candidates = [type_name.to_string(), layout::node_key(type_name), layout::edge_key(type_name)];
    candidates
        .into_iter()
        .find(|k| view.state.tables.contains_key(k))
        .ok_or_else(|| OmniError::NotFound(format!("type `{type_name}` on branch `{}`", view.branch)))
}

#[cfg(test)]
mod tests {
    use super::HeadNames;

    #[test]
    fn head_names_follow_renames_and_swaps_back() {
        let mut names = HeadNames::default();
        assert_eq!(names.head("age"), "age");
        // Walking back over `years` ← `age`, then over `age` ← `old_age`.
        names.step_back(&[("age".into(), "years".into())]);
        assert_eq!((names.head("age"), names.head("name")), ("years", "name"));
        names.step_back(&[("old_age".into(), "age".into())]);
        assert_eq!((names.head("old_age"), names.head("age")), ("years", "age"));
        // A swap in one commit.
        let mut swapped = HeadNames::default();
        swapped.step_back(&[("a".into(), "b".into()), ("b".into(), "a".into())]);
        assert_eq!((swapped.head("a"), swapped.head("b")), ("b", "a"));
    }
}
