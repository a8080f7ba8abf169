//! Mutations and loads through the embedded handle.

use super::reads::compile_one;
use super::{Graph, WriteOptions};
use std::sync::Arc;

use crate::actors::saga::group;
use crate::actors::saga::write::{self, WriteIntent, WriteOutcome};
use crate::actors::write_queue::QueuedWrite;
use crate::engine::lang::catalog::Catalog;
use crate::engine::lang::query::ir::{BodyIr, MutationIr};
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
        let schema = self.schema_of(&opts.branch).await?;
        let (_, m) = compile_mutation(&schema.catalog, source, name)?;
        let args = MutationArgs { params, now_ms: chrono::Utc::now().timestamp_millis() };
        let intent = WriteIntent {
            kind: WriterKind::Mutation,
            branch: opts.branch.clone(),
            actor: opts.actor.clone(),
            if_commit: opts.if_commit.clone(),
            retry_on_conflict: mutation::insert_only(&m),
        };
        group::mutate(&self.rt, &intent, Arc::new(m), args).await
    }

    /// Commit `requests` on `opts.branch` as one group commit: in order,
    /// each seeing the rows of the ones before it, each its own graph commit
    /// (child of the one before; all become visible together) with its own
    /// outcome. A request that fails on its own (it does not compile,
    /// fails validation or its `if_commit`) is refused alone and the rest
    /// commit. A delete cannot share a group: it is refused here (run it
    /// with [`Graph::mutate`]). `opts.if_commit` is the first request's
    /// precondition unless it carries its own.
    pub async fn mutate_many(
        &self,
        requests: &[MutationRequest],
        opts: &WriteOptions,
    ) -> Result<Vec<Result<WriteOutcome>>> {
        self.require_writable()?;
        let schema = self.schema_of(&opts.branch).await?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut members = Vec::new();
        let mut answers = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let if_commit = r.if_commit.clone().or_else(|| opts.if_commit.clone().filter(|_| i == 0));
            match group_member(&schema.catalog, r) {
                Ok(ir) => {
                    let args = MutationArgs { params: r.params.clone(), now_ms };
                    let (w, rx) = QueuedWrite::new(ir, args, opts.actor.clone(), if_commit);
                    members.push(w);
                    answers.push(Answer::Later(rx));
                }
                Err(e) => answers.push(Answer::Refused(e)),
            }
        }
        group::commit_together(&self.rt, &opts.branch, members).await?;
        let mut out = Vec::with_capacity(answers.len());
        for a in answers {
            out.push(match a {
                Answer::Refused(e) => Err(e),
                Answer::Later(rx) => {
                    rx.await.unwrap_or_else(|_| Err(OmniError::Internal("a group member went unanswered".into())))
                }
            });
        }
        Ok(out)
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
        let schema = self.schema_of(&opts.branch).await?;
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

/// One mutation of a [`Graph::mutate_many`] group.
#[derive(Debug, Clone, Default)]
pub struct MutationRequest {
    /// `.gq` source.
    pub source: String,
    /// The mutation to run (`None`: the source's only query).
    pub name: Option<String>,
    /// Parameter values by name.
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The head this request requires just before it.
    pub if_commit: Option<String>,
}

enum Answer {
    /// Refused before it was queued.
    Refused(OmniError),
    /// Queued: its answer comes from the group commit.
    Later(tokio::sync::oneshot::Receiver<Result<WriteOutcome>>),
}

/// The mutation `name` (or the only query) of `source`, with its name; a
/// read query is refused.
fn compile_mutation(catalog: &Catalog, source: &str, name: Option<&str>) -> Result<(String, MutationIr)> {
    let ir = compile_one(catalog, source, name)?;
    match ir.body {
        BodyIr::Mutation(m) => Ok((ir.name, m)),
        _ => Err(OmniError::BadRequest(format!("`{}` is a read query; use `query`", ir.name))),
    }
}

/// The compiled mutation of `r`, if it may share a group.
fn group_member(catalog: &Catalog, r: &MutationRequest) -> Result<Arc<MutationIr>> {
    let (name, m) = compile_mutation(catalog, &r.source, r.name.as_deref())?;
    if !mutation::groupable(&m) {
        return Err(OmniError::BadRequest(format!("`{name}` deletes: a delete commits alone (use mutate)")));
    }
    Ok(Arc::new(m))
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
