//! Recovery procedures, which drive the actors: the passes over pending
//! sidecars ([`sweep`]), resolving one sidecar ([`resolve`]: roll forward or
//! back through the same actors and gates as writers) and [`repair`] of
//! uncovered drift. Their pure parts (sidecars, classification, the audit
//! log, the invariant checker) live in [`crate::recovery`].

pub mod repair;
pub mod resolve;
pub mod sweep;
