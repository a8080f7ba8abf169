//! Typechecker for `.gq` queries: resolves an [`ast::Query`] against a
//! [`Catalog`] and lowers it to [`ir::QueryIr`].
//!
//! All errors of a query are collected (sorted by position) rather than
//! stopping at the first. Codes follow the reference project's catalogue:
//!
//! | code | meaning |
//! |------|---------|
//! | `T1`  | unknown node type in a binding |
//! | `T2`  | binding `{ prop: … }` names a property the type lacks |
//! | `T3`  | literal or binding-match value invalid for its property (type, enum value, range, date text), or binding-match `$x` not a declared parameter |
//! | `T4`  | unknown edge type in a traversal |
//! | `T5`  | variable is not an endpoint of the traversed edge |
//! | `T6`  | read variable, property, alias or order key cannot be resolved (also a variable rebound to another type) |
//! | `T7`  | comparison/assignment operands invalid (param type mismatch, list/vector/blob/node comparisons, `contains`/`starts_with` operands) |
//! | `T8`  | aggregate argument invalid for the function |
//! | `T9`  | invalid grouping, aggregate outside `return`, or a `not { }` block that mentions no outer variable |
//! | `T10` | unknown mutation target type, or a mutation without assignments |
//! | `T11` | mutation property unavailable (unknown, key property in `update`, Blob/Vector in `where`) |
//! | `T12` | insert omits a required property or an edge endpoint `from`/`to` |
//! | `T13` | duplicate assignment |
//! | `T14` | mutation `$var` is not a declared parameter |
//! | `T15` | invalid hop bounds, or invalid `nearest` operands |
//! | `T16` | update of an edge type |
//! | `T17` | `nearest` ordering without `limit` |
//! | `T18` | alias ordering together with `nearest` |
//! | `T19` | invalid `search`/`fuzzy` operands or placement |
//! | `T20` | invalid `match_text`/`bm25` operands or placement |
//! | `T21` | invalid `rrf` operands, placement, or `rrf` ordering without `limit` |
//! | `T22` | undirected traversal on an edge whose endpoint types differ |
//! | `T23` | edge binding used in an incompatible role |
//! | `T24` | a Blob value read, ordered or aggregated |

use super::ast::{self, AggFunc, ExprKind, FilterOp, Literal, MutationKind, ParamTypeKind};
use super::ir::{self, CmpOp, Operand, Type, Value, edge_table_key, node_table_key};
use crate::lang::catalog::dates::{parse_date, parse_datetime};
use crate::lang::catalog::{Catalog, EdgeType, NodeType, Property, ScalarType};
use crate::lang::diag::{Diagnostic, Pos};
use std::collections::{HashMap, HashSet};

/// Checks one parsed query against `catalog` and lowers it, or returns every
/// diagnostic found (each with a `T…` code), sorted by position.
pub fn check_query(catalog: &Catalog, query: &ast::Query) -> Result<ir::QueryIr, Vec<Diagnostic>> {
    let mut ck = Checker { catalog, params: HashMap::new(), errors: Vec::new(), anon: 0 };
    let mut params = Vec::with_capacity(query.params.len());
    for p in &query.params {
        let ty = param_type(&p.ty);
        ck.params.insert(p.name.clone(), ty.clone());
        params.push(ir::ParamIr { name: p.name.clone(), ty });
    }
    let body = match &query.body {
        ast::QueryBody::Read(r) => ir::BodyIr::Read(ck.read(r)),
        ast::QueryBody::Mutation(ms) => ir::BodyIr::Mutation(ck.mutation(ms)),
    };
    if ck.errors.is_empty() {
        Ok(ir::QueryIr {
            name: query.name.clone(),
            params,
            description: query.description.clone(),
            instruction: query.instruction.clone(),
            body,
        })
    } else {
        let mut errors = ck.errors;
        errors.sort_by_key(|d| (d.pos.line, d.pos.column));
        errors.dedup();
        Err(errors)
    }
}

/// Parses `src` and checks every query in it, in source order. A parse
/// error yields a single entry named `""` holding that one diagnostic.
pub fn check_source(catalog: &Catalog, src: &str) -> Vec<(String, Result<ir::QueryIr, Vec<Diagnostic>>)> {
    match super::parse_queries(src) {
        Ok(queries) => queries.iter().map(|q| (q.name.clone(), check_query(catalog, q))).collect(),
        Err(d) => vec![(String::new(), Err(vec![d]))],
    }
}

fn param_type(t: &ast::ParamType) -> Type {
    let (scalar, list) = match t.kind {
        ParamTypeKind::Scalar(b) => (ScalarType::from(b), false),
        ParamTypeKind::List(b) => (ScalarType::from(b), true),
        ParamTypeKind::Vector(n) => (ScalarType::Vector(n), false),
    };
    Type { scalar, list, nullable: t.nullable }
}

fn prop_type(p: &Property) -> Type {
    Type { scalar: p.ty.clone(), list: p.list, nullable: p.nullable }
}

/// Human spelling of a type, for messages.
fn show(t: &Type) -> String {
    let base = match &t.scalar {
        ScalarType::Vector(n) => format!("Vector({n})"),
        ScalarType::Enum(vals) => format!("enum({})", vals.join(", ")),
        other => format!("{other:?}"),
    };
    let base = if t.list { format!("[{base}]") } else { base };
    if t.nullable { format!("{base}?") } else { base }
}

fn is_stringish(s: &ScalarType) -> bool {
    matches!(s, ScalarType::String | ScalarType::Enum(_))
}

fn is_float(s: &ScalarType) -> bool {
    matches!(s, ScalarType::F32 | ScalarType::F64)
}

/// Whether two element types may be compared (or a value of `a` stored in `b`).
fn scalars_compatible(a: &ScalarType, b: &ScalarType) -> bool {
    a == b
        || (is_stringish(a) && is_stringish(b))
        || (a.is_numeric() && b.is_numeric())
        || matches!((a, b), (ScalarType::Vector(x), ScalarType::Vector(y)) if x == y)
}

fn types_compatible(a: &Type, b: &Type) -> bool {
    a.list == b.list && scalars_compatible(&a.scalar, &b.scalar)
}

/// A String parameter may also be stored in a Blob property (its URI).
fn assignment_compatible(actual: &Type, expected: &Type) -> bool {
    types_compatible(actual, expected)
        || (!actual.list
            && !expected.list
            && actual.scalar == ScalarType::String
            && expected.scalar == ScalarType::Blob)
}

/// A shape string of an expression, ignoring positions (for matching an
/// order key against a projection).
fn shape(e: &ast::Expr) -> String {
    match &e.kind {
        ExprKind::Literal(l) => format!("{l:?}"),
        ExprKind::Var(v) => format!("${}", v.name),
        ExprKind::Prop(p) => format!("${}.{}", p.var.name, p.prop.name),
        ExprKind::Alias(n) => n.name.clone(),
        ExprKind::Now => "now()".into(),
        ExprKind::Agg { func, arg } => format!("{func:?}({})", shape(arg)),
        ExprKind::Nearest { prop, query } => format!("nearest(${}.{},{})", prop.var.name, prop.prop.name, shape(query)),
        ExprKind::Search { field, query } => format!("search({},{})", shape(field), shape(query)),
        ExprKind::Fuzzy { field, query, max_edits } => {
            format!("fuzzy({},{},{})", shape(field), shape(query), max_edits.as_deref().map(shape).unwrap_or_default())
        }
        ExprKind::MatchText { field, query } => format!("match_text({},{})", shape(field), shape(query)),
        ExprKind::Bm25 { field, query } => format!("bm25({},{})", shape(field), shape(query)),
        ExprKind::Rrf { first, second, k } => {
            format!("rrf({},{},{})", shape(first), shape(second), k.as_deref().map(shape).unwrap_or_default())
        }
    }
}

fn agg_name(f: AggFunc) -> &'static str {
    match f {
        AggFunc::Count => "count",
        AggFunc::Sum => "sum",
        AggFunc::Avg => "avg",
        AggFunc::Min => "min",
        AggFunc::Max => "max",
    }
}

/// What a match variable is bound to.
#[derive(Debug, Clone, PartialEq)]
enum Bound {
    Node(String),
    Edge(String),
    /// Bound by a clause that failed to check; uses stay silent.
    Unknown,
}

#[derive(Debug, Clone, Default)]
struct Scope {
    vars: HashMap<String, Bound>,
}

/// A resolved read value.
enum Resolved {
    Scalar(Operand),
    Node {
        var: String,
        type_name: String,
    },
    /// An error was already reported (or the variable's clause failed).
    Failed,
}

