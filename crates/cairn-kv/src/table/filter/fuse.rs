//! A binary fuse filter with 8-bit fingerprints (Graf and Lemire, "Binary Fuse Filters: Fast
//! and Smaller Than Xor Filters", 2022), written from the paper: about 9 to 10 bits per key for
//! a false-positive rate of 1/256 (0.39 %), where a bloom filter at 10 bits per key answers
//! wrongly 0.82 % of the time. A lookup reads three bytes instead of a bloom filter's seven bits.
//!
//! Layout: the fingerprint array is `segment_count + 2` segments of `segment_length` bytes. A key
//! hashed (with the filter's seed) to `m` maps to one byte in each of three consecutive segments,
//! `h0 = mulhi(m, segment_count * segment_length)`, `h1 = (h0 + L) ^ ((m >> 18) & (L - 1))` and
//! `h2 = (h0 + 2L) ^ (m & (L - 1))` for `L = segment_length`; the key is present (maybe) when
//! `fp[h0] ^ fp[h1] ^ fp[h2]` equals its fingerprint `(m ^ (m >> 32)) as u8`. Building peels the
//! 3-hypergraph (repeatedly removing a key that is alone in one of its slots) and assigns the
//! slots in reverse; a seed whose hypergraph does not peel is replaced by the next one.
//!
//! Serialized form (see `docs/format/sstable.md`): the fingerprint bytes, then `seed` (u64 LE),
//! `segment_length` (u32 LE), `segment_count_length` (u32 LE), then the tag byte [`TAG`]. A
//! filter whose lengths do not agree fails open.

/// Last byte of a serialized fuse filter (outside the bloom filter's probe counts `1..=30`).
pub const TAG: u8 = 0x80;

/// Bytes after the fingerprints: seed, segment length, segment count × length, tag.
const TRAILER: usize = 8 + 4 + 4 + 1;

/// Largest segment (the paper's cap).
const MAX_SEGMENT_LENGTH: u32 = 1 << 18;

/// Seeds tried before giving up (each fails with a probability well under 1 %).
const MAX_ATTEMPTS: u64 = 64;

/// Filters need at least this many keys (the segment sizing is meant for larger sets; a bloom
/// filter serves tiny tables).
pub const MIN_KEYS: usize = 16;

/// False-positive rate of the filter: one in 256.
pub const FALSE_POSITIVE_RATE: f64 = 1.0 / 256.0;

#[inline]
fn mix(hash: u64, seed: u64) -> u64 {
    // murmur3's 64-bit finalizer over the key hash plus the seed.
    let mut h = hash.wrapping_add(seed);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

#[inline]
fn fingerprint(m: u64) -> u8 {
    (m ^ (m >> 32)) as u8
}

/// The geometry of one filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Geometry {
    segment_length: u32,
    segment_count_length: u32,
}

impl Geometry {
    /// The paper's sizing for `n` keys (`n >= MIN_KEYS`).
    fn for_keys(n: usize) -> Option<Geometry> {
        let size = n as f64;
        let exp = (size.ln() / 3.33f64.ln() + 2.25).floor() as u32;
        let segment_length = 1u32.checked_shl(exp)?.min(MAX_SEGMENT_LENGTH);
        let factor = (0.875 + 0.25 * 1e6f64.ln() / size.ln()).max(1.125);
        let capacity = (size * factor).round() as u64;
        let l = u64::from(segment_length);
        let segment_count = capacity.div_ceil(l).saturating_sub(2).max(1);
        let segment_count_length = u32::try_from(segment_count * l).ok()?;
        segment_count_length.checked_add(2 * segment_length)?;
        Some(Geometry { segment_length, segment_count_length })
    }

    fn array_length(self) -> usize {
        self.segment_count_length as usize + 2 * self.segment_length as usize
    }

    #[inline]
    fn slots(self, m: u64) -> [usize; 3] {
        let mask = u64::from(self.segment_length - 1);
        let l = u64::from(self.segment_length);
        let h0 = ((u128::from(m) * u128::from(self.segment_count_length)) >> 64) as u64;
        let h1 = (h0 + l) ^ ((m >> 18) & mask);
        let h2 = (h0 + 2 * l) ^ (m & mask);
        [h0 as usize, h1 as usize, h2 as usize]
    }
}

