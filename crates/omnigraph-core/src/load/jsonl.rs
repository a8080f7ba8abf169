//! The JSONL / NDJSON load format: one node or edge envelope per line.
//!
//! ```text
//! {"type": "Person", "data": {"name": "Alice", "age": 30}}
//! {"edge": "Knows", "from": "Alice", "to": "Bob", "data": {"since": "2020-01-01"}}
//! ```
//!
//! [`JsonlParser::parse_line`] checks one line against the catalog and
//! returns a [`LoadRecord`] with its id settled (derived from `@key`,
//! checked against `data.id`, or generated). Every error is
//! [`OmniError::BadRequest`] starting with `line N: `. Value types are
//! checked here (with line numbers); nullability, enum membership and the
//! other constraints are checked by [`crate::validate`].

use crate::lang::catalog::arrow::property_field;
use crate::lang::catalog::{Catalog, EdgeType, NodeType, Property};
use crate::protocol::OmniError;
use crate::rows::{EntityRow, check_value, show};
use rayon::prelude::*;
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::io::BufRead;

/// Lines read and parsed at a time by [`JsonlParser::parse_reader_parallel`].
pub const PARALLEL_LINES: usize = 4_096;

/// Ids with the line each was first seen on. foldhash is seeded per process
/// (ids come from users) and several times faster than SipHash on short keys.
pub type IdLines = HashMap<String, usize, foldhash::fast::RandomState>;

/// System column names that may never appear in `data`.
pub const RESERVED_COLUMNS: [&str; 6] =
    ["_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version", "_tombstone"];

/// One parsed line.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadRecord {
    /// A node line.
    Node {
        /// The node type, as declared.
        type_name: String,
        /// The settled id (also `row.id`).
        id: String,
        /// The row (`src`/`dst` unset).
        row: EntityRow,
        /// The id is a fresh ULID minted here (an unkeyed node without
        /// `data.id`): no other line and no committed row can hold it.
        minted: bool,
    },
    /// An edge line.
    Edge {
        /// The canonical (declared) edge type name.
        edge_name: String,
        /// The row: `src` = `from`, `dst` = `to`.
        row: EntityRow,
        /// The id is a fresh ULID minted here (no `data.id`): no other line
        /// and no committed row can hold it.
        minted: bool,
    },
}

impl LoadRecord {
    /// The node or edge type name.
    pub fn type_name(&self) -> &str {
        match self {
            LoadRecord::Node { type_name, .. } => type_name,
            LoadRecord::Edge { edge_name, .. } => edge_name,
        }
    }

    /// The row.
    pub fn row(&self) -> &EntityRow {
        match self {
            LoadRecord::Node { row, .. } | LoadRecord::Edge { row, .. } => row,
        }
    }

    /// Whether the id was minted by the parser (a fresh ULID) rather than
    /// given or derived from `@key`.
    pub fn minted(&self) -> bool {
        match self {
            LoadRecord::Node { minted, .. } | LoadRecord::Edge { minted, .. } => *minted,
        }
    }

    /// The row, by value.
    pub fn into_row(self) -> EntityRow {
        match self {
            LoadRecord::Node { row, .. } | LoadRecord::Edge { row, .. } => row,
        }
    }

    /// Whether this is an edge.
    pub fn is_edge(&self) -> bool {
        matches!(self, LoadRecord::Edge { .. })
    }
}

/// A JSON value parsed with duplicate object members refused (serde_json
/// on its own silently keeps the last one).
struct StrictValue(Value);

impl<'de> Deserialize<'de> for StrictValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v).map(Value::Number).ok_or_else(|| E::custom("non-finite number"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        StrictValue::deserialize(deserializer).map(|v| v.0)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate JSON member `{key}`")));
            }
            let StrictValue(v) = map.next_value()?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

/// Parses one JSON text, refusing duplicate members at any depth and
/// trailing garbage.
pub fn parse_strict_json(text: &str) -> Result<Value, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let StrictValue(value) = StrictValue::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Checks JSONL lines against a catalog.
#[derive(Debug, Clone)]
///
/// The parser is stateful: it remembers every (type, id) it returned and
/// refuses a repeat within the same load (see [`DuplicateIds`]).
pub struct JsonlParser<'c> {
    catalog: &'c Catalog,
    max_line_bytes: Option<usize>,
    seen: DuplicateIds,
}

