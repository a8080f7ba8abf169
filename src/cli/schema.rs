//! `omnigraph schema show|plan|apply`, on the graph's storage or through a
//! daemon (`--server`): both print the HTTP API's answers (`GET /schema`,
//! `POST /schema/apply`), so the two paths print the same bytes.

use clap::Subcommand;
use omnigraph::{OmniError, Omnigraph, Result, wire};
use serde_json::Value;

use super::address::GraphArg;
use super::{operator, print_json, read_file, read_only, schema_warnings, to_json};

/// The schema commands.
#[derive(Subcommand)]
pub enum SchemaCommand {
    /// Print the steps applying a .pg schema would take (writes nothing).
    #[command(after_help = "Example:\n  omnigraph schema plan --schema next.pg --json graph.omni")]
    Plan {
        /// The target .pg schema file.
        #[arg(long)]
        schema: String,
        /// Plan drops as hard (their data goes with the apply).
        #[arg(long = "allow-data-loss")]
        allow_data_loss: bool,
        /// The branch: each branch has its own schema.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Print JSON (the fields of `POST /graphs/{id}/schema/apply`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Make a .pg schema a branch's schema (default main), as one commit on
    /// it; other branches keep theirs.
    #[command(after_help = "Example:\n  omnigraph schema apply --schema next.pg graph.omni")]
    Apply {
        /// The target .pg schema file.
        #[arg(long)]
        schema: String,
        /// Drop properties and types hard (their data goes with the apply).
        #[arg(long = "allow-data-loss")]
        allow_data_loss: bool,
        /// The branch: each branch has its own schema.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Actor recorded on the commit.
        #[arg(long = "as")]
        actor: Option<String>,
        /// Print JSON (the fields of `POST /graphs/{id}/schema/apply`).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// The steps that turn the schema at one ref into the schema at another
    /// (refs: a branch, a commit, a tag, `REF~N`, `A...B`).
    #[command(after_help = "Example:\n  omnigraph schema diff main~3 main graph.omni")]
    Diff {
        /// Print JSON (`GET /graphs/{id}/schema/diff`).
        #[arg(long)]
        json: bool,
        /// The ref diffed from.
        from: String,
        /// The ref diffed to.
        to: String,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Print a branch's .pg source (default main's).
    #[command(alias = "get")]
    #[command(after_help = "Example:\n  omnigraph schema show graph.omni")]
    Show {
        /// Print JSON (`GET /graphs/{id}/schema`: schema_source,
        /// schema_identity and the compiled catalog).
        #[arg(long)]
        json: bool,
        /// The branch: each branch has its own schema.
        #[arg(long, default_value = "main")]
        branch: String,
        #[command(flatten)]
        graph: GraphArg,
    },
}

impl SchemaCommand {
    /// Whether the command prints JSON (errors too).
    pub fn json(&self) -> bool {
        match self {
            SchemaCommand::Show { json, .. }
            | SchemaCommand::Plan { json, .. }
            | SchemaCommand::Apply { json, .. }
            | SchemaCommand::Diff { json, .. } => *json,
        }
    }
}

/// Run one schema command.
pub async fn run(command: SchemaCommand) -> Result<()> {
    match command {
        SchemaCommand::Show { json, branch, graph } => {
            let answer = match graph.remote()? {
                Some(remote) => remote.get("/schema", &[("branch", branch)]).await?,
                None => wire::schema_json(&*read_only(graph.uri()?).await?.schema_of(&branch).await?),
            };
            if json {
                return print_json(&answer);
            }
            out!("{}", answer["schema_source"].as_str().unwrap_or_default());
            Ok(())
        }
        SchemaCommand::Diff { json, from, to, graph } => {
            let answer = match graph.remote()? {
                Some(remote) => remote.get("/schema/diff", &[("from", from), ("to", to)]).await?,
                None => to_json(&read_only(graph.uri()?).await?.schema_diff(&from, &to).await?)?,
            };
            if json {
                return print_json(&answer);
            }
            for step in answer["steps"].as_array().into_iter().flatten() {
                outln!("{}", step["detail"].as_str().unwrap_or_default());
            }
            let (a, b) = (answer["from"].as_str().unwrap_or_default(), answer["to"].as_str().unwrap_or_default());
            match answer["step_count"].as_u64().unwrap_or(0) {
                0 => outln!("no change: {a} and {b} share one schema"),
                n => outln!("{n} step(s) from {a} to {b}"),
            }
            Ok(())
        }
        SchemaCommand::Plan { schema, allow_data_loss, branch, json, graph } => {
            let to = Target { branch, actor: None, dry_run: true };
            let answer = change(&schema, allow_data_loss, &to, json, &graph).await?;
            print_report(&answer, json)
        }
        SchemaCommand::Apply { schema, allow_data_loss, branch, actor, json, graph } => {
            let to = Target { branch, actor, dry_run: false };
            let answer = change(&schema, allow_data_loss, &to, json, &graph).await?;
            print_report(&answer, json)
        }
    }
}

/// Where and how a plan or apply runs.
struct Target {
    branch: String,
    actor: Option<String>,
    dry_run: bool,
}

/// Plan (`to.dry_run`) or apply the schema in `file` on `to.branch`: the
/// report as `POST /schema/apply` answers it.
async fn change(file: &str, allow_data_loss: bool, to: &Target, json: bool, graph: &GraphArg) -> Result<Value> {
    let source = read_file(file)?;
    schema_warnings(file, &source, !json);
    if let Some(remote) = graph.remote()? {
        if to.actor.is_some() {
            return Err(OmniError::BadRequest(
                "schema apply --as: through a server the actor is the one its token names; drop --as".into(),
            ));
        }
        let body = serde_json::json!({
            "schema_source": source, "branch": to.branch, "allow_data_loss": allow_data_loss, "dry_run": to.dry_run,
        });
        return remote.post("/schema/apply", &body, &[]).await;
    }
    let report = if to.dry_run {
        read_only(graph.uri()?).await?.schema_plan_on(&to.branch, &source, allow_data_loss).await?
    } else {
        let actor = operator::actor(to.actor.as_deref())?;
        let g = Omnigraph::open(graph.uri()?).await?;
        g.schema_apply_on(&to.branch, &source, allow_data_loss, actor.as_deref()).await?
    };
    to_json(&report)
}

/// A plan or apply report, for people (or as JSON).
fn print_report(r: &Value, json: bool) -> Result<()> {
    if json {
        return print_json(r);
    }
    let flag = |v: &Value, f: &str| v[f].as_bool().unwrap_or(false);
    for step in r["steps"].as_array().into_iter().flatten() {
        let mark = match (flag(step, "supported"), flag(step, "data_loss"), flag(step, "validates")) {
            (false, _, _) => "UNSUPPORTED ",
            (true, true, _) => "DATA LOSS ",
            (true, false, true) => "validates ",
            _ => "",
        };
        let why = step["reason"].as_str().map(|w| format!(" ({w})")).unwrap_or_default();
        outln!("{mark}{}{why}", step["detail"].as_str().unwrap_or_default());
    }
    let count = r["step_count"].as_u64().unwrap_or(0);
    match (r["graph_commit_id"].as_str(), count, flag(r, "supported")) {
        (Some(c), _, _) => outln!("applied {count} step(s) as commit {c}"),
        (None, _, false) => outln!("not applicable: a step is unsupported"),
        (None, 0, true) if r["schema_identity"] == r["previous_schema_identity"] => {
            outln!("no change: the schema is already current")
        }
        (None, n, true) => outln!("{n} step(s); run `omnigraph schema apply` to apply"),
    }
    Ok(())
}
