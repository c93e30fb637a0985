//! `cairn-kv`: the LSM-tree key-value engine under every other cairn layer.
//!
//! Writes go to a write-ahead log (CRC32C records, group commit) and a concurrent skiplist
//! memtable; full memtables are flushed to SSTables by a background thread and SSTables are
//! merged by leveled compaction. See `ARCHITECTURE.md` and `docs/format/kv.md`.

pub mod coding;
pub mod error;
pub mod iter;
pub mod key;
pub mod options;
pub mod storage;
pub mod testing;

// -- storage implementations and log format --
pub mod log;
mod storage_fs;
mod storage_mem;
mod storage_mmap;
pub use storage_fs::FsStorage;
pub use storage_mem::MemStorage;

// -- sstable --
pub mod block;
pub mod block_builder;
pub mod block_cache;
pub mod block_pool;
pub mod compression;
pub mod filter;
pub mod fuse_filter;
pub mod table_builder;
pub mod table_cache;
pub mod table_reader;
pub use block_cache::{BlockCache, CacheStats};
pub use table_builder::{TableBuilder, TableInfo};
pub use table_cache::TableCache;
pub use table_reader::{TableIter, TableReader};

// -- engine --
mod background;
pub use background::lower_priority;
pub mod batch;
mod compaction;
mod db;
mod db_iter;
mod flush;
pub mod keyspace;
mod manifest;
mod memtable;
mod merge_iter;
mod pacer;
mod prefetch;
pub mod range_del;
mod recovery;
mod repair;
mod sequences;
mod skiplist;
mod snapshot;
mod spare_log;
mod stats;
mod txn;
mod verify;
mod version;
pub mod version_edit;
mod write;
mod write_queue;

pub use batch::{BatchOp, WriteBatch};
#[cfg(feature = "failpoints")]
pub use db::FailpointHook;
pub use db::{Db, WriteOptions};
pub use db_iter::{Iter, KvPair, prefix_successor};
pub use key::SeqNo;
pub use keyspace::{Keyspace, KeyspaceBatch, KeyspaceId, KeyspaceIter, KeyspaceSnapshot, KeyspaceTxn};
pub use pacer::PaceStats;
pub use recovery::{DiscardedTail, LOST_DIR, LogRecovery, RecoveryReport};
pub use repair::{LostBlock, RepairReport, SalvagedTable, SetAside};
pub use snapshot::Snapshot;
pub use stats::{LevelStats, Stats};
pub use txn::{Transaction, retry_backoff, with_retries};
pub use verify::{DamagedBlock, VerifyReport};

pub use error::{Error, Result};
pub use options::{Compression, Options, TableOptions};
pub use storage::{FileLock, RandomAccessFile, Storage, WritableFile};

/// Largest accepted key, in bytes (64 KiB).
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Largest accepted value, in bytes (64 MiB).
pub const MAX_VALUE_LEN: usize = 64 << 20;
