//! Planning a schema apply: every difference between the accepted catalog
//! (the one currently applied) and a freshly compiled target, whether it is
//! supported, and the physical effect on each table.
//!
//! Types are matched by table id and properties by property id, after the
//! target has adopted the accepted ids ([`Catalog::adopt_ids`]: same name
//! first, then `@rename_from`). Ids are hashes of names, so a renamed type
//! keeps an id that a later, new type of the old name would derive again;
//! [`plan`] re-derives such fresh ids so no two tables ever share one.
//!
//! The module is pure: the engine applies [`EvolvePlan::tables`] to storage
//! and then stores [`EvolvePlan::target`] as the new accepted catalog.

use super::Catalog;
use super::dates::{parse_date, parse_datetime};
use super::id;
use super::types::{
    AnnotationValue, Card, CheckConstraint, EdgeType, Meta, NodeType, Property, RangeConstraint, ScalarType, TypeKind,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// The result of planning a schema apply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvolvePlan {
    /// The target catalog with table/property ids carried over from the
    /// accepted catalog, and fresh ids that collided re-derived.
    #[serde(skip)]
    pub target: Catalog,
    /// Every difference in a deterministic order: target node types, target
    /// edge types, then dropped types (accepted order), then interfaces;
    /// within a type: rename, key/endpoints/cardinality, properties (target
    /// order, then drops), constraints, metadata.
    pub steps: Vec<Step>,
    /// Physical effect per table that needs one, sorted by table id.
    #[serde(skip)]
    pub tables: Vec<TableChange>,
}

impl EvolvePlan {
    /// Whether every step can be applied.
    pub fn supported(&self) -> bool {
        self.steps.iter().all(|s| s.supported)
    }

    /// The steps that cannot be applied.
    pub fn unsupported(&self) -> Vec<&Step> {
        self.steps.iter().filter(|s| !s.supported).collect()
    }

    /// Whether the target differs from the accepted catalog in nothing but
    /// `@rename_from` hints (and type declaration order).
    pub fn is_noop(&self) -> bool {
        self.steps.is_empty()
    }
}

/// One difference between the accepted and the target catalog.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    /// What kind of change.
    pub kind: StepKind,
    /// The target name of the type (the accepted name for drops; the
    /// interface name for interface changes).
    pub type_name: String,
    /// The property concerned, when there is one (target name, accepted
    /// name for drops).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    /// One human sentence.
    pub detail: String,
    /// Whether the step can be applied.
    pub supported: bool,
    /// Why the step cannot be applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A drop that deletes data (`allow_data_loss`).
    pub data_loss: bool,
    /// Applying it needs every existing row validated first (a tightening).
    pub validates: bool,
}

/// Kinds of [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    /// A new node or edge type.
    AddType,
    /// A type removed from the schema.
    DropType,
    /// A type renamed (same table id).
    RenameType,
    /// A new property.
    AddProperty,
    /// A property removed from the schema.
    DropProperty,
    /// A property renamed (same property id).
    RenameProperty,
    /// Required → nullable.
    RelaxNullability,
    /// Nullable → required (validates).
    TightenNullability,
    /// A new unique, index, range or check.
    AddConstraint,
    /// A removed unique, index, range or check.
    RemoveConstraint,
    /// Enum values added, none removed.
    WidenEnum,
    /// Enum values removed (validates).
    NarrowEnum,
    /// An edge's `@card` changed.
    ChangeCardinality,
    /// Descriptions, instructions, custom annotations, interfaces,
    /// embeddings, property or enum value order.
    ChangeMetadata,
    /// A property's stored type changed (unsupported).
    ChangePropertyType,
    /// A node's key changed (unsupported: ids derive from keys).
    ChangeKey,
    /// An edge's endpoint types changed (unsupported).
    ChangeEndpoints,
}

/// The physical effect of a plan on one table.
#[derive(Debug, Clone, PartialEq)]
pub struct TableChange {
    /// Node or edge table.
    pub kind: TypeKind,
    /// Stable table id (the dataset location derives from it).
    pub table_id: String,
    /// Accepted table key (`node:<Name>` / `edge:<Name>`); `None` = new type.
    pub old_key: Option<String>,
    /// Target table key; `None` = dropped type.
    pub new_key: Option<String>,
    /// Column changes in order: target property order (renames, nullability,
    /// adds), then drops. Renamed columns are named by their new name in
    /// later changes; a new type lists none (create it from the target's
    /// Arrow schema).
    pub columns: Vec<ColumnChange>,
    /// Some step on this table needs every existing row validated against
    /// the target catalog before the apply commits.
    pub validate: bool,
    /// The type is dropped with `allow_data_loss` (delete its data).
    pub hard_drop: bool,
}

/// One column-level change to an existing table.
#[derive(Debug, Clone, PartialEq)]
pub enum ColumnChange {
    /// A new column; existing rows get `default` (null when `None`).
    Add {
        /// Column name.
        name: String,
        /// Whether the column is nullable.
        nullable: bool,
        /// The declared `@default`, as JSON (date strings as written).
        default: Option<Value>,
    },
    /// A removed column (`hard`: delete its data, else keep it hidden).
    Drop {
        /// Accepted column name.
        name: String,
        /// Delete the data.
        hard: bool,
    },
    /// A renamed column.
    Rename {
        /// Accepted name.
        from: String,
        /// Target name.
        to: String,
    },
    /// A nullability change (`false` needs the column validated first).
    SetNullable {
        /// Column name (target name).
        name: String,
        /// The new nullability.
        nullable: bool,
    },
}

