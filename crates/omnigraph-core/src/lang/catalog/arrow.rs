//! Arrow schemas of node and edge tables.
//!
//! Layout: nodes are `id` + declared props; edges are `id`, `src`, `dst` +
//! declared props. `id` carries Lance's unenforced-primary-key metadata so
//! merge-insert and MemWAL can key on it.

use super::types::{EdgeType, NodeType, Property, ScalarType};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use std::collections::HashMap;
use std::sync::Arc;

/// Field metadata key marking Lance's primary key.
pub const PRIMARY_KEY_METADATA: &str = "lance-schema:unenforced-primary-key";

/// The non-null `id: Utf8` primary-key column.
pub fn id_field() -> Field {
    Field::new("id", DataType::Utf8, false)
        .with_metadata(HashMap::from([(PRIMARY_KEY_METADATA.to_string(), "true".to_string())]))
}

/// Arrow type of one element of `ty`.
pub fn scalar_data_type(ty: &ScalarType) -> DataType {
    match ty {
        ScalarType::String | ScalarType::Enum(_) => DataType::Utf8,
        ScalarType::Blob => DataType::LargeBinary,
        ScalarType::Bool => DataType::Boolean,
        ScalarType::I32 => DataType::Int32,
        ScalarType::I64 => DataType::Int64,
        ScalarType::U32 => DataType::UInt32,
        ScalarType::U64 => DataType::UInt64,
        ScalarType::F32 => DataType::Float32,
        ScalarType::F64 => DataType::Float64,
        ScalarType::Date => DataType::Date32,
        ScalarType::DateTime => DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        ScalarType::Vector(n) => {
            // Dimensions are capped at i32::MAX by the parser (S24).
            let len = i32::try_from(*n).unwrap_or(i32::MAX);
            DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), len)
        }
    }
}

/// Arrow field of a declared property (lists become `List<T>`).
pub fn property_field(prop: &Property) -> Field {
    let element = scalar_data_type(&prop.ty);
    let data_type = if prop.list { DataType::List(Arc::new(Field::new("item", element, true))) } else { element };
    Field::new(prop.name.clone(), data_type, prop.nullable)
}

impl NodeType {
    /// `id` + declared properties.
    pub fn arrow_schema(&self) -> Schema {
        let mut fields = vec![id_field()];
        fields.extend(self.properties.iter().map(property_field));
        Schema::new(fields)
    }
}

impl EdgeType {
    /// `id`, `src`, `dst` + declared properties.
    pub fn arrow_schema(&self) -> Schema {
        let mut fields =
            vec![id_field(), Field::new("src", DataType::Utf8, false), Field::new("dst", DataType::Utf8, false)];
        fields.extend(self.properties.iter().map(property_field));
        Schema::new(fields)
    }
}
