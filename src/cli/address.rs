//! How a command names its graph, in every spelling the reference
//! implementation's docs print: a positional `GRAPH`, `--store URI` or
//! `--uri URI` (one of them), a local path, `file://` or `s3://`.

use omnigraph::{OmniError, Result};

/// The graph a command addresses.
#[derive(clap::Args, Debug, Clone)]
pub struct GraphArg {
    /// The graph, as the reference spells it (`--uri` is the same flag).
    #[arg(long = "store", visible_alias = "uri", value_name = "URI", conflicts_with = "graph")]
    store: Option<String>,
    /// The graph: a directory, file:// or s3:// URI (or --store / --uri).
    #[arg(value_name = "GRAPH")]
    graph: Option<String>,
}

impl GraphArg {
    /// The graph's URI: whichever spelling was given.
    pub fn uri(&self) -> Result<&str> {
        self.store.as_deref().or(self.graph.as_deref()).ok_or_else(missing)
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

    /// A graph named by `uri` (no flag).
    pub fn at(uri: &str) -> GraphArg {
        GraphArg { store: None, graph: Some(uri.to_string()) }
    }
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
}

impl NamedGraphArg {
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
