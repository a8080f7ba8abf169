//! The tools a graph offers an MCP client, and the daemon route each tool
//! call becomes. Two kinds: every stored query, its input schema typed from
//! its parameters (the reference's `ParamKind` → JSON Schema table), and
//! the read-only built-ins (`snapshot`, `branches_list`, `commits_list`,
//! `diff`). A call's arguments are checked against the tool's schema here,
//! so a wrong type is a typed MCP error before any request is made; what
//! the arguments mean (a ref that does not exist, a policy's denial) is the
//! daemon's to answer, through the same routes every other client uses.

use serde_json::{Map, Value, json};

use crate::stored_queries::{CatalogEntry, ParamDescriptor, ParamKind};

/// One tool as an MCP client lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// Its name (a stored query's own name).
    pub name: String,
    /// What it does (a stored query's `@description`, then its `@instruction`).
    pub description: String,
    /// A JSON Schema object of its arguments.
    pub input_schema: Map<String, Value>,
    /// Whether it only reads.
    pub read_only: bool,
}

/// A request to one daemon route, relative to the graph's `/graphs/{id}`.
#[derive(Debug, Clone, PartialEq)]
pub enum RouteCall {
    /// `GET {path}?{query}`.
    Get {
        /// E.g. `/snapshot`.
        path: String,
        /// The query string's pairs, in order.
        query: Vec<(String, String)>,
    },
    /// `POST {path}` with a JSON body.
    Post {
        /// E.g. `/queries/find`.
        path: String,
        /// The body.
        body: Value,
    },
}

/// Arguments a tool refuses (MCP's invalid-params error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool `{tool}`: {reason}")]
pub struct ArgError {
    /// The tool called.
    pub tool: String,
    /// What is wrong.
    pub reason: String,
}

/// The argument of a stored-query tool that picks the branch or ref it runs
/// on (not offered when the query has a parameter of that name).
pub const BRANCH_ARG: &str = "branch";

/// A built-in argument's type.
#[derive(Debug, Clone, Copy)]
enum ArgType {
    Str,
    Int,
    Bool,
    OneOf(&'static [&'static str]),
}

/// One argument of a built-in tool.
struct Arg {
    name: &'static str,
    ty: ArgType,
    required: bool,
    about: &'static str,
}

/// A read-only built-in: a `GET` of `path` with its arguments as the query.
struct Builtin {
    name: &'static str,
    about: &'static str,
    path: &'static str,
    args: &'static [Arg],
}

const REF_ABOUT: &str = "A branch, commit id, tag, `REF~N` or `A...B` (default main)";

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "snapshot",
        about: "The graph at a branch head or any ref: its commit and each type's row count",
        path: "/snapshot",
        args: &[Arg { name: "branch", ty: ArgType::Str, required: false, about: REF_ABOUT }],
    },
    Builtin { name: "branches_list", about: "The graph's branches and their heads", path: "/branches", args: &[] },
    Builtin {
        name: "commits_list",
        about: "Commits reachable from a branch or ref, newest first",
        path: "/commits",
        args: &[
            Arg { name: "branch", ty: ArgType::Str, required: false, about: REF_ABOUT },
            Arg { name: "limit", ty: ArgType::Int, required: false, about: "At most this many commits" },
        ],
    },
    Builtin {
        name: "diff",
        about: "What changed between two refs, entity by entity (paged), or counts per type with `stat`",
        path: "/diff",
        args: &[
            Arg { name: "from", ty: ArgType::Str, required: true, about: "The ref to compare from" },
            Arg { name: "to", ty: ArgType::Str, required: true, about: "The ref to compare to" },
            Arg { name: "type", ty: ArgType::Str, required: false, about: "Only these types (comma-separated)" },
            Arg { name: "kind", ty: ArgType::OneOf(&["node", "edge"]), required: false, about: "Only nodes or edges" },
            Arg {
                name: "op",
                ty: ArgType::Str,
                required: false,
                about: "Only these operations: insert, update, delete (comma-separated)",
            },
            Arg { name: "stat", ty: ArgType::Bool, required: false, about: "Counts per type instead of rows" },
            Arg { name: "limit", ty: ArgType::Int, required: false, about: "At most this many changes per page" },
            Arg { name: "page_token", ty: ArgType::Str, required: false, about: "The previous page's next_page_token" },
        ],
    },
];

