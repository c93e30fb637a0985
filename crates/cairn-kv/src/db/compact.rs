//! Running a compaction: its inputs merged (split into subcompactions over key ranges of about
//! equal bytes) into new tables of the output level, installed as one version edit;
//! [`compact_all`] for `Db::compact_all`. It lives in `db` because it runs on the engine's
//! shared state ([`DbInner`]: the table cache, the pacer, the version to install into);
//! `crate::compaction` picks compactions and writes their output without it.

use std::sync::Arc;

use crate::compaction::output::{TableOutput, VersionFilter};
use crate::compaction::state::{Compaction, total_size, user_range};
use crate::db::inner::DbInner;
use crate::error::IoContext;
use crate::iter::InternalIterator;
use crate::iter::merge::MergingIterator;
use crate::key;
use crate::table::builder::WarmPolicy;
use crate::version::Version;
use crate::version::edit::VersionEdit;
use crate::version::level_iter::{LevelFiles, LevelIter};
use crate::{Error, Result};

/// Runs a picked compaction and installs its result.
pub(crate) fn run(inner: &Arc<DbInner>, c: Compaction) -> Result<()> {
    run_with(inner, c, false)
}

fn run_with(inner: &Arc<DbInner>, c: Compaction, force_rewrite: bool) -> Result<()> {
    let mut hot = Vec::new();
    let result = merge_with(inner, &c, force_rewrite, &mut hot);
    let mut st = inner.state.lock();
    for f in c.all() {
        st.compaction.tables.remove(&f.no());
    }
    let (level, intra_l0) = (c.level, c.is_intra_l0());
    let mut opened = Vec::new();
    let applied = result.and_then(|edit| {
        opened = edit.new_files.iter().map(|(_, f)| f.file_no).collect();
        crate::db::inner::log_and_apply(inner, &mut st, edit)
    });
    // Release the inputs before announcing completion, so that files the compaction made
    // obsolete are already deleted when waiters wake up.
    drop(c);
    if applied.is_ok() {
        // Outside the lock (file reads), and before announcing completion: a waiter
        // (`compact_all`) must not start the next compaction while this one still fills the
        // cache, or these reads, for tables that compaction is about to replace, evict the
        // hot blocks it reads back for its own.
        drop(st);
        open_new_tables(inner, &opened);
        warm_hot_blocks(inner, &hot);
        st = inner.state.lock();
    }
    if intra_l0 {
        st.compaction.intra_l0 = false;
    } else if level == 0 {
        st.compaction.l0 = false;
        st.compaction.l0_merge = None;
    }
    st.compaction.running -= 1;
    if applied.is_ok() {
        inner.counters.add_compaction();
        if intra_l0 {
            inner.counters.add_intra_l0_compaction();
        }
    }
    inner.bg_cv.notify_all();
    drop(st);
    applied
}

/// Reads into the block cache the blocks of a compaction's new tables that hold entries it read
/// from hot blocks of its inputs ([`crate::iter::InternalIterator::in_hot_block`]), as those
/// inputs' blocks leave the cache with their tables (once no scan holds them): a compaction
/// through the hot keys of a database larger than the cache would otherwise cost readers a
/// miss on every one of them. A block that fails to read is left to the read that needs it.
fn warm_hot_blocks(inner: &DbInner, hot: &crate::compaction::output::HotBlocks) {
    for (no, blocks) in hot {
        if let Ok(Ok(n)) = inner.cleaner.table_cache.get(*no).map(|t| t.warm_hot_blocks(blocks)) {
            inner.counters.add_hot_blocks_rewarmed(n);
        }
    }
}

/// Opens tables just installed by a flush or compaction, so that the data blocks written into
/// the block cache for them ([`crate::cache::BlockCache::warm`]) join the cache's
/// eviction at once rather than when the first read opens the table. A table that fails to
/// open is left to the read that needs it, which reports the error.
pub(crate) fn open_new_tables(inner: &DbInner, file_nos: &[u64]) {
    for &no in file_nos {
        if inner.cleaner.table_cache.get(no).is_err() {
            inner.block_cache.forget_pending(no);
        }
    }
}

