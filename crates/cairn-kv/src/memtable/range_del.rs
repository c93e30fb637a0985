//! Range tombstones (`delete_range`) and their fragmented, queryable form.
//!
//! A range tombstone `[start, end) @ seq` hides every version of every key in the range whose
//! sequence number is lower than `seq`. Tombstones live in the memtable that received them and,
//! once that memtable is flushed, in the version (recorded in the MANIFEST); compaction drops the
//! data they cover and the version forgets a tombstone once no table can still hold data under it.

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::key::SeqNo;

/// One `delete_range`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RangeTombstone {
    /// First key deleted.
    pub start: Bytes,
    /// First key after the range (exclusive).
    pub end: Bytes,
    /// Sequence number of the deletion.
    pub seq: SeqNo,
}

impl RangeTombstone {
    /// Whether `user_key` is inside `[start, end)`.
    pub fn contains(&self, user_key: &[u8]) -> bool {
        self.start.as_ref() <= user_key && user_key < self.end.as_ref()
    }

    /// Whether `[start, end)` intersects the closed user-key range `[lo, hi]`.
    pub fn overlaps(&self, lo: &[u8], hi: &[u8]) -> bool {
        self.start.as_ref() <= hi && lo < self.end.as_ref()
    }
}

#[derive(Clone, Debug)]
struct Fragment {
    start: Bytes,
    end: Bytes,
    /// Sequence numbers of the tombstones covering the fragment, highest first.
    seqs: Vec<SeqNo>,
}

/// Tombstones cut into non-overlapping fragments, for `O(log n)` coverage queries.
#[derive(Clone, Debug, Default)]
pub struct FragmentedTombstones {
    frags: Vec<Fragment>,
}

impl FragmentedTombstones {
    /// Fragments a set of tombstones.
    pub fn new<'a>(tombstones: impl IntoIterator<Item = &'a RangeTombstone>) -> Self {
        // Sweep over boundaries: +seq at start, -seq at end.
        let mut events: Vec<(&Bytes, bool, SeqNo)> = Vec::new();
        for t in tombstones {
            if t.start < t.end {
                events.push((&t.start, true, t.seq));
                events.push((&t.end, false, t.seq));
            }
        }
        events.sort_by(|a, b| a.0.cmp(b.0));
        let mut active: BTreeMap<SeqNo, usize> = BTreeMap::new();
        let mut frags = Vec::new();
        let mut i = 0;
        while i < events.len() {
            let point = events[i].0.clone();
            while i < events.len() && events[i].0 == &point {
                let (_, is_start, seq) = events[i];
                if is_start {
                    *active.entry(seq).or_default() += 1;
                } else if let Some(n) = active.get_mut(&seq) {
                    *n -= 1;
                    if *n == 0 {
                        active.remove(&seq);
                    }
                }
                i += 1;
            }
            if !active.is_empty() && i < events.len() {
                frags.push(Fragment {
                    start: point,
                    end: events[i].0.clone(),
                    seqs: active.keys().rev().copied().collect(),
                });
            }
        }
        FragmentedTombstones { frags }
    }

    /// Whether there is no tombstone at all.
    pub fn is_empty(&self) -> bool {
        self.frags.is_empty()
    }

    /// The highest sequence number `<= snapshot` of a tombstone covering `user_key`.
    pub fn max_covering(&self, user_key: &[u8], snapshot: SeqNo) -> Option<SeqNo> {
        let idx = self.frags.partition_point(|f| f.start.as_ref() <= user_key);
        let f = self.frags.get(idx.checked_sub(1)?)?;
        if user_key >= f.end.as_ref() {
            return None;
        }
        f.seqs.iter().copied().find(|&s| s <= snapshot)
    }

    /// The lowest sequence number `> seq` of a tombstone covering `user_key`: the oldest
    /// deletion that hides a version written at `seq`.
    pub fn min_covering_above(&self, user_key: &[u8], seq: SeqNo) -> Option<SeqNo> {
        let idx = self.frags.partition_point(|f| f.start.as_ref() <= user_key);
        let f = self.frags.get(idx.checked_sub(1)?)?;
        if user_key >= f.end.as_ref() {
            return None;
        }
        f.seqs.iter().rev().copied().find(|&s| s > seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn t(s: &str, e: &str, seq: SeqNo) -> RangeTombstone {
        RangeTombstone { start: Bytes::copy_from_slice(s.as_bytes()), end: Bytes::copy_from_slice(e.as_bytes()), seq }
    }

    #[test]
    fn overlapping_tombstones() {
        let ts = [t("b", "f", 5), t("d", "h", 9)];
        let f = FragmentedTombstones::new(&ts);
        assert_eq!(f.max_covering(b"a", 100), None);
        assert_eq!(f.max_covering(b"b", 100), Some(5));
        assert_eq!(f.max_covering(b"e", 100), Some(9));
        assert_eq!(f.max_covering(b"e", 8), Some(5));
        assert_eq!(f.max_covering(b"e", 4), None);
        assert_eq!(f.max_covering(b"g", 100), Some(9));
        assert_eq!(f.max_covering(b"h", 100), None);
    }

    proptest! {
        #[test]
        fn matches_brute_force(
            ts in proptest::collection::vec((0u8..20, 0u8..20, 1u64..50), 0..12),
            probes in proptest::collection::vec((0u8..22, 0u64..60), 1..40),
        ) {
            let ts: Vec<RangeTombstone> = ts.into_iter().map(|(a, b, s)| RangeTombstone {
                start: Bytes::copy_from_slice(&[a]), end: Bytes::copy_from_slice(&[b]), seq: s,
            }).collect();
            let f = FragmentedTombstones::new(&ts);
            for (k, snap) in probes {
                let expect = ts.iter().filter(|t| t.contains(&[k]) && t.seq <= snap).map(|t| t.seq).max();
                prop_assert_eq!(f.max_covering(&[k], snap), expect);
            }
        }
    }
}
