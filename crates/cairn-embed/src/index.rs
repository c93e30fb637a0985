//! [`VectorIndex`]: vectors held in memory as one contiguous int8 matrix, searched by dot product.
//!
//! Below [`IndexOptions::prefilter_threshold`] vectors every search is an exact scan. From there
//! on, each vector also has a 1-bit code (the signs of its components after the index's mean is
//! subtracted); a search ranks all codes by Hamming distance to the query's code, keeps the
//! nearest [`IndexOptions::pool`] and rescores those with the int8 dot product. Recall
//! against the exact scan and latencies: docs/design/2026-12-07-embedding-model.md.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::kernels::{dot_rows, hamming_rows};
use crate::quant::QuantizedVector;

/// How an index searches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexOptions {
    /// From this many vectors on, searches go through the 1-bit prefilter.
    pub prefilter_threshold: usize,
    /// The fewest vectors the prefilter passes to int8 rescoring (at least `k` are passed).
    pub candidates: usize,
    /// The share of the index, in thousandths, the prefilter passes when that is more than
    /// `candidates`: at a fixed pool, recall falls as the index grows.
    pub candidates_per_mille: usize,
}

impl IndexOptions {
    /// The candidate pool for an index of `n` vectors.
    pub fn pool(&self, n: usize) -> usize {
        self.candidates.max(n / 1000 * self.candidates_per_mille)
    }
}

impl Default for IndexOptions {
    /// The exact scan below 200,000 vectors; from there a pool of 0.8 % of the index, at least
    /// 2,000 (docs/design/2026-12-07-embedding-model.md).
    fn default() -> Self {
        IndexOptions { prefilter_threshold: 200_000, candidates: 2_000, candidates_per_mille: 8 }
    }
}

/// One search result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hit {
    /// The vector's id.
    pub id: u64,
    /// The dot product of the query with the vector (cosine similarity for unit vectors,
    /// within the int8 rounding).
    pub score: f32,
}

/// Orders hits best first: higher score, then lower id.
fn better(a: &Hit, b: &Hit) -> Ordering {
    a.score.total_cmp(&b.score).then_with(|| b.id.cmp(&a.id))
}

/// A min-heap entry, so the heap's top is the worst of the k kept.
struct Worst(Hit);

impl PartialEq for Worst {
    fn eq(&self, other: &Self) -> bool {
        better(&self.0, &other.0) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        better(&other.0, &self.0)
    }
}

struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    fn new(k: usize) -> Self {
        TopK { k, heap: BinaryHeap::with_capacity(k + 1) }
    }

    #[inline]
    fn push(&mut self, hit: Hit) {
        if self.heap.len() < self.k {
            self.heap.push(Worst(hit));
        } else if let Some(top) = self.heap.peek()
            && better(&hit, &top.0) == Ordering::Greater
        {
            self.heap.pop();
            self.heap.push(Worst(hit));
        }
    }

    fn into_sorted(self) -> Vec<Hit> {
        let mut v: Vec<Hit> = self.heap.into_iter().map(|w| w.0).collect();
        v.sort_by(|a, b| better(b, a));
        v
    }
}

/// Rows scored per call of the dot-product kernel.
const BLOCK: usize = 1024;

/// An in-memory vector index: ids, per-vector scales and an int8 matrix, row by row.
#[derive(Clone, Debug)]
pub struct VectorIndex {
    dim: usize,
    words: usize,
    options: IndexOptions,
    ids: Vec<u64>,
    scales: Vec<f32>,
    data: Vec<i8>,
    position: HashMap<u64, usize>,
    /// 1-bit codes, `words` per row; empty while the prefilter is off.
    codes: Vec<u64>,
    /// The mean the codes are taken around, and the row count when it was computed.
    centre: Vec<f32>,
    centre_rows: usize,
}

impl VectorIndex {
    /// An empty index of `dim`-component vectors with default options.
    pub fn new(dim: usize) -> Self {
        Self::with_options(dim, IndexOptions::default())
    }

