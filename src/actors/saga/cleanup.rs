//! `cleanup`: version garbage collection under a retention policy.
//!
//! ```text
//! refuse if a sidecar is pending → schema gate (exclusive: no write or
//! branch control runs) → refuse if a sidecar is pending → per live branch:
//! retained commits (engine::retention), plus every tagged commit → the
//! keep set: every __manifest version a retained commit produced, every
//! table version those manifests pin, every ref's latest → per dataset
//! ref: remove the other versions
//! ```
//!
//! The reflog window (`--reflog-expiry`, 7 days by default) bounds undo:
//! deleted branches stay on storage, hidden and restorable, and count as
//! branches here until their delete is older than the window, when cleanup
//! purges them first (before its own gate: a purge is branch control);
//! a head a reset moved away from inside the window stays readable, so the
//! reset can be undone; and branch-control reflog records older than the
//! window are pruned.
//!
//! Cleanup makes no commit and no sidecar: it only deletes versions nothing
//! retained reads, so a crash between two datasets leaves every retained
//! commit readable and the next cleanup finishes the job. Pending recovery
//! blocks it because recovery may need the history it would delete. Lance
//! keeps the files a child branch (a first-touch fork) still reads. Table
//! forks of branches that no longer exist, which nothing retained reads, are
//! deleted (the backstop of an interrupted branch delete), and so are the
//! datasets of types a schema apply dropped once no retained commit reads
//! them.

use std::collections::{BTreeMap, BTreeSet};

use futures::{StreamExt, TryStreamExt};
use serde::Serialize;
use tracing::{Instrument, info, info_span, warn};

use crate::actors::lease::LeaseMode;
use crate::actors::runtime::Runtime;
use crate::actors::saga::branch_control;
use crate::engine::branch_name::MAIN;
use crate::engine::manifest::{self, ManifestView, merge_base};
use crate::engine::retention::{KeepSet, RetentionPolicy};
use crate::engine::storage::table::{self, VersionRemoval};
use crate::engine::{reflog, tags};
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};
use crate::recovery::list_pending;

/// Table key reported for the graph's own `__manifest` dataset.
pub const MANIFEST_KEY: &str = "__manifest";

/// What to clean.
#[derive(Debug, Clone, Copy)]
pub struct CleanupRequest {
    /// Which commits stay readable.
    pub policy: RetentionPolicy,
    /// Delete; otherwise only report what would be deleted.
    pub confirm: bool,
    /// The reflog window, µs: deleted branches and reset-away heads younger
    /// than this stay restorable.
    pub reflog_expiry_us: i64,
}

/// The reflog window when none is given: 7 days.
pub const DEFAULT_REFLOG_EXPIRY: &str = "7d";

/// What a cleanup removed, or would remove when `dry_run`.
#[derive(Debug, Clone, Serialize)]
pub struct CleanupReport {
    /// True when nothing was deleted (no `--confirm`).
    pub dry_run: bool,
    /// Commits still readable by time travel afterwards.
    pub retained_commits: usize,
    /// Commits whose versions were (or would be) removed.
    pub removed_commits: usize,
    /// Versions removed over every dataset.
    pub versions_removed: u64,
    /// Bytes removed over every dataset.
    pub bytes_removed: u64,
    /// Every dataset ref, in key order.
    pub tables: Vec<TableCleanup>,
    /// Table forks of branches that no longer exist, which nothing retained
    /// reads (left by an interrupted branch delete): deleted, or to delete.
    pub orphan_forks: Vec<OrphanFork>,
    /// Tables a schema apply dropped that no retained commit reads: their
    /// datasets are deleted, or to delete.
    pub dropped_tables: Vec<DroppedTable>,
    /// Tags that keep a commit the policy alone would remove (a tag is a
    /// retention root: time travel to it keeps working).
    pub pinned_by_tags: Vec<TagPin>,
    /// Deleted branches past the reflog window: purged (or to purge), no
    /// longer restorable.
    pub branches_purged: Vec<String>,
    /// Branch-control reflog records past the window: pruned (or to prune).
    pub reflog_records_pruned: usize,
}

