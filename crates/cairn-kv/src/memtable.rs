//! The memtable: a concurrent skiplist of internal keys (crossbeam's lock-free `SkipMap`) plus
//! the range tombstones written to it. One writer (the group-commit leader) inserts while any
//! number of readers look up and iterate.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtOrd};

use bytes::Bytes;
use crossbeam_skiplist::SkipMap;
use parking_lot::RwLock;

use crate::Result;
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::range_del::{FragmentedTombstones, RangeTombstone};

/// An encoded internal key ordered by [`key::compare_internal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MemKey(pub Bytes);

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        key::compare_internal(&self.0, &other.0)
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Per-entry overhead counted against the memtable budget (skiplist node, `Bytes` headers).
const ENTRY_OVERHEAD: usize = 96;

/// A version found by a point lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Found {
    pub seq: SeqNo,
    pub kind: ValueKind,
    pub value: Bytes,
}

#[derive(Default)]
struct RangeDels {
    list: Vec<RangeTombstone>,
    fragmented: Option<Arc<FragmentedTombstones>>,
}

/// An in-memory table of recent writes.
pub struct Memtable {
    map: SkipMap<MemKey, Bytes>,
    range_dels: RwLock<RangeDels>,
    /// Set once a range tombstone is inserted (lets reads skip the lock otherwise).
    has_range_dels: AtomicBool,
    approx_bytes: AtomicUsize,
    /// Number of the write-ahead log holding this memtable's writes.
    wal_number: u64,
}

impl Memtable {
    /// An empty memtable whose writes are logged in WAL `wal_number`.
    pub(crate) fn new(wal_number: u64) -> Self {
        Memtable {
            map: SkipMap::new(),
            range_dels: RwLock::new(RangeDels::default()),
            has_range_dels: AtomicBool::new(false),
            approx_bytes: AtomicUsize::new(0),
            wal_number,
        }
    }

    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Bytes used, approximately.
    pub fn approximate_bytes(&self) -> usize {
        self.approx_bytes.load(AtOrd::Relaxed)
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty() && self.range_dels.read().list.is_empty()
    }

    fn note_bytes(&self, bytes: usize) {
        self.approx_bytes.fetch_add(bytes + ENTRY_OVERHEAD, AtOrd::Relaxed);
    }

    /// Inserts a point entry.
    pub(crate) fn insert(&self, user_key: &[u8], seq: SeqNo, kind: ValueKind, value: &[u8]) {
        let ikey = key::internal_key(user_key, seq, kind as u8);
        self.note_bytes(ikey.len() + value.len());
        self.map.insert(MemKey(Bytes::from(ikey)), Bytes::copy_from_slice(value));
    }

    /// Records a range tombstone.
    pub(crate) fn insert_range_delete(&self, start: &[u8], end: &[u8], seq: SeqNo) {
        self.note_bytes(start.len() + end.len());
        let mut rd = self.range_dels.write();
        rd.list.push(RangeTombstone { start: Bytes::copy_from_slice(start), end: Bytes::copy_from_slice(end), seq });
        rd.fragmented = None;
        self.has_range_dels.store(true, AtOrd::Release);
    }

    /// Whether any range tombstone was written to this memtable.
    pub(crate) fn has_range_tombstones(&self) -> bool {
        self.has_range_dels.load(AtOrd::Acquire)
    }

    /// Range tombstones written to this memtable.
    pub(crate) fn range_tombstones(&self) -> Vec<RangeTombstone> {
        self.range_dels.read().list.clone()
    }

    /// The tombstones in fragmented form (built lazily, cached until the next range delete).
    pub(crate) fn fragmented_tombstones(&self) -> Option<Arc<FragmentedTombstones>> {
        {
            let rd = self.range_dels.read();
            if rd.list.is_empty() {
                return None;
            }
            if let Some(f) = &rd.fragmented {
                return Some(f.clone());
            }
        }
        let mut rd = self.range_dels.write();
        let f = Arc::new(FragmentedTombstones::new(&rd.list));
        rd.fragmented = Some(f.clone());
        Some(f)
    }

