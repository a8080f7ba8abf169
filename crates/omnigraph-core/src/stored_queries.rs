//! Stored queries: named `.gq` queries a daemon serves by name (the
//! reference's `queries:` registry). Every `query NAME(…)` of every file
//! registers under its name; a name declared twice, a file that does not
//! parse, or a query that does not type-check against a schema is an error
//! naming the file and line. The catalog entry of each is what a client
//! (an MCP server, say) needs to call it without the source: its
//! parameters' kinds, whether it writes, its `@description` and
//! `@instruction`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::lang::catalog::Catalog;
use crate::lang::query::ast::{BaseType, ParamTypeKind, Query};
use crate::lang::query::parse_queries;
use crate::lang::query::typecheck::check_query;

/// One stored query: its declaration and the file it came from.
#[derive(Debug, Clone)]
pub struct StoredQuery {
    /// The file (as given).
    pub file: String,
    /// The whole file's text (a query runs from it by name).
    pub source: String,
    /// Its declaration.
    pub decl: Query,
}

/// Every stored query, by name.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    queries: BTreeMap<String, StoredQuery>,
}

/// A registry that cannot be served: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {reason}")]
pub struct RegistryError {
    /// The file.
    pub file: String,
    /// The 1-based line.
    pub line: u32,
    /// What is wrong.
    pub reason: String,
}

/// A parameter's kind on the wire (the reference's catalog vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    /// `String`.
    String,
    /// `Bool`.
    Bool,
    /// `I32`, `U32`.
    Int,
    /// `I64`, `U64` (sent as a JSON string: past 2^53 a number loses digits).
    #[serde(rename = "bigint")]
    BigInt,
    /// `F32`, `F64`.
    Float,
    /// `Date` (an ISO string).
    Date,
    /// `DateTime` (an ISO string).
    #[serde(rename = "datetime")]
    DateTime,
    /// `Blob` (a URI string).
    Blob,
    /// `Vector(N)`.
    Vector,
    /// `[T]`.
    List,
}

/// One parameter in a catalog entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamDescriptor {
    /// Without `$`.
    pub name: String,
    /// Its kind.
    pub kind: ParamKind,
    /// The element kind of a list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item_kind: Option<ParamKind>,
    /// The dimension of a vector.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_dim: Option<u32>,
    /// Whether the caller may leave it out.
    pub nullable: bool,
}

/// One query of the catalog (`GET /graphs/{id}/queries`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogEntry {
    /// The name it is invoked by.
    pub name: String,
    /// The MCP tool name (the query's name).
    pub tool_name: String,
    /// `@description`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// `@instruction`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// Whether it writes.
    pub mutation: bool,
    /// Its parameters, in order.
    pub params: Vec<ParamDescriptor>,
}

impl Registry {
    /// Parse `files` (`(name, text)`, in the order given); a name declared
    /// twice (in one file or two) or a file that does not parse is an error.
    pub fn parse(files: &[(String, String)]) -> Result<Registry, RegistryError> {
        let mut queries: BTreeMap<String, StoredQuery> = BTreeMap::new();
        for (file, source) in files {
            let decls = parse_queries(source).map_err(|d| RegistryError {
                file: file.clone(),
                line: d.pos.line,
                reason: d.message,
            })?;
            for decl in decls {
                if let Some(first) = queries.get(&decl.name) {
                    let reason = format!("query `{}` is also declared in {}", decl.name, first.file);
                    return Err(RegistryError { file: file.clone(), line: decl.pos.line, reason });
                }
                let stored = StoredQuery { file: file.clone(), source: source.clone(), decl };
                queries.insert(stored.decl.name.clone(), stored);
            }
        }
        Ok(Registry { queries })
    }

    /// Type-check every query against `catalog`: the first that fails.
    pub fn check(&self, catalog: &Catalog) -> Result<(), RegistryError> {
        for q in self.queries.values() {
            if let Err(diags) = check_query(catalog, &q.decl)
                && let Some(d) = diags.first()
            {
                let reason = format!("query `{}`: {}", q.decl.name, d.message);
                return Err(RegistryError { file: q.file.clone(), line: d.pos.line, reason });
            }
        }
        Ok(())
    }

