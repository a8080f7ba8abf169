//! Route every object store Lance opens through an [`Intercept`] policy (via
//! the engine's storage I/O hook).

use std::sync::Arc;

use lance_io::object_store::WrappingObjectStore;
use object_store::ObjectStore;
use omnigraph::engine::storage::io_hook;

use crate::intercept::{Intercept, Policy};

/// Wraps each store Lance opens with `Intercept { policy }`.
#[derive(Debug)]
pub struct WrapLance<P>(pub Arc<P>);

impl<P: Policy> WrappingObjectStore for WrapLance<P> {
    fn wrap(&self, _prefix: &str, original: Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> {
        Arc::new(Intercept { inner: original, policy: self.0.clone() })
    }

    // Listings are reads, and the policies only act on writes: the pushdown stays.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        Some(original)
    }
}

/// Send Lance's I/O through `policy` from now on (`None`: stop).
pub fn route<P: Policy>(policy: Option<Arc<P>>) {
    io_hook::set(policy.map(|p| Arc::new(WrapLance(p)) as Arc<dyn WrappingObjectStore>));
}