fn bad(line_no: usize, msg: impl fmt::Display) -> OmniError {
    OmniError::BadRequest(format!("line {line_no}: {msg}"))
}

impl<'c> JsonlParser<'c> {
    /// A parser for files loaded into `catalog`'s graph.
    pub fn new(catalog: &'c Catalog) -> Self {
        JsonlParser { catalog, max_line_bytes: None, seen: DuplicateIds::new() }
    }

    /// Refuse lines longer than `limit` bytes with
    /// [`OmniError::ResourceLimitExceeded`] (no limit by default).
    pub fn with_max_line_bytes(mut self, limit: usize) -> Self {
        self.max_line_bytes = Some(limit);
        self
    }

    /// The catalog lines are checked against.
    pub fn catalog(&self) -> &'c Catalog {
        self.catalog
    }

    /// The ids returned so far, per type.
    pub fn seen_ids(&self) -> &DuplicateIds {
        &self.seen
    }

    /// The ids returned, per type, by value: a loader keeps this one set
    /// instead of building a second copy of every id.
    pub fn into_seen_ids(self) -> DuplicateIds {
        self.seen
    }

    /// Parses line `line_no` (1-based, used in messages). Blank lines give
    /// `Ok(None)`. A (type, id) already returned by this parser is refused
    /// as a duplicate.
    pub fn parse_line(&mut self, line_no: usize, line: &str) -> Result<Option<LoadRecord>, OmniError> {
        let record = self.parse_line_unchecked(line_no, line)?;
        if let Some(record) = &record {
            self.seen.check_record(line_no, record)?;
        }
        Ok(record)
    }

    /// [`JsonlParser::parse_line`] without the duplicate-id check (for
    /// callers that track duplicates themselves).
    pub fn parse_line_unchecked(&self, line_no: usize, line: &str) -> Result<Option<LoadRecord>, OmniError> {
        let line = line.strip_prefix('\u{feff}').unwrap_or(line);
        if line.trim().is_empty() {
            return Ok(None);
        }
        if let Some(limit) = self.max_line_bytes
            && line.len() > limit
        {
            return Err(OmniError::ResourceLimitExceeded {
                resource: format!("line {line_no} length in bytes"),
                limit: u64::try_from(limit).unwrap_or(u64::MAX),
                actual: u64::try_from(line.len()).unwrap_or(u64::MAX),
            });
        }
        let value = parse_strict_json(line).map_err(|e| bad(line_no, format!("invalid JSON: {e}")))?;
        let Value::Object(envelope) = value else {
            return Err(bad(line_no, format!("expected a JSON object, got {}", show(&value))));
        };
        match (envelope.contains_key("type"), envelope.contains_key("edge")) {
            (true, true) => Err(bad(line_no, "a line must have exactly one of `type` or `edge`, not both")),
            (false, false) => Err(bad(line_no, "a line must have exactly one of `type` (node) or `edge` (edge)")),
            (true, false) => self.node_line(line_no, envelope).map(Some),
            (false, true) => self.edge_line(line_no, envelope).map(Some),
        }
    }

    /// Parses every line of `reader`, numbering lines from 1 and skipping
    /// blank ones. A read error (e.g. invalid UTF-8) is reported for its
    /// line; an I/O error ends the iteration after being reported.
    pub fn parse_reader<'p, R: BufRead + 'p>(
        &'p mut self,
        reader: R,
    ) -> impl Iterator<Item = Result<LoadRecord, OmniError>> + 'p {
        self.parse_reader_numbered(reader).map(|r| r.map(|(_, record)| record))
    }

    /// [`Self::parse_reader_numbered`], parsing [`PARALLEL_LINES`] lines at a
    /// time on rayon's pool: the same records, in the same order, and the same
    /// first error (lines are checked for duplicates one by one, in order).
    pub fn parse_reader_parallel<'p, R: BufRead + 'p>(
        &'p mut self,
        reader: R,
    ) -> impl Iterator<Item = Result<(usize, LoadRecord), OmniError>> + 'p {
        let mut lines = reader.lines().enumerate();
        let mut ready: VecDeque<Result<(usize, LoadRecord), OmniError>> = VecDeque::new();
        let mut done = false;
        std::iter::from_fn(move || {
            while ready.is_empty() && !done {
                let mut slots: Vec<(usize, Result<String, OmniError>)> = Vec::with_capacity(PARALLEL_LINES);
                while slots.len() < PARALLEL_LINES {
                    let Some((index, line)) = lines.next() else {
                        done = true;
                        break;
                    };
                    let line_no = index + 1;
                    // An I/O error ends the input; invalid UTF-8 is one bad line.
                    let fatal = matches!(&line, Err(e) if e.kind() != std::io::ErrorKind::InvalidData);
                    slots.push((line_no, line.map_err(|e| read_error(line_no, &e))));
                    if fatal {
                        done = true;
                        break;
                    }
                }
                let parser = &*self;
                let parsed: Vec<(usize, Result<Option<LoadRecord>, OmniError>)> = slots
                    .into_par_iter()
                    .map(|(n, text)| (n, text.and_then(|t| parser.parse_line_unchecked(n, &t))))
                    .collect();
                for (line_no, result) in parsed {
                    let checked = match result {
                        Ok(None) => continue,
                        Ok(Some(record)) => self.seen.check_record(line_no, &record).map(|()| (line_no, record)),
                        Err(e) => Err(e),
                    };
                    ready.push_back(checked);
                }
            }
            ready.pop_front()
        })
    }

    /// [`Self::parse_reader`], each record with its 1-based line number (so
    /// later checks can name the line too).
    pub fn parse_reader_numbered<'p, R: BufRead + 'p>(
        &'p mut self,
        reader: R,
    ) -> impl Iterator<Item = Result<(usize, LoadRecord), OmniError>> + 'p {
        let mut lines = reader.lines().enumerate();
        let mut done = false;
        std::iter::from_fn(move || {
            while !done {
                let (index, line) = lines.next()?;
                let line_no = index + 1;
                match line {
                    Ok(text) => match self.parse_line(line_no, &text) {
                        Ok(None) => continue,
                        Ok(Some(record)) => return Some(Ok((line_no, record))),
                        Err(e) => return Some(Err(e)),
                    },
                    Err(e) => {
                        done = e.kind() != std::io::ErrorKind::InvalidData;
                        return Some(Err(read_error(line_no, &e)));
                    }
                }
            }
            None
        })
    }

    fn node_line(&self, line_no: usize, envelope: Map<String, Value>) -> Result<LoadRecord, OmniError> {
        check_top_keys(line_no, &envelope, &["type", "data"], "node")?;
        let type_name = required_string(line_no, &envelope, "type")?;
        let node = self.catalog.node(type_name).ok_or_else(|| {
            let hint = if self.catalog.edge_ci(type_name).is_some() {
                " (it is an edge type: write `\"edge\"`, `\"from\"` and `\"to\"`)"
            } else {
                ""
            };
            bad(line_no, format!("unknown node type `{type_name}`{hint}"))
        })?;
        let data = data_object(line_no, &envelope)?;
        let given_id = data_id(line_no, data)?;
        let props = read_props(line_no, &node.name, &node.properties, data, false)?;
        let minted = node.key.is_empty() && given_id.is_none();
        let id = node_id(line_no, node, &props, given_id)?;
        let row = EntityRow { id: id.clone(), src: None, dst: None, props };
        Ok(LoadRecord::Node { type_name: node.name.clone(), id, row, minted })
    }

    fn edge_line(&self, line_no: usize, envelope: Map<String, Value>) -> Result<LoadRecord, OmniError> {
        check_top_keys(line_no, &envelope, &["edge", "from", "to", "data"], "edge")?;
        let name = required_string(line_no, &envelope, "edge")?;
        let edge: &EdgeType = self.catalog.edge_ci(name).ok_or_else(|| {
            let hint = if self.catalog.node(name).is_some() { " (it is a node type: write `\"type\"`)" } else { "" };
            bad(line_no, format!("unknown edge type `{name}`{hint}"))
        })?;
        let from = endpoint(line_no, &envelope, "from", &edge.name)?;
        let to = endpoint(line_no, &envelope, "to", &edge.name)?;
        let data = data_object(line_no, &envelope)?;
        let given_id = data_id(line_no, data)?;
        let props = read_props(line_no, &edge.name, &edge.properties, data, true)?;
        let minted = given_id.is_none();
        let id = given_id.map_or_else(generate_id, str::to_string);
        let row = EntityRow { id, src: Some(from), dst: Some(to), props };
        Ok(LoadRecord::Edge { edge_name: edge.name.clone(), row, minted })
    }
}

