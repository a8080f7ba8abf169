//! Preparing a JSONL load: parse it in one streaming pass into compact
//! per-table Arrow batches (plus the id sets validation needs), validate
//! against committed state at the pins, and stage one Lance transaction per
//! touched table. One load is one commit whatever its size; memory holds
//! Arrow batches and id sets, never the parsed JSON of the whole file.
//!
//! Modes: `append` stages a strict insert (an existing id is a
//! `KeyConflict`), `merge` an upsert, `overwrite` a whole-table overwrite of
//! each touched type (an empty overwrite is a zero-fragment transaction).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::BufRead;
use std::sync::Arc;

use arrow_array::{RecordBatch, StringArray};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

use crate::engine::committed;
use crate::engine::integrity;
use crate::engine::lang::catalog::{Catalog, TypeDef};
use crate::engine::layout;
use crate::engine::load::jsonl::{IdLines, JsonlParser};
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{MergeMode, StagePlan, table};
use crate::engine::validate;
use crate::engine::write_plan::{Capture, Prepared, PreparedTable};
use crate::protocol::{OmniError, Result};

/// Rows converted to Arrow at a time (bounds the JSON held in memory).
pub const CHUNK_ROWS: usize = 8_192;
/// Records between two progress reports.
pub const PROGRESS_EVERY: u64 = 50_000;

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

impl LoadMode {
    /// The mode's name as users spell it (`append`, `merge`, `overwrite`).
    pub fn as_str(self) -> &'static str {
        match self {
            LoadMode::Append => "append",
            LoadMode::Merge => "merge",
            LoadMode::Overwrite => "overwrite",
        }
    }
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

/// One type's part of a load: Arrow batches plus what validation needs.
#[derive(Debug, Clone, Default)]
pub struct TableLoad {
    /// Node or edge type name.
    pub type_name: String,
    /// Whether the type is an edge.
    pub is_edge: bool,
    /// The rows, as Arrow in the type's catalog schema.
    pub batches: Vec<RecordBatch>,
    /// Per batch: it holds only rows whose ids the parser minted (fresh
    /// ULIDs, which no committed row holds: a merge appends them).
    pub minted: Vec<bool>,
    /// The input line of each row, in batch order (errors found after
    /// parsing still name the line).
    pub lines: Vec<u32>,
    /// Every given or key-derived id loaded, with the line that holds it
    /// (the parser's own duplicate-id set, moved here: no second copy).
    /// Minted ids are not kept.
    pub ids: IdLines,
    /// Per single-column `@unique` string property: value → id holding it.
    pub unique_values: HashMap<String, HashMap<String, String>>,
    pending: Vec<EntityRow>,
    /// The line each pending row came from (validation errors name it).
    pending_lines: Vec<usize>,
    /// Whether each pending row's id was minted.
    pending_minted: Vec<bool>,
}

impl TableLoad {
    /// Rows in this part.
    pub fn rows(&self) -> u64 {
        self.lines.len() as u64
    }

    /// The batches whose rows' ids were minted (`true`) or not (`false`).
    fn batches_minted(&self, minted: bool) -> Vec<&RecordBatch> {
        self.batches.iter().zip(&self.minted).filter(|(_, m)| **m == minted).map(|(b, _)| b).collect()
    }
}

/// A parsed load: parts by table key.
#[derive(Debug, Clone, Default)]
pub struct ParsedLoad {
    /// Table key → part.
    pub tables: BTreeMap<String, TableLoad>,
    /// Lines that held a record.
    pub records: u64,
}

/// Parse a JSONL stream against the catalog. Any bad line fails the whole
/// load (with its line number) before anything is staged.
pub fn parse(catalog: &Catalog, reader: impl BufRead) -> Result<ParsedLoad> {
    parse_with_progress(catalog, reader, &|_| {})
}

