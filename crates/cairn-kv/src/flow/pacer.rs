//! Compactions yield the device to synced writes.
//!
//! A synced write waits for `fdatasync` of its log record, and on a disk with a volatile write
//! cache that sync flushes the cache: every byte compactions sent to the device since the
//! previous sync is flushed with it. A compaction writing at full speed (hundreds of MiB/s,
//! and at the end of each table a sync of whatever the kernel had not written back yet) thus
//! makes each synced write wait for its bytes. Compaction work is debt (read and space
//! amplification), which can wait; the synced writer cannot.
//!
//! So while synced writes happen (one finished within [`ACTIVE`]), compaction output is
//! written back in [`CHUNK`] steps at a paced rate, set by the latency of those syncs as a
//! congestion window is by round-trip times (as LEDBAT, a background transfer that yields to
//! interactive traffic): the smoothed sync latency (1/8 of each sample) is compared with the
//! lowest it was lately, taken as the latency of an idle device (the lowest single sample is
//! no such thing: a sync overlapping another that already flushed the cache returns at once);
//! while the smoothed latency stays within [`target`] of it, the rate grows by [`GAIN`] per
//! second; above it, the rate halves (at most every [`CUT_EVERY`]), down to [`MIN_RATE`], so
//! the debt is still paid. Compactions out of level 0 are paced too unless level 0 weighs so
//! much that writers are being slowed ([`l0_unpaced_weight`]), and so are flushes unless
//! as many memtables wait for flush as writers may fill before they stall
//! ([`crate::Options::max_immutable_memtables`]), and so are intra-level-0 merges while scans
//! that merge many level-0 tables come at [`SLOW_READS_URGENT`] per second or more
//! ([`slows_reads`]): those tables cost every such scan a device read each.
//! Without synced writes nothing is paced this way and compactions write as before.
//!
//! Foreground reads that miss the block cache and wait for the device are paced against the
//! same way ([`crate::Options::read_pacing`]): a compaction reading and writing at full speed
//! fills the device's queue, and each such read waits behind it (after a bulk load, the next
//! open's compaction debt held read-only clients behind it). Reads of [`DEVICE_READ`] or longer are the device's (a page-cache hit takes a
//! few microseconds); their mean latency over [`READ_SAMPLE`] (at least [`READ_SAMPLE_MIN`]
//! of them) drives a second controller of the same kind, and a compaction waits as long as the
//! slower of the two asks. The same exemptions hold, so writers are never held by it for
//! longer than level 0 and the frozen memtables allow; and while scans pay for level 0's
//! tables, compactions out of level 0 do not wait for it (they are what speeds those scans up).
//!
//! The policy itself is [`PaceView::decide`]; the runs behind each exemption are in
//! `docs/design/2026-12-07-flow-control.md`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A synced write finished within this long ago: pacing is on.
pub(crate) const ACTIVE: Duration = Duration::from_secs(1);
/// The lowest smoothed sync latency is taken over the current and the previous window of this
/// length, so that it follows a device that got slower for good.
const WINDOW: Duration = Duration::from_secs(10);
/// Compaction output is paced and written back in steps of this many bytes.
pub(crate) const CHUNK: u64 = 1 << 20;
/// Rate when pacing starts.
const START_RATE: f64 = (16 << 20) as f64;
/// The rate never goes below this, so that compaction debt is still paid.
const MIN_RATE: f64 = (4 << 20) as f64;
/// Nor above this.
const MAX_RATE: f64 = (2u64 << 30) as f64;
/// Rate growth per second while syncs keep their latency.
const GAIN: f64 = (32 << 20) as f64;
/// At most one halving of the rate per this long (the syncs already under way when the rate
/// was cut still carry the bytes written before it).
const CUT_EVERY: Duration = Duration::from_millis(100);
/// Unused allowance carried forward at most this long: a burst after a pause stays short.
const BURST: Duration = Duration::from_millis(20);

/// Level-0 weight (tables, or bytes in memtables' worth: [`super::writers::level0_weight`]) from
/// which compactions out of level 0 are not paced: the slowdown trigger
/// (20 by default), where writers start to be slowed for level 0's sake. Below it a synced
/// writer, whose writes come at the pace of its syncs, gains more from the device than from a
/// level-0 compaction finishing sooner: a bulk load without syncs can leave level 0 a few tables
/// short of the slowdown trigger, and compacting that debt at full speed when synced writes
/// begin made each of their syncs wait for the device (`docs/design/2026-12-07-flow-control.md`).
pub(crate) fn l0_unpaced_weight(opts: &crate::Options) -> usize {
    opts.level0_slowdown_trigger.max(opts.level0_compaction_trigger)
}