/// A line that could not be read: invalid UTF-8 (the next lines are still
/// read) or an I/O error, which ends the input.
fn read_error(line_no: usize, e: &std::io::Error) -> OmniError {
    if e.kind() == std::io::ErrorKind::InvalidData {
        bad(line_no, "is not valid UTF-8")
    } else {
        bad(line_no, format!("cannot read: {e}"))
    }
}

/// A fresh ULID string, for unkeyed nodes and edges without `data.id`.
pub fn generate_id() -> String {
    ulid::Ulid::new().to_string()
}

fn check_top_keys(
    line_no: usize,
    envelope: &Map<String, Value>,
    allowed: &[&str],
    kind: &str,
) -> Result<(), OmniError> {
    match envelope.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(bad(
            line_no,
            format!("unexpected top-level key `{key}` in a {kind} line (allowed: {})", allowed.join(", ")),
        )),
        None => Ok(()),
    }
}

fn required_string<'v>(line_no: usize, envelope: &'v Map<String, Value>, key: &str) -> Result<&'v str, OmniError> {
    match envelope.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(bad(line_no, format!("`{key}` must be a string, got {}", show(other)))),
        None => Err(bad(line_no, format!("missing `{key}`"))),
    }
}

fn endpoint(line_no: usize, envelope: &Map<String, Value>, key: &str, edge: &str) -> Result<String, OmniError> {
    match envelope.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(bad(line_no, format!("edge `{edge}`: `{key}` must be a non-empty node id"))),
        Some(other) => {
            Err(bad(line_no, format!("edge `{edge}`: `{key}` must be a node id string, got {}", show(other))))
        }
        None => Err(bad(line_no, format!("edge `{edge}`: missing required `{key}` (the endpoint node id)"))),
    }
}

