//! Keeping a table's indexes complete.
//!
//! A Lance index is one or more segments, each covering the fragments named
//! in its bitmap: rows written after the build, and fragments a compaction
//! rewrote, are in none, so a lookup scans them beside the index.
//! [`coverage`] measures that tail from the manifest alone (no data read);
//! [`fold`] stages segments covering it with Lance's incremental index
//! optimisation, without committing: the caller adds them to the table's one
//! `CreateIndex` transaction, which the exact adapter commits like every
//! other effect. A [`FoldDepth::Delta`] fold indexes only the tail, so its
//! cost follows the rows written, not the table (merging a BTree's pages
//! with the tail rewrites the whole index: 5 s for a 10,000-row tail of a
//! 1.1M-row table with four indexes, measured); [`FoldDepth::Merge`]
//! (`optimize`) rewrites each index into one segment.

use std::collections::HashSet;

use lance::Dataset;
use lance::index::DatasetIndexExt;
use lance::index::optimize::plan_optimize_indices;
use lance_index::optimize::OptimizeOptions;
use lance_table::format::IndexMetadata;

use crate::engine::compaction_tiers::segments_to_merge;
use crate::protocol::{OmniError, Result};

/// How much of a table one index covers, at the handle's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    /// The index name (`<column>_<kind>`).
    pub index: String,
    /// Live rows in fragments some segment of the index covers.
    pub indexed_rows: u64,
    /// Live rows in the table.
    pub total_rows: u64,
    /// Fragments no segment covers (scanned beside the index).
    pub unindexed_fragments: u64,
    /// Segments the index is made of (a lookup searches each).
    pub segments: u64,
}

impl Coverage {
    /// Indexed rows over the table's rows (1.0 for an empty table).
    pub fn share(&self) -> f64 {
        share(self.indexed_rows, self.total_rows)
    }

    /// Live rows a lookup scans beside the index.
    pub fn unindexed_rows(&self) -> u64 {
        self.total_rows - self.indexed_rows
    }
}

/// The coverage of every index `ds` has, by name, sorted. Metadata only:
/// fragment row counts and segment bitmaps from the manifest.
pub async fn coverage(ds: &Dataset) -> Result<Vec<Coverage>> {
    let ctx = || format!("reading the index coverage of {}", ds.uri());
    let segments = ds.load_indices().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let mut by_name: std::collections::BTreeMap<&str, (HashSet<u32>, u64)> = Default::default();
    for segment in segments.iter().filter(|s| !is_system(s)) {
        let (covered, count) = by_name.entry(segment.name.as_str()).or_default();
        *count += 1;
        // A legacy segment without a bitmap covers nothing we can prove.
        if let Some(bitmap) = &segment.fragment_bitmap {
            covered.extend(bitmap.iter());
        }
    }
    let rows = fragment_rows(ds).await?;
    let total_rows = rows.iter().map(|(_, n)| n).sum();
    Ok(by_name
        .into_iter()
        .map(|(name, (covered, segments))| {
            let (inside, outside): (Vec<_>, Vec<_>) = rows.iter().partition(|(id, _)| covered.contains(id));
            Coverage {
                index: name.to_string(),
                indexed_rows: inside.iter().map(|(_, n)| n).sum(),
                total_rows,
                unindexed_fragments: outside.len() as u64,
                segments,
            }
        })
        .collect())
}

/// `indexed` rows of `total` as a share (1.0 for an empty table).
pub fn share(indexed: u64, total: u64) -> f64 {
    if total == 0 { 1.0 } else { indexed as f64 / total as f64 }
}

/// Each fragment's id and live rows (from the manifest where it records
/// them).
async fn fragment_rows(ds: &Dataset) -> Result<Vec<(u32, u64)>> {
    let ctx = || format!("counting the rows of {}", ds.uri());
    let mut rows = Vec::with_capacity(ds.manifest().fragments.len());
    for fragment in ds.manifest().fragments.iter() {
        let live = match fragment.num_rows() {
            Some(n) => n as u64,
            None => {
                let file = ds
                    .get_fragment(fragment.id as usize)
                    .ok_or_else(|| OmniError::Internal(format!("{}: fragment {} vanished", ctx(), fragment.id)))?;
                file.count_rows(None).await.map_err(|e| OmniError::storage(ctx(), e))? as u64
            }
        };
        rows.push((fragment.id as u32, live));
    }
    Ok(rows)
}

/// Lance's own bookkeeping indexes (fragment reuse, MemWAL): not ours to
/// report or fold.
fn is_system(segment: &IndexMetadata) -> bool {
    segment.name.starts_with("__")
}

/// How far a [`fold`] rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FoldDepth {
    /// A new segment per index over its tail; a BTree's newest segments
    /// merge with it as a binary counter carries ([`segments_to_merge`]),
    /// and an index already made of [`MAX_SEGMENTS`] segments is merged
    /// whole, so lookups stay few.
    Delta,
    /// Every segment of each index and its tail into one segment: a cost
    /// that follows the table (`optimize`).
    Merge,
}

