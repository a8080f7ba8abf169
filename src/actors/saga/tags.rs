//! Tag create and delete: control operations (see [`super::control`]).
//!
//! A tag is one durable record ([`crate::engine::tags`]), so neither needs
//! a sidecar: the record's create-if-absent PUT and its delete are each
//! atomic. What they must not race is named by their gates: `cleanup`
//! (schema gate, exclusive) must not remove what a tag being created names,
//! and a branch delete (that branch's gate) must not remove the branch
//! whose `__manifest` a new tag reads. Both take the schema gate shared, and
//! a create also the gate of the branch its commit was made on.

use tracing::{Instrument, info, info_span};

use super::control::{ControlOp, Planned};
use super::gates::Gates;
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::engine::manifest::{self, CommitRow};
use crate::engine::storage::table;
use crate::engine::tags::{self, Tag};
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};

/// What a new tag names and carries.
#[derive(Debug, Clone)]
pub struct TagRequest {
    /// The tag's name.
    pub name: String,
    /// The commit it names (resolved from the user's ref).
    pub commit: CommitRow,
    /// The creator's message.
    pub message: Option<String>,
    /// Who creates it.
    pub actor: Option<String>,
}

/// Create a tag.
pub async fn create(rt: &Runtime, req: TagRequest) -> Result<Tag> {
    crate::engine::branch_name::validate_tag(&req.name)?;
    let span = info_span!("tag.create", operation_id = %ulid::Ulid::new(), tag = %req.name);
    async { Planned::new(rt, Create(req)).lease().await?.check().await?.apply().await }.instrument(span).await
}

/// Delete a tag.
pub async fn delete(rt: &Runtime, name: &str) -> Result<Tag> {
    let span = info_span!("tag.delete", operation_id = %ulid::Ulid::new(), tag = %name);
    async { Planned::new(rt, Delete(name)).lease().await?.check().await?.apply().await }.instrument(span).await
}

/// Tag create.
struct Create(TagRequest);

impl ControlOp for Create {
    type Checked = Tag;
    type Output = Tag;

    fn gates(&self) -> Gates {
        Gates::schema(LeaseMode::Shared).branch(&self.0.commit.branch)
    }

    async fn check(self, rt: &Runtime) -> Result<(Tag, Gates)> {
        let TagRequest { name, commit, message, actor } = self.0;
        if tags::read(rt.root(), &name).await?.is_some() {
            return Err(OmniError::AlreadyExists(format!("tag `{name}` (tags are immutable: delete it first)")));
        }
        // One namespace with branches, so a ref names one or the other.
        if table::native_branch(&manifest::uri(rt.root()), &name).await?.is_some() {
            return Err(OmniError::AlreadyExists(format!("a branch named `{name}` (tags and branches share names)")));
        }
        // Under the gates the commit's manifest can no longer go (cleanup
        // and branch delete wait): it must be readable now.
        match manifest::load(rt.root(), &commit.branch, Some(commit.manifest_version)).await {
            Ok(_) => {}
            Err(OmniError::NotFound(_)) => {
                return Err(OmniError::CommitCleaned { commit_id: commit.commit_id.clone() });
            }
            Err(e) => return Err(e),
        }
        let tag = Tag {
            name,
            graph_commit_id: commit.commit_id,
            message,
            actor_id: actor,
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            branch: commit.branch,
            manifest_version: commit.manifest_version,
        };
        Ok((tag, Gates::none()))
    }

    async fn apply(tag: Tag, rt: &Runtime, _leases: LeaseSet) -> Result<Tag> {
        named_failpoint!("tag_create.before_record");
        tags::create(rt.root(), &tag).await?;
        named_failpoint!("tag_create.after_record");
        info!(commit = %tag.graph_commit_id, "tag created");
        Ok(tag)
    }
}

/// Tag delete.
struct Delete<'a>(&'a str);

impl ControlOp for Delete<'_> {
    type Checked = String;
    type Output = Tag;

    fn gates(&self) -> Gates {
        Gates::schema(LeaseMode::Shared)
    }

    async fn check(self, _rt: &Runtime) -> Result<(String, Gates)> {
        Ok((self.0.to_string(), Gates::none()))
    }

    async fn apply(name: String, rt: &Runtime, _leases: LeaseSet) -> Result<Tag> {
        named_failpoint!("tag_delete.before_record");
        let tag = tags::delete(rt.root(), &name).await?;
        named_failpoint!("tag_delete.after_record");
        info!(commit = %tag.graph_commit_id, "tag deleted");
        Ok(tag)
    }
}

/// The first tag naming a commit made on `branch`, if any: such a branch
/// cannot be deleted while the tag reads its `__manifest`.
pub async fn pinning_branch(rt: &Runtime, branch: &str) -> Result<Option<Tag>> {
    Ok(tags::list(rt.root()).await?.into_iter().find(|t| t.branch == branch))
}
