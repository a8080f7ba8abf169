//! Bounded variable-length traversal over an adjacency structure.
//!
//! [`Adjacency`] is a compressed sparse row (CSR) layout of one edge table:
//! the ids interned once, each node's out- and in-neighbours in two flat
//! arrays. [`reach`] answers an unbound `$a edge{min,max} $z` (a single hop
//! included) from each source with [`SourceWalk`]: breadth-first by hop,
//! each destination at most once, returns to visited nodes pruned (the
//! reference implementation's documented frontier rule). Every node is
//! searched at most once per source, so the work is linear in what the
//! query visits and independent of `max`; nothing recurses, so no bound can
//! overflow the stack. The query executor's indexed plan drives the same
//! [`SourceWalk`] from edges it reads hop by hop.

use std::collections::{HashMap, HashSet};

use crate::protocol::Result;
use crate::read_limits::Meter;

/// Which way a traversal follows the edges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    /// From `src` to `dst`.
    Out,
    /// From `dst` to `src`.
    In,
    /// Either way.
    Both,
}

/// One direction's CSR: the neighbours of node `n` are
/// `targets[offsets[n]..offsets[n + 1]]`.
#[derive(Debug, Default)]
struct Csr {
    offsets: Vec<u32>,
    targets: Vec<u32>,
}

impl Csr {
    fn build(nodes: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Csr {
        let mut offsets = vec![0u32; nodes + 1];
        for (a, _) in pairs.clone() {
            offsets[a as usize + 1] += 1;
        }
        for i in 0..nodes {
            offsets[i + 1] += offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; offsets[nodes] as usize];
        for (a, z) in pairs {
            targets[fill[a as usize] as usize] = z;
            fill[a as usize] += 1;
        }
        Csr { offsets, targets }
    }

    fn of(&self, n: u32) -> &[u32] {
        let (a, z) = (self.offsets[n as usize] as usize, self.offsets[n as usize + 1] as usize);
        &self.targets[a..z]
    }
}

/// Node ids interned as dense `u32`s, in first-seen order.
#[derive(Debug, Default)]
pub struct Interner {
    ids: Vec<String>,
    index: HashMap<String, u32>,
}

impl Interner {
    /// The dense id of `id`, interned now if new.
    pub fn intern(&mut self, id: &str) -> u32 {
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.ids.len() as u32;
        self.ids.push(id.to_string());
        self.index.insert(id.to_string(), i);
        i
    }

    /// The dense id of `id`, if interned.
    pub fn get(&self, id: &str) -> Option<u32> {
        self.index.get(id).copied()
    }

    /// The id a dense id stands for.
    pub fn name(&self, n: u32) -> &str {
        &self.ids[n as usize]
    }

    /// Number of interned ids.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The adjacency of one edge table at one version.
#[derive(Debug, Default)]
pub struct Adjacency {
    names: Interner,
    out: Csr,
    inn: Csr,
}

impl Adjacency {
    /// Build from the edges' `(src, dst)` ids.
    pub fn build<'a>(edges: impl IntoIterator<Item = (&'a str, &'a str)>) -> Adjacency {
        let mut adj = Adjacency::default();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (s, d) in edges {
            let (s, d) = (adj.names.intern(s), adj.names.intern(d));
            pairs.push((s, d));
        }
        let n = adj.names.len();
        adj.out = Csr::build(n, pairs.iter().copied());
        adj.inn = Csr::build(n, pairs.iter().map(|&(s, d)| (d, s)));
        adj
    }

    /// Number of distinct endpoint ids.
    pub fn nodes(&self) -> usize {
        self.names.len()
    }

    /// Number of edges.
    pub fn edges(&self) -> usize {
        self.out.targets.len()
    }

    /// Approximate heap size, for the cache's budget.
    pub fn heap_bytes(&self) -> usize {
        let strings: usize = self.names.ids.iter().map(|s| 2 * (s.len() + 24) + 12).sum();
        strings + 4 * (self.out.offsets.len() + self.inn.offsets.len() + 2 * self.out.targets.len())
    }

    /// Calls `f` with each neighbour of `n` along `way`, once per edge.
    pub fn neighbours(&self, n: u32, way: Way, mut f: impl FnMut(u32)) {
        if way != Way::In {
            self.out.of(n).iter().for_each(|&z| f(z));
        }
        if way != Way::Out {
            self.inn.of(n).iter().for_each(|&z| f(z));
        }
    }
}

/// The nodes one source's walk has marked: a dense stamp array, reused from
/// one source to the next, when the node count is known and small enough to
/// allocate, else a hash set.
#[derive(Debug)]
enum Marks {
    Dense { stamp: Vec<u32>, current: u32 },
    Sparse(HashSet<u32>),
}

/// The dense space allocated at most (4 bytes per node and mark set).
const DENSE_NODES: usize = 1 << 25;

impl Marks {
    fn new(nodes: Option<usize>) -> Marks {
        match nodes {
            Some(n) if n <= DENSE_NODES => Marks::Dense { stamp: vec![0; n], current: 1 },
            _ => Marks::Sparse(HashSet::new()),
        }
    }

