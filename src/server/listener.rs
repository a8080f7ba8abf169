//! Accepting and limiting connections: the daemon's own accept loop, in
//! place of `axum::serve`, which has no header timeout, no connection cap
//! and an unbounded graceful shutdown.
//!
//! - **Header timeout.** Every connection must send a complete request head
//!   within `header_timeout` of the server starting to wait for one: from
//!   the accept, and again after every answer on a keep-alive connection.
//!   A half-sent request, a silent client and an idle keep-alive connection
//!   are all closed after that long.
//! - **Connection cap.** At most `max_connections` connections are served.
//!   One more is accepted and closed at once (never queued, so neither the
//!   accept backlog nor the descriptor table fills up); the client sees the
//!   connection closed or reset straight away, never a hang. Refusals are
//!   counted and logged (at most once a second), and [`ConnectionStats`]
//!   (open, accepted, refused, the cap) is on `/healthz?verbose=true`.
//! - **Bounded shutdown.** When the shutdown future resolves the listener
//!   closes, every live connection is asked to finish (the request it is
//!   serving is answered, then it closes), and whatever is still open after
//!   `shutdown_timeout` is dropped, so the caller's state (graph handles)
//!   goes away on time.
//!
//! Only HTTP/1 is served: the automatic HTTP/2 detection reads the first
//! bytes of a connection with no timer (a client sending nothing would hold
//! its slot forever), and HTTP/2 has no header timeout at all.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::http::Request;
use axum::response::Response;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{JoinError, JoinSet};
use tracing::{debug, error, info, warn};

/// How long to wait before accepting again after an accept error that is
/// not about one connection (e.g. out of descriptors): retrying at once
/// would spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The connection limits the accept loop enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// A request head must arrive within this (also the keep-alive idle limit).
    pub(crate) header_timeout: Duration,
    /// Connections served at once; more are closed at accept.
    pub(crate) max_connections: usize,
    /// Graceful shutdown waits this long for live connections, then drops them.
    pub(crate) shutdown_timeout: Duration,
}

/// `requested`, capped to about half the process's soft descriptor limit
/// (when it can be read) so connections never take every descriptor the
/// graphs' files need.
pub(crate) fn cap_to_descriptor_limit(requested: usize) -> usize {
    let Some(soft) = std::fs::read_to_string("/proc/self/limits").ok().as_deref().and_then(soft_open_files) else {
        return requested;
    };
    let cap = usize::try_from(soft / 2).unwrap_or(usize::MAX).max(1);
    if requested > cap {
        warn!(requested, cap, soft_limit = soft, "--max-connections lowered to half the open-files limit");
        cap
    } else {
        requested
    }
}

/// The soft "Max open files" limit from `/proc/self/limits` text; `None`
/// when unlimited or absent.
fn soft_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// Serve `service` on every connection `listener` accepts, within `limits`,
/// until `shutdown` resolves; then shut down as the module describes.
pub(crate) async fn serve<S>(
    listener: TcpListener,
    service: S,
    limits: Limits,
    stats: Arc<ConnectionStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    S: tower::Service<Request<Incoming>, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    let builder = connection_builder(limits.header_timeout);
    let slots = Arc::new(Semaphore::new(limits.max_connections.clamp(1, Semaphore::MAX_PERMITS)));
    let graceful = GracefulShutdown::new();
    let mut tasks = JoinSet::new();
    stats.max_connections.store(limits.max_connections as u64, Ordering::Relaxed);
    let mut refusals = Refusals { stats: Arc::clone(&stats), last_logged: None };
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            // Shutdown first: once asked, accept nothing more.
            biased;
            () = &mut shutdown => break,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => report_panic(done),
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match Arc::clone(&slots).try_acquire_owned() {
                    Ok(permit) => {
                        let service = TowerToHyperService::new(service.clone());
                        let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                        stats.accepted_total.fetch_add(1, Ordering::Relaxed);
                        stats.open.fetch_add(1, Ordering::Relaxed);
                        tasks.spawn(run_connection(graceful.watch(conn), permit, peer, Arc::clone(&stats)));
                    }
                    Err(_) => refusals.refuse(stream, limits.max_connections),
                },
                Err(e) if is_connection_error(&e) => {}
                Err(e) => {
                    error!(error = %e, "accept failed; retrying shortly");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
    drop(listener);
    let refused_total = stats.refused_total.load(Ordering::Relaxed);
    info!(open = tasks.len(), refused_total, "shutting down: closing connections");
    drain(tasks, graceful, limits.shutdown_timeout).await;
}

/// One builder for every connection: HTTP/1 only (see the module docs),
/// with the header timeout on tokio's timer.
fn connection_builder(header_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new()).http1_only();
    // Hyper starts this timer whenever it waits for a request head: on a
    // fresh connection and after each answer on a kept-alive one, so it is
    // also the idle limit of keep-alive connections.
    builder.http1().timer(TokioTimer::new()).header_read_timeout(header_timeout);
    builder
}

/// Drive one connection to its end; its slot is free again once this returns.
async fn run_connection<E: std::fmt::Display>(
    conn: impl Future<Output = Result<(), E>>,
    permit: OwnedSemaphorePermit,
    peer: std::net::SocketAddr,
    stats: Arc<ConnectionStats>,
) {
    if let Err(e) = conn.await {
        // A header timeout, a reset or a malformed request: the client's doing.
        debug!(%peer, error = %e, "connection closed with an error");
    }
    stats.open.fetch_sub(1, Ordering::Relaxed);
    drop(permit);
}

/// Ask every live connection to finish, wait at most `limit`, then drop the
/// ones still open.
async fn drain(mut tasks: JoinSet<()>, graceful: GracefulShutdown, limit: Duration) {
    if tokio::time::timeout(limit, graceful.shutdown()).await.is_err() {
        while let Some(done) = tasks.try_join_next() {
            report_panic(done);
        }
        warn!(connections = tasks.len(), timeout = ?limit, "shutdown timeout: dropping the connections still open");
    }
    // Aborts what is left and waits until each task (and the state it holds) is gone.
    tasks.shutdown().await;
}

/// Log a connection task that panicked (its client saw the connection drop).
fn report_panic(done: Result<(), JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        error!(error = %e, "a connection task panicked");
    }
}

/// Errors about the one connection being accepted (it is gone), not the listener.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
    )
}

/// What the accept loop did, for `/healthz?verbose=true`.
#[derive(Debug, Default, Serialize)]
pub struct ConnectionStats {
    /// Connections being served now.
    pub open: AtomicU64,
    /// Connections served since start.
    pub accepted_total: AtomicU64,
    /// Connections closed at accept because every slot was taken.
    pub refused_total: AtomicU64,
    /// The cap in force (after the open-files limit).
    pub max_connections: AtomicU64,
}

/// Connections closed at accept because every slot was taken.
struct Refusals {
    stats: Arc<ConnectionStats>,
    last_logged: Option<Instant>,
}

impl Refusals {
    /// Close `stream` at once and count it; log at most once a second so a
    /// flood does not flood the log too.
    fn refuse(&mut self, stream: TcpStream, max_connections: usize) {
        drop(stream);
        let total = self.stats.refused_total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.last_logged.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
            self.last_logged = Some(Instant::now());
            warn!(refused_total = total, max_connections, "connection refused: every connection slot is taken");
        }
    }
}