    /// An empty index of `dim`-component vectors.
    pub fn with_options(dim: usize, options: IndexOptions) -> Self {
        VectorIndex {
            dim,
            words: dim.div_ceil(64),
            options,
            ids: Vec::new(),
            scales: Vec::new(),
            data: Vec::new(),
            position: HashMap::new(),
            codes: Vec::new(),
            centre: Vec::new(),
            centre_rows: 0,
        }
    }

    /// The vectors' dimension.
    pub fn dimension(&self) -> usize {
        self.dim
    }

    /// How searches are done.
    pub fn options(&self) -> IndexOptions {
        self.options
    }

    /// The number of vectors.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// Whether the index holds no vector.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether `id` is in the index.
    pub fn contains(&self, id: u64) -> bool {
        self.position.contains_key(&id)
    }

    /// Whether searches of the full index use the prefilter now.
    pub fn prefilter_active(&self) -> bool {
        !self.codes.is_empty()
    }

    /// Bytes held by the matrix, scales, ids and codes (not counting the id map).
    pub fn memory_bytes(&self) -> usize {
        self.data.len() + self.scales.len() * 4 + self.ids.len() * 8 + self.codes.len() * 8
    }

    /// Adds `vector` under `id`, replacing the vector `id` had.
    pub fn insert(&mut self, id: u64, vector: &QuantizedVector) -> Result<()> {
        if vector.dimension() != self.dim {
            return Err(Error::Dimension { expected: self.dim, got: vector.dimension() });
        }
        if let Some(&row) = self.position.get(&id) {
            self.scales[row] = vector.scale();
            self.data[row * self.dim..(row + 1) * self.dim].copy_from_slice(vector.data());
            if self.prefilter_active() {
                let code = self.code_of_row(row);
                self.codes[row * self.words..(row + 1) * self.words].copy_from_slice(&code);
            }
            return Ok(());
        }
        let row = self.ids.len();
        self.ids.push(id);
        self.scales.push(vector.scale());
        self.data.extend_from_slice(vector.data());
        self.position.insert(id, row);
        if self.prefilter_active() {
            let code = self.code_of_row(row);
            self.codes.extend_from_slice(&code);
        }
        self.refresh_prefilter();
        Ok(())
    }

