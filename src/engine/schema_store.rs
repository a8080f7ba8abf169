//! The accepted schema on disk: `_schema.pg` (source), `_schema.ir.json`
//! (the compiled catalog, whose table and property ids a rename carries
//! over) and `__schema_state.json` (its identity).
//!
//! A schema apply writes the target's three files as `*.staging` first,
//! publishes its commit, then promotes them (state file last). The live
//! files are inconsistent only while a promotion runs, which starts only
//! after the commit is visible, so [`SchemaState::read`] then answers the
//! staged (committed) schema and recovery finishes the promotion.
//!
//! Every schema a graph has accepted is archived by identity under
//! `_schema_history/`, so a read at an older commit binds the catalog that
//! was current then.

use serde::{Deserialize, Serialize};

use crate::engine::lang::catalog::{Catalog, compile_schema};
use crate::engine::storage::Root;
use crate::protocol::{OmniError, Result};

/// Accepted schema source file.
pub const SCHEMA_PG: &str = "_schema.pg";
/// Compiled catalog file.
pub const SCHEMA_IR: &str = "_schema.ir.json";
/// Identity record file.
pub const SCHEMA_STATE: &str = "__schema_state.json";
/// Suffix of a schema apply's staged files.
pub const STAGING_SUFFIX: &str = ".staging";
/// Directory of archived schemas, one `<identity>.json` each.
pub const HISTORY_DIR: &str = "_schema_history";

/// The accepted schema: source, compiled catalog and identity.
#[derive(Debug, Clone)]
pub struct SchemaState {
    /// `.pg` source text as accepted.
    pub source: String,
    /// The compiled catalog (ids carried over across renames).
    pub catalog: Catalog,
    /// Schema identity (hash of the canonical catalog), part of every write token.
    pub identity: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    format_version: u32,
    schema_identity: String,
}

/// One archived schema.
#[derive(Debug, Serialize, Deserialize)]
struct Archived {
    source: String,
    catalog: Catalog,
}

impl SchemaState {
    /// Compile `source` into an accepted-schema candidate (a new graph's ids).
    pub fn compile(source: &str) -> Result<SchemaState> {
        let catalog = compile_schema(source).map_err(|diag| OmniError::Compile { file: "<schema>".into(), diag })?;
        Ok(SchemaState::from_parts(source.to_string(), catalog))
    }

    /// The schema of `source` compiled to `catalog` (ids already adopted).
    pub fn from_parts(source: String, catalog: Catalog) -> SchemaState {
        let identity = catalog.identity();
        SchemaState { source, catalog, identity }
    }

