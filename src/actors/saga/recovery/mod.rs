//! Recovery procedures, which drive the actors: the passes over pending
//! sidecars ([`sweep`]), resolving one sidecar ([`resolve`]: roll forward or
//! back through the same actors and gates as writers; a roll-back is the
//! typestate in [`rollback`]) and [`repair`] of
//! uncovered drift. Their pure parts (sidecars, classification, the audit
//! log, the invariant checker) live in [`crate::recovery`].

pub mod repair;
pub mod resolve;
pub mod rollback;
pub mod sweep;
