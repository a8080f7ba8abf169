//! Validation of a merge's result before anything is written: the merged
//! graph is the target plus every table's delta, and it must keep the rules
//! each write keeps (row rules, `@unique`, `@card`, edges between live
//! nodes). Every broken rule becomes a [`MergeConflict`]; all are reported.

use std::collections::{HashMap, HashSet};

use crate::engine::committed;
use crate::engine::integrity;
use crate::engine::lang::catalog::{Catalog, TypeDef};
use crate::engine::layout;
use crate::engine::rows::{self, EntityRow};
use crate::engine::storage::Root;
use crate::engine::three_way::{ConflictKind, MergeConflict};
use crate::engine::validate::{Rule, Validator};
use crate::protocol::{OmniError, Result};

use super::TableMerge;

/// The conflicts the merged result would have (empty = valid). `target`
/// holds every table's target pin, for the tables the merge leaves alone.
pub async fn merged_result(
    root: &Root,
    catalog: &Catalog,
    target: &crate::engine::manifest::ManifestState,
    merges: &[TableMerge],
) -> Result<Vec<MergeConflict>> {
    let by_key: HashMap<&str, &TableMerge> = merges.iter().map(|m| (m.table_key.as_str(), m)).collect();
    let mut out = Vec::new();
    for m in merges {
        let written: Vec<EntityRow> = m.rows.iter().flat_map(rows::from_batch).collect();
        let type_name = m.table_key.split_once(':').map_or(m.table_key.as_str(), |(_, n)| n);
        rules(catalog, m, type_name, &written, &mut out).await?;
        if let Some(edge) = catalog.edge(type_name) {
            let card = (edge.card.min, edge.card.max);
            let target_ds = &m.target_ds;
            let mut sources: HashSet<String> = written.iter().filter_map(|r| r.src.clone()).collect();
            let removed: HashSet<&str> = m.delta.deleted.iter().map(String::as_str).collect();
            for r in super::delta::rows_with_ids(target_ds, &removed).await? {
                sources.extend(rows::from_batch(&r).into_iter().filter_map(|e| e.src));
            }
            let gone: HashSet<String> = m.delta.deleted.iter().cloned().collect();
            if let Some(breach) =
                integrity::card_breach(Some(target_ds), type_name, card, &written, &gone, &sources).await?
            {
                let rows = edge_rows(target_ds, &written, &breach.edges).await?;
                let c = MergeConflict::new(&m.table_key, None, ConflictKind::CardinalityViolation, breach.message);
                out.push(c.with_rows(rows));
            }
            let ends = [(&edge.from_type, "src"), (&edge.to_type, "dst")];
            for (node_type, end) in ends {
                let wanted: Vec<(String, String)> = written
                    .iter()
                    .filter_map(|r| if end == "src" { r.src.clone() } else { r.dst.clone() }.map(|n| (r.id.clone(), n)))
                    .collect();
                let live = live_nodes(root, target, &by_key, node_type, wanted.iter().map(|(_, n)| n.clone())).await?;
                for (edge_id, node) in wanted.iter().filter(|(_, n)| !live.contains(n)) {
                    let msg = format!(
                        "edge {type_name} `{edge_id}` {end} `{node}` is not a live {node_type} after the merge"
                    );
                    let row = written.iter().filter(|r| &r.id == edge_id).map(|r| r.image(true)).collect();
                    let c = MergeConflict::new(&m.table_key, Some(edge_id), ConflictKind::OrphanEdge, msg);
                    out.push(c.with_rows(row));
                }
            }
        }
    }
    out.extend(edges_of_deleted_nodes(root, catalog, target, &by_key).await?);
    Ok(out)
}

/// Row rules (types, enums, `@range`, `@check`) and `@unique` of the written rows.
async fn rules(
    catalog: &Catalog,
    m: &TableMerge,
    type_name: &str,
    written: &[EntityRow],
    out: &mut Vec<MergeConflict>,
) -> Result<()> {
    let def = catalog
        .type_def(type_name)
        .ok_or_else(|| OmniError::Internal(format!("{} is not in the catalog", m.table_key)))?;
    let validator = Validator::for_type(def)?;
    let edge = matches!(def, TypeDef::Edge(_));
    for row in written {
        for v in validator.row_violations(row) {
            let kind = ConflictKind::ValueConstraintViolation;
            let c = MergeConflict::new(&m.table_key, Some(&row.id), kind, v.to_string());
            out.push(c.with_rows(vec![row.image(edge)]));
        }
    }
    if let Err(v) = validator.check_unique(written) {
        // The two written rows that share the value.
        let other = match v.rule.as_ref() {
            Rule::Unique { other_id, .. } => Some(other_id.as_str()),
            _ => None,
        };
        let rows = written.iter().filter(|r| r.id == v.id || Some(r.id.as_str()) == other).map(|r| r.image(edge));
        let c = MergeConflict::new(&m.table_key, Some(&v.id), ConflictKind::UniqueViolation, v.to_string());
        out.push(c.with_rows(rows.collect()));
        return Ok(());
    }
    let uniques = match def {
        TypeDef::Node(n) => &n.uniques,
        TypeDef::Edge(e) => &e.uniques,
    };
    if uniques.is_empty() || written.is_empty() {
        return Ok(());
    }
    // Held by a target row that stays: neither replaced nor deleted.
    let gone: HashSet<&str> = m.delta.deleted.iter().map(String::as_str).collect();
    let replaced = |id: &str| gone.contains(id);
    if let Some(clash) = integrity::unique_clash(&m.target_ds, type_name, uniques, written, replaced, None).await? {
        let (kind, id) = (ConflictKind::UniqueViolation, Some(clash.writer.id.as_str()));
        let rows = vec![clash.writer.image(edge), clash.holder.image(edge)];
        out.push(MergeConflict::new(&m.table_key, id, kind, clash.message).with_rows(rows));
    }
    Ok(())
}

