//! Everything that is not an actor: the `.pg`/`.gq` compilers, the catalog,
//! the manifest and its publisher, graph init, and the Lance storage adapter.
//! Engine code never spawns actors. The pure parts (languages, catalog,
//! rows, validation, JSONL parsing, branch names) live in `omnigraph-core`
//! and are re-exported here under their old paths.

pub use omnigraph_core::{
    branch_name, compaction_tiers, feed, lang, load, mcp_tools, memory_budget, policy, read_limits, refs, resolution,
    rows, stored_queries, three_way, token, validate, walk,
};

pub mod committed;
pub mod conflict_page;
pub mod conflict_values;
pub mod diff;
pub mod export;
pub mod index_status;
pub mod init;
pub mod integrity;
pub mod layout;
pub mod lint;
pub mod loader;
pub mod manifest;
pub mod merge;
pub mod mutation;
pub mod mutation_group;
pub mod query;
pub mod reflog;
pub mod retention;
pub mod schema_effects;
pub mod schema_store;
pub mod staging;
pub mod storage;
pub mod tags;
pub mod values;
pub mod write_plan;
