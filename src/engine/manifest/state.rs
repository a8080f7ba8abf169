//! Folding `__manifest` rows into the visible graph state.
//!
//! The manifest is append-only: a publish appends its rows and nothing is
//! rewritten, so the fold must not depend on scan order. A branch's head is
//! the head row written at the highest manifest version (a reset's row
//! names an older commit, yet is newer); a table's
//! registration is the one with the highest `since`; its pointer is the
//! highest version, unless a tombstone at or above it dropped the table.
//! [`ManifestState::apply`] folds more rows into a state incrementally, so a
//! publish costs what it appends, not what the history holds.
//!
//! A state is *complete* (every commit of the history loaded) or a *head
//! state* restored from a publish's [`HeadCheckpoint`]: everything a read or
//! a write needs (tables, heads, the head commits), without the commit log.
//! History, merge bases and recovery's visibility checks ask for a complete
//! state ([`ManifestState::commits`] refuses a head state).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::rows::{CommitRow, HeadMoveRow, ManifestRow, TableReg, TableVersionRow};
use crate::protocol::{OmniError, Result};
/// The head-move operation of a soft delete: the branch stays on storage,
/// hidden, with its head where it was.
pub const DELETE_MOVE: &str = "delete";
/// The head-move operation that brings a soft-deleted branch back.
pub const RESTORE_MOVE: &str = "restore";
/// The head moves that change whether a branch is visible.
const LIFECYCLE: [&str; 2] = [DELETE_MOVE, RESTORE_MOVE];

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
    /// Graph branch → the manifest version its head row was written at
    /// (absent for rows from before that was recorded).
    head_at: BTreeMap<String, u64>,
    /// Head moves by operation id (a head state: those since its restore).
    moves: HashMap<String, HeadMoveRow>,
    /// Graph branch → its newest delete or restore (a soft-deleted branch
    /// stays on storage, hidden, until it is restored or purged).
    lifecycle: BTreeMap<String, HeadMoveRow>,
    /// Every commit reachable in this manifest branch, by id (a head state:
    /// only the head commits, and those published since it was restored).
    commits: HashMap<String, CommitRow>,
    /// Whether `commits` holds the whole history.
    complete: bool,
    /// Registrations by table id (including tombstoned tables).
    pub registrations: HashMap<String, TableReg>,
    /// Highest version pointer (or tombstone) recorded per table id.
    pub latest_versions: HashMap<String, u64>,
    /// Per table id: `since` of the registration kept.
    registered_since: HashMap<String, u64>,
    /// Per table id: the highest version pointer.
    newest: HashMap<String, TableVersionRow>,
    /// Per table id: the highest tombstone version.
    tombstones: HashMap<String, u64>,
    /// Ids of the commits that applied a schema (few; most graphs have none,
    /// and then binding a catalog costs no walk of the history).
    applies: Vec<String>,
    /// On a head state: per restored head commit, what its ancestors' newest
    /// schema apply made current (see [`ManifestState::applied_at`]).
    restored_schemas: HashMap<String, Applied>,
    /// On a head state: the schema the graph was created with, when an
    /// apply replaced it.
    restored_original: Option<String>,
}

/// A schema apply's effect as a commit's ancestry sees it: the schema
/// identity it made current, and the manifest version it landed at (the
/// newest apply wins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The accepted-schema identity the apply made current.
    pub identity: String,
    /// The apply commit's manifest version.
    pub manifest_version: u64,
}

impl ManifestState {
    /// Fold decoded rows: newest version per table, minus tombstones.
    pub fn fold(rows: impl IntoIterator<Item = ManifestRow>) -> Result<ManifestState> {
        let mut state = ManifestState { complete: true, ..ManifestState::default() };
        state.apply(rows)?;
        Ok(state)
    }

    /// Whether every commit of the history is loaded (see the module doc).
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Every commit of the history, by id; refused on a head state, whose
    /// absence of a commit proves nothing.
    pub fn commits(&self) -> Result<&HashMap<String, CommitRow>> {
        if !self.complete {
            return Err(OmniError::Internal("the commit history of this manifest view was not loaded".into()));
        }
        Ok(&self.commits)
    }

    /// Commits this state holds (all of them when complete).
    pub fn held_commits(&self) -> usize {
        self.commits.len()
    }

