//! The writers' side of flow control: from a snapshot of level 0 and the memtables
//! ([`WriterView`]) to the next step of a group's lead step ([`WriterStep`]: go, switch the
//! memtable, slow down, or stop), the rate a slowed writer is held to ([`write_rate`], with
//! [`catch_up_rate`] for a running level-0 merge), and the delay that rate costs
//! ([`SlowdownDebt`]). Pure: the write path takes the snapshot and obeys
//! (`crate::db::write::make_room`).

use std::time::{Duration, Instant};

use crate::Options;

/// Why a writer waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stall {
    /// Level 0 weighed `level0_slowdown_trigger`: writes held to `delayed_write_rate`.
    Slowdown,
    /// Level 0 weighed `level0_stop_trigger`.
    Stop,
    /// The memtable was full with `max_immutable_memtables` waiting for flush.
    Memtables,
}

/// `bytes` in memtables' worth (`memtable_size` each, rounded up): what level-0 bytes weigh
/// against the level-0 triggers ([`level0_weight`]).
pub(crate) fn memtables_worth(bytes: u64, memtable_size: usize) -> usize {
    usize::try_from(bytes.div_ceil(memtable_size.max(1) as u64)).unwrap_or(usize::MAX)
}

/// What level 0 weighs against the level-0 triggers, with `tables` tables of `bytes` bytes in
/// all: their number, or their bytes in memtables' worth (`memtable_size` each, rounded up),
/// whichever is more. A flush adds at most a memtable's worth and one table; an intra-level-0
/// merge takes tables away but none of the bytes that must still be merged into the base
/// level, so counted by tables alone, level 0 could grow without writers being slowed. By
/// bytes, level 0 is held to the size the triggers allow flushes to reach: 20 memtables'
/// worth at the default slowdown trigger. The record of the bulk load that showed it:
/// `docs/design/2026-12-07-flow-control.md`.
pub(crate) fn level0_weight(tables: usize, bytes: u64, memtable_size: usize) -> usize {
    tables.max(memtables_worth(bytes, memtable_size))
}

/// What the lead step of a write group sees when it asks for room: a snapshot of level 0
/// and the memtables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WriterView {
    /// Level 0's weight ([`level0_weight`]).
    pub l0_weight: usize,
    /// Bytes in the memtable being written.
    pub memtable_bytes: usize,
    /// Frozen memtables waiting for flush.
    pub frozen: usize,
    /// Whether this group already slept for the slowdown (it is slowed once per group).
    pub slowed: bool,
}

/// The next step of a write group's lead step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriterStep {
    /// Write now.
    Go,
    /// Freeze the memtable and start a new one, then look again.
    SwitchMemtable,
    /// Hold the group to [`write_rate`] (sleep what [`SlowdownDebt::owe`] says), then look
    /// again.
    Slow,
    /// Wait for a flush or a compaction (at most [`STALL_WAIT`]), then look again.
    Stop(Stall),
}

/// The longest a stopped writer waits before it looks again.
pub(crate) const STALL_WAIT: Duration = Duration::from_millis(100);

impl WriterView {
    /// The step `opts` ask for: stop at the stop trigger; slow down (once per group) from the
    /// slowdown trigger; write if the memtable has room; stop while as many memtables wait for
    /// flush as may; switch memtables otherwise.
    pub fn step(&self, opts: &Options) -> WriterStep {
        if self.l0_weight >= opts.level0_stop_trigger {
            return WriterStep::Stop(Stall::Stop);
        }
        if owes_delay(opts, self.l0_weight) && !self.slowed {
            return WriterStep::Slow;
        }
        if self.memtable_bytes < opts.memtable_size {
            return WriterStep::Go;
        }
        if self.frozen >= opts.max_immutable_memtables.max(1) {
            return WriterStep::Stop(Stall::Memtables);
        }
        WriterStep::SwitchMemtable
    }
}

/// Whether the lead step may write at once on the view it reads without the state lock (level
/// 0's weight and the memtable's bytes): level 0 under its slowdown trigger and room in the
/// memtable. Otherwise it takes the lock and asks [`WriterView::step`]. (With triggers set
/// oddly, the stop trigger below the slowdown trigger, this lets writes through that `step`
/// would stop, as the engine always has.)
pub(crate) fn go_without_lock(opts: &Options, l0_weight: usize, memtable_bytes: usize) -> bool {
    !owes_delay(opts, l0_weight) && memtable_bytes < opts.memtable_size
}

/// Whether writes owe a delay: level 0 weighs its slowdown trigger or more. Below it, the
/// delay owed is forgotten ([`SlowdownDebt::clear`]).
pub(crate) fn owes_delay(opts: &Options, l0_weight: usize) -> bool {
    l0_weight >= opts.level0_slowdown_trigger
}

