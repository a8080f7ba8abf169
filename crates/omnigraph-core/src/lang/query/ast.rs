//! Syntax tree for `.gq` files, as produced by [`super::parse_queries`].
//!
//! Every node a later pass may need to blame carries a [`Pos`] (1-based
//! line/column of its first character). Names are kept exactly as written:
//! edge names in traversals keep their lowercase spelling and are resolved
//! case-insensitively by the typechecker. The parser does not distinguish
//! query parameters from match variables; every `$x` is a [`Var`], and the
//! typechecker resolves it against [`Query::params`] and the bindings.

use crate::lang::diag::Pos;
use serde::Serialize;

/// A name (identifier or type name) with its position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Name {
    /// The name as written.
    pub name: String,
    /// Where it starts.
    pub pos: Pos,
}

/// A `$variable` reference (name stored without `$`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Var {
    /// The name without the leading `$`; `"_"` for the anonymous `$_`.
    pub name: String,
    /// Position of the `$`.
    pub pos: Pos,
}

impl Var {
    /// True for the anonymous variable `$_`.
    pub fn is_anonymous(&self) -> bool {
        self.name == "_"
    }
}

/// One `query name(params) annotations { body }` declaration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Query {
    /// The query name.
    pub name: String,
    /// Position of the `query` keyword.
    pub pos: Pos,
    /// Position of the name.
    pub name_pos: Pos,
    /// Declared parameters, in order.
    pub params: Vec<Param>,
    /// Text of `@description("…")`, if given.
    pub description: Option<String>,
    /// Text of `@instruction("…")`, if given.
    pub instruction: Option<String>,
    /// The read body or the mutation statements.
    pub body: QueryBody,
}

impl Query {
    /// True when the body is a list of insert/update/delete statements.
    pub fn is_mutation(&self) -> bool {
        matches!(self.body, QueryBody::Mutation(_))
    }

    /// The first query named `name` in `queries`.
    pub fn find<'a>(queries: &'a [Query], name: &str) -> Option<&'a Query> {
        queries.iter().find(|q| q.name == name)
    }

    /// The declared parameter named `name` (without `$`).
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
}

/// A declared parameter `$name: Type` / `$name: Type?`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Param {
    /// Name without `$`.
    pub name: String,
    /// Position of the `$`.
    pub pos: Pos,
    /// Declared type.
    pub ty: ParamType,
}

/// A parameter type: scalar, list or vector, optionally nullable.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamType {
    /// The shape of the type.
    pub kind: ParamTypeKind,
    /// True when written with a trailing `?`.
    pub nullable: bool,
    /// Position of the type's first token.
    pub pos: Pos,
}

/// Shape of a [`ParamType`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ParamTypeKind {
    /// A scalar such as `String`.
    Scalar(BaseType),
    /// `[T]`.
    List(BaseType),
    /// `Vector(N)`.
    Vector(u32),
}

pub use crate::lang::base_type::BaseType;

/// A query body: either a read (`match … return …`) or mutations.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum QueryBody {
    /// `match { } return { } order { }? limit N?`
    Read(ReadQuery),
    /// One or more insert/update/delete statements (never mixing
    /// insert/update with delete: rule D₂).
    Mutation(Vec<Mutation>),
}

/// The parts of a read query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReadQuery {
    /// Position of the `match` keyword.
    pub match_pos: Pos,
    /// Match clauses (implicit AND), at least one.
    pub clauses: Vec<Clause>,
    /// Position of the `return` keyword.
    pub return_pos: Pos,
    /// Projections, at least one.
    pub projections: Vec<Projection>,
    /// `order { … }`, if present.
    pub order: Option<OrderClause>,
    /// `limit N`, if present.
    pub limit: Option<Limit>,
}

/// One match clause.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Clause {
    /// `$p: Person { name: $n }`
    Binding(Binding),
    /// `$a knows $b`, `$a <knows> $b`, `$a $w:knows $b`, `$a knows{1,3} $b`.
    /// An inline chain `$a knows $b worksAt $c` is split into one traversal
    /// per hop.
    Traversal(Traversal),
    /// `expr op expr`
    Filter(Filter),
    /// A bare `search(…)`, `fuzzy(…)` or `match_text(…)` call; the expression
    /// is always [`ExprKind::Search`], [`ExprKind::Fuzzy`] or
    /// [`ExprKind::MatchText`].
    TextSearch(Expr),
    /// `not { clauses }`
    Not(NotClause),
}

