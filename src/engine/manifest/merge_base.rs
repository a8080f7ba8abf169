//! The merge base of two commits in the commit DAG: the best common ancestor
//! over parents and merged parents (the merge writer's three-way base).

use std::collections::{HashMap, HashSet};

use super::rows::CommitRow;
use super::state::ManifestState;

/// The commit DAGs of two manifest branches in one map (a branch's manifest
/// holds its parent's commits up to the fork, so they overlap).
/// Both states must be complete (their histories loaded).
pub fn joint_dag(a: &ManifestState, b: &ManifestState) -> crate::protocol::Result<HashMap<String, CommitRow>> {
    let mut commits = a.commits()?.clone();
    commits.extend(b.commits()?.iter().map(|(k, v)| (k.clone(), v.clone())));
    Ok(commits)
}

/// Every commit reachable from `head` (itself included).
pub fn ancestors(commits: &HashMap<String, CommitRow>, head: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut stack = vec![head.to_string()];
    while let Some(id) = stack.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        if let Some(c) = commits.get(&id) {
            stack.extend(c.parent.iter().cloned());
            stack.extend(c.merged_parent.iter().cloned());
        }
    }
    seen.retain(|id| commits.contains_key(id));
    seen
}

/// The best common ancestor of `a` and `b`: a common ancestor that is not an
/// ancestor of another common ancestor. With several (criss-cross merges) the
/// newest wins, deterministically. `None` when the histories are disjoint.
pub fn merge_base(commits: &HashMap<String, CommitRow>, a: &str, b: &str) -> Option<String> {
    let from_a = ancestors(commits, a);
    let common: HashSet<String> = ancestors(commits, b).into_iter().filter(|id| from_a.contains(id)).collect();
    let dominated: HashSet<String> = common
        .iter()
        .flat_map(|c| {
            let mut up = ancestors(commits, c);
            up.remove(c);
            up
        })
        .collect();
    common
        .into_iter()
        .filter(|c| !dominated.contains(c))
        .filter_map(|c| commits.get(&c))
        .max_by(|x, y| {
            (x.manifest_version, x.created_at_us, &x.commit_id).cmp(&(
                y.manifest_version,
                y.created_at_us,
                &y.commit_id,
            ))
        })
        .map(|c| c.commit_id.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dag(edges: &[(&str, Option<&str>, Option<&str>, u64)]) -> HashMap<String, CommitRow> {
        edges
            .iter()
            .map(|(id, parent, merged, v)| {
                let row = CommitRow {
                    commit_id: id.to_string(),
                    parent: parent.map(str::to_string),
                    merged_parent: merged.map(str::to_string),
                    actor: None,
                    created_at_us: *v as i64,
                    manifest_version: *v,
                    branch: "main".into(),
                    schema_change: None,
                    operation: None,
                    source_commit_id: None,
                };
                (id.to_string(), row)
            })
            .collect()
    }

    #[test]
    fn fork_point_of_two_lines() {
        // g - a - b (main) ; a - x - y (feature)
        let c = dag(&[
            ("g", None, None, 1),
            ("a", Some("g"), None, 2),
            ("b", Some("a"), None, 3),
            ("x", Some("a"), None, 3),
            ("y", Some("x"), None, 4),
        ]);
        assert_eq!(merge_base(&c, "b", "y").as_deref(), Some("a"));
        assert_eq!(merge_base(&c, "y", "b").as_deref(), Some("a"));
        assert_eq!(merge_base(&c, "a", "y").as_deref(), Some("a"), "an ancestor is its own base");
        assert_eq!(merge_base(&c, "y", "y").as_deref(), Some("y"));
    }

    #[test]
    fn a_merge_moves_the_base_forward() {
        // main: g - a - m(merge of x) - b ; feature: a - x - z
        let c = dag(&[
            ("g", None, None, 1),
            ("a", Some("g"), None, 2),
            ("x", Some("a"), None, 3),
            ("m", Some("a"), Some("x"), 4),
            ("b", Some("m"), None, 5),
            ("z", Some("x"), None, 4),
        ]);
        assert_eq!(merge_base(&c, "b", "z").as_deref(), Some("x"));
    }

    #[test]
    fn disjoint_histories_have_no_base() {
        let c = dag(&[("p", None, None, 1), ("q", None, None, 1)]);
        assert_eq!(merge_base(&c, "p", "q"), None);
        assert_eq!(merge_base(&c, "p", "missing"), None);
    }
}