    /// The query named `name`.
    pub fn get(&self, name: &str) -> Option<&StoredQuery> {
        self.queries.get(name)
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// Every query's catalog entry, by name.
    pub fn catalog(&self) -> Vec<CatalogEntry> {
        self.queries.values().map(|q| entry(&q.decl)).collect()
    }
}

fn entry(q: &Query) -> CatalogEntry {
    let params = q
        .params
        .iter()
        .map(|p| {
            let (kind, item_kind, vector_dim) = match p.ty.kind {
                ParamTypeKind::Scalar(b) => (kind_of(b), None, None),
                ParamTypeKind::List(b) => (ParamKind::List, Some(kind_of(b)), None),
                ParamTypeKind::Vector(n) => (ParamKind::Vector, None, Some(n)),
            };
            ParamDescriptor { name: p.name.clone(), kind, item_kind, vector_dim, nullable: p.ty.nullable }
        })
        .collect();
    CatalogEntry {
        name: q.name.clone(),
        tool_name: q.name.clone(),
        description: q.description.clone(),
        instruction: q.instruction.clone(),
        mutation: q.is_mutation(),
        params,
    }
}

fn kind_of(b: BaseType) -> ParamKind {
    match b {
        BaseType::String => ParamKind::String,
        BaseType::Bool => ParamKind::Bool,
        BaseType::I32 | BaseType::U32 => ParamKind::Int,
        BaseType::I64 | BaseType::U64 => ParamKind::BigInt,
        BaseType::F32 | BaseType::F64 => ParamKind::Float,
        BaseType::Date => ParamKind::Date,
        BaseType::DateTime => ParamKind::DateTime,
        BaseType::Blob => ParamKind::Blob,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = "node Person {\n    name: String @key\n    age: I32?\n}\n";

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(f, s)| (f.to_string(), s.to_string())).collect()
    }

    #[test]
    fn a_registry_lists_each_query_with_its_typed_params() {
        let src = "query find($name: String, $ages: [I32]?) @description(\"Find people\") @instruction(\"Use exact names\") {\n    match { $p: Person { name: $name } }\n    return { $p.age }\n}\nquery add($name: String, $age: I64?) { insert Person { name: $name } }\n";
        let r = Registry::parse(&files(&[("people.gq", src)])).expect("parse");
        let catalog = crate::lang::catalog::compile_schema(SCHEMA).expect("schema");
        r.check(&catalog).expect("type-checks");
        let got = serde_json::to_value(r.catalog()).expect("json");
        assert_eq!(got[1]["name"], "find");
        assert_eq!(
            (got[1]["description"].clone(), got[1]["mutation"].clone()),
            (serde_json::json!("Find people"), serde_json::json!(false))
        );
        assert_eq!(
            got[1]["params"][1],
            serde_json::json!({"name": "ages", "kind": "list", "item_kind": "int", "nullable": true})
        );
        assert_eq!(
            (got[0]["name"].clone(), got[0]["mutation"].clone()),
            (serde_json::json!("add"), serde_json::json!(true))
        );
        assert_eq!(got[0]["params"][1]["kind"], "bigint");
        assert!(got[0].get("description").is_none(), "absent annotations are left out: {got}");
    }

    #[test]
    fn duplicates_parse_errors_and_type_errors_name_file_and_line() {
        let one = "query a() { match { $p: Person } return { $p.name } }\n";
        let err = Registry::parse(&files(&[("x.gq", one), ("y.gq", &format!("\n{one}"))])).expect_err("duplicate");
        assert_eq!((err.file.as_str(), err.line), ("y.gq", 2), "{err}");
        assert!(err.reason.contains("x.gq"), "{err}");
        let err = Registry::parse(&files(&[("bad.gq", "query a( {")])).expect_err("parse");
        assert_eq!(err.file, "bad.gq");
        let wrong = "query a() {\n    match { $p: Person }\n    return { $p.height }\n}\n";
        let r = Registry::parse(&files(&[("w.gq", wrong)])).expect("parses");
        let catalog = crate::lang::catalog::compile_schema(SCHEMA).expect("schema");
        let err = r.check(&catalog).expect_err("type error");
        assert_eq!((err.file.as_str(), err.line), ("w.gq", 3), "{err}");
        assert!(err.to_string().starts_with("w.gq:3: query `a`"), "{err}");
    }
}
