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

/// One reason a merge cannot be applied, as clients read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    /// The entity (or `property`'s value) at the merge base; null where
    /// absent. Row conflicts carry `base`, `ours` and `theirs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<serde_json::Value>,
    /// The same on the target (the branch merged into).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ours: Option<serde_json::Value>,
    /// The same on the source (the branch merged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theirs: Option<serde_json::Value>,
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
}

impl PartialOrd for MergeConflict {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for MergeConflict {
    // Values break ties by their JSON text, so the order agrees with `==`.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let values = |c: &MergeConflict| serde_json::to_string(&(&c.base, &c.ours, &c.theirs)).unwrap_or_default();
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
        }
    }
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
}
