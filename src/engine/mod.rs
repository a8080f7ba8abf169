//! Everything that is not an actor: the `.pg`/`.gq` compilers, the catalog,
//! the manifest and its publisher, graph init, and the Lance storage adapter.
//! Engine code never spawns actors.

pub mod branch_name;
pub mod committed;
pub mod init;
pub mod integrity;
pub mod lang;
pub mod layout;
pub mod lint;
pub mod load;
pub mod loader;
pub mod manifest;
pub mod mutation;
pub mod query;
pub mod rows;
pub mod schema_store;
pub mod staging;
pub mod storage;
pub mod validate;
pub mod values;
pub mod write_plan;
