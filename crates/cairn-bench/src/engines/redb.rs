//! redb: one table, one write transaction per write op (per batch in a batched load).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use redb::{Database, Durability, ReadableDatabase, TableDefinition};

use crate::engine::{Engine, Settings};

const TABLE: TableDefinition<'static, &[u8], &[u8]> = TableDefinition::new("ycsb");

/// redb behind the [`Engine`] trait.
pub struct RedbEngine {
    db: Database,
    sync: AtomicBool,
    settings: String,
}

impl RedbEngine {
    /// Opens a new database file `dir/ycsb.redb`.
    pub fn open(dir: &Path, s: &Settings) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let db = Database::builder().set_cache_size(s.cache_bytes() as usize).create(dir.join("ycsb.redb"))?;
        let tx = db.begin_write()?;
        tx.open_table(TABLE)?;
        tx.commit()?;
        let settings = format!(
            "redb 4, one table, one write transaction per write op (per load batch when loading): cache {} MiB; LACKS memtable (B-tree, copy-on-write pages), \
             block size (fixed pages), bloom filters, compression and background threads (asked: memtable {} MiB, block {} B, \
             bloom {}, compression {}, {} threads); durability {}",
            s.cache_mb,
            s.memtable_mb,
            s.block_size,
            s.bloom_bits,
            s.compression.as_str(),
            s.bg_threads,
            match s.durability {
                crate::engine::Durability::Nosync =>
                    "nosync = Durability::None per commit (one durable commit at close)",
                crate::engine::Durability::Groupsync =>
                    "groupsync = Durability::Immediate per commit; redb has NO group commit (one writer at a time, one fsync each)",
            }
        );
        Ok(RedbEngine { db, sync: AtomicBool::new(false), settings })
    }

    fn durability(&self) -> Durability {
        if self.sync.load(Ordering::Relaxed) { Durability::Immediate } else { Durability::None }
    }
}

impl Engine for RedbEngine {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn settings(&self) -> String {
        self.settings.clone()
    }

    fn set_sync(&self, sync: bool) {
        self.sync.store(sync, Ordering::Relaxed);
    }

    fn read(&self, key: &[u8]) -> Result<bool> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let found = table.get(key)?;
        Ok(found.map(|v| std::hint::black_box(v.value().len())).is_some())
    }

    fn update(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(self.durability())?;
        {
            let mut table = tx.open_table(TABLE)?;
            table.insert(key, value)?;
        }
        tx.commit()?;
        Ok(())
    }

    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(self.durability())?;
        {
            let mut table = tx.open_table(TABLE)?;
            for &(key, value) in items {
                table.insert(key, value)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let tx = self.db.begin_read()?;
        let table = tx.open_table(TABLE)?;
        let mut count = 0;
        for item in table.range(start..)?.take(n) {
            let (_k, v) = item?;
            std::hint::black_box(v.value().len());
            count += 1;
        }
        Ok(count)
    }

    fn flush_and_close(self: Box<Self>) -> Result<()> {
        let mut tx = self.db.begin_write()?;
        tx.set_durability(Durability::Immediate)?;
        tx.commit()?;
        drop(self.db);
        Ok(())
    }
}
