//! Resource limits of one read query, and the meter that enforces them.
//!
//! A query may run for at most `time_budget_ms`, hold at most `max_rows`
//! rows in any one intermediate result (a traversal's reached pairs, a
//! materialised binding frame, the answer) and reserve at most
//! `memory_bytes` in its execution's memory pool. Hitting one answers
//! [`OmniError::ResourceLimitExceeded`] naming the limit (HTTP 413); the
//! query stops and nothing else is affected.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::protocol::{OmniError, Result};

/// Resource name of the time budget.
pub const QUERY_TIME_MS: &str = "query_time_ms";
/// Resource name of the intermediate-row cap.
pub const QUERY_ROWS: &str = "query_rows";
/// Resource name of the memory cap.
pub const QUERY_MEMORY_BYTES: &str = "query_memory_bytes";

/// The limits a read query runs under; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadLimits {
    /// Wall-clock budget in milliseconds.
    #[serde(default, rename = "timeout_ms")]
    pub time_budget_ms: Option<u64>,
    /// Rows any one intermediate result may hold.
    #[serde(default)]
    pub max_rows: Option<u64>,
    /// Bytes the execution's memory pool may reserve.
    #[serde(default)]
    pub memory_bytes: Option<u64>,
}

impl Default for ReadLimits {
    /// Generous enough for any legitimate query on one machine, finite so
    /// that no query can take the process down: 30 s, 10 million rows,
    /// 2 GiB.
    fn default() -> Self {
        ReadLimits { time_budget_ms: Some(30_000), max_rows: Some(10_000_000), memory_bytes: Some(2 << 30) }
    }
}

impl ReadLimits {
    /// No limit at all.
    pub fn unlimited() -> Self {
        ReadLimits { time_budget_ms: None, max_rows: None, memory_bytes: None }
    }

    /// The tighter of two limit sets, field by field (a request may lower
    /// the server's limits, never raise them).
    pub fn tightened_by(self, other: ReadLimits) -> ReadLimits {
        fn min(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            }
        }
        ReadLimits {
            time_budget_ms: min(self.time_budget_ms, other.time_budget_ms),
            max_rows: min(self.max_rows, other.max_rows),
            memory_bytes: min(self.memory_bytes, other.memory_bytes),
        }
    }

    /// The time budget as a duration.
    pub fn time_budget(&self) -> Option<Duration> {
        self.time_budget_ms.map(Duration::from_millis)
    }

    /// A meter started now.
    pub fn meter(self) -> Meter {
        Meter { limits: self, started: Instant::now(), work: AtomicU64::new(0) }
    }
}

/// One query's running account against its [`ReadLimits`]. `Sync`, so a
/// traversal on a blocking thread and the async executor share it.
#[derive(Debug)]
pub struct Meter {
    limits: ReadLimits,
    started: Instant,
    work: AtomicU64,
}

impl Meter {
    /// The limits this meter enforces.
    pub fn limits(&self) -> ReadLimits {
        self.limits
    }

    /// Units of work (visited states) done so far.
    pub fn work(&self) -> u64 {
        self.work.load(Ordering::Relaxed)
    }

    /// Milliseconds since the query started.
    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Record `units` of work and stop when the time budget is spent.
    pub fn charge_work(&self, units: u64) -> Result<()> {
        self.work.fetch_add(units, Ordering::Relaxed);
        self.check_time()
    }

    /// Fail once the time budget is spent.
    pub fn check_time(&self) -> Result<()> {
        match self.limits.time_budget_ms {
            Some(limit) if self.elapsed_ms() > limit => Err(self.time_exceeded()),
            _ => Ok(()),
        }
    }

    /// The error of a spent time budget.
    pub fn time_exceeded(&self) -> OmniError {
        let limit = self.limits.time_budget_ms.unwrap_or(0);
        OmniError::ResourceLimitExceeded { resource: QUERY_TIME_MS.into(), limit, actual: self.elapsed_ms() }
    }

    /// Fail when an intermediate result of `rows` rows is over the cap.
    pub fn check_rows(&self, rows: u64) -> Result<()> {
        match self.limits.max_rows {
            Some(limit) if rows > limit => {
                Err(OmniError::ResourceLimitExceeded { resource: QUERY_ROWS.into(), limit, actual: rows })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_only_tightens_and_each_limit_is_named() {
        let server = ReadLimits { time_budget_ms: Some(1000), max_rows: None, memory_bytes: Some(10) };
        let asked = ReadLimits { time_budget_ms: Some(5000), max_rows: Some(7), memory_bytes: None };
        let t = server.tightened_by(asked);
        assert_eq!(t, ReadLimits { time_budget_ms: Some(1000), max_rows: Some(7), memory_bytes: Some(10) });
        let m = t.meter();
        assert!(m.check_rows(7).is_ok());
        let err = m.check_rows(8).expect_err("8 > 7");
        assert!(
            matches!(&err, OmniError::ResourceLimitExceeded { resource, limit: 7, actual: 8 } if resource == QUERY_ROWS),
            "{err:?}"
        );
        let spent = ReadLimits { time_budget_ms: Some(0), ..ReadLimits::unlimited() }.meter();
        while spent.elapsed_ms() == 0 {
            std::hint::spin_loop();
        }
        let err = spent.charge_work(1).expect_err("budget spent");
        assert!(err.to_string().contains(QUERY_TIME_MS), "{err}");
        assert_eq!(spent.work(), 1);
        let json: ReadLimits = serde_json::from_str(r#"{"timeout_ms": 50}"#).expect("wire form");
        assert_eq!(json.time_budget_ms, Some(50));
        assert!(serde_json::from_str::<ReadLimits>(r#"{"timeout": 50}"#).is_err());
    }
}
