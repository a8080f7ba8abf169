//! The JSON shapes answers take, shared by `omnigraph serve` and the CLI's
//! `--json`, so both spell every field the same way. Each carries the field
//! names existing Omnigraph clients read (`graph_commit_id`,
//! `affected_nodes`, `created_at` in epoch microseconds, …) beside this
//! project's own names for the same values.

use serde::Serialize;
use serde::ser::SerializeMap;
use serde_json::{Value, json};

use super::{CommitInfo, Snapshot};
use crate::actors::saga::branch_control::{BranchInfo, DeletedBranch};
use crate::actors::saga::write::WriteOutcome;
use crate::engine::query::{PlanNode, QueryResult};

/// One result row: its columns in projection order (a JSON object whose keys
/// keep the order the query returned them in).
#[derive(Debug, Clone, PartialEq)]
pub struct OrderedRow(pub Vec<(String, Value)>);

impl Serialize for OrderedRow {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// Every row of `r`, columns in projection order.
pub fn ordered_rows(r: &QueryResult) -> Vec<OrderedRow> {
    let mut out = Vec::new();
    for batch in &r.batches {
        for i in 0..batch.num_rows() {
            let row = r
                .columns
                .iter()
                .zip(batch.columns())
                .map(|(name, col)| (name.clone(), crate::engine::rows::json_at(col.as_ref(), i)))
                .collect();
            out.push(OrderedRow(row));
        }
    }
    out
}

/// A read's answer (`ReadOutput`).
#[derive(Debug, Serialize)]
pub struct ReadOutput {
    /// The query run (when named).
    pub query_name: Option<String>,
    /// `{branch}` or `{snapshot}`: what was read.
    pub target: Value,
    /// Column names in projection order.
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Vec<OrderedRow>,
    /// Number of rows.
    pub row_count: usize,
    /// The commit the read saw.
    pub graph_commit_id: String,
    /// The plan, for an EXPLAIN or a PROFILE.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanNode>,
    /// Whether this is an EXPLAIN: the plan without rows.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub explain: bool,
}

impl ReadOutput {
    /// A read's answer as `POST /query` sent it, each row back in the order
    /// of `columns` (a parsed JSON object has lost it).
    pub fn from_json(v: &Value) -> crate::protocol::Result<ReadOutput> {
        let bad = || crate::protocol::OmniError::Internal(format!("a query answer without columns and rows: {v}"));
        let columns: Vec<String> = serde_json::from_value(v["columns"].clone()).map_err(|_| bad())?;
        let rows: Vec<OrderedRow> = v["rows"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|r| OrderedRow(columns.iter().map(|c| (c.clone(), r[c].clone())).collect()))
            .collect();
        Ok(ReadOutput {
            query_name: v["query_name"].as_str().map(str::to_string),
            target: v["target"].clone(),
            row_count: rows.len(),
            rows,
            columns,
            graph_commit_id: v["graph_commit_id"].as_str().ok_or_else(bad)?.to_string(),
            plan: match v.get("plan") {
                None | Some(Value::Null) => None,
                Some(p) => Some(serde_json::from_value(p.clone()).map_err(|_| bad())?),
            },
            explain: v["explain"].as_bool().unwrap_or(false),
        })
    }
}

/// The answer to a read of `target` (`{"branch": …}` or `{"snapshot": …}`).
pub fn read_output(r: &QueryResult, query_name: Option<&str>, target: Value) -> ReadOutput {
    let rows = ordered_rows(r);
    ReadOutput {
        query_name: query_name.map(str::to_string),
        target,
        columns: r.columns.clone(),
        row_count: rows.len(),
        rows,
        graph_commit_id: r.graph_commit_id.clone(),
        plan: r.plan.clone(),
        explain: r.explained,
    }
}

/// A commit (`CommitOutput`): `created_at` in epoch microseconds, the
/// RFC 3339 text as `created_at_iso`.
pub fn commit_json(c: &CommitInfo) -> Value {
    json!({
        "graph_commit_id": c.commit_id, "commit_id": c.commit_id,
        "graph_branch": c.branch, "branch": c.branch,
        "parent_commit_id": c.parent_commit_id, "merged_parent_commit_id": c.merged_parent_commit_id,
        "actor_id": c.actor, "actor": c.actor,
        "created_at": c.created_at_us, "created_at_iso": c.created_at,
        "graph_manifest_version": c.manifest_version, "manifest_version": c.manifest_version,
        "operation": c.operation, "source_commit_id": c.source_commit_id,
    })
}

/// A branch head's snapshot: `graph_branch`, `graph_manifest_version`,
/// `datasets[]` as clients read them, and `tables[]` with each table's path
/// and version.
pub fn snapshot_json(snap: &Snapshot) -> Value {
    let tables: Vec<Value> = snap
        .tables
        .iter()
        .map(|t| {
            json!({
                "table_key": t.table_key, "table_path": t.table_path, "table_version": t.version,
                "version": t.version, "table_branch": t.table_branch, "row_count": t.row_count,
            })
        })
        .collect();
    let datasets: Vec<Value> = snap
        .tables
        .iter()
        .map(|t| {
            json!({
                "type_key": t.table_key, "dataset_version": t.version,
                "row_count": t.row_count, "dataset_branch": t.table_branch,
            })
        })
        .collect();
    json!({
        "branch": snap.branch, "graph_branch": snap.branch,
        "head_commit_id": snap.head_commit_id,
        "manifest_version": snap.manifest_version, "graph_manifest_version": snap.manifest_version,
        "storage_stamp": snap.storage_stamp, "internal_schema_version": snap.storage_stamp,
        "tables": tables, "datasets": datasets, "durability": snap.durability,
    })
}

/// A mutation's answer (`ChangeOutput`) on `branch`.
pub fn mutation_json(out: &WriteOutcome, branch: &str, query_name: Option<&str>) -> Value {
    json!({
        "graph_commit_id": out.commit_id, "commit_id": out.commit_id, "branch": branch, "query_name": query_name,
        "affected_nodes": out.nodes_affected, "affected_edges": out.edges_affected,
        "nodes_affected": out.nodes_affected, "edges_affected": out.edges_affected,
        "tables": out.tables, "commit": published(out),
    })
}

/// The commit a write published, as `commit show` prints it (`null` for a
/// write with no effect).
fn published(out: &WriteOutcome) -> Value {
    out.commit.as_ref().map_or(Value::Null, |c| commit_json(&CommitInfo::from(c)))
}

/// A load's answer (`IngestOutput`) into the graph at `uri`: `tables[]`
/// says, per table, the rows this load wrote (`rows_loaded`) and the
/// table's live total after it (`row_count`).
pub fn load_json(out: &WriteOutcome, uri: &str, mode: &str, branch: &str) -> Value {
    let tables: Vec<Value> = out
        .tables
        .iter()
        .map(|t| {
            json!({
                "table_key": t.table_key, "version": t.version, "branch": t.branch, "row_count": t.row_count,
                "rows_loaded": out.rows_written.get(&t.table_key).copied().unwrap_or(0),
            })
        })
        .collect();
    json!({
        "uri": uri, "mode": mode, "branch": branch, "graph_commit_id": out.commit_id, "commit_id": out.commit_id,
        "affected_nodes": out.nodes_affected, "affected_edges": out.edges_affected,
        "nodes_affected": out.nodes_affected, "edges_affected": out.edges_affected,
        "tables": tables, "commit": published(out),
    })
}

/// A created branch, in the graph at `uri`.
pub fn branch_created_json(info: &BranchInfo, from: &str, uri: &str) -> Value {
    json!({
        "name": info.name, "from": from, "uri": uri, "head_commit_id": info.head_commit_id,
        "from_manifest_version": info.from_manifest_version, "created_at": info.created_at,
    })
}

/// The accepted schema, as `GET /schema` answers it:
/// `{schema_source, schema_identity, catalog}`.
pub fn schema_json(schema: &crate::engine::schema_store::SchemaState) -> Value {
    json!({ "schema_source": schema.source, "schema_identity": schema.identity, "catalog": schema.catalog })
}

/// One tag: `{name, graph_commit_id, message, actor_id, created_at}`.
pub fn tag_json(tag: &crate::engine::tags::Tag) -> Value {
    json!({
        "name": tag.name, "graph_commit_id": tag.graph_commit_id, "message": tag.message,
        "actor_id": tag.actor_id, "created_at": tag.created_at,
    })
}

/// Every tag: `{tags: [...]}`.
pub fn tags_json(tags: &[crate::engine::tags::Tag]) -> Value {
    json!({ "tags": tags.iter().map(tag_json).collect::<Vec<_>>() })
}

/// A deleted branch, in the graph at `uri`.
/// (Reclaimed forks are named by their table path relative to the root.)
pub fn branch_deleted_json(deleted: &DeletedBranch, uri: &str) -> Value {
    let prefix = format!("{}/", uri.trim_end_matches('/'));
    let forks: Vec<&str> =
        deleted.forks_reclaimed.iter().map(|f| f.strip_prefix(&prefix).unwrap_or(f.as_str())).collect();
    json!({
        "name": deleted.name, "uri": uri, "head_commit_id": deleted.head_commit_id,
        "restorable": deleted.restorable, "forks_reclaimed": forks,
        "orphans_discarded": deleted.orphans_discarded,
    })
}

/// A restore's answer (HTTP `POST /branches/{name}/restore` and
/// `branch restore --json`).
pub fn restored_json(r: &crate::RestoredBranch) -> Value {
    json!({
        "branch": r.branch, "head_commit_id": r.head_commit_id,
        "deleted_head_commit_id": r.deleted_head_commit_id, "operation_id": r.operation_id,
        "actor_id": r.actor_id,
    })
}

/// A merge's answer (HTTP `POST /branches/merge` and `branch merge --json`).
/// A revert's answer (HTTP and `commit revert --json`): the commit written
/// on `branch`, the commit reverted and the parent gone back to, per-table
/// counts, and how conflicts were decided.
pub fn revert_json(r: &crate::graph::RevertResult, actor: Option<&str>) -> Value {
    let mut out = moved_json(r, actor);
    out["reverted_commit_id"] = json!(r.commit_id);
    out["parent_commit_id"] = json!(r.report.source_commit_id);
    out
}

/// A cherry-pick's answer: as [`revert_json`], naming `picked_commit_id`
/// and the branch as `onto`.
pub fn cherry_pick_json(r: &crate::graph::RevertResult, actor: Option<&str>) -> Value {
    let mut out = moved_json(r, actor);
    out["picked_commit_id"] = json!(r.commit_id);
    out["onto"] = json!(r.report.target);
    out["parent_commit_id"] = json!(r.report.base_commit_id);
    out
}

/// The reflog's answer: `{entries: [{branch, old_head, new_head, operation, actor_id, at}]}`.
pub fn reflog_json(entries: &[crate::engine::reflog::ReflogEntry]) -> Value {
    let entries: Vec<Value> = entries
        .iter()
        .map(|e| {
            json!({
                "branch": e.branch, "old_head": e.old_head, "new_head": e.new_head, "operation": e.operation,
                "actor_id": e.actor_id, "at": e.at(),
            })
        })
        .collect();
    json!({ "entries": entries })
}

/// A reset's answer: the report's fields and the actor.
pub fn reset_json(r: &crate::actors::saga::reset::ResetReport, actor: Option<&str>) -> Value {
    json!({
        "branch": r.branch, "mode": r.mode, "outcome": r.outcome, "from_commit_id": r.from_commit_id,
        "to_commit_id": r.to_commit_id, "graph_commit_id": r.graph_commit_id, "operation_id": r.operation_id,
        "tables": r.tables, "dry_run": r.dry_run, "actor_id": actor,
    })
}

fn moved_json(r: &crate::graph::RevertResult, actor: Option<&str>) -> Value {
    let m = &r.report;
    json!({
        "graph_commit_id": m.graph_commit_id, "branch": m.target, "mainline": r.mainline, "tables": m.tables,
        "dry_run": m.dry_run, "strategy": m.strategy, "conflicts_decided": m.conflicts_decided,
        "resolutions": m.resolutions, "actor_id": actor,
    })
}

pub fn merge_json(m: &crate::graph::MergeResult, actor: Option<&str>) -> Value {
    let r = &m.report;
    let mut out = json!({
        "outcome": r.outcome, "graph_commit_id": r.graph_commit_id, "source": r.source, "target": r.target,
        "source_commit_id": r.source_commit_id, "base_commit_id": r.base_commit_id, "tables": r.tables,
        "dry_run": r.dry_run, "squash": r.squash, "strategy": r.strategy, "conflicts_decided": r.conflicts_decided,
        "resolutions": r.resolutions,
        "actor_id": actor,
    });
    // A merge across a schema change: the target's schema steps and identity after.
    if let Some(identity) = &r.schema_identity {
        out["schema_steps"] = json!(r.schema_steps);
        out["schema_identity"] = json!(identity);
    }
    if let Some(deleted) = m.branch_deleted {
        out["branch_deleted"] = json!(deleted);
        out["branch_delete_error"] = json!(m.branch_delete_error);
    }
    out
}
