//! Creating a graph: one empty Lance dataset per type, the schema files, and
//! `__manifest` with registrations, version pointers, the genesis commit,
//! `graph_head:main` and the storage stamp, in one creation.

use std::sync::Arc;

use arrow_array::RecordBatch;
use tracing::info;

use crate::engine::layout::{self, TableLayout};
use crate::engine::manifest::rows::{self, CommitRow, HeadRow, ManifestRow, TableReg, TableVersionRow};
use crate::engine::manifest::{Lineage, MANIFEST_DIR};
use crate::engine::schema_store::{SCHEMA_IR, SCHEMA_PG, SCHEMA_STATE, SchemaState};
use crate::engine::storage::{Root, table};
use crate::protocol::{OmniError, Result};

/// Actor recorded on the genesis commit.
pub const INIT_ACTOR: &str = "omnigraph:init";

/// Create a graph at `root` from `.pg` source. Refuses a root that already
/// holds a graph. Returns the accepted schema and the genesis commit id.
pub async fn init(root: &Root, schema_source: &str) -> Result<(SchemaState, String)> {
    create(root, schema_source, TableConfig::Current).await
}

/// [`init`] as binaries before the row lineage config created graphs
/// (`storage::lineage`): for tests of the migration, which optimize makes.
#[doc(hidden)]
pub async fn init_without_lineage_config(root: &Root, schema_source: &str) -> Result<(SchemaState, String)> {
    create(root, schema_source, TableConfig::WithoutLineage).await
}

/// The table config a graph's datasets are created with.
#[derive(Clone, Copy)]
enum TableConfig {
    Current,
    WithoutLineage,
}

impl TableConfig {
    async fn create(self, uri: &str, batch: RecordBatch) -> Result<()> {
        match self {
            TableConfig::Current => table::create_table(uri, batch).await?,
            TableConfig::WithoutLineage => table::create_table_without_lineage_config(uri, batch).await?,
        };
        Ok(())
    }
}

async fn create(root: &Root, schema_source: &str, config: TableConfig) -> Result<(SchemaState, String)> {
    let schema = SchemaState::compile(schema_source)?;
    if root.exists(MANIFEST_DIR).await? {
        return Err(OmniError::AlreadyExists(format!("a graph already exists at {}", root.uri())));
    }
    root.check_atomic_create().await?;
    clear_debris(root).await?;
    let tables = layout::tables(&schema.catalog);
    for t in &tables {
        config.create(&root.child_uri(&t.location), RecordBatch::new_empty(Arc::new(t.schema.clone()))).await?;
    }
    schema.write(root).await?;
    let genesis = Lineage::mint(Some(INIT_ACTOR.to_string()));
    let batch = rows::to_batch(&genesis_rows(&tables, &genesis))?;
    // The manifest's creation is the commit point: before it, the root holds
    // no graph and a retried init clears the debris.
    config.create(&root.child_uri(MANIFEST_DIR), batch).await?;
    info!(root = %root.uri(), commit = %genesis.commit_id, tables = tables.len(), "graph created");
    Ok((schema, genesis.commit_id))
}

/// Remove what an interrupted init may have left (there is no manifest, so
/// nothing here is part of a graph).
async fn clear_debris(root: &Root) -> Result<()> {
    for prefix in ["nodes", "edges", SCHEMA_PG, SCHEMA_IR, SCHEMA_STATE] {
        root.delete_prefix(prefix).await?;
    }
    Ok(())
}

fn genesis_rows(tables: &[TableLayout], genesis: &Lineage) -> Vec<ManifestRow> {
    let mut out = Vec::with_capacity(tables.len() * 2 + 2);
    for t in tables {
        out.push(ManifestRow::Table {
            reg: TableReg {
                table_id: t.table_id.clone(),
                table_key: t.table_key.clone(),
                location: t.location.clone(),
            },
            since: 1,
        });
        out.push(ManifestRow::TableVersion(TableVersionRow {
            table_id: t.table_id.clone(),
            version: 1,
            branch: None,
            row_count: 0,
        }));
    }
    out.push(ManifestRow::Commit(CommitRow {
        commit_id: genesis.commit_id.clone(),
        parent: None,
        merged_parent: None,
        actor: genesis.actor.clone(),
        created_at_us: genesis.created_at_us,
        manifest_version: 1,
        branch: "main".into(),
        schema_change: None,
        operation: Some("init".into()),
        source_commit_id: None,
    }));
    out.push(ManifestRow::Head(HeadRow {
        branch: "main".into(),
        head_commit_id: genesis.commit_id.clone(),
        at: Some(1),
    }));
    out
}
