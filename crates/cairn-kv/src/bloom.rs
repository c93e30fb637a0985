//! The whole-table bloom filter over USER keys (not internal keys), so a point lookup at any
//! sequence number can skip a table that cannot hold the key.
//!
//! Hashing: one 64-bit `xxh3_64` of the user key, then double hashing: probe `i` sets bit
//! `(h + i * ((h >> 32) | 1)) mod m` for `i` in `0..k`, with `m` the filter's bit count.
//!
//! Serialized form (see `docs/format/sstable.md`): `ceil(m / 8)` bytes of bits (bit `j` is
//! `byte[j / 8] >> (j % 8) & 1`), then one byte holding `k`. A filter that does not decode
//! (empty, or `k` outside `1..=30`) fails open: it answers "may contain" for every key.

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

/// The hash a filter probes with.
pub fn key_hash(user_key: &[u8]) -> u64 {
    xxh3_64(user_key)
}

/// Largest number of probes per key.
pub const MAX_PROBES: u8 = 30;

/// Fewest bits in a filter, so tiny tables still get a useful one.
const MIN_BITS: u64 = 64;

/// Number of probes for `bits_per_key`: `round(bits_per_key * ln 2)`, clamped to `1..=30`.
pub fn num_probes(bits_per_key: u32) -> u8 {
    let k = (f64::from(bits_per_key) * std::f64::consts::LN_2).round();
    k.clamp(1.0, f64::from(MAX_PROBES)) as u8
}

#[inline]
fn probes(hash: u64, m: u64, k: u8) -> impl Iterator<Item = u64> {
    let delta = (hash >> 32) | 1;
    (0..u64::from(k)).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) % m)
}

/// Collects the hashes of the user keys of one table and builds its filter.
#[derive(Debug)]
pub struct BloomBuilder {
    bits_per_key: u32,
    hashes: Vec<u64>,
}

impl BloomBuilder {
    /// A builder aiming at `bits_per_key` bits per distinct key.
    pub fn new(bits_per_key: u32) -> Self {
        BloomBuilder { bits_per_key, hashes: Vec::new() }
    }

    /// Adds a user key. Consecutive repeats (versions of one key) are counted once.
    pub fn add_key(&mut self, user_key: &[u8]) {
        let h = xxh3_64(user_key);
        if self.hashes.last() != Some(&h) {
            self.hashes.push(h);
        }
    }

    /// Distinct keys added so far.
    pub fn num_keys(&self) -> usize {
        self.hashes.len()
    }

    /// Serializes the filter: bits, then the probe count.
    pub fn finish(&self) -> Vec<u8> {
        let k = num_probes(self.bits_per_key);
        let wanted = (self.hashes.len() as u64).saturating_mul(u64::from(self.bits_per_key));
        let bytes = wanted.max(MIN_BITS).div_ceil(8);
        let m = bytes * 8;
        let mut out = vec![0u8; bytes as usize + 1];
        for &h in &self.hashes {
            for bit in probes(h, m, k) {
                out[(bit / 8) as usize] |= 1 << (bit % 8);
            }
        }
        out[bytes as usize] = k;
        out
    }
}

/// A decoded filter, queried by point lookups.
#[derive(Clone, Debug)]
pub struct BloomFilter {
    /// The bit array (probe count stripped); empty when the filter is malformed.
    bits: Bytes,
    k: u8,
}

impl BloomFilter {
    /// Decodes a serialized filter. Malformed input gives a filter that matches everything.
    pub fn new(data: Bytes) -> Self {
        match data.split_last() {
            Some((&k, bits)) if !bits.is_empty() && (1..=MAX_PROBES).contains(&k) => {
                BloomFilter { bits: data.slice(..bits.len()), k }
            }
            _ => BloomFilter { bits: Bytes::new(), k: 0 },
        }
    }

    /// Whether the serialized filter was well formed (otherwise it always answers `true`).
    pub fn is_well_formed(&self) -> bool {
        self.k != 0
    }

    /// Probes per key.
    pub fn num_probes(&self) -> u8 {
        self.k
    }

    /// False only if `user_key` was certainly not added.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(user_key))
    }

    /// [`BloomFilter::may_contain`] for a key already hashed with [`key_hash`] (a point read
    /// hashes once and probes every table with it).
    pub fn may_contain_hash(&self, h: u64) -> bool {
        if self.k == 0 {
            return true;
        }
        let m = self.bits.len() as u64 * 8;
        probes(h, m, self.k).all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(keys: impl IntoIterator<Item = Vec<u8>>, bits_per_key: u32) -> BloomFilter {
        let mut b = BloomBuilder::new(bits_per_key);
        for k in keys {
            b.add_key(&k);
        }
        BloomFilter::new(Bytes::from(b.finish()))
    }

    #[test]
    fn probe_count_follows_bits_per_key() {
        assert_eq!(num_probes(0), 1);
        assert_eq!(num_probes(1), 1);
        assert_eq!(num_probes(10), 7);
        assert_eq!(num_probes(100), 30);
    }

    #[test]
    fn false_positive_rate_at_10_bits_per_key_is_below_2_percent() {
        let n = 100_000u32;
        let f = build((0..n).map(|i| format!("key{i:08}").into_bytes()), 10);
        assert_eq!(f.num_probes(), 7);
        for i in 0..n {
            assert!(f.may_contain(format!("key{i:08}").as_bytes()));
        }
        let fp = (0..n).filter(|i| f.may_contain(format!("absent{i:08}").as_bytes())).count();
        let rate = fp as f64 / f64::from(n);
        assert!(rate < 0.02, "false-positive rate {rate}");
    }

    #[test]
    fn repeated_keys_count_once() {
        let mut b = BloomBuilder::new(10);
        for _ in 0..5 {
            b.add_key(b"same");
        }
        b.add_key(b"other");
        assert_eq!(b.num_keys(), 2);
    }

    #[test]
    fn empty_filter_rejects_everything_and_malformed_fails_open() {
        let f = build(Vec::new(), 10);
        assert!(f.is_well_formed());
        assert!(!f.may_contain(b"x"));
        for bad in [&[][..], &[7][..], &[0xff, 0][..], &[0xff, 31][..]] {
            let f = BloomFilter::new(Bytes::copy_from_slice(bad));
            assert!(!f.is_well_formed());
            assert!(f.may_contain(b"anything"));
        }
    }

    proptest! {
        #[test]
        fn added_keys_always_match(keys: Vec<Vec<u8>>, bits in 0u32..20) {
            let f = build(keys.clone(), bits);
            for k in &keys {
                prop_assert!(f.may_contain(k));
            }
        }

        #[test]
        fn arbitrary_filters_never_panic(data: Vec<u8>, probe: Vec<u8>) {
            let _ = BloomFilter::new(Bytes::from(data)).may_contain(&probe);
        }
    }
}
