//! Writing sorted entries into SSTables: the shared version filter (which versions a flush or
//! compaction may drop), the output writer that cuts tables at a target size, and the flush of
//! a frozen memtable.

use std::path::Path;
use std::sync::Arc;

use crate::cache::BlockCache;
use crate::error::IoContext;
use crate::flow::pacer::{CHUNK, Pacer};
use crate::iter::InternalIterator;
use crate::iter::merge::MergingIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::memtable::Memtable;
use crate::memtable::range_del::{FragmentedTombstones, RangeTombstone};
use crate::options::TableOptions;
use crate::storage::{Storage, WritableFile};
use crate::table::builder::{TableBuilder, WarmPolicy};
use crate::table::table_cache::TableCache;
use crate::version::edit::FileInfo;
use crate::{Error, Options, Result};

/// Decides which versions survive a flush or compaction.
///
/// Versions are grouped in *stripes* by the live snapshots: two versions of a key are in the
/// same stripe when no snapshot lies between them, and only the newest of a stripe can be seen.
pub(crate) struct VersionFilter<'a> {
    snapshots: &'a [SeqNo],
    /// No older data for these keys exists below the output (point tombstones can go).
    bottommost: bool,
    tombstones: Option<&'a FragmentedTombstones>,
    cur_key: Vec<u8>,
    has_key: bool,
    last_stripe: usize,
    /// Whether an entry hidden by a range tombstone had to be kept for a snapshot.
    kept_covered: bool,
}

impl<'a> VersionFilter<'a> {
    pub fn new(snapshots: &'a [SeqNo], bottommost: bool, tombstones: Option<&'a FragmentedTombstones>) -> Self {
        VersionFilter {
            snapshots,
            bottommost,
            tombstones,
            cur_key: Vec::new(),
            has_key: false,
            last_stripe: 0,
            kept_covered: false,
        }
    }

    /// The promise the output may make: every tombstone up to `max_seq` (the highest one the
    /// filter knew) was applied, unless a hidden entry had to be kept.
    pub fn tombstones_applied(&self, max_seq: SeqNo) -> SeqNo {
        if self.kept_covered { 0 } else { max_seq }
    }

    fn stripe(&self, seq: SeqNo) -> usize {
        self.snapshots.partition_point(|&s| s < seq)
    }

    /// Whether the entry (internal keys arrive in order) must be written out.
    pub fn keep(&mut self, ikey: &[u8]) -> bool {
        let Some(p) = key::parse_internal_key(ikey) else { return true };
        let stripe = self.stripe(p.seq);
        if !self.has_key || self.cur_key != p.user_key {
            self.cur_key.clear();
            self.cur_key.extend_from_slice(p.user_key);
            self.has_key = true;
        } else if stripe == self.last_stripe {
            return false; // a newer version in the same stripe hides it
        }
        self.last_stripe = stripe;
        if let Some(t) = self.tombstones.and_then(|t| t.min_covering_above(p.user_key, p.seq)) {
            if self.stripe(t) == stripe {
                return false; // deleted by a range tombstone no snapshot sees past
            }
            self.kept_covered = true;
        }
        // A point tombstone with nothing older below and no snapshot before it has done its job.
        !(p.kind == ValueKind::Delete && self.bottommost && stripe == 0)
    }
}

/// The data blocks of tables written that hold entries added as hot
/// ([`TableOutput::add_marked`]): per table number, the blocks' numbers, ascending.
pub(crate) type HotBlocks = Vec<(u64, Vec<usize>)>;

/// Writes a sorted stream into one or more tables.
pub(crate) struct TableOutput<'a> {
    storage: &'a Arc<dyn Storage>,
    dir: &'a Path,
    topts: TableOptions,
    target_size: u64,
    builder: Option<TableBuilder>,
    /// The block cache new tables' data blocks go to as they are written, and how.
    warm: Option<(Arc<BlockCache>, WarmPolicy)>,
    /// The pacer, the level compacted out of and the bytes per pacing step, for compaction
    /// output.
    paced: Option<(Arc<Pacer>, usize, u64)>,
    last_user_key: Vec<u8>,
    pub finished: Vec<FileInfo>,
    pub bytes_written: u64,
    /// The hot blocks of the tables finished.
    hot_blocks: HotBlocks,
}

impl<'a> TableOutput<'a> {
    pub fn new(storage: &'a Arc<dyn Storage>, dir: &'a Path, opts: &Options, target_size: u64) -> Self {
        TableOutput {
            storage,
            dir,
            topts: TableOptions::from(opts),
            target_size,
            builder: None,
            warm: None,
            paced: None,
            last_user_key: Vec::new(),
            finished: Vec::new(),
            bytes_written: 0,
            hot_blocks: Vec::new(),
        }
    }

    /// Puts the data blocks of the tables written in `cache` as they are written, by `policy`.
    pub fn warm(&mut self, cache: Arc<BlockCache>, policy: WarmPolicy) {
        self.warm = Some((cache, policy));
    }

