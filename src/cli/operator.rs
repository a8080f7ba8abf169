//! The operator's files under `~/.omnigraph/` (`$OMNIGRAPH_HOME` instead):
//! `config.yaml` (read once per process, parsed by
//! [`omnigraph_core::operator_config`]) and `credentials` (the keyed
//! tokens `login` writes: created 0600, and refused when group or world
//! can read it). The scope the process runs under (`--profile`,
//! `$OMNIGRAPH_PROFILE`) is set once at startup by `main`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;

use omnigraph::{OmniError, Result};
use omnigraph_core::operator_config::{OperatorConfig, Scope, token_env_name};

const CONFIG_FILE: &str = "config.yaml";
const CREDENTIALS_FILE: &str = "credentials";

/// The config, and the scope of the profile this process was started with
/// (or of the defaults).
struct Context {
    config: OperatorConfig,
    scope: std::result::Result<Option<Scope>, String>,
}

static PROFILE: OnceLock<Option<String>> = OnceLock::new();
static CONTEXT: OnceLock<std::result::Result<Context, String>> = OnceLock::new();

/// Record `--profile` (or `$OMNIGRAPH_PROFILE`); call once, before any
/// command resolves its scope.
pub fn set_profile(flag: Option<String>) {
    let profile = flag.or_else(|| std::env::var("OMNIGRAPH_PROFILE").ok()).filter(|p| !p.is_empty());
    drop(PROFILE.set(profile));
}

/// The operator directory: `$OMNIGRAPH_HOME`, else `~/.omnigraph`; `None`
/// without either variable (a cron job, a bare container): then there are
/// no operator files, and only `login`/`logout` need one.
fn home() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("OMNIGRAPH_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").filter(|d| !d.is_empty()).map(|h| PathBuf::from(h).join(".omnigraph"))
}

fn context() -> Result<&'static Context> {
    let loaded = CONTEXT.get_or_init(|| {
        let config = load().map_err(|e| e.to_string())?;
        let profile = PROFILE.get().cloned().flatten();
        let scope = config.scope(profile.as_deref()).map_err(|e| e.0);
        Ok(Context { config, scope })
    });
    loaded.as_ref().map_err(|e| OmniError::BadRequest(e.clone()))
}

/// The parsed `config.yaml` (an absent file is an empty config); each
/// ignored key warned once on stderr.
fn load() -> Result<OperatorConfig> {
    let Some(path) = home().map(|h| h.join(CONFIG_FILE)) else { return Ok(OperatorConfig::default()) };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(OperatorConfig::default()),
        Err(e) => return Err(OmniError::BadRequest(format!("cannot read {}: {e}", path.display()))),
    };
    let config = OperatorConfig::parse(&text).map_err(|e| OmniError::BadRequest(format!("{}: {e}", path.display())))?;
    for w in &config.warnings {
        eprintln!("warning: {}: {w}", path.display());
    }
    Ok(config)
}

/// The config this process runs under.
pub fn config() -> Result<&'static OperatorConfig> {
    Ok(&context()?.config)
}

/// The scope a command uses when it names no graph: the profile's, else
/// the defaults' (`None`: neither names one).
pub fn fallback_scope() -> Result<Option<&'static Scope>> {
    context()?.scope.as_ref().map(Option::as_ref).map_err(|e| OmniError::BadRequest(e.clone()))
}

/// The actor a write records: `--as`, else `operator.actor`.
pub fn actor(explicit: Option<&str>) -> Result<Option<String>> {
    match explicit {
        Some(a) => Ok(Some(a.to_string())),
        None => Ok(config()?.actor.clone()),
    }
}

/// The bearer token for a request to `url`: the keyed token of the
/// operator server it belongs to (`OMNIGRAPH_TOKEN_<NAME>`, then its
/// `[NAME]` in the credentials file), else `OMNIGRAPH_BEARER_TOKEN`. A
/// keyed token never goes to a URL outside its server.
pub fn token_for(url: &str) -> Result<Option<String>> {
    if let Some(name) = config()?.server_for_url(url) {
        let keyed = std::env::var(token_env_name(name)).ok().map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
        if let Some(token) = keyed.map_or_else(|| stored_token(name), |t| Ok(Some(t)))? {
            return Ok(Some(token));
        }
    }
    Ok(std::env::var("OMNIGRAPH_BEARER_TOKEN").ok().filter(|t| !t.is_empty()))
}

fn credentials_path() -> Result<PathBuf> {
    let home = home().ok_or_else(|| {
        OmniError::BadRequest("no home directory for the credentials file: set HOME, or OMNIGRAPH_HOME".into())
    })?;
    Ok(home.join(CREDENTIALS_FILE))
}

