//! A seeded simulator: random mixes of writes on several branches, branch
//! create/delete, actor kills, writes that fail at a random saga boundary,
//! and reopens, with every invariant checked after each step against a
//! model of what must be visible.
//!
//! CI runs [`SEEDS`]; a long run takes its seeds and steps from the
//! environment:
//!
//! ```sh
//! OMNIGRAPH_SIM_SEEDS=1-200 OMNIGRAPH_SIM_STEPS=300 \
//!   cargo test -q --features failpoints --test crash simulate -- --nocapture
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use omnigraph::recovery::invariants;
use omnigraph::{Graph, OmniError, Omnigraph, ReadTarget, WriteOptions, result_rows};
use serde_json::Map;

use super::{serial, shut_down};

/// Seeds CI runs, each for [`STEPS`] steps.
const SEEDS: [u64; 4] = [1, 7, 42, 2026];
const STEPS: usize = 40;

/// Saga boundaries a failing write may stop at, and whether the write must
/// be visible once recovery ran (confirmed effects roll forward).
const FAIL_AT: [(&str, bool); 6] = [
    ("after_prepare", false),
    ("after_revalidate", false),
    ("after_arm", false),
    ("after_table_commit", false),
    ("after_confirm", true),
    ("after_publish", true),
];

/// xorshift64*: a tiny deterministic generator (the seed is the whole state).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// What must be visible: per live branch, the Person names written by the
/// simulation (the base data is the same everywhere and not tracked).
#[derive(Debug, Default)]
struct Model {
    branches: BTreeMap<String, BTreeSet<String>>,
    parents: BTreeMap<String, String>,
}

fn seeds_and_steps() -> (Vec<u64>, usize) {
    let steps = std::env::var("OMNIGRAPH_SIM_STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(STEPS);
    let seeds = match std::env::var("OMNIGRAPH_SIM_SEEDS") {
        Ok(spec) => match spec.split_once('-') {
            Some((a, b)) => (a.parse().expect("seed range")..=b.parse().expect("seed range")).collect(),
            None => spec.split(',').map(|s| s.trim().parse().expect("seed")).collect(),
        },
        Err(_) => SEEDS.to_vec(),
    };
    (seeds, steps)
}

async fn person_names(g: &Graph, branch: &str) -> BTreeSet<String> {
    let q = "query q() { match { $p: Person } return { $p.name } }";
    let r = g.query(q, None, Map::new(), &ReadTarget::Branch(branch.into())).await.expect("read");
    result_rows(&r)
        .into_iter()
        .filter_map(|row| row.values().next().and_then(|v| v.as_str()).map(String::from))
        .collect()
}

async fn insert(g: &Graph, branch: &str, name: &str) -> Result<omnigraph::WriteOutcome, OmniError> {
    let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} }}"#);
    g.mutate(&src, None, Map::new(), &WriteOptions { branch: branch.into(), ..WriteOptions::default() }).await
}

/// Every invariant, on every live branch: pin == HEAD, no stray fork, no
/// sidecar; and each branch shows exactly the model's names.
async fn check(g: &Graph, model: &Model, base: &BTreeSet<String>, context: &str) {
    for (branch, names) in &model.branches {
        let v = invariants::violations(g.root(), branch).await.expect("check");
        assert!(v.is_empty(), "{context}: {branch}: {v:?}");
        let now = person_names(g, branch).await;
        let expected: BTreeSet<String> = base.union(names).cloned().collect();
        assert_eq!(now, expected, "{context}: {branch} shows the wrong rows");
    }
}

