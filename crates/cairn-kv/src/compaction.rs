//! Leveled compaction: choosing what to compact (level-0 file count and level byte budgets;
//! within a level, the table with the least overlap below) and merging the chosen tables into
//! the next level.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::db::DbInner;
use crate::error::IoContext;
use crate::flush::{TableOutput, VersionFilter};
use crate::iter::InternalIterator;
use crate::key;
use crate::merge_iter::{LevelFiles, LevelIter, MergingIterator};
use crate::table_builder::WarmPolicy;
use crate::version::{TableFile, Version, l0_weight, memtables_worth, sorted_overlap};
use crate::version_edit::VersionEdit;
use crate::{Error, Options, Result};

/// A chosen compaction: tables of `level` merged with the overlapping tables of
/// `output_level` (the next level, or for level 0 the base level, see [`LevelTargets`]).
pub(crate) struct Compaction {
    pub level: usize,
    pub output_level: usize,
    pub inputs: Vec<Arc<TableFile>>,
    pub next: Vec<Arc<TableFile>>,
    pub bottommost: bool,
    /// How far it has got, for a compaction from level 0 into a lower level that `pick` chose
    /// (shared with [`Compacting::l0_merge`]).
    pub progress: Option<Arc<MergeProgress>>,
}

impl Compaction {
    fn all(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.inputs.iter().chain(&self.next)
    }

    /// Level-0 tables merged into one level-0 table ([`pick_intra_l0`]).
    fn is_intra_l0(&self) -> bool {
        self.level == 0 && self.output_level == 0
    }
}

/// What the running compactions hold, where each level's round-robin picking resumes, and
/// what the last flush added to level 0 (for [`catch_up_rate`]).
pub(crate) struct Compacting {
    /// Tables being compacted.
    pub tables: HashSet<u64>,
    /// A compaction from level 0 into a lower level is running.
    pub l0: bool,
    /// A compaction of level-0 tables into one level-0 table is running.
    pub intra_l0: bool,
    /// Compactions running.
    pub running: usize,
    /// Per level, the largest user key of the last table compacted.
    pub pointer: Vec<Vec<u8>>,
    /// How far the running compaction from level 0 into a lower level has got.
    pub l0_merge: Option<Arc<MergeProgress>>,
    /// Bytes of the last flush's table per byte of the memtables it flushed (1 until a flush
    /// has made a table): what a memtable's worth of writes adds to level 0's bytes.
    pub flush_ratio: f64,
}

/// How far a compaction from level 0 into a lower level has got: entries read of all its
/// input tables hold.
pub(crate) struct MergeProgress {
    started: Instant,
    total: u64,
    read: AtomicU64,
    /// Its level-0 tables, which leave level 0 when it ends.
    level0: HashSet<u64>,
}

impl MergeProgress {
    fn new(c: &Compaction) -> Self {
        MergeProgress {
            started: Instant::now(),
            total: c.all().map(|f| f.info.num_entries).sum(),
            read: AtomicU64::new(0),
            level0: c.inputs.iter().map(|f| f.no()).collect(),
        }
    }

    fn add(&self, entries: u64) {
        self.read.fetch_add(entries, Ordering::Relaxed);
    }

    /// Time the compaction still needs at its average speed so far; `None` until it has read
    /// 2 % of its entries (and for 100 ms), too early to tell.
    fn time_left(&self) -> Option<Duration> {
        let (read, elapsed) = (self.read.load(Ordering::Relaxed), self.started.elapsed());
        if read == 0 || read < self.total / 50 || elapsed < Duration::from_millis(100) {
            return None;
        }
        Some(elapsed.mul_f64(self.total.saturating_sub(read) as f64 / read as f64))
    }
}

impl Compacting {
    pub fn new(levels: usize) -> Self {
        Compacting {
            tables: HashSet::new(),
            l0: false,
            intra_l0: false,
            running: 0,
            pointer: vec![Vec::new(); levels],
            l0_merge: None,
            flush_ratio: 1.0,
        }
    }

    fn holds(&self, f: &TableFile) -> bool {
        self.tables.contains(&f.no())
    }
}

/// Where level 0 compacts to and how many bytes each level may hold before it is compacted
/// into the next.
///
/// With [`Options::dynamic_level_bytes`] (RocksDB's `level_compaction_dynamic_level_bytes`)
/// the targets are derived from the bottom up: the last level holds what the largest level
/// holds, each level above it a `level_size_multiplier`-th of the one below, up to the first
/// level whose share is at most `max_bytes_for_level_base`. That level is the base level:
/// level 0 compacts straight into it and the levels between are kept empty. A small
/// database is therefore one merge away from the bottom, and the levels always hold the
/// ratio that bounds write amplification, whatever the data's size; fixed targets instead
/// make a 6 GB database four levels deep with the middle levels holding far more than their
/// share of the bottom one, which costs every byte one more rewrite.
///
/// Without it, the targets are fixed: `max_bytes_for_level_base` for level 1, times the
/// multiplier for each level below, and level 0 compacts into level 1.
pub(crate) struct LevelTargets {
    pub base: usize,
    target: Vec<u64>,
}

impl LevelTargets {
    pub fn new(opts: &Options, v: &Version) -> Self {
        let n = v.levels.len();
        let last = n - 1;
        let mult = opts.level_size_multiplier.max(2);
        let base_bytes = opts.max_bytes_for_level_base.max(1);
        let (base, mut t) = if !opts.dynamic_level_bytes || last < 2 {
            (1, base_bytes)
        } else {
            let largest = v.levels[1..].iter().map(|l| total_size(l)).max().unwrap_or(0);
            let (mut base, mut size) = (last, largest);
            while base > 1 && size > base_bytes {
                size /= mult;
                base -= 1;
            }
            // The base level may hold at least a multiplier's share of the configured base
            // size, so a database just past a level boundary does not compact its base level
            // for every flush.
            (base, size.max(base_bytes / mult).max(1))
        };
        let mut target = vec![0; n];
        for slot in target.iter_mut().skip(base) {
            *slot = t;
            t = t.saturating_mul(mult);
        }
        LevelTargets { base, target }
    }

