//! `omnigraph policy validate|test|explain`: a policy bundle checked, its
//! declarative tests run, one decision explained. Offline: they read the
//! files only, and decide as a daemon given the bundle would.

use clap::Subcommand;
use omnigraph::engine::policy::cases::Cases;
use omnigraph::engine::policy::{Action, Policy, PolicyError, Request};
use omnigraph::{OmniError, Result};
use serde_json::json;

use super::{print_json, read_file};

/// The graph id decisions are made for (a bundle's rules name no graph).
const GRAPH: &str = "default";

/// The policy commands.
#[derive(Subcommand)]
pub enum PolicyCommand {
    /// Check a policy bundle; exit 1 naming the line and the reason when
    /// it is not valid.
    #[command(after_help = "Example:\n  omnigraph policy validate policy.yaml")]
    Validate {
        /// The bundle (the reference's policy.yaml format).
        file: String,
        /// Print JSON: `{valid, rules, groups, actors, protected_branches}`
        /// or `{valid: false, error, line}`.
        #[arg(long)]
        json: bool,
    },
    /// Run a bundle's declarative tests; exit 1 when any case fails.
    #[command(after_help = "Example:\n  omnigraph policy test policy.yaml --tests policy.tests.yaml")]
    Test {
        /// The bundle.
        file: String,
        /// The test cases (`version: 1`, `cases: [{id, actor, action,
        /// branch?, target_branch?, expect: allow|deny}]`).
        #[arg(long)]
        tests: String,
        /// Print JSON: `{passed, failed, cases: [{id, expect, passed, decision}]}`.
        #[arg(long)]
        json: bool,
    },
    /// Show whether an actor may take an action, and which rule decided.
    #[command(
        after_help = "Example:\n  omnigraph policy explain policy.yaml --actor act-alice --action schema_apply --target-branch main"
    )]
    Explain {
        /// The bundle.
        file: String,
        /// The actor asking.
        #[arg(long)]
        actor: String,
        /// The action (`read`, `change`, `branch_merge`, …; docs/server.md lists them).
        #[arg(long)]
        action: String,
        /// The branch read or written.
        #[arg(long)]
        branch: Option<String>,
        /// The branch changed (branch operations, merges, schema apply).
        #[arg(long = "target-branch")]
        target_branch: Option<String>,
        /// Print JSON: `{allowed, rule, reason, actor, action, branch, target_branch}`.
        #[arg(long)]
        json: bool,
    },
}

impl PolicyCommand {
    /// Whether `--json` was asked for.
    pub fn json(&self) -> bool {
        match self {
            PolicyCommand::Validate { json, .. }
            | PolicyCommand::Test { json, .. }
            | PolicyCommand::Explain { json, .. } => *json,
        }
    }
}

/// Run a policy command: the exit code (0, or 1 for an invalid bundle or a
/// failed case).
pub fn run(command: PolicyCommand) -> Result<u8> {
    match command {
        PolicyCommand::Validate { file, json } => validate(&file, json),
        PolicyCommand::Test { file, tests, json } => test(&file, &tests, json),
        PolicyCommand::Explain { file, actor, action, branch, target_branch, json } => {
            let action = Action::parse(&action).ok_or_else(|| {
                let known: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
                OmniError::BadRequest(format!("unknown action `{action}`: one of {}", known.join(", ")))
            })?;
            let policy = Policy::parse(&file, &read_file(&file)?).map_err(bad)?;
            let request = Request { action, branch, target_branch };
            let decision = policy.decide(&actor, GRAPH, &request);
            if json {
                print_json(&json!({
                    "allowed": decision.allowed, "rule": decision.rule, "reason": decision.reason,
                    "actor": actor, "action": action, "branch": request.branch, "target_branch": request.target_branch,
                }))?;
            } else {
                outln!("{}", if decision.allowed { "allow" } else { "deny" });
                outln!("{}", decision.reason);
            }
            Ok(0)
        }
    }
}

fn validate(file: &str, json: bool) -> Result<u8> {
    match Policy::parse(file, &read_file(file)?) {
        Ok(policy) => {
            let b = policy.bundle();
            if json {
                print_json(&json!({
                    "valid": true, "rules": b.rules.len(), "groups": b.groups.len(),
                    "actors": b.actors().len(), "protected_branches": b.protected_branches,
                }))?;
            } else {
                outln!("valid: {} rules, {} groups, {} actors", b.rules.len(), b.groups.len(), b.actors().len());
            }
            Ok(0)
        }
        Err(e) if json => {
            print_json(&json!({"valid": false, "error": e.to_string(), "line": e.line}))?;
            Ok(1)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(1)
        }
    }
}

fn test(file: &str, tests: &str, json: bool) -> Result<u8> {
    let policy = Policy::parse(file, &read_file(file)?).map_err(bad)?;
    let cases = Cases::parse(tests, &read_file(tests)?).map_err(bad)?;
    let outcomes = cases.run(&policy, GRAPH);
    let failed = outcomes.iter().filter(|o| !o.passed).count();
    if json {
        print_json(&json!({"passed": outcomes.len() - failed, "failed": failed, "cases": outcomes}))?;
    } else {
        for o in &outcomes {
            let verdict = if o.passed { "ok" } else { "FAILED" };
            outln!("{verdict} {}: {}", o.id, o.decision.reason);
        }
        outln!("{} passed, {failed} failed", outcomes.len() - failed);
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

/// A bundle or test file that cannot be used: a usage error (exit 2).
fn bad(e: PolicyError) -> OmniError {
    OmniError::BadRequest(e.to_string())
}
