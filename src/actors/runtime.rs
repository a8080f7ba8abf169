//! The per-root actor tree as seen by handles: one [`Runtime`] per canonical
//! root in the process, shared by every handle opened on it, and typed
//! request helpers that turn a dead or restarting actor into a typed error.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use dashmap::DashMap;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RpcReplyPort};

use super::lease::{Lease, LeaseMode};
use super::supervisor::{ChildKey, ChildRef, Directory, RootSupervisor, SupervisorArgs, SupervisorMsg};
use lance::Dataset;

use crate::engine::branch_control::CreatePlan;
use crate::engine::manifest::{BranchId, ManifestView, PublishRequest, Published};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::{CommittedTxn, Root, StagedTxn};
use crate::protocol::messages::{BranchMsg, ReconcilerMsg, SchemaMsg, TableMsg};
use crate::protocol::{OmniError, Result};

static RUNTIMES: LazyLock<tokio::sync::Mutex<HashMap<String, Weak<Runtime>>>> = LazyLock::new(Default::default);

/// The actor tree of one graph root.
pub struct Runtime {
    me: Weak<Runtime>,
    root: Root,
    supervisor: ActorRef<SupervisorMsg>,
    directory: Directory,
    /// Operation ids of writes in flight in this process (armed, not finished).
    live: Arc<DashMap<String, ()>>,
}

/// Marks an operation live in its runtime until dropped (the saga holds it
/// from arming its sidecar until it returns, whatever way it returns).
pub struct LiveOp {
    live: Arc<DashMap<String, ()>>,
    op: String,
}

impl Drop for LiveOp {
    fn drop(&mut self) {
        self.live.remove(&self.op);
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.supervisor.stop(Some("last handle dropped".into()));
    }
}

/// Send `build(reply)` to `actor` and wait for the answer; a dead actor or a
/// dropped reply becomes `ActorUnavailable`, never a hang.
async fn ask<M, T>(actor: &ActorRef<M>, what: &str, build: impl FnOnce(RpcReplyPort<T>) -> M) -> Result<T>
where
    M: ractor::Message,
    T: Send + 'static,
{
    match actor.call(build, None).await {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => Err(OmniError::ActorUnavailable(format!("{what}: timed out"))),
        Ok(CallResult::SenderError) => Err(OmniError::ActorUnavailable(format!("{what}: the actor stopped"))),
        Err(e) => Err(OmniError::ActorUnavailable(format!("{what}: {e}"))),
    }
}

/// Seconds between background recovery checks in a long-running process
/// (`OMNIGRAPH_RECONCILE_SECS`, default 30).
fn reconcile_period() -> std::time::Duration {
    let secs = std::env::var("OMNIGRAPH_RECONCILE_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    std::time::Duration::from_secs(secs.max(1))
}

/// While the runtime lives, look for pending sidecars now and then (one
/// listing) and hand them to the reconciler, so a daemon heals without a
/// restart even when no write fails in it.
async fn periodic_reconcile(rt: Weak<Runtime>) {
    let mut tick = tokio::time::interval(reconcile_period());
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(rt) = rt.upgrade() else { return };
        let pending = crate::recovery::list_pending(rt.root()).await.map(|p| !p.is_empty()).unwrap_or(true);
        if pending && let Err(e) = rt.reconcile_soon().await {
            tracing::debug!(error = %e, "could not ask for a recovery pass");
        }
    }
}

impl Runtime {
    /// The runtime for `root`, started if no handle in this process has one.
    pub async fn for_root(root: &Root) -> Result<Arc<Runtime>> {
        let mut all = RUNTIMES.lock().await;
        all.retain(|_, w| w.strong_count() > 0);
        if let Some(rt) = all.get(root.uri()).and_then(Weak::upgrade) {
            return Ok(rt);
        }
        let directory: Directory = Arc::new(DashMap::new());
        let args = SupervisorArgs { root: root.clone(), directory: directory.clone() };
        let (supervisor, _) = Actor::spawn(None, RootSupervisor, args)
            .await
            .map_err(|e| OmniError::ActorUnavailable(format!("starting the actor tree for {}: {e}", root.uri())))?;
        let rt = Arc::new_cyclic(|me| Runtime {
            me: me.clone(),
            root: root.clone(),
            supervisor,
            directory,
            live: Arc::new(DashMap::new()),
        });
        all.insert(root.uri().to_string(), Arc::downgrade(&rt));
        tokio::spawn(periodic_reconcile(Arc::downgrade(&rt)));
        Ok(rt)
    }

