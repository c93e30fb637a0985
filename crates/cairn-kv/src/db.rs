//! [`Db`]: the engine's public handle, its shared state and the read path.

use std::collections::VecDeque;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::batch::WriteBatch;
use crate::block_cache::BlockCache;
use crate::db_iter::Iter;
use crate::key::{self, MAX_SEQ, SeqNo, ValueKind};
use crate::log::LogWriter;
use crate::manifest::ManifestWriter;
use crate::memtable::{Found, Memtable};
use crate::snapshot::{Snapshot, SnapshotList};
use crate::stats::{Counters, Stats};
use crate::storage::{FileLock, Storage};
use crate::table_cache::TableCache;
use crate::txn::Transaction;
use crate::version::{Cleaner, TableFile, Version};
use crate::write_queue::{WriteQueue, WriteRequest};
use crate::{Error, Options, Result};

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

/// What readers need: the memtables and the version, swapped atomically as a whole.
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Frozen memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    /// `version`'s level-0 weight ([`crate::version::l0_weight`]), which every write checks.
    pub l0_weight: usize,
}

impl SuperVersion {
    /// The oldest write-ahead log this view still needs ([`State::oldest_log`]).
    pub fn oldest_log(&self) -> u64 {
        self.imms.last().unwrap_or(&self.mem).wal_number()
    }

    /// The view of `state` readers and writers see, level 0 weighed with `memtable_size`.
    fn of(state: &State, memtable_size: usize) -> Self {
        SuperVersion {
            mem: state.mem.clone(),
            imms: state.imms.iter().rev().cloned().collect(),
            version: state.version.clone(),
            l0_weight: state.version.l0_weight(memtable_size),
        }
    }

    /// The newest range tombstone `<= seq` covering `user_key`, from any memtable or the
    /// version. Allocation-free when no range tombstone exists.
    pub fn max_covering(&self, user_key: &[u8], seq: SeqNo) -> Option<SeqNo> {
        let mut best = self.version.fragmented.max_covering(user_key, seq);
        for m in self.imms.iter().chain(std::iter::once(&self.mem)) {
            if m.has_range_tombstones() {
                let t = m.fragmented_tombstones().and_then(|f| f.max_covering(user_key, seq));
                best = best.max(t);
            }
        }
        best
    }

    /// Whether any range tombstone is visible through this super version.
    pub fn has_range_tombstones(&self) -> bool {
        !self.version.tombstones.is_empty()
            || self.imms.iter().chain(std::iter::once(&self.mem)).any(|m| m.has_range_tombstones())
    }
}

/// State changed by flushes, compactions and memtable switches (under `DbInner::state`).
pub(crate) struct State {
    pub mem: Arc<Memtable>,
    /// Frozen memtables waiting for flush, oldest first.
    pub imms: VecDeque<Arc<Memtable>>,
    pub version: Arc<Version>,
    pub manifest: ManifestWriter,
    /// File numbers, accounted for in `manifest`.
    pub files: crate::manifest::FileNumbers,
    /// The compactions running and what they hold.
    pub compaction: crate::compaction::Compacting,
    pub flushing: bool,
}

impl State {
    /// Hands out a file number (see [`crate::manifest::FileNumbers`]); fails only if the
    /// MANIFEST edit that must first raise its limit fails.
    pub fn alloc_file_no(&mut self) -> Result<u64> {
        self.files.alloc(&mut self.manifest)
    }

    /// The oldest write-ahead log still needed: that of the oldest memtable not flushed.
    pub fn oldest_log(&self) -> u64 {
        self.imms.front().unwrap_or(&self.mem).wal_number()
    }
}

