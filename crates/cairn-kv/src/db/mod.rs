//! [`Db`]: the engine's public handle, and the modules of the engine as a whole: its shared
//! state ([`inner`]), opening ([`open`]) and repair, background threads, iterators, snapshots,
//! transactions, keyspaces and statistics.

pub mod background;
pub mod compact;
pub mod counters;
pub mod inner;
pub mod iter;
pub mod keyspace;
pub mod open;
pub mod recovery_report;
pub mod repair;
pub mod snapshot;
pub mod snapshot_list;
pub mod stats;
pub mod txn;
pub mod verify;
pub mod write;

use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::db::inner::DbInner;
#[cfg(feature = "failpoints")]
use crate::db::inner::FailpointHook;
use crate::db::iter::Iter;
use crate::db::snapshot::Snapshot;
use crate::db::stats::Stats;
use crate::storage::Storage;
use crate::write::batch::WriteBatch;
use crate::write::queue::WriteRequest;
use crate::{Options, Result};

/// Per-write options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Wait until the write is durable (fsync of the log) before returning. Default `true`.
    /// Without it a write survives a process crash but may be lost in a power cut; it is never
    /// torn, and writes are recovered in order (a lost write loses every later one too).
    pub sync: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions { sync: true }
    }
}

impl WriteOptions {
    /// Options for a write that does not wait for fsync.
    pub fn no_sync() -> Self {
        WriteOptions { sync: false }
    }
}

/// An open database. Cheap to clone; all clones share one engine. The engine shuts down (and
/// syncs its log) when the last clone is dropped or [`Db::close`] is called.
#[derive(Clone)]
pub struct Db {
    handle: Arc<Handle>,
}

struct Handle {
    inner: Arc<DbInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        let _ = shutdown(&self.inner, &self.threads);
    }
}

fn shutdown(inner: &Arc<DbInner>, threads: &Mutex<Vec<JoinHandle<()>>>) -> Result<()> {
    if inner.shutting_down.load(Ordering::Acquire) {
        return Ok(());
    }
    let min = inner.opts.flush_on_close_bytes;
    let unflushed = || {
        let st = inner.state.lock();
        st.imms.iter().chain(std::iter::once(&st.mem)).map(|m| m.approximate_bytes()).sum::<usize>()
    };
    let flushed = if min > 0 && !inner.is_poisoned() && unflushed() >= min { flush_all(inner) } else { Ok(()) };
    if inner.shutting_down.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    inner.pacer.stop();
    {
        let _st = inner.state.lock();
        inner.bg_cv.notify_all();
    }
    for t in threads.lock().drain(..) {
        let _ = t.join();
    }
    let mut lead = inner.lead.lock();
    let wal = &mut lead.wal;
    let spare = wal.spare.take();
    let needed = inner.state.lock().oldest_log();
    // Logs left unended are ended (their memtables not flushed), unless the engine is
    // poisoned: then no file is touched (below), and they are dropped.
    let ended = if inner.is_poisoned() { wal.wait_for_end() } else { wal.end_earlier(needed) };
    if inner.is_poisoned() {
        wal.unended.clear();
        // Touch no file: the storage may be failing, or already in other hands (a crash
        // test reopens it while this handle is still alive). A leftover spare is replayed as
        // an empty log. Dropping it waits for its thread.
        drop(spare);
        return Ok(());
    }
    if let Some(spare) = spare {
        spare.discard();
    }
    ended?;
    // Make writes that did not ask for fsync durable on a clean close.
    crate::wal::spare::end_wal(&mut wal.writer, true)?;
    flushed
}

/// Freezes the memtable and waits until every frozen memtable is flushed to a table.
fn flush_all(inner: &Arc<DbInner>) -> Result<()> {
    inner.check_poisoned()?;
    {
        crate::db::write::switch_memtable(inner, &mut inner.lead.lock().wal, true)?;
    }
    let mut st = inner.state.lock();
    while !st.imms.is_empty() {
        inner.check_poisoned()?;
        inner.bg_cv.wait(&mut st);
    }
    Ok(())
}

