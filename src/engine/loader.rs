//! Preparing a JSONL load: parse, validate against committed state at the
//! pins, and stage one Lance transaction per touched table.
//!
//! Modes: `append` stages a strict insert (an existing id is a
//! `KeyConflict`), `merge` an upsert, `overwrite` a whole-table overwrite of
//! each touched type (an empty overwrite is a zero-fragment transaction).

use std::collections::{BTreeMap, HashSet};
use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::engine::catalog::{Catalog, TypeDef};
use crate::engine::committed::{self, open_pinned};
use crate::engine::integrity;
use crate::engine::layout;
use crate::engine::load::jsonl::{JsonlParser, LoadRecord};
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{MergeMode, TxnIdentity, table};
use crate::engine::validate;
use crate::engine::write_plan::{Capture, Prepared, PreparedTable};
use crate::protocol::{OmniError, Result};

/// How a load treats existing rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoadMode {
    /// Strict insert: an existing id is a `KeyConflict`.
    Append,
    /// Upsert by id.
    Merge,
    /// Replace the whole content of every touched type.
    Overwrite,
}

impl std::str::FromStr for LoadMode {
    type Err = OmniError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "append" => Ok(LoadMode::Append),
            "merge" => Ok(LoadMode::Merge),
            "overwrite" => Ok(LoadMode::Overwrite),
            other => Err(OmniError::BadRequest(format!("unknown load mode `{other}`: use append, merge or overwrite"))),
        }
    }
}

/// The rows of one type in a load.
#[derive(Debug, Clone, Default)]
pub struct TableRows {
    /// Node or edge type name.
    pub type_name: String,
    /// Whether the type is an edge.
    pub is_edge: bool,
    /// Rows in file order.
    pub rows: Vec<EntityRow>,
}

/// A parsed load: rows grouped by table key.
#[derive(Debug, Clone, Default)]
pub struct ParsedLoad {
    /// Table key → rows.
    pub tables: BTreeMap<String, TableRows>,
    /// Lines that held a record.
    pub records: u64,
}

/// Parse a JSONL stream against the catalog. Any bad line fails the whole
/// load (with its line number) before anything is staged.
pub fn parse(catalog: &Catalog, reader: impl BufRead) -> Result<ParsedLoad> {
    parse_with_progress(catalog, reader, &|_| {})
}

/// Records between two progress reports.
pub const PROGRESS_EVERY: u64 = 50_000;

/// [`parse`], calling `progress(records_so_far)` every [`PROGRESS_EVERY`] records.
pub fn parse_with_progress(catalog: &Catalog, reader: impl BufRead, progress: &dyn Fn(u64)) -> Result<ParsedLoad> {
    let mut parser = JsonlParser::new(catalog);
    let mut out = ParsedLoad::default();
    for record in parser.parse_reader(reader) {
        let record = record?;
        let is_edge = record.is_edge();
        let type_name = record.type_name().to_string();
        let key = if is_edge { layout::edge_key(&type_name) } else { layout::node_key(&type_name) };
        let entry = out.tables.entry(key).or_insert_with(|| TableRows { type_name, is_edge, rows: Vec::new() });
        entry.rows.push(match record {
            LoadRecord::Node { row, .. } | LoadRecord::Edge { row, .. } => row,
        });
        out.records += 1;
        if out.records % PROGRESS_EVERY == 0 {
            progress(out.records);
        }
    }
    Ok(out)
}

/// Validate `load` against the captured state and stage it.
pub async fn prepare(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<Prepared> {
    let catalog = &capture.schema.catalog;
    for rows in load.tables.values() {
        validate_rows(catalog, rows)?;
    }
    check_unique(capture, load, mode).await?;
    check_edges(capture, load, mode).await?;
    let mut prepared = Prepared::default();
    for (key, rows) in &load.tables {
        prepared.tables.push(stage_table(capture, key, rows, mode).await?);
        let n = rows.rows.len() as u64;
        if rows.is_edge {
            prepared.edges_affected += n;
        } else {
            prepared.nodes_affected += n;
        }
    }
    Ok(prepared)
}

fn type_def<'c>(catalog: &'c Catalog, rows: &TableRows) -> Result<TypeDef<'c>> {
    catalog.type_def(&rows.type_name).ok_or_else(|| OmniError::BadRequest(format!("unknown type `{}`", rows.type_name)))
}

fn validate_rows(catalog: &Catalog, rows: &TableRows) -> Result<()> {
    match type_def(catalog, rows)? {
        TypeDef::Node(node) => validate::validate_node_rows(node, &rows.rows),
        TypeDef::Edge(edge) => validate::validate_edge_rows(edge, &rows.rows),
    }
}

