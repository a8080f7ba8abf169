//! The registry of saga failpoints: `<writer>.<boundary>` for every writer
//! and every boundary between saga steps. The crash-test harness enumerates
//! [`all`] and fails when a registered failpoint has no crash test.

use crate::recovery::sidecar::WriterKind;

/// Boundaries between saga steps, in order.
pub const BOUNDARIES: &[&str] = &[
    "after_prepare",
    "after_leases",
    "after_revalidate",
    "after_arm",
    "after_table_commit",
    "after_confirm",
    "after_publish",
];

/// Boundaries only a first write to a table on a named branch reaches: after
/// its fork exists, before anything is staged on it.
pub const FORK_BOUNDARIES: &[&str] = &["after_fork"];

/// Branch control failpoints (create and delete have no sidecar; these sit
/// between their physical steps).
pub const CONTROL: &[&str] = &["branch_create.before_ref", "branch_create.after_ref", "branch_delete.after_ref"];

/// The failpoint prefix of a writer kind.
pub fn writer_prefix(kind: WriterKind) -> &'static str {
    match kind {
        WriterKind::Mutation => "mutation",
        WriterKind::Load => "load",
    }
}

/// The failpoint name of `boundary` for `kind`.
pub fn name(kind: WriterKind, boundary: &str) -> String {
    format!("{}.{boundary}", writer_prefix(kind))
}

/// Every registered failpoint name.
pub fn all() -> Vec<String> {
    [WriterKind::Mutation, WriterKind::Load]
        .into_iter()
        .flat_map(|k| BOUNDARIES.iter().chain(FORK_BOUNDARIES).map(move |b| name(k, b)))
        .chain(CONTROL.iter().map(|c| c.to_string()))
        .collect()
}

/// Evaluate a branch control failpoint (one of [`CONTROL`]) like
/// [`saga_failpoint!`].
#[macro_export]
macro_rules! control_failpoint {
    ($name:literal) => {
        fail::fail_point!($name, |msg: Option<String>| Err(::std::convert::From::from(
            $crate::protocol::OmniError::Internal(format!("failpoint {}: {}", $name, msg.unwrap_or_default()))
        )))
    };
}

/// Evaluate failpoint `<kind>.<boundary>`: with the `failpoints` feature and
/// the point configured, it can return an error, panic, or run a callback
/// (crash tests abort the process there). Without the feature it is nothing.
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
