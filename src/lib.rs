//! omnigraph: a typed property-graph database stored as Lance datasets, with
//! Git-style branches and commits across the whole graph.
//!
//! The embedded API is [`Omnigraph`] → [`Graph`]. Layout:
//! - [`actors`]: the actor tree (supervisor, schema / branch / table actors, reconciler);
//! - [`engine`]: manifest + publisher, init, queries, the Lance storage adapter
//!   (the pure languages, catalog, rows and validation from `omnigraph-core`);
//! - [`recovery`]: recovery's pure parts (sidecars, classification, audit, invariants);
//! - [`protocol`]: errors and diagnostics (the wire types);
//! - [`wire`]: the JSON shapes the CLI and the daemon answer with;
//! - [`server`]: the HTTP daemon;
//! - [`mcp`]: the MCP server over the daemon's routes.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

pub mod actors;
pub mod engine;
pub(crate) mod graph;
pub mod mcp;
pub mod protocol;
pub mod recovery;
pub mod server;

pub use actors::saga::branch_control::{BranchInfo, DeleteOptions, DeletedBranch};
pub use actors::saga::branch_restore::RestoredBranch;
pub use actors::saga::cleanup::{CleanupReport, DroppedTable, OrphanFork, TableCleanup};
pub use actors::saga::ensure_indices::{EnsureIndicesReport, PendingIndex, TableIndexes};
pub use actors::saga::merge::MergeReport;
pub use actors::saga::optimize::{ManifestCompaction, OptimizeReport, TableOptimize};
pub use actors::saga::schema_apply::SchemaApplyReport;
pub use actors::saga::write::WriteOutcome;
pub use engine::conflict_page::ConflictPage;
pub use engine::diff::{Change, DiffFilter, Op as ChangeOp, PropertyChange, PropertyDrift, Renamed, TypeStats};
pub use engine::feed::FeedStart;
pub use engine::lang::catalog::evolve::{Step as SchemaStep, StepKind as SchemaStepKind};
pub use engine::loader::LoadMode;
pub use engine::merge::{Outcome as MergeOutcome, TableReport as MergeTableReport};
pub use engine::query::QueryResult;
pub use engine::reflog::ReflogEntry;
pub use engine::resolution::{Resolution, Resolved as ResolutionOutcome, Take as ResolutionTake};
pub use engine::storage::StorageOptions;
pub use engine::storage::durability::Durability;
pub use engine::three_way::{ConflictCount, ConflictKind, ConflictSet, MergeConflict, MergeStrategy};
pub use graph::memory::{
    AllocatorReport, AllocatorStats, HandlesReport, MemoryReport, memory_report, set_memory_budget,
};
pub use graph::{
    Baseline, BaselineHandshake, Blame, BlameLine, ChangeBlock, ChangeCause, ChangeEndpoints, ChangeImage, ChangeType,
    CommitChanges, CommitInfo, DiffPage, DiffStats, EntityChange, EntityHistory, Export, FeedFrom, FeedPage,
    FeedRequest, Graph, HistoryEntry, IndexCoverage, IndexStatus, MAX_WAIT as MAX_FEED_WAIT, MergeOptions, MergeResult,
    MutationRequest, Omnigraph, OpenMode, PendingSidecar, ReadTarget, RecoveryStatus, ResetOptions, Resolved,
    RevertOptions, RevertResult, SchemaDiff, Snapshot, TableIndexStatus, TableSnapshot, Tag, WriteOptions, result_rows,
    wire,
};
pub use protocol::{OmniError, Result};
