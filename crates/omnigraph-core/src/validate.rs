//! Row-level constraint validation, run over the rows of one type before
//! any effect.
//!
//! A [`Validator`] is built once per node/edge type (compiling its `@check`
//! regexes once, through a process-wide cache) and checks each
//! [`EntityRow`]: unknown properties, required / non-null properties, value
//! types (list elements: type and non-null), enum membership, `@range` (inclusive
//! bounds) and `@check`. [`check_unique_within`] checks `@unique` column
//! sets among the given rows; uniqueness against committed data is checked
//! elsewhere.
//!
//! `@check` semantics: the reference engine runs a regex *search*
//! ([`regex::Regex::is_match`]), so the pattern may match anywhere in the
//! value; schemas anchor with `^…$` to constrain the whole value. We do the
//! same.
//!
//! `@unique` semantics: a row where any column of the set is null is exempt
//! (SQL semantics; `email: String? @unique` admits many missing emails).

use crate::lang::catalog::arrow::property_field;
use crate::lang::catalog::key::canonical_value;
use crate::lang::catalog::{CheckConstraint, EdgeType, NodeType, Property, RangeConstraint, ScalarType, TypeDef};
use crate::protocol::OmniError;
use crate::rows::{EntityRow, check_value, show};
use arrow_schema::DataType;
use regex::Regex;
use serde_json::Value;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};

/// The rule a value broke.
#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// A non-nullable property (or an edge endpoint) is absent.
    Required,
    /// A non-nullable property is `null`.
    NotNull,
    /// The row names a property the type does not declare.
    UnknownProperty,
    /// The value does not have the property's type.
    Type {
        /// What conversion said (expected type and given value).
        message: String,
    },
    /// The value is not one of the enum's values.
    Enum {
        /// The declared values.
        allowed: Vec<String>,
        /// The offending value.
        value: String,
    },
    /// The value is outside `@range(min..max)` (inclusive).
    Range {
        /// Lower bound.
        min: Option<f64>,
        /// Upper bound.
        max: Option<f64>,
        /// The offending value.
        value: Value,
    },
    /// The value does not match `@check(prop, "pattern")`.
    Check {
        /// The regex.
        pattern: String,
        /// The offending value.
        value: String,
    },
    /// Another row has the same values for a `@unique` column set.
    Unique {
        /// The column set.
        columns: Vec<String>,
        /// The id of the row that has them first.
        other_id: String,
        /// The shared values, as text.
        values: String,
    },
}

/// One broken rule: which type, row and property, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Node or edge type.
    pub type_name: String,
    /// The row id.
    pub id: String,
    /// The property (or the first column of a unique set).
    pub property: String,
    /// What was broken (boxed to keep `Result<_, Violation>` small).
    pub rule: Box<Rule>,
}

fn bound(b: Option<f64>) -> String {
    b.map(|v| v.to_string()).unwrap_or_default()
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "type `{}`, id `{}`, property `{}`: ", self.type_name, self.id, self.property)?;
        match self.rule.as_ref() {
            Rule::Required => write!(f, "required property missing"),
            Rule::NotNull => write!(f, "property is not nullable but is null"),
            Rule::UnknownProperty => write!(f, "unknown property (not declared on `{}`)", self.type_name),
            Rule::Type { message } => write!(f, "{message}"),
            Rule::Enum { allowed, value } => {
                write!(f, "enum value `{value}` is not one of: {}", allowed.join(", "))
            }
            Rule::Range { min, max, value } => {
                write!(
                    f,
                    "violates @range({}, {}..{}): value {value} is out of range",
                    self.property,
                    bound(*min),
                    bound(*max)
                )
            }
            Rule::Check { pattern, value } => {
                write!(f, "violates @check({}, {pattern:?}): value {value:?} does not match", self.property)
            }
            Rule::Unique { columns, other_id, values } => {
                write!(f, "violates @unique({}): values {values} are also used by id `{other_id}`", columns.join(", "))
            }
        }
    }
}

impl std::error::Error for Violation {}

impl From<Violation> for OmniError {
    fn from(v: Violation) -> Self {
        OmniError::BadRequest(v.to_string())
    }
}

