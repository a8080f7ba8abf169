//! Bounded variable-length traversal over an adjacency structure.
//!
//! [`Adjacency`] is a compressed sparse row (CSR) layout of one edge table:
//! the ids interned once, each node's out- and in-neighbours in two flat
//! arrays. [`reach`] answers `$a edge{min,max} $z` with set semantics (each
//! pair once) by a breadth-first search from each source over states
//! `(node, min(walk length, min))`: a pair belongs to the answer exactly when
//! the shortest walk of length ≥ `min` is at most `max`, and that walk is the
//! first time the BFS reaches the state `(z, min)`. Every state is expanded at
//! most once per source, so the work is linear in what the query visits
//! (`(min + 1) × (nodes + edges)` per source at worst) and independent of
//! `max`; nothing recurses, so no bound can overflow the stack.

use std::collections::{HashMap, HashSet, VecDeque};

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

/// The adjacency of one edge table at one version.
#[derive(Debug, Default)]
pub struct Adjacency {
    ids: Vec<String>,
    index: HashMap<String, u32>,
    out: Csr,
    inn: Csr,
}

impl Adjacency {
    /// Build from the edges' `(src, dst)` ids.
    pub fn build<'a>(edges: impl IntoIterator<Item = (&'a str, &'a str)>) -> Adjacency {
        let mut adj = Adjacency::default();
        let mut pairs: Vec<(u32, u32)> = Vec::new();
        for (s, d) in edges {
            let (s, d) = (adj.intern(s), adj.intern(d));
            pairs.push((s, d));
        }
        let n = adj.ids.len();
        adj.out = Csr::build(n, pairs.iter().copied());
        adj.inn = Csr::build(n, pairs.iter().map(|&(s, d)| (d, s)));
        adj
    }

    fn intern(&mut self, id: &str) -> u32 {
        if let Some(&i) = self.index.get(id) {
            return i;
        }
        let i = self.ids.len() as u32;
        self.ids.push(id.to_string());
        self.index.insert(id.to_string(), i);
        i
    }

    /// Number of distinct endpoint ids.
    pub fn nodes(&self) -> usize {
        self.ids.len()
    }

    /// Number of edges.
    pub fn edges(&self) -> usize {
        self.out.targets.len()
    }

    /// Approximate heap size, for the cache's budget.
    pub fn heap_bytes(&self) -> usize {
        let strings: usize = self.ids.iter().map(|s| 2 * (s.len() + 24) + 12).sum();
        strings + 4 * (self.out.offsets.len() + self.inn.offsets.len() + 2 * self.out.targets.len())
    }

    fn neighbours(&self, n: u32, way: Way, mut f: impl FnMut(u32)) {
        if way != Way::In {
            self.out.of(n).iter().for_each(|&z| f(z));
        }
        if way != Way::Out {
            self.inn.of(n).iter().for_each(|&z| f(z));
        }
    }
}

/// Which states one source's BFS has reached: a dense stamp array when the
/// state space is small enough to allocate, else a hash set.
enum Visited {
    Dense { stamp: Vec<u32>, current: u32 },
    Sparse(HashSet<u64>),
}

/// The dense state space allocated at most (4 bytes per state).
const DENSE_STATES: u64 = 1 << 25;

impl Visited {
    fn new(states: u64) -> Visited {
        if states <= DENSE_STATES {
            Visited::Dense { stamp: vec![0; states as usize], current: 0 }
        } else {
            Visited::Sparse(HashSet::new())
        }
    }

    fn next_source(&mut self) {
        match self {
            Visited::Dense { current, .. } => *current += 1,
            Visited::Sparse(set) => set.clear(),
        }
    }

    /// Mark `state`; false when it was already marked for this source.
    fn mark(&mut self, state: u64) -> bool {
        match self {
            Visited::Dense { stamp, current } => {
                let slot = &mut stamp[state as usize];
                let fresh = *slot != *current;
                *slot = *current;
                fresh
            }
            Visited::Sparse(set) => set.insert(state),
        }
    }
}

/// Every `(source, destination)` pair joined by a walk of `min..=max` edges
/// (`min ≥ 1`) following `way`, for each of `sources` (ids absent from the
/// edges reach nothing). Each visited state and each reached pair is charged
/// to `meter`, which stops the walk when a limit is hit.
pub fn reach(
    adj: &Adjacency,
    sources: &[&str],
    way: Way,
    min: u32,
    max: u32,
    meter: &Meter,
) -> Result<Vec<(String, String)>> {
    assert!(min >= 1 && max >= min, "traversal bounds {{{min},{max}}} passed the typecheck");
    let layers = u64::from(min) + 1;
    let mut visited = Visited::new(adj.nodes() as u64 * layers);
    let state = |node: u32, layer: u32| u64::from(node) * layers + u64::from(layer);
    let mut out = Vec::new();
    let mut queue: VecDeque<(u32, u32, u32)> = VecDeque::new();
    for source in sources {
        let Some(&start) = adj.index.get(*source) else { continue };
        visited.next_source();
        visited.mark(state(start, 0));
        queue.clear();
        queue.push_back((start, 0, 0));
        let mut work = 0u64;
        while let Some((node, layer, dist)) = queue.pop_front() {
            work += 1;
            if dist == max {
                continue;
            }
            let next_layer = (layer + 1).min(min);
            adj.neighbours(node, way, |z| {
                if visited.mark(state(z, next_layer)) {
                    if next_layer == min {
                        out.push((source.to_string(), adj.ids[z as usize].clone()));
                    }
                    queue.push_back((z, next_layer, dist + 1));
                }
            });
            if work.is_multiple_of(4096) {
                meter.charge_work(4096)?;
                meter.check_rows(out.len() as u64)?;
            }
        }
        meter.charge_work(work % 4096)?;
        meter.check_rows(out.len() as u64)?;
    }
    Ok(out)
}

