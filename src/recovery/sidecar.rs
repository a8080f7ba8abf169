//! Recovery sidecars (`__recovery/<operation_id>.json`): schema 3 for one
//! exact transaction per table (mutation, load, optimize), schema 4 for
//! per-table transaction chains and pointer-only updates (branch merge, and a
//! write whose chain ends with a compaction).
//!
//! A writer arms a sidecar before its first effect and confirms it once every
//! table landed exactly; recovery reads it to roll the write forward or back.
//! The typestate makes the order unbreakable: only [`SidecarStore::arm`]
//! creates an [`ArmedSidecar`], only [`ArmedSidecar::confirm`] (which consumes
//! it) creates a [`ConfirmedSidecar`], and only that can be finished.

use serde::{Deserialize, Serialize};
use tracing::warn;

use super::RECOVERY_DIR;
use crate::engine::manifest::{Lineage, TableUpdate};
use crate::engine::storage::branches::CreatePlan;
use crate::engine::storage::{Root, TxnIdentity};
pub use crate::engine::write_plan::AuthorityToken;
use crate::protocol::{OmniError, Result};

/// The sidecar format of writes with one exact transaction per table.
pub const SIDECAR_SCHEMA_VERSION: u32 = 3;
/// The sidecar format of writes with transaction chains or pointer-only
/// updates (branch merge, and writes that also compact).
pub const MERGE_SIDECAR_SCHEMA_VERSION: u32 = 4;
/// The sidecar format of a schema apply: exact overwrites and column edits of
/// existing tables, exact version-one creates of new ones (a table whose
/// `expected_version` is 0), and the registry delta in its lineage.
pub const SCHEMA_APPLY_SIDECAR_SCHEMA_VERSION: u32 = 7;
/// The sidecar format of an ensure-indices: one exact `CreateIndex` per
/// table (a first touch forks first).
pub const ENSURE_INDICES_SIDECAR_SCHEMA_VERSION: u32 = 8;

/// Which writer armed the sidecar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WriterKind {
    /// A `.gq` mutation.
    Mutation,
    /// A JSONL load.
    Load,
    /// A branch merge.
    Merge,
    /// An optimize (compaction): one exact `Rewrite` per table.
    Optimize,
    /// A schema apply (graph-global: it blocks writers on every branch).
    SchemaApply,
    /// An ensure-indices: one exact `CreateIndex` per table.
    EnsureIndices,
}

/// How far the write got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EffectPhase {
    /// Effects may have started; recovery may only roll back.
    Armed,
    /// Every table landed exactly; recovery rolls forward while the authority matches.
    EffectsConfirmed,
}

/// One table the write commits to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarTable {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Dataset URI.
    pub table_path: String,
    /// Native Lance branch written (`None` = main).
    pub table_branch: Option<String>,
    /// Manifest pin at arm time (the CAS expectation).
    pub expected_version: u64,
    /// The pre-minted transaction identity (staged at `expected_version`).
    pub planned: TxnIdentity,
    /// Schema 4: the chain's later transactions, each staged on the version
    /// the one before lands (`expected_version + 1`, `+ 2`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<TxnIdentity>,
    /// Set at confirmation: the landed version and its row count.
    pub confirmed: Option<TableUpdate>,
    /// A first touch on a named branch: the fork of `table_branch` this write
    /// creates (from this parent ref and exact inherited version) after arming.
    /// The sidecar is durable before the ref exists, so recovery owns it.
    #[serde(default)]
    pub fork: Option<CreatePlan>,
}

