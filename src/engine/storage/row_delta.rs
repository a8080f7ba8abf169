//! The rows one version of a table changed against an older version of the
//! same dataset ref, read from the two manifests' fragment lists and what
//! Lance records per row (stable row ids and `_row_last_updated_at_version`).
//!
//! Lance never rewrites a fragment's rows in place without saying so in its
//! metadata, so the fragment lists alone name everything a range touched:
//! - a fragment only the newer version holds (an append, the new copies of
//!   updated rows, a compaction's output): its live rows are newer images;
//! - a shared fragment whose deletion vector changed: the offsets it newly
//!   deletes are older images (taken by row address from the older version,
//!   no row-id index), the offsets it revives (a restore) newer ones;
//! - a shared fragment otherwise rewritten (new data files or overlays):
//!   its rows updated after the older version, on both sides;
//! - a fragment only the older version holds (compacted or emptied): its
//!   rows are older images, except those that moved unchanged (same stable
//!   row id and the same last-update version on both sides), which cancel.
//!
//! So the cost follows the rows and fragments the range touched, not the
//! table. A rewrite that changed no value (an identical upsert) comes back
//! too: callers compare the two images by key.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt64Type;
use arrow_array::{BooleanArray, RecordBatch, UInt64Array};
use futures::TryStreamExt;
use lance::Dataset;
use lance::dataset::ProjectionRequest;
use lance::dataset::TakeBuilder;
use lance::dataset::fragment::FileFragment;
use lance_core::utils::deletion::DeletionVector;
use lance_table::format::Fragment;

use tracing::{Instrument, info_span};

use crate::protocol::{OmniError, Result};

const ROW_ID: &str = "_rowid";
const ROW_ADDR: &str = "_rowaddr";
const LAST_UPDATED: &str = "_row_last_updated_at_version";

/// Lance's per-row system columns, which are not entity properties.
const SYSTEM_COLUMNS: [&str; 3] = [ROW_ID, ROW_ADDR, LAST_UPDATED];

/// Rows taken by address per request.
const TAKE_CHUNK: usize = 8192;

/// The changed rows of a range: each side's images of them.
pub struct RowDelta {
    /// Rows live at the newer version that the range inserted or rewrote.
    pub after: Vec<RecordBatch>,
    /// Where each row of `after` is in the newer version, in row order.
    pub after_addresses: Vec<u64>,
    /// The older version's images of rows the range rewrote or removed.
    pub before: Vec<RecordBatch>,
    /// Where each row of `before` is in the older version, in row order.
    pub before_addresses: Vec<u64>,
    /// Rows the range moved unchanged (a compaction): each one's address in
    /// the older version and its address in the newer one.
    pub moved: HashMap<u64, u64>,
}

/// Newer images as they are gathered: rows without Lance's system columns,
/// and each row's address.
#[derive(Default)]
struct Images {
    rows: Vec<RecordBatch>,
    addresses: Vec<u64>,
}

impl Images {
    /// `batch`'s rows (which carry `_rowaddr`).
    fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        self.addresses.extend(u64_column(batch, ROW_ADDR)?.values().iter().copied());
        self.rows.push(without_system_columns(batch)?);
        Ok(())
    }
}

/// The fragment-level shape of a range, from the two manifests alone.
#[derive(Default)]
struct Shape {
    /// Only the newer version holds these.
    added: Vec<Fragment>,
    /// Only the older version holds these.
    vanished: Vec<Fragment>,
    /// Shared, with another deletion vector: (older, newer).
    deletions: Vec<(Fragment, Fragment)>,
    /// Shared, with other data files, overlays or row metadata (newer).
    rewritten: Vec<Fragment>,
}

impl Shape {
    fn of(from: &[Fragment], to: &[Fragment]) -> Shape {
        let older: HashMap<u64, &Fragment> = from.iter().map(|f| (f.id, f)).collect();
        let newer: HashSet<u64> = to.iter().map(|f| f.id).collect();
        let mut shape = Shape::default();
        for f in to {
            let Some(old) = older.get(&f.id) else {
                shape.added.push(f.clone());
                continue;
            };
            let (old_content, new_content) = (content(old), content(f));
            if old_content.deletion_file != new_content.deletion_file {
                shape.deletions.push(((*old).clone(), f.clone()));
            }
            let mut same_deletions = new_content;
            same_deletions.deletion_file = old_content.deletion_file.clone();
            if same_deletions != old_content {
                shape.rewritten.push(f.clone());
            }
        }
        shape.vanished = from.iter().filter(|f| !newer.contains(&f.id)).cloned().collect();
        shape
    }
}

