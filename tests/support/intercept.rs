//! An `object_store` wrapper that asks a policy before every write, delete,
//! read and listing: the fault-injection and
//! durable-write-cut tests share it (included by path in each test binary).

use std::fmt;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use lance_io::object_store::WrappingObjectStore;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore, PutMultipartOptions,
    PutOptions, PutPayload, PutResult, RenameOptions,
};

/// What a test lets through; every default admits.
pub trait Policy: fmt::Debug + Send + Sync + 'static {
    /// Before a put, multipart upload, copy or rename to `path`.
    fn write(&self, _path: &Path) -> object_store::Result<()> {
        Ok(())
    }
    /// Before deleting `path`.
    fn delete(&self, _path: &Path) -> object_store::Result<()> {
        Ok(())
    }
    /// Before a read (get, head, ranged get) of `path`.
    fn read(&self, _path: &Path) -> object_store::Result<()> {
        Ok(())
    }
    /// After a read of `path` returned `bytes` bytes.
    fn served(&self, _path: &Path, _bytes: u64) {}
    /// Before listing under `prefix`.
    fn list(&self, _prefix: Option<&Path>) -> object_store::Result<()> {
        Ok(())
    }
    /// After a write or delete of `path` succeeded: an error here reports a
    /// failure for an effect that happened (an ambiguous outcome).
    fn after(&self, _path: &Path) -> object_store::Result<()> {
        Ok(())
    }
}

/// A store that consults `policy` first.
#[derive(Debug)]
pub struct Intercept<P> {
    /// The wrapped store.
    pub inner: Arc<dyn ObjectStore>,
    /// The test's policy.
    pub policy: Arc<P>,
}

impl<P> fmt::Display for Intercept<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Intercept({})", self.inner)
    }
}

/// An injected failure.
pub fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic { store: "intercept", source: format!("injected {what} failure").into() }
}

#[async_trait::async_trait]
impl<P: Policy> ObjectStore for Intercept<P> {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.policy.write(location)?;
        let out = self.inner.put_opts(location, payload, opts).await?;
        self.policy.after(location)?;
        Ok(out)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.policy.write(location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> object_store::Result<GetResult> {
        self.policy.read(location)?;
        let got = self.inner.get_opts(location, options).await?;
        self.policy.served(location, got.range.end - got.range.start);
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let policy = self.policy.clone();
        let admitted = locations.map(move |l| l.and_then(|p| policy.delete(&p).map(|()| p))).boxed();
        let policy = self.policy.clone();
        self.inner.delete_stream(admitted).map(move |r| r.and_then(|p| policy.after(&p).map(|()| p))).boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if let Err(e) = self.policy.list(prefix) {
            return futures::stream::once(async { Err(e) }).boxed();
        }
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.policy.list(prefix)?;
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> object_store::Result<()> {
        self.policy.write(to)?;
        self.inner.copy_opts(from, to, options).await
    }

    async fn rename_opts(&self, from: &Path, to: &Path, options: RenameOptions) -> object_store::Result<()> {
        self.policy.write(to)?;
        self.inner.rename_opts(from, to, options).await?;
        self.policy.after(to)
    }
}

/// Wraps each store Lance opens with `wrap(store prefix, store)`.
pub struct WrapLance<F>(pub F);

impl<F> std::fmt::Debug for WrapLance<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WrapLance")
    }
}

impl<F> WrappingObjectStore for WrapLance<F>
where
    F: Fn(&str, Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> + Send + Sync + 'static,
{
    fn wrap(&self, prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        (self.0)(prefix, original)
    }

    // Listings stay on the original store's paginated path.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        Some(original)
    }
}
