//! The three-way row rule of branch merge, and the conflicts it reports.
//!
//! Each entity is compared by `id` across the merge base, the source head and
//! the target head. A side *changed* the entity when its row (or its absence)
//! differs from the base's:
//!
//! | source changed | target changed | result |
//! |---|---|---|
//! | no | any | keep the target's row |
//! | yes | no | take the source's row (or delete) |
//! | yes | yes, to the same row | keep the target's row |
//! | yes | yes, differently | conflict |
//!
//! A conflict's kind follows from which sides hold the entity: inserted on
//! both sides is [`ConflictKind::DivergentInsert`], deleted on one and updated
//! on the other is [`ConflictKind::DeleteVsUpdate`], anything else is
//! [`ConflictKind::DivergentUpdate`]. The other kinds come from validating the
//! merged result (the storage crate's merge planner).

use serde::{Deserialize, Serialize};

/// Why a merge cannot be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictKind {
    /// The same id was inserted on both sides with different values.
    DivergentInsert,
    /// The same entity was updated differently on both sides.
    DivergentUpdate,
    /// One side deleted an entity the other updated.
    DeleteVsUpdate,
    /// A merged edge points at a node the merged graph does not hold.
    OrphanEdge,
    /// The merged rows break a `@unique` set.
    UniqueViolation,
    /// The merged edges break an edge type's `@card` bound.
    CardinalityViolation,
    /// A merged row breaks an enum, `@range` or `@check` rule.
    ValueConstraintViolation,
}

impl ConflictKind {
    /// The wire name (`divergent_insert`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            ConflictKind::DivergentInsert => "divergent_insert",
            ConflictKind::DivergentUpdate => "divergent_update",
            ConflictKind::DeleteVsUpdate => "delete_vs_update",
            ConflictKind::OrphanEdge => "orphan_edge",
            ConflictKind::UniqueViolation => "unique_violation",
            ConflictKind::CardinalityViolation => "cardinality_violation",
            ConflictKind::ValueConstraintViolation => "value_constraint_violation",
        }
    }
}

/// One reason a merge cannot be applied, as clients read it. On the wire
/// it carries `type` and `id` (this project's names) beside the
/// reference's `type_name` and `entity_id`, so clients of either read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "WireConflict", from = "WireConflict")]
pub struct MergeConflict {
    /// `node:<Type>` / `edge:<Type>`.
    pub type_key: String,
    /// `node` or `edge`.
    pub entity_kind: String,
    /// The node or edge type.
    pub type_name: String,
    /// The entity, when the conflict is about one.
    pub entity_id: Option<String>,
    /// What kind of conflict.
    pub kind: ConflictKind,
    /// What happened, for a person.
    pub message: String,
    /// The property two sides set differently (a divergent update names
    /// one conflict per such property).
    pub property: Option<String>,
    /// The entity (or `property`'s value) at the merge base; null where
    /// absent. Row conflicts carry `base`, `ours` and `theirs`.
    pub base: Option<serde_json::Value>,
    /// The same on the target (the branch merged into).
    pub ours: Option<serde_json::Value>,
    /// The same on the source (the branch merged).
    pub theirs: Option<serde_json::Value>,
    /// The rows behind a conflict found by validating the merged result
    /// (an orphaned edge, the two rows sharing a `@unique` value, a
    /// node's edges past its `@card`, a row breaking a rule), as the
    /// merged graph would hold them; empty for row conflicts.
    pub rows: Vec<serde_json::Value>,
}

/// [`MergeConflict`]'s JSON: both spellings of the type and the id.
#[derive(Serialize, Deserialize)]
struct WireConflict {
    kind: ConflictKind,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    #[serde(default)]
    type_key: String,
    #[serde(default)]
    entity_kind: String,
    #[serde(default)]
    type_name: String,
    #[serde(default)]
    entity_id: Option<String>,
    #[serde(default)]
    message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    property: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ours: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    theirs: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rows: Vec<serde_json::Value>,
}

