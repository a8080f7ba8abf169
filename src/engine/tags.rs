//! Tags: immutable names for graph commits, one durable record each.
//!
//! A tag is one small JSON object under `_refs/tags/` in the graph root,
//! created with a create-if-absent PUT and removed with one delete, so a
//! process killed at any point leaves a tag absent or whole, never half
//! made, and two creators of one name cannot both win. The record carries
//! the commit's branch and `__manifest` version, so resolving a tag and
//! keeping what it reads through `cleanup` need no search of the history.
//! Tag names follow the branch-name rules; a `/` in a name is stored as `@`
//! (which no name may hold, and object stores keep unescaped), keeping every
//! record in one directory.

use serde::{Deserialize, Serialize};

use super::branch_name;
use super::storage::Root;
use crate::protocol::{OmniError, Result};

/// The directory of tag records under the graph root.
pub const TAGS_DIR: &str = "_refs/tags";

/// One tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    /// The tag's name.
    pub name: String,
    /// The commit it names.
    pub graph_commit_id: String,
    /// The creator's message (`None` without `-m`).
    pub message: Option<String>,
    /// Who created it.
    pub actor_id: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// The graph branch the commit was made on.
    pub branch: String,
    /// The `__manifest` version the commit produced (on `branch`).
    pub manifest_version: u64,
}

/// The record's path of tag `name`.
fn record(name: &str) -> String {
    format!("{TAGS_DIR}/{}.json", name.replace('/', "@"))
}

/// The tag name of a record path, if it is one.
fn name_of(path: &str) -> Option<String> {
    let file = path.strip_prefix(TAGS_DIR)?.strip_prefix('/')?;
    let stem = file.strip_suffix(".json")?;
    (!stem.is_empty() && !stem.contains('/')).then(|| stem.replace('@', "/"))
}

/// Create `tag`'s record; a tag of that name already there is a conflict.
pub async fn create(root: &Root, tag: &Tag) -> Result<()> {
    branch_name::validate_tag(&tag.name)?;
    let bytes = serde_json::to_vec(tag).map_err(|e| OmniError::Internal(format!("encoding tag: {e}")))?;
    if root.create(&record(&tag.name), bytes).await? {
        Ok(())
    } else {
        Err(OmniError::AlreadyExists(format!("tag `{}` (tags are immutable: delete it first)", tag.name)))
    }
}

/// Tag `name`, if it exists.
pub async fn read(root: &Root, name: &str) -> Result<Option<Tag>> {
    // A name the rules refuse has no record: it is not a tag.
    if branch_name::validate_tag(name).is_err() {
        return Ok(None);
    }
    let Some(bytes) = root.get(&record(name)).await? else { return Ok(None) };
    let tag: Tag = serde_json::from_slice(&bytes)
        .map_err(|e| OmniError::Internal(format!("the record of tag `{name}` is unreadable: {e}")))?;
    // An invariant of the record, checked where it is read.
    if tag.name != name {
        return Err(OmniError::Internal(format!("the record of tag `{name}` names `{}`", tag.name)));
    }
    Ok(Some(tag))
}

/// Every tag, by name.
pub async fn list(root: &Root) -> Result<Vec<Tag>> {
    let mut tags = Vec::new();
    for name in root.list(TAGS_DIR).await?.iter().filter_map(|p| name_of(p)) {
        // Deleted between the listing and the read: not a tag any more.
        if let Some(tag) = read(root, &name).await? {
            tags.push(tag);
        }
    }
    tags.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(tags)
}

/// Remove tag `name`'s record; a missing tag is `NotFound`.
pub async fn delete(root: &Root, name: &str) -> Result<Tag> {
    let tag = read(root, name).await?.ok_or_else(|| OmniError::NotFound(format!("tag `{name}`")))?;
    root.delete(&record(name)).await?;
    Ok(tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_paths_round_trip_names_with_slashes() {
        for name in ["v1", "release/2026.12", "a/b/c-d_e"] {
            assert_eq!(name_of(&record(name)).as_deref(), Some(name));
        }
        assert_eq!(record("release/v1"), "_refs/tags/release@v1.json");
        // Residue and strangers in the directory are not tags.
        for other in ["_refs/tags/v1.json#12", "_refs/tags/.json", "_refs/tagsx/v1.json", "_refs/tags/a/b.json"] {
            assert_eq!(name_of(other), None, "{other}");
        }
    }
}