/// Every tool: the stored queries of `catalog` (by name), then each
/// built-in whose name no stored query takes (the operator's stored query
/// wins a clash).
pub fn tools(catalog: &[CatalogEntry]) -> Vec<ToolSpec> {
    let mut out: Vec<ToolSpec> = catalog.iter().map(stored_tool).collect();
    for b in BUILTINS.iter().filter(|b| !catalog.iter().any(|q| q.name == b.name)) {
        out.push(builtin_tool(b));
    }
    out
}

/// The route a call of tool `name` with `args` makes: `Ok(None)` when no
/// tool has that name, an [`ArgError`] when the arguments do not fit its
/// schema.
pub fn plan(name: &str, args: &Map<String, Value>, catalog: &[CatalogEntry]) -> Result<Option<RouteCall>, ArgError> {
    if let Some(q) = catalog.iter().find(|q| q.name == name) {
        return stored_call(q, args).map(Some);
    }
    match BUILTINS.iter().find(|b| b.name == name) {
        Some(b) => builtin_call(b, args).map(Some),
        None => Ok(None),
    }
}

fn builtin_tool(b: &Builtin) -> ToolSpec {
    let mut props = Map::new();
    let mut required = Vec::new();
    for a in b.args {
        let mut schema = match a.ty {
            ArgType::Str => json!({"type": "string"}),
            ArgType::Int => json!({"type": "integer", "minimum": 0}),
            ArgType::Bool => json!({"type": "boolean"}),
            ArgType::OneOf(values) => json!({"type": "string", "enum": values}),
        };
        schema["description"] = json!(a.about);
        props.insert(a.name.to_string(), schema);
        if a.required {
            required.push(a.name);
        }
    }
    ToolSpec {
        name: b.name.to_string(),
        description: b.about.to_string(),
        input_schema: object_schema(props, required.into_iter().map(String::from).collect()),
        read_only: true,
    }
}

fn builtin_call(b: &Builtin, args: &Map<String, Value>) -> Result<RouteCall, ArgError> {
    let err = |reason: String| ArgError { tool: b.name.to_string(), reason };
    refuse_unknown(args, |k| b.args.iter().any(|a| a.name == k)).map_err(err)?;
    let mut query = Vec::new();
    for a in b.args {
        let text = match (args.get(a.name), a.ty) {
            (None | Some(Value::Null), _) if a.required => return Err(err(format!("`{}` is required", a.name))),
            (None | Some(Value::Null), _) => continue,
            (Some(Value::String(s)), ArgType::Str) => s.clone(),
            (Some(Value::String(s)), ArgType::OneOf(values)) if values.contains(&s.as_str()) => s.clone(),
            (Some(v), ArgType::Int) if v.as_u64().is_some() => v.to_string(),
            (Some(Value::Bool(v)), ArgType::Bool) => v.to_string(),
            (Some(v), ty) => return Err(err(format!("`{}` must be {}, not {v}", a.name, describe(ty)))),
        };
        query.push((a.name.to_string(), text));
    }
    Ok(RouteCall::Get { path: b.path.to_string(), query })
}

fn describe(ty: ArgType) -> String {
    match ty {
        ArgType::Str => "a string".into(),
        ArgType::Int => "a non-negative integer".into(),
        ArgType::Bool => "true or false".into(),
        ArgType::OneOf(values) => format!("one of {}", values.join(", ")),
    }
}

/// Whether the stored query `q` offers [`BRANCH_ARG`].
fn offers_branch(q: &CatalogEntry) -> bool {
    !q.params.iter().any(|p| p.name == BRANCH_ARG)
}

fn stored_tool(q: &CatalogEntry) -> ToolSpec {
    let mut props = Map::new();
    let mut required = Vec::new();
    for p in &q.params {
        props.insert(p.name.clone(), param_schema(p));
        if !p.nullable {
            required.push(p.name.clone());
        }
    }
    if offers_branch(q) {
        let about = if q.mutation { "The branch it writes (default main)" } else { REF_ABOUT };
        props.insert(BRANCH_ARG.into(), json!({"type": "string", "description": about}));
    }
    let description = match (&q.description, &q.instruction) {
        (Some(d), Some(i)) => format!("{d}\n\n{i}"),
        (Some(d), None) => d.clone(),
        (None, Some(i)) => i.clone(),
        (None, None) => format!("The stored {} `{}`", if q.mutation { "mutation" } else { "query" }, q.name),
    };
    ToolSpec { name: q.name.clone(), description, input_schema: object_schema(props, required), read_only: !q.mutation }
}

