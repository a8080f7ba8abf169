//! A process-wide hook around every object store Lance opens for this
//! crate's datasets. Unset (the default) it costs one uncontended read lock
//! per open. The crash harness sets it to count durable writes and to stop
//! the world after the k-th one; it is not a configuration knob.

use std::sync::{Arc, RwLock};

use lance_io::object_store::{ObjectStoreParams, WrappingObjectStore};

static HOOK: RwLock<Option<Arc<dyn WrappingObjectStore>>> = RwLock::new(None);

/// Wrap the object store of every dataset opened or created from now on
/// (`None` removes the hook; handles already open keep what they had).
pub fn set(hook: Option<Arc<dyn WrappingObjectStore>>) {
    match HOOK.write() {
        Ok(mut h) => *h = hook,
        Err(poisoned) => *poisoned.into_inner() = hook,
    }
}

/// Store parameters for a dataset at `uri`: the hook, when one is set, and
/// the storage options in force there ([`super::config`]).
pub(super) fn store_params(uri: &str) -> Option<ObjectStoreParams> {
    let hook = match HOOK.read() {
        Ok(h) => h.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    };
    super::config::store_params(uri, hook)
}
