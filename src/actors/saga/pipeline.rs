//! The writer pipeline as types: each saga step consumes the state the step
//! before produced, so a step cannot be skipped, repeated or reordered.
//!
//! ```text
//! Prepared ─lease─▶ Leased ─revalidate─▶ Revalidated ─arm─▶ Armed
//!   ─commit─▶ Committed ─confirm─▶ Confirmed ─publish─▶ Published ─finish─▶ Finished
//! ```
//!
//! - Before [`Armed`], a failure leaves nothing behind (no sidecar, no effect).
//! - [`Armed::discard`] is the only way to drop an armed sidecar without
//!   effects; [`Armed::commit`] uses it when the exact guard refuses the first
//!   commit before anything landed (the error is then `ReadSetChanged`).
//! - From [`Armed`] on, every error is `RecoveryRequired{operation_id}`: the
//!   sidecar stays for recovery.
//! - Commits go through the table actors and the publish through the branch
//!   actor, each presenting the lease this pipeline holds on its gate.
//!
//! Every step runs in a `saga.<step>` span carrying the operation id, and
//! every boundary is a failpoint `<writer>.<boundary>`.

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::{Instrument, info_span};

use super::gates::Gates;
use crate::actors::child_key::ChildKey;
use crate::actors::lease::{Lease, LeaseMode, LeaseSet};
use crate::actors::runtime::{LiveOp, Runtime};
use crate::engine::branch_name::MAIN;
use crate::engine::manifest::rows::CommitRow;
use crate::engine::manifest::{Lineage, Precondition, PublishRequest, TableUpdate};
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::{CommittedTxn, StagedTxn, table};
use crate::engine::write_plan::{self, AuthorityToken, ChainStep, PreparedTable, TableEffect};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::{
    ArmedSidecar, ConfirmedSidecar, EffectPhase, MergeDecision, SidecarBody, SidecarPointer, SidecarStore,
    SidecarTable, WriterKind,
};
use crate::{named_failpoint, saga_failpoint};

/// Who writes where: what every step of one attempt shares.
pub struct Attempt<'a> {
    rt: &'a Runtime,
    store: SidecarStore,
    kind: WriterKind,
    branch: &'a str,
    lineage: Lineage,
    /// A schema apply's schemas, before and after: archived before the
    /// confirmation (on main the target is staged then, and promoted after
    /// the publish).
    schema: Option<(Arc<SchemaState>, Arc<SchemaState>)>,
    /// A merge's decision of its conflicts, recorded in the sidecar.
    decision: Option<MergeDecision>,
}

impl<'a> Attempt<'a> {
    /// A new attempt of a `kind` write on `branch`, committing as `lineage`.
    /// The commit records the writer `kind` unless the lineage names its own
    /// operation (a revert lands as a merge).
    pub fn new(rt: &'a Runtime, kind: WriterKind, branch: &'a str, mut lineage: Lineage) -> Self {
        lineage.operation.get_or_insert_with(|| super::failpoints::writer_prefix(kind).to_string());
        Attempt { rt, store: SidecarStore::new(rt.root().clone()), kind, branch, lineage, schema: None, decision: None }
    }

    /// This attempt with a merge's decision of its conflicts, for the sidecar.
    pub fn with_decision(self, decision: Option<MergeDecision>) -> Self {
        Attempt { decision, ..self }
    }

    /// A schema apply on `branch` from `schemas.0` to `schemas.1`: the
    /// pipeline archives both before confirming; on main it also stages the
    /// target's schema files then and makes them current after publishing.
    pub fn schema_apply(
        rt: &'a Runtime,
        branch: &'a str,
        lineage: Lineage,
        schemas: (Arc<SchemaState>, Arc<SchemaState>),
    ) -> Self {
        Attempt { schema: Some(schemas), ..Attempt::new(rt, WriterKind::SchemaApply, branch, lineage) }
    }

    /// The operation id (the pre-minted commit id).
    pub fn operation_id(&self) -> &str {
        &self.lineage.commit_id
    }

