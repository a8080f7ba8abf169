//! RootSupervisor: one per canonical graph root in the process (itself
//! supervised by the [`super::guardian::Guardian`]). Spawns the schema,
//! branch, table and reconciler actors, and restarts any of them that dies,
//! from storage, with the same gate (so held leases and queued requests
//! survive the restart).

use std::collections::HashMap;
use std::sync::Arc;

use dashmap::DashMap;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SupervisionEvent};
use tracing::{info, warn};

use super::branch::{BranchActor, BranchArgs};
use super::child_key::ChildKey;
use super::lease::Gate;
use super::reconciler::{ReconcilerActor, ReconcilerArgs};
use super::schema::{SchemaActor, SchemaArgs};
use super::table::{TableActor, TableArgs};
use crate::actors::messages::{BranchMsg, ReconcilerMsg, SchemaMsg, TableMsg};
use crate::engine::storage::Root;
use crate::protocol::{OmniError, Result};

/// How long a stopping root waits for each child to finish its current message.
const CHILD_STOP_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// A live child's typed reference.
#[derive(Clone)]
pub enum ChildRef {
    /// Schema actor.
    Schema(ActorRef<SchemaMsg>),
    /// Branch actor.
    Branch(ActorRef<BranchMsg>),
    /// Table actor.
    Table(ActorRef<TableMsg>),
    /// Reconciler.
    Reconciler(ActorRef<ReconcilerMsg>),
}

impl ChildRef {
    fn cell(&self) -> ActorCell {
        match self {
            ChildRef::Schema(a) => a.get_cell(),
            ChildRef::Branch(a) => a.get_cell(),
            ChildRef::Table(a) => a.get_cell(),
            ChildRef::Reconciler(a) => a.get_cell(),
        }
    }

    /// Whether the actor can take messages.
    pub fn is_alive(&self) -> bool {
        matches!(self.cell().get_status(), ActorStatus::Running | ActorStatus::Starting)
    }
}

/// Where handles find the current children without a supervisor round trip.
pub type Directory = Arc<DashMap<ChildKey, ChildRef>>;

/// Every child's gate, created on first use and kept for the life of the
/// tree: across child restarts and across supervisor incarnations (the
/// guardian hands the same gates to each), so a held lease stays held.
pub type Gates = Arc<DashMap<ChildKey, Gate>>;

/// Messages to the supervisor.
pub enum SupervisorMsg {
    /// Return the live child for `key`, spawning it if needed.
    Ensure {
        /// Which child.
        key: ChildKey,
        /// Answered with the child or the spawn error.
        reply: RpcReplyPort<Result<ChildRef>>,
    },
    /// Stop a child for good (e.g. its branch was deleted).
    Retire {
        /// Which child.
        key: ChildKey,
        /// Answered once the directory no longer lists it.
        reply: RpcReplyPort<()>,
    },
    /// Number of restarts performed so far (diagnostics and tests).
    Restarts {
        /// Answered at once.
        reply: RpcReplyPort<u64>,
    },
    /// Counters of every child the supervisor has run.
    Stats {
        /// Answered at once.
        reply: RpcReplyPort<Vec<ActorStats>>,
    },
}

/// Observable counters of one child (for operators, and for tests that wait
/// on state instead of sleeping).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ActorStats {
    /// The child's gate name (`schema`, `branch:main`, `table:<uri>@<branch>`, `reconciler`).
    pub actor: String,
    /// Whether an incarnation is running now.
    pub alive: bool,
    /// Restarts after an unexpected stop.
    pub restarts: u64,
    /// Of those stops, the ones that were panics in a handler.
    pub panics: u64,
    /// Leases held on its gate now.
    pub leases_held: usize,
    /// Lease requests queued on its gate now.
    pub leases_queued: usize,
    /// Requests sent to it and not yet answered (its mailbox, the one in
    /// its handler included; filled in by the runtime, which sends them).
    pub mailbox: usize,
}

/// Per-child restart and panic counts.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    restarts: u64,
    panics: u64,
}

/// The supervisor actor.
pub struct RootSupervisor;

/// Start arguments.
pub struct SupervisorArgs {
    /// The graph root.
    pub root: Root,
    /// The directory shared with handles.
    pub directory: Directory,
    /// The gates (shared with earlier incarnations).
    pub gates: Gates,
    /// The reconciler's arguments (its pass comes from the runtime).
    pub reconciler: ReconcilerArgs,
    /// Maintenance counters the branch and table actors bump.
    pub maintenance: Arc<super::maintenance::Maintenance>,
}

/// Supervisor state.
pub struct SupervisorState {
    root: Root,
    directory: Directory,
    reconciler: ReconcilerArgs,
    gates: Gates,
    maintenance: Arc<super::maintenance::Maintenance>,
    by_id: HashMap<ActorId, ChildKey>,
    restarts: u64,
    counts: HashMap<ChildKey, Counts>,
}

impl SupervisorState {
    /// Drop the gates nothing uses (a deleted branch's, once its actors
    /// stopped), so a daemon that creates and deletes branches for weeks
    /// keeps only the gates of what exists. A busy or served gate stays.
    fn forget_unused_gates(&self) {
        self.gates.retain(|_, gate| !gate.unused());
    }

    fn gate(&mut self, key: &ChildKey) -> Gate {
        self.gates.entry(key.clone()).or_insert_with(|| Gate::new(key.gate_name())).value().clone()
    }

