//! The optimize writer: compact every table the branch owns into few
//! fragments as one graph commit, then compact the branch's `__manifest`.
//!
//! ```text
//! ensure-indices folding (no build) on the owned tables, merging (its own
//! commit when it folds anything)
//! → heal branch → schema (shared) → branch gate → capture → per owned table:
//!   skip if its HEAD drifted from its pin, else stage one `Rewrite`
//!   (new files written, nothing committed) → the pipeline: table gates →
//!   revalidate → arm (schema-3 sidecar, one exact transaction per table)
//!   → commit → confirm → publish (exact head) → finish
//!   → still under the branch gate: physical `__manifest` compaction
//!   → ensure-indices again, merging (a BTree loses the rewritten fragments)
//! ```
//!
//! Compaction changes no row, so the commit is a maintenance commit: every
//! query answers the same before and after it, and time travel to earlier
//! commits still reads the versions they pin (nothing is garbage-collected;
//! that is `cleanup`). Tables a named branch still inherits from its parent
//! are left alone: compacting them would copy the parent's data into a fork.
//! The branch gate is held from the capture on, so writes on the branch wait
//! for the rewrite (other branches do not).

use serde::Serialize;
use tracing::{Instrument, info_span};

use super::ensure_indices::{EnsureIndicesReport, EnsureIndicesRequest};
use super::pipeline::{self, Attempt};
use super::recovery::resolve::Mode;
use super::recovery::sweep::{Scope, sweep};
use crate::actors::child_key::ChildKey;
use crate::actors::runtime::Runtime;
use crate::engine::committed::open_pinned;
use crate::engine::manifest::{Lineage, TableEntry};
use crate::engine::storage::index_fold::FoldDepth;
use crate::engine::storage::{StagePlan, TxnIdentity, table};
use crate::engine::write_plan::{self, AuthorityToken, ChainStep, PreparedTable, TableEffect};
use crate::protocol::Result;
use crate::recovery::sidecar::WriterKind;

/// What to optimize.
#[derive(Debug, Clone)]
pub struct OptimizeRequest {
    /// The branch whose tables are compacted.
    pub branch: String,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
}

/// What an optimize did. Field names follow the reference implementation's
/// `optimize --json`.
#[derive(Debug, Clone, Serialize)]
pub struct OptimizeReport {
    /// The branch optimized.
    pub branch: String,
    /// The maintenance commit (`None` when no table needed compaction).
    pub graph_commit_id: Option<String>,
    /// Every table the branch owns, in key order.
    pub tables: Vec<TableOptimize>,
    /// The branch's `__manifest` compaction.
    pub manifest: ManifestCompaction,
    /// The ensure-indices run after the compaction (its own commit when it
    /// built or folded anything): every index merged into one segment that
    /// covers its table.
    pub indexes: Option<EnsureIndicesReport>,
    /// The one before it, which folds the tails the compaction would
    /// otherwise keep apart (its own commit when it did anything).
    pub indexes_before: Option<EnsureIndicesReport>,
}

/// One table's part in an optimize.
#[derive(Debug, Clone, Serialize)]
pub struct TableOptimize {
    /// `node:<Type>` / `edge:<Type>`.
    pub type_key: String,
    /// Fragments the rewrite replaced.
    pub fragments_removed: u64,
    /// Fragments it wrote in their place.
    pub fragments_added: u64,
    /// Whether a rewrite was committed and published for this table.
    pub committed: bool,
    /// Why the table was left alone: `nothing_to_compact`, or
    /// `drift_needs_repair` (its Lance HEAD moved past its manifest pin
    /// without a recovery record; run `omnigraph repair`).
    pub skipped: Option<&'static str>,
    /// The table version the branch's manifest pins after the optimize.
    pub published_dataset_version: u64,
    /// The table's Lance HEAD after the optimize.
    pub lance_head_version: u64,
}

/// The physical compaction of a branch's `__manifest` (no commit).
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ManifestCompaction {
    /// Fragments before.
    pub fragments_before: u64,
    /// Fragments after.
    pub fragments_after: u64,
}

/// Optimize `req.branch`.
pub async fn run(rt: &Runtime, req: &OptimizeRequest) -> Result<OptimizeReport> {
    let indexes = EnsureIndicesRequest {
        branch: req.branch.clone(),
        actor: req.actor.clone(),
        owned_only: false,
        fold_only: false,
        depth: FoldDepth::Merge,
    };
    // Folded first: Lance's compaction plan keeps fragments covered by
    // different index segments (or by none) in different output fragments,
    // so a tail outside the indexes would survive as a fragment of its own.
    // Folds only, on the tables the branch owns (the ones compacted).
    let owned = EnsureIndicesRequest { owned_only: true, fold_only: true, ..indexes.clone() };
    let before = Box::pin(super::ensure_indices::run(rt, &owned)).await?;
    let lineage = Lineage::mint(req.actor.clone());
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "optimize", branch = %req.branch);
    let mut report = attempt(rt, req, lineage).instrument(span).await?;
    // And after: a BTree (row addresses) loses the fragments the compaction rewrote.
    report.indexes = Some(Box::pin(super::ensure_indices::run(rt, &indexes)).await?);
    report.indexes_before = Some(before);
    Ok(report)
}

