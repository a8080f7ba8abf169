//! Three-way merge of `.pg` schemas: what a branch merge does to the
//! schemas of its base, target ("ours") and source ("theirs") before it
//! merges their rows.
//!
//! Declarations and properties are matched to the base's by name, else by
//! `@rename_from` (so a rename is a change of the base's item, not a drop
//! and an add), and compared by their rendered text ([`super::render`]),
//! which ignores layout and comments. Per item: a change on one side only
//! is taken (added, changed, renamed or dropped); the same change on both
//! sides is taken once; a type both sides changed differently is merged
//! member by member (its header, each property, its constraints as a set);
//! anything else both sides changed differently is a [`SchemaConflict`].
//! The merged schema keeps ours' order, with each of theirs' additions
//! before the item that follows it in theirs (after ours' own additions
//! there), or last.
//!
//! Syntax only: the engine compiles the result, and a merged schema that
//! does not compile (a constraint naming a property the other side renamed)
//! is reported as a conflict there.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::ast::{Constraint, Decl, EdgeDecl, Literal, NodeDecl, PropDecl, Schema};
use super::render;

/// One item both sides changed in ways that cannot both be kept. Each
/// declaration is `.pg` text; `None` where that side does not have it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchemaConflict {
    /// The type or interface concerned (ours' name, else theirs', else the base's).
    pub type_name: String,
    /// The property concerned, when the conflict is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub property: Option<String>,
    /// Why the changes cannot both be kept.
    pub reason: String,
    /// The declaration at the merge base.
    pub base: Option<String>,
    /// The target's declaration.
    pub ours: Option<String>,
    /// The source's declaration.
    pub theirs: Option<String>,
}

/// Merge `ours` and `theirs`, both descended from `base`: the merged
/// schema, or every conflict found.
pub fn merge(base: &Schema, ours: &Schema, theirs: &Schema) -> Result<Schema, Vec<SchemaConflict>> {
    let mut conflicts = Vec::new();
    let decls = merge_list(&base.decls, &ours.decls, &theirs.decls, &mut conflicts, &merge_decls);
    if conflicts.is_empty() { Ok(Schema { decls }) } else { Err(conflicts) }
}

/// An item of a three-way merge: a declaration or a property.
trait Item: Clone {
    /// What matches it across sides (a declaration's namespace and name).
    fn key(&self) -> String;
    /// The key it had before a `@rename_from`.
    fn renamed_from(&self) -> Option<String>;
    /// Its canonical text.
    fn text(&self) -> String;
    /// The name conflicts report (the type's, or the property's).
    fn label(&self) -> String;
}

impl Item for Decl {
    fn key(&self) -> String {
        match self {
            Decl::Interface(i) => format!("interface {}", i.name.text),
            Decl::Node(n) => n.name.text.clone(),
            Decl::Edge(e) => e.name.text.clone(),
        }
    }

    fn renamed_from(&self) -> Option<String> {
        let annotations = match self {
            Decl::Interface(_) => return None,
            Decl::Node(n) => &n.annotations,
            Decl::Edge(e) => &e.annotations,
        };
        rename_hint(annotations)
    }

    fn text(&self) -> String {
        render::decl(self)
    }

    fn label(&self) -> String {
        self.key().trim_start_matches("interface ").to_string()
    }
}

impl Item for PropDecl {
    fn key(&self) -> String {
        self.name.text.clone()
    }

    fn renamed_from(&self) -> Option<String> {
        rename_hint(&self.annotations)
    }

    fn text(&self) -> String {
        render::prop(self)
    }

    fn label(&self) -> String {
        self.name.text.clone()
    }
}

fn rename_hint(annotations: &[super::ast::Annotation]) -> Option<String> {
    let hint = annotations.iter().find(|a| a.name.text == "rename_from")?;
    match &hint.args.first()?.value {
        Literal::Str(s) => Some(s.clone()),
        _ => None,
    }
}