    async fn spawn(&mut self, me: ActorCell, key: &ChildKey) -> Result<ChildRef> {
        let gate = self.gate(key);
        let root = self.root.clone();
        let spawn_err = |e: ractor::SpawnErr| OmniError::ActorUnavailable(format!("starting {key:?}: {e}"));
        let child = match key {
            ChildKey::Schema => {
                let (a, _) =
                    Actor::spawn_linked(None, SchemaActor, SchemaArgs { root, gate }, me).await.map_err(spawn_err)?;
                ChildRef::Schema(a)
            }
            ChildKey::Branch(branch) => {
                let args = BranchArgs { root, branch: branch.clone(), gate, maintenance: self.maintenance.clone() };
                let (a, _) = Actor::spawn_linked(None, BranchActor, args, me).await.map_err(spawn_err)?;
                ChildRef::Branch(a)
            }
            ChildKey::Table { uri, branch } => {
                let branch = Some(branch.clone()).filter(|b| b != "main");
                let args = TableArgs { uri: uri.clone(), branch, gate, maintenance: self.maintenance.clone() };
                let (a, _) = Actor::spawn_linked(None, TableActor, args, me).await.map_err(spawn_err)?;
                ChildRef::Table(a)
            }
            ChildKey::Reconciler => {
                let args = self.reconciler.clone();
                let (a, _) = Actor::spawn_linked(None, ReconcilerActor, args, me).await.map_err(spawn_err)?;
                ChildRef::Reconciler(a)
            }
        };
        self.by_id.insert(child.cell().get_id(), key.clone());
        self.directory.insert(key.clone(), child.clone());
        Ok(child)
    }

    fn stats(&self) -> Vec<ActorStats> {
        let mut out: Vec<ActorStats> = self
            .gates
            .iter()
            .map(|entry| {
                let (key, gate) = (entry.key(), entry.value());
                let counts = self.counts.get(key).copied().unwrap_or_default();
                let (leases_held, leases_queued) = gate.load();
                ActorStats {
                    actor: key.gate_name(),
                    alive: self.directory.get(key).is_some_and(|c| c.is_alive()),
                    restarts: counts.restarts,
                    panics: counts.panics,
                    leases_held,
                    leases_queued,
                    mailbox: 0,
                }
            })
            .collect();
        out.sort_by(|a, b| a.actor.cmp(&b.actor));
        out
    }

    async fn ensure(&mut self, me: ActorCell, key: &ChildKey) -> Result<ChildRef> {
        if let Some(c) = self.directory.get(key).map(|c| c.clone())
            && c.is_alive()
        {
            return Ok(c);
        }
        self.spawn(me, key).await
    }
}

impl Actor for RootSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        me: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> std::result::Result<SupervisorState, ActorProcessingErr> {
        let mut state = SupervisorState {
            root: args.root,
            directory: args.directory,
            reconciler: args.reconciler,
            gates: args.gates,
            maintenance: args.maintenance,
            by_id: HashMap::new(),
            restarts: 0,
            counts: HashMap::new(),
        };
        for key in [ChildKey::Schema, ChildKey::Reconciler, ChildKey::Branch("main".into())] {
            state.spawn(me.get_cell(), &key).await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        me: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Ensure { key, reply } => {
                let out = state.ensure(me.get_cell(), &key).await;
                drop(reply.send(out));
            }
            SupervisorMsg::Retire { key, reply } => {
                // Its id stays in `by_id` until it has stopped: the stop
                // event then forgets the gates nothing uses any more.
                if let Some((_, child)) = state.directory.remove(&key) {
                    child.cell().stop(Some("retired".into()));
                }
                drop(reply.send(()));
            }
            SupervisorMsg::Restarts { reply } => drop(reply.send(state.restarts)),
            SupervisorMsg::Stats { reply } => drop(reply.send(state.stats())),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<SupervisorMsg>,
        evt: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        let cell = match &evt {
            SupervisionEvent::ActorFailed(cell, _) | SupervisionEvent::ActorTerminated(cell, _, _) => cell.clone(),
            _ => return Ok(()),
        };
        let Some(key) = state.by_id.remove(&cell.get_id()) else {
            return Ok(());
        };
        // A replaced or retired child is not restarted.
        let current = state.directory.get(&key).map(|c| c.cell().get_id());
        if current != Some(cell.get_id()) {
            // The event carries the stopped child's state, and with it its
            // copy of the gate: dropped first, the gate reads as unused.
            drop(evt);
            state.forget_unused_gates();
            return Ok(());
        }
        warn!(?key, "actor stopped unexpectedly; restarting from storage");
        state.restarts += 1;
        let counts = state.counts.entry(key.clone()).or_default();
        counts.restarts += 1;
        if matches!(evt, SupervisionEvent::ActorFailed(..)) {
            counts.panics += 1;
        }
        if let Err(e) = state.spawn(me.get_cell(), &key).await {
            warn!(?key, error = %e, "restart failed; the next request will retry");
            state.directory.remove(&key);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _me: ActorRef<SupervisorMsg>,
        state: &mut SupervisorState,
    ) -> std::result::Result<(), ActorProcessingErr> {
        info!(root = %state.root.uri(), "stopping actor tree");
        let children: Vec<ChildRef> = state.directory.iter().map(|e| e.value().clone()).collect();
        state.directory.clear();
        // Each child finishes its current message first; the tree counts as
        // stopped only once they all have (see `runtime::quiesce`).
        let cells: Vec<ActorCell> = children.iter().map(ChildRef::cell).collect();
        let stops = cells.iter().map(|c| c.stop_and_wait(Some("root stopped".into()), Some(CHILD_STOP_LIMIT)));
        for (cell, out) in cells.iter().zip(futures::future::join_all(stops).await) {
            if let Err(e) = out {
                warn!(actor = ?cell.get_id(), error = %e, "child did not stop in time");
            }
        }
        Ok(())
    }
}
