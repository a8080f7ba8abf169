//! Merge resolutions: a user's decision for named row conflicts, applied in
//! the merge commit (`branch merge --resolve FILE`, HTTP `resolutions`).
//!
//! A resolution names an entity (`type`, `id`) and either decides it whole
//! (`take`: `ours`, `theirs`, `base` or `delete`, or a `value`: the
//! entity's properties) or decides one property a divergent update changed
//! on both sides (`property`, with `take` or `value`). Properties only one
//! side changed merge as always. A resolution overrides the merge's
//! strategy for its entity; what it leaves open the strategy decides.

use serde::{Deserialize, Serialize};

use crate::rows::EntityRow;
use crate::three_way::{self, ConflictKind, Decision, MergeStrategy, Pick};

/// Which side a resolution takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Take {
    /// The target's (the branch merged into).
    Ours,
    /// The source's (the branch merged).
    Theirs,
    /// The merge base's.
    Base,
    /// No entity (whole-entity resolutions only).
    Delete,
}

/// One decision, as a resolution file or request holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resolution {
    /// The node or edge type.
    #[serde(rename = "type")]
    pub type_name: String,
    /// The entity.
    pub id: String,
    /// The property decided (`endpoints` for an edge's ends); none: the
    /// whole entity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    /// The side taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub take: Option<Take>,
    /// The value set instead: the property's, or the entity's properties.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

