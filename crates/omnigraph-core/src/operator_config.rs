//! The operator's own CLI config (`~/.omnigraph/config.yaml`, in the
//! reference implementation's format) and its keyed credentials file: who
//! the operator is (`operator.actor`), the servers they name (`servers`),
//! what a command addresses when it names nothing (`defaults`, `profiles`),
//! and which token goes to which server. Pure: the CLI reads the files and
//! the environment and hands their text here.
//!
//! Unknown keys warn and load, so a file written for a newer CLI works on
//! an older one; a known key of the wrong shape is an error naming its path.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value};

/// A config that cannot be used, with the key path at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

type Result<T> = std::result::Result<T, ConfigError>;

/// What a scope addresses: a daemon (by name in `servers`, or a URL), a
/// graph's storage, or a managed cluster (named in `clusters`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScopeSpec {
    /// A server name or URL.
    Server(String),
    /// A graph's storage URI or path.
    Store(String),
    /// A cluster name.
    Cluster(String),
}

/// A named scope bundle (`profiles.<name>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Profile {
    /// Exactly one of server, store or cluster.
    #[serde(flatten)]
    pub scope: ScopeSpec,
    /// The graph selected in a server or cluster scope.
    pub default_graph: Option<String>,
}

/// `defaults`: the scope and output used when a command names neither.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Defaults {
    /// The read format below `--json`/`--format`.
    pub output: Option<String>,
    /// `defaults.server` or `defaults.store` (never both).
    pub scope: Option<ScopeSpec>,
    /// The graph selected in a server scope.
    pub default_graph: Option<String>,
}

/// The parsed config, and what its reader should warn about.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OperatorConfig {
    /// `operator.actor`: the actor a write records when `--as` is not given.
    pub actor: Option<String>,
    /// `servers.<name>.url`.
    pub servers: BTreeMap<String, String>,
    /// `clusters.<name>.root`.
    pub clusters: BTreeMap<String, String>,
    /// `defaults`.
    pub defaults: Defaults,
    /// `profiles`.
    pub profiles: BTreeMap<String, Profile>,
    /// One line per ignored key.
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// The scope a command resolved: where it goes and which graph there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scope {
    /// Where.
    #[serde(flatten)]
    pub spec: ScopeSpec,
    /// The graph on a server (`None`: the server's default).
    pub graph: Option<String>,
    /// Where it came from: `profile <name>` or `defaults`.
    pub source: String,
}

impl OperatorConfig {
    /// Parse the YAML text of `config.yaml` (empty text: an empty config).
    pub fn parse(text: &str) -> Result<OperatorConfig> {
        let doc: Value =
            serde_saphyr::from_str(text).map_err(|e| ConfigError(format!("config.yaml is not valid YAML: {e}")))?;
        let mut cfg = OperatorConfig::default();
        let top = match doc {
            Value::Null => return Ok(cfg),
            Value::Object(m) => m,
            _ => return Err(shape("the document", "a mapping")),
        };
        for (key, value) in top {
            match key.as_str() {
                "operator" => cfg.read_operator(value)?,
                "servers" => cfg.servers = cfg.named("servers", value, "url", |u| check_url("servers", u))?,
                "clusters" => cfg.clusters = cfg.named("clusters", value, "root", |_| Ok(()))?,
                "defaults" => cfg.read_defaults(value)?,
                "profiles" => cfg.read_profiles(value)?,
                "aliases" => {
                    cfg.warnings.push("aliases: operator aliases are not supported by this build (ignored)".into())
                }
                other => cfg.warnings.push(format!("{other}: unknown key (ignored)")),
            }
        }
        Ok(cfg)
    }

    fn read_operator(&mut self, value: Value) -> Result<()> {
        for (key, v) in mapping("operator", value)? {
            match key.as_str() {
                "actor" => self.actor = Some(string(&format!("operator.{key}"), v)?),
                other => self.warnings.push(format!("operator.{other}: unknown key (ignored)")),
            }
        }
        Ok(())
    }

