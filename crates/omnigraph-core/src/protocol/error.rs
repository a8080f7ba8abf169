//! The one error enum users see, and its HTTP status mapping.

use crate::protocol::diagnostic::Diagnostic;

/// Result alias used across the crate.
pub type Result<T, E = OmniError> = std::result::Result<T, E>;

/// Every user-visible failure, typed. Each variant maps to exactly one HTTP
/// status ([`OmniError::http_status`]) and one stable `code` string. Clone:
/// one failure of a group commit is every member's answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OmniError {
    /// The request is malformed: bad arguments, bad names, bad values.
    #[error("bad request: {0}")]
    BadRequest(String),

    /// A `.pg` / `.gq` source failed to compile.
    #[error("{file}:{diag}")]
    Compile {
        /// Which source the error is in (a file name, or `<schema>`/`<query>`).
        file: String,
        /// The located diagnostic.
        diag: Diagnostic,
    },

    /// A graph, branch, commit, type or file does not exist.
    #[error("not found: {0}")]
    NotFound(String),

    /// A graph already exists where one was to be created.
    #[error("already exists: {0}")]
    AlreadyExists(String),

    /// A strict insert met an existing id.
    #[error("key conflict: {type_name} with id `{id}` already exists")]
    KeyConflict {
        /// `node` or `edge`.
        entity_kind: &'static str,
        /// The node or edge type.
        type_name: String,
        /// The conflicting id.
        id: String,
    },

    /// The authority a write prepared against changed before any effect.
    #[error("read set changed: {member} expected {expected}, found {actual}")]
    ReadSetChanged {
        /// Which part of the authority moved (`graph_head:main`, `branch_identifier`, a table key…).
        member: String,
        /// What the writer captured.
        expected: String,
        /// What is there now.
        actual: String,
    },

    /// A branch control operation collided with the live branch set: the name
    /// exists, overlaps a live name, has dependents, or was deleted and
    /// recreated under us.
    #[error("branch conflict on `{branch}`: {reason}")]
    BranchConflict {
        /// The branch named by the request.
        branch: String,
        /// What stands in the way.
        reason: String,
    },

    /// A branch merge met conflicts; nothing was written. One page of them
    /// is listed, with the counts of all.
    /// A merge whose two sides changed one schema item in different ways:
    /// nothing written.
    #[error("schema conflict merging into `{target}`: {}", summarize_schema_conflicts(.conflicts))]
    SchemaConflict {
        /// The branch merged into.
        target: String,
        /// Each item both sides changed differently, with its three declarations.
        conflicts: Vec<crate::lang::schema::merge::SchemaConflict>,
    },

    #[error("merge conflicts: {}", summarize_conflicts(.0))]
    MergeConflicts(crate::three_way::ConflictSet),

    /// Time travel to a commit whose versions `cleanup` removed.
    #[error("commit `{commit_id}` was removed by cleanup: time travel reaches only the commits cleanup retained")]
    CommitCleaned {
        /// The commit asked for.
        commit_id: String,
    },

    /// Something that existed and was removed for good (a deleted branch
    /// purged past its reflog window).
    #[error("gone: {0}")]
    Gone(String),

    /// A commit's changes were asked of the first commit, which has no
    /// parent to diff against (bootstrap from a snapshot instead).
    #[error("commit `{graph_commit_id}` has no parent: it has no changes to list (read it whole instead)")]
    ParentlessCommit {
        /// The commit asked for.
        graph_commit_id: String,
    },

    /// A change feed cursor points at history `cleanup` removed: the feed
    /// cannot continue without a gap (take a new baseline).
    #[error("change feed gap: commit `{first_unreadable_commit_id}` was removed by cleanup; take a new baseline")]
    ChangeFeedGap {
        /// The cursor that cannot continue (absent for a first poll).
        cursor: Option<String>,
        /// The first commit the feed would deliver and cannot read.
        first_unreadable_commit_id: String,
    },

    /// The manifest publisher ran out of retries under write contention.
    #[error("manifest conflict: {0}")]
    ManifestConflict(String),

    /// A caller's `--if-commit` precondition did not hold.
    #[error("precondition failed: expected head {expected}, found {actual}")]
    PreconditionFailed {
        /// The commit id the caller required.
        expected: String,
        /// The branch's actual head.
        actual: String,
    },

    /// An admission limit refused the request before any effect.
    #[error("resource limit exceeded: {resource} is {actual}, limit {limit}")]
    ResourceLimitExceeded {
        /// What was measured.
        resource: String,
        /// The limit.
        limit: u64,
        /// The measured amount.
        actual: u64,
    },

    /// An unresolved recovery sidecar stands in the way; retry after recovery.
    #[error("recovery required for operation {operation_id}: {reason}")]
    RecoveryRequired {
        /// The sidecar's operation id.
        operation_id: String,
        /// Why it could not be resolved here.
        reason: String,
    },

    /// The graph's on-disk format is not the one this binary serves.
    #[error("{0}")]
    UnsupportedStorage(String),

    /// Live Lance state moved outside any recorded write.
    #[error("uncovered drift on {table}: manifest pins v{pinned}, Lance HEAD is v{head}; run `omnigraph repair`")]
    Drift {
        /// The table key.
        table: String,
        /// The manifest pin.
        pinned: u64,
        /// The live HEAD.
        head: u64,
    },

    /// An actor the request depended on stopped; the request may be retried.
    #[error("actor unavailable: {0}")]
    ActorUnavailable(String),

    /// A write reached a handle or daemon that serves reads only.
    #[error("read-only: {0}")]
    ReadOnly(String),

    /// A policy does not let the actor take the action there.
    #[error("forbidden: actor `{actor}` may not `{action}`{}{}", on_branch(.branch, "on"), on_branch(.target_branch, "into"))]
    Forbidden {
        /// The action's policy name.
        action: String,
        /// The caller.
        actor: String,
        /// The branch read or written.
        branch: Option<String>,
        /// The branch changed.
        target_branch: Option<String>,
    },

    /// Missing or wrong credentials.
    #[error("unauthorized")]
    Unauthorized,

    /// Lance or object storage failed.
    #[error("storage error while {context}: {message}")]
    Storage {
        /// What the engine was doing.
        context: String,
        /// The underlying error text.
        message: String,
    },

    /// A bug or an invariant violation.
    #[error("internal error: {0}")]
    Internal(String),

    /// A daemon answered a request with this error (the CLI as its client):
    /// its status and its JSON body, passed on as they came.
    #[error("{}", remote_message(body))]
    Remote {
        /// The HTTP status.
        status: u16,
        /// The `{error, code, …}` body.
        body: serde_json::Value,
    },
}