fn data_object(line_no: usize, envelope: &Map<String, Value>) -> Result<Option<&Map<String, Value>>, OmniError> {
    match envelope.get("data") {
        None => Ok(None),
        Some(Value::Object(data)) => Ok(Some(data)),
        Some(other) => Err(bad(line_no, format!("`data` must be a JSON object, got {}", show(other)))),
    }
}

fn data_id(line_no: usize, data: Option<&Map<String, Value>>) -> Result<Option<&str>, OmniError> {
    match data.and_then(|d| d.get("id")) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s)),
        Some(Value::String(_)) => Err(bad(line_no, "`data.id` must be a non-empty string")),
        Some(other) => Err(bad(line_no, format!("`data.id` must be a string, got {}", show(other)))),
    }
}

/// The declared properties in `data` (everything but `id`), type-checked.
fn read_props(
    line_no: usize,
    owner: &str,
    declared: &[Property],
    data: Option<&Map<String, Value>>,
    is_edge: bool,
) -> Result<BTreeMap<String, Value>, OmniError> {
    let mut props = BTreeMap::new();
    for (key, value) in data.into_iter().flatten() {
        if key == "id" {
            continue;
        }
        if RESERVED_COLUMNS.contains(&key.as_str()) {
            return Err(bad(line_no, format!("`data.{key}` is a reserved system column and cannot be loaded")));
        }
        if is_edge && (key == "src" || key == "dst") {
            let which = if key == "src" { "from" } else { "to" };
            return Err(bad(
                line_no,
                format!("`data.{key}` is reserved on edges; give the endpoint as the top-level `{which}`"),
            ));
        }
        let Some(prop) = declared.iter().find(|p| &p.name == key) else {
            return Err(bad(line_no, format!("unknown property `{key}` for type `{owner}`")));
        };
        let field = property_field(prop);
        check_value(field.data_type(), value)
            .map_err(|e| bad(line_no, format!("type `{owner}`, property `{key}`: {e}")))?;
        props.insert(key.clone(), value.clone());
    }
    Ok(props)
}

