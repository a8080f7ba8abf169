//! Ambiguous branch create and delete: Lance reports an error for a step
//! that did (or did not) happen. The outcome is classified from freshly
//! listed refs: a torn create is reclaimed and retried once, a delete whose
//! ref is gone succeeded, a refused delete leaves the branch whole.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::path::Path;
use omnigraph::{Graph, OmniError, Omnigraph};

use crate::intercept::{Policy, injected};
use crate::lance_hook;

use super::{Op, assert_clean_on, counts_on, serial, setup_on};

/// Fail the next `remaining` writes/deletes of a path containing `pattern`,
/// before they happen or after they did.
#[derive(Debug)]
struct Rule {
    pattern: String,
    after: bool,
    remaining: AtomicUsize,
}

impl Rule {
    fn fire(&self, path: &Path, after: bool) -> object_store::Result<()> {
        let hit = after == self.after && path.as_ref().contains(&self.pattern);
        if hit && self.remaining.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok() {
            return Err(injected(if after { "after-effect" } else { "before-effect" }));
        }
        Ok(())
    }
}

impl Policy for Rule {
    fn write(&self, path: &Path) -> object_store::Result<()> {
        self.fire(path, false)
    }
    fn delete(&self, path: &Path) -> object_store::Result<()> {
        self.fire(path, false)
    }
    fn after(&self, path: &Path) -> object_store::Result<()> {
        self.fire(path, true)
    }
}

/// Run `f` with Lance's stores failing per `rule`.
async fn with_rule<T>(pattern: &str, after: bool, times: usize, f: impl std::future::Future<Output = T>) -> (T, usize) {
    let rule = Arc::new(Rule { pattern: pattern.into(), after, remaining: AtomicUsize::new(times) });
    lance_hook::route(Some(rule.clone()));
    let out = f.await;
    lance_hook::route::<Rule>(None);
    (out, times - rule.remaining.load(Ordering::SeqCst))
}

async fn live(g: &Graph) -> Vec<String> {
    g.branch_list().await.expect("list").into_iter().map(|b| b.name).collect()
}

/// The branch exists, reads main's data, is consistent and writable.
async fn assert_usable(g: &Graph, name: &str) {
    assert!(live(g).await.contains(&name.to_string()), "{name} is not listed");
    assert_eq!(counts_on(g, name).await, counts_on(g, "main").await, "{name} reads main's head");
    Op::MutationInsert.run_on(g, name).await.unwrap_or_else(|e| panic!("write on {name}: {e}"));
    assert_clean_on(g, name, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ambiguous_branch_create_and_delete_are_classified_from_fresh_refs() {
    let _s = serial().await;
    let (_dir, loc, ..) = setup_on(Op::MutationInsert, "main").await;
    let g = Omnigraph::open(&loc).await.expect("open");

    // Lance's clone commit reported an error after its rename landed: Lance
    // itself recognises its own version, and the create is whole.
    let (out, fired) = with_rule("__manifest/tree/landed/_versions", true, 1, g.branch_create("landed", "main")).await;
    out.expect("a landed clone is the branch");
    assert_eq!(fired, 1);
    assert_usable(&g, "landed").await;

    // The clone commit failed (its staged files stay behind): fresh refs
    // show no branch, the tree is reclaimed, the second attempt succeeds.
    let (out, fired) = with_rule("__manifest/tree/torn/_versions", false, 1, g.branch_create("torn", "main")).await;
    out.expect("the second attempt creates the branch");
    assert_eq!(fired, 1);
    assert_usable(&g, "torn").await;

    // Both native attempts fail: a clear error, no branch; the next create
    // reclaims what is left and succeeds.
    let (out, fired) = with_rule("__manifest/tree/twice/_versions", false, 2, g.branch_create("twice", "main")).await;
    assert!(out.is_err(), "two torn attempts fail the create: {out:?} after {fired} injected failures");
    assert_eq!(fired, 2, "at most two native attempts");
    assert!(!live(&g).await.contains(&"twice".to_string()));
    g.branch_create("twice", "main").await.expect("create after the torn attempts");
    assert_usable(&g, "twice").await;

    // The ref was removed but Lance reported an error: an absent ref is success.
    g.branch_create("gone", "main").await.expect("create");
    Op::MutationInsert.run_on(&g, "gone").await.expect("fork a table");
    let purge = omnigraph::DeleteOptions { purge: true, actor: None };
    let (out, fired) =
        with_rule("__manifest/_refs/branches/gone.json", true, 1, g.branch_delete_with("gone", &purge)).await;
    out.expect("an absent ref after an error is a successful delete");
    assert_eq!(fired, 1);
    assert!(!live(&g).await.contains(&"gone".to_string()));
    g.branch_create("gone", "main").await.expect("recreate over the leftover tree");
    assert_usable(&g, "gone").await;

    // The ref removal itself failed: the same incarnation is still there, so
    // the error stands and the branch is whole.
    g.branch_create("kept", "main").await.expect("create");
    let (out, fired) =
        with_rule("__manifest/_refs/branches/kept.json", false, 1, g.branch_delete_with("kept", &purge)).await;
    assert!(matches!(out, Err(OmniError::Storage { .. })), "{out:?}");
    assert_eq!(fired, 1);
    assert_usable(&g, "kept").await;
    g.branch_delete("kept").await.expect("delete once storage works");
    assert!(!live(&g).await.contains(&"kept".to_string()));
}