    /// This state as an open would restore it from its own checkpoint: only
    /// the head commits, whatever history was loaded or published since.
    /// A long-lived holder (a branch actor) keeps its cached state flat with
    /// it, since each publish clones the state it extends. `None` when the
    /// state has no checkpoint to restore from.
    pub fn rebased(&self) -> Option<Result<ManifestState>> {
        self.checkpoint().map(ManifestState::restore)
    }

    /// A commit this state holds: any commit when complete, else a head
    /// commit or one published since the state was restored.
    pub fn commit(&self, id: &str) -> Option<&CommitRow> {
        self.commits.get(id)
    }

    /// The checkpoint a publish records beside its rows, so that an open
    /// restores this state without folding the history. A recorded schema
    /// apply is carried as what each head binds (binding a catalog otherwise
    /// walks the ancestry, which a head state does not hold). `None` when a
    /// head's binding cannot be known here.
    pub fn checkpoint(&self) -> Option<HeadCheckpoint> {
        let mut head_schemas = BTreeMap::new();
        if !self.applies.is_empty() || !self.restored_schemas.is_empty() {
            for id in self.heads.values() {
                self.commits.get(id)?;
                if let Some(applied) = self.applied_at(id) {
                    head_schemas.insert(id.clone(), applied);
                }
            }
        }
        // Sorted, so one state always encodes to the same checkpoint.
        let ids: BTreeSet<&String> = self.heads.values().collect();
        let head_commits = ids.into_iter().filter_map(|id| self.commits.get(id).cloned()).collect();
        let mut registrations: Vec<(TableReg, u64)> = self
            .registrations
            .iter()
            .map(|(id, reg)| (reg.clone(), self.registered_since.get(id).copied().unwrap_or(0)))
            .collect();
        registrations.sort_by(|a, b| a.0.table_id.cmp(&b.0.table_id));
        let mut newest: Vec<TableVersionRow> = self.newest.values().cloned().collect();
        newest.sort_by(|a, b| a.table_id.cmp(&b.table_id));
        Some(HeadCheckpoint {
            registrations,
            newest,
            tombstones: self.tombstones.clone(),
            latest_versions: self.latest_versions.clone(),
            heads: self.heads.clone(),
            head_at: self.head_at.clone(),
            lifecycle: self.lifecycle.clone(),
            head_commits,
            head_schemas,
            original_schema: self.original_schema(),
        })
    }

    /// The head state a checkpoint recorded (see [`ManifestState::checkpoint`]).
    pub fn restore(cp: HeadCheckpoint) -> Result<ManifestState> {
        let mut state = ManifestState::default();
        for (reg, since) in cp.registrations {
            state.registered_since.insert(reg.table_id.clone(), since);
            state.registrations.insert(reg.table_id.clone(), reg);
        }
        state.newest = cp.newest.into_iter().map(|v| (v.table_id.clone(), v)).collect();
        state.tombstones = cp.tombstones;
        state.latest_versions = cp.latest_versions;
        state.commits = cp.head_commits.into_iter().map(|c| (c.commit_id.clone(), c)).collect();
        if let Some((branch, id)) = cp.heads.iter().find(|(_, id)| !state.commits.contains_key(*id)) {
            return Err(OmniError::Internal(format!("__manifest checkpoint lacks the head commit {id} of `{branch}`")));
        }
        state.heads = cp.heads;
        state.head_at = cp.head_at;
        state.lifecycle = cp.lifecycle;
        state.restored_schemas = cp.head_schemas.into_iter().collect();
        state.restored_original = cp.original_schema;
        let touched: BTreeSet<String> =
            state.registrations.keys().chain(state.newest.keys()).chain(state.tombstones.keys()).cloned().collect();
        state.rebind(&touched)?;
        Ok(state)
    }