impl Clause {
    /// Position of the clause's first token.
    pub fn pos(&self) -> Pos {
        match self {
            Clause::Binding(b) => b.pos,
            Clause::Traversal(t) => t.pos,
            Clause::Filter(f) => f.pos,
            Clause::TextSearch(e) => e.pos,
            Clause::Not(n) => n.pos,
        }
    }
}

/// `$var: Type { prop: value, … }`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Binding {
    /// The bound variable.
    pub var: Var,
    /// The node type name as written.
    pub type_name: Name,
    /// Inline property equalities (possibly empty).
    pub props: Vec<PropMatch>,
    /// Position of the clause (the variable).
    pub pos: Pos,
}

/// `prop: value` inside a binding; `value` is a literal, `$var` or `now()`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropMatch {
    /// Property name.
    pub prop: Name,
    /// Value expression (literal, variable or `now()`).
    pub value: Expr,
    /// Position of the property name.
    pub pos: Pos,
}

/// One traversal hop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Traversal {
    /// Source variable.
    pub src: Var,
    /// `$w` in `$a $w:knows $b`, naming the matched edge row.
    pub edge_var: Option<Var>,
    /// The edge name as written (lowercase first letter).
    pub edge: Name,
    /// True for `<edge>` (either direction).
    pub undirected: bool,
    /// `{min,max}` / `{min,}` bounds, if written.
    pub hops: Option<HopBounds>,
    /// Destination variable.
    pub dst: Var,
    /// Position of the hop (its source variable).
    pub pos: Pos,
}

/// `{min,max}` hop bounds; `max` is `None` for `{min,}` (rejected later).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HopBounds {
    /// Minimum hop count.
    pub min: u64,
    /// Maximum hop count, if written.
    pub max: Option<u64>,
    /// Position of the `{`.
    pub pos: Pos,
}

/// `left op right`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Filter {
    /// Left operand.
    pub left: Expr,
    /// Operator.
    pub op: FilterOp,
    /// Position of the operator.
    pub op_pos: Pos,
    /// Right operand.
    pub right: Expr,
    /// Position of the clause (its left operand).
    pub pos: Pos,
}

/// Filter and comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum FilterOp {
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
    /// `contains` (substring or list membership)
    Contains,
    /// `starts_with`
    StartsWith,
}

impl FilterOp {
    /// The operator as written in source.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterOp::Eq => "=",
            FilterOp::Ne => "!=",
            FilterOp::Gt => ">",
            FilterOp::Ge => ">=",
            FilterOp::Lt => "<",
            FilterOp::Le => "<=",
            FilterOp::Contains => "contains",
            FilterOp::StartsWith => "starts_with",
        }
    }
}

/// `not { clauses }`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NotClause {
    /// Inner clauses, at least one.
    pub clauses: Vec<Clause>,
    /// Position of the `not` keyword.
    pub pos: Pos,
}

/// `expr (as alias)?` in `return { }`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Projection {
    /// Projected expression.
    pub expr: Expr,
    /// `as` alias, if given.
    pub alias: Option<Name>,
    /// Position of the expression.
    pub pos: Pos,
}

/// `order { … }`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OrderClause {
    /// Orderings, at least one.
    pub items: Vec<Ordering>,
    /// Position of the `order` keyword.
    pub pos: Pos,
}

/// One ordering key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ordering {
    /// The key: an expression, alias, `nearest(…)`, `bm25(…)` or `rrf(…)`.
    pub expr: Expr,
    /// `asc`/`desc`, if written.
    pub direction: Option<Direction>,
    /// Position of the key.
    pub pos: Pos,
}

/// Sort direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Direction {
    /// `asc`
    Asc,
    /// `desc`
    Desc,
}

/// `limit N`
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limit {
    /// The limit.
    pub value: u64,
    /// Position of the `limit` keyword.
    pub pos: Pos,
}

/// An expression with its position.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expr {
    /// What kind of expression.
    pub kind: ExprKind,
    /// Position of its first token.
    pub pos: Pos,
}

