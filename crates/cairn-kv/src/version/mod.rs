//! A [`Version`]: the immutable set of live SSTables per level and the range tombstones that
//! moved out of flushed memtables. Every flush or compaction builds a new version from the
//! current one plus a [`VersionEdit`]; readers hold an `Arc<Version>` for as long as they read.

pub mod edit;
pub mod level_iter;
pub mod manifest;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::key::{self, SeqNo};
use crate::memtable::range_del::{FragmentedTombstones, RangeTombstone};
use crate::storage::Storage;
use crate::table::reader::TableReader;
use crate::table::table_cache::TableCache;
use crate::version::edit::{FileInfo, VersionEdit};
use crate::{Error, Result};

/// Removes table files once no version references them, on a thread of its own.
///
/// Deleting a file can take as long as a device write: a file system mounted with online
/// discard (ext4 `-o discard`, common on cloud disks) trims the file's blocks before `unlink`
/// returns, tens to hundreds of milliseconds with compactions keeping the disk busy
/// (`docs/design/2026-12-07-engine-measurements.md`). The last reference to
/// a table is often dropped by a reader (with the superseded view of the tree it read through)
/// or under the engine's state lock, so the deletion is queued here instead, one file at a
/// time.
pub(crate) struct Cleaner {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    pub table_cache: Arc<TableCache>,
    queue: Arc<DeleteQueue>,
    /// The deleting thread; `None` if it could not be started (files are then deleted by the
    /// thread that drops them).
    deleter: Option<JoinHandle<()>>,
}

/// Files waiting for the deleting thread.
#[derive(Default)]
struct DeleteQueue {
    state: Mutex<DeleteState>,
    /// Signalled when a file is queued, the thread is to stop, or the queue drains.
    cv: Condvar,
}

#[derive(Default)]
struct DeleteState {
    files: VecDeque<PathBuf>,
    /// A file taken from the queue and being deleted.
    busy: bool,
    stop: bool,
}

impl Cleaner {
    pub fn new(storage: Arc<dyn Storage>, dir: PathBuf, table_cache: Arc<TableCache>) -> Arc<Cleaner> {
        let queue = Arc::new(DeleteQueue::default());
        let (q, s) = (queue.clone(), storage.clone());
        let deleter = std::thread::Builder::new().name("cairn-delete".into()).spawn(move || delete_files(&q, &*s)).ok();
        Arc::new(Cleaner { storage, dir, table_cache, queue, deleter })
    }

    /// Deletes table `file_no`'s file on the deleting thread. A failure leaves an orphan file,
    /// which the next open deletes.
    fn remove_table(&self, file_no: u64) {
        let path = TableCache::table_path(&self.dir, file_no);
        if self.deleter.is_none() {
            let _ = self.storage.remove_file(&path);
            return;
        }
        self.queue.state.lock().files.push_back(path);
        self.queue.cv.notify_all();
    }

    /// Waits until every table file queued for deletion so far is deleted.
    pub fn wait_idle(&self) {
        let mut st = self.queue.state.lock();
        while !st.files.is_empty() || st.busy {
            self.queue.cv.wait(&mut st);
        }
    }
}

impl Drop for Cleaner {
    /// Deletes what is still queued, then stops the thread.
    fn drop(&mut self) {
        self.queue.state.lock().stop = true;
        self.queue.cv.notify_all();
        if let Some(t) = self.deleter.take() {
            let _ = t.join();
        }
    }
}

/// The deleting thread: deletes queued files in order until told to stop with none left.
fn delete_files(queue: &DeleteQueue, storage: &dyn Storage) {
    let mut st = queue.state.lock();
    loop {
        if let Some(path) = st.files.pop_front() {
            st.busy = true;
            drop(st);
            let _ = storage.remove_file(&path);
            st = queue.state.lock();
            st.busy = false;
            queue.cv.notify_all();
        } else if st.stop {
            return;
        } else {
            queue.cv.wait(&mut st);
        }
    }
}

