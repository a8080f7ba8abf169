//! One table's three-way classification in bounded memory.
//!
//! The fingerprint maps of the three sides take about [`BYTES_PER_PRINT`]
//! bytes a row. When the three together would pass the budget, each side is
//! streamed once into `P` partition files by id key (32 bytes a row, in a
//! temporary directory removed on drop), and the partitions are classified
//! one at a time. An id lands in the same partition on every side, so the
//! union of the partitions' decisions is the table's, and the maps held at
//! any moment are one partition's: about the budget, whatever the table's
//! size. What stays is the delta itself (the ids the merge changes).

use std::path::{Path, PathBuf};

use lance::Dataset;
use tokio::io::AsyncWriteExt;

use super::delta::{Hash128, KeyDelta, PrintScan, Prints, classify, collect_prints};
use crate::engine::storage::{Reshaper, table};
use crate::protocol::{OmniError, Result};

/// The default memory for one table's fingerprint maps.
pub const DEFAULT_BUDGET: u64 = 256 << 20;

/// Bytes a fingerprint map holds per row: a 128-bit key and a 128-bit
/// fingerprint, plus the hash map's own overhead.
const BYTES_PER_PRINT: u64 = 48;

/// At most this many partitions (and open files) per side: 256 partitions of
/// the default budget hold over a billion rows.
const MAX_PARTITIONS: u64 = 256;

/// Bytes a partition file holds per row.
const RECORD: usize = 32;

/// The base side of a table's merge.
#[derive(Clone, Copy)]
pub enum Base<'d> {
    /// The table did not exist at the base: every row is new.
    Empty,
    /// The base is the target's own version.
    Target,
    /// The base at its own version.
    At(Side<'d>),
}

/// One side of a classification: a dataset, fingerprinted over every
/// column or over `columns` (which hold `id`), in that order, so two
/// versions of a table across a schema change compare on what they share;
/// or with each batch first brought into another shape (`shape`), so the
/// sides of a merge across a schema change compare in the merged one.
#[derive(Clone, Copy)]
pub struct Side<'d> {
    /// The rows.
    pub ds: &'d Dataset,
    /// The columns fingerprinted; `None`: all of them.
    pub columns: Option<&'d [&'d str]>,
    /// What each batch becomes before it is fingerprinted.
    pub shape: Option<&'d Reshaper>,
}

impl<'d> Side<'d> {
    /// Every column of `ds`.
    pub fn whole(ds: &'d Dataset) -> Side<'d> {
        Side { ds, columns: None, shape: None }
    }

    async fn prints(self) -> Result<Prints> {
        collect_prints(self.scan().await?).await
    }

    async fn scan(self) -> Result<PrintScan<'d>> {
        let scan = match self.columns {
            Some(columns) => PrintScan::of_columns(self.ds, columns).await?,
            None => PrintScan::new(self.ds).await?,
        };
        Ok(scan.shaped(self.shape.cloned()))
    }
}

/// Apply the row rule to every id of the three sides, holding at most about
/// `budget` bytes of fingerprints at a time.
pub async fn classify_within(base: Base<'_>, source: &Dataset, target: &Dataset, budget: u64) -> Result<KeyDelta> {
    classify_sides(base, Side::whole(source), Side::whole(target), budget).await
}

/// [`classify_within`] over the columns each [`Side`] names.
pub async fn classify_sides(base: Base<'_>, source: Side<'_>, target: Side<'_>, budget: u64) -> Result<KeyDelta> {
    let mut rows = table::row_count(target.ds).await? + table::row_count(source.ds).await?;
    if let Base::At(side) = base {
        rows += table::row_count(side.ds).await?;
    }
    let parts = partitions(rows, budget);
    if parts == 1 {
        let (target, source) = (target.prints().await?, source.prints().await?);
        let base = match base {
            Base::Empty => Some(Prints::new()),
            Base::Target => None,
            Base::At(side) => Some(side.prints().await?),
        };
        return Ok(classify(base.as_ref().unwrap_or(&target), &source, &target));
    }
    let dir = tempfile::Builder::new()
        .prefix("omnigraph-merge-")
        .tempdir()
        .map_err(|e| OmniError::Internal(format!("creating the merge's spill directory: {e}")))?;
    write_side(dir.path(), "target", target, parts).await?;
    write_side(dir.path(), "source", source, parts).await?;
    if let Base::At(side) = base {
        write_side(dir.path(), "base", side, parts).await?;
    }
    let mut delta = KeyDelta::default();
    for part in 0..parts {
        let target = read_part(dir.path(), "target", part).await?;
        let source = read_part(dir.path(), "source", part).await?;
        let base = match base {
            Base::Empty => Some(Prints::new()),
            Base::Target => None,
            Base::At(_) => Some(read_part(dir.path(), "base", part).await?),
        };
        delta.extend(classify(base.as_ref().unwrap_or(&target), &source, &target));
    }
    Ok(delta)
}