/// Plans applying `target` (freshly compiled) over `accepted` (currently
/// applied, ids adopted). `allow_data_loss` makes drops hard.
pub fn plan(accepted: &Catalog, target: Catalog, allow_data_loss: bool) -> EvolvePlan {
    plan_reserving(accepted, target, allow_data_loss, &[])
}

/// [`plan`], also treating `reserved` table ids as taken: the engine passes
/// the ids of soft-dropped tables whose data still exists, so a new type
/// never lands on a retired table's dataset.
pub fn plan_reserving(
    accepted: &Catalog,
    mut target: Catalog,
    allow_data_loss: bool,
    reserved: &[String],
) -> EvolvePlan {
    target.adopt_ids(accepted);
    let lost = settle_ids(accepted, &mut target, reserved);
    let mut planner =
        Planner { accepted, target: &target, lost: &lost, allow_data_loss, steps: Vec::new(), tables: Vec::new() };
    planner.run();
    let Planner { steps, mut tables, .. } = planner;
    tables.sort_by(|a, b| a.table_id.cmp(&b.table_id));
    EvolvePlan { target, steps, tables }
}

/// Table key of a type (mirrors the engine's `node_key` / `edge_key`).
fn table_key(kind: TypeKind, name: &str) -> String {
    match kind {
        TypeKind::Node => format!("node:{name}"),
        TypeKind::Edge => format!("edge:{name}"),
    }
}

fn kind_word(kind: TypeKind) -> &'static str {
    match kind {
        TypeKind::Node => "node type",
        TypeKind::Edge => "edge type",
    }
}

/// What planning needs from either kind of table.
trait Table {
    const KIND: TypeKind;
    fn name(&self) -> &str;
    fn table_id(&self) -> &str;
    fn set_table_id(&mut self, id: String);
    fn meta(&self) -> &Meta;
    fn properties(&self) -> &[Property];
    fn properties_mut(&mut self) -> &mut [Property];
    fn uniques(&self) -> &[Vec<String>];
    fn indexes(&self) -> &[Vec<String>];
}

macro_rules! impl_table {
    ($ty:ty, $kind:expr) => {
        impl Table for $ty {
            const KIND: TypeKind = $kind;
            fn name(&self) -> &str {
                &self.name
            }
            fn table_id(&self) -> &str {
                &self.table_id
            }
            fn set_table_id(&mut self, id: String) {
                self.table_id = id;
            }
            fn meta(&self) -> &Meta {
                &self.meta
            }
            fn properties(&self) -> &[Property] {
                &self.properties
            }
            fn properties_mut(&mut self) -> &mut [Property] {
                &mut self.properties
            }
            fn uniques(&self) -> &[Vec<String>] {
                &self.uniques
            }
            fn indexes(&self) -> &[Vec<String>] {
                &self.indexes
            }
        }
    };
}

impl_table!(NodeType, TypeKind::Node);
impl_table!(EdgeType, TypeKind::Edge);

// ---------------------------------------------------------------------------
// Id settlement
// ---------------------------------------------------------------------------

/// A `@rename_from` hint that cannot be honoured: the accepted item it
/// names is already held by another target item.
#[derive(Debug, Clone)]
struct LostClaim {
    from: String,
    winner: String,
}

/// Lost claims by (table id, property id); the property id is `None` for types.
type LostClaims = HashMap<(String, Option<String>), LostClaim>;

/// How one target item relates to the accepted items of its kind.
enum Claim {
    /// Holds the accepted item at this index (same name or `@rename_from`).
    Matched(usize),
    /// A new item.
    Fresh,
    /// Its `@rename_from` names an accepted item someone else holds.
    Lost(LostClaim),
}

/// Matches target items (name, rename hint) to accepted names the way
/// `adopt_ids` does, except that each accepted item goes to one claimant
/// only: same-name matches first, then hints in declaration order.
/// (`adopt_ids` alone would give two claimants the same id.)
fn claims(accepted: &[&str], target: &[(&str, Option<&str>)]) -> Vec<Claim> {
    let mut holder: Vec<Option<usize>> = vec![None; accepted.len()];
    let mut out: Vec<Claim> = Vec::with_capacity(target.len());
    for (t, (name, _)) in target.iter().enumerate() {
        match accepted.iter().position(|a| a == name) {
            Some(a) => {
                holder[a] = Some(t);
                out.push(Claim::Matched(a));
            }
            None => out.push(Claim::Fresh),
        }
    }
    for (t, (_, hint)) in target.iter().enumerate() {
        let Some(hint) = hint else { continue };
        if !matches!(out[t], Claim::Fresh) {
            continue;
        }
        let Some(a) = accepted.iter().position(|n| n == hint) else { continue };
        out[t] = match holder[a] {
            Some(w) => Claim::Lost(LostClaim { from: hint.to_string(), winner: target[w].0.to_string() }),
            None => {
                holder[a] = Some(t);
                Claim::Matched(a)
            }
        };
    }
    out
}

