//! Crash recovery's pure parts: recovery sidecars under `__recovery/`, their
//! classification from Lance history, the audit log and the invariant
//! checker. The procedures that drive actors (passes, roll-forward and
//! roll-back, repair) are in `actors::saga::recovery`.

pub mod audit;
pub mod classify;
pub mod invariants;
pub mod sidecar;

use crate::engine::storage::Root;
use crate::protocol::Result;

/// Directory of recovery sidecars under the root.
pub const RECOVERY_DIR: &str = "__recovery";

/// Sidecar names (`__recovery/<ulid>.json`) in ULID order. A listing error is
/// returned, never swallowed: skipping recovery silently would hide drift.
pub async fn list_pending(root: &Root) -> Result<Vec<String>> {
    let names = root.list(RECOVERY_DIR).await?;
    Ok(names.into_iter().filter(|n| n.ends_with(".json")).collect())
}
