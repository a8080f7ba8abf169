//! Graph branch names: what a user may call a branch, and which live names
//! it must not overlap.
//!
//! A branch name becomes a path (`tree/<name>/` in every dataset that forks
//! for it), so the rules are path rules: `/`-separated segments of ASCII
//! letters, digits, `.`, `-` and `_`; no empty, `.` or `..` segment; no
//! leading or trailing `/`. Live names must be path-prefix-disjoint (`review`
//! and `review/x` cannot both be live) so that reclaiming one branch's tree
//! can never touch another's.

use crate::protocol::{OmniError, Result};

/// The default branch every graph has; never created or deleted.
pub const MAIN: &str = "main";

/// Longest accepted name, in bytes.
pub const MAX_NAME_LEN: usize = 200;

/// Check that `name` may name a new branch.
pub fn validate(name: &str) -> Result<()> {
    validate_as("branch", name)
}

/// Check that `name` may name a new tag: the branch rules, so that a ref
/// parses the same whichever it names.
pub fn validate_tag(name: &str) -> Result<()> {
    validate_as("tag", name)
}

/// The name rules, with `what` (`branch`, `tag`) in the error.
fn validate_as(what: &str, name: &str) -> Result<()> {
    let bad = |why: &str| Err(OmniError::BadRequest(format!("invalid {what} name `{}`: {why}", name.escape_debug())));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > MAX_NAME_LEN {
        return bad(&format!("it is longer than {MAX_NAME_LEN} bytes"));
    }
    if name.starts_with('/') || name.ends_with('/') {
        return bad("it may not start or end with `/`");
    }
    if name.chars().any(char::is_control) {
        return bad("it contains a control character");
    }
    for segment in name.split('/') {
        match segment {
            "" => return bad("it has an empty segment (`//`)"),
            "." | ".." => return bad("`.` and `..` segments would leave the branch's directory"),
            s if s.contains("..") => return bad("it contains `..`"),
            s if !s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')) => {
                return bad("segments may hold only ASCII letters, digits, `.`, `-` and `_`");
            }
            _ => {}
        }
    }
    let first = name.split('/').next().unwrap_or_default();
    if first == MAIN {
        return bad("`main` is the default branch's name and reserved");
    }
    if first.starts_with("__") {
        return bad("names starting with `__` are reserved for internal use");
    }
    Ok(())
}

/// Check that `name` may name an existing branch (a read or write target, a
/// base to branch from): `main`, or any name [`validate`] accepts. Every
/// target is checked before it reaches storage, so a hostile name is a
/// `BadRequest`, never a storage error.
pub fn validate_ref(name: &str) -> Result<()> {
    if name == MAIN { Ok(()) } else { validate(name) }
}

/// Whether `a` is `b` or a path ancestor or descendant of it.
pub fn overlaps(a: &str, b: &str) -> bool {
    let prefix_of = |p: &str, q: &str| q.len() > p.len() && q.starts_with(p) && q.as_bytes()[p.len()] == b'/';
    a == b || prefix_of(a, b) || prefix_of(b, a)
}

/// The first live name `name` overlaps, if any.
pub fn first_overlap<'a>(name: &str, live: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    live.into_iter().find(|l| overlaps(name, l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for ok in ["feature", "review/alice", "a.b-c_d/e2", "v1.2", "MAIN2", "mainline"] {
            validate(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
    }

    #[test]
    fn refuses_each_bad_class() {
        let cases = [
            ("", "empty"),
            ("main", "reserved"),
            ("main/x", "reserved"),
            ("__run__1", "internal"),
            ("/a", "start or end"),
            ("a/", "start or end"),
            ("a//b", "empty segment"),
            ("a/../b", "leave"),
            ("..", "leave"),
            ("a/./b", "leave"),
            ("a..b", "`..`"),
            ("a\nb", "control"),
            ("a\u{7f}", "control"),
            ("a b", "ASCII"),
            ("a\\b", "ASCII"),
            ("ünï", "ASCII"),
            ("a:b", "ASCII"),
        ];
        for (name, why) in cases {
            let err = validate(name).expect_err(name).to_string();
            assert!(err.contains(why), "{name:?}: {err}");
        }
        assert!(validate(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn overlap_is_by_path_segment() {
        assert!(overlaps("review", "review"));
        assert!(overlaps("review", "review/x"));
        assert!(overlaps("review/x/y", "review"));
        assert!(!overlaps("review", "reviewer"));
        assert!(!overlaps("review/x", "review/y"));
        assert_eq!(first_overlap("a/b", ["c", "a", "a/b/c"]), Some("a"));
        assert_eq!(first_overlap("ab", ["a", "abc"]), None);
    }
}
