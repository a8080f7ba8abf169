//! The `omnigraph` command-line interface.

// Deeply nested async state machines (Lance + DataFusion futures) exceed the
// default layout query depth on a cold build.
#![recursion_limit = "512"]

use std::process::ExitCode;

/// jemalloc: see the dependency's note in Cargo.toml.
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's counters (`/healthz?verbose=true` shows them as
/// `memory.allocator`); `None` if jemalloc cannot say.
#[cfg(all(unix, not(target_env = "musl")))]
fn allocator_stats() -> Option<omnigraph::AllocatorReport> {
    use tikv_jemalloc_ctl::{epoch, stats};
    // The counters are a snapshot taken at the last epoch: take a new one.
    epoch::advance().ok()?;
    let bytes = |v: usize| v as u64;
    Some(omnigraph::AllocatorReport {
        allocated: bytes(stats::allocated::read().ok()?),
        active: bytes(stats::active::read().ok()?),
        resident: bytes(stats::resident::read().ok()?),
        metadata: bytes(stats::metadata::read().ok()?),
        retained: bytes(stats::retained::read().ok()?),
    })
}

/// No jemalloc here: no counters.
#[cfg(not(all(unix, not(target_env = "musl"))))]
fn allocator_stats() -> Option<omnigraph::AllocatorReport> {
    None
}

/// `print!` that ends the process as Unix tools do when stdout is a pipe
/// its reader closed (`omnigraph … | head`), instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            crate::stdout_failed(e);
        }
    }};
}

/// `println!` through [`out!`].
macro_rules! outln {
    () => {
        out!("\n")
    };
    ($($arg:tt)*) => {
        out!("{}\n", format_args!($($arg)*))
    };
}

/// Stdout is gone: a closed pipe exits 141 (as a SIGPIPE death would) with
/// nothing printed; any other failure is reported. The command's effects
/// are already durable when it prints.
fn stdout_failed(e: std::io::Error) -> ! {
    if e.kind() != std::io::ErrorKind::BrokenPipe {
        eprintln!("error: writing to stdout: {e}");
        std::process::exit(1);
    }
    std::process::exit(141);
}

#[path = "cli/address.rs"]
mod address;
#[path = "cli/changes.rs"]
mod changes_cli;
#[path = "cli/history.rs"]
mod history_cli;
#[path = "cli/mcp.rs"]
mod mcp_cli;
#[path = "cli/operator.rs"]
mod operator;
#[path = "cli/policy.rs"]
mod policy_cli;
#[path = "cli/queries.rs"]
mod queries_cli;
#[path = "cli/remote.rs"]
mod remote;
#[path = "cli/schema.rs"]
mod schema_cli;
#[path = "cli/write_target.rs"]
mod write_target;

use address::{GraphArg, NamedGraphArg};
use clap::{Parser, Subcommand};
use omnigraph::engine::query::Insight;
use omnigraph::engine::storage::durability;
use omnigraph::{Graph, LoadMode, OmniError, Omnigraph, OpenMode, ReadTarget, Result, WriteOptions, wire};
use schema_cli::SchemaCommand;
use write_target::WriteTarget;

