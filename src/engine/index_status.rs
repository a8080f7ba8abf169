//! How completely each index a table's schema declares covers the table:
//! what `omnigraph index status` answers and what the daemon's index folder
//! measures against its lag. Metadata only (fragment row counts and segment
//! bitmaps from the manifest); no row is read.

use lance::Dataset;

use crate::engine::lang::catalog::TypeDef;
use crate::engine::lang::catalog::indexes::{self, IndexKind};
use crate::engine::layout;
use crate::engine::manifest::TableEntry;
use crate::engine::storage::{index_fold, table};
use crate::protocol::Result;

/// How completely each index of a branch covers its table
/// (`omnigraph index status`, `GET /graphs/{id}/indexes`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct IndexStatus {
    /// The branch read.
    pub branch: String,
    /// Every table of the schema, in key order.
    pub tables: Vec<TableIndexStatus>,
}

/// One table's indexes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableIndexStatus {
    /// `node:<Type>` / `edge:<Type>`.
    pub type_key: String,
    /// Every index the schema asks of the table, built or not, by name.
    pub indexes: Vec<IndexCoverage>,
}

/// One index's coverage at the branch head.
#[derive(Debug, Clone, serde::Serialize)]
pub struct IndexCoverage {
    /// `<column>_<kind>`.
    pub index: String,
    /// `btree`, `inverted` or `vector`.
    pub kind: IndexKind,
    /// Whether the index exists (`index ensure` builds a missing one).
    pub built: bool,
    /// Live rows its segments cover.
    pub indexed_rows: u64,
    /// Live rows in the table.
    pub total_rows: u64,
    /// `indexed_rows / total_rows`; 1.0 for an empty table (nothing to
    /// cover), 0.0 for a missing index over rows.
    pub coverage: f64,
    /// Fragments no segment covers: a lookup scans them beside the index.
    pub unindexed_fragments: u64,
    /// Segments the index is made of: each fold adds one (a lookup searches
    /// each) until `optimize`, or a fold past 16, merges them.
    pub segments: u64,
}

impl TableIndexStatus {
    /// Rows a lookup scans outside the table's indexes, at worst: the
    /// longest tail of a built index, or every row when one is missing (a
    /// vector index only once the table has rows enough to train it).
    pub fn tail(&self) -> u64 {
        let buildable = |i: &IndexCoverage| i.kind != IndexKind::Vector || i.total_rows >= table::VECTOR_INDEX_MIN_ROWS;
        let tail = |i: &IndexCoverage| if i.built { i.total_rows - i.indexed_rows } else { i.total_rows };
        self.indexes.iter().filter(|i| i.built || buildable(i)).map(tail).max().unwrap_or(0)
    }
}

/// The status of the table of `def`, pinned by `entry` and opened as `ds`.
pub async fn of_table(def: TypeDef<'_>, entry: &TableEntry, ds: &Dataset) -> Result<TableIndexStatus> {
    let measured = index_fold::coverage(ds).await?;
    // The manifest's count when no index was measured (they agree).
    let total_rows = measured.first().map_or(entry.row_count, |c| c.total_rows);
    let all_fragments = ds.manifest().fragments.len() as u64;
    let indexes = indexes::desired(def)
        .into_iter()
        .map(|spec| {
            let name = spec.name();
            let found = measured.iter().find(|c| c.index == name);
            let indexed_rows = found.map_or(0, |c| c.indexed_rows);
            IndexCoverage {
                index: name,
                kind: spec.kind,
                built: found.is_some(),
                indexed_rows,
                total_rows,
                coverage: index_fold::share(indexed_rows, total_rows),
                unindexed_fragments: found.map_or(all_fragments, |c| c.unindexed_fragments),
                segments: found.map_or(0, |c| c.segments),
            }
        })
        .collect();
    Ok(TableIndexStatus { type_key: layout::key_of(def), indexes })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(kind: IndexKind, built: bool, indexed_rows: u64, total_rows: u64) -> IndexCoverage {
        let coverage = if total_rows == 0 { 1.0 } else { indexed_rows as f64 / total_rows as f64 };
        IndexCoverage {
            index: format!("{kind:?}"),
            kind,
            built,
            indexed_rows,
            total_rows,
            coverage,
            unindexed_fragments: 0,
            segments: u64::from(built),
        }
    }

    /// The tail is the longest of any built index's, or every row where an
    /// index is missing, except a vector index that cannot train yet.
    #[test]
    fn the_tail_is_the_worst_index_and_a_missing_one_counts_every_row() {
        let table = |indexes| TableIndexStatus { type_key: "node:P".into(), indexes };
        assert_eq!(table(vec![]).tail(), 0);
        let built = vec![index(IndexKind::Btree, true, 90, 100), index(IndexKind::Inverted, true, 70, 100)];
        assert_eq!(table(built.clone()).tail(), 30);
        let mut missing = built.clone();
        missing.push(index(IndexKind::Btree, false, 0, 100));
        assert_eq!(table(missing).tail(), 100);
        let mut untrainable = built;
        untrainable.push(index(IndexKind::Vector, false, 0, 100));
        assert_eq!(table(untrainable).tail(), 30, "a vector index trains on 256 rows");
        assert_eq!(table(vec![index(IndexKind::Vector, false, 0, 300)]).tail(), 300);
    }
}