/// Reads per second that merged many level-0 tables ([`slows_reads`]) from which
/// intra-level-0 merges are not paced (measured over [`READ_WINDOW`]).
const SLOW_READS_URGENT: f64 = 50.0;
/// The slow reads' rate is measured over this long.
const READ_WINDOW: Duration = Duration::from_millis(500);

/// Whether a read that merges `level0_tables` level-0 tables is slowed by level 0: twice the
/// compaction trigger's tables or more, each a block read when cold (a scan cannot skip a
/// table by its bloom filter).
pub(crate) fn slows_reads(opts: &crate::Options, level0_tables: usize) -> bool {
    level0_tables >= 2 * opts.level0_compaction_trigger.max(1)
}

/// Whether flushes must not wait with `frozen` memtables waiting for flush: writers stall at
/// the next full memtable.
pub(crate) fn flush_urgent(opts: &crate::Options, frozen: usize) -> bool {
    frozen >= opts.max_immutable_memtables.max(1)
}

/// The sync latency above which the device is taken to be busy with compaction bytes: twice
/// the idle latency, plus 100 µs of slack for the small, noisy latencies of fast devices.
pub(crate) fn target(base: Duration) -> Duration {
    base * 2 + Duration::from_micros(100)
}

/// A foreground read of a data block that missed the block cache and took this long or more
/// waited for the device: a 4 KiB read served by the OS page cache takes a few microseconds,
/// one from even a fast NVMe device about 80 or more.
pub(crate) const DEVICE_READ: Duration = Duration::from_micros(50);
/// Device reads are averaged over at least this long into one latency sample...
const READ_SAMPLE: Duration = Duration::from_millis(20);
/// ...made of at least this many of them (fewer are carried into the next sample, for at most
/// [`ACTIVE`]).
const READ_SAMPLE_MIN: u64 = 4;

/// Foreground reads that waited for the device ([`DEVICE_READ`] or longer): how many, and
/// their total latency. Counted by the readers (see [`crate::cache::TableBlocks`]),
/// averaged by the pacer.
#[derive(Debug, Default)]
pub(crate) struct DeviceReads {
    count: AtomicU64,
    micros: AtomicU64,
}

impl DeviceReads {
    /// Counts a read of a data block that missed the block cache and took `took`.
    pub fn note(&self, took: Duration) {
        if took >= DEVICE_READ {
            self.count.fetch_add(1, Ordering::Relaxed);
            self.micros.fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        }
    }

    /// Device reads so far and their total latency, microseconds.
    pub fn totals(&self) -> (u64, u64) {
        (self.count.load(Ordering::Relaxed), self.micros.load(Ordering::Relaxed))
    }
}

/// Turns the running totals of [`DeviceReads`] into latency samples for a [`Control`].
#[derive(Debug, Default)]
pub(crate) struct ReadSampler {
    /// When the current sample started, and the totals then.
    mark: Option<(Instant, u64, u64)>,
}

impl ReadSampler {
    /// The mean latency of the device reads since the last sample, if [`READ_SAMPLE`] has
    /// passed and [`READ_SAMPLE_MIN`] of them were made, given the totals `(count, micros)`
    /// as of `now`.
    pub fn sample(&mut self, now: Instant, (count, micros): (u64, u64)) -> Option<Duration> {
        let Some((at, count0, micros0)) = self.mark else {
            self.mark = Some((now, count, micros));
            return None;
        };
        let age = now.saturating_duration_since(at);
        if age < READ_SAMPLE {
            return None;
        }
        let n = count.saturating_sub(count0);
        if n >= READ_SAMPLE_MIN {
            self.mark = Some((now, count, micros));
            return Some(Duration::from_micros(micros.saturating_sub(micros0) / n));
        }
        if age >= ACTIVE {
            self.mark = Some((now, count, micros));
        }
        None
    }
}

/// Compaction pacing by one latency: of synced writes' log syncs
/// ([`crate::Options::sync_pacing`]) or of foreground reads from the device
/// ([`crate::Options::read_pacing`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaceStats {
    /// Bytes per second compactions may write.
    pub rate: u64,
    /// Latency taken for the idle device's (the lowest smoothed latency of the last 10-20 s),
    /// microseconds.
    pub idle_micros: u64,
    /// Smoothed latency, microseconds.
    pub smoothed_micros: u64,
}

/// The pacing state; times are given, so that tests can drive it.
#[derive(Debug)]
pub(crate) struct Control {
    last_sample: Option<Instant>,
    window_start: Option<Instant>,
    cur_min: Duration,
    prev_min: Duration,
    /// Smoothed sync latency (1/8 of each new sample).
    smoothed: Duration,
    /// Bytes per second compactions may write while pacing is on.
    rate: f64,
    last_cut: Option<Instant>,
    last_raise: Option<Instant>,
    /// When the bytes paced so far are due.
    next: Option<Instant>,
    /// When the slow reads were last counted, and their count then.
    reads_mark: Option<(Instant, u64)>,
    /// Slow reads came at [`SLOW_READS_URGENT`] per second or more at the last count.
    read_pressure: bool,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            last_sample: None,
            window_start: None,
            cur_min: Duration::MAX,
            prev_min: Duration::MAX,
            smoothed: Duration::ZERO,
            rate: START_RATE,
            last_cut: None,
            last_raise: None,
            next: None,
            reads_mark: None,
            read_pressure: false,
        }
    }
}