impl From<MergeConflict> for WireConflict {
    fn from(c: MergeConflict) -> Self {
        WireConflict {
            kind: c.kind,
            type_: Some(c.type_name.clone()),
            id: c.entity_id.clone(),
            type_key: c.type_key,
            entity_kind: c.entity_kind,
            type_name: c.type_name,
            entity_id: c.entity_id,
            message: c.message,
            property: c.property,
            base: c.base,
            ours: c.ours,
            theirs: c.theirs,
            rows: c.rows,
        }
    }
}

impl From<WireConflict> for MergeConflict {
    fn from(w: WireConflict) -> Self {
        let type_name = if w.type_name.is_empty() { w.type_.unwrap_or_default() } else { w.type_name };
        let entity_kind = if w.entity_kind.is_empty() { "node".to_string() } else { w.entity_kind };
        let type_key = if w.type_key.is_empty() { format!("{entity_kind}:{type_name}") } else { w.type_key };
        MergeConflict {
            type_key,
            entity_kind,
            type_name,
            entity_id: w.entity_id.or(w.id),
            kind: w.kind,
            message: w.message,
            property: w.property,
            base: w.base,
            ours: w.ours,
            theirs: w.theirs,
            rows: w.rows,
        }
    }
}

impl MergeConflict {
    /// What orders conflicts: type, entity, kind, property, message.
    fn order_key(&self) -> (&str, Option<&str>, ConflictKind, Option<&str>, &str) {
        (&self.type_key, self.entity_id.as_deref(), self.kind, self.property.as_deref(), &self.message)
    }

    /// This conflict with its values: `property` (a divergent update's),
    /// and the base's, the target's and the source's entity or value.
    pub fn with_values(
        mut self,
        property: Option<String>,
        base: serde_json::Value,
        ours: serde_json::Value,
        theirs: serde_json::Value,
    ) -> MergeConflict {
        self.property = property;
        (self.base, self.ours, self.theirs) = (Some(base), Some(ours), Some(theirs));
        self
    }

    /// This conflict with the rows behind it (see [`MergeConflict::rows`]).
    pub fn with_rows(mut self, rows: Vec<serde_json::Value>) -> MergeConflict {
        self.rows = rows;
        self
    }
}

impl PartialOrd for MergeConflict {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MergeConflict {
    // Values break ties by their JSON text, so the order agrees with `==`.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let values =
            |c: &MergeConflict| serde_json::to_string(&(&c.base, &c.ours, &c.theirs, &c.rows)).unwrap_or_default();
        self.order_key().cmp(&other.order_key()).then_with(|| values(self).cmp(&values(other)))
    }
}

impl MergeConflict {
    /// A conflict on `type_key` (`node:T` / `edge:T`).
    pub fn new(type_key: &str, entity_id: Option<&str>, kind: ConflictKind, message: impl Into<String>) -> Self {
        let (entity_kind, type_name) = type_key.split_once(':').unwrap_or(("node", type_key));
        MergeConflict {
            type_key: type_key.to_string(),
            entity_kind: entity_kind.to_string(),
            type_name: type_name.to_string(),
            entity_id: entity_id.map(str::to_string),
            kind,
            message: message.into(),
            property: None,
            base: None,
            ours: None,
            theirs: None,
            rows: Vec::new(),
        }
    }
}

/// A refused merge's conflicts as a client reads them: one page, with the
/// counts of all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictSet {
    /// This page's conflicts, in order.
    pub conflicts: Vec<MergeConflict>,
    /// Counts per type and kind over all of them.
    pub stat: Vec<ConflictCount>,
    /// Where the next page starts, when one remains.
    pub next_page_token: Option<String>,
}

