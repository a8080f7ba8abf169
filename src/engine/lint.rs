//! `omnigraph lint`: compile every query of a `.gq` file against a catalog
//! and describe each (diagnostics, params, result columns, types read and written).

use serde::Serialize;

use crate::engine::lang::Diagnostic;
use crate::engine::lang::catalog::{Catalog, ScalarType};
use crate::engine::lang::query::ir::{BodyIr, QueryIr, ResultType, Type};
use crate::engine::lang::query::typecheck::check_source;

/// One diagnostic, flattened for output.
#[derive(Debug, Clone, Serialize)]
pub struct LintDiagnostic {
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub column: u32,
    /// Stable code (`T7`, `Q08`, `D2`, …).
    pub code: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl From<&Diagnostic> for LintDiagnostic {
    fn from(d: &Diagnostic) -> Self {
        LintDiagnostic { line: d.pos.line, column: d.pos.column, code: d.code.clone(), message: d.message.clone() }
    }
}

/// A named, typed slot (param or result column).
#[derive(Debug, Clone, Serialize)]
pub struct Typed {
    /// Name.
    pub name: String,
    /// Type as written in `.gq` (`String?`, `[I32]`, `Person`).
    #[serde(rename = "type")]
    pub ty: String,
}

/// One query's lint result.
#[derive(Debug, Clone, Serialize)]
pub struct QueryLint {
    /// Query name (empty when the file failed to parse).
    pub name: String,
    /// `read` or `mutation` (absent when it failed to compile).
    pub kind: Option<&'static str>,
    /// Errors; empty means the query compiles.
    pub diagnostics: Vec<LintDiagnostic>,
    /// Declared parameters.
    pub params: Vec<Typed>,
    /// Result columns of a read.
    pub columns: Vec<Typed>,
    /// Types whose tables it reads.
    pub reads: Vec<String>,
    /// Types whose tables it writes.
    pub writes: Vec<String>,
}

/// The lint of one file.
#[derive(Debug, Clone, Serialize)]
pub struct LintReport {
    /// The file linted.
    pub file: String,
    /// Every query, in file order.
    pub queries: Vec<QueryLint>,
    /// Total diagnostics.
    pub errors: usize,
}

/// Lint `.gq` source against `catalog`.
pub fn lint(catalog: &Catalog, file: &str, source: &str) -> LintReport {
    let queries: Vec<QueryLint> = check_source(catalog, source)
        .into_iter()
        .map(|(name, out)| match out {
            Ok(ir) => describe(&ir),
            Err(diags) => QueryLint {
                name,
                kind: None,
                diagnostics: diags.iter().map(LintDiagnostic::from).collect(),
                params: vec![],
                columns: vec![],
                reads: vec![],
                writes: vec![],
            },
        })
        .collect();
    let errors = queries.iter().map(|q| q.diagnostics.len()).sum();
    LintReport { file: file.to_string(), queries, errors }
}

fn describe(ir: &QueryIr) -> QueryLint {
    let columns = match &ir.body {
        BodyIr::Read(r) => {
            r.projections.iter().map(|p| Typed { name: p.column.clone(), ty: result_type_name(&p.ty) }).collect()
        }
        BodyIr::Mutation(_) => vec![],
    };
    QueryLint {
        name: ir.name.clone(),
        kind: Some(if ir.is_mutation() { "mutation" } else { "read" }),
        diagnostics: vec![],
        params: ir.params.iter().map(|p| Typed { name: p.name.clone(), ty: type_name(&p.ty) }).collect(),
        columns,
        reads: ir.reads().into_iter().collect(),
        writes: ir.writes().into_iter().collect(),
    }
}

fn result_type_name(t: &ResultType) -> String {
    match t {
        ResultType::Scalar(t) => type_name(t),
        ResultType::Node { type_name } => type_name.clone(),
    }
}

/// A type as `.gq`/`.pg` spell it.
pub fn type_name(t: &Type) -> String {
    let base = scalar_name(&t.scalar);
    let base = if t.list { format!("[{base}]") } else { base };
    if t.nullable { format!("{base}?") } else { base }
}

fn scalar_name(s: &ScalarType) -> String {
    match s {
        ScalarType::Vector(n) => format!("Vector({n})"),
        ScalarType::Enum(values) => format!("enum({})", values.join(", ")),
        other => format!("{other:?}"),
    }
}
