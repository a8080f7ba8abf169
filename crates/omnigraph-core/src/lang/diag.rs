//! Located diagnostics of the `.pg` and `.gq` compilers: the wire type lives
//! in [`crate::protocol::diagnostic`] (errors carry it), re-exported here
//! where the compilers use it.

pub use crate::protocol::diagnostic::*;