/// How many conflicts of one kind one type has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictCount {
    /// The node or edge type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// `node` or `edge`.
    pub entity_kind: String,
    /// The kind of conflict.
    pub kind: ConflictKind,
    /// How many.
    pub count: usize,
}

/// Where a page of conflicts resumes: after the conflict with this order key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictCursor {
    type_key: String,
    entity_id: Option<String>,
    kind: ConflictKind,
    message: String,
}

impl ConflictCursor {
    fn of(c: &MergeConflict) -> ConflictCursor {
        ConflictCursor {
            type_key: c.type_key.clone(),
            entity_id: c.entity_id.clone(),
            kind: c.kind,
            message: c.message.clone(),
        }
    }

    fn key(&self) -> (&str, Option<&str>, ConflictKind, Option<&str>, &str) {
        (&self.type_key, self.entity_id.as_deref(), self.kind, None, &self.message)
    }
}

impl ConflictSet {
    /// How many conflicts there are in all (the sum of `stat`), counted
    /// before a divergent update is listed once per property.
    pub fn total(&self) -> usize {
        self.stat.iter().map(|c| c.count).sum()
    }

    /// Counts per type and kind of `all`, by type then kind.
    pub fn count(all: &[MergeConflict]) -> Vec<ConflictCount> {
        let mut counts: std::collections::BTreeMap<(&str, ConflictKind), (&str, usize)> = Default::default();
        for c in all {
            counts.entry((&c.type_key, c.kind)).or_insert((&c.entity_kind, 0)).1 += 1;
        }
        counts
            .into_iter()
            .map(|((key, kind), (entity_kind, count))| ConflictCount {
                type_name: key.split_once(':').map_or(key, |(_, n)| n).to_string(),
                entity_kind: entity_kind.to_string(),
                kind,
                count,
            })
            .collect()
    }

    /// At most `limit` of `all` (valueless, in order) after `after`, and
    /// the cursor of the page that follows them when any remain.
    pub fn page(
        all: &[MergeConflict],
        after: Option<&ConflictCursor>,
        limit: usize,
    ) -> (Vec<MergeConflict>, Option<ConflictCursor>) {
        let start = after.map_or(0, |a| all.partition_point(|c| c.order_key() <= a.key()));
        let page: Vec<MergeConflict> = all.iter().skip(start).take(limit).cloned().collect();
        let next = page.last().filter(|_| start + page.len() < all.len()).map(ConflictCursor::of);
        (page, next)
    }
}

/// How a merge decides its row conflicts (`divergent_insert`,
/// `divergent_update`, `delete_vs_update`). Conflicts found by validating
/// the merged result are never decided: they refuse the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergeStrategy {
    /// Refuse the merge on any conflict.
    #[default]
    Fail,
    /// The target's side wins (the branch merged into).
    Ours,
    /// The source's side wins (the branch merged).
    Theirs,
}

impl MergeStrategy {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            MergeStrategy::Fail => "fail",
            MergeStrategy::Ours => "ours",
            MergeStrategy::Theirs => "theirs",
        }
    }
}

impl std::str::FromStr for MergeStrategy {
    type Err = crate::protocol::OmniError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fail" => Ok(MergeStrategy::Fail),
            "ours" => Ok(MergeStrategy::Ours),
            "theirs" => Ok(MergeStrategy::Theirs),
            other => Err(crate::protocol::OmniError::BadRequest(format!(
                "unknown merge strategy `{other}`: expected fail, ours or theirs"
            ))),
        }
    }
}

/// A merge policy declared in the schema (`@merge(…)` on a type or a
/// property): how a merge given no strategy decides the conflicts there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MergePolicy {
    /// The target's side.
    Ours,
    /// The source's side.
    Theirs,
    /// The side whose head commit was authored later (a tie: the target's).
    Newest,
    /// Refuse the merge (as with no policy).
    Fail,
}