/// A live SSTable. When the last version holding it is dropped after a compaction marked it
/// obsolete, the file is evicted from the table cache and deleted.
pub(crate) struct TableFile {
    pub info: FileInfo,
    obsolete: AtomicBool,
    cleaner: Arc<Cleaner>,
    /// The open table, once the table cache opened it: reads reach it without a cache lookup
    /// for as long as the cache keeps it open (a weak reference does not keep the file open).
    reader: OnceLock<Weak<TableReader>>,
}

impl TableFile {
    pub fn new(info: FileInfo, cleaner: Arc<Cleaner>) -> Arc<Self> {
        Arc::new(TableFile { info, obsolete: AtomicBool::new(false), cleaner, reader: OnceLock::new() })
    }

    /// The open table, from the table cache (opening it on a miss).
    pub fn open(&self) -> Result<Arc<TableReader>> {
        if let Some(t) = self.reader.get().and_then(Weak::upgrade) {
            return Ok(t);
        }
        let t = self.cleaner.table_cache.get(self.info.file_no)?;
        let _ = self.reader.set(Arc::downgrade(&t));
        Ok(t)
    }

    /// Marks the file for deletion once unreferenced (its removal is durable in the MANIFEST).
    pub fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }

    pub fn no(&self) -> u64 {
        self.info.file_no
    }

    /// Whether the file's user-key range intersects `[lo, hi]`.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.info.smallest_user() <= hi && lo <= self.info.largest_user()
    }
}

impl Drop for TableFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            let no = self.info.file_no;
            self.cleaner.table_cache.forget(no);
            self.cleaner.remove_table(no);
        }
    }
}

/// The index range of the tables of a sorted level (1+) whose user keys intersect `[lo, hi]`.
pub(crate) fn sorted_overlap(files: &[Arc<TableFile>], lo: &[u8], hi: &[u8]) -> std::ops::Range<usize> {
    let start = files.partition_point(|f| f.info.largest_user() < lo);
    let end = start + files[start..].partition_point(|f| f.info.smallest_user() <= hi);
    start..end
}

/// What level-0 tables `files` weigh against the level-0 triggers
/// ([`crate::flow::writers::level0_weight`] of their number and bytes).
pub(crate) fn l0_weight<'a>(files: impl IntoIterator<Item = &'a Arc<TableFile>>, memtable_size: usize) -> usize {
    let (mut tables, mut bytes) = (0usize, 0u64);
    for f in files {
        tables += 1;
        bytes = bytes.saturating_add(f.info.size);
    }
    crate::flow::writers::level0_weight(tables, bytes, memtable_size)
}

/// The live tables and version-level range tombstones.
pub(crate) struct Version {
    /// `levels[0]` is newest first; deeper levels are sorted by key and do not overlap.
    pub levels: Vec<Vec<Arc<TableFile>>>,
    /// Range tombstones of flushed memtables, ordered by sequence number.
    pub tombstones: Vec<RangeTombstone>,
    pub fragmented: Arc<FragmentedTombstones>,
    /// Highest sequence number of any entry in any table (0 when there are none).
    pub max_seq: SeqNo,
}

impl Version {
    pub fn empty(num_levels: usize) -> Self {
        Version {
            levels: vec![Vec::new(); num_levels],
            tombstones: Vec::new(),
            fragmented: Arc::new(FragmentedTombstones::default()),
            max_seq: 0,
        }
    }

