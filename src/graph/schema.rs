//! Schema evolution through the embedded handle (see `docs/schema-evolution.md`).

use std::sync::Arc;

use super::Graph;
use crate::actors::saga::schema_apply::{self, SchemaApplyReport, SchemaApplyRequest};
use crate::engine::branch_name::MAIN;
use crate::engine::lang::catalog::evolve::{self, Step};
use crate::engine::manifest::ManifestView;
use crate::engine::schema_store::SchemaState;
use crate::protocol::Result;

/// What `schema diff` answers: the commits the two refs name, their schema
/// identities, and the steps from one to the other.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SchemaDiff {
    /// The commit `from` names.
    pub from: String,
    /// The commit `to` names.
    pub to: String,
    /// The schema at `from`.
    pub from_schema_identity: String,
    /// The schema at `to`.
    pub to_schema_identity: String,
    /// Whether `schema apply` could take every step.
    pub supported: bool,
    /// `steps.len()`.
    pub step_count: usize,
    /// Every difference, as `schema plan` lists them (empty: the same schema).
    pub steps: Vec<Step>,
}

impl Graph {
    /// The steps applying `source` to main would take, without writing
    /// anything (`supported: false` names a step the apply would refuse).
    pub async fn schema_plan(&self, source: &str, allow_data_loss: bool) -> Result<SchemaApplyReport> {
        self.schema_plan_on(MAIN, source, allow_data_loss).await
    }

    /// [`Self::schema_plan`] against `branch`'s schema.
    pub async fn schema_plan_on(&self, branch: &str, source: &str, allow_data_loss: bool) -> Result<SchemaApplyReport> {
        let req = SchemaApplyRequest {
            branch: branch.to_string(),
            source: source.to_string(),
            allow_data_loss,
            actor: None,
            dry_run: true,
        };
        Box::pin(schema_apply::run(&self.rt, &req)).await
    }

    /// Make `source` main's schema as one commit: [`Self::schema_apply_on`] main.
    pub async fn schema_apply(
        &self,
        source: &str,
        allow_data_loss: bool,
        actor: Option<&str>,
    ) -> Result<SchemaApplyReport> {
        self.schema_apply_on(MAIN, source, allow_data_loss, actor).await
    }

    /// Make `source` `branch`'s schema as one commit on it; every other
    /// branch keeps its own. Drops are soft unless `allow_data_loss` (then
    /// the dropped data goes with the apply). Refused for an unsupported
    /// step, or when a tightened rule is broken by the branch's rows.
    pub async fn schema_apply_on(
        &self,
        branch: &str,
        source: &str,
        allow_data_loss: bool,
        actor: Option<&str>,
    ) -> Result<SchemaApplyReport> {
        self.require_writable()?;
        let req = SchemaApplyRequest {
            branch: branch.to_string(),
            source: source.to_string(),
            allow_data_loss,
            actor: actor.map(str::to_string),
            dry_run: false,
        };
        Box::pin(schema_apply::run(&self.rt, &req)).await
    }

    /// The steps that turn the schema at ref `from` into the schema at ref
    /// `to`, in `schema plan`'s vocabulary (drops planned soft). Refs as
    /// everywhere: a branch, a commit, a tag, `REF~N`, `A...B`.
    pub async fn schema_diff(&self, from: &str, to: &str) -> Result<SchemaDiff> {
        let (a, b) = (self.read_at(from).await?, self.read_at(to).await?);
        let from_schema = self.schema_at(&a.view, &a.commit_id).await?;
        let to_schema = self.schema_at(&b.view, &b.commit_id).await?;
        let plan = evolve::plan(&from_schema.catalog, to_schema.catalog.clone(), false);
        Ok(SchemaDiff {
            from: a.commit_id,
            to: b.commit_id,
            from_schema_identity: from_schema.identity.clone(),
            to_schema_identity: to_schema.identity.clone(),
            supported: plan.steps.iter().all(|s| s.supported),
            step_count: plan.steps.len(),
            steps: plan.steps,
        })
    }

    /// The schema `commit_id` of `view` was written under: the catalog a
    /// read there binds (its branch's schema at that commit), so a reader
    /// never pairs a manifest with a catalog from the other side of an apply.
    pub(super) async fn schema_at(&self, view: &ManifestView, commit_id: &str) -> Result<Arc<SchemaState>> {
        self.rt.schema_at(&view.state, Some(commit_id)).await
    }

    /// The schema `branch` has at its head (main's is [`Self::schema`]).
    pub async fn schema_of(&self, branch: &str) -> Result<Arc<SchemaState>> {
        if branch == MAIN {
            return self.schema().await;
        }
        self.rt.schema_of(&self.rt.view(branch).await?).await
    }
}
