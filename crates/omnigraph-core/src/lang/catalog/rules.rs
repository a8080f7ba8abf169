//! Semantic rules for constraints: which properties they may name and which
//! property types they accept. Each check returns the lowered constraint or
//! a diagnostic pointing at the offending name.

use super::annotations::EmbedArgs;
use super::types::{CheckConstraint, EmbedSpec, Property, RangeConstraint, ScalarType};
use crate::lang::diag::{Diagnostic, Pos};
use crate::lang::schema::ast::{Name, Number};
use crate::lang::schema::codes;

/// Which constraint a column list belongs to; decides the type rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetKind {
    /// `@key`
    Key,
    /// `@unique`
    Unique,
    /// `@index`
    Index,
}

impl SetKind {
    fn keyword(self) -> &'static str {
        match self {
            SetKind::Key => "key",
            SetKind::Unique => "unique",
            SetKind::Index => "index",
        }
    }
}

/// The properties a constraint may name; edges may also name `src`/`dst`
/// in `@unique`/`@index`.
pub struct Scope<'a> {
    /// Owning type name (for messages).
    pub owner: &'a str,
    /// Declared properties.
    pub props: &'a [Property],
    /// Whether `src` and `dst` are columns.
    pub is_edge: bool,
}

impl Scope<'_> {
    fn find(&self, name: &Name, kw: &str) -> Result<&Property, Diagnostic> {
        self.props.iter().find(|p| p.name == name.text).ok_or_else(|| {
            Diagnostic::with_code(
                name.pos,
                codes::UNKNOWN_PROP,
                format!("`@{kw}` names `{}`, which is not a property of `{}`", name.text, self.owner),
            )
        })
    }

    /// Checks a key/unique/index column list and returns the names.
    pub fn column_set(&self, kind: SetKind, cols: &[Name]) -> Result<Vec<String>, Diagnostic> {
        let kw = kind.keyword();
        let mut out: Vec<String> = Vec::with_capacity(cols.len());
        for col in cols {
            if out.contains(&col.text) {
                return Err(Diagnostic::with_code(
                    col.pos,
                    codes::UNKNOWN_PROP,
                    format!("`@{kw}` names `{}` twice", col.text),
                ));
            }
            let endpoint = self.is_edge && kind != SetKind::Key && (col.text == "src" || col.text == "dst");
            if !endpoint {
                column_type_rules(kind, self.find(col, kw)?, col.pos)?;
            }
            out.push(col.text.clone());
        }
        Ok(out)
    }

    /// Checks `@range(prop, min..max)`.
    pub fn range(&self, prop: &Name, min: Option<Number>, max: Option<Number>) -> Result<RangeConstraint, Diagnostic> {
        let p = self.find(prop, "range")?;
        let fail = |msg: String| Diagnostic::with_code(prop.pos, codes::BAD_RANGE, msg);
        if p.list || !p.ty.is_numeric() {
            return Err(fail(format!("`@range` needs a numeric (non-list) property; `{}` is not", prop.text)));
        }
        let bounds = [min, max];
        let integer = bounds.iter().flatten().all(|b| matches!(b, Number::Int(_)));
        if p.ty.is_integer() && !integer {
            return Err(fail(format!("`{}` is an integer property; `@range` bounds must be integers", prop.text)));
        }
        let unsigned = matches!(p.ty, ScalarType::U32 | ScalarType::U64);
        if unsigned && bounds.iter().flatten().any(|b| b.as_f64() < 0.0) {
            return Err(fail(format!("`{}` is unsigned; `@range` bounds cannot be negative", prop.text)));
        }
        let (min, max) = (min.map(Number::as_f64), max.map(Number::as_f64));
        if let (Some(lo), Some(hi)) = (min, max)
            && lo > hi
        {
            return Err(fail(format!("`@range` minimum {lo} is greater than maximum {hi}")));
        }
        Ok(RangeConstraint { prop: prop.text.clone(), min, max, integer })
    }

    /// Checks `@check(prop, "regex")`: a String property and a valid regex.
    pub fn check(&self, prop: &Name, pattern: &str, pattern_pos: Pos) -> Result<CheckConstraint, Diagnostic> {
        let p = self.find(prop, "check")?;
        if p.ty != ScalarType::String || p.list {
            return Err(Diagnostic::with_code(
                prop.pos,
                codes::BAD_CHECK,
                format!("`@check` needs a String property; `{}` is not", prop.text),
            ));
        }
        regex::Regex::new(pattern).map_err(|e| {
            let first_line = e.to_string().lines().last().unwrap_or_default().trim().to_string();
            Diagnostic::with_code(
                pattern_pos,
                codes::BAD_CHECK,
                format!("`@check` regex does not compile: {first_line}"),
            )
        })?;
        Ok(CheckConstraint { prop: prop.text.clone(), pattern: pattern.to_string() })
    }

    /// Checks `@embed` on `target`: a Vector target and a String source.
    pub fn embed(&self, target: &Property, args: &EmbedArgs) -> Result<EmbedSpec, Diagnostic> {
        if target.ty == ScalarType::Blob {
            return Err(Diagnostic::with_code(
                args.pos,
                codes::BLOB_CONSTRAINT,
                "a Blob property cannot carry `@embed`",
            ));
        }
        if !matches!(target.ty, ScalarType::Vector(_)) || target.list {
            return Err(Diagnostic::with_code(
                args.pos,
                codes::BAD_EMBED,
                format!("`@embed` is only allowed on Vector properties; `{}` is not one", target.name),
            ));
        }
        let source_ok = self.props.iter().any(|p| p.name == args.source && p.ty == ScalarType::String && !p.list);
        if !source_ok {
            return Err(Diagnostic::with_code(
                args.source_pos,
                codes::BAD_EMBED,
                format!("`@embed` source `{}` must be a String property of `{}`", args.source, self.owner),
            ));
        }
        Ok(EmbedSpec { prop: target.name.clone(), source: args.source.clone(), model: args.model.clone() })
    }
}

/// Type rules per constraint kind: Blob never; Vector not for key/unique;
/// key columns non-nullable scalars.
fn column_type_rules(kind: SetKind, p: &Property, pos: Pos) -> Result<(), Diagnostic> {
    let kw = kind.keyword();
    if p.ty == ScalarType::Blob {
        return Err(Diagnostic::with_code(
            pos,
            codes::BLOB_CONSTRAINT,
            format!("Blob property `{}` cannot be used in `@{kw}`", p.name),
        ));
    }
    if matches!(p.ty, ScalarType::Vector(_)) && kind != SetKind::Index {
        return Err(Diagnostic::with_code(
            pos,
            codes::VECTOR_CONSTRAINT,
            format!("Vector property `{}` cannot be used in `@{kw}`", p.name),
        ));
    }
    if kind == SetKind::Key && (p.nullable || p.list) {
        let why = if p.list { "a list" } else { "nullable" };
        return Err(Diagnostic::with_code(pos, codes::BAD_KEY, format!("key property `{}` cannot be {why}", p.name)));
    }
    Ok(())
}
