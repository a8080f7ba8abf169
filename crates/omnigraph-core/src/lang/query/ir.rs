//! Typed, lowered form of a checked `.gq` query, produced by
//! [`super::typecheck::check_query`].
//!
//! The executor and the mutation saga consume this directly: every name is
//! resolved against the catalog (edge names carry the schema's spelling),
//! every `$x` is classified as a parameter or a match variable, every
//! literal is typed and converted (dates to epoch days, datetimes to epoch
//! ms, integer literals widened to `F64` where compared or stored as
//! floats), and `contains` is split into list membership or substring.
//!
//! # Shape
//!
//! ```text
//! QueryIr { name, params: [ParamIr { name, ty }], description?, instruction?, body }
//! Type { scalar: catalog::ScalarType, list, nullable }
//! Value = String | I64 | F64 | Bool | Date(epoch days) | DateTime(epoch ms) | List([Value]) | Now
//! Operand = Prop { var, prop, ty } | Param { name, ty } | Value { value, ty }
//! CmpOp = Eq | Ne | Gt | Ge | Lt | Le | ListContains | StringContains | StartsWith
//!
//! BodyIr::Read(ReadIr {
//!   pattern: MatchIr {
//!     vars:       [VarIr { name, kind: Node|Edge, type_name, table_key: "node:T"|"edge:E", anonymous, id_key }]
//!     traversals: [TraversalIr { edge_type, table_key: "edge:E", src, dst, edge_var?,
//!                                direction: Out|In|Both, min_hops, max_hops }]
//!     filters:    [FilterIr { left: Operand, op: CmpOp, right: Operand }]   // incl. inline `{prop: v}`
//!     searches:   [TextSearchIr { kind: Search|Fuzzy{max_edits?}|MatchText, var, prop, query: Operand }]
//!     not_blocks: [MatchIr]          // vars of a block are the ones it binds itself
//!   }
//!   projections: [ProjectionIr { column, expr: ProjExpr, ty: ResultType }]
//!   aggregate, group_by: [projection index]
//!   order: [OrderKeyIr { key: Prop{..} | Column{index, name} | Nearest | Bm25 | Rrf, descending }]
//!   limit?
//! })
//! BodyIr::Mutation(MutationIr { statements: [
//!   Insert { type_name, table_key, is_edge, upsert, key, assignments: [AssignmentIr { prop, ty, value }],
//!            from?, to?, from_type?, to_type? }
//!   Update { type_name, table_key, assignments, predicate: PredicateIr { prop, column, ty, op, value } }
//!   Delete { type_name, table_key, is_edge, predicate, cascade_edges }
//! ]})
//! ```
//!
//! Conventions:
//! - Traversal `src`/`dst` are the variables as written (`$src edge $dst`).
//!   `direction: Out` means `src` sits on the edge's `src` column (From
//!   type) and `dst` on its `dst` column; `In` means the reverse (the query
//!   wrote the hop against the edge's direction, which the checker inferred
//!   from the bound endpoint types); `Both` is an undirected `<edge>` hop on
//!   a same-type edge. Hops without bounds are `1..=1`.
//! - Anonymous `$_` occurrences get distinct names `_#1`, `_#2`, … which
//!   no user variable can spell.
//! - Projection column names: the alias, else `var.prop` for a property,
//!   `var` for a bare variable or parameter, `func(arg)` for an aggregate
//!   (e.g. `count(f)`), `nearest(d.embedding)`/`bm25(d.title)` for scores,
//!   `now` or `literal` otherwise.
//! - Order defaults: ascending, except `bm25` and `rrf` scores which default
//!   to descending (best first); `nearest` is ascending distance.
//! - Mutation predicates name the physical column: `from`/`to` on edges
//!   become `src`/`dst`.

use crate::lang::catalog::ScalarType;
use crate::lang::query::ast::AggFunc;
use serde::Serialize;
use std::collections::BTreeSet;

/// A resolved value type: element type, list-ness and nullability.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Type {
    /// Element type (a `Vector(N)` is a scalar here).
    pub scalar: ScalarType,
    /// `[T]`
    pub list: bool,
    /// May be null.
    pub nullable: bool,
}

impl Type {
    /// A non-null, non-list type.
    pub fn scalar(scalar: ScalarType) -> Type {
        Type { scalar, list: false, nullable: false }
    }

    /// The element type of a list (nullability kept).
    pub fn element(&self) -> Type {
        Type { scalar: self.scalar.clone(), list: false, nullable: self.nullable }
    }
}

