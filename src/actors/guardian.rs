//! The Guardian supervises the root supervisor: one per graph root, it
//! restarts a [`RootSupervisor`] that died (a panic in its handler, a kill)
//! with the same gates and directory, so leases held across the restart
//! stay held and queued requests stay ordered.
//!
//! When the supervisor dies, ractor terminates its children with it; the new
//! incarnation starts the standing children again and the rest on demand,
//! each from storage. A saga caught mid-ask by the restart gets a retryable
//! `ActorUnavailable`, or `RecoveryRequired` once it has armed.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tracing::{info, warn};

use super::reconciler::ReconcilerArgs;
use super::supervisor::{Directory, Gates, RootSupervisor, SupervisorArgs, SupervisorMsg};
use crate::engine::storage::Root;

/// How long a stopping guardian waits for the supervisor's tree to stop.
const TREE_STOP_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// Where handles find the current supervisor incarnation, and wait for the
/// next one when the current one died (`None` once the tree stops).
pub type SupervisorSlot = tokio::sync::watch::Sender<Option<ActorRef<SupervisorMsg>>>;

/// The guardian takes no requests: it only supervises (its restart count
/// is read through [`GuardianArgs::restarts`], without asking it).
pub enum GuardianMsg {}

/// The guardian actor.
pub struct Guardian;

/// Start arguments: everything a supervisor incarnation starts from.
pub struct GuardianArgs {
    /// The graph root.
    pub root: Root,
    /// The directory shared with handles.
    pub directory: Directory,
    /// The gates, kept across supervisor incarnations.
    pub gates: Gates,
    /// The reconciler's arguments.
    pub reconciler: ReconcilerArgs,
    /// Published to handles on every (re)start.
    pub slot: SupervisorSlot,
    /// Supervisor restarts, readable without asking.
    pub restarts: Arc<std::sync::atomic::AtomicU64>,
    /// Maintenance counters, kept across supervisor incarnations.
    pub maintenance: Arc<super::maintenance::Maintenance>,
}

impl GuardianArgs {
    async fn start_supervisor(&self, me: &ActorRef<GuardianMsg>) -> Result<(), ActorProcessingErr> {
        let args = SupervisorArgs {
            root: self.root.clone(),
            directory: self.directory.clone(),
            gates: self.gates.clone(),
            reconciler: self.reconciler.clone(),
            maintenance: self.maintenance.clone(),
        };
        let (sup, _) = Actor::spawn_linked(None, RootSupervisor, args, me.get_cell()).await?;
        self.slot.send_replace(Some(sup));
        Ok(())
    }

    fn current(&self) -> Option<ActorRef<SupervisorMsg>> {
        self.slot.borrow().clone()
    }
}

impl Actor for Guardian {
    type Msg = GuardianMsg;
    type State = GuardianArgs;
    type Arguments = GuardianArgs;

    async fn pre_start(
        &self,
        me: ActorRef<GuardianMsg>,
        args: GuardianArgs,
    ) -> Result<GuardianArgs, ActorProcessingErr> {
        args.start_supervisor(&me).await?;
        Ok(args)
    }

    async fn handle(
        &self,
        _me: ActorRef<GuardianMsg>,
        msg: GuardianMsg,
        _state: &mut GuardianArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {}
    }

    async fn handle_supervisor_evt(
        &self,
        me: ActorRef<GuardianMsg>,
        evt: SupervisionEvent,
        state: &mut GuardianArgs,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &evt {
            SupervisionEvent::ActorFailed(cell, _) | SupervisionEvent::ActorTerminated(cell, _, _) => cell.clone(),
            _ => return Ok(()),
        };
        if state.current().map(|s| s.get_id()) != Some(cell.get_id()) {
            return Ok(());
        }
        warn!(root = %state.root.uri(), "root supervisor stopped unexpectedly; restarting it");
        state.restarts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Children died with it: handles must not find them.
        state.directory.clear();
        if let Err(e) = state.start_supervisor(&me).await {
            // Without a supervisor the tree cannot serve: stop, so handles
            // see `ActorUnavailable` instead of a silent hang.
            warn!(error = %e, "root supervisor restart failed; stopping the tree");
            me.stop(Some("supervisor restart failed".into()));
        }
        Ok(())
    }

    async fn post_stop(&self, _me: ActorRef<GuardianMsg>, state: &mut GuardianArgs) -> Result<(), ActorProcessingErr> {
        info!(root = %state.root.uri(), "stopping the guardian");
        let sup = state.slot.send_replace(None);
        if let Some(sup) = sup
            && let Err(e) = sup.stop_and_wait(Some("guardian stopped".into()), Some(TREE_STOP_LIMIT)).await
        {
            warn!(error = %e, "the supervisor did not stop in time");
        }
        Ok(())
    }
}