/// What merging both sides' changes to one item needs when they differ:
/// `(base, ours, theirs)` in, the merged item out (conflicts recorded).
type Both<'a, T> = dyn Fn(Option<&T>, &T, &T, &mut Vec<SchemaConflict>) -> Option<T> + 'a;

/// Three-way merge of one list of items.
fn merge_list<T: Item>(
    base: &[T],
    ours: &[T],
    theirs: &[T],
    conflicts: &mut Vec<SchemaConflict>,
    both: &Both<'_, T>,
) -> Vec<T> {
    let (our_match, _) = matched(base, ours);
    let (their_match, their_new) = matched(base, theirs);
    let base_of_ours: HashMap<usize, usize> = our_match.iter().map(|(b, o)| (*o, *b)).collect();
    let their_added: HashMap<String, usize> = their_new.iter().map(|&t| (theirs[t].key(), t)).collect();
    let mut out = Vec::new();
    let mut taken_theirs = HashSet::new();
    for (o, item) in ours.iter().enumerate() {
        let (b, t) = match base_of_ours.get(&o) {
            Some(&b) => (Some(&base[b]), their_match.get(&b).map(|&t| &theirs[t])),
            None => (None, their_added.get(&item.key()).map(|&t| &theirs[t])),
        };
        if b.is_none()
            && let Some(&t) = their_added.get(&item.key())
        {
            taken_theirs.insert(t);
        }
        out.extend(pick(b, Some(item), t, conflicts, both));
    }
    // Base items ours dropped: dropped, unless theirs changed them.
    for (b, item) in base.iter().enumerate() {
        if !our_match.contains_key(&b) {
            let t = their_match.get(&b).map(|&t| &theirs[t]);
            out.extend(pick(Some(item), None, t, conflicts, both));
        }
    }
    // Theirs' additions go where theirs put them: before the item that
    // follows them there (after ours' own additions at that spot), else last.
    for &t in their_new.iter().filter(|t| !taken_theirs.contains(*t)) {
        let next = theirs[t + 1..].iter().find_map(|n| out.iter().position(|o| o.key() == n.key()));
        out.insert(next.unwrap_or(out.len()), theirs[t].clone());
    }
    out
}

/// Which base item each side item changes (`base index → side index`),
/// by name first, then by `@rename_from`; and the side's additions.
fn matched<T: Item>(base: &[T], side: &[T]) -> (HashMap<usize, usize>, Vec<usize>) {
    let index: HashMap<String, usize> = base.iter().enumerate().map(|(i, b)| (b.key(), i)).collect();
    let mut out = HashMap::new();
    let mut unmatched = Vec::new();
    for (s, item) in side.iter().enumerate() {
        match index.get(&item.key()) {
            Some(&b) => {
                out.insert(b, s);
            }
            None => unmatched.push(s),
        }
    }
    let mut added = Vec::new();
    for s in unmatched {
        let renamed = side[s].renamed_from().and_then(|from| index.get(&from).copied());
        match renamed.filter(|b| !out.contains_key(b)) {
            Some(b) => {
                out.insert(b, s);
            }
            None => added.push(s),
        }
    }
    (out, added)
}

/// The merge of one item: `None` when it is dropped (or in conflict).
fn pick<T: Item>(
    b: Option<&T>,
    o: Option<&T>,
    t: Option<&T>,
    conflicts: &mut Vec<SchemaConflict>,
    both: &Both<'_, T>,
) -> Option<T> {
    let text = |x: Option<&T>| x.map(Item::text);
    let (bt, ot, tt) = (text(b), text(o), text(t));
    if ot == tt || tt == bt {
        return o.cloned();
    }
    if ot == bt {
        return t.cloned();
    }
    match (o, t) {
        (Some(o), Some(t)) => both(b, o, t, conflicts),
        _ => {
            conflicts.push(conflict(b, o, t, None, "one side dropped it and the other changed it"));
            None
        }
    }
}

