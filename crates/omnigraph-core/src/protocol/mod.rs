//! Wire types: what crosses a boundary (errors and their HTTP mapping,
//! located diagnostics). Imports nothing from the layers above it.

pub mod diagnostic;
pub mod error;

pub use error::{OmniError, Result};
