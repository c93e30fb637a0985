//! cairn-kv, configured from the shared settings.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use cairn_kv::{Compression, Db, Options, WriteBatch, WriteOptions};

use crate::engine::{CompressionArg, Durability, Engine, Settings};

/// cairn-kv behind the [`Engine`] trait.
pub struct CairnEngine {
    db: Db,
    sync: AtomicBool,
    settings: String,
}

impl CairnEngine {
    /// Opens a new database at `dir`.
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let compression = match s.compression {
            CompressionArg::None => Compression::None,
            CompressionArg::Lz4 => Compression::Lz4,
            CompressionArg::Zstd => Compression::Zstd(3),
        };
        let opts = Options {
            memtable_size: s.memtable_bytes() as usize,
            block_size: s.block_size as usize,
            bloom_bits_per_key: s.bloom_bits,
            compression,
            block_cache_bytes: s.cache_bytes() as usize,
            compaction_threads: s.bg_threads.max(1) as usize,
            // For experiments: CAIRN_BENCH_COMPACTION_NICE overrides the compaction threads'
            // niceness (printed with the settings).
            compaction_nice: std::env::var("CAIRN_BENCH_COMPACTION_NICE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(Options::default().compaction_nice),
            // For experiments: CAIRN_BENCH_SYNC_PACING=0 turns pacing off (printed too).
            sync_pacing: std::env::var("CAIRN_BENCH_SYNC_PACING").as_deref() != Ok("0"),
            // Same: CAIRN_BENCH_READ_PACING=0 turns pacing by device reads off.
            read_pacing: std::env::var("CAIRN_BENCH_READ_PACING").as_deref() != Ok("0"),
            // Same: CAIRN_BENCH_REWARM=0 turns off reading hot blocks back after compactions.
            rewarm_hot_blocks: std::env::var("CAIRN_BENCH_REWARM").as_deref() != Ok("0"),
            ..Options::default()
        };
        let settings = format!(
            "memtable {} MiB (+ up to {} frozen), block {} B, filter {} bits/key (binary fuse, 1/256 false positives, where it fits; bloom otherwise), compression {:?}, block cache {} MiB, \
             {} compaction threads (each may merge a compaction as up to {} key ranges, one per extra thread; compactions out of levels 1+ at nice +{}, out of level 0 at normal priority) + 1 flush thread, \
             compactions paced by sync latency while synced writes happen: {}, \
             and by the latency of reads from the device while they happen: {}, \
             hot blocks read back into the cache after compactions: {}, \
             durability {} (WAL fsync per write, group-committed across writers)",
            s.memtable_mb,
            opts.max_immutable_memtables,
            opts.block_size,
            opts.bloom_bits_per_key,
            opts.compression,
            s.cache_mb,
            opts.compaction_threads,
            opts.max_subcompactions,
            opts.compaction_nice,
            if opts.sync_pacing { "yes" } else { "no" },
            if opts.read_pacing { "yes" } else { "no" },
            if opts.rewarm_hot_blocks { "yes" } else { "no" },
            s.durability.as_str(),
        );
        let settings = if s.durability == Durability::Nosync {
            settings.replace(
                "WAL fsync per write, group-committed across writers",
                "WAL written to the OS per write, no fsync",
            )
        } else {
            settings
        };
        let db = Db::open(dir, opts)?;
        if std::env::var("CAIRN_BENCH_DEBUG").as_deref() == Ok("2") {
            let db = db.clone();
            std::thread::spawn(move || {
                let t0 = std::time::Instant::now();
                // A pacing controller's rate and smoothed / idle latency, or "-" while it is off.
                let pace = |p: Option<cairn_kv::PaceStats>, by: &str| {
                    p.map_or("-".to_string(), |p| {
                        format!("{} MiB/s {by} {}/{} us", p.rate >> 20, p.smoothed_micros, p.idle_micros)
                    })
                };
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                    let s = db.stats();
                    eprintln!(
                        "MON {:.0}s l0 {} ({} MiB) stall {} ms slow {} ms intra {} comp {} flushes {} paced {} ms pace {} read pace {} levels {:?}",
                        t0.elapsed().as_secs_f64(),
                        s.levels[0].tables,
                        s.levels[0].bytes >> 20,
                        s.stall_micros / 1000,
                        s.stall_slowdown_micros / 1000,
                        s.intra_l0_compactions,
                        s.compactions,
                        s.flushes,
                        s.compaction_paced_micros / 1000,
                        pace(s.compaction_pacing, "sync"),
                        pace(s.compaction_read_pacing, "reads"),
                        s.levels.iter().skip(1).map(|l| l.bytes >> 20).collect::<Vec<_>>()
                    );
                }
            });
        }
        Ok(CairnEngine { db, sync: AtomicBool::new(false), settings })
    }
}

impl Engine for CairnEngine {
    fn name(&self) -> &'static str {
        "cairn"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::Relaxed);
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        Ok(self.db.get(key)?.is_some())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(key, value)?;
        self.db.write_opt(batch, WriteOptions { sync: self.sync.load(Ordering::Relaxed) })?;
        Ok(())
    }

    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = WriteBatch::new();
        for (key, value) in items {
            batch.put(key, value)?;
        }
        self.db.write_opt(batch, WriteOptions { sync: self.sync.load(Ordering::Relaxed) })?;
        Ok(())
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        // Keys and values borrowed in place, as the other engines' cursors give them.
        let mut count = 0;
        if n > 0 {
            self.db.range(start..).for_each_ref(|_k, v| {
                std::hint::black_box(v.len());
                count += 1;
                Ok::<bool, anyhow::Error>(count < n)
            })?;
        }
        Ok(count)
    }

    fn flush_and_close(self: Box<Self>) -> Result<()> {
        if std::env::var_os("CAIRN_BENCH_DEBUG").is_some() {
            let s = self.db.stats();
            eprintln!(
                "DEBUG slowdown {} ms stop {} ms intra-L0 {} cache hits {} misses {} ({:.1}% hit) usage {} MiB stall {} ms compactions {} paced {} ms hot blocks rewarmed {} levels {:?}",
                s.stall_slowdown_micros / 1000,
                s.stall_stop_micros / 1000,
                s.intra_l0_compactions,
                s.block_cache_hits,
                s.block_cache_misses,
                100.0 * s.block_cache_hits as f64 / (s.block_cache_hits + s.block_cache_misses).max(1) as f64,
                s.block_cache_bytes >> 20,
                s.stall_micros / 1000,
                s.compactions,
                s.compaction_paced_micros / 1000,
                s.hot_blocks_rewarmed,
                s.levels.iter().map(|l| (l.tables, l.bytes >> 20)).collect::<Vec<_>>()
            );
        }
        self.db.flush()?;
        self.db.close()?;
        Ok(())
    }
}
