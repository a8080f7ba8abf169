//! Typed entity rows and their Arrow batches, shared by load and mutation.
//!
//! An [`EntityRow`] is one node or edge as JSON values: the physical `id`
//! (and `src`/`dst` for edges) plus the declared properties. [`to_batch`]
//! converts rows into a [`RecordBatch`] laid out exactly as the catalog's
//! `arrow_schema()`; [`from_batch`] is the inverse and prints values the way
//! export does.
//!
//! Value encodings accepted (per Arrow field type):
//!
//! | Arrow type | JSON |
//! |---|---|
//! | Utf8 (String, enum) | string |
//! | LargeBinary (Blob) | `"base64:<payload>"`; any other string is an external URI and is refused |
//! | Boolean | `true` / `false` |
//! | Int32/Int64/UInt32/UInt64 | integer-valued number within the width (`3` or `3.0`, never `"3"`) |
//! | Float32/Float64 | number (finite within the width) |
//! | Date32 | `"YYYY-MM-DD"` or integer epoch days |
//! | Timestamp(ms) | RFC 3339 / `YYYY-MM-DD[THH:MM[:SS[.fff]]][Z\|±HH:MM]` or integer epoch ms |
//! | FixedSizeList(Float32, N) (Vector) | array of exactly N finite numbers |
//! | List(T) | array of T; elements are never null |
//!
//! Null (or an absent property) is accepted only where the field is nullable.

use crate::lang::catalog::dates::{civil_from_days, parse_date, parse_datetime};
use crate::protocol::OmniError;
use arrow_array::builder::{NullBufferBuilder, OffsetBufferBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Float32Type, Float64Type, Int32Type, Int64Type, TimestampMillisecondType, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, Date32Array, FixedSizeListArray, Float32Array, Float64Array, Int32Array, Int64Array,
    LargeBinaryArray, ListArray, RecordBatch, StringArray, TimestampMillisecondArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, FieldRef, Schema, TimeUnit};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Number, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Prefix of a managed (inline) blob value.
pub const BLOB_PREFIX: &str = "base64:";

const MS_PER_DAY: i64 = 86_400_000;

/// One node or edge as JSON values.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntityRow {
    /// The physical `id`.
    pub id: String,
    /// Edge source node id (`None` for nodes).
    pub src: Option<String>,
    /// Edge destination node id (`None` for nodes).
    pub dst: Option<String>,
    /// Declared properties by name; an absent property is null.
    pub props: BTreeMap<String, Value>,
}

impl EntityRow {
    /// The entity as clients read it: `id`, every non-null property, and an
    /// edge's `endpoints {from, to}` (a diff's before/after image, a
    /// conflict's values and rows).
    pub fn image(&self, edge: bool) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("id".into(), Value::String(self.id.clone()));
        m.extend(self.props.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())));
        if edge {
            m.insert("endpoints".into(), serde_json::json!({ "from": self.src, "to": self.dst }));
        }
        Value::Object(m)
    }

    /// A node row with no properties.
    pub fn node(id: impl Into<String>) -> Self {
        EntityRow { id: id.into(), ..EntityRow::default() }
    }

    /// An edge row with no properties.
    pub fn edge(id: impl Into<String>, src: impl Into<String>, dst: impl Into<String>) -> Self {
        EntityRow { id: id.into(), src: Some(src.into()), dst: Some(dst.into()), props: BTreeMap::new() }
    }

    /// Sets property `name` (builder style).
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Self {
        self.props.insert(name.into(), value);
        self
    }

    /// The value of column `name` as JSON: `id`/`src`/`dst` for the
    /// physical columns (when set), else the property (absent = `None`).
    pub fn column(&self, name: &str) -> Option<Value> {
        match name {
            "id" => Some(Value::String(self.id.clone())),
            "src" if self.src.is_some() => self.src.clone().map(Value::String),
            "dst" if self.dst.is_some() => self.dst.clone().map(Value::String),
            _ => self.props.get(name).filter(|v| !v.is_null()).cloned(),
        }
    }
}

