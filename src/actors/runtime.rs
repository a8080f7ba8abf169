//! The per-root actor tree as seen by handles: one [`Runtime`] per canonical
//! root in the process, shared by every handle opened on it, and typed
//! request helpers that turn a dead or restarting actor into a typed error.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Weak};

use dashmap::DashMap;
use futures::future::BoxFuture;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorRef, RpcReplyPort};

use super::child_key::ChildKey;
use super::guardian::{Guardian, GuardianArgs, GuardianMsg};
use super::lease::{Lease, LeaseMode};
use super::reconciler::{PassFn, ReconcilerArgs};
use super::supervisor::{ActorStats, ChildRef, Directory, SupervisorMsg};
use super::write_queue::WriteQueues;
use lance::Dataset;

use crate::actors::messages::{BranchMsg, ReconcilerMsg, SchemaMsg, TableMsg};
use crate::engine::branch_name;
use crate::engine::manifest::{BranchId, ManifestState, ManifestView, PublishRequest, Published};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::branches::CreatePlan;
use crate::engine::storage::{CommittedTxn, Root, StagedTxn};
use crate::protocol::{OmniError, Result};

static RUNTIMES: LazyLock<tokio::sync::Mutex<HashMap<String, Weak<Runtime>>>> = LazyLock::new(Default::default);

/// Supervisors of dropped runtimes that may still be stopping (see [`quiesce`]).
static STOPPING: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>> = std::sync::Mutex::new(Vec::new());

/// Whether runtimes run recovery in the background (the periodic check and
/// the reconciler pass a failed write asks for). On by default; a one-shot
/// process turns it off, since its next read-write open recovers anyway.
static BACKGROUND_RECOVERY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Turn background recovery on or off for runtimes of this process.
pub fn set_background_recovery(enabled: bool) {
    BACKGROUND_RECOVERY.store(enabled, std::sync::atomic::Ordering::SeqCst);
}

fn background_recovery() -> bool {
    BACKGROUND_RECOVERY.load(std::sync::atomic::Ordering::SeqCst)
}

/// Wait (up to `limit`) until every actor tree whose last handle was dropped
/// has stopped, each actor after its current message: a process that exits
/// after this leaves no actor work (a publish's manifest compaction, say)
/// to be cut off by the runtime's shutdown. Returns whether all stopped.
pub async fn quiesce(limit: std::time::Duration) -> bool {
    let handles: Vec<_> = std::mem::take(&mut *STOPPING.lock().unwrap_or_else(|p| p.into_inner()));
    tokio::time::timeout(limit, futures::future::join_all(handles)).await.is_ok()
}

/// The actor tree of one graph root.
pub struct Runtime {
    root: Root,
    guardian: ActorRef<GuardianMsg>,
    /// The current supervisor incarnation (the guardian replaces it).
    supervisor: tokio::sync::watch::Receiver<Option<ActorRef<SupervisorMsg>>>,
    /// Supervisor restarts (the guardian counts them here).
    supervisor_restarts: Arc<std::sync::atomic::AtomicU64>,
    /// Resolves when the guardian (and with it the whole tree) has stopped.
    stopped: Option<tokio::task::JoinHandle<()>>,
    directory: Directory,
    /// Operation ids of writes in flight in this process (armed, not finished).
    live: Arc<DashMap<String, ()>>,
    /// Per child: requests sent and not yet answered (its mailbox length,
    /// the one in its handler included). Gate waits are not counted here:
    /// the gate's own queue counts them.
    mailboxes: DashMap<ChildKey, usize>,
    /// Reconciler passes completed (the reconciler counts them here).
    reconciler_passes: Arc<std::sync::atomic::AtomicU64>,
    /// Mutations waiting on a busy branch for its next group commit.
    write_queues: WriteQueues,
    /// What the actors maintained by themselves.
    maintenance: Arc<super::maintenance::Maintenance>,
    /// Told of every finished write's rows (a daemon's index folder).
    on_written: std::sync::OnceLock<WrittenHook>,
    /// Woken by each publish (long polls of the change feed wait on them).
    heads: super::heads::HeadSignals,
}