    /// Removes `id`'s vector; returns whether it was there. The last row moves into its place.
    pub fn remove(&mut self, id: u64) -> bool {
        let Some(row) = self.position.remove(&id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if row != last {
            let moved = self.ids[last];
            self.ids[row] = moved;
            self.scales[row] = self.scales[last];
            self.data.copy_within(last * self.dim..(last + 1) * self.dim, row * self.dim);
            if self.prefilter_active() {
                self.codes.copy_within(last * self.words..(last + 1) * self.words, row * self.words);
            }
            self.position.insert(moved, row);
        }
        self.ids.pop();
        self.scales.pop();
        self.data.truncate(last * self.dim);
        if self.prefilter_active() {
            self.codes.truncate(last * self.words);
        }
        self.refresh_prefilter();
        true
    }

    /// Turns the prefilter on at the threshold, off below half of it, and recomputes the codes
    /// around a new mean whenever the index has doubled or halved since the last time (so the
    /// cost of recomputing is spread over the inserts that made it necessary).
    fn refresh_prefilter(&mut self) {
        let n = self.len();
        let threshold = self.options.prefilter_threshold;
        if self.prefilter_active() {
            if n < threshold / 2 {
                self.codes = Vec::new();
                self.centre.clear();
                self.centre_rows = 0;
            } else if n >= self.centre_rows * 2 || n * 2 <= self.centre_rows {
                self.rebuild_codes();
            }
        } else if n >= threshold.max(1) {
            self.rebuild_codes();
        }
    }

    fn rebuild_codes(&mut self) {
        let n = self.len();
        let mut sum = vec![0f64; self.dim];
        for row in 0..n {
            let s = f64::from(self.scales[row]);
            for (acc, &x) in sum.iter_mut().zip(self.row(row)) {
                *acc += f64::from(x) * s;
            }
        }
        self.centre = sum.iter().map(|s| (s / n.max(1) as f64) as f32).collect();
        self.centre_rows = n;
        let mut codes = Vec::with_capacity(n * self.words);
        for row in 0..n {
            codes.extend_from_slice(&self.code_of_row(row));
        }
        self.codes = codes;
    }

    fn row(&self, row: usize) -> &[i8] {
        &self.data[row * self.dim..(row + 1) * self.dim]
    }

    fn code_of_row(&self, row: usize) -> Vec<u64> {
        let scale = self.scales[row];
        sign_code(self.row(row).iter().map(|&x| f32::from(x) * scale), &self.centre, self.words)
    }

    fn check_query(&self, query: &[f32]) -> Result<QuantizedVector> {
        if query.len() != self.dim {
            return Err(Error::Dimension { expected: self.dim, got: query.len() });
        }
        QuantizedVector::quantize(query)
    }

    /// The `k` vectors with the largest dot product with `query`, best first (ties: lower id
    /// first), among those whose id is in `allowed` when it is given. Uses the prefilter when it
    /// is on and the allowed set is not small enough to score every member of it.
    pub fn search(&self, query: &[f32], k: usize, allowed: Option<&HashSet<u64>>) -> Result<Vec<Hit>> {
        let small_filter = allowed.is_some_and(|a| a.len() < self.options.prefilter_threshold);
        if self.prefilter_active() && !small_filter {
            self.search_prefiltered(query, k, self.options.pool(self.len()), allowed)
        } else {
            self.search_exact(query, k, allowed)
        }
    }

    /// [`VectorIndex::search`] by scoring every (allowed) vector.
    pub fn search_exact(&self, query: &[f32], k: usize, allowed: Option<&HashSet<u64>>) -> Result<Vec<Hit>> {
        let q = self.check_query(query)?;
        let mut top = TopK::new(k);
        if k == 0 || self.is_empty() {
            return Ok(Vec::new());
        }
        let qs = q.scale();
        match allowed {
            Some(allowed) if allowed.len() < self.len() / 4 => {
                for id in allowed {
                    if let Some(&row) = self.position.get(id) {
                        let dot = crate::kernels::dot_i8(q.data(), self.row(row));
                        top.push(Hit { id: *id, score: dot as f32 * qs * self.scales[row] });
                    }
                }
            }
            _ => {
                let mut dots = vec![0i32; BLOCK];
                for start in (0..self.len()).step_by(BLOCK) {
                    let end = (start + BLOCK).min(self.len());
                    let out = &mut dots[..end - start];
                    dot_rows(q.data(), &self.data[start * self.dim..end * self.dim], out);
                    for (i, &dot) in out.iter().enumerate() {
                        let row = start + i;
                        let id = self.ids[row];
                        if allowed.is_some_and(|a| !a.contains(&id)) {
                            continue;
                        }
                        top.push(Hit { id, score: dot as f32 * qs * self.scales[row] });
                    }
                }
            }
        }
        Ok(top.into_sorted())
    }

    /// [`VectorIndex::search`] through the 1-bit prefilter: the `candidates` vectors whose codes
    /// are nearest the query's in Hamming distance are rescored with int8 dot products. Falls
    /// back to an exact scan while the prefilter is off.
    pub fn search_prefiltered(
        &self,
        query: &[f32],
        k: usize,
        candidates: usize,
        allowed: Option<&HashSet<u64>>,
    ) -> Result<Vec<Hit>> {
        if !self.prefilter_active() {
            return self.search_exact(query, k, allowed);
        }
        let q = self.check_query(query)?;
        if k == 0 {
            return Ok(Vec::new());
        }
        let pool = candidates.max(k);
        let qcode = sign_code(query.iter().copied(), &self.centre, self.words);
        let n = self.len();
        // Hamming distances, with a histogram to find the distance that admits `pool` rows.
        let excluded = (self.words * 64 + 1) as u16;
        let mut dist = vec![0u16; n];
        let mut hist = vec![0usize; self.words * 64 + 2];
        let mut block = vec![0u32; BLOCK];
        for start in (0..n).step_by(BLOCK) {
            let end = (start + BLOCK).min(n);
            let out = &mut block[..end - start];
            hamming_rows(&qcode, &self.codes[start * self.words..end * self.words], out);
            for (i, &h) in out.iter().enumerate() {
                let row = start + i;
                let d = if allowed.is_some_and(|a| !a.contains(&self.ids[row])) { excluded } else { h as u16 };
                dist[row] = d;
                hist[usize::from(d)] += 1;
            }
        }
        let mut cutoff = 0usize;
        let mut below = 0usize;
        while cutoff < usize::from(excluded) && below + hist[cutoff] < pool {
            below += hist[cutoff];
            cutoff += 1;
        }
        // Rows nearer than `cutoff` all pass; rows at `cutoff` fill the pool in row order.
        let mut at_cutoff = pool.saturating_sub(below);
        let mut top = TopK::new(k);
        let qs = q.scale();
        for (row, &d) in dist.iter().enumerate() {
            let d = usize::from(d);
            if d > cutoff || d == usize::from(excluded) {
                continue;
            }
            if d == cutoff {
                if at_cutoff == 0 {
                    continue;
                }
                at_cutoff -= 1;
            }
            let dot = crate::kernels::dot_i8(q.data(), self.row(row));
            top.push(Hit { id: self.ids[row], score: dot as f32 * qs * self.scales[row] });
        }
        Ok(top.into_sorted())
    }
}

/// Bit `i` is set when component `i` is above the centre's (an empty centre counts as zero).
fn sign_code(values: impl Iterator<Item = f32>, centre: &[f32], words: usize) -> Vec<u64> {
    let mut code = vec![0u64; words];
    for (i, x) in values.enumerate() {
        let c = centre.get(i).copied().unwrap_or(0.0);
        if x > c {
            code[i / 64] |= 1 << (i % 64);
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    fn unit(rng: &mut StdRng, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    fn brute_force(vs: &[(u64, Vec<f32>)], q: &[f32], k: usize) -> Vec<u64> {
        let qq = QuantizedVector::quantize(q).unwrap();
        let mut s: Vec<Hit> = vs
            .iter()
            .map(|(id, v)| Hit { id: *id, score: qq.dot(&QuantizedVector::quantize(v).unwrap()).unwrap() })
            .collect();
        s.sort_by(|a, b| better(b, a));
        s.into_iter().take(k).map(|h| h.id).collect()
    }

    #[test]
    fn exact_search_matches_brute_force_through_inserts_and_removes() {
        let mut rng = StdRng::seed_from_u64(7);
        let dim = 40;
        let mut idx = VectorIndex::new(dim);
        let mut model: Vec<(u64, Vec<f32>)> = Vec::new();
        for id in 0..3000u64 {
            let v = unit(&mut rng, dim);
            idx.insert(id, &QuantizedVector::quantize(&v).unwrap()).unwrap();
            model.push((id, v));
        }
        // Replace some, remove some.
        for id in (0..3000u64).step_by(7) {
            let v = unit(&mut rng, dim);
            idx.insert(id, &QuantizedVector::quantize(&v).unwrap()).unwrap();
            model[id as usize].1 = v;
        }
        for id in (0..3000u64).step_by(5) {
            assert!(idx.remove(id));
            assert!(!idx.remove(id));
        }
        model.retain(|(id, _)| id % 5 != 0);
        assert_eq!(idx.len(), model.len());
        for _ in 0..20 {
            let q = unit(&mut rng, dim);
            let got: Vec<u64> = idx.search(&q, 10, None).unwrap().iter().map(|h| h.id).collect();
            assert_eq!(got, brute_force(&model, &q, 10));
        }
        // Filters, small (id lookups) and large (scan with membership).
        let small: HashSet<u64> = (0..3000).filter(|i| i % 11 == 1).collect();
        let large: HashSet<u64> = (0..3000).filter(|i| i % 3 != 0).collect();
        for allowed in [&small, &large] {
            let q = unit(&mut rng, dim);
            let got: Vec<u64> = idx.search(&q, 10, Some(allowed)).unwrap().iter().map(|h| h.id).collect();
            let subset: Vec<(u64, Vec<f32>)> = model.iter().filter(|(id, _)| allowed.contains(id)).cloned().collect();
            assert_eq!(got, brute_force(&subset, &q, 10));
        }
    }

    #[test]
    fn refuses_wrong_dimensions_and_handles_empty() {
        let mut idx = VectorIndex::new(8);
        assert!(idx.search(&[0.5; 8], 5, None).unwrap().is_empty());
        let q = QuantizedVector::quantize(&[1.0; 9]).unwrap();
        assert!(matches!(idx.insert(1, &q), Err(Error::Dimension { .. })));
        assert!(matches!(idx.search(&[1.0; 7], 1, None), Err(Error::Dimension { .. })));
        idx.insert(1, &QuantizedVector::quantize(&[1.0; 8]).unwrap()).unwrap();
        assert_eq!(idx.search(&[0.5; 8], 0, None).unwrap(), vec![]);
        let hits = idx.search(&[0.5; 8], 5, None).unwrap();
        assert_eq!(hits.len(), 1);
        assert!((hits[0].score - 4.0).abs() < 0.05);
    }

    #[test]
    fn prefilter_turns_on_at_threshold_and_agrees_with_exact_scan() {
        let mut rng = StdRng::seed_from_u64(11);
        let dim = 64;
        let options = IndexOptions { prefilter_threshold: 2000, candidates: 400, candidates_per_mille: 0 };
        let mut idx = VectorIndex::with_options(dim, options);
        // Clustered data: queries near stored vectors, as embeddings are.
        let centres: Vec<Vec<f32>> = (0..50).map(|_| unit(&mut rng, dim)).collect();
        let mut stored = Vec::new();
        for id in 0..6000u64 {
            let c = &centres[rng.random_range(0..centres.len())];
            let mut v: Vec<f32> = c.iter().map(|x| x + rng.random_range(-0.15f32..0.15)).collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= n);
            idx.insert(id, &QuantizedVector::quantize(&v).unwrap()).unwrap();
            stored.push(v);
            assert_eq!(idx.prefilter_active(), idx.len() >= 2000);
        }
        let mut found = 0;
        let mut total = 0;
        for i in 0..50 {
            let q: Vec<f32> = stored[i * 97].iter().map(|x| x + rng.random_range(-0.05f32..0.05)).collect();
            let exact = idx.search_exact(&q, 10, None).unwrap();
            let approx = idx.search(&q, 10, None).unwrap();
            let e: HashSet<u64> = exact.iter().map(|h| h.id).collect();
            found += approx.iter().filter(|h| e.contains(&h.id)).count();
            total += exact.len();
            // Every approximate hit carries its exact score.
            for h in &approx {
                let direct = idx.search_exact(&q, 1, Some(&HashSet::from([h.id]))).unwrap();
                assert_eq!(direct[0].score, h.score);
            }
        }
        let recall = found as f64 / total as f64;
        assert!(recall >= 0.95, "recall {recall}");
        // With a pool as large as the index, the prefilter is exact.
        let q = unit(&mut rng, dim);
        assert_eq!(idx.search_prefiltered(&q, 10, idx.len(), None).unwrap(), idx.search_exact(&q, 10, None).unwrap());
        // Removing below half the threshold turns it off again.
        for id in 0..5500u64 {
            idx.remove(id);
        }
        assert!(!idx.prefilter_active());
    }
}