/// The schema-language name of an Arrow column type, for messages:
/// `String`, `Blob`, `I32`, `Date`, `DateTime`, `Vector(4)`, `[I64]`, ….
pub fn type_label(data_type: &DataType) -> String {
    match data_type {
        DataType::Utf8 => "String".into(),
        DataType::LargeBinary => "Blob".into(),
        DataType::Boolean => "Bool".into(),
        DataType::Int32 => "I32".into(),
        DataType::Int64 => "I64".into(),
        DataType::UInt32 => "U32".into(),
        DataType::UInt64 => "U64".into(),
        DataType::Float32 => "F32".into(),
        DataType::Float64 => "F64".into(),
        DataType::Date32 => "Date".into(),
        DataType::Timestamp(..) => "DateTime".into(),
        DataType::FixedSizeList(_, n) => format!("Vector({n})"),
        DataType::List(item) => format!("[{}]", type_label(item.data_type())),
        other => other.to_string(),
    }
}

/// What a value of `data_type` must look like, for messages.
fn expectation(data_type: &DataType) -> String {
    match data_type {
        DataType::Utf8 => "a string".into(),
        DataType::LargeBinary => "a managed blob string `base64:<payload>`".into(),
        DataType::Boolean => "true or false".into(),
        DataType::Int32 => format!("an integer in {}..={}", i32::MIN, i32::MAX),
        DataType::Int64 => format!("an integer in {}..={}", i64::MIN, i64::MAX),
        DataType::UInt32 => format!("an integer in 0..={}", u32::MAX),
        DataType::UInt64 => format!("an integer in 0..={}", u64::MAX),
        DataType::Float32 => "a finite number within F32 range".into(),
        DataType::Float64 => "a finite number".into(),
        DataType::Date32 => "a date `YYYY-MM-DD` or integer epoch days".into(),
        DataType::Timestamp(..) => "an RFC 3339 datetime (e.g. `2024-01-02T03:04:05Z`) or integer epoch ms".into(),
        DataType::FixedSizeList(_, n) => format!("an array of exactly {n} finite numbers"),
        DataType::List(item) => format!("an array of {}", type_label(item.data_type())),
        other => format!("a value of Arrow type {other}"),
    }
}

/// A JSON value shortened for error messages.
pub fn show(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= 80 {
        return text;
    }
    let mut cut: String = text.chars().take(77).collect();
    cut.push_str("...");
    cut
}

/// `expected <type> (<shape>), got <value>`.
fn mismatch(data_type: &DataType, value: &Value) -> String {
    format!("expected {} ({}), got {}", type_label(data_type), expectation(data_type), show(value))
}

/// An integer-valued JSON number as i128 (`3`, `-3`, `3.0`; floats only
/// when exactly representable, |x| ≤ 2^53).
fn integer_value(value: &Value) -> Option<i128> {
    let Value::Number(n) = value else {
        return None;
    };
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    (f.is_finite() && f.fract() == 0.0 && f.abs() <= EXACT).then_some(f as i128)
}

fn int_of<T: TryFrom<i128>>(data_type: &DataType, value: &Value) -> Result<T, String> {
    integer_value(value).and_then(|i| T::try_from(i).ok()).ok_or_else(|| mismatch(data_type, value))
}

fn f64_of(data_type: &DataType, value: &Value) -> Result<f64, String> {
    value.as_f64().filter(|f| f.is_finite()).ok_or_else(|| mismatch(data_type, value))
}

fn f32_of(data_type: &DataType, value: &Value) -> Result<f32, String> {
    let f = f64_of(data_type, value)?;
    let narrowed = f as f32;
    if narrowed.is_finite() { Ok(narrowed) } else { Err(mismatch(data_type, value)) }
}

fn str_of<'v>(data_type: &DataType, value: &'v Value) -> Result<&'v str, String> {
    value.as_str().ok_or_else(|| mismatch(data_type, value))
}

fn bool_of(data_type: &DataType, value: &Value) -> Result<bool, String> {
    value.as_bool().ok_or_else(|| mismatch(data_type, value))
}

/// Decodes a managed blob; external URIs are refused.
pub fn blob_bytes(value: &Value) -> Result<Vec<u8>, String> {
    let dt = DataType::LargeBinary;
    let text = str_of(&dt, value)?;
    let Some(payload) = text.strip_prefix(BLOB_PREFIX) else {
        return Err(format!(
            "expected Blob as `base64:<payload>`, got {}: external blob URIs are not allowed",
            show(value)
        ));
    };
    BASE64
        .decode(payload)
        .map_err(|e| format!("expected Blob as `base64:<payload>`, but the payload is not valid base64 ({e})"))
}