/// Bytes per second writes are held to with level 0 weighing `l0_weight` (at the slowdown
/// trigger or over it): [`slowdown_rate`] of `delayed_write_rate`, or `catch_up` (see
/// [`catch_up_rate`]) if that is faster.
pub(crate) fn write_rate(opts: &Options, l0_weight: usize, catch_up: u64) -> u64 {
    let (slowdown, stop) = (opts.level0_slowdown_trigger, opts.level0_stop_trigger);
    slowdown_rate(opts.delayed_write_rate, l0_weight, slowdown, stop).max(catch_up)
}

/// Bytes per second writes may make with level 0 weighing `l0` ([`level0_weight`]), between
/// the slowdown and stop triggers: `rate` at the slowdown trigger, falling in proportion to
/// the weight left before the stop trigger.
pub(crate) fn slowdown_rate(rate: u64, l0: usize, slowdown: usize, stop: usize) -> u64 {
    let left = stop.saturating_sub(l0).max(1) as u64;
    let span = stop.saturating_sub(slowdown).max(1) as u64;
    (rate.saturating_mul(left) / span).max(1)
}

/// What [`catch_up_rate`] needs to know of a running compaction from level 0 into a lower
/// level.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct CatchUp {
    /// Level 0's weight, its every table counted.
    pub l0_weight: usize,
    /// The level-0 tables the merge leaves (not among its inputs), and their bytes.
    pub tables_left: usize,
    pub bytes_left: u64,
    /// The time the merge still needs at its speed so far (`None`: too early to tell).
    pub time_left: Option<Duration>,
    /// Memtables not yet flushed, the one being written included.
    pub pending_memtables: usize,
    /// Bytes of the last flush's table per memtable byte.
    pub flush_ratio: f64,
}

/// Bytes per second writes may make, with level 0 at its slowdown trigger or over it, and
/// still leave level 0 under its stop trigger until the running compaction from level 0 into
/// a lower level ends, and under its slowdown trigger once it has (its tables gone, the rest
/// weighed by their bytes and by no more tables than intra-level-0 merges leave): the
/// memtables' worth of room left both ways, less the pending memtables, spread over the time
/// the compaction still needs. 0 when it is too early to tell how long it needs, or when
/// there is no room. Writes are then held to this rate, not slower, when
/// [`Options::delayed_write_rate`] would hold them slower (see the design record
/// `docs/design/2026-12-07-flow-control.md`
/// for the runs that showed why).
pub(crate) fn catch_up_rate(opts: &Options, c: &CatchUp) -> u64 {
    let Some(left) = c.time_left else { return 0 };
    // The tables the merge leaves weigh their bytes, and their count only up to what
    // intra-level-0 merges leave unmerged: while level 0 merges down, a thread is kept for
    // them (`compaction::picker::pick`), and they fold the flushes that land into one table
    // once `level0_compaction_trigger + 2` are there. Counted one by one, flushes of a
    // memtable that compresses well weighed as if each were a memtable's worth of bytes still
    // to merge down, and writers were held with the stop trigger never near.
    let after =
        memtables_worth(c.bytes_left, opts.memtable_size).max(c.tables_left.min(opts.level0_compaction_trigger + 2));
    let room = (opts.level0_stop_trigger.saturating_sub(c.l0_weight + 1))
        .min(opts.level0_slowdown_trigger.saturating_sub(after + 1))
        .saturating_sub(c.pending_memtables);
    // With intra-level-0 merges folding the count, a memtable's worth of writes adds its
    // flushed table's bytes to level 0's weight, not a whole memtable's worth; at least a
    // quarter, the least an intra-level-0 merge of the fewest tables leaves of their count.
    let per_memtable = c.flush_ratio.clamp(0.25, 1.0);
    (room as f64 * opts.memtable_size as f64 / per_memtable / left.as_secs_f64().max(1e-3)) as u64
}

/// The delay writes owe while they are held to a rate: each write adds its bytes' time at
/// the rate, and the time passed until the next one pays it off, so writers that are
/// already no faster than the rate are not held back at all and faster ones are held to
/// it, not below it. Adding the delay alone held writers to a rate well under the one asked,
/// their own time coming on top of it. Slept in steps of a millisecond or more; a pause of
/// the writers earns no credit for later.
#[derive(Default)]
pub(crate) struct SlowdownDebt {
    owed: Duration,
    /// When `owed` was last brought up to date (the end of a sleep it asked for).
    at: Option<Instant>,
}

