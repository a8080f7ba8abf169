//! TableActor: the gate of one table on one branch; runs its exact commits.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{Instrument, info_span};

use super::lease::{Gate, LeaseMode};
use crate::actors::messages::TableMsg;
use crate::engine::storage::{CommittedTxn, StagedTxn, branches, table};
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};

/// One (table, branch) actor.
pub struct TableActor;

/// Start arguments (kept by the supervisor for restarts).
#[derive(Clone)]
pub struct TableArgs {
    /// Dataset URI of the table.
    pub uri: String,
    /// Native Lance branch of the table (`None` = main).
    pub branch: Option<String>,
    /// The table gate (outlives the actor).
    pub gate: Gate,
}

impl Actor for TableActor {
    type Msg = TableMsg;
    type State = TableArgs;
    type Arguments = TableArgs;

    async fn pre_start(&self, _me: ActorRef<TableMsg>, args: TableArgs) -> Result<TableArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _me: ActorRef<TableMsg>,
        msg: TableMsg,
        state: &mut TableArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TableMsg::Acquire { reply } => state.gate.enqueue(LeaseMode::Exclusive, reply),
            TableMsg::TryAcquire { reply } => drop(reply.send(state.gate.try_grant(LeaseMode::Exclusive))),
            TableMsg::Head { reply } => {
                drop(reply.send(table::head_version(&state.uri, state.branch.as_deref()).await));
            }
            TableMsg::Commit { staged, lease_id, reply } => {
                drop(reply.send(commit(state, *staged, lease_id).await));
            }
            TableMsg::Fork { plan, lease_id, reply } => {
                let out = async {
                    let name = named_branch(state, lease_id)?;
                    branches::create_exact(&state.uri, name, &plan).await
                };
                let span = info_span!("table.fork", table = %state.gate.name(), version = plan.parent_version);
                drop(reply.send(out.instrument(span).await));
            }
            TableMsg::Reclaim { lease_id, reply } => {
                let out = async { branches::reclaim(&state.uri, named_branch(state, lease_id)?).await };
                drop(reply.send(out.instrument(info_span!("table.reclaim", table = %state.gate.name())).await));
            }
        }
        Ok(())
    }
}

/// The named branch this actor forks for, once the caller's lease is checked.
fn named_branch(state: &TableArgs, lease_id: u64) -> Result<&str> {
    if !state.gate.holds(lease_id) {
        return Err(OmniError::Internal(format!(
            "ref change on {} without holding its table lease",
            state.gate.name()
        )));
    }
    state.branch.as_deref().ok_or_else(|| OmniError::Internal("main has no fork to create or reclaim".into()))
}

async fn commit(state: &TableArgs, staged: StagedTxn, lease_id: u64) -> Result<CommittedTxn> {
    if !state.gate.holds(lease_id) {
        return Err(OmniError::Internal(format!("commit on {} without holding its table lease", state.gate.name())));
    }
    if staged.uri() != state.uri {
        return Err(OmniError::Internal(format!("transaction for {} sent to {}", staged.uri(), state.uri)));
    }
    // A transaction staged on another ref of the table would land there
    // under this ref's lease: refuse it before it reaches Lance.
    if staged.target_ref() != state.branch.as_deref() {
        return Err(OmniError::Internal(format!(
            "transaction staged on ref {:?} sent to the actor of ref {:?} of {}",
            staged.target_ref(),
            state.branch,
            state.gate.name()
        )));
    }
    let identity = staged.identity();
    let span = info_span!("saga.commit", operation_id = %identity.uuid, table = %state.gate.name());
    named_failpoint!("table.before_commit");
    let committed = table::commit_exact(staged).instrument(span).await?;
    named_failpoint!("table.after_commit");
    Ok(committed)
}
