//! The memory budget a process's caches divide, and how it is split.
//!
//! A long-running daemon must not grow with the commits it serves: every
//! cache it keeps gets a capacity from one budget (`serve --memory-budget`),
//! and what the budget leaves unassigned is headroom for the queries and
//! writes in flight. The split is pure arithmetic, kept here so it is tested
//! without storage.

use serde::Serialize;

use crate::protocol::{OmniError, Result};

/// The budget of a process that sets none (the CLI, an embedder): about
/// 1.75 GiB, which keeps the read index cache at the 512 MiB it had before
/// budgets existed.
pub const DEFAULT_BUDGET: u64 = 1792 << 20;

/// Share of the machine's memory a daemon's default budget takes.
pub const DAEMON_SHARE_PERCENT: u64 = 25;

/// The smallest budget accepted: below it no cache holds one BTree page.
pub const MIN_BUDGET: u64 = 16 << 20;

/// Capacities of every cache, in bytes (or entries where named so).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheCapacities {
    /// The budget they divide.
    pub budget_bytes: u64,
    /// The shared read session's index cache (BTree pages, FTS postings),
    /// its listings share included.
    pub read_index_bytes: u64,
    /// The part of `read_index_bytes` that holds tables' index listings.
    /// Lance keys a listing by dataset version, so each commit a reader
    /// sees adds one and the superseded ones are dead: a small share keeps
    /// the current ones of a few thousand tables and branches, and bounds
    /// the rest.
    pub read_index_listings_bytes: u64,
    /// The shared read session's metadata cache (manifests, file footers).
    pub read_metadata_bytes: u64,
    /// Edge-table adjacencies built for traversals.
    pub adjacency_bytes: u64,
    /// Pinned dataset handles kept for reads (entries).
    pub pinned_handles: u64,
    /// The index cache the writers' and actors' own Lance sessions share
    /// (BTree pages a keyed write looks its keys up in), its listings share
    /// included.
    pub private_index_bytes: u64,
    /// The part of `private_index_bytes` that holds tables' index listings
    /// (per version, as the read session's). A writer reads the listing of
    /// the version it writes on, which the commit before it cached: a small
    /// share holds the current ones. An entry's weight undercounts what it
    /// holds (an empty listing weighs tens of bytes), so a large share would
    /// keep tens of thousands of dead listings.
    pub private_index_listings_bytes: u64,
    /// Each writer's or actor's own Lance session: its metadata cache. An
    /// actor keeps one dataset open across commits, and each new version's
    /// manifest lands here: this bound is what keeps that flat.
    pub private_metadata_bytes: u64,
}

impl CacheCapacities {
    /// Split `budget` (raised to [`MIN_BUDGET`] if smaller): 40% to the
    /// read index cache, 30% to adjacencies and 4% to the writers' shared
    /// index cache, whose entries stay useful across commits (index pages
    /// and adjacencies are keyed by what they index); small fixed shares to the metadata caches, whose entries are
    /// mostly per version (each commit makes new manifests, and the
    /// superseded ones are never read again), so they reach their bound and
    /// stop growing within a minute of steady writes; the rest is headroom
    /// for work in flight.
    pub fn split(budget: u64) -> CacheCapacities {
        let b = budget.max(MIN_BUDGET);
        let pct = |p: u64| b / 100 * p;
        CacheCapacities {
            budget_bytes: b,
            read_index_bytes: pct(40),
            read_index_listings_bytes: (pct(40) / 64).clamp(1 << 20, 16 << 20),
            read_metadata_bytes: (b / 64).clamp(1 << 20, 64 << 20),
            adjacency_bytes: pct(30),
            pinned_handles: (b >> 23).clamp(16, 256),
            private_index_bytes: pct(4).clamp(1 << 20, 256 << 20),
            private_index_listings_bytes: (pct(4) / 256).clamp(64 << 10, 1 << 20),
            private_metadata_bytes: (b / 2048).clamp(256 << 10, 4 << 20),
        }
    }
}

/// Parse a size: plain bytes (`1048576`) or a number with a unit (`512MiB`,
/// `2GiB`, `1.5G`, `64mb`, `100K`); binary units either way.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || OmniError::BadRequest(format!("`{text}` is not a size (e.g. 512MiB, 2GiB, 1073741824)"));
    let value: f64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

/// A daemon's default budget: [`DAEMON_SHARE_PERCENT`] of `machine_bytes`
/// (never below [`MIN_BUDGET`]), or [`DEFAULT_BUDGET`] when unknown.
pub fn daemon_default(machine_bytes: Option<u64>) -> u64 {
    machine_bytes
        .map_or(DEFAULT_BUDGET, |m| ((u128::from(m) * u128::from(DAEMON_SHARE_PERCENT) / 100) as u64).max(MIN_BUDGET))
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
pub fn meminfo_total(meminfo: &str) -> Option<u64> {
    let kib: u64 =
        meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_and_without_units() {
        assert_eq!(parse_size("1048576").ok(), Some(1 << 20));
        assert_eq!(parse_size("512MiB").ok(), Some(512 << 20));
        assert_eq!(parse_size("2GiB").ok(), Some(2 << 30));
        assert_eq!(parse_size("1.5G").ok(), Some(3 << 29));
        assert_eq!(parse_size(" 64mb ").ok(), Some(64 << 20));
        assert_eq!(parse_size("100K").ok(), Some(100 << 10));
        for bad in ["", "MiB", "12 apples", "-5M", "1e999G", "1.2.3M"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_split_stays_within_the_budget() {
        for budget in [MIN_BUDGET, 64 << 20, 1 << 30, DEFAULT_BUDGET, 6 << 30, 64 << 30] {
            let c = CacheCapacities::split(budget);
            let shared = c.read_index_bytes + c.read_metadata_bytes + c.adjacency_bytes + c.private_index_bytes;
            assert!(shared <= budget.max(MIN_BUDGET) / 100 * 85, "{c:?}");
            assert!(c.private_index_bytes <= (256 << 20), "{c:?}");
            assert!(c.private_index_listings_bytes <= c.private_index_bytes / 4, "{c:?}");
            assert!(c.private_metadata_bytes <= (4 << 20), "{c:?}");
            assert!(c.read_metadata_bytes <= (64 << 20), "{c:?}");
            assert!(c.read_index_listings_bytes <= (16 << 20), "{c:?}");
            assert!(c.read_index_listings_bytes <= c.read_index_bytes / 4, "{c:?}");
            assert!((16..=256).contains(&c.pinned_handles), "{c:?}");
        }
        // A budget under the minimum is raised to it, never split below it.
        assert_eq!(CacheCapacities::split(1).budget_bytes, MIN_BUDGET);
    }

    #[test]
    fn the_default_budget_keeps_the_old_index_capacity() {
        let c = CacheCapacities::split(DEFAULT_BUDGET);
        // Before budgets: a 512 MiB read index cache.
        assert!(c.read_index_bytes >= 512 << 20, "{c:?}");
        assert_eq!((c.read_metadata_bytes, c.pinned_handles), (28 << 20, 224));
    }

    #[test]
    fn a_daemon_takes_a_quarter_of_the_machine() {
        assert_eq!(daemon_default(Some(24 << 30)), 6 << 30);
        assert_eq!(daemon_default(Some(1 << 20)), MIN_BUDGET);
        assert_eq!(daemon_default(None), DEFAULT_BUDGET);
        assert_eq!(meminfo_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24576000 << 10));
        assert_eq!(meminfo_total("nothing"), None);
    }
}