    /// `section.<name>.<field>` for every entry: the field's string.
    fn named(
        &mut self,
        section: &str,
        value: Value,
        field: &str,
        check: impl Fn(&str) -> Result<()>,
    ) -> Result<BTreeMap<String, String>> {
        let mut out = BTreeMap::new();
        for (name, entry) in mapping(section, value)? {
            let path = format!("{section}.{name}");
            let mut found = None;
            for (key, v) in mapping(&path, entry)? {
                if key == field {
                    found = Some(string(&format!("{path}.{key}"), v)?);
                } else if key == "token" || key == "bearer_token" {
                    self.warnings.push(format!(
                        "{path}.{key}: tokens are never read from config.yaml (ignored); use `omnigraph login {name}`"
                    ));
                } else {
                    self.warnings.push(format!("{path}.{key}: unknown key (ignored)"));
                }
            }
            let found = found.ok_or_else(|| ConfigError(format!("{path}: `{field}` is required")))?;
            check(&found)?;
            out.insert(name, found);
        }
        Ok(out)
    }

    fn read_defaults(&mut self, value: Value) -> Result<()> {
        let mut d = Defaults::default();
        for (key, v) in mapping("defaults", value)? {
            let path = format!("defaults.{key}");
            match key.as_str() {
                "output" => d.output = Some(string(&path, v)?),
                "server" => d.scope = one_scope(d.scope, ScopeSpec::Server(string(&path, v)?), "defaults")?,
                "store" => d.scope = one_scope(d.scope, ScopeSpec::Store(string(&path, v)?), "defaults")?,
                "default_graph" => d.default_graph = Some(string(&path, v)?),
                other => self.warnings.push(format!("defaults.{other}: unknown key (ignored)")),
            }
        }
        self.defaults = d;
        Ok(())
    }

    fn read_profiles(&mut self, value: Value) -> Result<()> {
        for (name, entry) in mapping("profiles", value)? {
            let path = format!("profiles.{name}");
            let (mut scope, mut default_graph) = (None, None);
            for (key, v) in mapping(&path, entry)? {
                let at = format!("{path}.{key}");
                match key.as_str() {
                    "server" => scope = one_scope(scope, ScopeSpec::Server(string(&at, v)?), &path)?,
                    "store" => scope = one_scope(scope, ScopeSpec::Store(string(&at, v)?), &path)?,
                    "cluster" => scope = one_scope(scope, ScopeSpec::Cluster(string(&at, v)?), &path)?,
                    "default_graph" => default_graph = Some(string(&at, v)?),
                    other => self.warnings.push(format!("{path}.{other}: unknown key (ignored)")),
                }
            }
            let scope =
                scope.ok_or_else(|| ConfigError(format!("{path}: binds none of `server`, `store` or `cluster`")))?;
            self.profiles.insert(name, Profile { scope, default_graph });
        }
        Ok(())
    }

    /// The scope a command uses when it names no graph itself: the profile
    /// `profile` (from `--profile` or `$OMNIGRAPH_PROFILE`) when given, else
    /// `defaults`; `None` when neither addresses anything.
    pub fn scope(&self, profile: Option<&str>) -> Result<Option<Scope>> {
        if let Some(name) = profile {
            let p = self.profiles.get(name).ok_or_else(|| {
                ConfigError(format!("unknown profile `{name}`; config.yaml defines: {}", list(self.profiles.keys())))
            })?;
            let source = format!("profile {name}");
            return Ok(Some(Scope { spec: p.scope.clone(), graph: p.default_graph.clone(), source }));
        }
        Ok(self.defaults.scope.clone().map(|spec| Scope {
            spec,
            graph: self.defaults.default_graph.clone(),
            source: "defaults".into(),
        }))
    }

    /// `--server NAME_OR_URL`: a URL as given, or the URL of a named server.
    pub fn server_url(&self, name_or_url: &str) -> Result<String> {
        if is_url(name_or_url) {
            return Ok(name_or_url.trim_end_matches('/').to_string());
        }
        self.servers.get(name_or_url).map(|u| u.trim_end_matches('/').to_string()).ok_or_else(|| {
            ConfigError(format!(
                "unknown server `{name_or_url}`: give its URL (http://HOST:PORT) or name one of config.yaml's servers ({})",
                list(self.servers.keys())
            ))
        })
    }

