//! `omnigraph queries list|validate DIR`: a directory of stored queries
//! (every `query NAME` of its top-level `.gq` files, in name order), as a
//! daemon given `serve --queries DIR` would serve them. Offline.

use clap::Subcommand;
use omnigraph::engine::stored_queries::Registry;
use omnigraph::{OmniError, Result};
use serde_json::json;

use super::{print_json, read_file};

/// The stored-query commands.
#[derive(Subcommand)]
pub enum QueriesCommand {
    /// List each stored query: its kind, name and typed parameters, and its
    /// `@description` / `@instruction`.
    #[command(after_help = "Example:\n  omnigraph queries list queries/")]
    List {
        /// The directory of `.gq` files.
        dir: String,
        /// Print JSON: `{queries: [{name, tool_name, mutation, params, description?, instruction?}]}`
        /// (`GET /graphs/{id}/queries`).
        #[arg(long)]
        json: bool,
    },
    /// Parse every query, and type-check each against a schema when given;
    /// exit 1 naming the file and line of the first that fails.
    #[command(after_help = "Example:\n  omnigraph queries validate queries/ --schema schema.pg")]
    Validate {
        /// The directory of `.gq` files.
        dir: String,
        /// The `.pg` schema to type-check against.
        #[arg(long)]
        schema: Option<String>,
        /// Print JSON: `{valid, queries}` or `{valid: false, error}` (`error` names the file and line).
        #[arg(long)]
        json: bool,
    },
}

impl QueriesCommand {
    /// Whether `--json` was asked for.
    pub fn json(&self) -> bool {
        match self {
            QueriesCommand::List { json, .. } | QueriesCommand::Validate { json, .. } => *json,
        }
    }
}

/// Every top-level `.gq` file of `dir`, parsed into one registry.
pub fn registry(dir: &str) -> Result<Registry> {
    let entries = std::fs::read_dir(dir).map_err(|e| OmniError::BadRequest(format!("cannot read {dir}: {e}")))?;
    let mut paths: Vec<std::path::PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "gq"))
        .collect();
    paths.sort();
    let mut files = Vec::with_capacity(paths.len());
    for p in paths {
        let name = p.display().to_string();
        let text = read_file(&name)?;
        files.push((name, text));
    }
    Registry::parse(&files).map_err(|e| OmniError::BadRequest(e.to_string()))
}

/// Run a queries command: the exit code (0, or 1 for a query that fails).
pub fn run(command: QueriesCommand) -> Result<u8> {
    match command {
        QueriesCommand::List { dir, json } => {
            let catalog = registry(&dir)?.catalog();
            if json {
                print_json(&json!({ "queries": catalog }))?;
                return Ok(0);
            }
            for q in &catalog {
                let params: Vec<String> = q
                    .params
                    .iter()
                    .map(|p| format!("${}: {}{}", p.name, kind_name(p), if p.nullable { "?" } else { "" }))
                    .collect();
                let kind = if q.mutation { "mutation" } else { "read" };
                outln!("{kind:<8} {}({})", q.name, params.join(", "));
                q.description.iter().for_each(|d| outln!("  description: {d}"));
                q.instruction.iter().for_each(|i| outln!("  instruction: {i}"));
            }
            Ok(0)
        }
        QueriesCommand::Validate { dir, schema, json } => {
            let checked = registry(&dir).and_then(|r| {
                if let Some(pg) = &schema {
                    let catalog = omnigraph::engine::schema_store::SchemaState::compile(&read_file(pg)?)?.catalog;
                    r.check(&catalog).map_err(|e| OmniError::BadRequest(e.to_string()))?;
                }
                Ok(r)
            });
            match (checked, json) {
                (Ok(r), true) => print_json(&json!({"valid": true, "queries": r.len()}))?,
                (Ok(r), false) => outln!("valid: {} queries", r.len()),
                (Err(e), true) => {
                    print_json(&json!({"valid": false, "error": e.to_string()}))?;
                    return Ok(1);
                }
                (Err(e), false) => {
                    eprintln!("error: {e}");
                    return Ok(1);
                }
            }
            Ok(0)
        }
    }
}

/// A parameter's kind as `list` prints it (`list<int>`, `vector(3)`).
fn kind_name(p: &omnigraph::engine::stored_queries::ParamDescriptor) -> String {
    let name = |k| serde_json::to_value(k).ok().and_then(|v| v.as_str().map(String::from)).unwrap_or_default();
    match (p.item_kind, p.vector_dim) {
        (Some(item), _) => format!("list<{}>", name(item)),
        (_, Some(n)) => format!("vector({n})"),
        _ => name(p.kind),
    }
}
