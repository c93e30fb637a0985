//! YCSB's key and request generators, reproduced from the reference Java implementation
//! (`site.ycsb.generator`): FNV-64 key hashing, the zipfian generator of Gray et al., the
//! scrambled zipfian generator and the skewed-latest generator, all driven by a seeded PRNG so a
//! stream is the same on every run.

/// FNV-1 64-bit offset basis, as YCSB's `Utils.FNV_OFFSET_BASIS_64`.
const FNV_OFFSET_BASIS_64: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV-1 64-bit prime, as YCSB's `Utils.FNV_PRIME_64`.
const FNV_PRIME_64: u64 = 1_099_511_628_211;

/// YCSB's `Utils.fnvhash64`: FNV-1 over the eight little-endian bytes of `val`, then the absolute
/// value of the result read as a signed 64-bit integer.
pub fn fnv_hash64(val: u64) -> u64 {
    let mut v = val;
    let mut hash = FNV_OFFSET_BASIS_64;
    for _ in 0..8 {
        let octet = v & 0xff;
        v >>= 8;
        hash ^= octet;
        hash = hash.wrapping_mul(FNV_PRIME_64);
    }
    (hash as i64).unsigned_abs()
}

/// The number YCSB puts after `user` in the key of record `ordinal` with the default "hashed"
/// insert order (`CoreWorkload.buildKeyName`).
pub fn key_number(ordinal: u64) -> u64 {
    fnv_hash64(ordinal)
}

/// Writes the key for a stored key number (`user` followed by its decimal digits) into `buf`.
pub fn format_key(number: u64, buf: &mut Vec<u8>) {
    use std::io::Write as _;
    buf.clear();
    buf.extend_from_slice(b"user");
    // Writing into a Vec cannot fail.
    let _ = write!(buf, "{number}");
}

/// A small, fast, seedable PRNG (SplitMix64). Statistical quality is ample for workload
/// generation, and it is trivial to reproduce in another language.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform double in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `[lo, hi]` (inclusive).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        let span = hi - lo + 1;
        lo + ((self.next_u64() as u128 * span as u128) >> 64) as u64
    }
}

/// The YCSB zipfian constant.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// `sum_{i=st+1..=n} 1 / i^theta + initial` (YCSB's `zetastatic`).
fn zeta(st: u64, n: u64, theta: f64, initial: f64) -> f64 {
    let mut sum = initial;
    for i in st..n {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// YCSB's `ZipfianGenerator`: item `base + k` has probability proportional to `1 / (k+1)^theta`
/// ("Quickly Generating Billion-Record Synthetic Databases", Gray et al., SIGMOD 1994). The
/// item count may grow (`next_with_count`); zeta is then extended incrementally.
#[derive(Clone, Debug)]
pub struct Zipfian {
    base: u64,
    theta: f64,
    alpha: f64,
    zeta2theta: f64,
    zetan: f64,
    eta: f64,
    count_for_zeta: u64,
}

impl Zipfian {
    /// Items `min..=max` with the default constant 0.99; computes zeta in `O(items)`.
    pub fn new(min: u64, max: u64) -> Self {
        let items = max - min + 1;
        let zetan = zeta(0, items, ZIPFIAN_CONSTANT, 0.0);
        Self::with_zetan(min, max, ZIPFIAN_CONSTANT, zetan)
    }

    /// Items `min..=max` with a precomputed `zetan` (YCSB does this for its huge scrambled space).
    pub fn with_zetan(min: u64, max: u64, theta: f64, zetan: f64) -> Self {
        let items = max - min + 1;
        let zeta2theta = zeta(0, 2, theta, 0.0);
        Zipfian {
            base: min,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta2theta,
            zetan,
            eta: Self::eta(items, theta, zeta2theta, zetan),
            count_for_zeta: items,
        }
    }

    fn eta(items: u64, theta: f64, zeta2theta: f64, zetan: f64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2theta / zetan)
    }

    /// The next item over the initial item count.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        self.next_with_count(self.count_for_zeta, rng)
    }

    /// The next item over `count` items (`count` may only grow). YCSB recomputes `eta` with the
    /// item count it was built with (a known quirk); this uses the current count.
    pub fn next_with_count(&mut self, count: u64, rng: &mut Rng) -> u64 {
        if count > self.count_for_zeta {
            self.zetan = zeta(self.count_for_zeta, count, self.theta, self.zetan);
            self.count_for_zeta = count;
            self.eta = Self::eta(count, self.theta, self.zeta2theta, self.zetan);
        }
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return self.base + 1;
        }
        self.base + (count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64
    }
}

/// YCSB's `ScrambledZipfianGenerator` at theta 0.99: a zipfian choice over a fixed space of
/// 10^10 items (with YCSB's precomputed zeta), hashed with FNV-64 and taken modulo the real item
/// count, so popular items are spread over the key space instead of clustered at its start.
#[derive(Clone, Debug)]
pub struct ScrambledZipfian {
    min: u64,
    item_count: u64,
    zipf: Zipfian,
}

