//! The memtable: an arena skiplist of internal keys ([`crate::memtable::skiplist`]) plus the range
//! tombstones written to it. Writers insert concurrently (the groups of the group commit being
//! applied at once) while any number of readers look up and iterate.

pub mod range_del;
pub mod skiplist;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering as AtOrd};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::Result;
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::memtable::range_del::{FragmentedTombstones, RangeTombstone};
pub(crate) use crate::memtable::skiplist::Splice;
use crate::memtable::skiplist::{Cursor, SkipList};

/// Per-entry overhead counted against the memtable budget: a skiplist node's header and its
/// average tower (4/3 links), rounded up.
const ENTRY_OVERHEAD: usize = 40;

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
    list: Arc<SkipList>,
    range_dels: RwLock<RangeDels>,
    /// Set once a range tombstone is inserted (lets reads skip the lock otherwise).
    has_range_dels: AtomicBool,
    /// A bloom filter over the user keys inserted, so that reads of keys the memtable does not
    /// hold (most reads, once data is in tables) skip the skiplist search.
    filter: KeyFilter,
    approx_bytes: AtomicUsize,
    /// Number of the write-ahead log holding this memtable's writes.
    wal_number: u64,
}

impl Memtable {
    /// An empty memtable whose writes are logged in WAL `wal_number`, sized for about
    /// `capacity` bytes (which sizes its key filter).
    pub(crate) fn new(wal_number: u64, capacity: usize) -> Self {
        Memtable {
            list: Arc::new(SkipList::new()),
            range_dels: RwLock::new(RangeDels::default()),
            has_range_dels: AtomicBool::new(false),
            filter: KeyFilter::new(capacity),
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
        self.list.len() == 0 && self.range_dels.read().list.is_empty()
    }

    /// What inserting `key` with `value` adds to [`Memtable::approximate_bytes`].
    pub(crate) fn entry_bytes(key: &[u8], value: &[u8]) -> usize {
        key.len() + 8 + value.len() + ENTRY_OVERHEAD
    }

    fn note_bytes(&self, bytes: usize) {
        self.approx_bytes.fetch_add(bytes + ENTRY_OVERHEAD, AtOrd::Relaxed);
    }

    /// Inserts a point entry (tests; the write path and recovery keep a splice per batch).
    #[cfg(test)]
    pub(crate) fn insert(&self, user_key: &[u8], seq: SeqNo, kind: ValueKind, value: &[u8]) {
        self.insert_spliced(&mut Splice::default(), user_key, seq, kind, value);
    }

    /// Inserts a point entry, starting the search where `splice`'s last insert went if the key
    /// follows it (see [`Splice`]). Inserts on several threads may run at once, each with its
    /// own splice.
    pub(crate) fn insert_spliced(
        &self,
        splice: &mut Splice,
        user_key: &[u8],
        seq: SeqNo,
        kind: ValueKind,
        value: &[u8],
    ) {
        self.filter.add(crate::key::key_hash(user_key));
        self.approx_bytes.fetch_add(Self::entry_bytes(user_key, value), AtOrd::Relaxed);
        self.list.insert(splice, user_key, key::pack_trailer(seq, kind as u8), value);
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

    /// The newest version of `user_key` with sequence `<= snapshot`; `hash` is
    /// [`crate::key::key_hash`] of the key.
    pub(crate) fn get(&self, user_key: &[u8], hash: u64, snapshot: SeqNo) -> Option<Found> {
        if !self.filter.may_contain(hash) {
            return None;
        }
        let (trailer, value) = self.list.get(user_key, key::pack_trailer(snapshot, key::KIND_FOR_SEEK))?;
        let kind = ValueKind::from_u8((trailer & 0xFF) as u8)?;
        Some(Found { seq: trailer >> 8, kind, value: Bytes::copy_from_slice(value) })
    }

    /// Every point entry in order as (internal key, value), walking the skiplist's links; for
    /// flushing a frozen memtable.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.list.entries()
    }

    /// A cursor over the point entries.
    pub(crate) fn iter(self: &Arc<Self>) -> MemtableIter {
        MemtableIter::new(self.clone())
    }
}

/// A fixed-size bloom filter that concurrent writers set bits in with atomic ORs.
struct KeyFilter {
    words: Box<[AtomicU64]>,
    mask: u64,
}

/// Probes per key.
const FILTER_PROBES: u64 = 4;

impl KeyFilter {
    /// About 32 bits per KiB of memtable: 10+ bits per key for entries of 300 bytes and more.
    fn new(capacity: usize) -> KeyFilter {
        let bits = ((capacity as u64) / 32).clamp(1 << 13, 1 << 28).next_power_of_two();
        let words = (0..bits / 64).map(|_| AtomicU64::new(0)).collect();
        KeyFilter { words, mask: bits - 1 }
    }

