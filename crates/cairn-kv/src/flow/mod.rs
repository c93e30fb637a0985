//! Flow control.

pub mod pacer;

use std::time::{Duration, Instant};

/// Why a writer waited.
#[derive(Clone, Copy, Debug)]
pub enum Stall {
    /// Level 0 weighed `level0_slowdown_trigger`: writes held to `delayed_write_rate`.
    Slowdown,
    /// Level 0 weighed `level0_stop_trigger`.
    Stop,
    /// The memtable was full with `max_immutable_memtables` waiting for flush.
    Memtables,
}

/// The delay writes owe while they are held to a rate: each write adds its bytes' time at
/// the rate, and the time passed until the next one pays it off, so writers that are
/// already no faster than the rate are not held back at all and faster ones are held to
/// it, not below it. Adding the delay alone, as before, held writers to a rate well under
/// the one asked, their own time coming on top of it (writers at 100 MB/s held to 84 MB/s
/// would make about 46). Slept in steps of a millisecond or more; a pause of the writers
/// earns no credit for later.
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

/// Bytes per second writes may make with level 0 weighing `l0` ([`crate::version::l0_weight`]),
/// between the slowdown and stop triggers: `rate` at the slowdown trigger, falling in
/// proportion to the weight left before the stop trigger.
pub(crate) fn slowdown_rate(rate: u64, l0: usize, slowdown: usize, stop: usize) -> u64 {
    let left = stop.saturating_sub(l0).max(1) as u64;
    let span = stop.saturating_sub(slowdown).max(1) as u64;
    (rate.saturating_mul(left) / span).max(1)
}
