//! Crashes as process deaths. A crash case re-executes this test binary for
//! one case ([`crash_child`]); the child runs one action with the failpoint
//! set to `std::process::abort()`, so it dies at that instruction with no
//! destructor, no error path and no actor left running. The parent checks the
//! child died by SIGABRT, then reopens the graph itself: a fresh process as
//! far as that graph is concerned.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use omnigraph::{OmniError, Omnigraph};

use super::Op;

const ENV_LOC: &str = "OMNIGRAPH_CRASH_LOC";
const ENV_POINT: &str = "OMNIGRAPH_CRASH_POINT";
const ENV_ACTION: &str = "OMNIGRAPH_CRASH_ACTION";

/// What a crash child does before (and while) it dies.
#[derive(Debug, Clone)]
pub enum Action {
    /// Open read-write, then run a write on a branch.
    Write(Op, String),
    /// Open read-write, then create branch `name` from `from`.
    BranchCreate { name: String, from: String },
    /// Open read-write, then delete a branch (hide it, or with `purge`
    /// remove it for good).
    BranchDelete {
        /// The branch.
        name: String,
        /// `branch delete --purge`.
        purge: bool,
    },
    /// Open read-write, then restore a deleted branch.
    BranchRestore(String),
    /// Open read-write: the open's recovery sweep is the action.
    Open,
    /// Open read-write, then `cleanup --keep N --confirm`.
    Cleanup(usize),
    /// Open read-write, then tag main's head as `name`.
    TagCreate(String),
    /// Open read-write, then delete tag `name`.
    TagDelete(String),
}

impl Action {
    fn encode(&self) -> String {
        match self {
            Action::Write(op, branch) => format!("write|{op:?}|{branch}"),
            Action::BranchCreate { name, from } => format!("create|{name}|{from}"),
            Action::BranchDelete { name, purge } => format!("delete|{name}|{purge}"),
            Action::BranchRestore(name) => format!("restore|{name}"),
            Action::Open => "open".into(),
            Action::Cleanup(keep) => format!("cleanup|{keep}"),
            Action::TagCreate(name) => format!("tag|{name}"),
            Action::TagDelete(name) => format!("untag|{name}"),
        }
    }

    fn decode(s: &str) -> Option<Action> {
        let parts: Vec<&str> = s.split('|').collect();
        Some(match parts.as_slice() {
            ["write", op, branch] => Action::Write(
                *super::OPS.iter().chain(&super::EXTRA_OPS).find(|o| format!("{o:?}") == *op)?,
                branch.to_string(),
            ),
            ["create", name, from] => Action::BranchCreate { name: name.to_string(), from: from.to_string() },
            ["delete", name, purge] => Action::BranchDelete { name: name.to_string(), purge: purge.parse().ok()? },
            ["restore", name] => Action::BranchRestore(name.to_string()),
            ["open"] => Action::Open,
            ["cleanup", keep] => Action::Cleanup(keep.parse().ok()?),
            ["tag", name] => Action::TagCreate(name.to_string()),
            ["untag", name] => Action::TagDelete(name.to_string()),
            _ => return None,
        })
    }

    async fn run(&self, loc: &str) -> Result<(), OmniError> {
        let g = Omnigraph::open(loc).await?;
        match self {
            Action::Write(op, branch) => op.run_on(&g, branch).await.map(drop),
            Action::BranchCreate { name, from } => g.branch_create(name, from).await.map(drop),
            Action::BranchDelete { name, purge } => {
                let opts = omnigraph::DeleteOptions { purge: *purge, actor: None };
                g.branch_delete_with(name, &opts).await.map(drop)
            }
            Action::BranchRestore(name) => g.branch_restore(name, None, None).await.map(drop),
            Action::Open => Ok(()),
            Action::Cleanup(keep) => g.cleanup(Some(*keep), None, true).await.map(drop),
            Action::TagCreate(name) => g.tag_create(name, None, Some("crash"), None).await.map(drop),
            Action::TagDelete(name) => g.tag_delete(name).await.map(drop),
        }
    }
}

/// Run `action` on the graph at `loc` in a child process that aborts at
/// `failpoint`; panics unless the child died there.
pub fn crash_in_child(loc: &str, action: &Action, failpoint: &str) {
    let exe = std::env::current_exe().expect("test binary path");
    let out = Command::new(exe)
        .args(["child::crash_child", "--exact", "--nocapture", "--test-threads=1", "-q"])
        .env(ENV_LOC, loc)
        .env(ENV_POINT, failpoint)
        .env(ENV_ACTION, action.encode())
        .envs(super::s3::child_env(loc))
        .env_remove("FAILPOINTS")
        .output()
        .expect("spawn the crash child");
    let signal = out.status.signal();
    assert_eq!(
        signal,
        Some(libc_sigabrt()),
        "{action:?} did not die at {failpoint} (status {:?}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGABRT (6 on every platform this runs on).
const fn libc_sigabrt() -> i32 {
    6
}

/// The child side: runs only when re-executed by [`crash_in_child`] (the
/// environment names the case); in an ordinary test run it has no case.
#[test]
fn crash_child() {
    let (Ok(loc), Ok(point), Ok(action)) =
        (std::env::var(ENV_LOC), std::env::var(ENV_POINT), std::env::var(ENV_ACTION))
    else {
        return;
    };
    let action = Action::decode(&action).unwrap_or_else(|| panic!("unknown crash action {action}"));
    let _scenario = fail::FailScenario::setup();
    fail::cfg_callback(&point, || std::process::abort()).expect("configure the failpoint");
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let out = rt.block_on(action.run(&loc));
    // Reaching here means the failpoint never fired: exit with a distinct
    // status the parent reports (it expects SIGABRT).
    eprintln!("crash child: {point} did not fire; {action:?} returned {out:?}");
    std::process::exit(3);
}
