//! Maintenance through the embedded handle (see `docs/operations.md`).

use super::Graph;
use crate::actors::saga::optimize::{self, OptimizeReport, OptimizeRequest};
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
}