fn object_schema(props: Map<String, Value>, required: Vec<String>) -> Map<String, Value> {
    let mut schema = Map::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), Value::Object(props));
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    schema.insert("additionalProperties".into(), json!(false));
    schema
}

/// The JSON Schema of one parameter kind (a list's items by `item`).
fn kind_schema(kind: ParamKind, item: Option<ParamKind>, dim: Option<u32>) -> Value {
    match kind {
        ParamKind::String => json!({"type": "string"}),
        ParamKind::Bool => json!({"type": "boolean"}),
        ParamKind::Int => json!({"type": "integer"}),
        // Past 2^53 a JSON number loses digits: sent as a string.
        ParamKind::BigInt => json!({"type": "string", "pattern": "^-?[0-9]+$"}),
        ParamKind::Float => json!({"type": "number"}),
        ParamKind::Date => json!({"type": "string", "format": "date"}),
        ParamKind::DateTime => json!({"type": "string", "format": "date-time"}),
        ParamKind::Blob => json!({"type": "string", "description": "A blob URI"}),
        ParamKind::Vector => {
            let mut v = json!({"type": "array", "items": {"type": "number"}});
            if let Some(n) = dim {
                v["minItems"] = json!(n);
                v["maxItems"] = json!(n);
            }
            v
        }
        ParamKind::List => {
            json!({"type": "array", "items": kind_schema(item.unwrap_or(ParamKind::String), None, None)})
        }
    }
}

fn param_schema(p: &ParamDescriptor) -> Value {
    let schema = kind_schema(p.kind, p.item_kind, p.vector_dim);
    if p.nullable { json!({"anyOf": [schema, {"type": "null"}]}) } else { schema }
}

fn stored_call(q: &CatalogEntry, args: &Map<String, Value>) -> Result<RouteCall, ArgError> {
    let err = |reason: String| ArgError { tool: q.name.clone(), reason };
    let branch_offered = offers_branch(q);
    refuse_unknown(args, |k| q.params.iter().any(|p| p.name == k) || (branch_offered && k == BRANCH_ARG))
        .map_err(err)?;
    let mut params = Map::new();
    for p in &q.params {
        match args.get(&p.name) {
            None | Some(Value::Null) if !p.nullable => return Err(err(format!("`{}` is required", p.name))),
            None => {}
            Some(v) => {
                if !(v.is_null() || fits(v, p.kind, p.item_kind, p.vector_dim)) {
                    let want = kind_schema(p.kind, p.item_kind, p.vector_dim);
                    return Err(err(format!("`{}` must match {want}, not {v}", p.name)));
                }
                params.insert(p.name.clone(), v.clone());
            }
        }
    }
    let mut body = json!({"params": params, "expect_mutation": q.mutation});
    match args.get(BRANCH_ARG).filter(|_| branch_offered) {
        None | Some(Value::Null) => {}
        Some(Value::String(b)) => body["branch"] = json!(b),
        Some(v) => return Err(err(format!("`{BRANCH_ARG}` must be a string, not {v}"))),
    }
    Ok(RouteCall::Post { path: format!("/queries/{}", q.name), body })
}

/// Whether `v` is a value of `kind` (JSON types only; the daemon checks
/// what a string means, a date's format say).
fn fits(v: &Value, kind: ParamKind, item: Option<ParamKind>, dim: Option<u32>) -> bool {
    match kind {
        ParamKind::String | ParamKind::Date | ParamKind::DateTime | ParamKind::Blob => v.is_string(),
        ParamKind::Bool => v.is_boolean(),
        ParamKind::Int => v.is_i64() || v.is_u64(),
        ParamKind::BigInt => {
            v.is_i64()
                || v.is_u64()
                || v.as_str().is_some_and(|s| {
                    let digits = s.strip_prefix('-').unwrap_or(s);
                    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
                })
        }
        ParamKind::Float => v.is_number(),
        ParamKind::Vector => {
            v.as_array().is_some_and(|a| a.iter().all(Value::is_number) && dim.is_none_or(|n| a.len() == n as usize))
        }
        ParamKind::List => {
            v.as_array().is_some_and(|a| a.iter().all(|x| fits(x, item.unwrap_or(ParamKind::String), None, None)))
        }
    }
}