/// A Date value as epoch days.
pub fn date_days(value: &Value) -> Result<i32, String> {
    let dt = DataType::Date32;
    let days = match value {
        Value::String(s) => parse_date(s).ok_or_else(|| mismatch(&dt, value))?,
        _ => i64::try_from(integer_value(value).ok_or_else(|| mismatch(&dt, value))?)
            .map_err(|_| mismatch(&dt, value))?,
    };
    i32::try_from(days).map_err(|_| mismatch(&dt, value))
}

/// A DateTime value as epoch milliseconds (UTC).
pub fn datetime_ms(value: &Value) -> Result<i64, String> {
    let dt = DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()));
    match value {
        Value::String(s) => parse_datetime(s).ok_or_else(|| mismatch(&dt, value)),
        _ => integer_value(value).and_then(|i| i64::try_from(i).ok()).ok_or_else(|| mismatch(&dt, value)),
    }
}

fn vector_elements<'v>(data_type: &DataType, len: i32, value: &'v Value) -> Result<&'v [Value], String> {
    match value {
        Value::Array(items) if usize::try_from(len).is_ok_and(|n| n == items.len()) => Ok(items),
        Value::Array(items) => Err(format!("{}; the array has {} elements", mismatch(data_type, value), items.len())),
        _ => Err(mismatch(data_type, value)),
    }
}

/// Checks that a non-null `value` converts to `data_type` (nulls pass:
/// nullability is the validator's business). The error says what was
/// expected and what was given.
pub fn check_value(data_type: &DataType, value: &Value) -> Result<(), String> {
    if value.is_null() {
        return Ok(());
    }
    match data_type {
        DataType::Utf8 => str_of(data_type, value).map(drop),
        DataType::LargeBinary => blob_bytes(value).map(drop),
        DataType::Boolean => bool_of(data_type, value).map(drop),
        DataType::Int32 => int_of::<i32>(data_type, value).map(drop),
        DataType::Int64 => int_of::<i64>(data_type, value).map(drop),
        DataType::UInt32 => int_of::<u32>(data_type, value).map(drop),
        DataType::UInt64 => int_of::<u64>(data_type, value).map(drop),
        DataType::Float32 => f32_of(data_type, value).map(drop),
        DataType::Float64 => f64_of(data_type, value).map(drop),
        DataType::Date32 => date_days(value).map(drop),
        DataType::Timestamp(..) => datetime_ms(value).map(drop),
        DataType::FixedSizeList(item, n) => {
            for (i, element) in vector_elements(data_type, *n, value)?.iter().enumerate() {
                if element.is_null() {
                    return Err(format!("{}; element {i} is null", mismatch(data_type, value)));
                }
                check_value(item.data_type(), element)
                    .map_err(|e| format!("element {i} of {}: {e}", type_label(data_type)))?;
            }
            Ok(())
        }
        DataType::List(item) => {
            let Value::Array(items) = value else {
                return Err(mismatch(data_type, value));
            };
            for (i, element) in items.iter().enumerate() {
                if element.is_null() {
                    return Err(format!("list elements cannot be null (element {i} of {})", type_label(data_type)));
                }
                check_value(item.data_type(), element)
                    .map_err(|e| format!("element {i} of {}: {e}", type_label(data_type)))?;
            }
            Ok(())
        }
        other => Err(format!("unsupported column type {other}")),
    }
}

/// Where a column is being built, for error messages.
struct Ctx<'a> {
    type_name: Option<&'a str>,
    column: &'a str,
    rows: &'a [EntityRow],
}

impl Ctx<'_> {
    fn error(&self, row: usize, msg: impl std::fmt::Display) -> OmniError {
        let id = self.rows.get(row).map(|r| r.id.as_str()).unwrap_or("?");
        let owner = self.type_name.map(|t| format!("type `{t}`, ")).unwrap_or_default();
        OmniError::BadRequest(format!("{owner}property `{}` of row `{id}`: {msg}", self.column))
    }
}

/// One cell to convert: the row it belongs to and its value (`None` = null).
type Cell<'v> = (usize, Option<&'v Value>);

/// Converts `rows` into a batch with `schema` (a catalog table schema:
/// `id` [+ `src`, `dst`] + declared properties). Errors name the property,
/// the row id, the expected type and the value given; rows with
/// properties the schema lacks are refused.
pub fn to_batch(schema: &Schema, rows: &[EntityRow]) -> Result<RecordBatch, OmniError> {
    build_batch(None, schema, rows)
}