/// Each target item's id: the accepted id when matched, else its derived
/// id, re-derived from `name#2`, `name#3`, … while it is in `taken`.
fn settle(
    claims: &[Claim],
    accepted_ids: &[&str],
    names: &[&str],
    taken: &mut HashSet<String>,
    derive: impl Fn(&str) -> String,
) -> Vec<String> {
    let mut out = Vec::with_capacity(claims.len());
    for (claim, name) in claims.iter().zip(names) {
        if let Claim::Matched(a) = claim {
            out.push(accepted_ids[*a].to_string());
            continue;
        }
        let mut candidate = derive(name);
        let mut n = 2;
        while taken.contains(&candidate) {
            candidate = derive(&format!("{name}#{n}"));
            n += 1;
        }
        taken.insert(candidate.clone());
        out.push(candidate);
    }
    out
}

/// Gives every target type and property a final, collision-free id and
/// returns the rename hints that lost.
fn settle_ids(accepted: &Catalog, target: &mut Catalog, reserved: &[String]) -> LostClaims {
    let mut taken: HashSet<String> =
        accepted.types().map(|t| t.table_id().to_string()).chain(reserved.iter().cloned()).collect();
    let mut lost = LostClaims::new();
    settle_tables(&accepted.nodes, &mut target.nodes, &mut taken, &mut lost);
    settle_tables(&accepted.edges, &mut target.edges, &mut taken, &mut lost);
    lost
}

fn settle_tables<T: Table>(accepted: &[T], target: &mut [T], taken: &mut HashSet<String>, lost: &mut LostClaims) {
    let acc_names: Vec<&str> = accepted.iter().map(Table::name).collect();
    let acc_ids: Vec<&str> = accepted.iter().map(Table::table_id).collect();
    let wanted: Vec<(String, Option<String>)> =
        target.iter().map(|t| (t.name().to_string(), t.meta().rename_from.clone())).collect();
    let wanted_refs: Vec<(&str, Option<&str>)> = wanted.iter().map(|(n, h)| (n.as_str(), h.as_deref())).collect();
    let names: Vec<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
    let claims = claims(&acc_names, &wanted_refs);
    let ids = settle(&claims, &acc_ids, &names, taken, |n| id::table_id(T::KIND, n));
    for ((table, claim), table_id) in target.iter_mut().zip(&claims).zip(ids) {
        table.set_table_id(table_id.clone());
        let old = match claim {
            Claim::Matched(a) => accepted[*a].properties(),
            _ => &[],
        };
        let owner = table.name().to_string();
        settle_props(&owner, &table_id, table.properties_mut(), old, lost);
        if let Claim::Lost(l) = claim {
            lost.insert((table_id, None), l.clone());
        }
    }
}

/// Property ids within one table: unmatched properties (including those of
/// a new type, which `adopt_ids` may have given a lost claim's ids) get
/// their derived id, re-derived on collision.
fn settle_props(owner: &str, table_id: &str, props: &mut [Property], old: &[Property], lost: &mut LostClaims) {
    let acc_names: Vec<&str> = old.iter().map(|p| p.name.as_str()).collect();
    let acc_ids: Vec<&str> = old.iter().map(|p| p.prop_id.as_str()).collect();
    let wanted: Vec<(String, Option<String>)> =
        props.iter().map(|p| (p.name.clone(), p.meta.rename_from.clone())).collect();
    let wanted_refs: Vec<(&str, Option<&str>)> = wanted.iter().map(|(n, h)| (n.as_str(), h.as_deref())).collect();
    let names: Vec<&str> = wanted.iter().map(|(n, _)| n.as_str()).collect();
    let claims = claims(&acc_names, &wanted_refs);
    let mut taken: HashSet<String> = acc_ids.iter().map(|s| s.to_string()).collect();
    let ids = settle(&claims, &acc_ids, &names, &mut taken, |n| id::prop_id(owner, n));
    for ((prop, claim), prop_id) in props.iter_mut().zip(&claims).zip(ids) {
        if let Claim::Lost(l) = claim {
            lost.insert((table_id.to_string(), Some(prop_id.clone())), l.clone());
        }
        prop.prop_id = prop_id;
    }
}

// ---------------------------------------------------------------------------
// Planning
// ---------------------------------------------------------------------------

struct Planner<'a> {
    accepted: &'a Catalog,
    target: &'a Catalog,
    lost: &'a LostClaims,
    allow_data_loss: bool,
    steps: Vec<Step>,
    tables: Vec<TableChange>,
}

impl<'a> Planner<'a> {
    fn run(&mut self) {
        let (accepted, target) = (self.accepted, self.target);
        for new in &target.nodes {
            match accepted.nodes.iter().find(|o| o.table_id == new.table_id) {
                Some(old) => self.node(old, new),
                None => self.added(new, String::new()),
            }
        }
        for new in &target.edges {
            match accepted.edges.iter().find(|o| o.table_id == new.table_id) {
                Some(old) => self.edge(old, new),
                None => self.added(new, format!(": {} -> {}", new.from_type, new.to_type)),
            }
        }
        for old in &accepted.nodes {
            if !target.nodes.iter().any(|n| n.table_id == old.table_id) {
                self.dropped(old);
            }
        }
        for old in &accepted.edges {
            if !target.edges.iter().any(|e| e.table_id == old.table_id) {
                self.dropped(old);
            }
        }
        self.interfaces();
    }

