//! Stable error codes of the `.pg` compiler (see the table in the parent
//! module's docs). Codes never change meaning once published, because users
//! search for them.

/// Unexpected character in the source.
pub const BAD_CHAR: &str = "S01";
/// Unterminated string literal or block comment.
pub const UNTERMINATED: &str = "S02";
/// Unexpected token: the grammar expected something else here.
pub const SYNTAX: &str = "S03";
/// Malformed or out-of-range number literal.
pub const BAD_NUMBER: &str = "S04";
/// A type name does not start with an uppercase letter.
pub const TYPE_NAME_CASE: &str = "S05";
/// A property name does not start with a lowercase letter or `_`.
pub const PROP_NAME_CASE: &str = "S06";
/// Unknown property type (not a scalar, list, enum or Vector).
pub const UNKNOWN_SCALAR: &str = "S07";
/// Two types (interface, node or edge) share a name.
pub const DUPLICATE_TYPE: &str = "S08";
/// Two properties of one type share a name.
pub const DUPLICATE_PROP: &str = "S09";
/// `implements` names an interface that is not declared.
pub const UNKNOWN_INTERFACE: &str = "S10";
/// An edge endpoint is not a declared node type.
pub const UNKNOWN_NODE_TYPE: &str = "S11";
/// A declared property uses a reserved name.
pub const RESERVED_NAME: &str = "S12";
/// A constraint names an unknown property, or names one twice.
pub const UNKNOWN_PROP: &str = "S13";
/// A constraint or annotation is not allowed where it appears.
pub const MISPLACED: &str = "S14";
/// A Blob property carries key, unique, index or embed.
pub const BLOB_CONSTRAINT: &str = "S15";
/// A Vector property is used as key or unique.
pub const VECTOR_CONSTRAINT: &str = "S16";
/// A key property is nullable or a list.
pub const BAD_KEY: &str = "S17";
/// `@embed` is on a non-Vector property or its source is not a String property.
pub const BAD_EMBED: &str = "S18";
/// `@check` pattern does not compile, or targets a non-String property.
pub const BAD_CHECK: &str = "S19";
/// `@card` minimum exceeds its maximum.
pub const BAD_CARD: &str = "S20";
/// `@range` bounds are missing, reversed, of the wrong kind, or the property is not numeric.
pub const BAD_RANGE: &str = "S21";
/// A node declares more than one key.
pub const DUPLICATE_KEY: &str = "S22";
/// A known annotation has the wrong arguments or is repeated.
pub const BAD_ANNOTATION: &str = "S23";
/// `Vector(N)` dimension is zero or too large.
pub const BAD_VECTOR_DIM: &str = "S24";
/// An enum lists the same value twice.
pub const DUPLICATE_ENUM_VALUE: &str = "S25";
/// Warning: an unknown annotation (kept as custom metadata; maybe a typo).
pub const UNKNOWN_ANNOTATION: &str = "W01";
