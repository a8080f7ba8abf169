//! A policy bundle as its YAML file holds it (the reference's format,
//! read unchanged): `version: 1`, `groups` of actors, `protected_branches`,
//! and allow-only `rules`. Parsing checks every rule before anything is
//! compiled, and each error names the line it is about.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::{Action, PolicyError, Resource, ScopeKind};

/// A parsed and checked bundle.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    /// Always 1.
    pub version: u32,
    /// Group name → its actors.
    #[serde(default)]
    pub groups: BTreeMap<String, Vec<String>>,
    /// The branches `protected` scopes name.
    #[serde(default)]
    pub protected_branches: Vec<String>,
    /// What is allowed; everything else is denied.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

/// One allow rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique within the bundle; named by `policy explain`.
    pub id: String,
    /// Who may do what, where.
    pub allow: Allow,
}

/// The body of an allow rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Allow {
    /// A group, or a list of actors.
    pub actors: Actors,
    /// The actions allowed.
    pub actions: Vec<Action>,
    /// Which source branches (`read`, `export`, `change`).
    pub branch_scope: Option<BranchScope>,
    /// Which destination branches (branch operations, schema apply, the
    /// writers that move a branch).
    pub target_branch_scope: Option<BranchScope>,
}

/// Whom a rule allows.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Actors {
    /// `{group: G}`: the members of a group.
    Group {
        /// The group's name.
        group: String,
    },
    /// `[actor, …]`: these actors.
    List(Vec<String>),
}

/// Which branches a rule's scope admits.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum BranchScope {
    /// `any`, `protected` or `unprotected`.
    Kind(ScopeKind),
    /// `{pattern: "agent/{actor}/*"}`: branch names matching a glob (`*`
    /// any run of characters), `{actor}` standing for the caller.
    Pattern {
        /// The glob.
        pattern: String,
    },
}

impl Bundle {
    /// Parse and check `source` (the file's text; `file` names it in errors).
    pub fn parse(file: &str, source: &str) -> Result<Bundle, PolicyError> {
        let bundle: Bundle = serde_saphyr::from_str(source)
            .map_err(|e| PolicyError::new(file, None, format!("not a policy bundle: {e}")))?;
        bundle.check().map_err(|(needle, reason)| PolicyError::new(file, line_of(source, &needle), reason))?;
        Ok(bundle)
    }

    /// Every actor a rule or group names.
    pub fn actors(&self) -> BTreeSet<&str> {
        let listed = self.rules.iter().flat_map(|r| match &r.allow.actors {
            Actors::List(list) => list.as_slice(),
            Actors::Group { .. } => &[],
        });
        self.groups.values().flatten().chain(listed).map(String::as_str).collect()
    }

    /// The members of `rule`'s actor set.
    pub fn members<'b>(&'b self, rule: &'b Rule) -> &'b [String] {
        match &rule.allow.actors {
            Actors::Group { group } => self.groups.get(group).map_or(&[], Vec::as_slice),
            Actors::List(list) => list,
        }
    }

    /// The first rule broken, as (text to find its line by, reason).
    fn check(&self) -> Result<(), (String, String)> {
        if self.version != 1 {
            return Err(("version".into(), format!("version {}: a policy bundle's version must be 1", self.version)));
        }
        for (group, members) in &self.groups {
            if group.trim().is_empty() || members.is_empty() || members.iter().any(|m| m.trim().is_empty()) {
                return Err((format!("{group}:"), format!("group `{group}`: needs a name and non-blank actors")));
            }
        }
        if self.protected_branches.iter().any(|b| b.trim().is_empty()) {
            return Err(("protected_branches".into(), "protected branch names must not be blank".into()));
        }
        let mut ids = BTreeSet::new();
        for rule in &self.rules {
            let at = format!("id: {}", rule.id);
            if rule.id.trim().is_empty() {
                return Err(("id:".into(), "a rule's id must not be blank".into()));
            }
            if !ids.insert(rule.id.as_str()) {
                return Err((at, format!("rule `{}`: its id is used twice", rule.id)));
            }
            self.check_rule(rule).map_err(|reason| (at, format!("rule `{}`: {reason}", rule.id)))?;
        }
        Ok(())
    }

    fn check_rule(&self, rule: &Rule) -> Result<(), String> {
        let allow = &rule.allow;
        match &allow.actors {
            Actors::Group { group } if !self.groups.contains_key(group) => {
                return Err(format!("names the unknown group `{group}`"));
            }
            Actors::List(list) if list.is_empty() || list.iter().any(|a| a.trim().is_empty()) => {
                return Err("its actor list must name at least one actor, none blank".into());
            }
            _ => {}
        }
        if allow.actions.is_empty() {
            return Err("allows no action".into());
        }
        let server = allow.actions.iter().filter(|a| a.resource() == Resource::Server).count();
        if server > 0 && server < allow.actions.len() {
            return Err("mixes the server action `graph_list` with per-graph actions: split them into two rules".into());
        }
        if allow.branch_scope.is_some() && allow.target_branch_scope.is_some() {
            return Err("may set branch_scope or target_branch_scope, not both".into());
        }
        let scoped =
            [(&allow.branch_scope, "branch_scope", true), (&allow.target_branch_scope, "target_branch_scope", false)];
        for (scope, name, source) in scoped {
            let Some(scope) = scope else { continue };
            if let Some(a) = allow.actions.iter().find(|a| a.scope() != Some(source)) {
                return Err(format!("sets {name}, which action `{}` does not take", a.as_str()));
            }
            if let BranchScope::Pattern { pattern } = scope {
                check_pattern(pattern)?;
            }
        }
        Ok(())
    }
}

/// A pattern is a non-empty glob whose only placeholder is `{actor}`.
fn check_pattern(pattern: &str) -> Result<(), String> {
    let rest = pattern.replace("{actor}", "");
    if pattern.trim().is_empty() || rest.contains(['{', '}']) {
        return Err(format!("pattern `{pattern}`: a branch pattern is a glob whose only placeholder is {{actor}}"));
    }
    Ok(())
}

/// The 1-based line of the first occurrence of `needle` in `source`.
fn line_of(source: &str, needle: &str) -> Option<usize> {
    source.lines().position(|l| l.contains(needle)).map(|i| i + 1)
}
