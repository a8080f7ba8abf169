//! Folding `__manifest` rows into the visible graph state.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::rows::{CommitRow, ManifestRow, TableReg};
use crate::protocol::{OmniError, Result};

/// One visible table: its registration plus the newest live version pointer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TableEntry {
    /// Stable table id.
    pub table_id: String,
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Dataset path relative to the root.
    pub location: String,
    /// Pinned Lance version.
    pub version: u64,
    /// Native Lance branch holding the pinned version (`None` = main).
    pub branch: Option<String>,
    /// Live rows at the pinned version.
    pub row_count: u64,
}

/// The state visible on one `__manifest` branch at one version.
#[derive(Debug, Clone, Default)]
pub struct ManifestState {
    /// Visible tables by key, sorted.
    pub tables: BTreeMap<String, TableEntry>,
    /// Graph branch → head commit id, as recorded on this manifest branch.
    pub heads: BTreeMap<String, String>,
    /// Every commit reachable in this manifest branch, by id.
    pub commits: HashMap<String, CommitRow>,
    /// Registrations by table id (including tombstoned tables).
    pub registrations: HashMap<String, TableReg>,
    /// Highest version pointer (or tombstone) recorded per table id.
    pub latest_versions: HashMap<String, u64>,
}

impl ManifestState {
    /// Fold decoded rows: newest version per table, minus tombstones.
    pub fn fold(rows: impl IntoIterator<Item = ManifestRow>) -> Result<ManifestState> {
        let mut state = ManifestState::default();
        let mut newest: HashMap<String, (u64, Option<String>, u64)> = HashMap::new();
        let mut tombstones: HashMap<String, u64> = HashMap::new();
        for row in rows {
            match row {
                ManifestRow::Table(t) => {
                    state.registrations.insert(t.table_id.clone(), t);
                }
                ManifestRow::TableVersion(v) => {
                    let slot = newest.entry(v.table_id).or_insert((0, None, 0));
                    if v.version >= slot.0 {
                        *slot = (v.version, v.branch, v.row_count);
                    }
                }
                ManifestRow::Tombstone(t) => {
                    let slot = tombstones.entry(t.table_id).or_insert(0);
                    *slot = (*slot).max(t.version);
                }
                ManifestRow::Commit(c) => {
                    state.commits.insert(c.commit_id.clone(), c);
                }
                ManifestRow::Head(h) => {
                    state.heads.insert(h.branch, h.head_commit_id);
                }
            }
        }
        for (table_id, (version, branch, row_count)) in newest {
            let dropped = tombstones.get(&table_id).is_some_and(|t| *t >= version);
            let latest = tombstones.get(&table_id).copied().unwrap_or(0).max(version);
            state.latest_versions.insert(table_id.clone(), latest);
            if dropped {
                continue;
            }
            let reg = state.registrations.get(&table_id).ok_or_else(|| {
                OmniError::Internal(format!("__manifest has versions for unregistered table {table_id}"))
            })?;
            let entry = TableEntry {
                table_id: table_id.clone(),
                table_key: reg.table_key.clone(),
                location: reg.location.clone(),
                version,
                branch,
                row_count,
            };
            if let Some(other) = state.tables.insert(reg.table_key.clone(), entry) {
                return Err(OmniError::Internal(format!(
                    "__manifest binds {} to two live tables ({} and {table_id})",
                    reg.table_key, other.table_id
                )));
            }
        }
        Ok(state)
    }

    /// The head commit id of `branch` as recorded here.
    pub fn head(&self, branch: &str) -> Option<&str> {
        self.heads.get(branch).map(String::as_str)
    }

    /// The effective head of `branch`: its own head row, or, on a fresh branch
    /// without one, the newest inherited commit.
    pub fn effective_head(&self, branch: &str) -> Option<&CommitRow> {
        match self.head(branch) {
            Some(id) => self.commits.get(id),
            None => self.commits.values().max_by(|a, b| {
                (a.manifest_version, a.created_at_us, &a.commit_id).cmp(&(
                    b.manifest_version,
                    b.created_at_us,
                    &b.commit_id,
                ))
            }),
        }
    }

    /// The accepted-schema identity a schema apply among the ancestors of
    /// `commit_id` (itself included) made current: the newest one's. `None`
    /// when no apply precedes it.
    pub fn schema_applied_at(&self, commit_id: &str) -> Option<String> {
        let applied = self.history(commit_id).into_iter().filter_map(|c| c.schema_change.as_ref().map(|s| (c, s)));
        applied.max_by_key(|(c, _)| c.manifest_version).map(|(_, s)| s.to.clone())
    }

    /// The schema the graph was created with, if an apply recorded here
    /// replaced it (the oldest apply's `from`).
    pub fn original_schema(&self) -> Option<String> {
        let applies = self.commits.values().filter_map(|c| c.schema_change.as_ref().map(|s| (c, s)));
        applies.min_by_key(|(c, _)| c.manifest_version).map(|(_, s)| s.from.clone())
    }

    /// History reachable from `head` through parents and merged parents,
    /// newest first (by manifest version, then time, then id).
    pub fn history(&self, head: &str) -> Vec<&CommitRow> {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![head.to_string()];
        let mut out = Vec::new();
        while let Some(id) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(c) = self.commits.get(&id) {
                stack.extend(c.parent.iter().cloned());
                stack.extend(c.merged_parent.iter().cloned());
                out.push(c);
            }
        }
        out.sort_by(|a, b| {
            (b.manifest_version, b.created_at_us, &b.commit_id).cmp(&(
                a.manifest_version,
                a.created_at_us,
                &a.commit_id,
            ))
        });
        out
    }
}