/// `fragment` without where its files live: a branch's manifest names the
/// files it inherited from its parent through a base path (`base_id`), the
/// parent's without one, yet they are the same files (each file name is
/// unique), so only names and metadata tell whether a fragment changed.
fn content(fragment: &Fragment) -> Fragment {
    let mut out = fragment.clone();
    for file in &mut out.files {
        file.base_id = None;
    }
    if let Some(deletions) = &mut out.deletion_file {
        deletions.base_id = None;
    }
    out
}

/// The rows `to` changed against `from`, or `None` when the fast path does
/// not apply: `to` is not a later version of `from`'s dataset ref (or of a
/// native branch forked from that ref at or after `from`), or a version
/// lacks stable row ids.
pub async fn between(from: &Dataset, to: &Dataset) -> Result<Option<RowDelta>> {
    let v0 = from.version().version;
    let stable = from.manifest.uses_stable_row_ids() && to.manifest.uses_stable_row_ids();
    if !stable || !descends(from, to).await? {
        return Ok(None);
    }
    let shape = Shape::of(&from.manifest.fragments, &to.manifest.fragments);
    let (from_arc, to_arc) = (Arc::new(from.clone()), Arc::new(to.clone()));
    let (mut before_addrs, mut after_addrs) = (Vec::new(), Vec::new());
    for (old, new) in &shape.deletions {
        let (was, is) = (deletion_vector(&from_arc, old).await?, deletion_vector(&to_arc, new).await?);
        before_addrs.extend(is.iter().filter(|o| !was.contains(*o)).map(|o| address(old.id, o)));
        after_addrs.extend(was.iter().filter(|o| !is.contains(*o)).map(|o| address(new.id, o)));
    }
    let mut after = Images::default();
    if !shape.rewritten.is_empty() {
        // Rows rewritten in place keep their address: the older image sits
        // at the same one (when it was live there).
        let filter = format!("{LAST_UPDATED} > {v0}");
        let span = info_span!("row_delta.rewritten", fragments = shape.rewritten.len());
        for batch in scan_fragments(to, shape.rewritten.clone(), &[ROW_ADDR], Some(&filter)).instrument(span).await? {
            before_addrs.extend(u64_column(&batch, ROW_ADDR)?.values().iter().copied());
            after.push(&batch)?;
        }
    }
    let moved = moved_rows(from, to, &shape, v0, &mut after, &mut before_addrs).await?;
    // Revived rows (a restore), taken in address order.
    after_addrs.sort_unstable();
    after_addrs.dedup();
    after.rows.extend(take(&to_arc, after_addrs.clone()).await?);
    after.addresses.extend(after_addrs);
    before_addrs.sort_unstable();
    before_addrs.dedup();
    let span = info_span!("row_delta.before_images", rows = before_addrs.len());
    let before = take(&from_arc, before_addrs.clone()).instrument(span).await?;
    let Images { rows: after, addresses: after_addresses } = after;
    Ok(Some(RowDelta { after, after_addresses, before, before_addresses: before_addrs, moved }))
}

/// [`between`] in either direction: when `to` is older than `from` on
/// their lineage (a diff from a head back to its parent, a revert's
/// parent against the reverted commit), the range from `to` to `from`
/// read backwards ([`RowDelta::reversed`]).
pub async fn either_way(from: &Dataset, to: &Dataset) -> Result<Option<RowDelta>> {
    match between(from, to).await? {
        Some(delta) => Ok(Some(delta)),
        None => Ok(between(to, from).await?.map(RowDelta::reversed)),
    }
}

impl RowDelta {
    /// The same range seen from its newer end: the newer version's images
    /// become the images left behind, the older version's the ones arrived.
    pub fn reversed(self) -> RowDelta {
        let RowDelta { after, after_addresses, before, before_addresses, moved } = self;
        RowDelta {
            after: before,
            after_addresses: before_addresses,
            before: after,
            before_addresses: after_addresses,
            moved: moved.into_iter().map(|(old, new)| (new, old)).collect(),
        }
    }
}

/// Whether `to` is `from` or a later version of it on its ref, or a
/// version of a native branch forked from `from`'s ref at or after `from`.
/// A branch starts from its parent's manifest and numbers new fragments
/// (and row ids) past the parent's at the fork, so a fragment id both
/// versions hold names the same fragment, as on one ref.
async fn descends(from: &Dataset, to: &Dataset) -> Result<bool> {
    let (v0, v1) = (from.version().version, to.version().version);
    let base = super::table::table_uri;
    if base(from) != base(to) {
        return Ok(false);
    }
    if from.manifest.branch == to.manifest.branch {
        return Ok(v0 <= v1);
    }
    let Some(child) = to.manifest.branch.as_deref() else { return Ok(false) };
    let branch = super::table::native_branch(&base(to), child).await?;
    Ok(branch.is_some_and(|b| b.parent_branch == from.manifest.branch && b.parent_version >= v0))
}

