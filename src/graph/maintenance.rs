//! Maintenance through the embedded handle (see `docs/operations.md`).

use super::Graph;
use crate::actors::saga::cleanup::{self, CleanupReport, CleanupRequest};
use crate::actors::saga::ensure_indices::{self, EnsureIndicesReport, EnsureIndicesRequest};
use crate::actors::saga::optimize::{self, OptimizeReport, OptimizeRequest};
use crate::engine::committed::open_pinned_for_read;
use crate::engine::index_status::{self, IndexStatus};
use crate::engine::layout;
use crate::engine::retention::RetentionPolicy;
use crate::engine::storage::index_fold::FoldDepth;
use crate::protocol::{OmniError, Result};

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
        let req = EnsureIndicesRequest {
            branch: branch.to_string(),
            actor: actor.map(str::to_string),
            owned_only: false,
            fold_only: false,
            depth: FoldDepth::Delta,
        };
        Box::pin(ensure_indices::run(&self.rt, &req)).await
    }

    /// Remove the versions no retained commit reads: with `keep`, the newest
    /// `keep` commits of every live branch stay readable; with `older_than`
    /// (`7d`, `12h`, …), every commit younger than that; with both, a commit
    /// goes only when outside both. Branch heads, merge bases of live
    /// branches and first-touch forks are always kept. Without `confirm`
    /// nothing is deleted and the report says what would be. Refused while a
    /// recovery sidecar is pending.
    /// Deleted branches and reset-away heads stay restorable for the
    /// default reflog window (7 days; see [`Graph::cleanup_with`]).
    pub async fn cleanup(&self, keep: Option<usize>, older_than: Option<&str>, confirm: bool) -> Result<CleanupReport> {
        self.cleanup_with(keep, older_than, None, confirm).await
    }

    /// [`Graph::cleanup`] with a reflog window (`reflog_expiry`, e.g. `7d`;
    /// the default when `None`): deleted branches older than it are purged
    /// for good, heads a reset moved away from inside it stay readable, and
    /// branch-control reflog records older than it are pruned.
    pub async fn cleanup_with(
        &self,
        keep: Option<usize>,
        older_than: Option<&str>,
        reflog_expiry: Option<&str>,
        confirm: bool,
    ) -> Result<CleanupReport> {
        self.require_writable()?;
        let expiry = reflog_expiry.unwrap_or(cleanup::DEFAULT_REFLOG_EXPIRY);
        let req = CleanupRequest {
            policy: RetentionPolicy::new(keep, older_than)?,
            confirm,
            reflog_expiry_us: crate::engine::retention::parse_duration_us(expiry)?,
        };
        Box::pin(cleanup::run(&self.rt, &req)).await
    }

    /// How completely each index the schema asks for covers its table at
    /// `branch`'s head (metadata only: no row is read).
    pub async fn index_status(&self, branch: &str) -> Result<IndexStatus> {
        let view = self.rt.view(branch).await?;
        let schema = self.rt.schema_of(&view).await?;
        let mut tables = Vec::new();
        for def in schema.catalog.types() {
            let entry = view.schema_table(&layout::key_of(def))?;
            let ds = open_pinned_for_read(self.rt.root(), entry).await?;
            tables.push(index_status::of_table(def, entry, &ds).await?);
        }
        tables.sort_by(|a, b| a.type_key.cmp(&b.type_key));
        Ok(IndexStatus { branch: branch.to_string(), tables })
    }

    /// Keep every index the schema declares within `lag_rows` rows of its
    /// table in the background: after writes through any handle of this
    /// process, a table a branch owns with more rows than that outside an
    /// index gets them folded in (or the index built). The daemon's
    /// maintenance task; see `docs/operations.md`. Each branch is measured
    /// at its first write after this call, not before.
    pub fn fold_indexes_in_background(&self, lag_rows: u64) -> Result<()> {
        self.require_writable()?;
        if !crate::actors::index_folder::start(&self.rt, lag_rows) {
            return Err(OmniError::AlreadyExists("a background index folder on this graph".into()));
        }
        Ok(())
    }
}
