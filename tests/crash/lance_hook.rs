//! Route every object store Lance opens through a wrapper of the test's (via
//! the engine's storage I/O hook): an [`Intercept`] policy, or any other.

use std::sync::Arc;

use lance_io::object_store::WrappingObjectStore;
use object_store::ObjectStore;
use omnigraph::engine::storage::io_hook;

use crate::intercept::{Intercept, Policy, WrapLance};

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
