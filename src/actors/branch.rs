//! BranchActor: the branch gate and the only publisher to `__manifest` for its branch.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{Instrument, info_span};

use super::lease::{Gate, LeaseMode};
use crate::engine::manifest::{self, PublishRequest, Published, publisher};
use crate::engine::storage::{Root, branches};
use crate::protocol::messages::BranchMsg;
use crate::protocol::{OmniError, Result};

/// One graph branch's actor.
pub struct BranchActor;

/// Start arguments (kept by the supervisor for restarts).
#[derive(Clone)]
pub struct BranchArgs {
    /// The graph root.
    pub root: Root,
    /// The graph branch.
    pub branch: String,
    /// The branch gate (outlives the actor).
    pub gate: Gate,
}

impl Actor for BranchActor {
    type Msg = BranchMsg;
    type State = BranchArgs;
    type Arguments = BranchArgs;

    async fn pre_start(&self, _me: ActorRef<BranchMsg>, args: BranchArgs) -> Result<BranchArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _me: ActorRef<BranchMsg>,
        msg: BranchMsg,
        state: &mut BranchArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BranchMsg::Acquire { reply } => state.gate.enqueue(LeaseMode::Exclusive, reply),
            BranchMsg::View { reply } => {
                drop(reply.send(manifest::load(&state.root, &state.branch, None).await));
            }
            BranchMsg::Publish { request, lease_id, reply } => {
                let out = publish(state, &request, lease_id).await;
                drop(reply.send(out));
            }
            BranchMsg::CreateRef { plan, lease_id, reply } => {
                let out = async {
                    check_lease(state, lease_id)?;
                    branches::create_exact(&manifest::uri(&state.root), &state.branch, &plan).await?;
                    manifest::load(&state.root, &state.branch, None).await
                };
                drop(reply.send(out.instrument(info_span!("branch.create_ref", branch = %state.branch)).await));
            }
            BranchMsg::DeleteRef { captured, lease_id, reply } => {
                let out = async {
                    check_lease(state, lease_id)?;
                    branches::delete_exact(&manifest::uri(&state.root), &state.branch, &captured.0).await
                };
                drop(reply.send(out.instrument(info_span!("branch.delete_ref", branch = %state.branch)).await));
            }
        }
        Ok(())
    }
}

fn check_lease(state: &BranchArgs, lease_id: u64) -> Result<()> {
    if !state.gate.holds(lease_id) {
        return Err(OmniError::Internal(format!("change on `{}` without holding its branch lease", state.branch)));
    }
    Ok(())
}

async fn publish(state: &BranchArgs, request: &PublishRequest, lease_id: u64) -> Result<Published> {
    if request.branch != state.branch {
        return Err(OmniError::Internal(format!(
            "publish for branch `{}` sent to the actor of `{}`",
            request.branch, state.branch
        )));
    }
    check_lease(state, lease_id)?;
    let span = info_span!("saga.publish", operation_id = %request.lineage.commit_id, branch = %state.branch);
    publisher::publish(&state.root, request).instrument(span).await
}
