//! Mutations and loads through the embedded handle.

use super::reads::compile_one;
use super::{Graph, WriteOptions};
use crate::actors::saga::write::{self, WriteIntent, WriteOutcome};
use crate::engine::lang::query::ir::BodyIr;
use crate::engine::loader::{self, LoadMode};
use crate::engine::mutation::{self, MutationArgs};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::WriterKind;

impl Graph {
    /// Run the mutation `name` (or the file's only query) from `.gq` source
    /// as one atomic commit.
    pub async fn mutate(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        opts: &WriteOptions,
    ) -> Result<WriteOutcome> {
        self.require_writable()?;
        let schema = self.schema().await?;
        let ir = compile_one(&schema.catalog, source, name)?;
        let BodyIr::Mutation(m) = &ir.body else {
            return Err(OmniError::BadRequest(format!("`{}` is a read query; use `query`", ir.name)));
        };
        let args = MutationArgs { params, now_ms: chrono::Utc::now().timestamp_millis() };
        let intent = WriteIntent {
            kind: WriterKind::Mutation,
            branch: opts.branch.clone(),
            actor: opts.actor.clone(),
            if_commit: opts.if_commit.clone(),
            retry_on_conflict: mutation::insert_only(m),
        };
        write::run(&self.rt, &intent, |capture| {
            let args = args.clone();
            async move { mutation::prepare(&capture, m, &args).await }
        })
        .await
    }

    /// Load JSONL as one atomic commit.
    pub async fn load(&self, data: impl std::io::BufRead, mode: LoadMode, opts: &WriteOptions) -> Result<WriteOutcome> {
        self.load_with_progress(data, mode, opts, &|_| {}).await
    }

    /// [`Graph::load`], reporting parsed records to `progress` as it goes.
    pub async fn load_with_progress(
        &self,
        data: impl std::io::BufRead,
        mode: LoadMode,
        opts: &WriteOptions,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<WriteOutcome> {
        self.require_writable()?;
        let schema = self.schema().await?;
        let parsed = off_the_async_worker(|| loader::parse_with_progress(&schema.catalog, data, progress))?;
        let intent = WriteIntent {
            kind: WriterKind::Load,
            branch: opts.branch.clone(),
            actor: opts.actor.clone(),
            if_commit: opts.if_commit.clone(),
            retry_on_conflict: mode != LoadMode::Overwrite,
        };
        let parsed = &parsed;
        write::run(&self.rt, &intent, |capture| async move { loader::prepare(&capture, parsed, mode).await }).await
    }
}

/// Run CPU-bound `work` (a load's parse, seconds for millions of lines)
/// without stalling the tasks queued on this worker: on a multi-threaded
/// runtime (the daemon's) the worker first hands them to another one. On a
/// current-thread runtime there is no other worker to hand them to.
fn off_the_async_worker<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(work),
        _ => work(),
    }
}
