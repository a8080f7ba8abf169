//! SchemaActor: holds the accepted schema and serves the schema gate.

use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::debug;

use super::lease::Gate;
use crate::actors::messages::SchemaMsg;
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::Root;

/// The schema actor. Restarted from storage (`_schema.pg`) by the supervisor.
pub struct SchemaActor;

/// Start arguments (kept by the supervisor for restarts).
#[derive(Clone)]
pub struct SchemaArgs {
    /// The graph root.
    pub root: Root,
    /// The schema gate (outlives the actor).
    pub gate: Gate,
}

/// Actor state.
pub struct SchemaActorState {
    gate: Gate,
    root: Root,
    schema: Arc<SchemaState>,
}

/// Swap in the schema storage holds now; only the exclusive holder may.
async fn reload(state: &mut SchemaActorState, lease_id: u64) -> crate::protocol::Result<Arc<SchemaState>> {
    if !state.gate.holds_exclusive(lease_id) {
        return Err(crate::protocol::OmniError::Internal(
            "schema reload without holding the exclusive schema lease".into(),
        ));
    }
    let schema = Arc::new(SchemaState::read(&state.root).await?);
    debug!(identity = %schema.identity, "schema reloaded");
    state.schema = schema.clone();
    Ok(schema)
}

impl Actor for SchemaActor {
    type Msg = SchemaMsg;
    type State = SchemaActorState;
    type Arguments = SchemaArgs;

    async fn pre_start(&self, _me: ActorRef<SchemaMsg>, args: SchemaArgs) -> Result<Self::State, ActorProcessingErr> {
        let schema = SchemaState::read(&args.root).await?;
        debug!(identity = %schema.identity, "schema actor started");
        Ok(SchemaActorState { gate: args.gate, root: args.root, schema: Arc::new(schema) })
    }

    async fn handle(
        &self,
        _me: ActorRef<SchemaMsg>,
        msg: SchemaMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SchemaMsg::Acquire { mode, reply } => state.gate.enqueue(mode, reply),
            SchemaMsg::TryAcquire { mode, reply } => drop(reply.send(state.gate.try_grant(mode))),
            SchemaMsg::Current { reply } => drop(reply.send(state.schema.clone())),
            SchemaMsg::Reload { lease_id, reply } => {
                let out = reload(state, lease_id).await;
                drop(reply.send(out));
            }
        }
        Ok(())
    }
}
