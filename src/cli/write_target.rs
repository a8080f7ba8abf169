//! What a write is about to touch, said before it runs: every write echoes
//! its resolved target to stderr (`omnigraph load → s3://bucket/g (direct,
//! remote)`), and a destructive write against a graph that is not on this
//! machine needs consent (`--yes`, or an answer on a terminal).

use std::io::{BufRead, IsTerminal, Write};

use omnigraph::{OmniError, Result};

/// One write command's target.
pub struct WriteTarget<'a> {
    /// The command as typed (`load`, `branch delete`, …).
    pub command: &'static str,
    /// The graph's URI (or the server's URL and graph id).
    pub uri: std::borrow::Cow<'a, str>,
    /// `direct` (storage) or `server` (a daemon).
    pub via: &'static str,
    /// Whether it destroys data a commit cannot bring back (an overwrite
    /// load, a branch delete, a confirmed cleanup).
    pub destructive: bool,
}

/// Whether `uri` names a graph on this machine (a path or `file://`).
pub fn is_local(uri: &str) -> bool {
    uri.starts_with("file://") || !uri.contains("://")
}

impl WriteTarget<'_> {
    /// The echo line: `omnigraph load → URI (direct, local|remote)`.
    pub fn line(&self) -> String {
        let place = if is_local(&self.uri) { "local" } else { "remote" };
        format!("omnigraph {} → {} ({}, {place})", self.command, self.uri, self.via)
    }

    /// Echo the target (unless `quiet`) and, for a destructive write on a
    /// remote graph, ask: `yes` consents, a terminal is prompted, anything
    /// else is refused before the write starts.
    pub fn announce(&self, quiet: bool, yes: bool) -> Result<()> {
        if !quiet {
            eprintln!("{}", self.line());
        }
        if !self.destructive || is_local(&self.uri) || yes {
            return Ok(());
        }
        let refused = || {
            OmniError::BadRequest(format!(
                "`omnigraph {}` destroys data on the remote graph {}: pass --yes to proceed",
                self.command, self.uri
            ))
        };
        if !std::io::stdin().is_terminal() {
            return Err(refused());
        }
        eprint!("`omnigraph {}` destroys data on {}. Proceed? [y/N] ", self.command, self.uri);
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| OmniError::BadRequest(format!("reading the answer: {e}")))?;
        if matches!(answer.trim(), "y" | "Y" | "yes") { Ok(()) } else { Err(refused()) }
    }
}
