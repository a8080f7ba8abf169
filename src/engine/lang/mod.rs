//! The `.pg` schema and `.gq` query languages.

pub mod base_type;
pub mod diag;
pub mod query;
pub mod schema;

pub use diag::{Diagnostic, Pos};
