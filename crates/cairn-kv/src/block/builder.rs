//! Builds SSTable blocks (data and index blocks) with prefix-compressed keys and restart
//! points, in LevelDB's layout. [`crate::block::Block`] reads them back.
//!
//! Layout (see `docs/format/sstable.md`):
//!
//! ```text
//! entry*    each: varint shared_len, varint unshared_len, varint value_len,
//!                 key[shared_len..] (unshared_len bytes), value (value_len bytes)
//! restart*  u32 LE offset of every restart entry (an entry with shared_len = 0)
//! count     u32 LE number of restarts (>= 1)
//! ```

use crate::coding::put_varint;

/// Accumulates sorted entries into one block.
#[derive(Debug)]
pub struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    restart_interval: usize,
    /// Entries since the last restart point.
    counter: usize,
    num_entries: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    /// Starts an empty block with a restart point every `restart_interval` entries (at least 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            restart_interval: restart_interval.max(1),
            counter: 0,
            num_entries: 0,
            last_key: Vec::new(),
        }
    }

    /// Appends an entry. Keys must be added in increasing order (the caller checks).
    ///
    /// Blocks must stay below 4 GiB; the table builder cuts blocks far earlier than that.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter < self.restart_interval {
            self.last_key.iter().zip(key).take_while(|(a, b)| a == b).count()
        } else {
            self.restarts.push(self.offset_u32());
            self.counter = 0;
            0
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
        self.num_entries += 1;
    }

    fn offset_u32(&self) -> u32 {
        debug_assert!(self.buf.len() <= u32::MAX as usize, "block larger than 4 GiB");
        self.buf.len() as u32
    }

    /// Size of the block if it were finished now.
    pub fn estimated_size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// Whether no entry was added since the last [`BlockBuilder::finish`].
    pub fn is_empty(&self) -> bool {
        self.num_entries == 0
    }

    /// Entries added since the last [`BlockBuilder::finish`].
    #[cfg(test)]
    pub fn num_entries(&self) -> usize {
        self.num_entries
    }

    /// The last key added (empty if none).
    #[cfg(test)]
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Hands back the buffer a [`BlockBuilder::finish`] returned, once the caller is done with
    /// it, so the next block is built in it without allocating (growing a fresh buffer through
    /// a series of reallocations was a quarter of a flush's time).
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.buf.is_empty() && buf.capacity() > self.buf.capacity() {
            buf.clear();
            self.buf = buf;
        }
    }

    /// Appends the restart trailer, returns the block's bytes and resets the builder.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        out.reserve(4 * self.restarts.len() + 4);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.num_entries = 0;
        self.last_key.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coding::Reader;

    #[test]
    fn layout_matches_the_documented_format() {
        let mut b = BlockBuilder::new(2);
        b.add(b"apple", b"1");
        b.add(b"apricot", b"22");
        b.add(b"banana", b"");
        assert_eq!(b.num_entries(), 3);
        assert_eq!(b.last_key(), b"banana");
        let est = b.estimated_size();
        let data = b.finish();
        assert_eq!(data.len(), est);
        let mut r = Reader::new(&data);
        // apple: restart entry.
        assert_eq!((r.varint(), r.varint(), r.varint()), (Some(0), Some(5), Some(1)));
        assert_eq!(r.bytes(6), Some(&b"apple1"[..]));
        // apricot shares "ap".
        assert_eq!((r.varint(), r.varint(), r.varint()), (Some(2), Some(5), Some(2)));
        assert_eq!(r.bytes(7), Some(&b"ricot22"[..]));
        // banana starts the second restart interval.
        let second = r.pos() as u32;
        assert_eq!((r.varint(), r.varint(), r.varint()), (Some(0), Some(6), Some(0)));
        assert_eq!(r.bytes(6), Some(&b"banana"[..]));
        assert_eq!(r.u32(), Some(0));
        assert_eq!(r.u32(), Some(second));
        assert_eq!(r.u32(), Some(2));
        assert!(r.is_empty());
        // The builder is reset.
        assert!(b.is_empty());
        assert_eq!(b.finish(), [0, 0, 0, 0, 1, 0, 0, 0]);
    }

    mod round_trip {
        use std::cmp::Ordering;
        use std::path::Path;
        use std::sync::Arc;

        use bytes::Bytes;
        use proptest::prelude::*;

        use super::super::BlockBuilder;
        use crate::block::{Block, BlockIter, RestartPrefixes};
        use crate::iter::InternalIterator;
        use crate::key::{self, compare_internal};

        /// Sorted, distinct internal keys with values.
        pub(crate) fn sorted_entries(raw: Vec<(Vec<u8>, u64, bool, Vec<u8>)>) -> Vec<(Vec<u8>, Vec<u8>)> {
            let mut v: Vec<(Vec<u8>, Vec<u8>)> =
                raw.into_iter().map(|(uk, seq, put, val)| (key::internal_key(&uk, seq, put as u8), val)).collect();
            v.sort_by(|a, b| compare_internal(&a.0, &b.0));
            v.dedup_by(|a, b| a.0 == b.0);
            v
        }

        fn entries_strategy() -> impl Strategy<Value = Vec<(Vec<u8>, Vec<u8>)>> {
            let uk = proptest::collection::vec(prop::sample::select(b"abc\x00\xff".to_vec()), 0..6);
            let val = proptest::collection::vec(any::<u8>(), 0..20);
            proptest::collection::vec((uk, 0u64..20, any::<bool>(), val), 0..200).prop_map(sorted_entries)
        }

        fn build(entries: &[(Vec<u8>, Vec<u8>)], interval: usize) -> Arc<Block> {
            let mut b = BlockBuilder::new(interval);
            for (k, v) in entries {
                b.add(k, v);
            }
            Arc::new(Block::new(Bytes::from(b.finish()), Arc::from(Path::new("t.sst")), 0).unwrap())
        }

        fn at(it: &impl InternalIterator) -> Option<(Vec<u8>, Vec<u8>)> {
            it.valid().then(|| (it.key().to_vec(), it.value().to_vec()))
        }

        proptest! {
            #[test]
            fn block_matches_model(
                entries in entries_strategy(),
                interval in 1usize..5,
                targets in proptest::collection::vec(
                    (proptest::collection::vec(prop::sample::select(b"abc\x00\xff".to_vec()), 0..6),
                     0u64..22, 0u8..3),
                    1..20),
            ) {
                let block = build(&entries, interval);
                let mut it = block.iter();
                // Forward.
                it.seek_to_first().unwrap();
                let mut got = Vec::new();
                while let Some(e) = at(&it) {
                    got.push(e);
                    it.next().unwrap();
                }
                prop_assert_eq!(&got, &entries);
                // Backward.
                it.seek_to_last().unwrap();
                got.clear();
                while let Some(e) = at(&it) {
                    got.push(e);
                    it.prev().unwrap();
                }
                got.reverse();
                prop_assert_eq!(&got, &entries);
                for (uk, seq, kind) in targets {
                    let kind = if kind == 2 { key::KIND_FOR_SEEK } else { kind };
                    let t = key::internal_key(&uk, seq, kind);
                    let pos = entries.partition_point(|e| compare_internal(&e.0, &t) == Ordering::Less);
                    it.seek(&t).unwrap();
                    prop_assert_eq!(at(&it), entries.get(pos).cloned());
                    // A direction switch after seek.
                    if it.valid() {
                        it.prev().unwrap();
                        let want = pos.checked_sub(1).map(|p| entries[p].clone());
                        prop_assert_eq!(at(&it), want);
                    }
                    let pos = entries.partition_point(|e| compare_internal(&e.0, &t) != Ordering::Greater);
                    let want = pos.checked_sub(1).map(|p| entries[p].clone());
                    it.seek_for_prev(&t).unwrap();
                    prop_assert_eq!(at(&it), want);
                    if it.valid() {
                        it.next().unwrap();
                        prop_assert_eq!(at(&it), entries.get(pos).cloned());
                    }
                }
            }

            /// A seek through the restart keys' prefixes lands where the model says, for keys
            /// sharing a long stem (as an index's do), keys of a few bytes, equal user keys of
            /// several sequence numbers, and targets inside, before, after and between the stem.
            #[test]
            fn seek_with_prefixes_matches_model(
                stem in proptest::collection::vec(prop::sample::select(b"ab\x00\xff".to_vec()), 0..10),
                raw in proptest::collection::vec(
                    (proptest::collection::vec(prop::sample::select(b"ab\x00\xff".to_vec()), 0..12),
                     0u64..4, any::<bool>(), Just(Vec::new())),
                    1..300),
                interval in 1usize..4,
                targets in proptest::collection::vec(
                    (any::<bool>(), proptest::collection::vec(prop::sample::select(b"ab\x00\xff".to_vec()), 0..14),
                     0u64..5, 0u8..3),
                    1..30),
            ) {
                let raw = raw.into_iter().map(|(k, seq, put, v)| ([&stem[..], &k].concat(), seq, put, v)).collect();
                let entries = sorted_entries(raw);
                let block = build(&entries, interval);
                let prefixes = RestartPrefixes::new(&block).expect("a sound block has prefixes");
                let mut it = BlockIter::new(&*block);
                for (under_stem, uk, seq, kind) in targets {
                    let kind = if kind == 2 { key::KIND_FOR_SEEK } else { kind };
                    let uk = if under_stem { [&stem[..], &uk].concat() } else { uk };
                    let t = key::internal_key(&uk, seq, kind);
                    let pos = entries.partition_point(|e| compare_internal(&e.0, &t) == Ordering::Less);
                    it.seek_with(&prefixes, &t).unwrap();
                    prop_assert_eq!(at(&it), entries.get(pos).cloned());
                }
            }

            #[test]
            fn damaged_blocks_never_panic(
                entries in entries_strategy(),
                flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
                cut in any::<prop::sample::Index>(),
            ) {
                let good = build(&entries, 3);
                let mut data = good.data().to_vec();
                for (i, x) in flips {
                    let i = i.index(data.len());
                    data[i] ^= x;
                }
                let cut = cut.index(data.len() + 1);
                for d in [data.clone(), data[..cut].to_vec()] {
                    exercise(d);
                }
            }
        }

        /// Runs of more restart keys with equal prefixes than the seek counts one by one (keys
        /// alike in their first eight bytes past the common stem, and many versions of one
        /// key): a seek to each key, and between keys, lands where the model says.
        #[test]
        fn seek_with_long_runs_of_equal_prefixes() {
            let mut raw = Vec::new();
            for i in 0..30u8 {
                for j in 0..3u8 {
                    raw.push(([b"stem/same8byt".as_slice(), &[b'a' + i, j]].concat(), 1, true, vec![i]));
                }
            }
            for seq in 1..20 {
                raw.push((b"stem/same8byt~".to_vec(), seq, true, Vec::new()));
            }
            raw.push((b"stem/zzz".to_vec(), 1, true, Vec::new()));
            let entries = sorted_entries(raw);
            for interval in 1..4 {
                let block = build(&entries, interval);
                let prefixes = RestartPrefixes::new(&block).expect("a sound block has prefixes");
                let mut it = BlockIter::new(&*block);
                for (k, _) in &entries {
                    let uk = key::user_key(k);
                    for t in
                        [k.clone(), key::internal_key(uk, 0, 0), [uk, b"\x00"].concat(), key::internal_key(uk, 30, 1)]
                    {
                        let pos = entries.partition_point(|e| compare_internal(&e.0, &t) == Ordering::Less);
                        it.seek_with(&prefixes, &t).unwrap();
                        assert_eq!(at(&it), entries.get(pos).cloned(), "interval {interval} target {t:?}");
                    }
                }
            }
        }

        /// A forward walk over `data` (a block), to the end or the first error.
        fn walk(data: Vec<u8>) -> Result<usize, crate::Error> {
            let block = Arc::new(Block::new(Bytes::from(data), Arc::from(Path::new("x")), 0)?);
            let mut it = block.iter();
            let mut n = 0;
            it.seek_to_first()?;
            while it.valid() {
                n += 1;
                it.next()?;
            }
            Ok(n)
        }

        /// Each check a step makes on an entry against the entry before it and against the
        /// restart points reports a corruption naming it: a block whose second entry shares
        /// more bytes than the first key has, whose second entry runs over the next restart
        /// point, and whose entry at a restart point shares a prefix.
        #[test]
        fn damaged_entries_are_reported() {
            // Ten keys of 14 bytes with 3-byte values, a restart every two entries: entry 0
            // is 20 bytes (3 header bytes), entry 1 shares 5 bytes, and entry 2 starts restart
            // interval 1.
            let entries: Vec<_> =
                (0..10).map(|i| (key::internal_key(format!("key{i:03}").as_bytes(), 1, 1), b"val".to_vec())).collect();
            let good = build(&entries, 2).data().to_vec();
            assert_eq!(walk(good.clone()).unwrap(), 10);
            let count = u32::from_le_bytes(good[good.len() - 4..].try_into().unwrap()) as usize;
            let restarts = good.len() - 4 - 4 * count;
            let restart1 = u32::from_le_bytes(good[restarts + 4..restarts + 8].try_into().unwrap()) as usize;
            assert_eq!((good[0], good[20], restart1), (0, 5, 35), "layout the cases below rely on");
            let cases: [(usize, u8, &str); 3] = [
                (20, 100, "shares more bytes than the previous key has"),
                (22, 4, "overlaps a restart point"),
                (restart1, 1, "restart entry shares a prefix"),
            ];
            for (at, byte, reason) in cases {
                let mut bad = good.clone();
                bad[at] = byte;
                let e = walk(bad).expect_err(reason);
                assert!(e.is_corruption() && e.to_string().contains(reason), "{reason}: {e}");
            }
        }

        /// Runs every operation over arbitrary bytes; only errors are allowed, not panics.
        pub(crate) fn exercise(data: Vec<u8>) {
            let Ok(block) = Block::new(Bytes::from(data), Arc::from(Path::new("x")), 5).map(Arc::new) else {
                return;
            };
            let mut it = block.iter();
            let mut steps = 0;
            if it.seek_to_first().is_ok() {
                while it.valid() && it.next().is_ok() {
                    steps += 1;
                }
            }
            if it.seek_to_last().is_ok() {
                while it.valid() && it.prev().is_ok() {
                    steps += 1;
                }
            }
            let prefixes = RestartPrefixes::new(&block);
            for t in [&b"a\0\0\0\0\0\0\0\x01"[..], &[0xff; 12]] {
                if let Some(p) = &prefixes {
                    let _ = it.seek_with(p, t);
                }
                if it.seek(t).is_ok() && it.valid() {
                    let _ = it.prev();
                }
                if it.seek_for_prev(t).is_ok() && it.valid() {
                    let _ = it.next();
                }
            }
            assert!(steps <= 2 * block.len());
        }
    }
}
