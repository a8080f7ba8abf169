//! The daemon's background index fold: one owned task per graph that keeps
//! every index the schema declares within a bounded lag of its table.
//!
//! ```text
//! finished write ─(branch, rows per table)─▶ estimate += rows
//!   any estimate of the branch past the lag (or never measured)?
//!     → measure the tails of the tables the branch owns (manifest only):
//!       an index's unindexed rows, or all rows where one is missing (an
//!       overwrite or a schema apply drops a table's indexes)
//!     → any tail longer than the lag?
//!         → the ensure-indices writer on the owned tables (its own commit,
//!           under the branch gate like any writer)
//! ```
//!
//! Writes never wait for it: a finished write only sends its counts. Tails
//! that arrive while a fold runs are coalesced into the next check. The
//! task holds the runtime weakly and ends when the runtime goes (its hook,
//! and with it the channel's sender, is dropped with the runtime).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Weak;

use tokio::sync::mpsc;
use tracing::{Instrument, info_span, warn};

use super::runtime::Runtime;
use super::saga::ensure_indices::{self, EnsureIndicesRequest};
use crate::engine::committed::open_pinned_for_read;
use crate::engine::index_status;
use crate::engine::layout;
use crate::engine::storage::index_fold::FoldDepth;
use crate::protocol::{OmniError, Result};

/// The actor recorded on a background fold's commit.
pub const FOLD_ACTOR: &str = "omnigraph:index-fold";

/// Rows one table of a local graph may hold outside an index before the
/// daemon folds them in (`serve --index-lag-rows`).
pub const DEFAULT_LAG_ROWS: u64 = 10_000;

/// [`DEFAULT_LAG_ROWS`] for a graph on object storage, where every write
/// that scans the unindexed tail pays a ranged GET per page of it: a
/// 10-minute soak there slowed its writes by a quarter as a 1,700-row tail
/// grew, and stayed flat (p50 0.95× from the second tenth to the last)
/// folding past 500.
pub const DEFAULT_LAG_ROWS_OBJECT_STORE: u64 = 500;

/// The lag a graph at `root` folds past unless told otherwise.
pub fn default_lag_rows(root: &crate::engine::storage::Root) -> u64 {
    if root.is_local() { DEFAULT_LAG_ROWS } else { DEFAULT_LAG_ROWS_OBJECT_STORE }
}

/// Start folding `rt`'s unindexed tails in the background once a table's
/// exceed `lag_rows`. Nothing runs at start: each branch is measured at its
/// first write. `false` when the runtime has a folder (or another write
/// listener) already.
pub fn start(rt: &std::sync::Arc<Runtime>, lag_rows: u64) -> bool {
    let (tx, rx) = mpsc::unbounded_channel::<Written>();
    let hook = Box::new(move |branch: &str, rows: &BTreeMap<String, u64>| {
        // A closed channel means the task has ended with its runtime.
        let _ = tx.send(Written { branch: branch.to_string(), rows: rows.clone() });
    });
    if !rt.set_written_hook(hook) {
        return false;
    }
    rt.maintenance().index_folder_started(lag_rows);
    tokio::spawn(run(std::sync::Arc::downgrade(rt), lag_rows, rx));
    true
}

/// A finished write's counts.
struct Written {
    branch: String,
    rows: BTreeMap<String, u64>,
}

/// Per branch and table: rows outside the indexes as last measured, plus
/// rows written since. A branch without an entry has not been measured.
type Estimates = HashMap<String, BTreeMap<String, u64>>;

/// Branches whose estimates are kept: past this many (agents that create
/// and delete branches), all are forgotten and each is measured again at
/// its next write, so the map stays bounded.
const MAX_TRACKED: usize = 256;

