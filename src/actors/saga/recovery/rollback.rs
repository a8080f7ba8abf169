//! Recovery's roll-back as the pipeline's back half for a compensation: the
//! sidecar is the armed intent already, so a roll-back starts from the
//! classified tables and goes
//!
//! ```text
//! Planned ─reclaim_forks─▶ Reclaimed ─restore_tables─▶ Restored ─publish─▶ Published ─settle─▶ Resolution
//! ```
//!
//! each step consuming the one before. Forks go first (the manifest never
//! pointed at them, so a retry finds them gone); each owned table is then
//! restored to its pin through its table actor, landing exactly at HEAD + 1
//! under the pre-minted restore identity (the writers' exact-commit check);
//! one publish under the pre-minted rollback id makes the restored HEADs
//! visible; the audit row and the sidecar's delete settle it.

use std::collections::BTreeMap;

use tracing::info;

use super::resolve::{self, RECOVERY_ACTOR, Resolution};
use crate::actors::child_key::ChildKey;
use crate::actors::lease::LeaseSet;
use crate::actors::runtime::Runtime;
use crate::actors::saga::pipeline::commit_exact_on;
use crate::engine::manifest::{Lineage, ManifestView, Precondition, PublishRequest, TableUpdate};
use crate::engine::storage::table;
use crate::named_failpoint;
use crate::protocol::{OmniError, Result};
use crate::recovery::audit::{RecoveryKind, TableOutcome};
use crate::recovery::classify::TableClass;
use crate::recovery::sidecar::{SidecarBody, SidecarStore, SidecarTable};

/// What every step of one roll-back shares. `leases` holds the sidecar's
/// branch and table gates.
struct Ctx<'a> {
    rt: &'a Runtime,
    store: &'a SidecarStore,
    body: &'a SidecarBody,
    view: &'a ManifestView,
    leases: &'a LeaseSet,
}

/// A roll-back classified table by table: nothing done yet.
pub(super) struct Planned<'a> {
    cx: Ctx<'a>,
    observed: Vec<(&'a SidecarTable, u64, TableClass)>,
}

impl<'a> Planned<'a> {
    /// The roll-back of `body`, whose tables (each with its manifest pin)
    /// were classified as `observed` against `view`.
    pub(super) fn new(
        rt: &'a Runtime,
        store: &'a SidecarStore,
        body: &'a SidecarBody,
        view: &'a ManifestView,
        observed: Vec<(&'a SidecarTable, u64, TableClass)>,
        leases: &'a LeaseSet,
    ) -> Self {
        Planned { cx: Ctx { rt, store, body, view, leases }, observed }
    }

    /// Remove every first-touch fork the write owns, and every untouched one
    /// no other pending sidecar claims.
    pub(super) async fn reclaim_forks(self) -> Result<Reclaimed<'a>> {
        let Planned { cx, observed } = self;
        let mut outcomes = Vec::new();
        for (t, pinned, o) in &observed {
            let owned = match o {
                TableClass::UntouchedFork => false,
                TableClass::RolledPastExpected { head } | TableClass::PartialChain { head, .. } if t.fork.is_some() => {
                    outcomes.push(TableOutcome {
                        table_key: t.table_key.clone(),
                        from_version: *head,
                        to_version: *pinned,
                    });
                    true
                }
                _ => continue,
            };
            if owned || !resolve::claimed_elsewhere(cx.store, cx.body, t).await? {
                resolve::reclaim_fork(cx.rt, t, &cx.body.branch, cx.leases).await?;
            }
        }
        Ok(Reclaimed { cx, observed, outcomes })
    }
}

/// Every fork the write owned is gone.
pub(super) struct Reclaimed<'a> {
    cx: Ctx<'a>,
    observed: Vec<(&'a SidecarTable, u64, TableClass)>,
    outcomes: Vec<TableOutcome>,
}

