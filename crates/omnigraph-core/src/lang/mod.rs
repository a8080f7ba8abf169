//! The language front end: the `.pg` schema and `.gq` query languages and
//! the catalog a schema compiles to (which queries are checked against).
//! Pure code: nothing here touches storage.

pub mod base_type;
pub mod catalog;
pub mod diag;
pub mod query;
pub mod schema;

pub use diag::{Diagnostic, Pos};
