//! EXPLAIN and PROFILE: the plan a read query ran (or would run) as a tree
//! of operators, with each operator's row estimate and, when profiled, the
//! rows it produced and the time it spent.
//!
//! A query is planned in steps: a traversal needs its sources' ids before
//! it can pick a walk, so the planner runs the frame built so far
//! (`materialize`) and then adds the walk to a new frame; text searches and
//! vector candidates are answered by their indexes the same way. The tree
//! is those steps in order under one `query` node, the last of them the
//! `result` plan that produces the answer. EXPLAIN runs only the steps
//! planning needs and shows no figures; PROFILE runs everything and fills
//! `rows` and `time_ms` per operator.
//!
//! Lance reads name their table (`node:Person`), never a storage path, and
//! say which index served their filter (`index: {name, coverage}`); a read
//! whose filter an index on one of its columns could have served is flagged
//! `scan_could_use_index`, and one served by an index that does not cover
//! every fragment is flagged `unindexed_tail`.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::Operator;
use datafusion::physical_plan::{ExecutionPlan, displayable};
use datafusion::prelude::Expr;
use lance::Dataset;
use lance::io::exec::filtered_read::FilteredReadExec;
use serde::{Deserialize, Serialize};

use crate::engine::storage::index_fold;
use crate::protocol::{OmniError, Result};

/// What a query run reports beside its rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Insight {
    /// The rows only.
    #[default]
    Off,
    /// The plan, without running the result (no rows).
    Explain,
    /// The rows and the plan with each operator's rows and time.
    Profile,
}

impl Insight {
    /// What `explain` and `profile` (the CLI's flags, the HTTP fields) ask.
    pub fn from_flags(explain: bool, profile: bool) -> Result<Insight> {
        match (explain, profile) {
            (true, true) => Err(OmniError::BadRequest("explain and profile: pick one".into())),
            (true, false) => Ok(Insight::Explain),
            (false, true) => Ok(Insight::Profile),
            (false, false) => Ok(Insight::Off),
        }
    }
}

/// The index that served a read, and how much of its table it covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexUse {
    /// Its name (`id_btree`).
    pub name: String,
    /// Indexed rows over the table's rows (1.0 for an empty table).
    pub coverage: f64,
}

/// One operator of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanNode {
    /// What it does (`query`, `materialize`, `traverse`, DataFusion's and
    /// Lance's operator names such as `HashJoinExec` or `LanceRead`).
    pub op: String,
    /// Its arguments, one line.
    pub detail: String,
    /// Its inputs.
    #[serde(default)]
    pub children: Vec<PlanNode>,
    /// Rows the planner expects it to produce, when it knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub est_rows: Option<u64>,
    /// Rows it produced (PROFILE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// Time it spent computing, its inputs excluded (PROFILE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ms: Option<f64>,
    /// The index that served it (Lance reads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<IndexUse>,
    /// What deserves a look: `scan_could_use_index`, `unindexed_tail`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
}

/// A flag: a read scanned rows an index on one of its filter's columns could
/// have found.
pub const SCAN_COULD_USE_INDEX: &str = "scan_could_use_index";
/// A flag: the index that served a read does not cover every fragment, so
/// the rest was scanned.
pub const UNINDEXED_TAIL: &str = "unindexed_tail";

impl PlanNode {
    /// A node of our own with no figures.
    pub fn step(op: &str, detail: String) -> PlanNode {
        PlanNode {
            op: op.into(),
            detail,
            children: vec![],
            est_rows: None,
            rows: None,
            time_ms: None,
            index: None,
            flags: vec![],
        }
    }

    /// This node with `children`.
    pub fn with_children(mut self, children: Vec<PlanNode>) -> PlanNode {
        self.children = children;
        self
    }

    /// The tree as indented lines, one operator per line with its figures.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_into(&mut out, 0);
        out
    }

    fn render_into(&self, out: &mut String, depth: usize) {
        let _ = write!(out, "{}{}", "  ".repeat(depth), self.op);
        if !self.detail.is_empty() {
            let _ = write!(out, ": {}", self.detail);
        }
        let mut figures = Vec::new();
        if let Some(n) = self.est_rows {
            figures.push(format!("est_rows={n}"));
        }
        if let Some(n) = self.rows {
            figures.push(format!("rows={n}"));
        }
        if let Some(t) = self.time_ms {
            figures.push(format!("time={t:.3}ms"));
        }
        if let Some(i) = &self.index {
            figures.push(format!("index={} coverage={:.3}", i.name, i.coverage));
        }
        figures.extend(self.flags.iter().map(|f| format!("!{f}")));
        if !figures.is_empty() {
            let _ = write!(out, "  [{}]", figures.join(" "));
        }
        out.push('\n');
        for c in &self.children {
            c.render_into(out, depth + 1);
        }
    }

    /// Say that the index `c` measures served this node, and flag the tail
    /// it leaves.
    pub fn served_by(&mut self, c: &index_fold::Coverage) {
        self.index = Some(IndexUse { name: c.index.clone(), coverage: c.share() });
        if c.unindexed_fragments > 0 {
            self.flags.push(UNINDEXED_TAIL.into());
        }
    }

    /// Every node of the tree, depth first.
    pub fn walk(&self) -> Vec<&PlanNode> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }
}

