//! Choosing what to compact: scores per level (level 0 by its weight, deeper levels by their
//! bytes against their targets), the table of a level with the least overlap below, merges of
//! level-0 tables among themselves, and which compaction a free thread starts.

use std::collections::HashSet;
use std::sync::Arc;

use crate::Options;
use crate::compaction::state::{Compacting, Compaction, MergeProgress, total_size, user_range};
use crate::flow::{self, writers::CatchUp, writers::memtables_worth};
use crate::version::{TableFile, Version, l0_weight, sorted_overlap};

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
pub(super) fn scores(opts: &Options, v: &Version, cs: &Compacting, targets: &LevelTargets) -> Vec<(usize, f64)> {
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

/// The catch-up rate ([`crate::flow::writers::catch_up_rate`]) of the running compaction from
/// level 0 into a lower level, with `pending_memtables` not yet flushed (the one being
/// written included): 0 when no such compaction runs.
pub(crate) fn catch_up_rate(opts: &Options, v: &Version, cs: &Compacting, pending_memtables: usize) -> u64 {
    let Some(merge) = &cs.l0_merge else { return 0 };
    let (mut tables_left, mut bytes_left) = (0usize, 0u64);
    for f in v.levels[0].iter().filter(|f| !merge.level0.contains(&f.no())) {
        tables_left += 1;
        bytes_left = bytes_left.saturating_add(f.info.size);
    }
    let view = CatchUp {
        l0_weight: v.l0_weight(opts.memtable_size),
        tables_left,
        bytes_left,
        time_left: merge.time_left(),
        pending_memtables,
        flush_ratio: cs.flush_ratio,
    };
    flow::writers::catch_up_rate(opts, &view)
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
pub(super) fn least_overlap(
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
pub(super) fn intra_l0_span(sizes: &[u64], max_bytes: u64, weigh_cost: bool) -> usize {
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
