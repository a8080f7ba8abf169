//! Actor messages. Every gate actor answers `Acquire` with a [`Lease`];
//! effect messages carry the id of the lease that authorises them.

use std::sync::Arc;

use ractor::RpcReplyPort;

use lance::Dataset;

use crate::actors::lease::{Lease, LeaseMode};
use crate::engine::manifest::{BranchId, ManifestView, PublishRequest, Published};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::branches::CreatePlan;
use crate::engine::storage::{CommittedTxn, StagedTxn};
use crate::protocol::Result;

/// Messages to the SchemaActor (the schema gate).
pub enum SchemaMsg {
    /// Queue for the schema gate.
    Acquire {
        /// Shared for data writers, exclusive for schema apply and full recovery.
        mode: LeaseMode,
        /// Answered when granted.
        reply: RpcReplyPort<Lease>,
    },
    /// Take the schema gate only if it is free for `mode` now.
    TryAcquire {
        /// Shared or exclusive.
        mode: LeaseMode,
        /// Answered at once: the lease, or `None` if it would have to wait.
        reply: RpcReplyPort<Option<Lease>>,
    },
    /// The accepted schema.
    Current {
        /// Answered at once.
        reply: RpcReplyPort<Arc<SchemaState>>,
    },
    /// Re-read the accepted schema from storage (after a schema apply's
    /// promotion, by its writer or recovery), under an exclusive lease.
    Reload {
        /// The exclusive schema lease that authorises the swap.
        lease_id: u64,
        /// Answered with the schema now current.
        reply: RpcReplyPort<Result<Arc<SchemaState>>>,
    },
    /// The schema of identity `identity`, or the graph's original schema
    /// (the one it was created with) for `None`: what a branch or a commit
    /// binds when a schema apply recorded it (or none precedes it).
    Bound {
        /// The identity a commit's first-parent line recorded.
        identity: Option<String>,
        /// Answered with the schema (the accepted one, or an archived one).
        reply: RpcReplyPort<Result<Arc<SchemaState>>>,
    },
    /// The schema `branch` binds at `head` of `state` (its manifest): what
    /// its writes prepare under.
    OfHead {
        /// The branch.
        branch: String,
        /// Its manifest's state (walked only when the head is not a child
        /// of the last one bound for the branch).
        state: Arc<crate::engine::manifest::ManifestState>,
        /// Its head commit (`None`: a branch with no commit yet).
        head: Option<String>,
        /// Answered with the schema.
        reply: RpcReplyPort<Result<Arc<SchemaState>>>,
    },
}

/// Messages to a BranchActor (a branch gate and the branch's only publisher).
pub enum BranchMsg {
    /// Queue for the branch gate (exclusive).
    Acquire {
        /// Answered when granted.
        reply: RpcReplyPort<Lease>,
    },
    /// Take the branch gate only if it is free now.
    TryAcquire {
        /// Answered at once: the lease, or `None` if it would have to wait.
        reply: RpcReplyPort<Option<Lease>>,
    },
    /// Whether the branch gate is held or has waiters right now.
    Contended {
        /// Answered at once.
        reply: RpcReplyPort<bool>,
    },
    /// A fresh read of the branch's manifest.
    View {
        /// Whether the view must hold the whole commit history.
        complete: bool,
        /// Answered with the view or the read error.
        reply: RpcReplyPort<Result<ManifestView>>,
    },
    /// Publish one commit; requires the branch lease.
    Publish {
        /// The publish.
        request: Box<PublishRequest>,
        /// Id of the branch lease held by the caller.
        lease_id: u64,
        /// Answered with the publish outcome.
        reply: RpcReplyPort<Result<Published>>,
    },
    /// Create this branch's `__manifest` ref exactly as planned; requires the
    /// branch lease (of this, the new branch).
    CreateRef {
        /// Parent branch, version and identifier.
        plan: CreatePlan,
        /// Id of the branch lease held by the caller.
        lease_id: u64,
        /// Answered with the new branch's first view.
        reply: RpcReplyPort<Result<ManifestView>>,
    },
    /// Delete this branch's `__manifest` ref, exactly the captured
    /// incarnation; requires the branch lease.
    DeleteRef {
        /// The incarnation the caller captured under the lease.
        captured: BranchId,
        /// Id of the branch lease held by the caller.
        lease_id: u64,
        /// Answered when the ref is gone.
        reply: RpcReplyPort<Result<()>>,
    },
    /// Compact this branch's `__manifest` physically (same rows, fewer
    /// fragments); requires the branch lease.
    CompactManifest {
        /// Id of the branch lease held by the caller.
        lease_id: u64,
        /// Answered with the fragment counts before and after.
        reply: RpcReplyPort<Result<(u64, u64)>>,
    },
}

/// Messages to a TableActor (a table gate; the only committer for its table on its branch).
pub enum TableMsg {
    /// Queue for the table gate (exclusive).
    Acquire {
        /// Answered when granted.
        reply: RpcReplyPort<Lease>,
    },
    /// Take the table gate only if it is free now.
    TryAcquire {
        /// Answered at once: the lease, or `None` if it would have to wait.
        reply: RpcReplyPort<Option<Lease>>,
    },
    /// The live Lance HEAD version of the table on this branch.
    Head {
        /// Answered with the version.
        reply: RpcReplyPort<Result<u64>>,
    },
    /// Commit a staged transaction exactly; requires the table lease.
    Commit {
        /// The staged transaction.
        staged: Box<StagedTxn>,
        /// Id of the table lease held by the caller.
        lease_id: u64,
        /// Answered with the landed transaction.
        reply: RpcReplyPort<Result<CommittedTxn>>,
    },
    /// First touch on a named branch: create the table's native ref for this
    /// branch exactly as planned; requires the table lease.
    Fork {
        /// Parent ref and the exact inherited version.
        plan: CreatePlan,
        /// Id of the table lease held by the caller.
        lease_id: u64,
        /// Answered with the new ref, checked out at the inherited version.
        reply: RpcReplyPort<Result<Arc<Dataset>>>,
    },
    /// Remove this branch's ref of the table and its tree (a fork whose
    /// authority is gone); requires the table lease. Answers whether a ref existed.
    Reclaim {
        /// Id of the table lease held by the caller.
        lease_id: u64,
        /// Answered when the ref and tree are gone.
        reply: RpcReplyPort<Result<bool>>,
    },
}

/// Messages to the ReconcilerActor.
pub enum ReconcilerMsg {
    /// Run a recovery pass now, in the handler (a pass with nothing pending
    /// is one listing). Sent by the actor's own timer and by failed writes.
    Reconcile,
    /// List pending recovery sidecars (`__recovery/*.json`) in ULID order.
    ListPending {
        /// Answered with sidecar names, or the listing error (never swallowed).
        reply: RpcReplyPort<Result<Vec<String>>>,
    },
}