/// Compiled regexes shared by every validator (patterns are few and fixed
/// per schema).
fn compiled(pattern: &str) -> Result<Regex, OmniError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut map = cache.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(re) = map.get(pattern) {
        return Ok(re.clone());
    }
    let re = Regex::new(pattern)
        .map_err(|e| OmniError::Internal(format!("@check regex {pattern:?} does not compile: {e}")))?;
    map.insert(pattern.to_string(), re.clone());
    Ok(re)
}

/// Row checks for one node or edge type.
#[derive(Debug, Clone)]
pub struct Validator {
    type_name: String,
    is_edge: bool,
    props: Vec<(Property, DataType)>,
    ranges: Vec<RangeConstraint>,
    checks: Vec<(CheckConstraint, Regex)>,
    uniques: Vec<Vec<String>>,
}

impl Validator {
    /// The validator of a node type.
    pub fn for_node(node: &NodeType) -> Result<Self, OmniError> {
        Self::build(&node.name, false, &node.properties, &node.ranges, &node.checks, &node.uniques)
    }

    /// The validator of an edge type (edges carry no range/check).
    pub fn for_edge(edge: &EdgeType) -> Result<Self, OmniError> {
        Self::build(&edge.name, true, &edge.properties, &[], &[], &edge.uniques)
    }

    /// The validator of any table.
    pub fn for_type(def: TypeDef<'_>) -> Result<Self, OmniError> {
        match def {
            TypeDef::Node(n) => Self::for_node(n),
            TypeDef::Edge(e) => Self::for_edge(e),
        }
    }

    fn build(
        type_name: &str,
        is_edge: bool,
        props: &[Property],
        ranges: &[RangeConstraint],
        checks: &[CheckConstraint],
        uniques: &[Vec<String>],
    ) -> Result<Self, OmniError> {
        let checks = checks.iter().map(|c| Ok((c.clone(), compiled(&c.pattern)?))).collect::<Result<_, OmniError>>()?;
        Ok(Validator {
            type_name: type_name.to_string(),
            is_edge,
            props: props.iter().map(|p| (p.clone(), property_field(p).data_type().clone())).collect(),
            ranges: ranges.to_vec(),
            checks,
            uniques: uniques.to_vec(),
        })
    }

    /// The type validated.
    pub fn type_name(&self) -> &str {
        &self.type_name
    }

    fn violation(&self, row: &EntityRow, property: &str, rule: Rule) -> Violation {
        Violation {
            type_name: self.type_name.clone(),
            id: row.id.clone(),
            property: property.to_string(),
            rule: Box::new(rule),
        }
    }

    /// Every rule `row` breaks (empty = valid), in property order.
    pub fn row_violations(&self, row: &EntityRow) -> Vec<Violation> {
        let mut out = Vec::new();
        if row.id.is_empty() {
            out.push(self.violation(row, "id", Rule::Required));
        }
        if self.is_edge {
            for (name, endpoint) in [("src", &row.src), ("dst", &row.dst)] {
                if endpoint.as_deref().is_none_or(str::is_empty) {
                    out.push(self.violation(row, name, Rule::Required));
                }
            }
        }
        for name in row.props.keys() {
            if !self.props.iter().any(|(p, _)| &p.name == name) {
                out.push(self.violation(row, name, Rule::UnknownProperty));
            }
        }
        for (prop, data_type) in &self.props {
            match row.props.get(&prop.name) {
                None if !prop.nullable => out.push(self.violation(row, &prop.name, Rule::Required)),
                Some(Value::Null) if !prop.nullable => out.push(self.violation(row, &prop.name, Rule::NotNull)),
                None | Some(Value::Null) => {}
                Some(value) => {
                    if let Err(message) = check_value(data_type, value) {
                        out.push(self.violation(row, &prop.name, Rule::Type { message }));
                    } else if let Some(rule) = enum_violation(prop, value) {
                        out.push(self.violation(row, &prop.name, rule));
                    }
                }
            }
        }
        for range in &self.ranges {
            if let Some(value) = row.props.get(&range.prop).filter(|v| v.is_number())
                && !in_range(range, value)
            {
                let rule = Rule::Range { min: range.min, max: range.max, value: value.clone() };
                out.push(self.violation(row, &range.prop, rule));
            }
        }
        for (check, re) in &self.checks {
            if let Some(Value::String(s)) = row.props.get(&check.prop)
                && !re.is_match(s)
            {
                let rule = Rule::Check { pattern: check.pattern.clone(), value: s.clone() };
                out.push(self.violation(row, &check.prop, rule));
            }
        }
        out
    }

