//! Integration tests of `cairn-kv`, one module per behaviour.

mod alloc;
mod basic;
mod compaction;
mod corruption;
mod crash;
mod iter;
mod model;
mod txn;
mod wal;

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn_kv::{Db, MemStorage, Options};

/// A database on a fresh in-memory storage, with small sizes so flushes and compactions happen.
pub fn mem_db() -> (Db, MemStorage) {
    let storage = MemStorage::new();
    let db = Db::open_with_storage("/db", Options::small_for_tests(), Arc::new(storage.clone())).unwrap();
    (db, storage)
}

/// `Options::small_for_tests` with level 0 never compacted and never slowing writes, so that
/// a test sees every table its flushes wrote.
pub fn level0_kept() -> Options {
    Options {
        dynamic_level_bytes: false,
        level0_compaction_trigger: 1000,
        level0_slowdown_trigger: 1000,
        level0_stop_trigger: 1000,
        ..Options::small_for_tests()
    }
}

/// Holds the first background thread that passes failpoint `name` until the returned sender
/// sends (or 30 s pass); the returned receiver hears when it is held.
pub fn hold_at_failpoint(db: &Db, name: &'static str) -> (Receiver<()>, Sender<()>) {
    let (reached_tx, reached) = channel::<()>();
    let (release, release_rx) = channel::<()>();
    let gate = Mutex::new(Some((reached_tx, release_rx)));
    db.set_failpoint_hook(Some(Arc::new(move |at: &str| {
        if at == name
            && let Some((reached, release)) = gate.lock().unwrap().take()
        {
            reached.send(()).unwrap();
            release.recv_timeout(Duration::from_secs(30)).unwrap();
        }
    })));
    (reached, release)
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

/// A copy of a database directory on the real file system, without its `LOCK` (so that the
/// copy opens in the same process while the original is held, or was never closed).
pub fn copy_dir(from: &std::path::Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(from).unwrap() {
        let f = f.unwrap();
        if f.file_name() != "LOCK" {
            std::fs::copy(f.path(), to.path().join(f.file_name())).unwrap();
        }
    }
    to
}
mod recovery_report;
mod repair;
mod unaccounted;
mod verify;