    /// Builds the version that results from applying `edit`. Files removed by the edit are not
    /// marked obsolete here; the caller does that once the edit is durable.
    pub fn apply(&self, edit: &VersionEdit, cleaner: &Arc<Cleaner>) -> Result<Version> {
        let deleted: HashSet<(usize, u64)> = edit.deleted_files.iter().copied().collect();
        // Tables the edit removes, by number: one it also adds to another level (a move) keeps
        // its object: versions from before the move hold it, and when a later edit deletes the
        // file it is that one object, not a copy, that is marked obsolete and outlives every
        // reader.
        let mut removed: HashMap<u64, Arc<TableFile>> = HashMap::new();
        let mut levels: Vec<Vec<Arc<TableFile>>> = Vec::with_capacity(self.levels.len());
        for (l, files) in self.levels.iter().enumerate() {
            let mut kept = Vec::with_capacity(files.len());
            for f in files {
                if deleted.contains(&(l, f.no())) {
                    removed.insert(f.no(), f.clone());
                } else {
                    kept.push(f.clone());
                }
            }
            levels.push(kept);
        }
        for (level, info) in &edit.new_files {
            let files = levels
                .get_mut(*level)
                .ok_or_else(|| Error::InvalidArgument(format!("MANIFEST names level {level}, more than configured")))?;
            // A file is never rewritten under its number, so a moved table's info is the one
            // it had (compaction moves a table with a clone of its info).
            match removed.remove(&info.file_no) {
                Some(f) => files.push(f),
                None => files.push(TableFile::new(info.clone(), cleaner.clone())),
            }
        }
        levels[0].sort_by(|a, b| b.info.max_seq.cmp(&a.info.max_seq).then(b.no().cmp(&a.no())));
        for files in levels.iter_mut().skip(1) {
            files.sort_by(|a, b| key::compare_internal(&a.info.smallest, &b.info.smallest));
        }
        let mut tombstones: Vec<RangeTombstone> =
            self.tombstones.iter().filter(|t| !edit.removed_tombstones.contains(&t.seq)).cloned().collect();
        tombstones.extend(edit.added_tombstones.iter().cloned());
        tombstones.sort_by_key(|t| t.seq);
        let fragmented = if tombstones.len() == self.tombstones.len() && edit.added_tombstones.is_empty() {
            self.fragmented.clone()
        } else {
            Arc::new(FragmentedTombstones::new(&tombstones))
        };
        let max_seq = levels.iter().flatten().map(|f| f.info.max_seq).max().unwrap_or(0);
        Ok(Version { levels, tombstones, fragmented, max_seq })
    }

    /// Level 0's weight as the write triggers and compaction scores count it
    /// ([`l0_weight`]), with flushes of `memtable_size` bytes.
    pub fn l0_weight(&self, memtable_size: usize) -> usize {
        l0_weight(&self.levels[0], memtable_size)
    }

    /// Checks that levels 1+ are sorted and non-overlapping (used when opening).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        for (l, files) in self.levels.iter().enumerate().skip(1) {
            for w in files.windows(2) {
                if w[0].info.largest_user() >= w[1].info.smallest_user() {
                    return Err(format!("level {l}: tables {} and {} overlap", w[0].no(), w[1].no()));
                }
            }
        }
        Ok(())
    }

    /// Tables of `level` whose key range intersects `[lo, hi]` (user keys).
    pub fn overlapping(&self, level: usize, lo: &[u8], hi: &[u8]) -> Vec<Arc<TableFile>> {
        let files = &self.levels[level];
        if level == 0 {
            return files.iter().filter(|f| f.overlaps(lo, hi)).cloned().collect();
        }
        files[sorted_overlap(files, lo, hi)].to_vec()
    }

    /// The table of a sorted level (1+) that may hold `user_key`.
    pub fn file_for_key(&self, level: usize, user_key: &[u8]) -> Option<&Arc<TableFile>> {
        let files = &self.levels[level];
        let i = files.partition_point(|f| f.info.largest_user() < user_key);
        files.get(i).filter(|f| f.info.smallest_user() <= user_key)
    }

    /// Whether any table below `level` intersects `[lo, hi]`.
    pub fn has_data_below(&self, level: usize, lo: &[u8], hi: &[u8]) -> bool {
        (level + 1..self.levels.len()).any(|l| !self.overlapping(l, lo, hi).is_empty())
    }

    /// Range tombstones that can be forgotten: no table intersecting the range holds data older
    /// than the tombstone.
    pub fn obsolete_tombstones(&self) -> Vec<SeqNo> {
        self.tombstones
            .iter()
            .filter(|t| {
                !self.levels.iter().flatten().any(|f| {
                    f.info.min_seq < t.seq
                        && f.info.tombstones_applied < t.seq
                        && f.info.smallest_user() < t.end.as_ref()
                        && t.start.as_ref() <= f.info.largest_user()
                })
            })
            .map(|t| t.seq)
            .collect()
    }

    /// The edit that recreates this version from nothing (first record of a new MANIFEST).
    pub fn snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            new_files: self
                .levels
                .iter()
                .enumerate()
                .flat_map(|(l, files)| files.iter().map(move |f| (l, f.info.clone())))
                .collect(),
            added_tombstones: self.tombstones.clone(),
            ..VersionEdit::default()
        }
    }

    pub fn all_file_numbers(&self) -> HashSet<u64> {
        self.levels.iter().flatten().map(|f| f.no()).collect()
    }
}