impl Control {
    /// Whether a sample came within [`ACTIVE`] of `now` (synced writes or device reads
    /// happen).
    pub fn active(&self, now: Instant) -> bool {
        self.last_sample.is_some_and(|t| now.saturating_duration_since(t) < ACTIVE)
    }

    /// The sync latency taken for an idle device's.
    pub fn idle(&self) -> Duration {
        self.cur_min.min(self.prev_min)
    }

    /// A latency sample (a synced write's sync, or the mean of device reads) of `took`,
    /// taken at `now`.
    pub fn on_sample(&mut self, now: Instant, took: Duration) {
        if !self.active(now) {
            // Pacing starts again from the start rate and a fresh smoothed latency.
            self.rate = START_RATE;
            self.smoothed = took;
            self.last_cut = None;
            self.last_raise = Some(now);
            self.next = None;
        }
        self.last_sample = Some(now);
        self.smoothed = (self.smoothed * 7 + took) / 8;
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < WINDOW => {
                self.cur_min = self.cur_min.min(self.smoothed);
            }
            _ => {
                self.prev_min = self.cur_min;
                self.cur_min = self.smoothed;
                self.window_start = Some(now);
            }
        }
        let base = self.idle();
        let raised = self.last_raise.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.last_raise = Some(now);
        if self.smoothed > target(base) {
            if self.last_cut.is_none_or(|t| now.saturating_duration_since(t) >= CUT_EVERY) {
                self.rate = (self.rate / 2.0).max(MIN_RATE);
                self.last_cut = Some(now);
            }
        } else {
            self.rate = (self.rate + GAIN * raised.as_secs_f64()).min(MAX_RATE);
        }
    }

    /// Whether reads slowed by level 0 ([`slows_reads`]; `count` of them so far) came at
    /// [`SLOW_READS_URGENT`] per second or more over the last [`READ_WINDOW`] or more.
    pub fn read_pressure(&mut self, now: Instant, count: u64) -> bool {
        match self.reads_mark {
            Some((at, seen)) if now.saturating_duration_since(at) >= READ_WINDOW => {
                let secs = now.saturating_duration_since(at).as_secs_f64();
                self.read_pressure = count.saturating_sub(seen) as f64 >= SLOW_READS_URGENT * secs;
                self.reads_mark = Some((now, count));
            }
            Some(_) => {}
            None => self.reads_mark = Some((now, count)),
        }
        self.read_pressure
    }

    /// The state, if active as of `now`.
    pub fn stats(&self, now: Instant) -> Option<PaceStats> {
        self.active(now).then(|| PaceStats {
            rate: self.rate as u64,
            idle_micros: self.idle().as_micros() as u64,
            smoothed_micros: self.smoothed.as_micros() as u64,
        })
    }

    /// How long a compaction that wrote `bytes` more waits before writing on, as of `now`;
    /// zero while inactive.
    pub fn delay(&mut self, now: Instant, bytes: u64) -> Duration {
        if !self.active(now) {
            self.next = None;
            return Duration::ZERO;
        }
        let from = match self.next {
            Some(next) if next + BURST > now => next,
            _ => now.checked_sub(BURST).unwrap_or(now),
        };
        let next = from + Duration::from_secs_f64(bytes as f64 / self.rate);
        self.next = Some(next);
        next.saturating_duration_since(now)
    }
}

/// The `level` of a flush's output for [`Pacer::pace`].
pub(crate) const FLUSH: usize = usize::MAX;
/// [`Pacer::pace`]'s level for an intra-level-0 merge.
pub(crate) const INTRA_L0: usize = usize::MAX - 1;

/// What decides whether a compaction that wrote a chunk waits, and on which latency: a
/// snapshot taken by [`Pacer::pace`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PaceView {
    /// What wrote: a compaction out of this level, [`INTRA_L0`], or [`FLUSH`].
    pub level: usize,
    /// Synced writes happen (a sync within [`ACTIVE`]) and pacing by them is on.
    pub syncs_on: bool,
    /// Reads wait for the device (a sample within [`ACTIVE`]) and pacing by them is on.
    pub reads_on: bool,
    /// Level 0 weighs [`l0_unpaced_weight`] or more ([`Pacer::set_urgent`]).
    pub l0_urgent: bool,
    /// As many memtables wait for flush as may ([`flush_urgent`]).
    pub flush_urgent: bool,
    /// Scans that merge many level-0 tables come at [`SLOW_READS_URGENT`] per second or more
    /// ([`Control::read_pressure`]; asked only for compactions out of level 0).
    pub scans_pay: bool,
}