    /// Turn an error after the sidecar is armed into the caller's answer.
    fn after_arm(&self, e: OmniError) -> OmniError {
        match e {
            e @ OmniError::RecoveryRequired { .. } => e,
            e => OmniError::RecoveryRequired { operation_id: self.operation_id().to_string(), reason: e.to_string() },
        }
    }
}

/// The schema (shared) and branch gates of `branch`, in gate order.
pub async fn lease_branch(rt: &Runtime, branch: &str) -> Result<LeaseSet> {
    Gates::schema(LeaseMode::Shared).branch(branch).acquire(rt).await
}

/// A prepared attempt: effects staged against one authority token, outside
/// the table gates (and outside the branch gate unless `leases` holds it).
pub struct Prepared<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    /// Every table's manifest pin at capture.
    pins: BTreeMap<String, u64>,
    plan: write_plan::Prepared,
    leases: LeaseSet,
}

impl<'a> Prepared<'a> {
    /// The attempt `plan` prepared against `token` and `pins`; `leases` holds
    /// the schema and branch gates already when it prepared under them.
    pub fn new(
        at: Attempt<'a>,
        token: AuthorityToken,
        pins: BTreeMap<String, u64>,
        plan: write_plan::Prepared,
        leases: LeaseSet,
    ) -> Result<Self> {
        saga_failpoint!(at.kind, "after_prepare");
        Ok(Prepared { at, token, pins, plan, leases })
    }

    /// Whether the plan changes nothing (no table effect and no pointer).
    pub fn is_empty(&self) -> bool {
        self.plan.tables.is_empty() && self.plan.pointers.is_empty()
    }

    /// Take the schema and branch gates (unless held), then every touched
    /// table's gate in sorted order.
    pub async fn lease(self) -> Result<Leased<'a>> {
        let Prepared { at, token, pins, plan, mut leases } = self;
        let span = info_span!("saga.lease", operation_id = %at.operation_id(), branch = %at.branch);
        // Gates the writer holds already (a schema apply holds every table's) are kept.
        let gates = plan.tables.iter().fold(Gates::schema(LeaseMode::Shared).branch(at.branch), |g, t| {
            g.table(&t.uri, t.table_branch.as_deref().unwrap_or(MAIN))
        });
        gates.take(at.rt, &mut leases).instrument(span).await?;
        saga_failpoint!(at.kind, "after_leases");
        Ok(Leased { at, token, pins, plan, leases })
    }
}

/// Every gate the attempt needs is held.
pub struct Leased<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    pins: BTreeMap<String, u64>,
    plan: write_plan::Prepared,
    leases: LeaseSet,
}

impl<'a> Leased<'a> {
    /// Under the gates: no relevant sidecar appeared, the token still holds,
    /// and every touched table's live HEAD equals its manifest pin (a first
    /// touch needs its target ref absent). A changed authority is
    /// `ReadSetChanged`; uncovered drift is `Drift` (run `omnigraph repair`).
    pub async fn revalidate(self) -> Result<Revalidated<'a>> {
        let span = info_span!("saga.revalidate", operation_id = %self.at.operation_id(), branch = %self.at.branch);
        super::revalidate::check(
            self.at.rt,
            &self.at.store,
            self.at.branch,
            &self.token,
            &self.pins,
            &self.plan.tables,
        )
        .instrument(span)
        .await?;
        saga_failpoint!(self.at.kind, "after_revalidate");
        let Leased { at, token, plan, leases, .. } = self;
        Ok(Revalidated { at, token, plan, leases })
    }
}

/// Revalidated under the gates: ready to arm.
pub struct Revalidated<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    plan: write_plan::Prepared,
    leases: LeaseSet,
}