/// [`to_batch`] with the node/edge type name included in error messages.
pub fn to_batch_for(type_name: &str, schema: &Schema, rows: &[EntityRow]) -> Result<RecordBatch, OmniError> {
    build_batch(Some(type_name), schema, rows)
}

fn build_batch(type_name: Option<&str>, schema: &Schema, rows: &[EntityRow]) -> Result<RecordBatch, OmniError> {
    let owner = type_name.map(|t| format!("type `{t}`, ")).unwrap_or_default();
    for row in rows {
        if let Some(unknown) = row.props.keys().find(|k| schema.field_with_name(k).is_err()) {
            return Err(OmniError::BadRequest(format!(
                "{owner}row `{}`: unknown property `{unknown}` (not a column of this table)",
                row.id
            )));
        }
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        let name = field.name().as_str();
        let owned: Vec<Option<Value>> = rows.iter().map(|r| physical_cell(r, name)).collect();
        let cells: Vec<Cell<'_>> = rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let value = match owned.get(i).and_then(Option::as_ref) {
                    Some(v) => Some(v),
                    None => r.props.get(name).filter(|v| !v.is_null()),
                };
                (i, value)
            })
            .collect();
        let ctx = Ctx { type_name, column: name, rows };
        columns.push(build_array(field.data_type(), field.is_nullable(), &cells, &ctx)?);
    }
    RecordBatch::try_new(Arc::new(schema.clone()), columns)
        .map_err(|e| OmniError::Internal(format!("{owner}building a record batch: {e}")))
}

/// `id`, `src`, `dst` from the row's physical fields (props otherwise).
fn physical_cell(row: &EntityRow, name: &str) -> Option<Value> {
    match name {
        "id" => Some(Value::String(row.id.clone())),
        "src" => row.src.clone().map(Value::String),
        "dst" => row.dst.clone().map(Value::String),
        _ => None,
    }
}