/// Builds a serialized filter over key hashes ([`crate::key::key_hash`]); repeats are allowed.
/// `None` when there are fewer than [`MIN_KEYS`] distinct hashes, when the filter would take
/// more than `max_bytes` (known from the key count, before any peeling), or when no seed peels.
pub fn build(hashes: &[u64], max_bytes: u64) -> Option<Vec<u8>> {
    let mut keys = hashes.to_vec();
    keys.sort_unstable();
    keys.dedup();
    if keys.len() < MIN_KEYS {
        return None;
    }
    let geo = Geometry::for_keys(keys.len())?;
    let len = geo.array_length();
    if (len + TRAILER) as u64 > max_bytes {
        return None;
    }
    let mut count = vec![0u32; len];
    let mut xor = vec![0u64; len];
    let mut queue = Vec::with_capacity(len);
    let mut order: Vec<(u64, usize)> = Vec::with_capacity(keys.len());
    for attempt in 0..MAX_ATTEMPTS {
        let seed = mix(attempt, 0x9e37_79b9_7f4a_7c15);
        count.fill(0);
        xor.fill(0);
        for &k in &keys {
            let m = mix(k, seed);
            for s in geo.slots(m) {
                count[s] += 1;
                xor[s] ^= m;
            }
        }
        queue.clear();
        queue.extend((0..len).filter(|&s| count[s] == 1));
        order.clear();
        while let Some(slot) = queue.pop() {
            if count[slot] != 1 {
                continue;
            }
            let m = xor[slot];
            order.push((m, slot));
            for s in geo.slots(m) {
                count[s] -= 1;
                xor[s] ^= m;
                if count[s] == 1 {
                    queue.push(s);
                }
            }
        }
        if order.len() != keys.len() {
            continue;
        }
        let mut out = vec![0u8; len + TRAILER];
        for &(m, slot) in order.iter().rev() {
            let [a, b, c] = geo.slots(m);
            // `out[slot]` is still 0 here: every slot is assigned once, in reverse peel order.
            out[slot] = fingerprint(m) ^ out[a] ^ out[b] ^ out[c];
        }
        out[len..len + 8].copy_from_slice(&seed.to_le_bytes());
        out[len + 8..len + 12].copy_from_slice(&geo.segment_length.to_le_bytes());
        out[len + 12..len + 16].copy_from_slice(&geo.segment_count_length.to_le_bytes());
        out[len + 16] = TAG;
        return Some(out);
    }
    None
}

/// A decoded fuse filter over a serialized form's fingerprint bytes.
#[derive(Clone, Copy, Debug)]
pub struct FuseParams {
    seed: u64,
    geo: Geometry,
}

impl FuseParams {
    /// Reads the trailer of a serialized filter; `None` when the tag or the lengths are wrong
    /// (the caller fails open). The fingerprints are `data[..data.len() - 17]`.
    pub fn decode(data: &[u8]) -> Option<FuseParams> {
        let (&tag, rest) = data.split_last()?;
        if tag != TAG || rest.len() < TRAILER - 1 {
            return None;
        }
        let fps = rest.len() - (TRAILER - 1);
        let t = &rest[fps..];
        let seed = u64::from_le_bytes(t[0..8].try_into().ok()?);
        let segment_length = u32::from_le_bytes(t[8..12].try_into().ok()?);
        let segment_count_length = u32::from_le_bytes(t[12..16].try_into().ok()?);
        let geo = Geometry { segment_length, segment_count_length };
        let ok = segment_length.is_power_of_two()
            && segment_length <= MAX_SEGMENT_LENGTH
            && segment_count_length > 0
            && segment_count_length.is_multiple_of(segment_length)
            && u64::from(segment_count_length) + 2 * u64::from(segment_length) == fps as u64;
        ok.then_some(FuseParams { seed, geo })
    }

    /// Whether the key with hash `h` may be in the filter whose fingerprints are `fps`
    /// (the bytes [`FuseParams::decode`] accepted, without the trailer).
    #[inline]
    pub fn may_contain_hash(&self, fps: &[u8], h: u64) -> bool {
        let m = mix(h, self.seed);
        let [a, b, c] = self.geo.slots(m);
        match (fps.get(a), fps.get(b), fps.get(c)) {
            (Some(x), Some(y), Some(z)) => fingerprint(m) == x ^ y ^ z,
            _ => true,
        }
    }