async fn attempt(rt: &Runtime, req: &OptimizeRequest, lineage: Lineage) -> Result<OptimizeReport> {
    let branch = req.branch.as_str();
    let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(branch)).await?;
    if let Some(blocked) = healed.iter().find_map(|(_, r)| r.blocks(branch)) {
        return Err(blocked);
    }
    let leases = pipeline::lease_branch(rt, branch).await?;
    let view = rt.view(branch).await?;
    let schema = rt.schema_of(&view).await?;
    let target = Some(branch.to_string()).filter(|b| b != "main");
    let span = info_span!("saga.prepare", operation_id = %lineage.commit_id);
    let (staged, mut tables) = stage_owned(rt, &view.state.tables, &target).instrument(span).await?;
    let mut report = OptimizeReport {
        branch: branch.to_string(),
        graph_commit_id: None,
        tables: vec![],
        manifest: ManifestCompaction { fragments_before: 0, fragments_after: 0 },
        indexes: None,
        indexes_before: None,
    };
    let leases = if staged.is_empty() {
        leases
    } else {
        let token = AuthorityToken::of(&view, &schema.identity);
        let pins = write_plan::pins(&view);
        let plan = write_plan::Prepared { tables: staged, ..Default::default() };
        let at = Attempt::new(rt, WriterKind::Optimize, branch, lineage);
        let prepared = pipeline::Prepared::new(at, token, pins, plan, leases)?;
        let armed = prepared.lease().await?.revalidate().await?.arm(req.actor.clone()).await?;
        // The gates stay held through the `__manifest` compaction below.
        let (done, leases) = armed.commit().await?.confirm().await?.publish().await?.finish_holding().await?;
        for landed in &done.tables {
            if let Some(t) = tables.iter_mut().find(|t| t.type_key == landed.table_key) {
                t.committed = true;
                t.published_dataset_version = landed.version;
                t.lance_head_version = landed.version;
                if t.fragments_removed == 0 {
                    // A staged rewrite removes at least one fragment, so this
                    // is a configured-then-compacted chain, whose rewrite was
                    // staged at commit time: read what it did.
                    let uri = rt.root().child_uri(&view.state.tables[&landed.table_key].location);
                    let stats = table::rewrite_stats_at(&uri, landed.branch.as_deref(), landed.version).await?;
                    (t.fragments_removed, t.fragments_added) = (stats.fragments_removed, stats.fragments_added);
                }
            }
        }
        report.graph_commit_id = Some(done.commit_id);
        leases
    };
    let lease = leases.require(&ChildKey::Branch(branch.to_string()))?;
    let span = info_span!("optimize.compact_manifest", branch = %branch);
    let (before, after) = rt.compact_manifest(branch, lease).instrument(span).await?;
    report.manifest = ManifestCompaction { fragments_before: before, fragments_after: after };
    tables.sort_by(|a, b| a.type_key.cmp(&b.type_key));
    report.tables = tables;
    Ok(report)
}

/// Stage a `Rewrite` on every table the target ref owns whose HEAD is at its
/// pin; report every owned table (the staged ones as not yet committed).
async fn stage_owned(
    rt: &Runtime,
    tables: &std::collections::BTreeMap<String, TableEntry>,
    target: &Option<String>,
) -> Result<(Vec<PreparedTable>, Vec<TableOptimize>)> {
    let mut staged = Vec::new();
    let mut report = Vec::new();
    for (key, entry) in tables.iter().filter(|(_, e)| &e.branch == target) {
        let ds = open_pinned(rt.root(), entry).await?;
        let head = table::latest_version(&ds).await?;
        let mut line = TableOptimize {
            type_key: key.clone(),
            fragments_removed: 0,
            fragments_added: 0,
            committed: false,
            skipped: None,
            published_dataset_version: entry.version,
            lance_head_version: head,
        };
        if head != entry.version {
            line.skipped = Some("drift_needs_repair");
            report.push(line);
            continue;
        }
        let identity = TxnIdentity::mint(entry.version);
        let chain = if !table::has_lineage_config(&ds) {
            // A table an older binary created: a compaction staged now would
            // keep its lineage in the manifest, so the chain sets the config
            // first and compacts on the version that carries it.
            let compact = ChainStep {
                plan: StagePlan::Compact(table::Compaction::Full),
                identity: TxnIdentity::mint(entry.version + 1),
            };
            Some((table::stage_configure(ds, &identity.uuid), vec![compact]))
        } else {
            match table::stage_compaction(ds, &identity.uuid, table::Compaction::Full).await? {
                None => {
                    line.skipped = Some("nothing_to_compact");
                    None
                }
                Some((txn, stats)) => {
                    line.fragments_removed = stats.fragments_removed;
                    line.fragments_added = stats.fragments_added;
                    Some((txn, vec![]))
                }
            }
        };
        if let Some((txn, then)) = chain {
            staged.push(PreparedTable {
                table_key: key.clone(),
                uri: rt.root().child_uri(&entry.location),
                pin: entry.version,
                table_branch: target.clone(),
                effect: TableEffect::Staged(Box::new(txn)),
                then,
            });
        }
        report.push(line);
    }
    Ok((staged, report))
}
