//! Power loss: like the durable-write cut, but what the machine loses is
//! what the store below had not made durable when the power went.
//!
//! Every storage write of the graph (omnigraph's files through the root's
//! store, Lance's through the storage I/O hook) goes through a [`Volatile`]
//! layer that journals it with the before-image of every object it changes.
//! A write is durable once it returned from a store that syncs (the local
//! store in `fsync` mode syncs a file, renames it into place and syncs the
//! directory before it returns; that it really does is the trace test's
//! job, tests/integration/durability.rs). The power goes at the k-th write
//! (which is then in flight) or after the write was acknowledged (k = N+1,
//! with whatever the actors still do in the background in flight). Every
//! write not durable by then is undone, newest first: all of them, or a
//! random subset, and on a store that does not sync a kept write may keep
//! its name without its data (an empty file), as ext4 may persist a rename
//! before the data. Recovery must then leave what the crash suite accepts,
//! for every writer: mutations, loads, merges, optimize, ensure indices,
//! schema apply, a group commit, branch create and delete, and cleanup.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions, UploadPart,
};
use omnigraph::engine::storage::Root;
use omnigraph::engine::storage::durability::{self, Durability};
use omnigraph::{Omnigraph, OpenMode};

use super::durable_cut::{Action, BRANCH_ACTIONS, Expected, WRITERS, assert_branch_outcome, branch_base, fresh_copy};
use super::{Op, cleanup_base, counts_on, serial, setup_at, shut_down};
use crate::intercept::injected;
use crate::lance_hook;

/// One write the layer saw.
struct Effect {
    /// The store below, to undo through.
    store: Arc<dyn ObjectStore>,
    /// Every object the write changes, as it was before (`None`: absent).
    before: Vec<(Path, Option<Bytes>)>,
    /// The objects it writes (the rest of `before` it removes).
    written: Vec<Path>,
    /// Whether that store syncs what it writes before returning.
    syncs: bool,
    /// Returned from a syncing store before the power went.
    durable: bool,
}

/// The power: counts writes, goes off at the `limit`-th, and keeps the
/// journal.
#[derive(Default)]
struct Power {
    count: AtomicUsize,
    limit: AtomicUsize,
    off: AtomicBool,
    journal: Mutex<Vec<Effect>>,
}

impl std::fmt::Debug for Power {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Power(count {}, off {})", self.count.load(Ordering::SeqCst), self.off.load(Ordering::SeqCst))
    }
}

/// What becomes of a write that was not durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Every such write is lost.
    All,
    /// A random subset is lost (the rest kept, some without their data on a
    /// store that does not sync), from this seed.
    Subset(u64),
}

impl Power {
    fn new() -> Arc<Power> {
        let p = Power::default();
        p.limit.store(usize::MAX, Ordering::SeqCst);
        Arc::new(p)
    }

    /// Admit a write of `store` changing `paths` (writing `written`):
    /// journal it with the before-images; the power goes at the limit-th.
    async fn begin(
        &self,
        store: &Arc<dyn ObjectStore>,
        syncs: bool,
        paths: &[&Path],
        written: &[&Path],
    ) -> object_store::Result<usize> {
        if self.off.load(Ordering::SeqCst) {
            return Err(injected("write after the power went"));
        }
        if self.count.fetch_add(1, Ordering::SeqCst) + 1 >= self.limit.load(Ordering::SeqCst) {
            self.off.store(true, Ordering::SeqCst);
        }
        let mut before = Vec::new();
        for path in paths {
            let image = match store.get(path).await {
                Ok(r) => Some(r.bytes().await?),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => return Err(e),
            };
            before.push(((*path).clone(), image));
        }
        let written = written.iter().map(|p| (*p).clone()).collect();
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        journal.push(Effect { store: store.clone(), before, written, syncs, durable: false });
        Ok(journal.len() - 1)
    }

    /// The write `id` returned (`ok`): durable if its store syncs and the
    /// power was still on.
    fn end(&self, id: usize, ok: bool) {
        let on = !self.off.load(Ordering::SeqCst);
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        let effect = &mut journal[id];
        effect.durable = ok && on && effect.syncs;
    }

