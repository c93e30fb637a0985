//! Leveled compaction: choosing what to compact (level-0 file count and level byte budgets,
//! round-robin within a level) and merging the chosen tables into the next level.

use std::sync::Arc;

use crate::db::{DbInner, State};
use crate::error::IoContext;
use crate::flush::{TableOutput, VersionFilter};
use crate::iter::InternalIterator;
use crate::key;
use crate::merge_iter::{LevelFiles, LevelIter, MergingIterator};
use crate::table_builder::WarmPolicy;
use crate::version::{TableFile, Version};
use crate::version_edit::VersionEdit;
use crate::{Error, Options, Result};

/// A chosen compaction: tables of `level` merged with the overlapping tables of `level + 1`.
pub(crate) struct Compaction {
    pub level: usize,
    pub inputs: Vec<Arc<TableFile>>,
    pub next: Vec<Arc<TableFile>>,
    pub bottommost: bool,
}

impl Compaction {
    fn all(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.inputs.iter().chain(&self.next)
    }
}

fn level_target(opts: &Options, level: usize) -> u64 {
    let mut t = opts.max_bytes_for_level_base;
    for _ in 1..level {
        t = t.saturating_mul(opts.level_size_multiplier);
    }
    t
}

fn user_range<'a>(files: impl Iterator<Item = &'a Arc<TableFile>>) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut r: Option<(Vec<u8>, Vec<u8>)> = None;
    for f in files {
        let (lo, hi) = (f.info.smallest_user(), f.info.largest_user());
        r = Some(match r {
            None => (lo.to_vec(), hi.to_vec()),
            Some((a, b)) => {
                (if lo < a.as_slice() { lo.to_vec() } else { a }, if hi > b.as_slice() { hi.to_vec() } else { b })
            }
        });
    }
    r
}

/// The level most in need of compaction (score >= 1), if any, ignoring tables being compacted.
pub(crate) fn needs_compaction(opts: &Options, st: &State) -> Option<(usize, f64)> {
    let v = &st.version;
    let last = v.levels.len() - 1;
    let mut best: Option<(usize, f64)> = None;
    for level in 0..last {
        let score = if level == 0 {
            if st.l0_compacting {
                continue;
            }
            v.levels[0].len() as f64 / opts.level0_compaction_trigger as f64
        } else {
            let bytes: u64 =
                v.levels[level].iter().filter(|f| !st.compacting.contains(&f.no())).map(|f| f.info.size).sum();
            bytes as f64 / level_target(opts, level) as f64
        };
        if score >= 1.0 && best.is_none_or(|(_, s)| score > s) {
            best = Some((level, score));
        }
    }
    best
}

/// Picks a compaction and marks its tables as being compacted.
pub(crate) fn pick(opts: &Options, st: &mut State) -> Option<Compaction> {
    let (level, _) = needs_compaction(opts, st)?;
    let v = st.version.clone();
    let busy = |st: &State, files: &[Arc<TableFile>]| files.iter().any(|f| st.compacting.contains(&f.no()));
    let c = if level == 0 {
        let inputs = v.levels[0].clone();
        let (lo, hi) = user_range(inputs.iter())?;
        let next = v.overlapping(1, &lo, &hi);
        if busy(st, &next) {
            return None;
        }
        Compaction { level, inputs, next, bottommost: false }
    } else {
        let files = &v.levels[level];
        let ptr = st.compact_pointer[level].clone();
        let start = files.partition_point(|f| f.info.largest_user() <= ptr.as_slice());
        let order = files[start..].iter().chain(&files[..start]);
        let mut chosen = None;
        for f in order {
            if st.compacting.contains(&f.no()) {
                continue;
            }
            let next = v.overlapping(level + 1, f.info.smallest_user(), f.info.largest_user());
            if !busy(st, &next) {
                chosen = Some((f.clone(), next));
                break;
            }
        }
        let (f, next) = chosen?;
        st.compact_pointer[level] = f.info.largest_user().to_vec();
        Compaction { level, inputs: vec![f], next, bottommost: false }
    };
    let (lo, hi) = user_range(c.all())?;
    let bottommost = !v.has_data_below(level + 1, &lo, &hi);
    for f in c.all() {
        st.compacting.insert(f.no());
    }
    if level == 0 {
        st.l0_compacting = true;
    }
    st.running_compactions += 1;
    Some(Compaction { bottommost, ..c })
}

/// Runs a picked compaction and installs its result.
pub(crate) fn run(inner: &Arc<DbInner>, c: Compaction) -> Result<()> {
    run_with(inner, c, false)
}