    /// Fold `rows` into this state: the state of the old rows plus these, in
    /// time proportional to the new rows (and the tables they touch).
    pub fn apply(&mut self, rows: impl IntoIterator<Item = ManifestRow>) -> Result<()> {
        let mut touched = BTreeSet::new();
        let mut heads = Vec::new();
        for row in rows {
            match row {
                ManifestRow::Table { reg, since } => {
                    let kept = self.registered_since.get(&reg.table_id).copied();
                    if kept.is_none_or(|k| since >= k) {
                        touched.insert(reg.table_id.clone());
                        self.registered_since.insert(reg.table_id.clone(), since);
                        self.registrations.insert(reg.table_id.clone(), reg);
                    }
                }
                ManifestRow::TableVersion(v) => {
                    if self.newest.get(&v.table_id).is_none_or(|n| v.version >= n.version) {
                        touched.insert(v.table_id.clone());
                        self.newest.insert(v.table_id.clone(), v);
                    }
                }
                ManifestRow::Tombstone(t) => {
                    let slot = self.tombstones.entry(t.table_id.clone()).or_insert(0);
                    *slot = (*slot).max(t.version);
                    touched.insert(t.table_id);
                }
                ManifestRow::Commit(c) => {
                    if c.schema_change.is_some() && !self.commits.contains_key(&c.commit_id) {
                        self.applies.push(c.commit_id.clone());
                    }
                    self.commits.insert(c.commit_id.clone(), c);
                }
                ManifestRow::Head(h) => heads.push(h),
                ManifestRow::HeadMove(m) => {
                    if LIFECYCLE.contains(&m.operation.as_str())
                        && self.lifecycle.get(&m.branch).is_none_or(|l| m.manifest_version >= l.manifest_version)
                    {
                        self.lifecycle.insert(m.branch.clone(), m.clone());
                    }
                    self.moves.insert(m.operation_id.clone(), m);
                }
            }
        }
        // Heads after commits: a head row's rank is the version it was
        // written at, or (on older rows) its commit's, which may be in the
        // same rows.
        for h in heads {
            let rank = |id: &str, at: Option<u64>| at.or_else(|| self.commits.get(id).map(|c| c.manifest_version));
            let current = self.heads.get(&h.branch).map(|cur| rank(cur, self.head_at.get(&h.branch).copied()));
            if current.is_none_or(|cur| rank(&h.head_commit_id, h.at) >= cur) {
                match h.at {
                    Some(at) => self.head_at.insert(h.branch.clone(), at),
                    None => self.head_at.remove(&h.branch),
                };
                self.heads.insert(h.branch, h.head_commit_id);
            }
        }
        self.rebind(&touched)
    }

    /// Recompute the visible entries of the `touched` table ids: unbind them
    /// all first, so a rename and a reuse of its old key in one apply never
    /// look like two live tables on one key.
    fn rebind(&mut self, touched: &BTreeSet<String>) -> Result<()> {
        self.tables.retain(|_, e| !touched.contains(&e.table_id));
        for table_id in touched {
            let tomb = self.tombstones.get(table_id).copied().unwrap_or(0);
            let Some(v) = self.newest.get(table_id) else {
                if tomb > 0 {
                    self.latest_versions.insert(table_id.clone(), tomb);
                }
                continue;
            };
            self.latest_versions.insert(table_id.clone(), tomb.max(v.version));
            if tomb >= v.version {
                continue;
            }
            let reg = self.registrations.get(table_id).ok_or_else(|| {
                OmniError::Internal(format!("__manifest has versions for unregistered table {table_id}"))
            })?;
            let entry = TableEntry {
                table_id: table_id.clone(),
                table_key: reg.table_key.clone(),
                location: reg.location.clone(),
                version: v.version,
                branch: v.branch.clone(),
                row_count: v.row_count,
            };
            if let Some(other) = self.tables.insert(reg.table_key.clone(), entry) {
                return Err(OmniError::Internal(format!(
                    "__manifest binds {} to two live tables ({} and {table_id})",
                    reg.table_key, other.table_id
                )));
            }
        }
        Ok(())
    }

    /// The head move an operation made, if this state holds it (a complete
    /// state holds every one).
    pub fn head_move(&self, operation_id: &str) -> Option<&HeadMoveRow> {
        self.moves.get(operation_id)
    }

    /// Every head move this state holds.
    pub fn head_moves(&self) -> impl Iterator<Item = &HeadMoveRow> {
        self.moves.values()
    }

    /// The delete that hides `branch`, if its newest lifecycle move is one
    /// (see `docs/undo.md`, "Branch restore").
    pub fn deleted(&self, branch: &str) -> Option<&HeadMoveRow> {
        self.lifecycle.get(branch).filter(|m| m.operation == DELETE_MOVE)
    }