/// What a compaction does after writing a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Nothing is paced (no synced writes, no device reads): write on, and leave write-back
    /// to the kernel.
    Off,
    /// Paced, but this output must not wait: start write-back of the chunk and write on.
    Urgent,
    /// Wait as long as the slower of the named controllers asks, then start write-back.
    Wait {
        /// The sync-latency controller is asked.
        syncs: bool,
        /// The device-read controller is asked.
        reads: bool,
    },
}

impl PaceView {
    /// The pacing rule. Off when neither latency is watched. Urgent: a compaction out of level 0
    /// while level 0 is urgent; an intra-level-0 merge while level 0 is urgent or scans pay
    /// for its tables (level-0 tables cost every such scan a block read each, so merging them
    /// into one goes before the synced writes' and the reads' latency, as LevelDB's
    /// seek-triggered and Pebble's read-triggered compactions let reads ask for compactions;
    /// the merge is bounded, `pick_intra_l0`); a flush while writers would stall at the next
    /// full memtable. Otherwise it waits for the sync controller when synced writes happen,
    /// and for the read controller when reads wait for the device, except a compaction out of
    /// level 0 while scans pay for level 0's tables: it is what speeds them up (the sync
    /// controller still paces it: synced writers gain nothing from it).
    pub fn decide(&self) -> Pace {
        if !self.syncs_on && !self.reads_on {
            return Pace::Off;
        }
        let urgent = match self.level {
            0 => self.l0_urgent,
            INTRA_L0 => self.l0_urgent || self.scans_pay,
            FLUSH => self.flush_urgent,
            _ => false,
        };
        if urgent {
            return Pace::Urgent;
        }
        Pace::Wait { syncs: self.syncs_on, reads: self.reads_on && !(self.level == 0 && self.scans_pay) }
    }
}

/// The engine's pacer: a [`Control`] for sync latency and one for device reads, behind locks,
/// and whether level 0 and flushes are urgent.
#[derive(Debug, Default)]
pub(crate) struct Pacer {
    control: Mutex<Control>,
    /// Paces by the latency of device reads ([`DeviceReads`]).
    reads: Mutex<(Control, ReadSampler)>,
    device_reads: Arc<DeviceReads>,
    urgent: AtomicBool,
    flush_urgent: AtomicBool,
    /// Set at shutdown: no compaction waits any more.
    stopped: AtomicBool,
    /// Reads that merged many level-0 tables ([`Pacer::note_slow_read`]).
    slow_reads: AtomicU64,
    /// Pacing by sync latency is off ([`crate::Options::sync_pacing`]).
    syncs_disabled: bool,
    /// Pacing by device reads is off ([`crate::Options::read_pacing`]).
    reads_disabled: bool,
    /// Microseconds compactions waited.
    waited: AtomicU64,
}

impl Pacer {
    /// A pacer that paces by sync latency (`by_syncs`) and by the latency of the reads counted
    /// in `device_reads` (`by_reads`), or never.
    pub fn new(by_syncs: bool, by_reads: bool, device_reads: Arc<DeviceReads>) -> Self {
        Pacer { syncs_disabled: !by_syncs, reads_disabled: !by_reads, device_reads, ..Pacer::default() }
    }

    /// Reports the latency of a synced write's sync.
    pub fn on_sync(&self, took: Duration) {
        if !self.syncs_disabled {
            self.control.lock().on_sample(Instant::now(), took);
        }
    }

    /// Level 0 holds so many tables that its compactions must not wait.
    pub fn set_urgent(&self, urgent: bool) {
        self.urgent.store(urgent, Ordering::Relaxed);
    }

    /// So many memtables wait for flush that writers stall at the next full one: flushes must
    /// not wait.
    pub fn set_flush_urgent(&self, urgent: bool) {
        self.flush_urgent.store(urgent, Ordering::Relaxed);
    }

