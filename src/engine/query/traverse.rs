//! Traversals: how a binding frame is extended along one edge pattern.
//!
//! An unbound traversal (`$a knows $b`, `$a knows{1,3} $b`, `$a <knows> $b`)
//! reports each destination at most once per source, under the frontier
//! rule of [`SourceWalk`]; a traversal that binds its edge (`$a $w:knows $b`)
//! yields one row per matching edge. Three plans answer them:
//! - **edges**: the edge table joined with the frame, filtered by the
//!   sources' ids (a BTree lookup) when they are few; every edge binding and,
//!   by default, a single hop from at most [`SELECTIVE_SOURCES`] sources;
//! - **adjacency**: [`reach`] over the edge table's cached in-memory
//!   adjacency; by default every other traversal;
//! - **indexed**: the same walk driven by reading, at each hop, the edges
//!   leaving the frontier through the endpoint indexes, without building
//!   the adjacency.
//!
//! `OMNIGRAPH_TRAVERSAL_MODE=indexed|csr` forces the indexed plans (edges
//! for a single hop, indexed for several) or the adjacency for every unbound
//! traversal; all plans give the same rows.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use datafusion::common::JoinType;
use datafusion::dataframe::DataFrame;
use datafusion::prelude::{Expr, ident, lit};

use super::adjacency::adjacency;
use super::exec::{DfResult, Planner, df_err, drop_prefixed, var_col};
use super::plan_tree::PlanNode;
use crate::engine::lang::query::ir::{Direction, TraversalIr, VarIr};
use crate::engine::walk::{Interner, SourceWalk, Way, reach};
use crate::protocol::{OmniError, Result};

/// At most this many distinct sources make a single hop a filtered scan of
/// the edges (an index lookup) rather than a walk over the adjacency.
const SELECTIVE_SOURCES: usize = 1024;

/// The environment variable that forces a traversal plan.
pub const TRAVERSAL_MODE_ENV: &str = "OMNIGRAPH_TRAVERSAL_MODE";

/// Which plans traversals may use (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Chosen by the number of sources and hops.
    Auto,
    /// Index lookups on the edge table, never the adjacency.
    Indexed,
    /// The in-memory adjacency for every unbound traversal.
    Csr,
}

/// The mode `OMNIGRAPH_TRAVERSAL_MODE` sets, read once per process.
fn mode() -> Result<Mode> {
    static MODE: OnceLock<std::result::Result<Mode, String>> = OnceLock::new();
    let parsed = MODE.get_or_init(|| match std::env::var(TRAVERSAL_MODE_ENV).as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(Mode::Auto),
        Ok("indexed") => Ok(Mode::Indexed),
        Ok("csr") => Ok(Mode::Csr),
        Ok(other) => Err(other.to_string()),
    });
    parsed.clone().map_err(|v| {
        OmniError::BadRequest(format!("{TRAVERSAL_MODE_ENV}={v:?} is not a traversal mode (auto, indexed or csr)"))
    })
}

/// The plan of one traversal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Edges,
    Adjacency,
    Indexed,
}

impl Plan {
    fn choose(mode: Mode, t: &TraversalIr, sources: usize) -> Plan {
        let single = t.min_hops == 1 && t.max_hops == 1;
        match mode {
            // The adjacency holds no edge columns: a bound edge is read.
            _ if t.edge_var.is_some() => Plan::Edges,
            Mode::Csr => Plan::Adjacency,
            Mode::Indexed if single => Plan::Edges,
            Mode::Indexed => Plan::Indexed,
            Mode::Auto if single && sources <= SELECTIVE_SOURCES => Plan::Edges,
            Mode::Auto => Plan::Adjacency,
        }
    }
}

fn way(direction: Direction) -> Way {
    match direction {
        Direction::Out => Way::Out,
        Direction::In => Way::In,
        Direction::Both => Way::Both,
    }
}

