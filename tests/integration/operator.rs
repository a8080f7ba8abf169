//! The operator's own files, as real CLI processes use them:
//! `$OMNIGRAPH_HOME/config.yaml` (named servers, `defaults`, `profiles`,
//! `operator.actor`) and `credentials` (keyed tokens from `login`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Output;
use std::sync::mpsc;

use serde_json::Value;

use crate::reference_cli::{run, run_env, with_files};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(dir: &Path, line: &str) -> String {
    let out = run(dir, line);
    assert!(out.status.success(), "`{line}`: {}", stderr(&out));
    stdout(&out)
}

fn json(dir: &Path, line: &str) -> Value {
    serde_json::from_str(&ok(dir, line)).unwrap_or_else(|e| panic!("`{line}` prints JSON: {e}"))
}

/// A graph at `dir/name` with the fixture's people in it.
fn graph(dir: &Path, name: &str) {
    ok(dir, &format!("omnigraph init --schema schema.pg -q {name}"));
    ok(dir, &format!("omnigraph load --data people.jsonl --mode merge -q {name}"));
}

/// An HTTP endpoint on 127.0.0.1 that answers `/graphs` with no graph and
/// sends the `authorization` header of each request it got down `seen`.
fn recording_server() -> (String, mpsc::Receiver<Option<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut auth = None;
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                if let Some((k, v)) = line.split_once(':')
                    && k.eq_ignore_ascii_case("authorization")
                {
                    auth = Some(v.trim().to_string());
                }
                line.clear();
            }
            let body = r#"{"graphs":[]}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                body.len()
            );
            drop(stream.write_all(format!("{head}{body}").as_bytes()));
            if tx.send(auth).is_err() {
                return;
            }
        }
    });
    (base, rx)
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

