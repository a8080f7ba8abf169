//! ReconcilerActor: owns the `__recovery/` listing and runs background
//! recovery passes (roll forward and roll back), so a long-running process
//! heals a failed write without a restart.
//!
//! The pass runs inside the actor's handler (killing the actor interrupts
//! it), on a ractor interval timer and whenever a failed write asks. It never
//! waits on a gate (it skips a sidecar whose gates are busy), so a writer
//! asking for the listing under its own gates is answered after at most the
//! pass's own storage I/O.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use ractor::{Actor, ActorProcessingErr, ActorRef};

use super::messages::ReconcilerMsg;
use crate::engine::storage::Root;
use crate::recovery::list_pending;

/// Builds one recovery pass. The runtime supplies it, so this actor runs
/// passes without knowing the tree it is part of.
pub type PassFn = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The reconciler.
pub struct ReconcilerActor;

/// Start arguments (kept by the supervisor for restarts).
#[derive(Clone)]
pub struct ReconcilerArgs {
    /// The graph root.
    pub root: Root,
    /// One background pass.
    pub pass: PassFn,
    /// How often to look for pending sidecars; `None`: only when asked.
    pub period: Option<Duration>,
    /// Passes completed, by every incarnation: shared with the runtime, so
    /// reading it never waits on a pass in progress.
    pub passes: Arc<AtomicU64>,
}

/// Reconciler state.
pub struct ReconcilerState {
    args: ReconcilerArgs,
}

impl Actor for ReconcilerActor {
    type Msg = ReconcilerMsg;
    type State = ReconcilerState;
    type Arguments = ReconcilerArgs;

    async fn pre_start(
        &self,
        me: ActorRef<ReconcilerMsg>,
        args: ReconcilerArgs,
    ) -> Result<ReconcilerState, ActorProcessingErr> {
        if let Some(period) = args.period {
            // The timer stops by itself once the actor is gone.
            me.send_interval(period, || ReconcilerMsg::Reconcile);
        }
        Ok(ReconcilerState { args })
    }

    async fn handle(
        &self,
        _me: ActorRef<ReconcilerMsg>,
        msg: ReconcilerMsg,
        state: &mut ReconcilerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ReconcilerMsg::ListPending { reply } => drop(reply.send(list_pending(&state.args.root).await)),
            ReconcilerMsg::Reconcile => {
                (state.args.pass)().await;
                state.args.passes.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(())
    }
}
