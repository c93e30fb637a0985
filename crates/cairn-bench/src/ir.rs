//! `cairn-bench ir`: retrieval quality of the document memory on a BEIR-format collection
//! (corpus.jsonl, queries.jsonl, qrels TSV; each optionally gzip-compressed). Every document is
//! added as `title + "\n\n" + text` under the path `<_id>`; every judged query of the split is
//! searched as a bag of words (only its `text` field is read) with the default settings, and
//! nDCG@10, Recall@100 and MRR@10 are computed as BEIR/pytrec_eval do.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_docs::{AddOptions, NewDoc, QueryMode, SearchOptions};
use clap::Args;

#[derive(Args)]
pub struct IrArgs {
    /// The collection's directory (BEIR layout: corpus.jsonl[.gz], queries.jsonl[.gz],
    /// qrels/<split>.tsv or qrels-<split>.tsv).
    #[arg(long, default_value = "../shared/data/ir")]
    data: PathBuf,
    /// The qrels split to evaluate.
    #[arg(long, default_value = "test")]
    split: String,
    /// Where to build the memory (default: a fresh temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Read queries with the query syntax (as `cairn search` does) instead of as bags of words.
    #[arg(long)]
    syntax: bool,
    /// Print one JSON line instead of a table.
    #[arg(long)]
    json: bool,
}

fn open_maybe_gz(dir: &Path, names: &[String]) -> Result<Box<dyn BufRead>> {
    for n in names {
        let p = dir.join(n);
        if p.exists() {
            let f = std::fs::File::open(&p).with_context(|| format!("opening {}", p.display()))?;
            let r: Box<dyn Read> =
                if n.ends_with(".gz") { Box::new(flate2::read::MultiGzDecoder::new(f)) } else { Box::new(f) };
            return Ok(Box::new(BufReader::new(r)));
        }
    }
    bail!("none of {names:?} in {}", dir.display())
}

/// The JSON lines of `<stem>.jsonl` or `<stem>.jsonl.gz` in `dir`.
pub(crate) fn jsonl(dir: &Path, stem: &str) -> Result<Vec<serde_json::Value>> {
    let r = open_maybe_gz(dir, &[format!("{stem}.jsonl"), format!("{stem}.jsonl.gz")])?;
    let mut out = Vec::new();
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).with_context(|| format!("{stem} line {}", i + 1))?);
    }
    Ok(out)
}

/// query id -> (doc id -> relevance)
type Qrels = HashMap<String, HashMap<String, i64>>;

fn qrels(dir: &Path, split: &str) -> Result<Qrels> {
    let r = open_maybe_gz(dir, &[format!("qrels/{split}.tsv"), format!("qrels-{split}.tsv")])?;
    let mut q = Qrels::new();
    for (i, line) in r.lines().enumerate() {
        let line = line?;
        let f: Vec<&str> = line.trim_end_matches('\r').split('\t').collect();
        if i == 0 && f.first() == Some(&"query-id") {
            continue;
        }
        if f.len() < 3 {
            continue;
        }
        let rel: i64 = f[2].trim().parse().with_context(|| format!("qrels line {}", i + 1))?;
        q.entry(f[0].to_string()).or_default().insert(f[1].to_string(), rel);
    }
    Ok(q)
}

fn str_field<'a>(v: &'a serde_json::Value, k: &str) -> &'a str {
    v.get(k).and_then(|x| x.as_str()).unwrap_or("")
}

/// nDCG@k with gains = relevance (BEIR's pytrec_eval convention: linear gain, log2 discount).
pub fn ndcg_at(ranked: &[String], rel: &HashMap<String, i64>, k: usize) -> f64 {
    let dcg: f64 = ranked
        .iter()
        .take(k)
        .enumerate()
        .map(|(i, d)| rel.get(d).copied().unwrap_or(0).max(0) as f64 / (i as f64 + 2.0).log2())
        .sum();
    let mut ideal: Vec<i64> = rel.values().copied().filter(|r| *r > 0).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let idcg: f64 = ideal.iter().take(k).enumerate().map(|(i, r)| *r as f64 / (i as f64 + 2.0).log2()).sum();
    if idcg == 0.0 { 0.0 } else { dcg / idcg }
}

/// Recall@k: share of relevant documents in the first k.
pub fn recall_at(ranked: &[String], rel: &HashMap<String, i64>, k: usize) -> f64 {
    let relevant: HashSet<&String> = rel.iter().filter(|(_, r)| **r > 0).map(|(d, _)| d).collect();
    if relevant.is_empty() {
        return 0.0;
    }
    ranked.iter().take(k).filter(|d| relevant.contains(d)).count() as f64 / relevant.len() as f64
}

