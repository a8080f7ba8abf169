//! Refs: how a user names a point in a graph's history.
//!
//! A ref is a name (a branch, a tag or a commit id), `REF~N` (N first
//! parents back from what REF names; `REF~` is `REF~1`, and `~` repeats:
//! `main~1~2` is `main~3`) or `A...B` (the merge base of A and B). Branch
//! and tag names cannot hold `~` or `..` (see [`crate::branch_name`]), so
//! the grammar is unambiguous. Parsing is pure; resolving a ref against
//! storage is the graph's.

use crate::protocol::{OmniError, Result};

/// Longest ref accepted, in bytes (two names and their operators).
pub const MAX_REF_LEN: usize = 512;

/// A parsed ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefExpr {
    /// A branch, a tag or a commit id, looked up in that order.
    Name(String),
    /// `n` first parents back from what the inner ref names.
    Back(Box<RefExpr>, u32),
    /// The merge base of two refs.
    Base(Box<RefExpr>, Box<RefExpr>),
}

/// Parse `text` as a ref.
pub fn parse(text: &str) -> Result<RefExpr> {
    let bad = |why: &str| OmniError::BadRequest(format!("invalid ref `{}`: {why}", text.escape_debug()));
    if text.len() > MAX_REF_LEN {
        return Err(bad(&format!("it is longer than {MAX_REF_LEN} bytes")));
    }
    match text.split_once("...") {
        Some((a, b)) => {
            if b.contains("...") {
                return Err(bad("it holds more than one `...`"));
            }
            Ok(RefExpr::Base(
                Box::new(parse_back(a).map_err(|w| bad(&w))?),
                Box::new(parse_back(b).map_err(|w| bad(&w))?),
            ))
        }
        None => parse_back(text).map_err(|w| bad(&w)),
    }
}

/// `NAME(~N)*`.
fn parse_back(text: &str) -> std::result::Result<RefExpr, String> {
    let mut parts = text.split('~');
    // What a name may hold is the resolver's to say (branch and tag rules,
    // commit ids); here only the operators are parsed.
    let name = parts.next().unwrap_or_default();
    if name.is_empty() {
        return Err("a name is missing".into());
    }
    let mut back: u32 = 0;
    let mut any = false;
    for n in parts {
        any = true;
        let step: u32 =
            if n.is_empty() { 1 } else { n.parse().map_err(|_| format!("`~{n}` is not `~` and a count"))? };
        back = back.checked_add(step).ok_or("the count is too large")?;
    }
    let name = RefExpr::Name(name.to_string());
    Ok(if any { RefExpr::Back(Box::new(name), back) } else { name })
}

impl std::fmt::Display for RefExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RefExpr::Name(n) => f.write_str(n),
            RefExpr::Back(r, n) => write!(f, "{r}~{n}"),
            RefExpr::Base(a, b) => write!(f, "{a}...{b}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> RefExpr {
        RefExpr::Name(n.into())
    }

    #[test]
    fn names_ancestors_and_merge_bases_parse() {
        assert_eq!(parse("main").unwrap(), name("main"));
        assert_eq!(parse("review/alice").unwrap(), name("review/alice"));
        assert_eq!(parse("v1.2").unwrap(), name("v1.2"));
        assert_eq!(parse("main~2").unwrap(), RefExpr::Back(Box::new(name("main")), 2));
        assert_eq!(parse("main~").unwrap(), RefExpr::Back(Box::new(name("main")), 1));
        assert_eq!(parse("main~1~2").unwrap(), RefExpr::Back(Box::new(name("main")), 3));
        assert_eq!(parse("main~0").unwrap(), RefExpr::Back(Box::new(name("main")), 0));
        let base = parse("main...feature~1").unwrap();
        assert_eq!(base, RefExpr::Base(Box::new(name("main")), Box::new(RefExpr::Back(Box::new(name("feature")), 1))));
        assert_eq!(base.to_string(), "main...feature~1");
    }

    #[test]
    fn malformed_refs_are_bad_requests_naming_the_ref() {
        for bad in ["", "~1", "main~x", "main~-1", "a...b...c", "...b", "a...", "main~99999999999"] {
            match parse(bad) {
                Err(OmniError::BadRequest(m)) => assert!(m.contains("invalid ref"), "{bad:?}: {m}"),
                other => panic!("{bad:?} parsed: {other:?}"),
            }
        }
        assert!(parse(&"a".repeat(MAX_REF_LEN + 1)).is_err());
    }
}
