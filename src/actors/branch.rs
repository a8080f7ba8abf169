//! BranchActor: the branch gate and the only publisher to `__manifest` for its branch.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{Instrument, info_span};

use super::lease::{Gate, LeaseMode};
use crate::actors::messages::BranchMsg;
use crate::engine::compaction_tiers::Tier;
use crate::engine::manifest::{self, ManifestView, PublishRequest, Published, publisher};
use crate::engine::storage::{Root, branches, table};
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};

/// One graph branch's actor.
pub struct BranchActor;

/// Start arguments (kept by the supervisor for restarts).
#[derive(Clone)]
pub struct BranchArgs {
    /// The graph root.
    pub root: Root,
    /// The graph branch.
    pub branch: String,
    /// The branch gate (outlives the actor).
    pub gate: Gate,
    /// The tree's maintenance counters.
    pub maintenance: std::sync::Arc<super::maintenance::Maintenance>,
}

/// A branch actor's state: its arguments plus the last manifest view read.
pub struct BranchState {
    args: BranchArgs,
    /// Reused while the manifest branch stays at the same version and incarnation.
    cache: Option<ManifestView>,
    /// When `cache` was last checked against storage (read replicas reuse it
    /// for their refresh interval).
    checked: Option<super::replica::Checked>,
}

impl std::ops::Deref for BranchState {
    type Target = BranchArgs;
    fn deref(&self) -> &BranchArgs {
        &self.args
    }
}

impl BranchState {
    /// The branch's latest view; `complete` asks for its commit history too.
    async fn view(&mut self, complete: bool) -> Result<ManifestView> {
        if let (Some(view), Some(checked)) = (&self.cache, self.checked)
            && checked.is_fresh()
            && (view.state.is_complete() || !complete)
        {
            return Ok(view.clone());
        }
        let checked = super::replica::Checked::now();
        let view = manifest::load_cached(&self.args.root, &self.args.branch, &mut self.cache, complete).await?;
        self.checked = Some(checked);
        Ok(view)
    }
}

impl Actor for BranchActor {
    type Msg = BranchMsg;
    type State = BranchState;
    type Arguments = BranchArgs;

    async fn pre_start(&self, _me: ActorRef<BranchMsg>, args: BranchArgs) -> Result<BranchState, ActorProcessingErr> {
        Ok(BranchState { args, cache: None, checked: None })
    }

    async fn handle(
        &self,
        _me: ActorRef<BranchMsg>,
        msg: BranchMsg,
        state: &mut BranchState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BranchMsg::Acquire { reply } => state.gate.enqueue(LeaseMode::Exclusive, reply),
            BranchMsg::TryAcquire { reply } => drop(reply.send(state.gate.try_grant(LeaseMode::Exclusive))),
            BranchMsg::Contended { reply } => drop(reply.send(state.gate.load() != (0, 0))),
            BranchMsg::View { complete, reply } => {
                drop(reply.send(state.view(complete).await));
            }
            BranchMsg::Publish { request, lease_id, reply } => {
                let out = publish(state, &request, lease_id).await;
                drop(reply.send(out));
                // After the reply: the writer does not wait for maintenance,
                // and this mailbox still orders it before any later publish.
                if let Some(scope) = state.cache.as_ref().and_then(|v| table::tier_due(&v.dataset, &MANIFEST_TIERS)) {
                    compact_manifest(state, scope).await;
                }
            }
            BranchMsg::CreateRef { plan, lease_id, reply } => {
                let out = async {
                    check_lease(state, lease_id)?;
                    branches::create_exact(&manifest::uri(&state.root), &state.branch, &plan).await?;
                    manifest::load(&state.root, &state.branch, None).await
                };
                drop(reply.send(out.instrument(info_span!("branch.create_ref", branch = %state.branch)).await));
            }
            BranchMsg::DeleteRef { captured, lease_id, reply } => {
                let out = async {
                    check_lease(state, lease_id)?;
                    branches::delete_exact(&manifest::uri(&state.root), &state.branch, &captured.0).await
                };
                drop(reply.send(out.instrument(info_span!("branch.delete_ref", branch = %state.branch)).await));
            }
            BranchMsg::CompactManifest { lease_id, reply } => {
                let out = async {
                    check_lease(state, lease_id)?;
                    compact_manifest_now(state).await
                };
                drop(reply.send(out.await));
            }
        }
        Ok(())
    }
}

/// Tail fragments (under [`table::TAIL_FRAGMENT_ROWS`] rows) `__manifest`
/// may reach on a branch before its actor compacts them. Every commit adds
/// one, and every open and publish reads them all (each costs two or three
/// reads), so without this a write's cost grows with the branch's history.
/// Measured on one-row CLI mutations: at 32 the manifest scan took ~60 reads
/// and `snapshot` 27 ms; at 8, 17 ms, and a mutation's median fell ~15%, the
/// compaction every ~8 commits included. Only the tail is rewritten
/// (fragments under [`table::TAIL_FRAGMENT_ROWS`] rows): settled fragments
/// stay as they are, until [`MANIFEST_TIERS`] merges them in turn.
pub const MANIFEST_COMPACT_ABOVE: usize = 8;

