//! A seeded simulator: random mixes of writes on several branches, branch
//! create/delete, merges of a branch into its parent (some over a conflict a
//! drawn strategy or resolution decides) and optimizes (clean or
//! failing at a saga boundary), kills of idle actors and of a table or branch actor while
//! its commit or publish is in flight, writes that fail at a random saga
//! boundary or after the k-th Lance write (a storage cut), undo (a revert
//! of a branch's head commit, a reset to its parent, a cherry-pick of it
//! onto a branch equal to its parent; clean or failing at a saga boundary,
//! each proved by an empty diff), schema applies on any branch (clean or
//! failing at a saga boundary; each branch then keeps its own schema, and a
//! merge across two schemas merges them and the rows in one commit, or
//! fails whole at a boundary), and reopens, with
//! every invariant checked after each step against a model of what must be
//! visible. Most writes touch two tables (a Person and a Company), so a
//! partial write would show as one without the other.
//!
//! CI runs [`SEEDS`]; a long run takes its seeds and steps from the
//! environment:
//!
//! ```sh
//! OMNIGRAPH_SIM_SEEDS=1-200 OMNIGRAPH_SIM_STEPS=300 \
//!   cargo test -q --features failpoints --test crash simulate -- --nocapture
//! ```
//!
//! `OMNIGRAPH_SIM_UNDO=1` draws an undo at every other step (the round-trip
//! property over many commits: revert, reset and cherry-pick each proved by
//! an empty diff).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use object_store::path::Path;
use omnigraph::recovery::invariants;
use omnigraph::{Graph, MergeOptions, MergeStrategy, OmniError, Omnigraph, ReadTarget, WriteOptions, result_rows};
use serde_json::Map;

use super::{serial, shut_down};
use crate::intercept::{Policy, injected};
use crate::lance_hook;

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

/// What must be visible: per live branch, the entities written by the
/// simulation as `Person:<name>` / `Company:<name>` (the base data is the
/// same everywhere and not tracked).
#[derive(Debug, Default)]
struct Model {
    branches: BTreeMap<String, BTreeSet<String>>,
    parents: BTreeMap<String, String>,
    /// Per branch: what it held when it last met its parent (at its
    /// creation, or its head at its last merge into the parent): the merge base.
    bases: BTreeMap<String, BTreeSet<String>>,
    /// The commit that loaded the base data (main's head at the start).
    base_commit: String,
    /// Deleted (restorable) branches: their parent, entities and base.
    deleted: BTreeMap<String, (String, BTreeSet<String>, BTreeSet<String>)>,
    /// Per branch (live or deleted): the nullable Person properties its
    /// schema applies added, in order (empty: the base schema).
    schemas: BTreeMap<String, Vec<String>>,
}

impl Model {
    /// The schema source `branch` must have.
    fn schema(&self, branch: &str) -> String {
        schema_with(self.schemas.get(branch).map(Vec::as_slice).unwrap_or_default())
    }

    /// Whether `a` and `b` are under different schemas.
    fn diverged(&self, a: &str, b: &str) -> bool {
        let props = |b: &str| self.schemas.get(b).cloned().unwrap_or_default();
        props(a) != props(b)
    }

    /// The properties `parent` has after merging `child`: its own, then the
    /// child's it lacks (each property name is drawn once, and applies
    /// only add, so the three-way merge of the two lists is this union).
    fn merged_schema(&self, child: &str, parent: &str) -> Vec<String> {
        let props = |b: &str| self.schemas.get(b).cloned().unwrap_or_default();
        let mut merged = props(parent);
        merged.extend(props(child).into_iter().filter(|p| !props(parent).contains(p)));
        merged
    }

    /// Merge `child` into its parent: the parent gains what the child added
    /// since the base and loses what the child removed since then.
    fn merge(&mut self, child: &str, parent: &str) {
        let (src, base) = (self.branches[child].clone(), self.bases[child].clone());
        let target = self.branches.entry(parent.to_string()).or_default();
        target.extend(src.difference(&base).cloned());
        for gone in base.difference(&src) {
            target.remove(gone);
        }
        self.bases.insert(child.to_string(), src);
    }
}

