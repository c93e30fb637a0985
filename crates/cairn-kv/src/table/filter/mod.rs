//! The whole-table filter over USER keys (not internal keys), so a point lookup at any sequence
//! number can skip a table that cannot hold the key: a binary fuse filter
//! ([`crate::table::filter::fuse`], 1/256 false positives in about 9.5 bits per key) when the table has
//! enough keys and that filter fits the bits-per-key budget with fewer false positives than a
//! bloom filter of the budget, otherwise a bloom filter. Readers take both kinds: tables written
//! before the fuse filter hold bloom filters.
//!
//! Hashing: one 64-bit `xxh3_64` of the user key ([`key_hash`]). The bloom filter probes with
//! double hashing: probe `i` sets bit `(h + i * ((h >> 32) | 1)) mod m` for `i` in `0..k`, with
//! `m` the filter's bit count.
//!
//! Serialized bloom form (see `docs/format/sstable.md`): `ceil(m / 8)` bytes of bits (bit `j` is
//! `byte[j / 8] >> (j % 8) & 1`), then one byte holding `k`. A fuse filter ends with the byte
//! [`crate::table::filter::fuse::TAG`] instead. A filter that decodes as neither (empty, a last byte that
//! is neither `1..=30` nor the fuse tag, or fuse lengths that disagree) fails open: it answers
//! "may contain" for every key.

pub mod fuse;

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

use fuse::FuseParams;

pub use crate::key::key_hash;

/// Largest number of probes per key.
pub const MAX_PROBES: u8 = 30;

/// Fewest bits in a filter, so tiny tables still get a useful one.
const MIN_BITS: u64 = 64;

/// Number of probes for `bits_per_key`: `round(bits_per_key * ln 2)`, clamped to `1..=30`.
pub fn num_probes(bits_per_key: u32) -> u8 {
    let k = (f64::from(bits_per_key) * std::f64::consts::LN_2).round();
    k.clamp(1.0, f64::from(MAX_PROBES)) as u8
}

/// The expected false-positive rate of a bloom filter at `bits_per_key` with
/// [`num_probes`] probes: `(1 - e^(-k / b))^k`.
pub fn bloom_false_positive_rate(bits_per_key: u32) -> f64 {
    if bits_per_key == 0 {
        return 1.0;
    }
    let k = f64::from(num_probes(bits_per_key));
    (1.0 - (-k / f64::from(bits_per_key)).exp()).powf(k)
}

#[inline]
fn probes(hash: u64, m: u64, k: u8) -> impl Iterator<Item = u64> {
    let delta = (hash >> 32) | 1;
    (0..u64::from(k)).map(move |i| hash.wrapping_add(i.wrapping_mul(delta)) % m)
}

/// Collects the hashes of the user keys of one table and builds its filter.
#[derive(Debug)]
pub struct FilterBuilder {
    bits_per_key: u32,
    hashes: Vec<u64>,
}