/// Where a literal is being fitted: decides the mismatch code and how
/// strict the conversion is.
#[derive(Clone, Copy, PartialEq)]
enum Site {
    /// Assignment or binding match: `T3`, exact storage fit.
    Store,
    /// Filter comparison: `T7` (enum values still `T3`).
    Compare,
}

struct Checker<'a> {
    catalog: &'a Catalog,
    params: HashMap<String, Type>,
    errors: Vec<Diagnostic>,
    anon: u32,
}

impl<'a> Checker<'a> {
    fn err(&mut self, pos: Pos, code: &str, msg: impl Into<String>) {
        self.errors.push(Diagnostic::with_code(pos, code, msg));
    }

    fn fresh_anon(&mut self) -> String {
        self.anon += 1;
        format!("_#{}", self.anon)
    }

    // ───────────────────────── literals ─────────────────────────

    /// A literal with its natural type (Int → I64, Float → F64, …).
    fn literal(&mut self, lit: &Literal, pos: Pos) -> Option<(Value, Type)> {
        Some(match lit {
            Literal::String(s) => (Value::String(s.clone()), Type::scalar(ScalarType::String)),
            Literal::Int(u) => match i64::try_from(*u) {
                Ok(i) => (Value::I64(i), Type::scalar(ScalarType::I64)),
                Err(_) => {
                    self.err(pos, "T3", format!("integer literal {u} is out of range (max {})", i64::MAX));
                    return None;
                }
            },
            Literal::Float(f) => (Value::F64(*f), Type::scalar(ScalarType::F64)),
            Literal::Bool(b) => (Value::Bool(*b), Type::scalar(ScalarType::Bool)),
            Literal::Date(text) => match parse_date(text).and_then(|d| i32::try_from(d).ok()) {
                Some(d) => (Value::Date(d), Type::scalar(ScalarType::Date)),
                None => {
                    self.err(pos, "T3", format!("invalid date literal \"{text}\"; expected YYYY-MM-DD"));
                    return None;
                }
            },
            Literal::DateTime(text) => match parse_datetime(text) {
                Some(ms) => (Value::DateTime(ms), Type::scalar(ScalarType::DateTime)),
                None => {
                    self.err(
                        pos,
                        "T3",
                        format!("invalid datetime literal \"{text}\"; expected YYYY-MM-DDTHH:MM[:SS[.fff]][Z|±HH:MM]"),
                    );
                    return None;
                }
            },
            Literal::List(items) => {
                let mut values = Vec::with_capacity(items.len());
                let mut elem: Option<ScalarType> = None;
                let mut ok = true;
                for item in items {
                    let ExprKind::Literal(inner) = &item.kind else {
                        self.err(item.pos, "T3", "list literal elements must be literals");
                        ok = false;
                        continue;
                    };
                    if matches!(inner, Literal::List(_)) {
                        self.err(item.pos, "T3", "nested list literals are not supported");
                        ok = false;
                        continue;
                    }
                    let Some((v, t)) = self.literal(inner, item.pos) else {
                        ok = false;
                        continue;
                    };
                    elem = match elem {
                        None => Some(t.scalar),
                        Some(prev) if prev == t.scalar => Some(prev),
                        Some(prev) if prev.is_numeric() && t.scalar.is_numeric() => Some(ScalarType::F64),
                        Some(prev) => {
                            self.err(
                                item.pos,
                                "T3",
                                format!(
                                    "list literal elements must share one type: {} after {}",
                                    show(&t),
                                    show(&Type::scalar(prev.clone()))
                                ),
                            );
                            ok = false;
                            Some(prev)
                        }
                    };
                    values.push(v);
                }
                if !ok {
                    return None;
                }
                let scalar = elem.unwrap_or(ScalarType::String);
                if scalar == ScalarType::F64 {
                    values = values.into_iter().map(to_f64).collect();
                }
                (Value::List(values), Type { scalar, list: true, nullable: false })
            }
        })
    }

