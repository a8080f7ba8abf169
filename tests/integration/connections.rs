//! The daemon's connection limits (`--header-timeout`, `--max-connections`,
//! `--shutdown-timeout`), against a real process flooded with half-sent
//! requests over raw sockets.
//!
//! `/healthz` while more half-sent requests than `--max-connections` are
//! open: a hard cap cannot serve a connection beyond it, and nothing can
//! tell a health check from another half-sent request before its head has
//! been read. So "keeps answering within 100 ms" means: every `/healthz`
//! attempt ends within 100 ms, refused (the connection closed at once, never
//! left hanging) while every slot is held, and answered 200 as soon as the
//! header timeout has reclaimed a slot. The test asserts exactly that.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::server::{Server, TOKEN, start_with_env};

const MAX_CONNECTIONS: usize = 64;
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(3);
/// Scheduling slack on a loaded machine for "closed after the timeout".
const SLACK: Duration = Duration::from_secs(2);
/// A request line and one header, never finished.
const HALF_SENT: &[u8] = b"POST /graphs/g/query HTTP/1.1\r\nHost: x\r\n";

/// Entries of the process's descriptor table.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

/// Poll `ok` until it holds or `limit` passes; whether it held.
async fn poll_until(limit: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while !ok() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// One `GET /healthz` on a fresh connection: its status, or why it had none,
/// and how long the attempt took.
async fn healthz(addr: &str) -> (Result<u16, String>, Duration) {
    let t0 = Instant::now();
    let attempt = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| format!("connect: {e}"))?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).await.map_err(|e| format!("read: {e}"))?;
        let text = String::from_utf8_lossy(&answer);
        text.strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .ok_or_else(|| format!("no answer: {text:?}"))
    };
    // A hang shows as an attempt over the bound, not as a stuck test.
    let out = tokio::time::timeout(Duration::from_secs(5), attempt).await.unwrap_or_else(|_| Err("hung".into()));
    (out, t0.elapsed())
}

/// A connection that sent `bytes` (and will send nothing more).
async fn open_with(addr: &str, bytes: &[u8]) -> (TcpStream, Instant) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let opened = Instant::now();
    // A refused connection may already be reset: the read sees that.
    let _ = s.write_all(bytes).await;
    (s, opened)
}

/// A keep-alive connection that completed one request and sits idle.
async fn open_idle_keep_alive(addr: &str) -> (TcpStream, Instant) {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n").await.expect("write");
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // The whole answer: head, then the Content-Length body.
    loop {
        let n = s.read(&mut buf).await.expect("read");
        assert!(n > 0, "keep-alive connection closed before its answer");
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .and_then(|v| v.parse().ok())
                .expect("content-length");
            if body.len() >= len {
                return (s, Instant::now());
            }
        }
    }
}

/// Read until the server closes `s`: how long after `since` it did, or
/// `None` if it was still open after 10 s.
async fn closed_after(mut s: TcpStream, since: Instant) -> Option<Duration> {
    let mut buf = [0u8; 1024];
    let read_to_close = async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return since.elapsed(),
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read_to_close).await.ok()
}

/// Spawn a watcher per connection: each resolves to when the server closed it.
fn watch_closes(conns: Vec<(TcpStream, Instant)>) -> Vec<tokio::task::JoinHandle<Option<Duration>>> {
    conns.into_iter().map(|(s, since)| tokio::spawn(closed_after(s, since))).collect()
}