    /// How far over its target `level` (1+) is with `bytes`: at least 1 means it should be
    /// compacted. A non-empty level above the base level (left there by an older shape of
    /// the tree, or when the data shrank) always scores at least 1, so it drains downwards.
    fn score(&self, level: usize, bytes: u64) -> f64 {
        if level < self.base {
            return if bytes == 0 { 0.0 } else { (bytes as f64 / self.target[self.base] as f64).max(1.0) };
        }
        bytes as f64 / self.target[level].max(1) as f64
    }
}

fn total_size(files: &[Arc<TableFile>]) -> u64 {
    files.iter().map(|f| f.info.size).sum()
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

/// Added to level 0's score when it nears the slowdown trigger, above any level's score.
const L0_URGENT: f64 = 1e9;

/// Level-0 weight from which level 0 is urgent: halfway from the compaction trigger to the
/// slowdown trigger. Scores count the tables no compaction holds; keeping a thread for level 0
/// (`pick`) counts them all.
fn l0_urgent_files(opts: &Options) -> usize {
    (opts.level0_compaction_trigger + opts.level0_slowdown_trigger).div_ceil(2)
}

/// Multiplies the score of a level over its target (RocksDB's `kScoreScale`), so that a
/// level over its target always goes before one whose plain score merely reached 1.
const OVER_TARGET_SCALE: f64 = 10.0;

/// Levels in need of compaction (score >= 1), most in need first, ignoring tables being
/// compacted.
///
/// Level 0 scores its weight (its table count, or its bytes in memtables' worth if more:
/// [`l0_weight`]) against `level0_compaction_trigger`, counting only tables no compaction
/// holds. With dynamic level targets it also scores its bytes against the base
/// level's (its actual bytes or its target, whichever is larger): intra-level-0 merges keep
/// the file count down, so the count alone would let level 0 grow to many times the base
/// level and then merge into it in one giant compaction. A sorted level over its target
/// scores its bytes against its target plus the bytes waiting above it to come down (level
/// 0's and every higher level's excess), so a base level about to receive a big level 0 does
/// not keep the threads busy compacting itself first. Both as RocksDB does with
/// `level_compaction_dynamic_level_bytes`.
fn scores(opts: &Options, v: &Version, cs: &Compacting, targets: &LevelTargets) -> Vec<(usize, f64)> {
    let last = v.levels.len() - 1;
    let free_bytes =
        |level: usize| -> u64 { v.levels[level].iter().filter(|f| !cs.holds(f)).map(|f| f.info.size).sum() };
    let total_bytes = |level: usize| total_size(&v.levels[level]);
    // Bytes above the level being scored that are waiting to come down into it.
    let mut coming_down = total_bytes(0);
    let mut out = Vec::new();
    for level in 0..last {
        let score = if level == 0 {
            // While an intra-level-0 merge runs, level 0 is still scored (by the tables it
            // does not hold), so that the base level stays reserved for level 0 (see `pick`).
            // Weighed as the write triggers weigh it, by bytes too: one table left by
            // intra-level-0 merges can hold more than the stop trigger's worth of flushes.
            let free = l0_weight(v.levels[0].iter().filter(|f| !cs.holds(f)), opts.memtable_size);
            let mut score = free as f64 / opts.level0_compaction_trigger.max(1) as f64;
            if opts.dynamic_level_bytes && free > 0 {
                let (bytes, base) = (free_bytes(0), targets.base);
                if bytes >= opts.max_bytes_for_level_base {
                    score = score.max(1.01);
                }
                let base_target = targets.target[base].max(1);
                if bytes > base_target {
                    score = score.max(bytes as f64 / total_bytes(base).max(base_target) as f64);
                }
                if score > 1.0 {
                    score *= OVER_TARGET_SCALE;
                }
            }
            // Halfway from the compaction trigger to the slowdown trigger, level 0 goes before
            // every other level: the base level's score can run far higher right after a big
            // level-0 merge (its dynamic target is small), and while its compactions took
            // every thread, flushes piled up until writers were slowed.
            if free >= l0_urgent_files(opts) { L0_URGENT + score } else { score }
        } else {
            let bytes = free_bytes(level);
            let mut score = targets.score(level, bytes);
            if opts.dynamic_level_bytes && level >= targets.base {
                let target = targets.target[level].max(1);
                if bytes >= target {
                    score = bytes as f64 / (target as f64 + coming_down as f64) * OVER_TARGET_SCALE;
                }
                coming_down += total_bytes(level).saturating_sub(target);
            }
            score
        };
        if score >= 1.0 {
            out.push((level, score));
        }
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1));
    out
}

