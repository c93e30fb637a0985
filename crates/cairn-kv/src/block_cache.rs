//! The shared block cache: decoded (decompressed, checksum-verified) SSTable data blocks keyed
//! by (table id, block offset), evicted by a byte budget (quick_cache's CLOCK-Pro variant).
//!
//! Table ids are file numbers, which are never reused, so a deleted table's blocks are never
//! served for another table. When a table is deleted its blocks are dropped
//! ([`BlockCache::remove`]), so that the cache's usage counts live blocks only: writers warming
//! the cache with blocks they write ([`BlockCache::warm`]) look at it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use quick_cache::sync::{Cache, DefaultLifecycle};
use quick_cache::{DefaultHashBuilder, OptionsBuilder, Weighter};

use crate::block::Block;

/// Bytes charged per cached block on top of its length (key, `Arc`, cache bookkeeping).
pub const BLOCK_OVERHEAD: u64 = 64;

/// Cache key: (table id, block offset).
type BlockKey = (u64, u64);

/// Weighs a block by its byte length plus [`BLOCK_OVERHEAD`].
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockWeighter;

impl Weighter<BlockKey, Arc<Block>> for BlockWeighter {
    fn weight(&self, _key: &BlockKey, block: &Arc<Block>) -> u64 {
        block.len() as u64 + BLOCK_OVERHEAD
    }
}

/// Shards of a cache of `capacity` bytes: one per MiB, between 16 and 256.
///
/// A shard is a lock: a background thread warming the cache with a new table's blocks takes
/// shard after shard in write mode while client threads read. With few shards a reader often
/// finds its shard taken, and if the holder is a low-priority compaction thread that the
/// clients have preempted, the reader waits for it to be scheduled again. Many shards make
/// that collision rare.
fn shard_count(capacity: u64) -> usize {
    (capacity >> 20).clamp(16, 256) as usize
}

/// Bytes [`BlockCache::warm`] inserts on one reading of the cache's free room.
const ROOM_RECHECK: u64 = 4 << 20;

/// What [`BlockCache::warm`] did with a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmed {
    /// The block is cached.
    Inserted,
    /// Its shard was locked by another thread: the block was left out (it is read from the
    /// file if it is ever needed).
    Busy,
    /// The cache has no room for it without evicting (only when room was asked for).
    Full,
}

/// A snapshot of the cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found their block.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Bytes currently charged (block lengths plus overhead).
    pub usage_bytes: u64,
    /// The byte budget.
    pub capacity_bytes: u64,
    /// Blocks currently cached.
    pub entries: usize,
}

/// A byte-budgeted cache of decoded blocks, shared by every open table.
pub struct BlockCache {
    /// `None` when the budget is 0: nothing is cached.
    cache: Option<Cache<BlockKey, Arc<Block>, BlockWeighter>>,
    capacity_bytes: u64,
    /// Hit and miss counts, striped by thread: every lookup counts, and threads scanning at
    /// once would otherwise contend for one cache line.
    counts: [Counts; STRIPES],
}

const STRIPES: usize = 8;

#[derive(Default)]
#[repr(align(64))]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
}

/// This thread's stripe of the counters.
fn stripe() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache").field("stats", &self.stats()).finish()
    }
}

impl BlockCache {
    /// A cache holding up to `capacity_bytes` of blocks (0 caches nothing).
    pub fn new(capacity_bytes: usize) -> Self {
        let capacity = capacity_bytes as u64;
        let cache = (capacity > 0).then(|| {
            // Sized for 4 KiB blocks; the estimate only presizes tables and picks shard counts.
            let items = (capacity / (4096 + BLOCK_OVERHEAD)).max(1) as usize;
            let options = OptionsBuilder::new()
                .estimated_items_capacity(items)
                .weight_capacity(capacity)
                .shards(shard_count(capacity))
                .build()
                .expect("estimated items and weight capacity are set");
            Cache::with_options(options, BlockWeighter, DefaultHashBuilder::default(), DefaultLifecycle::default())
        });
        BlockCache { cache, capacity_bytes: capacity, counts: Default::default() }
    }