async fn join_all(handles: Vec<tokio::task::JoinHandle<Option<Duration>>>) -> Vec<Option<Duration>> {
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("join"));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_capped_timed_out_and_do_not_hold_shutdown() {
    let env = [("OMNIGRAPH_LOG".to_string(), "omnigraph=info".to_string())];
    let max = MAX_CONNECTIONS.to_string();
    let flags = ["--max-connections", &max, "--header-timeout", "2", "--shutdown-timeout", "3"];
    let mut s = start_with_env(&flags, &env).await;
    let addr = s.base.strip_prefix("http://").expect("base").to_string();
    let pid = s.pid();
    let idle = fd_count(pid);
    let (first, _) = healthz(&addr).await;
    assert_eq!(first, Ok(200), "{}", s.log());
    // The server closes its side just after the answer's last byte.
    assert!(poll_until(SLACK, || fd_count(pid) <= idle).await, "descriptors {} > idle {idle}", fd_count(pid));

    // In accept order: idle keep-alive connections, silent ones, then more
    // half-sent requests than the slots left.
    let (keep_alive, silent, half_sent) = (4, 2, 100);
    let mut idle_conns = Vec::new();
    for _ in 0..keep_alive {
        idle_conns.push(open_idle_keep_alive(&addr).await);
    }
    for _ in 0..silent {
        idle_conns.push(open_with(&addr, b"").await);
    }
    let idle_closes = watch_closes(idle_conns);
    let mut flood = Vec::new();
    for _ in 0..half_sent {
        flood.push(open_with(&addr, HALF_SENT).await);
    }
    let flood_closes = watch_closes(flood);
    let full = idle + MAX_CONNECTIONS;
    assert!(poll_until(HEADER_TIMEOUT / 2, || fd_count(pid) >= full).await, "slots never filled: {}", fd_count(pid));

    // (a) /healthz: each attempt ends within 100 ms, refused while every
    // slot is held, answered once the header timeout frees one.
    let (mut refused, mut answered) = (0, false);
    let deadline = Instant::now() + HEADER_TIMEOUT + SLACK;
    while !answered && Instant::now() < deadline {
        let (out, took) = healthz(&addr).await;
        assert!(took < Duration::from_millis(100), "a /healthz attempt took {took:?} ({out:?})");
        match out {
            Ok(200) => answered = true,
            Ok(other) => panic!("/healthz answered {other}"),
            Err(_) => refused += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(answered, "/healthz never answered once the header timeout passed\n{}", s.log());
    assert!(refused > 0, "/healthz was never refused: the slots were not all taken");

    // (b) The connections beyond the cap were closed at once; every other
    // one (half-sent, silent, idle keep-alive) after the header timeout.
    let flood_closes = join_all(flood_closes).await;
    let idle_closes = join_all(idle_closes).await;
    let limit = HEADER_TIMEOUT + SLACK;
    for (what, closes) in [("half-sent", &flood_closes), ("idle", &idle_closes)] {
        for c in closes {
            assert!(c.is_some_and(|t| t <= limit), "a {what} connection was not closed in {limit:?}: {c:?}");
        }
    }
    let at_once = flood_closes.iter().flatten().filter(|t| **t < HEADER_TIMEOUT / 2).count();
    assert_eq!(at_once, keep_alive + silent + half_sent - MAX_CONNECTIONS, "refused at accept: {flood_closes:?}");
    assert!(
        idle_closes.iter().flatten().all(|t| *t >= HEADER_TIMEOUT / 2),
        "closed before the timeout: {idle_closes:?}"
    );

    // (c) Every descriptor they took is given back.
    assert!(poll_until(limit, || fd_count(pid) <= idle).await, "descriptors {} > idle {idle}", fd_count(pid));
    assert!(s.log().contains("connection refused"), "refusals are logged:\n{}", s.log());
    // (d) And counted: the flood beyond the cap and the refused /healthz attempts.
    let (status, body) = crate::server::get(&s, "/healthz?verbose=true").await;
    assert_eq!(status, 200, "{body}");
    let conns = &body["connections"];
    assert_eq!(conns["refused_total"], (at_once + refused) as u64, "{conns}");
    assert_eq!(conns["max_connections"], MAX_CONNECTIONS as u64, "{conns}");
    assert_eq!(conns["open"], 1, "only this request's connection: {conns}");
    assert!(conns["accepted_total"].as_u64() >= Some(MAX_CONNECTIONS as u64 + 2), "{conns}");

    sigterm_exits_within_the_shutdown_timeout(&mut s, &addr, idle).await;
}

/// (d) With every slot held (half-sent heads, and requests whose body never
/// comes, which the header timeout does not end), SIGTERM still exits 0
/// within the shutdown timeout.
async fn sigterm_exits_within_the_shutdown_timeout(s: &mut Server, addr: &str, idle: usize) {
    let slow_body = format!(
        "POST /graphs/g/query HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"query\":"
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(open_with(addr, slow_body.as_bytes()).await);
    }
    for _ in 0..MAX_CONNECTIONS {
        held.push(open_with(addr, HALF_SENT).await);
    }
    let pid = s.pid();
    let full = idle + MAX_CONNECTIONS;
    assert!(poll_until(HEADER_TIMEOUT / 2, || fd_count(pid) >= full).await, "slots never filled: {}", fd_count(pid));
    let sent = Instant::now();
    let kill = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().expect("kill");
    assert!(kill.success());
    let status = s.wait_exit(SHUTDOWN_TIMEOUT + Duration::from_secs(2)).await;
    let took = sent.elapsed();
    let status = status.unwrap_or_else(|| panic!("still running {took:?} after SIGTERM\n{}", s.log()));
    assert!(status.success(), "exit status {status:?}\n{}", s.log());
    // The slow bodies outlive the header timeout: only the shutdown timeout ends them.
    assert!(s.log().contains("shutdown timeout"), "the open requests were dropped:\n{}", s.log());
    drop(held);
}