    fn files(&self) -> Result<[(&'static str, Vec<u8>); 3]> {
        let ir = serde_json::to_vec_pretty(&self.catalog)
            .map_err(|e| OmniError::Internal(format!("serialising catalog: {e}")))?;
        let state = StateFile { format_version: 1, schema_identity: self.identity.clone() };
        let state = serde_json::to_vec_pretty(&state)
            .map_err(|e| OmniError::Internal(format!("serialising schema state: {e}")))?;
        // The state file last: it is what makes the other two current.
        Ok([(SCHEMA_PG, self.source.clone().into_bytes()), (SCHEMA_IR, ir), (SCHEMA_STATE, state)])
    }

    /// Write the three live schema files under `root` (a new graph).
    pub async fn write(&self, root: &Root) -> Result<()> {
        for (name, bytes) in self.files()? {
            root.put(name, bytes).await?;
        }
        Ok(())
    }

    /// Write the three files as `*.staging` and read them back: they must
    /// decode to this schema's identity.
    pub async fn stage(&self, root: &Root) -> Result<()> {
        for (name, bytes) in self.files()? {
            root.put(&staged(name), bytes).await?;
        }
        match read_set(root, STAGING_SUFFIX).await? {
            Some(Ok(s)) if s.identity == self.identity => Ok(()),
            Some(Ok(s)) => Err(OmniError::Internal(format!(
                "staged schema reads back as {} instead of {}",
                s.identity, self.identity
            ))),
            Some(Err(e)) => Err(e),
            None => Err(OmniError::Internal("the staged schema files vanished after writing".into())),
        }
    }

    /// The staged schema, if complete and consistent.
    pub async fn read_staged(root: &Root) -> Result<Option<SchemaState>> {
        Ok(read_set(root, STAGING_SUFFIX).await?.and_then(|r| r.ok()))
    }

    /// Make the staged schema of `identity` live, then remove the staging
    /// files. Idempotent: with no staging left and `identity` live, done.
    pub async fn promote(root: &Root, identity: &str) -> Result<()> {
        match SchemaState::read_staged(root).await? {
            Some(staged) if staged.identity == identity => {
                staged.write(root).await?;
                discard_staging(root).await
            }
            _ => match read_set(root, "").await? {
                Some(Ok(live)) if live.identity == identity => discard_staging(root).await,
                _ => Err(OmniError::Internal(format!(
                    "schema {identity} is neither staged nor live: the apply's schema files are lost"
                ))),
            },
        }
    }

    /// Archive this schema under its identity (idempotent; content-addressed).
    pub async fn archive(&self, root: &Root) -> Result<()> {
        let body = Archived { source: self.source.clone(), catalog: self.catalog.clone() };
        let bytes =
            serde_json::to_vec(&body).map_err(|e| OmniError::Internal(format!("serialising schema archive: {e}")))?;
        root.put(&archive_name(&self.identity), bytes).await
    }

    /// The archived schema of `identity`.
    pub async fn archived(root: &Root, identity: &str) -> Result<SchemaState> {
        let text = read_text(root, &archive_name(identity)).await?;
        let body: Archived = serde_json::from_str(&text)
            .map_err(|e| OmniError::Internal(format!("archived schema {identity} is unreadable: {e}")))?;
        let state = SchemaState::from_parts(body.source, body.catalog);
        if state.identity != identity {
            return Err(OmniError::Internal(format!("archived schema {identity} hashes to {}", state.identity)));
        }
        Ok(state)
    }

    /// Read and verify the accepted schema: the catalog must hash to the
    /// identity `__schema_state.json` records, and the source must compile to
    /// it (with the catalog's ids). While a promotion is under way the live
    /// files disagree, and the staged (already committed) schema is answered.
    pub async fn read(root: &Root) -> Result<SchemaState> {
        match read_set(root, "").await? {
            Some(Ok(live)) => Ok(live),
            Some(Err(live_err)) => match SchemaState::read_staged(root).await? {
                Some(staged) => Ok(staged),
                None => Err(live_err),
            },
            None => Err(OmniError::NotFound(format!("{SCHEMA_PG} under {}", root.uri()))),
        }
    }
}

/// Remove a schema apply's staging files (after promotion, or on roll-back).
pub async fn discard_staging(root: &Root) -> Result<()> {
    for name in [SCHEMA_PG, SCHEMA_IR, SCHEMA_STATE] {
        root.delete(&staged(name)).await?;
    }
    Ok(())
}

/// Whether any staging file exists (an apply in flight or interrupted).
pub async fn staging_exists(root: &Root) -> Result<bool> {
    for name in [SCHEMA_PG, SCHEMA_IR, SCHEMA_STATE] {
        if root.exists(&staged(name)).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn staged(name: &str) -> String {
    format!("{name}{STAGING_SUFFIX}")
}

fn archive_name(identity: &str) -> String {
    format!("{HISTORY_DIR}/{identity}.json")
}

/// The three files with `suffix`: `None` when the source is absent, else
/// the verified schema or why it does not verify.
async fn read_set(root: &Root, suffix: &str) -> Result<Option<Result<SchemaState>>> {
    let name = |n: &str| format!("{n}{suffix}");
    let Some(source) = root.get(&name(SCHEMA_PG)).await? else { return Ok(None) };
    let (ir, state) = (root.get(&name(SCHEMA_IR)).await?, root.get(&name(SCHEMA_STATE)).await?);
    Ok(Some(decode(&source, ir.as_deref(), state.as_deref())))
}

fn decode(source: &[u8], ir: Option<&[u8]>, state: Option<&[u8]>) -> Result<SchemaState> {
    let bad = |what: &str| OmniError::Internal(format!("the accepted schema is inconsistent: {what}"));
    let source = String::from_utf8(source.to_vec()).map_err(|_| bad(&format!("{SCHEMA_PG} is not UTF-8")))?;
    let state: StateFile = serde_json::from_slice(state.ok_or_else(|| bad(&format!("{SCHEMA_STATE} is missing")))?)
        .map_err(|e| bad(&format!("{SCHEMA_STATE} is unreadable: {e}")))?;
    let mut compiled = compile_schema(&source).map_err(|diag| OmniError::Compile { file: SCHEMA_PG.into(), diag })?;
    // A graph made before the IR carried adopted ids has source and IR equal;
    // after a rename the IR holds the ids the source alone cannot derive.
    if let Some(ir) = ir {
        let catalog: Catalog =
            serde_json::from_slice(ir).map_err(|e| bad(&format!("{SCHEMA_IR} is unreadable: {e}")))?;
        compiled.adopt_ids(&catalog);
    }
    let accepted = SchemaState::from_parts(source, compiled);
    if accepted.identity != state.schema_identity {
        return Err(bad(&format!(
            "{SCHEMA_PG} compiles to schema identity {} but {SCHEMA_STATE} records {}",
            accepted.identity, state.schema_identity
        )));
    }
    Ok(accepted)
}

async fn read_text(root: &Root, rel: &str) -> Result<String> {
    let bytes = root.get(rel).await?.ok_or_else(|| OmniError::NotFound(rel.to_string()))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| OmniError::Internal(format!("{rel} is not UTF-8")))
}
