//! The values behind a merge's row conflicts: each conflicting entity as
//! the merge base, the target (`ours`) and the source (`theirs`) hold it,
//! so the user sees what to decide without reading both branches. An
//! insert or delete kind carries whole images; a divergent update one
//! conflict per property the two sides hold differently, with that
//! property's three values.

use std::collections::HashMap;

use serde_json::Value as Json;

use crate::engine::diff;
use crate::engine::manifest::ManifestState;
use crate::engine::merge::{ShapedPin, Shapes};
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::Root;
use crate::engine::three_way::{ConflictKind, MergeConflict};
use crate::protocol::Result;

/// At most this many row conflicts get their values (three lookups each);
/// the rest are reported as before, by entity.
pub const VALUED_CONFLICTS: usize = 1_000;

/// Where a merge's row conflicts are read: each table at the three states
/// by its key, except the tables of a merge across a schema change, read
/// on each side in the merged shape.
pub struct Sides<'a> {
    /// The merge base's state.
    pub base: &'a ManifestState,
    /// The source's.
    pub source: &'a ManifestState,
    /// The target's.
    pub target: &'a ManifestState,
    /// Per merged table key, how a merge across schemas reads it.
    pub shaped: HashMap<&'a str, &'a Shapes>,
}

impl Sides<'_> {
    /// Table `key`'s pins on the (base, target, source) sides.
    fn pins(&self, key: &str) -> [Option<ShapedPin>; 3] {
        if let Some(s) = self.shaped.get(key) {
            return [s.base.clone(), Some(s.target.clone()), Some(s.source.clone())];
        }
        let pin = |state: &ManifestState| state.tables.get(key).map(|e| ShapedPin { entry: e.clone(), shape: None });
        [pin(self.base), pin(self.target), pin(self.source)]
    }
}

/// `conflicts` with the values of their row conflicts read at the three
/// sides.
pub async fn attach(root: &Root, sides: &Sides<'_>, conflicts: Vec<MergeConflict>) -> Result<Vec<MergeConflict>> {
    let mut out = Vec::with_capacity(conflicts.len());
    let mut read = 0;
    for c in conflicts {
        let row = matches!(
            c.kind,
            ConflictKind::DivergentInsert | ConflictKind::DivergentUpdate | ConflictKind::DeleteVsUpdate
        );
        let Some(id) = c.entity_id.clone().filter(|_| row && read < VALUED_CONFLICTS) else {
            out.push(c);
            continue;
        };
        read += 1;
        let [b, ours, theirs] = sides.pins(&c.type_key).map(|pin| entity_in(root, pin, &id));
        let (b, ours, theirs) = futures::try_join!(b, ours, theirs)?;
        let edge = c.type_key.starts_with("edge:");
        out.extend(valued(c, edge, b, ours, theirs));
    }
    Ok(out)
}

/// Entity `id` at `pin`, in the shape the pin reads it in.
async fn entity_in(root: &Root, pin: Option<ShapedPin>, id: &str) -> Result<Option<EntityRow>> {
    let Some(pin) = pin else { return Ok(None) };
    let batches = pin.reshape(diff::entity_batches_at(root, &pin.entry, id).await?)?;
    Ok(batches.iter().flat_map(rows::from_batch).next())
}

/// `c` with its values (see the module doc).
fn valued(
    c: MergeConflict,
    edge: bool,
    base: Option<EntityRow>,
    ours: Option<EntityRow>,
    theirs: Option<EntityRow>,
) -> Vec<MergeConflict> {
    let image = |r: &Option<EntityRow>| r.as_ref().map_or(Json::Null, |r| r.image(edge));
    let whole = |c: MergeConflict| vec![c.with_values(None, image(&base), image(&ours), image(&theirs))];
    let (Some(o), Some(t)) = (&ours, &theirs) else { return whole(c) };
    if c.kind != ConflictKind::DivergentUpdate {
        return whole(c);
    }
    let diverged = diff::changed_properties(o, t, edge);
    if diverged.is_empty() {
        return whole(c);
    }
    let at_base = |p: &str| base.as_ref().map_or(Json::Null, |b| diff::property_value(b, p, edge));
    diverged
        .into_iter()
        .map(|d| {
            let base = at_base(&d.property);
            c.clone().with_values(Some(d.property), base, d.before, d.after)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn person(id: &str, age: i64, email: &str) -> EntityRow {
        let mut r = EntityRow::node(id);
        r.props.insert("age".into(), Json::from(age));
        r.props.insert("email".into(), Json::from(email));
        r
    }

    #[test]
    fn a_divergent_update_names_each_property_the_sides_hold_differently() {
        let c = MergeConflict::new("node:Person", Some("Bob"), ConflictKind::DivergentUpdate, "both changed");
        let (base, ours, theirs) = (person("Bob", 30, "b@x"), person("Bob", 40, "b@x"), person("Bob", 41, "b@y"));
        let got = valued(c, false, Some(base), Some(ours), Some(theirs));
        // (property, base, ours, theirs) per conflict, as JSON.
        let summary: Vec<Json> =
            got.iter().map(|c| serde_json::json!([c.property, c.base, c.ours, c.theirs])).collect();
        assert_eq!(
            summary,
            [serde_json::json!(["age", 30, 40, 41]), serde_json::json!(["email", "b@x", "b@x", "b@y"])]
        );
    }

    #[test]
    fn insert_and_delete_kinds_carry_whole_images() {
        let c = MergeConflict::new("node:Person", Some("Eve"), ConflictKind::DeleteVsUpdate, "deleted and updated");
        let got = valued(c, false, Some(person("Eve", 1, "e@x")), None, Some(person("Eve", 2, "e@x")));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].property, None);
        assert_eq!(got[0].ours, Some(Json::Null));
        assert_eq!(got[0].theirs.as_ref().map(|t| t["age"].clone()), Some(Json::from(2)));
        assert_eq!(got[0].base.as_ref().map(|t| t["id"].clone()), Some(Json::from("Eve")));
    }
}