impl SlowdownDebt {
    /// No delay owed: level 0 is under its slowdown trigger.
    pub fn clear(&mut self) {
        *self = SlowdownDebt::default();
    }

    /// A write of `bytes` at `now`, held to `rate` bytes per second: the time to sleep first
    /// if the earlier writes still owe a millisecond or more, the time since the last call
    /// having paid off what it could. Its own bytes' time is owed from then on.
    pub fn owe(&mut self, now: Instant, bytes: u64, rate: u64) -> Option<Duration> {
        if let Some(at) = self.at {
            self.owed = self.owed.saturating_sub(now.saturating_duration_since(at));
        }
        let nap = (self.owed >= Duration::from_millis(1)).then_some(self.owed);
        let own = Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64);
        (self.owed, self.at) = match nap {
            Some(nap) => (own, Some(now + nap)),
            None => (self.owed + own, Some(now)),
        };
        nap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small triggers: slowdown at 4, stop at 8, two frozen memtables at most.
    fn opts() -> Options {
        Options {
            memtable_size: 1000,
            level0_slowdown_trigger: 4,
            level0_stop_trigger: 8,
            max_immutable_memtables: 2,
            delayed_write_rate: 16 << 20,
            ..Options::default()
        }
    }

    /// Every combination of level 0, memtable and flush backlog that matters, and the step
    /// each asks for.
    #[test]
    fn the_writer_steps() {
        use WriterStep::*;
        let view = |l0_weight, memtable_bytes, frozen, slowed| WriterView { l0_weight, memtable_bytes, frozen, slowed };
        let cases = [
            // level 0, memtable bytes, frozen, slowed -> step
            (view(0, 0, 0, false), Go),
            (view(3, 999, 0, false), Go),
            (view(3, 999, 2, false), Go),
            (view(3, 1000, 0, false), SwitchMemtable),
            (view(3, 1000, 1, false), SwitchMemtable),
            (view(3, 1000, 2, false), Stop(Stall::Memtables)),
            (view(3, 5000, 9, true), Stop(Stall::Memtables)),
            (view(4, 0, 0, false), Slow),
            (view(7, 1000, 2, false), Slow),
            (view(4, 0, 0, true), Go),
            (view(7, 1000, 0, true), SwitchMemtable),
            (view(7, 1000, 2, true), Stop(Stall::Memtables)),
            (view(8, 0, 0, false), Stop(Stall::Stop)),
            (view(8, 0, 0, true), Stop(Stall::Stop)),
            (view(30, 1000, 5, true), Stop(Stall::Stop)),
        ];
        for (v, want) in cases {
            assert_eq!(v.step(&opts()), want, "{v:?}");
        }
        // No frozen memtable allowed still lets one wait.
        let one = Options { max_immutable_memtables: 0, ..opts() };
        assert_eq!(view(0, 1000, 0, false).step(&one), SwitchMemtable);
        assert_eq!(view(0, 1000, 1, false).step(&one), Stop(Stall::Memtables));
    }

    /// The lock-free check lets through exactly the views `step` would let go with no frozen
    /// memtable and no slowdown owed.
    #[test]
    fn writes_go_without_the_lock_under_the_slowdown_trigger_with_room() {
        let cases = [
            // level 0, memtable bytes -> go without the lock
            (0, 0, true),
            (3, 999, true),
            (3, 1000, false),
            (4, 0, false),
            (8, 0, false),
        ];
        for (l0, bytes, want) in cases {
            assert_eq!(go_without_lock(&opts(), l0, bytes), want, "{l0} {bytes}");
            let step = WriterView { l0_weight: l0, memtable_bytes: bytes, frozen: 0, slowed: false }.step(&opts());
            assert_eq!(step == WriterStep::Go, want, "{l0} {bytes}");
        }
        // The stop trigger below the slowdown trigger: the lock-free check still lets writes
        // through under the slowdown trigger.
        let odd = Options { level0_slowdown_trigger: 10, level0_stop_trigger: 6, ..opts() };
        assert!(go_without_lock(&odd, 7, 0));
    }

    #[test]
    fn level_0_weighs_its_tables_or_its_bytes() {
        let cases = [
            // tables, bytes, memtable size -> weight
            (0, 0, 100, 0),
            (3, 0, 100, 3),
            (3, 250, 100, 3),
            (3, 301, 100, 4),
            (1, 2_000, 100, 20),
            (5, 1, 0, 5),
        ];
        for (tables, bytes, size, want) in cases {
            assert_eq!(level0_weight(tables, bytes, size), want, "{tables} tables, {bytes} bytes, {size}");
        }
        assert!(owes_delay(&opts(), 4) && !owes_delay(&opts(), 3));
    }

