//! The accepted schema on disk: `_schema.pg` (source), `_schema.ir.json`
//! (the compiled catalog) and `__schema_state.json` (its identity).

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

/// The accepted schema: source, compiled catalog and identity.
#[derive(Debug, Clone)]
pub struct SchemaState {
    /// `.pg` source text as accepted.
    pub source: String,
    /// The compiled catalog.
    pub catalog: Catalog,
    /// Schema identity (hash of the canonical catalog), part of every write token.
    pub identity: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    format_version: u32,
    schema_identity: String,
}

impl SchemaState {
    /// Compile `source` into an accepted-schema candidate.
    pub fn compile(source: &str) -> Result<SchemaState> {
        let catalog = compile_schema(source).map_err(|diag| OmniError::Compile { file: "<schema>".into(), diag })?;
        let identity = catalog.identity();
        Ok(SchemaState { source: source.to_string(), catalog, identity })
    }

    /// Write the three schema files under `root`.
    pub async fn write(&self, root: &Root) -> Result<()> {
        let ir = serde_json::to_vec_pretty(&self.catalog)
            .map_err(|e| OmniError::Internal(format!("serialising catalog: {e}")))?;
        let state = StateFile { format_version: 1, schema_identity: self.identity.clone() };
        let state = serde_json::to_vec_pretty(&state)
            .map_err(|e| OmniError::Internal(format!("serialising schema state: {e}")))?;
        root.put(SCHEMA_PG, self.source.clone().into_bytes()).await?;
        root.put(SCHEMA_IR, ir).await?;
        root.put(SCHEMA_STATE, state).await
    }

    /// Read and verify the accepted schema: the source must compile to the
    /// identity recorded in `__schema_state.json`.
    pub async fn read(root: &Root) -> Result<SchemaState> {
        let source = read_text(root, SCHEMA_PG).await?;
        let state: StateFile = serde_json::from_str(&read_text(root, SCHEMA_STATE).await?)
            .map_err(|e| OmniError::Internal(format!("{SCHEMA_STATE} is unreadable: {e}")))?;
        let accepted = SchemaState::compile(&source)?;
        if accepted.identity != state.schema_identity {
            return Err(OmniError::Internal(format!(
                "{SCHEMA_PG} compiles to schema identity {} but {SCHEMA_STATE} records {}",
                accepted.identity, state.schema_identity
            )));
        }
        Ok(accepted)
    }
}

async fn read_text(root: &Root, rel: &str) -> Result<String> {
    let bytes = root.get(rel).await?.ok_or_else(|| OmniError::NotFound(format!("{rel} under {}", root.uri())))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| OmniError::Internal(format!("{rel} is not UTF-8")))
}