    fn clear(&mut self) {
        match self {
            Marks::Dense { current, .. } => *current += 1,
            Marks::Sparse(set) => set.clear(),
        }
    }

    /// Mark `node`; false when it was already marked.
    fn mark(&mut self, node: u32) -> bool {
        match self {
            Marks::Dense { stamp, current } => {
                let slot = &mut stamp[node as usize];
                let fresh = *slot != *current;
                *slot = *current;
                fresh
            }
            Marks::Sparse(set) => set.insert(node),
        }
    }
}

/// One source's breadth-first walk, hop by hop, under the reference's rule
/// for unbound traversals: the source counts as visited; a node enters the
/// frontier at most once (the first hop that reaches it) and is reported at
/// that hop when the hop is within `min..=max`; any other return to a
/// visited node is pruned, except that a stored self-loop reports its node
/// at the hop after the node entered the frontier (when within bounds)
/// without searching it again. Each destination is reported at most once.
/// So every node's edges are read at most once per source, whatever `max`.
#[derive(Debug)]
pub struct SourceWalk {
    visited: Marks,
    reported: Marks,
    frontier: Vec<u32>,
    next: Vec<u32>,
    hop: u32,
}

impl SourceWalk {
    /// A walker over `nodes` dense ids (`None`: ids are not dense, so the
    /// marks are hash sets).
    pub fn new(nodes: Option<usize>) -> SourceWalk {
        SourceWalk {
            visited: Marks::new(nodes),
            reported: Marks::new(nodes),
            frontier: Vec::new(),
            next: Vec::new(),
            hop: 0,
        }
    }

    /// Start (or restart) the walk at `source`.
    pub fn start(&mut self, source: u32) {
        self.visited.clear();
        self.reported.clear();
        self.visited.mark(source);
        self.frontier.clear();
        self.frontier.push(source);
        self.hop = 0;
    }

    /// The nodes the next hop leaves from.
    pub fn frontier(&self) -> &[u32] {
        &self.frontier
    }

    /// Whether another hop within `max` may reach anything.
    pub fn live(&self, max: u32) -> bool {
        !self.frontier.is_empty() && self.hop < max
    }