/// A tag keeping its commit's versions.
#[derive(Debug, Clone, Serialize)]
pub struct TagPin {
    /// The tag's name.
    pub tag: String,
    /// The commit it keeps readable.
    pub graph_commit_id: String,
}

/// A dropped type's dataset that nothing retained reads.
#[derive(Debug, Clone, Serialize)]
pub struct DroppedTable {
    /// The type's key when it was dropped.
    pub type_key: String,
    /// True once deleted (false on a dry run).
    pub reclaimed: bool,
}

/// A table's native branch whose graph branch is gone.
#[derive(Debug, Clone, Serialize)]
pub struct OrphanFork {
    /// `node:<Type>` / `edge:<Type>`.
    pub type_key: String,
    /// The native branch name.
    pub table_branch: String,
    /// True once deleted (false on a dry run, or when Lance refused because
    /// another fork was created from it).
    pub reclaimed: bool,
}

/// One dataset ref's part in a cleanup.
#[derive(Debug, Clone, Serialize)]
pub struct TableCleanup {
    /// `node:<Type>` / `edge:<Type>`, or `__manifest`.
    pub type_key: String,
    /// Native branch of the ref (`None` = main).
    pub table_branch: Option<String>,
    /// Versions the ref had.
    pub versions_before: u64,
    /// What was (or would be) removed.
    #[serde(flatten)]
    pub removed: VersionRemoval,
}

/// Run a cleanup.
pub async fn run(rt: &Runtime, req: &CleanupRequest) -> Result<CleanupReport> {
    let span = info_span!("cleanup", confirm = req.confirm);
    async {
        refuse_pending(rt).await?;
        let now_us = chrono::Utc::now().timestamp_micros();
        let cutoff_us = now_us.saturating_sub(req.reflog_expiry_us);
        let (branches_purged, purged_tables) = purge_expired(rt, cutoff_us, req.confirm).await?;
        let reflog_records_pruned = prune_reflog(rt, cutoff_us, req.confirm).await?;
        let _schema = rt.lease_schema(LeaseMode::Exclusive).await?;
        // Again under the gate: a write that armed before we got it is done
        // or has left its sidecar.
        refuse_pending(rt).await?;
        let plan = plan(rt, &req.policy, (now_us, cutoff_us), purged_tables).await?;
        named_failpoint!("cleanup.after_plan");
        let mut report = CleanupReport {
            dry_run: !req.confirm,
            retained_commits: plan.retained,
            removed_commits: plan.removed,
            versions_removed: 0,
            bytes_removed: 0,
            tables: Vec::new(),
            orphan_forks: Vec::new(),
            dropped_tables: Vec::new(),
            pinned_by_tags: plan.pinned_by_tags.clone(),
            branches_purged,
            reflog_records_pruned,
        };
        for (key, location, branch) in &plan.refs {
            let line = clean_ref(rt, &plan.keep, key, location, branch.as_deref(), req.confirm).await?;
            report.versions_removed += line.removed.versions_removed;
            report.bytes_removed += line.removed.bytes_removed;
            report.tables.push(line);
            if req.confirm {
                named_failpoint!("cleanup.between_tables");
            }
        }
        for (key, location, branch) in &plan.orphans {
            let reclaimed = req.confirm && reclaim(rt, location, branch).await?;
            report.orphan_forks.push(OrphanFork { type_key: key.clone(), table_branch: branch.clone(), reclaimed });
        }
        for (key, location) in &plan.dropped {
            if req.confirm {
                // Registered nowhere live and read by nothing retained: no
                // writer can reach it (a re-added type gets a fresh path).
                rt.root().delete_prefix(location).await?;
            }
            report.dropped_tables.push(DroppedTable { type_key: key.clone(), reclaimed: req.confirm });
        }
        info!(versions = report.versions_removed, bytes = report.bytes_removed, "cleanup done");
        Ok(report)
    }
    .instrument(span)
    .await
}

async fn refuse_pending(rt: &Runtime) -> Result<()> {
    match list_pending(rt.root()).await?.first() {
        None => Ok(()),
        Some(name) => Err(OmniError::RecoveryRequired {
            operation_id: name.trim_end_matches(".json").to_string(),
            reason: "cleanup refuses while a recovery sidecar is pending (recovery may need the history it \
                     would remove); open the graph read-write to recover"
                .into(),
        }),
    }
}