    /// The operator server a URL belongs to: the one whose `url` it
    /// starts with, at a path boundary (the longest such). Its keyed
    /// token may be sent there and nowhere else.
    pub fn server_for_url(&self, url: &str) -> Option<&str> {
        let url = url.trim_end_matches('/');
        self.servers
            .iter()
            .filter(|(_, base)| {
                let base = base.trim_end_matches('/');
                url.strip_prefix(base).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
            })
            .max_by_key(|(_, base)| base.len())
            .map(|(name, _)| name.as_str())
    }
}

fn one_scope(have: Option<ScopeSpec>, new: ScopeSpec, path: &str) -> Result<Option<ScopeSpec>> {
    match have {
        None => Ok(Some(new)),
        Some(_) => {
            Err(ConfigError(format!("{path}: binds more than one of `server`, `store` and `cluster`; keep one")))
        }
    }
}

fn mapping(path: &str, value: Value) -> Result<Map<String, Value>> {
    match value {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(Map::new()),
        _ => Err(shape(path, "a mapping")),
    }
}

fn string(path: &str, value: Value) -> Result<String> {
    match value {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        _ => Err(shape(path, "a string")),
    }
}

fn shape(path: &str, want: &str) -> ConfigError {
    ConfigError(format!("config.yaml: {path} must be {want}"))
}

fn check_url(section: &str, url: &str) -> Result<()> {
    if is_url(url) {
        return Ok(());
    }
    Err(ConfigError(format!("config.yaml: {section}: `{url}` is not an http:// or https:// URL")))
}

/// Whether a `--server` value is a URL (else a name).
pub fn is_url(s: &str) -> bool {
    s.starts_with("http://") || s.starts_with("https://")
}

fn list<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let names: Vec<&str> = names.map(String::as_str).collect();
    if names.is_empty() { "none".into() } else { names.join(", ") }
}

/// The environment variable holding a server's keyed token:
/// `intel-dev` → `OMNIGRAPH_TOKEN_INTEL_DEV`.
pub fn token_env_name(server: &str) -> String {
    let upper: String =
        server.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_uppercase() } else { '_' }).collect();
    format!("OMNIGRAPH_TOKEN_{upper}")
}

/// The token of `[server]` in a credentials file's text (`token = VALUE`).
pub fn credential(text: &str, server: &str) -> Option<String> {
    let mut inside = false;
    for line in text.lines().map(str::trim) {
        if let Some(name) = section(line) {
            inside = name == server;
        } else if inside && let Some((key, value)) = line.split_once('=') {
            let value = value.trim().trim_matches('"');
            if key.trim() == "token" && !value.is_empty() {
                return Some(value.to_string());
            }
        }
    }
    None
}

/// The credentials text with `[server]`'s section replaced by `token`
/// (`None` removes it); every other line kept as it was.
pub fn with_credential(text: &str, server: &str, token: Option<&str>) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if let Some(name) = section(line.trim()) {
            inside = name == server;
        }
        if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    if let Some(token) = token {
        if !out.is_empty() && !out.ends_with("\n\n") {
            out.push('\n');
        }
        out.push_str(&format!("[{server}]\ntoken = {token}\n"));
    }
    out
}