    /// Mark operation `op` live until the guard drops.
    pub fn track_live(&self, op: &str) -> LiveOp {
        self.live.insert(op.to_string(), ());
        LiveOp { live: self.live.clone(), op: op.to_string() }
    }

    /// Whether a write of this process owns operation `op` right now: its
    /// sidecar is not a recovery candidate, and a heal must not wait for it.
    pub fn is_live(&self, op: &str) -> bool {
        self.live.contains_key(op)
    }

    /// The graph root.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The supervisor (tests kill and inspect through it).
    pub fn supervisor(&self) -> &ActorRef<SupervisorMsg> {
        &self.supervisor
    }

    async fn child(&self, key: ChildKey) -> Result<ChildRef> {
        if let Some(c) = self.directory.get(&key).map(|c| c.clone())
            && c.is_alive()
        {
            return Ok(c);
        }
        ask(&self.supervisor, "supervisor", |reply| SupervisorMsg::Ensure { key, reply }).await?
    }

    /// The schema actor.
    pub async fn schema_actor(&self) -> Result<ActorRef<SchemaMsg>> {
        match self.child(ChildKey::Schema).await? {
            ChildRef::Schema(a) => Ok(a),
            _ => Err(OmniError::Internal("directory returned the wrong actor kind".into())),
        }
    }

    /// The actor of graph branch `branch`.
    pub async fn branch_actor(&self, branch: &str) -> Result<ActorRef<BranchMsg>> {
        match self.child(ChildKey::Branch(branch.to_string())).await? {
            ChildRef::Branch(a) => Ok(a),
            _ => Err(OmniError::Internal("directory returned the wrong actor kind".into())),
        }
    }

    /// The actor of the table at `uri` on graph branch `branch`.
    pub async fn table_actor(&self, uri: &str, branch: &str) -> Result<ActorRef<TableMsg>> {
        let key = ChildKey::Table { uri: uri.to_string(), branch: branch.to_string() };
        match self.child(key).await? {
            ChildRef::Table(a) => Ok(a),
            _ => Err(OmniError::Internal("directory returned the wrong actor kind".into())),
        }
    }

    /// The reconciler.
    pub async fn reconciler(&self) -> Result<ActorRef<ReconcilerMsg>> {
        match self.child(ChildKey::Reconciler).await? {
            ChildRef::Reconciler(a) => Ok(a),
            _ => Err(OmniError::Internal("directory returned the wrong actor kind".into())),
        }
    }

    /// The accepted schema.
    pub async fn schema(&self) -> Result<Arc<SchemaState>> {
        let a = self.schema_actor().await?;
        ask(&a, "schema actor", |reply| SchemaMsg::Current { reply }).await
    }

    /// Take the schema gate.
    pub async fn lease_schema(&self, mode: LeaseMode) -> Result<Lease> {
        let a = self.schema_actor().await?;
        ask(&a, "schema gate", |reply| SchemaMsg::Acquire { mode, reply }).await
    }

    /// Take a branch gate.
    pub async fn lease_branch(&self, branch: &str) -> Result<Lease> {
        self.ask_branch(branch, "branch gate", |reply| BranchMsg::Acquire { reply }).await
    }