/// One simulated run; returns a line per step.
async fn run(seed: u64, steps: usize) -> Vec<String> {
    let (_dir, loc, ..) = super::setup(super::Op::MutationInsert).await;
    let mut g = Omnigraph::open(&loc).await.expect("open");
    let base = person_names(&g, "main").await;
    let mut rng = Rng::new(seed);
    let mut model = Model::default();
    model.branches.insert("main".into(), BTreeSet::new());
    let mut log = Vec::new();
    for step in 0..steps {
        let branches: Vec<String> = model.branches.keys().cloned().collect();
        let branch = rng.pick(&branches).clone();
        let name = format!("s{seed}n{step}");
        let line = match rng.below(10) {
            0..=3 => {
                insert(&g, &branch, &name).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: insert: {e}"));
                model.branches.entry(branch.clone()).or_default().insert(name.clone());
                format!("insert {name} on {branch}")
            }
            4 => {
                let mine: Vec<String> = model.branches[&branch].iter().cloned().collect();
                if mine.is_empty() {
                    continue;
                }
                let victim = rng.pick(&mine).clone();
                let src = format!(r#"query q() {{ delete Person where name = "{victim}" }}"#);
                let o = WriteOptions { branch: branch.clone(), ..WriteOptions::default() };
                g.mutate(&src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                model.branches.entry(branch.clone()).or_default().remove(&victim);
                format!("delete {victim} on {branch}")
            }
            5 if model.branches.len() < 5 => {
                let child = format!("sim{step}");
                g.branch_create(&child, &branch).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                let names = model.branches[&branch].clone();
                model.branches.insert(child.clone(), names);
                model.parents.insert(child.clone(), branch.clone());
                format!("create {child} from {branch}")
            }
            6 if branch != "main" && !model.parents.values().any(|p| *p == branch) => {
                g.branch_delete(&branch).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                model.branches.remove(&branch);
                model.parents.remove(&branch);
                format!("delete branch {branch}")
            }
            7 => {
                let (boundary, visible) = *rng.pick(&FAIL_AT);
                let point = format!("mutation.{boundary}");
                fail::cfg(&point, "1*return").expect("cfg");
                let out = insert(&g, &branch, &name).await;
                fail::remove(&point);
                assert!(out.is_err(), "seed {seed} step {step}: {point} did not fail the write");
                g.recover().await.unwrap_or_else(|e| panic!("seed {seed} step {step}: recovery: {e}"));
                if visible {
                    model.branches.entry(branch.clone()).or_default().insert(name.clone());
                }
                format!("insert {name} on {branch} failing at {boundary} (visible after recovery: {visible})")
            }
            8 => {
                let actor = match rng.below(3) {
                    0 => g.runtime().branch_actor(&branch).await.expect("actor").get_cell(),
                    1 => g.runtime().reconciler().await.expect("reconciler").get_cell(),
                    _ => g.runtime().schema_actor().await.expect("schema actor").get_cell(),
                };
                let id = actor.get_id();
                actor.kill();
                wait_stopped(&actor).await;
                format!("kill actor {id} (serving {branch})")
            }
            _ => {
                shut_down(g).await;
                g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: reopen: {e}"));
                "reopen".to_string()
            }
        };
        check(&g, &model, &base, &format!("seed {seed} step {step} ({line})")).await;
        log.push(line);
    }
    shut_down(g).await;
    log
}

/// Wait until a killed actor has stopped (observed, not slept on).
async fn wait_stopped(actor: &ractor::ActorCell) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while matches!(actor.get_status(), ractor::ActorStatus::Running | ractor::ActorStatus::Starting) {
        assert!(tokio::time::Instant::now() < deadline, "a killed actor kept running");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_random_writers_branches_kills_and_failures() {
    let _s = serial().await;
    let _scenario = fail::FailScenario::setup();
    let (seeds, steps) = seeds_and_steps();
    let mut total = 0;
    for seed in &seeds {
        let log = run(*seed, steps).await;
        total += log.len();
        let kinds = ["insert", "delete ", "create", "delete branch", "failing", "kill", "reopen"];
        let mix: Vec<String> =
            kinds.iter().map(|k| format!("{k}: {}", log.iter().filter(|l| l.contains(k)).count())).collect();
        println!("simulator seed {seed}: {} steps, 0 violations ({})", log.len(), mix.join(", "));
    }
    println!("simulator: {} seeds, {total} steps, 0 violations", seeds.len());
}
