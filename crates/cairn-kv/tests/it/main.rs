//! Integration tests of `cairn-kv`, one module per behaviour.

mod basic;
mod compaction;
mod corruption;
mod crash;
mod iter;
mod model;
mod txn;
mod wal;

use std::sync::Arc;

use cairn_kv::{Db, MemStorage, Options};

/// A database on a fresh in-memory storage, with small sizes so flushes and compactions happen.
pub fn mem_db() -> (Db, MemStorage) {
    let storage = MemStorage::new();
    let db = Db::open_with_storage("/db", Options::small_for_tests(), Arc::new(storage.clone())).unwrap();
    (db, storage)
}

/// Reopens the database on `storage`.
pub fn reopen(storage: &MemStorage, opts: Options) -> Db {
    Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap()
}

/// Collects an iterator's keys as strings.
pub fn keys(it: impl Iterator<Item = cairn_kv::Result<cairn_kv::KvPair>>) -> Vec<String> {
    it.map(|r| String::from_utf8(r.unwrap().0.to_vec()).unwrap()).collect()
}

pub use cairn_kv::testing::noise;
