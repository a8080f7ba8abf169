//! How a command names its graph, in every spelling the reference
//! implementation's docs print: a positional `GRAPH`, `--store URI` or
//! `--uri URI` (one of them), a local path, `file://` or `s3://`; or
//! `--server NAME_OR_URL [--graph ID]`. A command that names none uses the
//! operator's scope (`--profile`, else config.yaml's `defaults`): an
//! explicit address always wins.

use omnigraph::{OmniError, Result};
use omnigraph_core::operator_config::{Scope, ScopeSpec};

use super::operator;
use super::remote::Remote;

/// The graph a command addresses.
#[derive(clap::Args, Debug, Clone)]
pub struct GraphArg {
    /// The graph, as the reference spells it (`--uri` is the same flag).
    #[arg(long = "store", visible_alias = "uri", value_name = "URI", conflicts_with = "graph")]
    store: Option<String>,
    /// The graph: a directory, file:// or s3:// URI (or --store / --uri).
    #[arg(value_name = "GRAPH")]
    graph: Option<String>,
    #[command(flatten)]
    server: ServerArg,
}

/// `--server NAME_OR_URL [--graph ID]`: a running daemon instead of storage.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArg {
    /// Send the command to a running `omnigraph serve`: its URL, or the
    /// name of a server in ~/.omnigraph/config.yaml.
    #[arg(id = "server_url", long = "server", value_name = "NAME|URL")]
    url: Option<String>,
    /// The graph's id on that server (default: the profile's or
    /// defaults' `default_graph`, else `default`).
    #[arg(id = "server_graph", long = "graph", value_name = "ID")]
    id: Option<String>,
}

impl ServerArg {
    /// The daemon: `--server`, else the operator scope's server.
    pub fn remote(&self) -> Result<Option<Remote>> {
        match self.url.as_deref() {
            Some(server) => Remote::new(server, self.id.as_deref()).map(Some),
            None => self.scope_remote(),
        }
    }

    /// The operator scope's server (with `--graph` over its default graph);
    /// `None` when the scope is storage or absent.
    fn scope_remote(&self) -> Result<Option<Remote>> {
        match operator::fallback_scope()? {
            Some(Scope { spec: ScopeSpec::Server(server), graph, .. }) => {
                Remote::new(server, self.id.as_deref().or(graph.as_deref())).map(Some)
            }
            Some(scope @ Scope { spec: ScopeSpec::Cluster(_), .. }) => Err(cluster_scope(scope)),
            _ => Ok(None),
        }
    }

    /// The operator scope's storage, for a command that names no graph.
    fn scope_store(&self) -> Result<&'static str> {
        if self.id.is_some() {
            return Err(OmniError::BadRequest(
                "--graph ID selects a graph on a server: give --server NAME_OR_URL too, or name the graph's storage"
                    .into(),
            ));
        }
        match operator::fallback_scope()? {
            Some(Scope { spec: ScopeSpec::Store(uri), .. }) => Ok(uri),
            Some(scope @ Scope { spec: ScopeSpec::Cluster(_), .. }) => Err(cluster_scope(scope)),
            Some(scope) => Err(OmniError::BadRequest(format!(
                "{} names a server, and this command works on the graph's storage: name it with GRAPH, --store or --uri",
                who(scope)
            ))),
            None => Err(missing()),
        }
    }
}

fn cluster_scope(scope: &Scope) -> OmniError {
    OmniError::BadRequest(format!(
        "{} names a cluster, which this build does not manage: name the graph's storage with --store, or a server with --server",
        who(scope)
    ))
}

/// Where a scope came from, as a message names it.
fn who(scope: &Scope) -> String {
    match scope.source.as_str() {
        "defaults" => "`defaults` in config.yaml".into(),
        profile => profile.to_string(),
    }
}

/// Whether a lone positional names a graph (a URI or an existing path)
/// rather than a query: read so only when a scope could supply the graph.
fn looks_like_graph(positional: &str) -> bool {
    positional.contains("://") || std::path::Path::new(positional).exists()
}

impl GraphArg {
    /// The graph's URI: whichever spelling was given. A command that
    /// reaches storage only refuses `--server` here.
    pub fn uri(&self) -> Result<&str> {
        if self.server.url.is_some() {
            return Err(OmniError::BadRequest(
                "this command works on the graph's storage (--server reaches a daemon for query, mutate, load, export, snapshot, branch, tag, commit, changes, diff, history, blame and schema): name the graph with GRAPH, --store or --uri".into(),
            ));
        }
        match self.store.as_deref().or(self.graph.as_deref()) {
            Some(uri) => Ok(uri),
            None => self.server.scope_store(),
        }
    }

