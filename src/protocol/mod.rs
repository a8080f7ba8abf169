//! Wire types: what crosses a boundary (errors and their HTTP mapping,
//! located diagnostics). They live in the pure `omnigraph-core` crate, below
//! everything here, and are re-exported under this path.

pub use omnigraph_core::protocol::{diagnostic, error};

pub use error::{OmniError, Result};