impl Planner<'_> {
    /// Extend the frame (which binds `t.src`) along one traversal; `dst` is
    /// the destination variable to bind, `None` when the frame binds it.
    /// `hetero`: the edge joins two node types, so no walk is longer than
    /// one edge.
    pub(super) async fn traverse(
        &self,
        current: DataFrame,
        t: &TraversalIr,
        dst: Option<&VarIr>,
        hetero: bool,
    ) -> Result<DataFrame> {
        let tag = self.fresh("hop");
        // The frame's sources decide the plan: a walk starts only from them,
        // and a few of them make a single hop an index lookup.
        let (current, sources) = self.materialize(current, &t.src).await?;
        let sources_count = sources.len();
        let (min, max) = (t.min_hops, if hetero { 1 } else { t.max_hops });
        let plan = Plan::choose(mode()?, t, sources.len());
        let started = std::time::Instant::now();
        let hop = match plan {
            Plan::Edges => {
                let selective = (sources.len() <= SELECTIVE_SOURCES).then_some(sources.as_slice());
                (self.hop_frame(t, &tag, selective).await?, None)
            }
            _ if min > max => (self.pairs_frame(&tag, Vec::new())?, Some(0)),
            Plan::Adjacency => {
                let adj = adjacency(self.root, self.entry(&t.table_key)?).await?;
                let (way, meter) = (way(t.direction), self.meter.clone());
                let pairs = tokio::task::spawn_blocking(move || {
                    let refs: Vec<&str> = sources.iter().map(String::as_str).collect();
                    reach(&adj, &refs, way, min, max, &meter)
                })
                .await
                .map_err(|e| OmniError::Internal(format!("traversal task: {e}")))??;
                let n = pairs.len() as u64;
                (self.pairs_frame(&tag, pairs)?, Some(n))
            }
            Plan::Indexed => {
                let pairs = self.indexed_reach(t, &tag, &sources, min, max).await?;
                let n = pairs.len() as u64;
                (self.pairs_frame(&tag, pairs)?, Some(n))
            }
        };
        self.record_walk(t, plan, (min, max), sources_count, hop.1, started);
        let hop = hop.0;
        let joined = current
            .join_on(hop, JoinType::Inner, [var_col(&t.src, "id").eq(ident(format!("{tag}.s")))])
            .map_err(df_err)?;
        let joined = match dst {
            None => joined.filter(var_col(&t.dst, "id").eq(ident(format!("{tag}.d")))).map_err(df_err)?,
            Some(v) => {
                let frame = self.var_frame(v).await?;
                joined
                    .join_on(frame, JoinType::Inner, [ident(format!("{tag}.d")).eq(var_col(&t.dst, "id"))])
                    .map_err(df_err)?
            }
        };
        drop_prefixed(joined, &format!("{tag}."))
    }

    /// Record a traversal's walk as a step of the plan: the edge table, the
    /// hops, the plan chosen and its sources, and (profiling) the pairs it
    /// reached. An `edges` hop is a join inside the next frame, so its rows
    /// show there.
    fn record_walk(
        &self,
        t: &TraversalIr,
        plan: Plan,
        (min, max): (u32, u32),
        sources: usize,
        pairs: Option<u64>,
        started: std::time::Instant,
    ) {
        if !self.recorder.on() {
            return;
        }
        let direction = match t.direction {
            Direction::Out => "out",
            Direction::In => "in",
            Direction::Both => "both",
        };
        let plan = match plan {
            Plan::Edges => "edges (joined in the next frame)",
            Plan::Adjacency => "adjacency",
            Plan::Indexed => "indexed",
        };
        let detail = format!("table={} {direction} hops={min}..{max} plan={plan} sources={sources}", t.table_key);
        let mut step = PlanNode::step("traverse", detail);
        if self.recorder.profiling() {
            step.rows = pairs;
            step.time_ms = Some(started.elapsed().as_secs_f64() * 1e3);
        }
        self.recorder.push(step);
    }

    /// The (s, d) pairs one edge connects, oriented from the written `src`
    /// to the written `dst`: one row per edge, with the edge's columns, when
    /// the edge is bound (a self-loop once, though both ways match it), else
    /// each pair once. With `sources`, only edges leaving them: a filter
    /// Lance answers from the endpoint's BTree index.
    async fn hop_frame(&self, t: &TraversalIr, tag: &str, sources: Option<&[String]>) -> Result<DataFrame> {
        let prefix = t.edge_var.clone().unwrap_or_else(|| tag.to_string());
        let mut edges = self.table_frame(&t.table_key, &prefix).await?;
        if let Some(ids) = sources {
            let list: Vec<Expr> = ids.iter().map(|id| lit(id.clone())).collect();
            let from = |end: &str| var_col(&prefix, end).in_list(list.clone(), false);
            let keep = match t.direction {
                Direction::Out => from("src"),
                Direction::In => from("dst"),
                Direction::Both => from("src").or(from("dst")),
            };
            edges = edges.filter(keep).map_err(df_err)?;
        }
        let (s, d) = (format!("{tag}.s"), format!("{tag}.d"));
        let bound = t.edge_var.is_some();
        let orient = |df: DataFrame, from: &str, to: &str| -> DfResult<DataFrame> {
            let mut cols = vec![var_col(&prefix, from).alias(&s), var_col(&prefix, to).alias(&d)];
            if bound {
                cols.extend(df.schema().fields().iter().map(|f| ident(f.name())));
            }
            df.select(cols)
        };
        let pairs = match t.direction {
            Direction::Out => orient(edges, "src", "dst"),
            Direction::In => orient(edges, "dst", "src"),
            Direction::Both => {
                let back = edges.clone().filter(var_col(&prefix, "src").not_eq(var_col(&prefix, "dst")));
                orient(edges, "src", "dst").and_then(|a| orient(back?, "dst", "src").and_then(|b| a.union(b)))
            }
        };
        pairs.and_then(|p| if bound { Ok(p) } else { p.distinct() }).map_err(df_err)
    }

    /// [`reach`] without the adjacency: each hop reads the edges leaving the
    /// union of the sources' frontiers (an indexed filter on the edge
    /// table), and every source's [`SourceWalk`] takes the hop over them.
    async fn indexed_reach(
        &self,
        t: &TraversalIr,
        tag: &str,
        sources: &[String],
        min: u32,
        max: u32,
    ) -> Result<Vec<(String, String)>> {
        let mut names = Interner::default();
        let mut walks: Vec<(u32, SourceWalk)> = sources
            .iter()
            .map(|s| {
                let mut walk = SourceWalk::new(None);
                let start = names.intern(s);
                walk.start(start);
                (start, walk)
            })
            .collect();
        let mut out = Vec::new();
        loop {
            let frontier: BTreeSet<u32> =
                walks.iter().filter(|(_, w)| w.live(max)).flat_map(|(_, w)| w.frontier().iter().copied()).collect();
            if frontier.is_empty() {
                return Ok(out);
            }
            let keys: Vec<String> = frontier.iter().map(|&n| names.name(n).to_string()).collect();
            let mut next: HashMap<u32, Vec<u32>> = HashMap::new();
            // A lookup per bounded chunk: a wide frontier never becomes one huge IN list.
            for chunk in keys.chunks(SELECTIVE_SOURCES) {
                let hop = self.hop_frame(t, tag, Some(chunk)).await?;
                let batches = self.collect_step(hop, "materialize", "edges leaving the frontier").await?;
                for (s, d) in pair_columns(&batches, tag)? {
                    let (s, d) = (names.intern(s), names.intern(d));
                    next.entry(s).or_default().push(d);
                }
            }
            let mut work = 0;
            for (start, walk) in walks.iter_mut().filter(|(_, w)| w.live(max)) {
                work += walk.hop(
                    min,
                    |n, f| next.get(&n).into_iter().flatten().for_each(|&z| f(z)),
                    |z| out.push((names.name(*start).to_string(), names.name(z).to_string())),
                );
            }
            self.meter.charge_work(work)?;
            self.meter.check_rows(out.len() as u64)?;
        }
    }

    /// The reached pairs as a two-column frame `{tag}.s`, `{tag}.d`.
    fn pairs_frame(&self, tag: &str, pairs: Vec<(String, String)>) -> Result<DataFrame> {
        let (s, d) = (format!("{tag}.s"), format!("{tag}.d"));
        let schema = Arc::new(arrow_schema::Schema::new(vec![
            arrow_schema::Field::new(&s, DataType::Utf8, true),
            arrow_schema::Field::new(&d, DataType::Utf8, true),
        ]));
        let (src, dst): (Vec<&str>, Vec<&str>) = pairs.iter().map(|(a, b)| (a.as_str(), b.as_str())).unzip();
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(arrow_array::StringArray::from(src)), Arc::new(arrow_array::StringArray::from(dst))],
        )
        .map_err(|e| OmniError::Internal(format!("building the reached pairs: {e}")))?;
        self.ctx.read_batch(batch).map_err(df_err)
    }
}

/// The `(s, d)` pairs of a [`Planner::hop_frame`]'s batches.
fn pair_columns<'b>(batches: &'b [RecordBatch], tag: &str) -> Result<Vec<(&'b str, &'b str)>> {
    let mut out = Vec::new();
    for b in batches {
        let column = |end: &str| {
            let name = format!("{tag}.{end}");
            b.column_by_name(&name)
                .and_then(|c| c.as_string_opt::<i32>())
                .ok_or_else(|| OmniError::Internal(format!("the edge frame has no string column `{name}`")))
        };
        let (s, d) = (column("s")?, column("d")?);
        out.extend(s.iter().zip(d.iter()).filter_map(|(s, d)| Some((s?, d?))));
    }
    Ok(out)
}