/// The tiers of `__manifest`'s compaction after a publish: the tail as
/// above, then settled 1,024-row fragments merged 32 at a time, then those
/// merged up to Lance's default fragment size. With the tail alone a busy
/// branch gained a settled fragment every ~200 commits for good (about
/// 250 after 80,000 commits), and every publish and open walks them all;
/// with these a branch keeps at most about a hundred whatever its history,
/// and each row is rewritten about once per tier.
pub const MANIFEST_TIERS: [Tier; 3] = [
    Tier { target_rows: table::TAIL_FRAGMENT_ROWS, max_small: MANIFEST_COMPACT_ABOVE },
    Tier { target_rows: 32 * table::TAIL_FRAGMENT_ROWS, max_small: 40 },
    Tier { target_rows: 1 << 20, max_small: 40 },
];

/// Physical-only compaction of the branch's `__manifest` (same rows, fewer
/// fragments), run by its only publisher right after answering a publish:
/// the actor's mailbox keeps every later publish and ref change of this
/// branch behind it. The publish already succeeded: a failure here is logged
/// and retried after a later publish, never reported as the write's.
async fn compact_manifest(state: &mut BranchState, scope: table::Compaction) {
    let Some(view) = state.cache.clone() else { return };
    let span = info_span!("branch.compact_manifest", branch = %state.branch, version = view.version, ?scope);
    match table::compact(view.dataset.clone(), scope).instrument(span).await {
        Ok(Some(compacted)) => {
            state.cache = Some(view.compacted(compacted));
            state.maintenance.manifest_compacted(true);
        }
        Ok(None) => {}
        Err(e) => {
            state.maintenance.manifest_compacted(false);
            tracing::warn!(branch = %state.branch, error = %e, "__manifest compaction failed; will retry");
        }
    }
}

/// Compact the branch's `__manifest` now, under the caller's lease; returns
/// its fragment counts before and after. Unlike the after-publish pass, a
/// failure is the caller's error.
async fn compact_manifest_now(state: &mut BranchState) -> Result<(u64, u64)> {
    let view = state.view(false).await?;
    let before = table::fragment_count(&view.dataset);
    let span = info_span!("branch.compact_manifest", branch = %state.branch, version = view.version);
    let Some(compacted) = table::compact(view.dataset.clone(), table::Compaction::Full).instrument(span).await? else {
        return Ok((before, before));
    };
    let after = table::fragment_count(&compacted);
    state.cache = Some(view.compacted(compacted));
    Ok((before, after))
}

fn check_lease(state: &BranchArgs, lease_id: u64) -> Result<()> {
    if !state.gate.holds(lease_id) {
        return Err(OmniError::Internal(format!("change on `{}` without holding its branch lease", state.branch)));
    }
    Ok(())
}

async fn publish(state: &mut BranchState, request: &PublishRequest, lease_id: u64) -> Result<Published> {
    if request.branch != state.branch {
        return Err(OmniError::Internal(format!(
            "publish for branch `{}` sent to the actor of `{}`",
            request.branch, state.branch
        )));
    }
    check_lease(state, lease_id)?;
    let span = info_span!("saga.publish", operation_id = %request.lineage.commit_id, branch = %state.branch);
    let current = state.view(false).await?;
    named_failpoint!("branch.before_publish");
    let mut published = publisher::publish_from(&state.root, request, Some(current)).instrument(span).await?;
    named_failpoint!("branch.after_publish");
    // The post-publish view is the branch's new latest: the next read of the
    // branch needs no scan.
    if let Some(view) = published.view.take() {
        state.cache = Some(rebase_if_long(view, &state.args.maintenance));
    }
    Ok(published)
}

/// Commits a cached view may hold before its actor rebases it. Each publish
/// clones the state it extends, and a head state gains every commit
/// published through it: without a bound a long-running daemon's publish
/// (and its memory) would grow with the commits it has served.
const REBASE_ABOVE: usize = 64;

/// `view` with its state rebased on its own checkpoint once it holds more
/// than [`REBASE_ABOVE`] commits (a complete history too: a later history
/// read folds it again from storage).
fn rebase_if_long(view: ManifestView, maintenance: &super::maintenance::Maintenance) -> ManifestView {
    if view.state.held_commits() <= REBASE_ABOVE {
        return view;
    }
    match view.state.rebased() {
        Some(Ok(state)) => {
            maintenance.state_rebased();
            ManifestView { state: std::sync::Arc::new(state), ..view }
        }
        Some(Err(e)) => {
            tracing::warn!(branch = %view.branch, error = %e, "cannot rebase the cached manifest state; keeping it");
            view
        }
        None => view,
    }
}