/// A table over `lo..=hi` of `size` bytes for tests (never opened).
#[cfg(test)]
pub(crate) fn test_table(cleaner: &Arc<Cleaner>, no: u64, lo: &str, hi: &str, size: u64) -> Arc<TableFile> {
    let kind = key::ValueKind::Put as u8;
    let info = FileInfo {
        file_no: no,
        size,
        smallest: key::internal_key(lo.as_bytes(), 1, kind).into(),
        largest: key::internal_key(hi.as_bytes(), 1, kind).into(),
        min_seq: 1,
        max_seq: 1,
        num_entries: 1,
        num_deletions: 0,
        tombstones_applied: 0,
    };
    TableFile::new(info, cleaner.clone())
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::path::Path;
    use std::sync::mpsc;

    use super::*;
    use crate::cache::BlockCache;
    use crate::storage::{FileLock, RandomAccessFile, WritableFile};
    use crate::{MemStorage, Storage};

    /// A [`MemStorage`] whose `remove_file` reports the thread it runs on and then waits for
    /// the test's go-ahead.
    struct GatedRemove {
        inner: MemStorage,
        removing: Mutex<mpsc::Sender<Option<String>>>,
        go: Mutex<mpsc::Receiver<()>>,
    }

    impl Storage for GatedRemove {
        fn create_dir_all(&self, path: &Path) -> io::Result<()> {
            self.inner.create_dir_all(path)
        }
        fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
            self.inner.create(path)
        }
        fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
            self.inner.open_read(path)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            self.inner.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            let _ = self.removing.lock().send(std::thread::current().name().map(str::to_string));
            let _ = self.go.lock().recv();
            self.inner.remove_file(path)
        }
        fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
            self.inner.list_dir(path)
        }
        fn exists(&self, path: &Path) -> bool {
            self.inner.exists(path)
        }
        fn sync_dir(&self, path: &Path) -> io::Result<()> {
            self.inner.sync_dir(path)
        }
        fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
            self.inner.lock(path)
        }
    }

    /// A cleaner over a gated storage holding tables 1 to `n` (empty files), with the channel
    /// that reports removals and the one that lets them go ahead.
    fn gated(n: u64) -> (MemStorage, Arc<Cleaner>, mpsc::Receiver<Option<String>>, mpsc::Sender<()>) {
        let mem = MemStorage::new();
        let (removing_tx, removing) = mpsc::channel();
        let (go, go_rx) = mpsc::channel();
        let storage: Arc<dyn Storage> =
            Arc::new(GatedRemove { inner: mem.clone(), removing: Mutex::new(removing_tx), go: Mutex::new(go_rx) });
        let dir = PathBuf::from("/db");
        for no in 1..=n {
            storage.create(&TableCache::table_path(&dir, no)).unwrap().finish().unwrap();
        }
        let table_cache =
            Arc::new(TableCache::new(storage.clone(), dir.clone(), 8, Arc::new(BlockCache::new(1 << 20))));
        (mem, Cleaner::new(storage, dir, table_cache), removing, go)
    }

    fn obsolete_table(cleaner: &Arc<Cleaner>, no: u64) -> Arc<TableFile> {
        let t = test_table(cleaner, no, "a", "z", 0);
        t.mark_obsolete();
        t
    }

    /// Dropping the last reference to an obsolete table returns while its file is still being
    /// deleted, on the cleaner's thread; `wait_idle` returns once it is gone.
    #[test]
    fn obsolete_tables_are_deleted_on_the_cleaners_thread() {
        let (mem, cleaner, removing, go) = gated(1);
        let path = TableCache::table_path(Path::new("/db"), 1);
        drop(obsolete_table(&cleaner, 1));
        let thread = removing.recv().unwrap();
        assert_eq!(thread.as_deref(), Some("cairn-delete"));
        assert!(mem.exists(&path), "the deletion waits for the gate, not the dropping thread");
        go.send(()).unwrap();
        cleaner.wait_idle();
        assert!(!mem.exists(&path));
        // A table that is not obsolete keeps its file.
        let live = obsolete_table(&cleaner, 2);
        live.obsolete.store(false, Ordering::Release);
        drop(live);
        cleaner.wait_idle();
        assert!(removing.try_recv().is_err());
    }

    /// A table moved to another level keeps its object, so a version from before the move (an
    /// iterator's) keeps the file when a later edit deletes it from its new level. With a copy
    /// made for the move, the copy was marked obsolete and its drop deleted the file under the
    /// old version's reader (an iterator's reopen then failed with "not found").
    #[test]
    fn a_moved_table_is_not_deleted_under_a_version_from_before_the_move() {
        let (mem, cleaner, removing, go) = gated(2);
        let path = TableCache::table_path(Path::new("/db"), 1);
        let mut before = Version::empty(7);
        before.levels[0].push(test_table(&cleaner, 1, "a", "m", 10));
        let info = before.levels[0][0].info.clone();
        let mut mv = VersionEdit::default();
        mv.deleted_files.push((0, 1));
        mv.new_files.push((4, info.clone()));
        let moved = before.apply(&mv, &cleaner).unwrap();
        assert!(Arc::ptr_eq(&before.levels[0][0], &moved.levels[4][0]));
        // A compaction rewrites the table into table 2 and marks it obsolete, as
        // `log_and_apply` does with the files it removes.
        let mut rewrite = VersionEdit::default();
        rewrite.deleted_files.push((4, 1));
        rewrite.new_files.push((4, FileInfo { file_no: 2, ..info }));
        let after = moved.apply(&rewrite, &cleaner).unwrap();
        moved.levels[4][0].mark_obsolete();
        drop(moved);
        drop(after);
        cleaner.wait_idle();
        assert!(removing.try_recv().is_err(), "deleted while a version from before the move holds it");
        assert!(mem.exists(&path));
        drop(before);
        assert!(removing.recv().is_ok());
        go.send(()).unwrap();
        cleaner.wait_idle();
        assert!(!mem.exists(&path));
    }

    /// Files still queued when the cleaner is dropped are deleted before the drop returns.
    #[test]
    fn dropping_the_cleaner_deletes_what_is_queued() {
        let (mem, cleaner, removing, go) = gated(3);
        for no in 1..=3 {
            drop(obsolete_table(&cleaner, no));
            go.send(()).unwrap();
        }
        drop(cleaner);
        assert_eq!(removing.try_iter().count(), 3);
        for no in 1..=3 {
            assert!(!mem.exists(&TableCache::table_path(Path::new("/db"), no)), "table {no} left behind");
        }
    }
}