fn run_with(inner: &Arc<DbInner>, c: Compaction, force_rewrite: bool) -> Result<()> {
    let result = merge_with(inner, &c, force_rewrite);
    let mut st = inner.state.lock();
    for f in c.all() {
        st.compacting.remove(&f.no());
    }
    let level = c.level;
    let mut opened = Vec::new();
    let applied = result.and_then(|edit| {
        opened = edit.new_files.iter().map(|(_, f)| f.file_no).collect();
        crate::background::log_and_apply(inner, &mut st, edit)
    });
    // Release the inputs before announcing completion, so that files the compaction made
    // obsolete are already deleted when waiters wake up.
    drop(c);
    if level == 0 {
        st.l0_compacting = false;
    }
    st.running_compactions -= 1;
    if applied.is_ok() {
        inner.counters.add_compaction();
    }
    inner.bg_cv.notify_all();
    drop(st);
    if applied.is_ok() {
        open_new_tables(inner, &opened);
    }
    applied
}

/// Opens tables just installed by a flush or compaction, so that the data blocks written into
/// the block cache for them ([`crate::block_cache::BlockCache::warm`]) join the cache's
/// eviction at once rather than when the first read opens the table. A table that fails to
/// open is left to the read that needs it, which reports the error.
pub(crate) fn open_new_tables(inner: &DbInner, file_nos: &[u64]) {
    for &no in file_nos {
        if inner.cleaner.table_cache.get(no).is_err() {
            inner.block_cache.forget_pending(no);
        }
    }
}

fn merge_with(inner: &Arc<DbInner>, c: &Compaction, force_rewrite: bool) -> Result<VersionEdit> {
    let out_level = c.level + 1;
    let mut edit = VersionEdit::default();
    for f in &c.inputs {
        edit.deleted_files.push((c.level, f.no()));
    }
    for f in &c.next {
        edit.deleted_files.push((out_level, f.no()));
    }
    // A lone table with nothing to merge with moves down without being rewritten.
    if !force_rewrite && c.inputs.len() == 1 && c.next.is_empty() {
        edit.new_files.push((out_level, c.inputs[0].info.clone()));
        return Ok(edit);
    }
    let snapshots = inner.snapshots.list();
    let version: Arc<Version> = inner.state.lock().version.clone();
    let tombstones = (!version.fragmented.is_empty()).then(|| version.fragmented.clone());
    let max_tombstone = version.tombstones.iter().map(|t| t.seq).max().unwrap_or(0);
    let bounds = split_points(c, inner.opts.max_subcompactions, inner.opts.target_file_size / 4);
    let merge = |lo: Option<&[u8]>, hi: Option<&[u8]>| {
        merge_range(inner, c, lo, hi, &snapshots, tombstones.as_deref(), max_tombstone)
    };
    inner.counters.add_subcompactions(bounds.len() as u64);
    // Key range i is [bounds[i - 1], bounds[i]), open at both ends; range 0 runs on this
    // thread, the others each on a thread of their own.
    let pieces: Vec<Result<Piece>> = if bounds.is_empty() {
        vec![merge(None, None)]
    } else {
        std::thread::scope(|scope| {
            let range = |i: usize| (i.checked_sub(1).map(|j| bounds[j].as_slice()), bounds.get(i).map(Vec::as_slice));
            let others: Vec<_> = (1..=bounds.len())
                .map(|i| {
                    let (lo, hi) = range(i);
                    std::thread::Builder::new()
                        .name("cairn-subcompact".into())
                        .spawn_scoped(scope, move || merge(lo, hi))
                })
                .collect();
            let (lo, hi) = range(0);
            let mut pieces = vec![merge(lo, hi)];
            for t in others {
                pieces.push(match t {
                    Ok(handle) => {
                        handle.join().unwrap_or_else(|_| Err(Error::Poisoned("a subcompaction panicked".into())))
                    }
                    Err(e) => Err(Error::Io { path: inner.dir.clone(), source: e }),
                });
            }
            pieces
        })
    };
    let (mut read_bytes, mut written) = (0, 0);
    let mut files = Vec::new();
    for piece in pieces {
        let piece = piece?;
        read_bytes += piece.read_bytes;
        written += piece.written;
        files.extend(piece.files);
    }
    if !files.is_empty() {
        inner.storage.sync_dir(&inner.dir).at(&inner.dir)?;
    }
    inner.counters.add_compaction_bytes(read_bytes, written);
    for f in files {
        debug_assert!(key::compare_internal(&f.smallest, &f.largest).is_le());
        edit.new_files.push((out_level, f));
    }
    Ok(edit)
}

/// What merging one key range of a compaction produced.
struct Piece {
    files: Vec<crate::version_edit::FileInfo>,
    read_bytes: u64,
    written: u64,
}

