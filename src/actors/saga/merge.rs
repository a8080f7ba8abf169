//! The branch-merge writer: merge the captured head of `source` into
//! `target` as one commit on the target whose second parent is that head.
//!
//! ```text
//! heal target → schema (shared) → branch gates {source, target} sorted
//!   → capture both heads → merge base and outcome → per-table delta and
//!   validation (no table gate) → effects as plans → the pipeline:
//!   table gates → revalidate → arm (schema-4 sidecar) → commit each chain
//!   → confirm → publish (exact target head) → finish
//! ```
//!
//! Conflicts are reported all together before anything is written. A dry
//! run stops after planning. A squash merge is the same commit without its
//! second parent. Holding both branch gates from the capture on
//! means neither head can move under the merge, and the source cannot be
//! deleted while its pins are read.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Serialize;
use tracing::{Instrument, info_span, warn};

use super::gates::Gates;
use super::pipeline::{self, Attempt};
use super::recovery::resolve::Mode;
use super::recovery::sweep::{Scope, sweep};
use crate::actors::lease::LeaseMode;
use crate::actors::runtime::Runtime;
use crate::engine::branch_name::MAIN;
use crate::engine::conflict_page::{self, ConflictPage};
use crate::engine::conflict_values;
use crate::engine::lang::catalog::Catalog;
use crate::engine::lang::catalog::evolve::{self, EvolvePlan, Step};
use crate::engine::manifest::{self, Lineage, ManifestState, ManifestView};
use crate::engine::merge::{self, Outcome, TableReport};
use crate::engine::resolution::{Resolution, Resolved};
use crate::engine::schema_effects;
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::table;
use crate::engine::three_way::MergeStrategy;
use crate::engine::write_plan::{self, AuthorityToken};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::{MergeDecision, WriterKind};
use sha2::Digest;

/// What to merge.
#[derive(Debug, Clone)]
pub struct MergeRequest {
    /// The branch whose head is merged.
    pub source: String,
    /// The branch that receives the merge commit.
    pub target: String,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
    /// Plan and report only: no sidecar, no commit.
    pub dry_run: bool,
    /// Record no merged parent: one single-parent commit on the target
    /// with the source's net changes (the source is untouched).
    pub squash: bool,
    /// Memory one table's row fingerprints may hold before they spill to
    /// disk partitions (`None`: [`merge::spill::DEFAULT_BUDGET`]).
    pub memory_bytes: Option<u64>,
    /// Which page of the conflicts a refusal lists.
    pub page: ConflictPage,
    /// How row conflicts are decided; `None`: by the schema's `@merge`
    /// policies, refused where there is none.
    pub strategy: Option<MergeStrategy>,
    /// The user's decisions for named row conflicts (over the strategy).
    pub resolutions: Vec<Resolution>,
}

/// What a merge did (or, for a dry run, would do).
#[derive(Debug, Clone, Serialize)]
pub struct MergeReport {
    /// `already_up_to_date`, `fast_forward` or `merged`.
    pub outcome: Outcome,
    /// The merge commit (`None` when up to date or a dry run).
    pub graph_commit_id: Option<String>,
    /// The source branch.
    pub source: String,
    /// The target branch.
    pub target: String,
    /// The source head merged.
    pub source_commit_id: String,
    /// The merge base.
    pub base_commit_id: String,
    /// Per changed table: what the merge writes.
    pub tables: Vec<TableReport>,
    /// Whether nothing was written because this was a dry run.
    pub dry_run: bool,
    /// Whether the commit records no merged parent (a squash merge).
    pub squash: bool,
    /// The strategy given (`None`: the schema's policies decided).
    pub strategy: Option<MergeStrategy>,
    /// Row conflicts decided by the strategy or a resolution (their rows
    /// are part of `tables`).
    pub conflicts_decided: usize,
    /// What each resolution did, in the order given.
    pub resolutions: Vec<Resolved>,
    /// A merge across a schema change: the steps of the target's schema
    /// apply to the merged schema (none when its schema stays).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema_steps: Vec<Step>,
    /// The target's schema identity after the merge, when it changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_identity: Option<String>,
}

