//! The shared block cache: decoded (decompressed, checksum-verified) SSTable data blocks under
//! one byte budget, evicted by CLOCK.
//!
//! Each open table holds its cached blocks itself ([`TableBlocks`]): one slot per data block,
//! addressed by the block's number (its entry in the table's index, which a read has just found).
//! A hit is one load from the table's slot array and one reference count, on the block itself;
//! nothing is hashed, no lock is taken, and no line that other readers write is touched. A
//! hashed cache (`quick_cache`, before) cost a shard lock, a hash-table probe, a slab entry and
//! the reference count: four or five dependent cache misses per lookup, a quarter of the time of
//! an in-memory range scan, which looks up several blocks.
//!
//! The [`BlockCache`] keeps the budget: bytes charged, the list of tables for the CLOCK hand,
//! and the blocks written by flushes and compactions for tables not opened yet. A slot is
//! empty, cold or hot; a hit makes it hot, and the hand, sweeping table after table while the
//! cache is over budget, makes hot slots cold and empties cold ones. New blocks enter cold, so
//! a scan that touches each block once does not push out blocks that are read again.
//!
//! A table's blocks leave the cache when the table is closed or deleted: [`TableBlocks`] gives
//! their bytes back to the budget when it is dropped or [`TableBlocks::clear`]ed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwapOption;
use parking_lot::Mutex;

use crate::block::Block;

/// Bytes charged per cached block on top of its length (its slot, `Arc` and bookkeeping).
pub const BLOCK_OVERHEAD: u64 = 64;

/// The bytes a cached block is charged.
fn weight(block: &Block) -> u64 {
    block.len() as u64 + BLOCK_OVERHEAD
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

/// What [`BlockCache::warm`] did with a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmed {
    /// The block is cached.
    Inserted,
    /// The cache has no room for it without evicting (only when room was asked for), or caches
    /// nothing.
    Full,
}

/// A byte-budgeted cache of decoded blocks, shared by every open table of a database.
pub struct BlockCache {
    capacity: u64,
    usage: AtomicU64,
    entries: AtomicUsize,
    /// Hit and miss counts, striped by thread: every lookup counts, and threads reading at
    /// once would otherwise contend for one cache line.
    counts: [Counts; STRIPES],
    /// The tables the CLOCK hand sweeps, and where it stands.
    clock: Mutex<Clock>,
    /// Blocks of tables written but not opened yet, by table id then block number (see
    /// [`BlockCache::warm`]); charged like cached blocks.
    pending: Mutex<HashMap<u64, Vec<Option<Arc<Block>>>>>,
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
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

#[derive(Default)]
struct Clock {
    tables: Vec<Weak<TableBlocks>>,
    /// The hand: a table of `tables`, and a slot of it.
    table: usize,
    slot: usize,
}

/// Slot states.
const EMPTY: u8 = 0;
const COLD: u8 = 1;
const HOT: u8 = 2;

/// Bytes [`BlockCache::warm`] inserts on one reading of the cache's free room.
const ROOM_RECHECK: u64 = 4 << 20;

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache").field("stats", &self.stats()).finish()
    }
}

