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

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::engine::policy::{Action, Policy, Request, Resource};
use crate::protocol::{OmniError, Result};

/// The policy configuration of a daemon.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// The bundle for the server and every graph without its own.
    pub all: Option<Arc<Policy>>,
    /// Bundles of single graphs.
    pub graphs: BTreeMap<String, Arc<Policy>>,
    /// Without a bundle, refuse everything but `read`.
    pub default_deny: bool,
}

impl Gate {
    /// Whether any bundle is configured.
    pub fn has_policy(&self) -> bool {
        self.all.is_some() || !self.graphs.is_empty()
    }

    /// The bundle deciding for `graph` (`None`: the server).
    fn bundle(&self, graph: Option<&str>) -> Option<&Arc<Policy>> {
        match graph {
            Some(g) => self.graphs.get(g).or(self.all.as_ref()),
            None => self.all.as_ref(),
        }
    }

    /// Whether `actor` may make `request` on `graph` (`None` for a server
    /// action), or a 403 naming the action, the actor and the branches.
    pub fn check(&self, actor: &str, graph: Option<&str>, request: &Request) -> Result<()> {
        let allowed = match self.bundle(graph) {
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

    /// Whether some bundle could care which branch a read is on (so a
    /// read's ref is worth resolving to a branch).
    pub fn scopes_reads(&self) -> bool {
        self.has_policy()
    }
}

/// `Request::on` for a read, and its action.
pub fn read(branch: Option<&str>) -> Request {
    Request { action: Action::Read, branch: branch.map(str::to_string), target_branch: None }
}