    /// Take one hop: `neighbours(n, f)` calls `f` once per edge leaving `n`
    /// (parallel edges repeat), and `reached(z)` hears each destination
    /// reported at this hop. Returns the edges read.
    pub fn hop(
        &mut self,
        min: u32,
        mut neighbours: impl FnMut(u32, &mut dyn FnMut(u32)),
        mut reached: impl FnMut(u32),
    ) -> u64 {
        self.hop += 1;
        let report = self.hop >= min;
        let mut read = 0u64;
        let Self { visited, reported, frontier, next, .. } = self;
        next.clear();
        for &node in frontier.iter() {
            neighbours(node, &mut |z| {
                read += 1;
                let entered = z != node && visited.mark(z);
                if entered {
                    next.push(z);
                }
                if (entered || z == node) && report && reported.mark(z) {
                    reached(z);
                }
            });
        }
        std::mem::swap(frontier, next);
        read
    }
}

/// Every `(source, destination)` pair an unbound traversal of `min..=max`
/// edges (`min ≥ 1`) following `way` reports for each of `sources`, under
/// [`SourceWalk`]'s rule (ids absent from the edges reach nothing). The work
/// and the pairs are charged to `meter`, which stops the walk at a limit.
pub fn reach(
    adj: &Adjacency,
    sources: &[&str],
    way: Way,
    min: u32,
    max: u32,
    meter: &Meter,
) -> Result<Vec<(String, String)>> {
    assert!(min >= 1 && max >= min, "traversal bounds {{{min},{max}}} passed the typecheck");
    let mut walk = SourceWalk::new(Some(adj.nodes()));
    let mut out = Vec::new();
    let mut work = 0u64;
    for source in sources {
        let Some(start) = adj.names.get(source) else { continue };
        walk.start(start);
        while walk.live(max) {
            work += 1 + walk.hop(
                min,
                |n, f| adj.neighbours(n, way, f),
                |z| out.push((source.to_string(), adj.names.name(z).to_string())),
            );
            if work >= 4096 {
                meter.charge_work(work)?;
                meter.check_rows(out.len() as u64)?;
                work = 0;
            }
        }
    }
    meter.charge_work(work)?;
    meter.check_rows(out.len() as u64)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read_limits::ReadLimits;
    use std::collections::BTreeSet;

    fn walk(edges: &[(&str, &str)], way: Way, min: u32, max: u32) -> BTreeSet<(String, String)> {
        let adj = Adjacency::build(edges.iter().copied());
        let mut sources: Vec<&str> = edges.iter().flat_map(|(a, z)| [*a, *z]).collect();
        sources.sort();
        sources.dedup();
        let meter = ReadLimits::unlimited().meter();
        reach(&adj, &sources, way, min, max, &meter).expect("no limit").into_iter().collect()
    }

    fn set(v: &[(&str, &str)]) -> BTreeSet<(String, String)> {
        v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn destinations_at_their_first_hop_with_the_self_loop_rule() {
        // The reference's own example: A->B, B->B, B->C, C->A, A->D from A.
        let g = [("A", "B"), ("B", "B"), ("B", "C"), ("C", "A"), ("A", "D")];
        let from_a = |min, max| -> Vec<String> {
            walk(&g, Way::Out, min, max).into_iter().filter(|(s, _)| s == "A").map(|(_, z)| z).collect()
        };
        assert_eq!(from_a(1, 3), ["B", "C", "D"]);
        assert!(from_a(3, 3).is_empty());
        assert_eq!(from_a(2, 2), ["B", "C"]);
        let chain = [("a", "b"), ("b", "c"), ("c", "d")];
        assert_eq!(walk(&chain, Way::Out, 2, 2), set(&[("a", "c"), ("b", "d")]));
        assert_eq!(walk(&chain, Way::Out, 1, 3).len(), 6);
        assert!(walk(&chain, Way::Out, 4, 9).is_empty());
        assert_eq!(walk(&chain, Way::In, 3, 3), set(&[("d", "a")]));
        // Both ways: going back to a visited node is pruned, so no node
        // reaches itself without a self-loop.
        assert!(walk(&chain, Way::Both, 1, 5).iter().all(|(s, z)| s != z));
        assert_eq!(walk(&[("a", "a")], Way::Both, 1, 1), set(&[("a", "a")]));
        let cycle = [("a", "b"), ("b", "a")];
        assert_eq!(walk(&cycle, Way::Out, 1, u32::MAX), set(&[("a", "b"), ("b", "a")]));
        assert!(walk(&cycle, Way::Out, 2, 2).is_empty());
    }

    /// The walk against an independent statement of the rule on small random
    /// graphs, bounds and directions: `z` is reported from `s` exactly when
    /// `z != s` and its distance from `s` is within the bounds, or `z` has a
    /// self-loop and one more than its distance is.
    #[test]
    fn matches_the_distance_rule_on_random_graphs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        for _ in 0..500 {
            let edges: Vec<(&str, &str)> =
                (0..next(14)).map(|_| (names[next(7) as usize].as_str(), names[next(7) as usize].as_str())).collect();
            let min = 1 + next(3) as u32;
            let max = min + next(3) as u32;
            let way = [Way::Out, Way::In, Way::Both][next(3) as usize];
            assert_eq!(
                walk(&edges, way, min, max),
                by_distance(&edges, way, min, max),
                "{edges:?} {way:?} {min}..{max}"
            );
        }
    }

    fn by_distance(edges: &[(&str, &str)], way: Way, min: u32, max: u32) -> BTreeSet<(String, String)> {
        let arcs: Vec<(&str, &str)> = edges
            .iter()
            .flat_map(|&(a, z)| match way {
                Way::Out => vec![(a, z)],
                Way::In => vec![(z, a)],
                Way::Both => vec![(a, z), (z, a)],
            })
            .collect();
        let looped = |n: &str| arcs.iter().any(|&(a, z)| a == n && z == n);
        let within = |h: u32| (min..=max).contains(&h);
        let nodes: BTreeSet<&str> = edges.iter().flat_map(|&(a, z)| [a, z]).collect();
        let mut out = BTreeSet::new();
        for &s in &nodes {
            let mut dist: HashMap<&str, u32> = HashMap::from([(s, 0)]);
            let mut level = vec![s];
            let mut d = 0;
            while !level.is_empty() {
                d += 1;
                let mut reached = Vec::new();
                for &(a, z) in &arcs {
                    if level.contains(&a) && !dist.contains_key(z) {
                        dist.insert(z, d);
                        reached.push(z);
                    }
                }
                level = reached;
            }
            for (&z, &d) in &dist {
                if (z != s && within(d)) || (looped(z) && within(d + 1)) {
                    out.insert((s.to_string(), z.to_string()));
                }
            }
        }
        out
    }

    #[test]
    fn a_row_limit_stops_the_walk() {
        let edges: Vec<(String, String)> = (0..200).map(|i| (format!("n{i}"), format!("n{}", (i + 1) % 200))).collect();
        let adj = Adjacency::build(edges.iter().map(|(a, z)| (a.as_str(), z.as_str())));
        let sources: Vec<&str> = edges.iter().map(|(a, _)| a.as_str()).collect();
        let meter = ReadLimits { max_rows: Some(1000), ..ReadLimits::unlimited() }.meter();
        let err = reach(&adj, &sources, Way::Out, 1, 1000, &meter).expect_err("40,000 pairs > 1,000");
        assert!(err.to_string().contains("query_rows"), "{err}");
    }
}
