//! The schema-apply writer: evolve one branch's schema as one graph commit
//! on that branch.
//!
//! ```text
//! compile the target → heal the branch → schema gate (exclusive; shared
//!   for a plan) → plan against the branch's schema (refuse unsupported
//!   steps; new table ids clear of every branch's) → the branch's gate →
//!   every live and new table's gate, sorted → validate tightened rules
//!   over every row → stage each table's effect (a table the branch has not
//!   written yet is forked after arming) → the pipeline: revalidate → arm
//!   (schema-7 sidecar) → commit each table exactly → archive both schemas
//!   (main: stage the schema files too) → confirm → publish (exact head,
//!   registry delta) → main: promote the schema files and swap the schema
//!   actor's catalog → finish
//! ```
//!
//! Each branch has its own schema (see [`crate::actors::schema`]): an apply
//! on a branch changes that branch alone, and other branches keep theirs,
//! main's included. A hard drop deletes a dropped table's files only when
//! no other branch exists (another could still read them); otherwise they
//! stay for `cleanup`.

use std::sync::Arc;

use serde::Serialize;
use tracing::{Instrument, info, info_span, warn};

use super::gates::Gates;
use super::pipeline::{self, Attempt};
use super::recovery::resolve::Mode;
use super::recovery::sweep::{Scope, sweep};
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::engine::branch_name::MAIN;
use crate::engine::lang::catalog::evolve::{self, EvolvePlan, Step};
use crate::engine::layout;
use crate::engine::manifest::{self, Lineage, ManifestView};
use crate::engine::schema_effects;
use crate::engine::schema_store::SchemaState;
use crate::engine::storage::table;
use crate::engine::write_plan::{self, AuthorityToken};
use crate::protocol::{OmniError, Result};

/// What to apply.
#[derive(Debug, Clone)]
pub struct SchemaApplyRequest {
    /// The branch whose schema changes.
    pub branch: String,
    /// The target `.pg` source.
    pub source: String,
    /// Drop properties and types hard (their data goes with the apply).
    pub allow_data_loss: bool,
    /// Actor recorded on the commit.
    pub actor: Option<String>,
    /// Plan only: no gate held exclusively, no sidecar, no commit.
    pub dry_run: bool,
}

/// What an apply did (or a plan would do). Field names follow the HTTP API.
#[derive(Debug, Clone, Serialize)]
pub struct SchemaApplyReport {
    /// The branch applied on.
    pub branch: String,
    /// Whether a commit made the target schema current.
    pub applied: bool,
    /// Whether every step is supported.
    pub supported: bool,
    /// `steps.len()`.
    pub step_count: usize,
    /// Every difference between the accepted and the target schema.
    pub steps: Vec<Step>,
    /// Main's `__manifest` version after the apply (`None` if nothing applied).
    pub manifest_version: Option<u64>,
    /// The same, under the reference implementation's name.
    pub graph_manifest_version: Option<u64>,
    /// The apply's commit (`None` if nothing applied).
    pub graph_commit_id: Option<String>,
    /// Identity of the accepted schema before.
    pub previous_schema_identity: String,
    /// Identity of the target schema.
    pub schema_identity: String,
}

