//! ReconcilerActor: owns the `__recovery/` listing and runs background
//! recovery passes (roll forward and roll back), so a long-running process
//! heals a failed write without a restart.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ractor::{Actor, ActorProcessingErr, ActorRef};

use crate::engine::storage::Root;
use crate::protocol::messages::ReconcilerMsg;
use crate::recovery::list_pending;
use crate::recovery::sweep::background_pass;

/// The reconciler.
pub struct ReconcilerActor;

/// Reconciler state.
pub struct ReconcilerState {
    root: Root,
    running: Arc<AtomicBool>,
}

impl Actor for ReconcilerActor {
    type Msg = ReconcilerMsg;
    type State = ReconcilerState;
    type Arguments = Root;

    async fn pre_start(&self, _me: ActorRef<ReconcilerMsg>, root: Root) -> Result<ReconcilerState, ActorProcessingErr> {
        Ok(ReconcilerState { root, running: Arc::new(AtomicBool::new(false)) })
    }

    async fn handle(
        &self,
        _me: ActorRef<ReconcilerMsg>,
        msg: ReconcilerMsg,
        state: &mut ReconcilerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ReconcilerMsg::ListPending { reply } => drop(reply.send(list_pending(&state.root).await)),
            ReconcilerMsg::Reconcile { runtime } => {
                // The pass waits on gates; it runs beside the mailbox so
                // listing stays answerable (writers list under their gates).
                if state.running.swap(true, Ordering::SeqCst) {
                    return Ok(());
                }
                let running = state.running.clone();
                tokio::spawn(async move {
                    if let Some(rt) = runtime.upgrade() {
                        background_pass(&rt).await;
                    }
                    running.store(false, Ordering::SeqCst);
                });
            }
        }
        Ok(())
    }
}
