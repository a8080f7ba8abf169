//! The ensure-indices writer: build every index the catalog asks for and a
//! branch's tables lack, and fold the rows an existing index does not cover
//! into it, as one graph commit.
//!
//! ```text
//! heal branch → schema (shared) → branch gate → capture → per type: the
//!   indexes the catalog derives (engine::lang::catalog::indexes) minus
//!   those the pinned table has, plus those with an unindexed tail on a
//!   table the branch owns; untrainable vector indexes stay pending →
//!   stage each table's builds as one uncommitted `CreateIndex` (a table the
//!   branch still inherits is forked first, after arming) → the pipeline:
//!   table gates → revalidate → arm (schema-8 sidecar) → commit exactly →
//!   confirm → publish (exact head) → finish
//! ```
//!
//! Nothing to build or fold means no sidecar and no commit. Indexes change
//! no row: every query answers the same before and after, only faster; rows
//! written after a build are scanned until a fold covers them.

use serde::Serialize;
use tracing::{Instrument, info_span};

use super::pipeline::{self, Attempt};
use super::recovery::resolve::Mode;
use super::recovery::sweep::{Scope, sweep};
use crate::actors::runtime::Runtime;
use crate::engine::committed::open_pinned;
use crate::engine::lang::catalog::indexes::{self, IndexKind, IndexSpec};
use crate::engine::layout;
use crate::engine::manifest::{Lineage, TableEntry};
use crate::engine::storage::index_fold::{self, FoldDepth};
use crate::engine::storage::{StagePlan, TxnIdentity, branches, table};
use crate::engine::write_plan::{self, AuthorityToken, PreparedTable, TableEffect};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::WriterKind;

/// Where to build.
#[derive(Debug, Clone)]
pub struct EnsureIndicesRequest {
    /// The branch whose tables get their indexes.
    pub branch: String,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
    /// Only the tables the branch owns (the daemon's background run: it
    /// never forks an inherited table for derived state).
    pub owned_only: bool,
    /// Build no missing index, only fold into existing ones (`optimize`'s
    /// run before its compaction).
    pub fold_only: bool,
    /// How far folds rewrite: a delta over the tail, or (`optimize`) every
    /// index merged into one segment.
    pub depth: FoldDepth,
}

/// What an ensure-indices did.
#[derive(Debug, Clone, Serialize)]
pub struct EnsureIndicesReport {
    /// The branch.
    pub branch: String,
    /// The commit (`None` when every index existed or is pending).
    pub graph_commit_id: Option<String>,
    /// Every table of the catalog, in key order.
    pub tables: Vec<TableIndexes>,
}

/// One table's indexes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableIndexes {
    /// `node:<Type>` / `edge:<Type>`.
    pub type_key: String,
    /// Indexes this run built (committed when `graph_commit_id` is set).
    pub built: Vec<String>,
    /// Indexes the table had already.
    pub existing: Vec<String>,
    /// Of those, the ones this run extended over rows their segments did
    /// not cover (rows written since the build, fragments a compaction
    /// rewrote); only on tables the branch owns.
    pub folded: Vec<String>,
    /// Indexes it cannot build yet, and why.
    pub pending: Vec<PendingIndex>,
}

/// An index left for a later run.
#[derive(Debug, Clone, Serialize)]
pub struct PendingIndex {
    /// The index name.
    pub index: String,
    /// Why it was not built.
    pub reason: String,
}

