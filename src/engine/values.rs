//! Conversions between query values, JSON and Arrow scalars, shared by the
//! mutation executor and the query executor.

use datafusion::scalar::ScalarValue;
use serde_json::Value as Json;

use crate::engine::lang::query::ir::Value;
use crate::engine::rows;

/// A typed literal as the JSON the row builders accept (dates as epoch days,
/// datetimes as epoch ms, `now()` bound to `now_ms`).
pub fn literal_json(v: &Value, now_ms: i64) -> Json {
    match v {
        Value::String(s) => Json::String(s.clone()),
        Value::I64(i) => Json::from(*i),
        Value::F64(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
        Value::Bool(b) => Json::Bool(*b),
        Value::Date(d) => Json::from(*d),
        Value::DateTime(ms) => Json::from(*ms),
        Value::List(items) => Json::Array(items.iter().map(|i| literal_json(i, now_ms)).collect()),
        Value::Now => Json::from(now_ms),
    }
}

/// A JSON value as a scalar of the given Arrow type.
pub fn json_scalar(dt: &arrow_schema::DataType, v: &Json) -> std::result::Result<ScalarValue, String> {
    use arrow_schema::DataType as D;
    if v.is_null() {
        return ScalarValue::try_from(dt).map_err(|e| e.to_string());
    }
    let int = || v.as_i64().ok_or_else(|| format!("expected an integer, got {v}"));
    Ok(match dt {
        D::Utf8 => {
            ScalarValue::Utf8(Some(v.as_str().ok_or_else(|| format!("expected a string, got {v}"))?.to_string()))
        }
        D::Boolean => ScalarValue::Boolean(Some(v.as_bool().ok_or_else(|| format!("expected a bool, got {v}"))?)),
        D::Int32 => ScalarValue::Int32(Some(i32::try_from(int()?).map_err(|e| e.to_string())?)),
        D::Int64 => ScalarValue::Int64(Some(int()?)),
        D::UInt32 => ScalarValue::UInt32(Some(u32::try_from(int()?).map_err(|e| e.to_string())?)),
        D::UInt64 => {
            ScalarValue::UInt64(Some(v.as_u64().ok_or_else(|| format!("expected an unsigned integer, got {v}"))?))
        }
        D::Float32 => {
            ScalarValue::Float32(Some(v.as_f64().ok_or_else(|| format!("expected a number, got {v}"))? as f32))
        }
        D::Float64 => ScalarValue::Float64(Some(v.as_f64().ok_or_else(|| format!("expected a number, got {v}"))?)),
        D::Date32 => ScalarValue::Date32(Some(rows::date_days(v)?)),
        D::Timestamp(_, tz) => ScalarValue::TimestampMillisecond(Some(rows::datetime_ms(v)?), tz.clone()),
        other => return Err(format!("cannot compare a {other} column")),
    })
}