/// `(type key, location, native branch)` of one dataset ref.
type DatasetRef = (String, String, Option<String>);

/// The keep set and every dataset ref to clean.
struct Plan {
    keep: KeepSet,
    /// Every dataset ref to clean, the manifest's first.
    refs: Vec<DatasetRef>,
    /// `(type key, location, native branch)` of forks no live branch owns.
    orphans: Vec<(String, String, String)>,
    /// `(type key, location)` of dropped tables no retained commit reads.
    dropped: Vec<(String, String)>,
    retained: usize,
    removed: usize,
    pinned_by_tags: Vec<TagPin>,
}

/// Registered table locations and their type keys.
type Registered = BTreeMap<String, String>;

/// Purge the deleted branches whose delete is older than `cutoff_us`
/// (with `confirm`; otherwise name them). One a tag still pins stays.
/// Also returns the tables the purged branches registered: a type only a
/// purged branch added is registered nowhere else, so its dataset is
/// reclaimed like a dropped type's.
async fn purge_expired(rt: &Runtime, cutoff_us: i64, confirm: bool) -> Result<(Vec<String>, Registered)> {
    let mut expired = Vec::new();
    for name in table::branch_names(&manifest::uri(rt.root())).await? {
        let view = match rt.peek(&name, false).await {
            Ok(view) => view,
            Err(OmniError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        if view.state.deleted(&name).is_some_and(|d| d.at_us < cutoff_us) {
            let registered: Registered =
                view.state.registrations.values().map(|r| (r.location.clone(), r.table_key.clone())).collect();
            expired.push((name, registered));
        }
    }
    if !confirm {
        return Ok((expired.into_iter().map(|(name, _)| name).collect(), Registered::new()));
    }
    let (mut purged, mut tables) = (Vec::new(), Registered::new());
    // Deepest first: a child's native ref reads its parent's data.
    expired.sort_by_key(|(n, _)| std::cmp::Reverse(n.len()));
    for (name, registered) in expired {
        match branch_control::purge(rt, &name).await {
            Ok(_) => {
                purged.push(name);
                tables.extend(registered);
            }
            Err(OmniError::BranchConflict { reason, .. }) => warn!(branch = %name, %reason, "kept a deleted branch"),
            Err(e) => return Err(e),
        }
    }
    Ok((purged, tables))
}

/// Remove the branch-control reflog records older than `cutoff_us` (with
/// `confirm`; otherwise count them).
async fn prune_reflog(rt: &Runtime, cutoff_us: i64, confirm: bool) -> Result<usize> {
    let old = reflog::control_records(rt.root()).await?.into_iter().filter(|(_, e)| e.at_us < cutoff_us);
    let mut pruned = 0;
    for (path, _) in old {
        if confirm {
            rt.root().delete(&path).await?;
        }
        pruned += 1;
    }
    Ok(pruned)
}

/// Retained commits of every branch on storage (a deleted one too, until
/// it is purged) and what they read. `purged` holds the tables of the
/// branches this cleanup purged (they are dropped unless something
/// retained still reads them).
async fn plan(
    rt: &Runtime,
    policy: &RetentionPolicy,
    (now_us, cutoff_us): (i64, i64),
    purged: Registered,
) -> Result<Plan> {
    let mut branches = vec![MAIN.to_string()];
    branches.extend(table::branch_names(&manifest::uri(rt.root())).await?);
    let mut heads = Vec::new();
    let (mut retained, mut seen) = (BTreeSet::new(), BTreeSet::new());
    for branch in &branches {
        let view = rt.peek(branch, true).await?;
        if let Some(head) = view.state.effective_head(branch) {
            // Commits of purged branches are unreadable already.
            let history: Vec<_> =
                view.state.history(&head.commit_id)?.into_iter().filter(|c| branches.contains(&c.branch)).collect();
            seen.extend(history.iter().map(|c| c.commit_id.clone()));
            for c in policy.retained(&history, now_us) {
                retained.insert((c.branch.clone(), c.manifest_version, c.commit_id.clone()));
            }
        }
        retain_reset_away(&view, &branches, cutoff_us, &mut retained)?;
        heads.push(view);
    }
    retain_merge_bases(&heads, &branches, &mut retained)?;
    let pinned_by_tags = retain_tagged(rt, &branches, &mut retained).await?;
    let views = load_retained(rt, &retained).await?;
    let live: BTreeSet<(&str, u64)> = views.iter().chain(&heads).map(|v| (v.branch.as_str(), v.version)).collect();
    retained.retain(|(b, v, _)| live.contains(&(b.as_str(), *v)));
    let mut keep = KeepSet::default();
    let (mut keys, mut read) = (purged, BTreeSet::new());
    for view in views.iter().chain(&heads) {
        keep.keep(manifest::MANIFEST_DIR, Some(&view.branch), view.version);
        for t in view.state.tables.values() {
            keep.keep(&t.location, t.branch.as_deref(), t.version);
            read.insert(t.location.clone());
        }
        for reg in view.state.registrations.values() {
            keys.insert(reg.location.clone(), reg.table_key.clone());
        }
    }
    for view in &heads {
        // The versions after the head's publish (its `__manifest`
        // compactions) lead an open back to the publish's checkpoint: the
        // head row's (a head move's is newer than its commit's).
        let own = view.state.effective_head(&view.branch).filter(|c| c.branch == view.branch);
        let written = view.state.head_written_at(&view.branch).or(own.map(|c| c.manifest_version));
        for v in written.into_iter().flat_map(|from| from..view.version) {
            keep.keep(manifest::MANIFEST_DIR, Some(&view.branch), v);
        }
    }
    // A registered table no retained manifest shows is one a schema apply dropped.
    let (kept, dropped): (BTreeMap<_, _>, BTreeMap<_, _>) = keys.into_iter().partition(|(l, _)| read.contains(l));
    let mut gone = Vec::new();
    for (location, key) in dropped {
        if !rt.root().list(&location).await?.is_empty() {
            gone.push((key, location));
        }
    }
    let (refs, orphans) = dataset_refs(rt, &branches, kept, &keep).await?;
    let kept_ids: BTreeSet<&String> = retained.iter().map(|(_, _, id)| id).collect();
    let removed = seen.iter().filter(|id| !kept_ids.contains(id)).count();
    Ok(Plan { keep, refs, orphans, dropped: gone, retained: kept_ids.len(), removed, pinned_by_tags })
}

/// Keep each head a reset moved `view`'s branch away from inside the
/// reflog window: the reset can be undone by resetting back to it.
fn retain_reset_away(
    view: &ManifestView,
    branches: &[String],
    cutoff_us: i64,
    retained: &mut BTreeSet<(String, u64, String)>,
) -> Result<()> {
    let commits = view.state.commits()?;
    let moves = view.state.head_moves().filter(|m| m.branch == view.branch && m.at_us >= cutoff_us);
    for from in moves.filter_map(|m| m.from.as_ref()) {
        if let Some(c) = commits.get(from).filter(|c| branches.contains(&c.branch)) {
            retained.insert((c.branch.clone(), c.manifest_version, c.commit_id.clone()));
        }
    }
    Ok(())
}

/// Keep every tagged commit (a tag is a retention root), and name the tags
/// that keep a commit the policy alone would not.
async fn retain_tagged(
    rt: &Runtime,
    branches: &[String],
    retained: &mut BTreeSet<(String, u64, String)>,
) -> Result<Vec<TagPin>> {
    let mut pins = Vec::new();
    for tag in tags::list(rt.root()).await? {
        // A branch delete refuses while a tag names a commit made on it.
        if !branches.contains(&tag.branch) {
            continue;
        }
        if !retained.iter().any(|(_, _, id)| *id == tag.graph_commit_id) {
            pins.push(TagPin { tag: tag.name.clone(), graph_commit_id: tag.graph_commit_id.clone() });
        }
        retained.insert((tag.branch, tag.manifest_version, tag.graph_commit_id));
    }
    Ok(pins)
}

/// The manifests the retained `(branch, version, commit)`s produced. A
/// version an earlier, tighter cleanup removed is gone already: its commit
/// stays unreadable whatever this policy says.
async fn load_retained(rt: &Runtime, retained: &BTreeSet<(String, u64, String)>) -> Result<Vec<ManifestView>> {
    // Owned items: borrowed ones break the handler's higher-ranked `Send`.
    let versions: BTreeSet<(String, u64)> = retained.iter().map(|(b, v, _)| (b.clone(), *v)).collect();
    let loaded: Vec<Option<ManifestView>> = futures::stream::iter(versions)
        .map(|(b, v)| {
            let root = rt.root().clone();
            async move {
                match manifest::load(&root, &b, Some(v)).await {
                    Err(OmniError::NotFound(_)) => Ok(None),
                    other => other.map(Some),
                }
            }
        })
        .buffer_unordered(4)
        .try_collect()
        .await?;
    Ok(loaded.into_iter().flatten().collect())
}

/// Every dataset ref to clean (`__manifest` per live branch first, then
/// each table on main and on each fork), and the forks no live branch owns
/// and nothing retained reads.
async fn dataset_refs(
    rt: &Runtime,
    branches: &[String],
    keys: BTreeMap<String, String>,
    keep: &KeepSet,
) -> Result<(Vec<DatasetRef>, Vec<(String, String, String)>)> {
    let mut refs: Vec<DatasetRef> = branches
        .iter()
        .map(|b| (MANIFEST_KEY.to_string(), manifest::MANIFEST_DIR.to_string(), Some(b.clone()).filter(|b| b != MAIN)))
        .collect();
    let mut orphans = Vec::new();
    for (location, key) in keys {
        let forks = match table::branch_names(&rt.root().child_uri(&location)).await {
            Ok(forks) => forks,
            // A type dropped hard: its dataset is gone with its versions.
            Err(OmniError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        refs.push((key.clone(), location.clone(), None));
        for b in forks {
            if branches.contains(&b) || keep.reads(&location, Some(&b)) {
                refs.push((key.clone(), location.clone(), Some(b)));
            } else {
                orphans.push((key.clone(), location.clone(), b));
            }
        }
    }
    Ok((refs, orphans))
}

/// Keep the merge base of every pair of live branches: merging them reads
/// the base's state, so cleaning it would make the branches unmergeable.
fn retain_merge_bases(
    heads: &[ManifestView],
    live: &[String],
    retained: &mut BTreeSet<(String, u64, String)>,
) -> Result<()> {
    for (i, a) in heads.iter().enumerate() {
        for b in &heads[i + 1..] {
            let (Some(ha), Some(hb)) = (a.state.effective_head(&a.branch), b.state.effective_head(&b.branch)) else {
                continue;
            };
            let commits = merge_base::joint_dag(&a.state, &b.state)?;
            let Some(base) = merge_base::merge_base(&commits, &ha.commit_id, &hb.commit_id) else { continue };
            if let Some(c) = commits.get(&base).filter(|c| live.contains(&c.branch)) {
                retained.insert((c.branch.clone(), c.manifest_version, c.commit_id.clone()));
            }
        }
    }
    Ok(())
}

/// Delete an orphan fork through its table actor; `false` when Lance
/// refuses because a fork was created from it (that one goes first, and a
/// later cleanup takes this one).
async fn reclaim(rt: &Runtime, location: &str, branch: &str) -> Result<bool> {
    let uri = rt.root().child_uri(location);
    let lease = rt.lease_table(&uri, branch).await?;
    match rt.reclaim_table_fork(&uri, branch, &lease).await {
        Ok(existed) => Ok(existed),
        Err(OmniError::BranchConflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Remove (or measure) the versions of one ref nothing retained reads.
async fn clean_ref(
    rt: &Runtime,
    keep: &KeepSet,
    key: &str,
    location: &str,
    branch: Option<&str>,
    confirm: bool,
) -> Result<TableCleanup> {
    let ds = table::open_table(&rt.root().child_uri(location), branch, None).await?;
    let existing = table::list_versions(&ds).await?;
    let removable = keep.removable(location, branch, &existing, ds.version().version);
    let removed = table::remove_versions(&ds, removable, confirm).await?;
    Ok(TableCleanup {
        type_key: key.to_string(),
        table_branch: branch.map(str::to_string),
        versions_before: existing.len() as u64,
        removed,
    })
}