impl Db {
    /// Opens (or creates) the database in directory `path` on the real file system.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        Db::open_with_storage(path, opts, Arc::new(crate::FsStorage::new()))
    }

    /// Opens the database on the given storage (e.g. [`crate::MemStorage`] in tests).
    pub fn open_with_storage(path: impl AsRef<Path>, opts: Options, storage: Arc<dyn Storage>) -> Result<Db> {
        let inner = Arc::new(crate::db::open::open(path.as_ref(), opts, storage)?);
        let threads = crate::db::background::spawn(&inner)?;
        let db = Db { handle: Arc::new(Handle { inner, threads: Mutex::new(threads) }) };
        // Recovery may have left more level-0 tables than the trigger allows.
        db.inner().bg_cv.notify_all();
        Ok(db)
    }

    /// Rebuilds the MANIFEST of the database in directory `path` from the files there, when
    /// opening it fails with [`Error::NeedsRepair`] (a missing or damaged `CURRENT` or
    /// MANIFEST, a missing table) or its tables or logs are damaged. Keeps the levels of a
    /// readable MANIFEST, salvages the intact blocks of damaged tables, replays the logs, and
    /// never deletes user data: what it cannot use is copied under `lost/`. The database must
    /// not be open. See [`crate::RepairReport`] for what it reports.
    pub fn repair(path: impl AsRef<Path>, opts: Options) -> Result<crate::RepairReport> {
        Db::repair_with_storage(path, opts, Arc::new(crate::FsStorage::new()))
    }

    /// [`Db::repair`] on the given storage.
    pub fn repair_with_storage(
        path: impl AsRef<Path>,
        opts: Options,
        storage: Arc<dyn Storage>,
    ) -> Result<crate::RepairReport> {
        crate::db::repair::repair(path.as_ref(), opts, storage)
    }

    /// Sets (or with `None` clears) the function called at each named failpoint of background
    /// work, which may block to hold that work at the point (tests only). The points:
    /// `compaction.version_read`, in a compaction between reading the version (tables and range
    /// tombstones) and listing the live snapshots.
    #[cfg(feature = "failpoints")]
    pub fn set_failpoint_hook(&self, hook: Option<FailpointHook>) {
        *self.inner().failpoint_hook.lock() = hook;
    }

    pub(crate) fn inner(&self) -> &Arc<DbInner> {
        &self.handle.inner
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner().dir
    }

    /// What opening the database found and did that its user should know of: per write-ahead
    /// log, the records replayed and those discarded (a torn or damaged tail, or a log whose
    /// writes followed lost ones) with their bytes and the reason; a torn MANIFEST edit
    /// ignored; files it could not account for and set aside (never deleted).
    /// [`crate::RecoveryReport::warnings`] gives one line per loss.
    pub fn recovery_report(&self) -> crate::RecoveryReport {
        self.inner().recovery.clone()
    }

    /// Sets `key` to `value`, durably.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value)?;
        self.write(b)
    }

    /// Removes `key`, durably.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key)?;
        self.write(b)
    }

    /// Removes every key in `[start, end)`, durably. Costs one log record whatever the range
    /// holds; the data is dropped by later compactions.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete_range(start, end)?;
        self.write(b)
    }

    /// Applies a batch atomically and durably.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_opt(batch, WriteOptions::default())
    }

    /// Applies a batch atomically with the given options.
    pub fn write_opt(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        self.write_request(WriteRequest { batch, sync: opts.sync, validation: None })
    }

    pub(crate) fn write_request(&self, req: WriteRequest) -> Result<()> {
        let inner = self.inner();
        inner.check_poisoned()?;
        if req.batch.is_empty() && req.validation.is_none() {
            return Ok(());
        }
        inner.queue.write(
            req,
            |group, defer_sync| crate::db::write::lead_group(inner, group, defer_sync),
            |group, led| crate::db::write::apply_group(inner, group, led),
            |why| inner.poison(why),
        )
    }

    /// Reads the current value of `key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        let inner = self.inner();
        inner.get_at(key.as_ref(), inner.visible_seq())
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Takes a snapshot of the current state.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(self.inner().clone())
    }

    /// Iterates over a key range (double-ended: `.rev()` scans backwards).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        let inner = self.inner();
        Iter::new(inner, inner.visible_seq(), range)
    }

    /// Iterates over every key starting with `prefix`.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        let inner = self.inner();
        Iter::prefix(inner, inner.visible_seq(), prefix.as_ref())
    }

    /// Iterates over every key.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }

    /// Freezes the memtable and waits until every frozen memtable is flushed to a table.
    pub fn flush(&self) -> Result<()> {
        flush_all(self.inner())
    }

    /// Waits until no compaction is running or needed.
    pub fn wait_for_compactions(&self) -> Result<()> {
        let inner = self.inner();
        let mut st = inner.state.lock();
        loop {
            inner.check_poisoned()?;
            let idle = st.imms.is_empty()
                && st.compaction.running == 0
                && crate::compaction::picker::needs_compaction(&inner.opts, &st.version, &st.compaction).is_none();
            if idle {
                return Ok(());
            }
            inner.bg_cv.wait(&mut st);
        }
    }

    /// Flushes the memtable and compacts every level down to the bottom, dropping overwritten
    /// versions and deleted keys that no snapshot needs (like RocksDB's full `CompactRange`).
    pub fn compact_all(&self) -> Result<()> {
        self.flush()?;
        crate::db::compact::compact_all(self.inner())?;
        // The tables it replaced, unless a reader still holds them, are deleted by now.
        self.inner().cleaner.wait_idle();
        Ok(())
    }

    /// Engine statistics (levels, memtables, caches, bytes written).
    pub fn stats(&self) -> Stats {
        crate::db::stats::collect(self.inner())
    }

    /// Checks every table's blocks and checksums; returns the number of entries checked.
    pub fn verify(&self) -> Result<u64> {
        let sv = self.inner().sv.load_full();
        let mut n = 0;
        for f in sv.version.levels.iter().flatten() {
            n += f.open()?.verify()?;
        }
        Ok(n)
    }

    /// Checks every live table block by block, like [`Db::verify`], but goes on past damage:
    /// reports every damaged block (or table that does not open) with the user keys it may
    /// hold, from the table's index, so that callers can tell which of their records it
    /// affects.
    pub fn verify_detailed(&self) -> Result<crate::VerifyReport> {
        crate::db::verify::verify_detailed(self.inner())
    }

    /// Shuts the engine down: stops background work and syncs the log. Other clones of this
    /// handle get [`Error::Closed`] afterwards.
    pub fn close(self) -> Result<()> {
        shutdown(&self.handle.inner, &self.handle.threads)
    }
}