/// Segments an index may have before a delta fold merges them.
pub const MAX_SEGMENTS: u64 = 16;

/// The segments to add and the segments they replace.
pub type FoldedSegments = (Vec<IndexMetadata>, Vec<IndexMetadata>);

/// New segments of the indexes named in `names` that cover every fragment
/// of `ds` their existing segments miss, and the existing segments they
/// replace (a merged segment supersedes its inputs; a delta replaces
/// none). Files are written; nothing is committed. Empty when every named
/// index covers the whole table (and, for a merge, is one segment).
pub async fn fold(ds: &Dataset, names: Vec<String>, depth: FoldDepth) -> Result<FoldedSegments> {
    let ctx = || format!("listing the indexes of {}", ds.uri());
    let all = ds.load_indices().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let rows = fragment_rows(ds).await?;
    // Per index, how many of its newest segments merge with the tail
    // (`usize::MAX`: all of them; 0: a delta of its own).
    let mut by_merge: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
    for name in names {
        let segments: Vec<&IndexMetadata> = all.iter().filter(|s| s.name == name).collect();
        let merge = match depth {
            FoldDepth::Merge => usize::MAX,
            FoldDepth::Delta if segments.len() as u64 >= MAX_SEGMENTS => usize::MAX,
            FoldDepth::Delta if name.ends_with("_btree") => tiered_merge(&segments, &rows),
            FoldDepth::Delta => 0,
        };
        by_merge.entry(merge).or_default().push(name);
    }
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    for (merge, names) in by_merge {
        let options = if merge == 0 { OptimizeOptions::append() } else { OptimizeOptions::merge(merge) };
        let (more, gone) = run_plan(ds, names, options).await?;
        added.extend(more);
        removed.extend(gone);
    }
    Ok((added, removed))
}

/// How many of a BTree's newest segments a delta fold merges with its tail
/// ([`segments_to_merge`]): a key lookup searches every segment, so they
/// are kept to about log2 of the table's rows over the fold's. Other kinds
/// append (a vector index's segments must share their partitions' model).
fn tiered_merge(segments: &[&IndexMetadata], rows: &[(u32, u64)]) -> usize {
    let covers = |s: &IndexMetadata, id: u32| s.fragment_bitmap.as_ref().is_some_and(|b| b.contains(id));
    let sizes: Vec<u64> =
        segments.iter().map(|s| rows.iter().filter(|(id, _)| covers(s, *id)).map(|(_, n)| n).sum()).collect();
    let tail = rows.iter().filter(|(id, _)| !segments.iter().any(|s| covers(s, *id))).map(|(_, n)| n).sum();
    segments_to_merge(&sizes, tail)
}

/// Plan, build and merge the optimisation of `names` under `options`.
async fn run_plan(ds: &Dataset, names: Vec<String>, options: OptimizeOptions) -> Result<FoldedSegments> {
    let ctx = || format!("folding new rows into the indexes of {}", ds.uri());
    if names.is_empty() {
        return Ok((vec![], vec![]));
    }
    let plan =
        plan_optimize_indices(ds, &options.index_names(names)).await.map_err(|e| OmniError::storage(ctx(), e))?;
    let mut built = Vec::with_capacity(plan.tasks.len());
    for task in &plan.tasks {
        // Boxed: the task's future is large and `Send` only for one lifetime.
        let run: futures::future::BoxFuture<'_, _> = Box::pin(task.execute(ds));
        built.extend(run.await.map_err(|e| OmniError::storage(ctx(), e))?);
    }
    let mut merged = Vec::with_capacity(plan.merges.len());
    for merge in &plan.merges {
        let run: futures::future::BoxFuture<'_, _> = Box::pin(merge.execute(ds, &built));
        merged.extend(run.await.map_err(|e| OmniError::storage(ctx(), e))?);
    }
    let replaced: HashSet<uuid::Uuid> = merged.iter().flat_map(|r| r.replaces.iter().copied()).collect();
    let existing = ds.load_indices().await.map_err(|e| OmniError::storage(ctx(), e))?;
    let removed: Vec<IndexMetadata> = existing.iter().filter(|s| replaced.contains(&s.uuid)).cloned().collect();
    if removed.len() != replaced.len() {
        return Err(OmniError::Internal(format!(
            "{}: the fold replaces {} segments, {} of which the table has",
            ctx(),
            replaced.len(),
            removed.len()
        )));
    }
    let mut segments: Vec<IndexMetadata> = merged.into_iter().map(|r| r.segment).collect();
    for segment in &mut segments {
        // An inverted build stages partitions under a directory the merged
        // segment no longer reads; the committed segment lists only its own.
        if let Some(files) = segment.files.as_mut() {
            files.retain(|f| !lance_index::scalar::inverted::builder::is_staged_path(&f.path));
        }
    }
    Ok((segments, removed))
}
