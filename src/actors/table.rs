//! TableActor: the gate of one table on one branch; runs its exact commits
//! and forks, and keeps the dataset open at the last version it saw (its
//! head answers are then one version probe, not a dataset open).

use std::sync::Arc;

use lance::Dataset;
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
    /// The tree's maintenance counters.
    pub maintenance: Arc<super::maintenance::Maintenance>,
}

/// What the actor owns: its arguments and the dataset as last seen.
pub struct TableState {
    args: TableArgs,
    /// Open on this actor's ref at the last version it opened, committed or
    /// forked (`None` before the first, and after a reclaim).
    dataset: Option<Arc<Dataset>>,
}

impl TableState {
    /// The live HEAD of this ref: a version probe on the open dataset, or an
    /// open when there is none (or the probe failed: the ref may be gone,
    /// and the open says so with the typed error).
    async fn head(&mut self) -> Result<u64> {
        if let Some(ds) = &self.dataset
            && let Ok(v) = table::latest_version(ds).await
        {
            return Ok(v);
        }
        self.dataset = None;
        let ds = table::open_table(&self.args.uri, self.args.branch.as_deref(), None).await?;
        let v = ds.version().version;
        self.dataset = Some(ds);
        Ok(v)
    }
}

impl Actor for TableActor {
    type Msg = TableMsg;
    type State = TableState;
    type Arguments = TableArgs;

    async fn pre_start(&self, _me: ActorRef<TableMsg>, args: TableArgs) -> Result<TableState, ActorProcessingErr> {
        Ok(TableState { args, dataset: None })
    }

    async fn handle(
        &self,
        _me: ActorRef<TableMsg>,
        msg: TableMsg,
        state: &mut TableState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TableMsg::Acquire { reply } => state.args.gate.enqueue(LeaseMode::Exclusive, reply),
            TableMsg::TryAcquire { reply } => drop(reply.send(state.args.gate.try_grant(LeaseMode::Exclusive))),
            TableMsg::Head { reply } => drop(reply.send(state.head().await)),
            TableMsg::Commit { staged, lease_id, reply } => {
                let compaction = staged.is_compaction();
                let out = commit(&state.args, *staged, lease_id).await;
                if let Ok(c) = &out {
                    state.dataset = Some(c.dataset.clone());
                    if compaction {
                        state.args.maintenance.table_compacted();
                    }
                }
                drop(reply.send(out));
            }
            TableMsg::Fork { plan, lease_id, reply } => {
                let args = &state.args;
                let out = async {
                    let name = named_branch(args, lease_id)?;
                    branches::create_exact(&args.uri, name, &plan).await
                };
                let span = info_span!("table.fork", table = %args.gate.name(), version = plan.parent_version);
                let out = out.instrument(span).await;
                if let Ok(ds) = &out {
                    state.dataset = Some(ds.clone());
                }
                drop(reply.send(out));
            }
            TableMsg::Reclaim { lease_id, reply } => {
                state.dataset = None;
                let args = &state.args;
                let out = async { branches::reclaim(&args.uri, named_branch(args, lease_id)?).await };
                drop(reply.send(out.instrument(info_span!("table.reclaim", table = %args.gate.name())).await));
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
    // A compaction's commit is timed apart from a write's (`/healthz?verbose`).
    let span = if staged.is_compaction() {
        info_span!("table.compaction_commit", operation_id = %identity.uuid, table = %state.gate.name())
    } else {
        info_span!("saga.commit", operation_id = %identity.uuid, table = %state.gate.name())
    };
    named_failpoint!("table.before_commit");
    let committed = table::commit_exact(staged).instrument(span).await?;
    named_failpoint!("table.after_commit");
    Ok(committed)
}
