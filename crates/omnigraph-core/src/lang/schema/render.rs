//! `.pg` text from a syntax tree: what a merged schema is stored as, and
//! the declarations a schema conflict shows.
//!
//! The output parses back to the same tree (positions aside); comments and
//! layout are not kept. One declaration per block, one property per line.

use super::ast::{
    Annotation, CardDecl, Constraint, ConstraintKind, CoreType, Decl, EdgeDecl, InterfaceDecl, Literal, Name, NodeDecl,
    Number, PropDecl, Schema,
};

/// The whole schema, declarations in order, separated by blank lines.
pub fn schema(s: &Schema) -> String {
    let decls: Vec<String> = s.decls.iter().map(decl).collect();
    let mut out = decls.join("\n\n");
    out.push('\n');
    out
}

/// One declaration with its body.
pub fn decl(d: &Decl) -> String {
    match d {
        Decl::Interface(i) => interface(i),
        Decl::Node(n) => node(n),
        Decl::Edge(e) => edge(e),
    }
}

/// A declaration's header: everything before its body.
pub fn header(d: &Decl) -> String {
    match d {
        Decl::Interface(i) => format!("interface {}", i.name.text),
        Decl::Node(n) => {
            let mut out = format!("node {}{}", n.name.text, annotations(&n.annotations));
            if !n.implements.is_empty() {
                out.push_str(" implements ");
                out.push_str(&names(&n.implements));
            }
            out
        }
        Decl::Edge(e) => {
            let card = e.card.as_ref().map(card).unwrap_or_default();
            format!("edge {}: {} -> {}{card}{}", e.name.text, e.from.text, e.to.text, annotations(&e.annotations))
        }
    }
}

fn interface(i: &InterfaceDecl) -> String {
    body(&header(&Decl::Interface(i.clone())), &i.props, &[])
}

fn node(n: &NodeDecl) -> String {
    body(&header(&Decl::Node(n.clone())), &n.props, &n.constraints)
}

fn edge(e: &EdgeDecl) -> String {
    let head = header(&Decl::Edge(e.clone()));
    if e.props.is_empty() && e.constraints.is_empty() { head } else { body(&head, &e.props, &e.constraints) }
}

fn body(head: &str, props: &[PropDecl], constraints: &[Constraint]) -> String {
    let mut out = format!("{head} {{\n");
    for p in props {
        out.push_str(&format!("    {}\n", prop(p)));
    }
    for c in constraints {
        out.push_str(&format!("    {}\n", constraint(c)));
    }
    out.push('}');
    out
}

/// `name: Type? @annotation…`
pub fn prop(p: &PropDecl) -> String {
    let ty = match &p.ty.core {
        CoreType::Base(b) => b.name().to_string(),
        CoreType::List(b) => format!("[{}]", b.name()),
        CoreType::Enum(values) => format!("enum({})", names(values)),
        CoreType::Vector(n) => format!("Vector({n})"),
    };
    let nullable = if p.ty.nullable { "?" } else { "" };
    format!("{}: {ty}{nullable}{}", p.name.text, annotations(&p.annotations))
}

/// A body constraint: `@key(a)`, `@range(p, 0..)`, …
pub fn constraint(c: &Constraint) -> String {
    let args = match &c.kind {
        ConstraintKind::Key(n) | ConstraintKind::Unique(n) | ConstraintKind::Index(n) => names(n),
        ConstraintKind::Range { prop, min, max } => {
            let bound = |b: &Option<Number>| b.map(number).unwrap_or_default();
            format!("{}, {}..{}", prop.text, bound(min), bound(max))
        }
        ConstraintKind::Check { prop, pattern, .. } => format!("{}, {}", prop.text, string(pattern)),
    };
    format!("@{}({args})", c.kind.keyword())
}

fn card(c: &CardDecl) -> String {
    format!(" @card({}..{})", c.min, c.max.map(|m| m.to_string()).unwrap_or_default())
}

fn annotations(list: &[Annotation]) -> String {
    list.iter().map(|a| format!(" {}", annotation(a))).collect()
}

fn annotation(a: &Annotation) -> String {
    if a.args.is_empty() && a.named.is_empty() {
        return format!("@{}", a.name.text);
    }
    let positional = a.args.iter().map(|arg| literal(&arg.value));
    let named = a.named.iter().map(|(k, arg)| format!("{} = {}", k.text, literal(&arg.value)));
    format!("@{}({})", a.name.text, positional.chain(named).collect::<Vec<_>>().join(", "))
}

fn literal(l: &Literal) -> String {
    match l {
        Literal::Str(s) => string(s),
        Literal::Int(i) => i.to_string(),
        Literal::Float(f) => number(Number::Float(*f)),
        Literal::Bool(b) => b.to_string(),
        Literal::Ident(s) => s.clone(),
    }
}

fn number(n: Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        // `{:?}` keeps a fraction or an exponent, so it lexes as a float again.
        Number::Float(f) => format!("{f:?}"),
    }
}

/// A string literal the lexer reads back as `s`.
fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn names(list: &[Name]) -> String {
    list.iter().map(|n| n.text.as_str()).collect::<Vec<_>>().join(", ")
}