    /// The newest version of `user_key` with sequence `<= snapshot`.
    pub(crate) fn get(&self, user_key: &[u8], snapshot: SeqNo) -> Option<Found> {
        let lookup = MemKey(Bytes::from(key::lookup_key(user_key, snapshot)));
        let e = self.map.lower_bound(Bound::Included(&lookup))?;
        let k = &e.key().0;
        if key::user_key(k) != user_key {
            return None;
        }
        let kind = ValueKind::from_u8(key::kind_byte(k))?;
        Some(Found { seq: key::seq_of(k), kind, value: e.value().clone() })
    }

    /// A cursor over the point entries.
    pub(crate) fn iter(self: &Arc<Self>) -> MemtableIter {
        MemtableIter { mem: self.clone(), cur: None }
    }
}

/// A cursor over a memtable. Each step is a skiplist search from the current key, so the
/// cursor holds no borrow of the map and stays valid while writers insert.
pub(crate) struct MemtableIter {
    mem: Arc<Memtable>,
    cur: Option<(MemKey, Bytes)>,
}

impl MemtableIter {
    fn set(&mut self, e: Option<(MemKey, Bytes)>) {
        self.cur = e;
    }

    fn probe(target: &[u8]) -> MemKey {
        MemKey(Bytes::copy_from_slice(target))
    }
}

fn own(e: crossbeam_skiplist::map::Entry<'_, MemKey, Bytes>) -> (MemKey, Bytes) {
    (e.key().clone(), e.value().clone())
}

impl InternalIterator for MemtableIter {
    fn valid(&self) -> bool {
        self.cur.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        let e = self.mem.map.front().map(own);
        self.set(e);
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let e = self.mem.map.back().map(own);
        self.set(e);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let e = self.mem.map.lower_bound(Bound::Included(&Self::probe(target))).map(own);
        self.set(e);
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let e = self.mem.map.upper_bound(Bound::Included(&Self::probe(target))).map(own);
        self.set(e);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        if let Some((k, _)) = self.cur.take() {
            let e = self.mem.map.lower_bound(Bound::Excluded(&k)).map(own);
            self.set(e);
        }
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        if let Some((k, _)) = self.cur.take() {
            let e = self.mem.map.upper_bound(Bound::Excluded(&k)).map(own);
            self.set(e);
        }
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map(|(k, _)| k.0.as_ref()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map(|(_, v)| v.as_ref()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_sees_newest_visible_version() {
        let m = Memtable::new(1);
        m.insert(b"a", 1, ValueKind::Put, b"v1");
        m.insert(b"a", 3, ValueKind::Put, b"v3");
        m.insert(b"a", 5, ValueKind::Delete, b"");
        m.insert(b"b", 2, ValueKind::Put, b"b2");
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"a", 2).unwrap().value.as_ref(), b"v1");
        assert_eq!(m.get(b"a", 4).unwrap().value.as_ref(), b"v3");
        assert_eq!(m.get(b"a", 9).unwrap().kind, ValueKind::Delete);
        assert_eq!(m.get(b"c", 9), None);
    }

    #[test]
    fn iterates_both_ways() {
        let m = Arc::new(Memtable::new(1));
        for (i, k) in ["d", "b", "a", "c"].iter().enumerate() {
            m.insert(k.as_bytes(), i as u64 + 1, ValueKind::Put, b"v");
        }
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut keys = Vec::new();
        while it.valid() {
            keys.push(key::user_key(it.key()).to_vec());
            it.next().unwrap();
        }
        assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]);
        it.seek_for_prev(&key::lookup_key(b"bz", 100)).unwrap();
        assert_eq!(key::user_key(it.key()), b"b");
        it.prev().unwrap();
        assert_eq!(key::user_key(it.key()), b"a");
        it.prev().unwrap();
        assert!(!it.valid());
    }
}