impl std::str::FromStr for MergePolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ours" => Ok(MergePolicy::Ours),
            "theirs" => Ok(MergePolicy::Theirs),
            "newest" => Ok(MergePolicy::Newest),
            "fail" => Ok(MergePolicy::Fail),
            other => Err(format!("unknown merge policy `{other}`")),
        }
    }
}

impl MergePolicy {
    /// The strategy this policy is in one merge, given whether the source's
    /// head was authored after the target's.
    pub fn strategy(self, source_is_newer: bool) -> MergeStrategy {
        match self {
            MergePolicy::Ours => MergeStrategy::Ours,
            MergePolicy::Theirs => MergeStrategy::Theirs,
            MergePolicy::Newest if source_is_newer => MergeStrategy::Theirs,
            MergePolicy::Newest => MergeStrategy::Ours,
            MergePolicy::Fail => MergeStrategy::Fail,
        }
    }
}

/// What a strategy makes of one row conflict.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// The target's row (or its absence) stands.
    Keep,
    /// Write this row: over the target's, or as a new one where the target
    /// has none.
    Write(crate::rows::EntityRow),
    /// Delete the target's row.
    Delete,
}

/// Decide one row conflict of `kind` under `strategy` (`None` for
/// [`MergeStrategy::Fail`]), from the entity at the base, the source and
/// the target (`None` = absent there). An insert or delete kind goes to
/// the chosen side whole; a divergent update is merged property by
/// property: a property one side changed takes that change, and one both
/// changed differently takes the chosen side's value (an edge's endpoints
/// count as one property).
pub fn decide(
    kind: ConflictKind,
    strategy: MergeStrategy,
    base: Option<&crate::rows::EntityRow>,
    source: Option<&crate::rows::EntityRow>,
    target: Option<&crate::rows::EntityRow>,
) -> Option<Decision> {
    let theirs = match strategy {
        MergeStrategy::Fail => return None,
        MergeStrategy::Ours => false,
        MergeStrategy::Theirs => true,
    };
    let decision = match (source, target) {
        (Some(s), Some(t)) if kind == ConflictKind::DivergentUpdate => match base {
            Some(b) => write_unless_same(merge_properties(b, s, t, theirs), t),
            None => write_unless_same(if theirs { s.clone() } else { t.clone() }, t),
        },
        (Some(s), Some(t)) => write_unless_same(if theirs { s.clone() } else { t.clone() }, t),
        (Some(s), None) if theirs => Decision::Write(s.clone()),
        (None, Some(_)) if theirs => Decision::Delete,
        _ => Decision::Keep,
    };
    Some(decision)
}

fn write_unless_same(row: crate::rows::EntityRow, target: &crate::rows::EntityRow) -> Decision {
    if &row == target { Decision::Keep } else { Decision::Write(row) }
}

/// The three-way merge of one entity's properties (see [`decide`]).
pub fn merge_properties(
    base: &crate::rows::EntityRow,
    source: &crate::rows::EntityRow,
    target: &crate::rows::EntityRow,
    theirs: bool,
) -> crate::rows::EntityRow {
    let side = if theirs { Pick::Theirs } else { Pick::Ours };
    let merged = merge_properties_by(base, source, target, |_| Ok::<_, std::convert::Infallible>(side.clone()));
    match merged {
        Ok(row) => row,
        Err(never) => match never {},
    }
}

/// The value a property takes when both sides changed it differently.
#[derive(Debug, Clone, PartialEq)]
pub enum Pick {
    /// The target's value.
    Ours,
    /// The source's value.
    Theirs,
    /// The merge base's value.
    Base,
    /// This value (an edge's `endpoints`: `{from, to}`).
    Value(serde_json::Value),
}

/// The name an edge's ends go by, as one property.
pub const ENDPOINTS: &str = "endpoints";

/// The properties (and `endpoints`) both sides changed differently.
pub fn conflicting_properties(
    base: &crate::rows::EntityRow,
    source: &crate::rows::EntityRow,
    target: &crate::rows::EntityRow,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let _ = merge_properties_by(base, source, target, |p| {
        out.push(p.to_string());
        Ok::<_, std::convert::Infallible>(Pick::Ours)
    });
    out
}