impl std::fmt::Display for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}`", self.type_name, self.id)?;
        match &self.property {
            Some(p) => write!(f, " property `{p}`"),
            None => Ok(()),
        }
    }
}

/// What a resolution did, as the merge's answer lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resolved {
    /// The resolution.
    #[serde(flatten)]
    pub resolution: Resolution,
    /// `kept` (the target's row stands), `written` or `deleted`.
    pub outcome: String,
}

impl Resolution {
    /// Check the resolution's own form: one of `take` and `value`, and no
    /// `delete` of a single property.
    pub fn check(&self) -> Result<(), String> {
        match (&self.take, &self.value, &self.property) {
            (None, None, _) => Err(format!("resolution for {self} gives neither `take` nor `value`")),
            (Some(_), Some(_), _) => Err(format!("resolution for {self} gives both `take` and `value`")),
            (Some(Take::Delete), _, Some(_)) => {
                Err(format!("resolution for {self}: `delete` takes a whole entity, not a property"))
            }
            (_, Some(v), None) if !v.is_object() => {
                Err(format!("resolution for {self}: a whole entity's `value` is an object of its properties"))
            }
            _ => Ok(()),
        }
    }

    fn pick(&self) -> Pick {
        match (&self.value, self.take) {
            (Some(v), _) => Pick::Value(v.clone()),
            (None, Some(Take::Theirs)) => Pick::Theirs,
            (None, Some(Take::Base)) => Pick::Base,
            _ => Pick::Ours,
        }
    }
}

/// The strategy for each part of one conflicting entity: the whole entity
/// (`None`, for insert and delete kinds) or one property a divergent update
/// changed on both sides (`endpoints` for an edge's ends).
pub type Strategies<'a> = &'a (dyn Fn(Option<&str>) -> MergeStrategy + Sync);

/// Decide one row conflict (`kind`, the entity at the base, the source and
/// the target) by `resolutions` (every one naming this entity), leaving to
/// `strategy` what they do not name. `Ok(None)`: something stays open (no
/// resolution, strategy `fail`). An error names a resolution that does not
/// fit the conflict, or a conflicting property the resolutions left open.
pub fn decide(
    kind: ConflictKind,
    strategy: Strategies<'_>,
    resolutions: &[&Resolution],
    (base, source, target): (Option<&EntityRow>, Option<&EntityRow>, Option<&EntityRow>),
) -> Result<Option<Decision>, String> {
    if let Some(whole) = resolutions.iter().find(|r| r.property.is_none()) {
        if resolutions.len() > 1 {
            return Err(format!("more than one resolution for {whole}"));
        }
        return Ok(Some(whole_entity(whole, base, source, target)));
    }
    let (ConflictKind::DivergentUpdate, Some(b), Some(s), Some(t)) = (kind, base, source, target) else {
        if let Some(r) = resolutions.first() {
            return Err(format!("resolution for {r} names a property, but its conflict is a {}", kind.as_str()));
        }
        return Ok(three_way::decide(kind, strategy(None), base, source, target));
    };
    let open = three_way::conflicting_properties(b, s, t);
    if let Some(r) = resolutions.iter().find(|r| !open.iter().any(|p| Some(p) == r.property.as_ref())) {
        return Err(format!("resolution for {r} names no conflict: both sides do not hold that property differently"));
    }
    let merged = three_way::merge_properties_by(b, s, t, |p| {
        match resolutions.iter().find(|r| r.property.as_deref() == Some(p)) {
            Some(r) => Ok(r.pick()),
            None => match strategy(Some(p)) {
                MergeStrategy::Ours => Ok(Pick::Ours),
                MergeStrategy::Theirs => Ok(Pick::Theirs),
                MergeStrategy::Fail => Err(p.to_string()),
            },
        }
    });
    match merged {
        Ok(row) => Ok(Some(if &row == t { Decision::Keep } else { Decision::Write(row) })),
        Err(_) if resolutions.is_empty() => Ok(None),
        Err(p) => Err(format!("{} `{}` property `{p}` is left unresolved", resolutions[0].type_name, t.id)),
    }
}

/// A whole-entity resolution's decision.
fn whole_entity(r: &Resolution, b: Option<&EntityRow>, s: Option<&EntityRow>, t: Option<&EntityRow>) -> Decision {
    let chosen: Option<EntityRow> = match (&r.value, r.take) {
        (Some(serde_json::Value::Object(props)), _) => {
            let shape = t.or(s).or(b);
            let mut row = EntityRow { id: r.id.clone(), ..shape.cloned().unwrap_or_default() };
            row.props = props.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            Some(row)
        }
        (_, Some(Take::Theirs)) => s.cloned(),
        (_, Some(Take::Base)) => b.cloned(),
        (_, Some(Take::Delete)) => None,
        _ => t.cloned(),
    };
    match (chosen, t) {
        (Some(row), Some(t)) if &row == t => Decision::Keep,
        (Some(row), _) => Decision::Write(row),
        (None, Some(_)) => Decision::Delete,
        (None, None) => Decision::Keep,
    }
}

impl Decision {
    /// The outcome a resolution reports for this decision.
    pub fn outcome(&self) -> &'static str {
        match self {
            Decision::Keep => "kept",
            Decision::Write(_) => "written",
            Decision::Delete => "deleted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bob(age: i64, email: &str) -> EntityRow {
        let mut r = EntityRow::node("Bob");
        r.props.insert("age".into(), serde_json::json!(age));
        r.props.insert("email".into(), serde_json::json!(email));
        r
    }

    fn res(json: serde_json::Value) -> Resolution {
        let r: Resolution = serde_json::from_value(json).expect("resolution");
        r.check().expect("well formed");
        r
    }

    #[test]
    fn resolutions_decide_whole_entities_and_single_properties() {
        use ConflictKind::*;
        let (b, s, t) = (bob(30, "b@x"), bob(41, "b@y"), bob(40, "b@z"));
        let sides = (Some(&b), Some(&s), Some(&t));
        let fail: Strategies<'_> = &|_| MergeStrategy::Fail;
        // Whole entity.
        let base = res(serde_json::json!({"type": "Person", "id": "Bob", "take": "base"}));
        assert_eq!(decide(DivergentUpdate, fail, &[&base], sides), Ok(Some(Decision::Write(b.clone()))));
        let gone = res(serde_json::json!({"type": "Person", "id": "Bob", "take": "delete"}));
        assert_eq!(decide(DivergentUpdate, fail, &[&gone], sides), Ok(Some(Decision::Delete)));
        let set = res(serde_json::json!({"type": "Person", "id": "Bob", "value": {"age": 1}}));
        let mut one = EntityRow::node("Bob");
        one.props.insert("age".into(), serde_json::json!(1));
        assert_eq!(decide(DivergentUpdate, fail, &[&set], sides), Ok(Some(Decision::Write(one))));
        // Per property: age by value, email by base; nothing left open.
        let age = res(serde_json::json!({"type": "Person", "id": "Bob", "property": "age", "value": 99}));
        let email = res(serde_json::json!({"type": "Person", "id": "Bob", "property": "email", "take": "base"}));
        assert_eq!(decide(DivergentUpdate, fail, &[&age, &email], sides), Ok(Some(Decision::Write(bob(99, "b@x")))));
        // One property resolved, the other left open: refused under fail,
        // decided by a strategy.
        let open = decide(DivergentUpdate, fail, &[&age], sides).expect_err("open");
        assert!(open.contains("`email` is left unresolved"), "{open}");
        let theirs = decide(DivergentUpdate, &|_| MergeStrategy::Theirs, &[&age], sides);
        assert_eq!(theirs, Ok(Some(Decision::Write(bob(99, "b@y")))));
        // A property the sides do not hold differently names no conflict.
        let role = res(serde_json::json!({"type": "Person", "id": "Bob", "property": "role", "take": "ours"}));
        assert!(decide(DivergentUpdate, fail, &[&role], sides).expect_err("no conflict").contains("names no conflict"));
        // Forms refused before any merge.
        let bad = [
            serde_json::json!({"type": "Person", "id": "Bob"}),
            serde_json::json!({"type": "Person", "id": "Bob", "take": "ours", "value": 1}),
            serde_json::json!({"type": "Person", "id": "Bob", "property": "age", "take": "delete"}),
            serde_json::json!({"type": "Person", "id": "Bob", "value": 3}),
        ];
        for b in bad {
            let r: Resolution = serde_json::from_value(b.clone()).expect("parses");
            assert!(r.check().is_err(), "{b}");
        }
        assert!(
            serde_json::from_value::<Resolution>(serde_json::json!({"type": "P", "id": "x", "tkae": "ours"})).is_err()
        );
    }

    /// Policies per property: a property's own strategy, else the entity's.
    #[test]
    fn each_property_takes_its_own_strategy() {
        let (b, s, t) = (bob(30, "b@x"), bob(41, "b@y"), bob(40, "b@z"));
        let per: Strategies<'_> = &|p| match p {
            Some("email") => MergeStrategy::Theirs,
            _ => MergeStrategy::Ours,
        };
        let got = decide(ConflictKind::DivergentUpdate, per, &[], (Some(&b), Some(&s), Some(&t)));
        assert_eq!(got, Ok(Some(Decision::Write(bob(40, "b@y")))));
        let half: Strategies<'_> = &|p| if p == Some("email") { MergeStrategy::Theirs } else { MergeStrategy::Fail };
        let got = decide(ConflictKind::DivergentUpdate, half, &[], (Some(&b), Some(&s), Some(&t)));
        assert_eq!(got, Ok(None), "age stays open: the conflict stands");
    }
}
