//! The engine's shared state ([`DbInner`]): what the [`crate::Db`] handle, the write path,
//! flushes and compactions share behind one `Arc`; the [`State`] they change under its lock and
//! the [`SuperVersion`] readers see; the read path; and [`log_and_apply`], which makes a
//! version edit durable and installs it.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::cache::BlockCache;
use crate::db::counters::Counters;
use crate::db::snapshot_list::SnapshotList;
use crate::key::{self, MAX_SEQ, SeqNo, ValueKind};
use crate::memtable::{Found, Memtable};
use crate::storage::{FileLock, Storage};
use crate::table::table_cache::TableCache;
use crate::version::edit::VersionEdit;
use crate::version::manifest::ManifestWriter;
use crate::version::{Cleaner, TableFile, Version};
use crate::write::lead::Lead;
use crate::write::queue::WriteQueue;
use crate::{Error, Options, Result};

/// What readers need: the memtables and the version, swapped atomically as a whole.
pub(crate) struct SuperVersion {
    pub mem: Arc<Memtable>,
    /// Frozen memtables, newest first.
    pub imms: Vec<Arc<Memtable>>,
    pub version: Arc<Version>,
    /// `version`'s level-0 weight ([`crate::flow::writers::level0_weight`]), which every write checks.
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
    pub files: crate::version::manifest::FileNumbers,
    /// The compactions running and what they hold.
    pub compaction: crate::compaction::state::Compacting,
    pub flushing: bool,
}

impl State {
    /// Hands out a file number (see [`crate::version::manifest::FileNumbers`]); fails only if the
    /// MANIFEST edit that must first raise its limit fails.
    pub fn alloc_file_no(&mut self) -> Result<u64> {
        self.files.alloc(&mut self.manifest)
    }

    /// The oldest write-ahead log still needed: that of the oldest memtable not flushed.
    pub fn oldest_log(&self) -> u64 {
        self.imms.front().unwrap_or(&self.mem).wal_number()
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
    pub seqs: crate::write::sequences::Sequences,
    pub queue: WriteQueue,
    /// The write path's lead step: the write-ahead log in use (see [`Lead`]).
    pub lead: Mutex<Lead>,
    pub snapshots: SnapshotList,
    poisoned: AtomicBool,
    poison_reason: Mutex<Option<String>>,
    pub shutting_down: AtomicBool,
    pub counters: Counters,
    /// Paces compactions while synced writes or device reads happen ([`Options::sync_pacing`],
    /// [`Options::read_pacing`]).
    pub pacer: Arc<crate::flow::pacer::Pacer>,
    #[cfg(feature = "failpoints")]
    pub failpoint_hook: Mutex<Option<FailpointHook>>,
    /// What opening found and did.
    pub recovery: crate::db::recovery_report::RecoveryReport,
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
        lead: Lead,
        last_seq: SeqNo,
        lock: Box<dyn FileLock>,
        recovery: crate::db::recovery_report::RecoveryReport,
    ) -> Self {
        let sv = SuperVersion::of(&state, opts.memtable_size);
        let pacer = Arc::new(crate::flow::pacer::Pacer::new(
            opts.sync_pacing,
            opts.read_pacing,
            block_cache.device_reads().clone(),
        ));
        DbInner {
            dir,
            opts,
            storage,
            block_cache,
            cleaner,
            state: Mutex::new(state),
            bg_cv: Condvar::new(),
            sv: ArcSwap::from_pointee(sv),
            seqs: crate::write::sequences::Sequences::new(last_seq),
            queue: WriteQueue::default(),
            lead: Mutex::new(lead),
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
        self.pacer.set_urgent(sv.l0_weight >= crate::flow::pacer::l0_unpaced_weight(&self.opts));
        self.pacer.set_flush_urgent(crate::flow::pacer::flush_urgent(&self.opts, state.imms.len()));
        self.sv.store(Arc::new(sv));
    }

    /// The newest version of `user_key` at or below `seq` in `sv`, ignoring range tombstones.
    pub(crate) fn find_version(&self, sv: &SuperVersion, user_key: &[u8], seq: SeqNo) -> Result<Option<Found>> {
        let hash = crate::key::key_hash(user_key);
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
        let hash = crate::key::key_hash(user_key);
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

/// A MANIFEST larger than this is rewritten as a single snapshot edit.
const MANIFEST_ROLL_BYTES: u64 = 64 << 20;

/// Makes `edit` durable and installs the resulting version. Tables the edit removes are deleted
/// once no reader uses them. Range tombstones that no table needs any more are dropped.
pub(crate) fn log_and_apply(inner: &DbInner, st: &mut State, mut edit: VersionEdit) -> Result<()> {
    let limit = st.files.edit_limit();
    edit.next_file_number = Some(limit);
    edit.last_seq = Some(inner.visible_seq());
    let mut next = st.version.apply(&edit, &inner.cleaner)?;
    let obsolete = next.obsolete_tombstones();
    if !obsolete.is_empty() {
        edit.removed_tombstones = obsolete;
        next = st.version.apply(&edit, &inner.cleaner)?;
    }
    let res = if st.manifest.len() > MANIFEST_ROLL_BYTES {
        st.alloc_file_no().and_then(|no| {
            let limit = st.files.edit_limit();
            let mut first = next.snapshot_edit();
            first.log_number = edit.log_number.or(Some(st.oldest_log()));
            first.next_file_number = Some(limit);
            first.last_seq = edit.last_seq;
            ManifestWriter::create(&inner.storage, &inner.dir, no, &first).map(|m| {
                st.files.recorded(limit);
                let old = std::mem::replace(&mut st.manifest, m);
                let _ = inner.storage.remove_file(&inner.dir.join(crate::version::manifest::manifest_name(old.number)));
            })
        })
    } else {
        st.manifest.append(&edit).map(|()| st.files.recorded(limit))
    };
    if let Err(e) = res {
        inner.poison(format!("MANIFEST write failed: {e}"));
        return Err(e);
    }
    let removed: std::collections::HashSet<u64> = edit.deleted_files.iter().map(|&(_, no)| no).collect();
    let live = next.all_file_numbers();
    for f in st.version.levels.iter().flatten() {
        if removed.contains(&f.no()) && !live.contains(&f.no()) {
            f.mark_obsolete();
        }
    }
    st.version = Arc::new(next);
    inner.install_super_version(st);
    Ok(())
}