/// [`merge_properties`] with `both` naming the value of each property both
/// sides changed differently (an error from it stops the merge).
pub fn merge_properties_by<E>(
    base: &crate::rows::EntityRow,
    source: &crate::rows::EntityRow,
    target: &crate::rows::EntityRow,
    mut both: impl FnMut(&str) -> Result<Pick, E>,
) -> Result<crate::rows::EntityRow, E> {
    use serde_json::Value;
    /// `Some(t or s)` where one side's change decides, `None` where both conflict.
    fn settled<V: PartialEq + Clone>(b: &V, s: &V, t: &V) -> Option<V> {
        if s == b || s == t {
            Some(t.clone())
        } else if t == b {
            Some(s.clone())
        } else {
            None
        }
    }
    let mut merged = target.clone();
    let names: std::collections::BTreeSet<&String> =
        base.props.keys().chain(source.props.keys()).chain(target.props.keys()).collect();
    for name in names {
        let at = |r: &crate::rows::EntityRow| r.props.get(name).cloned().unwrap_or(Value::Null);
        let (b, s, t) = (at(base), at(source), at(target));
        let value = match settled(&b, &s, &t) {
            Some(v) => v,
            None => match both(name)? {
                Pick::Ours => t,
                Pick::Theirs => s,
                Pick::Base => b,
                Pick::Value(v) => v,
            },
        };
        merged.props.insert(name.clone(), value);
    }
    let ends = |r: &crate::rows::EntityRow| (r.src.clone(), r.dst.clone());
    let (b, s, t) = (ends(base), ends(source), ends(target));
    (merged.src, merged.dst) = match settled(&b, &s, &t) {
        Some(e) => e,
        None => match both(ENDPOINTS)? {
            Pick::Ours => t,
            Pick::Theirs => s,
            Pick::Base => b,
            Pick::Value(v) => {
                let end = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
                (end("from"), end("to"))
            }
        },
    };
    Ok(merged)
}

/// What the merge does with one entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowChoice {
    /// The target already holds the merged row.
    Keep,
    /// Write the source's row over (or beside) the target's.
    TakeSource,
    /// Delete the target's row (the source deleted it).
    Delete,
    /// Both sides changed it differently.
    Conflict(ConflictKind),
}

