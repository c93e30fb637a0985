//! sled 0.34 (the stable release): the default tree.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;

use crate::engine::{Engine, Settings};

/// sled behind the [`Engine`] trait.
pub struct SledEngine {
    db: sled::Db,
    sync: AtomicBool,
    settings: String,
}

impl SledEngine {
    /// Opens a new database at `dir`.
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let db = sled::Config::new().path(dir).cache_capacity(s.cache_bytes()).open()?;
        let settings = format!(
            "sled 0.34.7 (1.0 is still alpha), default tree: cache {} MiB; LACKS memtable size, block size, bloom filters, \
             background-thread count and compression (its zstd feature pins a zstd-sys that conflicts with the workspace's) \
             (asked: memtable {} MiB, block {} B, bloom {}, compression {}, {} threads); durability {}",
            s.cache_mb,
            s.memtable_mb,
            s.block_size,
            s.bloom_bits,
            s.compression.as_str(),
            s.bg_threads,
            match s.durability {
                crate::engine::Durability::Nosync => "nosync (sled's own flush every 500 ms)",
                crate::engine::Durability::Groupsync =>
                    "groupsync (Db::flush after each write; concurrent flushes share sled's log writes) LACKS a durable \
                     sync: on Linux sled 0.34 ends a flush in sync_file_range, not fsync, which does not flush the \
                     disk's volatile write cache (sled issue #1452), so a power cut can lose flushed writes",
            }
        );
        Ok(SledEngine { db, sync: AtomicBool::new(false), settings })
    }
}

impl Engine for SledEngine {
    fn name(&self) -> &'static str {
        "sled"
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
        self.db.insert(key, value)?;
        if self.sync.load(Ordering::Relaxed) {
            self.db.flush()?;
        }
        Ok(())
    }

    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = sled::Batch::default();
        for &(key, value) in items {
            batch.insert(key, value);
        }
        self.db.apply_batch(batch)?;
        if self.sync.load(Ordering::Relaxed) {
            self.db.flush()?;
        }
        Ok(())
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut count = 0;
        for item in self.db.range(start..).take(n) {
            let (_k, v) = item?;
            std::hint::black_box(v);
            count += 1;
        }
        Ok(count)
    }

    fn flush_and_close(self: Box<Self>) -> Result<()> {
        self.db.flush()?;
        drop(self.db);
        Ok(())
    }
}
