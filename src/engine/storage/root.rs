//! A graph root: where a graph lives, and the small files omnigraph owns there
//! (schema files, recovery sidecars), read and written through `object_store`.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use url::Url;

use super::config::{self, StorageOptions};
use crate::protocol::{OmniError, Result};

/// A graph root: a local directory or an object-store URI (`s3://bucket/prefix`).
#[derive(Clone)]
pub struct Root {
    /// The URI Lance opens datasets under (an absolute path for local roots).
    uri: String,
    store: Arc<dyn ObjectStore>,
    base: Path,
    /// The directory, for a local root.
    local: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Root {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Root").field("uri", &self.uri).finish()
    }
}

impl Root {
    /// Resolve a user-given location. Local paths become absolute (and
    /// canonical when they exist) so every alias of one root converges.
    ///
    /// An object-store root takes its storage options from the environment
    /// and the process defaults ([`config`]).
    pub fn parse(location: &str) -> Result<Root> {
        Self::parse_with(location, &StorageOptions::default())
    }

    /// [`Root::parse`] with options of this root's own, which also apply to
    /// every Lance dataset under it for the rest of the process.
    pub fn parse_with(location: &str, options: &StorageOptions) -> Result<Root> {
        if location.trim().is_empty() {
            return Err(OmniError::BadRequest("graph location is empty".into()));
        }
        if location.contains("://") && !location.starts_with("file://") {
            let url = Url::parse(location)
                .map_err(|e| OmniError::BadRequest(format!("invalid graph URI `{location}`: {e}")))?;
            let uri = location.trim_end_matches('/').to_string();
            let store: Arc<dyn ObjectStore> = if config::is_s3(&uri) {
                config::s3_store(&uri, &config::resolve(&uri, options))?
            } else {
                // The environment's AWS keys mean nothing to other stores.
                let pairs = options.iter().map(|(k, v)| (k.to_string(), v.to_string()));
                let (store, _) = object_store::parse_url_opts(&url, pairs)
                    .map_err(|e| OmniError::BadRequest(format!("unsupported graph URI `{location}`: {e}")))?;
                Arc::from(store)
            };
            let base = Path::from_url_path(url.path())
                .map_err(|e| OmniError::BadRequest(format!("invalid graph URI `{location}`: {e}")))?;
            if !options.is_empty() {
                config::register_root(&uri, options.clone());
            }
            return Ok(Root { uri, store, base, local: None });
        }
        let path = location.strip_prefix("file://").unwrap_or(location);
        let abs = std::path::absolute(path)
            .map_err(|e| OmniError::BadRequest(format!("invalid graph path `{location}`: {e}")))?;
        let abs = std::fs::canonicalize(&abs).unwrap_or(abs);
        let store = super::durability::local_store(super::durability::for_uri(&abs.to_string_lossy()));
        let base = Path::from_absolute_path(&abs)
            .map_err(|e| OmniError::BadRequest(format!("invalid graph path `{location}`: {e}")))?;
        let uri = abs.to_string_lossy().trim_end_matches('/').to_string();
        Ok(Root { uri, store, base, local: Some(abs) })
    }

    /// The same root with a different object store (tests wrap the store to
    /// count or fail storage calls).
    pub fn with_store(mut self, store: Arc<dyn ObjectStore>) -> Root {
        self.store = store;
        self
    }