async fn run(rt: Weak<Runtime>, lag_rows: u64, mut rx: mpsc::UnboundedReceiver<Written>) {
    let mut estimates = Estimates::new();
    while let Some(first) = rx.recv().await {
        if estimates.len() > MAX_TRACKED {
            estimates.clear();
        }
        let mut due = BTreeSet::new();
        let mut next = Some(first);
        while let Some(w) = next {
            if note(&mut estimates, &w, lag_rows) {
                due.insert(w.branch);
            }
            next = rx.try_recv().ok();
        }
        for branch in due {
            let Some(rt) = rt.upgrade() else { return };
            let span = info_span!("index_fold", branch = %branch);
            match check_and_fold(&rt, &branch, lag_rows).instrument(span).await {
                Ok(tails) => {
                    estimates.insert(branch, tails);
                }
                // A deleted branch has nothing left to fold.
                Err(OmniError::NotFound(_)) => {
                    estimates.remove(&branch);
                }
                Err(e) => {
                    // Tried again once `lag_rows` more rows are written, not
                    // at every write.
                    warn!(branch = %branch, error = %e, "background index fold failed");
                    rt.maintenance().index_folded(false);
                    estimates.insert(branch, BTreeMap::new());
                }
            }
        }
    }
}

/// Add a finished write's rows to its branch's estimates: whether the
/// branch is due a check (never measured, or a table past the lag).
fn note(estimates: &mut Estimates, w: &Written, lag_rows: u64) -> bool {
    let unmeasured = !estimates.contains_key(&w.branch);
    let tails = estimates.entry(w.branch.clone()).or_default();
    for (table, rows) in &w.rows {
        *tails.entry(table.clone()).or_default() += rows;
    }
    unmeasured || tails.values().any(|&n| n > lag_rows)
}

/// Measure the tails of the tables `branch` owns and fold them when one
/// exceeds `lag_rows`: the tails left afterwards, per table.
async fn check_and_fold(rt: &Runtime, branch: &str, lag_rows: u64) -> Result<BTreeMap<String, u64>> {
    rt.maintenance().index_fold_checked();
    let tails = owned_tails(rt, branch).await?;
    if tails.values().all(|&n| n <= lag_rows) {
        return Ok(tails);
    }
    let req = EnsureIndicesRequest {
        branch: branch.to_string(),
        actor: Some(FOLD_ACTOR.to_string()),
        owned_only: true,
        fold_only: false,
        depth: FoldDepth::Delta,
    };
    let report = Box::pin(ensure_indices::run(rt, &req)).await?;
    if report.graph_commit_id.is_some() {
        rt.maintenance().index_folded(true);
    }
    owned_tails(rt, branch).await
}

/// Per table `branch` owns (its inherited tables are their owner's): the
/// rows outside its indexes ([`index_status::TableIndexStatus::tail`]).
async fn owned_tails(rt: &Runtime, branch: &str) -> Result<BTreeMap<String, u64>> {
    let view = rt.view(branch).await?;
    let schema = rt.schema_of(&view).await?;
    let owner = Some(branch.to_string()).filter(|b| b != crate::engine::branch_name::MAIN);
    let mut tails = BTreeMap::new();
    for def in schema.catalog.types() {
        let key = layout::key_of(def);
        let Some(entry) = view.state.tables.get(&key).filter(|e| e.branch == owner) else { continue };
        let ds = open_pinned_for_read(rt.root(), entry).await?;
        tails.insert(key, index_status::of_table(def, entry, &ds).await?.tail());
    }
    Ok(tails)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(branch: &str, rows: &[(&str, u64)]) -> Written {
        Written { branch: branch.into(), rows: rows.iter().map(|(t, n)| (t.to_string(), *n)).collect() }
    }

    /// A branch is checked when first seen and then once a table's
    /// estimate passes the lag; other tables' rows do not add up.
    #[test]
    fn a_branch_is_due_when_unmeasured_or_a_table_passes_the_lag() {
        let mut est = Estimates::new();
        assert!(note(&mut est, &written("main", &[("node:P", 5)]), 100), "never measured");
        est.insert("main".into(), BTreeMap::from([("node:P".to_string(), 10)]));
        assert!(!note(&mut est, &written("main", &[("node:P", 90)]), 100), "100 rows is at the lag, not past it");
        assert!(!note(&mut est, &written("main", &[("edge:K", 60)]), 100));
        assert!(!note(&mut est, &written("main", &[("edge:K", 40)]), 100), "tables are counted apart");
        assert!(note(&mut est, &written("main", &[("node:P", 1)]), 100));
        assert!(note(&mut est, &written("b", &[]), 100), "another branch is measured on its own");
    }
}
