//! The compiled, serialisable description of a graph's types.
//!
//! Everything here is plain data in declaration order (Vecs, never hash
//! maps) so that the canonical JSON — and therefore the schema identity —
//! is deterministic.

use serde::{Deserialize, Serialize};

/// Whether a table holds nodes or edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TypeKind {
    /// A node table (`id` + props).
    Node,
    /// An edge table (`id`, `src`, `dst` + props).
    Edge,
}

/// Element type of a property (lists wrap it via [`Property::list`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScalarType {
    /// UTF-8 text.
    String,
    /// Bytes: managed (`base64:`) or an external URI.
    Blob,
    /// Boolean.
    Bool,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// Calendar day, stored as epoch days.
    Date,
    /// Instant, stored as epoch milliseconds UTC.
    DateTime,
    /// Fixed-size float32 vector of this dimension.
    Vector(u32),
    /// One of these values, stored as text.
    Enum(Vec<String>),
}

impl ScalarType {
    /// Whether the type is one of the integer widths.
    pub fn is_integer(&self) -> bool {
        matches!(self, ScalarType::I32 | ScalarType::I64 | ScalarType::U32 | ScalarType::U64)
    }

    /// Whether the type is numeric (integer or float).
    pub fn is_numeric(&self) -> bool {
        self.is_integer() || matches!(self, ScalarType::F32 | ScalarType::F64)
    }
}

/// A value written in an annotation argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AnnotationValue {
    /// `"text"`
    String(String),
    /// Integer literal.
    Int(i64),
    /// Float literal.
    Float(f64),
    /// `true` / `false`.
    Bool(bool),
    /// A bare identifier.
    Ident(String),
}

/// One annotation argument; `name` is set for `key = value` arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotationArg {
    /// Argument name for `key = value`, else `None`.
    pub name: Option<String>,
    /// The value.
    pub value: AnnotationValue,
}

/// An annotation the compiler does not interpret, kept for tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CustomAnnotation {
    /// Name without `@`.
    pub name: String,
    /// Arguments in order.
    pub args: Vec<AnnotationArg>,
}

/// Documentation and rename metadata shared by types and properties.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Meta {
    /// `@description("…")`
    pub description: Option<String>,
    /// `@instruction("…")` (guidance for agents writing data).
    pub instruction: Option<String>,
    /// `@rename_from("old")`: the previous name, for schema apply.
    pub rename_from: Option<String>,
    /// `@merge(ours|theirs|newest|fail)`: how a branch merge decides this
    /// type's (or property's) conflicts when no strategy is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<crate::three_way::MergePolicy>,
    /// Unknown annotations, in order.
    pub annotations: Vec<CustomAnnotation>,
}

/// A declared property.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Property {
    /// Property name.
    pub name: String,
    /// Stable id, kept across renames by schema apply.
    pub prop_id: String,
    /// Element type.
    #[serde(rename = "type")]
    pub ty: ScalarType,
    /// `[T]`
    pub list: bool,
    /// `T?`
    pub nullable: bool,
    /// Docs, rename hint and custom annotations.
    pub meta: Meta,
}

/// `@range(prop, min..max)`; bounds are inclusive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RangeConstraint {
    /// Constrained property.
    pub prop: String,
    /// Lower bound.
    pub min: Option<f64>,
    /// Upper bound.
    pub max: Option<f64>,
    /// Whether every written bound was an integer literal.
    pub integer: bool,
}

/// `@check(prop, "regex")`
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckConstraint {
    /// Constrained property.
    pub prop: String,
    /// The regex (validated to compile).
    pub pattern: String,
}

/// `@embed("source", model = "…")` on a Vector property.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmbedSpec {
    /// The Vector property that receives the embedding.
    pub prop: String,
    /// The String property embedded.
    pub source: String,
    /// Embedding model, when pinned.
    pub model: Option<String>,
}

/// `@card(min..max)`: edges per source node. The default, `0..`, is what
/// an edge without `@card` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Card {
    /// Minimum.
    pub min: u32,
    /// Maximum; `None` = unbounded.
    pub max: Option<u32>,
}

/// A declared interface (its props are copied into implementers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InterfaceType {
    /// Interface name.
    pub name: String,
    /// Properties in order.
    pub properties: Vec<Property>,
}