    /// Fits a naturally typed literal to `target` (a property type), or
    /// reports why it cannot. `what` names the property for messages.
    fn fit(&mut self, value: Value, vty: &Type, target: &Type, pos: Pos, site: Site, what: &str) -> Option<Value> {
        let code = if site == Site::Store { "T3" } else { "T7" };
        let mismatch = |ck: &mut Self| {
            ck.err(pos, code, format!("{what} has type {} but the value is {}", show(target), show(vty)));
            None
        };
        if value == Value::Now {
            if !target.list && target.scalar == ScalarType::DateTime {
                return Some(Value::Now);
            }
            return mismatch(self);
        }
        if target.list {
            let Value::List(items) = value else { return mismatch(self) };
            if !vty.list {
                return mismatch(self);
            }
            let elem_target = target.element();
            let elem_vty = vty.element();
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(self.fit(item, &elem_vty, &elem_target, pos, site, what)?);
            }
            return Some(Value::List(out));
        }
        match &target.scalar {
            ScalarType::Vector(n) => {
                let Value::List(items) = value else { return mismatch(self) };
                if !vty.list || (!vty.scalar.is_numeric() && !items.is_empty()) {
                    return mismatch(self);
                }
                if items.len() as u64 != u64::from(*n) {
                    self.err(
                        pos,
                        code,
                        format!("{what} has type Vector({n}) but the vector literal has {} elements", items.len()),
                    );
                    return None;
                }
                Some(Value::List(items.into_iter().map(to_f64).collect()))
            }
            ScalarType::Enum(allowed) => match value {
                Value::String(s) if !vty.list => {
                    if allowed.contains(&s) {
                        Some(Value::String(s))
                    } else {
                        self.err(pos, "T3", format!("{what} expects one of [{}], got \"{s}\"", allowed.join(", ")));
                        None
                    }
                }
                _ => mismatch(self),
            },
            ScalarType::String => match value {
                Value::String(s) if !vty.list => Some(Value::String(s)),
                _ => mismatch(self),
            },
            ScalarType::Blob if site == Site::Store => match value {
                Value::String(s) if !vty.list => Some(Value::String(s)),
                _ => mismatch(self),
            },
            s if s.is_numeric() => match value {
                Value::I64(i) if is_float(s) => Some(Value::F64(i as f64)),
                Value::I64(i) => {
                    let (lo, hi): (i64, i64) = match s {
                        ScalarType::I32 => (i32::MIN.into(), i32::MAX.into()),
                        ScalarType::U32 => (0, u32::MAX.into()),
                        ScalarType::U64 => (0, i64::MAX),
                        _ => (i64::MIN, i64::MAX),
                    };
                    if i < lo || i > hi {
                        self.err(pos, "T3", format!("{what} has type {} but {i} is out of its range", show(target)));
                        return None;
                    }
                    Some(Value::I64(i))
                }
                Value::F64(f) if is_float(s) || site == Site::Compare => Some(Value::F64(f)),
                _ => mismatch(self),
            },
            ScalarType::Bool => match value {
                Value::Bool(b) => Some(Value::Bool(b)),
                _ => mismatch(self),
            },
            ScalarType::Date => match value {
                Value::Date(d) => Some(Value::Date(d)),
                _ => mismatch(self),
            },
            ScalarType::DateTime => match value {
                Value::DateTime(d) => Some(Value::DateTime(d)),
                _ => mismatch(self),
            },
            _ => mismatch(self),
        }
    }

    /// A constant (literal, `$param` or `now()`) for a property of type
    /// `target`: assignments, binding matches and mutation predicates.
    /// `undeclared` is the code for a `$var` that is not a parameter.
    fn constant(&mut self, e: &ast::Expr, target: &Type, what: &str, undeclared: &str) -> Option<Operand> {
        match &e.kind {
            ExprKind::Literal(l) => {
                let (v, vty) = self.literal(l, e.pos)?;
                let value = self.fit(v, &vty, target, e.pos, Site::Store, what)?;
                Some(Operand::Value { value, ty: Type { nullable: false, ..target.clone() } })
            }
            ExprKind::Now => {
                let value =
                    self.fit(Value::Now, &Type::scalar(ScalarType::DateTime), target, e.pos, Site::Store, what)?;
                Some(Operand::Value { value, ty: Type::scalar(ScalarType::DateTime) })
            }
            ExprKind::Var(v) => {
                let Some(ty) = self.params.get(&v.name).cloned() else {
                    self.err(v.pos, undeclared, format!("`${}` must be a declared query parameter", v.name));
                    return None;
                };
                if !assignment_compatible(&ty, target) {
                    self.err(
                        v.pos,
                        "T7",
                        format!("parameter `${}` is {} but {what} has type {}", v.name, show(&ty), show(target)),
                    );
                    return None;
                }
                Some(Operand::Param { name: v.name.clone(), ty })
            }
            _ => {
                self.err(e.pos, "T7", format!("the value for {what} must be a literal, a parameter or now()"));
                None
            }
        }
    }

    // ───────────────────────── reads ─────────────────────────

    fn read(&mut self, r: &ast::ReadQuery) -> ir::ReadIr {
        let mut scope = Scope::default();
        let pattern = self.clauses(&r.clauses, &mut scope);

        // Projections.
        let mut projections: Vec<ir::ProjectionIr> = Vec::new();
        let mut aliases: HashMap<String, usize> = HashMap::new();
        let mut shapes: Vec<String> = Vec::new();
        let aggregate = r.projections.iter().any(|p| matches!(p.expr.kind, ExprKind::Agg { .. }));
        let lead_rank = r.order.as_ref().and_then(|o| o.items.first()).map(|o| shape(&o.expr));
        let mut group_by = Vec::new();
        for p in &r.projections {
            let index = projections.len();
            if aggregate && !matches!(p.expr.kind, ExprKind::Agg { .. }) {
                if matches!(p.expr.kind, ExprKind::Prop(_) | ExprKind::Var(_)) {
                    group_by.push(index);
                } else {
                    self.err(
                        p.pos,
                        "T9",
                        "in an aggregate query, non-aggregate projections must be `$x` or `$x.prop` (the grouping keys)",
                    );
                }
            }
            if let Some(mut proj) = self.projection(p, &scope, lead_rank.as_deref()) {
                if let Some(a) = &p.alias {
                    proj.column = a.name.clone();
                    aliases.insert(a.name.clone(), index);
                }
                projections.push(proj);
                shapes.push(shape(&p.expr));
            } else {
                // Keep indexes aligned with the source for alias resolution.
                projections.push(ir::ProjectionIr {
                    column: String::new(),
                    expr: ir::ProjExpr::Value(Value::Bool(false)),
                    ty: ir::ResultType::Scalar(Type::scalar(ScalarType::Bool)),
                });
                shapes.push(shape(&p.expr));
                if let Some(a) = &p.alias {
                    aliases.insert(a.name.clone(), index);
                }
            }
        }

        // Order.
        let mut order = Vec::new();
        let mut nearest_pos: Option<Pos> = None;
        let mut rrf_pos: Option<Pos> = None;
        let mut alias_pos: Option<Pos> = None;
        if let Some(o) = &r.order {
            for item in &o.items {
                let desc_default = matches!(item.expr.kind, ExprKind::Bm25 { .. } | ExprKind::Rrf { .. });
                let descending = match item.direction {
                    Some(ast::Direction::Desc) => true,
                    Some(ast::Direction::Asc) => false,
                    None => desc_default,
                };
                let key = match &item.expr.kind {
                    ExprKind::Alias(name) => {
                        alias_pos.get_or_insert(item.expr.pos);
                        match aliases.get(&name.name) {
                            Some(&index) => Some(ir::OrderKey::Column { index, name: name.name.clone() }),
                            None => {
                                self.err(name.pos, "T6", format!("`{}` is not a `return` alias", name.name));
                                None
                            }
                        }
                    }
                    ExprKind::Agg { .. } => {
                        let s = shape(&item.expr);
                        match shapes.iter().position(|x| *x == s) {
                            Some(index) => Some(ir::OrderKey::Column {
                                index,
                                name: projections.get(index).map(|p| p.column.clone()).unwrap_or_default(),
                            }),
                            None => {
                                self.err(item.expr.pos, "T9", "an aggregate order key must also appear in `return`");
                                None
                            }
                        }
                    }
                    ExprKind::Prop(p) => {
                        let resolved = self.prop(p, &scope);
                        match resolved {
                            Resolved::Scalar(Operand::Prop { var, prop, ty }) => {
                                if ty.scalar == ScalarType::Blob {
                                    self.err(
                                        item.expr.pos,
                                        "T24",
                                        format!("Blob property `${var}.{prop}` cannot be ordered"),
                                    );
                                    None
                                } else if matches!(ty.scalar, ScalarType::Vector(_)) || ty.list {
                                    self.err(
                                        item.expr.pos,
                                        "T7",
                                        format!("cannot order by {} property `${var}.{prop}`", show(&ty)),
                                    );
                                    None
                                } else {
                                    if aggregate {
                                        let s = shape(&item.expr);
                                        let var_shape = format!("${var}");
                                        let grouped = group_by
                                            .iter()
                                            .any(|&g| shapes.get(g).is_some_and(|x| *x == s || *x == var_shape));
                                        if !grouped {
                                            self.err(
                                                item.expr.pos,
                                                "T9",
                                                format!("order key `${var}.{prop}` is not a grouping key of this aggregate query"),
                                            );
                                        }
                                    }
                                    Some(ir::OrderKey::Prop { var, prop, ty })
                                }
                            }
                            _ => None,
                        }
                    }
                    ExprKind::Nearest { .. } => {
                        nearest_pos.get_or_insert(item.expr.pos);
                        self.nearest(&item.expr, &scope).map(ir::OrderKey::Nearest)
                    }
                    ExprKind::Bm25 { .. } => self.bm25(&item.expr, &scope).map(ir::OrderKey::Bm25),
                    ExprKind::Rrf { .. } => {
                        rrf_pos.get_or_insert(item.expr.pos);
                        self.rrf(&item.expr, &scope).map(|r| ir::OrderKey::Rrf(Box::new(r)))
                    }
                    _ => {
                        self.misplaced(
                            &item.expr,
                            &scope,
                            "an order key must be `$x.prop`, a `return` alias, or nearest/bm25/rrf",
                        );
                        None
                    }
                };
                if let Some(key) = key {
                    order.push(ir::OrderKeyIr { key, descending });
                }
            }
        }
        if r.limit.is_none() {
            if let Some(pos) = nearest_pos {
                self.err(pos, "T17", "nearest ordering requires a `limit` clause");
            }
            if let Some(pos) = rrf_pos {
                self.err(pos, "T21", "rrf ordering requires a `limit` clause");
            }
        }
        if let (Some(_), Some(pos)) = (nearest_pos, alias_pos) {
            self.err(pos, "T18", "alias-based ordering is not supported together with nearest");
        }

        ir::ReadIr {
            pattern,
            projections,
            aggregate,
            group_by: if aggregate { group_by } else { Vec::new() },
            order,
            limit: r.limit.as_ref().map(|l| l.value),
        }
    }

    /// Reports an expression used where it does not belong, with the code
    /// of its own construct (or `fallback` text under `T7`).
    fn misplaced(&mut self, e: &ast::Expr, scope: &Scope, fallback: &str) {
        match &e.kind {
            ExprKind::Agg { .. } => {
                self.err(e.pos, "T9", "aggregates are only allowed in `return` (and repeated in `order`)")
            }
            ExprKind::Nearest { .. } => {
                self.err(e.pos, "T15", "nearest(...) is only allowed in `order` (or repeated in `return`)")
            }
            ExprKind::Search { .. } => self.err(e.pos, "T19", "search(...) is only allowed as a match clause"),
            ExprKind::Fuzzy { .. } => self.err(e.pos, "T19", "fuzzy(...) is only allowed as a match clause"),
            ExprKind::MatchText { .. } => self.err(e.pos, "T20", "match_text(...) is only allowed as a match clause"),
            ExprKind::Bm25 { .. } => {
                self.err(e.pos, "T20", "bm25(...) is only allowed in `order` (or repeated in `return`)")
            }
            ExprKind::Rrf { .. } => self.err(e.pos, "T21", "rrf(...) is only allowed in `order`"),
            ExprKind::Alias(n) => self.err(n.pos, "T6", format!("alias `{}` can only be used in `order`", n.name)),
            _ => {
                // Resolve for its own errors first (unbound variables etc.).
                if !matches!(self.value(e, scope), Resolved::Failed) {
                    self.err(e.pos, "T7", fallback);
                }
            }
        }
    }

    /// Checks match clauses in phases (bindings, traversals, filters and
    /// searches, then `not` blocks) so clause order does not matter.
    fn clauses(&mut self, clauses: &[ast::Clause], scope: &mut Scope) -> ir::MatchIr {
        let mut out = ir::MatchIr::default();
        for c in clauses {
            if let ast::Clause::Binding(b) = c {
                self.binding(b, scope, &mut out);
            }
        }
        for c in clauses {
            if let ast::Clause::Traversal(t) = c {
                self.traversal(t, scope, &mut out);
            }
        }
        for c in clauses {
            match c {
                ast::Clause::Filter(f) => {
                    if let Some(f) = self.filter(f, scope) {
                        out.filters.push(f);
                    }
                }
                ast::Clause::TextSearch(e) => {
                    if let Some(s) = self.text_search(e, scope) {
                        out.searches.push(s);
                    }
                }
                _ => {}
            }
        }
        for c in clauses {
            if let ast::Clause::Not(n) = c {
                let mut inner_scope = scope.clone();
                let inner = self.clauses(&n.clauses, &mut inner_scope);
                if !n.clauses.iter().any(|c| clause_mentions(c, scope)) {
                    self.err(n.pos, "T9", "a `not { }` block must reference at least one variable bound outside it");
                }
                out.not_blocks.push(inner);
            }
        }
        out
    }

    /// The single `String` `@key` of node type `t`: a keyed node's id is its
    /// key's canonical string, which for one String is the string itself.
    fn id_key(&self, t: &str) -> Option<String> {
        let node = self.catalog.nodes.iter().find(|n| n.name == t)?;
        let [key] = node.key.as_slice() else { return None };
        let p = node.properties.iter().find(|p| &p.name == key)?;
        (p.ty == ScalarType::String && !p.list).then(|| key.clone())
    }

    fn bind_new(&mut self, name: &str, anonymous: bool, bound: Bound, scope: &mut Scope, out: &mut ir::MatchIr) {
        if let Bound::Node(t) | Bound::Edge(t) = &bound {
            let (kind, table_key) = match &bound {
                Bound::Edge(_) => (ir::VarKind::Edge, edge_table_key(t)),
                _ => (ir::VarKind::Node, node_table_key(t)),
            };
            let id_key = match &bound {
                Bound::Node(_) => self.id_key(t),
                _ => None,
            };
            out.vars.push(ir::VarIr {
                name: name.to_string(),
                kind,
                type_name: t.clone(),
                table_key,
                anonymous,
                id_key,
            });
        }
        scope.vars.insert(name.to_string(), bound);
    }

    fn binding(&mut self, b: &ast::Binding, scope: &mut Scope, out: &mut ir::MatchIr) {
        let node = self.catalog.node(&b.type_name.name);
        let (var, anonymous) =
            if b.var.is_anonymous() { (self.fresh_anon(), true) } else { (b.var.name.clone(), false) };
        let Some(node) = node else {
            self.err(b.type_name.pos, "T1", format!("unknown node type `{}`", b.type_name.name));
            scope.vars.entry(var).or_insert(Bound::Unknown);
            return;
        };
        match scope.vars.get(&var) {
            Some(Bound::Edge(e)) => {
                self.err(
                    b.var.pos,
                    "T23",
                    format!("`${var}` is bound to edge type `{e}` and cannot be rebound as node type `{}`", node.name),
                );
                return;
            }
            Some(Bound::Node(t)) if *t != node.name => {
                self.err(
                    b.var.pos,
                    "T6",
                    format!("`${var}` is already bound to type `{t}`, cannot rebind to `{}`", node.name),
                );
                return;
            }
            Some(Bound::Node(_)) => {}
            Some(Bound::Unknown) => {
                scope.vars.insert(var.clone(), Bound::Node(node.name.clone()));
            }
            None => self.bind_new(&var, anonymous, Bound::Node(node.name.clone()), scope, out),
        }
        for pm in &b.props {
            let Some(p) = node.property(&pm.prop.name) else {
                self.err(pm.prop.pos, "T2", format!("type `{}` has no property `{}`", node.name, pm.prop.name));
                continue;
            };
            let pty = prop_type(p);
            let what = format!("property `{}.{}`", node.name, p.name);
            if p.ty == ScalarType::Blob {
                self.err(pm.prop.pos, "T3", format!("Blob {what} cannot be used in a match pattern"));
                continue;
            }
            if matches!(p.ty, ScalarType::Vector(_)) {
                self.err(pm.prop.pos, "T3", format!("Vector {what} cannot be used in a match pattern"));
                continue;
            }
            // A list property matches by membership of a scalar value.
            let (target, op) = if pty.list { (pty.element(), CmpOp::ListContains) } else { (pty.clone(), CmpOp::Eq) };
            if let Some(right) = self.constant(&pm.value, &target, &what, "T3") {
                out.filters.push(ir::FilterIr {
                    left: Operand::Prop { var: var.clone(), prop: p.name.clone(), ty: pty },
                    op,
                    right,
                });
            }
        }
    }

    /// Binds a traversal endpoint to `expected`, or checks an existing binding.
    fn endpoint(
        &mut self,
        v: &ast::Var,
        name: &str,
        expected: &str,
        edge: &EdgeType,
        scope: &mut Scope,
        out: &mut ir::MatchIr,
    ) {
        match scope.vars.get(name) {
            Some(Bound::Node(t)) if t != expected => self.err(
                v.pos,
                "T5",
                format!("`${}` has type `{t}` but edge `{}` expects `{expected}` there", v.name, edge.name),
            ),
            Some(Bound::Edge(_)) => self.err(
                v.pos,
                "T23",
                format!("edge binding `${}` cannot be a traversal endpoint; endpoints are node bindings", v.name),
            ),
            Some(_) => {}
            None => self.bind_new(name, v.is_anonymous(), Bound::Node(expected.to_string()), scope, out),
        }
    }

    fn traversal(&mut self, t: &ast::Traversal, scope: &mut Scope, out: &mut ir::MatchIr) {
        let src = if t.src.is_anonymous() { self.fresh_anon() } else { t.src.name.clone() };
        let dst = if t.dst.is_anonymous() { self.fresh_anon() } else { t.dst.name.clone() };
        let Some(edge) = self.catalog.edge_ci(&t.edge.name) else {
            self.err(t.edge.pos, "T4", format!("unknown edge type `{}`", t.edge.name));
            for n in [&src, &dst] {
                scope.vars.entry(n.clone()).or_insert(Bound::Unknown);
            }
            if let Some(w) = &t.edge_var {
                scope.vars.entry(w.name.clone()).or_insert(Bound::Unknown);
            }
            return;
        };
        let (mut min_hops, mut max_hops) = (1u32, 1u32);
        if let Some(h) = &t.hops {
            match (u32::try_from(h.min), h.max.map(u32::try_from)) {
                (_, None) => self.err(h.pos, "T15", "unbounded traversal is disabled; use bounded traversal {min,max}"),
                (Ok(0), _) => self.err(h.pos, "T15", "traversal min hop bound must be >= 1"),
                (Ok(min), Some(Ok(max))) if max < min => {
                    self.err(h.pos, "T15", format!("invalid traversal bounds {{{min},{max}}}; max must be >= min"))
                }
                (Ok(min), Some(Ok(max))) => (min_hops, max_hops) = (min, max),
                _ => self.err(h.pos, "T15", "traversal hop bounds are too large"),
            }
        }
        if t.undirected && edge.from_type != edge.to_type {
            self.err(
                t.edge.pos,
                "T22",
                format!(
                    "undirected traversal `<{}>` needs an edge with one endpoint type, but `{}: {} -> {}` is asymmetric; use the directed form",
                    t.edge.name, edge.name, edge.from_type, edge.to_type
                ),
            );
        }
        let mut edge_var = None;
        if let Some(w) = t.edge_var.as_ref().filter(|w| !w.is_anonymous()) {
            if t.hops.as_ref().is_some_and(|h| !(h.min == 1 && h.max == Some(1))) {
                self.err(
                    w.pos,
                    "T23",
                    format!(
                        "edge binding `${}` cannot be combined with hop bounds; a multi-hop path is not one edge",
                        w.name
                    ),
                );
            } else if w.name == t.src.name || w.name == t.dst.name {
                self.err(w.pos, "T23", format!("edge binding `${}` cannot reuse a traversal endpoint name", w.name));
            } else if scope.vars.contains_key(&w.name) || self.params.contains_key(&w.name) {
                self.err(w.pos, "T23", format!("`${}` is already bound; an edge binding needs a fresh name", w.name));
            } else {
                self.bind_new(&w.name, false, Bound::Edge(edge.name.clone()), scope, out);
                edge_var = Some(w.name.clone());
            }
        }

        let src_b = scope.vars.get(&src).cloned();
        let dst_b = scope.vars.get(&dst).cloned();
        let mut direction = ir::Direction::Out;
        match (src_b, dst_b) {
            (Some(Bound::Node(st)), _) => {
                if st == edge.from_type {
                    self.endpoint(&t.dst, &dst, &edge.to_type, edge, scope, out);
                } else if st == edge.to_type {
                    direction = ir::Direction::In;
                    self.endpoint(&t.dst, &dst, &edge.from_type, edge, scope, out);
                } else {
                    self.err(
                        t.src.pos,
                        "T5",
                        format!(
                            "`${}` has type `{st}`, which is not an endpoint of edge `{}: {} -> {}`",
                            t.src.name, edge.name, edge.from_type, edge.to_type
                        ),
                    );
                }
            }
            (Some(Bound::Edge(_)), _) => {
                self.endpoint(&t.src, &src, &edge.from_type, edge, scope, out);
                self.endpoint(&t.dst, &dst, &edge.to_type, edge, scope, out);
            }
            (_, Some(Bound::Node(dt))) => {
                if dt == edge.to_type {
                    self.endpoint(&t.src, &src, &edge.from_type, edge, scope, out);
                } else if dt == edge.from_type {
                    direction = ir::Direction::In;
                    self.endpoint(&t.src, &src, &edge.to_type, edge, scope, out);
                } else {
                    self.err(
                        t.dst.pos,
                        "T5",
                        format!(
                            "`${}` has type `{dt}`, which is not an endpoint of edge `{}: {} -> {}`",
                            t.dst.name, edge.name, edge.from_type, edge.to_type
                        ),
                    );
                }
            }
            (Some(Bound::Unknown), _) | (_, Some(Bound::Unknown)) => {
                self.endpoint(&t.src, &src, &edge.from_type, edge, scope, out);
                self.endpoint(&t.dst, &dst, &edge.to_type, edge, scope, out);
            }
            (None, _) => {
                self.endpoint(&t.src, &src, &edge.from_type, edge, scope, out);
                self.endpoint(&t.dst, &dst, &edge.to_type, edge, scope, out);
            }
        }
        if t.undirected {
            direction = ir::Direction::Both;
        }
        out.traversals.push(ir::TraversalIr {
            edge_type: edge.name.clone(),
            table_key: edge_table_key(&edge.name),
            src,
            dst,
            edge_var,
            direction,
            min_hops,
            max_hops,
        });
    }

    /// `$var.prop` in a read.
    fn prop(&mut self, p: &ast::PropRef, scope: &Scope) -> Resolved {
        let v = &p.var;
        if v.is_anonymous() {
            self.err(v.pos, "T6", "the anonymous variable `$_` cannot be read");
            return Resolved::Failed;
        }
        let props: &[Property] = match scope.vars.get(&v.name) {
            Some(Bound::Node(t)) => self.catalog.node(t).map(|n| n.properties.as_slice()).unwrap_or_default(),
            Some(Bound::Edge(t)) => self.catalog.edge(t).map(|e| e.properties.as_slice()).unwrap_or_default(),
            Some(Bound::Unknown) => return Resolved::Failed,
            None => {
                if self.params.contains_key(&v.name) {
                    self.err(v.pos, "T6", format!("`${}` is a parameter and has no properties", v.name));
                } else {
                    self.err(v.pos, "T6", format!("variable `${}` is not bound in `match`", v.name));
                }
                return Resolved::Failed;
            }
        };
        match props.iter().find(|x| x.name == p.prop.name) {
            Some(x) => Resolved::Scalar(Operand::Prop { var: v.name.clone(), prop: x.name.clone(), ty: prop_type(x) }),
            None => {
                let owner = match scope.vars.get(&v.name) {
                    Some(Bound::Node(t)) => format!("type `{t}`"),
                    Some(Bound::Edge(t)) => format!("edge `{t}`"),
                    _ => String::from("it"),
                };
                self.err(
                    p.prop.pos,
                    "T6",
                    format!("{owner} (bound to `${}`) has no property `{}`", v.name, p.prop.name),
                );
                Resolved::Failed
            }
        }
    }

    /// A plain read value: literal, `$x`, `$x.prop` or `now()`.
    fn value(&mut self, e: &ast::Expr, scope: &Scope) -> Resolved {
        match &e.kind {
            ExprKind::Literal(l) => match self.literal(l, e.pos) {
                Some((value, ty)) => Resolved::Scalar(Operand::Value { value, ty }),
                None => Resolved::Failed,
            },
            ExprKind::Now => {
                Resolved::Scalar(Operand::Value { value: Value::Now, ty: Type::scalar(ScalarType::DateTime) })
            }
            ExprKind::Prop(p) => self.prop(p, scope),
            ExprKind::Var(v) => {
                if v.is_anonymous() {
                    self.err(v.pos, "T6", "the anonymous variable `$_` cannot be read");
                    return Resolved::Failed;
                }
                if let Some(ty) = self.params.get(&v.name) {
                    return Resolved::Scalar(Operand::Param { name: v.name.clone(), ty: ty.clone() });
                }
                match scope.vars.get(&v.name) {
                    Some(Bound::Node(t)) => Resolved::Node { var: v.name.clone(), type_name: t.clone() },
                    Some(Bound::Edge(_)) => {
                        self.err(
                            v.pos,
                            "T23",
                            format!("edge binding `${}` cannot be used bare; access one of its properties", v.name),
                        );
                        Resolved::Failed
                    }
                    Some(Bound::Unknown) => Resolved::Failed,
                    None => {
                        self.err(
                            v.pos,
                            "T6",
                            format!("`${}` is neither a declared parameter nor a bound variable", v.name),
                        );
                        Resolved::Failed
                    }
                }
            }
            _ => {
                self.misplaced(e, scope, "expected a value");
                Resolved::Failed
            }
        }
    }

    fn filter(&mut self, f: &ast::Filter, scope: &Scope) -> Option<ir::FilterIr> {
        let l = self.value(&f.left, scope);
        let r = self.value(&f.right, scope);
        let (mut left, mut right) = match (l, r) {
            (Resolved::Scalar(a), Resolved::Scalar(b)) => (a, b),
            (Resolved::Node { var, .. }, _) | (_, Resolved::Node { var, .. }) => {
                self.err(f.op_pos, "T7", format!("filters compare scalar values; `${var}` is a node"));
                return None;
            }
            _ => return None,
        };
        let (lt, rt) = (left.ty().clone(), right.ty().clone());
        if lt.scalar == ScalarType::Blob || rt.scalar == ScalarType::Blob {
            self.err(f.op_pos, "T7", "Blob values cannot be compared in filters");
            return None;
        }
        let op = match f.op {
            FilterOp::Contains => {
                if !lt.list && is_stringish(&lt.scalar) {
                    if rt.list || !is_stringish(&rt.scalar) {
                        self.err(
                            f.right.pos,
                            "T7",
                            format!("string contains needs a String right operand, got {}", show(&rt)),
                        );
                        return None;
                    }
                    CmpOp::StringContains
                } else if lt.list {
                    if rt.list {
                        self.err(f.right.pos, "T7", "contains needs a scalar right operand (list membership)");
                        return None;
                    }
                    if matches!(lt.scalar, ScalarType::Vector(_)) || matches!(rt.scalar, ScalarType::Vector(_)) {
                        self.err(f.op_pos, "T7", "vector membership filters are not supported");
                        return None;
                    }
                    let elem = lt.element();
                    let empty = matches!(&left, Operand::Value { value: Value::List(v), .. } if v.is_empty());
                    if !empty && !scalars_compatible(&elem.scalar, &rt.scalar) {
                        self.err(
                            f.right.pos,
                            "T7",
                            format!("cannot test membership of {} in {}", show(&rt), show(&lt)),
                        );
                        return None;
                    }
                    right = self.coerce(right, &elem, f.right.pos)?;
                    CmpOp::ListContains
                } else {
                    self.err(
                        f.left.pos,
                        "T7",
                        format!(
                            "contains needs a list (membership) or a String (substring) on the left, got {}",
                            show(&lt)
                        ),
                    );
                    return None;
                }
            }
            FilterOp::StartsWith => {
                if lt.list || !is_stringish(&lt.scalar) {
                    self.err(f.left.pos, "T7", format!("starts_with needs a String on the left, got {}", show(&lt)));
                    return None;
                }
                if rt.list || !is_stringish(&rt.scalar) {
                    self.err(f.right.pos, "T7", format!("starts_with needs a String on the right, got {}", show(&rt)));
                    return None;
                }
                CmpOp::StartsWith
            }
            op => {
                if lt.list || rt.list {
                    self.err(f.op_pos, "T7", "list comparisons are not supported; use `contains` for membership");
                    return None;
                }
                if matches!(lt.scalar, ScalarType::Vector(_)) || matches!(rt.scalar, ScalarType::Vector(_)) {
                    self.err(f.op_pos, "T7", "vector comparisons are not supported in filters");
                    return None;
                }
                if !scalars_compatible(&lt.scalar, &rt.scalar) {
                    self.err(f.op_pos, "T7", format!("cannot compare {} with {}", show(&lt), show(&rt)));
                    return None;
                }
                // Fit a literal side to the other side's type.
                if matches!(right, Operand::Value { .. }) && !matches!(left, Operand::Value { .. }) {
                    right = self.coerce(right, &lt, f.right.pos)?;
                } else if matches!(left, Operand::Value { .. }) && !matches!(right, Operand::Value { .. }) {
                    left = self.coerce(left, &rt, f.left.pos)?;
                }
                match op {
                    FilterOp::Eq => CmpOp::Eq,
                    FilterOp::Ne => CmpOp::Ne,
                    FilterOp::Gt => CmpOp::Gt,
                    FilterOp::Ge => CmpOp::Ge,
                    FilterOp::Lt => CmpOp::Lt,
                    _ => CmpOp::Le,
                }
            }
        };
        Some(ir::FilterIr { left, op, right })
    }

    /// Fits a literal operand to `target` for a comparison; other operands pass.
    fn coerce(&mut self, o: Operand, target: &Type, pos: Pos) -> Option<Operand> {
        match o {
            Operand::Value { value, ty } => {
                let value = self.fit(value, &ty, target, pos, Site::Compare, "the compared value")?;
                Some(Operand::Value { value, ty: Type { nullable: false, ..target.clone() } })
            }
            other => Some(other),
        }
    }

    /// The field of a search/rank call: `$var.prop`, a String node property.
    fn text_field(&mut self, field: &ast::Expr, scope: &Scope, func: &str, code: &str) -> Option<(String, String)> {
        let ExprKind::Prop(p) = &field.kind else {
            self.err(field.pos, code, format!("{func} field must be a String property `$var.prop`"));
            return None;
        };
        if let Some(Bound::Edge(_)) = scope.vars.get(&p.var.name) {
            self.err(
                field.pos,
                "T23",
                format!(
                    "{func} cannot target edge property `${}.{}`; text search runs on node properties",
                    p.var.name, p.prop.name
                ),
            );
            return None;
        }
        match self.prop(p, scope) {
            Resolved::Scalar(Operand::Prop { var, prop, ty }) => {
                if ty.list || !is_stringish(&ty.scalar) {
                    self.err(field.pos, code, format!("{func} field must be String, got {}", show(&ty)));
                    return None;
                }
                Some((var, prop))
            }
            _ => None,
        }
    }

    /// The text query of a search/rank call: a String literal or parameter.
    fn text_query(&mut self, q: &ast::Expr, scope: &Scope, func: &str, code: &str) -> Option<Operand> {
        match self.value(q, scope) {
            Resolved::Scalar(o) => {
                if o.ty().list || !is_stringish(&o.ty().scalar) {
                    self.err(q.pos, code, format!("{func} query must be String, got {}", show(o.ty())));
                    return None;
                }
                Some(o)
            }
            Resolved::Node { var, .. } => {
                self.err(q.pos, code, format!("{func} query must be String, got node `${var}`"));
                None
            }
            Resolved::Failed => None,
        }
    }

    fn int_operand(&mut self, e: &ast::Expr, scope: &Scope, code: &str, what: &str, positive: bool) -> Option<Operand> {
        match self.value(e, scope) {
            Resolved::Scalar(o) if !o.ty().list && o.ty().scalar.is_integer() => {
                if positive && matches!(o, Operand::Value { value: Value::I64(i), .. } if i <= 0) {
                    self.err(e.pos, code, format!("{what} must be greater than 0"));
                    return None;
                }
                Some(o)
            }
            Resolved::Failed => None,
            _ => {
                self.err(e.pos, code, format!("{what} must be an integer"));
                None
            }
        }
    }

    fn text_search(&mut self, e: &ast::Expr, scope: &Scope) -> Option<ir::TextSearchIr> {
        let (func, code, field, query) = match &e.kind {
            ExprKind::Search { field, query } => ("search", "T19", field, query),
            ExprKind::Fuzzy { field, query, .. } => ("fuzzy", "T19", field, query),
            ExprKind::MatchText { field, query } => ("match_text", "T20", field, query),
            _ => {
                self.misplaced(e, scope, "expected search(...), fuzzy(...) or match_text(...)");
                return None;
            }
        };
        let f = self.text_field(field, scope, func, code);
        let q = self.text_query(query, scope, func, code);
        let kind = match &e.kind {
            ExprKind::Fuzzy { max_edits, .. } => {
                let max_edits = match max_edits {
                    Some(m) => Some(self.int_operand(m, scope, "T19", "fuzzy max_edits", false)?),
                    None => None,
                };
                ir::TextSearchKind::Fuzzy { max_edits }
            }
            ExprKind::MatchText { .. } => ir::TextSearchKind::MatchText,
            _ => ir::TextSearchKind::Search,
        };
        let ((var, prop), query) = (f?, q?);
        Some(ir::TextSearchIr { kind, var, prop, query })
    }

    fn nearest(&mut self, e: &ast::Expr, scope: &Scope) -> Option<ir::NearestIr> {
        let ExprKind::Nearest { prop, query } = &e.kind else { return None };
        let v = &prop.var;
        let node: &NodeType = match scope.vars.get(&v.name) {
            Some(Bound::Node(t)) => self.catalog.node(t)?,
            Some(Bound::Edge(_)) => {
                self.err(
                    v.pos,
                    "T23",
                    format!("nearest cannot target edge binding `${}`; vector search runs on nodes", v.name),
                );
                return None;
            }
            Some(Bound::Unknown) => return None,
            None => {
                self.err(v.pos, "T15", format!("nearest variable `${}` is not bound", v.name));
                return None;
            }
        };
        let Some(p) = node.property(&prop.prop.name) else {
            self.err(prop.prop.pos, "T15", format!("type `{}` has no property `{}`", node.name, prop.prop.name));
            return None;
        };
        let dim = match (&p.ty, p.list) {
            (ScalarType::Vector(d), false) => *d,
            _ => {
                self.err(
                    prop.prop.pos,
                    "T15",
                    format!("nearest needs a Vector property, `{}.{}` is {}", node.name, p.name, show(&prop_type(p))),
                );
                return None;
            }
        };
        let want = Type::scalar(ScalarType::Vector(dim));
        let (q, is_text) = match self.value(query, scope) {
            Resolved::Scalar(Operand::Value { value: Value::List(items), ty }) => {
                if !ty.scalar.is_numeric() && !items.is_empty() {
                    self.err(
                        query.pos,
                        "T15",
                        format!("nearest query must be Vector({dim}) or String, got {}", show(&ty)),
                    );
                    return None;
                }
                if items.len() as u64 != u64::from(dim) {
                    self.err(
                        query.pos,
                        "T15",
                        format!(
                            "nearest vector dimension mismatch: property is Vector({dim}), literal has {} elements",
                            items.len()
                        ),
                    );
                    return None;
                }
                (Operand::Value { value: Value::List(items.into_iter().map(to_f64).collect()), ty: want }, false)
            }
            Resolved::Scalar(o) => {
                let t = o.ty();
                if !t.list && t.scalar == ScalarType::Vector(dim) {
                    (o, false)
                } else if !t.list && t.scalar == ScalarType::String && !matches!(o, Operand::Prop { .. }) {
                    (o, true)
                } else {
                    self.err(
                        query.pos,
                        "T15",
                        format!("nearest query must be Vector({dim}) or String, got {}", show(t)),
                    );
                    return None;
                }
            }
            Resolved::Node { var, .. } => {
                self.err(query.pos, "T15", format!("nearest query must be Vector({dim}) or String, got node `${var}`"));
                return None;
            }
            Resolved::Failed => return None,
        };
        if let Operand::Prop { .. } = q {
            self.err(query.pos, "T15", "nearest query must be a parameter or a literal");
            return None;
        }
        Some(ir::NearestIr { var: v.name.clone(), prop: p.name.clone(), dim, query: q, query_is_text: is_text })
    }

    fn bm25(&mut self, e: &ast::Expr, scope: &Scope) -> Option<ir::Bm25Ir> {
        let ExprKind::Bm25 { field, query } = &e.kind else { return None };
        let f = self.text_field(field, scope, "bm25", "T20");
        let q = self.text_query(query, scope, "bm25", "T20");
        let ((var, prop), query) = (f?, q?);
        Some(ir::Bm25Ir { var, prop, query })
    }

    fn rank(&mut self, e: &ast::Expr, scope: &Scope) -> Option<ir::RankIr> {
        match &e.kind {
            ExprKind::Nearest { .. } => self.nearest(e, scope).map(ir::RankIr::Nearest),
            ExprKind::Bm25 { .. } => self.bm25(e, scope).map(ir::RankIr::Bm25),
            _ => {
                self.err(e.pos, "T21", "rrf arguments must be nearest(...) or bm25(...)");
                None
            }
        }
    }

    fn rrf(&mut self, e: &ast::Expr, scope: &Scope) -> Option<ir::RrfIr> {
        let ExprKind::Rrf { first, second, k } = &e.kind else { return None };
        let a = self.rank(first, scope);
        let b = self.rank(second, scope);
        let k = match k {
            Some(k) => Some(self.int_operand(k, scope, "T21", "rrf k", true)?),
            None => None,
        };
        Some(ir::RrfIr { first: a?, second: b?, k })
    }

    fn projection(&mut self, p: &ast::Projection, scope: &Scope, lead_rank: Option<&str>) -> Option<ir::ProjectionIr> {
        let e = &p.expr;
        match &e.kind {
            ExprKind::Agg { func, arg } => {
                let (arg_expr, arg_ty, arg_name) = match &arg.kind {
                    ExprKind::Agg { .. } => {
                        self.err(arg.pos, "T8", format!("{} cannot take an aggregate argument", agg_name(*func)));
                        return None;
                    }
                    ExprKind::Prop(_) | ExprKind::Var(_) | ExprKind::Literal(_) | ExprKind::Now => {
                        match self.value(arg, scope) {
                            Resolved::Scalar(o) => {
                                if o.ty().scalar == ScalarType::Blob {
                                    self.err(arg.pos, "T24", "Blob values cannot be aggregated");
                                    return None;
                                }
                                let (pe, name) = proj_of_operand(&o);
                                (pe, ir::ResultType::Scalar(o.ty().clone()), name)
                            }
                            Resolved::Node { var, type_name } => {
                                (ir::ProjExpr::Node { var: var.clone() }, ir::ResultType::Node { type_name }, var)
                            }
                            Resolved::Failed => return None,
                        }
                    }
                    _ => {
                        self.misplaced(arg, scope, "expected an aggregate argument");
                        return None;
                    }
                };
                let ty = match (func, &arg_ty) {
                    (AggFunc::Count, _) => Type::scalar(ScalarType::I64),
                    (_, ir::ResultType::Node { .. }) => {
                        self.err(
                            arg.pos,
                            "T8",
                            format!("{} cannot take a node; aggregate one of its properties", agg_name(*func)),
                        );
                        return None;
                    }
                    (AggFunc::Sum | AggFunc::Avg, ir::ResultType::Scalar(t)) => {
                        if t.list || !t.scalar.is_numeric() {
                            self.err(
                                arg.pos,
                                "T8",
                                format!("{} needs a numeric value, got {}", agg_name(*func), show(t)),
                            );
                            return None;
                        }
                        Type { scalar: ScalarType::F64, list: false, nullable: true }
                    }
                    (_, ir::ResultType::Scalar(t)) => {
                        let orderable = t.scalar.is_numeric()
                            || is_stringish(&t.scalar)
                            || matches!(t.scalar, ScalarType::Bool | ScalarType::Date | ScalarType::DateTime);
                        if t.list || !orderable {
                            self.err(
                                arg.pos,
                                "T8",
                                format!(
                                    "{} needs a numeric, String, Bool, Date or DateTime value, got {}",
                                    agg_name(*func),
                                    show(t)
                                ),
                            );
                            return None;
                        }
                        Type { nullable: true, ..t.clone() }
                    }
                };
                Some(ir::ProjectionIr {
                    column: format!("{}({arg_name})", agg_name(*func)),
                    expr: ir::ProjExpr::Agg { func: *func, arg: Box::new(arg_expr) },
                    ty: ir::ResultType::Scalar(ty),
                })
            }
            ExprKind::Nearest { .. } | ExprKind::Bm25 { .. } => {
                let is_nearest = matches!(e.kind, ExprKind::Nearest { .. });
                if lead_rank != Some(shape(e).as_str()) {
                    let (code, f) = if is_nearest { ("T15", "nearest") } else { ("T20", "bm25") };
                    self.err(e.pos, code, format!("{f}(...) in `return` must repeat the leading `order` key"));
                    return None;
                }
                let rank = self.rank(e, scope)?;
                let column = match &rank {
                    ir::RankIr::Nearest(n) => format!("nearest({}.{})", n.var, n.prop),
                    ir::RankIr::Bm25(b) => format!("bm25({}.{})", b.var, b.prop),
                };
                Some(ir::ProjectionIr {
                    column,
                    expr: ir::ProjExpr::Rank(rank),
                    ty: ir::ResultType::Scalar(Type::scalar(ScalarType::F32)),
                })
            }
            ExprKind::Prop(_) | ExprKind::Var(_) | ExprKind::Literal(_) | ExprKind::Now => match self.value(e, scope) {
                Resolved::Scalar(o) => {
                    if o.ty().scalar == ScalarType::Blob {
                        self.err(e.pos, "T24", "Blob values are not available as .gq read values");
                        return None;
                    }
                    let (expr, column) = proj_of_operand(&o);
                    Some(ir::ProjectionIr { column, expr, ty: ir::ResultType::Scalar(o.ty().clone()) })
                }
                Resolved::Node { var, type_name } => Some(ir::ProjectionIr {
                    column: var.clone(),
                    expr: ir::ProjExpr::Node { var },
                    ty: ir::ResultType::Node { type_name },
                }),
                Resolved::Failed => None,
            },
            _ => {
                self.misplaced(e, scope, "cannot be projected");
                None
            }
        }
    }

    // ───────────────────────── mutations ─────────────────────────

    fn mutation(&mut self, ms: &[ast::Mutation]) -> ir::MutationIr {
        let mut statements = Vec::with_capacity(ms.len());
        for m in ms {
            if let Some(s) = self.statement(m) {
                statements.push(s);
            }
        }
        ir::MutationIr { statements }
    }

    /// Assignments against `props` (plus `from`/`to` for edges).
    fn assignments(
        &mut self,
        type_name: &str,
        assigns: &[ast::Assignment],
        props: &[Property],
        is_edge: bool,
        key: &[String],
        is_update: bool,
    ) -> (Vec<ir::AssignmentIr>, Option<Operand>, Option<Operand>) {
        let mut out = Vec::new();
        let (mut from, mut to) = (None, None);
        let mut seen = HashSet::new();
        for a in assigns {
            let name = a.prop.name.as_str();
            if !seen.insert(name) {
                self.err(a.prop.pos, "T13", format!("duplicate assignment for property `{name}`"));
                continue;
            }
            if is_edge && (name == "from" || name == "to") {
                let what = format!("endpoint `{name}` of `{type_name}`");
                let v = self.constant(&a.value, &Type::scalar(ScalarType::String), &what, "T14");
                if name == "from" {
                    from = v;
                } else {
                    to = v;
                }
                continue;
            }
            let Some(p) = props.iter().find(|p| p.name == name) else {
                let hint = if name == "id" { "; `id` is assigned by the engine" } else { "" };
                self.err(a.prop.pos, "T11", format!("type `{type_name}` has no property `{name}`{hint}"));
                continue;
            };
            if is_update && key.iter().any(|k| k == name) {
                self.err(
                    a.prop.pos,
                    "T11",
                    format!("key property `{type_name}.{name}` is immutable; delete and re-insert to change it"),
                );
                continue;
            }
            let ty = prop_type(p);
            let what = format!("property `{type_name}.{name}`");
            if let Some(value) = self.constant(&a.value, &ty, &what, "T14") {
                out.push(ir::AssignmentIr { prop: p.name.clone(), ty, value });
            }
        }
        (out, from, to)
    }

    fn predicate(
        &mut self,
        type_name: &str,
        pred: &ast::Predicate,
        props: &[Property],
        is_edge: bool,
    ) -> Option<ir::PredicateIr> {
        let name = pred.prop.name.as_str();
        let (column, ty) = if is_edge && (name == "from" || name == "to") {
            (if name == "from" { "src" } else { "dst" }.to_string(), Type::scalar(ScalarType::String))
        } else {
            let Some(p) = props.iter().find(|p| p.name == name) else {
                let hint = if is_edge { " (edges may also use `from`/`to`)" } else { "" };
                self.err(pred.prop.pos, "T11", format!("type `{type_name}` has no property `{name}`{hint}"));
                return None;
            };
            if p.ty == ScalarType::Blob {
                self.err(pred.prop.pos, "T11", format!("Blob property `{name}` cannot be used in a `where` predicate"));
                return None;
            }
            if matches!(p.ty, ScalarType::Vector(_)) || p.list {
                self.err(
                    pred.prop.pos,
                    "T11",
                    format!("{} property `{name}` cannot be used in a `where` predicate", show(&prop_type(p))),
                );
                return None;
            }
            (p.name.clone(), prop_type(p))
        };
        let what = format!("property `{type_name}.{name}`");
        let value = self.constant(&pred.value, &ty, &what, "T14")?;
        let op = match pred.op {
            FilterOp::Eq => CmpOp::Eq,
            FilterOp::Ne => CmpOp::Ne,
            FilterOp::Gt => CmpOp::Gt,
            FilterOp::Ge => CmpOp::Ge,
            FilterOp::Lt => CmpOp::Lt,
            FilterOp::Le => CmpOp::Le,
            other => {
                self.err(pred.pos, "T7", format!("`{}` is not allowed in a mutation `where`", other.as_str()));
                return None;
            }
        };
        Some(ir::PredicateIr { prop: name.to_string(), column, ty, op, value })
    }

    fn statement(&mut self, m: &ast::Mutation) -> Option<ir::StatementIr> {
        let tn = &m.type_name;
        let node = self.catalog.node(&tn.name);
        let edge = if node.is_none() { self.catalog.edge_ci(&tn.name) } else { None };
        if node.is_none() && edge.is_none() {
            self.err(tn.pos, "T10", format!("unknown node/edge type `{}`", tn.name));
            // Still report undeclared variables in the statement.
            let values: Vec<&ast::Expr> = match &m.kind {
                MutationKind::Insert { assignments } => assignments.iter().map(|a| &a.value).collect(),
                MutationKind::Update { assignments, predicate } => {
                    assignments.iter().map(|a| &a.value).chain(std::iter::once(&predicate.value)).collect()
                }
                MutationKind::Delete { predicate } => vec![&predicate.value],
            };
            for v in values {
                if let ExprKind::Var(v) = &v.kind
                    && !self.params.contains_key(&v.name)
                {
                    self.err(v.pos, "T14", format!("`${}` must be a declared query parameter", v.name));
                }
            }
            return None;
        }
        match &m.kind {
            MutationKind::Insert { assignments } => {
                if assignments.is_empty() {
                    self.err(m.pos, "T10", "insert requires at least one assignment");
                    return None;
                }
                if let Some(n) = node {
                    let (assigns, _, _) = self.assignments(&n.name, assignments, &n.properties, false, &n.key, false);
                    let given: HashSet<&str> = assignments.iter().map(|a| a.prop.name.as_str()).collect();
                    for p in &n.properties {
                        if p.nullable || given.contains(p.name.as_str()) {
                            continue;
                        }
                        if let Some(embed) = n.embeds.iter().find(|e| e.prop == p.name) {
                            if given.contains(embed.source.as_str()) {
                                continue;
                            }
                            self.err(
                                tn.pos,
                                "T12",
                                format!(
                                    "insert for `{}` must provide non-nullable property `{}` or its @embed source `{}`",
                                    n.name, p.name, embed.source
                                ),
                            );
                            continue;
                        }
                        self.err(
                            tn.pos,
                            "T12",
                            format!("insert for `{}` must provide non-nullable property `{}`", n.name, p.name),
                        );
                    }
                    Some(ir::StatementIr::Insert(ir::InsertIr {
                        type_name: n.name.clone(),
                        table_key: node_table_key(&n.name),
                        is_edge: false,
                        upsert: !n.key.is_empty(),
                        key: n.key.clone(),
                        assignments: assigns,
                        from: None,
                        to: None,
                        from_type: None,
                        to_type: None,
                    }))
                } else {
                    let e = edge?;
                    let (assigns, from, to) = self.assignments(&e.name, assignments, &e.properties, true, &[], false);
                    let given: HashSet<&str> = assignments.iter().map(|a| a.prop.name.as_str()).collect();
                    for end in ["from", "to"] {
                        if !given.contains(end) {
                            self.err(
                                tn.pos,
                                "T12",
                                format!("insert for `{}` must provide required endpoint `{end}`", e.name),
                            );
                        }
                    }
                    for p in &e.properties {
                        if !p.nullable && !given.contains(p.name.as_str()) {
                            self.err(
                                tn.pos,
                                "T12",
                                format!("insert for `{}` must provide non-nullable property `{}`", e.name, p.name),
                            );
                        }
                    }
                    Some(ir::StatementIr::Insert(ir::InsertIr {
                        type_name: e.name.clone(),
                        table_key: edge_table_key(&e.name),
                        is_edge: true,
                        upsert: false,
                        key: Vec::new(),
                        assignments: assigns,
                        from,
                        to,
                        from_type: Some(e.from_type.clone()),
                        to_type: Some(e.to_type.clone()),
                    }))
                }
            }
            MutationKind::Update { assignments, predicate } => {
                let Some(n) = node else {
                    let name = edge.map(|e| e.name.as_str()).unwrap_or(tn.name.as_str());
                    self.err(
                        tn.pos,
                        "T16",
                        format!("update is not supported for edge type `{name}`; delete and re-insert the edge"),
                    );
                    return None;
                };
                if assignments.is_empty() {
                    self.err(m.pos, "T10", "update requires at least one assignment");
                    return None;
                }
                let (assigns, _, _) = self.assignments(&n.name, assignments, &n.properties, false, &n.key, true);
                let pred = self.predicate(&n.name, predicate, &n.properties, false);
                Some(ir::StatementIr::Update(ir::UpdateIr {
                    type_name: n.name.clone(),
                    table_key: node_table_key(&n.name),
                    assignments: assigns,
                    predicate: pred?,
                }))
            }
            MutationKind::Delete { predicate } => {
                if let Some(n) = node {
                    let pred = self.predicate(&n.name, predicate, &n.properties, false)?;
                    let cascade_edges = self
                        .catalog
                        .edges
                        .iter()
                        .filter(|e| e.from_type == n.name || e.to_type == n.name)
                        .map(|e| e.name.clone())
                        .collect();
                    Some(ir::StatementIr::Delete(ir::DeleteIr {
                        type_name: n.name.clone(),
                        table_key: node_table_key(&n.name),
                        is_edge: false,
                        predicate: pred,
                        cascade_edges,
                    }))
                } else {
                    let e = edge?;
                    let pred = self.predicate(&e.name, predicate, &e.properties, true)?;
                    Some(ir::StatementIr::Delete(ir::DeleteIr {
                        type_name: e.name.clone(),
                        table_key: edge_table_key(&e.name),
                        is_edge: true,
                        predicate: pred,
                        cascade_edges: Vec::new(),
                    }))
                }
            }
        }
    }
}