/// User keys splitting a compaction into at most `max` key ranges of about equal size for
/// parallel merging (empty: merge it whole). The ranges start at next-level tables, whose
/// bytes are what is balanced. Compactions with fewer than two next-level tables are not
/// split, nor into ranges of less than `min_bytes` of input on average.
fn split_points(c: &Compaction, max: usize, min_bytes: u64) -> Vec<Vec<u8>> {
    let total: u64 = c.next.iter().map(|f| f.info.size).sum();
    let all: u64 = total + c.inputs.iter().map(|f| f.info.size).sum::<u64>();
    let min_bytes = min_bytes.max(1);
    if max < 2 || c.next.len() < 2 || all < 2 * min_bytes {
        return Vec::new();
    }
    let pieces = (max as u64).min(all / min_bytes);
    let mut bounds: Vec<Vec<u8>> = Vec::new();
    let mut acc = 0u64;
    for (i, f) in c.next.iter().enumerate().skip(1) {
        acc += c.next[i - 1].info.size;
        let wanted = bounds.len() as u64 + 1;
        if wanted < pieces && acc * pieces >= total * wanted {
            bounds.push(f.info.smallest_user().to_vec());
        }
    }
    bounds
}

/// Merges the entries of `c` with user keys in `[lo, hi)` (unbounded where `None`) into new
/// tables of the next level.
fn merge_range(
    inner: &Arc<DbInner>,
    c: &Compaction,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    snapshots: &[key::SeqNo],
    tombstones: Option<&crate::range_del::FragmentedTombstones>,
    max_tombstone: key::SeqNo,
) -> Result<Piece> {
    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    if c.level == 0 {
        for f in &c.inputs {
            children.push(Box::new(f.open()?.sequential_iter()));
        }
    } else {
        children.push(Box::new(LevelIter::sequential(LevelFiles::Owned(c.inputs.clone()))));
    }
    if !c.next.is_empty() {
        children.push(Box::new(LevelIter::sequential(LevelFiles::Owned(c.next.clone()))));
    }
    let mut it = MergingIterator::new(children);
    let mut filter = VersionFilter::new(snapshots, c.bottommost, tombstones);
    let mut out = TableOutput::new(&inner.storage, &inner.dir, &inner.opts, inner.opts.target_file_size);
    if inner.opts.prepopulate_block_cache {
        out.warm(inner.block_cache.clone(), WarmPolicy::IfRoom);
    }
    let mut alloc = || inner.state.lock().alloc_file_no();
    let mut read_bytes = 0u64;
    match lo {
        None => it.seek_to_first()?,
        Some(lo) => it.seek(&key::lookup_key(lo, key::MAX_SEQ))?,
    }
    while it.valid() {
        if inner.shutting_down.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::Error::Closed);
        }
        if hi.is_some_and(|hi| key::user_key(it.key()) >= hi) {
            break;
        }
        read_bytes += (it.key().len() + it.value().len()) as u64;
        if filter.keep(it.key()) {
            out.add(it.key(), it.value(), &mut alloc)?;
        }
        it.next()?;
    }
    let (files, written) = out.finish_unsynced(filter.tombstones_applied(max_tombstone))?;
    Ok(Piece { files, read_bytes, written })
}

/// Compacts every level into the next, top to bottom, so that all data ends in the last
/// non-empty level with shadowed versions and (where no snapshot needs them) tombstones gone.
pub(crate) fn compact_all(inner: &Arc<DbInner>) -> Result<()> {
    let levels = inner.opts.num_levels;
    for level in 0..levels - 1 {
        let c = {
            let mut st = inner.state.lock();
            // Wait until background compactions leave the levels alone.
            while st.running_compactions > 0 || st.l0_compacting {
                inner.check_poisoned()?;
                inner.bg_cv.wait(&mut st);
            }
            let v = st.version.clone();
            if v.levels[level].is_empty() {
                continue;
            }
            let inputs = v.levels[level].clone();
            let Some((lo, hi)) = user_range(inputs.iter()) else { continue };
            let next = v.overlapping(level + 1, &lo, &hi);
            let all_lo_hi = user_range(inputs.iter().chain(&next));
            let bottommost = all_lo_hi.is_none_or(|(lo, hi)| !v.has_data_below(level + 1, &lo, &hi));
            for f in inputs.iter().chain(&next) {
                st.compacting.insert(f.no());
            }
            if level == 0 {
                st.l0_compacting = true;
            }
            st.running_compactions += 1;
            // When the next level is rewritten whole and nothing lies deeper, this is the last step.
            let last_step =
                next.len() == v.levels[level + 1].len() && v.levels.iter().skip(level + 2).all(|l| l.is_empty());
            (Compaction { level, inputs, next, bottommost }, last_step)
        };
        // Force a rewrite even for a lone table, so tombstones and old versions are dropped.
        run_with(inner, c.0, true)?;
        if c.1 {
            // Nothing lies below the level just written: everything is at the bottom now.
            break;
        }
    }
    Ok(())
}
