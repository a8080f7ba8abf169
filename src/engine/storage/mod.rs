//! The Lance storage adapter: the only module that calls Lance write APIs.
//!
//! - [`root`]: the graph root over `object_store` (local paths and `s3://`
//!   URIs share one code path) for the small files omnigraph owns.
//! - [`table`]: create / open / stage / exact-commit / restore of Lance tables.
//! - [`index_fold`]: index coverage, and folding a table's unindexed rows into its indexes.
//! - `key_probe`: a keyed write's ids.
//! - [`row_locate`]: the live rows holding given values of an indexed
//!   column, found through its index, not by reading the table.
//! - [`config`]: the storage options shared by the root's store and Lance's.
//! - [`durability`]: the synced local store every local write goes through.
//! - [`staged`]: the staged and committed transaction types.
//! - [`lineage`]: the table config that keeps row lineage out of Lance manifests.
//! - [`caches`]: the Lance sessions and their capacities under the memory budget.
//! - `index_cache`: a session index cache that keeps pages apart from per-version listings.
//! - `version_hint`: a local dataset's latest version without listing its history.

pub mod branches;
pub mod caches;
pub mod config;
pub mod durability;
mod guard;
mod idle_cache;
mod index_cache;
pub mod index_fold;
pub mod io_hook;
mod key_probe;
pub mod lineage;
pub mod root;
pub mod row_delta;
pub mod row_locate;
pub mod staged;
pub mod table;
mod version_hint;

pub use config::StorageOptions;
pub use root::Root;
pub use staged::{CommittedTxn, MergeMode, Reshaper, StagePlan, StagedTxn, TxnIdentity};
