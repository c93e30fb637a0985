//! Measures a model on BEIR SciFact: embedding throughput (docs/s, passages/s), single-query
//! latency and dense-only nDCG@10 on the test split. Figures and commands:
//! docs/design/2026-12-07-embedding-model.md.
//!
//! ```text
//! cargo run --release -p cairn-embed --example embed_bench -- \
//!     --model DIR --data /work/shared/data/ir [--threads N] [--window W --overlap O] \
//!     [--limit N] [--save FILE (passage vectors; query vectors go to FILE's stem .queries.f32)] [--batch N]
//! ```
//! Without `--window`, each document (title and abstract) is one text cut at the model's limit.
//! With it, documents are split into passages of W tokens overlapping by O, and a document's
//! score is its best passage's.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_embed::{EmbedOptions, Embedder, QuantizedVector, Splitter, VectorIndex};

struct Args {
    model: PathBuf,
    data: PathBuf,
    threads: usize,
    window: Option<(usize, usize)>,
    limit: Option<usize>,
    save: Option<PathBuf>,
    batch: usize,
}

fn parse_args() -> Result<Args> {
    let mut a = Args {
        model: PathBuf::new(),
        data: PathBuf::from("/work/shared/data/ir"),
        threads: 0,
        window: None,
        limit: None,
        save: None,
        batch: 0,
    };
    let mut it = std::env::args().skip(1);
    let mut window = None;
    let mut overlap = 0;
    while let Some(flag) = it.next() {
        let mut val = || it.next().context("missing value");
        match flag.as_str() {
            "--model" => a.model = val()?.into(),
            "--data" => a.data = val()?.into(),
            "--threads" => a.threads = val()?.parse()?,
            "--window" => window = Some(val()?.parse()?),
            "--overlap" => overlap = val()?.parse()?,
            "--limit" => a.limit = Some(val()?.parse()?),
            "--save" => a.save = Some(val()?.into()),
            "--batch" => a.batch = val()?.parse()?,
            _ => bail!("unknown flag {flag}"),
        }
    }
    a.window = window.map(|w| (w, overlap));
    if a.model.as_os_str().is_empty() {
        bail!("--model DIR is required");
    }
    Ok(a)
}

fn read_jsonl_gz(path: &Path) -> Result<Vec<serde_json::Value>> {
    let f = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let r = BufReader::new(flate2::read::GzDecoder::new(f));
    r.lines().map(|l| Ok(serde_json::from_str(&l?)?)).collect()
}

fn read_qrels(path: &Path) -> Result<HashMap<String, HashSet<String>>> {
    let mut q: HashMap<String, HashSet<String>> = HashMap::new();
    for line in std::fs::read_to_string(path)?.lines().skip(1) {
        let cols: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        if cols.len() == 3 && cols[2].trim() != "0" {
            q.entry(cols[0].to_owned()).or_default().insert(cols[1].to_owned());
        }
    }
    Ok(q)
}

