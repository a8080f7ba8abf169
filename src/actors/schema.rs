//! SchemaActor: holds the accepted schema (main's), serves the schema gate,
//! and answers the schema any branch or commit binds.
//!
//! Each branch has its own schema: the target of the nearest schema apply on
//! its head's first-parent line, or the graph's original schema when none
//! precedes it ([`crate::engine::manifest::ManifestState::schema_applied_at`]).
//! Main's is the accepted one on `_schema.pg`; any other is read from the
//! archive by identity and kept in a small bounded cache here.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::debug;

use super::lease::Gate;
use crate::actors::messages::SchemaMsg;
use crate::engine::branch_name::MAIN;
use crate::engine::manifest::{self, ManifestState};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::Root;
use crate::protocol::Result;

/// Archived schemas kept at most (a graph has few live schemas at once: one
/// per diverged branch and the ones time travel reads).
const ARCHIVED_KEPT: usize = 16;

/// Branches whose last bound head is kept (one entry each).
const HEADS_KEPT: usize = 1024;

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
    /// Archived schemas read so far, by identity (bounded: [`ARCHIVED_KEPT`]).
    archived: HashMap<String, Arc<SchemaState>>,
    /// The identity the graph was created with, once known (it never changes).
    original: Option<String>,
    /// Per branch: the last head bound and the identity it binds, so a
    /// write's head (the child of the one before) binds without walking its
    /// history back to the last apply (bounded: [`HEADS_KEPT`]).
    heads: HashMap<String, (String, Option<String>)>,
}

/// The identity `head` of `branch` binds in `manifest`: the last head bound
/// for the branch's, when `head` is that head or its child without a schema
/// change (a commit's binding never changes), else by walking `manifest`.
fn head_identity(state: &mut SchemaActorState, branch: &str, manifest: &ManifestState, head: &str) -> Option<String> {
    if let (Some((last, identity)), Some(row)) = (state.heads.get(branch), manifest.commit(head)) {
        if last == head {
            return identity.clone();
        }
        if row.schema_change.is_none() && row.parent.as_deref() == Some(last.as_str()) {
            let identity = identity.clone();
            state.heads.insert(branch.to_string(), (head.to_string(), identity.clone()));
            return identity;
        }
    }
    let identity = manifest.schema_applied_at(head);
    if state.heads.len() >= HEADS_KEPT {
        state.heads.clear();
    }
    state.heads.insert(branch.to_string(), (head.to_string(), identity.clone()));
    identity
}

/// The schema of `identity` (`None`: the original one).
async fn bound(state: &mut SchemaActorState, identity: Option<String>) -> Result<Arc<SchemaState>> {
    let identity = match identity {
        Some(identity) => identity,
        None => original(state).await?,
    };
    if identity == state.schema.identity {
        return Ok(state.schema.clone());
    }
    if let Some(found) = state.archived.get(&identity) {
        return Ok(found.clone());
    }
    let found = Arc::new(SchemaState::archived(&state.root, &identity).await?);
    if state.archived.len() >= ARCHIVED_KEPT {
        state.archived.clear();
    }
    state.archived.insert(identity, found.clone());
    Ok(found)
}

/// The graph's original schema: the `from` of main's oldest apply, else the
/// accepted one (main never applied, and only main's applies change the
/// accepted files). The accepted schema is taken before main's manifest is
/// read: an apply publishes before it promotes, so a manifest without an
/// apply means the accepted schema taken before it was still the original.
async fn original(state: &mut SchemaActorState) -> Result<String> {
    if let Some(known) = &state.original {
        return Ok(known.clone());
    }
    let accepted = state.schema.identity.clone();
    let main = manifest::load_cached(&state.root, MAIN, &mut None, false).await?;
    let known = main.state.original_schema().unwrap_or(accepted);
    state.original = Some(known.clone());
    Ok(known)
}

/// Swap in the schema storage holds now; only the exclusive holder may.
async fn reload(state: &mut SchemaActorState, lease_id: u64) -> Result<Arc<SchemaState>> {
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
        Ok(SchemaActorState {
            gate: args.gate,
            root: args.root,
            schema: Arc::new(schema),
            archived: HashMap::new(),
            original: None,
            heads: HashMap::new(),
        })
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
            SchemaMsg::Bound { identity, reply } => {
                let out = bound(state, identity).await;
                drop(reply.send(out));
            }
            SchemaMsg::OfHead { branch, state: manifest, head, reply } => {
                let identity = head.and_then(|h| head_identity(state, &branch, &manifest, &h));
                drop(reply.send(bound(state, identity).await));
            }
        }
        Ok(())
    }
}