    /// The cached block at `offset` of table `table_id`, counting a hit or a miss.
    pub fn get(&self, table_id: u64, offset: u64) -> Option<Arc<Block>> {
        let found = self.cache.as_ref().and_then(|c| c.get(&(table_id, offset)));
        let c = &self.counts[stripe()];
        let counter = if found.is_some() { &c.hits } else { &c.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// The cached block at `offset` of table `table_id`, without counting a hit or a miss: a
    /// scan looking one block ahead, which counts the hit with [`BlockCache::count_hit`] if it
    /// then uses the block.
    pub fn peek(&self, table_id: u64, offset: u64) -> Option<Arc<Block>> {
        self.cache.as_ref().and_then(|c| c.get(&(table_id, offset)))
    }

    /// Counts a hit for a block taken with [`BlockCache::peek`].
    pub fn count_hit(&self) {
        self.counts[stripe()].hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Caches `block` as the block at `offset` of table `table_id` (blocks larger than a cache
    /// shard are not kept).
    pub fn insert(&self, table_id: u64, offset: u64, block: Arc<Block>) {
        if let Some(c) = &self.cache {
            c.insert((table_id, offset), block);
        }
    }

    /// Caches a block a background thread has just written, without ever waiting for a shard
    /// lock (a contended block is left out: [`Warmed::Busy`]). With `room`, the block is cached
    /// only if it evicts nothing: `room` is the caller's running estimate of the bytes the
    /// cache has free (start it at 0), refreshed from the cache when it runs short, so that a
    /// writer warming the cache with fresh blocks does not push out blocks readers use.
    pub fn warm(&self, table_id: u64, offset: u64, block: Arc<Block>, room: Option<&mut u64>) -> Warmed {
        let Some(c) = &self.cache else { return Warmed::Full };
        if let Some(room) = room {
            let weight = BlockWeighter.weight(&(table_id, offset), &block);
            if *room < weight {
                // Asked again every few MiB, since other threads fill the cache meanwhile.
                *room = self.capacity_bytes.saturating_sub(c.weight()).min(ROOM_RECHECK);
                if *room < weight {
                    return Warmed::Full;
                }
            }
            *room -= weight;
        }
        match c.try_insert((table_id, offset), block) {
            Ok(()) => Warmed::Inserted,
            Err(_) => Warmed::Busy,
        }
    }

    /// Drops the block at `offset` of table `table_id`, if cached.
    pub fn remove(&self, table_id: u64, offset: u64) {
        if let Some(c) = &self.cache {
            c.remove(&(table_id, offset));
        }
    }

    /// Bytes currently charged to cached blocks.
    pub fn usage_bytes(&self) -> u64 {
        self.cache.as_ref().map_or(0, |c| c.weight())
    }

    /// The byte budget.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_bytes
    }

    /// Hit and miss counters and current usage.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.counts.iter().map(|c| c.hits.load(Ordering::Relaxed)).sum(),
            misses: self.counts.iter().map(|c| c.misses.load(Ordering::Relaxed)).sum(),
            usage_bytes: self.usage_bytes(),
            capacity_bytes: self.capacity_bytes,
            entries: self.cache.as_ref().map_or(0, |c| c.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::path::Path;

    /// A one-entry block of a little over `n` bytes.
    fn block(n: usize) -> Arc<Block> {
        let mut b = crate::block_builder::BlockBuilder::new(16);
        b.add(&crate::key::internal_key(b"k", 1, 1), &vec![7u8; n]);
        Arc::new(Block::new(Bytes::from(b.finish()), Arc::from(Path::new("b")), 0).unwrap())
    }

    #[test]
    fn hits_misses_and_usage() {
        let c = BlockCache::new(1 << 20);
        assert!(c.get(1, 0).is_none());
        let b = block(1000);
        let weight = b.len() as u64 + BLOCK_OVERHEAD;
        c.insert(1, 0, b.clone());
        assert!(Arc::ptr_eq(&c.get(1, 0).unwrap(), &b));
        assert!(c.get(2, 0).is_none());
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 2, 1));
        assert_eq!(s.usage_bytes, weight);
        assert_eq!(c.usage_bytes(), weight);
    }

    #[test]
    fn budget_is_respected() {
        let c = BlockCache::new(64 << 10);
        for i in 0..200 {
            c.insert(1, i, block(1000));
        }
        assert!(c.usage_bytes() <= 64 << 10);
        assert!(c.stats().entries > 10);
    }

    #[test]
    fn warming_with_room_never_evicts_and_remove_frees() {
        let c = BlockCache::new(64 << 10);
        let mut room = 0;
        let mut kept = 0;
        for i in 0..200 {
            match c.warm(1, i, block(1000), Some(&mut room)) {
                Warmed::Inserted => kept += 1,
                Warmed::Full => break,
                Warmed::Busy => panic!("no other thread holds a shard"),
            }
        }
        let s = c.stats();
        assert!(kept > 10 && kept < 200, "{kept}");
        assert_eq!(s.entries as u64, kept, "no block already in was pushed out");
        assert!(s.usage_bytes <= 64 << 10);
        assert_eq!(c.warm(2, 0, block(1000), Some(&mut 0)), Warmed::Full);
        for i in 0..kept {
            assert!(c.get(1, i).is_some());
            c.remove(1, i);
            assert!(c.get(1, i).is_none());
        }
        assert_eq!(c.usage_bytes(), 0);
        assert_eq!(c.warm(2, 0, block(1000), Some(&mut 0)), Warmed::Inserted);
        assert_eq!(BlockCache::new(0).warm(1, 0, block(10), Some(&mut 0)), Warmed::Full);
        assert_eq!(BlockCache::new(0).warm(1, 0, block(10), None), Warmed::Full);
    }

    #[test]
    fn warming_without_room_evicts_to_the_budget() {
        let c = BlockCache::new(64 << 10);
        for i in 0..200 {
            assert_eq!(c.warm(1, i, block(1000), None), Warmed::Inserted);
        }
        assert!(c.usage_bytes() <= 64 << 10);
        assert!(c.get(1, 199).is_some(), "the newest block is kept");
    }

    #[test]
    fn warming_a_full_cache_asks_it_for_room() {
        let c = BlockCache::new(64 << 10);
        // Another writer filled the cache.
        for i in 0..200 {
            c.insert(9, i, block(1000));
        }
        let mut room = 0;
        let mut kept = 0;
        while c.warm(1, kept, block(1000), Some(&mut room)) == Warmed::Inserted {
            kept += 1;
        }
        assert!(kept < 5, "{kept} blocks warmed into a full cache");
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let c = BlockCache::new(0);
        c.insert(1, 0, block(10));
        assert!(c.get(1, 0).is_none());
        assert_eq!(c.usage_bytes(), 0);
        assert_eq!(c.stats().misses, 1);
    }
}
