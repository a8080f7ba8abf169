//! A bundle compiled to Cedar, and the decisions it makes.
//!
//! Each rule becomes one `permit` per action it allows (per actor, for a
//! branch pattern naming `{actor}`): the principal is in the rule's group
//! (or its own list of actors), and the scope is a condition on the
//! request's context (whether it names a branch, the branch, and whether
//! that branch is protected). Cedar denies what no permit allows; an actor
//! no group or list names is denied before Cedar is asked.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use cedar_policy::{Authorizer, Context, Entities, EntityId, EntityTypeName, EntityUid, PolicyId, PolicySet, Schema};
use serde::Serialize;
use serde_json::json;

use super::bundle::{Actors, BranchScope, Bundle, Rule};
use super::{PolicyError, Request, Resource, ScopeKind};

/// The Cedar schema every bundle compiles against.
const SCHEMA: &str = r#"
namespace Omnigraph {
    type RequestContext = {
        has_branch: Bool,
        branch: String,
        has_target_branch: Bool,
        target_branch: String,
        branch_is_protected: Bool,
        target_branch_is_protected: Bool,
    };
    entity Group;
    entity Listed;
    entity Actor in [Group, Listed];
    entity Graph;
    entity Server;
    action "read", "export", "change", "schema_apply", "branch_create", "branch_delete", "branch_merge",
        "admin", "invoke_query", "revert", "cherry_pick", "branch_reset", "tag_create", "tag_delete",
        "optimize", "cleanup", "index_ensure"
        appliesTo { principal: Actor, resource: Graph, context: RequestContext };
    action "graph_list" appliesTo { principal: Actor, resource: Server, context: RequestContext };
}
"#;

/// A compiled bundle.
#[derive(Debug, Clone)]
pub struct Policy {
    bundle: Bundle,
    /// Every actor the bundle names (others are refused before Cedar).
    actors: BTreeSet<String>,
    schema: Schema,
    entities: Entities,
    policies: PolicySet,
    /// Cedar policy id → the rule it came from.
    rule_of: BTreeMap<String, String>,
}

/// What a policy decided, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// Allowed or not.
    pub allowed: bool,
    /// The rule that allowed it (the first by id when several did).
    pub rule: Option<String>,
    /// Why, in words.
    pub reason: String,
}

impl Policy {
    /// Parse, check and compile a bundle (`file` names it in errors).
    pub fn parse(file: &str, source: &str) -> Result<Policy, PolicyError> {
        let bundle = Bundle::parse(file, source)?;
        Policy::compile(file, bundle)
    }

    /// Read, parse, check and compile a bundle file.
    pub fn load(path: &std::path::Path) -> Result<Policy, PolicyError> {
        let file = path.display().to_string();
        let source =
            std::fs::read_to_string(path).map_err(|e| PolicyError::new(&file, None, format!("cannot be read: {e}")))?;
        Policy::parse(&file, &source)
    }

    fn compile(file: &str, bundle: Bundle) -> Result<Policy, PolicyError> {
        let bug = |e: String| PolicyError::new(file, None, format!("does not compile to Cedar: {e}"));
        let (schema, _) = Schema::from_cedarschema_str(SCHEMA).map_err(|e| bug(e.to_string()))?;
        let mut policies = PolicySet::new();
        let mut rule_of = BTreeMap::new();
        for rule in &bundle.rules {
            for (n, text) in permits(&bundle, rule).into_iter().enumerate() {
                let id = format!("{}#{n}", rule.id);
                let policy = cedar_policy::Policy::parse(Some(PolicyId::new(&id)), &text)
                    .map_err(|e| bug(format!("rule `{}`: {e}", rule.id)))?;
                policies.add(policy).map_err(|e| bug(e.to_string()))?;
                rule_of.insert(id, rule.id.clone());
            }
        }
        let entities = Entities::from_json_value(entities(&bundle), Some(&schema)).map_err(|e| bug(e.to_string()))?;
        let actors = bundle.actors().into_iter().map(str::to_string).collect();
        Ok(Policy { bundle, actors, schema, entities, policies, rule_of })
    }