/// Bytes per second writes may make, with level 0 at its slowdown trigger or over it, and
/// still leave level 0 under its stop trigger until the running compaction from level 0 into a
/// lower level ends, and under its slowdown trigger once it has (its tables gone, the rest
/// weighed by their bytes and by no more tables than intra-level-0 merges leave): the memtables' worth of
/// room left both ways, less `pending_memtables` (those not yet flushed,
/// the one being written included), spread over the time the compaction still needs at its
/// speed so far. 0 when no such compaction runs, when it is too early to tell how long it
/// needs, or when there is no room. Writes are then held to this rate, not slower, when
/// [`Options::delayed_write_rate`] would hold them slower: slowed for no reason, writers
/// lost half a run to a level 0 that a bulk load had left one flush short of the trigger,
/// while the merge of those tables was going to end before level 0 came near the stop.
pub(crate) fn catch_up_rate(opts: &Options, v: &Version, cs: &Compacting, pending_memtables: usize) -> u64 {
    let Some(merge) = &cs.l0_merge else { return 0 };
    let Some(left) = merge.time_left() else { return 0 };
    let all = v.l0_weight(opts.memtable_size);
    let (mut tables, mut bytes) = (0usize, 0u64);
    for f in v.levels[0].iter().filter(|f| !merge.level0.contains(&f.no())) {
        tables += 1;
        bytes = bytes.saturating_add(f.info.size);
    }
    // The tables the merge leaves weigh their bytes, and their count only up to what
    // intra-level-0 merges leave unmerged: while level 0 merges down, a thread is kept for
    // them (`pick`), and they fold the flushes that land into one table once
    // `level0_compaction_trigger + 2` are there. Counted one by one, flushes of a memtable
    // that compresses to 37 MiB weighed as if each were a memtable's worth of bytes still to
    // merge down, and writers were held 2-4 s of a 9.5 s run after a load (YCSB G, 2
    // threads, larger than the cache) with the stop trigger never near.
    let after = memtables_worth(bytes, opts.memtable_size).max(tables.min(opts.level0_compaction_trigger + 2));
    let room = (opts.level0_stop_trigger.saturating_sub(all + 1))
        .min(opts.level0_slowdown_trigger.saturating_sub(after + 1))
        .saturating_sub(pending_memtables);
    // With intra-level-0 merges folding the count, a memtable's worth of writes adds its
    // flushed table's bytes to level 0's weight, not a whole memtable's worth (37 MiB of
    // 64 for YCSB's values under LZ4); at least a quarter, the least an intra-level-0 merge
    // of the fewest tables leaves of their count.
    let per_memtable = cs.flush_ratio.clamp(0.25, 1.0);
    (room as f64 * opts.memtable_size as f64 / per_memtable / left.as_secs_f64().max(1e-3)) as u64
}

/// The level most in need of compaction (score >= 1), if any, ignoring tables being compacted.
pub(crate) fn needs_compaction(opts: &Options, v: &Version, cs: &Compacting) -> Option<(usize, f64)> {
    scores(opts, v, cs, &LevelTargets::new(opts, v)).first().copied()
}

/// Picks a compaction and marks its tables as being compacted: from the level most in need
/// of one whose tables are free, the next one when a running compaction holds them.
pub(crate) fn pick(opts: &Options, v: &Version, cs: &mut Compacting) -> Option<Compaction> {
    let targets = LevelTargets::new(opts, v);
    // Once level 0 needed a compaction into the base level and could not have one (a running
    // compaction holds tables of either), no compaction out of the base level starts: they
    // would keep the base level busy one after another, and level 0 would be held off until
    // writers are slowed (RocksDB's rule too).
    let mut l0_waits_for_base = false;
    // While level 0 merges into the base level and, all its tables counted, weighs what
    // makes it urgent, the last free thread starts no compaction of a deeper level: it is
    // kept for the intra-level-0 merge the flushes landing meanwhile will need (one runs at a
    // time, so not while one does). A deeper compaction started then (after a bulk load: the
    // level-0 merge and one of the base level's, at once) held that thread for as long as the
    // level-0 merge, so level 0 grew to the slowdown trigger with no thread to merge it; and
    // on few cores it took CPU from the level-0 merge too.
    let keep_for_l0 = cs.l0
        && !cs.intra_l0
        && cs.running + 1 >= opts.compaction_threads.max(1)
        && v.l0_weight(opts.memtable_size) >= l0_urgent_files(opts);
    let mut found = None;
    for (level, _) in scores(opts, v, cs, &targets) {
        if level > 0 && (keep_for_l0 || (level == targets.base && l0_waits_for_base)) {
            continue;
        }
        if let Some(c) = pick_level(opts, v, cs, &targets, level) {
            found = Some(c);
            break;
        }
        if level == 0 {
            l0_waits_for_base = true;
        }
    }
    let mut c = found?;
    for f in c.all() {
        cs.tables.insert(f.no());
    }
    if c.is_intra_l0() {
        cs.intra_l0 = true;
    } else if c.level == 0 {
        cs.l0 = true;
        let progress = Arc::new(MergeProgress::new(&c));
        c.progress = Some(progress.clone());
        cs.l0_merge = Some(progress);
    }
    cs.running += 1;
    Some(c)
}

