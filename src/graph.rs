//! The embedded API: [`Omnigraph::init`] / [`Omnigraph::open`] return a
//! [`Graph`] handle. Every handle on one root in the process shares one actor
//! tree; the CLI and the HTTP daemon are front ends over this handle.

use std::sync::Arc;

use serde::Serialize;

use crate::actors::Runtime;
use crate::actors::saga::branch_control::{self, BranchInfo, DeletedBranch};
use crate::actors::saga::write::{self, WriteIntent, WriteOutcome};
use crate::engine::branch_name::MAIN;
use crate::engine::init;
use crate::engine::lang::query::ir::BodyIr;
use crate::engine::lang::query::{parse_queries, typecheck};
use crate::engine::loader::{self, LoadMode};
use crate::engine::manifest::{self, CommitRow, ManifestView, STAMP};
use crate::engine::mutation::{self, MutationArgs};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::WriterKind;

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

/// One table in a snapshot.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TableSnapshot {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Pinned Lance version.
    pub version: u64,
    /// Native Lance branch holding it (`None` = main).
    pub table_branch: Option<String>,
    /// Live rows at that version.
    pub row_count: u64,
}

/// What a branch head shows: every table's pin, the head commit, the stamp.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Graph branch.
    pub branch: String,
    /// Head commit id.
    pub head_commit_id: Option<String>,
    /// `__manifest` version read.
    pub manifest_version: u64,
    /// Storage format stamp.
    pub storage_stamp: u32,
    /// Tables sorted by key.
    pub tables: Vec<TableSnapshot>,
}

/// One graph commit, as users see it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CommitInfo {
    /// Commit ULID.
    pub commit_id: String,
    /// First parent.
    pub parent_commit_id: Option<String>,
    /// Merged parent, for merge commits.
    pub merged_parent_commit_id: Option<String>,
    /// Who made it.
    pub actor: Option<String>,
    /// RFC 3339 creation time.
    pub created_at: String,
    /// `__manifest` version it produced.
    pub manifest_version: u64,
    /// Graph branch it was made on.
    pub branch: String,
}