    /// A type with no accepted counterpart (`suffix` completes the header).
    fn added<T: Table>(&mut self, new: &T, suffix: String) {
        let word = kind_word(T::KIND);
        if let Some(l) = self.lost.get(&(new.table_id().to_string(), None)) {
            let detail = format!("rename {word} {} to {}", l.from, new.name());
            let reason = format!(
                "`{}` is already matched by `{}` (same name or an earlier @rename_from); \
                 remove this @rename_from or rename `{}` too",
                l.from, l.winner, l.winner
            );
            self.steps.push(step(StepKind::RenameType, new.name(), None, detail).unsupported(reason));
            return;
        }
        let mut detail = format!("add {word} {}{suffix}", new.name());
        if let Some(hint) = &new.meta().rename_from {
            detail.push_str(&format!(" (its @rename_from(\"{hint}\") names no accepted {word})"));
        }
        self.steps.push(step(StepKind::AddType, new.name(), None, detail));
        self.tables.push(TableChange {
            kind: T::KIND,
            table_id: new.table_id().to_string(),
            old_key: None,
            new_key: Some(table_key(T::KIND, new.name())),
            columns: Vec::new(),
            validate: false,
            hard_drop: false,
        });
    }

    fn dropped<T: Table>(&mut self, old: &T) {
        let hard = self.allow_data_loss;
        let how = if hard { "hard: its data is deleted" } else { "soft: its data is kept but hidden" };
        let detail = format!("drop {} {} ({how})", kind_word(T::KIND), old.name());
        let mut s = step(StepKind::DropType, old.name(), None, detail);
        s.data_loss = hard;
        self.steps.push(s);
        self.tables.push(TableChange {
            kind: T::KIND,
            table_id: old.table_id().to_string(),
            old_key: Some(table_key(T::KIND, old.name())),
            new_key: None,
            columns: Vec::new(),
            validate: false,
            hard_drop: hard,
        });
    }

    fn node(&mut self, old: &'a NodeType, new: &'a NodeType) {
        let mut d = TypeDiff::begin(old, new, self.allow_data_loss);
        d.key(old, new);
        d.properties(old.properties(), new.properties(), &old.key, self.lost, &new.table_id);
        d.sets("unique", old.uniques(), new.uniques(), true);
        d.sets("index", old.indexes(), new.indexes(), false);
        d.ranges(&old.ranges, &new.ranges);
        d.checks(&old.checks, &new.checks);
        d.type_meta(old.meta(), new.meta());
        d.node_meta(old, new);
        self.finish(old, new, d);
    }

    fn edge(&mut self, old: &'a EdgeType, new: &'a EdgeType) {
        let mut d = TypeDiff::begin(old, new, self.allow_data_loss);
        let (accepted, target) = (self.accepted, self.target);
        // Endpoints are compared by table id, so renaming an endpoint node
        // type is not an endpoint change.
        let same = |a: &str, b: &str| accepted.node(a).map(|n| &n.table_id) == target.node(b).map(|n| &n.table_id);
        if !same(&old.from_type, &new.from_type) || !same(&old.to_type, &new.to_type) {
            let detail = format!(
                "change the endpoints of {} from {} -> {} to {} -> {}",
                new.name, old.from_type, old.to_type, new.from_type, new.to_type
            );
            let reason = "existing edges would connect nodes of other types; add a new edge type and migrate";
            d.push(d.step(StepKind::ChangeEndpoints, None, detail).unsupported(reason));
        }
        d.card(old.card, new.card);
        d.properties(old.properties(), new.properties(), &[], self.lost, &new.table_id);
        d.sets("unique", old.uniques(), new.uniques(), true);
        d.sets("index", old.indexes(), new.indexes(), false);
        d.type_meta(old.meta(), new.meta());
        self.finish(old, new, d);
    }

    /// Records the type's steps and, when it has a physical effect, its table change.
    fn finish<T: Table>(&mut self, old: &T, new: &T, d: TypeDiff) {
        let validate = d.steps.iter().any(|s| s.validates);
        if old.name() != new.name() || !d.columns.is_empty() || validate {
            self.tables.push(TableChange {
                kind: T::KIND,
                table_id: new.table_id().to_string(),
                old_key: Some(table_key(T::KIND, old.name())),
                new_key: Some(table_key(T::KIND, new.name())),
                columns: d.columns,
                validate,
                hard_drop: false,
            });
        }
        self.steps.extend(d.steps);
    }

