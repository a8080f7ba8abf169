//! Branch restore: bring back a deleted (hidden) branch.
//!
//! A delete leaves the branch on storage behind a `delete` head move
//! ([`super::branch_control`]); a restore appends a `restore` head move on
//! the same `__manifest` branch, back to the head it had: one append under
//! the branch's exact head, so a crash leaves it restored or still deleted,
//! and every table pin is what it was. Restoring at another commit of its
//! history (`--at`, any head its reflog names) is this restore, then a
//! reset ([`super::reset`]) of the restored branch (checked here first). A
//! branch purged since (by `cleanup` past the reflog window, by
//! `branch delete --purge`, or by a create that took its name) is gone.

use serde::Serialize;
use tracing::{Instrument, info, info_span};

use super::branch_control::move_head;
use super::control::{ControlOp, Planned};
use super::gates::Gates;
use crate::actors::child_key::ChildKey;
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::engine::branch_name;
use crate::engine::manifest::state::RESTORE_MOVE;
use crate::engine::manifest::{CommitRow, ManifestView};
use crate::engine::{reflog, tags};
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};

/// What a restore did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RestoredBranch {
    /// The branch.
    pub branch: String,
    /// Its head now.
    pub head_commit_id: String,
    /// The head it had when it was deleted.
    pub deleted_head_commit_id: String,
    /// The restore's operation id (its reflog entry).
    pub operation_id: String,
    /// Who restored it.
    pub actor_id: Option<String>,
}

/// Restore deleted branch `name` at its last head, after checking that
/// commit `at`, if given, is in its history (the caller then resets to it).
pub async fn restore(rt: &Runtime, name: &str, at: Option<&str>, actor: Option<String>) -> Result<RestoredBranch> {
    branch_name::validate(name)?;
    let span = info_span!("branch.restore", branch = %name, at = ?at);
    async { Planned::new(rt, Restore { name, at, actor }).lease().await?.check().await?.apply().await }
        .instrument(span)
        .await
}

/// Branch restore.
struct Restore<'a> {
    name: &'a str,
    at: Option<&'a str>,
    actor: Option<String>,
}

/// What a restore's checks found.
struct RestoreChecked<'a> {
    name: &'a str,
    actor: Option<String>,
    view: ManifestView,
    /// The head it had (and gets back).
    head: CommitRow,
}

impl<'a> ControlOp for Restore<'a> {
    type Checked = RestoreChecked<'a>;
    type Output = RestoredBranch;

    fn gates(&self) -> Gates {
        Gates::schema(LeaseMode::Shared).branch(self.name)
    }

    async fn check(self, rt: &Runtime) -> Result<(RestoreChecked<'a>, Gates)> {
        let Restore { name, at, actor } = self;
        let view = match rt.view_of(name, at.is_some()).await {
            Ok(view) => view,
            Err(OmniError::NotFound(_)) => return Err(purged_or_unknown(rt, name).await?),
            Err(e) => return Err(e),
        };
        let conflict = |reason: String| OmniError::BranchConflict { branch: name.into(), reason };
        if view.state.deleted(name).is_none() {
            return Err(conflict("it exists (only a deleted branch can be restored)".into()));
        }
        if tags::read(rt.root(), name).await?.is_some() {
            return Err(conflict("a tag has this name now (tags and branches share names)".into()));
        }
        let head = view.state.effective_head(name).cloned();
        let head = head.ok_or_else(|| OmniError::Internal(format!("deleted branch `{name}` has no head commit")))?;
        // A branch comes back under its own schema; `--at` is a reset
        // afterwards, which refuses to cross a schema apply.
        if let Some(id) = at
            && !view.state.commits()?.contains_key(id)
        {
            return Err(OmniError::NotFound(format!("commit `{id}` in the history of deleted branch `{name}`")));
        }
        Ok((RestoreChecked { name, actor, view, head }, Gates::none()))
    }

    async fn apply(c: RestoreChecked<'a>, rt: &Runtime, leases: LeaseSet) -> Result<RestoredBranch> {
        let RestoreChecked { name, actor, view, head } = c;
        let head_commit_id = head.commit_id.clone();
        let lease = leases.require(&ChildKey::Branch(name.to_string()))?;
        named_failpoint!("branch_restore.before_show");
        let (operation_id, _) = move_head(rt, &view, head, RESTORE_MOVE, actor.clone(), lease).await?;
        named_failpoint!("branch_restore.after_show");
        info!(head = %head_commit_id, "branch restored");
        Ok(RestoredBranch {
            branch: name.to_string(),
            deleted_head_commit_id: head_commit_id.clone(),
            head_commit_id,
            operation_id,
            actor_id: actor,
        })
    }
}

/// Why `name` cannot be restored when it is not on storage: `Gone` when
/// the reflog records its removal, else `NotFound`.
async fn purged_or_unknown(rt: &Runtime, name: &str) -> Result<OmniError> {
    let records = reflog::control_moves(rt.root()).await?;
    let removed = records.iter().any(|e| e.branch == name && e.new_head.is_none());
    Ok(if removed {
        OmniError::Gone(format!(
            "branch `{name}` was removed for good (purged past the reflog window, with `branch delete --purge`, \
             or by a new branch of its name); it cannot be restored"
        ))
    } else {
        OmniError::NotFound(format!("branch `{name}` (no deleted branch of this name is recorded)"))
    })
}
