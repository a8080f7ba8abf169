//! Writer sagas: each a fixed sequence of typed messages to the owning actors
//! (see [`write`] for the mutation/load sequence), with a named failpoint at
//! every boundary ([`failpoints`]).

pub mod branch_control;
pub mod branch_restore;
pub mod cleanup;
pub mod control;
pub mod ensure_indices;
pub mod failpoints;
pub mod gates;
pub mod group;
pub mod merge;
pub mod optimize;
pub mod pipeline;
pub mod recovery;
pub mod reset;
pub mod revalidate;
pub mod revert;
pub mod schema_apply;
pub mod tags;
pub mod write;
