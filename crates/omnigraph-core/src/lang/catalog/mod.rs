//! The catalog: the compiled form of a `.pg` schema.
//!
//! [`compile_schema`] parses and checks a schema and produces a
//! [`Catalog`]: interfaces, node types and edge types in declaration order,
//! each with stable table/property ids, constraints and metadata. The
//! catalog also knows each table's Arrow schema ([`Catalog::arrow_schema`]),
//! the schema identity hash ([`Catalog::identity`]) and how keyed node ids
//! are derived ([`NodeType::derive_id`]).

pub mod annotations;
pub mod arrow;
pub mod compile;
pub mod dates;
pub mod evolve;
pub mod id;
pub mod indexes;
pub mod key;
pub mod rules;
pub mod types;
pub mod warnings;

pub use types::{
    AnnotationArg, AnnotationValue, Card, CheckConstraint, CustomAnnotation, EdgeType, EmbedSpec, InterfaceType, Meta,
    NodeType, Property, RangeConstraint, ScalarType, TypeDef, TypeKind,
};

use crate::lang::diag::Diagnostic;
use crate::lang::schema::parse_schema;
use serde::{Deserialize, Serialize};

/// Every type of one graph schema, in declaration order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Catalog {
    /// Declared interfaces (already copied into their implementers).
    pub interfaces: Vec<InterfaceType>,
    /// Node types.
    pub nodes: Vec<NodeType>,
    /// Edge types.
    pub edges: Vec<EdgeType>,
}

/// Parses, checks and lowers `.pg` source into a catalog.
pub fn compile_schema(src: &str) -> Result<Catalog, Diagnostic> {
    compile::lower(&parse_schema(src)?)
}

impl Catalog {
    /// The node type called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeType> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The edge type called `name`.
    pub fn edge(&self, name: &str) -> Option<&EdgeType> {
        self.edges.iter().find(|e| e.name == name)
    }

    /// The edge type called `name`, ignoring case (load files and queries
    /// match edge names case-insensitively; the compiler rejects edge names
    /// that differ only by case, so this is unambiguous).
    pub fn edge_ci(&self, name: &str) -> Option<&EdgeType> {
        self.edge(name).or_else(|| self.edges.iter().find(|e| e.name.eq_ignore_ascii_case(name)))
    }

    /// The interface called `name`.
    pub fn interface(&self, name: &str) -> Option<&InterfaceType> {
        self.interfaces.iter().find(|i| i.name == name)
    }

    /// Every table: node types, then edge types, each in declaration order.
    pub fn types(&self) -> impl Iterator<Item = TypeDef<'_>> {
        self.nodes.iter().map(TypeDef::Node).chain(self.edges.iter().map(TypeDef::Edge))
    }

    /// The node or edge type called `name`.
    pub fn type_def(&self, name: &str) -> Option<TypeDef<'_>> {
        self.types().find(|t| t.name() == name)
    }

    /// Arrow schema of the node or edge table called `name`.
    pub fn arrow_schema(&self, name: &str) -> Option<arrow_schema::Schema> {
        match self.type_def(name)? {
            TypeDef::Node(n) => Some(n.arrow_schema()),
            TypeDef::Edge(e) => Some(e.arrow_schema()),
        }
    }

    /// Schema identity: sha256 hex of the catalog's canonical JSON. The
    /// catalog holds only Vecs and structs, so the JSON is deterministic.
    pub fn identity(&self) -> String {
        // Serialising plain data with finite floats cannot fail; an empty
        // string would still hash deterministically if it ever did.
        let json = serde_json::to_string(self).unwrap_or_default();
        id::sha256_hex(json.as_bytes())
    }

    /// Carries table and property ids over from `previous` (the catalog
    /// currently applied), matching types and properties by name or by
    /// their `@rename_from` hint, so renamed things keep their storage.
    pub fn adopt_ids(&mut self, previous: &Catalog) {
        for node in &mut self.nodes {
            let old =
                previous.node(&node.name).or_else(|| node.meta.rename_from.as_deref().and_then(|r| previous.node(r)));
            if let Some(old) = old {
                node.table_id = old.table_id.clone();
                adopt_prop_ids(&mut node.properties, &old.properties);
            }
        }
        for edge in &mut self.edges {
            let old =
                previous.edge(&edge.name).or_else(|| edge.meta.rename_from.as_deref().and_then(|r| previous.edge(r)));
            if let Some(old) = old {
                edge.table_id = old.table_id.clone();
                adopt_prop_ids(&mut edge.properties, &old.properties);
            }
        }
    }
}

/// Ids of the matching previous property (same name, else `@rename_from`).
fn adopt_prop_ids(props: &mut [Property], old: &[Property]) {
    for prop in props {
        let wanted = old
            .iter()
            .find(|o| o.name == prop.name)
            .or_else(|| prop.meta.rename_from.as_deref().and_then(|r| old.iter().find(|o| o.name == r)));
        if let Some(o) = wanted {
            prop.prop_id = o.prop_id.clone();
        }
    }
}

#[cfg(test)]
mod tests;