/// Plan (`req.dry_run`) or apply `req.source` as `req.branch`'s schema.
pub async fn run(rt: &Runtime, req: &SchemaApplyRequest) -> Result<SchemaApplyReport> {
    let lineage = Lineage::mint(req.actor.clone());
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "schema_apply", branch = %req.branch, dry_run = req.dry_run);
    attempt(rt, req, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &SchemaApplyRequest, mut lineage: Lineage) -> Result<SchemaApplyReport> {
    let compiled = SchemaState::compile(&req.source)?;
    let branch = req.branch.as_str();
    if !req.dry_run {
        let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(branch)).await?;
        if let Some(blocked) = healed.iter().find_map(|(_, r)| r.blocks(branch)) {
            return Err(blocked);
        }
    }
    let mode = if req.dry_run { LeaseMode::Shared } else { LeaseMode::Exclusive };
    let schema_lease = rt.lease_schema(mode).await?;
    let accepted = rt.schema_of(&rt.view(branch).await?).await?;
    // Every branch but main on storage, deleted ones included: listed once,
    // under the schema gate that branch create and delete wait on.
    let others: Vec<String> = table::branch_names(&manifest::uri(rt.root())).await?.into_iter().collect();
    let reserved = reserved_ids(rt, &others).await?;
    let plan = evolve::plan_reserving(&accepted.catalog, compiled.catalog, req.allow_data_loss, &reserved);
    let mut report = report_of(branch, &plan, &accepted.identity);
    if req.dry_run || report.schema_identity == accepted.identity {
        return Ok(report);
    }
    if let Some(step) = plan.unsupported().first() {
        let why = step.reason.clone().unwrap_or_default();
        return Err(OmniError::BadRequest(format!(
            "unsupported schema change: {} ({why}); nothing was applied",
            step.detail
        )));
    }
    let mut leases = LeaseSet::default();
    leases.push(schema_lease)?;
    Gates::none().branch(branch).take(rt, &mut leases).await?;
    let view = rt.view(branch).await?;
    table_gates(rt, &view, &plan).take(rt, &mut leases).await?;
    let span = info_span!("saga.prepare", operation_id = %lineage.commit_id);
    let effects = async {
        schema_effects::validate(rt.root(), &view, &plan).await?;
        schema_effects::prepare(rt.root(), &view, &accepted.identity, &plan).await
    }
    .instrument(span)
    .await?;
    lineage.schema = Some(effects.commit);
    let target = Arc::new(SchemaState::from_parts(req.source.clone(), plan.target));
    let token = AuthorityToken::of(&view, &accepted.identity);
    let at = Attempt::schema_apply(rt, branch, lineage, (accepted, target));
    let prepared = pipeline::Prepared::new(at, token, write_plan::pins(&view), effects.prepared, leases)?;
    let armed = prepared.lease().await?.revalidate().await?.arm(req.actor.clone()).await?;
    let done = armed.commit().await?.confirm().await?.publish().await?.finish().await?;
    drop_files(rt, branch == MAIN && others.is_empty(), &effects.hard_drops).await;
    let version = rt.view(branch).await?.state.commit(&done.commit_id).map(|c| c.manifest_version);
    report.applied = true;
    report.manifest_version = version;
    report.graph_manifest_version = version;
    report.graph_commit_id = Some(done.commit_id);
    Ok(report)
}

/// Delete hard-dropped tables' files, once the apply is visible, when the
/// apply is main's and main is `alone` (no other branch, deleted ones
/// included: a restore would read them). Otherwise, or on a failure, they
/// stay for `cleanup`.
async fn drop_files(rt: &Runtime, alone: bool, locations: &[String]) {
    if locations.is_empty() {
        return;
    }
    if !alone {
        info!(tables = locations.len(), "applied; other branches may read the hard-dropped tables' files, which stay");
        return;
    }
    for location in locations {
        if let Err(e) = rt.root().delete_prefix(location).await {
            warn!(%location, error = %e, "applied, but a hard-dropped table's files remain (cleanup removes them)");
        }
    }
}

/// Table ids no new type may take: every id main or one of `others`
/// registers (deleted branches included), since a new type's dataset path derives from its id
/// and two branches adding a type each must not share one.
pub(super) async fn reserved_ids(rt: &Runtime, others: &[String]) -> Result<Vec<String>> {
    let mut ids: std::collections::BTreeSet<String> =
        rt.view(MAIN).await?.state.registrations.keys().cloned().collect();
    for name in others {
        ids.extend(rt.peek(name, false).await?.state.registrations.keys().cloned());
    }
    Ok(ids.into_iter().collect())
}

fn report_of(branch: &str, plan: &EvolvePlan, accepted: &str) -> SchemaApplyReport {
    SchemaApplyReport {
        branch: branch.to_string(),
        applied: false,
        supported: plan.supported(),
        step_count: plan.steps.len(),
        steps: plan.steps.clone(),
        manifest_version: None,
        graph_manifest_version: None,
        graph_commit_id: None,
        previous_schema_identity: accepted.to_string(),
        schema_identity: plan.target.identity(),
    }
}

/// Every live table's gate and every new table's (the pipeline then finds
/// them all held). A new table is created on its main ref, whichever
/// branch registers it, so its gate is main's.
fn table_gates(rt: &Runtime, view: &ManifestView, plan: &EvolvePlan) -> Gates {
    let created = created_tables(rt, plan);
    Gates::none().catalog(rt, view, &view.branch).tables(created.iter().map(String::as_str), MAIN)
}

/// The dataset URIs of the tables `plan` creates.
pub(super) fn created_tables(rt: &Runtime, plan: &EvolvePlan) -> Vec<String> {
    plan.tables
        .iter()
        .filter(|t| t.old_key.is_none())
        .map(|tc| rt.root().child_uri(&layout::location(tc.kind, &tc.table_id)))
        .collect()
}
