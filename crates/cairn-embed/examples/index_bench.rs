//! Measures `VectorIndex`: exact-scan and prefilter latency (p50/p99) and the prefilter's
//! recall@10 against the exact scan, at given sizes, on synthetic clustered vectors and on real
//! embeddings repeated with perturbation. Figures and commands:
//! docs/design/2026-12-07-embedding-model.md.
//!
//! ```text
//! cargo run --release -p cairn-embed --example index_bench -- \
//!     [--sizes 100000,1000000] [--candidates 2000,4000,8000] [--queries 200] \
//!     [--real PASSAGES.f32 QUERIES.f32]
//! ```
//! Synthetic: 384-dimensional unit vectors around 2,000 random centres, all shifted by one
//! common direction (as real embeddings are), queries drawn the same way. Real: each embedded
//! passage repeated with Gaussian noise of norm about 0.25 before normalizing; the real queries.

use std::collections::HashSet;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_embed::{IndexOptions, QuantizedVector, VectorIndex};

/// The pool the default options give an index of `n` vectors.
fn default_pool(n: usize) -> usize {
    IndexOptions::default().pool(n)
}
use rand::{Rng, SeedableRng, rngs::StdRng};

const DIM: usize = 384;

fn normalize(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

fn gaussian(rng: &mut StdRng) -> f32 {
    // Box-Muller.
    let u1: f32 = rng.random_range(1e-7f32..1.0);
    let u2: f32 = rng.random_range(0.0f32..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn random_unit(rng: &mut StdRng) -> Vec<f32> {
    let mut v: Vec<f32> = (0..DIM).map(|_| gaussian(rng)).collect();
    normalize(&mut v);
    v
}

struct Synthetic {
    centres: Vec<Vec<f32>>,
    common: Vec<f32>,
}

impl Synthetic {
    fn new(rng: &mut StdRng) -> Self {
        Synthetic { centres: (0..2000).map(|_| random_unit(rng)).collect(), common: random_unit(rng) }
    }

    fn draw(&self, rng: &mut StdRng) -> Vec<f32> {
        let c = &self.centres[rng.random_range(0..self.centres.len())];
        let mut v: Vec<f32> =
            (0..DIM).map(|i| 0.6 * c[i] + 0.8 * self.common[i] + 0.6 * gaussian(rng) / (DIM as f32).sqrt()).collect();
        normalize(&mut v);
        v
    }
}

fn read_f32(path: &str) -> Result<Vec<Vec<f32>>> {
    let bytes = std::fs::read(path).with_context(|| path.to_owned())?;
    if bytes.len() % (DIM * 4) != 0 {
        bail!("{path}: not a whole number of {DIM}-component f32 vectors");
    }
    Ok(bytes
        .chunks_exact(DIM * 4)
        .map(|v| v.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
        .collect())
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[(((sorted.len() - 1) as f64) * p).round() as usize]
}

fn measure(label: &str, index: &VectorIndex, queries: &[Vec<f32>], candidates: &[usize]) -> Result<()> {
    let mut exact = Vec::new();
    let mut lat = Vec::new();
    for q in queries {
        let t = Instant::now();
        let hits = index.search_exact(q, 10, None)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        exact.push(hits.iter().map(|h| h.id).collect::<HashSet<u64>>());
    }
    lat.sort_by(f64::total_cmp);
    println!("{label} n={} exact: p50 {:.2} ms p99 {:.2} ms", index.len(), pct(&lat, 0.5), pct(&lat, 0.99));
    let mut pools = candidates.to_vec();
    pools.push(default_pool(index.len()));
    for &c in &pools {
        let mut lat = Vec::new();
        let mut found = 0usize;
        let mut total = 0usize;
        for (q, e) in queries.iter().zip(&exact) {
            let t = Instant::now();
            let hits = index.search_prefiltered(q, 10, c, None)?;
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            found += hits.iter().filter(|h| e.contains(&h.id)).count();
            total += e.len();
        }
        lat.sort_by(f64::total_cmp);
        println!(
            "{label} n={} prefilter candidates={c}: recall@10 {:.4}, p50 {:.2} ms p99 {:.2} ms",
            index.len(),
            found as f64 / total as f64,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
    }
    Ok(())
}

fn main() -> Result<()> {
    let mut sizes = vec![100_000usize, 1_000_000];
    let mut candidates = vec![2_000usize, 4_000, 8_000];
    let mut nq = 200usize;
    let mut real: Option<(String, String)> = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut val = || args.next().context("missing value");
        match flag.as_str() {
            "--sizes" => sizes = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--candidates" => candidates = val()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--queries" => nq = val()?.parse()?,
            "--real" => real = Some((val()?, val()?)),
            _ => bail!("unknown flag {flag}"),
        }
    }
    // The prefilter is built for every size measured here.
    let options = IndexOptions { prefilter_threshold: 1, ..IndexOptions::default() };
    let mut rng = StdRng::seed_from_u64(75);
    for &n in &sizes {
        let synth = Synthetic::new(&mut rng);
        let mut index = VectorIndex::with_options(DIM, options);
        let t = Instant::now();
        for id in 0..n as u64 {
            index.insert(id, &QuantizedVector::quantize(&synth.draw(&mut rng))?)?;
        }
        println!("synthetic n={n}: built in {:.1} s, {} MB", t.elapsed().as_secs_f64(), index.memory_bytes() >> 20);
        let queries: Vec<Vec<f32>> = (0..nq).map(|_| synth.draw(&mut rng)).collect();
        measure("synthetic", &index, &queries, &candidates)?;
    }
    if let Some((passages, queries)) = real {
        let base = read_f32(&passages)?;
        let queries = read_f32(&queries)?;
        let queries: Vec<Vec<f32>> = queries.into_iter().take(nq).collect();
        for &n in &sizes {
            let mut index = VectorIndex::with_options(DIM, options);
            let sigma = 0.25 / (DIM as f32).sqrt();
            for id in 0..n {
                let src = &base[id % base.len()];
                let mut v: Vec<f32> = if id < base.len() {
                    src.clone()
                } else {
                    src.iter().map(|x| x + sigma * gaussian(&mut rng)).collect()
                };
                normalize(&mut v);
                index.insert(id as u64, &QuantizedVector::quantize(&v)?)?;
            }
            measure("real-perturbed", &index, &queries, &candidates)?;
        }
    }
    Ok(())
}
