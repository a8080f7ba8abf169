//! Warnings about a schema that compiles. An unknown annotation is kept as
//! custom metadata (users may annotate freely), so a misspelt known one
//! (`@indx`, `@uniqe`) would silently do nothing: each unknown name is
//! reported with the closest known name when one is near.

use crate::lang::diag::Diagnostic;
use crate::lang::schema::ast::{Annotation, Decl, PropDecl};
use crate::lang::schema::{codes, parse_schema};

/// Every annotation name the catalog interprets.
pub const KNOWN_ANNOTATIONS: &[&str] = &[
    "card",
    "check",
    "default",
    "description",
    "embed",
    "index",
    "instruction",
    "key",
    "merge",
    "range",
    "rename_from",
    "unique",
];

/// One warning per unknown annotation in `src` (nothing when it does not parse:
/// the compile error says more).
pub fn schema_warnings(src: &str) -> Vec<Diagnostic> {
    let Ok(schema) = parse_schema(src) else { return Vec::new() };
    let props = |p: &[PropDecl]| p.iter().flat_map(|p| p.annotations.iter()).cloned().collect::<Vec<_>>();
    let mut all: Vec<Annotation> = Vec::new();
    for decl in &schema.decls {
        match decl {
            Decl::Interface(i) => all.extend(props(&i.props)),
            Decl::Node(n) => {
                all.extend(n.annotations.iter().cloned());
                all.extend(props(&n.props));
            }
            Decl::Edge(e) => {
                all.extend(e.annotations.iter().cloned());
                all.extend(props(&e.props));
            }
        }
    }
    all.iter()
        .filter(|a| !KNOWN_ANNOTATIONS.contains(&a.name.text.as_str()))
        .map(|a| {
            let name = &a.name.text;
            let message = match closest(name) {
                Some(known) => {
                    format!("unknown annotation `@{name}` is kept as custom metadata; did you mean `@{known}`?")
                }
                None => format!("unknown annotation `@{name}` is kept as custom metadata"),
            };
            Diagnostic::with_code(a.pos, codes::UNKNOWN_ANNOTATION, message)
        })
        .collect()
}

/// The known name within two edits of `name` (the nearest), if any.
pub fn closest(name: &str) -> Option<&'static str> {
    KNOWN_ANNOTATIONS.iter().map(|k| (edit_distance(name, k), *k)).filter(|(d, _)| *d <= 2).min().map(|(_, k)| k)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn misspelt_annotations_are_named_with_the_closest_known_one() {
        let src = "node A @indx @owner(\"x\") {\n  name: String @key @uniqe\n}\n";
        let w = schema_warnings(src);
        let msgs: Vec<&str> = w.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(w.len(), 3, "{msgs:?}");
        assert!(msgs[0].contains("`@indx`") && msgs[0].contains("did you mean `@index`?"), "{msgs:?}");
        assert!(msgs[1].contains("`@owner`") && !msgs[1].contains("did you mean"), "{msgs:?}");
        assert!(msgs[2].contains("did you mean `@unique`?"), "{msgs:?}");
        assert_eq!((w[2].pos.line, w[2].code.as_deref()), (2, Some(codes::UNKNOWN_ANNOTATION)));
        assert!(schema_warnings("node A {\n  name: String @key @description(\"d\")\n}\n").is_empty());
    }
}