/// A node type: one Lance table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeType {
    /// Type name.
    pub name: String,
    /// Always [`TypeKind::Node`].
    pub kind: TypeKind,
    /// Stable table id.
    pub table_id: String,
    /// Implemented interfaces.
    pub implements: Vec<String>,
    /// Properties in order (interface copies first).
    pub properties: Vec<Property>,
    /// Key properties as written in `@key(…)`; empty = unkeyed.
    pub key: Vec<String>,
    /// Unique column sets.
    pub uniques: Vec<Vec<String>>,
    /// Index column sets.
    pub indexes: Vec<Vec<String>>,
    /// Range constraints.
    pub ranges: Vec<RangeConstraint>,
    /// Regex checks.
    pub checks: Vec<CheckConstraint>,
    /// Embedding specs.
    pub embeds: Vec<EmbedSpec>,
    /// Docs, rename hint and custom annotations.
    pub meta: Meta,
}

/// An edge type: one Lance table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EdgeType {
    /// Type name.
    pub name: String,
    /// Always [`TypeKind::Edge`].
    pub kind: TypeKind,
    /// Stable table id.
    pub table_id: String,
    /// Source node type.
    pub from_type: String,
    /// Destination node type.
    pub to_type: String,
    /// Cardinality per source node.
    pub card: Card,
    /// Properties in order.
    pub properties: Vec<Property>,
    /// Unique column sets (may use `src`, `dst`).
    pub uniques: Vec<Vec<String>>,
    /// Index column sets (may use `src`, `dst`).
    pub indexes: Vec<Vec<String>>,
    /// Docs, rename hint and custom annotations.
    pub meta: Meta,
}

impl NodeType {
    /// The property called `name`.
    pub fn property(&self, name: &str) -> Option<&Property> {
        self.properties.iter().find(|p| p.name == name)
    }
}

impl EdgeType {
    /// The property called `name`.
    pub fn property(&self, name: &str) -> Option<&Property> {
        self.properties.iter().find(|p| p.name == name)
    }
}

/// A borrowed node or edge type, for code that handles every table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TypeDef<'a> {
    /// A node type.
    Node(&'a NodeType),
    /// An edge type.
    Edge(&'a EdgeType),
}

impl<'a> TypeDef<'a> {
    /// Type name.
    pub fn name(&self) -> &'a str {
        match self {
            TypeDef::Node(n) => &n.name,
            TypeDef::Edge(e) => &e.name,
        }
    }

    /// Node or edge.
    pub fn kind(&self) -> TypeKind {
        match self {
            TypeDef::Node(_) => TypeKind::Node,
            TypeDef::Edge(_) => TypeKind::Edge,
        }
    }

    /// Stable table id.
    pub fn table_id(&self) -> &'a str {
        match self {
            TypeDef::Node(n) => &n.table_id,
            TypeDef::Edge(e) => &e.table_id,
        }
    }

    /// Declared properties.
    pub fn properties(&self) -> &'a [Property] {
        match self {
            TypeDef::Node(n) => &n.properties,
            TypeDef::Edge(e) => &e.properties,
        }
    }

    /// The type's own metadata.
    pub fn meta(&self) -> &'a Meta {
        match self {
            TypeDef::Node(n) => &n.meta,
            TypeDef::Edge(e) => &e.meta,
        }
    }

    /// The `@merge` policy of `property` (its own, else the type's), or of
    /// the whole type (`None`).
    pub fn merge_policy(&self, property: Option<&str>) -> Option<crate::three_way::MergePolicy> {
        let own = property.and_then(|p| self.properties().iter().find(|q| q.name == p)).and_then(|q| q.meta.merge);
        own.or(self.meta().merge)
    }
}

impl From<crate::lang::base_type::BaseType> for ScalarType {
    fn from(b: crate::lang::base_type::BaseType) -> Self {
        use crate::lang::base_type::BaseType as B;
        match b {
            B::String => ScalarType::String,
            B::Blob => ScalarType::Blob,
            B::Bool => ScalarType::Bool,
            B::I32 => ScalarType::I32,
            B::I64 => ScalarType::I64,
            B::U32 => ScalarType::U32,
            B::U64 => ScalarType::U64,
            B::F32 => ScalarType::F32,
            B::F64 => ScalarType::F64,
            B::DateTime => ScalarType::DateTime,
            B::Date => ScalarType::Date,
        }
    }
}
