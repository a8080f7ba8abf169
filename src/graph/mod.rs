//! The embedded API: [`Omnigraph::init`] / [`Omnigraph::open`] return a
//! [`Graph`] handle. Every handle on one root in the process shares one actor
//! tree; the CLI and the HTTP daemon are front ends over this handle.
//!
//! One module per concern: [`history`] (snapshots, commits, merge base),
//! [`branches`], [`writes`], [`reads`] and [`recovery`]; [`wire`] holds the
//! JSON shapes the CLI and the daemon answer with.

mod branches;
mod diff;
mod entity_history;
mod export;
mod feed;
mod history;
mod maintenance;
pub mod memory;
mod reads;
mod recovery;
mod reflog;
mod refs;
mod schema;
mod undo;
pub mod wire;
mod writes;

use std::sync::Arc;

use crate::actors::Runtime;
use crate::actors::saga::recovery::resolve::Mode;
use crate::actors::saga::recovery::sweep::{Scope, background_pass, sweep};
pub use crate::engine::index_status::{IndexCoverage, IndexStatus, TableIndexStatus};
use crate::engine::init;
use crate::engine::manifest;
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::Root;
pub use crate::engine::tags::Tag;
use crate::protocol::{OmniError, Result};
pub use branches::{MergeOptions, MergeResult};
pub use diff::{
    ChangeCause, ChangeEndpoints, ChangeImage, ChangeType, CommitChanges, DiffPage, DiffStats, EntityChange,
};
pub use entity_history::{Blame, BlameLine, EntityHistory, HistoryEntry};
pub use export::Export;
pub use feed::{Baseline, BaselineHandshake, ChangeBlock, FeedFrom, FeedPage, FeedRequest, MAX_WAIT};
pub use history::{CommitInfo, Snapshot, TableSnapshot};
pub use reads::result_rows;
pub use recovery::{PendingSidecar, RecoveryStatus};
pub use refs::Resolved;
pub use schema::SchemaDiff;
pub use undo::{ResetOptions, RevertOptions, RevertResult};
pub use writes::MutationRequest;

/// How a handle may use the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Reads and writes; runs recovery at open.
    ReadWrite,
    /// Reads only; never writes to storage.
    ReadOnly,
}

/// Entry points of the embedded API.
pub struct Omnigraph;

impl Omnigraph {
    /// Create a graph at `location` (a directory or an object-store URI) from
    /// `.pg` source, and open it read-write.
    pub async fn init(location: &str, schema_source: &str) -> Result<Graph> {
        let root = Root::parse(location)?;
        init::init(&root, schema_source).await?;
        Graph::open_root(root, OpenMode::ReadWrite).await
    }

    /// Open an existing graph read-write.
    pub async fn open(location: &str) -> Result<Graph> {
        Self::open_with(location, OpenMode::ReadWrite).await
    }

    /// Open an existing graph in the given mode.
    pub async fn open_with(location: &str, mode: OpenMode) -> Result<Graph> {
        Graph::open_root(Root::parse(location)?, mode).await
    }

    /// Open a graph at an already resolved root (e.g. one whose object store
    /// is wrapped to observe or fail storage calls).
    pub async fn open_root(root: Root, mode: OpenMode) -> Result<Graph> {
        Graph::open_root(root, mode).await
    }
}

/// Where and as whom a write happens.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Graph branch (default `main`).
    pub branch: String,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
    /// Caller precondition: the branch head must be exactly this commit.
    pub if_commit: Option<String>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { branch: "main".into(), actor: None, if_commit: None }
    }
}

/// What a read runs against. Either names any ref (a branch, a tag, a
/// commit id, `REF~N`, `A...B`); they differ only in what a read's answer
/// echoes (`branch` or `snapshot`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadTarget {
    /// Given as a branch (`--branch`, `branch`).
    Branch(String),
    /// Given as a commit (`--commit`/`--snapshot`, `commit`/`snapshot`).
    Commit(String),
}

impl ReadTarget {
    /// The commit when one is given, else the branch (default main): how
    /// the CLI's `--branch`/`--commit` and the HTTP bodies pick a target.
    pub fn of(commit: Option<String>, branch: Option<String>) -> Self {
        match commit {
            Some(c) => ReadTarget::Commit(c),
            None => ReadTarget::Branch(branch.unwrap_or_else(|| "main".into())),
        }
    }
}

impl ReadTarget {
    /// The ref it names.
    pub fn as_ref_text(&self) -> &str {
        match self {
            ReadTarget::Branch(r) | ReadTarget::Commit(r) => r,
        }
    }
}

impl Default for ReadTarget {
    fn default() -> Self {
        ReadTarget::Branch("main".into())
    }
}

/// A handle on one graph. Cheap to clone.
#[derive(Clone)]
pub struct Graph {
    rt: Arc<Runtime>,
    mode: OpenMode,
    /// The graph's first commit, once a change feed asked for it.
    genesis: tokio::sync::OnceCell<String>,
}

impl Graph {
    async fn open_root(root: Root, mode: OpenMode) -> Result<Graph> {
        // Stamp first: nothing else is read from a graph this binary can't serve.
        manifest::check_graph(&root).await?;
        let rt = Runtime::for_root(&root, |rt| Box::pin(async move { background_pass(&rt).await })).await?;
        rt.schema().await?;
        if mode == OpenMode::ReadWrite {
            root.check_atomic_create().await?;
            // A sidecar or tag PUT cut short leaves `<name>.json#<n>`; no
            // write of this process is in flight, so none of it can still be
            // renamed in.
            if !rt.any_live() {
                for dir in [crate::recovery::RECOVERY_DIR, crate::engine::tags::TAGS_DIR] {
                    for name in root.remove_staging_residue(dir).await? {
                        tracing::info!(%name, "removed the residue of an interrupted write");
                    }
                }
            }
            sweep(&rt, Mode::Full, Scope::All).await?;
        }
        Ok(Graph { rt, mode, genesis: tokio::sync::OnceCell::new() })
    }

    /// The graph root.
    pub fn root(&self) -> &Root {
        self.rt.root()
    }

    /// The mode this handle was opened in.
    pub fn mode(&self) -> OpenMode {
        self.mode
    }

    /// The actor tree behind this handle (shared with every handle on the root).
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The accepted schema.
    pub async fn schema(&self) -> Result<Arc<SchemaState>> {
        self.rt.schema().await
    }

    fn require_writable(&self) -> Result<()> {
        match self.mode {
            OpenMode::ReadWrite => Ok(()),
            OpenMode::ReadOnly => Err(OmniError::ReadOnly(
                "this graph is open read-only (a read replica); send writes to the writer process".into(),
            )),
        }
    }
}