impl<'a> Reclaimed<'a> {
    /// Remove a schema apply's new tables; restore every other owned table
    /// to its pin (a restore already landed is recognised, not repeated);
    /// discard a schema apply's staged files.
    pub(super) async fn restore_tables(self) -> Result<Restored<'a>> {
        let Reclaimed { cx, observed, mut outcomes } = self;
        let (body, op) = (cx.body, &cx.body.operation_id);
        let mut updates = Vec::new();
        let mut expected = BTreeMap::new();
        for (t, pinned, o) in observed {
            let head = match o {
                TableClass::NoMovement if t.is_create() => {
                    resolve::remove_created(cx.rt, body, t).await?;
                    continue;
                }
                TableClass::RolledPastExpected { head } if t.is_create() => {
                    resolve::remove_created(cx.rt, body, t).await?;
                    outcomes.push(TableOutcome { table_key: t.table_key.clone(), from_version: head, to_version: 0 });
                    continue;
                }
                TableClass::NoMovement | TableClass::UntouchedFork => continue,
                TableClass::RolledPastExpected { .. } | TableClass::PartialChain { .. } if t.fork.is_some() => continue,
                foreign @ (TableClass::UnexpectedAtP1
                | TableClass::UnexpectedMultistep { .. }
                | TableClass::InvariantViolation(_)) => {
                    return Err(OmniError::Internal(format!("roll-back reached a foreign table: {foreign}")));
                }
                TableClass::Compensated { head } => head,
                TableClass::RolledPastExpected { head } | TableClass::PartialChain { head, .. } => {
                    restore_one(&cx, t, head, pinned).await?
                }
            };
            let ds = table::open_table(&t.table_path, t.table_branch.as_deref(), Some(head)).await?;
            let row_count = table::row_count(&ds).await?;
            updates.push(TableUpdate::recovered(&t.table_key, t.table_branch.as_deref(), head, row_count));
            outcomes.push(TableOutcome { table_key: t.table_key.clone(), from_version: head - 1, to_version: pinned });
            expected.insert(t.table_key.clone(), pinned);
        }
        resolve::discard_schema(cx.rt, body).await?;
        info!(operation_id = %op, tables = updates.len(), "restored");
        Ok(Restored { cx, updates, expected, outcomes })
    }
}

/// Restore table `t` from `head` to `pinned` through its table actor,
/// exactly at `head + 1` under the pre-minted restore identity.
async fn restore_one(cx: &Ctx<'_>, t: &SidecarTable, head: u64, pinned: u64) -> Result<u64> {
    let ds = table::open_table(&t.table_path, t.table_branch.as_deref(), Some(head)).await?;
    let staged = table::stage_restore(ds, pinned, &resolve::restore_uuid(&cx.body.operation_id, &t.table_key));
    let lease = cx.leases.require(&ChildKey::table(&t.table_path, &cx.body.branch))?;
    named_failpoint!("recovery.before_restore");
    let restored = commit_exact_on(cx.rt, &cx.body.branch, &t.table_key, staged, lease).await?.version;
    named_failpoint!("recovery.after_restore");
    Ok(restored)
}

/// Every owned table is back at its pin's content (at a newer version).
pub(super) struct Restored<'a> {
    cx: Ctx<'a>,
    updates: Vec<TableUpdate>,
    expected: BTreeMap<String, u64>,
    outcomes: Vec<TableOutcome>,
}

impl<'a> Restored<'a> {
    /// Publish the restored HEADs once, under the pre-minted rollback id and
    /// the branch's current head. Only forks (or creates) compensated: the
    /// manifest never moved, and nothing is published.
    pub(super) async fn publish(self) -> Result<Published<'a>> {
        let Restored { cx, updates, expected, outcomes } = self;
        let body = cx.body;
        if updates.is_empty() {
            return Ok(Published { cx, commit: None, outcomes });
        }
        let lineage = Lineage {
            commit_id: body.rollback_commit_id.clone(),
            actor: Some(RECOVERY_ACTOR.into()),
            operation: Some("recovery".into()),
            ..Lineage::mint(None)
        };
        let request = PublishRequest {
            branch: body.branch.clone(),
            updates,
            expected_versions: expected,
            precondition: Precondition::ExactHead {
                branch_id: cx.view.branch_id.clone(),
                head: cx.view.state.head(&body.branch).map(str::to_string),
            },
            lineage,
        };
        resolve::publish(cx.rt, request, cx.leases).await?;
        Ok(Published { cx, commit: Some(body.rollback_commit_id.clone()), outcomes })
    }
}

/// The compensation is visible (or needed no publish).
pub(super) struct Published<'a> {
    cx: Ctx<'a>,
    commit: Option<String>,
    outcomes: Vec<TableOutcome>,
}

impl Published<'_> {
    /// Record the audit row, then delete the sidecar.
    pub(super) async fn settle(self) -> Result<Resolution> {
        let Published { cx, commit, outcomes } = self;
        info!(operation_id = %cx.body.operation_id, published = commit.is_some(), "rolled back");
        resolve::settle(cx.rt, cx.store, cx.body, RecoveryKind::RolledBack, commit, outcomes).await
    }
}