/// Run `write`, with the failpoint `fail_at` names (under `writer`'s
/// prefix; `None`: none) armed to fail once, then recover: whether the
/// write is visible (a failure before the boundary that makes it so is
/// not), and " failing at POINT" for the log. A failure without a
/// failpoint fails the run.
async fn failing<T, E: std::fmt::Display>(
    g: &Graph,
    (writer, fail_at): (&str, Option<(&str, bool)>),
    ctx: &str,
    write: impl std::future::Future<Output = Result<T, E>>,
) -> (bool, String) {
    let point = fail_at.map(|(b, _)| format!("{writer}.{b}"));
    if let Some(p) = &point {
        fail::cfg(p, "1*return").expect("cfg");
    }
    let out = write.await;
    if let Some(p) = &point {
        fail::remove(p);
        g.recover().await.unwrap_or_else(|e| panic!("{ctx}: recovery: {e}"));
    }
    let visible = match (&out, fail_at) {
        (Ok(_), _) => true,
        (Err(_), Some((_, visible))) => visible,
        (Err(e), None) => panic!("{ctx}: {e}"),
    };
    (visible, point.map(|p| format!(" failing at {p}")).unwrap_or_default())
}

/// The base schema with these nullable Person properties added.
fn schema_with(props: &[String]) -> String {
    let added: String = props.iter().map(|p| format!("    {p}: String?\n")).collect();
    super::SCHEMA.replace("    age: I32?\n", &format!("    age: I32?\n{added}"))
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

async fn entities(g: &Graph, branch: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for ty in ["Person", "Company"] {
        let q = format!("query q() {{ match {{ $x: {ty} }} return {{ $x.name }} }}");
        let r = g.query(&q, None, Map::new(), &ReadTarget::Branch(branch.into())).await.expect("read");
        out.extend(
            result_rows(&r)
                .into_iter()
                .filter_map(|row| row.values().next().and_then(|v| v.as_str()).map(|n| format!("{ty}:{n}"))),
        );
    }
    out
}

/// One write touching two tables: a Person and a Company named `name`.
async fn insert(g: &Graph, branch: &str, name: &str) -> Result<omnigraph::WriteOutcome, OmniError> {
    let src =
        format!(r#"query q() {{ insert Person {{ name: "{name}", age: 1 }} insert Company {{ name: "{name}" }} }}"#);
    g.mutate(&src, None, Map::new(), &WriteOptions { branch: branch.into(), ..WriteOptions::default() }).await
}

/// What [`insert`] adds to the model.
fn written(name: &str) -> [String; 2] {
    [format!("Person:{name}"), format!("Company:{name}")]
}

/// The same Person `name` inserted on a child and its parent with
/// different ages: a `divergent_insert` for their next merge.
async fn clash_on(g: &Graph, (child, parent): (&str, &str), name: &str, model: &mut Model) {
    for (branch, age) in [(child, 1), (parent, 2)] {
        let src = format!(r#"query q() {{ insert Person {{ name: "{name}", age: {age} }} }}"#);
        let o = WriteOptions { branch: branch.into(), ..WriteOptions::default() };
        g.mutate(&src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("clash on {branch}: {e}"));
        model.branches.entry(branch.to_string()).or_default().insert(format!("Person:{name}"));
    }
}

/// Kills `victim` at the first Lance write whose path contains `within` and
/// one of `any_of` (the actor's handler is then cancelled at its next
/// await: mid-commit or mid-publish), once.
#[derive(Debug)]
struct KillAt {
    within: String,
    any_of: &'static [&'static str],
    victim: std::sync::Mutex<Option<ractor::ActorCell>>,
    fired: AtomicBool,
    /// The write it fired at (for the failure message).
    at: std::sync::Mutex<String>,
}

impl KillAt {
    fn new(within: String, any_of: &'static [&'static str]) -> Arc<Self> {
        Arc::new(KillAt {
            within,
            any_of,
            victim: Default::default(),
            fired: AtomicBool::new(false),
            at: Default::default(),
        })
    }

    fn aim(&self, victim: ractor::ActorCell) {
        *self.victim.lock().expect("victim") = Some(victim);
    }
}

impl Policy for KillAt {
    fn write(&self, path: &Path) -> object_store::Result<()> {
        let p = path.as_ref();
        let hit = p.contains(&self.within) && (self.any_of.is_empty() || self.any_of.iter().any(|n| p.contains(n)));
        if hit
            && let Some(victim) = self.victim.lock().expect("victim").as_ref()
            && !self.fired.swap(true, Ordering::SeqCst)
        {
            *self.at.lock().expect("at") = p.to_string();
            victim.kill();
        }
        Ok(())
    }
}

/// Lance writes after the first `limit` fail (a storage cut mid-write).
#[derive(Debug)]
struct CutAfter {
    limit: usize,
    seen: AtomicUsize,
}

impl Policy for CutAfter {
    fn write(&self, _path: &Path) -> object_store::Result<()> {
        if self.seen.fetch_add(1, Ordering::SeqCst) >= self.limit {
            return Err(injected("Lance write after the cut"));
        }
        Ok(())
    }
}

/// Run an [`insert`] of `name` on `branch` with `policy` on Lance's I/O.
async fn insert_under<P: Policy>(g: &Graph, branch: &str, name: &str, policy: Arc<P>) -> Result<(), OmniError> {
    lance_hook::route(Some(policy));
    let out = insert(g, branch, name).await;
    lance_hook::route::<KillAt>(None);
    out.map(drop)
}

/// Kill `branch`'s (idle) actor and return its successor's cell: the new
/// incarnation opens the manifest afresh, so through the current I/O hook.
async fn fresh_branch_actor(g: &Graph, branch: &str) -> ractor::ActorCell {
    let old = g.runtime().branch_actor(branch).await.expect("branch actor").get_cell();
    old.kill();
    wait_stopped(&old).await;
    g.runtime().branch_actor(branch).await.expect("branch actor").get_cell()
}

/// The dataset path of `table_key` as pinned on `branch`.
async fn table_path(g: &Graph, branch: &str, table_key: &str) -> (String, String) {
    let view = g.runtime().view(branch).await.expect("view");
    let location = view.state.tables[table_key].location.clone();
    (g.root().child_uri(&location), location)
}

/// Every invariant, on every live branch: pin == HEAD, no stray fork, no
/// sidecar; and each branch shows exactly the model's names.
async fn check(g: &Graph, model: &Model, base: &BTreeSet<String>, context: &str) {
    for (branch, names) in &model.branches {
        let v = invariants::violations(g.root(), branch).await.expect("check");
        assert!(v.is_empty(), "{context}: {branch}: {v:?}");
        let now = entities(g, branch).await;
        let expected: BTreeSet<String> = base.union(names).cloned().collect();
        assert_eq!(now, expected, "{context}: {branch} shows the wrong rows");
        // By identity: a merged schema is stored as rendered text.
        let schema = g.schema_of(branch).await.expect("schema").identity.clone();
        let want =
            omnigraph::engine::lang::catalog::compile_schema(&model.schema(branch)).expect("compiles").identity();
        assert_eq!(schema, want, "{context}: {branch} has the wrong schema");
    }
}

/// One simulated run; returns a line per step.
async fn run(seed: u64, steps: usize) -> Vec<String> {
    let (_dir, loc, ..) = super::setup(super::Op::MutationInsert).await;
    let mut g = Omnigraph::open(&loc).await.expect("open");
    let base = entities(&g, "main").await;
    let mut rng = Rng::new(seed);
    let base_commit = g.commits("main", Some(1)).await.expect("commits").remove(0).commit_id;
    let mut model = Model { base_commit, ..Model::default() };
    model.branches.insert("main".into(), BTreeSet::new());
    let mut log = Vec::new();
    let undo_heavy = std::env::var_os("OMNIGRAPH_SIM_UNDO").is_some();
    for step in 0..steps {
        let branches: Vec<String> = model.branches.keys().cloned().collect();
        let branch = rng.pick(&branches).clone();
        let name = format!("s{seed}n{step}");
        let draw = if undo_heavy && rng.below(2) == 0 { 14 } else { rng.below(17) };
        let line = match draw {
            0..=3 => {
                insert(&g, &branch, &name).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: insert: {e}"));
                model.branches.entry(branch.clone()).or_default().extend(written(&name));
                format!("write {name} on {branch}")
            }
            4 => {
                let mine: Vec<String> = model.branches[&branch]
                    .iter()
                    .filter_map(|e| e.strip_prefix("Person:"))
                    .map(String::from)
                    .collect();
                if mine.is_empty() {
                    continue;
                }
                let victim = rng.pick(&mine).clone();
                let src = format!(r#"query q() {{ delete Person where name = "{victim}" }}"#);
                let o = WriteOptions { branch: branch.clone(), ..WriteOptions::default() };
                g.mutate(&src, None, Map::new(), &o).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                model.branches.entry(branch.clone()).or_default().remove(&format!("Person:{victim}"));
                format!("remove {victim} on {branch}")
            }
            5 if model.branches.len() < 5 => {
                let child = format!("sim{step}");
                g.branch_create(&child, &branch).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                let names = model.branches[&branch].clone();
                let schema = model.schemas.get(&branch).cloned().unwrap_or_default();
                model.schemas.insert(child.clone(), schema);
                model.bases.insert(child.clone(), names.clone());
                model.branches.insert(child.clone(), names);
                model.parents.insert(child.clone(), branch.clone());
                format!("create {child} from {branch}")
            }
            6 if rng.below(2) == 0 && model.deleted.iter().any(|(_, d)| model.branches.contains_key(&d.0)) => {
                let back: Vec<String> = model
                    .deleted
                    .iter()
                    .filter(|(_, d)| model.branches.contains_key(&d.0))
                    .map(|(n, _)| n.clone())
                    .collect();
                let name = rng.pick(&back).clone();
                g.branch_restore(&name, None, None).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                let (parent, names, base) = model.deleted.remove(&name).expect("picked from it");
                model.branches.insert(name.clone(), names);
                model.parents.insert(name.clone(), parent);
                model.bases.insert(name.clone(), base);
                format!("restore branch {name}")
            }
            6 if branch != "main" && !model.parents.values().any(|p| *p == branch) => {
                g.branch_delete(&branch).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
                let names = model.branches.remove(&branch).unwrap_or_default();
                let parent = model.parents.remove(&branch).unwrap_or_default();
                let base = model.bases.remove(&branch).unwrap_or_default();
                model.deleted.insert(branch.clone(), (parent, names, base));
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
                    model.branches.entry(branch.clone()).or_default().extend(written(&name));
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
            9 => {
                // The Person table's actor dies while committing (or forking).
                let (uri, location) = table_path(&g, &branch, "node:Person").await;
                let victim = g.runtime().table_actor(&uri, &branch).await.expect("table actor").get_cell();
                // Its commit's transaction and manifest files (staging data
                // files happens in the saga, before the commit).
                let policy = KillAt::new(location, &["_transactions", "_versions", "_refs"]);
                policy.aim(victim.clone());
                let out = insert_under(&g, &branch, &name, policy.clone()).await;
                assert!(policy.fired.load(Ordering::SeqCst), "seed {seed} step {step}: the commit never wrote");
                wait_stopped(&victim).await;
                g.recover().await.unwrap_or_else(|e| panic!("seed {seed} step {step}: recovery: {e}"));
                // A kill during the handler's last write may land only after
                // it answered (the handler had no later await to cancel): the
                // write then stands. Otherwise its sidecar is still Armed and
                // recovery rolled it back.
                if out.is_ok() {
                    model.branches.entry(branch.clone()).or_default().extend(written(&name));
                }
                let at = policy.at.lock().expect("at").rsplit('/').take(2).collect::<Vec<_>>().join(" in ");
                let outcome = if out.is_ok() { "answered first, stands" } else { "rolled back" };
                format!("insert {name} on {branch}, its table actor killed mid-commit at {at} ({outcome})")
            }
            10 => {
                // The branch actor dies while publishing: the effects are
                // confirmed, so recovery rolls the write forward.
                let policy = KillAt::new("__manifest".into(), &[]);
                lance_hook::route(Some(policy.clone()));
                let victim = fresh_branch_actor(&g, &branch).await;
                policy.aim(victim.clone());
                let out = insert_under(&g, &branch, &name, policy.clone()).await;
                assert!(policy.fired.load(Ordering::SeqCst), "seed {seed} step {step}: the publish never wrote");
                wait_stopped(&victim).await;
                g.recover().await.unwrap_or_else(|e| panic!("seed {seed} step {step}: recovery: {e}"));
                model.branches.entry(branch.clone()).or_default().extend(written(&name));
                // The kill may also land after the publish was answered, in
                // the manifest compaction that follows it: the write stands.
                let when = if out.is_ok() { "in the compaction after its publish" } else { "mid-publish" };
                format!("insert {name} on {branch}, its branch actor killed {when} (visible)")
            }
            11 => {
                // Lance writes fail after the k-th; the process restarts and
                // recovers: the write shows whole or not at all.
                let limit = 1 + rng.below(8);
                let _ = insert_under(&g, &branch, &name, Arc::new(CutAfter { limit, seen: AtomicUsize::new(0) })).await;
                shut_down(g).await;
                g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: reopen: {e}"));
                let now = entities(&g, &branch).await;
                let [p, c] = written(&name);
                assert_eq!(now.contains(&p), now.contains(&c), "seed {seed} step {step}: half a write is visible");
                if now.contains(&p) {
                    model.branches.entry(branch.clone()).or_default().extend(written(&name));
                }
                format!("insert {name} on {branch}, Lance writes cut after {limit} (visible: {})", now.contains(&p))
            }
            12 if model.parents.contains_key(&branch) && model.diverged(&branch, &model.parents[&branch]) => {
                let parent = model.parents[&branch].clone();
                // Across schemas: the parent takes the child's rows and its
                // added properties in one commit, under the schema-apply
                // authority when its schema changes (a plain merge's when
                // it already has them); half draw a failpoint.
                let merged = model.merged_schema(&branch, &parent);
                let writer = if merged == model.schemas.get(&parent).cloned().unwrap_or_default() {
                    "merge"
                } else {
                    "schema_apply"
                };
                // A third meet a row conflict first, decided by a drawn
                // strategy in the merged shape, without a failpoint (as
                // above, so no conflict outlives its merge).
                let clash = rng.below(3) == 0;
                let fail_at = if !clash && rng.below(2) == 0 { Some(*rng.pick(&FAIL_AT)) } else { None };
                let strategy = if clash {
                    clash_on(&g, (&branch, &parent), &name, &mut model).await;
                    Some(*rng.pick(&[MergeStrategy::Ours, MergeStrategy::Theirs]))
                } else {
                    None
                };
                let ctx = format!("seed {seed} step {step}: merge across schemas");
                let opts = MergeOptions { strategy, ..MergeOptions::default() };
                let decided = AtomicUsize::new(0);
                let merge = async {
                    let r = g.branch_merge(&branch, &parent, &opts).await?;
                    decided.store(r.report.conflicts_decided, Ordering::SeqCst);
                    Ok::<_, OmniError>(r)
                };
                let (visible, at) = failing(&g, (writer, fail_at), &ctx, merge).await;
                if visible {
                    model.merge(&branch, &parent);
                    model.schemas.insert(parent.clone(), merged);
                }
                if clash {
                    assert_eq!(decided.load(Ordering::SeqCst), 1, "{ctx}: the clash decided");
                }
                let under = strategy.map(|s| format!(" with a conflict under {}", s.as_str())).unwrap_or_default();
                format!("merge {branch} into {parent} across schemas{under}{at} (visible: {visible})")
            }
            12 if model.parents.contains_key(&branch) => {
                let parent = model.parents[&branch].clone();
                // Half the merges meet a conflict first (the same Person
                // inserted on both sides with different ages), decided by a
                // drawn strategy or resolution; they run without a failpoint,
                // so no conflict outlives its merge. The others draw a
                // failpoint and a strategy that has nothing to decide.
                let clash = rng.below(2) == 0;
                let fail_at = if !clash && rng.below(2) == 0 { Some(*rng.pick(&FAIL_AT)) } else { None };
                let (strategy, take) = if clash {
                    clash_on(&g, (&branch, &parent), &name, &mut model).await;
                    match rng.below(5) {
                        0 => (Some(MergeStrategy::Ours), None),
                        1 => (Some(MergeStrategy::Theirs), None),
                        n => (None, Some(["ours", "theirs", "delete"][n - 2])),
                    }
                } else {
                    (*rng.pick(&[None, Some(MergeStrategy::Ours), Some(MergeStrategy::Theirs)]), None)
                };
                let resolutions = take
                    .map(|t| serde_json::json!([{ "type": "Person", "id": name, "take": t }]))
                    .map(|r| serde_json::from_value(r).expect("resolution"))
                    .unwrap_or_default();
                let point = fail_at.map(|(b, _)| format!("merge.{b}"));
                if let Some(p) = &point {
                    fail::cfg(p, "1*return").expect("cfg");
                }
                let opts = MergeOptions { strategy, resolutions, ..MergeOptions::default() };
                let out = g.branch_merge(&branch, &parent, &opts).await;
                if let Some(p) = &point {
                    fail::remove(p);
                    g.recover().await.unwrap_or_else(|e| panic!("seed {seed} step {step}: recovery: {e}"));
                }
                if let Ok(r) = &out {
                    let want = usize::from(clash);
                    assert_eq!(r.report.conflicts_decided, want, "seed {seed} step {step}: decided");
                }
                // A failpoint a merge never reached (an up-to-date merge, or
                // no table to commit) leaves it succeeding.
                let visible = match (&out, fail_at) {
                    (Ok(_), _) => true,
                    (Err(_), Some((_, visible))) => visible,
                    (Err(e), None) => panic!("seed {seed} step {step}: merge {branch} into {parent}: {e}"),
                };
                if visible {
                    model.merge(&branch, &parent);
                    if take == Some("delete") {
                        model.branches.entry(parent.clone()).or_default().remove(&format!("Person:{name}"));
                    }
                }
                let how = point.map(|p| format!(" failing at {p}")).unwrap_or_default();
                let under = match (strategy, take) {
                    (Some(s), _) => format!(" under {}", s.as_str()),
                    (None, Some(t)) => format!(" resolving {name} {t}"),
                    (None, None) => String::new(),
                };
                let conflict = if clash { " with a conflict" } else { "" };
                format!("merge {branch} into {parent}{conflict}{under}{how} (visible: {visible})")
            }
            13 => {
                // Optimize changes no row, whether it lands, fails or is undone.
                let fail_at = if rng.below(2) == 0 { Some(rng.pick(&FAIL_AT).0) } else { None };
                let point = fail_at.map(|b| format!("optimize.{b}"));
                if let Some(p) = &point {
                    fail::cfg(p, "1*return").expect("cfg");
                }
                let out = g.optimize(&branch, None).await;
                if let Some(p) = &point {
                    fail::remove(p);
                    g.recover().await.unwrap_or_else(|e| panic!("seed {seed} step {step}: recovery: {e}"));
                }
                let how = match (&out, &point) {
                    (Ok(r), _) if r.graph_commit_id.is_some() => "committed",
                    (Ok(_), _) => "nothing to compact",
                    (Err(_), Some(_)) => "failed",
                    (Err(e), None) => panic!("seed {seed} step {step}: optimize {branch}: {e}"),
                };
                let at = point.map(|p| format!(" failing at {p}")).unwrap_or_default();
                format!("optimize {branch}{at} ({how})")
            }
            14 => {
                let childless = !model.parents.values().any(|p| *p == branch);
                match undo(&g, &branch, childless, (&mut rng, step), &base, &mut model).await {
                    Some(line) => line,
                    None => continue,
                }
            }
            15 | 16 if rng.below(2) == 0 => {
                let property = format!("p{step}");
                let mut props = model.schemas.get(&branch).cloned().unwrap_or_default();
                props.push(property.clone());
                let source = schema_with(&props);
                let fail_at = if rng.below(3) == 0 { Some(*rng.pick(&FAIL_AT)) } else { None };
                let ctx = format!("seed {seed} step {step}: schema apply on {branch}");
                let apply = g.schema_apply_on(&branch, &source, false, None);
                let (visible, at) = failing(&g, ("schema_apply", fail_at), &ctx, apply).await;
                if visible {
                    model.schemas.insert(branch.clone(), props);
                }
                format!("schema apply +{property} on {branch}{at} (visible: {visible})")
            }
            _ => {
                shut_down(g).await;
                g = Omnigraph::open(&loc).await.unwrap_or_else(|e| panic!("seed {seed} step {step}: reopen: {e}"));
                "reopen".to_string()
            }
        };
        check(&g, &model, &base, &format!("seed {seed} step {step} ({line})")).await;
        if std::env::var_os("OMNIGRAPH_SIM_TRACE").is_some() {
            println!("seed {seed} step {step}: {line}");
        }
        log.push(line);
    }
    shut_down(g).await;
    log
}

/// Undo `branch`'s head commit one of three ways, clean or failing at a
/// drawn merge boundary (the undo writers land through the merge's
/// pipeline), and prove the round trip with the diff engine: a revert or a
/// reset leaves no difference from the head's parent; a cherry-pick of the
/// head onto a branch reset to its parent leaves none from the head. A
/// failed undo that recovery rolled back leaves the branch as it was.
/// `None` when the head is no plain commit (the first, or a merge). A head
/// move is drawn only on a branch without children (their merge bases are
/// commits the move may leave); on one that has them, a reset lands as a
/// commit.
async fn undo(
    g: &Graph,
    branch: &str,
    childless: bool,
    (rng, step): (&mut Rng, usize),
    base: &BTreeSet<String>,
    model: &mut Model,
) -> Option<String> {
    let head = g.commits(branch, Some(1)).await.expect("commits").remove(0);
    // The base data's own commits are not the simulation's to undo (the
    // model holds that data fixed).
    if head.commit_id == model.base_commit {
        return None;
    }
    // A schema apply is no data change to undo (revert and cherry-pick
    // refuse it, and a reset does not cross it).
    if head.operation.as_deref() == Some("schema_apply") {
        return None;
    }
    let parent = head.parent_commit_id.clone().filter(|_| head.merged_parent_commit_id.is_none())?;
    let fail_at = if rng.below(2) == 0 { Some(*rng.pick(&FAIL_AT)) } else { None };
    let point = fail_at.map(|(b, _)| format!("merge.{b}"));
    let how = ["revert", "reset", "cherry-pick"][rng.below(3)];
    let ctx = format!("step {step}: {how} of {} on {branch}", head.commit_id);
    let before = entities(g, branch).await;
    // The cherry-pick's own branch, equal to the head's parent (a head move).
    let scratch = format!("pick{step}");
    if how == "cherry-pick" {
        g.branch_create(&scratch, branch).await.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let to_parent = omnigraph::ResetOptions::default();
        g.branch_reset(&scratch, &parent, &to_parent).await.unwrap_or_else(|e| panic!("{ctx}: {e}"));
    }
    if let Some(p) = &point {
        fail::cfg(p, "1*return").expect("cfg");
    }
    let as_commit = branch == "main" || !childless;
    let out = match how {
        "revert" => {
            let opts = omnigraph::RevertOptions { branch: Some(branch.into()), ..Default::default() };
            g.commit_revert(&head.commit_id, &opts).await.map(drop)
        }
        "reset" => {
            let opts = omnigraph::ResetOptions { as_commit, ..Default::default() };
            g.branch_reset(branch, &parent, &opts).await.map(drop)
        }
        _ => {
            let opts = omnigraph::RevertOptions { branch: Some(scratch.clone()), ..Default::default() };
            g.commit_cherry_pick(&head.commit_id, &opts).await.map(drop)
        }
    };
    if let Some(p) = &point {
        fail::remove(p);
        g.recover().await.unwrap_or_else(|e| panic!("{ctx}: recovery: {e}"));
    }
    let visible = match (&out, fail_at) {
        (Ok(()), _) => true,
        (Err(_), Some((_, visible))) => visible,
        (Err(e), None) => panic!("{ctx}: {e}"),
    };
    let empty = |d: omnigraph::DiffStats| d.stats.is_empty();
    let none = omnigraph::DiffFilter::default();
    if how == "cherry-pick" {
        if visible {
            let d = g.diff_stats(&head.commit_id, &scratch, &none).await.expect("diff");
            assert!(empty(d.clone()), "{ctx}: the picked branch differs from the commit: {:?}", d.stats);
        }
        g.branch_delete(&scratch).await.unwrap_or_else(|e| panic!("{ctx}: delete: {e}"));
    } else if visible {
        let d = g.diff_stats(&parent, branch, &none).await.expect("diff");
        assert!(empty(d.clone()), "{ctx}: the branch differs from the head's parent: {:?}", d.stats);
        let now: BTreeSet<String> = entities(g, branch).await.difference(base).cloned().collect();
        // A head moved back to a commit its parent branch holds already:
        // the next merge into the parent finds it as the base.
        if how == "reset" && !as_commit {
            let up = &model.parents[branch];
            if g.commits(up, None).await.expect("commits").iter().any(|c| c.commit_id == parent) {
                model.bases.insert(branch.to_string(), now.clone());
            }
        }
        model.branches.insert(branch.to_string(), now);
    } else {
        assert_eq!(entities(g, branch).await, before, "{ctx}: rolled back, yet the branch changed");
    }
    let mode = if how == "reset" && !as_commit { " (head move)" } else { "" };
    let at = point.map(|p| format!(" failing at {p}")).unwrap_or_default();
    Some(format!("undo: {how}{mode} of {branch}'s head{at} (visible: {visible})"))
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
        let kinds = [
            "write ",
            "remove ",
            "create",
            "delete branch",
            "restore branch",
            "failing",
            "kill actor",
            "mid-commit",
            "mid-publish",
            "cut after",
            "merge ",
            "with a conflict",
            "optimize ",
            "undo: ",
            "head move",
            "schema apply",
            "across schemas",
            "reopen",
        ];
        let mix: Vec<String> =
            kinds.iter().map(|k| format!("{k}: {}", log.iter().filter(|l| l.contains(k)).count())).collect();
        println!("simulator seed {seed}: {} steps, 0 violations ({})", log.len(), mix.join(", "));
    }
    println!("simulator: {} seeds, {total} steps, 0 violations", seeds.len());
}