/// A typed literal value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Value {
    /// Text (also enum values and Blob URIs).
    String(String),
    /// Any integer literal.
    I64(i64),
    /// A float literal, or an integer literal used against a float type.
    F64(f64),
    /// Boolean.
    Bool(bool),
    /// `date("…")` as days since 1970-01-01.
    Date(i32),
    /// `datetime("…")` as milliseconds since the epoch, UTC.
    DateTime(i64),
    /// A list literal (also vector literals, as `F64` elements).
    List(Vec<Value>),
    /// `now()`: the statement's timestamp, bound once per execution.
    Now,
}

/// One side of a comparison or a value to store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Operand {
    /// `$var.prop`
    Prop {
        /// The match variable.
        var: String,
        /// The property.
        prop: String,
        /// The property's type.
        ty: Type,
    },
    /// `$name`, a declared parameter.
    Param {
        /// Parameter name without `$`.
        name: String,
        /// Declared type.
        ty: Type,
    },
    /// A literal or `now()`.
    Value {
        /// The converted value.
        value: Value,
        /// Its type.
        ty: Type,
    },
}

impl Operand {
    /// The operand's type.
    pub fn ty(&self) -> &Type {
        match self {
            Operand::Prop { ty, .. } | Operand::Param { ty, .. } | Operand::Value { ty, .. } => ty,
        }
    }
}

/// Comparison operators after resolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `!=`
    Ne,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `list contains element` (also an inline match on a list property).
    ListContains,
    /// `string contains substring`
    StringContains,
    /// `string starts_with prefix`
    StartsWith,
}

/// A declared parameter.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamIr {
    /// Name without `$`.
    pub name: String,
    /// Declared type.
    pub ty: Type,
}

/// A checked query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueryIr {
    /// The query name.
    pub name: String,
    /// Declared parameters, in order.
    pub params: Vec<ParamIr>,
    /// `@description`, if any.
    pub description: Option<String>,
    /// `@instruction`, if any.
    pub instruction: Option<String>,
    /// Read or mutation body.
    pub body: BodyIr,
}

/// Read or mutation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum BodyIr {
    /// `match … return …`
    Read(ReadIr),
    /// insert/update/delete statements, one atomic commit.
    Mutation(MutationIr),
}

/// A lowered read query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadIr {
    /// The match pattern.
    pub pattern: MatchIr,
    /// Output columns in order.
    pub projections: Vec<ProjectionIr>,
    /// True when any projection is an aggregate.
    pub aggregate: bool,
    /// Indexes of the non-aggregate projections (the GROUP BY keys) when
    /// `aggregate` is set; empty otherwise.
    pub group_by: Vec<usize>,
    /// Order keys; ties always break by bound entity ids ascending.
    pub order: Vec<OrderKeyIr>,
    /// `limit N`
    pub limit: Option<u64>,
}

/// A conjunctive match pattern (also used for `not { }` blocks).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct MatchIr {
    /// Variables this block binds (outer variables are not repeated).
    pub vars: Vec<VarIr>,
    /// Traversal hops.
    pub traversals: Vec<TraversalIr>,
    /// Scalar filters, including inline binding matches.
    pub filters: Vec<FilterIr>,
    /// Text-search predicates.
    pub searches: Vec<TextSearchIr>,
    /// Negated sub-patterns (NOT EXISTS, correlated on outer variables).
    pub not_blocks: Vec<MatchIr>,
}

/// Whether a variable names a node row or an edge row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VarKind {
    /// A node binding.
    Node,
    /// An edge binding (`$a $w:knows $b`).
    Edge,
}

/// A bound variable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VarIr {
    /// Name without `$` (`_#N` for anonymous ones).
    pub name: String,
    /// Node or edge.
    pub kind: VarKind,
    /// The node or edge type.
    pub type_name: String,
    /// Table key: `node:<Type>` or `edge:<Type>`.
    pub table_key: String,
    /// True for `$_`.
    pub anonymous: bool,
    /// The node type's single `String` `@key` property, whose value is the
    /// node's id (so an equality on it is an equality on `id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_key: Option<String>,
}

/// Traversal direction relative to the written `src`/`dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Direction {
    /// `src` is the edge's source.
    Out,
    /// `src` is the edge's destination.
    In,
    /// Either direction (undirected hop on a same-type edge).
    Both,
}

