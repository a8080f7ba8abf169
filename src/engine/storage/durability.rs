//! Durability of local graph roots: whether a write is on disk before the
//! call that made it returns.
//!
//! Every byte a local graph writes goes through one kind of object store:
//! `object_store`'s `LocalFileSystem` with its `fsync` mode (a file is
//! written under a staging name, synced, renamed into place, and its
//! directory synced, new directories' parents included), plus deletes that
//! sync their directory ([`SyncedDeletes`]). Omnigraph's own files (sidecars,
//! audit, schema files) use it through [`super::Root`]; Lance's datasets use
//! it through the provider [`registry`] installs for `file` URIs, which
//! sends every local read and write of a session that may write through
//! `object_store` (Lance's own fast path writes files with no sync; queries,
//! which only read, keep it). So a step of the commit
//! protocol that returned is durable, and the protocol's order (sidecar,
//! then table effects, then the `__manifest` publish, then the answer) is
//! the order things reach the disk.
//!
//! [`Durability::None`] keeps Lance's fast path and syncs nothing: the page
//! cache survives a killed process, not a power cut. Object storage ignores
//! the setting: a successful PUT is durable there.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, OnceLock, RwLock};

use futures::StreamExt;
use futures::stream::BoxStream;
use lance_io::object_store::providers::local::FileStoreProvider;
use lance_io::object_store::{ObjectStore as LanceStore, ObjectStoreParams, ObjectStoreProvider, ObjectStoreRegistry};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions,
};
use serde::Serialize;
use url::Url;

use crate::protocol::{OmniError, Result};

/// The environment variable that sets the process default.
pub const ENV: &str = "OMNIGRAPH_DURABILITY";

/// Whether writes to a local root are synced before they are acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Every file and directory entry a write makes is synced before the
    /// step that made it returns (the default).
    Fsync,
    /// Nothing is synced: acknowledged writes survive a crash of the
    /// process but not of the machine.
    None,
}

impl Durability {
    /// The name the flag, the environment and the reports use.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::None => "none",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = OmniError;

    fn from_str(s: &str) -> Result<Durability> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fsync" => Ok(Durability::Fsync),
            "none" => Ok(Durability::None),
            other => Err(OmniError::BadRequest(format!("durability must be `fsync` or `none`, got `{other}`"))),
        }
    }
}

static DEFAULT: RwLock<Option<Durability>> = RwLock::new(None);
static PER_ROOT: RwLock<Vec<(String, Durability)>> = RwLock::new(Vec::new());

/// Set the durability of every local root without one of its own.
pub fn set_default(durability: Durability) {
    *DEFAULT.write().unwrap_or_else(|p| p.into_inner()) = Some(durability);
}

/// The process default: [`set_default`]'s, else [`ENV`]'s, else fsync. An
/// unreadable [`ENV`] value is an error where the CLI and the daemon start
/// ([`from_env`]); here it falls back to the safe setting.
pub fn default() -> Durability {
    // Asked at every dataset open: the environment is read once.
    static FROM_ENV: OnceLock<Option<Durability>> = OnceLock::new();
    let set = *DEFAULT.read().unwrap_or_else(|p| p.into_inner());
    set.or_else(|| *FROM_ENV.get_or_init(|| from_env().ok().flatten())).unwrap_or(Durability::Fsync)
}

/// [`ENV`]'s value, if set.
pub fn from_env() -> Result<Option<Durability>> {
    match std::env::var(ENV) {
        Ok(v) => v.parse().map(Some).map_err(|e: OmniError| OmniError::BadRequest(format!("{ENV}: {e}"))),
        Err(_) => Ok(None),
    }
}

/// Give the local root at `root_uri` (and every dataset under it) its own
/// durability (`serve` does, per graph).
pub fn register_root(root_uri: &str, durability: Durability) {
    let root_uri = root_uri.trim_end_matches('/');
    let mut roots = PER_ROOT.write().unwrap_or_else(|p| p.into_inner());
    roots.retain(|(uri, _)| uri != root_uri);
    roots.push((root_uri.to_string(), durability));
}

/// The durability of a local path or URI: its root's, else the default.
pub fn for_uri(uri: &str) -> Durability {
    let path = uri.strip_prefix("file://").unwrap_or(uri);
    let roots = PER_ROOT.read().unwrap_or_else(|p| p.into_inner());
    super::config::longest_root(&roots, path).copied().unwrap_or_else(default)
}

/// The object store a local root with `durability` writes through.
pub fn local_store(durability: Durability) -> Arc<dyn ObjectStore> {
    match durability {
        Durability::Fsync => Arc::new(SyncedDeletes(LocalFileSystem::new().with_fsync(true))),
        Durability::None => Arc::new(LocalFileSystem::new()),
    }
}

/// `LocalFileSystem` in fsync mode, whose deletes also sync their directory
/// (its own fsync covers writes, copies and renames only): a sidecar deleted
/// after its write must not come back after a power cut.
#[derive(Debug)]
struct SyncedDeletes(LocalFileSystem);

impl fmt::Display for SyncedDeletes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SyncedDeletes({})", self.0)
    }
}

