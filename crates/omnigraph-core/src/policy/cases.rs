//! A bundle's declarative tests (the reference's `policy.tests.yaml`):
//! `version: 1` and `cases`, each an actor, an action, its branches and
//! the expected `allow` or `deny`.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Action, Policy, PolicyError, Request};

/// A test file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cases {
    /// Always 1.
    pub version: u32,
    /// The cases, run in order.
    #[serde(default)]
    pub cases: Vec<Case>,
}

/// One expectation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Unique within the file.
    pub id: String,
    /// Who asks.
    pub actor: String,
    /// What for.
    pub action: Action,
    /// The branch read or written.
    pub branch: Option<String>,
    /// The branch changed.
    pub target_branch: Option<String>,
    /// What the policy must answer.
    pub expect: Expect,
}

/// An expected answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
}

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// The case's id.
    pub id: String,
    /// What it expected.
    pub expect: Expect,
    /// Whether the policy answered that.
    pub passed: bool,
    /// The policy's answer and why.
    pub decision: super::Decision,
}

impl Cases {
    /// Parse and check a test file (`file` names it in errors).
    pub fn parse(file: &str, source: &str) -> Result<Cases, PolicyError> {
        let cases: Cases = serde_saphyr::from_str(source)
            .map_err(|e| PolicyError::new(file, None, format!("not a policy test file: {e}")))?;
        if cases.version != 1 {
            return Err(PolicyError::new(file, None, "a policy test file's version must be 1"));
        }
        let mut ids = BTreeSet::new();
        for c in &cases.cases {
            if c.id.trim().is_empty() || c.actor.trim().is_empty() {
                return Err(PolicyError::new(file, None, "every case needs a non-blank id and actor"));
            }
            if !ids.insert(c.id.as_str()) {
                let line = source.lines().position(|l| l.contains(&format!("id: {}", c.id))).map(|i| i + 1);
                return Err(PolicyError::new(file, line, format!("case `{}`: its id is used twice", c.id)));
            }
        }
        Ok(cases)
    }

    /// Run every case against `policy` (for graph `graph`).
    pub fn run(&self, policy: &Policy, graph: &str) -> Vec<Outcome> {
        self.cases
            .iter()
            .map(|c| {
                let request =
                    Request { action: c.action, branch: c.branch.clone(), target_branch: c.target_branch.clone() };
                let decision = policy.decide(&c.actor, graph, &request);
                let passed = decision.allowed == (c.expect == Expect::Allow);
                Outcome { id: c.id.clone(), expect: c.expect, passed, decision }
            })
            .collect()
    }
}
