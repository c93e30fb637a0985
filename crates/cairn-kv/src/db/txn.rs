//! Optimistic transactions: reads come from a snapshot taken at the start (plus the
//! transaction's own writes); at commit, every key read or written (except writes made with
//! `put_untracked`/`delete_untracked`) is checked against writes committed after the snapshot, and a conflict fails the commit with [`Error::Conflict`]
//! without writing anything. Validation and the write happen in the group-commit leader, so no
//! other write can slip between them.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::db::snapshot::Snapshot;
use crate::db::{Db, WriteOptions};
use crate::write::batch::WriteBatch;
use crate::write::queue::{Validation, WriteRequest};
use crate::{Error, Result};

/// An optimistic read-modify-write transaction. See the module documentation.
///
/// Range scans through [`Transaction::snapshot`] are not validated; only point reads
/// ([`Transaction::get`]) and writes are.
pub struct Transaction {
    db: Db,
    snapshot: Snapshot,
    /// Keys validated at commit: those read and those written tracked.
    tracked: BTreeSet<Vec<u8>>,
    writes: BTreeMap<Vec<u8>, Option<Bytes>>,
    batch: WriteBatch,
    opts: WriteOptions,
}

impl Db {
    /// Starts an optimistic transaction reading at a snapshot taken now.
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.clone())
    }
}

impl Transaction {
    pub(crate) fn new(db: Db) -> Self {
        let snapshot = db.snapshot();
        Transaction {
            db,
            snapshot,
            tracked: BTreeSet::new(),
            writes: BTreeMap::new(),
            batch: WriteBatch::new(),
            opts: WriteOptions::default(),
        }
    }

    /// Sets the durability of the commit (default: synced).
    pub fn set_write_options(&mut self, opts: WriteOptions) {
        self.opts = opts;
    }

    /// Reads `key`: the transaction's own write if any, else the value at its snapshot.
    /// The key joins the read set validated at commit.
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        let key = key.as_ref();
        if let Some(w) = self.writes.get(key) {
            return Ok(w.clone());
        }
        self.track(key);
        self.snapshot.get(key)
    }

    /// Adds `key` to the read set validated at commit without reading it: for a caller that
    /// knows the key's value at the snapshot by other means (a cache it can trust).
    pub fn track(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if !self.tracked.contains(key) {
            self.tracked.insert(key.to_vec());
        }
    }

    /// Buffers a put. The commit fails if another writer changed the key since the
    /// transaction began.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_untracked(&key, value)?;
        self.tracked.insert(key.as_ref().to_vec());
        Ok(())
    }

    /// Buffers a delete, validated at commit like [`Transaction::put`].
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_untracked(&key)?;
        self.tracked.insert(key.as_ref().to_vec());
        Ok(())
    }

    /// Buffers a put that is not validated at commit: for keys no other transaction writes
    /// without also changing a key this one tracks (derived rows such as index entries), so
    /// that checking them would only cost time.
    pub fn put_untracked(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.batch.put(key, value)?;
        self.writes.insert(key.to_vec(), Some(Bytes::copy_from_slice(value)));
        Ok(())
    }

    /// Buffers a delete that is not validated at commit (see [`Transaction::put_untracked`]).
    pub fn delete_untracked(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.batch.delete(key)?;
        self.writes.insert(key.to_vec(), None);
        Ok(())
    }

    /// The snapshot the transaction reads from (for scans, which are not validated).
    pub fn snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Validates and applies the transaction atomically. Returns [`Error::Conflict`] if another
    /// writer changed a key this transaction read or wrote since it began.
    pub fn commit(self) -> Result<()> {
        let keys: Vec<Vec<u8>> = self.tracked.into_iter().collect();
        let validation = Validation { snapshot: self.snapshot.seq(), keys };
        self.db.write_request(WriteRequest { batch: self.batch, sync: self.opts.sync, validation: Some(validation) })
    }

    /// Discards the transaction.
    pub fn rollback(self) {}
}

/// Runs `f` in a transaction, retrying on conflict up to `attempts` times (with [`retry_backoff`]).
pub fn with_retries<T>(db: &Db, attempts: usize, mut f: impl FnMut(&mut Transaction) -> Result<T>) -> Result<T> {
    let mut last = None;
    for attempt in 0..attempts.max(1) {
        let mut txn = db.transaction();
        let out = f(&mut txn)?;
        match txn.commit() {
            Ok(()) => return Ok(out),
            Err(e @ Error::Conflict { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
        retry_backoff(attempt);
    }
    Err(last.unwrap_or(Error::Conflict { key: String::new() }))
}

/// Waits before retrying a transaction whose commit number `attempt` (from 0) conflicted.
/// Retrying at once can starve a writer: when threads outnumber cores, one that is descheduled
/// between its reads and its commit finds its keys changed every time. So the first retries
/// only yield, later ones sleep a random time up to a bound that doubles per attempt (at most
/// about a millisecond), so that contenders spread out.
pub fn retry_backoff(attempt: usize) {
    if attempt < 2 {
        std::thread::yield_now();
        return;
    }
    let bound = 1u64 << attempt.min(10);
    // Jitter from the clock and the thread: enough to separate contenders, no RNG needed.
    let mut x = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos())
        as u64
        ^ std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), std::thread::current().id());
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    std::thread::sleep(std::time::Duration::from_micros(1 + x % bound));
}
