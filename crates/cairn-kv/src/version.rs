//! A [`Version`]: the immutable set of live SSTables per level and the range tombstones that
//! moved out of flushed memtables. Every flush or compaction builds a new version from the
//! current one plus a [`VersionEdit`]; readers hold an `Arc<Version>` for as long as they read.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use crate::key::{self, SeqNo};
use crate::range_del::{FragmentedTombstones, RangeTombstone};
use crate::storage::Storage;
use crate::table_cache::TableCache;
use crate::table_reader::TableReader;
use crate::version_edit::{FileInfo, VersionEdit};
use crate::{Error, Result};

/// Removes table files once no version references them.
pub(crate) struct Cleaner {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    pub table_cache: Arc<TableCache>,
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
            // A failure leaves an orphan file that the next open deletes.
            let _ = self.cleaner.storage.remove_file(&TableCache::table_path(&self.cleaner.dir, no));
        }
    }
}

/// The index range of the tables of a sorted level (1+) whose user keys intersect `[lo, hi]`.
pub(crate) fn sorted_overlap(files: &[Arc<TableFile>], lo: &[u8], hi: &[u8]) -> std::ops::Range<usize> {
    let start = files.partition_point(|f| f.info.largest_user() < lo);
    let end = start + files[start..].partition_point(|f| f.info.smallest_user() <= hi);
    start..end
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
        let mut levels: Vec<Vec<Arc<TableFile>>> = self
            .levels
            .iter()
            .enumerate()
            .map(|(l, files)| files.iter().filter(|f| !deleted.contains(&(l, f.no()))).cloned().collect())
            .collect();
        for (level, info) in &edit.new_files {
            let files = levels
                .get_mut(*level)
                .ok_or_else(|| Error::InvalidArgument(format!("MANIFEST names level {level}, more than configured")))?;
            files.push(TableFile::new(info.clone(), cleaner.clone()));
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
