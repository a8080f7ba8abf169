//! A Lance index cache that keeps index pages apart from the per-version
//! index listings: the read session has one, and the private sessions
//! share another ([`super::caches`]).
//!
//! Lance caches two kinds of thing in a session's index cache. Index pages
//! (BTree pages, FTS postings, vector partitions) are keyed by the index
//! segment they belong to, so they stay useful across commits. A table's
//! index listing is keyed by the dataset version it was read at, so every
//! commit a reader sees adds one listing per table and the superseded ones
//! are never read again. In one cache of the budget's size, a daemon under
//! steady writes kept tens of thousands of dead listings (hundreds of MB)
//! before any eviction began: memory grew with the commits served. Here the
//! listings get a small cache of their own, whose entries also go after a
//! minute unread ([`IdleCache`]), and the pages keep the rest of the capacity.

use std::pin::Pin;
use std::sync::OnceLock;

use async_trait::async_trait;
use futures::Future;
use lance_core::Result;
use lance_core::cache::{
    CacheBackend, CacheCodec, CacheEntry, CacheTier, Context, InternalCacheKey, QuickCacheBackend,
    QuickCacheShardPolicy,
};

use super::idle_cache::{IDLE, IdleCache};

/// An index cache: two bounded caches behind one Lance backend, routed by
/// the entry's codec type.
#[derive(Debug)]
pub struct IndexCache {
    pages: QuickCacheBackend,
    listings: IdleCache,
}

/// The codec type Lance gives a table's per-version index listing.
fn listing_type() -> &'static str {
    static TYPE: OnceLock<&'static str> = OnceLock::new();
    TYPE.get_or_init(|| lance_table::format::index_metadata_codec().type_id())
}

/// Whether an entry with this codec is a per-version index listing.
fn is_listing(codec: Option<&CacheCodec>) -> bool {
    codec.is_some_and(|c| c.type_id() == listing_type())
}

impl IndexCache {
    /// Pages bounded by `pages_bytes`, listings by `listings_bytes`.
    pub fn new(pages_bytes: u64, listings_bytes: u64) -> IndexCache {
        // One shard each, as Lance's own index cache: pages vary in size by
        // orders of magnitude, and shards would split the budget unevenly.
        let pages = QuickCacheBackend::with_shard_policy(pages_bytes as usize, QuickCacheShardPolicy::Single);
        IndexCache { pages, listings: IdleCache::new(listings_bytes, IDLE) }
    }

    fn route(&self, codec: Option<&CacheCodec>) -> &dyn CacheBackend {
        if is_listing(codec) { &self.listings } else { &self.pages }
    }

    /// The listings cache alone: `(bytes, entries)`.
    pub async fn listings(&self) -> (u64, u64) {
        (self.listings.size_bytes().await as u64, self.listings.num_entries().await as u64)
    }

    /// The pages cache alone: `(bytes, entries)`.
    pub async fn pages(&self) -> (u64, u64) {
        (self.pages.size_bytes().await as u64, self.pages.num_entries().await as u64)
    }
}

#[async_trait]
impl CacheBackend for IndexCache {
    // Lookups without a codec cannot be routed: they try the pages (where
    // every uncoded entry lives) and then the listings.
    async fn get_resident(&self, key: &InternalCacheKey) -> Option<CacheEntry> {
        match self.pages.get_resident(key).await {
            Some(entry) => Some(entry),
            None => self.listings.get_resident(key).await,
        }
    }

    async fn peek_resident(&self, key: &InternalCacheKey) -> bool {
        self.pages.peek_resident(key).await || self.listings.peek_resident(key).await
    }

    async fn peek_tier(&self, key: &InternalCacheKey) -> CacheTier {
        match self.pages.peek_tier(key).await {
            CacheTier::Absent => self.listings.peek_tier(key).await,
            tier => tier,
        }
    }

    fn plane_admission_gated(&self) -> bool {
        self.pages.plane_admission_gated()
    }

    async fn get(&self, key: &InternalCacheKey, codec: Option<CacheCodec>) -> Option<CacheEntry> {
        self.route(codec.as_ref()).get(key, codec).await
    }

    async fn insert(&self, key: &InternalCacheKey, entry: CacheEntry, size_bytes: usize, codec: Option<CacheCodec>) {
        self.route(codec.as_ref()).insert(key, entry, size_bytes, codec).await
    }

    async fn get_or_insert<'a>(
        &self,
        key: &InternalCacheKey,
        loader: Pin<Box<dyn Future<Output = Result<(CacheEntry, usize)>> + Send + 'a>>,
        codec: Option<CacheCodec>,
    ) -> Result<(CacheEntry, bool)> {
        self.route(codec.as_ref()).get_or_insert(key, loader, codec).await
    }

    async fn clear(&self) {
        self.pages.clear().await;
        self.listings.clear().await;
    }

    async fn num_entries(&self) -> usize {
        self.pages.num_entries().await + self.listings.num_entries().await
    }

    async fn size_bytes(&self) -> usize {
        self.pages.size_bytes().await + self.listings.size_bytes().await
    }

    fn approx_num_entries(&self) -> usize {
        self.pages.approx_num_entries() + self.listings.approx_num_entries()
    }

    fn approx_size_bytes(&self) -> usize {
        self.pages.approx_size_bytes() + self.listings.approx_size_bytes()
    }

    fn capacity_bytes(&self) -> Option<usize> {
        Some(self.pages.capacity_bytes()? + self.listings.capacity_bytes()?)
    }

    fn deep_size_of_entries(
        &self,
        context: &mut Context,
        size_of_entry: &dyn Fn(&CacheEntry, &mut Context) -> Option<usize>,
    ) -> Option<usize> {
        Some(self.pages.deep_size_of_entries(context, size_of_entry)? + self.listings.approx_size_bytes())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn key(n: u8) -> InternalCacheKey {
        InternalCacheKey::from_bytes([n; 16])
    }

    #[tokio::test]
    async fn listings_are_bounded_apart_from_pages() {
        let cache = IndexCache::new(1 << 20, 64 << 10);
        let listing = Some(lance_table::format::index_metadata_codec());
        // Many version listings: their cache stays within its own bound.
        for n in 0..=200u8 {
            cache.insert(&key(n), Arc::new(n), 4 << 10, listing).await;
        }
        let (listing_bytes, listing_entries) = cache.listings().await;
        assert!(listing_bytes <= 64 << 10, "{listing_bytes}");
        assert!(listing_entries < 200, "{listing_entries}");
        // A page is untouched by them and found without a codec.
        cache.insert(&key(255), Arc::new(255u8), 8 << 10, None).await;
        assert_eq!(cache.pages().await.1, 1);
        let page = cache.get_resident(&key(255)).await;
        assert_eq!(page.and_then(|e| e.downcast_ref::<u8>().copied()), Some(255));
        // The newest listing is served through its codec.
        let newest = cache.get(&key(200), listing).await;
        assert_eq!(newest.and_then(|e| e.downcast_ref::<u8>().copied()), Some(200));
    }
}