/// Settles a node's id: derived from `@key` (and checked against a given
/// `data.id`), else the given id, else a fresh ULID.
fn node_id(
    line_no: usize,
    node: &NodeType,
    props: &BTreeMap<String, Value>,
    given: Option<&str>,
) -> Result<String, OmniError> {
    if node.key.is_empty() {
        return Ok(given.map_or_else(generate_id, str::to_string));
    }
    let mut key_values = Vec::with_capacity(node.key.len());
    for name in &node.key {
        match props.get(name) {
            Some(v) if !v.is_null() => key_values.push((name.clone(), v.clone())),
            Some(_) => {
                return Err(bad(line_no, format!("type `{}`: key property `{name}` cannot be null", node.name)));
            }
            None => {
                return Err(bad(line_no, format!("type `{}`: missing key property `{name}`", node.name)));
            }
        }
    }
    let derived = node
        .derive_id(&key_values)
        .map_err(|e| bad(line_no, format!("type `{}`: cannot derive id: {e}", node.name)))?;
    match given {
        Some(id) if id != derived => Err(bad(
            line_no,
            format!(
                "type `{}`: `data.id` `{id}` does not match the id `{derived}` derived from @key({})",
                node.name,
                node.key.join(", ")
            ),
        )),
        _ => Ok(derived),
    }
}

/// Detects the same (type, id) twice within one load: a duplicate key in
/// one batch is an error (across separate loads the last write wins).
#[derive(Debug, Default, Clone)]
pub struct DuplicateIds {
    seen: HashMap<String, IdLines>,
    /// Per type, how many minted ids were returned: fresh ULIDs cannot
    /// repeat, so they are counted, not kept (a million kept ids cost
    /// ~85 MB).
    minted: HashMap<String, usize>,
}

impl DuplicateIds {
    /// An empty detector.
    pub fn new() -> Self {
        DuplicateIds::default()
    }

    /// Records `id` of `type_name` seen on `line_no`; errors if it was
    /// already seen.
    pub fn check(&mut self, line_no: usize, type_name: &str, id: &str) -> Result<(), OmniError> {
        // The type's map exists after its first id: no key allocation per line.
        let ids = match self.seen.get_mut(type_name) {
            Some(ids) => ids,
            None => self.seen.entry(type_name.to_string()).or_default(),
        };
        match ids.entry(id.to_string()) {
            Entry::Occupied(first) => Err(bad(
                line_no,
                format!("duplicate id `{id}` for type {type_name} (first seen on line {})", first.get()),
            )),
            Entry::Vacant(slot) => {
                slot.insert(line_no);
                Ok(())
            }
        }
    }

    /// [`DuplicateIds::check`] for a parsed record; a minted id is only counted.
    pub fn check_record(&mut self, line_no: usize, record: &LoadRecord) -> Result<(), OmniError> {
        if record.minted() {
            match self.minted.get_mut(record.type_name()) {
                Some(n) => *n += 1,
                None => {
                    self.minted.insert(record.type_name().to_string(), 1);
                }
            }
            return Ok(());
        }
        self.check(line_no, record.type_name(), &record.row().id)
    }

    /// How many distinct ids were recorded for `type_name`, minted ones included.
    pub fn count(&self, type_name: &str) -> usize {
        self.seen.get(type_name).map_or(0, HashMap::len) + self.minted.get(type_name).copied().unwrap_or(0)
    }

    /// Take `type_name`'s given (not minted) ids, each with the line it was first seen on.
    pub fn take(&mut self, type_name: &str) -> IdLines {
        self.seen.remove(type_name).unwrap_or_default()
    }
}
