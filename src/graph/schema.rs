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
    /// The steps applying `source` would take, without writing anything
    /// (`supported: false` names a step the apply would refuse).
    pub async fn schema_plan(&self, source: &str, allow_data_loss: bool) -> Result<SchemaApplyReport> {
        let req = SchemaApplyRequest { source: source.to_string(), allow_data_loss, actor: None, dry_run: true };
        Box::pin(schema_apply::run(&self.rt, &req)).await
    }

    /// Make `source` main's schema as one commit. Drops are soft unless
    /// `allow_data_loss` (then the dropped data goes with the apply).
    /// Refused while any branch other than main exists, for an unsupported
    /// step, or when a tightened rule is broken by existing rows.
    pub async fn schema_apply(
        &self,
        source: &str,
        allow_data_loss: bool,
        actor: Option<&str>,
    ) -> Result<SchemaApplyReport> {
        self.require_writable()?;
        let req = SchemaApplyRequest {
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
        let from_schema = self.schema_at(&a.view, &a.commit_id, a.at_head).await?;
        let to_schema = self.schema_at(&b.view, &b.commit_id, b.at_head).await?;
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

    /// The schema that was current at `commit_id` of `view`: the catalog a
    /// read there binds. The accepted schema unless a schema apply lies
    /// between them (then the archived one), so a reader never pairs a
    /// manifest with a catalog from the other side of an apply. `head`:
    /// `view` is its branch's current manifest (not a time-travel view).
    pub(super) async fn schema_at(&self, view: &ManifestView, commit_id: &str, head: bool) -> Result<Arc<SchemaState>> {
        let current = self.schema().await?;
        let identity = match view.state.schema_applied_at(commit_id) {
            Some(identity) => Some(identity),
            // Older than every apply: the schema the graph was created with
            // (main's current manifest records every apply; `view` is that
            // manifest when it is main's head, and reading it again would
            // cost two storage requests).
            None if head && view.branch == MAIN => view.state.original_schema(),
            None => self.rt.view(MAIN).await?.state.original_schema(),
        };
        match identity {
            Some(identity) if identity != current.identity => {
                Ok(Arc::new(SchemaState::archived(self.root(), &identity).await?))
            }
            _ => Ok(current),
        }
    }
}
