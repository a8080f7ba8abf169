//! The read path: a checked `.gq` read query runs on DataFusion over Lance
//! scans at the versions one manifest snapshot pins (a branch head or an
//! explicit commit), so concurrent writes never change a running query's view.
//!
//! Plan shape: one frame per node variable (a Lance scan, its single-variable
//! filters pushed down), joined along traversals over edge tables
//! (`src`/`dst`; see [`traverse`] for the traversal plans and their rule),
//! `not { }` as an anti-join on the outer variables, then filters across
//! variables, aggregates with implicit grouping, `order` (NULLs first
//! ascending, last descending; ties broken by the bound ids), `limit`, and
//! the projection. Every query runs under [`crate::engine::read_limits`]: a
//! time budget, a cap on any intermediate result's rows and a memory pool.

mod adjacency;
mod exec;
mod params;
pub mod plan_tree;
mod search;
mod traverse;

pub use exec::{QueryContext, QueryResult, execute};
pub use plan_tree::{DeclaredIndexes, Insight, PlanNode};

/// Edge-table adjacencies cached for traversals now: (bytes, entries).
pub fn adjacency_cached() -> (u64, u64) {
    adjacency::cached()
}
pub use params::{ParamValues, bind_params};
pub use traverse::TRAVERSAL_MODE_ENV;
