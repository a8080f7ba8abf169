//! The storage invariants recovery restores, checked from storage alone:
//! no sidecar pending, every table's Lance HEAD on the ref the manifest
//! names equal to its pin, and no fork for the branch that the manifest does
//! not point at. The crash tests assert none is violated after every crash.

use super::list_pending;
use crate::engine::manifest;
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};

/// Every violated invariant on `branch`, described; empty when consistent.
pub async fn violations(root: &Root, branch: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> =
        list_pending(root).await?.into_iter().map(|n| format!("sidecar {n} is pending")).collect();
    let view = manifest::load(root, branch, None).await?;
    for t in view.state.tables.values() {
        // A table the branch inherited (stored on another ref) may lag that
        // ref's HEAD: the ref's own branch owns its pin.
        if t.branch.as_deref().unwrap_or("main") != branch {
            continue;
        }
        let uri = root.child_uri(&t.location);
        match table::head_version(&uri, t.branch.as_deref()).await {
            Ok(head) if head != t.version => out.push(format!(
                "{} on {}: Lance HEAD v{head} != manifest pin v{}",
                t.table_key,
                t.branch.as_deref().unwrap_or("main"),
                t.version
            )),
            Ok(_) => {}
            Err(OmniError::NotFound(e)) => out.push(format!("{}: the pinned ref is missing ({e})", t.table_key)),
            Err(e) => return Err(e),
        }
        let own = t.branch.as_deref() == Some(branch);
        if branch != "main" && !own && table::native_branch(&uri, branch).await?.is_some() {
            out.push(format!("{}: a fork for `{branch}` exists that the manifest does not point at", t.table_key));
        }
    }
    Ok(out)
}