/// Merge `req.source` into `req.target`.
pub async fn run(rt: &Runtime, req: &MergeRequest) -> Result<MergeReport> {
    if req.source == req.target {
        return Err(OmniError::BadRequest(format!("cannot merge branch `{}` into itself", req.source)));
    }
    req.page.check()?;
    for r in &req.resolutions {
        r.check().map_err(OmniError::BadRequest)?;
    }
    let lineage = Lineage::mint(req.actor.clone());
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "merge", source = %req.source, target = %req.target);
    attempt(rt, req, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &MergeRequest, lineage: Lineage) -> Result<MergeReport> {
    heal_target(rt, req).await?;
    // Schema, then both branch gates, held from capture to publish. The
    // schema gate is exclusive when the sides' schemas differ: the merge
    // may then change the target's.
    let exclusive = !req.dry_run && schema_identity(rt, &req.source).await? != schema_identity(rt, &req.target).await?;
    let mode = if exclusive { LeaseMode::Exclusive } else { LeaseMode::Shared };
    let leases = Gates::schema(mode).branch(&req.source).branch(&req.target).acquire(rt).await?;
    let (source, target) = (rt.history_view(&req.source).await?, rt.history_view(&req.target).await?);
    let head_of = |v: &ManifestView, b: &str| {
        v.state
            .effective_head(b)
            .map(|c| (c.commit_id.clone(), c.created_at_us))
            .ok_or_else(|| OmniError::Internal(format!("branch `{b}` has no commit")))
    };
    let ((source_head, source_at), (target_head, target_at)) =
        (head_of(&source, &req.source)?, head_of(&target, &req.target)?);
    let commits = manifest::merge_base::joint_dag(&source.state, &target.state)?;
    let (base_id, outcome) = merge::outcome(&commits, &source_head, &target_head)?;
    let report = MergeReport::new(req, outcome, &source_head, &base_id);
    if outcome == Outcome::AlreadyUpToDate {
        return Ok(report);
    }
    let base = base_state(rt, &commits, &base_id, &target_head, &target).await?;
    let source_state = source.state.clone();
    let sides = Sides {
        base,
        source: source_state,
        source_branch: Some(&source),
        target: &target,
        heads: (source_head, target_head),
        source_is_newer: source_at > target_at,
        schema_exclusive: exclusive,
    };
    land(rt, req, sides, leases, lineage, report).await
}

/// The identity of `branch`'s schema at its head.
async fn schema_identity(rt: &Runtime, branch: &str) -> Result<String> {
    Ok(rt.schema_of(&rt.view(branch).await?).await?.identity.clone())
}

/// Before a write on the target: roll its branch's pending writes forward
/// (a dry run writes nothing, so it heals nothing).
pub(super) async fn heal_target(rt: &Runtime, req: &MergeRequest) -> Result<()> {
    if req.dry_run {
        return Ok(());
    }
    let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(&req.target)).await?;
    match healed.iter().find_map(|(_, r)| r.blocks(&req.target)) {
        Some(blocked) => Err(blocked),
        None => Ok(()),
    }
}

impl MergeReport {
    /// The report of `req` before planning: its outcome, the source commit
    /// merged and the base.
    pub(super) fn new(req: &MergeRequest, outcome: Outcome, source_commit: &str, base: &str) -> MergeReport {
        MergeReport {
            outcome,
            graph_commit_id: None,
            source: req.source.clone(),
            target: req.target.clone(),
            source_commit_id: source_commit.to_string(),
            base_commit_id: base.to_string(),
            tables: vec![],
            dry_run: req.dry_run,
            squash: req.squash,
            strategy: req.strategy,
            conflicts_decided: 0,
            resolutions: vec![],
            schema_steps: vec![],
            schema_identity: None,
        }
    }
}

/// The three states a merge reads, captured under its gates: the base, the
/// source and the target (its branch's view); a source that is a branch
/// (its table gates are taken while the effects land); the two commits a
/// page token binds (source, target); which side was authored later; how
/// the schema gate is held.
pub(super) struct Sides<'a> {
    pub base: Arc<ManifestState>,
    pub source: Arc<ManifestState>,
    pub source_branch: Option<&'a ManifestView>,
    pub target: &'a ManifestView,
    pub heads: (String, String),
    pub source_is_newer: bool,
    /// Whether the merge holds the schema gate exclusively (it may change
    /// the target's schema: a branch merge across a schema change).
    pub schema_exclusive: bool,
}