/// The durable body of a sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarBody {
    /// Always [`SIDECAR_SCHEMA_VERSION`] when written by this binary.
    pub schema_version: u32,
    /// ULID of the operation (also the file name).
    pub operation_id: String,
    /// Writer kind.
    pub writer_kind: WriterKind,
    /// Graph branch.
    pub branch: String,
    /// Actor making the write.
    pub actor: Option<String>,
    /// When the sidecar was armed (µs since the epoch).
    pub started_at_us: i64,
    /// Phase.
    pub phase: EffectPhase,
    /// Captured authority.
    pub token: AuthorityToken,
    /// Tables written, sorted by key.
    pub tables: Vec<SidecarTable>,
    /// The commit to publish (pre-minted id, actor, time).
    pub lineage: Lineage,
    /// Pre-minted id of the compensating commit if recovery rolls back.
    pub rollback_commit_id: String,
    /// Schema 4: pointers the write publishes with no physical effect (a
    /// merge adopting the source's published version), part of its delta.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pointers: Vec<SidecarPointer>,
    /// A branch merge whose row conflicts were decided: how. The decided
    /// rows are in the staged chains, so recovery rolls forward exactly
    /// this decision; the record says which one it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<MergeDecision>,
}

/// How a merge decided its row conflicts, as its sidecar records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeDecision {
    /// The strategy given (`None`: the schema's `@merge` policies).
    pub strategy: Option<crate::engine::three_way::MergeStrategy>,
    /// Row conflicts decided.
    pub decided: usize,
    /// How many resolutions were given.
    pub resolutions: usize,
    /// SHA-256 (hex) of the resolutions as JSON, in the order given.
    pub resolutions_digest: String,
}

/// A pointer-only table update of the intended manifest delta.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarPointer {
    /// The manifest pin it replaces.
    pub expected_version: u64,
    /// The pointer published.
    pub update: TableUpdate,
}

impl SidecarTable {
    /// Every pre-minted identity of this table's chain, in commit order.
    pub fn identities(&self) -> Vec<TxnIdentity> {
        std::iter::once(self.planned.clone()).chain(self.chain.iter().cloned()).collect()
    }

    /// Whether this table is a schema apply's new dataset (created at version
    /// 1 from nothing; no manifest pin exists before the apply publishes).
    pub fn is_create(&self) -> bool {
        self.expected_version == 0 && self.fork.is_none()
    }

    /// The version this table lands at once its whole chain committed.
    pub fn landing_version(&self) -> u64 {
        self.expected_version + 1 + self.chain.len() as u64
    }
}

impl SidecarBody {
    /// The sidecar's object name under the root.
    pub fn object_name(&self) -> String {
        sidecar_name(&self.operation_id)
    }

    /// The schema this body needs: 8 for an ensure-indices, 7 for a schema apply, 4 for a merge, or any write that commits
    /// a chain of transactions on a table (a write that also compacts) or
    /// moves a pointer without an effect; else 3 (one exact transaction per
    /// table: mutation, load, optimize).
    pub fn required_schema(&self) -> u32 {
        let chained = !self.pointers.is_empty() || self.tables.iter().any(|t| !t.chain.is_empty());
        if self.writer_kind == WriterKind::SchemaApply {
            SCHEMA_APPLY_SIDECAR_SCHEMA_VERSION
        } else if self.writer_kind == WriterKind::EnsureIndices {
            ENSURE_INDICES_SIDECAR_SCHEMA_VERSION
        } else if self.writer_kind == WriterKind::Merge || chained {
            MERGE_SIDECAR_SCHEMA_VERSION
        } else {
            SIDECAR_SCHEMA_VERSION
        }
    }
}

/// Object name of operation `id`'s sidecar.
pub fn sidecar_name(operation_id: &str) -> String {
    format!("{RECOVERY_DIR}/{operation_id}.json")
}

/// A durable Armed sidecar.
#[derive(Debug)]
pub struct ArmedSidecar {
    body: SidecarBody,
}

/// A durable EffectsConfirmed sidecar.
#[derive(Debug)]
pub struct ConfirmedSidecar {
    body: SidecarBody,
}

/// Reads and writes sidecars under one root.
#[derive(Debug, Clone)]
pub struct SidecarStore {
    root: Root,
}

fn encode(body: &SidecarBody) -> Result<Vec<u8>> {
    serde_json::to_vec_pretty(body).map_err(|e| OmniError::Internal(format!("encoding sidecar: {e}")))
}

impl SidecarStore {
    /// The store under `root`.
    pub fn new(root: Root) -> Self {
        SidecarStore { root }
    }