impl BlockCache {
    /// A cache holding up to `capacity_bytes` of blocks (0 caches nothing).
    pub fn new(capacity_bytes: usize) -> Self {
        BlockCache {
            capacity: capacity_bytes as u64,
            usage: AtomicU64::new(0),
            entries: AtomicUsize::new(0),
            counts: Default::default(),
            clock: Mutex::new(Clock::default()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The slots of an opened table of `blocks` data blocks, taking over the blocks written for
    /// it by [`BlockCache::warm`].
    pub fn open_table(self: &Arc<Self>, table_id: u64, blocks: usize) -> Arc<TableBlocks> {
        let blocks = if self.capacity == 0 { 0 } else { blocks };
        let t = Arc::new(TableBlocks {
            cache: self.clone(),
            blocks: (0..blocks).map(|_| ArcSwapOption::empty()).collect(),
            state: (0..blocks).map(|_| AtomicU8::new(EMPTY)).collect(),
        });
        if let Some(warm) = self.pending.lock().remove(&table_id) {
            for (i, b) in warm.into_iter().enumerate() {
                let Some(b) = b else { continue };
                match t.blocks.get(i) {
                    // Already charged while pending.
                    Some(slot) => {
                        slot.store(Some(b));
                        t.state[i].store(COLD, Ordering::Relaxed);
                    }
                    None => self.uncharge(weight(&b)),
                }
            }
        }
        if blocks > 0 {
            let mut clock = self.clock.lock();
            clock.tables.retain(|w| w.strong_count() > 0);
            clock.tables.push(Arc::downgrade(&t));
            clock.table = clock.table.min(clock.tables.len() - 1);
        }
        t
    }

    /// Keeps a block a flush or compaction has just written as block `index` of table
    /// `table_id`, for when the table is opened ([`BlockCache::open_table`]). With `room`, only
    /// if that evicts nothing: `room` is the caller's running estimate of the bytes the cache
    /// has free (start it at 0), refreshed from the cache when it runs short, so that a writer
    /// warming the cache with fresh blocks does not push out blocks readers use.
    pub fn warm(&self, table_id: u64, index: usize, block: Arc<Block>, room: Option<&mut u64>) -> Warmed {
        let w = weight(&block);
        if self.capacity == 0 || w > self.capacity {
            return Warmed::Full;
        }
        if let Some(room) = room {
            if *room < w {
                // Asked again every few MiB, since other threads fill the cache meanwhile.
                *room = self.capacity.saturating_sub(self.usage_bytes()).min(ROOM_RECHECK);
                if *room < w {
                    return Warmed::Full;
                }
            }
            *room -= w;
        }
        let old = {
            let mut pending = self.pending.lock();
            let blocks = pending.entry(table_id).or_default();
            if blocks.len() <= index {
                blocks.resize(index + 1, None);
            }
            blocks[index].replace(block)
        };
        self.charge(w);
        if let Some(old) = old {
            self.uncharge(weight(&old));
        }
        self.evict_over_budget();
        Warmed::Inserted
    }

    /// Drops the blocks kept for table `table_id` by [`BlockCache::warm`] (its file is being
    /// deleted, or was never installed).
    pub fn forget_pending(&self, table_id: u64) {
        let blocks = self.pending.lock().remove(&table_id);
        for b in blocks.into_iter().flatten().flatten() {
            self.uncharge(weight(&b));
        }
    }

    fn charge(&self, w: u64) {
        self.usage.fetch_add(w, Ordering::Relaxed);
        self.entries.fetch_add(1, Ordering::Relaxed);
    }

    fn uncharge(&self, w: u64) {
        self.usage.fetch_sub(w, Ordering::Relaxed);
        self.entries.fetch_sub(1, Ordering::Relaxed);
    }

    fn count(&self, hit: bool) {
        let c = &self.counts[stripe()];
        let counter = if hit { &c.hits } else { &c.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Evicts while the cache is over budget. One thread sweeps at a time; a thread that
    /// finds the hand taken goes on, and the sweeping thread looks at the budget again after it
    /// lets the hand go, so a block charged meanwhile is paid for.
    fn evict_over_budget(&self) {
        // Bounded: blocks of a table being dropped are charged until its drop gives them back,
        // and no sweep can reach them meanwhile.
        for _ in 0..4 {
            // Orders this thread's charge before its look at the hand, and the sweeping
            // thread's release of the hand before its look at the budget.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.usage_bytes() <= self.capacity {
                return;
            }
            let Some(mut clock) = self.clock.try_lock() else { return };
            if !self.sweep_until_within_budget(&mut clock) {
                drop(clock);
                // Nothing left to evict in open tables: the blocks waiting for unopened ones go.
                let pending = std::mem::take(&mut *self.pending.lock());
                for b in pending.into_values().flatten().flatten() {
                    self.uncharge(weight(&b));
                }
            }
        }
    }

    /// Moves the hand until the cache is within budget; `false` if two turns over every open
    /// table did not get it there (every cold slot emptied, then every slot the first turn
    /// made cold).
    fn sweep_until_within_budget(&self, clock: &mut Clock) -> bool {
        let mut turns = 0;
        while self.usage_bytes() > self.capacity {
            if clock.tables.is_empty() || turns >= 2 {
                return false;
            }
            if clock.table >= clock.tables.len() {
                clock.table = 0;
                turns += 1;
                continue;
            }
            let Some(t) = clock.tables[clock.table].upgrade() else {
                let at = clock.table;
                clock.tables.swap_remove(at);
                clock.slot = 0;
                continue;
            };
            let end = t.sweep(clock.slot, self);
            if end >= t.blocks.len() {
                clock.table += 1;
                clock.slot = 0;
            } else {
                clock.slot = end;
            }
        }
        true
    }

    /// Bytes currently charged to cached blocks.
    pub fn usage_bytes(&self) -> u64 {
        self.usage.load(Ordering::Relaxed)
    }

    /// The byte budget.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity
    }

    /// Hit and miss counters and current usage.
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.counts.iter().map(|c| c.hits.load(Ordering::Relaxed)).sum(),
            misses: self.counts.iter().map(|c| c.misses.load(Ordering::Relaxed)).sum(),
            usage_bytes: self.usage_bytes(),
            capacity_bytes: self.capacity,
            entries: self.entries.load(Ordering::Relaxed),
        }
    }
}

/// The cached data blocks of one open table, by block number, charged to its [`BlockCache`].
/// A block's slot holds it as an [`ArcSwapOption`]: readers load it without a lock, and the
/// CLOCK hand of another thread can empty it meanwhile (a reader then holds the block until it
/// is done with it, as with any cache).
pub struct TableBlocks {
    cache: Arc<BlockCache>,
    blocks: Box<[ArcSwapOption<Block>]>,
    state: Box<[AtomicU8]>,
}

impl std::fmt::Debug for TableBlocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableBlocks").field("slots", &self.blocks.len()).finish_non_exhaustive()
    }
}