    /// The root's canonical URI; equal for every alias of one local root.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// How writes under this root reach storage: `fsync` or `none` for a
    /// local root ([`super::durability`]), `object_store` for an object
    /// store (a successful PUT is durable).
    pub fn durability(&self) -> &'static str {
        match self.local {
            Some(_) => super::durability::for_uri(&self.uri).as_str(),
            None => "object_store",
        }
    }

    /// Whether the root is a local directory (not an object store).
    pub fn is_local(&self) -> bool {
        self.local.is_some()
    }

    /// The object store under this root.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// URI of a dataset or file at `rel` under the root.
    pub fn child_uri(&self, rel: &str) -> String {
        format!("{}/{}", self.uri, rel)
    }

    fn path(&self, rel: &str) -> Path {
        rel.split('/').filter(|s| !s.is_empty()).fold(self.base.clone(), |p, s| p.clone().join(s))
    }

    /// Write a whole object.
    pub async fn put(&self, rel: &str, bytes: Vec<u8>) -> Result<()> {
        self.store
            .put(&self.path(rel), PutPayload::from(bytes))
            .await
            .map_err(|e| OmniError::storage(format!("writing {rel}"), e))?;
        Ok(())
    }

    /// Write a whole object only if none exists at `rel` (one atomic
    /// create-if-absent: a local temp file linked into place, a conditional
    /// PUT on S3). `false` when one existed, which is left as it was.
    pub async fn create(&self, rel: &str, bytes: Vec<u8>) -> Result<bool> {
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&self.path(rel), PutPayload::from(bytes), opts).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(false),
            Err(e) => Err(OmniError::storage(format!("creating {rel}"), e)),
        }
    }

    /// Read a whole object; `None` when it does not exist.
    pub async fn get(&self, rel: &str) -> Result<Option<Bytes>> {
        match self.store.get(&self.path(rel)).await {
            Ok(r) => Ok(Some(r.bytes().await.map_err(|e| OmniError::storage(format!("reading {rel}"), e))?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(OmniError::storage(format!("reading {rel}"), e)),
        }
    }

    /// Whether an object (or a non-empty prefix) exists at `rel`.
    pub async fn exists(&self, rel: &str) -> Result<bool> {
        match self.store.head(&self.path(rel)).await {
            Ok(_) => return Ok(true),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(OmniError::storage(format!("checking {rel}"), e)),
        }
        Ok(!self.list(rel).await?.is_empty())
    }

    /// Names (relative to the root, sorted) of every object under the prefix `rel`.
    pub async fn list(&self, rel: &str) -> Result<Vec<String>> {
        let prefix = self.path(rel);
        let metas: Vec<_> = match self.store.list(Some(&prefix)).try_collect().await {
            Ok(m) => m,
            Err(object_store::Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(OmniError::storage(format!("listing {rel}"), e)),
        };
        let base = self.base.as_ref();
        let mut names: Vec<String> = metas
            .into_iter()
            .map(|m| {
                let full = m.location.as_ref().to_string();
                full.strip_prefix(base).unwrap_or(&full).trim_start_matches('/').to_string()
            })
            .collect();
        names.sort();
        Ok(names)
    }

    /// Delete an object; deleting a missing object is not an error.
    pub async fn delete(&self, rel: &str) -> Result<()> {
        match self.store.delete(&self.path(rel)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(OmniError::storage(format!("deleting {rel}"), e)),
        }
    }

    /// Check, once per root and process, that the object store refuses to
    /// overwrite on a create-only put. Every commit (Lance's manifests, the
    /// exact guard, `__manifest`'s compare-and-swap) rests on it; a store that
    /// silently overwrites (an S3 server without conditional writes) would
    /// lose commits, so writing is refused there. Local roots always have it.
    pub async fn check_atomic_create(&self) -> Result<()> {
        static CHECKED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let seen = |uri: &str| CHECKED.lock().map(|c| c.iter().any(|u| u == uri)).unwrap_or(false);
        if self.local.is_some() || seen(&self.uri) {
            return Ok(());
        }
        let probe = self.path(&format!("_omnigraph_probe/{}", ulid::Ulid::new()));
        let create = || PutOptions { mode: PutMode::Create, ..Default::default() };
        let ctx = "checking that the object store supports conditional writes";
        self.store
            .put_opts(&probe, PutPayload::from_static(b"1"), create())
            .await
            .map_err(|e| OmniError::storage(ctx, e))?;
        let second = self.store.put_opts(&probe, PutPayload::from_static(b"2"), create()).await;
        let _ = self.store.delete(&probe).await;
        match second {
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                if let Ok(mut c) = CHECKED.lock() {
                    c.push(self.uri.clone());
                }
                Ok(())
            }
            Ok(_) => Err(OmniError::UnsupportedStorage(format!(
                "the object store at `{}` overwrote an object on a create-only (If-None-Match) put: without \
                 conditional writes commits could be lost, so this graph can be opened read-only only",
                self.uri
            ))),
            Err(e) => Err(OmniError::storage(ctx, e)),
        }
    }

    /// Remove the staging residue of interrupted local writes directly under
    /// `rel`: `name#<digits>` files the local object store writes before
    /// renaming them into place, which its listings hide and no delete can
    /// address. Object stores with atomic PUTs leave none. Returns the names.
    pub async fn remove_staging_residue(&self, rel: &str) -> Result<Vec<String>> {
        let Some(dir) = &self.local else { return Ok(vec![]) };
        let dir = rel.split('/').filter(|s| !s.is_empty()).fold(dir.clone(), |d, s| d.join(s));
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(OmniError::storage(format!("listing {rel}"), e)),
        };
        let mut removed = Vec::new();
        while let Some(entry) =
            entries.next_entry().await.map_err(|e| OmniError::storage(format!("listing {rel}"), e))?
        {
            let name = entry.file_name().to_string_lossy().to_string();
            if !is_staging_residue(&name) {
                continue;
            }
            match tokio::fs::remove_file(entry.path()).await {
                Ok(()) => removed.push(format!("{rel}/{name}")),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(OmniError::storage(format!("removing {rel}/{name}"), e)),
            }
        }
        Ok(removed)
    }

    /// Delete every object under the prefix `rel`.
    pub async fn delete_prefix(&self, rel: &str) -> Result<()> {
        for name in self.list(rel).await? {
            self.delete(&name).await?;
        }
        Ok(())
    }
}

/// Whether `name` is a local object store's in-flight upload (`x#<digits>`).
fn is_staging_residue(name: &str) -> bool {
    name.rsplit_once('#')
        .is_some_and(|(stem, n)| !stem.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::is_staging_residue;

    #[test]
    fn staging_residue_is_a_name_with_a_numeric_suffix() {
        assert!(is_staging_residue("01J.json#1"));
        assert!(is_staging_residue("x#123"));
        assert!(!is_staging_residue("01J.json"));
        assert!(!is_staging_residue("x#"));
        assert!(!is_staging_residue("#1"));
        assert!(!is_staging_residue("x#1a"));
    }
}
