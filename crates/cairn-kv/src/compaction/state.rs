//! What compaction keeps between picking and running: a chosen [`Compaction`], the
//! compactions running ([`Compacting`]) and how far a level-0 merge has got
//! ([`MergeProgress`]).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::version::TableFile;

/// A chosen compaction: tables of `level` merged with the overlapping tables of
/// `output_level` (the next level, or for level 0 the base level, see [`crate::compaction::picker::LevelTargets`]).
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
    pub(crate) fn all(&self) -> impl Iterator<Item = &Arc<TableFile>> {
        self.inputs.iter().chain(&self.next)
    }

    /// Level-0 tables merged into one level-0 table (`crate::compaction::picker::pick_intra_l0`).
    pub(crate) fn is_intra_l0(&self) -> bool {
        self.level == 0 && self.output_level == 0
    }
}

/// What the running compactions hold, where each level's round-robin picking resumes, and
/// what the last flush added to level 0 (for [`crate::flow::writers::catch_up_rate`]).
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
    pub(crate) started: Instant,
    pub(crate) total: u64,
    pub(crate) read: AtomicU64,
    /// Its level-0 tables, which leave level 0 when it ends.
    pub(crate) level0: HashSet<u64>,
}

impl MergeProgress {
    pub(crate) fn new(c: &Compaction) -> Self {
        MergeProgress {
            started: Instant::now(),
            total: c.all().map(|f| f.info.num_entries).sum(),
            read: AtomicU64::new(0),
            level0: c.inputs.iter().map(|f| f.no()).collect(),
        }
    }

    pub(crate) fn add(&self, entries: u64) {
        self.read.fetch_add(entries, Ordering::Relaxed);
    }

    /// Time the compaction still needs at its average speed so far; `None` until it has read
    /// 2 % of its entries (and for 100 ms), too early to tell.
    pub(crate) fn time_left(&self) -> Option<Duration> {
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

    pub(crate) fn holds(&self, f: &TableFile) -> bool {
        self.tables.contains(&f.no())
    }
}

pub(crate) fn total_size(files: &[Arc<TableFile>]) -> u64 {
    files.iter().map(|f| f.info.size).sum()
}

pub(crate) fn user_range<'a>(files: impl Iterator<Item = &'a Arc<TableFile>>) -> Option<(Vec<u8>, Vec<u8>)> {
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