    /// Paces the tables written by `pacer`, as output of a compaction out of `level` (or of a
    /// flush: [`crate::flow::pacer::FLUSH`]), in steps of [`CHUNK`] bytes (or a quarter of the
    /// expected table size, `table_size`, if smaller).
    pub fn pace(&mut self, pacer: Arc<Pacer>, level: usize, table_size: u64) {
        let chunk = CHUNK.min(table_size / 4).max(4096);
        self.paced = Some((pacer, level, chunk));
    }

    /// Adds an entry, starting a new table (numbered by `alloc`) when needed. Tables are only
    /// cut between user keys, so one key's versions never span two tables of a level.
    pub fn add(&mut self, ikey: &[u8], value: &[u8], alloc: &mut dyn FnMut() -> Result<u64>) -> Result<()> {
        self.add_marked(ikey, value, false, alloc)
    }

    /// [`TableOutput::add`], marking the entry as read from a block readers come back to
    /// when `hot` ([`TableBuilder::add_marked`]).
    pub fn add_marked(
        &mut self,
        ikey: &[u8],
        value: &[u8],
        hot: bool,
        alloc: &mut dyn FnMut() -> Result<u64>,
    ) -> Result<()> {
        let uk = key::user_key(ikey);
        if let Some(b) = &self.builder
            && b.estimated_size() >= self.target_size
            && uk != self.last_user_key.as_slice()
        {
            self.finish_current()?;
        }
        if self.builder.is_none() {
            let no = alloc()?;
            let path = TableCache::table_path(self.dir, no);
            let mut file = self.storage.create_new(&path).at(&path)?;
            if let Some((pacer, level, chunk)) = &self.paced {
                file = Box::new(PacedFile { file, pacer: pacer.clone(), level: *level, chunk: *chunk, unpaced: 0 });
            }
            let mut b = TableBuilder::new(file, path, self.topts);
            if let Some((cache, policy)) = &self.warm {
                b.warm(cache.clone(), no, *policy);
            }
            self.builder = Some(b);
            self.finished.push(FileInfo {
                file_no: no,
                size: 0,
                smallest: Default::default(),
                largest: Default::default(),
                min_seq: 0,
                max_seq: 0,
                num_entries: 0,
                num_deletions: 0,
                tombstones_applied: 0,
            });
        }
        if let Some(b) = self.builder.as_mut() {
            b.add_marked(ikey, value, hot)?;
        }
        self.last_user_key.clear();
        self.last_user_key.extend_from_slice(uk);
        Ok(())
    }

    /// Marks the data block holding the last entry added as hot, as [`TableOutput::add_marked`]
    /// does, if that entry's user key is `user_key`: for an older version of the key, read from
    /// a hot block and dropped (shadowed by the entry added). The key is what readers come back
    /// to; its newest version now answers them.
    pub fn mark_last_hot(&mut self, user_key: &[u8]) {
        if let Some(b) = self.builder.as_mut()
            && self.last_user_key == user_key
        {
            b.mark_last_hot();
        }
    }

    fn finish_current(&mut self) -> Result<()> {
        let Some(b) = self.builder.take() else { return Ok(()) };
        let mut t = b.finish()?;
        let f = self.finished.last_mut().ok_or_else(|| Error::InvalidArgument("no table in progress".into()))?;
        if !t.hot_blocks.is_empty() {
            self.hot_blocks.push((f.file_no, std::mem::take(&mut t.hot_blocks)));
        }
        f.size = t.file_size;
        f.smallest = t.smallest.into();
        f.largest = t.largest.into();
        f.min_seq = t.min_seq;
        f.max_seq = t.max_seq;
        f.num_entries = t.num_entries;
        f.num_deletions = t.num_deletions;
        self.bytes_written += t.file_size;
        Ok(())
    }

    /// Finishes the last table and makes the new directory entries durable. `applied` is
    /// recorded in every table as [`FileInfo::tombstones_applied`].
    pub fn finish(self, applied: SeqNo) -> Result<(Vec<FileInfo>, u64)> {
        let (storage, dir) = (self.storage, self.dir);
        let (files, written) = self.finish_unsynced(applied)?;
        if !files.is_empty() {
            storage.sync_dir(dir).at(dir)?;
        }
        Ok((files, written))
    }

    /// [`TableOutput::finish`] without making the directory entries durable: the caller does
    /// that (once for several outputs).
    pub fn finish_unsynced(self, applied: SeqNo) -> Result<(Vec<FileInfo>, u64)> {
        self.finish_unsynced_hot(applied).map(|(files, written, _)| (files, written))
    }

    /// [`TableOutput::finish_unsynced`], with the hot data blocks of each table written (by
    /// table number).
    pub fn finish_unsynced_hot(mut self, applied: SeqNo) -> Result<(Vec<FileInfo>, u64, HotBlocks)> {
        self.finish_current()?;
        for f in &mut self.finished {
            f.tombstones_applied = applied;
        }
        Ok((self.finished, self.bytes_written, self.hot_blocks))
    }
}