    /// The bundle it was compiled from.
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// Whether `actor` may make `request` on graph `graph`.
    pub fn decide(&self, actor: &str, graph: &str, request: &Request) -> Decision {
        let what = describe(actor, request);
        if !self.actors.contains(actor) {
            return Decision {
                allowed: false,
                rule: None,
                reason: format!("{what}: no group or rule names the actor"),
            };
        }
        match self.ask(actor, graph, request) {
            Ok(Some(rule)) => Decision {
                allowed: true,
                rule: Some(rule.clone()),
                reason: format!("{what}: allowed by rule `{rule}`"),
            },
            Ok(None) => Decision { allowed: false, rule: None, reason: format!("{what}: no rule allows it") },
            // The schema and the context are ours: an error here is a bug,
            // and it denies.
            Err(e) => Decision {
                allowed: false,
                rule: None,
                reason: format!("{what}: denied, the policy could not decide ({e})"),
            },
        }
    }

    /// Cedar's answer: the allowing rule, or `None` when denied.
    fn ask(&self, actor: &str, graph: &str, request: &Request) -> Result<Option<String>, String> {
        let principal = uid("Actor", actor)?;
        let action = uid("Action", request.action.as_str())?;
        let resource = match request.action.resource() {
            Resource::Graph => uid("Graph", graph)?,
            Resource::Server => uid("Server", "root")?,
        };
        let protected = |b: &Option<String>| b.as_ref().is_some_and(|b| self.bundle.protected_branches.contains(b));
        let context = json!({
            "has_branch": request.branch.is_some(),
            "branch": request.branch.clone().unwrap_or_default(),
            "has_target_branch": request.target_branch.is_some(),
            "target_branch": request.target_branch.clone().unwrap_or_default(),
            "branch_is_protected": protected(&request.branch),
            "target_branch_is_protected": protected(&request.target_branch),
        });
        let context = Context::from_json_value(context, Some((&self.schema, &action))).map_err(|e| e.to_string())?;
        let request = cedar_policy::Request::new(principal, action, resource, context, Some(&self.schema))
            .map_err(|e| e.to_string())?;
        let answer = Authorizer::new().is_authorized(&request, &self.policies, &self.entities);
        if let Some(e) = answer.diagnostics().errors().next() {
            return Err(e.to_string());
        }
        if answer.decision() != cedar_policy::Decision::Allow {
            return Ok(None);
        }
        let rules: BTreeSet<&String> = answer
            .diagnostics()
            .reason()
            .filter_map(|id| {
                let id: &str = id.as_ref();
                self.rule_of.get(id)
            })
            .collect();
        Ok(rules.into_iter().next().cloned())
    }
}

/// "actor `a` may not/may `change` on `main`" without the verdict.
fn describe(actor: &str, r: &Request) -> String {
    let mut text = format!("`{}` by actor `{actor}`", r.action);
    if let Some(b) = &r.branch {
        text.push_str(&format!(" on branch `{b}`"));
    }
    if let Some(t) = &r.target_branch {
        text.push_str(&format!(" into branch `{t}`"));
    }
    text
}

fn uid(kind: &str, id: &str) -> Result<EntityUid, String> {
    let kind = EntityTypeName::from_str(&format!("Omnigraph::{kind}")).map_err(|e| e.to_string())?;
    Ok(EntityUid::from_type_name_and_id(kind, EntityId::new(id)))
}