/// The newer images of the added fragments' rows into `after`, and the
/// addresses of the vanished fragments' rows into `before_addrs`, less the
/// rows that moved unchanged between them (a compaction): those are
/// returned, older address to newer.
async fn moved_rows(
    from: &Dataset,
    to: &Dataset,
    shape: &Shape,
    v0: u64,
    after: &mut Images,
    before_addrs: &mut Vec<u64>,
) -> Result<HashMap<u64, u64>> {
    if shape.added.is_empty() && shape.vanished.is_empty() {
        return Ok(HashMap::new());
    }
    let added = if shape.added.is_empty() {
        Vec::new()
    } else {
        scan_fragments(to, shape.added.clone(), &[ROW_ID, ROW_ADDR, LAST_UPDATED], None).await?
    };
    if shape.vanished.is_empty() {
        for batch in &added {
            after.push(batch)?;
        }
        return Ok(HashMap::new());
    }
    // A row that moved unchanged kept its stable row id and its last-update
    // version (any write bumps the version); only rows last updated at or
    // before `v0` can have.
    let old = scan_system_columns(from, shape.vanished.clone()).await?;
    let mut old_versions: HashMap<u64, u64> = HashMap::new();
    for batch in &old {
        let (ids, versions) = (u64_column(batch, ROW_ID)?, u64_column(batch, LAST_UPDATED)?);
        old_versions.extend(ids.values().iter().copied().zip(versions.values().iter().copied()));
    }
    // Row id of each row that moved unchanged -> its newer address.
    let mut cancelled: HashMap<u64, u64> = HashMap::new();
    for batch in &added {
        let (ids, versions) = (u64_column(batch, ROW_ID)?, u64_column(batch, LAST_UPDATED)?);
        let addrs = u64_column(batch, ROW_ADDR)?;
        let keep: BooleanArray = ids
            .values()
            .iter()
            .zip(versions.values())
            .zip(addrs.values())
            .map(|((id, v), at)| {
                let unchanged = *v <= v0 && old_versions.get(id) == Some(v);
                if unchanged {
                    cancelled.insert(*id, *at);
                }
                Some(!unchanged)
            })
            .collect();
        let kept = arrow::compute::filter_record_batch(batch, &keep).map_err(|e| storage_err(to, e))?;
        if kept.num_rows() > 0 {
            after.push(&kept)?;
        }
    }
    let mut moved = HashMap::with_capacity(cancelled.len());
    for batch in &old {
        let (ids, addrs) = (u64_column(batch, ROW_ID)?, u64_column(batch, ROW_ADDR)?);
        for (id, at) in ids.values().iter().zip(addrs.values()) {
            match cancelled.get(id) {
                Some(now) => {
                    moved.insert(*at, *now);
                }
                None => before_addrs.push(*at),
            }
        }
    }
    Ok(moved)
}

fn storage_err(ds: &Dataset, e: impl std::fmt::Display) -> OmniError {
    OmniError::storage(format!("reading the row delta of {} v{}", ds.uri(), ds.version().version), e)
}

/// A row address: the fragment id in the high half, the offset in the low.
fn address(fragment: u64, offset: u32) -> u64 {
    (fragment << 32) | u64::from(offset)
}

async fn deletion_vector(ds: &Arc<Dataset>, fragment: &Fragment) -> Result<Arc<DeletionVector>> {
    let file = FileFragment::new(ds.clone(), fragment.clone());
    Ok(file.get_deletion_vector().await.map_err(|e| storage_err(ds, e))?.unwrap_or_default())
}

/// The live rows of `fragments` of `ds`: every column, with the system
/// columns `extra`, those matching `filter`.
async fn scan_fragments(
    ds: &Dataset,
    fragments: Vec<Fragment>,
    extra: &[&str],
    filter: Option<&str>,
) -> Result<Vec<RecordBatch>> {
    let mut columns: Vec<&str> = ds.schema().fields.iter().map(|f| f.name.as_str()).collect();
    columns.extend_from_slice(extra);
    collect(ds, fragments, &columns, filter).await
}

