//! Hostile input against a real `omnigraph serve`: hundreds of malformed
//! requests across every route (bad and huge JSON, wrong types, missing
//! fields, deep nesting, invalid `.gq`, unknown types, mistyped params,
//! invalid UTF-8, hostile branch names and paths, wrong methods). The daemon
//! must answer each with a status below 500 and a typed JSON error body that
//! names no server path, keep answering `/healthz`, and write nothing
//! outside the graph root. (Among them: a `{1,100000}` traversal, which
//! used to overflow the stack and abort the daemon.)

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::server::{Server, TOKEN, start};

/// One raw request: method, path (sent as is, never normalised), content
/// type and body bytes.
struct Probe {
    method: &'static str,
    path: String,
    content_type: &'static str,
    body: Vec<u8>,
    /// It names an invalid branch: the answer must be 400 `invalid branch name`.
    bad_branch: bool,
}

fn probe(method: &'static str, path: impl Into<String>, body: impl Into<Vec<u8>>) -> Probe {
    Probe { method, path: path.into(), content_type: "application/json", body: body.into(), bad_branch: false }
}

/// Send `p` over a fresh TCP connection; the status and the body (`None`:
/// the connection closed without an answer).
async fn send(addr: &str, p: &Probe) -> Option<(u16, Vec<u8>)> {
    let mut conn = tokio::net::TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        p.method,
        p.path,
        p.content_type,
        p.body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("write head");
    // The server may answer (413) and close before reading all of a huge
    // body: a failed write is then fine, a missing answer is not.
    let _ = conn.write_all(&p.body).await;
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw).await;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let status: u16 = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("status line");
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    Some((status, body))
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[eol + 4 + size..];
    }
    out
}