    /// Interfaces own no table (their properties are copied into nodes),
    /// but changing them changes the catalog, so they are metadata steps.
    fn interfaces(&mut self) {
        let (accepted, target) = (self.accepted, self.target);
        for new in &target.interfaces {
            let detail = match accepted.interface(&new.name) {
                None => format!("add interface {}", new.name),
                Some(old) if without_hints(&old.properties) != without_hints(&new.properties) => {
                    format!("change interface {}", new.name)
                }
                Some(_) => continue,
            };
            self.steps.push(step(StepKind::ChangeMetadata, &new.name, None, detail));
        }
        for old in &accepted.interfaces {
            if target.interface(&old.name).is_none() {
                let detail = format!("remove interface {}", old.name);
                self.steps.push(step(StepKind::ChangeMetadata, &old.name, None, detail));
            }
        }
    }
}

/// Properties with their `@rename_from` hints cleared (hints are not differences).
fn without_hints(props: &[Property]) -> Vec<Property> {
    props
        .iter()
        .cloned()
        .map(|mut p| {
            p.meta.rename_from = None;
            p
        })
        .collect()
}

fn step(kind: StepKind, type_name: &str, property: Option<&str>, detail: String) -> Step {
    Step {
        kind,
        type_name: type_name.to_string(),
        property: property.map(str::to_string),
        detail,
        supported: true,
        reason: None,
        data_loss: false,
        validates: false,
    }
}

impl Step {
    fn unsupported(mut self, reason: impl Into<String>) -> Step {
        self.supported = false;
        self.reason = Some(reason.into());
        self
    }

    fn validating(mut self, validates: bool) -> Step {
        self.validates = validates;
        self
    }
}

/// The differences of one matched type.
struct TypeDiff<'a> {
    /// Target type name.
    name: &'a str,
    /// Accepted property name → target name, for properties kept.
    renames: HashMap<&'a str, &'a str>,
    allow_data_loss: bool,
    steps: Vec<Step>,
    columns: Vec<ColumnChange>,
}