/// The schemas a merge runs under.
enum Binding {
    /// Base, source and target share one schema.
    Same(Arc<SchemaState>),
    /// A branch merge across a schema change.
    Across(Box<Across>),
}

/// A branch merge across a schema change: each side's schema, the merged
/// one the target takes, and the target's plan to it.
struct Across {
    base: Arc<SchemaState>,
    source: Arc<SchemaState>,
    target: Arc<SchemaState>,
    /// The target's schema after the merge (the target's own when the
    /// merged schema differs from it in declaration order at most).
    merged: Arc<SchemaState>,
    /// The target's schema apply to `merged` (no steps: none).
    plan: EvolvePlan,
}

/// The schemas of a merge's sides. A branch merge whose sides changed the
/// schema merges them three ways ([`merged_schema`]: every schema conflict
/// refused at once). A revert or cherry-pick across a schema change is
/// refused.
async fn bind_schemas(rt: &Runtime, req: &MergeRequest, sides: &Sides<'_>, base_id: &str) -> Result<Binding> {
    let target = rt.schema_of(sides.target).await?;
    // Each commit bound from a state holding its history: a merge's base is
    // in the target's; a revert's or cherry-pick's commits may be in the
    // source's or the base's alone.
    let states = [&*sides.target.state, &*sides.source, &*sides.base];
    let holder = |commit: &str| states.into_iter().find(|s| s.commit(commit).is_some()).unwrap_or(&sides.target.state);
    let source = rt.schema_at(holder(&sides.heads.0), Some(&sides.heads.0)).await?;
    let base = rt.schema_at(holder(base_id), Some(base_id)).await?;
    if source.identity == target.identity && base.identity == target.identity {
        return Ok(Binding::Same(target));
    }
    // Only a branch merge has a source branch.
    if sides.source_branch.is_none() {
        let side = if source.identity != target.identity { "the commit" } else { "its parent" };
        return Err(OmniError::BranchConflict {
            branch: req.target.clone(),
            reason: format!(
                "{side} was written under another schema than `{}` ({}): a revert or cherry-pick across a \
                 schema change is not supported; apply the same schema first",
                req.target, target.identity
            ),
        });
    }
    let compiled = merged_schema(&req.target, (&base, &target, &source))?;
    let others: Vec<String> = table::branch_names(&manifest::uri(rt.root())).await?.into_iter().collect();
    let reserved = super::schema_apply::reserved_ids(rt, &others).await?;
    let plan = evolve::plan_reserving(&target.catalog, compiled.catalog, false, &reserved);
    if let Some(step) = plan.unsupported().first() {
        return Err(OmniError::BranchConflict {
            branch: req.target.clone(),
            reason: format!(
                "the merged schema needs a change a schema apply cannot make: {} ({})",
                step.detail,
                step.reason.clone().unwrap_or_default()
            ),
        });
    }
    if !plan.is_noop() && !sides.schema_exclusive && !req.dry_run {
        return Err(OmniError::BranchConflict {
            branch: req.target.clone(),
            reason: "a schema apply landed on one side while the merge started; retry the merge".into(),
        });
    }
    let merged = if plan.is_noop() {
        target.clone()
    } else {
        Arc::new(SchemaState::from_parts(compiled.source, plan.target.clone()))
    };
    Ok(Binding::Across(Box::new(Across { base, source, target, merged, plan })))
}

/// The three-way merge of a merge's schemas (`base`, ours = the target's,
/// theirs = the source's), compiled, or a [`OmniError::SchemaConflict`]
/// naming every item both sides changed differently (or, when the merged
/// text does not compile, why).
fn merged_schema(
    target: &str,
    (base, ours, theirs): (&SchemaState, &SchemaState, &SchemaState),
) -> Result<SchemaState> {
    use crate::engine::lang::schema::{merge::SchemaConflict, parse_schema, render};
    let parse = |s: &SchemaState| {
        parse_schema(&s.source)
            .map_err(|d| OmniError::Internal(format!("accepted schema {} parses: {d:?}", s.identity)))
    };
    let refuse = |conflicts| OmniError::SchemaConflict { target: target.to_string(), conflicts };
    let merged =
        crate::engine::lang::schema::merge::merge(&parse(base)?, &parse(ours)?, &parse(theirs)?).map_err(refuse)?;
    let text = render::schema(&merged);
    match crate::engine::lang::catalog::compile_schema(&text) {
        Ok(catalog) => Ok(SchemaState::from_parts(text, catalog)),
        Err(d) => Err(refuse(vec![SchemaConflict {
            type_name: String::new(),
            property: None,
            reason: format!("the merged schema does not compile ({}:{}): {}", d.pos.line, d.pos.column, d.message),
            base: None,
            ours: None,
            theirs: None,
        }])),
    }
}