/// Build the missing indexes of `req.branch`.
pub async fn run(rt: &Runtime, req: &EnsureIndicesRequest) -> Result<EnsureIndicesReport> {
    let lineage = Lineage::mint(req.actor.clone());
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "ensure_indices", branch = %req.branch);
    attempt(rt, req, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &EnsureIndicesRequest, lineage: Lineage) -> Result<EnsureIndicesReport> {
    let branch = req.branch.as_str();
    let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(branch)).await?;
    if let Some(blocked) = healed.iter().find_map(|(_, r)| r.blocks(branch)) {
        return Err(blocked);
    }
    let leases = pipeline::lease_branch(rt, branch).await?;
    let view = rt.view(branch).await?;
    let schema = rt.schema_of(&view).await?;
    let target = Some(branch.to_string()).filter(|b| b != "main");
    let mut report = EnsureIndicesReport { branch: branch.to_string(), graph_commit_id: None, tables: vec![] };
    let mut staged = Vec::new();
    let span = info_span!("saga.prepare", operation_id = %lineage.commit_id);
    async {
        for def in schema.catalog.types() {
            let key = layout::key_of(def);
            let entry = view.schema_table(&key)?;
            let (line, prepared) = prepare_table(rt, &key, entry, &target, indexes::desired(def), req).await?;
            report.tables.push(line);
            staged.extend(prepared);
        }
        Ok::<_, OmniError>(())
    }
    .instrument(span)
    .await?;
    report.tables.sort_by(|a, b| a.type_key.cmp(&b.type_key));
    if staged.is_empty() {
        return Ok(report);
    }
    let token = AuthorityToken::of(&view, &schema.identity);
    let plan = write_plan::Prepared { tables: staged, ..Default::default() };
    let at = Attempt::new(rt, WriterKind::EnsureIndices, branch, lineage);
    let prepared = pipeline::Prepared::new(at, token, write_plan::pins(&view), plan, leases)?;
    let armed = prepared.lease().await?.revalidate().await?.arm(req.actor.clone()).await?;
    let done = armed.commit().await?.confirm().await?.publish().await?.finish().await?;
    report.graph_commit_id = Some(done.commit_id);
    Ok(report)
}

/// The indexes `entry` lacks: staged at its pin when the branch owns the
/// table, else planned for after the first-touch fork.
async fn prepare_table(
    rt: &Runtime,
    key: &str,
    entry: &TableEntry,
    target: &Option<String>,
    wanted: Vec<IndexSpec>,
    req: &EnsureIndicesRequest,
) -> Result<(TableIndexes, Option<PreparedTable>)> {
    let ds = open_pinned(rt.root(), entry).await?;
    let tails = index_fold::coverage(&ds).await?;
    let existing: std::collections::BTreeSet<&str> = tails.iter().map(|c| c.index.as_str()).collect();
    // A merge also folds an index's segments into one.
    let merge = req.depth == FoldDepth::Merge;
    let has_tail =
        |name: &str| tails.iter().any(|c| c.index == name && (c.unindexed_fragments > 0 || (merge && c.segments > 1)));
    let owned = &entry.branch == target;
    if req.owned_only && !owned {
        let existing = wanted.iter().map(IndexSpec::name).filter(|n| existing.contains(n.as_str())).collect();
        return Ok((TableIndexes { type_key: key.to_string(), existing, ..Default::default() }, None));
    }
    let rows = entry.row_count;
    // Drift (HEAD past the pin, no recorded write) is left to `repair`.
    let drifted = owned && table::latest_version(&ds).await? != entry.version;
    let mut line = TableIndexes { type_key: key.to_string(), ..Default::default() };
    let mut build = Vec::new();
    for spec in wanted {
        if existing.contains(spec.name().as_str()) {
            line.existing.push(spec.name());
            // An inherited table's tail is its owner's to fold: folding it
            // here would fork the table for derived state only.
            if owned && !drifted && has_tail(&spec.name()) {
                line.folded.push(spec.name());
                build.push(spec);
            }
        } else if req.fold_only {
            continue;
        } else if drifted {
            let reason = "the table's Lance HEAD is past its manifest pin: run `omnigraph repair`".to_string();
            line.pending.push(PendingIndex { index: spec.name(), reason });
        } else if spec.kind == IndexKind::Vector && rows < table::VECTOR_INDEX_MIN_ROWS {
            let reason = format!(
                "a vector index trains on at least {} rows; the table has {rows}",
                table::VECTOR_INDEX_MIN_ROWS
            );
            line.pending.push(PendingIndex { index: spec.name(), reason });
        } else {
            line.built.push(spec.name());
            build.push(spec);
        }
    }
    if build.is_empty() {
        return Ok((line, None));
    }
    let identity = TxnIdentity::mint(entry.version);
    let uri = rt.root().child_uri(&entry.location);
    let effect = if owned {
        let staged = table::stage_indices(ds, &build, req.depth, &identity.uuid).await?;
        TableEffect::Staged(Box::new(
            staged.ok_or_else(|| OmniError::Internal(format!("{key}: indexes to build, but nothing was staged")))?,
        ))
    } else {
        let fork = branches::plan(&uri, entry.branch.as_deref(), entry.version).await?;
        TableEffect::Fork { fork, plan: StagePlan::Indices { specs: build, depth: req.depth }, identity }
    };
    let prepared = PreparedTable {
        table_key: key.to_string(),
        uri,
        pin: entry.version,
        table_branch: target.clone(),
        effect,
        then: vec![],
    };
    Ok((line, Some(prepared)))
}
