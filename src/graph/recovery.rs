//! Recovery status, repair and explicit recovery passes.

use serde::Serialize;

use super::Graph;
use crate::actors::saga::recovery::repair;
use crate::actors::saga::recovery::resolve::{self, Mode, Resolution};
use crate::actors::saga::recovery::sweep::{Scope, sweep};
use crate::protocol::Result;

/// One pending recovery sidecar, as operators see it.
#[derive(Debug, Clone, Serialize)]
pub struct PendingSidecar {
    /// Sidecar object name.
    pub name: String,
    /// Operation id (absent when the sidecar is unreadable).
    pub operation_id: Option<String>,
    /// Writer kind.
    pub writer_kind: Option<String>,
    /// Graph branch.
    pub branch: Option<String>,
    /// `Armed` or `EffectsConfirmed`.
    pub phase: Option<String>,
    /// Actor of the write.
    pub actor: Option<String>,
    /// Seconds since it was armed.
    pub age_seconds: Option<i64>,
    /// Why it could not be read, for a corrupt sidecar.
    pub error: Option<String>,
    /// What recovery would do with it now and why (the per-table classes),
    /// or why that could not be determined.
    pub diagnosis: Option<String>,
}

/// Pending sidecars and the recovery audit log.
#[derive(Debug, Clone, Serialize)]
pub struct RecoveryStatus {
    /// Sidecars recovery could not resolve (or that a running write owns).
    pub pending: Vec<PendingSidecar>,
    /// Every recovery performed, oldest first.
    pub audit: Vec<crate::recovery::audit::AuditRow>,
}

impl Graph {
    /// Pending recovery sidecars and the audit log (reads only).
    pub async fn recovery_status(&self) -> Result<RecoveryStatus> {
        let store = crate::recovery::sidecar::SidecarStore::new(self.root().clone());
        let now = chrono::Utc::now().timestamp_micros();
        let mut pending = Vec::new();
        for name in crate::recovery::list_pending(self.root()).await? {
            let entry = match store.read(&name).await {
                Ok(None) => continue,
                Ok(Some(b)) => PendingSidecar {
                    name,
                    diagnosis: Some(if self.rt.is_live(&b.operation_id) {
                        "InFlight: a write of this process owns it".to_string()
                    } else {
                        match resolve::diagnose(&self.rt, &b).await {
                            Ok(d) => d,
                            Err(e) => format!("cannot classify: {e}"),
                        }
                    }),
                    operation_id: Some(b.operation_id),
                    writer_kind: Some(format!("{:?}", b.writer_kind)),
                    branch: Some(b.branch),
                    phase: Some(format!("{:?}", b.phase)),
                    actor: b.actor,
                    age_seconds: Some((now - b.started_at_us) / 1_000_000),
                    error: None,
                },
                Err(e) => PendingSidecar {
                    name,
                    operation_id: None,
                    writer_kind: None,
                    branch: None,
                    phase: None,
                    actor: None,
                    age_seconds: None,
                    error: Some(e.to_string()),
                    diagnosis: None,
                },
            };
            pending.push(entry);
        }
        let audit = crate::recovery::audit::read_all(self.root()).await?;
        Ok(RecoveryStatus { pending, audit })
    }

    /// Classify uncovered drift on `main`; publish it with `confirm` (and `force` for suspicious drift).
    pub async fn repair(&self, confirm: bool, force: bool) -> Result<repair::RepairReport> {
        self.require_writable()?;
        repair::repair(&self.rt, confirm, force).await
    }

    /// Run a full recovery pass now (what read-write open and the reconciler do).
    pub async fn recover(&self) -> Result<Vec<(String, Resolution)>> {
        self.require_writable()?;
        sweep(&self.rt, Mode::Full, Scope::All).await
    }
}