/// Most rows one conflict lists (a node past its `@card` may have many edges).
const ROWS_PER_CONFLICT: usize = 100;

/// The images of the edges `ids` as the merged graph holds them: the
/// merge's own rows where it writes them, else the target's.
async fn edge_rows(target: &lance::Dataset, written: &[EntityRow], ids: &[String]) -> Result<Vec<serde_json::Value>> {
    let ids = &ids[..ids.len().min(ROWS_PER_CONFLICT)];
    let by_id: HashMap<&str, &EntityRow> = written.iter().map(|r| (r.id.as_str(), r)).collect();
    let kept: HashSet<&str> = ids.iter().map(String::as_str).filter(|id| !by_id.contains_key(id)).collect();
    let mut committed: HashMap<String, EntityRow> = HashMap::new();
    for batch in super::delta::rows_with_ids(target, &kept).await? {
        committed.extend(rows::from_batch(&batch).into_iter().map(|r| (r.id.clone(), r)));
    }
    let image = |id: &String| {
        by_id.get(id.as_str()).map(|r| r.image(true)).or_else(|| committed.get(id).map(|r| r.image(true)))
    };
    Ok(ids.iter().filter_map(image).collect())
}

/// Which of `ids` are live `node_type` nodes after the merge: written by the
/// merge, or held by the target and not deleted by it.
async fn live_nodes(
    root: &Root,
    target: &crate::engine::manifest::ManifestState,
    merges: &HashMap<&str, &TableMerge>,
    node_type: &str,
    ids: impl Iterator<Item = String>,
) -> Result<HashSet<String>> {
    let key = layout::node_key(node_type);
    let merge = merges.get(key.as_str());
    let ids: Vec<String> = ids.collect::<HashSet<_>>().into_iter().collect();
    let mut live = HashSet::new();
    let mut probe = Vec::new();
    for id in ids {
        match merge {
            Some(m) if m.delta.inserted.contains(&id) || m.delta.updated.contains(&id) => {
                live.insert(id);
            }
            Some(m) if m.delta.deleted.contains(&id) => {}
            _ => probe.push(id),
        }
    }
    if !probe.is_empty() {
        let entry =
            target.tables.get(&key).ok_or_else(|| OmniError::Internal(format!("{key} is not in the target")))?;
        let ds = committed::open_pinned(root, entry).await?;
        live.extend(committed::existing_ids(&ds, &probe).await?);
    }
    Ok(live)
}

/// Target edges the merge keeps whose endpoint node the merge deletes.
async fn edges_of_deleted_nodes(
    root: &Root,
    catalog: &Catalog,
    target: &crate::engine::manifest::ManifestState,
    merges: &HashMap<&str, &TableMerge>,
) -> Result<Vec<MergeConflict>> {
    let mut out = Vec::new();
    for edge in &catalog.edges {
        let key = layout::edge_key(&edge.name);
        let edge_merge = merges.get(key.as_str());
        let Some(entry) = target.tables.get(&key) else { continue };
        // The edge table at the target pin, opened once (reused when the merge changes it).
        let mut opened: Option<std::sync::Arc<lance::Dataset>> = edge_merge.map(|m| m.target_ds.clone());
        for (node_type, end) in [(&edge.from_type, "src"), (&edge.to_type, "dst")] {
            let Some(node_merge) = merges.get(layout::node_key(node_type).as_str()) else { continue };
            if node_merge.delta.deleted.is_empty() {
                continue;
            }
            let deleted: Vec<String> = node_merge.delta.deleted.iter().cloned().collect();
            let ds = match &opened {
                Some(ds) => ds.clone(),
                None => opened.insert(committed::open_pinned(root, entry).await?).clone(),
            };
            let mut orphans = Vec::new();
            for (node, edge_ids) in committed::edges_by_endpoint(&ds, end, &deleted).await? {
                // An edge the merge deletes or rewrites is judged by its merged row.
                let kept = edge_ids.into_iter().filter(|id| {
                    edge_merge.is_none_or(|m| !m.delta.deleted.contains(id) && !m.delta.updated.contains(id))
                });
                orphans.extend(kept.map(|id| (id, node.clone())));
            }
            let ids: HashSet<&str> = orphans.iter().map(|(id, _)| id.as_str()).collect();
            let mut rows_by_id: HashMap<String, serde_json::Value> = HashMap::new();
            for batch in super::delta::rows_with_ids(&ds, &ids).await? {
                rows_by_id.extend(rows::from_batch(&batch).into_iter().map(|r| (r.id.clone(), r.image(true))));
            }
            for (id, node) in orphans {
                let msg = format!("edge {} `{id}` keeps {end} `{node}`, a {node_type} the merge deletes", edge.name);
                let row = rows_by_id.get(&id).cloned().into_iter().collect();
                out.push(MergeConflict::new(&key, Some(&id), ConflictKind::OrphanEdge, msg).with_rows(row));
            }
        }
    }
    Ok(out)
}