impl<'a> Revalidated<'a> {
    /// Make the sidecar durable (Armed) with the complete intent: token,
    /// pins, planned identities, forks, lineage and rollback id. A failed PUT
    /// means nothing was armed and nothing happened.
    pub async fn arm(self, actor: Option<String>) -> Result<Armed<'a>> {
        let Revalidated { at, token, mut plan, leases } = self;
        plan.tables.sort_by(|a, b| a.table_key.cmp(&b.table_key));
        let body = SidecarBody {
            schema_version: 0,
            operation_id: at.operation_id().to_string(),
            writer_kind: at.kind,
            branch: at.branch.to_string(),
            actor,
            started_at_us: at.lineage.created_at_us,
            phase: EffectPhase::Armed,
            token: token.clone(),
            tables: plan.tables.iter().map(sidecar_table).collect(),
            lineage: at.lineage.clone(),
            rollback_commit_id: ulid::Ulid::new().to_string(),
            pointers: plan
                .pointers
                .iter()
                .map(|p| SidecarPointer { expected_version: p.expected_version, update: p.update.clone() })
                .collect(),
            decision: at.decision.clone(),
        };
        let live = at.rt.track_live(at.operation_id());
        let span = info_span!("saga.arm", operation_id = %at.operation_id());
        let sidecar = at.store.arm(body).instrument(span).await?;
        let armed = Armed { at, token, plan, leases, sidecar, _live: live };
        // From here on any failure leaves the sidecar for recovery.
        // Without the failpoints feature the closure is empty.
        #[allow(clippy::redundant_closure_call)]
        let fired: Result<()> = (|| {
            saga_failpoint!(armed.at.kind, "after_arm");
            Ok(())
        })();
        fired.map_err(|e| armed.at.after_arm(e))?;
        Ok(armed)
    }
}

fn sidecar_table(t: &PreparedTable) -> SidecarTable {
    SidecarTable {
        table_key: t.table_key.clone(),
        table_path: t.uri.clone(),
        table_branch: t.table_branch.clone(),
        expected_version: t.pin,
        planned: t.identity(),
        chain: t.then.iter().map(|s| s.identity.clone()).collect(),
        confirmed: None,
        fork: t.fork().cloned(),
    }
}

/// The sidecar is durable; no effect is known to exist yet.
pub struct Armed<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    plan: write_plan::Prepared,
    leases: LeaseSet,
    sidecar: ArmedSidecar,
    /// The operation counts as a live write of this process until dropped.
    _live: LiveOp,
}

/// A table whose transaction is staged on the ref it commits to.
struct ReadyTable {
    table_key: String,
    uri: String,
    table_branch: Option<String>,
    /// Whether this write created the ref (a first touch).
    forked: bool,
    txn: StagedTxn,
    /// The chain's later steps, staged one by one on the version before.
    then: Vec<ChainStep>,
}

impl<'a> Armed<'a> {
    /// Drop the armed sidecar of an attempt that made no effect. The only
    /// way to discard an armed intent: every other end goes through recovery.
    pub async fn discard(self) -> Result<()> {
        self.sidecar.discard(&self.at.store).await
    }

    /// Create every first-touch fork and stage on it, then commit every
    /// table exactly (zero transparent retries, landing at read_version + 1
    /// with the planned identity) through its table actor. A refusal of the
    /// first commit with no fork made discards the sidecar and is
    /// `ReadSetChanged` (the attempt may be prepared again).
    pub async fn commit(self) -> Result<Committed<'a>> {
        let Armed { at, token, plan, leases, sidecar, _live } = self;
        // A schema apply's new table (pin 0) has no manifest pin to expect.
        let mut expected: BTreeMap<String, u64> =
            plan.tables.iter().filter(|t| t.pin != 0).map(|t| (t.table_key.clone(), t.pin)).collect();
        let landing: BTreeMap<String, u64> =
            plan.tables.iter().map(|t| (t.table_key.clone(), t.landing_version())).collect();
        let mut pointers = Vec::with_capacity(plan.pointers.len());
        for p in &plan.pointers {
            expected.insert(p.update.table_key.clone(), p.expected_version);
            pointers.push(p.update.clone());
        }
        let counts = (plan.nodes_affected, plan.edges_affected);
        let staged = match stage_forks(&at, plan.tables, &leases).await {
            Ok(s) => s,
            Err(e) => return Err(at.after_arm(e)),
        };
        let forked = staged.iter().any(|t| t.forked);
        let mut rows_written = BTreeMap::new();
        let mut landed = Vec::with_capacity(staged.len());
        for t in staged {
            let (table_key, table_branch) = (t.table_key.clone(), t.table_branch.clone());
            let (committed, rows) = match commit_chain(&at, t, &leases).await {
                Ok(c) => c,
                Err(e @ OmniError::ReadSetChanged { .. }) if landed.is_empty() && !forked => {
                    // The exact guard refused before anything landed.
                    Armed { at, token, plan: Default::default(), leases, sidecar, _live }.discard().await?;
                    return Err(e);
                }
                Err(e) => return Err(at.after_arm(OmniError::Internal(format!("committing {table_key}: {e}")))),
            };
            landed.push(TableUpdate::committed(&table_key, table_branch.as_deref(), &committed));
            rows_written.insert(table_key, rows);
            // Without the failpoints feature the closure is empty.
            #[allow(clippy::redundant_closure_call)]
            let fired: Result<()> = (|| {
                saga_failpoint!(at.kind, "after_table_commit");
                Ok(())
            })();
            fired.map_err(|e| at.after_arm(e))?;
        }
        let counts = Counts { nodes: counts.0, edges: counts.1, rows_written };
        let plan = Landing { expected, landing, pointers };
        Ok(Committed { at, token, plan, counts, landed, leases, sidecar, _live })
    }
}