/// The Cedar entities of a bundle: its groups, each rule's own actor list,
/// and every actor with the groups and lists it is in.
fn entities(bundle: &Bundle) -> serde_json::Value {
    let mut parents: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
    for (group, members) in &bundle.groups {
        for m in members {
            parents.entry(m).or_default().push(json!({"type": "Omnigraph::Group", "id": group}));
        }
    }
    for rule in &bundle.rules {
        if let Actors::List(list) = &rule.allow.actors {
            for m in list {
                parents.entry(m).or_default().push(json!({"type": "Omnigraph::Listed", "id": rule.id}));
            }
        }
    }
    let entity = |kind: &str, id: &str, parents: Vec<serde_json::Value>| json!({"uid": {"type": format!("Omnigraph::{kind}"), "id": id}, "attrs": {}, "parents": parents});
    let mut out: Vec<serde_json::Value> = bundle.groups.keys().map(|g| entity("Group", g, vec![])).collect();
    out.extend(
        bundle
            .rules
            .iter()
            .filter(|r| matches!(r.allow.actors, Actors::List(_)))
            .map(|r| entity("Listed", &r.id, vec![])),
    );
    out.extend(parents.into_iter().map(|(actor, ps)| entity("Actor", actor, ps)));
    serde_json::Value::Array(out)
}

/// The Cedar `permit`s of one rule.
fn permits(bundle: &Bundle, rule: &Rule) -> Vec<String> {
    let allow = &rule.allow;
    let scoped = allow
        .branch_scope
        .as_ref()
        .map(|s| (s, "branch"))
        .or(allow.target_branch_scope.as_ref().map(|s| (s, "target_branch")));
    let principal = match &allow.actors {
        Actors::Group { group } => format!("principal in Omnigraph::Group::{}", literal(group)),
        Actors::List(_) => format!("principal in Omnigraph::Listed::{}", literal(&rule.id)),
    };
    let mut out = Vec::new();
    for action in &allow.actions {
        let head = |principal: &str| {
            format!("permit ({principal}, action == Omnigraph::Action::{}, resource)", literal(action.as_str()))
        };
        match scoped {
            None => out.push(format!("{};", head(&principal))),
            Some((BranchScope::Kind(kind), field)) => {
                out.push(format!("{} when {{ {} }};", head(&principal), kind_condition(*kind, field)))
            }
            Some((BranchScope::Pattern { pattern }, field)) if pattern.contains("{actor}") => {
                // Cedar cannot build a string from the principal: one permit per actor.
                for actor in bundle.members(rule) {
                    let glob = glob(pattern, Some(actor));
                    let who = format!("principal == Omnigraph::Actor::{}", literal(actor));
                    out.push(format!(
                        "{} when {{ context.has_{field} && context.{field} like \"{glob}\" }};",
                        head(&who)
                    ));
                }
            }
            Some((BranchScope::Pattern { pattern }, field)) => {
                let glob = glob(pattern, None);
                out.push(format!(
                    "{} when {{ context.has_{field} && context.{field} like \"{glob}\" }};",
                    head(&principal)
                ));
            }
        }
    }
    out
}

/// The condition of a named scope on the context's `field` (`branch` or `target_branch`).
fn kind_condition(kind: ScopeKind, field: &str) -> String {
    match kind {
        ScopeKind::Any => "true".into(),
        ScopeKind::Protected => format!("context.has_{field} && context.{field}_is_protected"),
        ScopeKind::Unprotected => format!("context.has_{field} && !context.{field}_is_protected"),
    }
}

/// A Cedar string literal.
fn literal(text: &str) -> String {
    format!("\"{}\"", escape(text))
}

fn escape(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' => "\\\"".to_string(),
            '\\' => "\\\\".to_string(),
            c if c.is_control() => format!("\\u{{{:x}}}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

/// The body of a Cedar `like` pattern for `pattern` (`*` stays a wildcard),
/// with `{actor}` replaced by `actor`, whose own `*` is literal.
fn glob(pattern: &str, actor: Option<&str>) -> String {
    let actor = actor.map(|a| escape(a).replace('*', "\\*")).unwrap_or_default();
    pattern.split("{actor}").map(escape).collect::<Vec<_>>().join(&actor)
}
