//! Recovery passes over every pending sidecar, in ULID order, through the
//! same actors and gates as writers: the schema gate (exclusive for a full
//! pass, shared for the write-entry heal), then per sidecar its branch and
//! its tables in sorted order. Holding those gates proves the sidecar's
//! in-process owner has finished or died.

use tracing::{Instrument, info_span, warn};

use super::resolve::{self, Mode, Resolution};
use crate::actors::lease::{Lease, LeaseMode, LeaseSet};
use crate::actors::runtime::Runtime;
use crate::actors::saga::gates::Gates;
use crate::engine::schema_store::SchemaState;
use crate::protocol::{OmniError, Result};
use crate::recovery::list_pending;
use crate::recovery::sidecar::{SidecarBody, SidecarStore, WriterKind};

/// Which sidecars a pass looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every pending sidecar (open, the reconciler, an explicit pass).
    All,
    /// Only the intents relevant to a writer on this branch: the sidecars of
    /// the same branch (a first touch's forks are on its own branch too). A
    /// sidecar that cannot be read is relevant to every writer, since it
    /// cannot say what it covers.
    Branch(&'a str),
}

/// How a pass takes gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Acquire {
    /// Queue for each gate (open, an explicit pass, the write-entry heal).
    Queue,
    /// Take each gate only if it is free now, and skip a sidecar whose gates
    /// are busy (the reconciler: its handler never waits on a gate, so a
    /// writer asking it for the listing under its own gates cannot deadlock).
    Try,
}

/// Resolve what can be resolved; return each in-scope sidecar's resolution.
/// A sidecar that fails closed is kept and reported ([`Resolution::Kept`]),
/// so one refused intent does not stop the others; a LIST failure or a
/// corrupt sidecar fails the pass loudly.
pub async fn sweep(rt: &Runtime, mode: Mode, scope: Scope<'_>) -> Result<Vec<(String, Resolution)>> {
    let names = list_pending(rt.root()).await?;
    if names.is_empty() {
        return Ok(vec![]);
    }
    let schema_mode = if mode == Mode::Full { LeaseMode::Exclusive } else { LeaseMode::Shared };
    let schema = rt.lease_schema(schema_mode).await?;
    let exclusive = mode == Mode::Full;
    let out = resolve_all(rt, names, mode, scope, Acquire::Queue, exclusive).await?;
    if exclusive {
        reload_if_promoted(rt, &schema).await?;
    }
    Ok(out)
}

/// A schema apply a pass finished promoted its schema files: swap the
/// catalog the schema actor serves (`schema` is the exclusive lease).
async fn reload_if_promoted(rt: &Runtime, schema: &Lease) -> Result<()> {
    let stored = SchemaState::read(rt.root()).await?;
    if stored.identity != rt.schema().await?.identity {
        rt.reload_schema(schema).await?;
    }
    Ok(())
}

/// `exclusive`: the pass holds the schema gate exclusively, so it may resolve
/// a schema apply's sidecar.
async fn resolve_all(
    rt: &Runtime,
    names: Vec<String>,
    mode: Mode,
    scope: Scope<'_>,
    acquire: Acquire,
    exclusive: bool,
) -> Result<Vec<(String, Resolution)>> {
    let store = SidecarStore::new(rt.root().clone());
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let span = info_span!("recovery.sidecar", sidecar = %name, ?mode);
        let pass = Pass { mode, scope, acquire, exclusive };
        if let Some(resolution) = one(rt, &store, &name, pass).instrument(span).await? {
            out.push((name, resolution));
        }
    }
    Ok(out)
}

/// The sidecar's branch gate, then its tables' gates in gate order; `None`
/// when `acquire` is [`Acquire::Try`] and one of them is busy.
async fn lease_sidecar(rt: &Runtime, body: &SidecarBody, acquire: Acquire) -> Result<Option<LeaseSet>> {
    let gates =
        Gates::none().branch(&body.branch).tables(body.tables.iter().map(|t| t.table_path.as_str()), &body.branch);
    match acquire {
        Acquire::Queue => gates.acquire(rt).await.map(Some),
        Acquire::Try => gates.try_acquire(rt).await,
    }
}

/// How one pass runs.
#[derive(Clone, Copy)]
struct Pass<'a> {
    mode: Mode,
    scope: Scope<'a>,
    acquire: Acquire,
    exclusive: bool,
}

async fn one(rt: &Runtime, store: &SidecarStore, name: &str, pass: Pass<'_>) -> Result<Option<Resolution>> {
    let Pass { mode, scope, acquire, exclusive } = pass;
    let Some(body) = store.read(name).await? else { return Ok(Some(Resolution::RolledBack)) };
    if let Scope::Branch(branch) = scope
        && body.branch != branch
    {
        return Ok(None);
    }
    // A write of this process still owns it: not a recovery candidate, and
    // queueing behind its gates would only find the sidecar gone.
    if rt.is_live(&body.operation_id) {
        return Ok(Some(Resolution::InFlight));
    }
    // A schema apply is graph-global: only a full pass holding the schema
    // gate exclusively may resolve it.
    if body.writer_kind == WriterKind::SchemaApply && !(exclusive && mode == Mode::Full) {
        return Ok(Some(Resolution::Deferred {
            reason: format!(
                "{} is a schema apply; the reconciler or a read-write open recovers it once no write runs",
                body.operation_id
            ),
            operation_id: body.operation_id,
            branch: body.branch,
        }));
    }
    let Some(leases) = lease_sidecar(rt, &body, acquire).await? else {
        return Ok(Some(Resolution::InFlight));
    };
    // Re-read under the gates: the owner may have finished while we waited.
    if store.read(name).await?.is_none() {
        return Ok(Some(Resolution::RolledBack));
    }
    match resolve::process(rt, store, name, mode, &leases).await {
        Err(OmniError::RecoveryRequired { operation_id, reason }) => {
            warn!(%operation_id, branch = %body.branch, %reason, "sidecar kept for an operator");
            Ok(Some(Resolution::Kept { operation_id, branch: body.branch, reason }))
        }
        other => other.map(Some),
    }
}

/// The reconciler's pass: roll forward or back every sidecar whose gates are
/// free now (holding a sidecar's branch and table gates is what proves its
/// owner gone), waiting on none. The schema gate is taken exclusively when
/// it is free (then a schema apply's sidecar is resolved too), else shared.
/// A busy sidecar is left for the next pass. Failures are logged, not returned.
pub async fn background_pass(rt: &Runtime) {
    let out = async {
        let names = list_pending(rt.root()).await?;
        if names.is_empty() {
            return Ok(vec![]);
        }
        if let Some(schema) = rt.try_lease_schema(LeaseMode::Exclusive).await? {
            let out = resolve_all(rt, names, Mode::Full, Scope::All, Acquire::Try, true).await?;
            reload_if_promoted(rt, &schema).await?;
            return Ok(out);
        }
        let Some(_schema) = rt.try_lease_schema(LeaseMode::Shared).await? else { return Ok(vec![]) };
        resolve_all(rt, names, Mode::Full, Scope::All, Acquire::Try, false).await
    };
    if let Err(e) = out.await {
        warn!(error = %e, "background recovery pass failed; the sidecar stays for the next pass");
    }
}