    /// The graph root the store lives under.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// Make `body` durable in phase Armed. A failure here means nothing was
    /// armed and the write must abort before any effect.
    pub async fn arm(&self, mut body: SidecarBody) -> Result<ArmedSidecar> {
        body.phase = EffectPhase::Armed;
        body.schema_version = body.required_schema();
        self.write(&body).await?;
        Ok(ArmedSidecar { body })
    }

    /// Write `body` whole. Recovery acts on what storage holds, and a
    /// successful put is exactly that on every store omnigraph runs on (a
    /// local temp file renamed into place, synced per the durability mode;
    /// an S3 PUT, read-after-write consistent), so it is not read back: on
    /// object storage that read was one more round trip on every write.
    async fn write(&self, body: &SidecarBody) -> Result<()> {
        self.root.put(&body.object_name(), encode(body)?).await
    }

    /// Read a sidecar by object name; `None` if it vanished. An unknown schema
    /// version or an unparsable body is refused loudly (and stays on disk).
    pub async fn read(&self, name: &str) -> Result<Option<SidecarBody>> {
        let Some(bytes) = self.root.get(name).await? else { return Ok(None) };
        let value: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
            OmniError::Internal(format!("sidecar {name} is not valid JSON ({e}); kept for an operator"))
        })?;
        let version = value.get("schema_version").and_then(serde_json::Value::as_u64);
        let known = [
            SIDECAR_SCHEMA_VERSION,
            MERGE_SIDECAR_SCHEMA_VERSION,
            SCHEMA_APPLY_SIDECAR_SCHEMA_VERSION,
            ENSURE_INDICES_SIDECAR_SCHEMA_VERSION,
        ];
        if !version.is_some_and(|v| known.iter().any(|k| u64::from(*k) == v)) {
            return Err(OmniError::Internal(format!(
                "sidecar {name} has schema version {version:?}; this binary reads {known:?}; kept for an operator"
            )));
        }
        let body = serde_json::from_value(value)
            .map_err(|e| OmniError::Internal(format!("sidecar {name} is malformed ({e}); kept for an operator")))?;
        Ok(Some(body))
    }

    /// Delete a sidecar once recovery settled its outcome (an armed one is
    /// dropped only through [`ArmedSidecar::discard`]).
    pub(crate) async fn delete(&self, name: &str) -> Result<()> {
        self.root.delete(name).await
    }
}

impl ArmedSidecar {
    /// The body as armed.
    pub fn body(&self) -> &SidecarBody {
        &self.body
    }

    /// Delete the sidecar of a write that made no effect (consumes it: the
    /// intent is gone, nothing is left to recover).
    pub async fn discard(self, store: &SidecarStore) -> Result<()> {
        store.delete(&self.body.object_name()).await
    }

    /// Record each table's landed version and rewrite the sidecar as
    /// EffectsConfirmed. Consumes the armed sidecar: confirming twice is not
    /// expressible. On failure the durable sidecar stays Armed (roll back only).
    pub async fn confirm(self, store: &SidecarStore, landed: Vec<TableUpdate>) -> Result<ConfirmedSidecar> {
        let mut body = self.body;
        for table in &mut body.tables {
            let update = landed.iter().find(|u| u.table_key == table.table_key).ok_or_else(|| {
                OmniError::Internal(format!("no confirmation for {} in {}", table.table_key, body.operation_id))
            })?;
            table.confirmed = Some(update.clone());
        }
        body.phase = EffectPhase::EffectsConfirmed;
        store.write(&body).await?;
        Ok(ConfirmedSidecar { body })
    }
}

impl ConfirmedSidecar {
    /// The body as confirmed.
    pub fn body(&self) -> &SidecarBody {
        &self.body
    }

    /// Delete the sidecar after the publish. A failed delete does not fail
    /// the write (it is durable already); the next heal finds it visible.
    pub async fn finish(self, store: &SidecarStore) {
        if let Err(e) = store.delete(&self.body.object_name()).await {
            warn!(operation_id = %self.body.operation_id, error = %e, "could not delete a finished sidecar");
        }
    }
}
