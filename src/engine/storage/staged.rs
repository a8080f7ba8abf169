//! Staged and committed table transactions.
//!
//! A [`StagedTxn`] is the only thing [`super::commit_exact`] accepts, and a
//! [`CommittedTxn`] is the only thing that can become a manifest table update,
//! so an uncommitted transaction can never be published.

use std::sync::Arc;

use lance::dataset::Dataset;
use lance::dataset::scanner::RowAddrTreeMap;
use lance::dataset::transaction::Transaction;
use serde::{Deserialize, Serialize};

/// The pre-minted identity of a table transaction: the version it was staged
/// against and the transaction uuid Lance records with it. Recovery proves
/// ownership of a table version by finding this identity at `read_version + 1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TxnIdentity {
    /// The table version the transaction was staged against.
    pub read_version: u64,
    /// The transaction uuid (pre-minted by the writer).
    pub uuid: String,
}

impl TxnIdentity {
    /// Mint a fresh identity for a transaction staged at `read_version`.
    pub fn mint(read_version: u64) -> Self {
        TxnIdentity { read_version, uuid: format!("omni-{}", ulid::Ulid::new()) }
    }

    /// The version this transaction must land at.
    pub fn target_version(&self) -> u64 {
        self.read_version + 1
    }
}

/// How a keyed merge-insert on `id` treats rows that already exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MergeMode {
    /// Fail staging if any id already exists (append loads, unkeyed inserts).
    StrictInsert,
    /// Insert new ids, replace existing ones.
    Upsert,
    /// Replace existing ids, ignore new ones.
    UpdateOnly,
}

/// What to stage on a table, kept as data so a first touch on a named branch
/// can stage it on the fork once the fork exists.
#[derive(Debug, Clone)]
pub enum StagePlan {
    /// A keyed merge-insert on `id`.
    Merge {
        /// The rows, in the table's schema.
        batches: Vec<arrow_array::RecordBatch>,
        /// How existing ids are treated.
        mode: MergeMode,
    },
    /// New rows whose ids the writer proved absent at the pin (fresh ULIDs,
    /// or an append load's checked ids): a plain append, no join against the
    /// table, and the exact-version commit keeps the proof valid.
    Append {
        /// The rows, in the table's schema.
        batches: Vec<arrow_array::RecordBatch>,
    },
    /// The live rows at `addresses` of the table as staged replaced by
    /// `batches` (none: deleted): a change whose rows the writer located
    /// already (a fast-forward merge knows them from the base's row
    /// versions, and the target is the base).
    Rewrite {
        /// Row addresses, each of a live row.
        addresses: Vec<u64>,
        /// The new rows, in the table's schema.
        batches: Vec<arrow_array::RecordBatch>,
    },
    /// A delete of the rows with these ids.
    Delete {
        /// The ids.
        ids: Vec<String>,
    },
    /// A replacement of the whole table (no batches = empty it).
    Overwrite {
        /// The new rows.
        batches: Vec<arrow_array::RecordBatch>,
    },
    /// A compaction (no row changes): of the table's small fragments as the
    /// last step of a write's chain once enough of them piled up, so the
    /// write's one commit also bounds the table's fragment count (see
    /// [`super::table::needs_compaction`]); or a full one after optimize's
    /// [`StagePlan::Configure`]. It stages a transaction even when the step
    /// before left nothing to rewrite, so the chain keeps the versions it
    /// armed.
    Compact(super::table::Compaction),
    /// Set the table config every omnigraph table carries
    /// ([`super::lineage`]) on a table an older binary created: an
    /// `UpdateConfig`, no row changes. Compactions staged after it spill
    /// their lineage out of the manifest.
    Configure,
    /// Build these indexes (each missing one) and fold the rows the others
    /// do not cover into them, as one `CreateIndex` transaction: no row
    /// changes.
    Indices {
        /// What to build or fold.
        specs: Vec<crate::engine::lang::catalog::indexes::IndexSpec>,
        /// How far the folds rewrite.
        depth: super::index_fold::FoldDepth,
    },
    /// A change of the table's columns that touches no data file (a schema
    /// apply's nullable add, rename, soft drop or nullability change).
    EditColumns(super::table::ColumnEdit),
    /// Every row rewritten into `schema` through `reshape`, batch by batch
    /// as the scan reads them, as one overwrite (a schema apply's required
    /// property with a default, or a hard drop).
    Reshape {
        /// The table's schema after the rewrite.
        schema: arrow_schema::SchemaRef,
        /// One scanned batch to the same rows in `schema`.
        reshape: Reshaper,
    },
}

/// A batch-to-batch function a [`StagePlan::Reshape`] applies to every row.
#[derive(Clone)]
pub struct Reshaper(
    pub Arc<dyn Fn(arrow_array::RecordBatch) -> crate::protocol::Result<arrow_array::RecordBatch> + Send + Sync>,
);

impl std::fmt::Debug for Reshaper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reshaper")
    }
}

/// An uncommitted Lance transaction bound to the dataset handle it was staged
/// against. Opaque: the only way forward is [`super::commit_exact`].
pub struct StagedTxn {
    pub(super) dataset: Option<Arc<Dataset>>,
    pub(super) uri: String,
    pub(super) txn: Transaction,
    pub(super) affected_rows: Option<RowAddrTreeMap>,
    pub(super) rows_written: u64,
}

impl StagedTxn {
    /// Whether this is a compaction (a `Rewrite`: same rows, fewer fragments).
    pub fn is_compaction(&self) -> bool {
        matches!(self.txn.operation, lance::dataset::transaction::Operation::Rewrite { .. })
    }

    /// The pre-minted identity this transaction will carry.
    pub fn identity(&self) -> TxnIdentity {
        TxnIdentity { read_version: self.txn.read_version, uuid: self.txn.uuid.clone() }
    }

    /// The dataset URI this transaction targets.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// The native ref this transaction was staged on and commits to
    /// (`None` = main; a creation has no dataset yet and targets main).
    pub fn target_ref(&self) -> Option<&str> {
        self.dataset.as_ref().and_then(|ds| ds.manifest().branch.as_deref())
    }

    /// Rows written into new data files by this transaction.
    pub fn rows_written(&self) -> u64 {
        self.rows_written
    }
}

impl std::fmt::Debug for StagedTxn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StagedTxn").field("uri", &self.uri).field("identity", &self.identity()).finish()
    }
}

/// A transaction that landed exactly at `identity.read_version + 1`.
#[derive(Debug, Clone)]
pub struct CommittedTxn {
    /// The identity that was verified in Lance's transaction file.
    pub identity: TxnIdentity,
    /// The new table version.
    pub version: u64,
    /// Live row count at the new version.
    pub row_count: u64,
    /// The dataset at the new version.
    pub dataset: Arc<Dataset>,
}
