//! The staging accumulator of one mutation: per touched table, pending rows
//! (inserts and updates, last write wins by id) and deleted ids. Every read
//! inside the query sees committed rows at the pin plus pending rows: a Lance
//! scan at the pinned version, unioned with a DataFusion `MemTable` over the
//! pending batch, both filtered by the same expression.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use arrow_schema::SchemaRef;
use datafusion::datasource::MemTable;
use datafusion::prelude::{Expr, SessionContext};
use lance::Dataset;

use crate::engine::manifest::TableEntry;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{MergeMode, StagePlan, table};
use crate::engine::write_plan::{Capture, PreparedTable};
use crate::protocol::{OmniError, Result};

/// Per touched table: at most this many entities staged by one mutation.
pub const MAX_ENTITIES_PER_TABLE: u64 = 8_192;
/// Per touched table: at most this many bytes of staged Arrow.
pub const MAX_STAGED_BYTES_PER_TABLE: u64 = 32 * 1024 * 1024;

/// One touched table.
pub struct TableStage {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Node or edge type name.
    pub type_name: String,
    /// Whether it is an edge table.
    pub is_edge: bool,
    /// The pin (captured on first touch).
    pub entry: TableEntry,
    dataset: Arc<Dataset>,
    schema: SchemaRef,
    /// Pending rows by id (inserts and updates; last write wins).
    pub pending: BTreeMap<String, EntityRow>,
    /// Ids deleted by this mutation.
    pub deleted: BTreeSet<String>,
    /// Whether any pending row may replace an existing one (keyed insert, update).
    pub upsert: bool,
}

impl TableStage {
    /// What restores row `id` of this table to its state now.
    fn undo_of(&self, id: &str) -> Undo {
        Undo::Row {
            table_key: self.table_key.clone(),
            id: id.to_string(),
            pending: self.pending.get(id).cloned(),
            deleted: self.deleted.contains(id),
            upsert: self.upsert,
        }
    }

    /// Committed rows at the pin matching `filter`, minus rows this mutation
    /// shadows (pending or deleted).
    async fn committed(&self, filter: Option<Expr>) -> Result<Vec<EntityRow>> {
        let batches = table::scan_expr(&self.dataset, filter).await?;
        let shadowed = |id: &str| self.pending.contains_key(id) || self.deleted.contains(id);
        Ok(batches.iter().flat_map(rows::from_batch).filter(|r| !shadowed(&r.id)).collect())
    }

    /// Pending rows matching `filter`, evaluated by DataFusion over a MemTable.
    async fn pending_matching(&self, filter: Option<Expr>) -> Result<Vec<EntityRow>> {
        if self.pending.is_empty() {
            return Ok(vec![]);
        }
        let Some(filter) = filter else { return Ok(self.pending.values().cloned().collect()) };
        let rows: Vec<EntityRow> = self.pending.values().cloned().collect();
        let batch = rows::to_batch_for(&self.type_name, &self.schema, &rows)?;
        let df_err = |e: datafusion::error::DataFusionError| {
            OmniError::Internal(format!("filtering pending {} rows: {e}", self.type_name))
        };
        let mem = MemTable::try_new(self.schema.clone(), vec![vec![batch]]).map_err(df_err)?;
        let ctx = SessionContext::new();
        let out = ctx.read_table(Arc::new(mem)).map_err(df_err)?.filter(filter).map_err(df_err)?;
        let batches = out.collect().await.map_err(df_err)?;
        Ok(batches.iter().flat_map(rows::from_batch).collect())
    }