impl From<&CommitRow> for CommitInfo {
    fn from(c: &CommitRow) -> Self {
        let created_at = chrono::DateTime::from_timestamp_micros(c.created_at_us)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            .unwrap_or_default();
        CommitInfo {
            commit_id: c.commit_id.clone(),
            parent_commit_id: c.parent.clone(),
            merged_parent_commit_id: c.merged_parent.clone(),
            actor: c.actor.clone(),
            created_at,
            manifest_version: c.manifest_version,
            branch: c.branch.clone(),
        }
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

/// What a read runs against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadTarget {
    /// The head of a branch.
    Branch(String),
    /// An exact graph commit (time travel).
    Commit(String),
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
}

impl Graph {
    async fn open_root(root: Root, mode: OpenMode) -> Result<Graph> {
        // Stamp first: nothing else is read from a graph this binary can't serve.
        manifest::load(&root, "main", None).await?;
        let rt = Runtime::for_root(&root).await?;
        rt.schema().await?;
        if mode == OpenMode::ReadWrite {
            crate::recovery::sweep::sweep(&rt, crate::recovery::resolve::Mode::Full).await?;
        }
        Ok(Graph { rt, mode })
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

    /// The state of `branch` at its head.
    pub async fn snapshot(&self, branch: &str) -> Result<Snapshot> {
        let view = self.rt.view(branch).await?;
        Ok(snapshot_of(&view))
    }

    /// Commits reachable from `branch`'s head, newest first.
    pub async fn commits(&self, branch: &str, limit: Option<usize>) -> Result<Vec<CommitInfo>> {
        let view = self.rt.view(branch).await?;
        let Some(head) = view.state.effective_head(branch) else {
            return Ok(Vec::new());
        };
        let history = view.state.history(&head.commit_id);
        Ok(history.into_iter().take(limit.unwrap_or(usize::MAX)).map(CommitInfo::from).collect())
    }

    /// One commit by id, on whichever live branch recorded it.
    pub async fn commit(&self, id: &str) -> Result<CommitInfo> {
        self.find_commit(id).await.map(|c| CommitInfo::from(&c))
    }

    /// Find commit `id`: main first, then every live branch.
    async fn find_commit(&self, id: &str) -> Result<CommitRow> {
        if let Some(c) = self.rt.view(MAIN).await?.state.commits.get(id) {
            return Ok(c.clone());
        }
        for name in table::list_branches(&manifest::uri(self.root())).await?.into_keys() {
            match self.rt.view(&name).await {
                Ok(view) => {
                    if let Some(c) = view.state.commits.get(id) {
                        return Ok(c.clone());
                    }
                }
                Err(OmniError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(OmniError::NotFound(format!("commit `{id}`")))
    }

    /// Create branch `name` from the current head of `from`. Reads of the new
    /// branch see exactly `from`'s head; writes to it are isolated from `from`.
    pub async fn branch_create(&self, name: &str, from: &str) -> Result<BranchInfo> {
        self.require_writable()?;
        branch_control::create(&self.rt, name, from).await
    }

    /// Every live branch, main first.
    pub async fn branch_list(&self) -> Result<Vec<BranchInfo>> {
        branch_control::list(&self.rt).await
    }

    /// Delete branch `name` and every table fork made for it.
    pub async fn branch_delete(&self, name: &str) -> Result<DeletedBranch> {
        self.require_writable()?;
        branch_control::delete(&self.rt, name).await
    }

    /// The merge base of two branches' heads: their best common ancestor commit.
    pub async fn merge_base(&self, a: &str, b: &str) -> Result<Option<String>> {
        let (va, vb) = (self.rt.view(a).await?, self.rt.view(b).await?);
        let (Some(ha), Some(hb)) = (va.state.effective_head(a), vb.state.effective_head(b)) else {
            return Ok(None);
        };
        let mut commits = va.state.commits.clone();
        commits.extend(vb.state.commits.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(manifest::merge_base::merge_base(&commits, &ha.commit_id, &hb.commit_id))
    }
}

impl Graph {
    fn require_writable(&self) -> Result<()> {
        match self.mode {
            OpenMode::ReadWrite => Ok(()),
            OpenMode::ReadOnly => Err(OmniError::BadRequest("the graph is open read-only".into())),
        }
    }

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
        let parsed = loader::parse_with_progress(&schema.catalog, data, progress)?;
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

/// One pending recovery sidecar, as operators see it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingSidecar {
    /// Sidecar object name.
    pub name: String,
    /// Operation id (absent when the sidecar is unreadable).
    pub operation_id: Option<String>,
    /// Writer kind.
    pub writer_kind: Option<String>,
    /// Graph branch.
    pub branch: Option<String>,
    /// `Armed` or `EffectsConfirmed`.
    pub phase: Option<String>,
    /// Actor of the write.
    pub actor: Option<String>,
    /// Seconds since it was armed.
    pub age_seconds: Option<i64>,
    /// Why it could not be read, for a corrupt sidecar.
    pub error: Option<String>,
}

/// Pending sidecars and the recovery audit log.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryStatus {
    /// Sidecars recovery could not resolve (or that a running write owns).
    pub pending: Vec<PendingSidecar>,
    /// Every recovery performed, oldest first.
    pub audit: Vec<crate::recovery::audit::AuditRow>,
}

impl Graph {
    /// Pending recovery sidecars and the audit log (reads only).
    pub async fn recovery_status(&self) -> Result<RecoveryStatus> {
        let store = crate::recovery::sidecar::SidecarStore::new(self.root().clone());
        let now = chrono::Utc::now().timestamp_micros();
        let mut pending = Vec::new();
        for name in crate::recovery::list_pending(self.root()).await? {
            let entry = match store.read(&name).await {
                Ok(None) => continue,
                Ok(Some(b)) => PendingSidecar {
                    name,
                    operation_id: Some(b.operation_id),
                    writer_kind: Some(format!("{:?}", b.writer_kind)),
                    branch: Some(b.branch),
                    phase: Some(format!("{:?}", b.phase)),
                    actor: b.actor,
                    age_seconds: Some((now - b.started_at_us) / 1_000_000),
                    error: None,
                },
                Err(e) => PendingSidecar {
                    name,
                    operation_id: None,
                    writer_kind: None,
                    branch: None,
                    phase: None,
                    actor: None,
                    age_seconds: None,
                    error: Some(e.to_string()),
                },
            };
            pending.push(entry);
        }
        let audit = crate::recovery::audit::read_all(self.root()).await?;
        Ok(RecoveryStatus { pending, audit })
    }

    /// Classify uncovered drift on `main`; publish it with `confirm` (and `force` for suspicious drift).
    pub async fn repair(&self, confirm: bool, force: bool) -> Result<crate::recovery::repair::RepairReport> {
        self.require_writable()?;
        crate::recovery::repair::repair(&self.rt, confirm, force).await
    }

    /// Run a full recovery pass now (what read-write open and the reconciler do).
    pub async fn recover(&self) -> Result<Vec<(String, crate::recovery::resolve::Resolution)>> {
        self.require_writable()?;
        crate::recovery::sweep::sweep(&self.rt, crate::recovery::resolve::Mode::Full).await
    }
}

impl Graph {
    /// The manifest snapshot a read target names, and its commit id.
    async fn snapshot_for(&self, target: &ReadTarget) -> Result<(ManifestView, String)> {
        match target {
            ReadTarget::Branch(b) => {
                let view = self.rt.view(b).await?;
                let head = view
                    .state
                    .effective_head(b)
                    .map(|c| c.commit_id.clone())
                    .ok_or_else(|| OmniError::NotFound(format!("a head commit on `{b}`")))?;
                Ok((view, head))
            }
            ReadTarget::Commit(id) => {
                let commit = self.find_commit(id).await?;
                let view = manifest::load(self.root(), &commit.branch, Some(commit.manifest_version)).await?;
                Ok((view, id.clone()))
            }
        }
    }

    /// Run the read query `name` (or the file's only query) at `target`.
    pub async fn query(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
    ) -> Result<crate::engine::query::QueryResult> {
        let (view, commit_id) = self.snapshot_for(target).await?;
        let schema = self.schema().await?;
        let ir = compile_one(&schema.catalog, source, name)?;
        let BodyIr::Read(read) = &ir.body else {
            return Err(OmniError::BadRequest(format!("`{}` is a mutation; use `mutate`", ir.name)));
        };
        let params = crate::engine::query::bind_params(&ir.params, &params)?;
        let now_ms = chrono::Utc::now().timestamp_millis();
        crate::engine::query::execute(self.root(), &view, &commit_id, read, &params, now_ms).await
    }

    /// [`Graph::query`] as the JSON envelope `{columns, rows, row_count, graph_commit_id}`.
    pub async fn query_json(
        &self,
        source: &str,
        name: Option<&str>,
        params: serde_json::Map<String, serde_json::Value>,
        target: &ReadTarget,
    ) -> Result<serde_json::Value> {
        let r = self.query(source, name, params, target).await?;
        let rows = result_rows(&r);
        Ok(serde_json::json!({
            "columns": r.columns, "row_count": rows.len(), "rows": rows, "graph_commit_id": r.graph_commit_id,
        }))
    }
}

/// Every row of a result as a JSON object keyed by column name.
pub fn result_rows(r: &crate::engine::query::QueryResult) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let mut out = Vec::new();
    for batch in &r.batches {
        for i in 0..batch.num_rows() {
            let row = r
                .columns
                .iter()
                .zip(batch.columns())
                .map(|(name, col)| (name.clone(), crate::engine::rows::json_at(col.as_ref(), i)))
                .collect();
            out.push(row);
        }
    }
    out
}

/// Parse and typecheck `source`, picking query `name` (or the only one).
fn compile_one(
    catalog: &crate::engine::catalog::Catalog,
    source: &str,
    name: Option<&str>,
) -> Result<crate::engine::lang::query::ir::QueryIr> {
    let compile = |diag| OmniError::Compile { file: "<query>".into(), diag };
    let queries = parse_queries(source).map_err(compile)?;
    let query = match name {
        Some(n) => queries.iter().find(|q| q.name == n).ok_or_else(|| OmniError::NotFound(format!("query `{n}`")))?,
        None if queries.len() == 1 => &queries[0],
        None => return Err(OmniError::BadRequest("the source holds several queries: pick one by name".into())),
    };
    typecheck::check_query(catalog, query).map_err(|diags| match diags.into_iter().next() {
        Some(d) => compile(d),
        None => OmniError::Internal("the typechecker refused a query without a diagnostic".into()),
    })
}

fn snapshot_of(view: &ManifestView) -> Snapshot {
    let tables = view
        .state
        .tables
        .values()
        .map(|t| TableSnapshot {
            table_key: t.table_key.clone(),
            version: t.version,
            table_branch: t.branch.clone(),
            row_count: t.row_count,
        })
        .collect();
    Snapshot {
        branch: view.branch.clone(),
        head_commit_id: view.state.effective_head(&view.branch).map(|c| c.commit_id.clone()),
        manifest_version: view.version,
        storage_stamp: STAMP,
        tables,
    }
}
