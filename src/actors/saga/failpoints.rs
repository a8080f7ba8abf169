//! Failpoints: named points between the steps of every saga, inside recovery
//! and inside the table / branch actors' commit and publish handlers. With
//! the `failpoints` feature a configured point can return an error, sleep,
//! or run a callback (crash tests abort the process there); without it, a
//! point is nothing.
//!
//! There is no hand-kept list of names: the registry is the set of
//! [`saga_failpoint!`] and [`named_failpoint!`] call sites in the source, and
//! the crash tests read it from there, so a new point without a crash case
//! fails their coverage test.

use crate::recovery::sidecar::WriterKind;

/// The writer kinds whose sagas cross [`saga_failpoint!`]s.
pub const SAGA_WRITERS: [WriterKind; 6] = [
    WriterKind::Mutation,
    WriterKind::Load,
    WriterKind::Merge,
    WriterKind::Optimize,
    WriterKind::SchemaApply,
    WriterKind::EnsureIndices,
];

/// The failpoint prefix of a writer kind.
pub fn writer_prefix(kind: WriterKind) -> &'static str {
    match kind {
        WriterKind::Mutation => "mutation",
        WriterKind::Load => "load",
        WriterKind::Merge => "merge",
        WriterKind::Optimize => "optimize",
        WriterKind::SchemaApply => "schema_apply",
        WriterKind::EnsureIndices => "ensure_indices",
    }
}

/// Whether a `kind` saga can cross `boundary`: optimize rewrites only the
/// tables its branch owns already, so it forks none; only a schema apply
/// stages and promotes schema files (promotes: on main only).
pub fn crosses(kind: WriterKind, boundary: &str) -> bool {
    let forkless = kind == WriterKind::Optimize;
    let schema_only = matches!(boundary, "after_schema_staging" | "after_promote");
    !(forkless && boundary == "after_fork") && (kind == WriterKind::SchemaApply || !schema_only)
}

/// The failpoint name of `boundary` for `kind`.
pub fn name(kind: WriterKind, boundary: &str) -> String {
    format!("{}.{boundary}", writer_prefix(kind))
}

/// Evaluate the failpoint named `$name` (a literal: branch control, recovery
/// and actor handlers), like [`saga_failpoint!`].
#[macro_export]
macro_rules! named_failpoint {
    ($name:literal) => {
        fail::fail_point!($name, |msg: Option<String>| Err(::std::convert::From::from(
            $crate::protocol::OmniError::Internal(format!("failpoint {}: {}", $name, msg.unwrap_or_default()))
        )))
    };
}

/// Evaluate failpoint `<kind>.<boundary>` (one per writer kind).
#[macro_export]
macro_rules! saga_failpoint {
    ($kind:expr, $boundary:literal) => {
        fail::fail_point!(&$crate::actors::saga::failpoints::name($kind, $boundary), |msg: Option<String>| Err(
            ::std::convert::From::from($crate::protocol::OmniError::Internal(format!(
                "failpoint {}: {}",
                $crate::actors::saga::failpoints::name($kind, $boundary),
                msg.unwrap_or_default()
            )))
        ))
    };
}
