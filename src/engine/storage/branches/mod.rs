//! Exact native branch control over one dataset: create a ref at an exact
//! parent version (reclaiming a clone-only tree first, at most two native
//! attempts) and delete one captured incarnation, each classifying an
//! ambiguous failure from freshly listed refs ([`classify`]).

use std::sync::Arc;

use lance::Dataset;
use tracing::{debug, warn};

pub mod classify;

pub use classify::CreatePlan;
use classify::{CreateOutcome, DeleteOutcome, classify_create, classify_delete};

use super::table;
use crate::protocol::{OmniError, Result};

/// Native attempts a create makes before giving up.
const CREATE_ATTEMPTS: usize = 2;

/// The plan for forking `name` off (`from`, `version`) of the dataset at `uri`.
pub async fn plan(uri: &str, from: Option<&str>, version: u64) -> Result<CreatePlan> {
    let from = from.filter(|b| *b != "main");
    let parent_identifier = match from {
        None => vec![],
        Some(f) => table::native_branch(uri, f)
            .await?
            .map(|b| b.identifier)
            .ok_or_else(|| OmniError::NotFound(format!("branch `{f}` of {uri}")))?,
    };
    Ok(CreatePlan { parent_branch: from.map(str::to_string), parent_version: version, parent_identifier })
}

/// Create ref `name` exactly as `plan` says and open it. An existing ref that
/// is not this plan's is a [`OmniError::BranchConflict`] and is never touched.
pub async fn create_exact(uri: &str, name: &str, plan: &CreatePlan) -> Result<Arc<Dataset>> {
    let mut last = None;
    for attempt in 0..CREATE_ATTEMPTS {
        match classify_create(plan, table::native_branch(uri, name).await?.as_ref()) {
            CreateOutcome::Created => return table::open_table(uri, Some(name), None).await,
            CreateOutcome::Foreign(why) => return Err(OmniError::BranchConflict { branch: name.into(), reason: why }),
            CreateOutcome::Absent => {}
        }
        // No ref: any `tree/<name>` is a clone-only leftover, unreachable
        // garbage. Looked for first: Lance's forced delete reads every ref
        // of the dataset, which would make each fork cost O(branches).
        if table::branch_tree_exists(uri, name).await? {
            table::delete_branch(uri, name, true).await?;
        }
        match table::create_branch(uri, plan.parent_branch.as_deref(), plan.parent_version, name).await {
            Ok(ds) => return Ok(ds),
            Err(e @ OmniError::BadRequest(_)) => return Err(e),
            Err(e) => {
                debug!(attempt, error = %e, uri, name, "native branch create failed; classifying from fresh refs");
                last = Some(e);
            }
        }
    }
    match classify_create(plan, table::native_branch(uri, name).await?.as_ref()) {
        CreateOutcome::Created => table::open_table(uri, Some(name), None).await,
        _ => Err(last.unwrap_or_else(|| OmniError::Internal(format!("creating `{name}` of {uri} made no attempt")))),
    }
}

/// Delete the incarnation `captured` of ref `name`. After an error, an absent
/// ref is success, the same incarnation keeps the error, and a different one
/// is a delete/recreate conflict.
pub async fn delete_exact(uri: &str, name: &str, captured: &[(u64, String)]) -> Result<()> {
    match classify_delete(captured, table::native_branch(uri, name).await?.as_ref()) {
        DeleteOutcome::Deleted => return Err(OmniError::NotFound(format!("branch `{name}`"))),
        DeleteOutcome::Recreated => return Err(recreated(name)),
        DeleteOutcome::StillThere => {}
    }
    let Err(e) = table::delete_branch(uri, name, false).await else { return Ok(()) };
    if matches!(e, OmniError::BranchConflict { .. }) {
        return Err(e);
    }
    match classify_delete(captured, table::native_branch(uri, name).await?.as_ref()) {
        DeleteOutcome::Deleted => {
            warn!(uri, name, error = %e, "branch delete reported an error but the ref is gone; accepting");
            Ok(())
        }
        DeleteOutcome::StillThere => Err(e),
        DeleteOutcome::Recreated => Err(recreated(name)),
    }
}

/// Remove ref `name` and its tree whatever incarnation it is (a derived fork
/// whose authority is already gone). Returns whether a ref existed.
pub async fn reclaim(uri: &str, name: &str) -> Result<bool> {
    let existed = table::native_branch(uri, name).await?.is_some();
    table::delete_branch(uri, name, true).await?;
    Ok(existed)
}

fn recreated(name: &str) -> OmniError {
    OmniError::BranchConflict {
        branch: name.into(),
        reason: "it was deleted and recreated by someone else meanwhile".into(),
    }
}
