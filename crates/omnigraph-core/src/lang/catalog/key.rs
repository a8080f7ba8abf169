//! Keyed node ids: the canonical string of the `@key` value(s).
//!
//! Rule: a single key gives the canonical form of its value (a String key's
//! id is the string itself). A composite key gives a JSON array of the
//! canonical forms (as JSON strings), ordered by the key properties'
//! declaration order — the stable property identity — not by the order
//! written in `@key(…)`, so reordering that list never changes ids.
//!
//! Canonical forms: integers in decimal; `true`/`false`; Date as epoch
//! days; DateTime as epoch ms; floats in their stored width's shortest
//! round-trip spelling (F32 via `f32` Display), ±0 as `0`; non-finite
//! floats refused; strings and enum values as-is.

use super::dates::{parse_date, parse_datetime};
use super::types::{NodeType, Property, ScalarType};
use serde_json::Value;

impl NodeType {
    /// The id of the node whose key properties have `key_values` (name →
    /// JSON value; extra entries are ignored). Errors say which value is
    /// missing or malformed.
    pub fn derive_id(&self, key_values: &[(String, Value)]) -> Result<String, String> {
        if self.key.is_empty() {
            return Err(format!("type `{}` has no @key; its ids are generated", self.name));
        }
        let key_props: Vec<&Property> = self.properties.iter().filter(|p| self.key.contains(&p.name)).collect();
        let mut parts = Vec::with_capacity(key_props.len());
        for prop in &key_props {
            let value = key_values
                .iter()
                .find(|(name, _)| name == &prop.name)
                .map(|(_, v)| v)
                .ok_or_else(|| format!("missing key property `{}` of `{}`", prop.name, self.name))?;
            parts.push(canonical_value(prop, value)?);
        }
        match parts.as_slice() {
            [single] => Ok(single.clone()),
            _ => serde_json::to_string(&parts).map_err(|e| e.to_string()),
        }
    }
}

/// Canonical string of one key value of `prop`.
pub fn canonical_value(prop: &Property, value: &Value) -> Result<String, String> {
    if value.is_null() {
        return Err(format!("key property `{}` is null", prop.name));
    }
    if prop.list {
        return Err(format!("key property `{}` is a list", prop.name));
    }
    let bad = |what: &str| format!("key property `{}` expects {what}, got {value}", prop.name);
    match &prop.ty {
        ScalarType::String => value.as_str().map(str::to_string).ok_or_else(|| bad("a string")),
        ScalarType::Enum(values) => match value.as_str() {
            Some(s) if values.iter().any(|v| v == s) => Ok(s.to_string()),
            _ => Err(bad(&format!("one of {}", values.join(", ")))),
        },
        ScalarType::Bool => value.as_bool().map(|b| b.to_string()).ok_or_else(|| bad("true or false")),
        ScalarType::I32 => int_in(value, i64::from(i32::MIN), i64::from(i32::MAX)).ok_or_else(|| bad("an I32")),
        ScalarType::I64 => int_in(value, i64::MIN, i64::MAX).ok_or_else(|| bad("an I64")),
        ScalarType::U32 => uint_in(value, u64::from(u32::MAX)).ok_or_else(|| bad("a U32")),
        ScalarType::U64 => uint_in(value, u64::MAX).ok_or_else(|| bad("a U64")),
        ScalarType::F32 => float_f32(value).ok_or_else(|| bad("a finite F32")),
        ScalarType::F64 => float_f64(value).ok_or_else(|| bad("a finite F64")),
        ScalarType::Date => date_days(value).ok_or_else(|| bad("a date (YYYY-MM-DD or epoch days)")),
        ScalarType::DateTime => datetime_ms(value).ok_or_else(|| bad("a datetime (RFC 3339 or epoch ms)")),
        ScalarType::Blob | ScalarType::Vector(_) => Err(format!("property `{}` cannot be a key", prop.name)),
    }
}

/// Integers arrive as JSON numbers, or as decimal strings (big integers
/// travel as strings over HTTP).
fn as_i128(value: &Value) -> Option<i128> {
    match value {
        Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
        Value::String(s) => s.parse::<i128>().ok(),
        _ => None,
    }
}

fn int_in(value: &Value, min: i64, max: i64) -> Option<String> {
    let v = as_i128(value)?;
    (i128::from(min)..=i128::from(max)).contains(&v).then(|| v.to_string())
}

fn uint_in(value: &Value, max: u64) -> Option<String> {
    let v = as_i128(value)?;
    (0..=i128::from(max)).contains(&v).then(|| v.to_string())
}

fn float_f64(value: &Value) -> Option<String> {
    let f = value.as_f64()?;
    if !f.is_finite() {
        return None;
    }
    Some(if f == 0.0 { "0".to_string() } else { f.to_string() })
}

/// Rounds to f32 first so the id matches what the F32 column stores.
fn float_f32(value: &Value) -> Option<String> {
    let f = value.as_f64()? as f32;
    if !f.is_finite() {
        return None;
    }
    Some(if f == 0.0 { "0".to_string() } else { f.to_string() })
}

fn date_days(value: &Value) -> Option<String> {
    let days = match value {
        Value::String(s) => parse_date(s)?,
        _ => i64::try_from(as_i128(value)?).ok()?,
    };
    i32::try_from(days).ok().map(|d| d.to_string())
}

fn datetime_ms(value: &Value) -> Option<String> {
    let ms = match value {
        Value::String(s) => parse_datetime(s).or_else(|| s.parse::<i64>().ok())?,
        _ => i64::try_from(as_i128(value)?).ok()?,
    };
    Some(ms.to_string())
}