/// One traversal hop (or bounded multi-hop reachability).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraversalIr {
    /// Edge type, schema spelling.
    pub edge_type: String,
    /// `edge:<Type>`
    pub table_key: String,
    /// Written source variable.
    pub src: String,
    /// Written destination variable.
    pub dst: String,
    /// Edge binding, one row per matched edge.
    pub edge_var: Option<String>,
    /// Orientation.
    pub direction: Direction,
    /// Minimum hops (≥ 1).
    pub min_hops: u32,
    /// Maximum hops (≥ `min_hops`).
    pub max_hops: u32,
}

/// `left op right` over scalar operands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FilterIr {
    /// Left operand.
    pub left: Operand,
    /// Resolved operator.
    pub op: CmpOp,
    /// Right operand.
    pub right: Operand,
}

/// Which text predicate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum TextSearchKind {
    /// `search(field, q)`: full-text token match.
    Search,
    /// `fuzzy(field, q, max_edits?)`
    Fuzzy {
        /// Integer literal or parameter.
        max_edits: Option<Operand>,
    },
    /// `match_text(field, q)`: phrase match.
    MatchText,
}

/// A text-search predicate on a node's String property.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextSearchIr {
    /// Which predicate.
    pub kind: TextSearchKind,
    /// Node variable.
    pub var: String,
    /// String property.
    pub prop: String,
    /// Query text (String literal or parameter).
    pub query: Operand,
}

/// `nearest($var.prop, q)`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NearestIr {
    /// Node variable.
    pub var: String,
    /// Vector property.
    pub prop: String,
    /// Its dimension.
    pub dim: u32,
    /// Query vector (literal or parameter) or text to embed.
    pub query: Operand,
    /// True when `query` is a String (embedded at query time).
    pub query_is_text: bool,
}

/// `bm25($var.prop, q)`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bm25Ir {
    /// Node variable.
    pub var: String,
    /// String property.
    pub prop: String,
    /// Query text.
    pub query: Operand,
}

/// A ranking usable inside `rrf`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum RankIr {
    /// Vector distance.
    Nearest(NearestIr),
    /// BM25 score.
    Bm25(Bm25Ir),
}

/// `rrf(rank, rank, k?)`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RrfIr {
    /// First ranking.
    pub first: RankIr,
    /// Second ranking.
    pub second: RankIr,
    /// The `k` constant (integer literal > 0 or parameter); default applies when absent.
    pub k: Option<Operand>,
}

/// What a projection computes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ProjExpr {
    /// `$var.prop`
    Prop {
        /// Variable.
        var: String,
        /// Property.
        prop: String,
    },
    /// `$var` for a node: the whole node.
    Node {
        /// Variable.
        var: String,
    },
    /// `$param`
    Param {
        /// Parameter name.
        name: String,
    },
    /// A literal or `now()`.
    Value(Value),
    /// `func(arg)`
    Agg {
        /// Function.
        func: AggFunc,
        /// Argument (`Prop`, `Node` or `Param`).
        arg: Box<ProjExpr>,
    },
    /// The score of the leading order ranking.
    Rank(RankIr),
}

/// Result type of a projection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ResultType {
    /// A scalar or list column.
    Scalar(Type),
    /// A whole node (struct of its properties plus `id`).
    Node {
        /// Node type.
        type_name: String,
    },
}

/// One output column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProjectionIr {
    /// Output column name (see module docs).
    pub column: String,
    /// What is computed.
    pub expr: ProjExpr,
    /// Result type.
    pub ty: ResultType,
}

/// What an order key sorts by.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum OrderKey {
    /// A property of a bound variable.
    Prop {
        /// Variable.
        var: String,
        /// Property.
        prop: String,
        /// Its type.
        ty: Type,
    },
    /// An output column (alias or a repeated aggregate).
    Column {
        /// Projection index.
        index: usize,
        /// Column name.
        name: String,
    },
    /// Vector distance.
    Nearest(NearestIr),
    /// BM25 score.
    Bm25(Bm25Ir),
    /// Reciprocal rank fusion.
    Rrf(Box<RrfIr>),
}

/// One order key with its direction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderKeyIr {
    /// The key.
    pub key: OrderKey,
    /// Descending when true.
    pub descending: bool,
}

/// Mutation statements, applied as one atomic commit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MutationIr {
    /// Statements in source order.
    pub statements: Vec<StatementIr>,
}

/// One mutation statement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum StatementIr {
    /// `insert T { … }`
    Insert(InsertIr),
    /// `update T set { … } where …`
    Update(UpdateIr),
    /// `delete T where …`
    Delete(DeleteIr),
}

