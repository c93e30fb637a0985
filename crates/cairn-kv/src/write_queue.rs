//! Group commit. Writers queue their batches; the first waiting writer becomes the leader,
//! takes every queued batch (up to a size limit), writes them as one WAL record with one fsync,
//! applies them to the memtable and wakes the others.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use crate::Result;
use crate::batch::WriteBatch;
use crate::key::SeqNo;

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
}

impl Slot {
    pub fn finish(&self, r: Result<()>) {
        *self.result.lock() = Some(r);
    }
}

#[derive(Default)]
struct Queue {
    waiting: VecDeque<Arc<Slot>>,
    leader_active: bool,
}

/// The queue of writers.
#[derive(Default)]
pub(crate) struct WriteQueue {
    q: Mutex<Queue>,
    cv: Condvar,
}

/// Largest group a leader assembles, in encoded bytes (a single larger batch still goes alone).
const MAX_GROUP_BYTES: usize = 8 << 20;

impl WriteQueue {
    /// Queues `req` and returns once it was applied (or failed). `lead` processes a group and
    /// must call [`Slot::finish`] on every slot it was given.
    pub fn write(&self, req: WriteRequest, lead: impl Fn(&[Arc<Slot>])) -> Result<()> {
        let slot = Arc::new(Slot { request: Mutex::new(Some(req)), result: Mutex::new(None) });
        let mut q = self.q.lock();
        q.waiting.push_back(slot.clone());
        loop {
            if let Some(r) = slot.result.lock().take() {
                return r;
            }
            if !q.leader_active {
                q.leader_active = true;
                let mut group = Vec::new();
                let mut bytes = 0;
                while let Some(s) = q.waiting.front() {
                    let size = s.request.lock().as_ref().map_or(0, |r| r.batch.approximate_size());
                    if !group.is_empty() && bytes + size > MAX_GROUP_BYTES {
                        break;
                    }
                    bytes += size;
                    group.extend(q.waiting.pop_front());
                }
                drop(q);
                lead(&group);
                q = self.q.lock();
                q.leader_active = false;
                self.cv.notify_all();
                continue;
            }
            self.cv.wait(&mut q);
        }
    }
}
