//! Recovery passes over every pending sidecar, in ULID order, through the
//! same actors and gates as writers: the schema gate (exclusive for a full
//! pass, shared for the write-entry heal), then per sidecar its branch and
//! its tables in sorted order. Holding those gates proves the sidecar's
//! in-process owner has finished or died.

use tracing::{Instrument, info_span, warn};

use super::list_pending;
use super::resolve::{self, Mode, Resolution};
use super::sidecar::SidecarStore;
use crate::actors::lease::{LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::protocol::Result;

/// Resolve what can be resolved; return each sidecar's resolution. A LIST
/// failure or a corrupt sidecar fails the pass loudly.
pub async fn sweep(rt: &Runtime, mode: Mode) -> Result<Vec<(String, Resolution)>> {
    let names = list_pending(rt.root()).await?;
    if names.is_empty() {
        return Ok(vec![]);
    }
    let schema_mode = if mode == Mode::Full { LeaseMode::Exclusive } else { LeaseMode::Shared };
    let _schema = rt.lease_schema(schema_mode).await?;
    let store = SidecarStore::new(rt.root().clone());
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let span = info_span!("recovery.sidecar", sidecar = %name, ?mode);
        let resolution = one(rt, &store, &name, mode).instrument(span).await?;
        out.push((name, resolution));
    }
    Ok(out)
}

async fn one(rt: &Runtime, store: &SidecarStore, name: &str, mode: Mode) -> Result<Resolution> {
    let Some(body) = store.read(name).await? else { return Ok(Resolution::RolledBack) };
    // A write of this process still owns it: not a recovery candidate, and
    // queueing behind its gates would only find the sidecar gone.
    if rt.is_live(&body.operation_id) {
        return Ok(Resolution::InFlight);
    }
    let mut leases = LeaseSet::default();
    leases.push(rt.lease_branch(&body.branch).await?);
    let mut uris: Vec<&str> = body.tables.iter().map(|t| t.table_path.as_str()).collect();
    uris.sort_unstable();
    for uri in uris {
        leases.push(rt.lease_table(uri, &body.branch).await?);
    }
    // Re-read under the gates: the owner may have finished while we waited.
    match store.read(name).await? {
        None => Ok(Resolution::RolledBack),
        Some(_) => resolve::process(rt, store, name, mode, &leases).await,
    }
}

/// Run a full pass, logging (not returning) a failure: for background use.
pub async fn background_pass(rt: &Runtime) {
    if let Err(e) = sweep(rt, Mode::Full).await {
        warn!(error = %e, "background recovery pass failed; the sidecar stays for the next pass");
    }
}