/// `prop: value`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssignmentIr {
    /// Property name.
    pub prop: String,
    /// Property type.
    pub ty: Type,
    /// Parameter or literal (`now()` included).
    pub value: Operand,
}

/// A node or edge insert.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InsertIr {
    /// Target type.
    pub type_name: String,
    /// `node:<T>` / `edge:<T>`
    pub table_key: String,
    /// Edge insert.
    pub is_edge: bool,
    /// Keyed node: upsert by the derived id; otherwise strict insert.
    pub upsert: bool,
    /// Key properties of a keyed node (empty otherwise).
    pub key: Vec<String>,
    /// Property assignments (edges: without `from`/`to`).
    pub assignments: Vec<AssignmentIr>,
    /// Edge source node id.
    pub from: Option<Operand>,
    /// Edge destination node id.
    pub to: Option<Operand>,
    /// Edge From node type.
    pub from_type: Option<String>,
    /// Edge To node type.
    pub to_type: Option<String>,
}

/// `column op value` after `where`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PredicateIr {
    /// Property as written (`from`/`to` for edge endpoints).
    pub prop: String,
    /// Physical column (`src`/`dst` for edge endpoints).
    pub column: String,
    /// Column type.
    pub ty: Type,
    /// Comparison (never a contains form).
    pub op: CmpOp,
    /// Parameter or literal.
    pub value: Operand,
}

/// A node update.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpdateIr {
    /// Target node type.
    pub type_name: String,
    /// `node:<T>`
    pub table_key: String,
    /// Assignments (never key properties).
    pub assignments: Vec<AssignmentIr>,
    /// Row selection.
    pub predicate: PredicateIr,
}

/// A node or edge delete.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeleteIr {
    /// Target type.
    pub type_name: String,
    /// `node:<T>` / `edge:<T>`
    pub table_key: String,
    /// Edge delete.
    pub is_edge: bool,
    /// Row selection.
    pub predicate: PredicateIr,
    /// Edge types incident to a deleted node type (cascade targets).
    pub cascade_edges: Vec<String>,
}

/// `node:<Type>`
pub fn node_table_key(type_name: &str) -> String {
    format!("node:{type_name}")
}

/// `edge:<Type>`
pub fn edge_table_key(type_name: &str) -> String {
    format!("edge:{type_name}")
}

impl QueryIr {
    /// True for a mutation.
    pub fn is_mutation(&self) -> bool {
        matches!(self.body, BodyIr::Mutation(_))
    }

    /// Declared parameters with their types.
    pub fn params(&self) -> &[ParamIr] {
        &self.params
    }

    /// Node and edge type names whose tables this query reads: every bound
    /// and traversed type of a read; for mutations the update/delete
    /// targets, keyed-insert targets (upsert), edge-insert endpoint types
    /// (referential checks) and cascaded edge types.
    pub fn reads(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        match &self.body {
            BodyIr::Read(r) => collect_match_types(&r.pattern, &mut out),
            BodyIr::Mutation(m) => {
                for s in &m.statements {
                    match s {
                        StatementIr::Insert(i) => {
                            if i.upsert {
                                out.insert(i.type_name.clone());
                            }
                            out.extend(i.from_type.iter().cloned());
                            out.extend(i.to_type.iter().cloned());
                        }
                        StatementIr::Update(u) => {
                            out.insert(u.type_name.clone());
                        }
                        StatementIr::Delete(d) => {
                            out.insert(d.type_name.clone());
                            out.extend(d.cascade_edges.iter().cloned());
                        }
                    }
                }
            }
        }
        out
    }

    /// Node and edge type names whose tables this query writes (empty for
    /// reads); node deletes include the cascaded edge types.
    pub fn writes(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        if let BodyIr::Mutation(m) = &self.body {
            for s in &m.statements {
                match s {
                    StatementIr::Insert(i) => {
                        out.insert(i.type_name.clone());
                    }
                    StatementIr::Update(u) => {
                        out.insert(u.type_name.clone());
                    }
                    StatementIr::Delete(d) => {
                        out.insert(d.type_name.clone());
                        out.extend(d.cascade_edges.iter().cloned());
                    }
                }
            }
        }
        out
    }
}

fn collect_match_types(m: &MatchIr, out: &mut BTreeSet<String>) {
    for v in &m.vars {
        out.insert(v.type_name.clone());
    }
    for t in &m.traversals {
        out.insert(t.edge_type.clone());
    }
    for n in &m.not_blocks {
        collect_match_types(n, out);
    }
}
