//! `omnigraph changes poll` and `omnigraph changes baseline`: the change
//! feed from the command line, in the HTTP API's shapes.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Subcommand;
use omnigraph::{DiffFilter, FeedFrom, FeedPage, FeedRequest, FeedStart, OmniError, Result};

use super::address::GraphArg;
use super::remote::Remote;
use super::{print_json, read_only, to_json};

/// The filter flags every feed command takes.
#[derive(clap::Args)]
pub struct FilterArgs {
    /// Only nodes or only edges (repeatable; both is no filter).
    #[arg(long = "kind", value_parser = ["node", "edge"])]
    kinds: Vec<String>,
    /// Only these types (repeatable).
    #[arg(long = "type")]
    types: Vec<String>,
    /// Only these ops: insert, update, delete (repeatable).
    #[arg(long = "op")]
    ops: Vec<String>,
}

impl FilterArgs {
    /// The flags as the HTTP API's `kind=&type=&op=` parameters.
    pub fn query(&self) -> Vec<(&'static str, String)> {
        let named = [("kind", &self.kinds), ("type", &self.types), ("op", &self.ops)];
        named.into_iter().flat_map(|(key, values)| values.iter().map(move |v| (key, v.clone()))).collect()
    }

    /// The filter the flags ask for.
    pub fn filter(self) -> Result<DiffFilter> {
        let ops = self.ops.iter().map(|o| o.parse()).collect::<Result<Vec<omnigraph::ChangeOp>>>()?;
        let kind = if self.kinds.iter().any(|k| k != &self.kinds[0]) { None } else { self.kinds.first().cloned() };
        Ok(DiffFilter { types: self.types, kind, ops })
    }
}

