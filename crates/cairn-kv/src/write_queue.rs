//! Group commit. Writers queue their batches; a writer that finds no leader becomes the leader,
//! takes every queued batch (up to a size limit) and writes them as one WAL record with one
//! fsync. It then hands leadership to the writer at the queue's front and, while that one
//! writes the next group's record, applies its own group to the memtable (which takes
//! concurrent inserts), then wakes exactly the members of its group (each writer sleeps on its
//! own condition variable, so a finished group does not wake writers that still have to
//! wait).
//!
//! A waiting writer first spins for up to [`SPIN`] on its own flag before it sleeps: without an
//! fsync a group takes a few microseconds, and waking a sleeping thread costs more than that
//! (tens of microseconds on a busy machine), which was most of the p99 of two writers.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::batch::WriteBatch;
use crate::key::SeqNo;
use crate::{Error, Result};

/// Keys a transaction read or wrote, checked at commit against writes after its snapshot.
pub(crate) struct Validation {
    pub snapshot: SeqNo,
    pub keys: Vec<Vec<u8>>,
}

/// One queued write.
pub(crate) struct WriteRequest {
    pub batch: WriteBatch,
    pub sync: bool,
    pub validation: Option<Validation>,
}

pub(crate) struct Slot {
    pub request: Mutex<Option<WriteRequest>>,
    result: Mutex<Option<Result<()>>>,
    /// Set (with the queue's lock held) when the writer should look again: its result is in,
    /// or it may lead. Cleared by the writer with the lock held.
    signaled: AtomicBool,
    /// Waited on with the queue's lock held.
    wake: Condvar,
    /// Whether the slot is in the queue (not yet taken into a group). Changed and read with
    /// the queue's lock held.
    queued: AtomicBool,
}

impl Slot {
    fn new(req: WriteRequest) -> Self {
        Slot {
            request: Mutex::new(Some(req)),
            result: Mutex::new(None),
            signaled: AtomicBool::new(false),
            wake: Condvar::new(),
            queued: AtomicBool::new(false),
        }
    }

    /// Tells the writer to look again; called with the queue's lock held.
    fn signal(&self) {
        self.signaled.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Spins until signaled or `SPIN` has passed; true if signaled.
    fn spin_for_signal(&self) -> bool {
        let start = Instant::now();
        loop {
            for _ in 0..64 {
                if self.signaled.load(Ordering::Acquire) {
                    return true;
                }
                std::hint::spin_loop();
            }
            if start.elapsed() >= SPIN {
                return false;
            }
        }
    }

    pub fn finish(&self, r: Result<()>) {
        let mut slot = self.result.lock();
        if slot.is_none() {
            *slot = Some(r);
        }
    }
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Arc<Slot>>,
    /// Whether a leader is in its lead step (groups being applied do not count: the next
    /// leader is let in before that).
    leader_active: bool,
}

/// The queue of writers.
#[derive(Default)]
pub(crate) struct WriteQueue {
    q: Mutex<Queue>,
}

/// Largest group a leader assembles, in encoded bytes (a single larger batch still goes alone).
const MAX_GROUP_BYTES: usize = 8 << 20;

/// How long a waiting writer spins before it sleeps.
const SPIN: Duration = Duration::from_micros(20);

impl WriteQueue {
    /// Whether a leader is in its lead step (so that a write queued now would wait). Tests
    /// check the hand-over with it.
    #[cfg(test)]
    fn busy(&self) -> bool {
        self.q.lock().leader_active
    }