fn to_f64(v: Value) -> Value {
    match v {
        Value::I64(i) => Value::F64(i as f64),
        other => other,
    }
}

/// Projection expression and default column name of a scalar operand.
fn proj_of_operand(o: &Operand) -> (ir::ProjExpr, String) {
    match o {
        Operand::Prop { var, prop, .. } => {
            (ir::ProjExpr::Prop { var: var.clone(), prop: prop.clone() }, format!("{var}.{prop}"))
        }
        Operand::Param { name, .. } => (ir::ProjExpr::Param { name: name.clone() }, name.clone()),
        Operand::Value { value: Value::Now, .. } => (ir::ProjExpr::Value(Value::Now), "now".into()),
        Operand::Value { value, .. } => (ir::ProjExpr::Value(value.clone()), "literal".into()),
    }
}

/// Whether a clause (of a `not` block) mentions a variable of `outer`.
fn clause_mentions(c: &ast::Clause, outer: &Scope) -> bool {
    let has = |v: &ast::Var| !v.is_anonymous() && outer.vars.contains_key(&v.name);
    match c {
        ast::Clause::Binding(b) => has(&b.var) || b.props.iter().any(|p| expr_mentions(&p.value, outer)),
        ast::Clause::Traversal(t) => has(&t.src) || has(&t.dst),
        ast::Clause::Filter(f) => expr_mentions(&f.left, outer) || expr_mentions(&f.right, outer),
        ast::Clause::TextSearch(e) => expr_mentions(e, outer),
        ast::Clause::Not(n) => n.clauses.iter().any(|c| clause_mentions(c, outer)),
    }
}