/// The merge of one entity, given a fingerprint of its row on each side
/// (`None` = absent there). Equal fingerprints mean equal rows.
pub fn choose<F: PartialEq>(base: Option<&F>, source: Option<&F>, target: Option<&F>) -> RowChoice {
    let source_changed = source != base;
    let target_changed = target != base;
    if !source_changed || source == target {
        return RowChoice::Keep;
    }
    if !target_changed {
        return if source.is_none() { RowChoice::Delete } else { RowChoice::TakeSource };
    }
    let kind = match (base.is_some(), source.is_some(), target.is_some()) {
        (false, true, true) => ConflictKind::DivergentInsert,
        (true, false, true) | (true, true, false) => ConflictKind::DeleteVsUpdate,
        _ => ConflictKind::DivergentUpdate,
    };
    RowChoice::Conflict(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of one entity's states: absent, or one of two values.
    #[test]
    fn the_row_rule_over_every_state_combination() {
        let states = [None, Some(1), Some(2)];
        for b in states {
            for s in states {
                for t in states {
                    let got = choose(b.as_ref(), s.as_ref(), t.as_ref());
                    let expected = if s == b || s == t {
                        RowChoice::Keep
                    } else if t == b {
                        if s.is_none() { RowChoice::Delete } else { RowChoice::TakeSource }
                    } else if b.is_none() {
                        RowChoice::Conflict(ConflictKind::DivergentInsert)
                    } else if s.is_none() || t.is_none() {
                        RowChoice::Conflict(ConflictKind::DeleteVsUpdate)
                    } else {
                        RowChoice::Conflict(ConflictKind::DivergentUpdate)
                    };
                    assert_eq!(got, expected, "base {b:?} source {s:?} target {t:?}");
                }
            }
        }
    }

    #[test]
    fn named_cells() {
        // Inserted on both sides, differently.
        assert_eq!(choose(None, Some(&1), Some(&2)), RowChoice::Conflict(ConflictKind::DivergentInsert));
        // Inserted on both sides, equally: nothing to do.
        assert_eq!(choose(None, Some(&1), Some(&1)), RowChoice::Keep);
        // Deleted on both sides: idempotent.
        assert_eq!(choose(Some(&1), None, None), RowChoice::Keep);
        // Deleted by the source only.
        assert_eq!(choose(Some(&1), None, Some(&1)), RowChoice::Delete);
        // Deleted by the target, updated by the source.
        assert_eq!(choose(Some(&1), Some(&2), None), RowChoice::Conflict(ConflictKind::DeleteVsUpdate));
        // A source-only insert.
        assert_eq!(choose(None, Some(&1), None), RowChoice::TakeSource);
    }

    #[test]
    fn conflict_names_on_the_wire() {
        let c = MergeConflict::new("edge:Knows", Some("e1"), ConflictKind::OrphanEdge, "dangling");
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["kind"], "orphan_edge");
        assert_eq!(v["entity_kind"], "edge");
        assert_eq!(v["type_name"], "Knows");
        assert_eq!(ConflictKind::ValueConstraintViolation.as_str(), "value_constraint_violation");
    }

    /// A conflict reads as `{kind, type, id, …}` and as the reference's
    /// `{entity_kind, type_name, entity_id, …}`, and either reads back.
    #[test]
    fn a_conflict_carries_both_spellings_of_type_and_id() {
        let c = MergeConflict::new("edge:Knows", Some("k1"), ConflictKind::DivergentUpdate, "m").with_values(
            Some("since".into()),
            serde_json::json!(1),
            serde_json::json!(2),
            serde_json::json!(3),
        );
        let wire = serde_json::to_value(&c).unwrap();
        assert_eq!(wire["type"], "Knows");
        assert_eq!(wire["id"], "k1");
        assert_eq!(wire["type_name"], "Knows");
        assert_eq!(wire["entity_id"], "k1");
        assert_eq!(wire["entity_kind"], "edge");
        assert_eq!(wire["kind"], "divergent_update");
        assert_eq!(wire["property"], "since");
        assert_eq!(
            (&wire["base"], &wire["ours"], &wire["theirs"]),
            (&serde_json::json!(1), &serde_json::json!(2), &serde_json::json!(3))
        );
        assert_eq!(serde_json::from_value::<MergeConflict>(wire).unwrap(), c);
        let short: MergeConflict =
            serde_json::from_value(serde_json::json!({"kind": "orphan_edge", "type": "Person", "id": "p1"})).unwrap();
        assert_eq!((short.type_key.as_str(), short.entity_id.as_deref()), ("node:Person", Some("p1")));
        let bare =
            serde_json::to_value(MergeConflict::new("node:Person", None, ConflictKind::UniqueViolation, "u")).unwrap();
        assert!(bare.get("id").is_none() && bare.get("base").is_none(), "{bare}");
    }

    #[test]
    fn conflicts_page_in_order_and_count_per_type_and_kind() {
        let mut all: Vec<MergeConflict> = (0..5)
            .map(|i| MergeConflict::new("node:Person", Some(&format!("p{i}")), ConflictKind::DivergentUpdate, "u"))
            .collect();
        all.push(MergeConflict::new("edge:Knows", Some("k"), ConflictKind::OrphanEdge, "o"));
        all.sort();
        let stat = ConflictSet::count(&all);
        let counts: Vec<(&str, ConflictKind, usize)> =
            stat.iter().map(|c| (c.type_name.as_str(), c.kind, c.count)).collect();
        assert_eq!(counts, [("Knows", ConflictKind::OrphanEdge, 1), ("Person", ConflictKind::DivergentUpdate, 5)]);
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let (page, next) = ConflictSet::page(&all, after.as_ref(), 2);
            assert!(page.len() <= 2 && !page.is_empty());
            seen.extend(page);
            match next {
                Some(n) => after = Some(n),
                None => break,
            }
        }
        assert_eq!(seen, all, "the pages hold every conflict once, in order");
        let (whole, next) = ConflictSet::page(&all, None, 6);
        assert_eq!((whole.len(), next), (6, None));
    }

    fn person(age: i64, email: &str) -> crate::rows::EntityRow {
        let mut r = crate::rows::EntityRow::node("Bob");
        r.props.insert("age".into(), serde_json::json!(age));
        r.props.insert("email".into(), serde_json::json!(email));
        r
    }

    /// Every row-conflict shape under both strategies, and `fail`.
    #[test]
    fn strategies_decide_each_row_conflict_for_one_side() {
        use ConflictKind::*;
        let (b, s, t) = (person(30, "b@x"), person(41, "b@y"), person(40, "b@x"));
        let theirs = MergeStrategy::Theirs;
        let ours = MergeStrategy::Ours;
        // A divergent update merges property by property: the source alone
        // changed `email`, both changed `age`.
        assert_eq!(decide(DivergentUpdate, theirs, Some(&b), Some(&s), Some(&t)), Some(Decision::Write(s.clone())));
        assert_eq!(
            decide(DivergentUpdate, ours, Some(&b), Some(&s), Some(&t)),
            Some(Decision::Write(person(40, "b@y"))),
            "ours keeps its age and takes the source's email"
        );
        // The target alone changed `email`: theirs keeps it.
        let t2 = person(40, "b@z");
        assert_eq!(
            decide(DivergentUpdate, theirs, Some(&b), Some(&person(41, "b@x")), Some(&t2)),
            Some(Decision::Write(person(41, "b@z")))
        );
        // A divergent insert goes whole to the chosen side.
        assert_eq!(decide(DivergentInsert, theirs, None, Some(&s), Some(&t)), Some(Decision::Write(s.clone())));
        assert_eq!(decide(DivergentInsert, ours, None, Some(&s), Some(&t)), Some(Decision::Keep));
        // Delete against update: the chosen side's absence or row.
        assert_eq!(decide(DeleteVsUpdate, theirs, Some(&b), None, Some(&t)), Some(Decision::Delete));
        assert_eq!(decide(DeleteVsUpdate, ours, Some(&b), None, Some(&t)), Some(Decision::Keep));
        assert_eq!(decide(DeleteVsUpdate, theirs, Some(&b), Some(&s), None), Some(Decision::Write(s.clone())));
        assert_eq!(decide(DeleteVsUpdate, ours, Some(&b), Some(&s), None), Some(Decision::Keep));
        assert_eq!(decide(DivergentUpdate, MergeStrategy::Fail, Some(&b), Some(&s), Some(&t)), None);
        // An edge's moved ends are one property.
        let edge = |from: &str, since: i64| {
            let mut r = crate::rows::EntityRow::node("k");
            (r.src, r.dst) = (Some(from.into()), Some("Z".into()));
            r.props.insert("since".into(), serde_json::json!(since));
            r
        };
        let merged = merge_properties(&edge("A", 1), &edge("B", 1), &edge("A", 2), false);
        assert_eq!(merged, edge("B", 2), "the source moved the edge, the target changed `since`");
        assert_eq!("theirs".parse::<MergeStrategy>().ok(), Some(theirs));
        assert!("mine".parse::<MergeStrategy>().is_err());
    }
}
