//! Maintenance through the embedded handle (see `docs/operations.md`).

use super::Graph;
use crate::actors::saga::cleanup::{self, CleanupReport, CleanupRequest};
use crate::actors::saga::ensure_indices::{self, EnsureIndicesReport, EnsureIndicesRequest};
use crate::actors::saga::optimize::{self, OptimizeReport, OptimizeRequest};
use crate::engine::retention::RetentionPolicy;
use crate::protocol::Result;

impl Graph {
    /// Compact every table `branch` owns into few fragments as one
    /// maintenance commit (none when nothing needed it), then compact the
    /// branch's `__manifest`. Every query answers the same before and after;
    /// nothing is garbage-collected.
    pub async fn optimize(&self, branch: &str, actor: Option<&str>) -> Result<OptimizeReport> {
        self.require_writable()?;
        let req = OptimizeRequest { branch: branch.to_string(), actor: actor.map(str::to_string) };
        // Boxed: the saga's state machine is large, and callers (a test's
        // own thread, a request handler) should not carry it on their stack.
        Box::pin(optimize::run(&self.rt, &req)).await
    }

    /// Build every index the catalog derives (BTree on ids and `@key` /
    /// `@index` scalars, full-text on such strings, vector on `@index`
    /// vectors) that `branch`'s tables lack, as one commit (none when
    /// nothing is missing). Untrainable vector indexes stay pending.
    pub async fn ensure_indices(&self, branch: &str, actor: Option<&str>) -> Result<EnsureIndicesReport> {
        self.require_writable()?;
        let req = EnsureIndicesRequest { branch: branch.to_string(), actor: actor.map(str::to_string) };
        Box::pin(ensure_indices::run(&self.rt, &req)).await
    }

    /// Remove the versions no retained commit reads: with `keep`, the newest
    /// `keep` commits of every live branch stay readable; with `older_than`
    /// (`7d`, `12h`, …), every commit younger than that; with both, a commit
    /// goes only when outside both. Branch heads, merge bases of live
    /// branches and first-touch forks are always kept. Without `confirm`
    /// nothing is deleted and the report says what would be. Refused while a
    /// recovery sidecar is pending.
    pub async fn cleanup(&self, keep: Option<usize>, older_than: Option<&str>, confirm: bool) -> Result<CleanupReport> {
        self.require_writable()?;
        let req = CleanupRequest { policy: RetentionPolicy::new(keep, older_than)?, confirm };
        Box::pin(cleanup::run(&self.rt, &req)).await
    }
}
