//! The one ref resolver every read goes through, and tags.
//!
//! A ref ([`crate::engine::refs`]) names a live branch's head or one commit.
//! A name is looked up as a branch, then a tag, then a commit id; `~N` walks
//! first parents; `A...B` is the merge base. An unknown ref is `NotFound`
//! naming it; a commit whose versions `cleanup` removed is `CommitCleaned`
//! (410) when it is read.

use std::collections::HashMap;

use super::Graph;
use crate::actors::child_key::ChildKey;
use crate::actors::saga::tags::{self as tag_saga, TagRequest};
use crate::engine::branch_name::{self, MAIN};
use crate::engine::manifest::{CommitRow, ManifestView, merge_base};
use crate::engine::refs::{self, RefExpr};
use crate::engine::tags::{self, Tag};
use crate::protocol::{OmniError, Result};

/// What a ref names.
#[derive(Debug, Clone)]
pub enum Resolved {
    /// A live branch's head: reads see its current state.
    Head(String),
    /// One commit: reads travel to it.
    Commit(Box<CommitRow>),
}

/// Where a read runs: the manifest it reads and the commit it answers for.
#[derive(Clone)]
pub(super) struct ReadAt {
    pub view: ManifestView,
    pub commit_id: String,
}

/// Whether `name` has the shape of a commit id (a ULID).
fn commit_shaped(name: &str) -> bool {
    name.len() == 26 && name.chars().all(|c| c.is_ascii_alphanumeric())
}

impl Graph {
    /// Resolve the ref `text`.
    pub async fn resolve_ref(&self, text: &str) -> Result<Resolved> {
        let expr = refs::parse(text)?;
        Box::pin(self.resolve_expr(&expr, text)).await
    }

    /// The commit the ref `text` names (a branch: its head commit).
    pub async fn resolve_commit(&self, text: &str) -> Result<CommitRow> {
        let resolved = self.resolve_ref(text).await?;
        self.commit_of(resolved, text).await
    }