/// ` on branch `b`` (or nothing).
fn on_branch(branch: &Option<String>, word: &str) -> String {
    branch.as_ref().map(|b| format!(" {word} branch `{b}`")).unwrap_or_default()
}

fn remote_message(body: &serde_json::Value) -> String {
    match body.get("error").and_then(|e| e.as_str()) {
        Some(text) => text.to_string(),
        None => format!("the server answered {body}"),
    }
}

impl OmniError {
    /// Wrap a storage-layer error with what the engine was doing.
    pub fn storage(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        OmniError::Storage { context: context.into(), message: err.to_string() }
    }

    /// The HTTP status this error maps to (DESIGN.md §8).
    pub fn http_status(&self) -> u16 {
        match self {
            OmniError::BadRequest(_) | OmniError::Compile { .. } => 400,
            OmniError::Unauthorized => 401,
            OmniError::ReadOnly(_) | OmniError::Forbidden { .. } => 403,
            OmniError::NotFound(_) => 404,
            OmniError::AlreadyExists(_)
            | OmniError::KeyConflict { .. }
            | OmniError::ReadSetChanged { .. }
            | OmniError::ManifestConflict(_)
            | OmniError::BranchConflict { .. }
            | OmniError::MergeConflicts(_)
            | OmniError::SchemaConflict { .. }
            | OmniError::ParentlessCommit { .. }
            | OmniError::Drift { .. } => 409,
            OmniError::CommitCleaned { .. } | OmniError::ChangeFeedGap { .. } | OmniError::Gone(_) => 410,
            OmniError::PreconditionFailed { .. } => 412,
            OmniError::ResourceLimitExceeded { .. } => 413,
            OmniError::RecoveryRequired { .. } | OmniError::ActorUnavailable(_) => 503,
            OmniError::UnsupportedStorage(_) | OmniError::Storage { .. } | OmniError::Internal(_) => 500,
            OmniError::Remote { status, .. } => *status,
        }
    }

