//! RocksDB through the `rocksdb` crate (feature `rocksdb`, not default: it builds RocksDB's
//! C++ sources and needs libclang).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use rocksdb::{BlockBasedOptions, Cache, DB, DBCompressionType, Options, WriteOptions};

use crate::engine::{CompressionArg, Engine, Settings};

/// RocksDB behind the [`Engine`] trait.
pub struct RocksdbEngine {
    db: DB,
    sync: AtomicBool,
    settings: String,
}

impl RocksdbEngine {
    /// Opens a new database at `dir`.
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_write_buffer_size(s.memtable_bytes() as usize);
        // cairn: one active memtable plus up to two frozen ones.
        opts.set_max_write_buffer_number(3);
        // Background jobs = compactions + one flush, as cairn.
        opts.set_max_background_jobs(s.bg_threads.max(1) as i32 + 1);
        let compression = match s.compression {
            CompressionArg::None => DBCompressionType::None,
            CompressionArg::Lz4 => DBCompressionType::Lz4,
            CompressionArg::Zstd => DBCompressionType::Zstd,
        };
        opts.set_compression_type(compression);
        let mut table = BlockBasedOptions::default();
        table.set_block_size(s.block_size as usize);
        if s.bloom_bits > 0 {
            table.set_bloom_filter(s.bloom_bits as f64, false);
        }
        let cache = Cache::new_lru_cache(s.cache_bytes() as usize);
        table.set_block_cache(&cache);
        opts.set_block_based_table_factory(&table);
        let db = DB::open(&opts, dir)?;
        let settings = format!(
            "rocksdb crate 0.25 (RocksDB 11.8): write buffer {} MiB x 3, block {} B, bloom {} bits/key, compression {:?}, \
             LRU block cache {} MiB, {} background jobs (compaction + flush), durability {}",
            s.memtable_mb,
            s.block_size,
            s.bloom_bits,
            compression,
            s.cache_mb,
            s.bg_threads.max(1) + 1,
            match s.durability {
                crate::engine::Durability::Nosync => "nosync (WriteOptions::sync = false)",
                crate::engine::Durability::Groupsync => "groupsync (WriteOptions::sync = true, group-committed)",
            }
        );
        Ok(RocksdbEngine { db, sync: AtomicBool::new(false), settings })
    }
}

impl Engine for RocksdbEngine {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::Relaxed);
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        Ok(self.db.get_pinned(key)?.is_some())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync.load(Ordering::Relaxed));
        self.db.put_opt(key, value, &wo)?;
        Ok(())
    }

    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        for &(key, value) in items {
            batch.put(key, value);
        }
        let mut wo = WriteOptions::default();
        wo.set_sync(self.sync.load(Ordering::Relaxed));
        self.db.write_opt(batch, &wo)?;
        Ok(())
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut count = 0;
        while count < n && it.valid() {
            std::hint::black_box((it.key(), it.value()));
            count += 1;
            it.next();
        }
        it.status()?;
        Ok(count)
    }

    fn flush_and_close(self: Box<Self>) -> Result<()> {
        if std::env::var_os("CAIRN_BENCH_DEBUG").is_some() {
            eprintln!("{}", self.db.property_value("rocksdb.stats").ok().flatten().unwrap_or_default());
        }
        self.db.flush()?;
        drop(self.db);
        Ok(())
    }
}