impl<'a> TypeDiff<'a> {
    fn begin<T: Table>(old: &'a T, new: &'a T, allow_data_loss: bool) -> TypeDiff<'a> {
        let renames = old
            .properties()
            .iter()
            .filter_map(|o| {
                let n = new.properties().iter().find(|n| n.prop_id == o.prop_id)?;
                Some((o.name.as_str(), n.name.as_str()))
            })
            .collect();
        let mut d = TypeDiff { name: new.name(), renames, allow_data_loss, steps: Vec::new(), columns: Vec::new() };
        if old.name() != new.name() {
            let detail = format!("rename {} {} to {}", kind_word(T::KIND), old.name(), new.name());
            d.push(d.step(StepKind::RenameType, None, detail));
        }
        d
    }

    fn step(&self, kind: StepKind, property: Option<&str>, detail: String) -> Step {
        step(kind, self.name, property, detail)
    }

    fn push(&mut self, s: Step) {
        self.steps.push(s);
    }

    /// The target name of an accepted column (unchanged when not a kept
    /// property, e.g. `src`/`dst` or a dropped property).
    fn map_name(&self, old: &str) -> String {
        self.renames.get(old).copied().unwrap_or(old).to_string()
    }

    /// Node ids derive from the key values in key-property declaration
    /// order, so any change of that sequence (by property id) would
    /// re-identify existing nodes.
    fn key(&mut self, old: &NodeType, new: &NodeType) {
        if key_ids(old) == key_ids(new) {
            return;
        }
        let reason = "node ids are derived from the key, so changing it would re-identify every existing node; \
                      add a new node type and migrate";
        let dropped =
            old.properties.iter().find(|p| old.key.contains(&p.name) && !self.renames.contains_key(p.name.as_str()));
        if let Some(p) = dropped {
            let detail = format!("drop key property `{}` from {}", p.name, new.name);
            self.push(self.step(StepKind::ChangeKey, Some(&p.name), detail).unsupported(reason));
            return;
        }
        let names = |n: &NodeType| {
            let keys: Vec<&str> =
                n.properties.iter().filter(|p| n.key.contains(&p.name)).map(|p| p.name.as_str()).collect();
            if keys.is_empty() { "none".to_string() } else { format!("({})", keys.join(", ")) }
        };
        let detail = format!("change the key of {} from {} to {}", new.name, names(old), names(new));
        self.push(self.step(StepKind::ChangeKey, None, detail).unsupported(reason));
    }

    fn card(&mut self, old: Card, new: Card) {
        if old == new {
            return;
        }
        let max_falls = match (old.max, new.max) {
            (None, Some(_)) => true,
            (Some(a), Some(b)) => b < a,
            _ => false,
        };
        let detail = format!("change the cardinality of {} from {} to {}", self.name, card_text(old), card_text(new));
        self.push(self.step(StepKind::ChangeCardinality, None, detail).validating(new.min > old.min || max_falls));
    }

    /// Property steps: target properties in order, then accepted ones gone
    /// from the target (`old_key` ones are reported by [`TypeDiff::key`]).
    fn properties(
        &mut self,
        old: &[Property],
        new: &[Property],
        old_key: &[String],
        lost: &LostClaims,
        table_id: &str,
    ) {
        for p in new {
            if let Some(l) = lost.get(&(table_id.to_string(), Some(p.prop_id.clone()))) {
                let detail = format!("rename property `{}` of {} to `{}`", l.from, self.name, p.name);
                let reason = format!(
                    "`{}` is already matched by `{}` (same name or an earlier @rename_from); remove this @rename_from",
                    l.from, l.winner
                );
                self.push(self.step(StepKind::RenameProperty, Some(&p.name), detail).unsupported(reason));
                continue;
            }
            match old.iter().find(|o| o.prop_id == p.prop_id) {
                Some(o) => self.change_property(o, p),
                None => self.add_property(p),
            }
        }
        for o in old {
            if !new.iter().any(|p| p.prop_id == o.prop_id) && !old_key.contains(&o.name) {
                self.drop_property(o);
            }
        }
        if common_order(old, new) != common_order(new, old) {
            let detail = format!("reorder the properties of {}", self.name);
            self.push(self.step(StepKind::ChangeMetadata, None, detail));
        }
    }

    fn add_property(&mut self, p: &Property) {
        let text = format!("`{}: {}`", p.name, prop_text(p));
        let default = declared_default(p);
        let physical = p.list || matches!(p.ty, ScalarType::Blob | ScalarType::Vector(_));
        let outcome = match (p.nullable, default) {
            (true, None) => Ok((format!("add nullable property {text} to {}", self.name), None)),
            (false, _) if physical => Err(format!(
                "existing rows cannot be filled for a required {} property; add `{}` nullable",
                type_text(&p.ty, p.list),
                p.name
            )),
            (false, None) => Err(format!(
                "existing rows need a value for required `{}`: declare `@default(<value>)` or add it nullable",
                p.name
            )),
            (nullable, Some(Ok(v))) => {
                let how = if nullable { "nullable" } else { "required" };
                Ok((format!("add {how} property {text} to {}, filling existing rows with {v}", self.name), Some(v)))
            }
            (_, Some(Err(e))) => Err(e),
        };
        match outcome {
            Ok((detail, default)) => {
                self.push(self.step(StepKind::AddProperty, Some(&p.name), detail));
                self.columns.push(ColumnChange::Add { name: p.name.clone(), nullable: p.nullable, default });
            }
            Err(reason) => {
                let detail = format!("add property {text} to {}", self.name);
                self.push(self.step(StepKind::AddProperty, Some(&p.name), detail).unsupported(reason));
            }
        }
    }

    fn drop_property(&mut self, o: &Property) {
        let hard = self.allow_data_loss;
        let how = if hard { "hard: its data is deleted" } else { "soft: its data is kept but hidden" };
        let detail = format!("drop property `{}` from {} ({how})", o.name, self.name);
        let mut s = self.step(StepKind::DropProperty, Some(&o.name), detail);
        s.data_loss = hard;
        self.push(s);
        self.columns.push(ColumnChange::Drop { name: o.name.clone(), hard });
    }

    fn change_property(&mut self, o: &Property, p: &Property) {
        if o.name != p.name {
            let detail = format!("rename property `{}` of {} to `{}`", o.name, self.name, p.name);
            self.push(self.step(StepKind::RenameProperty, Some(&p.name), detail));
            self.columns.push(ColumnChange::Rename { from: o.name.clone(), to: p.name.clone() });
        }
        self.property_type(o, p);
        if o.nullable != p.nullable {
            let (kind, word) = if p.nullable {
                (StepKind::RelaxNullability, "nullable")
            } else {
                (StepKind::TightenNullability, "required")
            };
            let detail = format!("make property `{}` of {} {word}", p.name, self.name);
            self.push(self.step(kind, Some(&p.name), detail).validating(!p.nullable));
            self.columns.push(ColumnChange::SetNullable { name: p.name.clone(), nullable: p.nullable });
        }
        let what = format!("property `{}` of {}", p.name, self.name);
        self.meta(&o.meta, &p.meta, Some(&p.name), &what);
    }

    fn property_type(&mut self, o: &Property, p: &Property) {
        if o.ty == p.ty && o.list == p.list {
            return;
        }
        let name = Some(p.name.as_str());
        if let (ScalarType::Enum(a), ScalarType::Enum(b), false, false) = (&o.ty, &p.ty, o.list, p.list) {
            let removed: Vec<&str> = a.iter().filter(|v| !b.contains(v)).map(String::as_str).collect();
            let added: Vec<&str> = b.iter().filter(|v| !a.contains(v)).map(String::as_str).collect();
            let owner = format!("`{}` of {}", p.name, self.name);
            let s = if removed.is_empty() && added.is_empty() {
                self.step(StepKind::ChangeMetadata, name, format!("reorder the values of enum {owner}"))
            } else if removed.is_empty() {
                self.step(StepKind::WidenEnum, name, format!("widen enum {owner}: add {}", added.join(", ")))
            } else {
                let mut detail = format!("narrow enum {owner}: remove {}", removed.join(", "));
                if !added.is_empty() {
                    detail.push_str(&format!(", add {}", added.join(", ")));
                }
                self.step(StepKind::NarrowEnum, name, detail).validating(true)
            };
            self.push(s);
            return;
        }
        let detail = format!(
            "change the type of `{}` of {} from {} to {}",
            p.name,
            self.name,
            type_text(&o.ty, o.list),
            type_text(&p.ty, p.list)
        );
        let reason = "stored values cannot change type in place; add a new property and migrate the data";
        self.push(self.step(StepKind::ChangePropertyType, name, detail).unsupported(reason));
    }

    fn type_meta(&mut self, old: &Meta, new: &Meta) {
        let what = self.name.to_string();
        self.meta(old, new, None, &what);
    }

    /// Documentation differences; `@rename_from` is a hint, not a difference.
    fn meta(&mut self, old: &Meta, new: &Meta, property: Option<&str>, what: &str) {
        let fields = [
            ("description", old.description != new.description),
            ("instruction", old.instruction != new.instruction),
            ("merge policy", old.merge != new.merge),
            ("custom annotations", old.annotations != new.annotations),
        ];
        for (field, differs) in fields {
            if differs {
                self.push(self.step(StepKind::ChangeMetadata, property, format!("change the {field} of {what}")));
            }
        }
    }

    fn node_meta(&mut self, old: &NodeType, new: &NodeType) {
        if old.implements != new.implements {
            let detail = format!("change the interfaces {} implements", self.name);
            self.push(self.step(StepKind::ChangeMetadata, None, detail));
        }
        let mapped: Vec<_> = old
            .embeds
            .iter()
            .map(|e| {
                let mut e = e.clone();
                e.prop = self.map_name(&e.prop);
                e.source = self.map_name(&e.source);
                e
            })
            .collect();
        if mapped != new.embeds {
            let detail = format!("change the embeddings of {}", self.name);
            self.push(self.step(StepKind::ChangeMetadata, None, detail));
        }
    }

    /// Uniques or indexes, compared as sets of column sets after renames.
    fn sets(&mut self, word: &str, old: &[Vec<String>], new: &[Vec<String>], validates: bool) {
        let norm = |cols: Vec<String>| {
            let mut cols = cols;
            cols.sort();
            cols.dedup();
            cols
        };
        let old: Vec<Vec<String>> = old.iter().map(|s| norm(s.iter().map(|c| self.map_name(c)).collect())).collect();
        let new: Vec<Vec<String>> = new.iter().map(|s| norm(s.clone())).collect();
        let (added, removed) = set_diff(&old, &new);
        for cols in added {
            let detail = format!("add @{word}({}) to {}", cols.join(", "), self.name);
            let s = self.step(StepKind::AddConstraint, single(&cols), detail).validating(validates);
            self.push(s);
        }
        for cols in removed {
            let detail = format!("remove @{word}({}) from {}", cols.join(", "), self.name);
            self.push(self.step(StepKind::RemoveConstraint, single(&cols), detail));
        }
    }

    fn ranges(&mut self, old: &[RangeConstraint], new: &[RangeConstraint]) {
        let old: Vec<RangeConstraint> =
            old.iter().map(|r| RangeConstraint { prop: self.map_name(&r.prop), ..r.clone() }).collect();
        let (added, removed) = set_diff(&old, new);
        for r in added {
            let detail = format!("add {} to {}", range_text(&r), self.name);
            self.push(self.step(StepKind::AddConstraint, Some(&r.prop), detail).validating(true));
        }
        for r in removed {
            let detail = format!("remove {} from {}", range_text(&r), self.name);
            self.push(self.step(StepKind::RemoveConstraint, Some(&r.prop), detail));
        }
    }

    fn checks(&mut self, old: &[CheckConstraint], new: &[CheckConstraint]) {
        let old: Vec<CheckConstraint> =
            old.iter().map(|c| CheckConstraint { prop: self.map_name(&c.prop), ..c.clone() }).collect();
        let (added, removed) = set_diff(&old, new);
        for c in added {
            let detail = format!("add @check({}, {:?}) to {}", c.prop, c.pattern, self.name);
            self.push(self.step(StepKind::AddConstraint, Some(&c.prop), detail).validating(true));
        }
        for c in removed {
            let detail = format!("remove @check({}, {:?}) from {}", c.prop, c.pattern, self.name);
            self.push(self.step(StepKind::RemoveConstraint, Some(&c.prop), detail));
        }
    }
}

