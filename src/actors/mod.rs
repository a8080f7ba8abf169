//! The actor tree (ractor): per graph root, a [`guardian::Guardian`] over a
//! [`supervisor::RootSupervisor`]
//! over the schema, branch and table actors (whose gates are leases taken in
//! the order schema → branch → sorted tables) and the reconciler.
//! Handles reach it through [`runtime::Runtime`].

pub mod branch;
pub mod child_key;
pub mod guardian;
pub mod heads;
pub mod index_folder;
pub mod lease;
pub mod maintenance;
pub mod messages;
pub mod reconciler;
pub mod replica;
pub mod runtime;
pub mod schema;
pub mod supervisor;
pub mod table;
pub mod write_queue;

pub use lease::{Gate, Lease, LeaseMode, LeaseSet};
pub use runtime::Runtime;
pub mod saga;