#[cfg(unix)]
#[test]
fn named_servers_get_their_keyed_token_and_no_one_else_does() {
    let dir = with_files(&["schema.pg", "people.jsonl"]);
    let d = dir.path();
    graph(d, "g");
    let server = crate::server::spawn(crate::scratch::tempdir(), d.join("g").display().to_string(), &[], &[]);
    let (elsewhere, seen) = recording_server();
    let config = format!("servers:\n  local:\n    url: {}\n  other:\n    url: {elsewhere}/other\n", server.base);
    std::fs::write(d.join("config.yaml"), config).expect("config");

    // No token yet: the daemon refuses (exit 1, its typed 401).
    let refused = run(d, "omnigraph snapshot --server local --graph g");
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    // login reads one line of stdin into a 0600 file.
    let login = json(d, &format!("omnigraph login local --json <<< {}", crate::server::TOKEN));
    assert_eq!(login["server"], "local", "{login}");
    let credentials = d.join("credentials");
    assert_eq!(mode(&credentials), 0o600);
    let direct = ok(d, "omnigraph snapshot --store g");
    assert_eq!(ok(d, "omnigraph snapshot --server local --graph g"), direct, "the keyed token is sent to its server");
    // The server's own variable wins over the file.
    let env = run_env(d, "omnigraph snapshot --server local --graph g", &[("OMNIGRAPH_TOKEN_LOCAL", "wrong")]);
    assert_eq!(env.status.code(), Some(1), "{}", stderr(&env));

    // Another server never gets `local`'s token: `other` (configured, no
    // token of its own) and a URL of no configured server get the default
    // token if there is one, else none.
    let generic = [("OMNIGRAPH_BEARER_TOKEN", "generic")];
    for line in ["omnigraph graphs list --server other", &format!("omnigraph graphs list --server {elsewhere}")] {
        assert!(run_env(d, line, &generic).status.success(), "{line}");
        assert_eq!(seen.recv().expect("a request").as_deref(), Some("Bearer generic"), "{line}");
        assert!(run(d, line).status.success(), "{line}");
        assert_eq!(seen.recv().expect("a request"), None, "{line}");
    }

    // A credentials file others can read is refused, for use and for login.
    std::fs::set_permissions(&credentials, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    for line in ["omnigraph snapshot --server local --graph g", "omnigraph login local --token t2"] {
        let out = run(d, line);
        assert_eq!(out.status.code(), Some(2), "{line}");
        assert!(stderr(&out).contains("readable by others") && stderr(&out).contains("chmod 600"), "{}", stderr(&out));
    }
    std::fs::set_permissions(&credentials, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");

    // logout removes the token (twice is fine); the daemon refuses again.
    assert_eq!(json(d, "omnigraph logout local --json")["removed"], true);
    assert_eq!(json(d, "omnigraph logout local --json")["removed"], false);
    assert_eq!(run(d, "omnigraph snapshot --server local --graph g").status.code(), Some(1));
    let unknown = run(d, "omnigraph snapshot --server nope");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("unknown server `nope`") && stderr(&unknown).contains("local, other"));
}

#[test]
fn profiles_and_defaults_supply_the_scope_and_an_explicit_address_wins() {
    let dir = with_files(&["schema.pg", "people.jsonl", "queries.gq"]);
    let d = dir.path();
    graph(d, "g");
    ok(d, "omnigraph init --schema schema.pg -q h");
    let server = crate::server::spawn(crate::scratch::tempdir(), d.join("g").display().to_string(), &[], &[]);
    let config = format!(
        "operator:\n  actor: act-dana\nservers:\n  local:\n    url: {}\ndefaults:\n  store: g\n  output: csv\nprofiles:\n  empty: {{ store: h }}\n  served: {{ server: local, default_graph: g }}\nfuture_key: 1\n",
        server.base
    );
    std::fs::write(d.join("config.yaml"), config).expect("config");
    let people =
        |v: &Value| v["tables"].as_array().into_iter().flatten().map(|t| t["row_count"].as_u64()).sum::<Option<u64>>();

    // defaults.store: a command that names no graph.
    let by_default = run(d, "omnigraph snapshot --json");
    assert!(by_default.status.success(), "{}", stderr(&by_default));
    assert!(stderr(&by_default).contains("future_key: unknown key (ignored)"), "unknown keys warn and load");
    let g: Value = serde_json::from_slice(&by_default.stdout).expect("JSON");
    assert!(people(&g).is_some_and(|n| n > 0), "{g}");
    // A profile over the defaults, by flag or by environment; an explicit
    // address over both.
    let h = json(d, "omnigraph snapshot --profile empty --json");
    assert_eq!(people(&h), Some(0), "{h}");
    let out = run_env(d, "omnigraph snapshot --json", &[("OMNIGRAPH_PROFILE", "empty")]);
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).ok().as_ref().and_then(people), Some(0));
    assert_eq!(json(d, "omnigraph snapshot g --profile empty --json"), g);
    // A query's one positional is its name when the scope gives the graph;
    // defaults.output is the format below --format / --json.
    let csv = ok(d, r#"omnigraph query get_person --query queries.gq --params '{"name":"Alice"}'"#);
    assert!(csv.starts_with("p.name,"), "{csv}");
    let table = ok(d, r#"omnigraph query get_person --query queries.gq --params '{"name":"Alice"}' --format table"#);
    assert_ne!(table, csv);
    // operator.actor is the actor of a write without --as.
    let m =
        r#"omnigraph mutate -e 'query m($n: String) { insert Person { name: $n } }' --params '{"n":"Zed"}' --json -q"#;
    assert_eq!(json(d, m)["commit"]["actor_id"], "act-dana");
    assert_eq!(json(d, &format!("{m} --as eve"))["commit"]["actor_id"], "eve");

    // A served profile reaches the daemon with its default graph.
    let served = run_env(d, "omnigraph snapshot --profile served", &[("OMNIGRAPH_BEARER_TOKEN", crate::server::TOKEN)]);
    assert!(served.status.success(), "{}", stderr(&served));
    assert_eq!(stdout(&served), ok(d, "omnigraph snapshot g"));
    // ... and is refused, with the way out, on a storage command.
    let maint = run(d, "omnigraph optimize --profile served");
    assert_eq!(maint.status.code(), Some(2));
    assert!(stderr(&maint).contains("profile served names a server") && stderr(&maint).contains("--store"));
    let unknown = run(d, "omnigraph snapshot --profile nope");
    assert_eq!(unknown.status.code(), Some(2));
    assert!(stderr(&unknown).contains("unknown profile `nope`") && stderr(&unknown).contains("empty, served"));

    // profile list / show, read-only.
    let list = json(d, "omnigraph profile list --json");
    let names: Vec<&str> =
        list["profiles"].as_array().expect("profiles").iter().filter_map(|p| p["name"].as_str()).collect();
    assert_eq!(names, ["empty", "served"]);
    assert_eq!(json(d, "omnigraph profile show served --json")["server"], "local");
    let now = json(d, "omnigraph profile show --json");
    assert_eq!((now["store"].as_str(), now["source"].as_str()), (Some("g"), Some("defaults")), "{now}");

    // A key of the wrong shape: one line naming it, exit 2.
    std::fs::write(d.join("config.yaml"), "profiles:\n  p: [1]\n").expect("config");
    let bad = run(d, "omnigraph snapshot");
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("profiles.p must be a mapping"), "{}", stderr(&bad));
    // An explicit address does not read the config at all.
    assert!(run(d, "omnigraph snapshot g").status.success());
}
