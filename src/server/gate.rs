//! What an authenticated actor may do: the daemon's runtime state (open,
//! default-deny, or policy bundles) and the one check every route makes.
//!
//! - No policy: every authenticated actor may do everything, as before
//!   policies existed; `--default-deny` instead refuses every action but
//!   `read` (the reference's DefaultDeny state).
//! - `--policy FILE`: the bundle decides for every graph and for
//!   `graph_list`; `--graph-policy ID=FILE` decides for that graph instead.
//!   A graph no bundle covers keeps the no-policy behaviour; with only
//!   per-graph bundles, `graph_list` is denied (as the reference's server
//!   denies it without a cluster bundle).

use std::sync::Arc;

use super::PerGraph;
use crate::engine::policy::{Action, Policy, Request, Resource};
use crate::protocol::{OmniError, Result};

/// The policy configuration of a daemon.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// The bundle for the server and every graph without its own, and
    /// single graphs' bundles.
    pub policies: PerGraph<Arc<Policy>>,
    /// Without a bundle, refuse everything but `read`.
    pub default_deny: bool,
}

impl Gate {
    /// Whether any bundle is configured.
    pub fn has_policy(&self) -> bool {
        self.policies.is_set()
    }

    /// Whether `actor` may make `request` on `graph` (`None` for a server
    /// action), or a 403 naming the action, the actor and the branches.
    pub fn check(&self, actor: &str, graph: Option<&str>, request: &Request) -> Result<()> {
        let allowed = match self.policies.of(graph) {
            Some(policy) => policy.decide(actor, graph.unwrap_or_default(), request).allowed,
            None if request.action.resource() == Resource::Server && self.has_policy() => false,
            None => !self.default_deny || request.action.is_read(),
        };
        if allowed {
            return Ok(());
        }
        Err(OmniError::Forbidden {
            action: request.action.as_str().to_string(),
            actor: actor.to_string(),
            branch: request.branch.clone(),
            target_branch: request.target_branch.clone(),
        })
    }
}

/// A `read` of `branch` (`None`: of no branch, e.g. at a commit).
pub fn read(branch: Option<&str>) -> Request {
    Request { action: Action::Read, branch: branch.map(str::to_string), target_branch: None }
}