    /// Length of the fingerprint array.
    pub fn fingerprint_len(&self) -> usize {
        self.geo.array_length()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::key_hash;
    use proptest::prelude::*;

    fn built(keys: &[Vec<u8>]) -> (Vec<u8>, FuseParams) {
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        let data = build(&hashes, u64::MAX).expect("builds");
        let p = FuseParams::decode(&data).expect("decodes");
        (data, p)
    }

    #[test]
    fn every_key_matches_and_absent_keys_match_about_one_in_256() {
        for n in [16usize, 17, 100, 1_000, 65_000, 300_000] {
            let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("key{i:09}").into_bytes()).collect();
            let (data, p) = built(&keys);
            let fps = &data[..p.fingerprint_len()];
            assert!(keys.iter().all(|k| p.may_contain_hash(fps, key_hash(k))), "n = {n}");
            if n >= 65_000 {
                let probes = 400_000u32;
                let fp =
                    (0..probes).filter(|i| p.may_contain_hash(fps, key_hash(format!("absent{i}").as_bytes()))).count();
                let rate = fp as f64 / f64::from(probes);
                // 1/256 = 0.39 %; a bloom filter at 10 bits per key gives 0.82 %.
                assert!((0.0030..0.0050).contains(&rate), "n = {n}: false-positive rate {rate}");
                let bits_per_key = data.len() as f64 * 8.0 / n as f64;
                assert!(bits_per_key < 10.0, "n = {n}: {bits_per_key} bits per key");
            }
        }
    }

    #[test]
    fn repeated_hashes_count_once_and_too_few_keys_build_nothing() {
        let mut hashes: Vec<u64> = (0..40u64).map(|i| key_hash(&i.to_le_bytes())).collect();
        hashes.extend_from_within(..);
        let data = build(&hashes, u64::MAX).expect("builds");
        let p = FuseParams::decode(&data).unwrap();
        assert!(hashes.iter().all(|&h| p.may_contain_hash(&data[..p.fingerprint_len()], h)));
        assert!(build(&hashes[..MIN_KEYS - 1], u64::MAX).is_none());
        assert!(build(&[7; 100], u64::MAX).is_none());
        assert!(build(&hashes, data.len() as u64 - 1).is_none(), "over the byte limit");
        assert_eq!(build(&hashes, data.len() as u64).as_ref(), Some(&data));
    }

    #[test]
    fn malformed_trailers_do_not_decode() {
        let keys: Vec<Vec<u8>> = (0..100).map(|i| format!("k{i}").into_bytes()).collect();
        let (data, _) = built(&keys);
        assert!(FuseParams::decode(&data[1..]).is_none(), "one fingerprint short");
        assert!(FuseParams::decode(&data[..data.len() - 1]).is_none(), "no tag");
        assert!(FuseParams::decode(&[TAG; TRAILER - 1]).is_none());
        assert!(FuseParams::decode(&[]).is_none());
        let n = data.len();
        for (at, value) in [(n - 9, 3u32), (n - 9, 0), (n - 5, 0), (n - 5, 7)] {
            let mut bad = data.clone();
            bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert!(FuseParams::decode(&bad).is_none(), "field at {at} = {value}");
        }
    }

    proptest! {
        #[test]
        fn added_keys_always_match(keys: Vec<Vec<u8>>) {
            let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
            if let Some(data) = build(&hashes, u64::MAX) {
                let p = FuseParams::decode(&data).unwrap();
                for &h in &hashes {
                    prop_assert!(p.may_contain_hash(&data[..p.fingerprint_len()], h));
                }
            } else {
                let mut distinct = hashes.clone();
                distinct.sort_unstable();
                distinct.dedup();
                prop_assert!(distinct.len() < MIN_KEYS);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(mut data: Vec<u8>, h: u64, tag_it: bool) {
            if tag_it {
                data.push(TAG);
            }
            if let Some(p) = FuseParams::decode(&data) {
                let _ = p.may_contain_hash(&data[..p.fingerprint_len()], h);
            }
        }
    }
}