    /// The first rule `row` breaks.
    pub fn check_row(&self, row: &EntityRow) -> Result<(), Violation> {
        match self.row_violations(row).into_iter().next() {
            Some(v) => Err(v),
            None => Ok(()),
        }
    }

    /// Checks every row, then `@unique` among them; the first violation
    /// becomes [`OmniError::BadRequest`].
    pub fn validate(&self, rows: &[EntityRow]) -> Result<(), OmniError> {
        for row in rows {
            self.check_row(row)?;
        }
        self.check_unique(rows)?;
        Ok(())
    }

    /// `@unique` among `rows`, comparing canonical values (so `"2024-01-02"`
    /// and `19724` are the same Date).
    pub fn check_unique(&self, rows: &[EntityRow]) -> Result<(), Violation> {
        let props: Vec<Property> = self.props.iter().map(|(p, _)| p.clone()).collect();
        unique_within(&self.type_name, Some(&props), rows, &self.uniques)
    }
}

/// Validates the rows of one node type ([`Validator::validate`]: every
/// row rule, then `@unique` among the rows).
pub fn validate_node_rows(node: &NodeType, rows: &[EntityRow]) -> Result<(), OmniError> {
    Validator::for_node(node)?.validate(rows)
}

/// Validates the rows of one edge type ([`Validator::validate`]).
pub fn validate_edge_rows(edge: &EdgeType, rows: &[EntityRow]) -> Result<(), OmniError> {
    Validator::for_edge(edge)?.validate(rows)
}

fn enum_violation(prop: &Property, value: &Value) -> Option<Rule> {
    let ScalarType::Enum(allowed) = &prop.ty else {
        return None;
    };
    let bad =
        |v: &str| (!allowed.iter().any(|a| a == v)).then(|| Rule::Enum { allowed: allowed.clone(), value: v.into() });
    match value {
        Value::String(s) => bad(s),
        Value::Array(items) => items.iter().filter_map(Value::as_str).find_map(bad),
        _ => None,
    }
}

/// Inclusive bounds. Integers compare exactly when the bound is integral.
fn in_range(range: &RangeConstraint, value: &Value) -> bool {
    let exact = value.as_i64().map(i128::from).or_else(|| value.as_u64().map(i128::from));
    let cmp = |b: f64| -> Option<std::cmp::Ordering> {
        match exact {
            Some(i) if b.fract() == 0.0 && b.abs() < 1e30 => Some(i.cmp(&(b as i128))),
            _ => value.as_f64()?.partial_cmp(&b),
        }
    };
    let above_min = range.min.is_none_or(|lo| cmp(lo).is_some_and(|o| o.is_ge()));
    let below_max = range.max.is_none_or(|hi| cmp(hi).is_some_and(|o| o.is_le()));
    above_min && below_max
}

/// `@unique` column sets among `rows` of `type_name` (columns may be
/// declared properties, or `id`/`src`/`dst`). Values compare as JSON text;
/// rows with a null in the set are exempt. Use [`Validator::check_unique`]
/// to compare typed canonical values.
pub fn check_unique_within(type_name: &str, rows: &[EntityRow], uniques: &[Vec<String>]) -> Result<(), Violation> {
    unique_within(type_name, None, rows, uniques)
}