/// The item space YCSB draws the zipfian from before scrambling.
pub const SCRAMBLED_ITEM_COUNT: u64 = 10_000_000_000;
/// YCSB's precomputed zeta(10^10 + 1, 0.99).
pub const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

impl ScrambledZipfian {
    /// Items `min..=max`.
    pub fn new(min: u64, max: u64) -> Self {
        ScrambledZipfian {
            min,
            item_count: max - min + 1,
            zipf: Zipfian::with_zetan(0, SCRAMBLED_ITEM_COUNT, ZIPFIAN_CONSTANT, SCRAMBLED_ZETAN),
        }
    }

    /// The next item.
    pub fn next(&mut self, rng: &mut Rng) -> u64 {
        let v = self.zipf.next(rng);
        self.min + fnv_hash64(v) % self.item_count
    }
}

/// YCSB's `SkewedLatestGenerator`: `latest - zipfian(latest)`, so the most recently inserted
/// records are the most popular.
#[derive(Clone, Debug)]
pub struct SkewedLatest {
    zipf: Zipfian,
}

impl SkewedLatest {
    /// For a table whose newest record has ordinal `latest` (at least 1).
    pub fn new(latest: u64) -> Self {
        SkewedLatest { zipf: Zipfian::new(0, latest.max(1) - 1) }
    }

    /// The next ordinal, given the current newest ordinal.
    pub fn next(&mut self, latest: u64, rng: &mut Rng) -> u64 {
        let off = self.zipf.next_with_count(latest.max(1), rng);
        latest.saturating_sub(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_ycsb() {
        // YCSB's first loaded key is user6284781860667377211.
        assert_eq!(fnv_hash64(0), 6_284_781_860_667_377_211);
        assert_eq!(fnv_hash64(1), 8_517_097_267_634_966_620);
        let mut k = Vec::new();
        format_key(key_number(0), &mut k);
        assert_eq!(k, b"user6284781860667377211");
    }

    #[test]
    fn zipfian_head_share() {
        // For theta 0.99 over 1000 items, P(item 0) = 1 / zeta(1000) ~ 0.1337.
        let mut rng = Rng::new(7);
        let mut z = Zipfian::new(0, 999);
        let n = 200_000;
        let mut counts = vec![0u32; 1000];
        for _ in 0..n {
            let v = z.next(&mut rng);
            assert!(v < 1000);
            counts[v as usize] += 1;
        }
        let p0 = counts[0] as f64 / n as f64;
        let expect = 1.0 / zeta(0, 1000, 0.99, 0.0);
        assert!((p0 - expect).abs() < 0.01, "p0 {p0} expected {expect}");
        // Monotone on the head: item 0 > item 1 > item 9.
        assert!(counts[0] > counts[1] && counts[1] > counts[9]);
        // The top 10% of items take most of the draws.
        let head: u32 = counts[..100].iter().sum();
        assert!(head as f64 / n as f64 > 0.6);
    }

    #[test]
    fn scrambled_covers_keyspace_and_is_skewed() {
        let mut rng = Rng::new(11);
        let items = 10_000u64;
        let mut z = ScrambledZipfian::new(0, items - 1);
        let n = 500_000;
        let mut counts = vec![0u32; items as usize];
        for _ in 0..n {
            let v = z.next(&mut rng);
            assert!(v < items);
            counts[v as usize] += 1;
        }
        // Every tenth of the key space is hit (the hot items are scattered, not clustered at 0).
        for tenth in counts.chunks(items as usize / 10) {
            assert!(tenth.iter().any(|&c| c > 0));
            let s: u32 = tenth.iter().sum();
            assert!(s as f64 / n as f64 > 0.02, "a tenth of the key space got only {s}");
        }
        let touched = counts.iter().filter(|&&c| c > 0).count();
        assert!(touched > items as usize / 2, "only {touched} distinct items drawn");
        // Still skewed: the most popular item gets far more than a uniform share.
        let max = *counts.iter().max().unwrap();
        assert!(max as f64 / n as f64 > 20.0 / items as f64);
        // The hottest item is not item 0 (scrambled).
        let hottest = counts.iter().position(|&c| c == max).unwrap();
        assert_ne!(hottest, 0);
    }

    #[test]
    fn latest_favours_recent() {
        let mut rng = Rng::new(3);
        let mut latest = 10_000u64;
        let mut g = SkewedLatest::new(latest);
        let n = 100_000;
        let mut recent = 0;
        for i in 0..n {
            if i % 20 == 0 {
                latest += 1; // an insert
            }
            let v = g.next(latest, &mut rng);
            assert!(v <= latest);
            if latest - v < 100 {
                recent += 1;
            }
        }
        // The newest 1% of records get the majority of reads.
        assert!(recent as f64 / n as f64 > 0.5, "recent share {}", recent as f64 / n as f64);
    }

    #[test]
    fn rng_range_is_inclusive_and_uniform() {
        let mut rng = Rng::new(1);
        let mut seen = [0u32; 100];
        for _ in 0..100_000 {
            let v = rng.range_inclusive(1, 100);
            assert!((1..=100).contains(&v));
            seen[v as usize - 1] += 1;
        }
        assert!(seen.iter().all(|&c| c > 800 && c < 1200));
    }
}