/// Merges the compaction's tables into new ones; the edit installs them. `hot` gets the data
/// blocks of the new tables to read into the block cache once they are installed.
fn merge_with(
    inner: &Arc<DbInner>,
    c: &Compaction,
    force_rewrite: bool,
    hot: &mut crate::compaction::output::HotBlocks,
) -> Result<VersionEdit> {
    let out_level = c.output_level;
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
    // The version (and its range tombstones) first, the snapshots second: a snapshot taken
    // after the list reads at a sequence number no lower than any tombstone or entry this
    // compaction sees, so it sees what the newest state sees. The other order lets a snapshot
    // and a range deletion flushed after it both land between the two reads, and the
    // compaction would drop the data the snapshot still reads.
    inner.failpoint(if c.level == 0 { "compaction.merge.level0" } else { "compaction.merge.deeper" });
    let version: Arc<Version> = inner.state.lock().version.clone();
    inner.failpoint("compaction.version_read");
    let snapshots = inner.snapshots.list();
    let tombstones = (!version.fragmented.is_empty()).then(|| version.fragmented.clone());
    let max_tombstone = version.tombstones.iter().map(|t| t.seq).max().unwrap_or(0);
    let (max, min_bytes) = (inner.opts.max_subcompactions, inner.opts.target_file_size / 4);
    // A merge out of level 0 into an empty level has no next-level tables to split at. Only
    // for merges of four tables' worth or more: split this way, a small merge in a test of
    // the hot-block rewarm left 8-10 of its hot blocks out of the cache. (Its copies took more
    // blocks than the cache held, since fixed in `TableBuilder::add_marked`; without this limit
    // that test passed 100 runs of 100. The limit stays until small merges split this way are
    // measured.)
    let bounds = if c.next.is_empty()
        && c.progress.is_some()
        && total_size(&c.inputs) >= inner.opts.target_file_size.saturating_mul(4)
    {
        input_split_points(inner, c, max, min_bytes)
    } else {
        split_points(c, max, min_bytes)
    };
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
        hot.extend(piece.hot);
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
    files: Vec<crate::version::edit::FileInfo>,
    read_bytes: u64,
    written: u64,
    /// The data blocks of `files` with entries read from hot blocks, by table number.
    hot: crate::compaction::output::HotBlocks,
}

