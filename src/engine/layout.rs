//! Where each type's dataset lives under a graph root.

use arrow_schema::Schema;

use crate::engine::lang::catalog::{Catalog, TypeDef, TypeKind};

/// One node or edge type's table as laid out on disk.
#[derive(Debug, Clone)]
pub struct TableLayout {
    /// `node:<Type>` / `edge:<Type>`.
    pub table_key: String,
    /// Stable table id from the catalog.
    pub table_id: String,
    /// Dataset path relative to the root (id-based, so renames keep history).
    pub location: String,
    /// The dataset's Arrow schema.
    pub schema: Schema,
}

/// Table key of a node type.
pub fn node_key(name: &str) -> String {
    format!("node:{name}")
}

/// Table key of an edge type.
pub fn edge_key(name: &str) -> String {
    format!("edge:{name}")
}

/// Dataset path of table `table_id` of `kind`, relative to the root.
pub fn location(kind: TypeKind, table_id: &str) -> String {
    match kind {
        TypeKind::Node => format!("nodes/{table_id}"),
        TypeKind::Edge => format!("edges/{table_id}"),
    }
}

/// Table key of a node or edge type.
pub fn key_of(def: TypeDef<'_>) -> String {
    match def.kind() {
        TypeKind::Node => node_key(def.name()),
        TypeKind::Edge => edge_key(def.name()),
    }
}

/// The type name of a table key (`node:Person` → `Person`).
pub fn type_name(table_key: &str) -> &str {
    table_key.split_once(':').map_or(table_key, |(_, name)| name)
}

/// The tables of every type in the catalog, nodes first, in declaration order.
pub fn tables(catalog: &Catalog) -> Vec<TableLayout> {
    let nodes = catalog.nodes.iter().map(|t| TableLayout {
        table_key: node_key(&t.name),
        table_id: t.table_id.clone(),
        location: location(TypeKind::Node, &t.table_id),
        schema: t.arrow_schema(),
    });
    let edges = catalog.edges.iter().map(|t| TableLayout {
        table_key: edge_key(&t.name),
        table_id: t.table_id.clone(),
        location: location(TypeKind::Edge, &t.table_id),
        schema: t.arrow_schema(),
    });
    nodes.chain(edges).collect()
}