    /// Ask `branch`'s actor an idempotent question; one that met the actor
    /// as it stopped (a restart, a retired deleted branch) is asked again of
    /// the current one, so a request racing a delete sees the branch gone.
    async fn ask_branch<T: Send + 'static>(
        &self,
        branch: &str,
        what: &str,
        build: impl Fn(RpcReplyPort<T>) -> BranchMsg,
    ) -> Result<T> {
        let a = self.branch_actor(branch).await?;
        match ask(&a, what, &build).await {
            Err(OmniError::ActorUnavailable(_)) => ask(&self.branch_actor(branch).await?, what, build).await,
            other => other,
        }
    }

    /// [`Self::ask_branch`] for a table actor.
    async fn ask_table<T: Send + 'static>(
        &self,
        uri: &str,
        branch: &str,
        what: &str,
        build: impl Fn(RpcReplyPort<T>) -> TableMsg,
    ) -> Result<T> {
        let a = self.table_actor(uri, branch).await?;
        match ask(&a, what, &build).await {
            Err(OmniError::ActorUnavailable(_)) => ask(&self.table_actor(uri, branch).await?, what, build).await,
            other => other,
        }
    }

    /// Take a table gate.
    pub async fn lease_table(&self, uri: &str, branch: &str) -> Result<Lease> {
        self.ask_table(uri, branch, "table gate", |reply| TableMsg::Acquire { reply }).await
    }

    /// Whether `branch`'s gate is held or awaited right now (a hint: writers
    /// that see contention prepare under the gate instead of racing).
    pub async fn branch_contended(&self, branch: &str) -> Result<bool> {
        self.ask_branch(branch, "branch actor", |reply| BranchMsg::Contended { reply }).await
    }

    /// A fresh manifest view of `branch`.
    pub async fn view(&self, branch: &str) -> Result<ManifestView> {
        self.ask_branch(branch, "branch actor", |reply| BranchMsg::View { reply }).await?
    }

    /// Publish through the branch actor, holding its lease.
    pub async fn publish(&self, request: PublishRequest, lease: &Lease) -> Result<Published> {
        let a = self.branch_actor(&request.branch).await?;
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::Publish { request: Box::new(request), lease_id, reply }).await?
    }

    /// Commit a staged transaction through its table actor, holding its lease.
    pub async fn commit(&self, branch: &str, staged: StagedTxn, lease: &Lease) -> Result<CommittedTxn> {
        let a = self.table_actor(staged.uri(), branch).await?;
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Commit { staged: Box::new(staged), lease_id, reply }).await?
    }

    /// Create `branch`'s manifest ref through its actor, holding its lease.
    pub async fn create_branch_ref(&self, branch: &str, plan: CreatePlan, lease: &Lease) -> Result<ManifestView> {
        let a = self.branch_actor(branch).await?;
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::CreateRef { plan, lease_id, reply }).await?
    }

    /// Delete `branch`'s manifest ref (the captured incarnation), holding its lease.
    pub async fn delete_branch_ref(&self, branch: &str, captured: BranchId, lease: &Lease) -> Result<()> {
        let a = self.branch_actor(branch).await?;
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::DeleteRef { captured, lease_id, reply }).await?
    }

    /// Fork the table at `uri` for `branch` (first touch), holding its lease.
    pub async fn fork_table(&self, uri: &str, branch: &str, plan: CreatePlan, lease: &Lease) -> Result<Arc<Dataset>> {
        let a = self.table_actor(uri, branch).await?;
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Fork { plan, lease_id, reply }).await?
    }

    /// Remove `branch`'s fork of the table at `uri`, holding its lease.
    pub async fn reclaim_table_fork(&self, uri: &str, branch: &str, lease: &Lease) -> Result<bool> {
        let a = self.table_actor(uri, branch).await?;
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Reclaim { lease_id, reply }).await?
    }

    /// Stop the actors of a deleted branch (its gates stay, so a waiter
    /// queued on them is still ordered against a recreated branch).
    pub async fn retire_branch(&self, branch: &str) {
        let keys: Vec<ChildKey> = self
            .directory
            .iter()
            .map(|e| e.key().clone())
            .filter(|k| match k {
                ChildKey::Branch(b) | ChildKey::Table { branch: b, .. } => b == branch,
                _ => false,
            })
            .collect();
        for key in keys {
            if let Err(e) = ask(&self.supervisor, "supervisor", |reply| SupervisorMsg::Retire { key, reply }).await {
                tracing::debug!(error = %e, "supervisor gone; nothing to retire");
            }
        }
    }

    /// Whether a live actor serves `key` (diagnostics and tests).
    pub fn has_actor(&self, key: &ChildKey) -> bool {
        self.directory.get(key).is_some_and(|c| c.is_alive())
    }

    /// Live Lance HEAD of a table on a branch.
    pub async fn table_head(&self, uri: &str, branch: &str) -> Result<u64> {
        self.ask_table(uri, branch, "table actor", |reply| TableMsg::Head { reply }).await?
    }

    /// Ask the reconciler for a background recovery pass.
    pub async fn reconcile_soon(&self) -> Result<()> {
        let a = self.reconciler().await?;
        a.cast(ReconcilerMsg::Reconcile { runtime: self.me.clone() })
            .map_err(|e| OmniError::ActorUnavailable(format!("reconciler: {e}")))
    }

    /// Pending recovery sidecars.
    pub async fn pending_sidecars(&self) -> Result<Vec<String>> {
        let a = self.reconciler().await?;
        ask(&a, "reconciler", |reply| ReconcilerMsg::ListPending { reply }).await?
    }
}