/// The stable row id, address and last-update version of the live rows of
/// `fragments` of `ds`, without their values.
async fn scan_system_columns(ds: &Dataset, fragments: Vec<Fragment>) -> Result<Vec<RecordBatch>> {
    collect(ds, fragments, &[ROW_ID, ROW_ADDR, LAST_UPDATED], None).await
}

/// The live rows of `fragments` of `ds` that match `filter`, as `columns`.
async fn collect(
    ds: &Dataset,
    fragments: Vec<Fragment>,
    columns: &[&str],
    filter: Option<&str>,
) -> Result<Vec<RecordBatch>> {
    let scan = async {
        let mut scanner = ds.scan();
        scanner.with_fragments(fragments);
        scanner.project(columns)?;
        if let Some(filter) = filter {
            scanner.filter(filter)?;
        }
        scanner.try_into_stream().await?.try_collect::<Vec<_>>().await
    };
    scan.await.map_err(|e| storage_err(ds, e))
}

/// The rows of `ds` at `addrs` (sorted, deduplicated), every column.
async fn take(ds: &Arc<Dataset>, mut addrs: Vec<u64>) -> Result<Vec<RecordBatch>> {
    addrs.sort_unstable();
    addrs.dedup();
    let mut out = Vec::new();
    for chunk in addrs.chunks(TAKE_CHUNK) {
        let take = async {
            let projection =
                ProjectionRequest::Schema(Arc::new(ds.schema().clone())).into_projection_plan(ds.clone())?;
            TakeBuilder::try_new_from_addresses(ds.clone(), chunk.to_vec(), Arc::new(projection))?.execute().await
        };
        out.push(take.await.map_err(|e| storage_err(ds, e))?);
    }
    Ok(out)
}

fn u64_column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a UInt64Array> {
    batch
        .column_by_name(name)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .ok_or_else(|| OmniError::Internal(format!("a row delta batch has no u64 `{name}` column")))
}

/// `batch` without Lance's system columns, the others in their order.
fn without_system_columns(batch: &RecordBatch) -> Result<RecordBatch> {
    let keep: Vec<usize> = batch
        .schema()
        .fields()
        .iter()
        .enumerate()
        .filter(|(_, f)| !SYSTEM_COLUMNS.contains(&f.name().as_str()))
        .map(|(i, _)| i)
        .collect();
    batch.project(&keep).map_err(|e| OmniError::Internal(format!("projecting a row delta batch: {e}")))
}

#[cfg(test)]
mod tests {
    use lance_table::format::{DataFile, DeletionFile, DeletionFileType};

    use super::*;

    /// Fragment `id` with one data file and, when `deleted`, a deletion
    /// file `deleted`; every file under the base path `base`.
    fn fragment(id: u64, file: &str, deleted: Option<u64>, base: Option<u32>) -> Fragment {
        let mut f = Fragment::new(id);
        f.files.push(DataFile::new_legacy_from_fields(file, vec![0, 1], base));
        f.physical_rows = Some(100);
        f.deletion_file = deleted.map(|id| DeletionFile {
            read_version: 1,
            id,
            file_type: DeletionFileType::Bitmap,
            num_deleted_rows: Some(1),
            base_id: base,
        });
        f
    }

    fn ids(fragments: &[Fragment]) -> Vec<u64> {
        fragments.iter().map(|f| f.id).collect()
    }

    /// A branch names the files it inherited through its parent's base
    /// path: those fragments are unchanged, and only what the branch wrote
    /// (a new deletion file, a new data file, a new fragment) shows.
    #[test]
    fn files_inherited_through_a_base_path_are_the_same_files() {
        let parent = [fragment(0, "a.lance", None, None), fragment(1, "b.lance", Some(7), None)];
        let branch = [
            fragment(0, "a.lance", None, Some(0)),
            fragment(1, "b.lance", Some(7), Some(0)),
            fragment(2, "c.lance", None, None),
        ];
        let shape = Shape::of(&parent, &branch);
        assert_eq!(ids(&shape.added), [2]);
        assert!(shape.rewritten.is_empty() && shape.deletions.is_empty() && shape.vanished.is_empty());

        let mut changed = branch.clone();
        changed[0] = fragment(0, "a.lance", Some(9), Some(0));
        changed[1].files[0] = DataFile::new_legacy_from_fields("b2.lance", vec![0, 1], None);
        let shape = Shape::of(&parent, &changed);
        assert_eq!(shape.deletions.iter().map(|(old, _)| old.id).collect::<Vec<_>>(), [0]);
        assert_eq!(ids(&shape.rewritten), [1]);
    }
}