fn expr_mentions(e: &ast::Expr, outer: &Scope) -> bool {
    let has = |v: &ast::Var| !v.is_anonymous() && outer.vars.contains_key(&v.name);
    match &e.kind {
        ExprKind::Var(v) => has(v),
        ExprKind::Prop(p) => has(&p.var),
        ExprKind::Nearest { prop, query } => has(&prop.var) || expr_mentions(query, outer),
        ExprKind::Agg { arg, .. } => expr_mentions(arg, outer),
        ExprKind::Search { field, query } | ExprKind::MatchText { field, query } | ExprKind::Bm25 { field, query } => {
            expr_mentions(field, outer) || expr_mentions(query, outer)
        }
        ExprKind::Fuzzy { field, query, max_edits } => {
            expr_mentions(field, outer)
                || expr_mentions(query, outer)
                || max_edits.as_deref().is_some_and(|m| expr_mentions(m, outer))
        }
        ExprKind::Rrf { first, second, k } => {
            expr_mentions(first, outer)
                || expr_mentions(second, outer)
                || k.as_deref().is_some_and(|k| expr_mentions(k, outer))
        }
        ExprKind::Literal(_) | ExprKind::Alias(_) | ExprKind::Now => false,
    }
}

#[cfg(test)]
#[path = "typecheck_tests.rs"]
mod tests;