fn refuse_unknown(args: &Map<String, Value>, known: impl Fn(&str) -> bool) -> Result<(), String> {
    match args.keys().find(|k| !known(k)) {
        Some(k) => Err(format!("no argument `{k}`")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stored_queries::Registry;

    fn catalog() -> Vec<CatalogEntry> {
        let src = r#"query find($name: String, $tags: [String]?, $big: I64?, $v: Vector(2)?) @description("Find") @instruction("Exact") {
            match { $p: Person { name: $name } }
            return { $p.name }
        }
        query add($name: String, $age: I32?) { insert Person { name: $name, age: $age } }
        query snapshot($branch: String) { match { $p: Person { name: $branch } } return { $p.name } }
        "#;
        Registry::parse(&[("q.gq".into(), src.into())]).expect("parse").catalog()
    }

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn stored_queries_come_first_and_shadow_a_builtin_of_their_name() {
        let all = tools(&catalog());
        let names: Vec<&str> = all.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["add", "find", "snapshot", "branches_list", "commits_list", "diff"]);
        let find = &all[1];
        assert_eq!(find.description, "Find\n\nExact");
        assert!(find.read_only && !all[0].read_only);
        assert_eq!(find.input_schema["required"], json!(["name"]));
        assert_eq!(find.input_schema["properties"]["name"], json!({"type": "string"}));
        assert_eq!(
            find.input_schema["properties"]["tags"],
            json!({"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]})
        );
        assert_eq!(find.input_schema["properties"]["v"]["anyOf"][0]["maxItems"], json!(2));
        assert_eq!(find.input_schema["properties"]["branch"]["type"], json!("string"));
        // A parameter named `branch` takes the name: no ref argument then.
        let shadow = &all[2];
        assert_eq!(shadow.input_schema["properties"].as_object().map(|p| p.len()), Some(1));
        assert_eq!(all[5].input_schema["required"], json!(["from", "to"]));
    }

    #[test]
    fn a_stored_call_posts_its_params_and_branch() {
        let c = catalog();
        let call = plan("add", &args(json!({"name": "Zed", "age": 9, "branch": "agent/a/x"})), &c).expect("fits");
        assert_eq!(
            call,
            Some(RouteCall::Post {
                path: "/queries/add".into(),
                body: json!({"params": {"name": "Zed", "age": 9}, "expect_mutation": true, "branch": "agent/a/x"}),
            })
        );
        let big = plan("find", &args(json!({"name": "A", "big": "-90071992547409931"})), &c).expect("bigint string");
        assert!(matches!(big, Some(RouteCall::Post { .. })));
        assert_eq!(plan("nope", &Map::new(), &c), Ok(None));
    }

    #[test]
    fn wrong_arguments_are_refused_by_name() {
        let c = catalog();
        let bad = |tool: &str, v: Value| plan(tool, &args(v), &c).expect_err("refused").reason;
        assert!(bad("add", json!({"name": 5})).starts_with("`name` must match"));
        assert_eq!(bad("add", json!({})), "`name` is required");
        assert_eq!(bad("add", json!({"name": "a", "agee": 1})), "no argument `agee`");
        assert!(bad("add", json!({"name": "a", "age": 1.5})).starts_with("`age` must match"));
        assert!(bad("find", json!({"name": "a", "tags": ["x", 1]})).starts_with("`tags` must match"));
        assert!(bad("find", json!({"name": "a", "big": "12a"})).starts_with("`big` must match"));
        assert!(bad("find", json!({"name": "a", "v": [1.0]})).starts_with("`v` must match"));
        assert!(bad("add", json!({"name": "a", "branch": 3})).starts_with("`branch` must be a string"));
        assert_eq!(bad("snapshot", json!({})), "`branch` is required");
        assert_eq!(bad("diff", json!({"from": "main"})), "`to` is required");
        assert!(bad("diff", json!({"from": "a", "to": "b", "kind": "both"})).contains("one of node, edge"));
        assert!(bad("commits_list", json!({"limit": -1})).contains("non-negative integer"));
    }

    #[test]
    fn a_builtin_call_is_a_get_with_its_arguments() {
        let call = plan("diff", &args(json!({"from": "main~1", "to": "main", "stat": true, "limit": 5})), &[]);
        assert_eq!(
            call,
            Ok(Some(RouteCall::Get {
                path: "/diff".into(),
                query: vec![
                    ("from".into(), "main~1".into()),
                    ("to".into(), "main".into()),
                    ("stat".into(), "true".into()),
                    ("limit".into(), "5".into()),
                ],
            }))
        );
        assert_eq!(
            plan("branches_list", &Map::new(), &[]),
            Ok(Some(RouteCall::Get { path: "/branches".into(), query: vec![] }))
        );
    }
}
