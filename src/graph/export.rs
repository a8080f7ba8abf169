//! Export of a branch head or a commit as the JSONL `load` reads.

use bytes::Bytes;

use super::{Graph, ReadTarget};
use crate::engine::export::{self, ExportSummary, ExportTable};
use crate::engine::manifest::ManifestView;
use crate::protocol::Result;

/// A checked export, ready to stream: the snapshot and the tables, settled
/// before the first byte is written (so a bad request is an error, not a
/// truncated stream).
pub struct Export {
    view: ManifestView,
    tables: Vec<ExportTable>,
    root: crate::engine::storage::Root,
}

impl Export {
    /// The tables it will write, in order.
    pub fn tables(&self) -> &[ExportTable] {
        &self.tables
    }

    /// Only the tables `keep` keeps.
    pub(super) fn keep(mut self, keep: impl Fn(&ExportTable) -> bool) -> Export {
        self.tables.retain(|t| keep(t));
        self
    }

    /// Stream the JSONL into `out`, one chunk per scan batch.
    pub async fn run(&self, out: tokio::sync::mpsc::Sender<Result<Bytes>>) -> Result<ExportSummary> {
        export::run(&self.root, &self.view, &self.tables, out).await
    }
}

impl Graph {
    /// Plan an export of `target`: every type, or only `types` (type names or
    /// table keys).
    pub async fn export(&self, target: &ReadTarget, types: &[String]) -> Result<Export> {
        let at = self.read_at(target.as_ref_text()).await?;
        let (view, commit_id) = (at.view, at.commit_id);
        let schema = self.schema_at(&view, &commit_id).await?;
        let tables = export::plan(&schema.catalog, types)?;
        Ok(Export { view, tables, root: self.root().clone() })
    }
}
