//! The scalar type names both languages spell the same way.

use serde::Serialize;

/// A scalar type as written in `.pg` properties and `.gq` parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BaseType {
    /// UTF-8 text.
    String,
    /// Bytes (managed or external).
    Blob,
    /// Boolean.
    Bool,
    /// Signed 32-bit.
    I32,
    /// Signed 64-bit.
    I64,
    /// Unsigned 32-bit.
    U32,
    /// Unsigned 64-bit.
    U64,
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// Instant, millisecond precision, UTC.
    DateTime,
    /// Calendar day.
    Date,
}

impl BaseType {
    /// The name as written in `.pg` and `.gq`.
    pub fn name(self) -> &'static str {
        match self {
            BaseType::String => "String",
            BaseType::Blob => "Blob",
            BaseType::Bool => "Bool",
            BaseType::I32 => "I32",
            BaseType::I64 => "I64",
            BaseType::U32 => "U32",
            BaseType::U64 => "U64",
            BaseType::F32 => "F32",
            BaseType::F64 => "F64",
            BaseType::DateTime => "DateTime",
            BaseType::Date => "Date",
        }
    }

    /// The scalar named `name`, if any.
    pub fn from_name(name: &str) -> Option<BaseType> {
        Some(match name {
            "String" => BaseType::String,
            "Blob" => BaseType::Blob,
            "Bool" => BaseType::Bool,
            "I32" => BaseType::I32,
            "I64" => BaseType::I64,
            "U32" => BaseType::U32,
            "U64" => BaseType::U64,
            "F32" => BaseType::F32,
            "F64" => BaseType::F64,
            "DateTime" => BaseType::DateTime,
            "Date" => BaseType::Date,
            _ => return None,
        })
    }
}
