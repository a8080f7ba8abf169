//! A Lance cache backend whose entries go when full or when idle.
//!
//! Most of what a session's metadata cache holds is dead soon after it is
//! cached: each commit makes a new manifest and transaction of its table and
//! a new listing of its indexes, each write a new data file whose footer a
//! reader caches, and compaction retires files. No one asks for a superseded
//! version again, yet a cache bounded by bytes alone keeps it until the bound
//! is reached, so under steady writes a daemon's memory climbs for as long as
//! filling the bound takes (on object storage, where writes are slow, more
//! than ten minutes at the default budget). Here an entry that no one has read
//! for [`IDLE`] also goes: the cache settles within a minute or two at what
//! the live versions need, and still never passes its bound. Entries that
//! stay useful across versions for long (index pages) do not live here.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::Future;
use lance_core::Result;
use lance_core::cache::{CacheBackend, CacheCodec, CacheEntry, InternalCacheKey};
use lance_core::error::CloneableError;

/// How long an entry may go unread before it is dropped.
pub const IDLE: Duration = Duration::from_secs(60);

/// A cached value and the bytes it weighs.
#[derive(Clone)]
struct Weighed {
    entry: CacheEntry,
    bytes: u32,
}

/// A byte-bounded, least-recently-used cache whose entries also expire
/// after [`IDLE`] unread (moka's time-to-idle; the same cache Lance offers
/// as a backend).
pub struct IdleCache {
    cache: moka::future::Cache<InternalCacheKey, Weighed>,
    capacity: u64,
}

impl std::fmt::Debug for IdleCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdleCache")
            .field("capacity", &self.capacity)
            .field("entries", &self.cache.entry_count())
            .finish()
    }
}

impl IdleCache {
    /// At most `capacity` bytes, each entry dropped after `idle` unread.
    pub fn new(capacity: u64, idle: Duration) -> IdleCache {
        let cache = moka::future::Cache::builder()
            .max_capacity(capacity)
            .weigher(|_: &InternalCacheKey, w: &Weighed| w.bytes)
            // Least recently used goes first, and a new entry is always
            // admitted: the newest version's entries are the ones about to
            // be read (moka's default, TinyLFU, may turn a new one away in
            // favour of old entries read often before they were superseded).
            .eviction_policy(moka::policy::EvictionPolicy::lru())
            .time_to_idle(idle)
            .build();
        IdleCache { cache, capacity }
    }

    fn weighed(entry: CacheEntry, size_bytes: usize) -> Weighed {
        // The key is part of what an entry costs; an entry past 4 GiB
        // weighs the most moka can count (and is never admitted).
        let bytes = size_bytes.saturating_add(std::mem::size_of::<InternalCacheKey>());
        Weighed { entry, bytes: u32::try_from(bytes).unwrap_or(u32::MAX) }
    }
}

#[async_trait]
impl CacheBackend for IdleCache {
    async fn get_resident(&self, key: &InternalCacheKey) -> Option<CacheEntry> {
        self.cache.get(key).await.map(|w| w.entry)
    }

    // Not a read: the entry's idle clock keeps running.
    async fn peek_resident(&self, key: &InternalCacheKey) -> bool {
        self.cache.contains_key(key)
    }

    async fn get(&self, key: &InternalCacheKey, _codec: Option<CacheCodec>) -> Option<CacheEntry> {
        self.cache.get(key).await.map(|w| w.entry)
    }

    async fn insert(&self, key: &InternalCacheKey, entry: CacheEntry, size_bytes: usize, _codec: Option<CacheCodec>) {
        self.cache.insert(*key, Self::weighed(entry, size_bytes)).await;
    }

    async fn get_or_insert<'a>(
        &self,
        key: &InternalCacheKey,
        loader: Pin<Box<dyn Future<Output = Result<(CacheEntry, usize)>> + Send + 'a>>,
        _codec: Option<CacheCodec>,
    ) -> Result<(CacheEntry, bool)> {
        // Concurrent loads of one key run the loader once; whether this
        // call's loader ran tells a miss from a hit.
        let loaded = Arc::new(AtomicBool::new(false));
        let ran = loaded.clone();
        let load = async move {
            ran.store(true, Ordering::Relaxed);
            // Shared with every caller that waited on this load, kind kept
            // (a missing manifest stays a not-found).
            loader.await.map(|(entry, size)| Self::weighed(entry, size)).map_err(CloneableError::new)
        };
        match self.cache.try_get_with(*key, load).await {
            Ok(w) => Ok((w.entry, !loaded.load(Ordering::Relaxed))),
            Err(shared) => Err(Arc::unwrap_or_clone(shared).into_inner()),
        }
    }

    async fn clear(&self) {
        self.cache.invalidate_all();
        self.cache.run_pending_tasks().await;
    }

    async fn num_entries(&self) -> usize {
        self.cache.run_pending_tasks().await;
        self.cache.entry_count() as usize
    }

    async fn size_bytes(&self) -> usize {
        self.cache.run_pending_tasks().await;
        self.cache.weighted_size() as usize
    }

    fn approx_num_entries(&self) -> usize {
        self.cache.entry_count() as usize
    }

    fn approx_size_bytes(&self) -> usize {
        self.cache.weighted_size() as usize
    }

    fn capacity_bytes(&self) -> Option<usize> {
        Some(self.capacity as usize)
    }
}

#[cfg(test)]
mod tests {
    use lance_core::Error;

    use super::*;

    /// What `get_or_insert` takes.
    type Loader = Pin<Box<dyn Future<Output = Result<(CacheEntry, usize)>> + Send>>;

    fn key(n: u16) -> InternalCacheKey {
        let mut bytes = [0u8; 16];
        bytes[..2].copy_from_slice(&n.to_le_bytes());
        InternalCacheKey::from_bytes(bytes)
    }

    #[tokio::test]
    async fn entries_stay_within_the_bound_and_go_when_idle() {
        let cache = IdleCache::new(64 << 10, Duration::from_millis(200));
        for n in 0..200u16 {
            cache.insert(&key(n), Arc::new(n), 1 << 10, None).await;
        }
        assert!(cache.size_bytes().await <= 64 << 10, "{}", cache.size_bytes().await);
        assert!(cache.num_entries().await < 200);
        // Full, it still took the newest entry and let the oldest go.
        assert_eq!(cache.get(&key(199), None).await.and_then(|e| e.downcast_ref::<u16>().copied()), Some(199));
        assert!(cache.get(&key(0), None).await.is_none());
        // A loader runs on a miss and not on a hit.
        let load = |v: u16| -> Loader { Box::pin(async move { Ok((Arc::new(v) as CacheEntry, 8)) }) };
        let (_, hit) = cache.get_or_insert(&key(1000), load(7), None).await.unwrap();
        assert!(!hit);
        let (entry, hit) = cache.get_or_insert(&key(1000), load(8), None).await.unwrap();
        assert!(hit);
        assert_eq!(entry.downcast_ref::<u16>().copied(), Some(7));
        // Unread past the idle limit, everything goes; wait on the cache's
        // own count, not on a fixed sleep.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while cache.num_entries().await > 0 {
            assert!(std::time::Instant::now() < deadline, "idle entries were kept");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(cache.size_bytes().await, 0);
    }

    #[tokio::test]
    async fn a_failed_load_is_an_error_and_caches_nothing() {
        let cache = IdleCache::new(1 << 20, IDLE);
        let failing: Loader = Box::pin(async { Err(Error::io("storage said no")) });
        let e = cache.get_or_insert(&key(1), failing, None).await.err().map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("storage said no")));
        assert_eq!(cache.num_entries().await, 0);
    }
}