    /// The manifest version `branch`'s head row was written at, when
    /// recorded (after a head move it is newer than the head commit's).
    pub fn head_written_at(&self, branch: &str) -> Option<u64> {
        self.head_at.get(branch).copied()
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

    /// The schema identity `commit_id` was written under: the target of the
    /// nearest schema apply on its first-parent line (itself included), a
    /// branch's own history. `None` when no apply precedes it (the graph's
    /// original schema). A merge takes its target's schema, so its first
    /// parent decides; the other side's applies are not its schema.
    pub fn schema_applied_at(&self, commit_id: &str) -> Option<String> {
        self.applied_at(commit_id).map(|a| a.identity)
    }

    /// [`Self::schema_applied_at`] with the apply's manifest version. On a
    /// head state the walk stops at the restored heads, whose recorded
    /// binding summarises everything before them.
    fn applied_at(&self, commit_id: &str) -> Option<Applied> {
        if self.applies.is_empty() && self.restored_schemas.is_empty() {
            return None;
        }
        let mut next = Some(commit_id);
        // A first-parent line has no cycle; the bound only guards against a
        // corrupt one.
        for _ in 0..=self.commits.len() {
            let c = self.commits.get(next?)?;
            if let Some(s) = &c.schema_change {
                return Some(Applied { identity: s.to.clone(), manifest_version: c.manifest_version });
            }
            if let Some(restored) = self.restored_schemas.get(&c.commit_id) {
                return Some(restored.clone());
            }
            next = c.parent.as_deref();
        }
        None
    }

    /// The schema the graph was created with, if an apply recorded here
    /// replaced it (the oldest apply's `from`).
    pub fn original_schema(&self) -> Option<String> {
        if let Some(original) = &self.restored_original {
            return Some(original.clone());
        }
        let applies = self.applies.iter().filter_map(|id| self.commits.get(id));
        let oldest =
            applies.filter_map(|c| c.schema_change.as_ref().map(|s| (c, s))).min_by_key(|(c, _)| c.manifest_version);
        oldest.map(|(_, s)| s.from.clone())
    }

    /// Every commit reachable from `head` through parents and merged
    /// parents, itself included, in no particular order.
    fn ancestors<'s>(&'s self, head: &str) -> impl Iterator<Item = &'s CommitRow> {
        let mut seen = std::collections::HashSet::new();
        let mut stack = vec![head.to_string()];
        std::iter::from_fn(move || {
            while let Some(id) = stack.pop() {
                if !seen.insert(id.clone()) {
                    continue;
                }
                if let Some(c) = self.commits.get(&id) {
                    stack.extend(c.parent.iter().cloned());
                    stack.extend(c.merged_parent.iter().cloned());
                    return Some(c);
                }
            }
            None
        })
    }

    /// History reachable from `head` through parents and merged parents,
    /// newest first (by manifest version, then time, then id). Refused on a
    /// head state.
    pub fn history(&self, head: &str) -> Result<Vec<&CommitRow>> {
        self.commits()?;
        let mut out: Vec<&CommitRow> = self.ancestors(head).collect();
        out.sort_by(|a, b| {
            (b.manifest_version, b.created_at_us, &b.commit_id).cmp(&(
                a.manifest_version,
                a.created_at_us,
                &a.commit_id,
            ))
        });
        Ok(out)
    }
}

/// The head state of one manifest version, recorded in the properties of
/// the publish transaction that produced it ([`CHECKPOINT_PROPERTY`]): what
/// the fold of every row up to it gives, minus the commit log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadCheckpoint {
    /// Every registration kept, with its `since`.
    registrations: Vec<(TableReg, u64)>,
    /// The highest version pointer per table id.
    newest: Vec<TableVersionRow>,
    /// The highest tombstone version per table id.
    tombstones: HashMap<String, u64>,
    /// Highest version pointer (or tombstone) per table id.
    latest_versions: HashMap<String, u64>,
    /// Graph branch → head commit id.
    heads: BTreeMap<String, String>,
    /// Graph branch → the version its head row was written at.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    head_at: BTreeMap<String, u64>,
    /// Graph branch → its newest delete or restore.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    lifecycle: BTreeMap<String, HeadMoveRow>,
    /// The commits `heads` names.
    head_commits: Vec<CommitRow>,
    /// Per head commit: what its ancestors' newest schema apply made current.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    head_schemas: BTreeMap<String, Applied>,
    /// The schema the graph was created with, when an apply replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    original_schema: Option<String>,
}

/// The transaction property holding a publish's [`HeadCheckpoint`] (JSON).
const CHECKPOINT_PROPERTY: &str = "omnigraph.head_checkpoint.v1";