/// Ids of the key properties in declaration order (the order ids derive in).
fn key_ids(n: &NodeType) -> Vec<&str> {
    n.properties.iter().filter(|p| n.key.contains(&p.name)).map(|p| p.prop_id.as_str()).collect()
}

/// Ids of the properties of `a` also in `b`, in `a`'s order.
fn common_order<'p>(a: &'p [Property], b: &[Property]) -> Vec<&'p str> {
    a.iter().filter(|p| b.iter().any(|q| q.prop_id == p.prop_id)).map(|p| p.prop_id.as_str()).collect()
}

/// Items only in `new` (new order), then items only in `old` (old order).
fn set_diff<C: PartialEq + Clone>(old: &[C], new: &[C]) -> (Vec<C>, Vec<C>) {
    let mut added: Vec<C> = Vec::new();
    for c in new {
        if !old.contains(c) && !added.contains(c) {
            added.push(c.clone());
        }
    }
    let mut removed: Vec<C> = Vec::new();
    for c in old {
        if !new.contains(c) && !removed.contains(c) {
            removed.push(c.clone());
        }
    }
    (added, removed)
}

/// The property a single-column constraint is on.
fn single(cols: &[String]) -> Option<&str> {
    match cols {
        [one] => Some(one),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Text and defaults
// ---------------------------------------------------------------------------

/// `.pg` spelling of an element type (wrapped in `[…]` for lists).
fn type_text(ty: &ScalarType, list: bool) -> String {
    let base = match ty {
        ScalarType::Vector(n) => format!("Vector({n})"),
        ScalarType::Enum(values) => format!("enum({})", values.join(", ")),
        other => format!("{other:?}"),
    };
    if list { format!("[{base}]") } else { base }
}

/// `.pg` spelling of a property's type, `?` included.
fn prop_text(p: &Property) -> String {
    let base = type_text(&p.ty, p.list);
    if p.nullable { format!("{base}?") } else { base }
}

fn card_text(c: Card) -> String {
    match c.max {
        Some(max) => format!("@card({}..{max})", c.min),
        None => format!("@card({}..)", c.min),
    }
}

fn range_text(r: &RangeConstraint) -> String {
    let bound = |b: Option<f64>| b.map(|v| v.to_string()).unwrap_or_default();
    format!("@range({}, {}..{})", r.prop, bound(r.min), bound(r.max))
}

fn literal_text(v: &AnnotationValue) -> String {
    match v {
        AnnotationValue::String(s) => format!("{s:?}"),
        AnnotationValue::Int(i) => i.to_string(),
        AnnotationValue::Float(f) => f.to_string(),
        AnnotationValue::Bool(b) => b.to_string(),
        AnnotationValue::Ident(s) => s.clone(),
    }
}

/// The property's `@default(<literal>)` as JSON: `None` when absent,
/// `Err(reason)` when it is malformed or does not fit the type.
fn declared_default(p: &Property) -> Option<Result<Value, String>> {
    let mut found = p.meta.annotations.iter().filter(|a| a.name == "default");
    let ann = found.next()?;
    if found.next().is_some() {
        return Some(Err(format!("`@default` is given twice on `{}`", p.name)));
    }
    let value = match ann.args.as_slice() {
        [arg] if arg.name.is_none() => &arg.value,
        _ => return Some(Err(format!("`@default` on `{}` expects exactly one literal, e.g. `@default(0)`", p.name))),
    };
    let ty = type_text(&p.ty, p.list);
    if p.list || matches!(p.ty, ScalarType::Blob | ScalarType::Vector(_)) {
        return Some(Err(format!("`@default` is not supported on {ty} properties (`{}`)", p.name)));
    }
    Some(default_value(&p.ty, value).map_err(|expected| {
        format!("`@default({})` does not fit `{}: {ty}`: expected {expected}", literal_text(value), p.name)
    }))
}

/// Converts a literal to the JSON value of a `ty` column, or says what was expected.
fn default_value(ty: &ScalarType, value: &AnnotationValue) -> Result<Value, String> {
    use AnnotationValue as A;
    let int_in = |i: i64, ok: bool| if ok { Ok(Value::from(i)) } else { Err(format!("an integer that fits {ty:?}")) };
    match (ty, value) {
        (ScalarType::String, A::String(s)) => Ok(Value::from(s.clone())),
        (ScalarType::Enum(values), A::String(s) | A::Ident(s)) if values.contains(s) => Ok(Value::from(s.clone())),
        (ScalarType::Enum(values), _) => Err(format!("one of {}", values.join(", "))),
        (ScalarType::Date, A::String(s)) if parse_date(s).is_some() => Ok(Value::from(s.clone())),
        (ScalarType::Date, _) => Err("a date string (\"YYYY-MM-DD\")".into()),
        (ScalarType::DateTime, A::String(s)) if parse_datetime(s).is_some() => Ok(Value::from(s.clone())),
        (ScalarType::DateTime, _) => Err("an RFC 3339 datetime string".into()),
        (ScalarType::Bool, A::Bool(b)) => Ok(Value::from(*b)),
        (ScalarType::I32, A::Int(i)) => int_in(*i, i32::try_from(*i).is_ok()),
        (ScalarType::I64, A::Int(i)) => Ok(Value::from(*i)),
        (ScalarType::U32, A::Int(i)) => int_in(*i, u32::try_from(*i).is_ok()),
        (ScalarType::U64, A::Int(i)) => int_in(*i, *i >= 0),
        (ScalarType::F32 | ScalarType::F64, A::Int(_) | A::Float(_)) => {
            let f = match value {
                A::Int(i) => *i as f64,
                A::Float(f) => *f,
                _ => f64::NAN,
            };
            let fits = if *ty == ScalarType::F32 { (f as f32).is_finite() } else { f.is_finite() };
            match serde_json::Number::from_f64(f) {
                Some(n) if fits => Ok(Value::Number(n)),
                _ => Err(format!("a finite {ty:?}")),
            }
        }
        (ScalarType::String, _) => Err("a string".into()),
        (ScalarType::Bool, _) => Err("true or false".into()),
        (ty, _) if ty.is_integer() => Err(format!("an integer that fits {ty:?}")),
        (ty, _) => Err(format!("a {ty:?} number")),
    }
}

#[cfg(test)]
#[path = "evolve_tests.rs"]
mod tests;