/// Commit one table's chain through its table actor: the first transaction
/// (staged already), then each later step staged on the version the one
/// before landed, under its pre-minted identity. Each lands exactly at
/// `read_version + 1` with its identity, or the chain stops with an error.
/// Answers the last landing and the rows every step wrote into new files.
async fn commit_chain(at: &Attempt<'_>, t: ReadyTable, leases: &LeaseSet) -> Result<(CommittedTxn, u64)> {
    // The table's own ref: the write's branch, except a schema apply's new
    // table, created on its main ref whichever branch registers it.
    let branch = t.table_branch.as_deref().unwrap_or(MAIN);
    let lease = leases.require(&ChildKey::table(&t.uri, branch))?;
    let mut rows = t.txn.rows_written();
    let mut committed = commit_exact_on(at.rt, branch, &t.table_key, t.txn, lease).await?;
    for step in t.then {
        named_failpoint!("chain.between_steps");
        let ChainStep { plan, identity } = step;
        if identity.read_version != committed.version {
            return Err(OmniError::Internal(format!(
                "{}: chain step planned at v{} but the table is at v{}",
                t.table_key, identity.read_version, committed.version
            )));
        }
        let span = info_span!("saga.chain_step", operation_id = %at.operation_id(), table = %t.table_key);
        let staged = table::stage(committed.dataset.clone(), plan, &identity.uuid)
            .instrument(span)
            .await?
            .ok_or_else(|| OmniError::Internal(format!("{}: a planned chain step staged nothing", t.table_key)))?;
        rows += staged.rows_written();
        committed = commit_exact_on(at.rt, branch, &t.table_key, staged, lease).await?;
    }
    Ok((committed, rows))
}

/// Commit `txn` through the table actor of graph branch `branch` and assert
/// the exact-commit contract where it is relied on: the planned identity,
/// at `read_version + 1` (recovery's compensation lands the same way).
pub(super) async fn commit_exact_on(
    rt: &Runtime,
    branch: &str,
    table_key: &str,
    txn: StagedTxn,
    lease: &Lease,
) -> Result<CommittedTxn> {
    let planned = txn.identity();
    let committed = rt.commit(branch, txn, lease).await?;
    if committed.identity != planned || committed.version != planned.target_version() {
        return Err(OmniError::Internal(format!(
            "{table_key}: landed {:?} at v{}, planned {planned:?} at v{}",
            committed.identity,
            committed.version,
            planned.target_version()
        )));
    }
    Ok(committed)
}

