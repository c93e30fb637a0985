//! Snapshots: a sequence number that reads are pinned to, registered so that compaction keeps
//! every version the snapshot can still see.

use std::ops::RangeBounds;
use std::sync::Arc;

use bytes::Bytes;

use crate::Result;
use crate::db::inner::DbInner;
use crate::db::iter::Iter;
use crate::key::SeqNo;

/// A consistent, read-only view of the database at one point in time.
///
/// Reads through a snapshot see every write acknowledged before it was taken and none after.
/// Dropping it lets compaction discard versions only it could see.
pub struct Snapshot {
    pub(crate) inner: Arc<DbInner>,
    pub(crate) seq: SeqNo,
}

impl Snapshot {
    pub(crate) fn new(inner: Arc<DbInner>) -> Snapshot {
        // Register under the visible sequence; a write racing with us is either fully visible
        // (its sequence <= the one we read) or not at all.
        let seq = inner.snapshots.acquire(|| inner.visible_seq());
        Snapshot { inner, seq }
    }

    /// The sequence number this snapshot reads at.
    pub fn seq(&self) -> SeqNo {
        self.seq
    }

    /// Reads a key as of the snapshot.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.inner.get_at(key.as_ref(), self.seq)
    }

    /// Iterates over a key range as of the snapshot (both directions).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter {
        Iter::new(&self.inner, self.seq, range)
    }

    /// Iterates over every key starting with `prefix`, as of the snapshot.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter {
        Iter::prefix(&self.inner, self.seq, prefix.as_ref())
    }

    /// Iterates over every key, as of the snapshot.
    pub fn iter(&self) -> Iter {
        self.range::<&[u8], _>(..)
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        self.inner.snapshots.release(self.seq);
    }
}