    fn positions(&self, hash: u64) -> impl Iterator<Item = u64> + '_ {
        let delta = hash.rotate_right(21) | 1;
        (0..FILTER_PROBES).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) & self.mask)
    }

    fn add(&self, hash: u64) {
        for bit in self.positions(hash) {
            self.words[(bit / 64) as usize].fetch_or(1 << (bit % 64), AtOrd::Release);
        }
    }

    fn may_contain(&self, hash: u64) -> bool {
        self.positions(hash).all(|bit| self.words[(bit / 64) as usize].load(AtOrd::Acquire) & (1 << (bit % 64)) != 0)
    }
}

/// A cursor over a memtable's point entries; stepping forward follows the skiplist's links.
pub(crate) struct MemtableIter {
    cursor: Cursor,
}

impl MemtableIter {
    fn new(mem: Arc<Memtable>) -> Self {
        MemtableIter { cursor: Cursor::new(mem.list.clone()) }
    }
}

impl crate::iter::PrepareSeek for MemtableIter {}

impl InternalIterator for MemtableIter {
    #[inline]
    fn valid(&self) -> bool {
        self.cursor.valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.cursor.seek_to_first();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.cursor.seek_to_last();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.cursor.seek(target);
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.cursor.seek_for_prev(target);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.cursor.next();
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.cursor.prev();
        Ok(())
    }
    #[inline]
    fn key(&self) -> &[u8] {
        self.cursor.key()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        self.cursor.value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_sees_newest_visible_version() {
        let m = Memtable::new(1, 1 << 20);
        m.insert(b"a", 1, ValueKind::Put, b"v1");
        m.insert(b"a", 3, ValueKind::Put, b"v3");
        m.insert(b"a", 5, ValueKind::Delete, b"");
        m.insert(b"b", 2, ValueKind::Put, b"b2");
        assert_eq!(m.get(b"a", crate::key::key_hash(b"a"), 0), None);
        assert_eq!(m.get(b"a", crate::key::key_hash(b"a"), 2).unwrap().value.as_ref(), b"v1");
        assert_eq!(m.get(b"a", crate::key::key_hash(b"a"), 4).unwrap().value.as_ref(), b"v3");
        assert_eq!(m.get(b"a", crate::key::key_hash(b"a"), 9).unwrap().kind, ValueKind::Delete);
        assert_eq!(m.get(b"c", crate::key::key_hash(b"c"), 9), None);
    }

    #[test]
    fn iterates_both_ways() {
        let m = Arc::new(Memtable::new(1, 1 << 20));
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

    #[test]
    fn key_filter_has_no_false_negatives_and_few_false_positives() {
        // A 16 MiB memtable of ~300-byte entries holds about 55,000 keys; insert 50,000.
        let f = std::sync::Arc::new(KeyFilter::new(16 << 20));
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    for i in 0..12_500u64 {
                        f.add(crate::key::key_hash(&(t * 1_000_000 + i).to_le_bytes()));
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        for t in 0..4u64 {
            for i in 0..12_500u64 {
                assert!(f.may_contain(crate::key::key_hash(&(t * 1_000_000 + i).to_le_bytes())));
            }
        }
        let fp =
            (0..100_000u64).filter(|i| f.may_contain(crate::key::key_hash(&(9_000_000 + i).to_le_bytes()))).count();
        assert!(fp < 3_000, "false positive rate {fp} / 100000");
    }
}