/// Every malformed request of the suite.
fn probes() -> Vec<Probe> {
    let mut out = Vec::new();
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"123".to_vec(),
        b"\"text\"".to_vec(),
        b"{\"query\": 5}".to_vec(),
        b"{\"query\": null}".to_vec(),
        b"{\"unknown_field\": true}".to_vec(),
        b"{\"query\": \"query q() { match { $p: Person } return { $p.name } }\", \"params\": []}".to_vec(),
        vec![0xff, 0xfe, 0x7b, 0x7d],
        format!("{}{}", "[".repeat(20_000), "]".repeat(20_000)).into_bytes(),
        format!("{{\"query\": \"{}\"}}", "x".repeat(2 * 1024 * 1024)).into_bytes(),
    ];
    let json_routes = [
        "query",
        "read",
        "mutate",
        "change",
        "load",
        "ingest",
        "branches",
        "branches/merge",
        "export",
        "optimize",
        "cleanup",
        "mutate/if-graph-commit",
        "schema/apply",
        "indexes/ensure",
    ];
    for base in ["/graphs/g", ""] {
        for route in json_routes {
            for b in &bodies {
                out.push(probe("POST", format!("{base}/{route}"), b.clone()));
            }
        }
    }
    // Hostile read limits.
    let q = "query q() { match { $p: Person } return { $p.name } }";
    for limits in [
        json!({"timeout_ms": -1}),
        json!({"max_rows": 1e30}),
        json!({"memory_bytes": "lots"}),
        json!({"timeout": 5}),
        json!([1, 2]),
        json!({"timeout_ms": 0}),
        json!({"max_rows": 0}),
    ] {
        out.push(probe("POST", "/graphs/g/query", json!({"query": q, "limits": limits}).to_string()));
    }
    // Hostile schemas: malformed ones applied for real, droppers (a soft drop
    // needs no --allow-data-loss) only planned.
    for schema in ["node {", "edge E: Nobody -> Person", "node Person { name: Nope @key }"] {
        out.push(probe("POST", "/graphs/g/schema/apply", json!({"schema_source": schema}).to_string()));
    }
    for schema in ["", "node Person { name: String @key }"] {
        let body = json!({"schema_source": schema, "dry_run": true, "allow_data_loss": true});
        out.push(probe("POST", "/graphs/g/schema/apply", body.to_string()));
    }
    // Hostile retention policies (never a confirmed cleanup of the graph).
    for body in [
        json!({"keep": -1}),
        json!({"keep": 1e30}),
        json!({"keep": u64::MAX}),
        json!({"keep": "3"}),
        json!({"older_than": "99999999999999999999w"}),
        json!({"older_than": "\u{1F4A5}"}),
        json!({"older_than": ""}),
        json!({"older_than": 7}),
        json!({"keep": 1, "confirm": "yes"}),
    ] {
        out.push(probe("POST", "/graphs/g/cleanup", body.to_string()));
    }
    // Valid JSON, hostile content.
    let queries = [
        "query q( { match",
        "query q() { match { $p: Nobody } return { $p.name } }",
        "query q() { match { $p: Person } return { $p.nope } }",
        "query q($a: I32) { match { $p: Person } filter { $p.age > $a } return { $p.name } }",
        "query q() { insert Person { name: \"x\", age: \"old\" } }",
        "query q() { delete Person where name = \"x\" insert Person { name: \"y\" } }",
        "query q() { match { $p: Person $p knows{1,100000} $f } return { $f.name } }",
        "\u{0000}\u{0001}",
        "",
    ];
    for q in queries {
        for route in ["query", "mutate"] {
            out.push(probe("POST", format!("/graphs/g/{route}"), json!({"query": q}).to_string()));
            out.push(probe(
                "POST",
                format!("/graphs/g/{route}"),
                json!({"query": q, "params": {"a": "NaN"}}).to_string(),
            ));
            out.push(probe("POST", format!("/graphs/g/{route}"), json!({"query": q, "name": "missing"}).to_string()));
        }
    }
    let bad_branches = [
        "..",
        "../..",
        "a//b",
        "/lead",
        "trail/",
        "main/x",
        "__internal",
        "a..b",
        "sp ace",
        "\u{0000}",
        "ü",
        ".",
        &"x".repeat(300),
    ];
    let first_branch_probe = out.len();
    let ok_query = "query q() { match { $p: Person } return { $p.name } }";
    let ok_insert = "query q() { insert Person { name: \"hostile\", age: 1 } }";
    for b in bad_branches {
        let enc: String = b.bytes().map(|c| format!("%{c:02X}")).collect();
        out.push(probe("GET", format!("/graphs/g/snapshot?branch={enc}"), ""));
        out.push(probe("GET", format!("/graphs/g/commits?branch={enc}"), ""));
        out.push(probe("GET", format!("/graphs/g/indexes?branch={enc}"), ""));
        out.push(probe("POST", "/graphs/g/indexes/ensure", json!({"branch": b}).to_string()));
        out.push(probe("POST", "/graphs/g/query", json!({"query": ok_query, "branch": b}).to_string()));
        out.push(probe("POST", "/graphs/g/mutate", json!({"query": ok_insert, "branch": b}).to_string()));
        out.push(probe("POST", "/graphs/g/load", json!({"data": "", "branch": b}).to_string()));
        out.push(probe("POST", "/graphs/g/load", json!({"data": "", "branch": "ok-branch", "from": b}).to_string()));
        out.push(probe("POST", "/graphs/g/branches", json!({"name": b}).to_string()));
        out.push(probe("POST", "/graphs/g/branches", json!({"name": "fine", "from": b}).to_string()));
        out.push(probe("DELETE", format!("/graphs/g/branches/{enc}"), ""));
        out.push(probe("POST", "/graphs/g/branches/merge", json!({"source": b}).to_string()));
        out.push(probe("POST", "/graphs/g/branches/merge", json!({"source": "main", "target": b}).to_string()));
        out.push(probe("POST", "/graphs/g/export", json!({"branch": b}).to_string()));
        out.push(probe("POST", "/graphs/g/optimize", json!({"branch": b}).to_string()));
        let mut nd = probe("POST", format!("/graphs/g/load/ndjson?branch={enc}"), "");
        nd.content_type = "application/x-ndjson";
        out.push(nd);
    }
    for p in &mut out[first_branch_probe..] {
        p.bad_branch = true;
    }
    // Tags follow the branch rules (their error names a tag), and a commit
    // route takes any ref.
    for b in bad_branches {
        let enc: String = b.bytes().map(|c| format!("%{c:02X}")).collect();
        out.push(probe("POST", "/graphs/g/tags", json!({"name": b}).to_string()));
        out.push(probe("POST", "/graphs/g/tags", json!({"name": "fine-tag", "ref": b}).to_string()));
        out.push(probe("DELETE", format!("/graphs/g/tags/{enc}"), ""));
        out.push(probe("GET", format!("/graphs/g/commits/{enc}"), ""));
        // The change feed and its baseline: a bad branch, a bad cursor.
        out.push(probe("GET", format!("/graphs/g/changes?branch={enc}"), ""));
        out.push(probe("GET", format!("/graphs/g/changes?cursor={enc}"), ""));
        out.push(probe("GET", format!("/graphs/g/changes?start=after:{enc}"), ""));
        out.push(probe("POST", "/graphs/g/changes/baseline", json!({"branch": b}).to_string()));
    }
    // Hostile paths, query strings, methods and content types.
    for p in [
        "/graphs/%FF/snapshot",
        "/graphs/nope/snapshot",
        "/graphs/g/commits/zzz",
        "/graphs/g/commits/%00",
        "/graphs/g/commits?limit=abc",
        "/graphs/g/commits?limit=-1",
        "/graphs/g/changes?limit=-1&wait=-1",
        "/graphs/g/changes?wait=99999999999999999999",
        "/graphs/g/changes?type=%FF",
        "/healthz?verbose=abc",
        "/nowhere",
        "/graphs/g/nowhere",
        "/graphs/g/snapshot/extra",
        "/graphs//snapshot",
        "/graphs/g/branches/",
        "/graphs/g/snapshot?branch=",
        "/graphs/g/snapshot?branch=%ZZ",
        "/graphs/g/indexes?branch=%ZZ",
        "/graphs/nope/indexes",
        "/%2e%2e/%2e%2e/etc/passwd",
    ] {
        out.push(probe("GET", p, ""));
        out.push(probe("DELETE", p, ""));
    }
    for (m, p) in [
        ("GET", "/graphs/g/query"),
        ("GET", "/graphs/g/mutate"),
        ("PUT", "/graphs/g/snapshot"),
        ("DELETE", "/graphs/g/snapshot"),
        ("PATCH", "/graphs/g/branches"),
        ("GET", "/graphs/g/load"),
        ("PUT", "/query"),
        ("GET", "/change"),
        ("POST", "/healthz"),
        ("POST", "/graphs/g/commits"),
        ("POST", "/graphs/g/changes"),
        ("GET", "/graphs/g/changes/baseline"),
    ] {
        out.push(probe(m, p, "{}"));
    }
    for ct in ["text/plain", "application/json", "application/x-ndjson; charset=utf-16"] {
        let mut p =
            probe("POST", "/graphs/g/load/ndjson", "{\"type\": \"Person\", \"data\": {\"name\": 5}}\nnot json\n");
        p.content_type = ct;
        out.push(p);
    }
    for line in [
        "{\"type\": \"Nobody\", \"data\": {}}",
        "{\"type\": \"Person\", \"data\": {\"name\": \"a\", \"age\": 999}}",
        "{\"type\": \"Person\"}",
        "{\"edge\": \"Knows\", \"from\": \"ghost\", \"to\": \"nobody\"}",
        "{\"type\": \"Person\", \"data\": {\"name\": \"a\", \"name\": \"b\"}}",
    ] {
        for mode in ["merge", "append", "overwrite", "sideways"] {
            out.push(probe("POST", "/graphs/g/load", json!({"data": line, "mode": mode}).to_string()));
        }
    }
    out
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    crate::common::files_with_suffix(dir, "")
        .into_iter()
        .map(|f| f.strip_prefix(dir).map(|p| p.to_string_lossy().to_string()).unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn hostile_requests_get_typed_json_errors_and_never_a_5xx() {
    let s: Server = start().await;
    let addr = s.base.trim_start_matches("http://").to_string();
    let dir = s._dir.path().to_path_buf();
    let root = std::path::Path::new(&s.loc).to_path_buf();
    let outside_before: std::collections::BTreeSet<String> =
        files_under(&dir).into_iter().filter(|f| !f.starts_with("graph/") && f != "server.log").collect();
    let probes = probes();
    assert!(probes.len() >= 300, "only {} probes", probes.len());
    let mut by_class: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for p in &probes {
        let Some((status, body)) = send(&addr, p).await else {
            let body = String::from_utf8_lossy(&p.body).chars().take(200).collect::<String>();
            let log: String = s.log().lines().rev().take(5).collect::<Vec<_>>().join("\n");
            panic!("{} {} ({body}): no answer; the daemon's log ends:\n{log}", p.method, p.path);
        };
        *by_class.entry(format!("{}xx", status / 100)).or_default() += 1;
        let what = format!("{} {} -> {status}", p.method, p.path.chars().take(120).collect::<String>());
        let text = String::from_utf8_lossy(&body).to_string();
        if status >= 500 {
            failures.push(format!("{what}: {text}"));
            continue;
        }
        if p.bad_branch && !(status == 400 && text.contains("invalid branch name")) {
            failures.push(format!("{what}: a hostile branch name must be 400 `invalid branch name`: {text}"));
        }
        if status >= 400 {
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) if v["error"].is_string() && v["code"].is_string() => {}
                _ => failures.push(format!("{what}: not a typed JSON error: {text}")),
            }
        }
        // Success answers name the graph's `uri` as clients expect; an
        // error never shows a server path.
        if status >= 400 && (text.contains(&*root.to_string_lossy()) || text.contains(&*dir.to_string_lossy())) {
            failures.push(format!("{what}: the error shows a server path: {text}"));
        }
    }
    println!("hostile suite: {} requests, by status class {by_class:?}", probes.len());
    assert!(failures.is_empty(), "{} of {} probes failed:\n{}", failures.len(), probes.len(), failures.join("\n"));
    let (st, health) = crate::server::get(&s, "/healthz").await;
    assert_eq!((st, health["status"].as_str()), (200, Some("ok")));
    let outside_after: std::collections::BTreeSet<String> =
        files_under(&dir).into_iter().filter(|f| !f.starts_with("graph/") && f != "server.log").collect();
    assert_eq!(outside_before, outside_after, "files appeared outside the graph root");
    assert!(!s.log().contains("panicked"), "{}", s.log());
}
