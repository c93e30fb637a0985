//! Tuning knobs of the engine.

/// Block compression of SSTable data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4 (fast; the default).
    #[default]
    Lz4,
    /// Zstandard at the given level (1..=22).
    Zstd(i32),
}

/// Options for [`crate::Db::open`]. `Options::default()` suits a general-purpose workload.
#[derive(Clone, Debug)]
pub struct Options {
    /// Create the database directory if it does not exist (default `true`).
    pub create_if_missing: bool,
    /// Fail if the database already exists (default `false`).
    pub error_if_exists: bool,
    /// Bytes a memtable may hold before it is frozen and flushed (default 64 MiB).
    pub memtable_size: usize,
    /// Frozen memtables that may wait for flush before writers stall (default 2).
    pub max_immutable_memtables: usize,
    /// Target uncompressed size of an SSTable data block (default 4 KiB).
    pub block_size: usize,
    /// Keys between restart points in a data block (default 4: point lookups scan fewer
    /// entries; raise it for small values, where prefix compression saves more).
    pub block_restart_interval: usize,
    /// Filter bits per key, a budget: a table gets a binary fuse filter (1/256 false
    /// positives) where that fits the budget with fewer false positives than a bloom filter of
    /// it, a bloom filter otherwise ([`crate::table::filter`]); 0 disables filters (default 10).
    pub bloom_bits_per_key: u32,
    /// Data block compression (default LZ4).
    pub compression: Compression,
    /// Byte budget of the shared block cache (default 64 MiB): decoded data blocks, each
    /// charged its length plus 64 bytes. Besides the budget, every open table keeps 9 bytes per
    /// data block for its cache slots (about 2.3 MiB per GiB of 4 KiB blocks).
    pub block_cache_bytes: usize,
    /// Put the data blocks of newly written tables in the block cache as they are written
    /// (default true): those of flushed memtables always, and those of compaction output while
    /// they fit without evicting anything. Without it, the first read of every block of a new
    /// table goes to the file, even when the whole database fits in the cache.
    pub prepopulate_block_cache: bool,
    /// After a compaction is installed, read into the block cache the blocks it wrote that
    /// hold entries it read from blocks the cache held as hot (in its main part, or read again
    /// on probation), as its inputs' blocks leave the cache (default true). Without it, a
    /// compaction through a database larger than the cache costs readers a miss per hot block
    /// it rewrote.
    pub rewarm_hot_blocks: bool,
    /// How many SSTables may be held open at once (default 1000).
    pub max_open_files: usize,
    /// Size at which compaction output is cut into a new SSTable (default 64 MiB).
    pub target_file_size: u64,
    /// Level-0 weight that triggers an L0 to L1 compaction (default 4). The three level-0
    /// triggers weigh level 0 by its table count, or by its bytes in memtables' worth
    /// (`memtable_size` each) when that is more: intra-level-0 merges lower the count but not
    /// the bytes still to be merged down, so level 0 is held to what that many flushes make.
    pub level0_compaction_trigger: usize,
    /// Level-0 weight at which writes are slowed to `delayed_write_rate` (default 20).
    pub level0_slowdown_trigger: usize,
    /// Level-0 weight at which writes wait for compaction (default 36).
    pub level0_stop_trigger: usize,
    /// Bytes per second writers are held to once level 0 reaches `level0_slowdown_trigger`
    /// (default 16 MiB/s, as RocksDB's). The rate falls in proportion as level 0 nears
    /// `level0_stop_trigger`: one table short of it, writes get 1/(stop - slowdown) of it.
    /// While level 0 merges into a lower level, writes are held no slower than the rate that
    /// still leaves level 0 under the stop trigger until that merge ends (at its speed so
    /// far) and under the slowdown trigger once it has: a level 0 about to be freed of the
    /// tables being merged does not slow them for nothing. Each write owes its bytes' time at
    /// the rate, less the time that passed since the previous one, so writers already no
    /// faster than the rate are not held back; they sleep in steps of a millisecond or more.
    pub delayed_write_rate: u64,
    /// Target size of level 1, or with `dynamic_level_bytes` the most the base level (the
    /// level that level 0 compacts into) may hold (default 256 MiB).
    pub max_bytes_for_level_base: u64,
    /// Each level below L1 may hold this many times the level above (default 10).
    pub level_size_multiplier: u64,
    /// Level targets derived from the bottom level up, as RocksDB's
    /// `level_compaction_dynamic_level_bytes` (default true): the last level holds what it
    /// holds, each level above it `1 / level_size_multiplier` of the one below, and level 0
    /// compacts into the highest level whose share is at most `max_bytes_for_level_base`,
    /// with the levels above it left empty. A small database is one merge from the bottom,
    /// and a large one is no deeper than its size needs. False: level 1 holds
    /// `max_bytes_for_level_base`, each level below `level_size_multiplier` times more, and
    /// level 0 compacts into level 1.
    pub dynamic_level_bytes: bool,
    /// Number of levels, L0 included (default 7).
    pub num_levels: usize,
    /// Background threads for compaction; one more thread flushes memtables (default 2).
    pub compaction_threads: usize,
    /// A compaction over several next-level tables is split into up to this many key ranges
    /// (each with a quarter of `target_file_size` or more of input), merged in parallel on
    /// threads of their own (default 2; 1 merges every compaction on its compaction thread).
    /// Level-0 compactions, which hold back all others into level 1, finish sooner this way.
    /// A level-0 compaction into an empty level (four `target_file_size`s of input or more) is
    /// split at the block bounds of its largest table instead.
    pub max_subcompactions: usize,
    /// Scheduling niceness added, on Linux, to compactions out of level 1 and below (and the
    /// sub-compaction threads they start); default 10, 0 runs them at the process's priority,
    /// ignored elsewhere. When clients keep every core busy, such a compaction then takes the
    /// CPU they leave idle instead of an equal share of it: reads and writes keep their
    /// latency while a backlog of compaction work is being paid off. Compactions out of level
    /// 0 and flushes keep the process's priority, since writers are slowed and then stopped
    /// by the number of level-0 tables and the frozen memtables, so they wait for those. (RocksDB
    /// offers the lower priority for its whole compaction pool, as
    /// `Env::LowerThreadPoolCPUPriority`.)
    pub compaction_nice: i32,
    /// While synced writes happen, compactions write at a rate paced by those writes' sync
    /// latency and write their output back to the device as they go, instead of at full
    /// speed and in one burst per table (default true). On a disk with a write cache every
    /// sync also flushes what compactions wrote since the last one; pacing keeps a synced
    /// write from waiting for compaction bytes. Compactions out of level 0 are not paced once
    /// level 0 weighs `level0_slowdown_trigger`; flushes are not paced while
    /// `max_immutable_memtables` memtables wait for flush. Without synced writes it changes
    /// nothing. (RocksDB's nearest is its opt-in `rate_limiter` with `auto_tuned`, which
    /// follows pending compaction work rather than the latency of syncs.)
    pub sync_pacing: bool,
    /// While foreground reads miss the block cache and wait for the device (50 µs or more),
    /// compactions write at a rate paced by those reads' latency, as `sync_pacing` paces them
    /// by syncs', with the same exemptions (default true): a compaction reading and writing
    /// at full speed fills the device's queue, and every read from the device waits behind
    /// it. The debt is still paid, at 4 MiB/s or more. Reads served by the block cache change
    /// nothing, nor do those served by the OS page cache unless a busy CPU delays them 50 µs.
    pub read_pacing: bool,
    /// A clean close flushes the memtables when they hold at least this many bytes (default
    /// 1 MiB; 0 never flushes at close). The next open then has no log to replay, which is what
    /// short-lived processes (a CLI command after one that wrote a lot) pay for otherwise.
    /// Less than this stays in the write-ahead log, replayed at the next open.
    pub flush_on_close_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            memtable_size: 64 << 20,
            max_immutable_memtables: 2,
            block_size: 4096,
            block_restart_interval: 4,
            bloom_bits_per_key: 10,
            compression: Compression::Lz4,
            block_cache_bytes: 64 << 20,
            prepopulate_block_cache: true,
            rewarm_hot_blocks: true,
            max_open_files: 1000,
            target_file_size: 64 << 20,
            level0_compaction_trigger: 4,
            level0_slowdown_trigger: 20,
            level0_stop_trigger: 36,
            delayed_write_rate: 16 << 20,
            max_bytes_for_level_base: 256 << 20,
            level_size_multiplier: 10,
            dynamic_level_bytes: true,
            num_levels: 7,
            compaction_threads: 2,
            max_subcompactions: 2,
            compaction_nice: 10,
            sync_pacing: true,
            read_pacing: true,
            flush_on_close_bytes: 1 << 20,
        }
    }
}

impl Options {
    /// Options with small sizes, so tests exercise flushes and compactions on little data.
    pub fn small_for_tests() -> Self {
        Options {
            memtable_size: 64 << 10,
            block_size: 1024,
            block_cache_bytes: 1 << 20,
            max_open_files: 50,
            target_file_size: 64 << 10,
            level0_compaction_trigger: 2,
            level0_slowdown_trigger: 8,
            level0_stop_trigger: 12,
            max_bytes_for_level_base: 256 << 10,
            level_size_multiplier: 4,
            ..Options::default()
        }
    }
}

/// Options for building one SSTable, derived from [`Options`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableOptions {
    /// Target uncompressed data block size.
    pub block_size: usize,
    /// Keys between restart points.
    pub restart_interval: usize,
    /// Filter bits per key, a budget (0 = no filter; see [`Options::bloom_bits_per_key`]).
    pub bloom_bits_per_key: u32,
    /// Data block compression.
    pub compression: Compression,
}

impl From<&Options> for TableOptions {
    fn from(o: &Options) -> Self {
        TableOptions {
            block_size: o.block_size,
            restart_interval: o.block_restart_interval,
            bloom_bits_per_key: o.bloom_bits_per_key,
            compression: o.compression,
        }
    }
}
