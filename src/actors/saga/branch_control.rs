//! Graph branch control: create, list, delete. A graph branch is a native
//! Lance branch of `__manifest` (its sole authority); each table forks its
//! own ref lazily on the branch's first write to it (see [`super::write`]).
//!
//! Create and delete are control operations: no sidecar and no commit. They
//! run as a typestate ([`ControlOp`]: planned → gated → checked → applied)
//! under the schema (shared) → branch → table gates, so no write on the
//! branches involved is in flight, and classify an ambiguous native result
//! from fresh metadata (`engine::storage::branches`).
//!
//! A delete hides the branch: one head move (`delete`) published on its own
//! `__manifest` branch, everything else left on storage, so `branch restore`
//! ([`super::branch_restore`]) brings it back. A *purge* removes it for good
//! (the native refs, then the forks): `branch delete --purge`, a create that
//! takes the name (or one overlapping it), and `cleanup` past the reflog
//! window.

use serde::Serialize;
use tracing::{Instrument, info, info_span, warn};

use super::control::{ControlOp, Planned};
use super::gates::{Gates, table_uris};
use crate::actors::child_key::ChildKey;
use crate::actors::lease::Lease;
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::actors::saga::recovery::resolve::{self, Mode};
use crate::actors::saga::recovery::sweep::{Scope, sweep};
use crate::engine::branch_name::{self, MAIN};
use crate::engine::manifest::state::DELETE_MOVE;
use crate::engine::manifest::{self, CommitRow, Lineage, ManifestView, Precondition, PublishRequest, Published};
use crate::engine::reflog::{self, ReflogEntry};
use crate::engine::storage::branches::CreatePlan;
use crate::engine::storage::table;
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::{SidecarBody, SidecarStore};

/// One graph branch as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BranchInfo {
    /// Branch name.
    pub name: String,
    /// The branch it was created from (`None` for main).
    pub from: Option<String>,
    /// `__manifest` version of `from` it was created at (`None` for main).
    pub from_manifest_version: Option<u64>,
    /// The newest commit reachable from the branch (inherited on a fresh branch).
    pub head_commit_id: Option<String>,
    /// Creation time, seconds since the epoch (`None` for main).
    pub created_at: Option<u64>,
}

/// What a delete did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeletedBranch {
    /// Branch name.
    pub name: String,
    /// The head it had.
    pub head_commit_id: Option<String>,
    /// True when it was only hidden: `branch restore` brings it back until
    /// `cleanup` purges it past the reflog window. False when purged.
    pub restorable: bool,
    /// Table forks reclaimed with it (a purge's).
    pub forks_reclaimed: Vec<String>,
    /// Operation ids of unresolved writes on it whose effects became unreachable.
    pub orphans_discarded: Vec<String>,
}