/// With the sidecar armed: create every first-touch fork at its exact
/// inherited version, then stage its plan on the fork under the pre-minted
/// identity. Returns every table with its staged transaction, in order.
async fn stage_forks(at: &Attempt<'_>, tables: Vec<PreparedTable>, leases: &LeaseSet) -> Result<Vec<ReadyTable>> {
    let mut out = Vec::with_capacity(tables.len());
    for t in tables {
        let PreparedTable { table_key, uri, table_branch, effect, then, .. } = t;
        let (forked, txn) = match effect {
            TableEffect::Staged(txn) => (false, *txn),
            TableEffect::Fork { fork, plan, identity } => {
                let lease = leases.require(&ChildKey::table(&uri, at.branch))?;
                let span = info_span!("saga.fork", operation_id = %at.operation_id(), table = %table_key, from_version = fork.parent_version);
                let ds = at.rt.fork_table(&uri, at.branch, fork, lease).instrument(span).await?;
                saga_failpoint!(at.kind, "after_fork");
                let staged = table::stage(ds, plan, &identity.uuid).await?;
                let txn = staged.ok_or_else(|| {
                    OmniError::Internal(format!("{table_key}: the planned effect staged nothing on the fork"))
                })?;
                (true, txn)
            }
        };
        out.push(ReadyTable { table_key, uri, table_branch, forked, txn, then });
    }
    Ok(out)
}

/// What the publish must find and make visible: every pin it expects, where
/// each chain lands, and the pointer-only updates.
struct Landing {
    expected: BTreeMap<String, u64>,
    landing: BTreeMap<String, u64>,
    pointers: Vec<TableUpdate>,
}

/// Every table landed exactly; the sidecar still says Armed.
pub struct Committed<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    plan: Landing,
    counts: Counts,
    landed: Vec<TableUpdate>,
    leases: LeaseSet,
    sidecar: ArmedSidecar,
    _live: LiveOp,
}

impl<'a> Committed<'a> {
    /// Record each landed version in the sidecar: EffectsConfirmed. A schema
    /// apply first writes its target's schema files as staging files (read
    /// back and verified) and archives both schemas.
    pub async fn confirm(self) -> Result<Confirmed<'a>> {
        let Committed { at, token, plan, counts, landed, leases, sidecar, _live } = self;
        if let Some((from, target)) = &at.schema {
            stage_schema(&at, from, target).await.map_err(|e| at.after_arm(e))?;
        }
        let span = info_span!("saga.confirm", operation_id = %at.operation_id());
        let sidecar = match sidecar.confirm(&at.store, landed.clone()).instrument(span).await {
            Ok(s) => s,
            Err(e) => return Err(at.after_arm(e)),
        };
        // Without the failpoints feature the closure is empty.
        #[allow(clippy::redundant_closure_call)]
        let fired: Result<()> = (|| {
            saga_failpoint!(at.kind, "after_confirm");
            Ok(())
        })();
        fired.map_err(|e| at.after_arm(e))?;
        Ok(Confirmed { at, token, plan, counts, landed, leases, sidecar, _live })
    }
}

/// Archive a schema apply's schema before and after (a reader binds either
/// by identity: at an older commit, or on another branch); on main, stage
/// the target's schema files too.
async fn stage_schema(at: &Attempt<'_>, from: &SchemaState, target: &SchemaState) -> Result<()> {
    let span = info_span!("saga.stage_schema", operation_id = %at.operation_id(), identity = %target.identity);
    async {
        from.archive(at.rt.root()).await?;
        target.archive(at.rt.root()).await?;
        if at.branch == MAIN { target.stage(at.rt.root()).await } else { Ok(()) }
    }
    .instrument(span)
    .await?;
    saga_failpoint!(at.kind, "after_schema_staging");
    Ok(())
}

/// The sidecar is EffectsConfirmed: recovery would roll it forward.
pub struct Confirmed<'a> {
    at: Attempt<'a>,
    token: AuthorityToken,
    plan: Landing,
    counts: Counts,
    landed: Vec<TableUpdate>,
    leases: LeaseSet,
    sidecar: ConfirmedSidecar,
    _live: LiveOp,
}