    /// Counts a read that merged many level-0 tables ([`slows_reads`]).
    pub fn note_slow_read(&self) {
        self.slow_reads.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits as long as the rates ask after a compaction (out of `level`; a flush: [`FLUSH`])
    /// wrote `bytes` more (in slices of at most 10 ms, so that a shutdown ends the wait);
    /// returns whether pacing is on (synced writes or device reads happen), when the caller
    /// starts write-back of those bytes (urgent level-0 compactions and flushes do not wait,
    /// but write back too).
    pub fn pace(&self, level: usize, bytes: u64) -> bool {
        if self.syncs_disabled && self.reads_disabled {
            return false;
        }
        let wait = {
            // Always in this order: sync control, then read control.
            let (mut syncs, mut reads, now) = (self.control.lock(), self.reads.lock(), Instant::now());
            let syncs_on = !self.syncs_disabled && syncs.active(now);
            let reads_on = !self.reads_disabled && {
                let (control, sampler) = &mut *reads;
                if let Some(took) = sampler.sample(now, self.device_reads.totals()) {
                    control.on_sample(now, took);
                }
                control.active(now)
            };
            // Whether scans pay for level 0's tables is asked (and its window moved on) only
            // for compactions out of level 0, and only while something is paced.
            let scans_pay = (syncs_on || reads_on)
                && matches!(level, 0 | INTRA_L0)
                && syncs.read_pressure(now, self.slow_reads.load(Ordering::Relaxed));
            let view = PaceView {
                level,
                syncs_on,
                reads_on,
                l0_urgent: self.urgent.load(Ordering::Relaxed),
                flush_urgent: self.flush_urgent.load(Ordering::Relaxed),
                scans_pay,
            };
            match view.decide() {
                Pace::Off => return false,
                Pace::Urgent => return true,
                Pace::Wait { syncs: by_syncs, reads: by_reads } => {
                    let by_syncs = if by_syncs { syncs.delay(now, bytes) } else { Duration::ZERO };
                    let by_reads = if by_reads { reads.0.delay(now, bytes) } else { Duration::ZERO };
                    by_syncs.max(by_reads)
                }
            }
        };
        let start = Instant::now();
        while !self.stopped.load(Ordering::Acquire) {
            let left = wait.saturating_sub(start.elapsed());
            if left.is_zero() {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(10)));
        }
        self.waited.fetch_add(start.elapsed().as_micros() as u64, Ordering::Relaxed);
        true
    }

    /// Ends every wait, now and later (the engine is shutting down).
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// Microseconds compactions waited so far.
    pub fn waited_micros(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }

    /// The pacing state by sync latency, if that pacing is on.
    pub fn stats(&self) -> Option<PaceStats> {
        self.control.lock().stats(Instant::now())
    }