    /// The one effect this table stages, within the admission limits
    /// (`None` when nothing changes).
    fn plan(&self) -> Result<Option<StagePlan>> {
        let limit = |resource: &str, limit: u64, actual: u64| {
            if actual > limit {
                return Err(OmniError::ResourceLimitExceeded {
                    resource: format!("{resource} for {}", self.table_key),
                    limit,
                    actual,
                });
            }
            Ok(())
        };
        limit("entities staged", MAX_ENTITIES_PER_TABLE, (self.pending.len() + self.deleted.len()) as u64)?;
        if !self.deleted.is_empty() {
            return Ok(Some(StagePlan::Delete { ids: self.deleted.iter().cloned().collect() }));
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        let rows: Vec<EntityRow> = self.pending.values().cloned().collect();
        let batch = rows::to_batch_for(&self.type_name, &self.schema, &rows)?;
        limit("staged Arrow bytes", MAX_STAGED_BYTES_PER_TABLE, batch.get_array_memory_size() as u64)?;
        // Without upserts every pending id is a fresh ULID: nothing to match.
        Ok(Some(if self.upsert {
            StagePlan::Merge { batches: vec![batch], mode: MergeMode::Upsert }
        } else {
            StagePlan::Append { batches: vec![batch] }
        }))
    }

    /// The Arrow schema of the table.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The dataset at the pin.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }
}

/// The accumulator of one mutation attempt (or of a group of mutations,
/// each seeing the rows of the members before it).
pub struct MutationStaging<'c> {
    capture: &'c Capture,
    tables: BTreeMap<String, TableStage>,
    /// Ids put or deleted since [`Self::take_touched`], per table key: what
    /// one member of a group changed.
    touched: BTreeMap<String, BTreeSet<String>>,
    /// How to undo every change since the last [`Self::checkpoint`] (empty
    /// and unused outside a group), newest last.
    undo: Vec<Undo>,
    /// The checkpoint the undo log belongs to.
    generation: u64,
}

/// One change to the staged rows, as what restores the state before it.
enum Undo {
    /// The table was first touched after the checkpoint.
    Opened(String),
    /// The row `id` of a table before a put or delete: its pending row (if
    /// any), whether it was deleted, and the table's upsert flag.
    Row { table_key: String, id: String, pending: Option<EntityRow>, deleted: bool, upsert: bool },
}

/// A point to return to when a group member is rejected (its partial
/// effects must not reach the members after it). Only the latest
/// checkpoint can be rewound to.
pub struct Checkpoint(u64);

impl<'c> MutationStaging<'c> {
    /// An empty accumulator over `capture`.
    pub fn new(capture: &'c Capture) -> Self {
        MutationStaging { capture, tables: BTreeMap::new(), touched: BTreeMap::new(), undo: Vec::new(), generation: 0 }
    }

