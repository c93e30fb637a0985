//! `cairn-kv`: the LSM-tree key-value engine under every other cairn layer.
//!
//! Writes go to a write-ahead log (CRC32C records, group commit) and a concurrent skiplist
//! memtable; full memtables are flushed to SSTables by a background thread and SSTables are
//! merged by leveled compaction. See `ARCHITECTURE.md` and `docs/format/kv.md`.
//!
//! The modules form a tree whose imports point down, lowest first: the leaves ([`error`],
//! [`coding`], `key`, `options`), `flow` (write-stall and compaction pacing policy),
//! [`storage`], `iter`, `memtable`, `wal`, `block`, `cache`, `table`, `version`, `compaction`,
//! `write`, and `db` (the [`Db`] handle and the shared state everything that runs on it works
//! on: the write path's two steps, compactions, opening, repair, iterators, snapshots,
//! transactions). `scripts/kv-imports.py` lists the imports and checks that they do.
//! The public API is re-exported here; [`internals`] holds what fuzz targets, benchmarks and
//! tests reach into.

pub mod coding;
pub mod error;
mod key;
mod options;
#[doc(hidden)]
pub mod testing;

mod flow;
pub mod storage;

mod iter;
mod memtable;
mod wal;

mod block;
mod cache;
mod table;

mod compaction;
mod version;

mod db;
mod write;

#[doc(hidden)]
pub mod internals;

pub use cache::CacheStats;
pub use db::background::lower_priority;
#[cfg(feature = "failpoints")]
pub use db::inner::FailpointHook;
pub use db::iter::{Iter, KvPair, prefix_successor};
pub use db::keyspace::{self, Keyspace, KeyspaceBatch, KeyspaceId, KeyspaceIter, KeyspaceSnapshot, KeyspaceTxn};
pub use db::open::LOST_DIR;
pub use db::recovery_report::{DiscardedTail, LogRecovery, RecoveryReport};
pub use db::repair::{LostBlock, RepairReport, SalvagedTable, SetAside};
pub use db::snapshot::Snapshot;
pub use db::stats::{LevelStats, Stats};
pub use db::txn::{Transaction, retry_backoff, with_retries};
pub use db::verify::{DamagedBlock, VerifyReport};
pub use db::{Db, WriteOptions};
pub use error::{Error, Result};
pub use flow::pacer::PaceStats;
pub use key::{MAX_KEY_LEN, MAX_VALUE_LEN, SeqNo};
pub use options::{Compression, Options, TableOptions};
pub use storage::{FileLock, FsStorage, MemStorage, RandomAccessFile, Storage, WritableFile};
pub use wal::record::BatchOp;
pub use write::batch::WriteBatch;