/// A listener of finished writes: the branch and the rows each table got.
pub type WrittenHook = Box<dyn Fn(&str, &BTreeMap<String, u64>) + Send + Sync>;

/// Counts one request in its child's mailbox until dropped.
struct InMailbox<'a> {
    mailboxes: &'a DashMap<ChildKey, usize>,
    key: ChildKey,
}

impl<'a> InMailbox<'a> {
    fn new(mailboxes: &'a DashMap<ChildKey, usize>, key: ChildKey) -> Self {
        *mailboxes.entry(key.clone()).or_default() += 1;
        InMailbox { mailboxes, key }
    }
}

impl Drop for InMailbox<'_> {
    fn drop(&mut self) {
        // An idle key's counter goes: keys come and go with branches.
        self.mailboxes.remove_if_mut(&self.key, |_, n| {
            *n = n.saturating_sub(1);
            *n == 0
        });
    }
}

/// Counters of one actor tree (`GET /healthz?verbose=true` shows them).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TreeStats {
    /// Every child the supervisor has run, by gate name.
    pub actors: Vec<ActorStats>,
    /// Restarts of the root supervisor itself (by its guardian).
    pub supervisor_restarts: u64,
    /// Reconciler passes completed (by every incarnation).
    pub reconciler_passes: u64,
    /// Writes of this process between arming and returning.
    pub writes_in_flight: usize,
    /// Mutations waiting on a busy branch for a group commit.
    pub queued_writes: usize,
    /// The maintenance the actors did without being asked.
    pub maintenance: super::maintenance::MaintenanceStats,
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
        self.guardian.stop(Some("last handle dropped".into()));
        if let Some(stopped) = self.stopped.take() {
            let mut stopping = STOPPING.lock().unwrap_or_else(|p| p.into_inner());
            stopping.retain(|h| !h.is_finished());
            stopping.push(stopped);
        }
    }
}

/// A duration in seconds from the environment variable `var`, or `default`.
fn secs_from_env(var: &str, default: u64) -> std::time::Duration {
    let secs = std::env::var(var).ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    std::time::Duration::from_secs(secs.max(1))
}

/// How long an ask waits for an actor's answer (`OMNIGRAPH_ASK_TIMEOUT_SECS`,
/// default 120): a commit or publish is storage I/O, never a wait on others.
fn ask_timeout() -> std::time::Duration {
    static T: LazyLock<std::time::Duration> = LazyLock::new(|| secs_from_env("OMNIGRAPH_ASK_TIMEOUT_SECS", 120));
    *T
}

/// How long a gate acquisition may queue behind other holders
/// (`OMNIGRAPH_LEASE_TIMEOUT_SECS`, default 600).
fn lease_timeout() -> std::time::Duration {
    static T: LazyLock<std::time::Duration> = LazyLock::new(|| secs_from_env("OMNIGRAPH_LEASE_TIMEOUT_SECS", 600));
    *T
}

/// What an ask to a branch or table actor waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// An answer (counted in the actor's mailbox; the ask timeout).
    Answer,
    /// A gate grant, which may queue behind holders (the lease timeout; the
    /// gate's queue counts it).
    Gate,
}

impl Wait {
    fn limit(self) -> std::time::Duration {
        match self {
            Wait::Answer => ask_timeout(),
            Wait::Gate => lease_timeout(),
        }
    }
}

/// Send `build(reply)` to `actor` and wait up to the ask timeout for the
/// answer; a dead actor, a dropped reply or no answer in time becomes the
/// retryable `ActorUnavailable` (503), never a hang.
async fn ask<M, T>(actor: &ActorRef<M>, what: &str, build: impl FnOnce(RpcReplyPort<T>) -> M) -> Result<T>
where
    M: ractor::Message,
    T: Send + 'static,
{
    ask_within(actor, what, ask_timeout(), build).await
}

