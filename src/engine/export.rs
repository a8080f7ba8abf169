//! Export: a snapshot's rows as the JSONL `load` reads back, streamed one
//! scan batch at a time (bounded memory whatever the graph's size). Node
//! tables come first so that a load of the output finds every edge's
//! endpoints; every line carries its `data.id`, so a round trip keeps ids.

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Map, Value as Json, json};

use crate::engine::committed::open_pinned;
use crate::engine::lang::catalog::Catalog;
use crate::engine::layout;
use crate::engine::manifest::ManifestView;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};

/// One table to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportTable {
    /// `node:<T>` / `edge:<E>`.
    pub table_key: String,
    /// The type's name.
    pub type_name: String,
    /// Whether it is an edge type.
    pub is_edge: bool,
}

/// What an export wrote.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ExportSummary {
    /// Lines written, per table key.
    pub rows: std::collections::BTreeMap<String, u64>,
}

/// The tables to export, nodes first, each group in declaration order:
/// every type, or those named in `types` (a type name or a table key).
/// An unknown name is refused before anything is read.
pub fn plan(catalog: &Catalog, types: &[String]) -> Result<Vec<ExportTable>> {
    let all: Vec<ExportTable> = catalog
        .nodes
        .iter()
        .map(|n| ExportTable { table_key: layout::node_key(&n.name), type_name: n.name.clone(), is_edge: false })
        .chain(catalog.edges.iter().map(|e| ExportTable {
            table_key: layout::edge_key(&e.name),
            type_name: e.name.clone(),
            is_edge: true,
        }))
        .collect();
    if types.is_empty() {
        return Ok(all);
    }
    for t in types {
        if !all.iter().any(|e| &e.type_name == t || &e.table_key == t) {
            return Err(OmniError::BadRequest(format!("cannot export `{t}`: no such node or edge type")));
        }
    }
    Ok(all.into_iter().filter(|e| types.iter().any(|t| t == &e.type_name || t == &e.table_key)).collect())
}

/// Stream `tables` of `view` as JSONL chunks (one per scan batch) into
/// `out`; a closed receiver stops the export quietly.
pub async fn run(
    root: &Root,
    view: &ManifestView,
    tables: &[ExportTable],
    out: tokio::sync::mpsc::Sender<Result<Bytes>>,
) -> Result<ExportSummary> {
    let mut summary = ExportSummary::default();
    for t in tables {
        let Some(entry) = view.state.tables.get(&t.table_key) else { continue };
        let ds = open_pinned(root, entry).await?;
        let mut stream = table::scan_stream(&ds).await?;
        let mut n = 0u64;
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let mut chunk = Vec::with_capacity(batch.num_rows() * 64);
            for row in rows::from_batch(&batch) {
                serde_json::to_writer(&mut chunk, &line(t, row))
                    .map_err(|e| OmniError::Internal(format!("encoding an export line: {e}")))?;
                chunk.push(b'\n');
                n += 1;
            }
            if out.send(Ok(Bytes::from(chunk))).await.is_err() {
                return Ok(summary);
            }
        }
        summary.rows.insert(t.table_key.clone(), n);
    }
    Ok(summary)
}

/// One row as a load line: `{"type", "data"}` or `{"edge", "from", "to", "data"}`,
/// with `data.id` and every non-null property.
fn line(t: &ExportTable, row: EntityRow) -> Json {
    let mut data = Map::new();
    data.insert("id".into(), Json::String(row.id));
    data.extend(row.props.into_iter().filter(|(_, v)| !v.is_null()));
    if t.is_edge {
        json!({ "edge": t.type_name, "from": row.src, "to": row.dst, "data": data })
    } else {
        json!({ "type": t.type_name, "data": data })
    }
}