/// The BTree indexes each table's schema declares (`@key`, `@index`,
/// `@unique`, ids and edge endpoints), by table key: what a read's filter
/// could be served by, built or not.
pub type DeclaredIndexes = HashMap<String, HashSet<String>>;

/// One table version's index coverage, as measured.
type Measured = Arc<Vec<index_fold::Coverage>>;

/// The steps of one query as the planner takes them.
#[derive(Debug, Default)]
pub struct Recorder {
    insight: Insight,
    declared: DeclaredIndexes,
    steps: Mutex<Vec<PlanNode>>,
    /// Table locations (under the graph's root) to table keys.
    tables: Mutex<HashMap<String, String>>,
    /// Index coverage by table URI and version, measured once per query
    /// (a plan reads one table at one version in several places).
    coverage: Mutex<HashMap<(String, u64), Measured>>,
}

impl Recorder {
    /// A recorder for a run with `insight` over tables that declare `declared`.
    pub fn new(insight: Insight, declared: DeclaredIndexes) -> Recorder {
        Recorder { insight, declared, ..Default::default() }
    }

    /// What the run reports.
    pub fn insight(&self) -> Insight {
        self.insight
    }

    /// Whether the plan is recorded at all.
    pub fn on(&self) -> bool {
        self.insight != Insight::Off
    }

    /// Whether figures are recorded.
    pub fn profiling(&self) -> bool {
        self.insight == Insight::Profile
    }

    /// Remember that the table stored at `location` (under the graph's
    /// root) is `table_key`, so its reads name it.
    pub fn table(&self, location: &str, table_key: &str) {
        if self.on() {
            let mut tables = self.tables.lock().unwrap_or_else(|p| p.into_inner());
            tables.insert(location.trim_matches('/').to_string(), table_key.to_string());
        }
    }

    /// Add a step.
    pub fn push(&self, step: PlanNode) {
        if self.on() {
            self.steps.lock().unwrap_or_else(|p| p.into_inner()).push(step);
        }
    }

    /// The plan of `plan` (after it ran, with its figures when profiling).
    pub async fn describe(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<PlanNode> {
        let tables = self.tables.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut reads = Vec::new();
        let mut node = convert(plan, self.profiling(), &tables, &mut reads, &mut Vec::new());
        for read in reads {
            let coverage = self.coverage(&read.dataset).await?;
            let declared = read.table.as_deref().and_then(|t| self.declared.get(t));
            if let Some(target) = node_at(&mut node, &read.path) {
                annotate(target, &read, &coverage, declared);
            }
        }
        Ok(node)
    }

    /// The index coverage of `ds`, measured once per table and version.
    pub async fn coverage(&self, ds: &Dataset) -> Result<Measured> {
        let key = (ds.uri().to_string(), ds.version().version);
        if let Some(c) = self.coverage.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok(c.clone());
        }
        let measured = Arc::new(index_fold::coverage(ds).await?);
        self.coverage.lock().unwrap_or_else(|p| p.into_inner()).insert(key, measured.clone());
        Ok(measured)
    }

    /// The whole tree: every step in order, then `result`.
    pub fn finish(&self, result: Option<PlanNode>) -> PlanNode {
        let mut steps = std::mem::take(&mut *self.steps.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(r) = result {
            steps.push(PlanNode::step("result", String::new()).with_children(vec![r]));
        }
        PlanNode::step("query", String::new()).with_children(steps)
    }
}

/// A Lance read found in a plan, to annotate with its index.
struct LanceReadAt {
    path: Vec<usize>,
    dataset: Arc<Dataset>,
    /// Its table key, when its location is one the query opened.
    table: Option<String>,
    /// Columns its filter compares with values (`=`, `<`, `IN`, …): what
    /// a BTree answers.
    servable: Vec<String>,
    /// Whether an index answered its filter.
    indexed: bool,
}

fn convert(
    plan: &Arc<dyn ExecutionPlan>,
    profile: bool,
    tables: &HashMap<String, String>,
    reads: &mut Vec<LanceReadAt>,
    path: &mut Vec<usize>,
) -> PlanNode {
    let line = displayable(plan.as_ref()).one_line().to_string();
    let line = line.trim();
    let detail = line.split_once(": ").map_or("", |(_, d)| d);
    let mut node = PlanNode::step(plan.name(), without_paths(detail, tables));
    node.est_rows =
        plan.partition_statistics(None).ok().and_then(|s| s.num_rows.get_value().and_then(|n| u64::try_from(*n).ok()));
    if profile && let Some(m) = plan.metrics() {
        node.rows = m.output_rows().and_then(|n| u64::try_from(n).ok());
        node.time_ms = m.elapsed_compute().map(|ns| ns as f64 / 1e6);
    }
    if let Some(read) = plan.downcast_ref::<FilteredReadExec>() {
        let options = read.options();
        let mut servable: Vec<String> =
            [&options.full_filter, &options.refine_filter].into_iter().flatten().flat_map(servable_columns).collect();
        servable.sort();
        servable.dedup();
        reads.push(LanceReadAt {
            path: path.clone(),
            dataset: read.dataset().clone(),
            table: table_at(read.dataset().uri(), tables).map(str::to_string),
            servable,
            indexed: read.index_input().is_some(),
        });
    }
    for (i, child) in plan.children().into_iter().enumerate() {
        path.push(i);
        node.children.push(convert(child, profile, tables, reads, path));
        path.pop();
    }
    node
}

/// `detail` with each table URI Lance prints replaced by its table key (and
/// any other `uri=` value withheld): answers never show server paths.
fn without_paths(detail: &str, tables: &HashMap<String, String>) -> String {
    let Some(start) = detail.find("uri=") else { return detail.to_string() };
    let value_start = start + "uri=".len();
    let end = detail[value_start..].find(", ").map_or(detail.len(), |e| value_start + e);
    let table = table_at(&detail[value_start..end], tables).unwrap_or("?");
    format!("{}table={table}{}", &detail[..start], without_paths(&detail[end..], tables))
}

/// The table key of the table a path or URI lies in. Lance prints a store
/// path (no scheme, no bucket) under the table's location: the location's
/// segments name the table.
fn table_at<'t>(uri: &str, tables: &'t HashMap<String, String>) -> Option<&'t str> {
    let uri = format!("/{}/", uri.split_once("://").map_or(uri, |(_, rest)| rest).trim_matches('/'));
    tables
        .iter()
        .filter(|(location, _)| uri.contains(&format!("/{location}/")))
        .max_by_key(|(location, _)| location.len())
        .map(|(_, t)| t.as_str())
}