/// [`ask`] with an explicit limit (gate acquisitions queue: they get longer).
async fn ask_within<M, T>(
    actor: &ActorRef<M>,
    what: &str,
    limit: std::time::Duration,
    build: impl FnOnce(RpcReplyPort<T>) -> M,
) -> Result<T>
where
    M: ractor::Message,
    T: Send + 'static,
{
    match actor.call(build, Some(limit)).await {
        Ok(CallResult::Success(v)) => Ok(v),
        Ok(CallResult::Timeout) => {
            Err(OmniError::ActorUnavailable(format!("{what}: no answer within {}s; retry", limit.as_secs())))
        }
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

impl Runtime {
    /// The runtime for `root`, started if no handle in this process has one.
    /// `recovery_pass` is the reconciler's background pass over this runtime
    /// (the caller supplies it: recovery procedures sit above the actors
    /// they drive); the first caller's pass serves the tree.
    pub async fn for_root(
        root: &Root,
        recovery_pass: fn(Arc<Runtime>) -> BoxFuture<'static, ()>,
    ) -> Result<Arc<Runtime>> {
        let mut all = RUNTIMES.lock().await;
        all.retain(|_, w| w.strong_count() > 0);
        if let Some(rt) = all.get(root.uri()).and_then(Weak::upgrade) {
            return Ok(rt);
        }
        let directory: Directory = Arc::new(DashMap::new());
        // The reconciler's pass runs through this runtime, which exists only
        // once the tree is started: it finds it through this slot.
        let slot: Arc<std::sync::OnceLock<Weak<Runtime>>> = Arc::default();
        let pass: PassFn = {
            let slot = slot.clone();
            Arc::new(move || {
                let rt = slot.get().and_then(Weak::upgrade);
                match rt {
                    Some(rt) => recovery_pass(rt),
                    None => Box::pin(async {}),
                }
            })
        };
        let period = background_recovery().then(reconcile_period);
        let passes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reconciler = ReconcilerArgs { root: root.clone(), pass, period, passes: passes.clone() };
        let (supervisor_tx, supervisor) = tokio::sync::watch::channel(None);
        let supervisor_restarts = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let maintenance = Arc::new(super::maintenance::Maintenance::default());
        let args = GuardianArgs {
            root: root.clone(),
            directory: directory.clone(),
            gates: Arc::default(),
            reconciler,
            slot: supervisor_tx,
            restarts: supervisor_restarts.clone(),
            maintenance: maintenance.clone(),
        };
        let (guardian, stopped) = Actor::spawn(None, Guardian, args)
            .await
            .map_err(|e| OmniError::ActorUnavailable(format!("starting the actor tree for {}: {e}", root.uri())))?;
        let rt = Arc::new(Runtime {
            root: root.clone(),
            guardian,
            supervisor,
            supervisor_restarts,
            stopped: Some(stopped),
            directory,
            live: Arc::new(DashMap::new()),
            mailboxes: DashMap::new(),
            reconciler_passes: passes,
            write_queues: WriteQueues::default(),
            maintenance,
            on_written: std::sync::OnceLock::new(),
            heads: Default::default(),
        });
        all.insert(root.uri().to_string(), Arc::downgrade(&rt));
        // Set once, just created: it cannot already hold a value.
        let _ = slot.set(Arc::downgrade(&rt));
        Ok(rt)
    }

    /// The counters of what this tree maintained by itself.
    pub fn maintenance(&self) -> &super::maintenance::Maintenance {
        &self.maintenance
    }

    /// Tell `hook` of every write finished from now on (once per runtime;
    /// `false` when a hook is set already).
    pub fn set_written_hook(&self, hook: WrittenHook) -> bool {
        self.on_written.set(hook).is_ok()
    }

    /// A write on `branch` finished, having written `rows` rows per table.
    pub fn written(&self, branch: &str, rows: &BTreeMap<String, u64>) {
        if let Some(hook) = self.on_written.get() {
            hook(branch, rows);
        }
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

    /// The mutations waiting for a group commit, per branch.
    pub fn write_queues(&self) -> &WriteQueues {
        &self.write_queues
    }

    /// Whether any write of this process is in flight on this root.
    pub fn any_live(&self) -> bool {
        !self.live.is_empty()
    }

    /// The graph root.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The current supervisor incarnation (tests kill and inspect through
    /// it); while the guardian restarts a dead one, waits (up to the ask
    /// timeout) for its successor.
    pub async fn supervisor(&self) -> Result<ActorRef<SupervisorMsg>> {
        // Starting counts as alive: its status turns Running without a new
        // value in the slot, which is all this wait wakes up on.
        let alive = |s: &Option<ActorRef<SupervisorMsg>>| {
            s.as_ref().is_some_and(|s| {
                !matches!(s.get_status(), ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped)
            })
        };
        let mut rx = self.supervisor.clone();
        // `None`: the tree is stopping; nothing to wait for.
        let settled = |s: &Option<ActorRef<SupervisorMsg>>| s.is_none() || alive(s);
        let current = match tokio::time::timeout(ask_timeout(), rx.wait_for(settled)).await {
            Ok(Ok(current)) => current.clone(),
            Ok(Err(_)) => None,
            Err(_) => return Err(OmniError::ActorUnavailable("supervisor: no live incarnation; retry".into())),
        };
        current.ok_or_else(|| OmniError::ActorUnavailable("the actor tree is stopping".into()))
    }

    /// Ask the supervisor; a request that met an incarnation as it died is
    /// asked again of its successor.
    async fn ask_supervisor<T: Send + 'static>(&self, build: impl Fn(RpcReplyPort<T>) -> SupervisorMsg) -> Result<T> {
        let sup = self.supervisor().await?;
        match ask(&sup, "supervisor", &build).await {
            Err(OmniError::ActorUnavailable(_)) if !matches!(sup.get_status(), ractor::ActorStatus::Running) => {
                ask(&self.supervisor().await?, "supervisor", build).await
            }
            other => other,
        }
    }

    async fn child(&self, key: ChildKey) -> Result<ChildRef> {
        if let Some(c) = self.directory.get(&key).map(|c| c.clone())
            && c.is_alive()
        {
            return Ok(c);
        }
        self.ask_supervisor(|reply| SupervisorMsg::Ensure { key: key.clone(), reply }).await?
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
        // Every path to a branch's state starts here: a hostile name stops
        // before it names a storage path.
        branch_name::validate_ref(branch)?;
        match self.child(ChildKey::Branch(branch.to_string())).await? {
            ChildRef::Branch(a) => Ok(a),
            _ => Err(OmniError::Internal("directory returned the wrong actor kind".into())),
        }
    }

    /// The actor of the table at `uri` on graph branch `branch`.
    pub async fn table_actor(&self, uri: &str, branch: &str) -> Result<ActorRef<TableMsg>> {
        branch_name::validate_ref(branch)?;
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
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Schema);
        ask(&a, "schema actor", |reply| SchemaMsg::Current { reply }).await
    }

    /// The schema `commit_id` of `state` was written under: its branch's
    /// schema at that commit (see [`super::schema`]); `None` (no commit)
    /// binds the graph's original schema.
    pub async fn schema_at(&self, state: &ManifestState, commit_id: Option<&str>) -> Result<Arc<SchemaState>> {
        let identity = commit_id.and_then(|c| state.schema_applied_at(c));
        let a = self.schema_actor().await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Schema);
        ask(&a, "schema actor", |reply| SchemaMsg::Bound { identity, reply }).await?
    }

    /// The schema `view`'s branch has at its head: what a write or read
    /// there binds.
    pub async fn schema_of(&self, view: &ManifestView) -> Result<Arc<SchemaState>> {
        let head = view.state.effective_head(&view.branch).map(|c| c.commit_id.clone());
        let (branch, state) = (view.branch.clone(), view.state.clone());
        let a = self.schema_actor().await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Schema);
        ask(&a, "schema actor", |reply| SchemaMsg::OfHead { branch, state, head, reply }).await?
    }

    /// Make the schema actor re-read the accepted schema (after a promotion);
    /// `lease` must be the exclusive schema lease.
    pub async fn reload_schema(&self, lease: &Lease) -> Result<Arc<SchemaState>> {
        let a = self.schema_actor().await?;
        let lease_id = lease.id();
        ask(&a, "schema actor", |reply| SchemaMsg::Reload { lease_id, reply }).await?
    }

    /// Take the schema gate.
    pub async fn lease_schema(&self, mode: LeaseMode) -> Result<Lease> {
        let a = self.schema_actor().await?;
        ask_within(&a, "schema gate", lease_timeout(), |reply| SchemaMsg::Acquire { mode, reply }).await
    }

    /// Take the schema gate if it is free now (`None` if it would wait).
    pub async fn try_lease_schema(&self, mode: LeaseMode) -> Result<Option<Lease>> {
        let a = self.schema_actor().await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Schema);
        ask(&a, "schema gate", |reply| SchemaMsg::TryAcquire { mode, reply }).await
    }

    /// Take a branch gate if it is free now.
    pub async fn try_lease_branch(&self, branch: &str) -> Result<Option<Lease>> {
        self.ask_branch(branch, "branch gate", Wait::Answer, |reply| BranchMsg::TryAcquire { reply }).await
    }

    /// Take a table gate if it is free now.
    pub async fn try_lease_table(&self, uri: &str, branch: &str) -> Result<Option<Lease>> {
        self.ask_table(uri, branch, "table gate", Wait::Answer, |reply| TableMsg::TryAcquire { reply }).await
    }

    /// Take a branch gate.
    pub async fn lease_branch(&self, branch: &str) -> Result<Lease> {
        self.ask_branch(branch, "branch gate", Wait::Gate, |reply| BranchMsg::Acquire { reply }).await
    }

    /// Ask `branch`'s actor an idempotent question; one that met the actor
    /// as it stopped (a restart, a retired deleted branch) is asked again of
    /// the current one, so a request racing a delete sees the branch gone.
    async fn ask_branch<T: Send + 'static>(
        &self,
        branch: &str,
        what: &str,
        wait: Wait,
        build: impl Fn(RpcReplyPort<T>) -> BranchMsg,
    ) -> Result<T> {
        let a = self.branch_actor(branch).await?;
        let limit = wait.limit();
        let _in = (wait == Wait::Answer).then(|| InMailbox::new(&self.mailboxes, ChildKey::Branch(branch.into())));
        match ask_within(&a, what, limit, &build).await {
            // Asked again only if the actor stopped, not if it was slow.
            Err(OmniError::ActorUnavailable(_)) if !matches!(a.get_status(), ractor::ActorStatus::Running) => {
                ask_within(&self.branch_actor(branch).await?, what, limit, build).await
            }
            other => other,
        }
    }

    /// [`Self::ask_branch`] for a table actor.
    async fn ask_table<T: Send + 'static>(
        &self,
        uri: &str,
        branch: &str,
        what: &str,
        wait: Wait,
        build: impl Fn(RpcReplyPort<T>) -> TableMsg,
    ) -> Result<T> {
        let a = self.table_actor(uri, branch).await?;
        let limit = wait.limit();
        let _in = (wait == Wait::Answer).then(|| InMailbox::new(&self.mailboxes, ChildKey::table(uri, branch)));
        match ask_within(&a, what, limit, &build).await {
            // Asked again only if the actor stopped, not if it was slow.
            Err(OmniError::ActorUnavailable(_)) if !matches!(a.get_status(), ractor::ActorStatus::Running) => {
                ask_within(&self.table_actor(uri, branch).await?, what, limit, build).await
            }
            other => other,
        }
    }

    /// Take a table gate.
    pub async fn lease_table(&self, uri: &str, branch: &str) -> Result<Lease> {
        self.ask_table(uri, branch, "table gate", Wait::Gate, |reply| TableMsg::Acquire { reply }).await
    }

    /// Whether `branch`'s gate is held or awaited right now (a hint: writers
    /// that see contention prepare under the gate instead of racing).
    pub async fn branch_contended(&self, branch: &str) -> Result<bool> {
        self.ask_branch(branch, "branch actor", Wait::Answer, |reply| BranchMsg::Contended { reply }).await
    }

    /// A fresh manifest view of `branch`: its state may be a head state
    /// (no commit history; see [`crate::engine::manifest::state`]). A
    /// soft-deleted branch is `NotFound`, as if it were gone.
    pub async fn view(&self, branch: &str) -> Result<ManifestView> {
        visible(self.view_of(branch, false).await?)
    }

    /// A fresh manifest view of `branch` with its whole commit history loaded
    /// (history listings, merge bases, cleanup's retention).
    pub async fn history_view(&self, branch: &str) -> Result<ManifestView> {
        visible(self.view_of(branch, true).await?)
    }

    /// A fresh manifest view of `branch`, soft-deleted or not (restore and
    /// purge, which hold its gate, read a deleted branch through its actor).
    pub async fn view_of(&self, branch: &str, complete: bool) -> Result<ManifestView> {
        self.ask_branch(branch, "branch actor", Wait::Answer, |reply| BranchMsg::View { complete, reply }).await?
    }

    /// [`Self::view_of`] from the branch's actor when it has one, else read
    /// directly without starting one: listings, cleanup and the reflog read
    /// deleted (hidden) branches, which no one serves, so an actor started
    /// for each would only hold memory until the branch is purged.
    pub async fn peek(&self, branch: &str, complete: bool) -> Result<ManifestView> {
        branch_name::validate_ref(branch)?;
        if self.has_actor(&ChildKey::Branch(branch.to_string())) {
            return self.view_of(branch, complete).await;
        }
        crate::engine::manifest::load_cached(self.root(), branch, &mut None, complete).await
    }

    /// Publish through the branch actor, holding its lease.
    pub async fn publish(&self, request: PublishRequest, lease: &Lease) -> Result<Published> {
        let a = self.branch_actor(&request.branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Branch(request.branch.clone()));
        let lease_id = lease.id();
        let branch = request.branch.clone();
        let published =
            ask(&a, "branch actor", |reply| BranchMsg::Publish { request: Box::new(request), lease_id, reply }).await?;
        if published.is_ok() {
            self.heads.moved(&branch);
        }
        published
    }

    /// A receiver that changes when a publish through this runtime moves
    /// `branch`'s head (or the branch is deleted).
    pub fn head_moves(&self, branch: &str) -> tokio::sync::watch::Receiver<u64> {
        self.heads.subscribe(branch)
    }

    /// How many long polls wait on `branch` now.
    pub fn head_waiters(&self, branch: &str) -> usize {
        self.heads.waiting(branch)
    }

    /// Compact `branch`'s `__manifest` through its actor, holding its lease:
    /// fragment counts before and after.
    pub async fn compact_manifest(&self, branch: &str, lease: &Lease) -> Result<(u64, u64)> {
        let a = self.branch_actor(branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Branch(branch.into()));
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::CompactManifest { lease_id, reply }).await?
    }

    /// Commit a staged transaction through its table actor, holding its lease.
    pub async fn commit(&self, branch: &str, staged: StagedTxn, lease: &Lease) -> Result<CommittedTxn> {
        let a = self.table_actor(staged.uri(), branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::table(staged.uri(), branch));
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Commit { staged: Box::new(staged), lease_id, reply }).await?
    }

    /// Create `branch`'s manifest ref through its actor, holding its lease.
    pub async fn create_branch_ref(&self, branch: &str, plan: CreatePlan, lease: &Lease) -> Result<ManifestView> {
        let a = self.branch_actor(branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Branch(branch.into()));
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::CreateRef { plan, lease_id, reply }).await?
    }

    /// Delete `branch`'s manifest ref (the captured incarnation), holding its lease.
    pub async fn delete_branch_ref(&self, branch: &str, captured: BranchId, lease: &Lease) -> Result<()> {
        let a = self.branch_actor(branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Branch(branch.into()));
        let lease_id = lease.id();
        ask(&a, "branch actor", |reply| BranchMsg::DeleteRef { captured, lease_id, reply }).await?
    }

    /// Fork the table at `uri` for `branch` (first touch), holding its lease.
    pub async fn fork_table(&self, uri: &str, branch: &str, plan: CreatePlan, lease: &Lease) -> Result<Arc<Dataset>> {
        let a = self.table_actor(uri, branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::table(uri, branch));
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Fork { plan, lease_id, reply }).await?
    }

    /// Remove `branch`'s fork of the table at `uri`, holding its lease.
    pub async fn reclaim_table_fork(&self, uri: &str, branch: &str, lease: &Lease) -> Result<bool> {
        let a = self.table_actor(uri, branch).await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::table(uri, branch));
        let lease_id = lease.id();
        ask(&a, "table actor", |reply| TableMsg::Reclaim { lease_id, reply }).await?
    }

    /// Stop the actors of a deleted branch. Its gates go once nothing uses
    /// them (a waiter queued on one keeps it, and so stays ordered against
    /// a recreated branch of the same name).
    pub async fn retire_branch(&self, branch: &str) {
        self.heads.forget(branch);
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
            if let Err(e) = self.ask_supervisor(|reply| SupervisorMsg::Retire { key: key.clone(), reply }).await {
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
        self.ask_table(uri, branch, "table actor", Wait::Answer, |reply| TableMsg::Head { reply }).await?
    }

    /// Ask the reconciler for a background recovery pass (nothing when
    /// background recovery is off in this process).
    pub async fn reconcile_soon(&self) -> Result<()> {
        if !background_recovery() {
            return Ok(());
        }
        let a = self.reconciler().await?;
        a.cast(ReconcilerMsg::Reconcile).map_err(|e| OmniError::ActorUnavailable(format!("reconciler: {e}")))
    }

    /// Counters of every actor of this tree (restarts, panics, leases held
    /// and queued, mailbox length), plus the reconciler's passes.
    pub async fn stats(&self) -> Result<TreeStats> {
        let mut actors = self.ask_supervisor(|reply| SupervisorMsg::Stats { reply }).await?;
        let mailboxes: HashMap<String, usize> =
            self.mailboxes.iter().map(|e| (e.key().gate_name(), *e.value())).collect();
        // Table actors are named by dataset URI: show it relative to the root.
        let prefix = format!("{}/", self.root.uri());
        for a in &mut actors {
            a.mailbox = mailboxes.get(&a.actor).copied().unwrap_or(0);
            a.actor = a.actor.replace(&prefix, "");
        }
        let reconciler_passes = self.reconciler_passes.load(std::sync::atomic::Ordering::SeqCst);
        let supervisor_restarts = self.supervisor_restarts.load(std::sync::atomic::Ordering::SeqCst);
        Ok(TreeStats {
            actors,
            supervisor_restarts,
            reconciler_passes,
            writes_in_flight: self.live.len(),
            queued_writes: self.write_queues.total(),
            maintenance: self.maintenance.stats(),
        })
    }

    /// Pending recovery sidecars.
    pub async fn pending_sidecars(&self) -> Result<Vec<String>> {
        let a = self.reconciler().await?;
        let _in = InMailbox::new(&self.mailboxes, ChildKey::Reconciler);
        ask(&a, "reconciler", |reply| ReconcilerMsg::ListPending { reply }).await?
    }
}

/// `view`, unless its branch is soft-deleted (then `NotFound`, naming how
/// to bring it back).
fn visible(view: ManifestView) -> Result<ManifestView> {
    match view.state.deleted(&view.branch) {
        None => Ok(view),
        Some(_) => Err(OmniError::NotFound(format!(
            "branch `{}` (deleted; `omnigraph branch restore {}` brings it back)",
            view.branch, view.branch
        ))),
    }
}
