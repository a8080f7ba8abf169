//! Loading data files into a graph: format parsers that turn input into
//! typed [`crate::rows::EntityRow`]s with settled ids.

pub mod jsonl;

pub use jsonl::{DuplicateIds, IdLines, JsonlParser, LoadRecord};

#[cfg(test)]
mod tests;
