//! The engine interface the harness drives, and the settings every engine is configured with.

use std::path::Path;

use anyhow::{Result, bail};
use clap::{Args, ValueEnum};

/// Block compression asked of every engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    /// No compression.
    None,
    /// LZ4 (or the engine's nearest fast codec, said in its settings).
    Lz4,
    /// Zstandard at level 3 (zstd's default) where the engine takes a level.
    Zstd,
}

impl CompressionArg {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            CompressionArg::None => "none",
            CompressionArg::Lz4 => "lz4",
            CompressionArg::Zstd => "zstd",
        }
    }
}

/// When writes reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// No fsync per op: writes reach the OS, the engine syncs when it likes.
    Nosync,
    /// An fsync per write op before it returns, group-committed where the engine groups
    /// concurrent writers (one fsync for all waiting writers).
    Groupsync,
}

impl Durability {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Nosync => "nosync",
            Durability::Groupsync => "groupsync",
        }
    }
}

/// The settings every engine gets, where it has the knob.
#[derive(Args, Clone, Debug)]
pub struct Settings {
    /// Block / page cache budget in MiB.
    #[arg(long, default_value_t = 64)]
    pub cache_mb: u64,
    /// Memtable (write buffer) size in MiB.
    #[arg(long, default_value_t = 64)]
    pub memtable_mb: u64,
    /// Data block size in bytes.
    #[arg(long, default_value_t = 4096)]
    pub block_size: u32,
    /// Bloom filter bits per key (0 = none): each engine's filter gets this budget (cairn
    /// builds a binary fuse filter where it fits the budget, a bloom filter otherwise).
    #[arg(long, default_value_t = 10)]
    pub bloom_bits: u32,
    /// Block compression.
    #[arg(long, value_enum, default_value_t = CompressionArg::Lz4)]
    pub compression: CompressionArg,
    /// Background (compaction) threads.
    #[arg(long, default_value_t = 2)]
    pub bg_threads: u32,
    /// Durability of run-phase writes (the load phase never fsyncs per op).
    #[arg(long, value_enum, default_value_t = Durability::Nosync)]
    pub durability: Durability,
    /// Records per write batch (one transaction) in the load phase. 1, the default, is YCSB's
    /// load: one insert per transaction. Larger batches shorten the load of engines that pay
    /// per commit, not of B-trees that pay per random leaf (redb loaded 10M records slower in
    /// 1000-record transactions than one at a time); the run phase always writes one op at a
    /// time.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub load_batch: u32,
}

impl Settings {
    /// The same settings as command-line flags (for a child process or a Go peer).
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--cache-mb".into(),
            self.cache_mb.to_string(),
            "--memtable-mb".into(),
            self.memtable_mb.to_string(),
            "--block-size".into(),
            self.block_size.to_string(),
            "--bloom-bits".into(),
            self.bloom_bits.to_string(),
            "--compression".into(),
            self.compression.as_str().into(),
            "--bg-threads".into(),
            self.bg_threads.to_string(),
            "--durability".into(),
            self.durability.as_str().into(),
            "--load-batch".into(),
            self.load_batch.to_string(),
        ]
    }

    /// Cache budget in bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.cache_mb << 20
    }

    /// Memtable size in bytes.
    pub fn memtable_bytes(&self) -> u64 {
        self.memtable_mb << 20
    }

    /// One line with the settings as asked.
    pub fn describe(&self) -> String {
        format!(
            "cache {} MiB, memtable {} MiB, block {} B, bloom {} bits/key, compression {}, {} background threads, durability {}, load batch {}",
            self.cache_mb,
            self.memtable_mb,
            self.block_size,
            self.bloom_bits,
            self.compression.as_str(),
            self.bg_threads,
            self.durability.as_str(),
            self.load_batch
        )
    }
}

/// A key-value engine under test. Every method may be called from several threads at once.
pub trait Engine: Send + Sync {
    /// Short name (`cairn`, `fjall`, ...).
    fn name(&self) -> &'static str;
    /// How the engine was configured, naming every asked setting it lacks.
    fn settings(&self) -> String;
    /// Whether following writes fsync before returning (the load phase runs without).
    fn set_sync(&self, sync: bool);
    /// Point read; whether the key was found (the value is fetched).
    fn read(&self, key: &[u8]) -> Result<bool>;
    /// Overwrites an existing key.
    fn update(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Writes a new key.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.update(key, value)
    }
    /// Writes new keys in one write batch or transaction (the load phase with `--load-batch`
    /// above 1); the batch syncs once if writes sync.
    fn insert_batch(&self, items: &[(&[u8], &[u8])]) -> Result<()>;
    /// Reads up to `n` keys (with values) from `start` forward; how many were read.
    fn scan(&self, start: &[u8], n: usize) -> Result<usize>;
    /// YCSB's read-modify-write: a read, then an update of the same key (not atomic, as in
    /// YCSB); whether the read found the key.
    fn rmw(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        let found = self.read(key)?;
        self.update(key, value)?;
        Ok(found)
    }
    /// Makes everything durable, flushes memtables where the engine can, and closes.
    fn flush_and_close(self: Box<Self>) -> Result<()>;
}

/// Engines built into this binary (by cargo features).
pub fn compiled_engines() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "cairn") {
        v.push("cairn");
    }
    if cfg!(feature = "fjall") {
        v.push("fjall");
    }
    if cfg!(feature = "redb") {
        v.push("redb");
    }
    if cfg!(feature = "sled") {
        v.push("sled");
    }
    if cfg!(feature = "rocksdb") {
        v.push("rocksdb");
    }
    v
}

/// Engines run by the Go peer program.
pub const GO_ENGINES: [&str; 2] = ["pebble", "badger"];

/// Opens engine `name` in a new database at `dir`.
pub fn open(name: &str, dir: &Path, s: &Settings) -> Result<Box<dyn Engine>> {
    let _ = (dir, s);
    match name {
        #[cfg(feature = "cairn")]
        "cairn" => Ok(Box::new(crate::engines::cairn::CairnEngine::open(dir, s)?)),
        #[cfg(feature = "fjall")]
        "fjall" => Ok(Box::new(crate::engines::fjall::FjallEngine::open(dir, s)?)),
        #[cfg(feature = "redb")]
        "redb" => Ok(Box::new(crate::engines::redb::RedbEngine::open(dir, s)?)),
        #[cfg(feature = "sled")]
        "sled" => Ok(Box::new(crate::engines::sled::SledEngine::open(dir, s)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok(Box::new(crate::engines::rocksdb::RocksdbEngine::open(dir, s)?)),
        other => bail!("engine {other} is not built into this binary (built: {:?})", compiled_engines()),
    }
}