/// `$var.prop`
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropRef {
    /// The variable.
    pub var: Var,
    /// The property name.
    pub prop: Name,
}

/// Aggregate functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum AggFunc {
    /// `count`
    Count,
    /// `sum`
    Sum,
    /// `avg`
    Avg,
    /// `min`
    Min,
    /// `max`
    Max,
}

/// Expression forms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum ExprKind {
    /// A literal value.
    Literal(Literal),
    /// `$x` (a parameter or a match variable; resolved later).
    Var(Var),
    /// `$x.prop`
    Prop(PropRef),
    /// A bare identifier: a reference to a `return` alias.
    Alias(Name),
    /// `now()`
    Now,
    /// `count(e)`, `sum(e)`, …
    Agg {
        /// The function.
        func: AggFunc,
        /// The argument.
        arg: Box<Expr>,
    },
    /// `nearest($x.prop, query)`
    Nearest {
        /// The vector property.
        prop: PropRef,
        /// The query vector or text.
        query: Box<Expr>,
    },
    /// `search(field, query)`
    Search {
        /// Searched field.
        field: Box<Expr>,
        /// Query text.
        query: Box<Expr>,
    },
    /// `fuzzy(field, query, max_edits?)`
    Fuzzy {
        /// Searched field.
        field: Box<Expr>,
        /// Query text.
        query: Box<Expr>,
        /// Optional maximum edit distance.
        max_edits: Option<Box<Expr>>,
    },
    /// `match_text(field, query)`
    MatchText {
        /// Searched field.
        field: Box<Expr>,
        /// Phrase text.
        query: Box<Expr>,
    },
    /// `bm25(field, query)`
    Bm25 {
        /// Scored field.
        field: Box<Expr>,
        /// Query text.
        query: Box<Expr>,
    },
    /// `rrf(rank, rank, k?)`; both ranks are `Nearest` or `Bm25`.
    Rrf {
        /// First ranking.
        first: Box<Expr>,
        /// Second ranking.
        second: Box<Expr>,
        /// Optional `k` constant.
        k: Option<Box<Expr>>,
    },
}

/// Literal values. There are no negative numbers and no `null` in `.gq`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Literal {
    /// `"…"` with escapes decoded.
    String(String),
    /// Unsigned integer.
    Int(u64),
    /// Unsigned float `digits.digits`.
    Float(f64),
    /// `true` / `false`.
    Bool(bool),
    /// `date("…")`, text unparsed.
    Date(String),
    /// `datetime("…")`, text unparsed.
    DateTime(String),
    /// `[lit, …]`; every element is a [`ExprKind::Literal`] expression.
    List(Vec<Expr>),
}

/// One mutation statement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Mutation {
    /// The statement.
    pub kind: MutationKind,
    /// The target type name (node or edge) as written.
    pub type_name: Name,
    /// Position of the statement keyword.
    pub pos: Pos,
}

/// Mutation statement forms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum MutationKind {
    /// `insert T { prop: value, … }` (edges use `from:`/`to:`).
    Insert {
        /// Assignments, at least one.
        assignments: Vec<Assignment>,
    },
    /// `update T set { prop: value, … } where prop op value`
    Update {
        /// Assignments, at least one.
        assignments: Vec<Assignment>,
        /// The `where` predicate.
        predicate: Predicate,
    },
    /// `delete T where prop op value`
    Delete {
        /// The `where` predicate.
        predicate: Predicate,
    },
}

impl Mutation {
    /// True for `delete` statements.
    pub fn is_delete(&self) -> bool {
        matches!(self.kind, MutationKind::Delete { .. })
    }
}

/// `prop: value` in insert/update; value is a literal, `$param` or `now()`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Assignment {
    /// Property name (or `from`/`to` for edges).
    pub prop: Name,
    /// The value.
    pub value: Expr,
    /// Position of the property name.
    pub pos: Pos,
}

/// `prop op value` after `where`; op is one of `= != > >= < <=`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Predicate {
    /// Property name (or `from`/`to` for edges).
    pub prop: Name,
    /// Comparison operator.
    pub op: FilterOp,
    /// The value.
    pub value: Expr,
    /// Position of the property name.
    pub pos: Pos,
}