/// Every live graph branch, main first, then by name.
pub async fn list(rt: &Runtime) -> Result<Vec<BranchInfo>> {
    let refs = table::list_branches(&manifest::uri(rt.root())).await?;
    let mut out = vec![info_of(MAIN, None, &rt.view(MAIN).await?)];
    for (name, b) in refs {
        let view = match rt.peek(&name, false).await {
            Ok(v) if v.state.deleted(&name).is_none() => v,
            // Deleted (hidden), or purged between the listing and the read.
            Ok(_) | Err(OmniError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        out.push(info_of(&name, Some(&b), &view));
    }
    Ok(out)
}

fn info_of(name: &str, native: Option<&table::NativeBranch>, view: &ManifestView) -> BranchInfo {
    BranchInfo {
        name: name.to_string(),
        from: native.map(|b| b.parent_branch.clone().unwrap_or_else(|| MAIN.to_string())),
        from_manifest_version: native.map(|b| b.parent_version),
        head_commit_id: view.state.effective_head(name).map(|c| c.commit_id.clone()),
        created_at: native.map(|b| b.created_at),
    }
}

/// Create branch `name` from `from`'s current head (`actor` is recorded in
/// the reflog).
pub async fn create(rt: &Runtime, name: &str, from: &str, actor: Option<String>) -> Result<BranchInfo> {
    branch_name::validate(name)?;
    let span = info_span!("branch.create", operation_id = %ulid::Ulid::new(), branch = %name, from = %from);
    async {
        // Unresolved writes left by an earlier incarnation of this name must
        // be discarded before the name means something else.
        if !pending_on(rt, name).instrument(info_span!("branch.pending")).await?.is_empty() {
            sweep(rt, Mode::Full, Scope::Branch(name)).await?;
        }
        purge_overlapping(rt, name).instrument(info_span!("branch.purge_overlapping")).await?;
        Planned::new(rt, Create { name, from, actor }).lease().await?.check().await?.apply().await
    }
    .instrument(span)
    .await
}

/// How to delete a branch.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// Remove it for good now (otherwise it is hidden, restorable).
    pub purge: bool,
    /// Who deletes it.
    pub actor: Option<String>,
}

/// Delete branch `name`: hide it (a `delete` head move on its `__manifest`
/// branch), or with `purge` remove its `__manifest` ref (the authority),
/// then every table fork made for it. An unresolved write scoped to it is
/// discarded once the gates prove its owner gone (the branch-delete
/// orphaning exception), which needs the purge: a hidden branch must stay
/// exact to be restored.
pub async fn delete(rt: &Runtime, name: &str, opts: &DeleteOptions) -> Result<DeletedBranch> {
    if name == MAIN {
        return Err(OmniError::BadRequest("the main branch cannot be deleted".into()));
    }
    let span = info_span!("branch.delete", operation_id = %ulid::Ulid::new(), branch = %name, purge = opts.purge);
    async {
        sweep(rt, Mode::RollForwardOnly, Scope::Branch(name)).await?;
        if opts.purge {
            purge_hidden_children(rt, name).await?;
        }
        let op = Delete { name, purge: opts.purge, actor: opts.actor.clone() };
        Planned::new(rt, op).lease().await?.check().await?.apply().await
    }
    .instrument(span)
    .await
}

/// Purge `name`, a hidden branch, for good.
pub async fn purge(rt: &Runtime, name: &str) -> Result<DeletedBranch> {
    Box::pin(delete(rt, name, &DeleteOptions { purge: true, actor: None })).await
}

/// Whether `name` is on storage but hidden (soft-deleted).
pub async fn is_hidden(rt: &Runtime, name: &str) -> Result<bool> {
    match rt.peek(name, false).await {
        Ok(view) => Ok(view.state.deleted(name).is_some()),
        Err(OmniError::NotFound(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Purge every hidden branch `name` overlaps (itself, a path ancestor or a
/// descendant), deepest first: a new branch takes the name, and native
/// names must stay path-prefix-disjoint.
async fn purge_overlapping(rt: &Runtime, name: &str) -> Result<()> {
    let mut names: Vec<String> = table::branch_names(&manifest::uri(rt.root()))
        .await?
        .into_iter()
        .filter(|other| branch_name::overlaps(name, other))
        .collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    for other in names {
        if is_hidden(rt, &other).await? {
            info!(branch = %other, "purging a deleted branch whose name a new branch takes");
            purge(rt, &other).await?;
        }
    }
    Ok(())
}

/// Purge the hidden branches created from `name` (their native refs read
/// its data, so Lance refuses to remove it before them).
async fn purge_hidden_children(rt: &Runtime, name: &str) -> Result<()> {
    let refs = table::list_branches(&manifest::uri(rt.root())).await?;
    for (child, _) in refs.iter().filter(|(_, b)| b.parent_branch.as_deref() == Some(name)) {
        if is_hidden(rt, child).await? {
            purge(rt, child).await?;
        }
    }
    Ok(())
}

/// Branch create.
struct Create<'a> {
    name: &'a str,
    from: &'a str,
    actor: Option<String>,
}

/// What a create's checks found.
struct CreateChecked<'a> {
    name: &'a str,
    from: &'a str,
    actor: Option<String>,
    /// `from`'s view at the create.
    source: ManifestView,
    /// Table forks named `name` that a half-finished delete left behind.
    stale: Vec<String>,
}

impl<'a> ControlOp for Create<'a> {
    type Checked = CreateChecked<'a>;
    type Output = BranchInfo;

    fn gates(&self) -> Gates {
        Gates::schema(LeaseMode::Shared).branch(self.from).branch(self.name)
    }

    async fn check(self, rt: &Runtime) -> Result<(CreateChecked<'a>, Gates)> {
        let Create { name, from, actor } = self;
        if let Some(body) = pending_on(rt, name).await?.into_iter().next() {
            return Err(OmniError::RecoveryRequired {
                operation_id: body.operation_id,
                reason: format!("an unresolved write still names branch `{name}`"),
            });
        }
        let refs = table::branch_names(&manifest::uri(rt.root())).await?;
        if refs.contains(name) {
            return Err(OmniError::BranchConflict { branch: name.into(), reason: "it already exists".into() });
        }
        if crate::engine::tags::read(rt.root(), name).await?.is_some() {
            return Err(OmniError::BranchConflict {
                branch: name.into(),
                reason: "a tag has this name (tags and branches share names)".into(),
            });
        }
        if let Some(other) = branch_name::first_overlap(name, refs.iter().map(String::as_str)) {
            return Err(OmniError::BranchConflict {
                branch: name.into(),
                reason: format!("it overlaps the live branch `{other}` (live names must be path-prefix-disjoint)"),
            });
        }
        let source = rt.view(from).await?;
        // With no `__manifest` ref, forks under this name are unreachable.
        let mut stale = Vec::new();
        for uri in table_uris(rt, &source) {
            if table::native_branch(&uri, name).await?.is_some() {
                stale.push(uri);
            }
        }
        let gates = Gates::none().tables(stale.iter().map(String::as_str), name);
        Ok((CreateChecked { name, from, actor, source, stale }, gates))
    }

    async fn apply(c: CreateChecked<'a>, rt: &Runtime, leases: LeaseSet) -> Result<BranchInfo> {
        let CreateChecked { name, from, actor, source, stale } = c;
        for uri in &stale {
            rt.reclaim_table_fork(uri, name, leases.require(&ChildKey::table(uri, name))?).await?;
            info!(uri, "reclaimed a stale table fork");
        }
        let plan = CreatePlan {
            parent_branch: Some(from.to_string()).filter(|b| b != MAIN),
            parent_version: source.version,
            parent_identifier: source.branch_id.0.clone(),
        };
        named_failpoint!("branch_create.before_ref");
        let view = rt.create_branch_ref(name, plan, leases.require(&ChildKey::Branch(name.to_string()))?).await?;
        named_failpoint!("branch_create.after_ref");
        info!(version = source.version, "branch created");
        let head = view.state.effective_head(name).map(|c| c.commit_id.clone());
        log_move(rt, name, None, head, "create", actor).await;
        let native = table::native_branch(&manifest::uri(rt.root()), name).await?;
        Ok(info_of(name, native.as_ref(), &view))
    }
}

/// Branch delete (a hide or a purge).
struct Delete<'a> {
    name: &'a str,
    purge: bool,
    actor: Option<String>,
}

/// What a delete's checks found.
struct DeleteChecked<'a> {
    name: &'a str,
    purge: bool,
    actor: Option<String>,
    view: ManifestView,
    /// Every table the branch sees (each may have a fork to reclaim).
    uris: Vec<String>,
    /// Unresolved writes on the branch, discarded with it.
    orphans: Vec<SidecarBody>,
}

impl<'a> ControlOp for Delete<'a> {
    type Checked = DeleteChecked<'a>;
    type Output = DeletedBranch;

    fn gates(&self) -> Gates {
        Gates::schema(LeaseMode::Shared).branch(self.name)
    }

    async fn check(self, rt: &Runtime) -> Result<(DeleteChecked<'a>, Gates)> {
        let Delete { name, purge, actor } = self;
        // A purge takes a hidden branch too; a hide only a visible one.
        let view = if purge { rt.view_of(name, false).await? } else { rt.view(name).await? };
        let refs = table::list_branches(&manifest::uri(rt.root())).await?;
        for (child, _) in refs.iter().filter(|(_, b)| b.parent_branch.as_deref() == Some(name)) {
            // A hidden child keeps reading this branch's data; hiding both is fine.
            if purge || !is_hidden(rt, child).await? {
                return Err(OmniError::BranchConflict {
                    branch: name.into(),
                    reason: format!("branch `{child}` was created from it; delete `{child}` first"),
                });
            }
        }
        if let Some(tag) = super::tags::pinning_branch(rt, name).await?.filter(|_| purge) {
            return Err(OmniError::BranchConflict {
                branch: name.into(),
                reason: format!(
                    "tag `{}` names commit {} made on it, which would become unreadable; delete the tag first",
                    tag.name, tag.graph_commit_id
                ),
            });
        }
        let uris = table_uris(rt, &view);
        let gates = Gates::none().tables(uris.iter().map(String::as_str), name);
        let orphans = pending_on(rt, name).await?;
        Ok((DeleteChecked { name, purge, actor, view, uris, orphans }, gates))
    }

    async fn apply(c: DeleteChecked<'a>, rt: &Runtime, leases: LeaseSet) -> Result<DeletedBranch> {
        if c.purge || !c.orphans.is_empty() {
            return purge_now(c, rt, leases).await;
        }
        let DeleteChecked { name, actor, view, .. } = c;
        let head = view.state.effective_head(name).cloned();
        let head = head.ok_or_else(|| OmniError::Internal(format!("branch `{name}` has no head commit")))?;
        named_failpoint!("branch_delete.before_hide");
        move_head(rt, &view, head.clone(), DELETE_MOVE, actor, leases.require(&ChildKey::Branch(name.into()))?).await?;
        named_failpoint!("branch_delete.after_hide");
        drop(leases);
        rt.retire_branch(name).await;
        info!(head = %head.commit_id, "branch hidden (restorable)");
        Ok(DeletedBranch {
            name: name.to_string(),
            head_commit_id: Some(head.commit_id),
            restorable: true,
            forks_reclaimed: vec![],
            orphans_discarded: vec![],
        })
    }
}

/// Remove the branch for good: its `__manifest` ref, then its forks, then
/// the unresolved writes its removal made unreachable.
async fn purge_now(c: DeleteChecked<'_>, rt: &Runtime, leases: LeaseSet) -> Result<DeletedBranch> {
    let DeleteChecked { name, actor, view, uris, orphans, .. } = c;
    let head = view.state.effective_head(name).map(|c| c.commit_id.clone());
    let was_hidden = view.state.deleted(name).is_some();
    rt.delete_branch_ref(name, view.branch_id.clone(), leases.require(&ChildKey::Branch(name.to_string()))?).await?;
    named_failpoint!("branch_delete.after_ref");
    log_move(rt, name, head.clone(), None, if was_hidden { "purge" } else { "delete" }, actor).await;
    let mut forks_reclaimed = Vec::new();
    for uri in &uris {
        match rt.reclaim_table_fork(uri, name, leases.require(&ChildKey::table(uri, name))?).await {
            Ok(true) => forks_reclaimed.push(uri.clone()),
            Ok(false) => {}
            // Derived cleanup: the authority is gone, so a leftover is
            // unreachable and the next create of this name reclaims it.
            Err(e) => warn!(uri, error = %e, "could not reclaim a table fork of the deleted branch"),
        }
    }
    let store = SidecarStore::new(rt.root().clone());
    let mut orphans_discarded = Vec::new();
    for body in orphans {
        resolve::discard_orphan(rt, &store, &body, &leases).await?;
        orphans_discarded.push(body.operation_id);
    }
    drop(leases);
    rt.retire_branch(name).await;
    info!(forks = forks_reclaimed.len(), orphans = orphans_discarded.len(), "branch purged");
    Ok(DeletedBranch {
        name: name.to_string(),
        head_commit_id: head,
        restorable: false,
        forks_reclaimed,
        orphans_discarded,
    })
}

/// Publish a head move of kind `operation` on `view`'s branch to `to`,
/// under its exact head (a hide and a restore: one append each, so a crash
/// leaves the move whole or absent). Answers the operation id.
pub(crate) async fn move_head(
    rt: &Runtime,
    view: &ManifestView,
    to: CommitRow,
    operation: &str,
    actor: Option<String>,
    lease: &Lease,
) -> Result<(String, Published)> {
    let mut lineage = Lineage::mint(actor);
    lineage.operation = Some(operation.to_string());
    lineage.reset_to = Some(to);
    let operation_id = lineage.commit_id.clone();
    let request = PublishRequest {
        branch: view.branch.clone(),
        updates: vec![],
        expected_versions: Default::default(),
        precondition: Precondition::ExactHead {
            branch_id: view.branch_id.clone(),
            head: view.state.head(&view.branch).map(str::to_string),
        },
        lineage,
    };
    Ok((operation_id, rt.publish(request, lease).await?))
}

/// Record a create or a purge in the reflog (their branch's own manifest
/// does not outlive them). The branch has moved already, so a failure to
/// record is logged, not the operation's.
async fn log_move(
    rt: &Runtime,
    branch: &str,
    old_head: Option<String>,
    new_head: Option<String>,
    operation: &str,
    actor_id: Option<String>,
) {
    let entry = ReflogEntry {
        branch: branch.to_string(),
        old_head,
        new_head,
        operation: operation.to_string(),
        actor_id,
        at_us: chrono::Utc::now().timestamp_micros(),
    };
    if let Err(e) = reflog::record(rt.root(), &entry).await {
        warn!(branch, operation, error = %e, "could not record the branch move in the reflog");
    }
}

/// Pending sidecars scoped to `branch`.
async fn pending_on(rt: &Runtime, branch: &str) -> Result<Vec<SidecarBody>> {
    let store = SidecarStore::new(rt.root().clone());
    let mut out = Vec::new();
    for name in rt.pending_sidecars().await? {
        if let Some(body) = store.read(&name).await?
            && body.branch == branch
        {
            out.push(body);
        }
    }
    Ok(out)
}