/// Plan, decide and validate the three-way merge of `sides` into
/// `req.target`, then (unless a dry run or refused) land it as one commit
/// through the pipeline: a squash (`req.squash`) records no merged parent.
/// A merge across a schema change plans in the merged schema and lands the
/// target's schema apply and the rows together.
pub(super) async fn land(
    rt: &Runtime,
    req: &MergeRequest,
    sides: Sides<'_>,
    mut leases: crate::actors::lease::LeaseSet,
    mut lineage: Lineage,
    mut report: MergeReport,
) -> Result<MergeReport> {
    let binding = bind_schemas(rt, req, &sides, &report.base_commit_id).await?;
    let (schema, across) = match &binding {
        Binding::Same(s) => (s.clone(), None),
        Binding::Across(a) => (a.merged.clone(), Some(&**a)),
    };
    let (base, target) = (&sides.base, sides.target);
    let target_ref = Some(req.target.clone()).filter(|b| b != "main");
    let plan_span = info_span!("saga.prepare", operation_id = %lineage.commit_id);
    let budget = req.memory_bytes.unwrap_or(merge::spill::DEFAULT_BUDGET);
    let states = (&*sides.source, &*target.state);
    let mut merges = match across {
        None => {
            merge::plan_tables(rt.root(), &schema.catalog, base, states, target_ref.as_deref(), budget)
                .instrument(plan_span)
                .await?
        }
        Some(a) => {
            merge::across::plan_tables(rt.root(), a.catalogs(), across_states(base, states), budget)
                .instrument(plan_span)
                .await?
        }
    };
    let strategy = req.strategy.map_or("policies", MergeStrategy::as_str);
    let span = info_span!("merge.strategy", operation_id = %lineage.commit_id, strategy);
    let how = Deciding { catalog: &schema.catalog, source_is_newer: sides.source_is_newer };
    let decided = decide(rt, base, &mut merges, req, how).instrument(span).await?;
    (report.conflicts_decided, report.resolutions) = decided;
    let mut conflicts: Vec<_> = merges.iter().flat_map(|m| m.delta.conflicts.iter().cloned()).collect();
    let span = info_span!("merge.validate", operation_id = %lineage.commit_id);
    let checked = merge::validate::merged_result(rt.root(), &schema.catalog, &target.state, &merges);
    conflicts.extend(checked.instrument(span).await?);
    if !conflicts.is_empty() {
        let shaped = merges.iter().filter_map(|m| Some((m.table_key.as_str(), m.shapes.as_deref()?))).collect();
        let all = conflict_values::Sides { base, source: states.0, target: states.1, shaped };
        let heads = (sides.heads.0.as_str(), sides.heads.1.as_str());
        return Err(conflict_page::refusal(rt.root(), &all, heads, &req.page, conflicts).await?);
    }
    report.tables = merges.iter().map(merge::TableMerge::report).collect();
    if let Some(a) = across.filter(|a| !a.plan.is_noop()) {
        report.schema_steps = a.plan.steps.clone();
        report.schema_identity = Some(a.merged.identity.clone());
    }
    if req.dry_run {
        return Ok(report);
    }
    // The all-catalog envelope: every table gate of both branches (and of
    // the tables a schema change creates), so no table actor of either
    // serves another lease while the merge's effects land.
    let gates = match sides.source_branch {
        Some(source) => Gates::none().catalog(rt, source, &req.source),
        None => Gates::none(),
    };
    let created = across.map(|a| super::schema_apply::created_tables(rt, &a.plan)).unwrap_or_default();
    let gates = gates.catalog(rt, target, &req.target).tables(created.iter().map(String::as_str), MAIN);
    gates.take(rt, &mut leases).await?;
    // A squash leaves the source's history out of the target's: the next
    // merge of the same source finds the older base again.
    lineage.merged_parent = (!req.squash).then(|| sides.heads.0.clone());
    let (plan, at) = match across {
        None => {
            let plan = merge::prepare(rt.root(), merges, target_ref).await?;
            (plan, Attempt::new(rt, WriterKind::Merge, &req.target, lineage))
        }
        Some(a) => a.effects(rt, req, target, merges, lineage).await?,
    };
    let at = at.with_decision(decision(req, &report)?);
    let from = across.map_or(&schema.identity, |a| &a.target.identity);
    let token = AuthorityToken::of(target, from);
    let pins = write_plan::pins(target);
    let prepared = pipeline::Prepared::new(at, token, pins, plan, leases)?;
    let armed = prepared.lease().await?.revalidate().await?.arm(req.actor.clone()).await?;
    let done = armed.commit().await?.confirm().await?.publish().await?.finish().await?;
    report.graph_commit_id = Some(done.commit_id);
    Ok(report)
}

