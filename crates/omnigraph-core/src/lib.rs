//! The pure core of omnigraph: the `.pg` and `.gq` languages and the catalog
//! a schema compiles to, typed rows and their validation, the JSONL load
//! parser, branch-name rules, merge's row rule, read limits and the traversal walk and the wire errors. Nothing here touches
//! storage: the crate does not depend on Lance or DataFusion, so its tests
//! build and run without them. The `omnigraph` crate re-exports every module.

pub mod branch_name;
pub mod compaction_tiers;
pub mod feed;
pub mod lang;
pub mod load;
pub mod mcp_tools;
pub mod memory_budget;
pub mod operator_config;
pub mod policy;
pub mod protocol;
pub mod read_limits;
pub mod refs;
pub mod resolution;
pub mod rows;
pub mod stored_queries;
pub mod three_way;
pub mod token;
pub mod validate;
pub mod walk;