/// The columns `filter` compares with literal values in ways a BTree
/// answers: `=`, `<`, `<=`, `>`, `>=`, `IN`, `IS NULL`.
fn servable_columns(filter: &Expr) -> Vec<String> {
    let mut out = Vec::new();
    let column = |e: &Expr| match e {
        Expr::Column(c) => Some(c.name.clone()),
        _ => None,
    };
    let literal = |e: &Expr| matches!(e, Expr::Literal(..));
    let _ = filter.apply(|e| {
        match e {
            Expr::BinaryExpr(b)
                if matches!(b.op, Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq) =>
            {
                if literal(&b.right) {
                    out.extend(column(&b.left));
                } else if literal(&b.left) {
                    out.extend(column(&b.right));
                }
            }
            Expr::InList(l) if !l.negated && l.list.iter().all(literal) => out.extend(column(&l.expr)),
            Expr::IsNull(inner) => out.extend(column(inner)),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    out
}

fn node_at<'n>(node: &'n mut PlanNode, path: &[usize]) -> Option<&'n mut PlanNode> {
    match path.split_first() {
        None => Some(node),
        Some((i, rest)) => node_at(node.children.get_mut(*i)?, rest),
    }
}

/// Say which index served `read` and what it left, or flag a read of rows
/// whose filter an index the schema declares (built or not) could have
/// answered.
fn annotate(
    node: &mut PlanNode,
    read: &LanceReadAt,
    coverage: &[index_fold::Coverage],
    declared: Option<&HashSet<String>>,
) {
    let btrees = read.servable.iter().map(|c| format!("{c}_btree"));
    if read.indexed {
        if let Some(found) = btrees.clone().find_map(|name| coverage.iter().find(|c| c.index == name)) {
            node.served_by(found);
        }
        return;
    }
    let rows = read.dataset.manifest().fragments.iter().any(|f| f.physical_rows.is_none_or(|n| n > 0));
    if rows && btrees.into_iter().any(|name| declared.is_some_and(|d| d.contains(&name))) {
        node.flags.push(SCAN_COULD_USE_INDEX.into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_table_keys_and_unknown_ones_are_withheld() {
        let tables: HashMap<String, String> = [("nodes/abc".to_string(), "node:Person".to_string())].into();
        assert_eq!(
            without_paths("uri=srv/g/nodes/abc/data, projection=[id], full_filter=--", &tables),
            "table=node:Person, projection=[id], full_filter=--"
        );
        assert_eq!(without_paths("uri=/elsewhere/x, projection=[id]", &tables), "table=?, projection=[id]");
        assert_eq!(without_paths("projection=[id]", &tables), "projection=[id]");
    }

    #[test]
    fn a_tree_renders_indented_with_its_figures() {
        let mut read = PlanNode::step("LanceRead", "table=node:Person".into());
        read.rows = Some(1);
        read.index = Some(IndexUse { name: "id_btree".into(), coverage: 0.5 });
        read.flags.push(UNINDEXED_TAIL.into());
        let tree = PlanNode::step("query", String::new())
            .with_children(vec![PlanNode::step("result", String::new()).with_children(vec![read])]);
        assert_eq!(
            tree.render(),
            "query\n  result\n    LanceRead: table=node:Person  [rows=1 index=id_btree coverage=0.500 !unindexed_tail]\n"
        );
        assert_eq!(tree.walk().len(), 3);
    }
}