/// User keys splitting a compaction into at most `max` key ranges of about equal size for
/// parallel merging (empty: merge it whole). The ranges start at next-level tables, whose
/// bytes are what is balanced. Compactions with fewer than two next-level tables are not
/// split, nor into ranges of less than `min_bytes` of input on average.
fn split_points(c: &Compaction, max: usize, min_bytes: u64) -> Vec<Vec<u8>> {
    let total = total_size(&c.next);
    let all = total + total_size(&c.inputs);
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

/// Split points for a compaction into a level where it overlaps no table (level
/// 0 into an empty level, [`lands_above`]), which [`split_points`] cannot balance by the
/// next level's tables: the block bounds of its largest input table, for up to `max` ranges
/// of `min_bytes` of input or more. Empty if that table cannot be read (the merge reads it
/// again and reports the error) or is too small.
fn input_split_points(inner: &DbInner, c: &Compaction, max: usize, min_bytes: u64) -> Vec<Vec<u8>> {
    let pieces = (max as u64).min(total_size(&c.inputs) / min_bytes.max(1)) as usize;
    match c.inputs.iter().max_by_key(|f| f.info.size) {
        Some(largest) if pieces >= 2 => {
            inner.cleaner.table_cache.get(largest.no()).and_then(|t| t.block_bounds(pieces)).unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// Merges the entries of `c` with user keys in `[lo, hi)` (unbounded where `None`) into new
/// tables of the next level.
fn merge_range(
    inner: &Arc<DbInner>,
    c: &Compaction,
    lo: Option<&[u8]>,
    hi: Option<&[u8]>,
    snapshots: &[key::SeqNo],
    tombstones: Option<&crate::memtable::range_del::FragmentedTombstones>,
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
    // Level 0 tables may overlap only in whole, so a merge of level-0 tables makes one table.
    let target = if c.output_level == 0 { u64::MAX } else { inner.opts.target_file_size };
    let mut out = TableOutput::new(&inner.storage, &inner.dir, &inner.opts, target);
    if inner.opts.prepopulate_block_cache {
        out.warm(inner.block_cache.clone(), WarmPolicy::IfRoom);
    }
    let rewarm = inner.opts.rewarm_hot_blocks;
    let pace_as = if c.is_intra_l0() { crate::flow::pacer::INTRA_L0 } else { c.level };
    out.pace(inner.pacer.clone(), pace_as, target);
    let mut alloc = || inner.state.lock().alloc_file_no();
    let mut read_bytes = 0u64;
    // Entries read and not yet added to `progress` (added in steps: subcompactions share it).
    let mut unreported = 0u64;
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
        unreported += 1;
        if unreported == 4096 {
            if let Some(p) = &c.progress {
                p.add(unreported);
            }
            unreported = 0;
        }
        let hot = rewarm && it.in_hot_block();
        if filter.keep(it.key()) {
            out.add_marked(it.key(), it.value(), hot, &mut alloc)?;
        } else if hot {
            // A shadowed version read from a hot block: its key is hot, whichever version answers.
            out.mark_last_hot(key::user_key(it.key()));
        }
        it.next()?;
    }
    if let Some(p) = &c.progress {
        p.add(unreported);
    }
    let (files, written, hot) = out.finish_unsynced_hot(filter.tombstones_applied(max_tombstone))?;
    Ok(Piece { files, read_bytes, written, hot })
}

/// Compacts every level into the next, top to bottom, so that all data ends in the last
/// non-empty level with shadowed versions and (where no snapshot needs them) tombstones gone.
pub(crate) fn compact_all(inner: &Arc<DbInner>) -> Result<()> {
    let levels = inner.opts.num_levels;
    let mut level = 0;
    while level < levels - 1 {
        let c = {
            let mut st = inner.state.lock();
            // Wait until background compactions leave the levels alone.
            while st.compaction.running > 0 || st.compaction.l0 || st.compaction.intra_l0 {
                inner.check_poisoned()?;
                inner.bg_cv.wait(&mut st);
            }
            let v = st.version.clone();
            // Empty levels in between are skipped: nothing there to merge with.
            let output_level = (level + 1..levels).find(|&l| !v.levels[l].is_empty()).unwrap_or(levels - 1);
            let Some((lo, hi)) = user_range(v.levels[level].iter()) else {
                level = output_level;
                continue;
            };
            let inputs = v.levels[level].clone();
            let next = v.overlapping(output_level, &lo, &hi);
            let all_lo_hi = user_range(inputs.iter().chain(&next));
            let bottommost = all_lo_hi.is_none_or(|(lo, hi)| !v.has_data_below(output_level, &lo, &hi));
            for f in inputs.iter().chain(&next) {
                st.compaction.tables.insert(f.no());
            }
            if level == 0 {
                st.compaction.l0 = true;
            }
            st.compaction.running += 1;
            // When the next level is rewritten whole and nothing lies deeper, this is the last step.
            let last_step = next.len() == v.levels[output_level].len()
                && v.levels.iter().skip(output_level + 1).all(|l| l.is_empty());
            (Compaction { level, output_level, inputs, next, bottommost, progress: None }, last_step)
        };
        let output_level = c.0.output_level;
        // Force a rewrite even for a lone table, so tombstones and old versions are dropped.
        run_with(inner, c.0, true)?;
        if c.1 {
            // Nothing lies below the level just written: everything is at the bottom now.
            break;
        }
        level = output_level;
    }
    Ok(())
}