    async fn resolve_expr(&self, expr: &RefExpr, text: &str) -> Result<Resolved> {
        match expr {
            RefExpr::Name(name) => self.resolve_name(name, text).await,
            RefExpr::Back(inner, n) => {
                let start = Box::pin(self.resolve_expr(inner, text)).await?;
                let start = self.commit_of(start, text).await?;
                if *n == 0 {
                    return Ok(Resolved::Commit(Box::new(start)));
                }
                // The commit's own branch may be deleted (hidden) when a tag
                // named it: the tag keeps its history readable.
                let view = self.rt.peek(&start.branch, true).await?;
                let mut at = start;
                for step in 0..*n {
                    let Some(parent) = at.parent.clone() else {
                        return Err(OmniError::NotFound(format!(
                            "ref `{text}`: `{inner}` has only {step} first-parent ancestors"
                        )));
                    };
                    at = self.commit_in(&view, &parent).await?;
                }
                Ok(Resolved::Commit(Box::new(at)))
            }
            RefExpr::Base(a, b) => {
                let a = Box::pin(self.resolve_expr(a, text)).await?;
                let a = self.commit_of(a, text).await?;
                let b = Box::pin(self.resolve_expr(b, text)).await?;
                let b = self.commit_of(b, text).await?;
                let mut dag: HashMap<String, CommitRow> = HashMap::new();
                for branch in [&a.branch, &b.branch] {
                    let view = self.rt.peek(branch, true).await?;
                    dag.extend(view.state.commits()?.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                let base = merge_base::merge_base(&dag, &a.commit_id, &b.commit_id)
                    .ok_or_else(|| OmniError::NotFound(format!("ref `{text}`: the two have no common ancestor")))?;
                let row = dag.get(&base).cloned();
                row.map(|c| Resolved::Commit(Box::new(c)))
                    .ok_or_else(|| OmniError::Internal(format!("merge base {base} is not in the DAG it came from")))
            }
        }
    }

    /// A name: a live branch, else a tag, else a commit id. Tags and
    /// branches share one namespace (neither can be created over the
    /// other), so only a branch and a commit id could share a name: a
    /// branch wins. A name is tried as a branch through its actor only when
    /// one runs already or when nothing else matched, so reads by tag or
    /// commit id never start a branch actor.
    async fn resolve_name(&self, name: &str, text: &str) -> Result<Resolved> {
        let branch_like = branch_name::validate_ref(name);
        if let Err(OmniError::BadRequest(why)) = &branch_like
            && !commit_shaped(name)
        {
            // Neither a name the branch and tag rules allow nor a commit id.
            return Err(OmniError::BadRequest(format!("invalid ref `{}`: {why}", text.escape_debug())));
        }
        let branch_like = branch_like.is_ok();
        if name == MAIN {
            return Ok(Resolved::Head(MAIN.into()));
        }
        if branch_like
            && self.rt.has_actor(&ChildKey::Branch(name.to_string()))
            && let Some(head) = self.live_branch(name).await?
        {
            return Ok(head);
        }
        if branch_like && let Some(tag) = tags::read(self.root(), name).await? {
            return self.tagged_commit(&tag).await.map(|c| Resolved::Commit(Box::new(c)));
        }
        if commit_shaped(name) {
            match self.find_commit(name).await {
                Ok(c) => return Ok(Resolved::Commit(Box::new(c))),
                Err(OmniError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if branch_like && let Some(head) = self.live_branch(name).await? {
            return Ok(head);
        }
        Err(OmniError::NotFound(format!("ref `{text}`: no branch, tag or commit is named `{name}`")))
    }

    /// `name`'s head if it is a live branch.
    async fn live_branch(&self, name: &str) -> Result<Option<Resolved>> {
        match self.rt.view(name).await {
            Ok(_) => Ok(Some(Resolved::Head(name.into()))),
            Err(OmniError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The commit a resolved ref stands for.
    async fn commit_of(&self, resolved: Resolved, text: &str) -> Result<CommitRow> {
        match resolved {
            Resolved::Commit(c) => Ok(*c),
            Resolved::Head(b) => {
                let view = self.rt.history_view(&b).await?;
                let head = view.state.effective_head(&b).cloned();
                head.ok_or_else(|| OmniError::NotFound(format!("ref `{text}`: branch `{b}` has no commit")))
            }
        }
    }

    /// The commit row a tag names (its record says where it was made; the
    /// branch may since be deleted, hidden, which the tag keeps readable).
    async fn tagged_commit(&self, tag: &Tag) -> Result<CommitRow> {
        let view = self.rt.peek(&tag.branch, true).await?;
        self.commit_in(&view, &tag.graph_commit_id).await
    }

    /// The manifest, commit and head-ness a read of `target` uses.
    pub(super) async fn read_at(&self, target: &str) -> Result<ReadAt> {
        match self.resolve_ref(target).await? {
            Resolved::Head(b) => {
                let view = self.rt.view(&b).await?;
                let head = view.state.effective_head(&b).map(|c| c.commit_id.clone());
                let commit_id = head.ok_or_else(|| OmniError::NotFound(format!("a head commit on `{b}`")))?;
                Ok(ReadAt { view, commit_id })
            }
            Resolved::Commit(c) => {
                let view = self.commit_view(&c).await?;
                Ok(ReadAt { view, commit_id: c.commit_id })
            }
        }
    }

    /// Create tag `name` on the commit `target` (a ref; default main's head).
    pub async fn tag_create(
        &self,
        name: &str,
        target: Option<&str>,
        message: Option<&str>,
        actor: Option<&str>,
    ) -> Result<Tag> {
        self.require_writable()?;
        branch_name::validate_tag(name)?;
        let commit = self.resolve_commit(target.unwrap_or(MAIN)).await?;
        let req =
            TagRequest { name: name.into(), commit, message: message.map(Into::into), actor: actor.map(Into::into) };
        tag_saga::create(&self.rt, req).await
    }

    /// Every tag, by name.
    pub async fn tags(&self) -> Result<Vec<Tag>> {
        tags::list(self.root()).await
    }

    /// Delete tag `name`.
    pub async fn tag_delete(&self, name: &str) -> Result<Tag> {
        self.require_writable()?;
        if branch_name::validate_tag(name).is_err() {
            return Err(OmniError::NotFound(format!("tag `{name}`")));
        }
        tag_saga::delete(&self.rt, name).await
    }
}
