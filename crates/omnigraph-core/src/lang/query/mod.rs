//! Parser for `.gq` query and mutation files.
//!
//! [`parse_queries`] turns source text into a list of [`ast::Query`] values or
//! the first error as a located [`Diagnostic`](crate::lang::diag::Diagnostic). The work is split into a
//! hand-written lexer (tokens with line/column positions, comments and
//! string escapes handled) and a recursive-descent [`parser`].
//!
//! # AST shape
//!
//! ```text
//! Query { name, pos, name_pos, params: [Param { name, pos, ty: ParamType }],
//!         description?, instruction?, body }
//! ParamType { kind: Scalar(BaseType) | List(BaseType) | Vector(N), nullable, pos }
//! QueryBody::Read(ReadQuery { match_pos, clauses, return_pos, projections, order?, limit? })
//! QueryBody::Mutation([Mutation { kind, type_name, pos }])
//!
//! Clause  = Binding   { var, type_name, props: [PropMatch { prop, value, pos }], pos }
//!         | Traversal { src, edge_var?, edge, undirected, hops?: {min, max?, pos}, dst, pos }
//!         | Filter    { left, op, op_pos, right, pos }
//!         | TextSearch(Expr)          // bare search / fuzzy / match_text call
//!         | Not       { clauses, pos }
//! Projection { expr, alias?, pos }   OrderClause { items: [Ordering { expr, direction?, pos }], pos }
//! Limit { value, pos }
//! Expr { kind, pos }, kind = Literal | Var | Prop{var, prop} | Alias | Now | Agg{func, arg}
//!         | Nearest{prop, query} | Search | Fuzzy{.., max_edits?} | MatchText | Bm25
//!         | Rrf{first, second, k?}
//! Literal = String | Int(u64) | Float(f64) | Bool | Date(text) | DateTime(text) | List([Expr])
//! MutationKind = Insert { assignments } | Update { assignments, predicate } | Delete { predicate }
//! Assignment { prop, value, pos }   Predicate { prop, op, value, pos }
//! ```
//!
//! Names are kept as written (edge names keep their lowercase first letter).
//! An inline chain `$a knows $b worksAt $c` becomes one `Traversal` per hop.
//! `{min,}` hop bounds parse with `max: None` so the typechecker can reject
//! them with its own error. `$x` is never classified as parameter or
//! variable here; that is the typechecker's job.
//!
//! # Error codes
//!
//! | code | meaning |
//! |------|---------|
//! | `Q01` | unexpected character (includes `-`: no negative literals) |
//! | `Q02` | unterminated string literal |
//! | `Q03` | invalid escape sequence in a string |
//! | `Q04` | unterminated `/* … */` comment |
//! | `Q05` | number out of range (integer > u64, vector dimension > u32) |
//! | `Q06` | invalid variable: `$` not followed by a lowercase letter or `_` |
//! | `Q07` | expected `query` at the top level |
//! | `Q08` | expected a specific token (punctuation or keyword), found another |
//! | `Q09` | expected an identifier (query name, property, alias) |
//! | `Q10` | expected a capitalised type name (binding, insert/update/delete) |
//! | `Q11` | unknown parameter type |
//! | `Q12` | unknown or duplicate query annotation |
//! | `Q13` | query body does not start with `match`/`insert`/`update`/`delete` |
//! | `Q14` | empty block (`match {}`, `not {}`, `return {}`, `order {}`, `{}` props, assignments) |
//! | `Q15` | token cannot start a match clause |
//! | `Q16` | invalid edge name in a traversal (must start lowercase, not `not`) |
//! | `Q17` | expected an expression |
//! | `Q18` | expression in `match` without a filter operator |
//! | `Q19` | `rrf` argument is not `nearest(…)` or `bm25(…)` |
//! | `Q20` | first argument of `nearest` is not `$var.prop` |
//! | `Q21` | value is not a literal, `$param` or `now()` (prop match, assignment, `where`, list element) |
//! | `Q22` | mutation `where` operator is not one of `= != > >= < <=` |
//! | `Q23` | nesting deeper than [`parser::MAX_DEPTH`] |
//! | `Q24` | duplicate query name in one file |
//! | `Q25` | duplicate parameter name in one query |
//! | `Q26` | unknown function name |
//! | `Q27` | expected an unsigned integer (`limit`, hop bounds, `Vector(N)`) |
//! | `D2`  | a mutation query mixes insert/update with delete (rule D₂) |

pub mod ast;
pub mod ir;
pub(crate) mod lexer;
pub mod parser;
pub mod typecheck;

pub use parser::parse_queries;

#[cfg(test)]
mod tests;