fn section(line: &str) -> Option<&str> {
    line.strip_prefix('[').and_then(|l| l.strip_suffix(']')).map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
operator:
  actor: act-andrew
servers:
  prod:
    url: https://graph.example.com
  dev:
    url: http://127.0.0.1:8080/
defaults:
  output: table
  server: prod
  default_graph: knowledge
clusters:
  brain:
    root: s3://acme/clusters/brain
profiles:
  staging: { server: dev, default_graph: knowledge }
  local: { store: ./g }
  brain-admin: { cluster: brain, default_graph: knowledge }
"#;

    #[test]
    fn the_reference_example_loads_whole_without_warnings() {
        let cfg = OperatorConfig::parse(FULL).expect("parses");
        assert_eq!(cfg.actor.as_deref(), Some("act-andrew"));
        assert_eq!(cfg.servers.get("dev").map(String::as_str), Some("http://127.0.0.1:8080/"));
        assert_eq!(cfg.clusters.get("brain").map(String::as_str), Some("s3://acme/clusters/brain"));
        assert_eq!(cfg.defaults.output.as_deref(), Some("table"));
        assert_eq!(cfg.profiles["local"].scope, ScopeSpec::Store("./g".into()));
        assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    }

    #[test]
    fn a_profile_wins_over_defaults_and_an_unknown_one_names_the_known() {
        let cfg = OperatorConfig::parse(FULL).expect("parses");
        let d = cfg.scope(None).expect("ok").expect("defaults");
        assert_eq!(
            (d.spec, d.graph.as_deref(), d.source.as_str()),
            (ScopeSpec::Server("prod".into()), Some("knowledge"), "defaults")
        );
        let p = cfg.scope(Some("staging")).expect("ok").expect("profile");
        assert_eq!((p.spec, p.source.as_str()), (ScopeSpec::Server("dev".into()), "profile staging"));
        let err = cfg.scope(Some("nope")).expect_err("unknown");
        assert!(err.0.contains("`nope`") && err.0.contains("brain-admin, local, staging"), "{err}");
        assert_eq!(OperatorConfig::parse("").expect("empty").scope(None), Ok(None));
    }

    #[test]
    fn unknown_keys_warn_and_load_but_a_wrong_shape_is_an_error() {
        let cfg = OperatorConfig::parse("future: 1\nservers:\n  a:\n    url: http://h\n    token: x\n    tls: on\n")
            .expect("loads");
        assert_eq!(cfg.servers.len(), 1);
        assert_eq!(cfg.warnings.len(), 3, "{:?}", cfg.warnings);
        assert!(cfg.warnings.iter().any(|w| w.contains("servers.a.token") && w.contains("omnigraph login a")));
        for (text, says) in [
            ("servers: [1, 2]", "servers must be a mapping"),
            ("servers:\n  a:\n    url: ftp://h\n", "not an http"),
            ("servers:\n  a: {}\n", "servers.a: `url` is required"),
            ("defaults:\n  server: a\n  store: ./g\n", "more than one"),
            ("profiles:\n  p: { default_graph: g }\n", "binds none"),
            ("operator:\n  actor: [a]\n", "operator.actor must be a string"),
            ("a: [", "not valid YAML"),
        ] {
            let err = OperatorConfig::parse(text).expect_err(text);
            assert!(err.0.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_keyed_token_belongs_only_to_urls_under_its_server() {
        let cfg = OperatorConfig::parse(FULL).expect("parses");
        assert_eq!(cfg.server_for_url("http://127.0.0.1:8080"), Some("dev"));
        assert_eq!(cfg.server_for_url("http://127.0.0.1:8080/graphs/g"), Some("dev"));
        assert_eq!(cfg.server_for_url("http://127.0.0.1:80801"), None, "a longer port is another server");
        assert_eq!(cfg.server_for_url("https://graph.example.com.evil.io"), None);
        assert_eq!(cfg.server_url("dev").expect("named"), "http://127.0.0.1:8080");
        assert_eq!(cfg.server_url("http://x:1/").expect("url"), "http://x:1");
        assert!(cfg.server_url("qa").expect_err("unknown").0.contains("dev, prod"));
        assert_eq!(token_env_name("intel-dev.eu"), "OMNIGRAPH_TOKEN_INTEL_DEV_EU");
    }

    #[test]
    fn credentials_rotate_and_remove_one_section_keeping_the_others() {
        let text = "# mine\n[prod]\ntoken = p1\n\n[dev]\ntoken = \"d1\"\n";
        assert_eq!(credential(text, "dev").as_deref(), Some("d1"));
        assert_eq!(credential(text, "qa"), None);
        let rotated = with_credential(text, "prod", Some("p2"));
        assert_eq!(
            (credential(&rotated, "prod").as_deref(), credential(&rotated, "dev").as_deref()),
            (Some("p2"), Some("d1"))
        );
        assert!(rotated.starts_with("# mine\n"), "{rotated}");
        let removed = with_credential(&rotated, "prod", None);
        assert_eq!((credential(&removed, "prod"), credential(&removed, "dev").as_deref()), (None, Some("d1")));
        assert_eq!(with_credential(&removed, "prod", None), removed, "removing twice changes nothing");
    }
}