/// The three states a merge across schemas plans over.
fn across_states<'s>(
    base: &'s ManifestState,
    (source, target): (&'s ManifestState, &'s ManifestState),
) -> merge::across::States<'s> {
    merge::across::States { base, source, target }
}

impl Across {
    fn catalogs(&self) -> merge::across::Catalogs<'_> {
        merge::across::Catalogs {
            base: &self.base.catalog,
            source: &self.source.catalog,
            target: &self.target.catalog,
            merged: &self.merged.catalog,
        }
    }

    /// The merge's effects on top of the target's schema apply (validated
    /// against the target's rows first), and the attempt that lands both
    /// under the schema-apply authority; with no schema change, a plain
    /// merge's.
    async fn effects<'r>(
        &self,
        rt: &'r Runtime,
        req: &'r MergeRequest,
        target: &ManifestView,
        merges: Vec<merge::TableMerge>,
        mut lineage: Lineage,
    ) -> Result<(write_plan::Prepared, Attempt<'r>)> {
        let target_ref = Some(req.target.clone()).filter(|b| b != MAIN);
        if self.plan.is_noop() {
            let plan = merge::prepare_onto(rt.root(), merges, target_ref, write_plan::Prepared::default()).await?;
            return Ok((plan, Attempt::new(rt, WriterKind::Merge, &req.target, lineage)));
        }
        schema_effects::validate(rt.root(), target, &self.plan).await?;
        let effects = schema_effects::prepare(rt.root(), target, &self.target.identity, &self.plan).await?;
        lineage.schema = Some(effects.commit);
        let plan = merge::prepare_onto(rt.root(), merges, target_ref, effects.prepared).await?;
        let schemas = (self.target.clone(), self.merged.clone());
        Ok((plan, Attempt::schema_apply(rt, &req.target, lineage, schemas)))
    }
}

/// The sidecar's record of how the merge decided its row conflicts (none
/// when nothing was decided and no strategy or resolution was given).
fn decision(req: &MergeRequest, report: &MergeReport) -> Result<Option<MergeDecision>> {
    if report.conflicts_decided == 0 && req.strategy.is_none() && req.resolutions.is_empty() {
        return Ok(None);
    }
    let json = serde_json::to_vec(&req.resolutions)
        .map_err(|e| OmniError::Internal(format!("encoding the resolutions: {e}")))?;
    let digest = sha2::Sha256::digest(&json).iter().map(|b| format!("{b:02x}")).collect();
    Ok(Some(MergeDecision {
        strategy: req.strategy,
        decided: report.conflicts_decided,
        resolutions: req.resolutions.len(),
        resolutions_digest: digest,
    }))
}

/// What decides conflicts beside the request: the schema's `@merge`
/// policies, and which head is newer (for `newest`).
struct Deciding<'a> {
    catalog: &'a Catalog,
    source_is_newer: bool,
}

