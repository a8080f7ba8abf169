//! Classifying native branch create/delete outcomes from fresh metadata.
//!
//! Lance creates a branch in two physical steps (shallow clone of
//! `tree/<name>`, then its `BranchContents`) and deletes in the reverse order,
//! and neither is a conditional operation. After an error, what happened is
//! decided only from the refs listed afresh, never from the error text.

use crate::engine::storage::table::NativeBranch;

/// What a create must find to accept an ambiguous result as its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CreatePlan {
    /// Parent branch (`None` = main).
    pub parent_branch: Option<String>,
    /// Parent version the branch is created at.
    pub parent_version: u64,
    /// The parent's own identifier (the child's must extend it by one element).
    pub parent_identifier: Vec<(u64, String)>,
}

/// How a create attempt ended, judged from the listed ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateOutcome {
    /// The ref is exactly what this create makes.
    Created,
    /// No ref: nothing authoritative exists; the tree (if any) is garbage.
    Absent,
    /// A ref exists but is not ours; it is never deleted.
    Foreign(String),
}

/// Judge the ref found after a create attempt.
pub fn classify_create(plan: &CreatePlan, found: Option<&NativeBranch>) -> CreateOutcome {
    let Some(b) = found else { return CreateOutcome::Absent };
    let extends = b.identifier.len() == plan.parent_identifier.len() + 1
        && b.identifier.starts_with(&plan.parent_identifier)
        && b.identifier.last().is_some_and(|(v, _)| *v == plan.parent_version);
    if b.parent_branch == plan.parent_branch && b.parent_version == plan.parent_version && extends {
        CreateOutcome::Created
    } else {
        CreateOutcome::Foreign(format!(
            "a ref from {} v{} already exists",
            b.parent_branch.as_deref().unwrap_or("main"),
            b.parent_version
        ))
    }
}

/// How a delete attempt ended, judged from the listed ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The ref is gone: the delete took effect.
    Deleted,
    /// The same incarnation is still there: the original error stands.
    StillThere,
    /// A different incarnation holds the name: deleted and recreated under us.
    Recreated,
}

/// Judge the ref found after a delete attempt of the incarnation `captured`.
pub fn classify_delete(captured: &[(u64, String)], found: Option<&NativeBranch>) -> DeleteOutcome {
    match found {
        None => DeleteOutcome::Deleted,
        Some(b) if b.identifier == captured => DeleteOutcome::StillThere,
        Some(_) => DeleteOutcome::Recreated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch(parent: Option<&str>, version: u64, id: &[(u64, &str)]) -> NativeBranch {
        NativeBranch {
            parent_branch: parent.map(str::to_string),
            parent_version: version,
            identifier: id.iter().map(|(v, u)| (*v, u.to_string())).collect(),
            created_at: 0,
        }
    }

    #[test]
    fn create_accepts_only_one_new_element_on_the_captured_parent() {
        let plan = CreatePlan { parent_branch: None, parent_version: 4, parent_identifier: vec![] };
        assert_eq!(classify_create(&plan, None), CreateOutcome::Absent);
        assert_eq!(classify_create(&plan, Some(&branch(None, 4, &[(4, "u")]))), CreateOutcome::Created);
        assert!(matches!(classify_create(&plan, Some(&branch(None, 3, &[(3, "u")]))), CreateOutcome::Foreign(_)));
        assert!(matches!(
            classify_create(&plan, Some(&branch(Some("x"), 4, &[(2, "p"), (4, "u")]))),
            CreateOutcome::Foreign(_)
        ));
        let nested =
            CreatePlan { parent_branch: Some("a".into()), parent_version: 7, parent_identifier: vec![(2, "p".into())] };
        assert_eq!(
            classify_create(&nested, Some(&branch(Some("a"), 7, &[(2, "p"), (7, "u")]))),
            CreateOutcome::Created
        );
        assert!(matches!(
            classify_create(&nested, Some(&branch(Some("a"), 7, &[(2, "other"), (7, "u")]))),
            CreateOutcome::Foreign(_)
        ));
    }

    #[test]
    fn delete_tells_gone_from_kept_from_recreated() {
        let id = vec![(3, "u".to_string())];
        assert_eq!(classify_delete(&id, None), DeleteOutcome::Deleted);
        assert_eq!(classify_delete(&id, Some(&branch(None, 3, &[(3, "u")]))), DeleteOutcome::StillThere);
        assert_eq!(classify_delete(&id, Some(&branch(None, 5, &[(5, "v")]))), DeleteOutcome::Recreated);
    }
}
