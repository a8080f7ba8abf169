//! The exact-version commit guard.
//!
//! Lance rebases a transaction onto concurrent commits even with zero retries
//! (notes/lance14.md §6), so "commit exactly at read_version + 1" needs a
//! commit handler that refuses any other version before the manifest is written.

use std::sync::Arc;

use lance_io::object_store::ObjectStore;
use lance_table::format::{IndexMetadata, Manifest, Transaction};
use lance_table::io::commit::{
    CommitError, CommitHandler, ConditionalPutCommitHandler, ManifestLocation, ManifestNamingScheme, ManifestWriter,
};
use object_store::path::Path;

/// Wraps the conditional-put handler and fails with `CommitConflict` unless the
/// manifest being written has exactly the expected version.
#[derive(Debug)]
pub(super) struct ExpectVersion {
    inner: Arc<dyn CommitHandler>,
    expected: u64,
}

impl ExpectVersion {
    /// A guard admitting only `expected`.
    pub(super) fn new(expected: u64) -> Arc<Self> {
        Arc::new(ExpectVersion { inner: Arc::new(ConditionalPutCommitHandler), expected })
    }
}

#[async_trait::async_trait]
impl CommitHandler for ExpectVersion {
    fn is_version_not_found_definitive(&self) -> bool {
        self.inner.is_version_not_found_definitive()
    }

    fn propagate_commit_error_after_success(&self) -> bool {
        self.inner.propagate_commit_error_after_success()
    }

    async fn commit(
        &self,
        manifest: &mut Manifest,
        indices: Option<Vec<IndexMetadata>>,
        base_path: &Path,
        object_store: &ObjectStore,
        manifest_writer: ManifestWriter,
        naming_scheme: ManifestNamingScheme,
        transaction: Option<Transaction>,
    ) -> Result<ManifestLocation, CommitError> {
        if manifest.version != self.expected {
            return Err(CommitError::CommitConflict);
        }
        self.inner.commit(manifest, indices, base_path, object_store, manifest_writer, naming_scheme, transaction).await
    }
}