/// [`parse`], calling `progress(records_so_far)` every [`PROGRESS_EVERY`] records.
pub fn parse_with_progress(catalog: &Catalog, reader: impl BufRead, progress: &dyn Fn(u64)) -> Result<ParsedLoad> {
    let mut parser = JsonlParser::new(catalog);
    let mut out = ParsedLoad::default();
    // Lines of one type usually come together: the table key is formatted
    // once per run of a type, not once per line.
    let mut last: Option<(bool, String, String)> = None;
    for record in parser.parse_reader_parallel(reader) {
        let (line_no, record) = record?;
        let is_edge = record.is_edge();
        let key = match &last {
            Some((edge, name, key)) if *edge == is_edge && name == record.type_name() => key,
            _ => {
                let name = record.type_name().to_string();
                let key = if is_edge { layout::edge_key(&name) } else { layout::node_key(&name) };
                &last.insert((is_edge, name, key)).2
            }
        };
        let part = match out.tables.get_mut(key) {
            Some(part) => part,
            None => out.tables.entry(key.clone()).or_insert_with(|| TableLoad {
                type_name: record.type_name().to_string(),
                is_edge,
                ..Default::default()
            }),
        };
        part.pending_minted.push(record.minted());
        part.pending.push(record.into_row());
        part.pending_lines.push(line_no);
        if part.pending.len() >= CHUNK_ROWS {
            flush(catalog, part)?;
        }
        out.records += 1;
        if out.records % PROGRESS_EVERY == 0 {
            progress(out.records);
        }
    }
    for part in out.tables.values_mut() {
        flush(catalog, part)?;
    }
    let mut seen = parser.into_seen_ids();
    for part in out.tables.values_mut() {
        part.ids = seen.take(&part.type_name);
    }
    Ok(out)
}

/// Validate the buffered rows, record their keys, and convert them to Arrow.
fn flush(catalog: &Catalog, part: &mut TableLoad) -> Result<()> {
    if part.pending.is_empty() {
        return Ok(());
    }
    let rows = std::mem::take(&mut part.pending);
    let lines = std::mem::take(&mut part.pending_lines);
    let minted = std::mem::take(&mut part.pending_minted);
    let def = catalog
        .type_def(&part.type_name)
        .ok_or_else(|| OmniError::BadRequest(format!("unknown type `{}`", part.type_name)))?;
    let (validator, schema, uniques) = match def {
        TypeDef::Node(n) => (validate::Validator::for_node(n)?, n.arrow_schema(), &n.uniques),
        TypeDef::Edge(e) => (validate::Validator::for_edge(e)?, e.arrow_schema(), &e.uniques),
    };
    // Each violation names the line of the row that broke the rule.
    let line_of = |id: &str| rows.iter().position(|r| r.id == id).and_then(|i| lines.get(i)).copied();
    let at_line = |v: validate::Violation| match line_of(&v.id) {
        Some(n) => OmniError::BadRequest(format!("line {n}: {v}")),
        None => OmniError::from(v),
    };
    // Row rules hold per row: checked on every core, and the first broken
    // row in line order is the one reported.
    if let Some(i) = rows.par_iter().position_first(|r| validator.check_row(r).is_err())
        && let (Some(row), Some(line)) = (rows.get(i), lines.get(i))
    {
        validator.check_row(row).map_err(|v| OmniError::BadRequest(format!("line {line}: {v}")))?;
    }
    validator.check_unique(&rows).map_err(at_line)?;
    validate::check_unique_within(&part.type_name, &rows, uniques).map_err(at_line)?;
    for (r, line) in rows.iter().zip(&lines) {
        for set in uniques.iter().filter(|s| s.len() == 1) {
            if let Some(Json::String(v)) = r.column(&set[0]) {
                let seen = part.unique_values.entry(set[0].clone()).or_default();
                if let Some(other) = seen.insert(v.clone(), r.id.clone()) {
                    return Err(OmniError::BadRequest(format!(
                        "line {line}: @unique({}) violated on {}: `{v}` is held by both `{other}` and `{}`",
                        set[0], part.type_name, r.id
                    )));
                }
            }
        }
    }
    // Rows with given ids first, then minted ones (a merge stages the two
    // differently), each group in input order and built as two halves at once.
    let (mut given, mut fresh) = (Vec::new(), Vec::new());
    for ((row, line), m) in rows.into_iter().zip(lines).zip(minted) {
        if m { &mut fresh } else { &mut given }.push((row, line));
    }
    let type_name = part.type_name.as_str();
    for (group, is_minted) in [(given, false), (fresh, true)] {
        let (rows, lines): (Vec<EntityRow>, Vec<usize>) = group.into_iter().unzip();
        let mid = rows.len() / 2;
        let (head, tail) = rayon::join(
            || rows::to_batch_for(type_name, &schema, &rows[..mid]),
            || rows::to_batch_for(type_name, &schema, &rows[mid..]),
        );
        for batch in [head?, tail?].into_iter().filter(|b| b.num_rows() > 0) {
            part.batches.push(batch);
            part.minted.push(is_minted);
        }
        part.lines.extend(lines.iter().map(|&n| u32::try_from(n).unwrap_or(u32::MAX)));
    }
    Ok(())
}