    /// The pacing state by device reads' latency, if that pacing is on.
    pub fn read_stats(&self) -> Option<PaceStats> {
        self.reads.lock().0.stats(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const US: Duration = Duration::from_micros(1);

    /// The pacing rule, case by case: what each output does with each latency watched, level 0
    /// and the memtables urgent or not, and scans paying for level 0's tables or not.
    #[test]
    fn the_pacing_rule() {
        use Pace::*;
        let v = |level, syncs_on, reads_on, l0_urgent, flush_urgent, scans_pay| PaceView {
            level,
            syncs_on,
            reads_on,
            l0_urgent,
            flush_urgent,
            scans_pay,
        };
        let both = Wait { syncs: true, reads: true };
        let cases = [
            // level, syncs, reads, l0 urgent, flush urgent, scans pay -> pace
            (v(0, false, false, true, true, true), Off),
            (v(FLUSH, false, false, false, false, false), Off),
            (v(3, false, false, false, false, false), Off),
            (v(0, true, true, false, false, false), both),
            (v(0, true, false, false, false, false), Wait { syncs: true, reads: false }),
            (v(0, false, true, false, false, false), Wait { syncs: false, reads: true }),
            (v(0, true, true, true, false, false), Urgent),
            (v(0, true, true, false, true, false), both),
            // Scans paying for level 0: its compaction into the base level skips the read
            // controller, not the sync controller.
            (v(0, true, true, false, false, true), Wait { syncs: true, reads: false }),
            (v(0, false, true, false, false, true), Wait { syncs: false, reads: false }),
            (v(INTRA_L0, true, true, false, false, false), both),
            (v(INTRA_L0, true, true, true, false, false), Urgent),
            (v(INTRA_L0, false, true, false, false, true), Urgent),
            (v(FLUSH, true, true, false, false, false), both),
            (v(FLUSH, true, false, false, true, false), Urgent),
            (v(FLUSH, true, true, true, false, true), both),
            // Deeper levels are never urgent and always wait for both.
            (v(1, true, true, true, true, true), both),
            (v(6, false, true, true, true, false), Wait { syncs: false, reads: true }),
        ];
        for (view, want) in cases {
            assert_eq!(view.decide(), want, "{view:?}");
        }
    }

    #[test]
    fn level0_is_urgent_at_the_slowdown_trigger() {
        assert_eq!(l0_unpaced_weight(&crate::Options::default()), 20);
        assert_eq!(l0_unpaced_weight(&crate::Options::small_for_tests()), 8);
        let odd = crate::Options { level0_compaction_trigger: 4, level0_slowdown_trigger: 3, ..Default::default() };
        assert_eq!(l0_unpaced_weight(&odd), 4, "never below the compaction trigger");
    }

    #[test]
    fn flushes_are_urgent_when_writers_would_stall_at_the_next_full_memtable() {
        let opts = crate::Options::default();
        assert_eq!(opts.max_immutable_memtables, 2);
        assert!(!flush_urgent(&opts, 1));
        assert!(flush_urgent(&opts, 2));
        let one = crate::Options { max_immutable_memtables: 0, ..Default::default() };
        assert!(flush_urgent(&one, 1), "at least one frozen memtable is allowed");
    }

    #[test]
    fn off_without_synced_writes() {
        let mut c = Control::default();
        let t0 = Instant::now();
        assert!(!c.active(t0));
        assert_eq!(c.delay(t0, 64 << 20), Duration::ZERO);
        c.on_sample(t0, 300 * US);
        assert!(c.active(t0 + 500 * MS));
        assert!(!c.active(t0 + ACTIVE), "pacing stops a second after the last synced write");
        assert_eq!(c.delay(t0 + ACTIVE, 64 << 20), Duration::ZERO);
    }

    #[test]
    fn delays_follow_the_rate() {
        let mut c = Control::default();
        let t0 = Instant::now();
        c.on_sample(t0, 300 * US);
        let rate = c.rate;
        // Back to back chunks: the first rides on the burst allowance, then each waits a
        // chunk's time at the rate.
        let first = c.delay(t0, CHUNK);
        let second = c.delay(t0, CHUNK);
        let per_chunk = Duration::from_secs_f64(CHUNK as f64 / rate);
        assert_eq!(first, per_chunk - BURST);
        assert_eq!(second, per_chunk * 2 - BURST);
        // After a long pause the allowance is only the burst.
        let later = t0 + 900 * MS;
        assert_eq!(c.delay(later, CHUNK), per_chunk - BURST);
    }

    #[test]
    fn slow_syncs_halve_the_rate_and_fast_ones_raise_it() {
        let mut c = Control::default();
        let mut t = Instant::now();
        for _ in 0..50 {
            c.on_sample(t, 300 * US);
            t += MS;
        }
        let grown = c.rate;
        assert!(grown > START_RATE, "steady latency raises the rate: {grown}");
        assert!(grown <= START_RATE + GAIN * 0.05 + 1.0);
        // Latency climbs far above twice the idle one: the smoothed latency crosses the target
        // within a few syncs and the rate halves, once per CUT_EVERY at most.
        for _ in 0..10 {
            c.on_sample(t, 5 * MS);
            t += MS;
        }
        assert_eq!(c.rate, grown / 2.0);
        for _ in 0..200 {
            c.on_sample(t, 5 * MS);
            t += MS;
        }
        assert!(c.rate < grown / 4.0);
        for _ in 0..10_000 {
            c.on_sample(t, 5 * MS);
            t += MS;
        }
        assert_eq!(c.rate, MIN_RATE, "the rate stops at its floor");
    }

    #[test]
    fn a_device_that_stays_slower_becomes_the_new_idle() {
        let mut c = Control::default();
        let mut t = Instant::now();
        c.on_sample(t, 100 * US);
        // Every sync takes 2 ms from now on: after two windows that is the idle latency and
        // the rate grows again.
        for _ in 0..(2 * WINDOW.as_millis() as usize / 10 + 10) {
            t += 10 * MS;
            c.on_sample(t, 2 * MS);
        }
        let before = c.rate;
        t += 10 * MS;
        c.on_sample(t, 2 * MS);
        assert!(c.rate > before);
    }

    /// Syncs that overlap: every other one finds the cache already flushed and returns at
    /// once. The idle latency is the smoothed one, not those outliers, so steady latencies
    /// raise the rate.
    #[test]
    fn fast_outliers_do_not_set_the_idle_latency() {
        let mut c = Control::default();
        let mut t = Instant::now();
        for i in 0..2000 {
            t += MS;
            c.on_sample(t, if i % 2 == 0 { MS } else { 20 * US });
        }
        assert!(c.idle() > 300 * US, "idle {:?}", c.idle());
        assert!(c.rate > START_RATE, "rate {}", c.rate);
    }

    #[test]
    fn restarting_after_a_pause_starts_over() {
        let mut c = Control::default();
        let mut t = Instant::now();
        c.on_sample(t, 100 * US);
        for _ in 0..1000 {
            t += MS;
            c.on_sample(t, 5 * MS);
        }
        c.on_sample(t, 100 * US);
        assert!(c.rate < START_RATE);
        t += ACTIVE * 2;
        c.on_sample(t, 100 * US);
        assert_eq!(c.rate, START_RATE);
    }

    #[test]
    fn the_pacer_skips_urgent_level0_and_flushes_and_disabled() {
        let p = Pacer::new(true, false, Arc::default());
        p.on_sync(Duration::from_micros(100));
        assert!(p.stats().is_some());
        p.set_urgent(true);
        let t = Instant::now();
        assert!(p.pace(0, 256 << 20), "urgent level-0 output is still written back");
        assert!(t.elapsed() < Duration::from_secs(1), "urgent level-0 compactions are not paced");
        p.set_urgent(false);
        p.set_flush_urgent(true);
        assert!(p.pace(FLUSH, 256 << 20), "urgent flush output is still written back");
        assert!(t.elapsed() < Duration::from_secs(1), "urgent flushes are not paced");
        p.set_flush_urgent(false);
        p.stop();
        assert!(p.pace(3, 256 << 20));
        assert!(t.elapsed() < Duration::from_secs(1), "a stopped pacer makes no compaction wait");
        let off = Pacer::new(false, false, Arc::default());
        off.on_sync(Duration::from_micros(100));
        assert!(off.stats().is_none());
        assert!(!off.pace(3, 256 << 20), "a disabled pacer never asks for write-back");
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn only_reads_that_waited_for_the_device_count() {
        let r = DeviceReads::default();
        r.note(5 * US);
        r.note(DEVICE_READ - US);
        assert_eq!(r.totals(), (0, 0), "page-cache hits are not the device's");
        r.note(DEVICE_READ);
        r.note(MS);
        assert_eq!(r.totals(), (2, 50 + 1000));
    }

    #[test]
    fn device_reads_are_averaged_into_samples() {
        let mut s = ReadSampler::default();
        let t = Instant::now();
        assert_eq!(s.sample(t, (0, 0)), None, "the first call only sets the mark");
        assert_eq!(s.sample(t + READ_SAMPLE / 2, (10, 10_000)), None, "too soon");
        assert_eq!(s.sample(t + READ_SAMPLE, (10, 10_000)), Some(MS), "mean of ten 1 ms reads");
        // Too few reads: carried into the next sample...
        let t = t + READ_SAMPLE;
        assert_eq!(s.sample(t + READ_SAMPLE, (12, 10_600)), None);
        assert_eq!(s.sample(t + READ_SAMPLE * 2, (14, 11_000)), Some(250 * US), "(600 + 400) / 4");
        // ...for at most ACTIVE: an old read is not averaged with much later ones.
        let t = t + READ_SAMPLE * 2;
        assert_eq!(s.sample(t + ACTIVE, (15, 20_000)), None);
        assert_eq!(s.sample(t + ACTIVE + READ_SAMPLE, (19, 20_400)), Some(100 * US));
    }

    /// Reads that wait for the device turn pacing on with no synced writes, and a
    /// compaction out of level 1+ waits; reads served from memory leave it off.
    #[test]
    fn device_reads_pace_compactions() {
        let reads = Arc::new(DeviceReads::default());
        let p = Pacer::new(true, true, reads.clone());
        for _ in 0..100 {
            reads.note(5 * US);
        }
        assert!(!p.pace(3, CHUNK), "the first call marks");
        std::thread::sleep(READ_SAMPLE);
        assert!(!p.pace(3, CHUNK), "page-cache hits do not pace");
        assert!(p.read_stats().is_none());
        for _ in 0..10 {
            reads.note(2 * MS);
        }
        std::thread::sleep(READ_SAMPLE);
        let t = Instant::now();
        assert!(p.pace(3, CHUNK), "device reads pace");
        assert!(p.read_stats().is_some_and(|s| s.smoothed_micros == 2000 && s.rate == START_RATE as u64));
        assert!(p.stats().is_none(), "the sync latency's pacing stays off");
        assert!(p.pace(3, CHUNK));
        let per_chunk = Duration::from_secs_f64(CHUNK as f64 / START_RATE);
        assert!(t.elapsed() >= per_chunk * 2 - BURST, "{:?}", t.elapsed());
        // Urgent level 0 is not paced by reads either.
        p.set_urgent(true);
        let t = Instant::now();
        assert!(p.pace(0, 256 << 20));
        assert!(t.elapsed() < Duration::from_secs(1));
        p.set_urgent(false);
        // Nor is level 0 while scans pay for its tables.
        assert!(p.pace(0, CHUNK), "paced (and the slow reads' count marked)");
        for _ in 0..100 {
            p.note_slow_read();
        }
        for _ in 0..10 {
            reads.note(2 * MS);
        }
        std::thread::sleep(READ_WINDOW.max(READ_SAMPLE));
        let t = Instant::now();
        assert!(p.pace(0, 256 << 20));
        assert!(t.elapsed() < Duration::from_secs(1), "not paced: {:?}", t.elapsed());
        let t = Instant::now();
        assert!(p.pace(3, CHUNK * 8));
        assert!(t.elapsed() >= per_chunk * 2, "other levels still are: {:?}", t.elapsed());
        // Off: the same reads change nothing.
        let off = Pacer::new(true, false, reads.clone());
        assert!(!off.pace(3, CHUNK));
        reads.note(2 * MS);
        std::thread::sleep(READ_SAMPLE);
        assert!(!off.pace(3, CHUNK));
    }

    #[test]
    fn read_pressure_is_the_rate_of_slow_reads_over_the_last_window() {
        let mut c = Control::default();
        let t = Instant::now();
        let at = |ms: u64| t + Duration::from_millis(ms);
        assert!(!c.read_pressure(t, 0), "the first count only sets the mark");
        assert!(!c.read_pressure(at(600), 10), "10 in 0.6 s: 17 per second");
        assert!(c.read_pressure(at(1200), 50), "40 in 0.6 s: 67 per second");
        assert!(c.read_pressure(at(1300), 50), "within the window the last answer holds");
        assert!(!c.read_pressure(at(1900), 55), "5 in 0.7 s");
    }

    /// Scans that merge many level-0 tables lift the sync controller's pacing of intra-level-0
    /// merges, not of other compactions out of level 0.
    #[test]
    fn intra_level0_merges_are_not_paced_while_scans_pay_for_level_0() {
        let p = Pacer::new(true, false, Arc::default());
        p.on_sync(Duration::from_micros(100));
        assert!(p.pace(INTRA_L0, 1 << 20), "paced (and the slow reads' count marked)");
        for _ in 0..100 {
            p.note_slow_read();
        }
        std::thread::sleep(READ_WINDOW);
        p.on_sync(Duration::from_micros(100));
        let t = Instant::now();
        assert!(p.pace(INTRA_L0, 256 << 20), "written back");
        assert!(t.elapsed() < Duration::from_secs(1), "not paced: {:?}", t.elapsed());
        let mut c = p.control.lock();
        let now = Instant::now();
        assert!(c.delay(now, 256 << 20) > Duration::from_secs(1), "other compactions would wait");
    }

    /// A flush under synced writes, with room for more frozen memtables, is paced too: its
    /// table is written back as it goes.
    #[test]
    fn flushes_under_synced_writes_are_paced() {
        use crate::{Db, MemStorage, Options, WriteOptions};
        use std::sync::Arc;
        let storage = MemStorage::new();
        // No compactions at all: level 0 is scored by its table count only (a second flush
        // that finishes before the first table moves down would otherwise make level 0 big
        // enough to merge), so only flushes write tables.
        let opts = Options {
            level0_compaction_trigger: 100,
            level0_slowdown_trigger: 200,
            level0_stop_trigger: 300,
            dynamic_level_bytes: false,
            max_bytes_for_level_base: 1 << 30,
            ..Options::small_for_tests()
        };
        let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
        let mut n = 0u32;
        while db.stats().flushes == 0 {
            // Values that do not compress, so that the table is as large as the memtable.
            let mut b = crate::WriteBatch::new();
            b.put(format!("key{n:06}"), crate::testing::noise(n.into(), 4000)).unwrap();
            db.write_opt(b, WriteOptions { sync: true }).unwrap();
            n += 1;
            assert!(n < 10_000, "no flush");
        }
        assert_eq!(db.stats().compactions, 0, "only flushes wrote tables");
        assert_eq!(db.stats().compaction_bytes_written, 0, "only flushes wrote tables");
        assert!(storage.write_backs() > 0, "the flush's table was written back while synced writes happened");
        drop(db);
        storage.crash();
        let db = Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap();
        assert_eq!(db.iter().count(), n as usize);
    }

    /// Under synced writes, compaction output is paced and written back as it goes; with
    /// pacing off it is not; a power cut loses no acknowledged write either way.
    #[test]
    fn compactions_under_synced_writes_are_paced_and_lose_nothing() {
        use crate::{Db, MemStorage, Options, WriteBatch, WriteOptions};
        use std::sync::Arc;
        for pacing in [true, false] {
            let storage = MemStorage::new();
            storage.set_sync_delay(Duration::from_micros(100));
            let opts = Options { sync_pacing: pacing, ..Options::small_for_tests() };
            let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
            let keys = 2000;
            for i in 0..(keys / 10) {
                let mut b = WriteBatch::new();
                for j in 0..10 {
                    // Every key once, in an order that spreads each batch over the key space.
                    let k = (i * 10 + j) * 7919 % keys;
                    b.put(format!("key{k:06}"), crate::testing::noise(k as u64, 1000)).unwrap();
                }
                db.write_opt(b, WriteOptions { sync: true }).unwrap();
            }
            let s = db.stats();
            assert!(s.compactions > 0, "the test needs compactions");
            if pacing {
                assert!(storage.write_backs() > 0, "compaction output was written back while synced writes happened");
            } else {
                assert_eq!(storage.write_backs(), 0);
                assert_eq!(s.compaction_paced_micros, 0);
                assert_eq!(s.compaction_pacing, None);
            }
            drop(db);
            storage.crash();
            let db = Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap();
            assert_eq!(db.iter().count(), keys as usize, "pacing={pacing}");
        }
    }
}
