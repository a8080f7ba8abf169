//! Authorization: the reference's policy bundles (allow-only rules over
//! groups of actors and protected branches), compiled to Cedar and asked
//! once per request. A bundle is checked whole when it is read
//! ([`bundle`]); [`engine::Policy`] answers whether an actor may take an
//! action on a branch, and which rule said so; [`cases`] runs a bundle's
//! declarative tests.

pub mod bundle;
pub mod cases;
pub mod engine;

use serde::{Deserialize, Serialize};

pub use engine::{Decision, Policy};

/// What a request does, as policies name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Queries, snapshots, listings and history reads.
    Read,
    /// NDJSON export and change-feed baselines.
    Export,
    /// Mutations and loads.
    Change,
    /// A schema apply.
    SchemaApply,
    /// A branch create (and a restore of a deleted one).
    BranchCreate,
    /// A branch delete.
    BranchDelete,
    /// A merge (the source is `branch`, the target `target_branch`).
    BranchMerge,
    /// Reserved by the reference for policy management; no route uses it.
    Admin,
    /// Running a stored query by name.
    InvokeQuery,
    /// Listing the served graphs (`GET /graphs`): a server action.
    GraphList,
    /// Reverting a commit onto a branch.
    Revert,
    /// Cherry-picking a commit onto a branch.
    CherryPick,
    /// Moving a branch's head (`branch reset`).
    BranchReset,
    /// Creating a tag.
    TagCreate,
    /// Deleting a tag.
    TagDelete,
    /// Compacting a branch.
    Optimize,
    /// Removing old versions (graph-wide).
    Cleanup,
    /// Building and folding a branch's indexes.
    IndexEnsure,
}

/// Which resource an action is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// One graph.
    Graph,
    /// The server's graph registry.
    Server,
}

/// The three named branch scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeKind {
    /// Every branch (and requests naming none).
    Any,
    /// The bundle's protected branches.
    Protected,
    /// Every other branch.
    Unprotected,
}

impl Action {
    /// Every action, in wire order.
    pub const ALL: [Action; 18] = [
        Action::Read,
        Action::Export,
        Action::Change,
        Action::SchemaApply,
        Action::BranchCreate,
        Action::BranchDelete,
        Action::BranchMerge,
        Action::Admin,
        Action::InvokeQuery,
        Action::GraphList,
        Action::Revert,
        Action::CherryPick,
        Action::BranchReset,
        Action::TagCreate,
        Action::TagDelete,
        Action::Optimize,
        Action::Cleanup,
        Action::IndexEnsure,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Read => "read",
            Action::Export => "export",
            Action::Change => "change",
            Action::SchemaApply => "schema_apply",
            Action::BranchCreate => "branch_create",
            Action::BranchDelete => "branch_delete",
            Action::BranchMerge => "branch_merge",
            Action::Admin => "admin",
            Action::InvokeQuery => "invoke_query",
            Action::GraphList => "graph_list",
            Action::Revert => "revert",
            Action::CherryPick => "cherry_pick",
            Action::BranchReset => "branch_reset",
            Action::TagCreate => "tag_create",
            Action::TagDelete => "tag_delete",
            Action::Optimize => "optimize",
            Action::Cleanup => "cleanup",
            Action::IndexEnsure => "index_ensure",
        }
    }

    /// Parse a wire name.
    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// Which scope a rule may put on it: `Some(true)` the source branch
    /// (`branch_scope`), `Some(false)` the destination
    /// (`target_branch_scope`), `None` neither (graph- or server-wide).
    pub fn scope(self) -> Option<bool> {
        match self {
            Action::Read | Action::Export | Action::Change => Some(true),
            Action::SchemaApply
            | Action::BranchCreate
            | Action::BranchDelete
            | Action::BranchMerge
            | Action::Revert
            | Action::CherryPick
            | Action::BranchReset
            | Action::Optimize
            | Action::IndexEnsure => Some(false),
            Action::Admin
            | Action::InvokeQuery
            | Action::GraphList
            | Action::TagCreate
            | Action::TagDelete
            | Action::Cleanup => None,
        }
    }

    /// The resource it is about.
    pub fn resource(self) -> Resource {
        if self == Action::GraphList { Resource::Server } else { Resource::Graph }
    }

    /// Whether a server without a policy but with `--default-deny` allows it.
    pub fn is_read(self) -> bool {
        self == Action::Read
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request to authorize (the actor is passed beside it: it comes from
/// the caller's credentials, never from the request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// What it does.
    pub action: Action,
    /// The branch it reads or writes (`None`: a commit, a tag, or no branch).
    pub branch: Option<String>,
    /// The branch it changes for branch operations and merges.
    pub target_branch: Option<String>,
}

impl Request {
    /// `action` on no branch.
    pub fn of(action: Action) -> Request {
        Request { action, branch: None, target_branch: None }
    }

    /// `action` reading or writing `branch`.
    pub fn on(action: Action, branch: &str) -> Request {
        Request { action, branch: Some(branch.to_string()), target_branch: None }
    }

    /// `action` changing `target` (from `branch`, when it has a source).
    pub fn into(action: Action, branch: Option<&str>, target: &str) -> Request {
        Request { action, branch: branch.map(str::to_string), target_branch: Some(target.to_string()) }
    }
}

/// A bundle or test file that cannot be used, with where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}: {reason}", .line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct PolicyError {
    /// The file (as given).
    pub file: String,
    /// The line it is about, when one is.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl PolicyError {
    fn new(file: &str, line: Option<usize>, reason: impl Into<String>) -> PolicyError {
        PolicyError { file: file.to_string(), line, reason: reason.into() }
    }
}

#[cfg(test)]
mod tests;