/// Validate `load` against the captured state and stage it.
pub async fn prepare(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<Prepared> {
    check_unique(capture, load, mode).await?;
    check_edges(capture, load, mode).await?;
    let mut prepared = Prepared::default();
    for (key, part) in &load.tables {
        prepared.tables.extend(stage_table(capture, key, part, mode).await?);
        if part.is_edge {
            prepared.edges_affected += part.rows();
        } else {
            prepared.nodes_affected += part.rows();
        }
    }
    Ok(prepared)
}

/// `@unique` (single and composite) against committed rows the load does
/// not replace.
async fn check_unique(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<()> {
    if mode == LoadMode::Overwrite {
        return Ok(());
    }
    let catalog = &capture.schema.catalog;
    for (key, part) in &load.tables {
        let uniques = match catalog.type_def(&part.type_name) {
            Some(TypeDef::Node(n)) => &n.uniques,
            Some(TypeDef::Edge(e)) => &e.uniques,
            None => continue,
        };
        if uniques.is_empty() {
            continue;
        }
        let ds = capture.pinned(key).await?;
        let mut offset = 0;
        for batch in &part.batches {
            let rows = rows::from_batch(batch);
            let lines = part.lines.get(offset..offset + rows.len());
            offset += rows.len();
            let replaced = |id: &str| part.ids.contains_key(id);
            integrity::unique_against_committed(&ds, &part.type_name, uniques, &rows, replaced, lines).await?;
        }
    }
    Ok(())
}

/// Referential integrity and `@card` for every loaded edge type. The
/// endpoints are read from the part's Arrow batches, not copied into sets: at
/// a million edges each copy of the ids cost ~70 MiB.
async fn check_edges(capture: &Capture, load: &ParsedLoad, mode: LoadMode) -> Result<()> {
    let catalog = &capture.schema.catalog;
    for (key, part) in load.tables.iter().filter(|(_, p)| p.is_edge) {
        let Some(edge) = catalog.edge(&part.type_name) else { continue };
        for (side, column, node_type) in [("from", "src", &edge.from_type), ("to", "dst", &edge.to_type)] {
            let wanted = endpoints(part, column)?;
            if let Some(missing) = absent_nodes(capture, load, mode, node_type, wanted).await?.into_iter().min() {
                return Err(OmniError::BadRequest(format!(
                    "edge {}: `{side}` node `{missing}` does not exist in {node_type}",
                    part.type_name
                )));
            }
        }
        check_card(capture, key, part, (edge.card.min, edge.card.max), mode).await?;
    }
    Ok(())
}

/// The string column `column` of every batch of `part`, row by row.
fn endpoints<'a>(part: &'a TableLoad, column: &str) -> Result<impl Iterator<Item = &'a str> + 'a> {
    let arrays = part
        .batches
        .iter()
        .map(|b| {
            b.column_by_name(column)
                .and_then(|c| c.as_any().downcast_ref::<StringArray>())
                .ok_or_else(|| OmniError::Internal(format!("{}: no string column `{column}`", part.type_name)))
        })
        .collect::<Result<Vec<&StringArray>>>()?;
    Ok(arrays.into_iter().flat_map(|a| a.iter().flatten()))
}

/// Which of `ids` will not exist in node type `node_type` after the load.
async fn absent_nodes<'a>(
    capture: &Capture,
    load: &ParsedLoad,
    mode: LoadMode,
    node_type: &str,
    ids: impl Iterator<Item = &'a str>,
) -> Result<Vec<String>> {
    let key = layout::node_key(node_type);
    let loaded = load.tables.get(&key);
    // Only ids the load does not hold are copied, once each.
    let mut outside: HashSet<&str> = HashSet::new();
    for id in ids.filter(|id| !loaded.is_some_and(|t| t.ids.contains_key(*id))) {
        outside.insert(id);
    }
    let outside: Vec<String> = outside.into_iter().map(str::to_string).collect();
    // Overwrite replaces a loaded type entirely; otherwise committed rows stay.
    if outside.is_empty() || (mode == LoadMode::Overwrite && loaded.is_some()) {
        return Ok(outside);
    }
    let ds = capture.pinned(&key).await?;
    let committed = committed::existing_ids(&ds, &outside).await?;
    Ok(outside.into_iter().filter(|id| !committed.contains(id)).collect())
}

