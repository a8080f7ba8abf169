//! The schema-apply writer: evolve main's schema as one graph commit.
//!
//! ```text
//! compile the target → heal main → schema gate (exclusive; shared for a
//!   plan) → plan against the accepted catalog (refuse unsupported steps)
//!   → refuse while any other branch exists → main's gate → every live
//!   and new table's gate, sorted → validate tightened rules over every row
//!   → stage each table's effect → the pipeline: revalidate → arm (schema-7
//!   sidecar) → commit each table exactly → stage + verify the schema files
//!   → confirm → publish (exact main head, registry delta) → promote the
//!   schema files → swap the schema actor's catalog → finish
//! ```
//!
//! Branches: a named branch's manifest registers the tables under the
//! catalog it was written with, so an apply while one exists could leave it
//! unreadable or unmergeable. The apply refuses then, naming the branches
//! to merge or delete first.

use std::sync::Arc;

use serde::Serialize;
use tracing::{Instrument, info_span, warn};

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

/// Plan (`req.dry_run`) or apply `req.source` as main's schema.
pub async fn run(rt: &Runtime, req: &SchemaApplyRequest) -> Result<SchemaApplyReport> {
    let lineage = Lineage::mint(req.actor.clone());
    let span = info_span!("saga", operation_id = %lineage.commit_id, kind = "schema_apply", dry_run = req.dry_run);
    attempt(rt, req, lineage).instrument(span).await
}

async fn attempt(rt: &Runtime, req: &SchemaApplyRequest, mut lineage: Lineage) -> Result<SchemaApplyReport> {
    let compiled = SchemaState::compile(&req.source)?;
    if !req.dry_run {
        let healed = sweep(rt, Mode::RollForwardOnly, Scope::Branch(MAIN)).await?;
        if let Some(blocked) = healed.iter().find_map(|(_, r)| r.blocks(MAIN)) {
            return Err(blocked);
        }
    }
    let mode = if req.dry_run { LeaseMode::Shared } else { LeaseMode::Exclusive };
    let schema_lease = rt.lease_schema(mode).await?;
    let accepted = rt.schema().await?;
    // Ids of every table main ever registered (a soft-dropped type keeps its
    // id and path), so a type added again gets a fresh one.
    let registered: Vec<String> = rt.view(MAIN).await?.state.registrations.keys().cloned().collect();
    let plan = evolve::plan_reserving(&accepted.catalog, compiled.catalog, req.allow_data_loss, &registered);
    let mut report = report_of(&plan, &accepted.identity);
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
    refuse_other_branches(rt).await?;
    let mut leases = LeaseSet::default();
    leases.push(schema_lease)?;
    Gates::none().branch(MAIN).take(rt, &mut leases).await?;
    let view = rt.view(MAIN).await?;
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
    let at = Attempt::schema_apply(rt, lineage, target);
    let prepared = pipeline::Prepared::new(at, token, write_plan::pins(&view), effects.prepared, leases)?;
    let armed = prepared.lease().await?.revalidate().await?.arm(req.actor.clone()).await?;
    let done = armed.commit().await?.confirm().await?.publish().await?.finish().await?;
    for location in &effects.hard_drops {
        if let Err(e) = rt.root().delete_prefix(location).await {
            warn!(%location, error = %e, "applied, but a hard-dropped table's files remain (cleanup removes them)");
        }
    }
    let version = rt.view(MAIN).await?.state.commit(&done.commit_id).map(|c| c.manifest_version);
    report.applied = true;
    report.manifest_version = version;
    report.graph_manifest_version = version;
    report.graph_commit_id = Some(done.commit_id);
    Ok(report)
}

fn report_of(plan: &EvolvePlan, accepted: &str) -> SchemaApplyReport {
    SchemaApplyReport {
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

/// Refuse while any graph branch other than main exists (branch create and
/// delete wait on the schema gate this apply holds exclusively).
async fn refuse_other_branches(rt: &Runtime) -> Result<()> {
    let mut names = Vec::new();
    for name in table::list_branches(&manifest::uri(rt.root())).await?.into_keys() {
        // A deleted branch stays on storage, hidden: it cannot be written,
        // and a restore refuses it once the schema moved on.
        if !super::branch_control::is_hidden(rt, &name).await? {
            names.push(name);
        }
    }
    match names.first() {
        None => Ok(()),
        Some(first) => Err(OmniError::BranchConflict {
            branch: first.clone(),
            reason: format!(
                "a schema apply needs main to be the only branch; merge or delete {} first",
                names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
            ),
        }),
    }
}

/// Every live table's gate and every new table's (the pipeline then finds
/// them all held).
fn table_gates(rt: &Runtime, view: &ManifestView, plan: &EvolvePlan) -> Gates {
    let created: Vec<String> = plan
        .tables
        .iter()
        .filter(|t| t.old_key.is_none())
        .map(|tc| rt.root().child_uri(&layout::location(tc.kind, &tc.table_id)))
        .collect();
    Gates::none().catalog(rt, view, MAIN).tables(created.iter().map(String::as_str), MAIN)
}
