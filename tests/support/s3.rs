//! A real S3-compatible server for the storage-facing tests:
//! `scripts/s3_server.py` (moto's S3 backend, one request at a time) started
//! once per test binary on 127.0.0.1 with a free port, and stopped when this
//! process exits (it quits when its stdin closes).
//!
//! Without `python3` and moto the S3 tests print a notice and skip, unless
//! `OMNIGRAPH_TEST_S3_REQUIRED=1` (as `.ci/run` sets) makes that a failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The bucket every S3 test writes under (each under its own prefix).
pub const BUCKET: &str = "omnigraph-test";
/// A bucket on a second server that ignores `If-None-Match` (an S3 server
/// without conditional writes).
pub const UNCONDITIONAL_BUCKET: &str = "omnigraph-unconditional";

/// One running server.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The file the server appends `METHOD PATH ACCESS_KEY_ID` to for every request.
    pub request_log: std::path::PathBuf,
    _child: Child,
    _dir: tempfile::TempDir,
}

fn start(extra: &[&str], bucket: &str) -> Result<S3Server, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let log = dir.path().join("requests.log");
    let script = format!("{}/scripts/s3_server.py", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("python3")
        .arg(&script)
        .args(["--port", "0", "--bucket", bucket, "--exit-on-stdin-eof", "--log"])
        .arg(&log)
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run python3 {script}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
    let endpoint = line
        .trim()
        .strip_prefix("ready ")
        .ok_or_else(|| {
            format!("the S3 server did not start (is moto installed? `pip install 'moto[server]'`): {line:?}")
        })?
        .to_string();
    Ok(S3Server { endpoint, request_log: log, _child: child, _dir: dir })
}

fn server_or_skip(
    slot: &'static OnceLock<Result<S3Server, String>>,
    extra: &[&str],
    bucket: &str,
) -> Option<&'static S3Server> {
    match slot.get_or_init(|| start(extra, bucket)) {
        Ok(s) => Some(s),
        Err(e) if std::env::var("OMNIGRAPH_TEST_S3_REQUIRED").is_ok_and(|v| v == "1") => {
            panic!("OMNIGRAPH_TEST_S3_REQUIRED=1 but no S3 server: {e}")
        }
        Err(e) => {
            eprintln!("NOTICE: no S3 server ({e}); skipping S3 test");
            None
        }
    }
}

/// The shared server, started on first use; `None` (with a notice) when it
/// cannot run here.
pub fn server() -> Option<&'static S3Server> {
    static SERVER: OnceLock<Result<S3Server, String>> = OnceLock::new();
    let s = server_or_skip(&SERVER, &[], BUCKET)?;
    omnigraph::engine::storage::config::set_defaults(options(s));
    Some(s)
}

/// A server that stores a create-only put over an existing object.
pub fn unconditional_server() -> Option<&'static S3Server> {
    static SERVER: OnceLock<Result<S3Server, String>> = OnceLock::new();
    server_or_skip(&SERVER, &["--ignore-conditional-writes"], UNCONDITIONAL_BUCKET)
}

/// A fresh graph location on the shared server (and the process defaults
/// set to reach it), or `None` when S3 tests are skipped.
pub fn location(name: &str) -> Option<String> {
    server()?;
    Some(format!("s3://{BUCKET}/{}/{name}", ulid::Ulid::new().to_string().to_lowercase()))
}

/// The standard AWS environment for reaching `server` (child processes).
pub fn env(server: &S3Server) -> Vec<(String, String)> {
    vec![
        ("AWS_ENDPOINT_URL".into(), server.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID".into(), "omnigraph-test".into()),
        ("AWS_SECRET_ACCESS_KEY".into(), "omnigraph-test-secret".into()),
        ("AWS_REGION".into(), "us-east-1".into()),
        ("AWS_ALLOW_HTTP".into(), "true".into()),
    ]
}

/// The same as storage options (this process).
pub fn options(server: &S3Server) -> omnigraph::StorageOptions {
    let pairs: Vec<String> = env(server).into_iter().map(|(k, v)| format!("{}={v}", k.to_ascii_lowercase())).collect();
    omnigraph::StorageOptions::from_pairs(pairs.iter().map(String::as_str)).expect("test storage options")
}

/// The environment a child process needs for `loc` (empty for a local graph).
pub fn child_env(loc: &str) -> Vec<(String, String)> {
    if !loc.starts_with("s3://") {
        return vec![];
    }
    server().map(env).unwrap_or_default()
}

/// Requests the server has logged so far.
pub fn requests(server: &S3Server) -> Vec<String> {
    std::fs::read_to_string(&server.request_log).unwrap_or_default().lines().map(str::to_string).collect()
}