    /// The capture this accumulator reads.
    pub fn capture(&self) -> &'c Capture {
        self.capture
    }

    /// Mark the staged rows now; changes from here on are logged so that
    /// [`Self::rewind`] undoes only them (no copy of what is staged).
    pub fn checkpoint(&mut self) -> Checkpoint {
        self.undo.clear();
        self.generation += 1;
        Checkpoint(self.generation)
    }

    /// Return to `cp`, dropping everything staged and touched since.
    ///
    /// # Panics
    /// When `cp` is not the latest checkpoint: its log is gone, and
    /// rewinding past it would keep half of another member's effects.
    pub fn rewind(&mut self, cp: Checkpoint) {
        assert_eq!(cp.0, self.generation, "rewind to a checkpoint that is not the latest");
        while let Some(undo) = self.undo.pop() {
            match undo {
                Undo::Opened(table_key) => {
                    self.tables.remove(&table_key);
                }
                Undo::Row { table_key, id, pending, deleted, upsert } => {
                    let Some(stage) = self.tables.get_mut(&table_key) else { continue };
                    match pending {
                        Some(row) => stage.pending.insert(id.clone(), row),
                        None => stage.pending.remove(&id),
                    };
                    if deleted {
                        stage.deleted.insert(id);
                    } else {
                        stage.deleted.remove(&id);
                    }
                    stage.upsert = upsert;
                }
            }
        }
        self.touched.clear();
    }

    /// Whether changes are logged for [`Self::rewind`] (a checkpoint exists).
    fn logging(&self) -> bool {
        self.generation > 0
    }

    /// The ids put or deleted since the last call, per table key.
    pub fn take_touched(&mut self) -> BTreeMap<String, BTreeSet<String>> {
        std::mem::take(&mut self.touched)
    }

    /// The touched tables.
    pub fn tables(&self) -> impl Iterator<Item = &TableStage> {
        self.tables.values()
    }

    /// The stage of `table_key`, opened at its pin on first touch.
    pub async fn table(&mut self, table_key: &str, type_name: &str, is_edge: bool) -> Result<&mut TableStage> {
        if !self.tables.contains_key(table_key) {
            let entry = self.capture.table(table_key)?.clone();
            let dataset = self.capture.pinned(table_key).await?;
            let schema = table::arrow_schema(&dataset);
            let stage = TableStage {
                table_key: table_key.to_string(),
                type_name: type_name.to_string(),
                is_edge,
                entry,
                dataset,
                schema,
                pending: BTreeMap::new(),
                deleted: BTreeSet::new(),
                upsert: false,
            };
            self.tables.insert(table_key.to_string(), stage);
            if self.logging() {
                self.undo.push(Undo::Opened(table_key.to_string()));
            }
        }
        self.tables.get_mut(table_key).ok_or_else(|| OmniError::Internal(format!("stage for {table_key} vanished")))
    }

    /// Rows of `table_key` matching `filter` as this mutation sees them
    /// (committed at the pin, shadowed by pending and deleted, plus pending).
    pub async fn select(
        &mut self,
        table_key: &str,
        type_name: &str,
        is_edge: bool,
        filter: Option<Expr>,
    ) -> Result<Vec<EntityRow>> {
        let stage = self.table(table_key, type_name, is_edge).await?;
        let mut out = stage.committed(filter.clone()).await?;
        out.extend(stage.pending_matching(filter).await?);
        Ok(out)
    }

    /// Which of `ids` are live in `table_key` as this mutation sees them.
    pub async fn live_ids(&mut self, table_key: &str, type_name: &str, ids: &[String]) -> Result<HashSet<String>> {
        let list = ids.iter().map(|id| datafusion::prelude::lit(id.clone())).collect();
        let filter = datafusion::prelude::col("id").in_list(list, false);
        let rows = self.select(table_key, type_name, false, Some(filter)).await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    /// Stage `row` as pending (replacing any pending row with its id).
    pub async fn put(
        &mut self,
        table_key: &str,
        type_name: &str,
        is_edge: bool,
        row: EntityRow,
        upsert: bool,
    ) -> Result<()> {
        self.touched.entry(table_key.to_string()).or_default().insert(row.id.clone());
        let logging = self.logging();
        let stage = self.table(table_key, type_name, is_edge).await?;
        let undo = logging.then(|| stage.undo_of(&row.id));
        stage.deleted.remove(&row.id);
        stage.upsert |= upsert;
        stage.pending.insert(row.id.clone(), row);
        self.undo.extend(undo);
        Ok(())
    }

    /// Mark `ids` deleted.
    pub async fn delete(
        &mut self,
        table_key: &str,
        type_name: &str,
        is_edge: bool,
        ids: impl IntoIterator<Item = String>,
    ) -> Result<()> {
        let ids: Vec<String> = ids.into_iter().collect();
        self.touched.entry(table_key.to_string()).or_default().extend(ids.iter().cloned());
        let logging = self.logging();
        let stage = self.table(table_key, type_name, is_edge).await?;
        let undo: Vec<Undo> = if logging { ids.iter().map(|id| stage.undo_of(id)).collect() } else { Vec::new() };
        for id in ids {
            stage.pending.remove(&id);
            stage.deleted.insert(id);
        }
        self.undo.extend(undo);
        Ok(())
    }

    /// Exactly one staged transaction per touched table that changes
    /// something (a zero-match delete stages nothing).
    pub async fn stage_all(self) -> Result<Vec<PreparedTable>> {
        let capture = self.capture;
        // Every table's plan (and admission limits) first: nothing is staged
        // unless the whole mutation is admitted.
        let mut plans = Vec::with_capacity(self.tables.len());
        for stage in self.tables.into_values() {
            if let Some(plan) = stage.plan()? {
                plans.push((stage.table_key, stage.dataset, plan));
            }
        }
        let mut out = Vec::with_capacity(plans.len());
        for (table_key, dataset, plan) in plans {
            out.extend(capture.prepare_table(&table_key, dataset, plan).await?);
        }
        Ok(out)
    }
}