/// MRR@k: reciprocal rank of the first relevant document in the first k.
pub fn mrr_at(ranked: &[String], rel: &HashMap<String, i64>, k: usize) -> f64 {
    ranked.iter().take(k).position(|d| rel.get(d).is_some_and(|r| *r > 0)).map_or(0.0, |i| 1.0 / (i as f64 + 1.0))
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn run(a: IrArgs) -> Result<()> {
    let corpus = jsonl(&a.data, "corpus")?;
    let queries = jsonl(&a.data, "queries")?;
    let qrels = qrels(&a.data, &a.split)?;
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let m = crate::open_memory(&dir)?;
    let t = Instant::now();
    let docs: Vec<NewDoc> = corpus
        .iter()
        .map(|d| {
            let id = match d.get("_id") {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            let content = format!("{}\n\n{}", str_field(d, "title"), str_field(d, "text"));
            NewDoc::new(id, content.into_bytes())
        })
        .collect();
    let n_docs = docs.len();
    for chunk in docs.chunks(2000) {
        m.add(chunk.to_vec(), &AddOptions::default())?;
    }
    m.commit()?;
    let ingest = t.elapsed().as_secs_f64();

    let mut judged: Vec<(&str, &str)> = queries
        .iter()
        .filter_map(|q| {
            let id = q.get("_id")?.as_str()?;
            qrels.contains_key(id).then(|| (id, str_field(q, "text")))
        })
        .collect();
    judged.sort();
    if judged.is_empty() {
        bail!("no query of {} has judgments in the {} split", a.data.display(), a.split);
    }
    let mode = if a.syntax { QueryMode::Syntax } else { QueryMode::Words };
    let opts = SearchOptions { limit: 100, mode, snippets: false, ..Default::default() };
    let (mut ndcg, mut recall, mut mrr) = (0.0, 0.0, 0.0);
    let mut lat = Vec::with_capacity(judged.len());
    for (id, text) in &judged {
        let t = Instant::now();
        let r = m.search(text, &opts)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        let ranked: Vec<String> = r.hits.into_iter().map(|h| h.doc.path).collect();
        let rel = &qrels[*id];
        ndcg += ndcg_at(&ranked, rel, 10);
        recall += recall_at(&ranked, rel, 100);
        mrr += mrr_at(&ranked, rel, 10);
    }
    let n = judged.len() as f64;
    lat.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    if a.json {
        println!(
            "{}",
            serde_json::json!({ "data": a.data, "split": a.split, "documents": n_docs, "queries": judged.len(), "syntax": a.syntax,
                "ndcg@10": ndcg / n, "recall@100": recall / n, "mrr@10": mrr / n,
                "ingest_seconds": ingest, "search_p50_ms": p50, "search_p99_ms": p99 })
        );
    } else {
        println!("collection   {} ({} split)", a.data.display(), a.split);
        println!("documents    {n_docs} added in {ingest:.2}s ({:.0} docs/s)", n_docs as f64 / ingest);
        let how = if a.syntax { "query syntax" } else { "bag of words" };
        println!("queries      {} ({how}, top 100)", judged.len());
        println!("nDCG@10      {:.4}", ndcg / n);
        println!("Recall@100   {:.4}", recall / n);
        println!("MRR@10       {:.4}", mrr / n);
        println!("search       p50 {p50:.2} ms, p99 {p99:.2} ms");
    }
    m.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(pairs: &[(&str, i64)]) -> HashMap<String, i64> {
        pairs.iter().map(|(d, r)| (d.to_string(), *r)).collect()
    }

    fn ranked(ds: &[&str]) -> Vec<String> {
        ds.iter().map(|d| d.to_string()).collect()
    }

    #[test]
    fn metrics_match_hand_computed_values() {
        let r = rel(&[("a", 1), ("b", 1)]);
        assert!((ndcg_at(&ranked(&["a", "b", "c"]), &r, 10) - 1.0).abs() < 1e-12);
        // Relevant at ranks 2 and 3: (1/log2(3) + 1/log2(4)) / (1 + 1/log2(3)).
        let want = (1.0 / 3f64.log2() + 0.5) / (1.0 + 1.0 / 3f64.log2());
        assert!((ndcg_at(&ranked(&["x", "a", "b"]), &r, 10) - want).abs() < 1e-12);
        assert_eq!(ndcg_at(&ranked(&["x"]), &r, 10), 0.0);
        assert_eq!(recall_at(&ranked(&["a", "x"]), &r, 100), 0.5);
        assert_eq!(recall_at(&ranked(&["x", "a"]), &r, 1), 0.0);
        assert_eq!(mrr_at(&ranked(&["x", "y", "b"]), &r, 10), 1.0 / 3.0);
        assert_eq!(mrr_at(&ranked(&["x", "y", "b"]), &r, 2), 0.0);
        // Graded relevance: the ideal order puts the 2 first.
        let g = rel(&[("a", 1), ("b", 2)]);
        assert!(ndcg_at(&ranked(&["a", "b"]), &g, 10) < ndcg_at(&ranked(&["b", "a"]), &g, 10));
    }
}