    #[test]
    fn slowed_writes_take_the_faster_of_the_slowdown_and_the_catch_up_rates() {
        let o = opts();
        // Halfway to the stop trigger: half the delayed write rate.
        assert_eq!(write_rate(&o, 6, 0), 8 << 20);
        assert_eq!(write_rate(&o, 6, 1 << 30), 1 << 30);
        assert_eq!(write_rate(&o, 4, 1), 16 << 20);
    }

    /// The catch-up rate spreads the room left over the merge's time, counting pending
    /// memtables and the flushed fraction of a memtable.
    #[test]
    fn the_catch_up_rate() {
        let o =
            Options { level0_compaction_trigger: 2, level0_slowdown_trigger: 20, level0_stop_trigger: 36, ..opts() };
        let c = CatchUp {
            l0_weight: 20,
            tables_left: 2,
            bytes_left: 0,
            time_left: Some(Duration::from_secs(1)),
            pending_memtables: 1,
            flush_ratio: 1.0,
        };
        // Room: min(36 - 21, 20 - 3) - 1 = 14 memtables of 1000 bytes in 1 s.
        assert_eq!(catch_up_rate(&o, &c), 14_000);
        let cases = [
            (CatchUp { time_left: None, ..c }, 0),
            (CatchUp { time_left: Some(Duration::from_secs(2)), ..c }, 7_000),
            (CatchUp { flush_ratio: 0.5, ..c }, 28_000),
            // A flush ratio below a quarter counts as a quarter.
            (CatchUp { flush_ratio: 0.01, ..c }, 56_000),
            // Near the stop trigger: room min(36 - 35, ...) - 1 = 0.
            (CatchUp { l0_weight: 34, ..c }, 0),
            // The tables left weigh their bytes (19 memtables' worth): room 20 - 20 = 0.
            (CatchUp { bytes_left: 19_000, ..c }, 0),
            // Many small tables left count only up to the trigger + 2 = 4: room 20 - 5 - 1.
            (CatchUp { tables_left: 50, ..c }, 14_000),
            (CatchUp { pending_memtables: 20, ..c }, 0),
        ];
        for (c, want) in cases {
            assert_eq!(catch_up_rate(&o, &c), want, "{c:?}");
        }
    }

    #[test]
    fn the_slowdown_credits_the_time_writers_take_themselves() {
        use std::time::{Duration, Instant};
        let t0 = Instant::now();
        let at = |us: u64| t0 + Duration::from_micros(us);
        let ms = |us: u64| Some(Duration::from_micros(us));
        // 1,000 bytes at 1 MB/s: 1 ms each. Writers that take 1 ms per write themselves never
        // sleep.
        let mut d = SlowdownDebt::default();
        for i in 0..10u64 {
            assert_eq!(d.owe(at(i * 1_000), 1_000, 1_000_000), None, "write {i}");
        }
        // Writers twice as fast as the rate (0.5 ms owed per write, 0.25 ms apart) sleep 1 ms
        // every fourth write once the debt has built up: half the time.
        let mut d = SlowdownDebt::default();
        for i in 0..4u64 {
            assert_eq!(d.owe(at(i * 250), 500, 1_000_000), None, "write {i}");
        }
        assert_eq!(d.owe(at(1_000), 500, 1_000_000), ms(1_000));
        // The sleep ends at 2 ms with that write's 0.5 ms owed.
        for i in 0..3u64 {
            assert_eq!(d.owe(at(2_250 + i * 250), 500, 1_000_000), None, "write {i}");
        }
        assert_eq!(d.owe(at(3_000), 500, 1_000_000), ms(1_000));
        // A long pause earns no credit: writes made at once owe their full delay again.
        assert_eq!(d.owe(at(10_000_000), 600, 1_000_000), None);
        assert_eq!(d.owe(at(10_000_000), 600, 1_000_000), None);
        assert_eq!(d.owe(at(10_000_000), 600, 1_000_000), ms(1_200));
        d.clear();
        assert_eq!(d.owe(at(10_000_000), 600, 1_000_000), None);
    }

    #[test]
    fn slowdown_rate_falls_toward_the_stop_trigger() {
        let r = 16 << 20;
        assert_eq!(slowdown_rate(r, 20, 20, 36), r);
        assert_eq!(slowdown_rate(r, 28, 20, 36), r / 2);
        assert_eq!(slowdown_rate(r, 35, 20, 36), r / 16);
        // Degenerate settings never divide by zero or stop writes outright.
        assert_eq!(slowdown_rate(r, 5, 5, 5), r);
        assert_eq!(slowdown_rate(0, 20, 20, 36), 1);
    }
}