/// nDCG@10 with binary relevance; `ranked` is best first, the query's own id already dropped.
fn ndcg10(ranked: &[&str], relevant: &HashSet<String>) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(10)
        .enumerate()
        .filter(|(_, d)| relevant.contains(**d))
        .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
        .sum();
    let ideal: f64 = (0..relevant.len().min(10)).map(|i| 1.0 / ((i + 2) as f64).log2()).sum();
    if ideal == 0.0 { 0.0 } else { dcg / ideal }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let t0 = Instant::now();
    let embedder = Embedder::load_with(
        &args.model,
        EmbedOptions { threads: args.threads, batch_size: args.batch, ..EmbedOptions::default() },
    )?;
    println!(
        "model {} dim {} sha256 {} loaded in {:.2}s, threads {}",
        embedder.info().name,
        embedder.dimension(),
        embedder.info().weights_sha256_hex(),
        t0.elapsed().as_secs_f64(),
        args.threads
    );
    let mut corpus = read_jsonl_gz(&args.data.join("corpus.jsonl.gz"))?;
    if let Some(n) = args.limit {
        corpus.truncate(n);
    }
    let queries = read_jsonl_gz(&args.data.join("queries.jsonl.gz"))?;
    let qrels = read_qrels(&args.data.join("qrels-test.tsv"))?;
    let doc_ids: Vec<String> = corpus.iter().map(|d| d["_id"].as_str().unwrap_or_default().to_owned()).collect();
    let doc_texts: Vec<String> = corpus
        .iter()
        .map(|d| {
            format!("{} {}", d["title"].as_str().unwrap_or_default(), d["text"].as_str().unwrap_or_default())
                .trim()
                .to_owned()
        })
        .collect();
    // Only each query's `text` is read (its metadata holds the answers).
    let test_queries: Vec<(String, String)> = queries
        .iter()
        .filter_map(|q| {
            let id = q["_id"].as_str()?.to_owned();
            qrels.contains_key(&id).then(|| (id, q["text"].as_str().unwrap_or_default().to_owned()))
        })
        .collect();

    // Passages: whole documents, or token windows.
    let (passages, owner): (Vec<&str>, Vec<usize>) = match args.window {
        None => (doc_texts.iter().map(String::as_str).collect(), (0..doc_texts.len()).collect()),
        Some((w, o)) => {
            let splitter = Splitter::new(w, o)?;
            let mut p = Vec::new();
            let mut own = Vec::new();
            for (i, t) in doc_texts.iter().enumerate() {
                for r in splitter.split(embedder.tokenizer(), t)? {
                    p.push(&t[r]);
                    own.push(i);
                }
            }
            (p, own)
        }
    };
    let tokens: usize = passages.iter().map(|p| embedder.tokenizer().count_tokens(p).unwrap_or(0)).sum();
    println!(
        "{} docs, {} passages, {:.1} tokens per passage (before cutting at {})",
        doc_texts.len(),
        passages.len(),
        tokens as f64 / passages.len() as f64,
        embedder.info().max_tokens
    );

    // Single-query latency (the query's embedding only), every test query in turn.
    let mut lat = Vec::new();
    let mut qvecs = Vec::new();
    for (_, text) in &test_queries {
        let t = Instant::now();
        qvecs.push(embedder.embed_query(text)?);
        lat.push(t.elapsed().as_secs_f64() * 1e3);
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "query embedding latency over {} queries: p50 {:.2} ms, p99 {:.2} ms",
        lat.len(),
        percentile(&lat, 0.5),
        percentile(&lat, 0.99)
    );

    // Throughput.
    let t = Instant::now();
    let mut pvecs: Vec<Vec<f32>> = Vec::with_capacity(passages.len());
    for chunk in passages.chunks(256) {
        pvecs.extend(embedder.embed_passages(chunk)?);
        eprint!(
            "\r{} / {} passages, {:.1}/s",
            pvecs.len(),
            passages.len(),
            pvecs.len() as f64 / t.elapsed().as_secs_f64()
        );
    }
    eprintln!();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "embedded {} passages of {} docs in {:.1} s: {:.1} passages/s, {:.1} docs/s",
        passages.len(),
        doc_texts.len(),
        secs,
        passages.len() as f64 / secs,
        doc_texts.len() as f64 / secs
    );

    if let Some(path) = &args.save {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for v in &pvecs {
            for x in v {
                f.write_all(&x.to_le_bytes())?;
            }
        }
        f.flush()?;
        println!("saved {} x {} f32 to {}", pvecs.len(), embedder.dimension(), path.display());
        let qpath = path.with_extension("queries.f32");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&qpath)?);
        for v in &qvecs {
            for x in v {
                f.write_all(&x.to_le_bytes())?;
            }
        }
        f.flush()?;
        println!("saved {} test query vectors to {}", qvecs.len(), qpath.display());
    }

    // nDCG@10: f32 exact, int8 exact (VectorIndex), best passage per document.
    let mut index = VectorIndex::new(embedder.dimension());
    for (i, v) in pvecs.iter().enumerate() {
        index.insert(i as u64, &QuantizedVector::quantize(v)?)?;
    }
    let mut ndcg_f32 = 0.0;
    let mut ndcg_i8 = 0.0;
    for ((qid, _), q) in test_queries.iter().zip(&qvecs) {
        let relevant = &qrels[qid];
        // f32
        let mut best: HashMap<usize, f32> = HashMap::new();
        for (p, v) in pvecs.iter().enumerate() {
            let s = dot(q, v);
            let e = best.entry(owner[p]).or_insert(f32::MIN);
            *e = e.max(s);
        }
        let mut docs: Vec<(usize, f32)> = best.into_iter().collect();
        docs.sort_by(|a, b| b.1.total_cmp(&a.1));
        let ranked: Vec<&str> = docs.iter().map(|(d, _)| doc_ids[*d].as_str()).filter(|d| *d != qid).take(10).collect();
        ndcg_f32 += ndcg10(&ranked, relevant);
        // int8 through the index: enough passages that ten documents survive aggregation.
        let hits = index.search_exact(q, 200, None)?;
        let mut seen = HashSet::new();
        let ranked: Vec<&str> = hits
            .iter()
            .map(|h| owner[h.id as usize])
            .filter(|d| seen.insert(*d))
            .map(|d| doc_ids[d].as_str())
            .filter(|d| *d != qid)
            .take(10)
            .collect();
        ndcg_i8 += ndcg10(&ranked, relevant);
    }
    let n = test_queries.len() as f64;
    println!("nDCG@10 over {} test queries: f32 {:.4}, int8 {:.4}", test_queries.len(), ndcg_f32 / n, ndcg_i8 / n);
    Ok(())
}
