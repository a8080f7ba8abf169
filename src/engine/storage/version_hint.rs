//! The latest version of a local dataset without listing its history.
//!
//! On a local filesystem Lance resolves "latest" by reading the whole
//! `_versions/` directory, which gains a manifest per commit until cleanup
//! removes them: after 1,000 commits that read costs 1–2 ms, and an open
//! reads `__manifest` at latest more than once. Lance also keeps a hint of
//! the latest version there (written after every commit, read only on
//! object stores whose listings are unordered). From it, a few `stat`s find
//! the latest version: the hinted manifest exists, and each next one
//! probed does not. Anything unexpected (no hint, an unreadable one, a
//! hinted version that is gone, another naming scheme) answers `None` and
//! the open lets Lance list, so the hint can only make an open faster.

use std::path::{Path, PathBuf};

/// Lance's hint file under `_versions/` (`{"version":N}`).
const HINT_FILE: &str = "latest_version_hint.json";

/// Versions probed above the hint before giving up on it (a hint is at
/// most a few commits behind: it is written right after each commit).
const MAX_PROBES: u64 = 16;

/// The latest version of the dataset at local `uri` (an absolute path) on
/// native `branch`, or `None` when Lance should resolve it.
pub fn local_latest(uri: &str, branch: Option<&str>) -> Option<u64> {
    if !uri.starts_with('/') {
        return None;
    }
    let mut base = PathBuf::from(uri);
    if let Some(b) = branch {
        base = base.join("tree").join(b);
    }
    let versions = base.join("_versions");
    let hinted = read_hint(&versions.join(HINT_FILE))?;
    if !manifest_exists(&versions, hinted) {
        return None;
    }
    (hinted..hinted + MAX_PROBES).find(|v| !manifest_exists(&versions, v + 1))
}

fn read_hint(path: &Path) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Hint {
        version: u64,
    }
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<Hint>(&bytes).ok().map(|h| h.version).filter(|v| *v > 0)
}

/// Whether version `v`'s manifest exists under Lance's V2 naming
/// (`{u64::MAX - v:020}.manifest`, what every omnigraph dataset uses).
fn manifest_exists(versions: &Path, v: u64) -> bool {
    versions.join(format!("{:020}.manifest", u64::MAX - v)).is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch_version(dir: &Path, v: u64) {
        std::fs::write(dir.join(format!("{:020}.manifest", u64::MAX - v)), b"m").expect("write");
    }

    #[test]
    fn the_hint_is_probed_upward_and_anything_odd_defers_to_lance() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let uri = tmp.path().to_string_lossy().to_string();
        let versions = tmp.path().join("_versions");
        std::fs::create_dir_all(&versions).expect("mkdir");
        for v in 1..=5 {
            touch_version(&versions, v);
        }
        assert_eq!(local_latest(&uri, None), None, "no hint");
        std::fs::write(versions.join(HINT_FILE), br#"{"version":3}"#).expect("hint");
        assert_eq!(local_latest(&uri, None), Some(5), "a stale hint is probed up to the latest");
        std::fs::write(versions.join(HINT_FILE), br#"{"version":9}"#).expect("hint");
        assert_eq!(local_latest(&uri, None), None, "a hinted version that does not exist");
        std::fs::write(versions.join(HINT_FILE), b"{\"vers").expect("hint");
        assert_eq!(local_latest(&uri, None), None, "a torn hint");
        assert_eq!(local_latest("s3://bucket/g", None), None, "object stores list in order already");
        let branch = tmp.path().join("tree").join("feat").join("_versions");
        std::fs::create_dir_all(&branch).expect("mkdir");
        touch_version(&branch, 7);
        std::fs::write(branch.join(HINT_FILE), br#"{"version":7}"#).expect("hint");
        assert_eq!(local_latest(&uri, Some("feat")), Some(7));
    }
}