fn pick_level(
    opts: &Options,
    v: &Version,
    cs: &mut Compacting,
    targets: &LevelTargets,
    level: usize,
) -> Option<Compaction> {
    let busy = |cs: &Compacting, files: &[Arc<TableFile>]| files.iter().any(|f| cs.holds(f));
    let c = if level == 0 {
        // Level 0 goes to the base level, or to a level above it that still holds data
        // (older than level 0's, so it must not end up below it).
        let output_level = (1..targets.base).find(|&l| !v.levels[l].is_empty()).unwrap_or(targets.base);
        let inputs = v.levels[0].clone();
        let (lo, hi) = user_range(inputs.iter())?;
        let next = v.overlapping(output_level, &lo, &hi);
        if !cs.l0 && !busy(cs, &inputs) && lands_above(opts, v, output_level, &inputs, &next) {
            // Into the empty level above: it holds nothing, so nothing it holds can be busy.
            let c = Compaction {
                level,
                output_level: output_level - 1,
                inputs,
                next: Vec::new(),
                bottommost: false,
                progress: None,
            };
            return Some(c);
        }
        if cs.l0 || busy(cs, &inputs) || busy(cs, &next) {
            // One intra-level-0 merge at a time.
            return if cs.intra_l0 { None } else { pick_intra_l0(opts, v, cs, false) };
        }
        // Many level-0 tables over a base level that holds more: merging them into one
        // first costs their bytes alone and takes them off every read at once, where the
        // compaction into the base level rewrites the base level too and, paced under synced
        // writes, may not end for minutes (a database opened after a bulk load). It follows
        // with one table to merge down. Tables earlier merges made are left out when they
        // would cost more than they remove (so under a stream of flushes each byte is merged
        // this way about once), and once level 0 holds more bytes than the base level it goes
        // down whole. So it does once its bytes alone weigh what makes it urgent: merged among
        // themselves they would weigh as much, and only the merge down lightens level 0. A
        // bulk load that left a base level five times its target under a gigabyte of level 0
        // had the run after it merge level 0 among itself three times, never down, while its
        // bytes held writers at the slowdown trigger.
        if inputs.len() >= l0_urgent_files(opts) {
            let (l0_bytes, base_bytes) = (total_size(&inputs), total_size(&next));
            if base_bytes >= l0_bytes
                && memtables_worth(l0_bytes, opts.memtable_size) < l0_urgent_files(opts)
                && let Some(c) = pick_intra_l0(opts, v, cs, true)
            {
                return Some(c);
            }
        }
        Compaction { level, output_level, inputs, next, bottommost: false, progress: None }
    } else {
        let output_level = level + 1;
        let (f, next) = least_overlap(v, level, &cs.tables, &cs.pointer[level])?;
        cs.pointer[level] = f.info.largest_user().to_vec();
        Compaction { level, output_level, inputs: vec![f], next, bottommost: false, progress: None }
    };
    let (lo, hi) = user_range(c.all())?;
    let bottommost = !v.has_data_below(c.output_level, &lo, &hi);
    Some(Compaction { bottommost, ..c })
}

/// Whether level 0 (`inputs`) goes into the empty level above `output_level`, where it would
/// otherwise merge with `next`: when level 0 weighs what makes it urgent and `next` holds at
/// least half its bytes.
fn lands_above(
    opts: &Options,
    v: &Version,
    output_level: usize,
    inputs: &[Arc<TableFile>],
    next: &[Arc<TableFile>],
) -> bool {
    output_level >= 2
        && output_level < v.levels.len() - 1
        && v.levels[output_level - 1].is_empty()
        && l0_weight(inputs, opts.memtable_size) >= l0_urgent_files(opts)
        && total_size(next).saturating_mul(2) >= total_size(inputs)
}

/// The table of sorted level `level` to compact into the next one, with the next level's
/// tables it overlaps: of the tables free of `compacting` whose overlapping tables are free too,
/// the one that rewrites the fewest next-level bytes per byte it moves down (RocksDB's and
/// Pebble's default, `kMinOverlappingRatio`). Against taking the tables in turn this lowers
/// write amplification for random keys, and a table with nothing under it moves down without
/// a rewrite. Ties go to the first table after `after` (the last one compacted), round-robin.
fn least_overlap(
    v: &Version,
    level: usize,
    compacting: &HashSet<u64>,
    after: &[u8],
) -> Option<(Arc<TableFile>, Vec<Arc<TableFile>>)> {
    let (files, below) = (&v.levels[level], v.levels.get(level + 1)?);
    let start = files.partition_point(|f| f.info.largest_user() <= after);
    let mut chosen: Option<(&Arc<TableFile>, std::ops::Range<usize>, u128)> = None;
    for f in files[start..].iter().chain(&files[..start]) {
        if compacting.contains(&f.no()) {
            continue;
        }
        let range = sorted_overlap(below, f.info.smallest_user(), f.info.largest_user());
        if below[range.clone()].iter().any(|t| compacting.contains(&t.no())) {
            continue;
        }
        let next_bytes = u128::from(below[range.clone()].iter().map(|t| t.info.size).sum::<u64>());
        // next / size < chosen next / chosen size, without dividing.
        let better = chosen.as_ref().is_none_or(|(c, _, c_next)| {
            next_bytes * u128::from(c.info.size.max(1)) < c_next * u128::from(f.info.size.max(1))
        });
        if better {
            chosen = Some((f, range, next_bytes));
        }
    }
    let (f, range, _) = chosen?;
    Some((f.clone(), below[range].to_vec()))
}

/// How many of the level-0 tables of `sizes` (newest first) an intra-level-0 compaction
/// merges: the newest, then each older one while the total stays within `max_bytes` and,
/// with `weigh_cost`, adding it lowers (or keeps) the bytes merged per table removed.
fn intra_l0_span(sizes: &[u64], max_bytes: u64, weigh_cost: bool) -> usize {
    let Some(&first) = sizes.first() else { return 0 };
    let (mut bytes, mut per_removed, mut n) = (first, u64::MAX, 1);
    while let Some(&size) = sizes.get(n) {
        let more = bytes.saturating_add(size);
        let per = more / n as u64;
        if (weigh_cost && per > per_removed) || more > max_bytes {
            break;
        }
        (bytes, per_removed, n) = (more, per, n + 1);
    }
    n
}

/// Fewest level-0 tables an intra-level-0 compaction merges.
const MIN_INTRA_L0_FILES: usize = 4;