impl FilterBuilder {
    /// A builder aiming at `bits_per_key` bits per distinct key.
    pub fn new(bits_per_key: u32) -> Self {
        FilterBuilder { bits_per_key, hashes: Vec::new() }
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

    /// Serializes the filter: a binary fuse filter when a bloom filter of the budget would
    /// answer wrongly more often than it and it fits in `bits_per_key` bits per key, otherwise
    /// a bloom filter ([`FilterBuilder::finish_bloom`]).
    pub fn finish(&self) -> Vec<u8> {
        if bloom_false_positive_rate(self.bits_per_key) > fuse::FALSE_POSITIVE_RATE
            && let Some(fuse) = fuse::build(&self.hashes, self.budget_bits() / 8)
        {
            return fuse;
        }
        self.finish_bloom()
    }

    /// The filter's bits: `bits_per_key` for each key added.
    fn budget_bits(&self) -> u64 {
        (self.hashes.len() as u64).saturating_mul(u64::from(self.bits_per_key))
    }

    /// Serializes a bloom filter: bits, then the probe count.
    pub fn finish_bloom(&self) -> Vec<u8> {
        let k = num_probes(self.bits_per_key);
        let bytes = self.budget_bits().max(MIN_BITS).div_ceil(8);
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

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// A bloom filter with `k` probes per key.
    Bloom(u8),
    /// A binary fuse filter.
    Fuse(FuseParams),
    /// Malformed: answers "may contain" for every key.
    Open,
}

/// A decoded table filter, queried by point lookups.
#[derive(Clone, Debug)]
pub struct TableFilter {
    /// The bloom filter's bits or the fuse filter's fingerprints (trailer stripped); empty
    /// when the filter is malformed.
    bits: Bytes,
    kind: Kind,
}

impl TableFilter {
    /// Decodes a serialized filter. Malformed input gives a filter that matches everything.
    pub fn new(data: Bytes) -> Self {
        let open = TableFilter { bits: Bytes::new(), kind: Kind::Open };
        match data.split_last() {
            Some((&fuse::TAG, _)) => match FuseParams::decode(&data) {
                Some(p) => TableFilter { bits: data.slice(..p.fingerprint_len()), kind: Kind::Fuse(p) },
                None => open,
            },
            Some((&k, bits)) if !bits.is_empty() && (1..=MAX_PROBES).contains(&k) => {
                TableFilter { bits: data.slice(..bits.len()), kind: Kind::Bloom(k) }
            }
            _ => open,
        }
    }

    /// Whether the serialized filter was well formed (otherwise it always answers `true`).
    pub fn is_well_formed(&self) -> bool {
        !matches!(self.kind, Kind::Open)
    }

    /// Whether this is a binary fuse filter (otherwise a bloom filter, or malformed).
    pub fn is_fuse(&self) -> bool {
        matches!(self.kind, Kind::Fuse(_))
    }

    /// Probes per key of a bloom filter; 3 for a fuse filter, 0 when malformed.
    pub fn num_probes(&self) -> u8 {
        match self.kind {
            Kind::Bloom(k) => k,
            Kind::Fuse(_) => 3,
            Kind::Open => 0,
        }
    }

    /// False only if `user_key` was certainly not added.
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.may_contain_hash(key_hash(user_key))
    }

    /// [`TableFilter::may_contain`] for a key already hashed with [`key_hash`] (a point read
    /// hashes once and probes every table with it).
    pub fn may_contain_hash(&self, h: u64) -> bool {
        match self.kind {
            Kind::Bloom(k) => {
                let m = self.bits.len() as u64 * 8;
                probes(h, m, k).all(|bit| self.bits[(bit / 8) as usize] & (1 << (bit % 8)) != 0)
            }
            Kind::Fuse(p) => p.may_contain_hash(&self.bits, h),
            Kind::Open => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn builder(keys: impl IntoIterator<Item = Vec<u8>>, bits_per_key: u32) -> FilterBuilder {
        let mut b = FilterBuilder::new(bits_per_key);
        for k in keys {
            b.add_key(&k);
        }
        b
    }

    fn build(keys: impl IntoIterator<Item = Vec<u8>>, bits_per_key: u32) -> TableFilter {
        TableFilter::new(Bytes::from(builder(keys, bits_per_key).finish()))
    }

    fn false_positive_rate(f: &TableFilter, n: u32) -> f64 {
        let fp = (0..n).filter(|i| f.may_contain(format!("absent{i:08}").as_bytes())).count();
        fp as f64 / f64::from(n)
    }

    #[test]
    fn probe_count_follows_bits_per_key() {
        assert_eq!(num_probes(0), 1);
        assert_eq!(num_probes(1), 1);
        assert_eq!(num_probes(10), 7);
        assert_eq!(num_probes(100), 30);
    }

    #[test]
    fn bloom_false_positive_rate_at_10_bits_per_key_is_below_2_percent() {
        let n = 100_000u32;
        let b = builder((0..n).map(|i| format!("key{i:08}").into_bytes()), 10);
        let f = TableFilter::new(Bytes::from(b.finish_bloom()));
        assert!(!f.is_fuse());
        assert_eq!(f.num_probes(), 7);
        for i in 0..n {
            assert!(f.may_contain(format!("key{i:08}").as_bytes()));
        }
        let rate = false_positive_rate(&f, n);
        assert!(rate < 0.02, "false-positive rate {rate}");
        let expected = bloom_false_positive_rate(10);
        assert!((0.0075..0.0090).contains(&expected), "{expected}");
    }

    /// At 10 bits per key a large table gets a fuse filter, which answers wrongly about half
    /// as often as the bloom filter of the same budget and stays within the budget.
    #[test]
    fn large_tables_at_10_bits_per_key_get_a_fuse_filter_within_budget() {
        let n = 100_000u32;
        let b = builder((0..n).map(|i| format!("key{i:08}").into_bytes()), 10);
        let data = b.finish();
        assert!(data.len() * 8 <= n as usize * 10, "{} bytes", data.len());
        let f = TableFilter::new(Bytes::from(data));
        assert!(f.is_fuse() && f.is_well_formed());
        for i in 0..n {
            assert!(f.may_contain(format!("key{i:08}").as_bytes()));
        }
        let rate = false_positive_rate(&f, 400_000);
        assert!(rate < 0.005, "false-positive rate {rate}");
    }

    /// Bloom filters stay where they do better (12+ bits per key) or where a fuse filter would
    /// not fit the budget (small tables) or cannot be built (fewer than 16 keys).
    #[test]
    fn bloom_filters_where_the_fuse_filter_does_not_pay() {
        let keys = |n: u32| (0..n).map(|i| format!("key{i:08}").into_bytes());
        assert!(!build(keys(100_000), 12).is_fuse());
        assert!(!build(keys(100_000), 8).is_fuse());
        assert!(!build(keys(1_000), 10).is_fuse());
        assert!(!build(keys(10), 10).is_fuse());
        assert!(build(keys(100_000), 11).is_fuse());
    }

    #[test]
    fn repeated_keys_count_once() {
        let mut b = FilterBuilder::new(10);
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
        for bad in [&[][..], &[7][..], &[0xff, 0][..], &[0xff, 31][..], &[0xff, fuse::TAG][..]] {
            let f = TableFilter::new(Bytes::copy_from_slice(bad));
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
            let _ = TableFilter::new(Bytes::from(data)).may_contain(&probe);
        }
    }
}
