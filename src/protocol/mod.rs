//! Wire types: what crosses a boundary (errors, actor messages, sidecar JSON, HTTP DTOs).

pub mod error;

pub use error::{OmniError, Result};
pub mod messages;