/// The property of a checkpoint that records a schema apply: a name of its
/// own, so a binary that knows only [`CHECKPOINT_PROPERTY`] (and would bind
/// every head to the current schema) folds the rows instead.
const CHECKPOINT_WITH_SCHEMAS_PROPERTY: &str = "omnigraph.head_checkpoint.v2";

impl HeadCheckpoint {
    /// The transaction properties recording this checkpoint.
    pub fn to_properties(&self) -> Result<HashMap<String, String>> {
        let json =
            serde_json::to_string(self).map_err(|e| OmniError::Internal(format!("encoding a checkpoint: {e}")))?;
        let name = if self.head_schemas.is_empty() && self.original_schema.is_none() {
            CHECKPOINT_PROPERTY
        } else {
            CHECKPOINT_WITH_SCHEMAS_PROPERTY
        };
        Ok(HashMap::from([(name.to_string(), json)]))
    }

    /// The checkpoint a transaction's `properties` record, if any.
    pub fn from_properties(properties: &HashMap<String, String>) -> Result<Option<HeadCheckpoint>> {
        let json = properties.get(CHECKPOINT_WITH_SCHEMAS_PROPERTY).or_else(|| properties.get(CHECKPOINT_PROPERTY));
        let Some(json) = json else { return Ok(None) };
        serde_json::from_str(json)
            .map(Some)
            .map_err(|e| OmniError::Internal(format!("__manifest has an unreadable checkpoint: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::manifest::rows::{HeadRow, SchemaChange, TombstoneRow};

    fn reg(id: &str, key: &str, since: u64) -> ManifestRow {
        let reg = TableReg { table_id: id.into(), table_key: key.into(), location: format!("nodes/{id}") };
        ManifestRow::Table { reg, since }
    }

    fn version(id: &str, version: u64) -> ManifestRow {
        ManifestRow::TableVersion(TableVersionRow { table_id: id.into(), version, branch: None, row_count: version })
    }

    fn commit(id: &str, parent: Option<&str>, manifest_version: u64) -> ManifestRow {
        ManifestRow::Commit(CommitRow {
            commit_id: id.into(),
            parent: parent.map(str::to_string),
            merged_parent: None,
            actor: None,
            created_at_us: 0,
            manifest_version,
            branch: "main".into(),
            schema_change: None,
            operation: None,
            source_commit_id: None,
        })
    }

    fn head(id: &str) -> ManifestRow {
        ManifestRow::Head(HeadRow { branch: "main".into(), head_commit_id: id.into(), at: None })
    }

    /// Three appended publishes: genesis, a write, and a schema apply that
    /// renames n1 to `node:People`, reuses `node:Person` for n2, drops n3.
    fn history() -> Vec<Vec<ManifestRow>> {
        vec![
            vec![reg("n1", "node:Person", 1), version("n1", 1), reg("n3", "node:Pet", 1), version("n3", 1)]
                .into_iter()
                .chain([commit("c1", None, 1), head("c1")])
                .collect(),
            vec![version("n1", 2), commit("c2", Some("c1"), 2), head("c2")],
            vec![
                reg("n1", "node:People", 3),
                reg("n2", "node:Person", 3),
                version("n2", 1),
                ManifestRow::Tombstone(TombstoneRow { table_id: "n3".into(), version: 2 }),
                commit("c3", Some("c2"), 3),
                head("c3"),
            ],
        ]
    }

    fn visible(state: &ManifestState) -> Vec<(String, String, u64)> {
        state.tables.values().map(|e| (e.table_key.clone(), e.table_id.clone(), e.version)).collect()
    }

    #[test]
    fn appended_rows_fold_to_the_newest_head_registration_and_pointer_in_any_order() {
        let rows: Vec<ManifestRow> = history().into_iter().flatten().collect();
        let expected = vec![("node:People".to_string(), "n1".to_string(), 2), ("node:Person".into(), "n2".into(), 1)];
        let forward = ManifestState::fold(rows.clone()).expect("fold");
        assert_eq!(forward.head("main"), Some("c3"));
        assert_eq!(visible(&forward), expected);
        assert_eq!(forward.latest_versions.get("n3"), Some(&2));
        // Scan order is not part of the contract: reversed rows fold the same.
        let backward = ManifestState::fold(rows.into_iter().rev()).expect("fold reversed");
        assert_eq!(backward.head("main"), Some("c3"));
        assert_eq!(visible(&backward), expected);
        assert_eq!(backward.registrations.get("n1").map(|r| r.table_key.as_str()), Some("node:People"));
    }

    /// A head row written later wins even when it names an older commit (a
    /// reset), in any scan order, through a checkpoint, and until a newer
    /// commit's row; the head move is kept by its operation id.
    #[test]
    fn a_later_head_row_moves_the_head_back() {
        let at = |id: &str, v: u64| {
            ManifestRow::Head(HeadRow { branch: "main".into(), head_commit_id: id.into(), at: Some(v) })
        };
        let moved = ManifestRow::HeadMove(crate::engine::manifest::rows::HeadMoveRow {
            operation_id: "op".into(),
            branch: "main".into(),
            from: Some("c3".into()),
            to: "c1".into(),
            operation: "reset".into(),
            actor: None,
            at_us: 0,
            manifest_version: 4,
        });
        let mut rows: Vec<ManifestRow> = history().into_iter().flatten().collect();
        rows.extend([version("n1", 5), at("c1", 4), moved]);
        for order in [rows.clone(), rows.iter().rev().cloned().collect()] {
            let state = ManifestState::fold(order).expect("fold");
            assert_eq!(state.head("main"), Some("c1"));
            assert_eq!(state.head_move("op").map(|m| m.to.as_str()), Some("c1"));
            let cp = state.checkpoint().expect("a checkpoint");
            let restored = ManifestState::restore(cp).expect("restore");
            assert_eq!(restored.effective_head("main").map(|c| c.commit_id.as_str()), Some("c1"));
        }
        rows.extend([commit("c5", Some("c1"), 5), at("c5", 5)]);
        let state = ManifestState::fold(rows.into_iter().rev()).expect("fold");
        assert_eq!(state.head("main"), Some("c5"), "a newer commit's row wins again");
    }

    #[test]
    fn the_newest_delete_or_restore_decides_whether_a_branch_is_hidden() {
        let life = |op: &str, operation: &str, v: u64| {
            ManifestRow::HeadMove(crate::engine::manifest::rows::HeadMoveRow {
                operation_id: op.into(),
                branch: "b".into(),
                from: Some("c3".into()),
                to: "c3".into(),
                operation: operation.into(),
                actor: None,
                at_us: 0,
                manifest_version: v,
            })
        };
        let mut rows: Vec<ManifestRow> = history().into_iter().flatten().collect();
        rows.push(life("d1", DELETE_MOVE, 4));
        for order in [rows.clone(), rows.iter().rev().cloned().collect()] {
            let state = ManifestState::fold(order).expect("fold");
            assert_eq!(state.deleted("b").map(|m| m.operation_id.as_str()), Some("d1"));
            assert!(state.deleted("main").is_none());
            let restored = ManifestState::restore(state.checkpoint().expect("checkpoint")).expect("restore");
            assert!(restored.deleted("b").is_some(), "a head state keeps the delete");
        }
        rows.extend([life("r1", RESTORE_MOVE, 5), life("x", "reset", 6)]);
        for order in [rows.clone(), rows.iter().rev().cloned().collect()] {
            let state = ManifestState::fold(order).expect("fold");
            assert!(state.deleted("b").is_none(), "the newer restore wins; a reset changes nothing");
        }
    }

    #[test]
    fn applying_each_publish_equals_folding_everything() {
        let mut incremental = ManifestState::default();
        for publish in history() {
            incremental.apply(publish).expect("apply");
        }
        let whole = ManifestState::fold(history().into_iter().flatten()).expect("fold");
        assert_eq!(visible(&incremental), visible(&whole));
        assert_eq!(incremental.heads, whole.heads);
        assert_eq!(incremental.latest_versions, whole.latest_versions);
        assert_eq!(incremental.commits.len(), 3);
    }

    #[test]
    fn a_restored_checkpoint_reads_and_publishes_like_the_full_fold() {
        let publishes = history();
        let (older, last) = publishes.split_at(2);
        let whole = ManifestState::fold(older.iter().flatten().cloned()).expect("fold");
        let props = whole.checkpoint().expect("no apply: a checkpoint").to_properties().expect("encode");
        let decoded = HeadCheckpoint::from_properties(&props).expect("decode").expect("recorded");
        let mut restored = ManifestState::restore(decoded).expect("restore");
        assert!(!restored.is_complete() && whole.is_complete());
        assert!(restored.commits().is_err(), "a head state must refuse history questions");
        assert!(restored.history("c2").is_err());
        assert_eq!(visible(&restored), visible(&whole));
        assert_eq!(restored.latest_versions, whole.latest_versions);
        assert_eq!(restored.effective_head("main").map(|c| &c.commit_id), Some(&"c2".to_string()));
        assert!(restored.commit("c1").is_none(), "only head commits are restored");
        // Publishing onto each gives the same state.
        let mut full = whole.clone();
        full.apply(last[0].clone()).expect("apply");
        restored.apply(last[0].clone()).expect("apply");
        assert_eq!(visible(&restored), visible(&full));
        assert_eq!(restored.heads, full.heads);
        assert_eq!(restored.latest_versions, full.latest_versions);
        assert_eq!(restored.registrations, full.registrations);
        assert_eq!(restored.checkpoint(), full.checkpoint());
    }

    /// `history()` with c2 applying schema "b" over "a" (then c3 on top).
    fn history_with_an_apply() -> Vec<Vec<ManifestRow>> {
        let mut publishes = history();
        for row in &mut publishes[1] {
            if let ManifestRow::Commit(c) = row {
                c.schema_change = Some(SchemaChange { from: "a".into(), to: "b".into() });
            }
        }
        publishes
    }

    #[test]
    fn a_checkpoint_after_a_schema_apply_binds_the_heads_like_the_full_fold() {
        let publishes = history_with_an_apply();
        for split in 1..=publishes.len() {
            let (older, newer) = publishes.split_at(split);
            let whole = ManifestState::fold(older.iter().flatten().cloned()).expect("fold");
            let cp = whole.checkpoint().expect("a checkpoint");
            let props = cp.to_properties().expect("encode");
            let with_apply = split >= 2;
            assert_eq!(props.contains_key(CHECKPOINT_WITH_SCHEMAS_PROPERTY), with_apply, "{props:?}");
            let mut restored =
                ManifestState::restore(HeadCheckpoint::from_properties(&props).expect("decode").expect("recorded"))
                    .expect("restore");
            let head = whole.head("main").expect("head").to_string();
            assert_eq!(restored.schema_applied_at(&head), whole.schema_applied_at(&head), "split {split}");
            assert_eq!(restored.original_schema(), whole.original_schema(), "split {split}");
            // A publish on top of the restored state still binds like the full fold.
            let mut full = whole.clone();
            for publish in newer {
                full.apply(publish.clone()).expect("apply");
                restored.apply(publish.clone()).expect("apply");
            }
            let head = full.head("main").expect("head").to_string();
            assert_eq!(restored.schema_applied_at(&head), full.schema_applied_at(&head), "split {split}");
            assert_eq!(restored.checkpoint(), full.checkpoint(), "split {split}");
        }
        let full = ManifestState::fold(publishes.into_iter().flatten()).expect("fold");
        assert_eq!(full.schema_applied_at("c3").as_deref(), Some("b"));
        assert_eq!(full.schema_applied_at("c1"), None);
        assert_eq!(full.original_schema().as_deref(), Some("a"));
    }

    #[test]
    fn a_newer_apply_on_a_restored_state_wins_over_the_recorded_one() {
        let publishes = history_with_an_apply();
        let whole = ManifestState::fold(publishes[..2].iter().flatten().cloned()).expect("fold");
        let mut restored = ManifestState::restore(whole.checkpoint().expect("checkpoint")).expect("restore");
        let mut third = publishes[2].clone();
        for row in &mut third {
            if let ManifestRow::Commit(c) = row {
                c.schema_change = Some(SchemaChange { from: "b".into(), to: "c".into() });
            }
        }
        restored.apply(third).expect("apply");
        assert_eq!(restored.schema_applied_at("c3").as_deref(), Some("c"));
        assert_eq!(restored.original_schema().as_deref(), Some("a"), "the oldest apply's `from` is kept");
    }

    #[test]
    fn two_live_tables_on_one_key_are_refused() {
        let rows = vec![reg("n1", "node:Person", 1), version("n1", 1), reg("n2", "node:Person", 2), version("n2", 1)];
        let err = ManifestState::fold(rows).expect_err("two tables on one key");
        assert!(err.to_string().contains("two live tables"), "{err}");
    }

    #[test]
    fn versions_of_an_unregistered_table_are_refused() {
        let err = ManifestState::fold(vec![version("n9", 1)]).expect_err("unregistered");
        assert!(err.to_string().contains("unregistered table n9"), "{err}");
    }
}
