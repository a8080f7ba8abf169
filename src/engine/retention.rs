//! Which history `cleanup` keeps: the retention policy over graph commits,
//! and the versions each dataset must keep for the commits retained.
//!
//! A commit is *retained* when it is among the newest `keep` commits of a
//! live branch's history, or newer than `older_than` (with both policies, a
//! commit is removed only when it is outside both; every branch head is
//! always retained). Time travel works exactly for retained commits: every
//! `__manifest` version a retained commit produced is kept, and so is every
//! table version such a manifest pins. Everything else may go, except each
//! ref's latest version, which Lance never removes.

use std::collections::{BTreeMap, BTreeSet};

use super::branch_name::MAIN;
use super::manifest::CommitRow;
use crate::protocol::{OmniError, Result};

/// How much history cleanup keeps. At least one field is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Keep the newest `keep` commits of every live branch (≥ 1).
    pub keep: Option<usize>,
    /// Keep every commit younger than this many microseconds.
    pub older_than_us: Option<i64>,
}

impl RetentionPolicy {
    /// A checked policy from the user's `--keep` and `--older-than`.
    pub fn new(keep: Option<usize>, older_than: Option<&str>) -> Result<RetentionPolicy> {
        if keep.is_none() && older_than.is_none() {
            return Err(OmniError::BadRequest(
                "cleanup needs a retention policy: --keep N and/or --older-than DURATION (e.g. 7d)".into(),
            ));
        }
        if keep == Some(0) {
            return Err(OmniError::BadRequest("--keep must be at least 1 (the head is always kept)".into()));
        }
        let older_than_us = older_than.map(parse_duration_us).transpose()?;
        Ok(RetentionPolicy { keep, older_than_us })
    }

    /// The commits of one branch's `history` (newest first, as
    /// [`super::manifest::ManifestState::history`] orders it) this policy
    /// retains at wall-clock time `now_us`.
    pub fn retained<'a>(&self, history: &[&'a CommitRow], now_us: i64) -> Vec<&'a CommitRow> {
        history
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                let by_count = self.keep.is_some_and(|k| *i < k);
                let by_age = self.older_than_us.is_some_and(|d| c.created_at_us >= now_us.saturating_sub(d));
                *i == 0 || by_count || by_age
            })
            .map(|(_, c)| *c)
            .collect()
    }
}

/// Parse `30s`, `15m`, `12h`, `7d` or `2w` into microseconds.
pub fn parse_duration_us(text: &str) -> Result<i64> {
    let bad = || OmniError::BadRequest(format!("duration `{text}`: expected a number and a unit s|m|h|d|w (e.g. 7d)"));
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (number, unit) = text.split_at(split);
    let n: i64 = number.parse().map_err(|_| bad())?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        "w" => 604_800,
        _ => return Err(bad()),
    };
    n.checked_mul(seconds).and_then(|s| s.checked_mul(1_000_000)).ok_or_else(bad)
}

/// One Lance ref of a dataset: its path under the graph root and its native
/// branch (`None` = main).
pub type DatasetRef = (String, Option<String>);

/// Versions that must survive cleanup, per dataset ref.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeepSet {
    refs: BTreeMap<DatasetRef, BTreeSet<u64>>,
}

/// The key of `location` on `branch`: main is `None` however it is named.
fn ref_key(location: &str, branch: Option<&str>) -> DatasetRef {
    (location.to_string(), branch.filter(|b| *b != MAIN).map(str::to_string))
}

impl KeepSet {
    /// Record that `version` of `location` on `branch` is still read.
    pub fn keep(&mut self, location: &str, branch: Option<&str>, version: u64) {
        self.refs.entry(ref_key(location, branch)).or_default().insert(version);
    }

    /// Whether anything retained reads `location` on `branch`.
    pub fn reads(&self, location: &str, branch: Option<&str>) -> bool {
        self.refs.contains_key(&ref_key(location, branch))
    }

    /// The versions of `existing` (one ref's versions) that may be removed:
    /// not kept, and older than `latest`.
    pub fn removable(&self, location: &str, branch: Option<&str>, existing: &[u64], latest: u64) -> Vec<u64> {
        let kept = self.refs.get(&ref_key(location, branch));
        existing.iter().copied().filter(|v| *v < latest && !kept.is_some_and(|k| k.contains(v))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(id: &str, at: i64) -> CommitRow {
        CommitRow {
            commit_id: id.into(),
            parent: None,
            merged_parent: None,
            actor: None,
            created_at_us: at,
            manifest_version: 1,
            branch: "main".into(),
            schema_change: None,
            operation: None,
            source_commit_id: None,
        }
    }

    #[test]
    fn a_policy_is_required_and_keep_is_positive() {
        assert!(matches!(RetentionPolicy::new(None, None), Err(OmniError::BadRequest(_))));
        assert!(matches!(RetentionPolicy::new(Some(0), None), Err(OmniError::BadRequest(_))));
        assert!(matches!(RetentionPolicy::new(None, Some("7x")), Err(OmniError::BadRequest(_))));
        assert!(matches!(RetentionPolicy::new(None, Some("d")), Err(OmniError::BadRequest(_))));
        assert_eq!(RetentionPolicy::new(None, Some("2w")).unwrap().older_than_us, Some(1_209_600_000_000));
    }

    #[test]
    fn durations_parse_every_unit() {
        assert_eq!(parse_duration_us("30s").unwrap(), 30_000_000);
        assert_eq!(parse_duration_us("15m").unwrap(), 900_000_000);
        assert_eq!(parse_duration_us("12h").unwrap(), 43_200_000_000);
        assert_eq!(parse_duration_us("7d").unwrap(), 604_800_000_000);
        assert!(parse_duration_us("99999999999999999w").is_err());
    }

    #[test]
    fn with_both_policies_a_commit_goes_only_when_outside_both() {
        let rows: Vec<CommitRow> = (0..6).map(|i| commit(&format!("c{i}"), 100 - i * 10)).collect();
        let history: Vec<&CommitRow> = rows.iter().collect();
        let ids =
            |p: RetentionPolicy| p.retained(&history, 100).iter().map(|c| c.commit_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(RetentionPolicy { keep: Some(2), older_than_us: None }), ["c0", "c1"]);
        // Younger than 35 µs: c0..c3.
        assert_eq!(ids(RetentionPolicy { keep: None, older_than_us: Some(35) }), ["c0", "c1", "c2", "c3"]);
        assert_eq!(ids(RetentionPolicy { keep: Some(5), older_than_us: Some(15) }), ["c0", "c1", "c2", "c3", "c4"]);
        // The head survives any age limit.
        assert_eq!(ids(RetentionPolicy { keep: None, older_than_us: Some(0) }), ["c0"]);
    }

    #[test]
    fn removable_spares_kept_versions_and_the_latest() {
        let mut keep = KeepSet::default();
        keep.keep("nodes/a", Some("main"), 3);
        keep.keep("nodes/a", Some("b"), 2);
        assert_eq!(keep.removable("nodes/a", None, &[1, 2, 3, 4, 5], 5), [1, 2, 4]);
        assert_eq!(keep.removable("nodes/a", Some("b"), &[2, 3, 4], 4), [3]);
        assert_eq!(keep.removable("nodes/x", None, &[1, 2], 2), [1]);
        assert!(keep.reads("nodes/a", None) && keep.reads("nodes/a", Some("b")) && !keep.reads("nodes/a", Some("c")));
    }
}