/// A compaction of level-0 tables into one level-0 table, for when level 0 cannot compact
/// into the level below because a running compaction holds the tables it would merge with,
/// or holds many tables over a larger base level ([`pick_level`]). Writers are slowed and
/// then stopped by the number of level-0 tables; while a long compaction into the base level
/// runs, the flushes that land meanwhile would otherwise pile up to those limits (as RocksDB,
/// which does the same). Takes the newest tables, which are free, as long as each one added
/// lowers the bytes merged per table removed, so that a big table an earlier such compaction
/// made is not rewritten for one small flush; needs at least `level0_compaction_trigger + 2`
/// free tables and merges at least
/// [`MIN_INTRA_L0_FILES`] and at most 16 × `target_file_size` bytes. With `weigh_cost`, the
/// cost is weighed even near the slowdown trigger.
fn pick_intra_l0(opts: &Options, v: &Version, cs: &Compacting, weigh_cost: bool) -> Option<Compaction> {
    let files = &v.levels[0];
    let free = files.iter().take_while(|f| !cs.holds(f)).count();
    if free < opts.level0_compaction_trigger + 2 || free < MIN_INTRA_L0_FILES {
        return None;
    }
    let sizes: Vec<u64> = files[..free].iter().map(|f| f.info.size).collect();
    // Near the slowdown trigger the tables earlier merges made are taken too, or each merge
    // would leave one more table behind it while a long compaction into the base level runs.
    let weigh_cost = weigh_cost || free < l0_urgent_files(opts);
    let n = intra_l0_span(&sizes, opts.target_file_size.saturating_mul(16), weigh_cost);
    if n < MIN_INTRA_L0_FILES {
        return None;
    }
    // Never bottommost: older level-0 tables beside the output may hold older versions.
    Some(Compaction {
        level: 0,
        output_level: 0,
        inputs: files[..n].to_vec(),
        next: Vec::new(),
        bottommost: false,
        progress: None,
    })
}

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
        crate::background::log_and_apply(inner, &mut st, edit)
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
fn warm_hot_blocks(inner: &DbInner, hot: &crate::flush::HotBlocks) {
    for (no, blocks) in hot {
        if let Ok(Ok(n)) = inner.cleaner.table_cache.get(*no).map(|t| t.warm_hot_blocks(blocks)) {
            inner.counters.add_hot_blocks_rewarmed(n);
        }
    }
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

/// Merges the compaction's tables into new ones; the edit installs them. `hot` gets the data
/// blocks of the new tables to read into the block cache once they are installed.
fn merge_with(
    inner: &Arc<DbInner>,
    c: &Compaction,
    force_rewrite: bool,
    hot: &mut crate::flush::HotBlocks,
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
    files: Vec<crate::version_edit::FileInfo>,
    read_bytes: u64,
    written: u64,
    /// The data blocks of `files` with entries read from hot blocks, by table number.
    hot: crate::flush::HotBlocks,
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
    // Level 0 tables may overlap only in whole, so a merge of level-0 tables makes one table.
    let target = if c.output_level == 0 { u64::MAX } else { inner.opts.target_file_size };
    let mut out = TableOutput::new(&inner.storage, &inner.dir, &inner.opts, target);
    if inner.opts.prepopulate_block_cache {
        out.warm(inner.block_cache.clone(), WarmPolicy::IfRoom);
    }
    let rewarm = inner.opts.rewarm_hot_blocks;
    let pace_as = if c.is_intra_l0() { crate::pacer::INTRA_L0 } else { c.level };
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

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Arc;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    use super::{Compacting, LevelTargets, MergeProgress, catch_up_rate, intra_l0_span, least_overlap, pick};
    use crate::Options;
    use crate::block_cache::BlockCache;
    use crate::storage::Storage;
    use crate::table_cache::TableCache;
    use crate::version::{Cleaner, Version, test_table as table};

    fn cleaner() -> Arc<Cleaner> {
        let storage: Arc<dyn Storage> = Arc::new(crate::MemStorage::new());
        let dir = std::path::PathBuf::from("/t");
        let table_cache =
            Arc::new(TableCache::new(storage.clone(), dir.clone(), 8, Arc::new(BlockCache::new(1 << 20))));
        Cleaner::new(storage, dir, table_cache)
    }

    /// Options whose dynamic targets put a 10,000-byte bottom level (3) under a level 2 of
    /// 1,000 and a base level 1 of 100 bytes.
    fn tiny_levels() -> Options {
        Options {
            num_levels: 4,
            max_bytes_for_level_base: 100,
            level_size_multiplier: 10,
            dynamic_level_bytes: true,
            level0_compaction_trigger: 4,
            level0_slowdown_trigger: 20,
            ..Options::default()
        }
    }

    /// (level, output level, input tables) of what `pick` chooses.
    fn picked(opts: &Options, v: &Version, cs: &mut Compacting) -> Option<(usize, usize, Vec<u64>)> {
        pick(opts, v, cs).map(|c| (c.level, c.output_level, c.all().map(|f| f.no()).collect()))
    }

    #[test]
    fn level_0_bigger_than_the_base_level_goes_first_and_keeps_the_base_level_for_itself() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 10_000)];
        // The base level, 5x over its target of 100.
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 250), table(&cleaner, 11, "i", "z", 250)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 1);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((1, 2, vec![10])));
        // Two level-0 tables, half the file-count trigger, but more bytes than the base level:
        // level 0 goes first.
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 300), table(&cleaner, 2, "a", "z", 300)];
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, vec![1, 2, 10, 11])));
        // Its progress is followed, against the entries of all four tables (one each here).
        let mut cs = Compacting::new(4);
        let c = pick(&opts, &v, &mut cs).unwrap();
        let progress = c.progress.as_ref().unwrap();
        assert!(Arc::ptr_eq(progress, cs.l0_merge.as_ref().unwrap()));
        assert_eq!(progress.total, 4);
        // With a base-level table held by a running compaction, level 0 cannot go (and two
        // tables are too few to merge among themselves); the base level's other table must not
        // start a compaction of its own either, or level 0 would wait behind one after another.
        let mut cs = Compacting::new(4);
        cs.tables.insert(11);
        cs.running = 1;
        assert_eq!(picked(&opts, &v, &mut cs), None);
        // The same while an intra-level-0 merge holds the newest level-0 tables.
        v.levels[0].insert(0, table(&cleaner, 3, "a", "z", 10));
        let mut cs = Compacting::new(4);
        cs.tables.insert(3);
        (cs.intra_l0, cs.running) = (true, 1);
        assert_eq!(picked(&opts, &v, &mut cs), None);
        // A level 0 smaller than the base level, below its file-count trigger: the base level
        // compacts.
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 30)];
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((1, 2, vec![10])));
    }

    #[test]
    fn writes_are_held_only_as_much_as_the_running_level_0_merge_needs() {
        let (cleaner, opts) = (cleaner(), Options { memtable_size: 1_000, ..tiny_levels() });
        assert_eq!((opts.level0_slowdown_trigger, opts.level0_stop_trigger), (20, 36));
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 100_000)];
        // Eighteen level-0 tables being merged into the base level, two flushes since.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        let mut cs = Compacting::new(4);
        cs.tables.extend((1..=18).chain([30]));
        (cs.l0, cs.running) = (true, 1);
        let merge = |secs: u64, read: u64, level0: std::ops::RangeInclusive<u64>| {
            let started = Instant::now().checked_sub(Duration::from_secs(secs)).unwrap();
            let level0 = level0.collect();
            Some(Arc::new(MergeProgress { started, total: 1_000, read: AtomicU64::new(read), level0 }))
        };
        // No merge, or too early to tell how long it needs: no rate.
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        cs.l0_merge = merge(10, 19, 1..=18);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        cs.l0_merge = merge(0, 0, 1..=18);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        // Half done in 10 s: 10 s left. Room before the stop trigger: 36 - 21 = 15 flushes;
        // after the merge, 20 - 3 = 17; one memtable not yet flushed: 14 memtables in 10 s.
        cs.l0_merge = merge(10, 500, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_390..=1_400).contains(&rate), "{rate}");
        // Three memtables waiting for their flush: 12 in 10 s.
        let rate = catch_up_rate(&opts, &v, &cs, 3);
        assert!((1_190..=1_200).contains(&rate), "{rate}");
        // Flushes that compress to half the memtable's bytes: each memtable's worth of writes
        // adds half a memtable's worth to level 0, so twice the writes fit; a tenth is taken
        // as a quarter.
        cs.flush_ratio = 0.5;
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((2_780..=2_800).contains(&rate), "{rate}");
        cs.flush_ratio = 0.1;
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((5_560..=5_600).contains(&rate), "{rate}");
        cs.flush_ratio = 1.0;
        // A quarter done in 10 s: 30 s left.
        cs.l0_merge = merge(10, 250, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((463..=467).contains(&rate), "{rate}");
        // Level 0 weighs its bytes: the two new tables hold 5 memtables' worth, so the room
        // after the merge binds (20 - 6 = 14, less one memtable).
        v.levels[0][0] = table(&cleaner, 20, "a", "z", 4_500);
        cs.l0_merge = merge(10, 500, 1..=18);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_290..=1_300).contains(&rate), "{rate}");
        // Most of level 0 is new flushes: the merge ending leaves 18 tables, but intra-level-0
        // merges fold them, so they weigh what those leave, 4 + 2 = 6 tables (their bytes,
        // 1,800, are 2 memtables' worth): 20 - 7 = 13 after the merge, 15 before the stop
        // trigger, less one memtable: 12 in 10 s.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        cs.tables = (1..=8).chain([30]).collect();
        cs.l0_merge = merge(10, 500, 1..=2);
        let rate = catch_up_rate(&opts, &v, &cs, 1);
        assert!((1_190..=1_200).contains(&rate), "{rate}");
        // The same tables holding 19 memtables' worth of bytes: the merge ending leaves level 0
        // at the slowdown trigger (19 + 1), so there is no room.
        v.levels[0] = (1..=20).rev().map(|no| table(&cleaner, no, "a", "z", 1_050)).collect();
        assert_eq!(catch_up_rate(&opts, &v, &cs, 1), 0);
        // Level 0 one table short of the stop trigger: no room.
        v.levels[0] = (1..=35).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        cs.tables = (1..=30).collect();
        cs.l0_merge = merge(10, 500, 1..=30);
        assert_eq!(catch_up_rate(&opts, &v, &cs, 0), 0);
    }

    #[test]
    fn a_thread_is_kept_for_level_0_while_a_big_level_0_merges_into_the_base_level() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "h", 5_000), table(&cleaner, 31, "i", "z", 5_000)];
        // Level 2, three times over its target of 1,000, with a table free to go down.
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 1_500), table(&cleaner, 21, "i", "z", 1_500)];
        v.levels[1] = vec![table(&cleaner, 10, "a", "z", 50)];
        // Twelve level-0 tables (the urgent weight: halfway from 4 to 20) all being merged
        // into the base level.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let merging = |l0: &[Arc<crate::version::TableFile>]| {
            let mut cs = Compacting::new(4);
            cs.tables.extend(l0.iter().map(|f| f.no()).chain([10]));
            (cs.l0, cs.running) = (true, 1);
            cs
        };
        assert_eq!(picked(&opts, &v, &mut merging(&v.levels[0])), None);
        // Flushes land: once enough are free, they are merged among themselves.
        let held = merging(&v.levels[0]);
        for no in 40..46 {
            v.levels[0].insert(0, table(&cleaner, no, "a", "z", 10));
        }
        let mut cs = held;
        assert_eq!(picked(&opts, &v, &mut cs), Some((0, 0, (40..46).rev().collect())));
        assert!(cs.intra_l0);
        // With a third compaction thread, the second one may take level 2; the third is kept.
        let three = Options { compaction_threads: 3, ..tiny_levels() };
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let mut cs = merging(&v.levels[0]);
        assert_eq!(picked(&three, &v, &mut cs), Some((2, 3, vec![20, 30])));
        assert_eq!(picked(&three, &v, &mut cs), None);
        // While an intra-level-0 merge runs beside the merge into the base level, nothing is
        // kept: only one intra-level-0 merge runs at a time.
        let mut cs = merging(&v.levels[0]);
        (cs.intra_l0, cs.running) = (true, 2);
        assert_eq!(picked(&three, &v, &mut cs), Some((2, 3, vec![20, 30])));
        // Level 0 weighs its bytes too: ten tables of 80 MiB weigh 13 64-MiB memtables.
        let big = Options { max_bytes_for_level_base: 100 << 30, ..tiny_levels() };
        let mut w = Version::empty(4);
        w.levels[3] = vec![table(&cleaner, 30, "a", "z", 1_000 << 30)];
        w.levels[2] = vec![table(&cleaner, 20, "a", "h", 150 << 30), table(&cleaner, 21, "i", "z", 150 << 30)];
        w.levels[1] = vec![table(&cleaner, 10, "a", "z", 5 << 30)];
        w.levels[0] = (1..=10).rev().map(|no| table(&cleaner, no, "a", "z", 80 << 20)).collect();
        assert_eq!(picked(&big, &w, &mut merging(&w.levels[0])), None);
        w.levels[0].truncate(8);
        assert_eq!(picked(&big, &w, &mut merging(&w.levels[0])), Some((2, 3, vec![20, 30])));
        // Eleven level-0 tables being merged down: level 2 may take the other thread.
        v.levels[0] = (1..=11).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        assert_eq!(picked(&opts, &v, &mut merging(&v.levels[0])), Some((2, 3, vec![20, 30])));
    }

    #[test]
    fn many_level_0_tables_over_a_larger_base_level_are_merged_among_themselves_first() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 100_000)];
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 500), table(&cleaner, 11, "i", "z", 500)];
        // Twelve tables (halfway from the compaction trigger, 4, to the slowdown trigger, 20)
        // of 120 bytes in all over a base level of 1,000: merged into one level-0 table.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let mut cs = Compacting::new(4);
        assert_eq!(picked(&opts, &v, &mut cs), Some((0, 0, (1..=12).rev().collect())));
        assert!(cs.intra_l0 && !cs.l0);
        // Eleven: into the base level.
        v.levels[0].remove(0);
        let want: Vec<u64> = (1..=11).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Twelve again, over a base level holding fewer bytes: into the base level.
        v.levels[0].insert(0, table(&cleaner, 12, "a", "z", 10));
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 50), table(&cleaner, 11, "i", "z", 50)];
        let want: Vec<u64> = (1..=12).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Twelve over the larger base level, but their bytes alone weigh twelve memtables'
        // worth (100 bytes each): merged among themselves they would weigh as much, so they
        // go down whole. A memtable's worth less, and they are merged among themselves.
        let opts = Options { memtable_size: 100, ..opts };
        v.levels[1] = vec![table(&cleaner, 10, "a", "h", 1_000), table(&cleaner, 11, "i", "z", 1_000)];
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 100)).collect();
        let want: Vec<u64> = (1..=12).rev().chain([10, 11]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 90)).collect();
        assert_eq!(v.l0_weight(opts.memtable_size), 12, "twelve tables, 11 memtables' worth");
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 0, (1..=12).rev().collect())));
    }

    #[test]
    fn an_urgent_level_0_goes_into_the_empty_level_above_the_one_it_would_rewrite() {
        let (cleaner, opts) = (cleaner(), tiny_levels());
        let mut v = Version::empty(4);
        // A bottom level of 1,000 puts the base level at 2 (target 100), with level 1 empty.
        v.levels[3] = vec![table(&cleaner, 30, "a", "z", 1_000)];
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 250), table(&cleaner, 21, "i", "z", 250)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 2);
        // Twelve level-0 tables (the urgent weight) of 120 bytes over 500 in the base level:
        // into level 1, alone, even with a base-level table held by a running compaction.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        let l0: Vec<u64> = (1..=12).rev().collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, l0.clone())));
        let mut cs = Compacting::new(4);
        cs.tables.insert(21);
        cs.running = 1;
        let c = pick(&opts, &v, &mut cs).unwrap();
        assert!(!c.bottommost && c.next.is_empty() && cs.l0 && cs.l0_merge.is_some());
        assert_eq!((c.level, c.output_level), (0, 1));
        // Not urgent (eleven tables): into the base level, with the tables it overlaps.
        v.levels[0].remove(0);
        let want: Vec<u64> = (1..=11).rev().chain([20, 21]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 2, want)));
        // Urgent, over tables holding less than half level 0's bytes: into the base level.
        v.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 90)).collect();
        let want: Vec<u64> = (1..=12).rev().chain([20, 21]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 2, want)));
        // Half of them exactly: into level 1.
        v.levels[2] = vec![table(&cleaner, 20, "a", "h", 300), table(&cleaner, 21, "i", "z", 240)];
        assert_eq!(LevelTargets::new(&opts, &v).base, 2);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, l0.clone())));
        // Level 1 holds data: level 0 goes into it (no level above is free).
        v.levels[1] = vec![table(&cleaner, 15, "c", "d", 100)];
        let want: Vec<u64> = (1..=12).rev().chain([15]).collect();
        assert_eq!(picked(&opts, &v, &mut Compacting::new(4)), Some((0, 1, want)));
        // Level 0 over the last level (the base level of a small database) merges into it.
        let mut w = Version::empty(4);
        w.levels[3] = vec![table(&cleaner, 30, "a", "z", 90)];
        w.levels[0] = (1..=12).rev().map(|no| table(&cleaner, no, "a", "z", 10)).collect();
        assert_eq!(LevelTargets::new(&opts, &w).base, 3);
        let want: Vec<u64> = (1..=12).rev().chain([30]).collect();
        assert_eq!(picked(&opts, &w, &mut Compacting::new(4)), Some((0, 3, want)));
    }

    #[test]
    fn level_0_weighs_its_bytes_in_memtables_when_they_outweigh_its_tables() {
        let cleaner = cleaner();
        let opts = Options {
            num_levels: 3,
            memtable_size: 100,
            dynamic_level_bytes: false,
            level0_compaction_trigger: 4,
            ..Options::default()
        };
        let mut v = Version::empty(3);
        v.levels[2] = vec![table(&cleaner, 20, "a", "z", 10_000)];
        v.levels[0] = vec![table(&cleaner, 1, "a", "z", 100), table(&cleaner, 2, "a", "z", 150)];
        assert_eq!(v.l0_weight(opts.memtable_size), 3, "250 bytes: 3 memtables' worth");
        assert_eq!(picked(&opts, &v, &mut Compacting::new(3)), None, "below the trigger");
        // One table as big as the seven flushes an intra-level-0 merge made of it: one table,
        // but seven memtables' worth of bytes to merge down, over the trigger.
        v.levels[0] = vec![table(&cleaner, 3, "a", "z", 601)];
        assert_eq!(v.l0_weight(opts.memtable_size), 7);
        assert_eq!(picked(&opts, &v, &mut Compacting::new(3)), Some((0, 1, vec![3])));
        // Many small tables weigh their count.
        v.levels[0] = (4..10).map(|no| table(&cleaner, no, "a", "z", 1)).collect();
        assert_eq!(v.l0_weight(opts.memtable_size), 6);
        assert_eq!(crate::version::l0_weight([], 100), 0);
        assert_eq!(v.l0_weight(0), 6, "a zero memtable size does not divide by zero");
    }

    #[test]
    fn a_level_compacts_the_table_with_the_least_overlap_below() {
        let cleaner = cleaner();
        let mut v = Version::empty(3);
        v.levels[1] = vec![
            table(&cleaner, 1, "a", "c", 100), // over 10 + 300 bytes below: 3.1 per byte
            table(&cleaner, 2, "d", "f", 100), // over 20: 0.2 per byte
            table(&cleaner, 3, "g", "i", 10),  // over 20: 2 per byte
            table(&cleaner, 4, "j", "k", 50),  // nothing below: moves down
        ];
        v.levels[2] = vec![
            table(&cleaner, 10, "a", "a", 10),
            table(&cleaner, 11, "b", "c", 300),
            table(&cleaner, 12, "e", "h", 20),
        ];
        let pick_in = |v: &Version, busy: &[u64], after: &str| {
            let busy: HashSet<u64> = busy.iter().copied().collect();
            least_overlap(v, 1, &busy, after.as_bytes())
                .map(|(f, next)| (f.no(), next.iter().map(|t| t.no()).collect::<Vec<_>>()))
        };
        let pick = |busy: &[u64], after: &str| pick_in(&v, busy, after);
        assert_eq!(pick(&[], ""), Some((4, vec![])));
        assert_eq!(pick(&[4], ""), Some((2, vec![12])));
        // Table 3 shares table 12 below with table 2: busy together.
        assert_eq!(pick(&[4, 12], ""), Some((1, vec![10, 11])));
        assert_eq!(pick(&[4, 2], ""), Some((3, vec![12])));
        assert_eq!(pick(&[1, 2, 3, 4], ""), None);
        // Equal ratios go round-robin after the last table compacted.
        v.levels[2].clear();
        assert_eq!(pick_in(&v, &[], ""), Some((1, vec![])));
        assert_eq!(pick_in(&v, &[], "c"), Some((2, vec![])));
        assert_eq!(pick_in(&v, &[], "k"), Some((1, vec![])));
    }

    #[test]
    fn intra_l0_span_stops_where_a_table_would_cost_more_per_table_removed() {
        // Equal flushes: all of them, up to the byte limit.
        assert_eq!(intra_l0_span(&[10; 8], u64::MAX, true), 8);
        assert_eq!(intra_l0_span(&[10; 8], 45, true), 4);
        // Newer small flushes in front of a big table an earlier merge made: the big one
        // would be rewritten for little gain, so it is left alone...
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], u64::MAX, true), 5);
        // ...unless level 0 is urgent: then only the byte limit counts.
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], u64::MAX, false), 6);
        assert_eq!(intra_l0_span(&[10, 10, 10, 10, 10, 400], 100, false), 5);
        // Growing sizes are taken while the average per removed table does not rise.
        assert_eq!(intra_l0_span(&[10, 10, 10, 12, 100], u64::MAX, true), 4);
        assert_eq!(intra_l0_span(&[5], u64::MAX, true), 1);
        assert_eq!(intra_l0_span(&[], u64::MAX, true), 0);
    }
}