    /// Count from zero again, with an empty journal, the power going at
    /// write `limit`.
    fn arm(&self, limit: usize) {
        self.journal.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.count.store(0, Ordering::SeqCst);
        self.limit.store(limit, Ordering::SeqCst);
    }

    fn cut(&self) {
        self.off.store(true, Ordering::SeqCst);
    }

    /// Undo what the power took, newest first; returns the writes lost.
    async fn lose(&self, loss: Loss) -> usize {
        let journal = std::mem::take(&mut *self.journal.lock().unwrap_or_else(|p| p.into_inner()));
        let mut rng = match loss {
            Loss::All => 0,
            Loss::Subset(seed) => seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
        };
        let mut kept_paths: HashSet<Path> = HashSet::new();
        let mut lost = 0;
        for effect in journal.iter().rev().filter(|e| !e.durable) {
            let fate = if loss == Loss::All { 0 } else { xorshift(&mut rng) % if effect.syncs { 2 } else { 3 } };
            match fate {
                0 => {
                    lost += 1;
                    for (path, image) in effect.before.iter().filter(|(p, _)| !kept_paths.contains(p)) {
                        restore(&effect.store, path, image.clone()).await;
                    }
                }
                1 => kept_paths.extend(effect.written.iter().cloned()),
                _ => {
                    // The name survived, its data did not.
                    for path in &effect.written {
                        restore(&effect.store, path, Some(Bytes::new())).await;
                    }
                    kept_paths.extend(effect.written.iter().cloned());
                }
            }
        }
        lost
    }
}

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Put `path` back as `image` (`None`: absent).
async fn restore(store: &Arc<dyn ObjectStore>, path: &Path, image: Option<Bytes>) {
    match image {
        Some(bytes) => {
            store.put(path, PutPayload::from(bytes)).await.expect("restoring a before-image");
        }
        None => match store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => panic!("removing {path}: {e}"),
        },
    }
}

/// A store whose writes [`Power`] journals and may take back.
#[derive(Debug)]
struct Volatile {
    inner: Arc<dyn ObjectStore>,
    power: Arc<Power>,
    syncs: bool,
}

impl std::fmt::Display for Volatile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Volatile({})", self.inner)
    }
}

impl Volatile {
    async fn write<T>(
        &self,
        paths: &[&Path],
        written: &[&Path],
        op: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        let id = self.power.begin(&self.inner, self.syncs, paths, written).await?;
        let out = op.await;
        self.power.end(id, out.is_ok());
        out
    }
}