/// Slots the hand looks at per step before it re-checks the budget.
const SWEEP_STEP: usize = 64;

impl TableBlocks {
    /// The cached block number `i`, counting a hit or a miss.
    pub fn get(&self, i: usize) -> Option<Arc<Block>> {
        let found = self.peek(i);
        self.cache.count(found.is_some());
        found
    }

    /// The cached block number `i`, without counting a hit or a miss: a scan looking one block
    /// ahead, which counts the hit with [`TableBlocks::count_hit`] if it then uses the block.
    pub fn peek(&self, i: usize) -> Option<Arc<Block>> {
        let b = self.blocks.get(i)?.load_full()?;
        let s = &self.state[i];
        // Written only when it changes: a hot block's readers leave its line alone.
        if s.load(Ordering::Relaxed) != HOT {
            s.store(HOT, Ordering::Relaxed);
        }
        Some(b)
    }

    /// Counts a hit for a block taken with [`TableBlocks::peek`].
    pub fn count_hit(&self) {
        self.cache.count(true);
    }

    /// Caches `block` as block number `i` (blocks larger than the whole budget are not kept).
    pub fn insert(&self, i: usize, block: Arc<Block>) {
        let Some(slot) = self.blocks.get(i) else { return };
        let w = weight(&block);
        if w > self.cache.capacity {
            return;
        }
        let old = slot.swap(Some(block));
        self.cache.charge(w);
        if let Some(old) = old {
            self.cache.uncharge(weight(&old));
        }
        // New blocks enter cold: a block read once leaves before blocks read again.
        self.state[i].store(COLD, Ordering::Relaxed);
        self.cache.evict_over_budget();
    }

    /// Drops every cached block of the table (its file is being deleted).
    pub fn clear(&self) {
        for (slot, state) in self.blocks.iter().zip(self.state.iter()) {
            state.store(EMPTY, Ordering::Relaxed);
            if let Some(b) = slot.swap(None) {
                self.cache.uncharge(weight(&b));
            }
        }
    }

    /// Moves the CLOCK hand over slots `from..` until the cache is within budget or
    /// [`SWEEP_STEP`] slots were seen; returns where it stopped.
    fn sweep(&self, from: usize, cache: &BlockCache) -> usize {
        let end = (from + SWEEP_STEP).min(self.blocks.len());
        for i in from..end {
            let s = &self.state[i];
            match s.load(Ordering::Relaxed) {
                EMPTY => {}
                HOT => s.store(COLD, Ordering::Relaxed),
                _ => {
                    if s.compare_exchange(COLD, EMPTY, Ordering::Relaxed, Ordering::Relaxed).is_ok()
                        && let Some(b) = self.blocks[i].swap(None)
                    {
                        cache.uncharge(weight(&b));
                        if cache.usage_bytes() <= cache.capacity {
                            return i + 1;
                        }
                    }
                }
            }
        }
        end
    }
}