fn conflict<T: Item>(
    b: Option<&T>,
    o: Option<&T>,
    t: Option<&T>,
    type_name: Option<&str>,
    why: &str,
) -> SchemaConflict {
    let label = o.or(t).or(b).map(Item::label).unwrap_or_default();
    let (type_name, property) = match type_name {
        Some(ty) => (ty.to_string(), Some(label)),
        None => (label, None),
    };
    SchemaConflict {
        type_name,
        property,
        reason: why.to_string(),
        base: b.map(Item::text),
        ours: o.map(Item::text),
        theirs: t.map(Item::text),
    }
}

/// Both sides changed one declaration differently: a node or edge type
/// merges member by member; anything else is a conflict.
fn merge_decls(b: Option<&Decl>, o: &Decl, t: &Decl, conflicts: &mut Vec<SchemaConflict>) -> Option<Decl> {
    let header = |d: Option<&Decl>| d.map(render::header);
    let (bh, oh, th) = (header(b), header(Some(o)), header(Some(t)));
    let head = if oh == th || th == bh {
        o
    } else if oh == bh {
        t
    } else {
        let why = if b.is_some() {
            "both sides changed its declaration differently"
        } else {
            "both sides added it differently"
        };
        conflicts.push(conflict(b, Some(o), Some(t), None, why));
        return None;
    };
    let owner = o.label();
    let before = conflicts.len();
    let merged = match (head, members(b), members(Some(o)), members(Some(t))) {
        (Decl::Node(n), bm, Some(om), Some(tm)) => {
            let (props, constraints) = merge_members(&owner, bm, om, tm, conflicts);
            Decl::Node(NodeDecl { props, constraints, ..n.clone() })
        }
        (Decl::Edge(e), bm, Some(om), Some(tm)) => {
            let (props, constraints) = merge_members(&owner, bm, om, tm, conflicts);
            Decl::Edge(EdgeDecl { props, constraints, ..e.clone() })
        }
        _ => {
            conflicts.push(conflict(b, Some(o), Some(t), None, "both sides changed it differently"));
            return None;
        }
    };
    (conflicts.len() == before).then_some(merged)
}

/// A node's or an edge's properties and constraints (`None` for an interface).
type Members<'a> = (&'a [PropDecl], &'a [Constraint]);

fn members(d: Option<&Decl>) -> Option<Members<'_>> {
    match d? {
        Decl::Node(n) => Some((&n.props, &n.constraints)),
        Decl::Edge(e) => Some((&e.props, &e.constraints)),
        Decl::Interface(_) => None,
    }
}

/// Properties merged three-way (a property both changed differently is a
/// conflict); constraints as a set: one either side removed goes, one
/// either side added comes.
fn merge_members(
    owner: &str,
    base: Option<Members<'_>>,
    (ours, our_constraints): Members<'_>,
    (theirs, their_constraints): Members<'_>,
    conflicts: &mut Vec<SchemaConflict>,
) -> (Vec<PropDecl>, Vec<Constraint>) {
    let (base_props, base_constraints) = base.unwrap_or((&[], &[]));
    let both = |b: Option<&PropDecl>, o: &PropDecl, t: &PropDecl, c: &mut Vec<SchemaConflict>| {
        let why = if b.is_some() { "both sides changed it differently" } else { "both sides added it differently" };
        c.push(conflict(b, Some(o), Some(t), Some(owner), why));
        None
    };
    let props = merge_list(base_props, ours, theirs, conflicts, &both);
    let texts = |list: &[Constraint]| list.iter().map(render::constraint).collect::<HashSet<_>>();
    let (b, o) = (texts(base_constraints), texts(our_constraints));
    let t = texts(their_constraints);
    let mut constraints: Vec<Constraint> = our_constraints
        .iter()
        .filter(|c| !b.contains(&render::constraint(c)) || t.contains(&render::constraint(c)))
        .cloned()
        .collect();
    constraints.extend(
        their_constraints
            .iter()
            .filter(|c| {
                let text = render::constraint(c);
                !b.contains(&text) && !o.contains(&text)
            })
            .cloned(),
    );
    (props, constraints)
}
