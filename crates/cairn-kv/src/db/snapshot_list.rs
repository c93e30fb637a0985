//! The live snapshots' sequence numbers ([`SnapshotList`]), which flushes and compactions keep
//! the versions of.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::key::SeqNo;

/// The multiset of live snapshot sequence numbers.
#[derive(Default)]
pub(crate) struct SnapshotList {
    seqs: Mutex<BTreeMap<SeqNo, usize>>,
}

impl SnapshotList {
    /// Registers a snapshot at the sequence number `current` returns, read under the list's
    /// lock: a [`SnapshotList::list`] either includes it or ran before it was read (so a
    /// flush or compaction that lists the snapshots after reading its inputs never meets data
    /// newer than an unlisted snapshot).
    pub fn acquire(&self, current: impl FnOnce() -> SeqNo) -> SeqNo {
        let mut m = self.seqs.lock();
        let seq = current();
        *m.entry(seq).or_default() += 1;
        seq
    }

    pub fn release(&self, seq: SeqNo) {
        let mut m = self.seqs.lock();
        if let Some(n) = m.get_mut(&seq) {
            *n -= 1;
            if *n == 0 {
                m.remove(&seq);
            }
        }
    }

    /// Live snapshot sequence numbers, ascending.
    pub fn list(&self) -> Vec<SeqNo> {
        self.seqs.lock().keys().copied().collect()
    }
}