/// The write-ahead log being appended to.
pub(crate) struct Wal {
    pub writer: LogWriter,
    /// Delay owed by writes made while level 0 is over its slowdown trigger, not yet slept.
    pub slowdown: crate::write::SlowdownDebt,
    /// The log the next memtable switch will use, made ahead of time.
    pub spare: Option<crate::spare_log::SpareLog>,
    /// The log the last memtable switch left, while it is being ended on a thread of its own.
    pub sealing: Option<crate::spare_log::SealingLog>,
    /// Logs memtable switches left without ending them, oldest first, with their numbers: no
    /// synced write went into them, so nothing waits for their records to be durable. The
    /// next synced write ends them first (its acknowledgement promises every earlier write
    /// durable); one whose memtable is flushed first is dropped unended, its records never
    /// synced (see `write::switch_memtable`). All are newer than `sealing`'s.
    pub unended: std::collections::VecDeque<(u64, LogWriter)>,
    /// Whether a synced write went into `writer`.
    pub synced: bool,
}

impl Wal {
    /// A log in use, with nothing left behind.
    pub fn new(writer: LogWriter, spare: Option<crate::spare_log::SpareLog>) -> Wal {
        Wal {
            writer,
            slowdown: crate::write::SlowdownDebt::default(),
            spare,
            sealing: None,
            unended: Default::default(),
            synced: false,
        }
    }

    /// Waits until the log the last memtable switch left is ended, if one is being ended.
    pub fn wait_for_end(&mut self) -> Result<()> {
        self.sealing.take().map_or(Ok(()), crate::spare_log::SealingLog::wait)
    }

    /// Makes every log before the current one durable: waits for the one being ended, drops
    /// the unended ones numbered below `needed` (the oldest log whose memtable is not flushed
    /// yet: the others' records are in tables) and ends the rest, oldest first. A synced
    /// write calls it before its own sync, a clean close before ending the current log.
    pub fn end_earlier(&mut self, needed: u64) -> Result<()> {
        self.wait_for_end()?;
        self.drop_flushed(needed);
        while let Some((_, mut log)) = self.unended.pop_front() {
            crate::spare_log::end_wal(&mut log, false)?;
        }
        Ok(())
    }

    /// Drops the unended logs numbered below `needed`: their memtables are flushed.
    pub fn drop_flushed(&mut self, needed: u64) {
        while self.unended.front().is_some_and(|(number, _)| *number < needed) {
            self.unended.pop_front();
        }
    }
}

/// Shared engine state; background threads and handles hold an `Arc` of it.
pub(crate) struct DbInner {
    pub dir: PathBuf,
    pub opts: Options,
    pub storage: Arc<dyn Storage>,
    pub block_cache: Arc<BlockCache>,
    pub cleaner: Arc<Cleaner>,
    pub state: Mutex<State>,
    /// Signalled when background work finishes or is needed, and on shutdown.
    pub bg_cv: Condvar,
    pub sv: ArcSwap<SuperVersion>,
    /// Allocated and visible sequence numbers.
    pub seqs: crate::sequences::Sequences,
    pub queue: WriteQueue,
    pub wal: Mutex<Wal>,
    pub snapshots: SnapshotList,
    poisoned: AtomicBool,
    poison_reason: Mutex<Option<String>>,
    pub shutting_down: AtomicBool,
    pub counters: Counters,
    /// Paces compactions while synced writes or device reads happen ([`Options::sync_pacing`],
    /// [`Options::read_pacing`]).
    pub pacer: Arc<crate::pacer::Pacer>,
    #[cfg(feature = "failpoints")]
    pub failpoint_hook: Mutex<Option<FailpointHook>>,
    /// What opening found and did.
    pub recovery: crate::recovery::RecoveryReport,
    _lock: Box<dyn FileLock>,
}

/// Called with the name of each failpoint background work passes ([`Db::set_failpoint_hook`]).
#[cfg(feature = "failpoints")]
pub type FailpointHook = Arc<dyn Fn(&str) + Send + Sync>;