/// How many partitions keep `rows` fingerprints within `budget`.
fn partitions(rows: u64, budget: u64) -> u64 {
    rows.saturating_mul(BYTES_PER_PRINT).div_ceil(budget.max(1)).clamp(1, MAX_PARTITIONS)
}

/// The partition of id key `key` among `parts`.
fn partition_of(key: Hash128, parts: u64) -> usize {
    (key % u128::from(parts)) as usize
}

fn part_path(dir: &Path, side: &str, part: u64) -> PathBuf {
    dir.join(format!("{side}-{part}"))
}

fn spill_err(what: &str, e: std::io::Error) -> OmniError {
    OmniError::Internal(format!("{what} the merge's spill files: {e}"))
}

/// Stream `ds`'s `(id key, fingerprint)` pairs into `parts` files by key.
async fn write_side(dir: &Path, name: &str, side: Side<'_>, parts: u64) -> Result<()> {
    let mut files = Vec::with_capacity(parts as usize);
    for part in 0..parts {
        let file = tokio::fs::File::create(part_path(dir, name, part)).await.map_err(|e| spill_err("creating", e))?;
        files.push(tokio::io::BufWriter::new(file));
    }
    let mut scan = side.scan().await?;
    let mut records: Vec<Vec<u8>> = vec![Vec::new(); parts as usize];
    while let Some(pairs) = scan.next().await? {
        for (key, print) in pairs {
            let record = &mut records[partition_of(key, parts)];
            record.extend_from_slice(&key.to_le_bytes());
            record.extend_from_slice(&print.to_le_bytes());
        }
        for (file, record) in files.iter_mut().zip(records.iter_mut()) {
            file.write_all(record).await.map_err(|e| spill_err("writing", e))?;
            record.clear();
        }
    }
    for mut file in files {
        file.flush().await.map_err(|e| spill_err("writing", e))?;
    }
    Ok(())
}

/// One partition of one side, as a map.
async fn read_part(dir: &Path, side: &str, part: u64) -> Result<Prints> {
    let bytes = tokio::fs::read(part_path(dir, side, part)).await.map_err(|e| spill_err("reading", e))?;
    if bytes.len() % RECORD != 0 {
        return Err(OmniError::Internal(format!("a merge spill file of {} bytes is torn", bytes.len())));
    }
    let word = |b: &[u8]| {
        let mut w = [0u8; 16];
        w.copy_from_slice(b);
        u128::from_le_bytes(w)
    };
    Ok(bytes.chunks_exact(RECORD).map(|r| (word(&r[..16]), word(&r[16..]))).collect())
}

#[cfg(test)]
mod tests {
    use super::{MAX_PARTITIONS, partition_of, partitions};

    #[test]
    fn partitions_keep_the_maps_within_the_budget() {
        assert_eq!(partitions(0, 1 << 20), 1);
        assert_eq!(partitions(1_000, 256 << 20), 1);
        // 3 million rows at 48 bytes need 144 MB: one partition of 256 MiB, three of 64 MiB.
        assert_eq!(partitions(3_000_000, 256 << 20), 1);
        assert_eq!(partitions(3_000_000, 64 << 20), 3);
        assert_eq!(partitions(u64::from(u32::MAX), 1), MAX_PARTITIONS);
        assert_eq!(partitions(10, 0), MAX_PARTITIONS);
    }

    #[test]
    fn every_key_has_one_partition_in_range() {
        for parts in [1, 2, 7, MAX_PARTITIONS] {
            for key in [0u128, 1, u128::MAX, 0xdead_beef << 64] {
                let p = partition_of(key, parts);
                assert!((p as u64) < parts);
                assert_eq!(p, partition_of(key, parts));
            }
        }
    }
}
