//! Where a daemon's time goes, per step: a `tracing` layer that adds up, per
//! span name of this crate (`saga.lease`, `saga.commit`, `saga.publish`, …),
//! how many spans closed, their wall time (creation to close, waits
//! included) and their busy time (while polled). `/healthz?verbose=true`
//! reports the totals, so an operator (and `bench_soak`) can tell which step
//! of a write grows when latency does. Bounded: one entry per span name in
//! the code.

use std::collections::BTreeMap;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use dashmap::DashMap;
use serde::Serialize;
use tracing::Subscriber;
use tracing::span::{Attributes, Id};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// The layer; install it with a filter on this crate's target at `INFO`
/// (`main` does), or it times every library's spans.
#[derive(Debug, Default, Clone, Copy)]
pub struct StepTimes;

/// A span still open: when it was created, and its busy time so far.
struct Open {
    created: Instant,
    entered: Option<Instant>,
    busy_ns: u64,
}

#[derive(Default)]
struct Total {
    count: AtomicU64,
    wall_ns: AtomicU64,
    busy_ns: AtomicU64,
}

static TOTALS: LazyLock<DashMap<&'static str, Total>> = LazyLock::new(DashMap::new);

/// One step's totals since the daemon started.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct StepTime {
    /// Spans of this name closed.
    pub count: u64,
    /// Their summed wall time, creation to close (ms).
    pub wall_ms: f64,
    /// Their summed time being polled (ms); nested steps count in both.
    pub busy_ms: f64,
}

fn nanos(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for StepTimes {
    fn on_new_span(&self, _: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Open { created: Instant::now(), entered: None, busy_ns: 0 });
        }
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
        {
            open.entered = Some(Instant::now());
        }
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(open) = span.extensions_mut().get_mut::<Open>()
            && let Some(at) = open.entered.take()
        {
            open.busy_ns += nanos(at);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else { return };
        let total = TOTALS.entry(span.name()).or_default();
        total.count.fetch_add(1, Ordering::Relaxed);
        total.wall_ns.fetch_add(nanos(open.created), Ordering::Relaxed);
        total.busy_ns.fetch_add(open.busy_ns, Ordering::Relaxed);
    }
}

/// The totals per span name (empty when the layer is not installed: the
/// embedded handle, a test's in-process server).
pub fn report() -> BTreeMap<&'static str, StepTime> {
    let ms = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / 1e6;
    TOTALS
        .iter()
        .map(|e| {
            let t = e.value();
            (
                *e.key(),
                StepTime { count: t.count.load(Ordering::Relaxed), wall_ms: ms(&t.wall_ns), busy_ms: ms(&t.busy_ns) },
            )
        })
        .collect()
}