/// `@unique` sets: within the load, and against committed rows it does not replace.
async fn check_unique(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<()> {
    let catalog = &capture.schema.catalog;
    for (key, rows) in &load.tables {
        let uniques = match type_def(catalog, rows)? {
            TypeDef::Node(n) => &n.uniques,
            TypeDef::Edge(e) => &e.uniques,
        };
        validate::check_unique_within(&rows.type_name, &rows.rows, uniques)?;
        if mode == LoadMode::Overwrite || uniques.is_empty() {
            continue;
        }
        let ds = open_pinned(&capture.root, capture.table(key)?).await?;
        integrity::unique_against_committed(&ds, &rows.type_name, uniques, &rows.rows, &HashSet::new()).await?;
    }
    Ok(())
}

/// Referential integrity and `@card` for every loaded edge.
async fn check_edges(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<()> {
    let catalog = &capture.schema.catalog;
    for (key, rows) in load.tables.iter().filter(|(_, r)| r.is_edge) {
        let Some(edge) = catalog.edge(&rows.type_name) else { continue };
        for (endpoint, node_type) in [("src", &edge.from_type), ("dst", &edge.to_type)] {
            let wanted: Vec<String> = rows
                .rows
                .iter()
                .filter_map(|r| if endpoint == "src" { r.src.clone() } else { r.dst.clone() })
                .collect::<HashSet<_>>()
                .into_iter()
                .collect();
            let present = node_ids_present(capture, load, mode, node_type, &wanted).await?;
            if let Some(missing) = rows.rows.iter().find_map(|r| {
                let id = if endpoint == "src" { r.src.as_deref() } else { r.dst.as_deref() };
                id.filter(|id| !present.contains(*id))
            }) {
                let side = if endpoint == "src" { "from" } else { "to" };
                return Err(OmniError::BadRequest(format!(
                    "edge {}: `{side}` node `{missing}` does not exist in {node_type}",
                    rows.type_name
                )));
            }
        }
        check_card(capture, key, rows, (edge.card.min, edge.card.max), mode).await?;
    }
    Ok(())
}

/// Which of `ids` will exist in node type `node_type` after the load.
async fn node_ids_present(
    capture: &Capture,
    load: &ParsedLoad,
    mode: LoadMode,
    node_type: &str,
    ids: &[String],
) -> Result<HashSet<String>> {
    let key = layout::node_key(node_type);
    let loaded = load.tables.get(&key);
    let mut present: HashSet<String> =
        loaded.map(|t| t.rows.iter().map(|r| r.id.clone()).collect()).unwrap_or_default();
    // Overwrite replaces a loaded type entirely; otherwise committed rows stay.
    if !(mode == LoadMode::Overwrite && loaded.is_some()) {
        let ds = open_pinned(&capture.root, capture.table(&key)?).await?;
        present.extend(committed::existing_ids(&ds, ids).await?);
    }
    Ok(present)
}

/// Edges per source node after the load must stay within `@card`.
async fn check_card(
    capture: &Capture,
    key: &str,
    rows: &TableRows,
    card: (u32, Option<u32>),
    mode: LoadMode,
) -> Result<()> {
    let sources: HashSet<String> = rows.rows.iter().filter_map(|r| r.src.clone()).collect();
    let committed = match mode {
        LoadMode::Overwrite => None,
        _ => Some(open_pinned(&capture.root, capture.table(key)?).await?),
    };
    integrity::card_per_source(committed.as_deref(), &rows.type_name, card, &rows.rows, &HashSet::new(), &sources).await
}

async fn stage_table(capture: &Capture, key: &str, rows: &TableRows, mode: LoadMode) -> Result<PreparedTable> {
    let entry = capture.table(key)?;
    let ds = open_pinned(&capture.root, entry).await?;
    let schema = table::arrow_schema(&ds);
    let batch = rows::to_batch_for(&rows.type_name, &schema, &rows.rows)?;
    let identity = TxnIdentity::mint(entry.version);
    let staged = match mode {
        LoadMode::Append => {
            let ids: Vec<String> = rows.rows.iter().map(|r| r.id.clone()).collect();
            if let Some(id) = committed::existing_ids(&ds, &ids).await?.into_iter().min() {
                return Err(OmniError::KeyConflict { type_name: rows.type_name.clone(), id });
            }
            table::stage_merge_insert(ds, vec![batch], MergeMode::StrictInsert, &identity.uuid).await?
        }
        LoadMode::Merge => table::stage_merge_insert(ds, vec![batch], MergeMode::Upsert, &identity.uuid).await?,
        LoadMode::Overwrite => table::stage_overwrite(ds, vec![batch], &identity.uuid).await?,
    };
    Ok(PreparedTable { table_key: key.to_string(), pin: entry.version, table_branch: entry.branch.clone(), staged })
}