impl DbInner {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        dir: PathBuf,
        opts: Options,
        storage: Arc<dyn Storage>,
        block_cache: Arc<BlockCache>,
        cleaner: Arc<Cleaner>,
        state: State,
        wal: Wal,
        last_seq: SeqNo,
        lock: Box<dyn FileLock>,
        recovery: crate::recovery::RecoveryReport,
    ) -> Self {
        let sv = SuperVersion::of(&state, opts.memtable_size);
        let pacer =
            Arc::new(crate::pacer::Pacer::new(opts.sync_pacing, opts.read_pacing, block_cache.device_reads().clone()));
        DbInner {
            dir,
            opts,
            storage,
            block_cache,
            cleaner,
            state: Mutex::new(state),
            bg_cv: Condvar::new(),
            sv: ArcSwap::from_pointee(sv),
            seqs: crate::sequences::Sequences::new(last_seq),
            queue: WriteQueue::default(),
            wal: Mutex::new(wal),
            snapshots: SnapshotList::default(),
            poisoned: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            shutting_down: AtomicBool::new(false),
            counters: Counters::default(),
            pacer,
            #[cfg(feature = "failpoints")]
            failpoint_hook: Mutex::new(None),
            recovery,
            _lock: lock,
        }
    }

    /// Passes the failpoint `name`: calls the hook a test set, if any (nothing without the
    /// `failpoints` feature).
    #[inline]
    pub fn failpoint(&self, name: &str) {
        #[cfg(feature = "failpoints")]
        {
            // Not under the lock: a hook may block one thread while others pass failpoints.
            let hook = self.failpoint_hook.lock().clone();
            if let Some(hook) = hook {
                hook(name);
            }
        }
        #[cfg(not(feature = "failpoints"))]
        let _ = name;
    }

    /// A call passing failpoint `name` ([`DbInner::failpoint`]) with the hook set now, holding
    /// no reference to the engine: for a thread the engine joins when it is dropped (the last
    /// reference dropped on that thread would join it to itself).
    pub fn failpoint_fn(&self, name: &'static str) -> impl FnOnce() + Send + 'static {
        #[cfg(feature = "failpoints")]
        let hook = self.failpoint_hook.lock().clone();
        move || {
            #[cfg(feature = "failpoints")]
            if let Some(hook) = hook {
                hook(name);
            }
            #[cfg(not(feature = "failpoints"))]
            let _ = name;
        }
    }

    /// The highest sequence number whose write is complete and visible.
    pub fn visible_seq(&self) -> SeqNo {
        self.seqs.visible()
    }

    /// Refuses all further writes.
    pub fn poison(&self, reason: String) {
        let mut r = self.poison_reason.lock();
        if r.is_none() {
            *r = Some(reason);
        }
        self.poisoned.store(true, Ordering::Release);
        self.bg_cv.notify_all();
    }

    pub fn check_poisoned(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            let why = self.poison_reason.lock().clone().unwrap_or_default();
            return Err(Error::Poisoned(why));
        }
        if self.shutting_down.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// Publishes a new super version from `state`.
    pub fn install_super_version(&self, state: &State) {
        // What the pacer exempts follows the state readers see: level 0 near the slowdown
        // trigger, and as many frozen memtables as writers may have before they stall.
        let sv = SuperVersion::of(state, self.opts.memtable_size);
        self.pacer.set_urgent(sv.l0_weight >= crate::pacer::l0_unpaced_weight(&self.opts));
        self.pacer.set_flush_urgent(crate::pacer::flush_urgent(&self.opts, state.imms.len()));
        self.sv.store(Arc::new(sv));
    }

    /// The newest version of `user_key` at or below `seq` in `sv`, ignoring range tombstones.
    pub(crate) fn find_version(&self, sv: &SuperVersion, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let hash = crate::filter::key_hash(user_key);
        if let Some(f) = sv.mem.get(user_key, hash, seq) {
            return Ok(Some(f));
        }
        for m in &sv.imms {
            if let Some(f) = m.get(user_key, hash, seq) {
                return Ok(Some(f));
            }
        }
        let v = &sv.version;
        if v.levels.iter().all(|l| l.is_empty()) {
            return Ok(None);
        }
        let lookup = key::lookup_key(user_key, seq);
        for f in &v.levels[0] {
            if f.info.smallest_user() <= user_key
                && user_key <= f.info.largest_user()
                && let Some(found) = self.table_get(f, user_key, hash, &lookup)?
            {
                return Ok(Some(found));
            }
        }
        for level in 1..v.levels.len() {
            if let Some(f) = v.file_for_key(level, user_key)
                && let Some(found) = self.table_get(f, user_key, hash, &lookup)?
            {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    fn table_get(&self, f: &TableFile, user_key: &[u8], hash: u64, lookup: &[u8]) -> Result<Option<Found>> {
        let file_no = f.no();
        let t = f.open()?;
        let Some((trailer, value)) = t.get_hashed(user_key, hash, lookup)? else { return Ok(None) };
        let kind = ValueKind::from_u8((trailer & 0xFF) as u8).ok_or_else(|| {
            Error::corruption(TableCache::table_path(&self.dir, file_no), 0, "entry with an unknown kind")
        })?;
        Ok(Some(Found { seq: trailer >> 8, kind, value }))
    }

    /// Point read at `seq`.
    pub(crate) fn get_at(&self, user_key: &[u8], seq: SeqNo) -> Result<Option<Bytes>> {
        let sv = self.sv.load();
        let Some(found) = self.find_version(&sv, user_key, seq)? else { return Ok(None) };
        if found.kind == ValueKind::Delete {
            return Ok(None);
        }
        if sv.max_covering(user_key, seq).is_some_and(|t| t > found.seq) {
            return Ok(None);
        }
        Ok(Some(found.value))
    }

    /// Whether `user_key` changed (a put, delete or covering range delete) after sequence
    /// number `since`, for transaction validation. Runs with the write queue held. Tables are
    /// searched only when one holds an entry newer than `since`: otherwise any such change is
    /// in a memtable.
    pub(crate) fn changed_since(&self, sv: &SuperVersion, user_key: &[u8], since: SeqNo) -> Result<bool> {
        if sv.max_covering(user_key, MAX_SEQ).is_some_and(|s| s > since) {
            return Ok(true);
        }
        let hash = crate::filter::key_hash(user_key);
        for m in std::iter::once(&sv.mem).chain(&sv.imms) {
            if let Some(f) = m.get(user_key, hash, MAX_SEQ) {
                return Ok(f.seq > since);
            }
        }
        if sv.version.max_seq <= since {
            return Ok(false);
        }
        Ok(self.find_version(sv, user_key, MAX_SEQ)?.is_some_and(|f| f.seq > since))
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
    let mut wal = inner.wal.lock();
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
    crate::spare_log::end_wal(&mut wal.writer, true)?;
    flushed
}

/// Freezes the memtable and waits until every frozen memtable is flushed to a table.
fn flush_all(inner: &Arc<DbInner>) -> Result<()> {
    inner.check_poisoned()?;
    {
        let mut wal = inner.wal.lock();
        crate::write::switch_memtable(inner, &mut wal, true)?;
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
        let inner = Arc::new(crate::recovery::open(path.as_ref(), opts, storage)?);
        let threads = crate::background::spawn(&inner)?;
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
        crate::repair::repair(path.as_ref(), opts, storage)
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
            |group, defer_sync| crate::write::lead_group(inner, group, defer_sync),
            |group, led| crate::write::apply_group(inner, group, led),
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

    /// Starts an optimistic transaction reading at a snapshot taken now.
    pub fn transaction(&self) -> Transaction {
        Transaction::new(self.clone())
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
                && crate::compaction::needs_compaction(&inner.opts, &st.version, &st.compaction).is_none();
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
        crate::compaction::compact_all(self.inner())?;
        // The tables it replaced, unless a reader still holds them, are deleted by now.
        self.inner().cleaner.wait_idle();
        Ok(())
    }

    /// Engine statistics (levels, memtables, caches, bytes written).
    pub fn stats(&self) -> Stats {
        crate::stats::collect(self.inner())
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
        crate::verify::verify_detailed(self.inner())
    }

    /// Shuts the engine down: stops background work and syncs the log. Other clones of this
    /// handle get [`Error::Closed`] afterwards.
    pub fn close(self) -> Result<()> {
        shutdown(&self.handle.inner, &self.handle.threads)
    }
}