    /// The daemon, when the graph was named by `--server` or, naming no
    /// storage, by the operator's scope.
    pub fn remote(&self) -> Result<Option<Remote>> {
        let storage = self.store.is_some() || self.graph.is_some();
        match (self.server.url.is_some(), storage) {
            (true, true) => Err(twice()),
            (false, true) => Ok(None),
            _ => self.server.remote(),
        }
    }

    /// `[REF] GRAPH` after a command's own positionals (`tag create NAME
    /// [REF] GRAPH`), `first` being the positional before `GRAPH`: without
    /// a flag, one positional is the graph and two are the ref and the
    /// graph. The ref (if any) and the graph's URI.
    pub fn after_optional<'a>(&'a self, first: Option<&'a str>) -> Result<(Option<&'a str>, &'a str)> {
        match (self.store.is_some() || self.graph.is_some(), first) {
            (false, Some(only)) => Ok((None, only)),
            (_, first) => Ok((first, self.uri()?)),
        }
    }
}

fn twice() -> OmniError {
    OmniError::BadRequest("the graph is given twice (--server and storage): pass one".into())
}

fn missing() -> OmniError {
    OmniError::BadRequest("no graph given: name it as GRAPH, --store URI or --uri URI".into())
}

/// `[NAME] [GRAPH]` of `query` and `mutate`: with `--store`/`--uri` the one
/// positional is the query's name; without, one positional is the graph
/// and two are the name and the graph.
#[derive(clap::Args, Debug, Clone)]
pub struct NamedGraphArg {
    /// The graph, as the reference spells it (`--uri` is the same flag).
    #[arg(long = "store", visible_alias = "uri", value_name = "URI")]
    store: Option<String>,
    /// `[NAME] GRAPH`: the query of the file to run (default: its only
    /// query, or --name) and the graph (unless --store / --uri).
    #[arg(value_name = "NAME|GRAPH", num_args = 0..=2)]
    positionals: Vec<String>,
    #[command(flatten)]
    server: ServerArg,
}

impl NamedGraphArg {
    /// The daemon, when the graph was named by `--server` (then the one
    /// positional is the query's name).
    pub fn remote(&self) -> Result<Option<(Option<&str>, Remote)>> {
        if self.server.url.is_none() && (self.store.is_some() || self.names_storage()) {
            return Ok(None);
        }
        let Some(remote) = self.server.remote()? else { return Ok(None) };
        match self.positionals.as_slice() {
            [] => Ok(Some((None, remote))),
            _ if self.store.is_some() => Err(twice()),
            [name] => Ok(Some((Some(name.as_str()), remote))),
            _ => Err(OmniError::BadRequest(
                "with --server, the graph is on the server: give only the query's name positionally".into(),
            )),
        }
    }

    /// Whether the positionals name the graph's storage: two of them, or
    /// one that [`looks_like_graph`].
    fn names_storage(&self) -> bool {
        match self.positionals.as_slice() {
            [one] => looks_like_graph(one),
            more => more.len() > 1,
        }
    }

    /// The query name the positionals give (if any) and the graph's URI.
    pub fn resolve(&self) -> Result<(Option<&str>, &str)> {
        let p: Vec<&str> = self.positionals.iter().map(String::as_str).collect();
        match (self.store.as_deref(), p.as_slice()) {
            (Some(store), []) => Ok((None, store)),
            (Some(store), [name]) => Ok((Some(name), store)),
            (Some(store), [_, graph]) => Err(OmniError::BadRequest(format!(
                "the graph is given twice (--store {store} and {graph}): pass one of them"
            ))),
            (None, [one]) if !looks_like_graph(one) && self.server.url.is_none() => match self.server.scope_store() {
                Ok(store) => Ok((Some(one), store)),
                Err(_) => Ok((None, one)),
            },
            (None, [graph]) => Ok((None, graph)),
            (None, [name, graph]) => Ok((Some(name), graph)),
            (None, []) => self.server.scope_store().map(|store| (None, store)),
            (None, _) => Err(missing()),
            (Some(_), _) => Err(OmniError::BadRequest("at most a query name and a graph are positional".into())),
        }
    }
}