/// Edges per source node after the load must stay within `@card`.
async fn check_card(
    capture: &Capture,
    key: &str,
    part: &TableLoad,
    (min, max): (u32, Option<u32>),
    mode: LoadMode,
) -> Result<()> {
    if min == 0 && max.is_none() {
        return Ok(());
    }
    let mut per_src: HashMap<&str, HashSet<&str>> = HashMap::new();
    for (src, id) in endpoints(part, "src")?.zip(endpoints(part, "id")?) {
        per_src.entry(src).or_default().insert(id);
    }
    let committed_edges = if mode == LoadMode::Overwrite {
        HashMap::new()
    } else {
        let ds = capture.pinned(key).await?;
        let srcs: Vec<String> = per_src.keys().map(|s| s.to_string()).collect();
        committed::edges_by_endpoint(&ds, "src", &srcs).await?
    };
    for (src, ids) in &committed_edges {
        if let Some(set) = per_src.get_mut(src.as_str()) {
            set.extend(ids.iter().map(String::as_str));
        }
    }
    for (src, ids) in per_src {
        let n = ids.len() as u64;
        if n < u64::from(min) || max.is_some_and(|m| n > u64::from(m)) {
            let bound = max.map_or(format!("{min}.."), |m| format!("{min}..{m}"));
            return Err(OmniError::BadRequest(format!(
                "@card({bound}) violated on {}: `{src}` would have {n} edges",
                part.type_name
            )));
        }
    }
    Ok(())
}

async fn stage_table(capture: &Capture, key: &str, part: &TableLoad, mode: LoadMode) -> Result<Option<PreparedTable>> {
    let ds = capture.pinned(key).await?;
    let schema = table::arrow_schema(&ds);
    // Same columns, the dataset's own field metadata.
    let rewrap = |batches: Vec<&RecordBatch>| -> Result<Vec<RecordBatch>> {
        batches
            .into_iter()
            .map(|b| RecordBatch::try_new(Arc::clone(&schema), b.columns().to_vec()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| OmniError::Internal(format!("{}: batch does not fit the dataset schema: {e}", part.type_name)))
    };
    let plans = match mode {
        LoadMode::Append => {
            let ids = part.ids.keys().map(String::as_str);
            let contains = |id: &str| part.ids.contains_key(id);
            if let Some(id) = committed::min_existing_id(&ds, ids, part.ids.len(), contains).await? {
                let entity_kind = if part.is_edge { "edge" } else { "node" };
                return Err(OmniError::KeyConflict { entity_kind, type_name: part.type_name.clone(), id });
            }
            // The given ids were just proved absent at the pin, which the
            // commit holds; minted ones are fresh.
            vec![StagePlan::Append { batches: rewrap(part.batches.iter().collect())? }]
        }
        // Rows with given ids may match committed rows: a merge-insert. Rows
        // with minted ids cannot: an append, without the join.
        LoadMode::Merge => {
            let given = rewrap(part.batches_minted(false))?;
            let fresh = rewrap(part.batches_minted(true))?;
            let merge = (!given.is_empty()).then(|| StagePlan::Merge { batches: given, mode: MergeMode::Upsert });
            let append = (!fresh.is_empty()).then_some(StagePlan::Append { batches: fresh });
            merge.into_iter().chain(append).collect()
        }
        LoadMode::Overwrite => vec![StagePlan::Overwrite { batches: rewrap(part.batches.iter().collect())? }],
    };
    capture.prepare_table_chain(key, ds, plans).await
}