/// One hop: a `(source, neighbour)` pair per edge leaving each of `sources`
/// along `way`, parallel edges kept (the rows a join with the edge table
/// gives). The pairs are charged to `meter`.
pub fn step(adj: &Adjacency, sources: &[&str], way: Way, meter: &Meter) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for source in sources {
        let Some(&start) = adj.index.get(*source) else { continue };
        adj.neighbours(start, way, |z| out.push((source.to_string(), adj.ids[z as usize].clone())));
        meter.check_rows(out.len() as u64)?;
    }
    meter.charge_work(out.len() as u64)?;
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
    fn walk_lengths_in_range_with_set_semantics() {
        let chain = [("a", "b"), ("b", "c"), ("c", "d")];
        assert_eq!(walk(&chain, Way::Out, 2, 2), set(&[("a", "c"), ("b", "d")]));
        assert_eq!(walk(&chain, Way::Out, 1, 3).len(), 6);
        assert!(walk(&chain, Way::Out, 4, 9).is_empty());
        assert_eq!(walk(&chain, Way::In, 3, 3), set(&[("d", "a")]));
        // Both ways: a walk may go back and forth, so b reaches itself in 2.
        assert!(walk(&chain, Way::Both, 2, 2).contains(&("b".into(), "b".into())));
        let cycle = [("a", "b"), ("b", "a")];
        assert_eq!(walk(&cycle, Way::Out, 1, u32::MAX).len(), 4);
        assert_eq!(walk(&cycle, Way::Out, 2, 2), set(&[("a", "a"), ("b", "b")]));
        assert_eq!(walk(&cycle, Way::Out, 5, 5), set(&[("a", "b"), ("b", "a")]));
        assert_eq!(walk(&cycle, Way::Out, 5, u32::MAX).len(), 4);
        let tri = [("a", "b"), ("b", "c"), ("c", "a")];
        assert_eq!(walk(&tri, Way::Out, 4, 1_000_000).len(), 9);
        assert_eq!(walk(&tri, Way::Out, 4, 4).len(), 3);
    }

    /// The BFS against brute force (every walk length enumerated) on small
    /// random graphs, bounds and directions.
    #[test]
    fn matches_walk_enumeration_on_random_graphs() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let names: Vec<String> = (0..7).map(|i| format!("n{i}")).collect();
        for _ in 0..300 {
            let edges: Vec<(&str, &str)> =
                (0..next(12)).map(|_| (names[next(7) as usize].as_str(), names[next(7) as usize].as_str())).collect();
            let min = 1 + next(4) as u32;
            let max = min + next(5) as u32;
            let way = [Way::Out, Way::In, Way::Both][next(3) as usize];
            assert_eq!(walk(&edges, way, min, max), brute(&edges, way, min, max), "{edges:?} {way:?} {min}..{max}");
        }
    }

    fn brute(edges: &[(&str, &str)], way: Way, min: u32, max: u32) -> BTreeSet<(String, String)> {
        let step: Vec<(String, String)> = edges
            .iter()
            .flat_map(|(a, z)| {
                let fwd = (a.to_string(), z.to_string());
                let back = (z.to_string(), a.to_string());
                match way {
                    Way::Out => vec![fwd],
                    Way::In => vec![back],
                    Way::Both => vec![fwd, back],
                }
            })
            .collect();
        let mut level: BTreeSet<(String, String)> = step.iter().cloned().collect();
        let mut all = BTreeSet::new();
        for depth in 1..=max {
            if depth >= min {
                all.extend(level.iter().cloned());
            }
            level = level
                .iter()
                .flat_map(|(a, z)| step.iter().filter(move |(s, _)| s == z).map(move |(_, d)| (a.clone(), d.clone())))
                .collect();
        }
        all
    }

    #[test]
    fn one_step_keeps_parallel_edges() {
        let adj = Adjacency::build([("a", "b"), ("a", "b"), ("b", "a"), ("c", "c")]);
        let meter = ReadLimits::unlimited().meter();
        let pairs = |way| {
            let mut p = step(&adj, &["a", "c", "zz"], way, &meter).expect("no limit");
            p.sort();
            p
        };
        let p = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        assert_eq!(pairs(Way::Out), p(&[("a", "b"), ("a", "b"), ("c", "c")]));
        assert_eq!(pairs(Way::In), p(&[("a", "b"), ("c", "c")]));
        assert_eq!(pairs(Way::Both), p(&[("a", "b"), ("a", "b"), ("a", "b"), ("c", "c"), ("c", "c")]));
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
