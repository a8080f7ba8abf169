//! Syntax tree of a `.pg` file, exactly as written (no desugaring), with
//! the position of every name so later checks can point at it.

use crate::lang::diag::Pos;

/// A name and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct Name {
    /// The text.
    pub text: String,
    /// Position of its first char.
    pub pos: Pos,
}

/// A whole `.pg` file: declarations in source order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Schema {
    /// Declarations in source order.
    pub decls: Vec<Decl>,
}

/// One top-level declaration.
#[derive(Debug, Clone, PartialEq)]
pub enum Decl {
    /// `interface Name { … }`
    Interface(InterfaceDecl),
    /// `node Name … { … }`
    Node(NodeDecl),
    /// `edge Name: A -> B …`
    Edge(EdgeDecl),
}

/// `interface Name { prop* }`
#[derive(Debug, Clone, PartialEq)]
pub struct InterfaceDecl {
    /// Interface name.
    pub name: Name,
    /// Properties copied into implementing nodes.
    pub props: Vec<PropDecl>,
}

/// `node Name annotation* (implements A, B)? { (prop | constraint)* }`
#[derive(Debug, Clone, PartialEq)]
pub struct NodeDecl {
    /// Node type name.
    pub name: Name,
    /// Type-level annotations.
    pub annotations: Vec<Annotation>,
    /// Implemented interfaces, in order.
    pub implements: Vec<Name>,
    /// Declared properties.
    pub props: Vec<PropDecl>,
    /// Body constraints.
    pub constraints: Vec<Constraint>,
}

/// `edge Name: From -> To card? annotation* ({ … })?`
#[derive(Debug, Clone, PartialEq)]
pub struct EdgeDecl {
    /// Edge type name.
    pub name: Name,
    /// Source node type.
    pub from: Name,
    /// Destination node type.
    pub to: Name,
    /// `@card(min..max?)`, when written.
    pub card: Option<CardDecl>,
    /// Type-level annotations.
    pub annotations: Vec<Annotation>,
    /// Declared properties.
    pub props: Vec<PropDecl>,
    /// Body constraints.
    pub constraints: Vec<Constraint>,
}

/// `@card(min..max?)`
#[derive(Debug, Clone, PartialEq)]
pub struct CardDecl {
    /// Minimum edges per source node.
    pub min: u32,
    /// Maximum, `None` = unbounded.
    pub max: Option<u32>,
    /// Position of the `@`.
    pub pos: Pos,
}

/// `name: Type annotation*`
#[derive(Debug, Clone, PartialEq)]
pub struct PropDecl {
    /// Property name.
    pub name: Name,
    /// Declared type.
    pub ty: TypeRef,
    /// Annotations after the type, in order.
    pub annotations: Vec<Annotation>,
}

/// A property type with its nullability.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeRef {
    /// The type without `?`.
    pub core: CoreType,
    /// Whether `?` followed.
    pub nullable: bool,
    /// Position of the type's first token.
    pub pos: Pos,
}

/// The shape of a property type.
#[derive(Debug, Clone, PartialEq)]
pub enum CoreType {
    /// A scalar.
    Base(BaseType),
    /// `[T]`
    List(BaseType),
    /// `enum(a, b)` with the values as written.
    Enum(Vec<Name>),
    /// `Vector(N)`
    Vector(u32),
}

pub use crate::lang::base_type::BaseType;

/// `@name` or `@name(arg, key = literal, …)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Annotation {
    /// Name without the `@`.
    pub name: Name,
    /// Positional arguments.
    pub args: Vec<AnnArg>,
    /// `key = literal` arguments.
    pub named: Vec<(Name, AnnArg)>,
    /// Position of the `@`.
    pub pos: Pos,
}

/// An annotation argument and where it was written.
#[derive(Debug, Clone, PartialEq)]
pub struct AnnArg {
    /// The value.
    pub value: Literal,
    /// Its position.
    pub pos: Pos,
}

/// Literal values in annotations.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `"…"`
    Str(String),
    /// Integer literal.
    Int(i64),
    /// Float literal.
    Float(f64),
    /// `true` / `false`
    Bool(bool),
    /// A bare identifier.
    Ident(String),
}

/// A numeric `@range` bound.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// Written without fraction or exponent.
    Int(i64),
    /// Written with a fraction or exponent.
    Float(f64),
}

impl Number {
    /// The value as f64 (integers beyond 2^53 round, which only matters
    /// for bounds that large).
    pub fn as_f64(self) -> f64 {
        match self {
            Number::Int(i) => i as f64,
            Number::Float(f) => f,
        }
    }
}

/// A body constraint and where its `@` is.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// What it constrains.
    pub kind: ConstraintKind,
    /// Position of the `@`.
    pub pos: Pos,
}

/// Body constraints.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintKind {
    /// `@key(a, b)`
    Key(Vec<Name>),
    /// `@unique(a, b)`
    Unique(Vec<Name>),
    /// `@index(a, b)`
    Index(Vec<Name>),
    /// `@range(prop, min..max)`
    Range {
        /// Constrained property.
        prop: Name,
        /// Lower bound, inclusive.
        min: Option<Number>,
        /// Upper bound, inclusive.
        max: Option<Number>,
    },
    /// `@check(prop, "regex")`
    Check {
        /// Constrained property.
        prop: Name,
        /// The pattern.
        pattern: String,
        /// Where the pattern string starts.
        pattern_pos: Pos,
    },
}

impl ConstraintKind {
    /// The constraint's name as written after `@`.
    pub fn keyword(&self) -> &'static str {
        match self {
            ConstraintKind::Key(_) => "key",
            ConstraintKind::Unique(_) => "unique",
            ConstraintKind::Index(_) => "index",
            ConstraintKind::Range { .. } => "range",
            ConstraintKind::Check { .. } => "check",
        }
    }
}