/// The credentials file's text (empty when absent, or without a home
/// directory), refused when others can read it.
fn read_credentials() -> Result<String> {
    let Ok(path) = credentials_path() else { return Ok(String::new()) };
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            refuse_readable_by_others(&path)?;
            Ok(text)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(OmniError::BadRequest(format!("cannot read {}: {e}", path.display()))),
    }
}

#[cfg(unix)]
fn refuse_readable_by_others(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)
        .map_err(|e| OmniError::BadRequest(format!("cannot read {}: {e}", path.display())))?
        .permissions()
        .mode();
    if mode & 0o077 != 0 {
        return Err(OmniError::BadRequest(format!(
            "{} is readable by others (mode {:o}); its tokens are secrets: run `chmod 600 {}`",
            path.display(),
            mode & 0o777,
            path.display()
        )));
    }
    Ok(())
}

#[cfg(not(unix))]
fn refuse_readable_by_others(_: &std::path::Path) -> Result<()> {
    Ok(())
}

fn stored_token(server: &str) -> Result<Option<String>> {
    Ok(omnigraph_core::operator_config::credential(&read_credentials()?, server))
}

/// Store (`Some`) or remove (`None`) `server`'s token; answers the file's
/// path. Written whole to a temporary file beside it (0600, as `tempfile`
/// creates it) renamed over the old one.
pub fn store_token(server: &str, token: Option<&str>) -> Result<PathBuf> {
    let text = omnigraph_core::operator_config::with_credential(&read_credentials()?, server, token);
    let path = credentials_path()?;
    let dir = path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
    let fail = |e: std::io::Error| OmniError::BadRequest(format!("cannot write {}: {e}", path.display()));
    create_private_dir(&dir).map_err(fail)?;
    let mut file = tempfile::NamedTempFile::new_in(&dir).map_err(fail)?;
    file.write_all(text.as_bytes()).and_then(|()| file.as_file().sync_all()).map_err(fail)?;
    file.persist(&path).map_err(|e| fail(e.error))?;
    Ok(path)
}

#[cfg(unix)]
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

#[cfg(not(unix))]
fn create_private_dir(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

/// `login NAME`: store the token (from `--token`, else one line of
/// stdin); answers `{server, credentials}`.
pub fn login(server: &str, token: Option<String>) -> Result<serde_json::Value> {
    let token = match token {
        Some(t) => t,
        None => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| OmniError::BadRequest(format!("reading the token from stdin: {e}")))?;
            line
        }
    };
    let token = token.trim();
    if token.is_empty() || token.contains(char::is_whitespace) {
        return Err(OmniError::BadRequest(
            "no token: pass --token TOKEN or one line on stdin (echo \"$TOKEN\" | omnigraph login NAME)".into(),
        ));
    }
    if !config()?.servers.contains_key(server) {
        eprintln!(
            "warning: `{server}` is not a server in config.yaml; its token is sent only once `servers.{server}.url` names it"
        );
    }
    let path = store_token(server, Some(token))?;
    Ok(serde_json::json!({ "server": server, "credentials": path.display().to_string() }))
}

/// `logout NAME`: remove the token; answers `{server, removed}` (false
/// when none was stored).
pub fn logout(server: &str) -> Result<serde_json::Value> {
    let had = stored_token(server)?.is_some();
    if had {
        store_token(server, None)?;
    }
    Ok(serde_json::json!({ "server": server, "removed": had }))
}

/// `profile list`: `{profiles: [{name, server|store|cluster, default_graph}]}`.
pub fn profiles() -> Result<serde_json::Value> {
    let list: Vec<serde_json::Value> = config()?
        .profiles
        .iter()
        .map(|(name, p)| {
            let mut v = serde_json::to_value(p).unwrap_or_default();
            v["name"] = serde_json::json!(name);
            v
        })
        .collect();
    Ok(serde_json::json!({ "profiles": list }))
}

/// `profile show [NAME]`: the profile NAME, or the scope in force now
/// (`{source: null}` when nothing is configured).
pub fn profile(name: Option<&str>) -> Result<serde_json::Value> {
    let scope = match name {
        Some(n) => config()?.scope(Some(n)).map_err(|e| OmniError::BadRequest(e.0))?,
        None => fallback_scope()?.cloned(),
    };
    Ok(match scope {
        Some(s) => serde_json::to_value(&s).unwrap_or_default(),
        None => serde_json::json!({ "source": null }),
    })
}