    /// Queues `req` and returns once it was applied (or failed). A group is processed in two
    /// steps: `lead` runs while this writer is the queue's leader (one at a time, in queue
    /// order) and returns what `apply` needs; `apply` runs after the next leader was let in,
    /// so the next group's `lead` overlaps it, and must call [`Slot::finish`] on every slot of
    /// its group. If either panics, every member of the group fails, `on_panic` is told (it
    /// poisons the engine), and the queue stays usable.
    pub fn write<T>(
        &self,
        req: WriteRequest,
        lead: impl Fn(&[&Slot]) -> T,
        apply: impl Fn(&[&Slot], T),
        on_panic: impl Fn(String),
    ) -> Result<()> {
        let mut q = self.q.lock();
        if !q.leader_active && q.waiting.is_empty() {
            // Nobody else is writing: lead a group of one, with no queue entry to allocate.
            q.leader_active = true;
            drop(q);
            let slot = Slot::new(req);
            let members = [&slot];
            let led = Self::run_step(&members, || lead(&members), &on_panic);
            self.hand_over(self.q.lock());
            if let Some(t) = led {
                Self::run_step(&members, || apply(&members, t), &on_panic);
            }
            return slot.result.lock().take().unwrap_or_else(|| Err(Error::Poisoned("a write got no result".into())));
        }
        let slot = Arc::new(Slot::new(req));
        slot.queued.store(true, Ordering::Relaxed);
        q.waiting.push_back(slot.clone());
        loop {
            slot.signaled.store(false, Ordering::Relaxed);
            if let Some(r) = slot.result.lock().take() {
                return r;
            }
            // Whoever finds no leader leads (the queue's front is woken for that, but a writer
            // that is already running need not wait for it to be scheduled) - if it is still
            // queued: one already taken into a group waits for that group's result (leading
            // others' writes meanwhile could hold it in a write stall after its own is done).
            if !q.leader_active && slot.queued.load(Ordering::Relaxed) {
                q.leader_active = true;
                let mut group = Vec::new();
                let mut bytes = 0;
                while let Some(s) = q.waiting.front() {
                    let size = s.request.lock().as_ref().map_or(0, |r| r.batch.approximate_size());
                    if !group.is_empty() && bytes + size > MAX_GROUP_BYTES {
                        break;
                    }
                    bytes += size;
                    let taken = q.waiting.pop_front().expect("the front exists");
                    taken.queued.store(false, Ordering::Relaxed);
                    group.push(taken);
                }
                drop(q);
                let members: Vec<&Slot> = group.iter().map(|s| &**s).collect();
                let led = Self::run_step(&members, || lead(&members), &on_panic);
                self.hand_over(self.q.lock());
                if let Some(t) = led {
                    Self::run_step(&members, || apply(&members, t), &on_panic);
                }
                q = self.q.lock();
                for s in &group {
                    s.signal();
                }
                continue;
            }
            // Spin first (without the lock, so the leader can hand over), then sleep. A signal
            // is set with the lock held, so one sent after the check below finds this writer
            // asleep on its condition variable and wakes it.
            MutexGuard::unlocked(&mut q, || {
                slot.spin_for_signal();
            });
            if !slot.signaled.load(Ordering::Acquire) {
                slot.wake.wait(&mut q);
            }
        }
    }

    /// Ends the current leader's turn and wakes the writer at the queue's front to lead next.
    fn hand_over(&self, mut q: MutexGuard<'_, Queue>) {
        q.leader_active = false;
        if let Some(next) = q.waiting.front() {
            next.signal();
        }
    }