#[derive(Parser)]
#[command(name = "omnigraph", version, disable_version_flag = true, about = "A typed property-graph database on Lance")]
struct Cli {
    /// Print the version.
    #[arg(short = 'v', visible_short_alias = 'V', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
    /// A storage option KEY=VALUE for object-store graphs (repeatable; e.g.
    /// aws_endpoint=http://127.0.0.1:9000, allow_http=true). Overrides the
    /// AWS_* environment.
    #[arg(long = "storage-option", global = true, value_name = "KEY=VALUE")]
    storage_options: Vec<String>,
    /// Whether a write to a local graph is synced to disk before it is
    /// acknowledged: `fsync` (default) or `none` (survives a crash of the
    /// process, not of the machine). Also OMNIGRAPH_DURABILITY; see
    /// docs/storage.md, "Durability".
    #[arg(long, global = true, value_name = "fsync|none", value_parser = durability_arg)]
    durability: Option<omnigraph::Durability>,
    /// No target echo and no progress on stderr.
    #[arg(long, short = 'q', global = true)]
    quiet: bool,
    /// Consent to a destructive write on a remote graph (an overwrite load,
    /// a branch delete, a confirmed cleanup) without a prompt.
    #[arg(long, global = true)]
    yes: bool,
    /// The operator profile (~/.omnigraph/config.yaml `profiles`) whose
    /// scope a command uses when it names no graph; also OMNIGRAPH_PROFILE.
    /// Bare (no NAME, written last or before another flag) on `query`: run
    /// the query and print its plan with each operator's rows and time.
    #[arg(long, global = true, value_name = "NAME", num_args = 0..=1, default_missing_value = "")]
    profile: Option<String>,
    /// A policy bundle (the reference's policy.yaml): `serve` decides every
    /// request by it; a write on a local graph runs only if it allows the
    /// actor (`--as`, else `operator.actor`) the write (docs/policy.md).
    #[arg(long, global = true, value_name = "FILE")]
    policy: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a shell completion script (source it, or install it where the
    /// shell loads completions).
    #[command(
        after_help = "Example:\n  omnigraph completions bash > ~/.local/share/bash-completion/completions/omnigraph"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Store a server's bearer token in ~/.omnigraph/credentials (0600):
    /// from --token, or one line on stdin.
    #[command(after_help = "Example:\n  omnigraph login prod <<< \"$TOKEN\"")]
    Login {
        /// The server's name in ~/.omnigraph/config.yaml `servers`.
        name: String,
        /// The token (stdin keeps it out of the shell's history).
        #[arg(long)]
        token: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a server's token from ~/.omnigraph/credentials (no token is
    /// not an error).
    #[command(after_help = "Example:\n  omnigraph logout prod")]
    Logout {
        /// The server's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The operator profiles of ~/.omnigraph/config.yaml (read-only).
    #[command(after_help = "Example:\n  omnigraph profile list --json")]
    Profile {
        #[command(subcommand)]
        command: ProfileCommand,
    },
    /// The graphs a running daemon serves.
    #[command(after_help = "Example:\n  omnigraph graphs list --server http://127.0.0.1:8080")]
    Graphs {
        #[command(subcommand)]
        command: GraphsCommand,
    },
    /// Print the version and the storage format this build reads and writes.
    #[command(after_help = "Example:\n  omnigraph version")]
    Version,
    /// Create a graph from a .pg schema.
    #[command(after_help = "Example:\n  omnigraph init --schema schema.pg graph.omni")]
    Init {
        /// The .pg schema file.
        #[arg(long)]
        schema: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Where to create the graph (directory, file:// or s3:// URI).
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Show every table's version and row count at a branch head.
    #[command(after_help = "Example:\n  omnigraph snapshot graph.omni --branch main --json")]
    Snapshot {
        /// Graph branch.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Load a JSONL file as one atomic commit.
    #[command(
        after_help = "Example:\n  omnigraph load --data people.jsonl --mode merge --branch review --from main graph.omni"
    )]
    Load {
        /// The JSONL file (`-` for stdin).
        #[arg(long)]
        data: String,
        /// append (strict insert), merge (upsert) or overwrite (replace each touched type).
        #[arg(long)]
        mode: String,
        /// Create `--branch` from this branch first if it does not exist.
        #[arg(long)]
        from: Option<String>,
        #[command(flatten)]
        write: WriteArgs,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Run a .gq read query at a branch head or a commit.
    #[command(alias = "read")]
    #[command(
        after_help = "Example:\n  omnigraph query get_person --query queries.gq --params '{\"name\":\"Alice\"}' --store graph.omni"
    )]
    Query {
        #[command(flatten)]
        source: SourceArgs,
        /// Parameters as a JSON object.
        #[arg(long, conflicts_with = "params_file")]
        params: Option<String>,
        /// Parameters from a JSON file.
        #[arg(long = "params-file")]
        params_file: Option<String>,
        /// Read the head of this branch (default main).
        #[arg(long, conflicts_with = "commit")]
        branch: Option<String>,
        /// Read at this commit (time travel; any ref).
        #[arg(long, conflicts_with = "snapshot")]
        commit: Option<String>,
        /// Read at this ref (the reference's spelling of --commit).
        #[arg(long, value_name = "REF", conflicts_with = "branch")]
        snapshot: Option<String>,
        /// table, json, jsonl or csv (default: config.yaml's
        /// `defaults.output`, else table).
        #[arg(long)]
        format: Option<String>,
        /// Same as --format json.
        #[arg(long)]
        json: bool,
        /// Print the plan the query would run, without running its result
        /// (a bare --profile runs it and adds each operator's figures).
        #[arg(long)]
        explain: bool,
        /// Set by a bare global `--profile`.
        #[arg(skip)]
        profile: bool,
        #[command(flatten)]
        limits: ReadLimitArgs,
        #[command(flatten)]
        at: NamedGraphArg,
    },
    /// Run a .gq mutation as one atomic commit.
    #[command(alias = "change")]
    #[command(
        after_help = "Example:\n  omnigraph mutate --store graph.omni -e 'query add($n: String) { insert Person { name: $n } }' --params '{\"n\":\"Ada\"}'"
    )]
    Mutate {
        #[command(flatten)]
        source: SourceArgs,
        /// Parameters as a JSON object.
        #[arg(long)]
        params: Option<String>,
        #[command(flatten)]
        write: WriteArgs,
        #[command(flatten)]
        at: NamedGraphArg,
    },
    /// Serve graphs over HTTP.
    #[command(after_help = "Example:\n  omnigraph serve --bind 127.0.0.1:8080 --graph knowledge=graph.omni")]
    Serve {
        /// Address to bind (port 0 picks one and prints it).
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: String,
        /// ID=ROOT, repeatable. Without any: one graph `default` at ./omnigraph.graph,
        /// created from the bundled example schema if absent.
        #[arg(long = "graph")]
        graphs: Vec<String>,
        /// Serve without bearer tokens.
        #[arg(long)]
        unauthenticated: bool,
        /// ID=FILE: the policy bundle of one graph (instead of --policy's),
        /// repeatable.
        #[arg(long = "graph-policy", value_name = "ID=FILE")]
        graph_policies: Vec<String>,
        /// Where no policy applies, refuse every action but `read` (403).
        #[arg(long)]
        default_deny: bool,
        /// A directory of `.gq` files whose queries every graph serves by
        /// name (`POST /graphs/{id}/queries/{name}`); each must type-check
        /// against the graph's schema or the start stops.
        #[arg(long, value_name = "DIR")]
        queries: Option<String>,
        /// ID=DIR: one graph's stored queries (instead of --queries'), repeatable.
        #[arg(long = "graph-queries", value_name = "ID=DIR")]
        graph_queries: Vec<String>,
        /// Serve MCP (streamable HTTP) at `/graphs/{id}/mcp` and `/mcp`:
        /// the stored queries and read-only tools, as the caller's token.
        #[arg(long)]
        mcp: bool,
        /// Concurrent writes allowed per actor before 429.
        #[arg(long, default_value_t = 16)]
        max_inflight_writes: usize,
        /// The graph the flat routes (`/snapshot`, `/query`, …) serve when
        /// several are served (with one, it is that one).
        #[arg(long)]
        default_graph: Option<String>,
        #[command(flatten)]
        limits: ReadLimitArgs,
        /// A JSON file of per-graph storage options,
        /// `{"graphs": {"ID": {"KEY": "VALUE", ...}}}`; they override
        /// `--storage-option` and the environment for that graph.
        #[arg(long)]
        storage_config: Option<String>,
        /// Serve as a read replica: open every graph read-only, never write
        /// to storage (no recovery, no compaction), answer writes 403.
        #[arg(long)]
        read_only: bool,
        /// Memory the daemon's caches may use together (`512MiB`, `2GiB`, bytes;
        /// default a quarter of the machine's memory); see docs/operations.md.
        #[arg(long, value_name = "SIZE", value_parser = memory_size)]
        memory_budget: Option<u64>,
        /// With --read-only: how old (ms) a replica's view of the branch heads
        /// may be before it looks at storage again (`POST
        /// /graphs/{id}/refresh` refreshes at once).
        #[arg(long, default_value_t = 1000, requires = "read_only")]
        refresh_interval_ms: u64,
        /// Seconds a connection gets to send a complete request head (also
        /// how long a keep-alive connection may sit idle) before it is closed.
        #[arg(long, value_name = "SECS", value_parser = at_least_one::<u64>,
              default_value_t = omnigraph::server::ServerConfig::DEFAULT_HEADER_TIMEOUT.as_secs())]
        header_timeout: u64,
        /// Connections served at once (at most half the open-files limit);
        /// one more is closed at once, never queued.
        #[arg(long, value_name = "N", value_parser = at_least_one::<usize>,
              default_value_t = omnigraph::server::ServerConfig::DEFAULT_MAX_CONNECTIONS)]
        max_connections: usize,
        /// Seconds in-flight requests get to finish after SIGINT/SIGTERM
        /// before their connections are dropped and the daemon exits.
        #[arg(long, value_name = "SECS",
              default_value_t = omnigraph::server::ServerConfig::DEFAULT_SHUTDOWN_TIMEOUT.as_secs())]
        shutdown_timeout: u64,
        /// Rows a table may hold outside an index its schema declares (written
        /// since a fold, or all of them where the index is missing) before the
        /// daemon folds them in (or builds it), in the background; 0 never
        /// does (`optimize` and `index ensure` still do). Default: 10,000 on a
        /// local graph, 500 on object storage.
        #[arg(long, value_name = "ROWS")]
        index_lag_rows: Option<u64>,
    },
    /// Write a branch head (or a commit) as the JSONL `load` reads, ids included.
    #[command(after_help = "Example:\n  omnigraph export graph.omni --branch main --type Person > people.jsonl")]
    Export {
        /// Branch to export (default main).
        #[arg(long, conflicts_with = "commit")]
        branch: Option<String>,
        /// Export the graph as of this commit instead.
        #[arg(long)]
        commit: Option<String>,
        /// Only this node or edge type (repeatable).
        #[arg(long = "type")]
        types: Vec<String>,
        /// Write to this file instead of stdout.
        #[arg(long)]
        out: Option<String>,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Inspect recovery: pending sidecars and the audit log.
    #[command(after_help = "Example:\n  omnigraph recovery list --json graph.omni")]
    Recovery {
        #[command(subcommand)]
        command: RecoveryCommand,
    },
    /// Indexes: build the ones the schema asks for.
    #[command(after_help = "Example:\n  omnigraph index status graph.omni")]
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Compact a branch's tables and `__manifest` into few fragments: one
    /// maintenance commit (none when nothing needed it), then build missing
    /// indexes; queries answer the same.
    #[command(after_help = "Example:\n  omnigraph optimize --json graph.omni")]
    Optimize {
        /// Graph branch to optimize.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Actor recorded on the commit.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON (the fields of `POST /graphs/{id}/optimize`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Remove old versions no retained commit reads (version GC). Without
    /// --confirm, only prints what it would remove.
    #[command(after_help = "Example:\n  omnigraph cleanup --keep 10 --older-than 7d --confirm graph.omni")]
    Cleanup {
        /// Keep the newest N commits of every branch readable (time travel).
        #[arg(long)]
        keep: Option<usize>,
        /// Keep every commit younger than this (`30s`, `15m`, `12h`, `7d`, `2w`).
        #[arg(long = "older-than")]
        older_than: Option<String>,
        /// The reflog window (default 7d): deleted branches older than it
        /// are purged for good, heads a reset left inside it stay readable.
        #[arg(long = "reflog-expiry")]
        reflog_expiry: Option<String>,
        /// Delete (otherwise a dry run).
        #[arg(long)]
        confirm: bool,
        /// Print JSON (the fields of `POST /graphs/{id}/cleanup`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Classify (and with --confirm publish) Lance HEAD drift no write recorded.
    #[command(after_help = "Example:\n  omnigraph repair --json graph.omni")]
    Repair {
        /// Publish verified maintenance drift.
        #[arg(long)]
        confirm: bool,
        /// With --confirm, also publish suspicious drift.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Create, list and delete graph branches.
    #[command(after_help = "Example:\n  omnigraph branch create review --from main graph.omni")]
    Branch {
        #[command(subcommand)]
        command: BranchCommand,
    },
    /// Inspect the commit graph.
    #[command(after_help = "Example:\n  omnigraph commit list --branch main --limit 5 graph.omni")]
    Commit {
        #[command(subcommand)]
        command: CommitCommand,
    },
    /// Every move of a branch head, newest first: commits, resets, creates
    /// and deletes (the old head of each, to go back to).
    #[command(after_help = "Example:\n  omnigraph reflog --branch feature graph.omni")]
    Reflog {
        /// Only this branch's moves (a deleted branch's too).
        #[arg(long)]
        branch: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON: {entries: [{branch, old_head, new_head, operation, actor_id, at}]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// What changed between two refs, entity by entity.
    #[command(after_help = "Example:\n  omnigraph diff main~1 main --stat graph.omni")]
    Diff {
        /// Counts per type only.
        #[arg(long)]
        stat: bool,
        /// Only these types (repeatable).
        #[arg(long = "type")]
        types: Vec<String>,
        /// Only nodes or only edges.
        #[arg(long, value_parser = ["node", "edge"])]
        kind: Option<String>,
        /// Only these ops: insert, update, delete (repeatable).
        #[arg(long = "op")]
        ops: Vec<String>,
        /// The page after the one that handed out this token.
        #[arg(long)]
        page_token: Option<String>,
        /// Changes per page (default 1000, at most 10000).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON: {from, to, changes, next_page_token?} (with --stat: {from, to, stats}).
        #[arg(long)]
        json: bool,
        /// The ref diffed from.
        from: String,
        /// The ref diffed to.
        to: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Follow a branch's changes: `changes poll` for the blocks after a
    /// cursor, `changes baseline` for a snapshot to start from.
    #[command(after_help = "Example:\n  omnigraph changes poll --start beginning --wait 30 --json graph.omni")]
    Changes {
        #[command(subcommand)]
        command: changes_cli::ChangesCommand,
    },
    /// The commits on a branch that changed one entity, newest first
    /// (`--json`: {entries: [{graph_commit_id, actor_id, authored_at, op,
    /// before, after}]}).
    #[command(after_help = "Example:\n  omnigraph history Person Alice --property age graph.omni")]
    History {
        /// Only commits that changed this property.
        #[arg(long)]
        property: Option<String>,
        /// At most this many entries.
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        entity: history_cli::EntityArgs,
    },
    /// For each property of an entity, the commit that last set it
    /// (`--json`: {type, id, properties: [{property, graph_commit_id,
    /// actor_id, authored_at}]}).
    #[command(after_help = "Example:\n  omnigraph blame Person Alice graph.omni")]
    Blame {
        #[command(flatten)]
        entity: history_cli::EntityArgs,
    },
    /// Create, list and delete tags: immutable names for commits.
    #[command(after_help = "Example:\n  omnigraph tag create v1 main -m \"first release\" graph.omni")]
    Tag {
        #[command(subcommand)]
        command: TagCommand,
    },
    /// Compile every query in a .gq file against a schema or a graph's schema.
    #[command(alias = "check")]
    #[command(after_help = "Example:\n  omnigraph lint --query queries.gq --schema schema.pg --json")]
    Lint {
        /// The .gq file.
        #[arg(long)]
        query: String,
        /// A .pg schema file to check against (instead of a graph).
        #[arg(long, conflicts_with = "graph")]
        schema: Option<String>,
        /// Print JSON: per query its diagnostics, params, result columns, reads and writes.
        #[arg(long)]
        json: bool,
        /// A graph whose accepted schema to check against.
        #[arg(required_unless_present = "schema")]
        graph: Option<String>,
    },
    /// Inspect the accepted schema.
    #[command(after_help = "Example:\n  omnigraph schema plan --schema next.pg graph.omni")]
    Schema {
        #[command(subcommand)]
        command: SchemaCommand,
    },
    /// List and check a directory of stored queries (offline).
    #[command(after_help = "Example:\n  omnigraph queries validate queries/ --schema schema.pg")]
    Queries {
        #[command(subcommand)]
        command: queries_cli::QueriesCommand,
    },
    /// Check policy bundles, run their tests, explain a decision (offline).
    #[command(after_help = "Example:\n  omnigraph policy test policy.yaml --tests policy.tests.yaml")]
    Policy {
        #[command(subcommand)]
        command: policy_cli::PolicyCommand,
    },
    /// An MCP server on stdio for a running daemon: its stored queries and
    /// read-only tools, called over HTTP with this process's token.
    #[command(
        after_help = "Example:\n  omnigraph mcp --server http://127.0.0.1:8080 --graph social\n(the token: config.yaml's `servers` entry, else OMNIGRAPH_BEARER_TOKEN)"
    )]
    Mcp {
        /// The daemon (a URL, or a `servers` name of config.yaml).
        #[arg(long)]
        server: String,
        /// The graph on it (default `default`).
        #[arg(long)]
        graph: Option<String>,
    },
}

/// The limits a read query runs under (0 = no limit; the defaults are
/// 30 s, 10,000,000 rows and 2 GiB).
#[derive(clap::Args)]
struct ReadLimitArgs {
    /// Stop a read query after this many milliseconds.
    #[arg(long)]
    query_timeout_ms: Option<u64>,
    /// Refuse a read query once any intermediate result holds more rows.
    #[arg(long)]
    query_max_rows: Option<u64>,
    /// Memory a read query's execution may reserve, in bytes.
    #[arg(long)]
    query_memory_bytes: Option<u64>,
}

impl ReadLimitArgs {
    fn limits(&self) -> omnigraph::engine::read_limits::ReadLimits {
        let d = omnigraph::engine::read_limits::ReadLimits::default();
        let pick = |given: Option<u64>, default: Option<u64>| match given {
            Some(0) => None,
            Some(n) => Some(n),
            None => default,
        };
        omnigraph::engine::read_limits::ReadLimits {
            time_budget_ms: pick(self.query_timeout_ms, d.time_budget_ms),
            max_rows: pick(self.query_max_rows, d.max_rows),
            memory_bytes: pick(self.query_memory_bytes, d.memory_bytes),
        }
    }
}

/// Where a query's `.gq` source comes from.
#[derive(clap::Args)]
struct SourceArgs {
    /// The .gq file.
    #[arg(long, conflicts_with = "expr", required_unless_present = "expr")]
    query: Option<String>,
    /// Inline .gq source.
    #[arg(short = 'e', long = "expr")]
    expr: Option<String>,
    /// Which query of the file to run.
    #[arg(long)]
    name: Option<String>,
}

impl SourceArgs {
    /// The query's name (positional `NAME` or `--name`, one of them) and
    /// the graph, from a command's `[NAME] [GRAPH]` and address flags.
    fn name_at<'a>(&'a self, at: &'a NamedGraphArg) -> Result<(Option<&'a str>, &'a str)> {
        let (positional, graph) = at.resolve()?;
        Ok((self.one_name(positional)?, graph))
    }

    /// The query's name from a positional `NAME` or `--name` (one of them).
    fn one_name<'a>(&'a self, positional: Option<&'a str>) -> Result<Option<&'a str>> {
        match (positional, self.name.as_deref()) {
            (Some(a), Some(b)) if a != b => {
                Err(OmniError::BadRequest(format!("the query is named twice (`{a}` and --name `{b}`): pass one")))
            }
            (a, b) => Ok(a.or(b)),
        }
    }

    fn text(&self) -> Result<String> {
        match (&self.query, &self.expr) {
            (Some(path), _) => read_file(path),
            (None, Some(text)) => Ok(text.clone()),
            (None, None) => Err(OmniError::BadRequest("pass --query FILE or -e TEXT".into())),
        }
    }
}

/// Options shared by the write commands.
#[derive(clap::Args)]
struct WriteArgs {
    /// Graph branch to write.
    #[arg(long, default_value = "main")]
    branch: String,
    /// Write only if the branch head is exactly this commit.
    #[arg(long = "if-commit")]
    if_commit: Option<String>,
    /// Actor recorded on the commit.
    #[arg(long = "as")]
    actor: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

impl WriteArgs {
    /// The write's options; the actor is `--as`, else `operator.actor`.
    fn options(&self) -> Result<WriteOptions> {
        let actor = operator::actor(self.actor.as_deref())?;
        Ok(WriteOptions { branch: self.branch.clone(), actor, if_commit: self.if_commit.clone() })
    }

    /// Refuse what a daemon decides itself: the actor is its token's, and
    /// (for `load`) it takes no head precondition.
    fn check_remote(&self, command: &str, if_commit_ok: bool) -> Result<()> {
        if self.actor.is_some() {
            return Err(OmniError::BadRequest(format!(
                "{command} --as: through a server the actor is the one its token names; drop --as"
            )));
        }
        if self.if_commit.is_some() && !if_commit_ok {
            return Err(OmniError::BadRequest(format!("{command} --if-commit does not run through a server")));
        }
        Ok(())
    }
}

#[derive(Subcommand)]
enum ProfileCommand {
    /// Every profile, with the scope it binds.
    #[command(after_help = "Example:\n  omnigraph profile list")]
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// One profile, or (without NAME) the scope a command naming no graph
    /// uses now: --profile / OMNIGRAPH_PROFILE, else `defaults`.
    #[command(after_help = "Example:\n  omnigraph profile show staging")]
    Show {
        /// The profile.
        name: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum GraphsCommand {
    /// Every graph the server at --server serves: `{graphs: [{graph_id, uri}]}`.
    #[command(after_help = "Example:\n  omnigraph graphs list --server http://127.0.0.1:8080 --json")]
    List {
        /// The daemon: its URL or a server's name in config.yaml (default:
        /// the profile's or defaults' server).
        #[arg(long, value_name = "NAME|URL")]
        server: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum IndexCommand {
    /// Build every index the schema derives that a branch's tables lack, as
    /// one commit (none when nothing is missing).
    #[command(after_help = "Example:\n  omnigraph index ensure --branch main graph.omni")]
    Ensure {
        /// Graph branch.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Actor recorded on the commit.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON (the fields of `POST /graphs/{id}/indexes/ensure`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// How much of its table each index covers at a branch's head: rows
    /// written since a build are scanned beside the index until `optimize`,
    /// `index ensure` or the daemon's background fold covers them.
    #[command(after_help = "Example:\n  omnigraph index status --json graph.omni")]
    Status {
        /// Graph branch.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print JSON (the fields of `GET /graphs/{id}/indexes`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
}

#[derive(Subcommand)]
enum RecoveryCommand {
    /// Pending sidecars (after a recovery sweep, unless --read-only) and the audit log.
    #[command(after_help = "Example:\n  omnigraph recovery list --read-only graph.omni")]
    List {
        /// Do not run the read-write recovery sweep first.
        #[arg(long = "read-only")]
        read_only: bool,
        /// Print JSON: {"pending": [...], "audit": [...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
}

#[derive(Subcommand)]
enum BranchCommand {
    /// Create a branch at the current head of another (default main).
    #[command(after_help = "Example:\n  omnigraph branch create --from main feature-x --store graph.omni")]
    Create {
        /// The branch to start from.
        #[arg(long, default_value = "main")]
        from: String,
        /// Actor recorded in the reflog.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The new branch's name (`/`-separated segments of letters, digits, `.`, `-`, `_`).
        name: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Every live branch, main first.
    #[command(after_help = "Example:\n  omnigraph branch list --uri graph.omni")]
    List {
        /// Print JSON: {"branches": [...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Merge a branch's head into another (default main): one merge commit
    /// on the target, or nothing when it is up to date. Conflicts are listed
    /// together and nothing is written.
    #[command(after_help = "Example:\n  omnigraph branch merge feature-x --into main --delete-branch graph.omni")]
    Merge {
        /// The branch that receives the merge.
        #[arg(long = "into", default_value = "main")]
        into: String,
        /// Delete the source branch after a successful merge.
        #[arg(long)]
        delete_branch: bool,
        /// Report the outcome, per-table counts and conflicts; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// One commit on the target with the source's net changes and no
        /// merged parent (the source branch is untouched).
        #[arg(long)]
        squash: bool,
        /// Actor recorded on the merge commit.
        #[arg(long = "as")]
        actor: Option<String>,
        /// How row conflicts are decided: `fail` refuses the merge,
        /// `ours` keeps the target's side, `theirs` takes the source's.
        /// Without it, the schema's `@merge` policies decide (refused where
        /// there is none); given, it overrides them.
        #[arg(long, value_parser = ["fail", "ours", "theirs"])]
        strategy: Option<String>,
        /// A JSON file of decisions for named conflicts:
        /// `[{type, id, property?, take: ours|theirs|base|delete, value?}]`.
        #[arg(long = "resolve", value_name = "FILE")]
        resolve: Option<std::path::PathBuf>,
        /// On conflicts, print their counts per type and kind instead of
        /// listing them.
        #[arg(long)]
        stat: bool,
        /// On conflicts, list the page after this `next_page_token`.
        #[arg(long)]
        page_token: Option<String>,
        /// On conflicts, list at most this many (default 1000).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON (the HTTP answer's fields).
        #[arg(long)]
        json: bool,
        /// The branch merged.
        source: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Make a branch's content equal to another commit's. On a branch
    /// other than main its head moves there (the commits after it leave
    /// its history); on main, and with `--as-commit`, one new commit
    /// carries that content.
    #[command(after_help = "Example:\n  omnigraph branch reset feature-x --to feature-x~1 graph.omni")]
    Reset {
        /// The commit to reset to (any ref: a commit id, a tag, `B~N`, a branch).
        #[arg(long)]
        to: String,
        /// Refuse (exit 1, HTTP 412) unless the branch head is this commit.
        #[arg(long)]
        if_commit: Option<String>,
        /// Land as a new commit even on a branch other than main.
        #[arg(long)]
        as_commit: bool,
        /// Report what would change; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Actor recorded on the commit or the head move.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON (the HTTP answer's fields).
        #[arg(long)]
        json: bool,
        /// The branch reset.
        name: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Delete a branch: hidden from every read and write, restorable with
    /// `branch restore` until `cleanup` purges it past the reflog window
    /// (`--reflog-expiry`, 7 days by default). `--purge` removes it and
    /// every table fork made for it now, for good.
    #[command(after_help = "Example:\n  omnigraph branch delete feature-x graph.omni")]
    Delete {
        /// Remove it for good now (not restorable).
        #[arg(long)]
        purge: bool,
        /// Actor recorded on the delete.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// The branch.
        name: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Bring back a deleted branch at the head it had, or `--at` a commit
    /// of its history (a head its reflog names). A branch purged since
    /// exits 1 (HTTP 410 `gone`).
    #[command(after_help = "Example:\n  omnigraph branch restore feature-x graph.omni")]
    Restore {
        /// A commit of the branch's history (default: its last head).
        #[arg(long)]
        at: Option<String>,
        /// Actor recorded on the restore.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON (the HTTP answer's fields).
        #[arg(long)]
        json: bool,
        /// The branch.
        name: String,
        #[command(flatten)]
        graph: GraphArg,
    },
}

#[derive(Subcommand)]
enum CommitCommand {
    /// Commits reachable from a branch head (or any ref), newest first.
    #[command(after_help = "Example:\n  omnigraph commit list graph.omni --branch main --json")]
    List {
        /// A branch, or any ref: a tag, a commit id, `main~2`, `a...b`.
        #[arg(long, default_value = "main")]
        branch: String,
        /// At most this many commits.
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// The entities a commit changed against its first parent (the
    /// reference's `commit changes`): every page unless `--page-token` asks
    /// for one.
    #[command(after_help = "Example:\n  omnigraph commit changes main --kind node --op update graph.omni")]
    Changes {
        #[command(flatten)]
        filter: changes_cli::FilterArgs,
        /// Print only the page after the one that handed out this token.
        #[arg(long)]
        page_token: Option<String>,
        /// Changes per page (default 1000, at most 10000).
        #[arg(long)]
        limit: Option<usize>,
        /// Print JSON: {cause, changes, next_page_token?}.
        #[arg(long)]
        json: bool,
        /// A commit id, or any ref.
        commit: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Undo a commit's changes as one new commit on a branch (inserts
    /// deleted, deletes re-inserted, updates set back). A later change to
    /// the same entity is a conflict (exit 1, nothing written) unless
    /// --strategy or --resolve decides it.
    #[command(after_help = "Example:\n  omnigraph commit revert main~2 --branch main graph.omni")]
    Revert {
        /// The commit (any ref naming one).
        commit: String,
        /// The branch that receives the revert commit.
        #[arg(long, default_value = "main")]
        branch: String,
        #[command(flatten)]
        how: MoveArgs,
    },
    /// Apply a commit's changes again as one new commit on a branch. A
    /// change the branch made to the same entity is a conflict (exit 1,
    /// nothing written) unless --strategy or --resolve decides it.
    #[command(
        name = "cherry-pick",
        after_help = "Example:\n  omnigraph commit cherry-pick fix~1 --onto main graph.omni"
    )]
    CherryPick {
        /// The commit (any ref naming one).
        commit: String,
        /// The branch that receives the new commit.
        #[arg(long)]
        onto: String,
        #[command(flatten)]
        how: MoveArgs,
    },
    /// One commit.
    #[command(after_help = "Example:\n  omnigraph commit show main~1 --json graph.omni")]
    Show {
        /// A commit id, or any ref (a tag, `main~2`, `a...b`; a branch: its head).
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
}

/// How `commit revert` and `commit cherry-pick` run.
#[derive(clap::Args)]
struct MoveArgs {
    /// Of a merge commit: the parent its changes are measured against (1 or 2).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=2))]
    mainline: Option<u8>,
    /// Report what would be written; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// How conflicts with the branch's changes are decided.
    #[arg(long, value_parser = ["fail", "ours", "theirs"])]
    strategy: Option<String>,
    /// A JSON file of decisions for named conflicts (as `branch merge --resolve`).
    #[arg(long = "resolve", value_name = "FILE")]
    resolve: Option<std::path::PathBuf>,
    /// Actor recorded on the commit.
    #[arg(long = "as")]
    actor: Option<String>,
    /// Print JSON (the HTTP answer's fields).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    graph: GraphArg,
}

#[derive(Subcommand)]
enum TagCommand {
    /// Name a commit: `tag create NAME [REF] GRAPH` (REF: any ref, default
    /// main's head). A tag is immutable and keeps its commit through cleanup.
    #[command(after_help = "Example:\n  omnigraph tag create v1 main -m \"first release\" graph.omni")]
    Create {
        /// A message kept with the tag.
        #[arg(short = 'm', long)]
        message: Option<String>,
        /// Actor recorded on the tag.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON: {name, graph_commit_id, message, actor_id, created_at}.
        #[arg(long)]
        json: bool,
        /// The tag's name.
        name: String,
        /// The commit tagged (any ref; default main's head), or the graph
        /// when only one more positional is given.
        #[arg(value_name = "REF")]
        first: Option<String>,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Every tag, by name.
    #[command(after_help = "Example:\n  omnigraph tag list --json graph.omni")]
    List {
        /// Print JSON: {"tags": [...]}.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Delete a tag.
    #[command(after_help = "Example:\n  omnigraph tag delete v1 graph.omni")]
    Delete {
        /// Print JSON (the deleted tag).
        #[arg(long)]
        json: bool,
        /// The tag.
        name: String,
        #[command(flatten)]
        graph: GraphArg,
    },
}

/// Stack size of every runtime worker thread.
const WORKER_STACK_BYTES: usize = 16 * 1024 * 1024;

/// The reference's deprecated spellings `read` and `change` run as `query`
/// and `mutate`, with one warning line on stderr.
fn warn_deprecated_alias(args: &[String]) {
    let mut it = args.iter().skip(1);
    while let Some(arg) = it.next() {
        let new = match arg.as_str() {
            "--storage-option" | "--durability" => {
                it.next();
                continue;
            }
            a if a.starts_with('-') => continue,
            "read" => "query",
            "change" => "mutate",
            _ => return,
        };
        eprintln!("warning: `omnigraph {arg}` is deprecated; use `omnigraph {new}`");
        return;
    }
}

/// A query's output format: `--json`, else `--format`, else config.yaml's
/// `defaults.output`, else a table.
fn query_format(json: bool, format: Option<&str>) -> String {
    if json {
        return "json".into();
    }
    let configured = || operator::config().ok().and_then(|c| c.defaults.output.clone());
    format.map(str::to_string).or_else(configured).unwrap_or_else(|| "table".into())
}

/// The daemon `graphs list` asks: `--server`, else the operator scope's.
fn graphs_server(server: Option<&str>) -> Result<remote::Remote> {
    if let Some(server) = server {
        return remote::Remote::new(server, None);
    }
    match operator::fallback_scope()? {
        Some(omnigraph_core::operator_config::Scope {
            spec: omnigraph_core::operator_config::ScopeSpec::Server(server),
            ..
        }) => remote::Remote::new(server, None),
        _ => Err(OmniError::BadRequest(
            "graphs list asks a server: pass --server NAME_OR_URL (or set defaults.server in config.yaml)".into(),
        )),
    }
}

/// `profile list` and `profile show`, as text or JSON.
fn print_profiles(command: ProfileCommand) -> Result<()> {
    let (answer, json) = match command {
        ProfileCommand::List { json } => (operator::profiles()?, json),
        ProfileCommand::Show { name, json } => (operator::profile(name.as_deref())?, json),
    };
    if json {
        return print_json(&answer);
    }
    let line = |v: &serde_json::Value| {
        let mut parts = Vec::new();
        for key in ["name", "source", "server", "store", "cluster", "default_graph", "graph"] {
            if let Some(x) = v.get(key).and_then(serde_json::Value::as_str) {
                parts.push(if key == "name" { x.to_string() } else { format!("{key}={x}") });
            }
        }
        parts.join("  ")
    };
    match answer.get("profiles").and_then(serde_json::Value::as_array) {
        Some(list) if list.is_empty() => outln!("no profiles in config.yaml"),
        Some(list) => list.iter().for_each(|p| outln!("{}", line(p))),
        None if answer["source"].is_null() => outln!("no scope: no --profile, and config.yaml sets no defaults"),
        None => outln!("{}", line(&answer)),
    }
    Ok(())
}

/// Logs as `OMNIGRAPH_LOG` asks, to stderr (unset: `default`); and this
/// crate's step spans timed for `/healthz?verbose=true` whatever the level.
fn install_tracing(default: &str) {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_filter(
        tracing_subscriber::EnvFilter::try_from_env("OMNIGRAPH_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default)),
    );
    let steps = omnigraph::server::step_times::StepTimes
        .with_filter(tracing_subscriber::filter::Targets::new().with_target("omnigraph", tracing::Level::INFO));
    tracing_subscriber::registry().with(log).with(steps).init();
}

fn main() -> ExitCode {
    warn_deprecated_alias(&std::env::args().collect::<Vec<_>>());
    let mut cli = Cli::parse();
    // A bare `--profile` asks for a query's PROFILE, not an operator profile.
    if cli.profile.as_deref() == Some("") {
        match &mut cli.command {
            Command::Query { profile, .. } => *profile = true,
            _ => {
                use clap::CommandFactory;
                let what = "a value is required for '--profile <NAME>' (a bare --profile profiles a `query`)";
                Cli::command().error(clap::error::ErrorKind::InvalidValue, what).exit();
            }
        }
    }
    operator::set_profile(cli.profile.clone().filter(|p| !p.is_empty()));
    // A daemon's warnings (a graph it cannot open and so does not serve, a
    // failed background compaction) reach its log unasked; a one-shot
    // command prints only errors, beside its own one-line error.
    install_tracing(if matches!(cli.command, Command::Serve { .. }) { "warn" } else { "error" });
    // Deep async state machines (Lance's scans and commits inside a saga)
    // outgrow tokio's 2 MiB default worker stack in unoptimised builds.
    let runtime =
        match tokio::runtime::Builder::new_multi_thread().thread_stack_size(WORKER_STACK_BYTES).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                eprintln!("error: cannot start the async runtime: {e}");
                return ExitCode::FAILURE;
            }
        };
    let json = cli.command.json();
    // Only the daemon lives long enough for background recovery; a one-shot
    // command leaves any sidecar to the next read-write open.
    if !matches!(cli.command, Command::Serve { .. }) {
        omnigraph::actors::runtime::set_background_recovery(false);
    }
    let serve_shutdown = match &cli.command {
        Command::Serve { shutdown_timeout, .. } => Some(std::time::Duration::from_secs(*shutdown_timeout)),
        _ => None,
    };
    let storage = omnigraph::StorageOptions::from_pairs(cli.storage_options.iter().map(String::as_str));
    let durability = match cli.durability {
        Some(d) => Ok(d),
        None => durability::from_env().map(|d| d.unwrap_or(omnigraph::Durability::Fsync)),
    };
    let out = runtime.block_on(async {
        let out = match (storage, durability) {
            (Ok(options), Ok(durability)) => {
                omnigraph::engine::storage::config::set_defaults(options);
                durability::set_default(durability);
                let policy = cli.policy.as_deref();
                match cli.command.write_target() {
                    Ok(Some(t)) => {
                        match t.announce(cli.quiet, cli.yes).and_then(|()| cli.command.authorize(&t, policy)) {
                            Ok(()) => run(cli.command, cli.quiet, policy).await,
                            Err(e) => Err(e),
                        }
                    }
                    Ok(None) => run(cli.command, cli.quiet, policy).await,
                    Err(e) => Err(e),
                }
            }
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        // Every handle is dropped by now: let the actor trees finish their
        // current messages (e.g. a manifest compaction after a publish).
        if !omnigraph::actors::runtime::quiesce(quiesce_budget(serve_shutdown)).await {
            tracing::warn!("actors still busy at exit");
        }
        out
    });
    let code = match out {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::Reported(code)) => code,
        Err(e) => {
            if json {
                outln!("{}", e.to_json());
            } else {
                let body = e.to_json();
                match body.get("merge_conflicts") {
                    Some(_) => print_conflicts(&e, &body, false),
                    None => eprintln!("error: {e}"),
                }
            }
            e.exit_code() as u8
        }
    };
    // Exit without tearing the async runtime down: Lance's own read tasks may
    // still be winding down, and cancelling them makes Lance panic (printing
    // `JoinError::Cancelled`) although the command finished.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    std::process::exit(i32::from(code))
}

/// A row conflict's values on its line: `; age: base 27, ours 2, theirs 1`
/// for a property, else the three entities.
fn conflict_values(c: &serde_json::Value) -> String {
    let [base, ours, theirs] = ["base", "ours", "theirs"].map(|f| c.get(f));
    if base.is_none() && ours.is_none() && theirs.is_none() {
        return String::new();
    }
    let shown = |v: Option<&serde_json::Value>| v.map_or("null".to_string(), |v| v.to_string());
    let head = c["property"].as_str().map_or("; ".to_string(), |p| format!("; {p}: "));
    format!("{head}base {}, ours {}, theirs {}", shown(base), shown(ours), shown(theirs))
}

impl Command {
    /// The graph this command writes, if it writes ([`WriteTarget`]).
    fn write_target(&self) -> Result<Option<WriteTarget<'_>>> {
        // A write on the graph's storage (refusing --server).
        fn t<'a>(command: &'static str, graph: &'a GraphArg, destructive: bool) -> Result<Option<WriteTarget<'a>>> {
            Ok(Some(WriteTarget { command, uri: graph.uri()?.into(), via: "direct", destructive }))
        }
        // A write that also runs through a daemon.
        fn either<'a>(
            command: &'static str,
            graph: &'a GraphArg,
            destructive: bool,
        ) -> Result<Option<WriteTarget<'a>>> {
            match graph.remote()? {
                Some(r) => Ok(Some(WriteTarget { command, uri: r.describe().into(), via: "server", destructive })),
                None => t(command, graph, destructive),
            }
        }
        match self {
            Command::Init { graph, .. } => t("init", graph, false),
            Command::Load { mode, graph, .. } => either("load", graph, mode == "overwrite"),
            Command::Mutate { at, .. } => {
                let (uri, via) = match at.remote()? {
                    Some((_, remote)) => (remote.describe().into(), "server"),
                    None => (at.resolve()?.1.into(), "direct"),
                };
                Ok(Some(WriteTarget { command: "mutate", uri, via, destructive: false }))
            }
            Command::Branch { command: BranchCommand::Create { graph, .. } } => either("branch create", graph, false),
            Command::Branch { command: BranchCommand::Merge { dry_run: false, graph, .. } } => {
                either("branch merge", graph, false)
            }
            Command::Branch { command: BranchCommand::Delete { purge, graph, .. } } => {
                either("branch delete", graph, *purge)
            }
            Command::Branch { command: BranchCommand::Restore { graph, .. } } => either("branch restore", graph, false),
            Command::Branch { command: BranchCommand::Reset { dry_run: false, graph, .. } } => {
                either("branch reset", graph, false)
            }
            Command::Commit { command: CommitCommand::Revert { how, .. } } if !how.dry_run => {
                either("commit revert", &how.graph, false)
            }
            Command::Commit { command: CommitCommand::CherryPick { how, .. } } if !how.dry_run => {
                either("commit cherry-pick", &how.graph, false)
            }
            Command::Tag { command: TagCommand::Create { first, graph, .. } } => match graph.remote()? {
                Some(_) => either("tag create", graph, false),
                None => {
                    let (_, uri) = graph.after_optional(first.as_deref())?;
                    Ok(Some(WriteTarget { command: "tag create", uri: uri.into(), via: "direct", destructive: false }))
                }
            },
            Command::Tag { command: TagCommand::Delete { graph, .. } } => either("tag delete", graph, false),
            Command::Schema { command: SchemaCommand::Apply { graph, .. } } => either("schema apply", graph, false),
            Command::Index { command: IndexCommand::Ensure { graph, .. } } => t("index ensure", graph, false),
            Command::Optimize { graph, .. } => t("optimize", graph, false),
            Command::Cleanup { confirm: true, graph, .. } => t("cleanup", graph, true),
            Command::Repair { confirm: true, graph, .. } => t("repair", graph, false),
            _ => Ok(None),
        }
    }

    /// Refuse a write on a local graph that `--policy` does not allow the
    /// actor (`--as`, else `operator.actor`; none is refused); a write
    /// through a daemon is the daemon's to decide.
    fn authorize(&self, target: &WriteTarget<'_>, policy: Option<&str>) -> Result<()> {
        let (Some(file), false) = (policy, matches!(self, Command::Serve { .. })) else { return Ok(()) };
        if target.via != "direct" {
            return Err(OmniError::BadRequest(
                "--policy decides writes on a local graph; a daemon decides its own with `serve --policy`".into(),
            ));
        }
        let Some((requests, actor)) = self.policy_requests() else { return Ok(()) };
        let policy = omnigraph::engine::policy::Policy::parse(file, &read_file(file)?)
            .map_err(|e| OmniError::BadRequest(e.to_string()))?;
        let actor = operator::actor(actor)?.ok_or_else(|| {
            OmniError::BadRequest("--policy needs an actor: pass --as ACTOR or set operator.actor".into())
        })?;
        let policies = omnigraph::server::PerGraph { all: Some(std::sync::Arc::new(policy)), ..Default::default() };
        let gate = omnigraph::server::Gate { policies, default_deny: false };
        requests.iter().try_for_each(|r| gate.check(&actor, Some(target.uri.as_ref()), r))
    }

    /// What a local write asks a policy, and the actor it names (`--as`).
    fn policy_requests(&self) -> Option<(Vec<omnigraph::engine::policy::Request>, Option<&str>)> {
        use omnigraph::engine::policy::{Action, Request};
        let into = |action, from: Option<&str>, target: &str| Request::into(action, from, target);
        if let Command::Load { write, from, .. } = self {
            let mut asks = vec![Request::on(Action::Change, &write.branch)];
            // A load that may fork its branch (`--from`) may create it too.
            asks.extend(from.as_deref().map(|base| into(Action::BranchCreate, Some(base), &write.branch)));
            return Some((asks, write.actor.as_deref()));
        }
        let (request, actor) = match self {
            Command::Mutate { write, .. } => (Request::on(Action::Change, &write.branch), write.actor.as_deref()),
            Command::Branch { command } => match command {
                BranchCommand::Create { from, name, actor, .. } => {
                    (into(Action::BranchCreate, Some(from), name), actor.as_deref())
                }
                BranchCommand::Merge { into: target, source, actor, .. } => {
                    (into(Action::BranchMerge, Some(source), target), actor.as_deref())
                }
                BranchCommand::Delete { name, actor, .. } => (into(Action::BranchDelete, None, name), actor.as_deref()),
                BranchCommand::Restore { name, actor, .. } => {
                    (into(Action::BranchCreate, None, name), actor.as_deref())
                }
                BranchCommand::Reset { name, actor, .. } => (into(Action::BranchReset, None, name), actor.as_deref()),
                BranchCommand::List { .. } => return None,
            },
            Command::Commit { command: CommitCommand::Revert { branch, how, .. } } => {
                (into(Action::Revert, None, branch), how.actor.as_deref())
            }
            Command::Commit { command: CommitCommand::CherryPick { onto, how, .. } } => {
                (into(Action::CherryPick, None, onto), how.actor.as_deref())
            }
            Command::Tag { command: TagCommand::Create { actor, .. } } => {
                (Request::of(Action::TagCreate), actor.as_deref())
            }
            Command::Tag { command: TagCommand::Delete { .. } } => (Request::of(Action::TagDelete), None),
            Command::Schema { command: SchemaCommand::Apply { branch, actor, .. } } => {
                (into(Action::SchemaApply, None, branch), actor.as_deref())
            }
            Command::Index { command: IndexCommand::Ensure { branch, actor, .. } } => {
                (into(Action::IndexEnsure, None, branch), actor.as_deref())
            }
            Command::Optimize { branch, actor, .. } => (into(Action::Optimize, None, branch), actor.as_deref()),
            Command::Cleanup { .. } => (Request::of(Action::Cleanup), None),
            _ => return None,
        };
        Some((vec![request], actor))
    }

    fn json(&self) -> bool {
        match self {
            Command::Init { json, .. } | Command::Snapshot { json, .. } | Command::Lint { json, .. } => *json,
            Command::Load { write, .. } | Command::Mutate { write, .. } => write.json,
            Command::Query { json, format, .. } => query_format(*json, format.as_deref()) == "json",
            Command::Login { json, .. }
            | Command::Logout { json, .. }
            | Command::Profile { command: ProfileCommand::List { json } | ProfileCommand::Show { json, .. } } => *json,
            Command::Recovery { command: RecoveryCommand::List { json, .. } }
            | Command::Repair { json, .. }
            | Command::Optimize { json, .. }
            | Command::Index { command: IndexCommand::Ensure { json, .. } | IndexCommand::Status { json, .. } }
            | Command::Cleanup { json, .. } => *json,
            Command::Serve { .. } | Command::Export { .. } | Command::Version | Command::Completions { .. } => false,
            Command::Graphs { command: GraphsCommand::List { json, .. } } => *json,
            Command::Branch {
                command:
                    BranchCommand::Create { json, .. }
                    | BranchCommand::List { json, .. }
                    | BranchCommand::Delete { json, .. }
                    | BranchCommand::Restore { json, .. }
                    | BranchCommand::Reset { json, .. }
                    | BranchCommand::Merge { json, .. },
            } => *json,
            Command::Commit {
                command:
                    CommitCommand::List { json, .. }
                    | CommitCommand::Show { json, .. }
                    | CommitCommand::Changes { json, .. },
            } => *json,
            Command::Commit { command: CommitCommand::Revert { how, .. } | CommitCommand::CherryPick { how, .. } } => {
                how.json
            }
            Command::Tag {
                command:
                    TagCommand::Create { json, .. } | TagCommand::List { json, .. } | TagCommand::Delete { json, .. },
            } => *json,
            Command::Diff { json, .. } | Command::Reflog { json, .. } => *json,
            Command::Changes { command } => command.json(),
            Command::History { entity, .. } | Command::Blame { entity } => entity.json,
            Command::Schema { command } => command.json(),
            Command::Policy { command } => command.json(),
            Command::Queries { command } => command.json(),
            Command::Mcp { .. } => false,
        }
    }
}

/// Stream an export to `out` (or stdout); a summary line goes to stderr.
async fn run_export(graph: &str, target: &ReadTarget, types: &[String], out: Option<&str>) -> Result<()> {
    use std::io::Write;
    let g = read_only(graph).await?;
    let export = g.export(target, types).await?;
    let mut sink = export_sink(out)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let (summary, written) = tokio::join!(export.run(tx), async {
        while let Some(chunk) = rx.recv().await {
            sink.write_all(&chunk?).map_err(|e| OmniError::BadRequest(format!("writing the export: {e}")))?;
        }
        sink.flush().map_err(|e| OmniError::BadRequest(format!("writing the export: {e}")))
    });
    written?;
    let summary = summary?;
    let rows: u64 = summary.rows.values().sum();
    eprintln!("exported {rows} rows from {} tables", summary.rows.len());
    Ok(())
}

/// A file to write (`--out`) or stdout, buffered.
fn export_sink(out: Option<&str>) -> Result<Box<dyn std::io::Write>> {
    Ok(match out {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path).map_err(|e| OmniError::BadRequest(format!("cannot write {path}: {e}")))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

/// Copy a daemon's export stream to `out` (or stdout), chunk by chunk; a
/// summary line goes to stderr, as for an export from storage.
async fn export_remote(remote: &remote::Remote, mut response: reqwest::Response, out: Option<&str>) -> Result<()> {
    use std::io::Write;
    let mut sink = export_sink(out)?;
    let mut rows = 0u64;
    while let Some(chunk) = response.chunk().await.map_err(|e| remote.unreachable(&e))? {
        rows += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        sink.write_all(&chunk).map_err(|e| OmniError::BadRequest(format!("writing the export: {e}")))?;
    }
    sink.flush().map_err(|e| OmniError::BadRequest(format!("writing the export: {e}")))?;
    eprintln!("exported {rows} rows");
    Ok(())
}

async fn read_only(uri: &str) -> Result<Graph> {
    Omnigraph::open_with(uri, OpenMode::ReadOnly).await
}

fn read_file(path: &str) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| OmniError::BadRequest(format!("cannot read {path}: {e}")))
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| OmniError::Internal(e.to_string()))?;
    outln!("{text}");
    Ok(())
}

/// How a command ended when it did not fail outright.
enum Outcome {
    /// Success.
    Done,
    /// The command printed its own report of a failure; exit with this code.
    Reported(u8),
}

async fn run(command: Command, quiet: bool, policy: Option<&str>) -> Result<Outcome> {
    if let Command::Lint { query, schema, json, graph } = command {
        return run_lint(&query, schema, json, graph).await;
    }
    if let Command::Branch { command: merge @ BranchCommand::Merge { .. } } = command {
        return run_merge(merge).await;
    }
    if let Command::Queries { command } = command {
        return Ok(match queries_cli::run(command)? {
            0 => Outcome::Done,
            code => Outcome::Reported(code),
        });
    }
    if let Command::Policy { command } = command {
        return Ok(match policy_cli::run(command)? {
            0 => Outcome::Done,
            code => Outcome::Reported(code),
        });
    }
    if let Command::Mcp { server, graph } = command {
        return mcp_cli::run(&server, graph.as_deref()).await.map(|()| Outcome::Done);
    }
    run_command(command, quiet, policy).await.map(|()| Outcome::Done)
}

/// `branch merge`: the answer, or its conflicts (listed, or counted with
/// `--stat`) and exit code 1.
async fn run_merge(command: BranchCommand) -> Result<Outcome> {
    let BranchCommand::Merge {
        into,
        delete_branch,
        dry_run,
        squash,
        actor,
        strategy,
        resolve,
        stat,
        page_token,
        limit,
        json,
        source,
        graph,
    } = command
    else {
        return Err(OmniError::Internal("run_merge takes a merge".into()));
    };
    let resolutions = match &resolve {
        Some(path) => read_resolutions(path)?,
        None => vec![],
    };
    let answer = match graph.remote()? {
        Some(r) => {
            let body = serde_json::json!({
                "source": source, "target": into, "delete_branch": delete_branch, "dry_run": dry_run,
                "squash": squash, "page_token": page_token, "limit": limit, "strategy": strategy,
                "resolutions": resolutions,
            });
            r.post("/branches/merge", &body, &[]).await
        }
        None => {
            let g = if dry_run { read_only(graph.uri()?).await? } else { Omnigraph::open(graph.uri()?).await? };
            let actor = operator::actor(actor.as_deref())?;
            let page = omnigraph::ConflictPage { token: page_token, limit };
            let strategy = strategy.as_deref().map(str::parse).transpose()?;
            let opts = omnigraph::MergeOptions {
                actor: actor.clone(),
                dry_run,
                squash,
                delete_branch,
                memory_bytes: None,
                page,
                strategy,
                resolutions,
            };
            g.branch_merge(&source, &into, &opts).await.map(|m| wire::merge_json(&m, actor.as_deref()))
        }
    };
    let e = match answer {
        Ok(answer) if json => return print_json(&answer).map(|()| Outcome::Done),
        Ok(answer) => return print_merge(&answer).map(|()| Outcome::Done),
        Err(e) => e,
    };
    let body = e.to_json();
    if e.http_status() != 409 || body.get("merge_conflicts").is_none() {
        return Err(e);
    }
    if json {
        print_json(&body)?;
    } else {
        print_conflicts(&e, &body, stat);
    }
    Ok(Outcome::Reported(e.exit_code() as u8))
}

/// `commit revert` (`pick` false) or `commit cherry-pick` of `commit` on `branch`.
async fn run_commit_move(commit: &str, branch: &str, pick: bool, how: MoveArgs) -> Result<()> {
    let MoveArgs { mainline, dry_run, strategy, resolve, actor, json, graph } = how;
    let resolutions = match &resolve {
        Some(path) => read_resolutions(path)?,
        None => vec![],
    };
    let answer = match graph.remote()? {
        Some(remote) => {
            let (route, target) = if pick { ("cherry-pick", "onto") } else { ("revert", "branch") };
            let body = serde_json::json!({
                target: branch, "mainline": mainline, "dry_run": dry_run, "strategy": strategy,
                "resolutions": resolutions,
            });
            remote.post(&format!("/commits/{}/{route}", url_segment(commit)), &body, &[]).await?
        }
        None => {
            let g = if dry_run { read_only(graph.uri()?).await? } else { Omnigraph::open(graph.uri()?).await? };
            let actor = operator::actor(actor.as_deref())?;
            let opts = omnigraph::RevertOptions {
                branch: Some(branch.to_string()),
                mainline,
                actor: actor.clone(),
                dry_run,
                strategy: strategy.as_deref().map(str::parse).transpose()?,
                resolutions,
                page: Default::default(),
            };
            match pick {
                true => wire::cherry_pick_json(&g.commit_cherry_pick(commit, &opts).await?, actor.as_deref()),
                false => wire::revert_json(&g.commit_revert(commit, &opts).await?, actor.as_deref()),
            }
        }
    };
    if json {
        return print_json(&answer);
    }
    let what = match (answer["dry_run"] == true, pick) {
        (true, true) => "would cherry-pick",
        (true, false) => "would revert",
        (false, true) => "cherry-picked",
        (false, false) => "reverted",
    };
    match answer["graph_commit_id"].as_str() {
        Some(c) => outln!("{what} {commit} on {branch}: commit {c}"),
        None => outln!("{what} {commit} on {branch}"),
    }
    print_table_counts(&answer);
    Ok(())
}

/// The resolutions in a `--resolve` file (a JSON list).
fn read_resolutions(path: &std::path::Path) -> Result<Vec<omnigraph::Resolution>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| OmniError::BadRequest(format!("cannot read resolutions from {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        OmniError::BadRequest(format!(
            "{}: not a resolution list ([{{type, id, property?, take?, value?}}]): {e}",
            path.display()
        ))
    })
}

/// A refused merge for people (stderr): the error line, then one line per
/// conflict, or with `stat` one per type and kind.
fn print_conflicts(e: &OmniError, body: &serde_json::Value, stat: bool) {
    eprintln!("error: {e}");
    if stat {
        for c in body["conflict_stat"].as_array().into_iter().flatten() {
            eprintln!("  {:<4} {:<24} {:<28} {}", text(c, "entity_kind"), text(c, "type"), text(c, "kind"), c["count"]);
        }
        return;
    }
    for c in body["merge_conflicts"].as_array().into_iter().flatten() {
        eprintln!("  {}: {}{}", text(c, "kind"), text(c, "message"), conflict_values(c));
    }
    if let Some(token) = body["next_page_token"].as_str() {
        eprintln!("  … more conflicts: --page-token {token}");
    }
}

async fn run_branch(command: BranchCommand) -> Result<()> {
    match command {
        BranchCommand::Create { from, actor, json, name, graph } => {
            let answer = match graph.remote()? {
                Some(r) => r.post("/branches", &serde_json::json!({ "name": name, "from": from }), &[]).await?,
                None => {
                    let g = Omnigraph::open(graph.uri()?).await?;
                    let actor = operator::actor(actor.as_deref())?;
                    let info = g.branch_create_as(&name, &from, actor.as_deref()).await?;
                    wire::branch_created_json(&info, &from, g.root().uri())
                }
            };
            if json {
                return print_json(&answer);
            }
            outln!("created branch {name} from {from} at {}", text(&answer, "head_commit_id"));
            Ok(())
        }
        BranchCommand::List { json, graph } => {
            let branches = match graph.remote()? {
                Some(r) => r.get("/branches", &[]).await?["details"].clone(),
                None => serde_json::json!(read_only(graph.uri()?).await?.branch_list().await?),
            };
            if json {
                return print_json(&serde_json::json!({ "branches": branches }));
            }
            for b in branches.as_array().into_iter().flatten() {
                let from = b["from"].as_str().map(|f| format!("  (from {f})")).unwrap_or_default();
                outln!("{:<32} {}{from}", text(b, "name"), text(b, "head_commit_id"));
            }
            Ok(())
        }
        BranchCommand::Merge { .. } => Err(OmniError::Internal("a merge is answered by run_merge".into())),
        BranchCommand::Delete { purge, actor, json, name, graph } => {
            let answer = match graph.remote()? {
                Some(r) => {
                    r.delete(&format!("/branches/{}", url_segment(&name)), &[("purge", purge.to_string())]).await?
                }
                None => {
                    let g = Omnigraph::open(graph.uri()?).await?;
                    let opts = omnigraph::DeleteOptions { purge, actor: operator::actor(actor.as_deref())? };
                    wire::branch_deleted_json(&g.branch_delete_with(&name, &opts).await?, g.root().uri())
                }
            };
            if json {
                return print_json(&answer);
            }
            if answer["restorable"] == true {
                outln!(
                    "deleted branch {name} at {} (restore it with `branch restore {name}`)",
                    text(&answer, "head_commit_id")
                );
            } else {
                let forks = answer["forks_reclaimed"].as_array().map_or(0, Vec::len);
                outln!("purged branch {name} ({forks} table forks reclaimed)");
            }
            Ok(())
        }
        BranchCommand::Restore { at, actor, json, name, graph } => {
            let answer = match graph.remote()? {
                Some(r) => {
                    r.post(&format!("/branches/{}/restore", url_segment(&name)), &serde_json::json!({ "at": at }), &[])
                        .await?
                }
                None => {
                    let g = Omnigraph::open(graph.uri()?).await?;
                    let actor = operator::actor(actor.as_deref())?;
                    wire::restored_json(&g.branch_restore(&name, at.as_deref(), actor.as_deref()).await?)
                }
            };
            if json {
                return print_json(&answer);
            }
            outln!("restored branch {name} at {}", text(&answer, "head_commit_id"));
            Ok(())
        }
        reset @ BranchCommand::Reset { .. } => run_reset(reset).await,
    }
}

/// `branch reset`: the answer, as JSON or a line per table.
async fn run_reset(command: BranchCommand) -> Result<()> {
    let BranchCommand::Reset { to, if_commit, as_commit, dry_run, actor, json, name, graph } = command else {
        return Err(OmniError::Internal("run_reset takes `branch reset`".into()));
    };
    let answer = match graph.remote()? {
        Some(remote) => {
            let body =
                serde_json::json!({ "to": to, "if_commit": if_commit, "as_commit": as_commit, "dry_run": dry_run });
            remote.post(&format!("/branches/{}/reset", url_segment(&name)), &body, &[]).await?
        }
        None => {
            let g = if dry_run { read_only(graph.uri()?).await? } else { Omnigraph::open(graph.uri()?).await? };
            let actor = operator::actor(actor.as_deref())?;
            let opts = omnigraph::ResetOptions { as_commit, if_commit, actor: actor.clone(), dry_run };
            wire::reset_json(&g.branch_reset(&name, &to, &opts).await?, actor.as_deref())
        }
    };
    if json {
        return print_json(&answer);
    }
    let (from, target) = (text(&answer, "from_commit_id"), text(&answer, "to_commit_id"));
    match (text(&answer, "outcome"), answer["dry_run"] == true, text(&answer, "mode")) {
        ("already_up_to_date", ..) => outln!("{name} is already at {target}"),
        (_, true, mode) => outln!("would reset {name} from {from} to {target} ({mode})"),
        (_, false, "moved_head") => outln!("reset {name} from {from} to {target}: its head moved"),
        _ => outln!("reset {name} from {from} to {target}: commit {}", text(&answer, "graph_commit_id")),
    }
    print_table_counts(&answer);
    Ok(())
}

/// The `tables` of a merge-shaped answer, a line each.
fn print_table_counts(answer: &serde_json::Value) {
    for t in answer["tables"].as_array().into_iter().flatten() {
        let (key, ins, upd, del) = (text(t, "table_key"), &t["inserted"], &t["updated"], &t["deleted"]);
        outln!("  {key:<24} +{ins} ~{upd} -{del}");
    }
}

/// A diff page or its counts (as `GET /diff` answers), for people.
fn print_diff(d: &serde_json::Value) -> Result<()> {
    for s in d["stats"].as_array().into_iter().flatten() {
        let n = |f: &str| s[f].as_u64().unwrap_or(0);
        outln!("{:<4} {:<24} +{} ~{} -{}", text(s, "kind"), text(s, "type"), n("inserted"), n("updated"), n("deleted"));
    }
    for c in d["changes"].as_array().into_iter().flatten() {
        let mark = match c["op"].as_str() {
            Some("insert") => "+",
            Some("update") => "~",
            _ => "-",
        };
        let changed: Vec<String> = c["changed"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("{}: {} -> {}", text(p, "property"), p["before"], p["after"]))
            .collect();
        outln!("{mark} {} {} {}  {}", text(c, "kind"), text(c, "type"), text(c, "id"), changed.join(", "));
    }
    if let Some(t) = d["next_page_token"].as_str() {
        outln!("more: --page-token {t}");
    }
    Ok(())
}

/// An answer as the HTTP API's JSON (what the embedded and the served
/// paths both print).
fn to_json(answer: &impl serde::Serialize) -> Result<serde_json::Value> {
    serde_json::to_value(answer).map_err(|e| OmniError::Internal(format!("encoding the answer: {e}")))
}

async fn run_tag(command: TagCommand) -> Result<()> {
    match command {
        TagCommand::Create { message, actor, json, name, first, graph } => {
            let answer = match graph.remote()? {
                Some(r) => {
                    if actor.is_some() {
                        return Err(OmniError::BadRequest(
                            "tag create --as: through a server the actor is the one its token names; drop --as".into(),
                        ));
                    }
                    r.post("/tags", &serde_json::json!({ "name": name, "ref": first, "message": message }), &[]).await?
                }
                None => {
                    let (target, uri) = graph.after_optional(first.as_deref())?;
                    let g = Omnigraph::open(uri).await?;
                    let actor = operator::actor(actor.as_deref())?;
                    wire::tag_json(&g.tag_create(&name, target, message.as_deref(), actor.as_deref()).await?)
                }
            };
            if json {
                return print_json(&answer);
            }
            outln!("tagged {} as {}", text(&answer, "graph_commit_id"), text(&answer, "name"));
            Ok(())
        }
        TagCommand::List { json, graph } => {
            let answer = match graph.remote()? {
                Some(r) => r.get("/tags", &[]).await?,
                None => wire::tags_json(&read_only(graph.uri()?).await?.tags().await?),
            };
            if json {
                return print_json(&answer);
            }
            for t in answer["tags"].as_array().into_iter().flatten() {
                let message = t["message"].as_str().unwrap_or("");
                outln!("{:<32} {}  {message}", text(t, "name"), text(t, "graph_commit_id"));
            }
            Ok(())
        }
        TagCommand::Delete { json, name, graph } => {
            let answer = match graph.remote()? {
                Some(r) => r.delete(&format!("/tags/{}", url_segment(&name)), &[]).await?,
                None => wire::tag_json(&Omnigraph::open(graph.uri()?).await?.tag_delete(&name).await?),
            };
            if json {
                return print_json(&answer);
            }
            outln!("deleted tag {name} (was {})", text(&answer, "graph_commit_id"));
            Ok(())
        }
    }
}

fn print_optimize(r: &omnigraph::OptimizeReport) {
    for t in &r.tables {
        match t.skipped {
            Some(why) => outln!("{}  v{}  skipped: {why}", t.type_key, t.published_dataset_version),
            None => outln!(
                "{}  v{}  {} fragments -> {}",
                t.type_key,
                t.published_dataset_version,
                t.fragments_removed,
                t.fragments_added
            ),
        }
    }
    let m = &r.manifest;
    outln!("__manifest  {} fragments -> {}", m.fragments_before, m.fragments_after);
    match &r.graph_commit_id {
        Some(c) => outln!("optimized {} as commit {c}", r.branch),
        None => outln!("{}: no table needed compaction; no commit", r.branch),
    }
}

fn print_indexes(r: &omnigraph::EnsureIndicesReport) {
    for t in &r.tables {
        let pending: Vec<String> = t.pending.iter().map(|p| format!("{} ({})", p.index, p.reason)).collect();
        outln!(
            "{}  built [{}]  existing [{}]{}{}",
            t.type_key,
            t.built.join(", "),
            t.existing.join(", "),
            if t.folded.is_empty() { String::new() } else { format!("  folded [{}]", t.folded.join(", ")) },
            if pending.is_empty() { String::new() } else { format!("  pending [{}]", pending.join("; ")) }
        );
    }
    match &r.graph_commit_id {
        Some(c) => outln!("built indexes on {} as commit {c}", r.branch),
        None => outln!("{}: every index exists and covers its table (or is pending); no commit", r.branch),
    }
}

fn print_index_status(s: &omnigraph::IndexStatus) {
    outln!("{}", s.branch);
    for t in &s.tables {
        outln!("{}", t.type_key);
        for i in &t.indexes {
            // Never rounded up to 100% while a row is outside the index.
            let percent = if i.coverage < 1.0 { (i.coverage * 1000.0).floor() / 10.0 } else { 100.0 };
            let state = if i.built { format!("{percent:.1}%") } else { "missing".to_string() };
            outln!(
                "  {:<24} {:<8} {:>7}  {}/{} rows  {} unindexed fragments  {} segments",
                i.index,
                format!("{:?}", i.kind).to_lowercase(),
                state,
                i.indexed_rows,
                i.total_rows,
                i.unindexed_fragments,
                i.segments
            );
        }
    }
}

fn print_cleanup(r: &omnigraph::CleanupReport) {
    for t in r.tables.iter().filter(|t| t.removed.versions_removed > 0) {
        let branch = t.table_branch.as_deref().map(|b| format!(" ({b})")).unwrap_or_default();
        outln!(
            "{}{branch}  {} of {} versions, {} bytes",
            t.type_key,
            t.removed.versions_removed,
            t.versions_before,
            t.removed.bytes_removed
        );
    }
    for o in &r.orphan_forks {
        let what = if o.reclaimed {
            "deleted"
        } else if r.dry_run {
            "would delete"
        } else {
            "kept (a fork depends on it)"
        };
        outln!("{} ({})  orphan fork of a deleted branch: {what}", o.type_key, o.table_branch);
    }
    for b in &r.branches_purged {
        let what = if r.dry_run { "would purge" } else { "purged" };
        outln!("{b}  deleted branch past the reflog window: {what} (no longer restorable)");
    }
    for d in &r.dropped_tables {
        let what = if d.reclaimed { "deleted" } else { "would delete" };
        outln!("{}  dropped by a schema apply, read by no retained commit: {what}", d.type_key);
    }
    let verb = if r.dry_run { "would remove" } else { "removed" };
    outln!(
        "{verb} {} versions ({} bytes); {} commits stay readable, {} {}",
        r.versions_removed,
        r.bytes_removed,
        r.retained_commits,
        r.removed_commits,
        if r.dry_run { "would not (run with --confirm to delete)" } else { "were cleaned" }
    );
}

/// Every page of commit `commit`'s changes through a daemon (one page when
/// `page_token` names it).
async fn commit_changes_remote(
    remote: &remote::Remote,
    commit: &str,
    filter: &changes_cli::FilterArgs,
    page_token: Option<String>,
    limit: Option<usize>,
) -> Result<omnigraph::CommitChanges> {
    let tail = format!("/commits/{}/changes", url_segment(commit));
    let all_pages = page_token.is_none();
    let mut query = filter.query();
    query.extend(limit.map(|n| ("limit", n.to_string())));
    let get = |token: Option<String>| {
        let mut q = query.clone();
        q.extend(token.map(|t| ("page_token", t)));
        let tail = &tail;
        async move { remote.get(tail, &q).await.and_then(changes_cli::from_answer::<omnigraph::CommitChanges>) }
    };
    let mut page = get(page_token).await?;
    while let Some(next) = page.next_page_token.take().filter(|_| all_pages) {
        let more = get(Some(next)).await?;
        page.changes.extend(more.changes);
        page.next_page_token = more.next_page_token;
    }
    Ok(page)
}

/// One commit's changes, for people.
fn print_commit_changes(page: &omnigraph::CommitChanges) -> Result<()> {
    let c = &page.cause;
    outln!(
        "commit {} on {} (parent {})",
        c.graph_commit_id,
        c.authored_branch,
        c.parent_commit_id.as_deref().unwrap_or("-")
    );
    for e in &page.changes {
        outln!("{:?} {} {} {}", e.op, e.kind, e.entity_type.name, e.id);
    }
    if let Some(t) = &page.next_page_token {
        outln!("more: --page-token {t}");
    }
    Ok(())
}

/// A merge's answer (as `POST /branches/merge` gives it), for people.
fn print_merge(m: &serde_json::Value) -> Result<()> {
    let (source, target, outcome) = (text(m, "source"), text(m, "target"), text(m, "outcome"));
    let what = if m["dry_run"] == true { "would merge" } else { "merged" };
    match m["graph_commit_id"].as_str() {
        _ if outcome == "already_up_to_date" => outln!("{target} is already up to date with {source}"),
        Some(commit) => outln!("{what} {source} into {target} ({outcome}): commit {commit}"),
        None => outln!("{what} {source} into {target} ({outcome})"),
    }
    for t in m["tables"].as_array().into_iter().flatten() {
        let how = if t["adopted"] == true { ", adopted" } else { "" };
        let (key, ins, upd, del) = (text(t, "table_key"), &t["inserted"], &t["updated"], &t["deleted"]);
        outln!("  {key:<24} +{ins} ~{upd} -{del}{how}");
    }
    if let Some(n) = m["conflicts_decided"].as_u64().filter(|n| *n > 0) {
        outln!("  {n} conflicts decided (strategy {})", text(m, "strategy"));
    }
    for r in m["resolutions"].as_array().into_iter().flatten() {
        let property = r["property"].as_str().map(|p| format!(" {p}")).unwrap_or_default();
        outln!("  resolved {} {}{property}: {}", text(r, "type"), text(r, "id"), text(r, "outcome"));
    }
    if m["branch_deleted"] == true {
        outln!("deleted branch {source}");
    }
    if let Some(e) = m["branch_delete_error"].as_str() {
        eprintln!("warning: merged, but branch {source} was not deleted: {e}");
    }
    Ok(())
}

async fn run_command(command: Command, quiet: bool, policy: Option<&str>) -> Result<()> {
    match command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "omnigraph", &mut out);
            out!("{}", String::from_utf8_lossy(&out));
            Ok(())
        }
        Command::Login { name, token, json } => {
            let answer = operator::login(&name, token)?;
            if json {
                return print_json(&answer);
            }
            outln!("logged in to {name} (token stored in {})", text(&answer, "credentials"));
            Ok(())
        }
        Command::Logout { name, json } => {
            let answer = operator::logout(&name)?;
            if json {
                return print_json(&answer);
            }
            match answer["removed"].as_bool() {
                Some(true) => outln!("logged out of {name}"),
                _ => outln!("no token was stored for {name}"),
            }
            Ok(())
        }
        Command::Profile { command } => print_profiles(command),
        Command::Graphs { command: GraphsCommand::List { server, json } } => {
            let answer = graphs_server(server.as_deref())?.graphs().await?;
            if json {
                return print_json(&answer);
            }
            for g in answer["graphs"].as_array().into_iter().flatten() {
                outln!("{}  {}", text(g, "graph_id"), text(g, "uri"));
            }
            Ok(())
        }
        Command::Version => {
            outln!("omnigraph {}", env!("CARGO_PKG_VERSION"));
            outln!("internal-schema {}", omnigraph::engine::manifest::rows::STAMP);
            Ok(())
        }
        Command::Init { schema, json, graph } => {
            let source = read_file(&schema)?;
            let g = Omnigraph::init(graph.uri()?, &source).await?;
            let snap = g.snapshot("main").await?;
            let warnings = schema_warnings(&schema, &source, !json);
            if json {
                let mut out = wire::snapshot_json(&snap);
                out["warnings"] = serde_json::json!(warnings);
                return print_json(&out);
            }
            outln!("created graph at {} with {} tables", g.root().uri(), snap.tables.len());
            Ok(())
        }
        Command::Export { branch, commit, types, out, graph } => {
            if let Some(remote) = graph.remote()? {
                let body = serde_json::json!({ "branch": branch, "snapshot": commit, "type_names": types });
                let response = remote.post_streamed("/export", &body).await?;
                return export_remote(&remote, response, out.as_deref()).await;
            }
            let target = ReadTarget::of(commit, branch);
            run_export(graph.uri()?, &target, &types, out.as_deref()).await
        }
        Command::Snapshot { branch, json, graph } => {
            let answer = match graph.remote()? {
                Some(remote) => remote.get("/snapshot", &[("branch", branch)]).await?,
                None => wire::snapshot_json(&read_only(graph.uri()?).await?.snapshot(&branch).await?),
            };
            if json { print_json(&answer) } else { print_snapshot(&answer) }
        }
        Command::Commit { command: CommitCommand::List { branch, limit, json, graph } } => {
            let commits: Vec<serde_json::Value> = match graph.remote()? {
                Some(remote) => {
                    let mut query = vec![("branch", branch)];
                    query.extend(limit.map(|n| ("limit", n.to_string())));
                    let answer = remote.get("/commits", &query).await?;
                    answer["commits"].as_array().cloned().unwrap_or_default()
                }
                None => read_only(graph.uri()?)
                    .await?
                    .commits(&branch, limit)
                    .await?
                    .iter()
                    .map(wire::commit_json)
                    .collect(),
            };
            if json {
                return print_json(&commits);
            }
            commits.iter().for_each(print_commit_line);
            Ok(())
        }
        Command::Branch { command } => run_branch(command).await,
        Command::Tag { command } => run_tag(command).await,
        Command::Changes { command } => changes_cli::run(command).await,
        Command::History { property, limit, entity } => history_cli::history(entity, property.as_deref(), limit).await,
        Command::Blame { entity } => history_cli::blame(entity).await,
        Command::Commit { command: CommitCommand::Changes { filter, page_token, limit, json, commit, graph } } => {
            if let Some(remote) = graph.remote()? {
                let page = commit_changes_remote(&remote, &commit, &filter, page_token, limit).await?;
                return if json { print_json(&page) } else { print_commit_changes(&page) };
            }
            let filter = filter.filter()?;
            let g = read_only(graph.uri()?).await?;
            let mut page = g.commit_changes(&commit, &filter, page_token.as_deref(), limit).await?;
            if page_token.is_none() {
                // Every page, into one answer.
                while let Some(next) = page.next_page_token.take() {
                    let more = g.commit_changes(&commit, &filter, Some(&next), limit).await?;
                    page.changes.extend(more.changes);
                    page.next_page_token = more.next_page_token;
                }
            }
            if json { print_json(&page) } else { print_commit_changes(&page) }
        }
        Command::Diff { stat, types, kind, ops, page_token, limit, json, from, to, graph } => {
            let answer = match graph.remote()? {
                Some(remote) => {
                    let mut q = vec![("from", from), ("to", to)];
                    q.extend((!types.is_empty()).then(|| ("type", types.join(","))));
                    q.extend(kind.map(|k| ("kind", k)));
                    q.extend((!ops.is_empty()).then(|| ("op", ops.join(","))));
                    q.extend(page_token.map(|t| ("page_token", t)));
                    q.extend(limit.map(|l| ("limit", l.to_string())));
                    q.extend(stat.then(|| ("stat", "true".to_string())));
                    remote.get("/diff", &q).await?
                }
                None => {
                    let ops = ops.iter().map(|o| o.parse()).collect::<Result<Vec<omnigraph::ChangeOp>>>()?;
                    let filter = omnigraph::DiffFilter { types, kind, ops };
                    let g = read_only(graph.uri()?).await?;
                    match stat {
                        true => to_json(&g.diff_stats(&from, &to, &filter).await?)?,
                        false => to_json(&g.diff(&from, &to, &filter, page_token.as_deref(), limit).await?)?,
                    }
                }
            };
            if json { print_json(&answer) } else { print_diff(&answer) }
        }
        Command::Reflog { branch, limit, json, graph } => {
            let answer = match graph.remote()? {
                Some(remote) => {
                    let mut q = vec![];
                    q.extend(branch.map(|b| ("branch", b)));
                    q.extend(limit.map(|l| ("limit", l.to_string())));
                    remote.get("/reflog", &q).await?
                }
                None => wire::reflog_json(&read_only(graph.uri()?).await?.reflog(branch.as_deref(), limit).await?),
            };
            if json {
                return print_json(&answer);
            }
            for e in answer["entries"].as_array().into_iter().flatten() {
                let head = |f: &str| e[f].as_str().unwrap_or("-").to_string();
                let actor = e["actor_id"].as_str().map(|a| format!(" by {a}")).unwrap_or_default();
                let (at, branch, op) = (text(e, "at"), text(e, "branch"), text(e, "operation"));
                outln!("{at} {branch} {} -> {} {op}{actor}", head("old_head"), head("new_head"));
            }
            Ok(())
        }
        Command::Commit { command: CommitCommand::Revert { commit, branch, how } } => {
            run_commit_move(&commit, &branch, false, how).await
        }
        Command::Commit { command: CommitCommand::CherryPick { commit, onto, how } } => {
            run_commit_move(&commit, &onto, true, how).await
        }
        Command::Commit { command: CommitCommand::Show { id, json, graph } } => {
            let answer = match graph.remote()? {
                Some(remote) => remote.get(&format!("/commits/{}", url_segment(&id)), &[]).await?,
                None => wire::commit_json(&read_only(graph.uri()?).await?.commit(&id).await?),
            };
            if json { print_json(&answer) } else { print_commit(&answer) }
        }
        Command::Load { data, mode, from, write, graph } => {
            let mode: LoadMode = mode.parse()?;
            if let Some(remote) = graph.remote()? {
                write.check_remote("load", false)?;
                let bytes = if data == "-" {
                    let mut buf = Vec::new();
                    std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                        .map_err(|e| OmniError::BadRequest(format!("cannot read stdin: {e}")))?;
                    buf
                } else {
                    std::fs::read(&data).map_err(|e| OmniError::BadRequest(format!("cannot read {data}: {e}")))?
                };
                let mut query = vec![("branch", write.branch.clone()), ("mode", mode.as_str().to_string())];
                query.extend(from.map(|f| ("from", f)));
                let answer = remote.post_bytes("/load/ndjson", &query, "application/x-ndjson", bytes).await?;
                return if write.json { print_json(&answer) } else { print_write(&answer) };
            }
            let g = Omnigraph::open(graph.uri()?).await?;
            if let Some(base) = &from
                && g.ensure_branch(&write.branch, base).await?
                && !write.json
            {
                eprintln!("created branch {} from {base}", write.branch);
            }
            let show = !quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
            let progress = |n: u64| {
                if show {
                    eprint!("\rparsed {n} records");
                }
            };
            let reader: Box<dyn std::io::BufRead> = if data == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                let file = std::fs::File::open(&data)
                    .map_err(|e| OmniError::BadRequest(format!("cannot read {data}: {e}")))?;
                Box::new(std::io::BufReader::new(file))
            };
            let out = g.load_with_progress(reader, mode, &write.options()?, &progress).await;
            if show {
                eprintln!();
            }
            let out = out?;
            let answer = wire::load_json(&out, g.root().uri(), mode.as_str(), &write.branch);
            if write.json { print_json(&answer) } else { print_write(&answer) }
        }
        Command::Query {
            source,
            params,
            params_file,
            branch,
            commit,
            snapshot,
            format,
            json,
            explain,
            profile,
            limits,
            at,
        } => {
            let text = source.text()?;
            let params = match params_file {
                Some(f) => parse_params(Some(&read_file(&f)?))?,
                None => parse_params(params.as_deref())?,
            };
            let format = query_format(json, format.as_deref());
            let at_ref = commit.or(snapshot);
            let insight = Insight::from_flags(explain, profile)?;
            if let Some((positional, remote)) = at.remote()? {
                let name = source.one_name(positional)?;
                let body = serde_json::json!({
                    "query": text, "name": name, "params": params, "branch": branch, "snapshot": at_ref,
                    "explain": explain, "profile": profile,
                });
                let answer = remote.post("/query", &body, &[]).await?;
                return print_result(&wire::ReadOutput::from_json(&answer)?, &format);
            }
            let (name, graph) = source.name_at(&at)?;
            let target = ReadTarget::of(at_ref, branch);
            let g = read_only(graph).await?;
            let result = g.query_insight(&text, name, params, &target, limits.limits(), insight).await?;
            let target = match &target {
                ReadTarget::Branch(b) => serde_json::json!({ "branch": b }),
                ReadTarget::Commit(c) => serde_json::json!({ "snapshot": c }),
            };
            print_result(&wire::read_output(&result, name, target), &format)
        }
        Command::Mutate { source, params, write, at } => {
            let text = source.text()?;
            let params = parse_params(params.as_deref())?;
            let answer = if let Some((positional, remote)) = at.remote()? {
                write.check_remote("mutate", true)?;
                let name = source.one_name(positional)?;
                let body = serde_json::json!({ "query": text, "name": name, "params": params, "branch": write.branch });
                match &write.if_commit {
                    Some(id) => {
                        remote.post("/mutate/if-graph-commit", &body, &[("Omnigraph-If-Graph-Commit", id)]).await?
                    }
                    None => remote.post("/mutate", &body, &[]).await?,
                }
            } else {
                let (name, graph) = source.name_at(&at)?;
                let g = Omnigraph::open(graph).await?;
                let out = g.mutate(&text, name, params, &write.options()?).await?;
                wire::mutation_json(&out, &write.branch, name)
            };
            if write.json { print_json(&answer) } else { print_write(&answer) }
        }
        Command::Recovery { command: RecoveryCommand::List { read_only, json, graph } } => {
            let mode = if read_only { OpenMode::ReadOnly } else { OpenMode::ReadWrite };
            let status = Omnigraph::open_with(graph.uri()?, mode).await?.recovery_status().await?;
            if json {
                return print_json(&status);
            }
            outln!("pending sidecars: {}", status.pending.len());
            for p in &status.pending {
                match &p.error {
                    Some(e) => outln!("  {}  unreadable: {e}", p.name),
                    None => outln!(
                        "  {}  {}  branch {}  {}  {}s old",
                        p.operation_id.as_deref().unwrap_or("?"),
                        p.writer_kind.as_deref().unwrap_or("?"),
                        p.branch.as_deref().unwrap_or("?"),
                        p.phase.as_deref().unwrap_or("?"),
                        p.age_seconds.unwrap_or(0)
                    ),
                }
                if let Some(d) = &p.diagnosis {
                    outln!("      {d}");
                }
            }
            outln!("recoveries: {}", status.audit.len());
            for a in &status.audit {
                outln!(
                    "  {}  {:?}  {}  {}",
                    a.operation_id,
                    a.recovery_kind,
                    a.writer_kind,
                    a.graph_commit_id.as_deref().unwrap_or("-")
                );
            }
            Ok(())
        }
        Command::Index { command: IndexCommand::Ensure { branch, actor, json, graph } } => {
            let actor = operator::actor(actor.as_deref())?;
            let report = Omnigraph::open(graph.uri()?).await?.ensure_indices(&branch, actor.as_deref()).await?;
            if json {
                return print_json(&report);
            }
            print_indexes(&report);
            Ok(())
        }
        Command::Index { command: IndexCommand::Status { branch, json, graph } } => {
            let status = read_only(graph.uri()?).await?.index_status(&branch).await?;
            if json {
                return print_json(&status);
            }
            print_index_status(&status);
            Ok(())
        }
        Command::Optimize { branch, actor, json, graph } => {
            let actor = operator::actor(actor.as_deref())?;
            let report = Omnigraph::open(graph.uri()?).await?.optimize(&branch, actor.as_deref()).await?;
            if json {
                return print_json(&report);
            }
            print_optimize(&report);
            Ok(())
        }
        Command::Cleanup { keep, older_than, reflog_expiry, confirm, json, graph } => {
            let g = Omnigraph::open(graph.uri()?).await?;
            let report = g.cleanup_with(keep, older_than.as_deref(), reflog_expiry.as_deref(), confirm).await?;
            if json {
                return print_json(&report);
            }
            print_cleanup(&report);
            Ok(())
        }
        Command::Repair { confirm, force, json, graph } => {
            let report = Omnigraph::open(graph.uri()?).await?.repair(confirm, force).await?;
            if json {
                return print_json(&report);
            }
            if report.drift.is_empty() {
                outln!("no drift: every table's Lance HEAD equals its manifest pin");
            }
            for d in &report.drift {
                let class = if d.maintenance { "maintenance" } else { "SUSPICIOUS" };
                outln!(
                    "{}  pin v{} -> HEAD v{}  {class}  [{}]",
                    d.table_key,
                    d.pinned,
                    d.head,
                    d.operations.join(", ")
                );
            }
            match (&report.published_commit_id, report.drift.is_empty(), confirm) {
                (Some(c), _, _) => outln!("published as commit {c}"),
                (None, false, false) => {
                    outln!("dry run: re-run with --confirm to publish verified maintenance drift")
                }
                (None, false, true) => outln!("not published: suspicious drift needs --force --confirm"),
                _ => {}
            }
            Ok(())
        }
        Command::Serve {
            bind,
            graphs,
            unauthenticated,
            graph_policies,
            default_deny,
            queries,
            graph_queries,
            mcp,
            max_inflight_writes,
            default_graph,
            limits,
            storage_config,
            read_only,
            refresh_interval_ms,
            memory_budget,
            header_timeout,
            max_connections,
            shutdown_timeout,
            index_lag_rows,
        } => {
            let read_limits = limits.limits();
            // Before any graph opens: every cache takes its capacity from it.
            omnigraph::set_memory_budget(memory_budget.unwrap_or_else(default_memory_budget));
            let gate = policy_gate(policy, &graph_policies, default_deny)?;
            let stored = stored_queries(queries.as_deref(), &graph_queries)?;
            serve(ServeArgs {
                bind,
                graphs,
                gate,
                stored,
                mcp,
                storage_config,
                read_only,
                refresh_interval: std::time::Duration::from_millis(refresh_interval_ms),
                unauthenticated,
                max_inflight: max_inflight_writes,
                default_graph,
                read_limits,
                header_timeout: std::time::Duration::from_secs(header_timeout),
                max_connections,
                shutdown_timeout: std::time::Duration::from_secs(shutdown_timeout),
                index_lag_rows,
            })
            .await
        }
        Command::Lint { .. } => Err(OmniError::Internal("lint is dispatched by run".into())),
        Command::Policy { .. } | Command::Queries { .. } | Command::Mcp { .. } => {
            Err(OmniError::Internal("policy, queries and mcp are dispatched by run".into()))
        }
        Command::Schema { command } => schema_cli::run(command).await,
    }
}

/// A text field of a wire answer, `-` when absent or null.
fn text<'a>(v: &'a serde_json::Value, field: &str) -> &'a str {
    v[field].as_str().unwrap_or("-")
}

/// A snapshot (as `GET /snapshot` answers it), for people.
fn print_snapshot(s: &serde_json::Value) -> Result<()> {
    outln!("branch:  {}", text(s, "branch"));
    outln!("head:    {}", text(s, "head_commit_id"));
    outln!("stamp:   {}", s["storage_stamp"]);
    outln!("durability: {}", text(s, "durability"));
    let tables = s["tables"].as_array().cloned().unwrap_or_default();
    let width = tables.iter().map(|t| text(t, "table_key").len()).max().unwrap_or(5).max(5);
    outln!("{:<width$}  {:>8}  {:>10}  stored on", "table", "version", "rows");
    for t in &tables {
        let on = t["table_branch"].as_str().unwrap_or("main");
        let (version, rows) = (t["version"].to_string(), t["row_count"].to_string());
        outln!("{:<width$}  {:>8}  {:>10}  {on}", text(t, "table_key"), version, rows);
    }
    Ok(())
}

/// One commit (as `GET /commits/{id}` answers it) on one line.
fn print_commit_line(c: &serde_json::Value) {
    let (id, at, actor, branch) =
        (text(c, "commit_id"), text(c, "created_at_iso"), text(c, "actor"), text(c, "branch"));
    outln!("{id}  {at}  {actor}  {branch}");
}

/// One commit (as `GET /commits/{id}` answers it), for people.
fn print_commit(c: &serde_json::Value) -> Result<()> {
    outln!("commit:   {}", text(c, "commit_id"));
    outln!("parent:   {}", text(c, "parent_commit_id"));
    if let Some(m) = c["merged_parent_commit_id"].as_str() {
        outln!("merged:   {m}");
    }
    outln!("actor:    {}", text(c, "actor"));
    outln!("created:  {}", text(c, "created_at_iso"));
    outln!("branch:   {}", text(c, "branch"));
    outln!("manifest: v{}", c["manifest_version"]);
    Ok(())
}

/// `s` as one URL path segment (a ref may hold `/` and `~`).
fn url_segment(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

async fn run_lint(query: &str, schema: Option<String>, json: bool, graph: Option<String>) -> Result<Outcome> {
    let source = read_file(query)?;
    let catalog = match (schema, graph) {
        (Some(pg), _) => {
            let text = read_file(&pg)?;
            schema_warnings(&pg, &text, !json);
            omnigraph::engine::schema_store::SchemaState::compile(&text)?.catalog
        }
        (None, Some(g)) => read_only(&g).await?.schema().await?.catalog.clone(),
        (None, None) => return Err(OmniError::BadRequest("lint needs --schema FILE or a GRAPH".into())),
    };
    let report = omnigraph::engine::lint::lint(&catalog, query, &source);
    if json {
        print_json(&report)?;
    } else {
        for q in &report.queries {
            if q.diagnostics.is_empty() {
                outln!("ok     {} ({})", q.name, q.kind.unwrap_or("?"));
            }
            for d in &q.diagnostics {
                let code = d.code.as_deref().map(|c| format!("[{c}] ")).unwrap_or_default();
                outln!("error  {query}:{}:{}: {code}{}", d.line, d.column, d.message);
            }
        }
        outln!("{} queries, {} errors", report.queries.len(), report.errors);
    }
    Ok(if report.errors > 0 { Outcome::Reported(2) } else { Outcome::Done })
}

/// The schema's warnings (unknown annotations), printed to stderr as
/// `warning  FILE:LINE:COL: [W01] …` when `print`; returned for `--json`.
fn schema_warnings(file: &str, source: &str, print: bool) -> Vec<serde_json::Value> {
    let warnings = omnigraph::engine::lang::catalog::warnings::schema_warnings(source);
    warnings
        .iter()
        .map(|d| {
            let code = d.code.as_deref().unwrap_or("W01");
            if print {
                eprintln!("warning  {file}:{}:{}: [{code}] {}", d.pos.line, d.pos.column, d.message);
            }
            serde_json::json!({"file": file, "line": d.pos.line, "column": d.pos.column, "code": code, "message": d.message})
        })
        .collect()
}

fn parse_params(text: Option<&str>) -> Result<serde_json::Map<String, serde_json::Value>> {
    let Some(text) = text else { return Ok(serde_json::Map::new()) };
    match serde_json::from_str(text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(OmniError::BadRequest(format!("--params must be a JSON object, got {other}"))),
        Err(e) => Err(OmniError::BadRequest(format!("--params is not valid JSON: {e}"))),
    }
}

/// A write's answer (`load` or `mutate`, as the HTTP body has it), for people.
fn print_write(answer: &serde_json::Value) -> Result<()> {
    outln!("nodes affected: {}", answer["affected_nodes"]);
    outln!("edges affected: {}", answer["affected_edges"]);
    outln!("commit:         {}", answer["graph_commit_id"].as_str().unwrap_or("none (no effect)"));
    Ok(())
}

fn cell_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Print a read's answer (as `POST /query` gives it, from the engine or
/// from a server); JSON rows keep their projection order.
/// A read's answer in `format`; with a plan (EXPLAIN, PROFILE) that is not
/// JSON, the plan as an indented tree: alone for an EXPLAIN, after a
/// table's rows, and on stderr beside rows meant for a program (jsonl, csv).
fn print_result(out: &wire::ReadOutput, format: &str) -> Result<()> {
    match (&out.plan, format) {
        (_, "json") | (None, _) => print_rows(out, format),
        (Some(plan), _) if out.explain => {
            out!("{}", plan.render());
            Ok(())
        }
        (Some(plan), "table") => {
            print_rows(out, format)?;
            out!("\n{}", plan.render());
            Ok(())
        }
        (Some(plan), _) => {
            print_rows(out, format)?;
            eprint!("{}", plan.render());
            Ok(())
        }
    }
}

fn print_rows(out: &wire::ReadOutput, format: &str) -> Result<()> {
    let cells = |row: &wire::OrderedRow| -> Vec<String> { row.0.iter().map(|(_, v)| cell_text(v)).collect() };
    match format {
        "json" => print_json(out),
        "jsonl" => {
            for row in &out.rows {
                outln!("{}", serde_json::to_string(row).map_err(|e| OmniError::Internal(e.to_string()))?);
            }
            Ok(())
        }
        "csv" => {
            let esc = |s: &str| {
                if s.contains([',', '"', '\n']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
            };
            outln!("{}", out.columns.iter().map(|c| esc(c)).collect::<Vec<_>>().join(","));
            for row in &out.rows {
                outln!("{}", cells(row).iter().map(|c| esc(c)).collect::<Vec<_>>().join(","));
            }
            Ok(())
        }
        "table" => {
            let rows: Vec<Vec<String>> = out.rows.iter().map(cells).collect();
            let widths: Vec<usize> = out
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| rows.iter().map(|row| row[i].chars().count()).max().unwrap_or(0).max(c.chars().count()))
                .collect();
            let line = |vals: Vec<String>| {
                vals.iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ")
                    .trim_end()
                    .to_string()
            };
            outln!("{}", line(out.columns.clone()));
            outln!("{}", line(widths.iter().map(|w| "-".repeat(*w)).collect()));
            for row in rows {
                outln!("{}", line(row));
            }
            outln!("({} rows at commit {})", out.row_count, out.graph_commit_id);
            Ok(())
        }
        other => Err(OmniError::BadRequest(format!("unknown format `{other}`: use table, json, jsonl or csv"))),
    }
}

/// The bundled example schema and data, used when `serve` creates its default graph.
const EXAMPLE_SCHEMA: &str = include_str!("../examples/social.pg");
const EXAMPLE_DATA: &str = include_str!("../examples/social.jsonl");

/// What `omnigraph serve` was asked for.
struct ServeArgs {
    bind: String,
    graphs: Vec<String>,
    gate: omnigraph::server::Gate,
    stored: omnigraph::server::StoredQueries,
    mcp: bool,
    storage_config: Option<String>,
    read_only: bool,
    refresh_interval: std::time::Duration,
    unauthenticated: bool,
    max_inflight: usize,
    default_graph: Option<String>,
    read_limits: omnigraph::engine::read_limits::ReadLimits,
    header_timeout: std::time::Duration,
    max_connections: usize,
    shutdown_timeout: std::time::Duration,
    index_lag_rows: Option<u64>,
}

async fn serve(args: ServeArgs) -> Result<()> {
    let ServeArgs {
        bind,
        graphs,
        gate,
        stored,
        mcp,
        storage_config,
        read_only,
        refresh_interval,
        unauthenticated,
        max_inflight,
        default_graph,
        read_limits,
        header_timeout,
        max_connections,
        shutdown_timeout,
        index_lag_rows,
    } = args;
    let per_graph = match &storage_config {
        Some(path) => read_storage_config(path)?,
        None => Default::default(),
    };
    let mut specs = Vec::new();
    for g in &graphs {
        let (id, root) =
            g.split_once('=').ok_or_else(|| OmniError::BadRequest(format!("--graph takes ID=ROOT, got `{g}`")))?;
        if let Some((options, durability)) = per_graph.get(id) {
            omnigraph::engine::storage::config::register_root(root, options.clone());
            if let Some(d) = durability {
                durability::register_root(omnigraph::engine::storage::Root::parse(root)?.uri(), *d);
            }
        }
        specs.push((id.to_string(), root.to_string()));
    }
    if let Some(unknown) = per_graph.keys().find(|id| !specs.iter().any(|(g, _)| g == *id)) {
        return Err(OmniError::BadRequest(format!(
            "--storage-config names graph `{unknown}`, which no --graph serves"
        )));
    }
    if specs.is_empty() && read_only {
        return Err(OmniError::BadRequest("--read-only serves existing graphs: pass --graph ID=ROOT".into()));
    }
    if specs.is_empty() {
        let root = "omnigraph.graph".to_string();
        if Omnigraph::open_with(&root, OpenMode::ReadOnly).await.is_err() {
            let g = Omnigraph::init(&root, EXAMPLE_SCHEMA).await?;
            g.load(EXAMPLE_DATA.as_bytes(), LoadMode::Overwrite, &WriteOptions::default()).await?;
            eprintln!("created graph `default` at {root} from the bundled example schema and data");
        }
        specs.push(("default".to_string(), root));
    }
    let config = omnigraph::server::ServerConfig {
        bind,
        graphs: specs,
        auth: omnigraph::server::Auth::from_env()?,
        unauthenticated,
        gate,
        queries: stored,
        mcp,
        max_inflight_writes_per_actor: max_inflight,
        default_graph,
        read_limits,
        read_only,
        refresh_interval,
        header_timeout,
        max_connections,
        shutdown_timeout,
        index_lag_rows,
        allocator_stats: Some(allocator_stats),
    };
    omnigraph::server::serve(config, shutdown_signal()).await
}

/// The daemon's policies: `--policy` for every graph, `--graph-policy
/// ID=FILE` per graph, each bundle compiled now so a bad one stops the
/// start with its line and reason.
fn policy_gate(all: Option<&str>, per_graph: &[String], default_deny: bool) -> Result<omnigraph::server::Gate> {
    use omnigraph::engine::policy::Policy;
    let load = |file: &str| -> Result<std::sync::Arc<Policy>> {
        let source = read_file(file)?;
        Policy::parse(file, &source).map(std::sync::Arc::new).map_err(|e| OmniError::BadRequest(e.to_string()))
    };
    let policies = omnigraph::server::PerGraph {
        all: all.map(load).transpose()?,
        graphs: by_graph("--graph-policy", per_graph, load)?,
    };
    Ok(omnigraph::server::Gate { policies, default_deny })
}

/// The daemon's stored queries: `--queries DIR` for every graph,
/// `--graph-queries ID=DIR` per graph (each parsed now; type-checked
/// against each graph's schema once it is open).
fn stored_queries(all: Option<&str>, per_graph: &[String]) -> Result<omnigraph::server::StoredQueries> {
    let load = |dir: &str| queries_cli::registry(dir).map(std::sync::Arc::new);
    Ok(omnigraph::server::PerGraph {
        all: all.map(load).transpose()?,
        graphs: by_graph("--graph-queries", per_graph, load)?,
    })
}

/// `ID=VALUE` arguments of `flag`, each loaded; an id named twice is refused.
fn by_graph<T>(
    flag: &str,
    specs: &[String],
    load: impl Fn(&str) -> Result<T>,
) -> Result<std::collections::BTreeMap<String, T>> {
    let mut out = std::collections::BTreeMap::new();
    for spec in specs {
        let (id, value) = spec
            .split_once('=')
            .ok_or_else(|| OmniError::BadRequest(format!("{flag} takes ID=VALUE, got `{spec}`")))?;
        if out.insert(id.to_string(), load(value)?).is_some() {
            return Err(OmniError::BadRequest(format!("{flag} names graph `{id}` twice")));
        }
    }
    Ok(out)
}

/// A `--durability` value.
fn durability_arg(s: &str) -> std::result::Result<omnigraph::Durability, String> {
    s.parse().map_err(|e: OmniError| e.to_string())
}

/// A `--memory-budget` size (at least the smallest budget the caches split).
fn memory_size(s: &str) -> std::result::Result<u64, String> {
    use omnigraph::engine::memory_budget::{MIN_BUDGET, parse_size};
    let bytes = parse_size(s).map_err(|e| e.to_string())?;
    if bytes < MIN_BUDGET {
        return Err(format!("must be at least {} MiB", MIN_BUDGET >> 20));
    }
    Ok(bytes)
}

/// A daemon's budget when none is given: a share of the machine's memory.
fn default_memory_budget() -> u64 {
    let machine =
        std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| omnigraph::engine::memory_budget::meminfo_total(&m));
    omnigraph::engine::memory_budget::daemon_default(machine)
}

/// A numeric flag that must be at least 1 (0 would serve nothing, or close
/// every connection before its first byte).
fn at_least_one<T: std::str::FromStr + PartialEq + From<u8>>(s: &str) -> std::result::Result<T, String> {
    let n: T = s.parse().map_err(|_| format!("`{s}` is not a whole number"))?;
    if n == T::from(0) { Err("must be at least 1".to_string()) } else { Ok(n) }
}

/// A graph's entry of a `--storage-config` file: its storage options, and
/// its own `durability` when the entry has that key.
type GraphStorage = (omnigraph::StorageOptions, Option<omnigraph::Durability>);

/// Per-graph storage options from a `--storage-config` file.
fn read_storage_config(path: &str) -> Result<std::collections::BTreeMap<String, GraphStorage>> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        graphs: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| OmniError::BadRequest(format!("cannot read --storage-config {path}: {e}")))?;
    let file: File = serde_json::from_str(&text)
        .map_err(|e| OmniError::BadRequest(format!("--storage-config {path} is not valid: {e}")))?;
    let entry = |mut map: std::collections::BTreeMap<String, String>| -> Result<GraphStorage> {
        let durability = map.remove("durability").map(|d| d.parse()).transpose()?;
        Ok((omnigraph::StorageOptions::from_map(&map)?, durability))
    };
    file.graphs.into_iter().map(|(id, map)| Ok((id.clone(), entry(map)?))).collect()
}

/// When the daemon's shutdown signal arrived: its shutdown timeout runs
/// from here, the actors' quiesce included.
static SHUTDOWN_STARTED: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// How long the actors may take to quiesce after the command returned: for
/// the daemon (`serve_shutdown` is its shutdown timeout), what is left of
/// that timeout (all of it if it stopped without a signal), so shutdown
/// never runs past it.
fn quiesce_budget(serve_shutdown: Option<std::time::Duration>) -> std::time::Duration {
    match serve_shutdown {
        Some(limit) => SHUTDOWN_STARTED.get().map_or(limit, |started| limit.saturating_sub(started.elapsed())),
        None => std::time::Duration::from_secs(60),
    }
}

/// SIGINT or SIGTERM: stop accepting, let in-flight requests finish.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
    let _ = SHUTDOWN_STARTED.set(std::time::Instant::now());
}
