//! `cairn-bench semantic`: what an embedding model costs and how search scales with it.
//!
//! - Adds: 1 KB documents (cut from a BEIR collection's texts, each made distinct), one
//!   document per `add` call, into a fresh memory without a model and into one with a model
//!   attached (whose background thread embeds while the adds run); the ratio of the two rates.
//! - Latency: the collection added `--copies` times under distinct paths (so the index holds
//!   copies × its passages; identical passages are embedded once), then every test query
//!   searched in semantic and hybrid mode; p50/p99 include the query's embedding.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use cairn_docs::{AddOptions, NewDoc, QueryMode, Ranking, SearchOptions};
use clap::Args;

use crate::ir;

#[derive(Args)]
pub struct SemanticArgs {
    /// The collection's directory (BEIR layout).
    #[arg(long, default_value = "../shared/data/ir")]
    data: PathBuf,
    /// The embedding model directory (the last line of scripts/install-model.sh).
    #[arg(long)]
    model: PathBuf,
    /// 1 KB documents added in each add run (0: skip the add runs).
    #[arg(long, default_value_t = 20_000)]
    adds: usize,
    /// Add runs of each kind, alternated (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Copies of the collection for the latency run (0: skip it).
    #[arg(long, default_value_t = 11)]
    copies: usize,
    /// Where to build the memories (default: temporary directories).
    #[arg(long)]
    dir: Option<PathBuf>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `n` distinct documents of about 1 KB of the collection's text.
fn kilobyte_docs(corpus: &[NewDoc], n: usize) -> Vec<NewDoc> {
    let text: Vec<u8> = corpus.iter().flat_map(|d| d.content.iter().copied().chain(*b" ")).collect();
    (0..n)
        .map(|i| {
            let start = (i * 997) % text.len().saturating_sub(1100).max(1);
            let mut body = format!("note {i}: ").into_bytes();
            body.extend_from_slice(&text[start..(start + 1000).min(text.len())]);
            // Cut on a character boundary.
            let body = String::from_utf8_lossy(&body).into_owned();
            NewDoc::new(format!("notes/{i:06}.txt"), body.into_bytes())
        })
        .collect()
}

fn add_rate(dir: &Path, docs: &[NewDoc], model: Option<&Path>) -> Result<f64> {
    let m = crate::open_memory(dir)?;
    if let Some(d) = model {
        ir::attach(&m, d)?;
    }
    let t = Instant::now();
    for d in docs {
        m.add(vec![d.clone()], &AddOptions::default())?;
    }
    let rate = docs.len() as f64 / t.elapsed().as_secs_f64();
    // Dropped without waiting for the embedding queue (not what is measured); the embedding
    // thread ends with its current round, which the pause lets finish before the next run.
    drop(m);
    if model.is_some() {
        std::thread::sleep(std::time::Duration::from_secs(10));
    }
    Ok(rate)
}

pub fn run(a: SemanticArgs) -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let root = a.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let corpus = ir::corpus_docs(&a.data)?;
    if a.adds > 0 {
        let docs = kilobyte_docs(&corpus, a.adds);
        let (mut plain, mut with_model) = (Vec::new(), Vec::new());
        for run in 0..a.runs {
            let d = root.join(format!("adds-plain-{run}"));
            plain.push(add_rate(&d, &docs, None)?);
            let d = root.join(format!("adds-model-{run}"));
            with_model.push(add_rate(&d, &docs, Some(&a.model))?);
            println!("add run {run}: {:.0} docs/s without a model, {:.0} with", plain[run], with_model[run]);
        }
        let (p, w) = (median(plain), median(with_model));
        println!("adds of 1 KB documents, one per call, {} per run, median of {}:", a.adds, a.runs);
        println!("  without a model {p:.0} docs/s, with a model {w:.0} docs/s ({:.1} %)", 100.0 * w / p);
    }
    if a.copies > 0 {
        let dir = root.join("latency");
        let m = crate::open_memory(&dir)?;
        let spec = ir::attach(&m, &a.model)?;
        let t = Instant::now();
        for c in 0..a.copies {
            let docs: Vec<NewDoc> =
                corpus.iter().map(|d| NewDoc::new(format!("c{c}/{}", d.path), d.content.clone())).collect();
            for chunk in docs.chunks(2000) {
                m.add(chunk.to_vec(), &AddOptions::default())?;
            }
        }
        m.commit()?;
        m.wait_for_embeddings(None)?;
        let s = m.semantic_status()?.context("no semantic status")?;
        println!(
            "latency index: {} copies of {} documents = {} documents, {} passages ({}), embedded in {:.1}s",
            a.copies,
            corpus.len(),
            s.documents,
            s.passages,
            spec.name,
            t.elapsed().as_secs_f64()
        );
        let (judged, _) = ir::judged_queries(&a.data, "test")?;
        for mode in [Ranking::Semantic, Ranking::Hybrid] {
            let opts = SearchOptions { limit: 10, mode: QueryMode::Words, ranking: mode, ..Default::default() };
            let mut lat = Vec::with_capacity(judged.len());
            for (_, q) in &judged {
                let t = Instant::now();
                m.search(q, &opts)?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            lat.sort_by(f64::total_cmp);
            println!(
                "  {:<8} top 10 with snippets, {} queries: p50 {:.2} ms, p99 {:.2} ms (prefilter {})",
                format!("{mode:?}").to_lowercase(),
                lat.len(),
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                if s.prefilter { "on" } else { "off" }
            );
        }
        m.close()?;
    }
    Ok(())
}