/// Decide every table's row conflicts by `req`'s resolutions and strategy:
/// how many were decided, and what each resolution did. A resolution that
/// names no conflict of this merge, or (under strategy `fail`) a row
/// conflict the resolutions leave open, is a 400 naming it.
async fn decide(
    rt: &Runtime,
    base: &ManifestState,
    merges: &mut Vec<merge::TableMerge>,
    req: &MergeRequest,
    how: Deciding<'_>,
) -> Result<(usize, Vec<Resolved>)> {
    let (mut decided, mut outcomes) = (0, vec![None; req.resolutions.len()]);
    for m in merges.iter_mut() {
        let type_name = m.table_key.split_once(':').map_or(m.table_key.as_str(), |(_, n)| n).to_string();
        let mine: Vec<(usize, &Resolution)> =
            req.resolutions.iter().enumerate().filter(|(_, r)| r.type_name == type_name).collect();
        let def = how.catalog.type_def(&type_name);
        // The given strategy overrides the schema's policies for this merge.
        let strategy = |property: Option<&str>| match req.strategy {
            Some(s) => s,
            None => def
                .and_then(|d| d.merge_policy(property))
                .map_or(MergeStrategy::Fail, |p| p.strategy(how.source_is_newer)),
        };
        let policies =
            def.is_some_and(|d| d.meta().merge.is_some() || d.properties().iter().any(|p| p.meta.merge.is_some()));
        let may_decide = !mine.is_empty() || req.strategy.map_or(policies, |s| s != MergeStrategy::Fail);
        let entry = base.tables.get(&m.table_key);
        let d = merge::strategy::decide_table(rt.root(), entry, m, (&strategy, may_decide), &mine).await?;
        decided += d.count;
        for (i, outcome) in d.resolved {
            outcomes[i] = Some(outcome);
        }
    }
    let mut resolved = Vec::with_capacity(outcomes.len());
    for (r, outcome) in req.resolutions.iter().zip(outcomes) {
        let Some(outcome) = outcome else {
            return Err(OmniError::BadRequest(format!("resolution for {r} names no conflict of this merge")));
        };
        resolved.push(Resolved { resolution: r.clone(), outcome: outcome.to_string() });
    }
    if !req.resolutions.is_empty() && req.strategy.is_none_or(|s| s == MergeStrategy::Fail) {
        let open = merges.iter().flat_map(|m| &m.delta.conflicts).next();
        if let Some(c) = open {
            return Err(OmniError::BadRequest(format!(
                "the resolutions leave {} `{}` ({}) unresolved: resolve it too, or give a strategy",
                c.type_name,
                c.entity_id.as_deref().unwrap_or_default(),
                c.kind.as_str()
            )));
        }
    }
    // A table whose every conflict kept the target's side changes nothing.
    merges.retain(|m| !m.delta.is_empty() || !m.delta.conflicts.is_empty());
    Ok((decided, resolved))
}

/// The tables visible at the merge base: the target's own state when the
/// base is the target head, else the manifest of the base commit's branch at
/// the base commit's version.
async fn base_state(
    rt: &Runtime,
    commits: &HashMap<String, manifest::CommitRow>,
    base_id: &str,
    target_head: &str,
    target: &ManifestView,
) -> Result<Arc<ManifestState>> {
    if base_id == target_head {
        return Ok(target.state.clone());
    }
    let base = commits.get(base_id).ok_or_else(|| OmniError::Internal(format!("merge base {base_id} vanished")))?;
    match manifest::load(rt.root(), &base.branch, Some(base.manifest_version)).await {
        Ok(view) => Ok(view.state),
        Err(OmniError::NotFound(_)) => Err(OmniError::BadRequest(format!(
            "the merge base {base_id} was committed on branch `{}`, which no longer exists (or its version was \
             cleaned up); merge through a branch that still holds it",
            base.branch
        ))),
        Err(e) => Err(e),
    }
}

/// Delete `source` after a merge: a failure does not fail the merge.
pub async fn delete_merged_source(rt: &Runtime, source: &str, actor: Option<String>) -> (bool, Option<String>) {
    let opts = super::branch_control::DeleteOptions { purge: false, actor };
    match super::branch_control::delete(rt, source, &opts).await {
        Ok(_) => (true, None),
        Err(e) => {
            warn!(branch = source, error = %e, "merged, but could not delete the source branch");
            (false, Some(e.to_string()))
        }
    }
}
