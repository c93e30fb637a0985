//! The sequence numbers of the pipelined write path (see [`crate::write`]): the highest given to
//! a group whose WAL record is written (`allocated`) and the highest visible to readers
//! (`visible`), which trails it while groups insert into the memtable. Groups publish in the
//! order their records were written, so a reader never sees a write while an earlier one is
//! still missing, and a writer returns only once its write is visible (it reads its own writes).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::key::SeqNo;
use crate::{Error, Result};

/// Allocated and visible sequence numbers, and the wait for the latter to catch up.
pub(crate) struct Sequences {
    visible: AtomicU64,
    allocated: AtomicU64,
    /// Threads asleep in [`Sequences::wait_visible`] (a publisher that sees none skips the
    /// lock and the wake-up).
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    published: Condvar,
    /// Set when a group that was given sequence numbers will never publish them (its apply
    /// step panicked): every later group would wait for it forever.
    abandoned: AtomicBool,
}

/// How long a thread waiting for an earlier group to publish spins before it sleeps: a few
/// inserts' time, so that a wait for a group inserting on another core does not sleep (waking
/// costs tens of microseconds), and a wait for one whose thread was descheduled does not keep
/// burning the core that thread needs.
const PUBLISH_SPIN: Duration = Duration::from_micros(20);

/// How long a sleeping waiter sleeps at most before it looks again (a safety net: publishers
/// wake sleepers).
const SLEEP_AT_MOST: Duration = Duration::from_millis(1);

impl Sequences {
    pub fn new(last_seq: SeqNo) -> Self {
        Sequences {
            visible: AtomicU64::new(last_seq),
            allocated: AtomicU64::new(last_seq),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            published: Condvar::new(),
            abandoned: AtomicBool::new(false),
        }
    }

    /// The highest sequence number whose write is complete and visible.
    pub fn visible(&self) -> SeqNo {
        self.visible.load(Ordering::Acquire)
    }

    /// The highest sequence number given to a write whose WAL record is written (it may not
    /// be in the memtable or visible yet).
    pub fn allocated(&self) -> SeqNo {
        self.allocated.load(Ordering::Acquire)
    }

    /// Records that sequence numbers up to `seq` are given out. Only the group-commit leader
    /// calls it, so groups are numbered in the order of their log records.
    pub fn set_allocated(&self, seq: SeqNo) {
        self.allocated.store(seq, Ordering::Release);
    }

    /// Makes `first..=last` visible once every earlier group's are. Fails (and publishes
    /// nothing) if an earlier group was abandoned.
    pub fn publish(&self, first: SeqNo, last: SeqNo) -> Result<()> {
        self.wait_visible(first - 1)?;
        self.visible.store(last, Ordering::Release);
        self.wake_sleepers();
        Ok(())
    }

    /// Records that a group given sequence numbers will never publish them, ending every wait
    /// for them with an error. Called with the engine poisoned: the group's writes may be in
    /// the log but not in the memtable, so nothing after them may become visible.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::Release);
        self.wake_sleepers();
    }

    /// Waits until every group that wrote its WAL record is visible. Called with the WAL lock
    /// held (by the queue's leader, or a forced memtable switch), so that no group is numbered
    /// meanwhile.
    pub fn wait_all_published(&self) -> Result<()> {
        self.wait_visible(self.allocated())
    }

    fn wake_sleepers(&self) {
        // Pairs with the fence in `wait_visible`: either the sleeper sees the change before it
        // sleeps, or this sees the sleeper and wakes it.
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) > 0 {
            let _g = self.lock.lock();
            self.published.notify_all();
        }
    }

    fn check_abandoned(&self) -> Result<()> {
        if self.abandoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned("an earlier write failed before it became visible".into()));
        }
        Ok(())
    }

    /// Waits until `seq` is visible: spins for [`PUBLISH_SPIN`], then sleeps until a publish
    /// wakes it to look again.
    fn wait_visible(&self, seq: SeqNo) -> Result<()> {
        if self.visible() >= seq {
            return Ok(());
        }
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.visible() >= seq {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
            self.check_abandoned()?;
            if start.elapsed() >= PUBLISH_SPIN {
                break;
            }
        }
        loop {
            let mut g = self.lock.lock();
            self.sleepers.fetch_add(1, Ordering::Relaxed);
            fence(Ordering::SeqCst);
            if self.visible() < seq && !self.abandoned.load(Ordering::Acquire) {
                self.published.wait_for(&mut g, SLEEP_AT_MOST);
            }
            self.sleepers.fetch_sub(1, Ordering::Relaxed);
            drop(g);
            if self.visible() >= seq {
                return Ok(());
            }
            self.check_abandoned()?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    /// Groups publishing out of order (each thread owns one group of three sequence numbers,
    /// and later groups are often ready first): visibility only ever moves forward over whole
    /// groups, in order, and every group returns only once it is visible. Some waits outlast
    /// the spin, so the sleeping path and its wake-up run too.
    #[test]
    fn groups_publish_in_order_whatever_order_they_finish_in() {
        let seqs = Arc::new(Sequences::new(0));
        let groups = 400u64;
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                let mut last = 0;
                while !stop.load(Ordering::Acquire) {
                    let v = seqs.visible();
                    assert!(v >= last, "visibility went back from {last} to {v}");
                    assert_eq!(v % 3, 0, "a group was seen half published: {v}");
                    last = v;
                }
            });
            let threads = 4u64;
            let mut handles = Vec::new();
            for t in 0..threads {
                let seqs = seqs.clone();
                handles.push(s.spawn(move || {
                    for g in (t..groups).step_by(threads as usize) {
                        let first = g * 3 + 1;
                        // Stagger: some groups dawdle past the spin before publishing.
                        if g % 7 == 3 {
                            std::thread::sleep(Duration::from_micros(100));
                        }
                        seqs.publish(first, first + 2).unwrap();
                        assert!(seqs.visible() >= first + 2, "returned before its group was visible");
                    }
                }));
            }
            for h in handles {
                h.join().unwrap();
            }
            stop.store(true, Ordering::Release);
            watcher.join().unwrap();
        });
        assert_eq!(seqs.visible(), groups * 3);
    }

    /// Waits behind a group that will never publish end with an error once it is abandoned,
    /// sleeping ones included; a publish that waits for nothing still succeeds.
    #[test]
    fn an_abandoned_group_ends_the_waits_behind_it() {
        let seqs = Sequences::new(10);
        seqs.set_allocated(20);
        std::thread::scope(|s| {
            let waiter = s.spawn(|| seqs.publish(16, 20));
            let all = s.spawn(|| seqs.wait_all_published());
            // Long enough for both to be asleep.
            std::thread::sleep(Duration::from_millis(20));
            seqs.abandon();
            assert!(matches!(waiter.join().unwrap(), Err(Error::Poisoned(_))));
            assert!(matches!(all.join().unwrap(), Err(Error::Poisoned(_))));
        });
        assert_eq!(seqs.visible(), 10);
        seqs.publish(11, 20).unwrap();
        seqs.wait_all_published().unwrap();
        assert_eq!(seqs.visible(), 20);
    }
}
