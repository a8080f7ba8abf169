//! Lowering a parsed `.pg` tree into a [`Catalog`], applying the semantic
//! rules that need the whole file (names, interfaces, endpoints,
//! constraint placement and types).

use super::Catalog;
use super::annotations::{self, PropFlags, Site};
use super::id;
use super::rules::{Scope, SetKind};
use super::types::{Card, EdgeType, InterfaceType, Meta, NodeType, Property, ScalarType, TypeKind};
use crate::lang::diag::{Diagnostic, Pos};
use crate::lang::schema::ast::{
    Constraint, ConstraintKind, CoreType, Decl, EdgeDecl, InterfaceDecl, Name, NodeDecl, PropDecl, Schema,
};
use crate::lang::schema::codes;
use std::collections::HashSet;

/// System columns no declared property may shadow.
const RESERVED_ALWAYS: [&str; 6] =
    ["_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version", "_tombstone"];

/// Lowers a parsed schema into a catalog.
pub fn lower(schema: &Schema) -> Result<Catalog, Diagnostic> {
    check_type_names(schema)?;
    let iface_decls: Vec<&InterfaceDecl> =
        schema.decls.iter().filter_map(|d| if let Decl::Interface(i) = d { Some(i) } else { None }).collect();
    let node_names: Vec<&str> = schema
        .decls
        .iter()
        .filter_map(|d| if let Decl::Node(n) = d { Some(n.name.text.as_str()) } else { None })
        .collect();
    let mut catalog = Catalog::default();
    for decl in &schema.decls {
        match decl {
            Decl::Interface(i) => catalog.interfaces.push(lower_interface(i)?),
            Decl::Node(n) => catalog.nodes.push(lower_node(n, &iface_decls)?),
            Decl::Edge(e) => catalog.edges.push(lower_edge(e, &node_names)?),
        }
    }
    Ok(catalog)
}

/// S08: names are unique across all declarations, and edge names also
/// case-insensitively (edges are looked up that way in load files).
fn check_type_names(schema: &Schema) -> Result<(), Diagnostic> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut edges: HashSet<String> = HashSet::new();
    for decl in &schema.decls {
        let name = decl_name(decl);
        if !seen.insert(&name.text) {
            return Err(dup_type(name, "is declared twice"));
        }
        if let Decl::Edge(_) = decl {
            let lower = name.text.to_lowercase();
            if !edges.insert(lower) {
                return Err(dup_type(name, "clashes with another edge name (edge names are case-insensitive)"));
            }
        }
    }
    Ok(())
}

fn dup_type(name: &Name, what: &str) -> Diagnostic {
    Diagnostic::with_code(name.pos, codes::DUPLICATE_TYPE, format!("type `{}` {what}", name.text))
}

fn decl_name(decl: &Decl) -> &Name {
    match decl {
        Decl::Interface(i) => &i.name,
        Decl::Node(n) => &n.name,
        Decl::Edge(e) => &e.name,
    }
}

/// A lowered property plus its property-level constraint flags.
struct LoweredProp {
    prop: Property,
    flags: PropFlags,
    name: Name,
}

fn lower_prop(owner: &str, decl: &PropDecl, site: Site) -> Result<LoweredProp, Diagnostic> {
    let (ty, list) = match &decl.ty.core {
        CoreType::Base(b) => (ScalarType::from(*b), false),
        CoreType::List(b) => (ScalarType::from(*b), true),
        CoreType::Enum(values) => (ScalarType::Enum(values.iter().map(|v| v.text.clone()).collect()), false),
        CoreType::Vector(n) => (ScalarType::Vector(*n), false),
    };
    let mut meta = Meta::default();
    let mut flags = PropFlags::default();
    annotations::lower(&decl.annotations, site, &mut meta, &mut flags)?;
    let prop = Property {
        name: decl.name.text.clone(),
        prop_id: id::prop_id(owner, &decl.name.text),
        ty,
        list,
        nullable: decl.ty.nullable,
        meta,
    };
    Ok(LoweredProp { prop, flags, name: decl.name.clone() })
}