/// A compaction's output file: while the pacer is on, every `chunk` bytes it waits as the
/// pacer asks and starts writing them back to the device (see [`crate::flow::pacer`]).
struct PacedFile {
    file: Box<dyn WritableFile>,
    pacer: Arc<Pacer>,
    level: usize,
    chunk: u64,
    unpaced: u64,
}

impl WritableFile for PacedFile {
    fn append(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.file.append(data)?;
        self.unpaced += data.len() as u64;
        if self.unpaced >= self.chunk {
            if self.pacer.pace(self.level, self.unpaced) {
                self.file.write_back()?;
            }
            self.unpaced = 0;
        }
        Ok(())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync()
    }
    fn len(&self) -> u64 {
        self.file.len()
    }
    fn finish(&mut self) -> std::io::Result<()> {
        self.file.finish()
    }
    fn seal(&mut self) -> std::io::Result<()> {
        self.file.seal()
    }
    fn write_back(&mut self) -> std::io::Result<()> {
        self.file.write_back()
    }
    fn sync_later(&mut self) -> std::io::Result<crate::storage::DeferredSync> {
        self.file.sync_later()
    }
}

/// Writes the live content of one or more frozen memtables (oldest first) as the single table
/// `file_no`; `None` when nothing survives the filter. `snapshots` are the live snapshots,
/// ascending. `setup` prepares the output before the first entry (a flush warms the block
/// cache and is paced there).
///
/// Several memtables make one table, as RocksDB's flush does when it finds more than one
/// waiting: level 0 gains one table, not one per memtable, and each scan and each level-0
/// compaction then merges one table fewer per memtable. Their sequence ranges do not overlap
/// (each was frozen before the next took writes), so the table's range still lies wholly above
/// or below every other level-0 table's; a newer memtable's range tombstones drop what they
/// hide in the older ones that no snapshot sees.
pub(crate) fn build_table(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    opts: &Options,
    file_no: u64,
    mems: &[Arc<Memtable>],
    snapshots: &[SeqNo],
    setup: &dyn Fn(&mut TableOutput<'_>),
) -> Result<Option<FileInfo>> {
    let tombstones: Vec<RangeTombstone> = mems.iter().flat_map(|m| m.range_tombstones()).collect();
    let max_tombstone = tombstones.iter().map(|t| t.seq).max().unwrap_or(0);
    let frag = match mems {
        [one] => one.fragmented_tombstones(),
        _ if tombstones.is_empty() => None,
        _ => Some(Arc::new(FragmentedTombstones::new(&tombstones))),
    };
    let mut filter = VersionFilter::new(snapshots, false, frag.as_deref());
    let mut out = TableOutput::new(storage, dir, opts, u64::MAX);
    setup(&mut out);
    let mut alloc = || Ok(file_no);
    if let [one] = mems {
        // Walking the skiplist's links directly is cheaper than a merge of one.
        for (k, v) in one.entries() {
            if filter.keep(k) {
                out.add(k, v, &mut alloc)?;
            }
        }
    } else {
        let mut merged = MergingIterator::new(mems.iter().map(|m| m.iter()).collect());
        merged.seek_to_first()?;
        while merged.valid() {
            if filter.keep(merged.key()) {
                out.add(merged.key(), merged.value(), &mut alloc)?;
            }
            merged.next()?;
        }
    }
    let (files, _) = out.finish(filter.tombstones_applied(max_tombstone))?;
    Ok(files.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::internal_key;

    fn run(snaps: &[SeqNo], bottom: bool, entries: &[(&str, SeqNo, ValueKind)]) -> Vec<(String, SeqNo)> {
        let mut f = VersionFilter::new(snaps, bottom, None);
        entries
            .iter()
            .filter(|(k, s, kind)| f.keep(&internal_key(k.as_bytes(), *s, *kind as u8)))
            .map(|(k, s, _)| (k.to_string(), *s))
            .collect()
    }

    #[test]
    fn keeps_newest_per_stripe() {
        use ValueKind::*;
        let e = [("a", 9, Put), ("a", 7, Put), ("a", 3, Put), ("a", 1, Put), ("b", 2, Put)];
        assert_eq!(run(&[], false, &e), vec![("a".into(), 9), ("b".into(), 2)]);
        // A snapshot at 5 still sees a@3.
        assert_eq!(run(&[5], false, &e), vec![("a".into(), 9), ("a".into(), 3), ("b".into(), 2)]);
    }

    #[test]
    fn tombstones_dropped_only_at_bottom_without_snapshots() {
        use ValueKind::*;
        let e = [("a", 9, Delete), ("a", 3, Put)];
        assert_eq!(run(&[], false, &e), vec![("a".into(), 9)]);
        assert_eq!(run(&[], true, &e), vec![]);
        assert_eq!(run(&[5], true, &e), vec![("a".into(), 9), ("a".into(), 3)]);
    }
}
