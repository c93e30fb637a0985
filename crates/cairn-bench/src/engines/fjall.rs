//! fjall 3: one database, one keyspace.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use fjall::config::{BlockSizePolicy, BloomConstructionPolicy, CompressionPolicy, FilterPolicy, FilterPolicyEntry};
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use crate::engine::{CompressionArg, Engine, Settings};

/// fjall behind the [`Engine`] trait.
pub struct FjallEngine {
    db: Database,
    ks: Keyspace,
    sync: AtomicBool,
    settings: String,
}

impl FjallEngine {
    /// Opens a new database at `dir`.
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        let (compression, comp_note) = match s.compression {
            CompressionArg::None => (CompressionType::None, "none".to_string()),
            CompressionArg::Lz4 => (CompressionType::Lz4, "lz4 on every level".to_string()),
            CompressionArg::Zstd => {
                (CompressionType::Lz4, "LACKS zstd (fjall 3 has only lz4): lz4 on every level".to_string())
            }
        };
        let filter = if s.bloom_bits == 0 {
            FilterPolicy::disabled()
        } else {
            FilterPolicy::all(FilterPolicyEntry::Bloom(BloomConstructionPolicy::BitsPerKey(s.bloom_bits as f32)))
        };
        // fjall's workers do both flushes and compactions; cairn has bg_threads compaction
        // threads plus one flush thread, so fjall gets bg_threads + 1 workers.
        let workers = s.bg_threads.max(1) as usize + 1;
        let db = Database::builder(dir).cache_size(s.cache_bytes()).worker_threads(workers).open()?;
        let memtable = s.memtable_bytes();
        let block = s.block_size;
        let ks = db.keyspace("ycsb", || {
            KeyspaceCreateOptions::default()
                .max_memtable_size(memtable)
                .data_block_size_policy(BlockSizePolicy::all(block))
                .filter_policy(filter)
                .data_block_compression_policy(CompressionPolicy::all(compression))
        })?;
        let settings = format!(
            "fjall 3.1, one keyspace: memtable {} MiB, block {} B, bloom {} bits/key on every level, compression {comp_note}, \
             cache {} MiB, {workers} worker threads (flush + compaction), durability {}",
            s.memtable_mb,
            s.block_size,
            s.bloom_bits,
            s.cache_mb,
            match s.durability {
                crate::engine::Durability::Nosync => "nosync (journal written to the OS per write, no fsync)",
                crate::engine::Durability::Groupsync =>
                    "groupsync (Database::persist(SyncData) after each write; no group commit: concurrent writers each fsync)",
            }
        );
        Ok(FjallEngine { db, ks, sync: AtomicBool::new(false), settings })
    }
}

impl Engine for FjallEngine {
    fn name(&self) -> &'static str {
        "fjall"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::Relaxed);
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        Ok(self.ks.get(key)?.is_some())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.ks.insert(key, value)?;
        if self.sync.load(Ordering::Relaxed) {
            self.db.persist(PersistMode::SyncData)?;
        }
        Ok(())
    }

    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut batch = self.db.batch();
        for &(key, value) in items {
            batch.insert(&self.ks, key, value);
        }
        batch.commit()?;
        if self.sync.load(Ordering::Relaxed) {
            self.db.persist(PersistMode::SyncData)?;
        }
        Ok(())
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut count = 0;
        for guard in self.ks.range(start..).take(n) {
            let (_k, v) = guard.into_inner()?;
            std::hint::black_box(v);
            count += 1;
        }
        Ok(count)
    }

    fn flush_and_close(self: Box<Self>) -> Result<()> {
        self.db.persist(PersistMode::SyncAll)?;
        self.ks.rotate_memtable_and_wait()?;
        drop(self.ks);
        drop(self.db);
        Ok(())
    }
}