fn unique_within(
    type_name: &str,
    props: Option<&[Property]>,
    rows: &[EntityRow],
    uniques: &[Vec<String>],
) -> Result<(), Violation> {
    for columns in uniques {
        let mut seen: HashMap<Vec<String>, &str> = HashMap::with_capacity(rows.len());
        'rows: for row in rows {
            let mut tuple = Vec::with_capacity(columns.len());
            for column in columns {
                let Some(value) = row.column(column) else {
                    continue 'rows;
                };
                let prop = props.and_then(|ps| ps.iter().find(|p| &p.name == column));
                let text = prop.and_then(|p| canonical_value(p, &value).ok()).unwrap_or_else(|| value.to_string());
                tuple.push(text);
            }
            if let Some(first) = seen.get(&tuple) {
                let shown: Vec<String> = columns.iter().filter_map(|c| row.column(c)).map(|v| show(&v)).collect();
                return Err(Violation {
                    type_name: type_name.to_string(),
                    id: row.id.clone(),
                    property: columns.first().cloned().unwrap_or_default(),
                    rule: Box::new(Rule::Unique {
                        columns: columns.clone(),
                        other_id: (*first).to_string(),
                        values: format!("({})", shown.join(", ")),
                    }),
                });
            }
            seen.insert(tuple, &row.id);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::catalog::{Catalog, compile_schema};
    use serde_json::json;

    const SCHEMA: &str = r#"
node Item {
    slug: String @key
    status: enum(open, closed)
    labels: [String]?
    qty: I64?
    score: F64?
    code: String?
    email: String? @unique
    day: Date?
    region: String?
    @range(qty, 0..10)
    @range(score, ..1.5)
    @check(code, "^[A-Z]{2}[0-9]+$")
    @check(region, "eu")
    @unique(region, day)
}
edge Rel: Item -> Item {
    w: I32
    @unique(src, dst)
}
"#;

    fn catalog() -> Catalog {
        compile_schema(SCHEMA).expect("schema compiles")
    }

    fn validator() -> Validator {
        Validator::for_node(catalog().node("Item").expect("Item")).expect("validator")
    }

    fn item(id: &str) -> EntityRow {
        EntityRow::node(id).with("slug", json!(id)).with("status", json!("open"))
    }

    #[track_caller]
    fn assert_violation(row: EntityRow, property: &str, rule_text: &[&str]) {
        let err = validator().validate(std::slice::from_ref(&row)).expect_err("should fail");
        let OmniError::BadRequest(msg) = err else { panic!("BadRequest expected") };
        let prefix = format!("type `Item`, id `{}`, property `{property}`: ", row.id);
        assert!(msg.starts_with(&prefix), "{msg}");
        for needle in rule_text {
            assert!(msg.contains(needle), "`{msg}` lacks `{needle}`");
        }
    }

    #[test]
    fn valid_rows_pass() {
        let row = item("a")
            .with("labels", json!(["red", "blue"]))
            .with("qty", json!(10))
            .with("score", json!(1.5))
            .with("code", json!("AB12"))
            .with("email", Value::Null)
            .with("region", json!("west-eu-1"));
        validator().validate(&[row, item("b")]).expect("valid");
    }

    #[test]
    fn required_property_missing() {
        let mut row = item("a");
        row.props.remove("status");
        assert_violation(row, "status", &["required property missing"]);
    }

    #[test]
    fn non_nullable_null() {
        assert_violation(item("a").with("status", Value::Null), "status", &["not nullable but is null"]);
    }

    #[test]
    fn enum_membership() {
        assert_violation(item("a").with("status", json!("pending")), "status", &["`pending`", "one of: open, closed"]);
    }

    #[test]
    fn list_elements_are_checked() {
        // `[enum(..)]` is not in the grammar; list elements are checked for
        // type and null-ness.
        assert_violation(item("a").with("labels", json!(["red", null])), "labels", &["list elements cannot be null"]);
        assert_violation(item("a").with("labels", json!(["red", 3])), "labels", &["element 1 of [String]"]);
    }

    #[test]
    fn range_integer_bounds_inclusive() {
        assert_violation(item("a").with("qty", json!(11)), "qty", &["@range(qty, 0..10)", "value 11"]);
        assert_violation(item("a").with("qty", json!(-1)), "qty", &["@range(qty, 0..10)"]);
        validator().validate(&[item("a").with("qty", json!(0))]).expect("lower bound inclusive");
    }

    #[test]
    fn range_float_open_lower() {
        assert_violation(item("a").with("score", json!(1.5000001)), "score", &["@range(score, ..1.5)"]);
        validator().validate(&[item("a").with("score", json!(-1e300))]).expect("no lower bound");
    }

    #[test]
    fn check_regex_is_a_search() {
        assert_violation(item("a").with("code", json!("ab12")), "code", &["@check(code,", "\"ab12\" does not match"]);
        // Unanchored pattern: a match anywhere passes.
        validator().validate(&[item("a").with("region", json!("north-eu"))]).expect("search semantics");
        assert_violation(item("a").with("region", json!("us")), "region", &["@check(region, \"eu\")"]);
    }

    #[test]
    fn type_errors_are_violations() {
        assert_violation(item("a").with("qty", json!("many")), "qty", &["expected I64"]);
    }

    #[test]
    fn unknown_property_is_a_violation() {
        assert_violation(item("a").with("colour", json!("red")), "colour", &["unknown property"]);
    }

    #[test]
    fn unique_within_rows() {
        let v = validator();
        let rows = [item("a").with("email", json!("x@y")), item("b").with("email", json!("x@y"))];
        let err = v.validate(&rows).expect_err("duplicate email");
        let msg = err.to_string();
        assert!(msg.contains("type `Item`, id `b`, property `email`: violates @unique(email)"), "{msg}");
        assert!(msg.contains("also used by id `a`"), "{msg}");
        // Nulls are exempt.
        v.validate(&[item("a"), item("b"), item("c").with("email", Value::Null)]).expect("nulls exempt");
    }

    #[test]
    fn composite_unique_compares_canonical_values() {
        let v = validator();
        let rows = [
            item("a").with("region", json!("eu")).with("day", json!("1970-01-02")),
            item("b").with("region", json!("eu")).with("day", json!(1)),
        ];
        let violation = v.check_unique(&rows).expect_err("same day");
        assert_eq!(violation.property, "region");
        assert!(
            matches!(violation.rule.as_ref(), Rule::Unique { columns, other_id, .. } if columns == &["region", "day"] && other_id == "a")
        );
        // Without types, the JSON texts differ.
        check_unique_within("Item", &rows, &[vec!["region".into(), "day".into()]]).expect("text compare");
        let partial = [item("a").with("region", json!("eu")), item("b").with("region", json!("eu"))];
        v.check_unique(&partial).expect("null day exempts");
    }

    #[test]
    fn edge_unique_src_dst_and_endpoints() {
        let catalog = catalog();
        let v = Validator::for_edge(catalog.edge("Rel").expect("Rel")).expect("validator");
        let rows = [
            EntityRow::edge("e1", "a", "b").with("w", json!(1)),
            EntityRow::edge("e2", "a", "c").with("w", json!(1)),
            EntityRow::edge("e3", "a", "b").with("w", json!(2)),
        ];
        let msg = v.validate(&rows).expect_err("parallel").to_string();
        assert!(msg.contains("type `Rel`, id `e3`, property `src`: violates @unique(src, dst)"), "{msg}");
        assert!(msg.contains("(\"a\", \"b\")") && msg.contains("`e1`"), "{msg}");
        let no_dst = EntityRow { dst: None, ..EntityRow::edge("e4", "a", "b").with("w", json!(1)) };
        let msg = v.validate(&[no_dst]).expect_err("dst").to_string();
        assert!(msg.contains("id `e4`, property `dst`: required property missing"), "{msg}");
        let msg = v.validate(&[EntityRow::edge("e5", "a", "b")]).expect_err("w").to_string();
        assert!(msg.contains("property `w`: required property missing"), "{msg}");
    }

    #[test]
    fn all_violations_are_listed() {
        let row = item("a").with("status", json!("x")).with("qty", json!(99)).with("code", json!("no"));
        let rules: Vec<String> = validator().row_violations(&row).into_iter().map(|v| v.property).collect();
        assert_eq!(rules, ["status", "qty", "code"]);
    }

    #[test]
    fn convenience_entry_points() {
        let catalog = catalog();
        let node = catalog.node("Item").expect("Item");
        validate_node_rows(node, &[item("a")]).expect("valid");
        let err = validate_node_rows(node, &[item("a").with("qty", json!(-5))]).expect_err("range");
        assert!(err.to_string().contains("id `a`, property `qty`: violates @range"), "{err}");
        let edge = catalog.edge("Rel").expect("Rel");
        let err = validate_edge_rows(edge, &[EntityRow::edge("e", "a", "b")]).expect_err("w missing");
        assert!(err.to_string().contains("type `Rel`, id `e`, property `w`"), "{err}");
    }

    #[test]
    fn regex_cache_reuses_compiled_patterns() {
        let a = compiled("^x+$").expect("compiles");
        let b = compiled("^x+$").expect("cached");
        assert_eq!(a.as_str(), b.as_str());
        assert!(compiled("(").is_err());
    }
}
