//! The physical indexes a type's table should have, derived from the
//! catalog: a BTree on `id` (and `src`, `dst` for edges), a BTree on every
//! `@key` / `@index` / `@unique` column of an orderable scalar or enum type, an
//! inverted (full-text) index on every such `String` column, and a vector
//! index on every `@index` `Vector(N)` column. Lists and blobs get none.
//!
//! Indexes are derived state: a missing or partial one never changes an
//! answer, only its speed.

use serde::Serialize;

use super::types::{Property, ScalarType, TypeDef};

/// Which kind of physical index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    /// Ordered scalar index (equality and range lookups).
    Btree,
    /// Full-text (inverted) index: `search`, `fuzzy`, `match_text`, `bm25`.
    Inverted,
    /// Approximate nearest-neighbour index on a vector column: `nearest`.
    Vector,
}

/// One index a table should have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct IndexSpec {
    /// The indexed column.
    pub column: String,
    /// Its kind.
    pub kind: IndexKind,
}

impl IndexSpec {
    /// The index's name in the table (`<column>_<kind>`), how a build
    /// recognises one that exists already.
    pub fn name(&self) -> String {
        let kind = match self.kind {
            IndexKind::Btree => "btree",
            IndexKind::Inverted => "inverted",
            IndexKind::Vector => "vector",
        };
        format!("{}_{kind}", self.column)
    }
}

/// Every index the table of `def` should have, sorted and without repeats.
pub fn desired(def: TypeDef<'_>) -> Vec<IndexSpec> {
    let btree = |c: &str| IndexSpec { column: c.to_string(), kind: IndexKind::Btree };
    let mut out = vec![btree("id")];
    let (key, indexes): (&[String], &[Vec<String>]) = match def {
        TypeDef::Node(n) => (&n.key, &n.indexes),
        TypeDef::Edge(e) => {
            out.extend([btree("src"), btree("dst")]);
            (&[], &e.indexes)
        }
    };
    let declared = key.iter().chain(indexes.iter().flatten());
    // `src` / `dst` in an edge's index set are covered above.
    for p in declared.filter_map(|c| def.properties().iter().find(|p| &p.name == c)) {
        out.extend(for_property(p));
    }
    // A `@unique` check looks its values up, as a unique constraint's index
    // serves it in any database: a BTree on each of its columns.
    let uniques = match def {
        TypeDef::Node(n) => &n.uniques,
        TypeDef::Edge(e) => &e.uniques,
    };
    for p in uniques.iter().flatten().filter_map(|c| def.properties().iter().find(|p| &p.name == c)) {
        out.extend(for_property(p).into_iter().filter(|s| s.kind == IndexKind::Btree));
    }
    out.sort();
    out.dedup();
    out
}

fn for_property(p: &Property) -> Vec<IndexSpec> {
    let spec = |kind| IndexSpec { column: p.name.clone(), kind };
    if p.list {
        return vec![];
    }
    match p.ty {
        ScalarType::Blob => vec![],
        ScalarType::Vector(_) => vec![spec(IndexKind::Vector)],
        ScalarType::String => vec![spec(IndexKind::Btree), spec(IndexKind::Inverted)],
        _ => vec![spec(IndexKind::Btree)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::catalog::compile_schema;

    fn specs(schema: &str, ty: &str) -> Vec<String> {
        let c = compile_schema(schema).expect("schema");
        desired(c.type_def(ty).expect("type")).iter().map(IndexSpec::name).collect()
    }

    #[test]
    fn keys_and_indexed_columns_get_indexes_by_type() {
        let schema = r#"
            node Doc {
                slug: String @key
                title: String @index
                body: String
                year: I32 @index
                kind: enum(a, b) @index
                tags: [String] @index
                embedding: Vector(4) @index
                raw: Blob?
            }
            edge Cites: Doc -> Doc { weight: F64 @index }
        "#;
        assert_eq!(
            specs(schema, "Doc"),
            [
                "embedding_vector",
                "id_btree",
                "kind_btree",
                "slug_btree",
                "slug_inverted",
                "title_btree",
                "title_inverted",
                "year_btree"
            ]
        );
        assert_eq!(specs(schema, "Cites"), ["dst_btree", "id_btree", "src_btree", "weight_btree"]);
    }

    #[test]
    fn unique_columns_get_a_btree_and_no_text_index() {
        let schema = "node U { a: String @unique\n b: I32?\n c: String?\n @unique(b, c) }";
        assert_eq!(specs(schema, "U"), ["a_btree", "b_btree", "c_btree", "id_btree"]);
    }

    #[test]
    fn an_unindexed_type_gets_only_its_id() {
        assert_eq!(specs("node N { x: String }", "N"), ["id_btree"]);
    }
}