    /// Runs one step of a group; if it panics, every member fails, `on_panic` is told, and
    /// the result is `None`.
    fn run_step<T>(group: &[&Slot], step: impl FnOnce() -> T, on_panic: &impl Fn(String)) -> Option<T> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(step)) {
            Ok(t) => Some(t),
            Err(_) => {
                let why = "the write path panicked".to_string();
                on_panic(why.clone());
                for s in group {
                    s.finish(Err(Error::Poisoned(why.clone())));
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn req() -> WriteRequest {
        let mut batch = WriteBatch::new();
        batch.put(b"k", b"v").unwrap();
        WriteRequest { batch, sync: false, validation: None }
    }

    /// Eight threads each make `writes` writes through one queue, leaders running `lead`.
    fn eight_writers(writes: usize, lead: impl Fn(&[&Slot]) + Sync) {
        let q = WriteQueue::default();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..writes {
                        q.write(req(), &lead, |_, ()| {}, |_| {}).unwrap();
                    }
                });
            }
        });
    }

    #[test]
    fn groups_form_and_every_writer_gets_a_result() {
        let groups = AtomicUsize::new(0);
        eight_writers(100, |g| {
            groups.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(std::time::Duration::from_micros(200));
            for s in g {
                s.finish(Ok(()));
            }
        });
        assert!(groups.load(Ordering::Relaxed) < 800, "writers were grouped");
    }

    /// Leaders that finish at once: hand-offs race with arrivals, and no writer may sleep
    /// through its result or a free leader slot (the test would hang).
    #[test]
    fn no_writer_is_left_waiting() {
        let done = AtomicUsize::new(0);
        eight_writers(5000, |g| {
            for s in g {
                s.finish(Ok(()));
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
        assert_eq!(done.load(Ordering::Relaxed), 40_000);
    }

    fn req_for(key: u8) -> WriteRequest {
        let mut batch = WriteBatch::new();
        batch.put([key], b"v").unwrap();
        WriteRequest { batch, sync: false, validation: None }
    }

    fn holds(g: &[&Slot], key: u8) -> bool {
        g.iter().any(|s| s.request.lock().as_ref().is_some_and(|r| r.batch.iter().any(|op| op.key() == [key])))
    }

    /// Eight writers whose apply steps take a while (as memtable inserts do): a writer woken
    /// to lead but taken meanwhile into the group of a writer that just arrived waits for that
    /// group, even while its apply runs; it never leads a group without its own write (which
    /// could hold it in a write stall after its write is done).
    #[test]
    fn a_writer_taken_into_a_group_never_leads_another() {
        let q = WriteQueue::default();
        let (own, foreign) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let (q, own, foreign) = (&q, &own, &foreign);
                s.spawn(move || {
                    for _ in 0..5000 {
                        let lead = |g: &[&Slot]| {
                            let counter = if holds(g, t) { own } else { foreign };
                            counter.fetch_add(1, Ordering::Relaxed);
                        };
                        let apply = |g: &[&Slot], ()| {
                            let start = Instant::now();
                            while start.elapsed() < Duration::from_micros(20) {
                                std::hint::spin_loop();
                            }
                            g.iter().for_each(|s| s.finish(Ok(())));
                        };
                        q.write(req_for(t), lead, apply, |_| {}).unwrap();
                    }
                });
            }
        });
        assert_eq!(foreign.load(Ordering::Relaxed), 0, "a writer led a group without its own write");
        assert!(own.load(Ordering::Relaxed) > 0);
    }

    /// `busy` is set while a leader processes a group, on both paths to leading, and cleared
    /// after.
    #[test]
    fn busy_while_a_group_is_processed() {
        let q = WriteQueue::default();
        assert!(!q.busy());
        q.write(
            req(),
            |g| {
                assert!(q.busy());
                g.iter().for_each(|s| s.finish(Ok(())));
            },
            |_, ()| assert!(!q.busy(), "the next leader is let in before the group is applied"),
            |_| {},
        )
        .unwrap();
        assert!(!q.busy());
        // Many writers: leaders also come from the queue; every one of them sees `busy`.
        let idle_leaders = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..500 {
                        let lead = |g: &[&Slot]| {
                            if !q.busy() {
                                idle_leaders.fetch_add(1, Ordering::Relaxed);
                            }
                            g.iter().for_each(|s| s.finish(Ok(())));
                        };
                        q.write(req(), lead, |_, ()| {}, |_| {}).unwrap();
                    }
                });
            }
        });
        assert_eq!(idle_leaders.load(Ordering::Relaxed), 0);
        assert!(!q.busy());
    }

    #[test]
    fn a_panicking_leader_fails_its_group_and_frees_the_queue() {
        let q = WriteQueue::default();
        let poisoned = AtomicUsize::new(0);
        let r = q.write(
            req(),
            |_| panic!("boom"),
            |_, ()| unreachable!("a group whose lead step panicked is not applied"),
            |_| {
                poisoned.fetch_add(1, Ordering::Relaxed);
            },
        );
        assert!(matches!(r, Err(Error::Poisoned(_))));
        assert_eq!(poisoned.load(Ordering::Relaxed), 1);
        // A panic in the apply step fails the group the same way.
        let r = q.write(
            req(),
            |_| (),
            |_, ()| panic!("boom"),
            |_| {
                poisoned.fetch_add(1, Ordering::Relaxed);
            },
        );
        assert!(matches!(r, Err(Error::Poisoned(_))));
        assert_eq!(poisoned.load(Ordering::Relaxed), 2);
        let ok = q.write(req(), |g| g.iter().for_each(|s| s.finish(Ok(()))), |_, ()| {}, |_| {});
        assert!(ok.is_ok());
    }
}
