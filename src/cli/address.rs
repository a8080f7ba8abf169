//! How a command names its graph, in every spelling the reference
//! implementation's docs print: a positional `GRAPH`, `--store URI` or
//! `--uri URI` (one of them), a local path, `file://` or `s3://`.

use omnigraph::{OmniError, Result};

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

/// `--server URL [--graph ID]`: a running daemon instead of storage.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArg {
    /// Send the command to a running `omnigraph serve` at this URL.
    #[arg(id = "server_url", long = "server", value_name = "URL")]
    url: Option<String>,
    /// The graph's id on that server (default `default`).
    #[arg(id = "server_graph", long = "graph", value_name = "ID", requires = "server_url")]
    id: Option<String>,
}

impl ServerArg {
    /// The daemon, when `--server` was given.
    pub fn remote(&self) -> Result<Option<Remote>> {
        self.url.as_deref().map(|url| Remote::new(url, self.id.as_deref())).transpose()
    }
}

impl GraphArg {
    /// The graph's URI: whichever spelling was given. A command that
    /// reaches storage only refuses `--server` here.
    pub fn uri(&self) -> Result<&str> {
        if self.server.url.is_some() {
            return Err(OmniError::BadRequest(
                "this command works on the graph's storage (--server reaches a daemon for query, mutate, load, export, snapshot, branch, tag, commit and changes poll): name the graph with GRAPH, --store or --uri".into(),
            ));
        }
        self.store.as_deref().or(self.graph.as_deref()).ok_or_else(missing)
    }

    /// The daemon, when the graph was named by `--server`.
    pub fn remote(&self) -> Result<Option<Remote>> {
        if self.server.url.is_some() && (self.store.is_some() || self.graph.is_some()) {
            return Err(twice());
        }
        self.server.remote()
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

    /// The query name the positionals give (if any) and the graph's URI.
    pub fn resolve(&self) -> Result<(Option<&str>, &str)> {
        let p: Vec<&str> = self.positionals.iter().map(String::as_str).collect();
        match (self.store.as_deref(), p.as_slice()) {
            (Some(store), []) => Ok((None, store)),
            (Some(store), [name]) => Ok((Some(name), store)),
            (Some(store), [_, graph]) => Err(OmniError::BadRequest(format!(
                "the graph is given twice (--store {store} and {graph}): pass one of them"
            ))),
            (None, [graph]) => Ok((None, graph)),
            (None, [name, graph]) => Ok((Some(name), graph)),
            (None, _) => Err(missing()),
            (Some(_), _) => Err(OmniError::BadRequest("at most a query name and a graph are positional".into())),
        }
    }
}