#[async_trait::async_trait]
impl ObjectStore for Volatile {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.write(&[location], &[location], self.inner.put_opts(location, payload, opts)).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let id = self.power.begin(&self.inner, self.syncs, &[location], &[location]).await?;
        match self.inner.put_multipart_opts(location, opts).await {
            Ok(upload) => Ok(Box::new(Upload { inner: upload, power: self.power.clone(), id })),
            Err(e) => {
                self.power.end(id, false);
                Err(e)
            }
        }
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let (inner, power, syncs) = (self.inner.clone(), self.power.clone(), self.syncs);
        locations
            .then(move |location| {
                let (inner, power) = (inner.clone(), power.clone());
                async move {
                    let location = location?;
                    let id = power.begin(&inner, syncs, &[&location], &[]).await?;
                    let out = inner.delete(&location).await;
                    power.end(id, out.is_ok());
                    out.map(|()| location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.write(&[to], &[to], self.inner.copy_opts(from, to, options)).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.write(&[from, to], &[to], self.inner.rename_opts(from, to, options)).await
    }
}

/// A multipart upload: its object appears (and returns) at completion.
#[derive(Debug)]
struct Upload {
    inner: Box<dyn MultipartUpload>,
    power: Arc<Power>,
    id: usize,
}

#[async_trait::async_trait]
impl MultipartUpload for Upload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let out = self.inner.complete().await;
        self.power.end(self.id, out.is_ok());
        out
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.power.end(self.id, false);
        self.inner.abort().await
    }
}

/// Run `action` on the graph at `loc` with the power going at write `limit`
/// (`usize::MAX`: after the answer), then lose what it takes. Returns
/// (acknowledged before the power went, writes made, writes lost).
async fn run_powered(loc: &str, limit: usize, loss: Loss, action: Action) -> (bool, usize, usize) {
    let power = Power::new();
    // A store Lance built for `file-object-store` is the synced local store
    // (omnigraph::engine::storage::durability); one built for `file` is not.
    let lance_power = power.clone();
    lance_hook::route_with(Some(move |prefix: &str, inner| {
        Arc::new(Volatile { inner, power: lance_power.clone(), syncs: prefix == "file-object-store" })
            as Arc<dyn ObjectStore>
    }));
    let root = Root::parse(loc).expect("root");
    let syncs = durability::for_uri(loc) == Durability::Fsync;
    let store = Volatile { inner: root.store().clone(), power: power.clone(), syncs };
    let g = Omnigraph::open_root(root.with_store(Arc::new(store)), OpenMode::ReadWrite).await.expect("open");
    power.arm(limit);
    let ok = action(g.clone()).await;
    // An answer given after the power went was never seen.
    let acknowledged = ok && !power.off.load(Ordering::SeqCst);
    power.cut();
    shut_down(g).await;
    lance_hook::stop();
    let writes = power.count.load(Ordering::SeqCst).min(limit);
    let lost = power.lose(loss).await;
    (acknowledged, writes, lost)
}

/// `op` on `branch` as an action.
fn op_action(op: Op, branch: &'static str) -> Action {
    Box::new(move |g| Box::pin(async move { op.run_on(&g, branch).await.is_ok() }))
}

/// Every power cut of the action `make` builds on a copy of the graph at
/// `base` (at each of its N writes and after its answer) under both losses;
/// `check(copy, acknowledged, context)` must accept each. Returns (N, states).
async fn every_power_cut_of(
    base: &str,
    make: &dyn Fn() -> Action,
    seed: u64,
    what: &str,
    check: impl AsyncFn(String, bool, String),
) -> (usize, usize) {
    let (_probe, probe_loc) = fresh_copy(base).await;
    let (ok, n, _) = run_powered(&probe_loc, usize::MAX, Loss::All, make()).await;
    assert!(ok && n > 0, "{what}: the uninterrupted run must succeed ({n} writes)");
    let mut states = 0;
    for k in 1..=n + 1 {
        for loss in [Loss::All, Loss::Subset(seed ^ ((k as u64) << 8))] {
            let (_case, loc) = fresh_copy(base).await;
            let limit = if k > n { usize::MAX } else { k };
            let (acknowledged, _, lost) = run_powered(&loc, limit, loss, make()).await;
            let at = if k > n { "after the answer".to_string() } else { format!("at write {k}/{n}") };
            check(loc, acknowledged, format!("{what}: power cut {at}, {loss:?} ({lost} writes lost)")).await;
            states += 1;
        }
    }
    (n, states)
}

/// Every power cut of `op` on `branch` recovers clean; returns (N, states).
async fn every_power_cut(op: Op, branch: &'static str, seed: u64) -> (usize, usize) {
    let (base_dir, base_loc, before, after, committed) = setup_at(op, branch, None).await;
    let expected = Expected { op, branch, before, after, committed };
    let check = async |loc: String, acknowledged, context: String| {
        expected.assert_recovered(&loc, acknowledged, &context).await
    };
    let what = format!("{op:?} on {branch}");
    let out = every_power_cut_of(&base_loc, &|| op_action(op, branch), seed, &what, check).await;
    drop(base_dir);
    out
}

/// The writers `first..last` of [`WRITERS`] followed by a schema apply
/// (index `WRITERS.len()`), each cut at every power cut; a line per writer.
async fn every_power_cut_of_writers(first: usize, last: usize) -> Vec<String> {
    let cases = WRITERS.into_iter().chain([(Op::SchemaApply, "main")]).enumerate();
    let mut report = Vec::new();
    for (i, (op, branch)) in cases.skip(first).take(last - first) {
        let (n, states) = every_power_cut(op, branch, 0x5EED + i as u64).await;
        report.push(format!("{op:?} on {branch}: N = {n} writes, {states} power-cut states recovered"));
    }
    report
}

/// Writers whose power cuts run in a process of their own (the mutations
/// and loads on main), apart from the rest: the whole matrix in one
/// process was the crash suite's longest case by half.
const FIRST_HALF: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by a_long_case_runs_in_a_process_of_its_own"]
async fn every_power_cut_of_a_mutation_or_load_on_main_recovers_clean() {
    let _s = serial().await;
    let report = every_power_cut_of_writers(0, FIRST_HALF).await;
    println!("power-loss cut (0 violations):\n{}", report.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a process of its own by a_long_case_runs_in_a_process_of_its_own"]
async fn every_power_cut_of_every_writer_recovers_clean_with_nothing_acknowledged_lost() {
    let _s = serial().await;
    let mut report = every_power_cut_of_writers(FIRST_HALF, WRITERS.len() + 1).await;
    // A group commit: three members commit together, one is refused alone.
    let (base_dir, base_loc, before, after, committed) = setup_at(Op::GroupCommit, "main", None).await;
    let expected = Expected { op: Op::GroupCommit, branch: "main", before, after, committed };
    let check = async |loc: String, acknowledged, context: String| {
        expected.assert_recovered(&loc, acknowledged, &context).await
    };
    let (n, states) = every_power_cut_of(&base_loc, &group_action, 0x6000, "group commit", check).await;
    report.push(format!("GroupCommit on main: N = {n} writes, {states} power-cut states recovered"));
    drop(base_dir);
    // Branch control: the ref is the authority, no sidecar.
    let (base_dir, base_loc) = branch_base().await;
    for (i, (what, name, make)) in BRANCH_ACTIONS.into_iter().enumerate() {
        let check = async |loc: String, acknowledged, context: String| {
            assert_branch_outcome(&loc, what, name, acknowledged, &context).await
        };
        let (n, states) = every_power_cut_of(&base_loc, &make, 0x7000 + i as u64, what, check).await;
        report.push(format!("branch {what}: N = {n} writes, {states} power-cut states recovered"));
    }
    drop(base_dir);
    // Cleanup: no commit, and every retained version survives.
    let (base_dir, base_loc, keeps) = cleanup_base().await;
    let cleanup = || -> Action { Box::new(|g| Box::pin(async move { g.cleanup(Some(2), None, true).await.is_ok() })) };
    let check = async |loc: String, _acknowledged, context: String| keeps.assert_kept(&loc, true, &context).await;
    let (n, states) = every_power_cut_of(&base_loc, &cleanup, 0x8000, "cleanup", check).await;
    report.push(format!("cleanup: N = {n} writes, {states} power-cut states recovered"));
    drop(base_dir);
    println!("power-loss cut (0 violations):\n{}", report.join("\n"));
}

/// The group commit of [`super::GROUP`] as an action: acknowledged when its
/// three members committed and the fourth was refused alone.
fn group_action() -> Action {
    Box::new(|g| {
        Box::pin(async move {
            let requests: Vec<omnigraph::MutationRequest> = super::GROUP
                .iter()
                .map(|s| omnigraph::MutationRequest { source: s.to_string(), ..Default::default() })
                .collect();
            let Ok(out) = g.mutate_many(&requests, &omnigraph::WriteOptions::default()).await else { return false };
            out.iter()
                .enumerate()
                .all(|(i, r)| if i == 2 { matches!(r, Err(omnigraph::OmniError::BadRequest(_))) } else { r.is_ok() })
        })
    })
}

/// The same cut with durability `none` loses an acknowledged commit: the
/// suite above can fail, and `none` means what the docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fsync_a_power_cut_after_the_answer_loses_the_acknowledged_write() {
    let _s = serial().await;
    let (op, branch) = (Op::MutationInsert, "main");
    let (base_dir, base_loc, before, after, _) = setup_at(op, branch, None).await;
    let (_case, loc) = fresh_copy(&base_loc).await;
    durability::register_root(Root::parse(&loc).expect("root").uri(), Durability::None);
    let (acknowledged, n, lost) = run_powered(&loc, usize::MAX, Loss::All, op_action(op, branch)).await;
    assert!(acknowledged && n > 0, "the write was acknowledged ({n} writes)");
    assert!(lost > 0, "nothing was synced, so the power took something");
    let g = Omnigraph::open(&loc).await.expect("a graph without its last writes still opens");
    let now = counts_on(&g, branch).await;
    assert_ne!(now, after, "an acknowledged write survived a power cut with nothing synced");
    assert_eq!(now, before, "the graph is back where it was before the write");
    shut_down(g).await;
    drop(base_dir);
}