/// S09 and S12 for one property list. `physical` are the type's own
/// system columns (`id`, or `id`/`src`/`dst` for edges).
fn check_prop_names(props: &[LoweredProp], physical: &[&str]) -> Result<(), Diagnostic> {
    for (i, p) in props.iter().enumerate() {
        let name = &p.name.text;
        if physical.contains(&name.as_str()) || RESERVED_ALWAYS.contains(&name.as_str()) {
            return Err(Diagnostic::with_code(
                p.name.pos,
                codes::RESERVED_NAME,
                format!("property name `{name}` is reserved for a system column"),
            ));
        }
        if props.iter().take(i).any(|q| &q.name.text == name) {
            return Err(Diagnostic::with_code(
                p.name.pos,
                codes::DUPLICATE_PROP,
                format!("property `{name}` is declared twice (interfaces count too)"),
            ));
        }
    }
    Ok(())
}

fn lower_interface(decl: &InterfaceDecl) -> Result<InterfaceType, Diagnostic> {
    let owner = &decl.name.text;
    let props = decl.props.iter().map(|p| lower_prop(owner, p, Site::NodeProp)).collect::<Result<Vec<_>, _>>()?;
    check_prop_names(&props, &["id"])?;
    Ok(InterfaceType { name: owner.clone(), properties: props.into_iter().map(|p| p.prop).collect() })
}