/// Sync the directory `path` is in, off the async threads.
async fn sync_parent(path: std::path::PathBuf) -> object_store::Result<()> {
    let synced = tokio::task::spawn_blocking(move || match path.parent() {
        Some(dir) => std::fs::File::open(dir).and_then(|d| d.sync_all()),
        None => Ok(()),
    })
    .await;
    synced.map_err(std::io::Error::other).and_then(|r| r).map_err(|e| object_store::Error::Generic {
        store: "SyncedDeletes",
        source: format!("syncing a directory after a delete: {e}").into(),
    })
}

#[async_trait::async_trait]
impl ObjectStore for SyncedDeletes {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.0.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.0.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.0.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[std::ops::Range<u64>],
    ) -> object_store::Result<Vec<bytes::Bytes>> {
        self.0.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let fs = self.0.clone();
        self.0
            .delete_stream(locations)
            .then(move |deleted| {
                let fs = fs.clone();
                async move {
                    let location = deleted?;
                    sync_parent(fs.path_to_filesystem(&location)?).await?;
                    Ok(location)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list(prefix)
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.0.list_with_offset(prefix, offset)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.0.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.0.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.0.rename_opts(from, to, options).await
    }
}

/// The object-store registry of every Lance session that may write (all but
/// the queries' shared read session): the default providers, with `file`
/// URIs going through [`DurableFiles`].
pub fn registry() -> Arc<ObjectStoreRegistry> {
    static REGISTRY: OnceLock<Arc<ObjectStoreRegistry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let registry = ObjectStoreRegistry::default();
            registry.insert("file", Arc::new(DurableFiles));
            Arc::new(registry)
        })
        .clone()
}

/// The scheme under which Lance does all local I/O through `object_store`.
const THROUGH_OBJECT_STORE: &str = "file-object-store";

/// Lance's provider for `file` URIs. For a durable path it builds the store
/// Lance builds for `file-object-store` URIs (every read and write through
/// `object_store`, none through Lance's direct file writer) over
/// [`local_store`]; otherwise Lance's own local store, unchanged.
#[derive(Debug)]
struct DurableFiles;

impl DurableFiles {
    fn durable(url: &Url) -> bool {
        let path = url.to_file_path().map(|p| p.to_string_lossy().into_owned());
        for_uri(&path.unwrap_or_else(|()| url.path().to_string())) == Durability::Fsync
    }

    /// `url` under [`THROUGH_OBJECT_STORE`] (a `file` URL's scheme cannot be
    /// swapped in place: the URL standard keeps special schemes apart).
    fn through_object_store(url: &Url) -> lance_core::Result<Url> {
        Url::parse(&format!("{THROUGH_OBJECT_STORE}://{}", url.path()))
            .map_err(|e| lance_core::Error::invalid_input(format!("local URL {url}: {e}")))
    }
}

#[async_trait::async_trait]
impl ObjectStoreProvider for DurableFiles {
    async fn new_store(&self, base_path: Url, params: &ObjectStoreParams) -> lance_core::Result<LanceStore> {
        if !Self::durable(&base_path) {
            return FileStoreProvider.new_store(base_path, params).await;
        }
        let mut store = FileStoreProvider.new_store(Self::through_object_store(&base_path)?, params).await?;
        store.inner = local_store(Durability::Fsync);
        Ok(store)
    }

    fn extract_path(&self, url: &Url) -> lance_core::Result<Path> {
        FileStoreProvider.extract_path(url)
    }

    fn calculate_object_store_prefix(
        &self,
        url: &Url,
        storage_options: Option<&HashMap<String, String>>,
    ) -> lance_core::Result<String> {
        match Self::durable(url) {
            true => FileStoreProvider.calculate_object_store_prefix(&Self::through_object_store(url)?, storage_options),
            false => FileStoreProvider.calculate_object_store_prefix(url, storage_options),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durability_parses_its_two_names_only() {
        assert_eq!("fsync".parse::<Durability>().ok(), Some(Durability::Fsync));
        assert_eq!(" NONE ".parse::<Durability>().ok(), Some(Durability::None));
        let err = "sync".parse::<Durability>().err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("`fsync` or `none`") && err.contains("sync"), "{err}");
    }

    #[test]
    fn a_root_of_its_own_wins_over_the_default_for_paths_under_it() {
        register_root("/tmp/durability-test/g1/", Durability::None);
        assert_eq!(for_uri("/tmp/durability-test/g1/nodes/Person"), Durability::None);
        assert_eq!(for_uri("file:///tmp/durability-test/g1"), Durability::None);
        // A sibling whose name only starts the same is not under it.
        assert_eq!(for_uri("/tmp/durability-test/g10/nodes/Person"), default());
    }

    #[test]
    fn the_object_store_url_keeps_the_path() {
        let url = Url::parse("file:///tmp/a%20b/nodes/Person").ok();
        let through = url.as_ref().and_then(|u| DurableFiles::through_object_store(u).ok());
        assert_eq!(through.map(|u| u.to_string()), Some("file-object-store:///tmp/a%20b/nodes/Person".to_string()));
    }
}