impl Drop for TableBlocks {
    fn drop(&mut self) {
        self.clear();
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
        let c = Arc::new(BlockCache::new(1 << 20));
        let t = c.open_table(1, 10);
        assert!(t.get(0).is_none());
        let b = block(1000);
        let w = weight(&b);
        t.insert(0, b.clone());
        assert!(Arc::ptr_eq(&t.get(0).unwrap(), &b));
        assert!(t.get(1).is_none());
        assert!(t.get(10).is_none(), "out of range is a miss");
        let s = c.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 3, 1));
        assert_eq!(s.usage_bytes, w);
        t.insert(0, block(2000));
        assert_eq!(c.stats().entries, 1, "a replaced block is uncharged");
        assert_eq!(c.usage_bytes(), weight(&block(2000)));
        drop(t);
        assert_eq!((c.usage_bytes(), c.stats().entries), (0, 0), "a closed table gives its blocks back");
    }

    #[test]
    fn budget_is_respected_and_hot_blocks_stay() {
        let c = Arc::new(BlockCache::new(64 << 10));
        let t = c.open_table(1, 1000);
        t.insert(0, block(1000));
        for i in 1..1000 {
            t.insert(i, block(1000));
            // Block 0 is read between every two inserts.
            assert!(t.get(0).is_some(), "hot block evicted at insert {i}");
            assert!(c.usage_bytes() <= 64 << 10);
        }
        assert!(c.stats().entries > 10);
        assert!(t.get(999).is_some(), "the newest block is kept");
    }

    #[test]
    fn eviction_sweeps_across_tables_and_skips_closed_ones() {
        let c = Arc::new(BlockCache::new(64 << 10));
        let a = c.open_table(1, 100);
        let b = c.open_table(2, 100);
        let gone = c.open_table(3, 100);
        drop(gone);
        for i in 0..100 {
            a.insert(i, block(1000));
            b.insert(i, block(1000));
            assert!(c.usage_bytes() <= 64 << 10);
        }
        let cached = |t: &TableBlocks| (0..100).filter(|&i| t.peek(i).is_some()).count();
        assert!(cached(&a) > 0 && cached(&b) > 0);
        assert_eq!(cached(&a) + cached(&b), c.stats().entries);
        a.clear();
        assert_eq!(cached(&a), 0);
        assert_eq!(c.stats().entries, cached(&b));
    }

    #[test]
    fn warmed_blocks_wait_for_their_table_and_respect_room() {
        let c = Arc::new(BlockCache::new(64 << 10));
        let mut room = 0;
        let mut kept = 0;
        for i in 0..200 {
            match c.warm(7, i, block(1000), Some(&mut room)) {
                Warmed::Inserted => kept += 1,
                Warmed::Full => break,
            }
        }
        assert!(kept > 10 && kept < 200, "{kept}");
        assert!(c.usage_bytes() <= 64 << 10);
        assert_eq!(c.warm(8, 0, block(1000), Some(&mut 0)), Warmed::Full);
        let t = c.open_table(7, 200);
        for i in 0..kept {
            assert!(t.get(i).is_some(), "warmed block {i}");
        }
        assert!(t.get(kept).is_none());
        assert_eq!(c.stats().entries, kept);
        // Warmed blocks of a table never opened are dropped on request.
        assert_eq!(c.warm(9, 0, block(10), None), Warmed::Inserted);
        drop(t);
        c.forget_pending(9);
        assert_eq!((c.usage_bytes(), c.stats().entries), (0, 0));
        assert_eq!(Arc::new(BlockCache::new(0)).warm(1, 0, block(10), None), Warmed::Full);
    }

    #[test]
    fn warming_without_room_evicts_older_blocks() {
        let c = Arc::new(BlockCache::new(64 << 10));
        let t = c.open_table(1, 200);
        for i in 0..200 {
            t.insert(i, block(1000));
        }
        for i in 0..100 {
            assert_eq!(c.warm(2, i, block(1000), None), Warmed::Inserted);
            assert!(c.usage_bytes() <= 64 << 10);
        }
        let fresh = c.open_table(2, 100);
        assert!(fresh.get(99).is_some(), "the newest warmed block is kept");
    }

    #[test]
    fn zero_capacity_caches_nothing() {
        let c = Arc::new(BlockCache::new(0));
        let t = c.open_table(1, 10);
        t.insert(0, block(10));
        assert!(t.get(0).is_none());
        assert_eq!(c.usage_bytes(), 0);
        assert_eq!(c.stats().misses, 1);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;

        #[derive(Clone, Debug)]
        enum Op {
            Insert { table: usize, slot: usize, size: usize },
            Get { table: usize, slot: usize },
            Warm { table: usize, slot: usize, size: usize, room: bool },
            Clear { table: usize },
            Reopen { table: usize },
        }

        fn op() -> impl Strategy<Value = Op> {
            let (t, s, n) = (0..3usize, 0..40usize, 1..3000usize);
            prop_oneof![
                4 => (t.clone(), s.clone(), n.clone()).prop_map(|(table, slot, size)| Op::Insert { table, slot, size }),
                4 => (t.clone(), s.clone()).prop_map(|(table, slot)| Op::Get { table, slot }),
                2 => (t.clone(), s, n, any::<bool>()).prop_map(|(table, slot, size, room)| Op::Warm { table, slot, size, room }),
                1 => t.clone().prop_map(|table| Op::Clear { table }),
                1 => t.prop_map(|table| Op::Reopen { table }),
            ]
        }

        proptest! {
            /// Whatever happens, a hit returns the block last put in that slot, the cache never
            /// stays over budget, and its books match what it holds.
            #[test]
            fn cache_matches_a_model(ops in proptest::collection::vec(op(), 1..200)) {
                let c = Arc::new(BlockCache::new(24 << 10));
                let mut tables: Vec<Option<Arc<TableBlocks>>> = (0..3).map(|t| Some(c.open_table(t as u64, 40))).collect();
                // What each slot last got (by block length), and the table ids reopened.
                let mut put: Vec<Vec<Option<usize>>> = vec![vec![None; 40]; 3];
                let mut ids = [0u64, 1, 2];
                let mut room = 0;
                for op in ops {
                    match op {
                        Op::Insert { table, slot, size } => {
                            let b = block(size);
                            if let Some(t) = &tables[table] {
                                put[table][slot] = Some(b.len());
                                t.insert(slot, b);
                            }
                        }
                        Op::Get { table, slot } => {
                            if let Some(got) = tables[table].as_ref().and_then(|t| t.get(slot)) {
                                prop_assert_eq!(Some(got.len()), put[table][slot]);
                            }
                        }
                        Op::Warm { table, slot, size, room: with_room } => {
                            // Warm the table's next incarnation; it takes the blocks on reopen.
                            let b = block(size);
                            let len = b.len();
                            let r = if with_room { Some(&mut room) } else { None };
                            if c.warm(ids[table] + 3, slot, b, r) == Warmed::Inserted {
                                prop_assert!(len > 0);
                            }
                        }
                        Op::Clear { table } => {
                            if let Some(t) = &tables[table] {
                                t.clear();
                            }
                        }
                        Op::Reopen { table } => {
                            tables[table] = None;
                            ids[table] += 3;
                            tables[table] = Some(c.open_table(ids[table], 40));
                            // Its slots now hold whatever was warmed for it, if still pending.
                            for (slot, p) in put[table].iter_mut().enumerate() {
                                *p = tables[table].as_ref().and_then(|t| t.peek(slot)).map(|b| b.len());
                            }
                        }
                    }
                    prop_assert!(c.usage_bytes() <= c.capacity_bytes(), "over budget: {}", c.usage_bytes());
                    let held: Vec<Arc<Block>> =
                        tables.iter().flatten().flat_map(|t| (0..40).filter_map(|i| t.peek(i))).collect();
                    let pending: Vec<Arc<Block>> =
                        c.pending.lock().values().flatten().flatten().cloned().collect();
                    let books: u64 = held.iter().chain(&pending).map(|b| weight(b)).sum();
                    prop_assert_eq!(c.usage_bytes(), books);
                    prop_assert_eq!(c.stats().entries, held.len() + pending.len());
                }
                drop(tables);
                c.forget_pending(3);
                let left: usize = c.pending.lock().values().flatten().flatten().count();
                prop_assert_eq!(c.stats().entries, left);
            }
        }
    }

    #[test]
    fn concurrent_readers_inserters_and_evictions_keep_the_books() {
        let c = Arc::new(BlockCache::new(256 << 10));
        let tables: Vec<_> = (0..4).map(|id| c.open_table(id, 256)).collect();
        std::thread::scope(|s| {
            for t in 0..4 {
                let tables = &tables;
                s.spawn(move || {
                    let mut x = t as u64 + 1;
                    for _ in 0..20_000 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let (table, i) = ((x % 4) as usize, ((x >> 8) % 256) as usize);
                        match tables[table].get(i) {
                            Some(b) => assert_eq!(b.len(), block(500).len()),
                            None => tables[table].insert(i, block(500)),
                        }
                    }
                });
            }
        });
        let cached: usize = tables.iter().map(|t| (0..256).filter(|&i| t.peek(i).is_some()).count()).sum();
        assert_eq!(c.stats().entries, cached);
        assert_eq!(c.usage_bytes(), cached as u64 * weight(&block(500)));
        assert!(c.usage_bytes() <= 256 << 10);
        drop(tables);
        assert_eq!((c.usage_bytes(), c.stats().entries), (0, 0));
    }
}
