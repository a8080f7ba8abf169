//! Route every object store Lance opens through a wrapper of the test's (via
//! the engine's storage I/O hook): an [`Intercept`] policy, or any other.

use std::sync::Arc;

use lance_io::object_store::WrappingObjectStore;
use object_store::ObjectStore;
use omnigraph::engine::storage::io_hook;

use crate::intercept::{Intercept, Policy};

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

    // Listings are reads, and the wrappers only act on writes: the pushdown stays.
    fn wrap_paginated(
        &self,
        _prefix: &str,
        original: Arc<dyn object_store::list::PaginatedListStore>,
    ) -> Option<Arc<dyn object_store::list::PaginatedListStore>> {
        Some(original)
    }
}

/// Send Lance's I/O through `wrap` from now on (`None`: stop).
pub fn route_with<F>(wrap: Option<F>)
where
    F: Fn(&str, Arc<dyn ObjectStore>) -> Arc<dyn ObjectStore> + Send + Sync + 'static,
{
    io_hook::set(wrap.map(|w| Arc::new(WrapLance(w)) as Arc<dyn WrappingObjectStore>));
}

/// Send Lance's I/O through `policy` from now on (`None`: stop).
pub fn route<P: Policy>(policy: Option<Arc<P>>) {
    route_with(policy.map(|policy| {
        move |_: &str, inner: Arc<dyn ObjectStore>| {
            Arc::new(Intercept { inner, policy: policy.clone() }) as Arc<dyn ObjectStore>
        }
    }));
}

/// Stop wrapping Lance's stores.
pub fn stop() {
    io_hook::set(None);
}