impl<'a> Confirmed<'a> {
    /// Publish once through the branch actor: the landed pointers and the
    /// pre-minted commit, under the exact head the attempt captured.
    pub async fn publish(self) -> Result<Published<'a>> {
        let Confirmed { at, token, plan, counts, mut landed, leases, sidecar, _live } = self;
        check_expectations(&plan.landing, &landed).map_err(|e| at.after_arm(e))?;
        landed.extend(plan.pointers);
        let request = PublishRequest {
            branch: at.branch.to_string(),
            updates: landed.clone(),
            expected_versions: plan.expected,
            precondition: Precondition::ExactHead { branch_id: token.branch_id, head: token.graph_head },
            lineage: at.lineage.clone(),
        };
        let out = async {
            let lease = leases.require(&ChildKey::Branch(at.branch.to_string()))?;
            let published = at.rt.publish(request, lease).await?;
            saga_failpoint!(at.kind, "after_publish");
            Ok::<_, OmniError>(published.commit)
        }
        .await;
        let commit = out.map_err(|e| at.after_arm(e))?;
        let commits = at.lineage.commit_rows(at.branch, commit.parent, commit.manifest_version);
        Ok(Published { at, counts, landed, commits, leases, sidecar, _live })
    }
}

/// Every table with an effect landed, each exactly where its chain ends
/// (its pin + the chain's length).
fn check_expectations(landing: &BTreeMap<String, u64>, landed: &[TableUpdate]) -> Result<()> {
    let keys: Vec<&String> = landed.iter().map(|u| &u.table_key).collect();
    if keys.len() != landing.len() || !keys.iter().all(|k| landing.contains_key(*k)) {
        return Err(OmniError::Internal(format!("planned landings {landing:?} do not cover the landed {keys:?}")));
    }
    for u in landed {
        if Some(&u.version) != landing.get(&u.table_key) {
            return Err(OmniError::Internal(format!(
                "{} landed at v{} but its chain ends at v{:?}",
                u.table_key,
                u.version,
                landing.get(&u.table_key)
            )));
        }
    }
    Ok(())
}

/// The commit is visible; the sidecar is left to delete.
pub struct Published<'a> {
    at: Attempt<'a>,
    counts: Counts,
    landed: Vec<TableUpdate>,
    commits: Vec<CommitRow>,
    leases: LeaseSet,
    sidecar: ConfirmedSidecar,
    _live: LiveOp,
}

impl Published<'_> {
    /// A schema apply makes its staged schema current and swaps the schema
    /// actor's catalog (a failure leaves the sidecar: recovery promotes).
    /// Then the sidecar is deleted (a failed delete is not a failed write:
    /// the next heal settles it) and the leases released.
    pub async fn finish(self) -> Result<Finished> {
        self.finish_holding().await.map(|(done, _leases)| done)
    }

    /// [`Self::finish`], handing the attempt's leases back instead of
    /// releasing them: for a writer whose work goes on under the same gates
    /// after the publish (optimize's `__manifest` compaction).
    pub async fn finish_holding(self) -> Result<(Finished, LeaseSet)> {
        let Published { at, counts, landed, commits, leases, sidecar, _live } = self;
        if let Some((_, target)) = at.schema.as_ref().filter(|_| at.branch == MAIN) {
            let span = info_span!("saga.promote", operation_id = %at.operation_id());
            async {
                SchemaState::promote(at.rt.root(), &target.identity).await?;
                saga_failpoint!(at.kind, "after_promote");
                at.rt.reload_schema(leases.require(&ChildKey::Schema)?).await
            }
            .instrument(span)
            .await
            .map_err(|e| at.after_arm(e))?;
        }
        let span = info_span!("saga.finish", operation_id = %at.operation_id());
        sidecar.finish(&at.store).instrument(span).await;
        at.rt.written(at.branch, &counts.rows_written);
        let done = Finished {
            commit_id: at.lineage.commit_id,
            commits,
            nodes_affected: counts.nodes,
            edges_affected: counts.edges,
            tables: landed,
            rows_written: counts.rows_written,
        };
        Ok((done, leases))
    }
}

/// A finished write: its commit and what it changed.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The commit published.
    pub commit_id: String,
    /// The commit rows published: the attempt's, then a group's members'.
    pub commits: Vec<CommitRow>,
    /// Node entities affected.
    pub nodes_affected: u64,
    /// Edge entities affected.
    pub edges_affected: u64,
    /// New table pointers.
    pub tables: Vec<TableUpdate>,
    /// Rows written into new data files, per table key.
    pub rows_written: BTreeMap<String, u64>,
}

/// What a write changed, carried from the commit to [`Finished`].
struct Counts {
    nodes: u64,
    edges: u64,
    rows_written: BTreeMap<String, u64>,
}