/// The change feed of a branch.
#[derive(Subcommand)]
pub enum ChangesCommand {
    /// Poll a branch's change feed: one block per commit after the place
    /// given, oldest first. Fetches every page of the poll and prints once,
    /// after the terminal page: {blocks, cursor, caught_up}.
    #[command(after_help = "Example:\n  omnigraph changes poll --cursor \"$CURSOR\" --wait 30 --json graph.omni")]
    Poll {
        /// The branch followed.
        #[arg(long, default_value = "main")]
        branch: String,
        /// Resume after a cursor from an earlier poll or a baseline.
        #[arg(long, conflicts_with_all = ["start", "page_token"])]
        cursor: Option<String>,
        /// Start a new feed: now (default), beginning, or after:COMMIT.
        #[arg(long, conflicts_with = "page_token")]
        start: Option<String>,
        /// Print only the page after the one that handed out this token.
        #[arg(long)]
        page_token: Option<String>,
        /// Wait up to this many seconds for a commit when there is none
        /// (at most 60).
        #[arg(long)]
        wait: Option<u64>,
        /// Changes per page (default 1000, at most 10000).
        #[arg(long)]
        limit: Option<usize>,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
    /// Write an exact snapshot of a branch to FILE (atomically: the file is
    /// whole or absent), then print the cursor that resumes the feed after
    /// it: {snapshot_commit_id, resume_cursor}.
    #[command(after_help = "Example:\n  omnigraph changes baseline --out snapshot.jsonl --branch main graph.omni")]
    Baseline {
        /// The NDJSON file to write (the format `load` reads).
        #[arg(long)]
        out: PathBuf,
        /// The branch.
        #[arg(long, default_value = "main")]
        branch: String,
        #[command(flatten)]
        filter: FilterArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        graph: GraphArg,
    },
}

impl ChangesCommand {
    /// Whether `--json` was asked for (errors print as JSON then).
    pub fn json(&self) -> bool {
        match self {
            ChangesCommand::Poll { json, .. } | ChangesCommand::Baseline { json, .. } => *json,
        }
    }
}

/// Run a `changes` command.
pub async fn run(command: ChangesCommand) -> Result<()> {
    match command {
        ChangesCommand::Poll { branch, cursor, start, page_token, wait, limit, filter, json, graph } => {
            if let Some(remote) = graph.remote()? {
                let mut query = filter.query();
                query.push(("branch", branch));
                query.extend(limit.map(|n| ("limit", n.to_string())));
                query.extend(wait.map(|w| ("wait", w.to_string())));
                let first = match (cursor, start, page_token.clone()) {
                    (Some(c), _, _) => ("cursor", c),
                    (_, _, Some(t)) => ("page_token", t),
                    (_, Some(s), _) => ("start", s),
                    (None, None, None) => ("start", "now".to_string()),
                };
                let page = poll_remote(&remote, &query, first, page_token.is_none()).await?;
                return if json { print_json(&page) } else { print_page(&page) };
            }
            let from = match (cursor, start, page_token.clone()) {
                (Some(c), _, _) => FeedFrom::Cursor(c),
                (_, _, Some(t)) => FeedFrom::PageToken(t),
                (_, Some(s), _) => FeedFrom::Start(s.parse()?),
                (None, None, None) => FeedFrom::Start(FeedStart::Now),
            };
            let wait = wait.map(std::time::Duration::from_secs);
            let mut req = FeedRequest { branch: Some(branch), from, filter: filter.filter()?, limit, wait };
            let g = read_only(graph.uri()?).await?;
            let mut page = g.changes_poll(&req).await?;
            if page_token.is_none() {
                while let Some(next) = page.next_page_token.take() {
                    req.from = FeedFrom::PageToken(next);
                    let more = g.changes_poll(&req).await?;
                    append(&mut page, more);
                }
            }
            if json { print_json(&page) } else { print_page(&page) }
        }
        ChangesCommand::Baseline { out, branch, filter, json, graph } => {
            let handshake = match graph.remote()? {
                Some(remote) => {
                    let body = serde_json::json!({
                        "branch": branch, "kind": filter.kinds, "type": filter.types, "op": filter.ops,
                    });
                    let response = remote.post_streamed("/changes/baseline", &body).await?;
                    write_atomically(&out, |tx| records_then_trailer(response, tx)).await?
                }
                None => {
                    let g = read_only(graph.uri()?).await?;
                    let baseline = g.changes_baseline(Some(&branch), &filter.filter()?).await?;
                    let export = baseline.export;
                    write_atomically(&out, |tx| async move { export.run(tx).await.map(|_| ()) }).await?;
                    to_json(&baseline.handshake)?
                }
            };
            if json { print_json(&handshake) } else { print_handshake(&handshake, &out) }
        }
    }
}

/// One poll through a daemon (`GET /changes` with `query` and the place
/// `first`), every page of it when `all_pages`.
async fn poll_remote(
    remote: &Remote,
    query: &[(&'static str, String)],
    first: (&'static str, String),
    all_pages: bool,
) -> Result<FeedPage> {
    let poll = |place: (&'static str, String)| {
        let mut q = query.to_vec();
        q.push(place);
        async move { remote.get("/changes", &q).await.and_then(from_answer::<FeedPage>) }
    };
    let mut page = poll(first).await?;
    while let Some(next) = page.next_page_token.take().filter(|_| all_pages) {
        let more = poll(("page_token", next)).await?;
        append(&mut page, more);
    }
    Ok(page)
}

/// A typed answer from a server's JSON body.
pub fn from_answer<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| OmniError::Internal(format!("an answer of another shape: {e}")))
}

/// Add the next page of a poll to `page`: a block the last page ended
/// inside continues.
fn append(page: &mut FeedPage, more: FeedPage) {
    let mut blocks = more.blocks.into_iter();
    if let (Some(last), Some(first)) = (page.blocks.last_mut(), blocks.as_slice().first())
        && last.cause.graph_commit_id == first.cause.graph_commit_id
        && let Some(first) = blocks.next()
    {
        last.changes.extend(first.changes);
    }
    page.blocks.extend(blocks);
    page.next_page_token = more.next_page_token;
    page.cursor = more.cursor;
    page.caught_up = more.caught_up;
}

fn print_page(page: &FeedPage) -> Result<()> {
    for b in &page.blocks {
        let c = &b.cause;
        outln!("commit {} on {} ({} changes)", c.graph_commit_id, c.authored_branch, b.changes.len());
        for e in &b.changes {
            outln!("  {:?} {} {} {}", e.op, e.kind, e.entity_type.name, e.id);
        }
    }
    if let Some(t) = &page.next_page_token {
        outln!("more: --page-token {t}");
    }
    if let Some(c) = &page.cursor {
        outln!("cursor: {c}");
    }
    if let Some(c) = page.caught_up {
        outln!("caught_up: {c}");
    }
    Ok(())
}

fn print_handshake(h: &serde_json::Value, out: &Path) -> Result<()> {
    outln!("wrote {}", out.display());
    outln!("snapshot_commit_id: {}", h["snapshot_commit_id"].as_str().unwrap_or("-"));
    outln!("resume_cursor: {}", h["resume_cursor"].as_str().unwrap_or("-"));
    Ok(())
}

/// A daemon's baseline stream (`POST /changes/baseline`): every record
/// line sent on to `tx`, and the last line, `{"baseline": HANDSHAKE}`,
/// held back and answered. A stream that ends without it is an error, so
/// a cut connection never leaves a file that looks complete.
async fn records_then_trailer(
    mut response: reqwest::Response,
    tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes>>,
) -> Result<serde_json::Value> {
    let (mut line, mut held) = (Vec::new(), None::<Vec<u8>>);
    let cut = |e: reqwest::Error| OmniError::Internal(format!("the server's baseline stream broke off: {e}"));
    while let Some(chunk) = response.chunk().await.map_err(cut)? {
        for piece in chunk.split_inclusive(|b| *b == b'\n') {
            line.extend_from_slice(piece);
            if line.ends_with(b"\n")
                && let Some(previous) = held.replace(std::mem::take(&mut line))
                && tx.send(Ok(previous.into())).await.is_err()
            {
                return Err(OmniError::Internal("the baseline file stopped taking records".into()));
            }
        }
    }
    let trailer: Option<serde_json::Value> =
        held.filter(|_| line.is_empty()).and_then(|h| serde_json::from_slice(&h).ok());
    match trailer.and_then(|mut t| t.get_mut("baseline").map(serde_json::Value::take)) {
        Some(handshake) if handshake.is_object() => Ok(handshake),
        _ => Err(OmniError::Internal("the server's baseline ended before its handshake; nothing was written".into())),
    }
}

/// Write the export to `out` as a whole: into a temporary file beside it,
/// synced, renamed over `out`, and the directory synced, so a crash leaves
/// the old file or the new one, never a part, and the cursor printed after
/// it is never ahead of a durable snapshot.
async fn write_atomically<T, F, Fut>(out: &Path, produce: F) -> Result<T>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<bytes::Bytes>>) -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let failed = |what: &str, e: std::io::Error| OmniError::BadRequest(format!("{what} {}: {e}", out.display()));
    let name = out.file_name().ok_or_else(|| OmniError::BadRequest(format!("--out {}: not a file", out.display())))?;
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let tmp = dir.join(format!(".{}.tmp-{}", name.to_string_lossy(), std::process::id()));
    let file = std::fs::File::create(&tmp).map_err(|e| failed("cannot write", e))?;
    let mut sink = std::io::BufWriter::new(file);
    let (tx, mut rx) = tokio::sync::mpsc::channel(8);
    let (produced, written) = tokio::join!(produce(tx), async {
        while let Some(chunk) = rx.recv().await {
            sink.write_all(&chunk?).map_err(|e| failed("writing", e))?;
        }
        let file = sink.into_inner().map_err(|e| failed("writing", e.into_error()))?;
        file.sync_all().map_err(|e| failed("syncing", e))
    });
    let done = written.and(produced);
    let answer = match done {
        Ok(a) => a,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    std::fs::rename(&tmp, out).map_err(|e| failed("cannot replace", e))?;
    std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| failed("syncing the directory of", e))?;
    Ok(answer)
}
