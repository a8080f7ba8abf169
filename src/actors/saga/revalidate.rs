//! The check a writer makes under its gates, before it arms: nothing new to
//! recover on its branch, its authority token still holds, and every table
//! it touches is still at its manifest pin.

use std::collections::BTreeMap;

use crate::actors::runtime::Runtime;
use crate::engine::storage::table;
use crate::engine::write_plan::{AuthorityToken, PreparedTable};
use crate::protocol::{OmniError, Result};
use crate::recovery::sidecar::{SidecarStore, WriterKind};

/// The recovery barrier under the gates: a pending sidecar on `branch`
/// (armed since the write-entry heal) blocks the write, and so does a
/// schema apply's on any branch (it is graph-global); one that cannot be
/// read blocks every write, since it cannot say what it covers.
pub async fn refuse_if_recovery_pending(rt: &Runtime, store: &SidecarStore, branch: &str) -> Result<()> {
    for name in rt.pending_sidecars().await? {
        match store.read(&name).await {
            Ok(Some(body)) if body.branch != branch && body.writer_kind != WriterKind::SchemaApply => continue,
            Ok(None) => continue,
            Ok(Some(body)) => {
                return Err(OmniError::RecoveryRequired {
                    operation_id: body.operation_id,
                    reason: format!(
                        "an unresolved {:?} on branch `{branch}` must be recovered first",
                        body.writer_kind
                    ),
                });
            }
            Err(e) => {
                return Err(OmniError::RecoveryRequired { operation_id: name, reason: e.to_string() });
            }
        }
    }
    Ok(())
}

/// Under the gates: nothing new to recover, the token still holds, and every
/// touched table's live HEAD equals its manifest pin.
pub async fn check(
    rt: &Runtime,
    store: &SidecarStore,
    branch: &str,
    token: &AuthorityToken,
    pins: &BTreeMap<String, u64>,
    tables: &[PreparedTable],
) -> Result<()> {
    refuse_if_recovery_pending(rt, store, branch).await?;
    let view = rt.view(branch).await?;
    let changed = |member: &str, expected: String, actual: String| {
        Err(OmniError::ReadSetChanged { member: member.to_string(), expected, actual })
    };
    if view.branch_id != token.branch_id {
        return changed("branch_identifier", token.branch_id.to_string(), view.branch_id.to_string());
    }
    let head = view.state.head(branch).map(str::to_string);
    if head != token.graph_head {
        let show = |h: &Option<String>| h.clone().unwrap_or_else(|| "<none>".into());
        return changed(&format!("graph_head:{branch}"), show(&token.graph_head), show(&head));
    }
    let schema = rt.schema_of(&view).await?;
    if schema.identity != token.schema_identity {
        return changed("schema_identity", token.schema_identity.clone(), schema.identity.clone());
    }
    for t in tables {
        let now = view.state.tables.get(&t.table_key).map(|e| e.version);
        if t.pin == 0 {
            // A schema apply's new table: unregistered, and nothing at its path.
            if now.is_some() || table::head_version(&t.uri, None).await.is_ok() {
                return Err(OmniError::AlreadyExists(format!(
                    "{} is registered or its dataset path is taken; the apply cannot create it",
                    t.table_key
                )));
            }
            continue;
        }
        if now != Some(t.pin) || pins.get(&t.table_key) != Some(&t.pin) {
            return changed(&t.table_key, format!("v{}", t.pin), now.map_or("<dropped>".into(), |v| format!("v{v}")));
        }
        if t.fork().is_none() {
            let live = rt.table_head(&t.uri, branch).await?;
            if live != t.pin {
                return Err(OmniError::Drift { table: t.table_key.clone(), pinned: t.pin, head: live });
            }
        } else if table::native_branch(&t.uri, branch).await?.is_some() {
            // A first touch needs the target ref absent (a clone-only tree
            // without a ref is garbage the fork reclaims); a ref the manifest
            // does not point at is a leftover no sidecar claims.
            return Err(OmniError::BranchConflict {
                branch: branch.to_string(),
                reason: format!(
                    "{} has a stale fork for this branch that the manifest does not point at; \
                     delete and recreate the branch to reclaim it",
                    t.table_key
                ),
            });
        }
    }
    Ok(())
}