/// Interface props (in `implements` order) followed by the node's own.
fn node_prop_decls<'a>(decl: &'a NodeDecl, ifaces: &[&'a InterfaceDecl]) -> Result<Vec<&'a PropDecl>, Diagnostic> {
    let mut out = Vec::new();
    for name in &decl.implements {
        let iface = ifaces.iter().find(|i| i.name.text == name.text).ok_or_else(|| {
            Diagnostic::with_code(name.pos, codes::UNKNOWN_INTERFACE, format!("unknown interface `{}`", name.text))
        })?;
        out.extend(iface.props.iter());
    }
    out.extend(decl.props.iter());
    Ok(out)
}

fn lower_node(decl: &NodeDecl, ifaces: &[&InterfaceDecl]) -> Result<NodeType, Diagnostic> {
    let owner = &decl.name.text;
    let mut meta = Meta::default();
    annotations::lower(&decl.annotations, Site::Type, &mut meta, &mut PropFlags::default())?;
    let lowered = node_prop_decls(decl, ifaces)?
        .into_iter()
        .map(|p| lower_prop(owner, p, Site::NodeProp))
        .collect::<Result<Vec<_>, _>>()?;
    check_prop_names(&lowered, &["id"])?;
    let properties: Vec<Property> = lowered.iter().map(|p| p.prop.clone()).collect();
    let mut node = NodeType {
        name: owner.clone(),
        kind: TypeKind::Node,
        table_id: id::table_id(TypeKind::Node, owner),
        implements: decl.implements.iter().map(|n| n.text.clone()).collect(),
        properties: Vec::new(),
        key: Vec::new(),
        uniques: Vec::new(),
        indexes: Vec::new(),
        ranges: Vec::new(),
        checks: Vec::new(),
        embeds: Vec::new(),
        meta,
    };
    let scope = Scope { owner, props: &properties, is_edge: false };
    let mut key_pos: Option<Pos> = None;
    for lp in &lowered {
        node_prop_constraints(&scope, lp, &mut node, &mut key_pos)?;
    }
    for c in &decl.constraints {
        node_constraint(&scope, c, &mut node, &mut key_pos)?;
    }
    node.properties = properties;
    Ok(node)
}

/// Single-column set named by a property-level flag at `pos`.
fn flag_cols(lp: &LoweredProp, pos: Pos) -> Vec<Name> {
    vec![Name { text: lp.name.text.clone(), pos }]
}

fn node_prop_constraints(
    scope: &Scope,
    lp: &LoweredProp,
    node: &mut NodeType,
    key_pos: &mut Option<Pos>,
) -> Result<(), Diagnostic> {
    if let Some(pos) = lp.flags.key {
        let cols = scope.column_set(SetKind::Key, &flag_cols(lp, pos))?;
        set_key(node, cols, pos, key_pos)?;
    }
    if let Some(pos) = lp.flags.unique {
        push_unique(&mut node.uniques, scope.column_set(SetKind::Unique, &flag_cols(lp, pos))?);
    }
    if let Some(pos) = lp.flags.index {
        push_unique(&mut node.indexes, scope.column_set(SetKind::Index, &flag_cols(lp, pos))?);
    }
    if let Some(args) = &lp.flags.embed {
        node.embeds.push(scope.embed(&lp.prop, args)?);
    }
    Ok(())
}

fn node_constraint(
    scope: &Scope,
    c: &Constraint,
    node: &mut NodeType,
    key_pos: &mut Option<Pos>,
) -> Result<(), Diagnostic> {
    match &c.kind {
        ConstraintKind::Key(cols) => {
            let cols = scope.column_set(SetKind::Key, cols)?;
            set_key(node, cols, c.pos, key_pos)?;
        }
        ConstraintKind::Unique(cols) => push_unique(&mut node.uniques, scope.column_set(SetKind::Unique, cols)?),
        ConstraintKind::Index(cols) => push_unique(&mut node.indexes, scope.column_set(SetKind::Index, cols)?),
        ConstraintKind::Range { prop, min, max } => node.ranges.push(scope.range(prop, *min, *max)?),
        ConstraintKind::Check { prop, pattern, pattern_pos } => {
            node.checks.push(scope.check(prop, pattern, *pattern_pos)?)
        }
    }
    Ok(())
}

/// S22: one key per node (a composite key is one `@key(a, b)`).
fn set_key(node: &mut NodeType, cols: Vec<String>, pos: Pos, key_pos: &mut Option<Pos>) -> Result<(), Diagnostic> {
    if let Some(first) = key_pos {
        return Err(Diagnostic::with_code(
            pos,
            codes::DUPLICATE_KEY,
            format!(
                "`{}` already has a key (declared at {}:{}); declare a composite key as one `@key(a, b)`",
                node.name, first.line, first.column
            ),
        ));
    }
    *key_pos = Some(pos);
    node.key = cols;
    Ok(())
}

/// Adds a column set unless the same set is already present (a property
/// marked `@index` and also listed in `@index(…)` is one index).
fn push_unique(sets: &mut Vec<Vec<String>>, cols: Vec<String>) {
    if !sets.contains(&cols) {
        sets.push(cols);
    }
}

fn lower_edge(decl: &EdgeDecl, node_names: &[&str]) -> Result<EdgeType, Diagnostic> {
    for end in [&decl.from, &decl.to] {
        if !node_names.contains(&end.text.as_str()) {
            return Err(Diagnostic::with_code(
                end.pos,
                codes::UNKNOWN_NODE_TYPE,
                format!("edge `{}` refers to `{}`, which is not a declared node type", decl.name.text, end.text),
            ));
        }
    }
    let owner = &decl.name.text;
    let mut meta = Meta::default();
    annotations::lower(&decl.annotations, Site::Type, &mut meta, &mut PropFlags::default())?;
    let lowered = decl.props.iter().map(|p| lower_prop(owner, p, Site::EdgeProp)).collect::<Result<Vec<_>, _>>()?;
    check_prop_names(&lowered, &["id", "src", "dst"])?;
    let properties: Vec<Property> = lowered.iter().map(|p| p.prop.clone()).collect();
    let scope = Scope { owner, props: &properties, is_edge: true };
    let (mut uniques, mut indexes) = (Vec::new(), Vec::new());
    for lp in &lowered {
        if let Some(pos) = lp.flags.unique {
            push_unique(&mut uniques, scope.column_set(SetKind::Unique, &flag_cols(lp, pos))?);
        }
        if let Some(pos) = lp.flags.index {
            push_unique(&mut indexes, scope.column_set(SetKind::Index, &flag_cols(lp, pos))?);
        }
    }
    for c in &decl.constraints {
        match &c.kind {
            ConstraintKind::Unique(cols) => push_unique(&mut uniques, scope.column_set(SetKind::Unique, cols)?),
            ConstraintKind::Index(cols) => push_unique(&mut indexes, scope.column_set(SetKind::Index, cols)?),
            other => {
                return Err(Diagnostic::with_code(
                    c.pos,
                    codes::MISPLACED,
                    format!("`@{}` is not allowed on edges; edges allow only `@unique` and `@index`", other.keyword()),
                ));
            }
        }
    }
    let card = decl.card.as_ref().map(|c| Card { min: c.min, max: c.max }).unwrap_or_default();
    Ok(EdgeType {
        name: owner.clone(),
        kind: TypeKind::Edge,
        table_id: id::table_id(TypeKind::Edge, owner),
        from_type: decl.from.text.clone(),
        to_type: decl.to.text.clone(),
        card,
        properties,
        uniques,
        indexes,
        meta,
    })
}
