//! Engine counters and the [`Stats`] snapshot returned by [`crate::Db::stats`].

use crate::db::inner::DbInner;
use std::sync::atomic::{AtomicU64, Ordering};

/// One level of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LevelStats {
    /// Tables in the level.
    pub tables: usize,
    /// Bytes of those tables.
    pub bytes: u64,
}

/// A snapshot of the engine's statistics.
#[derive(Clone, Debug)]
pub struct Stats {
    /// Tables and bytes per level, L0 first.
    pub levels: Vec<LevelStats>,
    /// Bytes in the active memtable.
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Range tombstones held by the version.
    pub range_tombstones: usize,
    /// Last visible sequence number.
    pub last_seq: u64,
    /// Key and value bytes written by users.
    pub user_bytes_written: u64,
    /// Bytes appended to the write-ahead log.
    pub wal_bytes_written: u64,
    /// Bytes of tables written by flushes, and how many flushes.
    pub flush_bytes_written: u64,
    /// Number of flushes (each writes one table from every frozen memtable waiting).
    pub flushes: u64,
    /// Bytes read and written by compactions, and how many compactions ran.
    pub compaction_bytes_read: u64,
    /// Bytes written by compactions.
    pub compaction_bytes_written: u64,
    /// Number of compactions.
    pub compactions: u64,
    /// Key ranges of compactions merged on threads of their own, in parallel with the rest
    /// of their compaction ([`crate::Options::max_subcompactions`]).
    pub subcompactions: u64,
    /// Compactions that merged level-0 tables into one level-0 table while level 0 could
    /// not compact into the level below (counted in `compactions` too).
    pub intra_l0_compactions: u64,
    /// Data blocks compactions read into the block cache on install because the entries in
    /// them came from blocks the cache held as hot ([`crate::Options::rewarm_hot_blocks`]).
    pub hot_blocks_rewarmed: u64,
    /// Time writers spent stalled, in microseconds: the two below, and waiting for a flush
    /// with `max_immutable_memtables` memtables full.
    pub stall_micros: u64,
    /// Of that, held to `delayed_write_rate` at `level0_slowdown_trigger`.
    pub stall_slowdown_micros: u64,
    /// Of that, stopped at `level0_stop_trigger`.
    pub stall_stop_micros: u64,
    /// Time compactions waited, in microseconds, so that synced writes and reads from the
    /// device do not wait for their bytes ([`crate::Options::sync_pacing`],
    /// [`crate::Options::read_pacing`]); parallel compactions add up.
    pub compaction_paced_micros: u64,
    /// How compactions are paced by the latency of synced writes' syncs; `None` while no
    /// synced writes happen (or that pacing is off).
    pub compaction_pacing: Option<crate::PaceStats>,
    /// How compactions are paced by the latency of reads from the device; `None` while no
    /// such reads happen (or that pacing is off).
    pub compaction_read_pacing: Option<crate::PaceStats>,
    /// Bytes held by the block cache.
    pub block_cache_bytes: u64,
    /// Block cache hits.
    pub block_cache_hits: u64,
    /// Block cache misses.
    pub block_cache_misses: u64,
    /// Live snapshots.
    pub snapshots: usize,
}

impl Stats {
    /// Bytes written to disk (log, flushes, compactions) per user byte written.
    pub fn write_amplification(&self) -> f64 {
        let disk = self.wal_bytes_written + self.flush_bytes_written + self.compaction_bytes_written;
        if self.user_bytes_written == 0 { 0.0 } else { disk as f64 / self.user_bytes_written as f64 }
    }

    /// Bytes of all tables.
    pub fn table_bytes(&self) -> u64 {
        self.levels.iter().map(|l| l.bytes).sum()
    }
}

pub(crate) fn collect(inner: &DbInner) -> Stats {
    let sv = inner.sv.load_full();
    let c = &inner.counters;
    let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let cache = inner.block_cache.stats();
    Stats {
        levels: sv
            .version
            .levels
            .iter()
            .map(|files| LevelStats { tables: files.len(), bytes: files.iter().map(|f| f.info.size).sum() })
            .collect(),
        memtable_bytes: sv.mem.approximate_bytes(),
        immutable_memtables: sv.imms.len(),
        range_tombstones: sv.version.tombstones.len(),
        last_seq: inner.visible_seq(),
        user_bytes_written: g(&c.user_bytes),
        wal_bytes_written: g(&c.wal_bytes),
        flush_bytes_written: g(&c.flush_bytes),
        flushes: g(&c.flushes),
        compaction_bytes_read: g(&c.compaction_read),
        compaction_bytes_written: g(&c.compaction_written),
        compactions: g(&c.compactions),
        subcompactions: g(&c.subcompactions),
        intra_l0_compactions: g(&c.intra_l0_compactions),
        hot_blocks_rewarmed: g(&c.hot_blocks_rewarmed),
        stall_micros: g(&c.stall_micros),
        stall_slowdown_micros: g(&c.stall_slowdown_micros),
        stall_stop_micros: g(&c.stall_stop_micros),
        compaction_paced_micros: inner.pacer.waited_micros(),
        compaction_pacing: inner.pacer.stats(),
        compaction_read_pacing: inner.pacer.read_stats(),
        block_cache_bytes: inner.block_cache.usage_bytes(),
        block_cache_hits: cache.hits,
        block_cache_misses: cache.misses,
        snapshots: inner.snapshots.list().len(),
    }
}
