//! Crash recovery: recovery sidecars under `__recovery/`.
//!
//! Writers arm a sidecar before their first effect; this module owns the
//! directory. Classification, roll-forward and roll-back build on it.

pub mod audit;
pub mod classify;
pub mod invariants;
pub mod repair;
pub mod resolve;
pub mod sidecar;
pub mod sweep;

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
