//! Interpreting annotations on types and properties: the known ones
//! (`@description`, `@instruction`, `@rename_from`, `@merge`, `@embed`, property-level
//! `@key`/`@unique`/`@index`) are checked and lowered; unknown ones are kept
//! as [`CustomAnnotation`] metadata.

use super::types::{AnnotationArg, AnnotationValue, CustomAnnotation, Meta};
use crate::lang::diag::{Diagnostic, Pos};
use crate::lang::schema::ast::{AnnArg, Annotation, Literal};
use crate::lang::schema::codes;

/// Where an annotation appears; decides which known names are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// On a node or edge header.
    Type,
    /// On a node or interface property.
    NodeProp,
    /// On an edge property.
    EdgeProp,
}

/// Property-level flags collected from annotations, with where each was written.
#[derive(Debug, Default)]
pub struct PropFlags {
    /// `@key`
    pub key: Option<Pos>,
    /// `@unique`
    pub unique: Option<Pos>,
    /// `@index`
    pub index: Option<Pos>,
    /// `@embed("src", model = "…")`: source, its position, model, annotation position.
    pub embed: Option<EmbedArgs>,
}

/// Arguments of a property's `@embed`.
#[derive(Debug, Clone)]
pub struct EmbedArgs {
    /// Source property name.
    pub source: String,
    /// Where the source string is written.
    pub source_pos: Pos,
    /// Pinned model.
    pub model: Option<String>,
    /// Where the `@` is.
    pub pos: Pos,
}

fn bad(pos: Pos, msg: impl Into<String>) -> Diagnostic {
    Diagnostic::with_code(pos, codes::BAD_ANNOTATION, msg)
}

fn misplaced(ann: &Annotation, msg: &str) -> Diagnostic {
    Diagnostic::with_code(ann.pos, codes::MISPLACED, format!("`@{}` {msg}", ann.name.text))
}

/// Lowers `annotations` at `site` into `meta` (and `flags` for properties).
pub fn lower(annotations: &[Annotation], site: Site, meta: &mut Meta, flags: &mut PropFlags) -> Result<(), Diagnostic> {
    for ann in annotations {
        match ann.name.text.as_str() {
            "description" => set_once(&mut meta.description, single_string(ann)?, ann)?,
            "instruction" => set_once(&mut meta.instruction, single_string(ann)?, ann)?,
            "rename_from" => set_once(&mut meta.rename_from, single_string(ann)?, ann)?,
            "merge" => merge_policy(ann, meta)?,
            "key" | "unique" | "index" => prop_flag(ann, site, flags)?,
            "embed" => embed(ann, site, flags)?,
            "range" | "check" => {
                return Err(misplaced(ann, "is a body constraint: write it with arguments inside a node body"));
            }
            "card" => {
                return Err(misplaced(ann, "belongs on an edge header, after `From -> To`"));
            }
            _ => meta.annotations.push(custom(ann)),
        }
    }
    Ok(())
}

/// `@merge(ours|theirs|newest|fail)`.
fn merge_policy(ann: &Annotation, meta: &mut Meta) -> Result<(), Diagnostic> {
    let usage = "`@merge` expects one of `ours`, `theirs`, `newest`, `fail`, e.g. `@merge(theirs)`";
    let word = match (ann.args.as_slice(), ann.named.is_empty()) {
        ([AnnArg { value: Literal::Ident(w) | Literal::Str(w), .. }], true) => w,
        _ => return Err(bad(ann.pos, usage)),
    };
    let policy = word.parse().map_err(|_| bad(ann.pos, usage))?;
    if meta.merge.replace(policy).is_some() {
        return Err(bad(ann.pos, "`@merge` is given twice"));
    }
    Ok(())
}

fn set_once(slot: &mut Option<String>, value: String, ann: &Annotation) -> Result<(), Diagnostic> {
    if slot.is_some() {
        return Err(bad(ann.pos, format!("`@{}` is given twice", ann.name.text)));
    }
    *slot = Some(value);
    Ok(())
}

/// The single string argument of `@name("…")`.
fn single_string(ann: &Annotation) -> Result<String, Diagnostic> {
    match (ann.args.as_slice(), ann.named.is_empty()) {
        ([AnnArg { value: Literal::Str(s), .. }], true) => Ok(s.clone()),
        _ => Err(bad(
            ann.pos,
            format!("`@{}` expects exactly one string argument, e.g. `@{}(\"…\")`", ann.name.text, ann.name.text),
        )),
    }
}

fn prop_flag(ann: &Annotation, site: Site, flags: &mut PropFlags) -> Result<(), Diagnostic> {
    let name = ann.name.text.as_str();
    if site == Site::Type {
        return Err(misplaced(
            ann,
            "is not a type annotation: put it on a property or write it with arguments in the body",
        ));
    }
    if site == Site::EdgeProp && name == "key" {
        return Err(misplaced(ann, "is not allowed on edges: edges are identified by `id`; use `@unique(src, dst)`"));
    }
    let slot = match name {
        "key" => &mut flags.key,
        "unique" => &mut flags.unique,
        _ => &mut flags.index,
    };
    if slot.is_some() {
        return Err(bad(ann.pos, format!("`@{name}` is given twice")));
    }
    *slot = Some(ann.pos);
    Ok(())
}

fn embed(ann: &Annotation, site: Site, flags: &mut PropFlags) -> Result<(), Diagnostic> {
    if site != Site::NodeProp {
        return Err(misplaced(ann, "is only allowed on Vector properties of nodes"));
    }
    if flags.embed.is_some() {
        return Err(bad(ann.pos, "`@embed` is given twice"));
    }
    let usage = "`@embed` expects `@embed(\"source_prop\")` or `@embed(\"source_prop\", model = \"…\")`";
    let [AnnArg { value: Literal::Str(source), pos: source_pos }] = ann.args.as_slice() else {
        return Err(bad(ann.pos, usage));
    };
    let mut model = None;
    for (key, arg) in &ann.named {
        match (key.text.as_str(), &arg.value) {
            ("model", Literal::Str(m)) if model.is_none() => model = Some(m.clone()),
            _ => return Err(bad(key.pos, usage)),
        }
    }
    flags.embed = Some(EmbedArgs { source: source.clone(), source_pos: *source_pos, model, pos: ann.pos });
    Ok(())
}

fn custom(ann: &Annotation) -> CustomAnnotation {
    let positional = ann.args.iter().map(|a| AnnotationArg { name: None, value: value(&a.value) });
    let named = ann.named.iter().map(|(k, a)| AnnotationArg { name: Some(k.text.clone()), value: value(&a.value) });
    CustomAnnotation { name: ann.name.text.clone(), args: positional.chain(named).collect() }
}

fn value(lit: &Literal) -> AnnotationValue {
    match lit {
        Literal::Str(s) => AnnotationValue::String(s.clone()),
        Literal::Int(i) => AnnotationValue::Int(*i),
        Literal::Float(f) => AnnotationValue::Float(*f),
        Literal::Bool(b) => AnnotationValue::Bool(*b),
        Literal::Ident(s) => AnnotationValue::Ident(s.clone()),
    }
}