fn collect<'v, T>(
    cells: &[Cell<'v>],
    nullable: bool,
    ctx: &Ctx<'_>,
    convert: impl Fn(&'v Value) -> Result<T, String>,
) -> Result<Vec<Option<T>>, OmniError> {
    cells
        .iter()
        .map(|(row, value)| match value {
            Some(v) => convert(v).map(Some).map_err(|e| ctx.error(*row, e)),
            None if nullable => Ok(None),
            None => Err(ctx.error(*row, "is required and cannot be null")),
        })
        .collect()
}

fn build_array(data_type: &DataType, nullable: bool, cells: &[Cell<'_>], ctx: &Ctx<'_>) -> Result<ArrayRef, OmniError> {
    let dt = data_type;
    let array: ArrayRef = match data_type {
        DataType::Utf8 => {
            let values = collect(cells, nullable, ctx, |v| str_of(dt, v))?;
            // Utf8 offsets are i32: refuse (rather than overflow) a column
            // holding more than 2 GiB of text.
            let total: usize = values.iter().flatten().map(|s| s.len()).sum();
            if i32::try_from(total).is_err() {
                return Err(ctx.error(0, "more than 2 GiB of text in one batch; split the load"));
            }
            Arc::new(StringArray::from(values))
        }
        DataType::LargeBinary => {
            let values = collect(cells, nullable, ctx, blob_bytes)?;
            Arc::new(LargeBinaryArray::from_opt_vec(values.iter().map(|v| v.as_deref()).collect()))
        }
        DataType::Boolean => Arc::new(BooleanArray::from(collect(cells, nullable, ctx, |v| bool_of(dt, v))?)),
        DataType::Int32 => Arc::new(Int32Array::from(collect(cells, nullable, ctx, |v| int_of::<i32>(dt, v))?)),
        DataType::Int64 => Arc::new(Int64Array::from(collect(cells, nullable, ctx, |v| int_of::<i64>(dt, v))?)),
        DataType::UInt32 => Arc::new(UInt32Array::from(collect(cells, nullable, ctx, |v| int_of::<u32>(dt, v))?)),
        DataType::UInt64 => Arc::new(UInt64Array::from(collect(cells, nullable, ctx, |v| int_of::<u64>(dt, v))?)),
        DataType::Float32 => Arc::new(Float32Array::from(collect(cells, nullable, ctx, |v| f32_of(dt, v))?)),
        DataType::Float64 => Arc::new(Float64Array::from(collect(cells, nullable, ctx, |v| f64_of(dt, v))?)),
        DataType::Date32 => Arc::new(Date32Array::from(collect(cells, nullable, ctx, date_days)?)),
        DataType::Timestamp(TimeUnit::Millisecond, tz) => Arc::new(
            TimestampMillisecondArray::from(collect(cells, nullable, ctx, datetime_ms)?).with_timezone_opt(tz.clone()),
        ),
        DataType::FixedSizeList(item, n) => build_vector(data_type, item, *n, nullable, cells, ctx)?,
        DataType::List(item) => build_list(data_type, item, nullable, cells, ctx)?,
        other => {
            return Err(OmniError::Internal(format!("column `{}` has unsupported type {other}", ctx.column)));
        }
    };
    Ok(array)
}

fn build_vector(
    data_type: &DataType,
    item: &FieldRef,
    n: i32,
    nullable: bool,
    cells: &[Cell<'_>],
    ctx: &Ctx<'_>,
) -> Result<ArrayRef, OmniError> {
    let width = usize::try_from(n).map_err(|_| OmniError::Internal(format!("negative vector width {n}")))?;
    let mut nulls = NullBufferBuilder::new(cells.len());
    let mut children: Vec<Cell<'_>> = Vec::with_capacity(cells.len().saturating_mul(width));
    for (row, value) in cells {
        match value {
            Some(v) => {
                check_value(data_type, v).map_err(|e| ctx.error(*row, e))?;
                let elements = vector_elements(data_type, n, v).map_err(|e| ctx.error(*row, e))?;
                children.extend(elements.iter().map(|e| (*row, Some(e))));
                nulls.append_non_null();
            }
            None if nullable => {
                children.extend(std::iter::repeat_n((*row, None), width));
                nulls.append_null();
            }
            None => return Err(ctx.error(*row, "is required and cannot be null")),
        }
    }
    let child = build_array(item.data_type(), true, &children, ctx)?;
    let array = FixedSizeListArray::try_new(item.clone(), n, child, nulls.finish())
        .map_err(|e| OmniError::Internal(format!("column `{}`: {e}", ctx.column)))?;
    Ok(Arc::new(array))
}

fn build_list(
    data_type: &DataType,
    item: &FieldRef,
    nullable: bool,
    cells: &[Cell<'_>],
    ctx: &Ctx<'_>,
) -> Result<ArrayRef, OmniError> {
    let mut nulls = NullBufferBuilder::new(cells.len());
    let mut offsets = OffsetBufferBuilder::<i32>::new(cells.len());
    let mut children: Vec<Cell<'_>> = Vec::new();
    for (row, value) in cells {
        match value {
            Some(v) => {
                check_value(data_type, v).map_err(|e| ctx.error(*row, e))?;
                let Value::Array(elements) = v else {
                    return Err(ctx.error(*row, mismatch(data_type, v)));
                };
                children.extend(elements.iter().map(|e| (*row, Some(e))));
                offsets.push_length(elements.len());
                nulls.append_non_null();
            }
            None if nullable => {
                offsets.push_length(0);
                nulls.append_null();
            }
            None => return Err(ctx.error(*row, "is required and cannot be null")),
        }
    }
    if i32::try_from(children.len()).is_err() {
        return Err(ctx.error(0, "too many list elements in one batch"));
    }
    let child = build_array(item.data_type(), item.is_nullable(), &children, ctx)?;
    let array = ListArray::try_new(item.clone(), offsets.finish(), child, nulls.finish())
        .map_err(|e| OmniError::Internal(format!("column `{}`: {e}", ctx.column)))?;
    Ok(Arc::new(array))
}

/// Every row of `batches` ([`from_batch`]) keyed by its id, into any map.
pub fn by_id<M: FromIterator<(String, EntityRow)>>(batches: &[RecordBatch]) -> M {
    batches.iter().flat_map(from_batch).map(|r| (r.id.clone(), r)).collect()
}

/// Converts a batch back into rows (the inverse of [`to_batch`]).
///
/// Values come out as export prints them: dates `YYYY-MM-DD`, datetimes
/// RFC 3339 with milliseconds and `Z`, blobs `base64:…`, vectors and lists
/// as arrays. Nulls are omitted from `props`. Dates/datetimes outside
/// years 0000–9999 are printed as integer epoch days/ms (which
/// [`to_batch`] accepts back). The batch counts as an edge table when its
/// second and third columns are `src` and `dst`; a node table whose first
/// two properties are named `src` and `dst` therefore comes back with them
/// in [`EntityRow::src`]/[`EntityRow::dst`], which [`to_batch`] accepts.
pub fn from_batch(batch: &RecordBatch) -> Vec<EntityRow> {
    let schema = batch.schema();
    let fields = schema.fields();
    let is_edge = fields.len() >= 3 && fields[1].name() == "src" && fields[2].name() == "dst";
    let mut rows: Vec<EntityRow> = (0..batch.num_rows()).map(|_| EntityRow::default()).collect();
    for (index, (field, column)) in fields.iter().zip(batch.columns()).enumerate() {
        let name = field.name().as_str();
        for (i, row) in rows.iter_mut().enumerate() {
            let value = json_at(column.as_ref(), i);
            match (index, name, value) {
                (0, "id", Value::String(s)) => row.id = s,
                (1, "src", Value::String(s)) if is_edge => row.src = Some(s),
                (2, "dst", Value::String(s)) if is_edge => row.dst = Some(s),
                (_, _, Value::Null) => {}
                (_, _, value) => {
                    row.props.insert(name.to_string(), value);
                }
            }
        }
    }
    rows
}

/// Days since the epoch as `YYYY-MM-DD` (years 0000–9999), else the number.
pub fn format_date(days: i64) -> Value {
    let (y, m, d) = civil_from_days(days);
    if (0..=9999).contains(&y) { Value::String(format!("{y:04}-{m:02}-{d:02}")) } else { Value::from(days) }
}

/// Epoch ms as `YYYY-MM-DDTHH:MM:SS.fffZ` (years 0000–9999), else the number.
pub fn format_datetime(ms: i64) -> Value {
    let days = ms.div_euclid(MS_PER_DAY);
    let rem = ms.rem_euclid(MS_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return Value::from(ms);
    }
    let (h, min, s, frac) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1000 % 60, rem % 1000);
    Value::String(format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{s:02}.{frac:03}Z"))
}

/// An f32 as the JSON number of its shortest spelling (0.1f32 → 0.1).
fn f32_json(f: f32) -> Value {
    f.to_string().parse::<f64>().ok().and_then(Number::from_f64).map_or(Value::Null, Value::Number)
}

fn f64_json(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// The JSON form of `array[i]` (null for nulls and unsupported types).
pub fn json_at(array: &dyn Array, i: usize) -> Value {
    if i >= array.len() || array.is_null(i) {
        return Value::Null;
    }
    match array.data_type() {
        DataType::Utf8 => array.as_string_opt::<i32>().map_or(Value::Null, |a| Value::from(a.value(i))),
        DataType::LargeBinary => array
            .as_binary_opt::<i64>()
            .map_or(Value::Null, |a| Value::String(format!("{BLOB_PREFIX}{}", BASE64.encode(a.value(i))))),
        DataType::Boolean => array.as_boolean_opt().map_or(Value::Null, |a| Value::Bool(a.value(i))),
        DataType::Int32 => array.as_primitive_opt::<Int32Type>().map_or(Value::Null, |a| Value::from(a.value(i))),
        DataType::Int64 => array.as_primitive_opt::<Int64Type>().map_or(Value::Null, |a| Value::from(a.value(i))),
        DataType::UInt32 => array.as_primitive_opt::<UInt32Type>().map_or(Value::Null, |a| Value::from(a.value(i))),
        DataType::UInt64 => array.as_primitive_opt::<UInt64Type>().map_or(Value::Null, |a| Value::from(a.value(i))),
        DataType::Float32 => array.as_primitive_opt::<Float32Type>().map_or(Value::Null, |a| f32_json(a.value(i))),
        DataType::Float64 => array.as_primitive_opt::<Float64Type>().map_or(Value::Null, |a| f64_json(a.value(i))),
        DataType::Date32 => {
            array.as_primitive_opt::<Date32Type>().map_or(Value::Null, |a| format_date(i64::from(a.value(i))))
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            array.as_primitive_opt::<TimestampMillisecondType>().map_or(Value::Null, |a| format_datetime(a.value(i)))
        }
        DataType::FixedSizeList(..) => array.as_fixed_size_list_opt().map_or(Value::Null, |a| list_json(&a.value(i))),
        DataType::List(_) => array.as_list_opt::<i32>().map_or(Value::Null, |a| list_json(&a.value(i))),
        // A whole node: its fields by name (null properties left out, as in rows).
        DataType::Struct(_) => array.as_struct_opt().map_or(Value::Null, |a| {
            let fields = a.fields().iter().zip(a.columns());
            Value::Object(
                fields.map(|(f, c)| (f.name().clone(), json_at(c.as_ref(), i))).filter(|(_, v)| !v.is_null()).collect(),
            )
        }),
        _ => Value::Null,
    }
}

fn list_json(values: &ArrayRef) -> Value {
    Value::Array((0..values.len()).map(|j| json_at(values.as_ref(), j)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::catalog::{Catalog, compile_schema};
    use serde_json::json;

    const SCHEMA: &str = r#"
node All {
    s: String
    e: enum(a, b)
    blob: Blob
    flag: Bool
    i32v: I32
    i64v: I64
    u32v: U32
    u64v: U64
    f32v: F32
    f64v: F64
    day: Date
    at: DateTime
    vec: Vector(3)
    ints: [I32]
    strs: [String]
    days: [Date]
    maybe: String?
    maybe_vec: Vector(2)?
    maybe_list: [F64]?
}
edge Link: All -> All {
    weight: F64?
}
"#;

    fn catalog() -> Catalog {
        compile_schema(SCHEMA).expect("schema compiles")
    }

    fn full_row(id: &str) -> EntityRow {
        EntityRow::node(id)
            .with("s", json!("text ✓"))
            .with("e", json!("b"))
            .with("blob", json!("base64:aGVsbG8="))
            .with("flag", json!(true))
            .with("i32v", json!(i32::MIN))
            .with("i64v", json!(i64::MAX))
            .with("u32v", json!(u32::MAX))
            .with("u64v", json!(u64::MAX))
            .with("f32v", json!(0.1))
            .with("f64v", json!(-2.5e300))
            .with("day", json!("2024-02-29"))
            .with("at", json!("2024-01-02T03:04:05.123Z"))
            .with("vec", json!([0.5, -1.0, 0.25]))
            .with("ints", json!([1, -2, 3]))
            .with("strs", json!([]))
            .with("days", json!(["1970-01-01", "1969-12-31"]))
    }

    fn err_text(result: Result<RecordBatch, OmniError>) -> String {
        match result {
            Err(OmniError::BadRequest(msg)) => msg,
            other => panic!("expected BadRequest, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_every_scalar_type() {
        let node = catalog().node("All").cloned().expect("All");
        let full = full_row("r1");
        let sparse = full_row("r2")
            .with("maybe", json!("here"))
            .with("maybe_vec", json!([1.5, 2.0]))
            .with("maybe_list", json!([1.25, -0.5]));
        let rows = vec![full, sparse];
        let batch = to_batch(&node.arrow_schema(), &rows).expect("converts");
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(from_batch(&batch), rows);
    }

    #[test]
    fn edge_round_trip() {
        let edge = catalog().edge("Link").cloned().expect("Link");
        let rows = vec![EntityRow::edge("l1", "a", "b").with("weight", json!(1.5)), EntityRow::edge("l2", "b", "a")];
        let batch = to_batch(&edge.arrow_schema(), &rows).expect("converts");
        assert_eq!(from_batch(&batch), rows);
        let err = err_text(to_batch(&edge.arrow_schema(), &[EntityRow::node("l3")]));
        assert!(err.contains("property `src` of row `l3`") && err.contains("required"), "{err}");
    }

    #[test]
    fn alternative_encodings_normalise() {
        let node = catalog().node("All").cloned().expect("All");
        let row = full_row("r")
            .with("day", json!(19_782))
            .with("at", json!("2024-01-02T04:04:05.123+01:00"))
            .with("i32v", json!(7.0))
            .with("days", json!([0, "2000-01-01"]));
        let back = from_batch(&to_batch(&node.arrow_schema(), &[row]).expect("converts"));
        assert_eq!(back[0].props["day"], json!("2024-02-29"));
        assert_eq!(back[0].props["at"], json!("2024-01-02T03:04:05.123Z"));
        assert_eq!(back[0].props["i32v"], json!(7));
        assert_eq!(back[0].props["days"], json!(["1970-01-01", "2000-01-01"]));
        let row = full_row("r").with("at", json!(0));
        let back = from_batch(&to_batch(&node.arrow_schema(), &[row]).expect("converts"));
        assert_eq!(back[0].props["at"], json!("1970-01-01T00:00:00.000Z"));
    }

    #[test]
    fn conversion_errors_name_type_property_row_and_expectation() {
        let node = catalog().node("All").cloned().expect("All");
        let schema = node.arrow_schema();
        let cases: Vec<(&str, Value, &[&str])> = vec![
            ("s", json!(1), &["String", "a string", "got 1"]),
            ("flag", json!("yes"), &["Bool", "true or false"]),
            ("i32v", json!(2_147_483_648_i64), &["I32", "-2147483648..=2147483647"]),
            ("i64v", json!(1.5), &["I64", "got 1.5"]),
            ("i64v", json!("12"), &["I64", "got \"12\""]),
            ("u32v", json!(-1), &["U32", "0..=4294967295"]),
            ("u64v", json!(1e20), &["U64"]),
            ("f32v", json!(1e39), &["F32", "within F32 range"]),
            ("f64v", json!("1.0"), &["F64", "a finite number"]),
            ("day", json!("2024-02-30"), &["Date", "YYYY-MM-DD"]),
            ("day", json!(3_000_000_000_i64), &["Date"]),
            ("at", json!("yesterday"), &["DateTime", "RFC 3339"]),
            ("vec", json!([1.0, 2.0]), &["Vector(3)", "exactly 3", "has 2 elements"]),
            ("vec", json!([1.0, "x", 2.0]), &["Vector(3)", "element 1"]),
            ("vec", json!([1.0, null, 2.0]), &["Vector(3)", "element 1 is null"]),
            ("ints", json!([1, null]), &["list elements cannot be null", "[I32]"]),
            ("ints", json!(1), &["[I32]", "an array of I32"]),
            ("strs", json!(["a", 2]), &["element 1", "String"]),
            ("blob", json!("https://x/y.png"), &["Blob", "external blob URIs are not allowed"]),
            ("blob", json!("base64:@@@"), &["Blob", "not valid base64"]),
            ("e", json!(false), &["String"]),
        ];
        for (prop, value, needles) in cases {
            let row = full_row("row-9").with(prop, value.clone());
            let msg = err_text(to_batch_for("All", &schema, &[row]));
            assert!(msg.starts_with(&format!("type `All`, property `{prop}` of row `row-9`: ")), "{msg}");
            for needle in needles {
                assert!(msg.contains(needle), "{prop}={value}: `{msg}` lacks `{needle}`");
            }
        }
    }

    #[test]
    fn nulls_only_where_nullable() {
        let node = catalog().node("All").cloned().expect("All");
        let schema = node.arrow_schema();
        let mut row = full_row("r");
        row.props.remove("flag");
        let msg = err_text(to_batch(&schema, &[row]));
        assert!(msg.contains("property `flag` of row `r`: is required and cannot be null"), "{msg}");
        let msg = err_text(to_batch(&schema, &[full_row("r").with("vec", Value::Null)]));
        assert!(msg.contains("property `vec`"), "{msg}");
        let ok = full_row("r").with("maybe", Value::Null).with("maybe_vec", Value::Null);
        assert!(to_batch(&schema, &[ok]).is_ok());
    }

    #[test]
    fn unknown_props_are_refused() {
        let node = catalog().node("All").cloned().expect("All");
        let msg = err_text(to_batch_for("All", &node.arrow_schema(), &[full_row("r").with("zzz", json!(1))]));
        assert!(msg.contains("type `All`, row `r`: unknown property `zzz`"), "{msg}");
    }

    #[test]
    fn empty_batch() {
        let node = catalog().node("All").cloned().expect("All");
        let batch = to_batch(&node.arrow_schema(), &[]).expect("empty");
        assert_eq!(batch.num_rows(), 0);
        assert!(from_batch(&batch).is_empty());
    }

    #[test]
    fn out_of_range_dates_print_as_numbers() {
        assert_eq!(format_date(0), json!("1970-01-01"));
        assert_eq!(format_date(i64::from(i32::MAX)), json!(i32::MAX));
        assert_eq!(format_datetime(-1), json!("1969-12-31T23:59:59.999Z"));
        assert_eq!(format_datetime(i64::MAX), json!(i64::MAX));
        assert_eq!(date_days(&format_date(i64::from(i32::MIN))), Ok(i32::MIN));
    }
}