    /// The `code` of the JSON error body: one per status ([`status_code`]),
    /// except that a 503 tells a pending recovery (`recovery_required`) from
    /// an actor that did not answer (`unavailable`), a 409 for the first
    /// commit's changes is `parentless_commit`, and a 410 for a change
    /// feed that cleanup outran is `change_feed_gap`, and a merge refused
    /// over its schemas is `schema_conflict`.
    pub fn code(&self) -> &'static str {
        match self {
            OmniError::RecoveryRequired { .. } => "recovery_required",
            OmniError::ParentlessCommit { .. } => "parentless_commit",
            OmniError::ChangeFeedGap { .. } => "change_feed_gap",
            OmniError::SchemaConflict { .. } => "schema_conflict",
            _ => status_code(self.http_status()),
        }
    }

    /// The process exit code the CLI uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            OmniError::PreconditionFailed { .. } | OmniError::Remote { status: 412, .. } => 4,
            OmniError::BadRequest(_) | OmniError::Compile { .. } | OmniError::Remote { status: 400, .. } => 2,
            _ => 1,
        }
    }

    /// The JSON body `{error, code, <typed detail>}` shared by HTTP and `--json`.
    pub fn to_json(&self) -> serde_json::Value {
        if let OmniError::Remote { body, .. } = self {
            return body.clone();
        }
        let mut body = serde_json::json!({ "error": self.to_string(), "code": self.code() });
        let detail = match self {
            OmniError::Compile { file, diag } => serde_json::json!({
                "file": file, "line": diag.pos.line, "column": diag.pos.column,
                "diagnostic_code": diag.code, "message": diag.message,
            }),
            OmniError::KeyConflict { entity_kind, type_name, id } => {
                serde_json::json!({ "key_conflict": { "entity_kind": entity_kind, "type_name": type_name, "entity_id": id } })
            }
            OmniError::ReadSetChanged { member, expected, actual } => serde_json::json!({
                "read_set_conflict": { "member": member, "expected": expected, "actual": actual }
            }),
            OmniError::PreconditionFailed { expected, actual } => serde_json::json!({
                "precondition_failure": { "expected": expected, "actual": actual }
            }),
            OmniError::ResourceLimitExceeded { resource, limit, actual } => serde_json::json!({
                "resource_limit": { "resource": resource, "limit": limit, "actual": actual }
            }),
            OmniError::BranchConflict { branch, reason } => serde_json::json!({
                "branch_conflict": { "branch": branch, "reason": reason }
            }),
            OmniError::MergeConflicts(set) => serde_json::json!({
                "merge_conflicts": set.conflicts, "conflict_count": set.total(),
                "conflict_stat": set.stat, "next_page_token": set.next_page_token,
            }),
            OmniError::SchemaConflict { target, conflicts } => serde_json::json!({
                "schema_conflicts": conflicts, "target": target,
            }),
            OmniError::ParentlessCommit { graph_commit_id } => serde_json::json!({
                "change_diff_refusal": { "reason": "parentless_commit", "graph_commit_id": graph_commit_id }
            }),
            OmniError::ChangeFeedGap { cursor, first_unreadable_commit_id } => serde_json::json!({
                "change_feed_gap": { "cursor": cursor, "first_unreadable_commit_id": first_unreadable_commit_id }
            }),
            OmniError::Forbidden { action, actor, branch, target_branch } => serde_json::json!({
                "action": action, "actor": actor, "branch": branch, "target_branch": target_branch,
            }),
            OmniError::RecoveryRequired { operation_id, reason } => serde_json::json!({
                "recovery_required": { "operation_id": operation_id, "reason": reason }
            }),
            _ => serde_json::Value::Null,
        };
        if let (Some(obj), serde_json::Value::Object(extra)) = (body.as_object_mut(), detail) {
            obj.extend(extra);
        }
        body
    }
}

/// `3 conflicts (2 divergent_update, 1 orphan_edge): node:Person `p1`: …`.
fn summarize_schema_conflicts(conflicts: &[crate::lang::schema::merge::SchemaConflict]) -> String {
    let show =
        |d: &Option<String>| d.as_deref().map_or("(absent)".to_string(), |d| format!("`{}`", d.replace('\n', " ")));
    let items: Vec<String> = conflicts
        .iter()
        .map(|c| {
            let item = c.property.as_ref().map_or(c.type_name.clone(), |p| format!("{}.{p}", c.type_name));
            format!("{item}: {} (base {}, ours {}, theirs {})", c.reason, show(&c.base), show(&c.ours), show(&c.theirs))
        })
        .collect();
    format!("{} item(s) changed differently on both sides: {}", conflicts.len(), items.join("; "))
}

fn summarize_conflicts(set: &crate::three_way::ConflictSet) -> String {
    let mut kinds: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for c in &set.stat {
        *kinds.entry(c.kind.as_str()).or_default() += c.count;
    }
    let counts: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
    let first = set.conflicts.first().map(|c| format!(": {}", c.message)).unwrap_or_default();
    format!("{} ({}){first}", set.total(), counts.join(", "))
}

/// The `code` every error answer with `status` carries, so a client can
/// branch on it without parsing the message.
pub fn status_code(status: u16) -> &'static str {
    match status {
        400 | 422 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        410 => "gone",
        412 => "precondition_failed",
        413 => "payload_too_large",
        415 => "unsupported_media_type",
        429 => "rate_limited",
        503 => "unavailable",
        _ => "internal",
    }
}
