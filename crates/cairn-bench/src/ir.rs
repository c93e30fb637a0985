//! `cairn-bench ir`: retrieval quality of the document memory on a BEIR-format collection
//! (corpus.jsonl, queries.jsonl, qrels TSV; each optionally gzip-compressed). Every document is
//! added as `title + "\n\n" + text` under the path `<_id>`; every judged query of each split is
//! searched as a bag of words (only its `text` field is read) in each mode (keyword, semantic,
//! hybrid with each fusion asked for), and nDCG@10, Recall@100 and MRR@10 are computed as
//! BEIR/pytrec_eval do (a hit whose id is the query's own is dropped, as BEIR and Anserini do).
//! With a model (`--model`), the time to embed the collection is measured too (passages/s,
//! docs/s), and search latency includes the query's embedding.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_docs::{AddOptions, Fusion, ModelSpec, NewDoc, QueryMode, Ranking, SearchOptions};
use clap::Args;

#[derive(Args)]
pub struct IrArgs {
    /// The collection's directory (BEIR layout: corpus.jsonl[.gz], queries.jsonl[.gz],
    /// qrels/<split>.tsv or qrels-<split>.tsv).
    #[arg(long, default_value = "../shared/data/ir")]
    data: PathBuf,
    /// The qrels splits to evaluate, comma-separated (tune on train, report test).
    #[arg(long, default_value = "test")]
    split: String,
    /// Ranking modes, comma-separated: keyword, semantic, hybrid (the last two need --model).
    #[arg(long, default_value = "keyword")]
    mode: String,
    /// Fusions for hybrid mode, comma-separated: `default`, `rrf:K`, `convex:W`, `scaled:W`, `complete:W`
    /// (W: the vector list's weight).
    #[arg(long, default_value = "default")]
    fusion: String,
    /// An embedding model directory (the last line of scripts/install-model.sh).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Where to build the memory (default: a fresh temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// With --dir holding the collection already (and its vectors), do not add it again.
    #[arg(long)]
    reuse: bool,
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
pub(crate) type Qrels = HashMap<String, HashMap<String, i64>>;

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

fn parse_fusion(s: &str) -> Result<Fusion> {
    Ok(match s.split_once(':') {
        None if s == "default" => Fusion::default(),
        Some(("rrf", k)) => Fusion::Rrf { k: k.parse().context("rrf:K")? },
        Some(("convex", w)) => Fusion::Convex { weight: w.parse().context("convex:W")? },
        Some(("scaled", w)) => Fusion::Scaled { weight: w.parse().context("scaled:W")? },
        Some(("complete", w)) => Fusion::Complete { weight: w.parse().context("complete:W")? },
        _ => bail!("fusion {s:?}: default, rrf:K, convex:W, scaled:W or complete:W"),
    })
}

fn fusion_name(f: Fusion) -> String {
    match f {
        Fusion::Rrf { k } => format!("rrf:{k}"),
        Fusion::Convex { weight } => format!("convex:{weight}"),
        Fusion::Scaled { weight } => format!("scaled:{weight}"),
        Fusion::Complete { weight } => format!("complete:{weight}"),
    }
}

/// One evaluation: a split searched in one mode.
struct Eval {
    ndcg: f64,
    recall: f64,
    mrr: f64,
    p50: f64,
    p99: f64,
    queries: usize,
}

fn evaluate(m: &cairn_docs::Memory, judged: &[(&str, &str)], qrels: &Qrels, opts: &SearchOptions) -> Result<Eval> {
    let (mut ndcg, mut recall, mut mrr) = (0.0, 0.0, 0.0);
    let mut lat = Vec::with_capacity(judged.len());
    for (id, text) in judged {
        let t = Instant::now();
        let r = m.search(text, opts)?;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        // BEIR's rule: a document that is the query itself is not a hit.
        let ranked: Vec<String> = r.hits.into_iter().map(|h| h.doc.path).filter(|p| p != id).collect();
        let rel = &qrels[*id];
        ndcg += ndcg_at(&ranked, rel, 10);
        recall += recall_at(&ranked, rel, 100);
        mrr += mrr_at(&ranked, rel, 10);
    }
    let n = judged.len().max(1) as f64;
    lat.sort_by(f64::total_cmp);
    Ok(Eval {
        ndcg: ndcg / n,
        recall: recall / n,
        mrr: mrr / n,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        queries: judged.len(),
    })
}

/// The collection's documents, as `cairn-bench ir` adds them.
pub(crate) fn corpus_docs(data: &Path) -> Result<Vec<NewDoc>> {
    Ok(jsonl(data, "corpus")?
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
        .collect())
}

/// The judged queries of `split`: (query id, text), and the judgments.
pub(crate) fn judged_queries(data: &Path, split: &str) -> Result<(Vec<(String, String)>, Qrels)> {
    let queries = jsonl(data, "queries")?;
    let qrels = qrels(data, split)?;
    let mut judged: Vec<(String, String)> = queries
        .iter()
        .filter_map(|q| {
            let id = q.get("_id")?.as_str()?;
            qrels.contains_key(id).then(|| (id.to_string(), str_field(q, "text").to_string()))
        })
        .collect();
    judged.sort();
    if judged.is_empty() {
        bail!("no query of {} has judgments in the {split} split", data.display());
    }
    Ok((judged, qrels))
}

/// Attaches the model in `dir` to `m`, loaded now (so loading is not timed as embedding).
pub(crate) fn attach(m: &cairn_docs::Memory, dir: &Path) -> Result<ModelSpec> {
    let e = cairn_embed::Embedder::load(dir).with_context(|| format!("loading the model in {}", dir.display()))?;
    let spec = ModelSpec::of(&e);
    m.attach_model(spec.clone(), move || Ok(e))?;
    Ok(spec)
}

pub fn run(a: IrArgs) -> Result<()> {
    let modes: Vec<Ranking> = a
        .mode
        .split(',')
        .map(|m| match m.trim() {
            "keyword" => Ok(Ranking::Keyword),
            "semantic" => Ok(Ranking::Semantic),
            "hybrid" => Ok(Ranking::Hybrid),
            other => bail!("mode {other:?}: keyword, semantic or hybrid"),
        })
        .collect::<Result<_>>()?;
    let fusions: Vec<Fusion> = a.fusion.split(',').map(|f| parse_fusion(f.trim())).collect::<Result<_>>()?;
    if modes.iter().any(|m| *m != Ranking::Keyword) && a.model.is_none() {
        bail!("semantic and hybrid modes need --model DIR");
    }
    let tmp;
    let dir = match &a.dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let m = crate::open_memory(&dir)?;
    let model = match &a.model {
        Some(d) => Some(attach(&m, d)?),
        None => None,
    };
    let docs = corpus_docs(&a.data)?;
    let n_docs = docs.len();
    let reuse = a.reuse && m.stats()?.documents >= n_docs as u64;
    let t = Instant::now();
    if !reuse {
        for chunk in docs.chunks(2000) {
            m.add(chunk.to_vec(), &AddOptions::default())?;
        }
        m.commit()?;
    }
    let ingest = t.elapsed().as_secs_f64();
    let mut embed = None;
    if model.is_some() {
        m.wait_for_embeddings(None)?;
        let s = m.semantic_status()?.context("no semantic status")?;
        embed = Some((t.elapsed().as_secs_f64(), s.documents, s.passages));
    }
    if !a.json {
        println!("collection   {} ({} documents)", a.data.display(), n_docs);
        if reuse {
            println!("documents    reused from {}", dir.display());
        } else {
            println!("documents    added in {ingest:.2}s ({:.0} docs/s)", n_docs as f64 / ingest);
        }
        if let (Some(spec), Some((secs, d, p))) = (&model, embed) {
            println!("model        {} ({} dimensions)", spec.name, spec.dimension);
            if !reuse {
                println!(
                    "embedded     {d} documents, {p} passages in {secs:.1}s from the first add ({:.1} docs/s, {:.1} passages/s)",
                    d as f64 / secs,
                    p as f64 / secs
                );
            }
        }
        println!(
            "{:<6} {:<9} {:<12} {:>7} {:>8} {:>10} {:>7} {:>9} {:>9}",
            "split", "mode", "fusion", "queries", "nDCG@10", "Recall@100", "MRR@10", "p50 ms", "p99 ms"
        );
    }
    let how = if a.syntax { QueryMode::Syntax } else { QueryMode::Words };
    for split in a.split.split(',').map(str::trim) {
        let (judged, qrels) = judged_queries(&a.data, split)?;
        let judged: Vec<(&str, &str)> = judged.iter().map(|(i, t)| (i.as_str(), t.as_str())).collect();
        for &mode in &modes {
            let fs: Vec<Option<Fusion>> =
                if mode == Ranking::Hybrid { fusions.iter().copied().map(Some).collect() } else { vec![None] };
            for f in fs {
                let opts = SearchOptions {
                    limit: 100,
                    mode: how,
                    snippets: false,
                    ranking: mode,
                    fusion: f.unwrap_or_default(),
                    ..Default::default()
                };
                let e = evaluate(&m, &judged, &qrels, &opts)?;
                let mode_name = format!("{mode:?}").to_lowercase();
                let fusion = f.map(fusion_name).unwrap_or_else(|| "-".into());
                if a.json {
                    println!(
                        "{}",
                        serde_json::json!({ "data": a.data, "split": split, "mode": mode_name, "fusion": fusion,
                            "documents": n_docs, "queries": e.queries, "syntax": a.syntax,
                            "ndcg@10": e.ndcg, "recall@100": e.recall, "mrr@10": e.mrr,
                            "ingest_seconds": ingest, "embed": embed.map(|(s, d, p)| serde_json::json!({"seconds": s, "documents": d, "passages": p})),
                            "search_p50_ms": e.p50, "search_p99_ms": e.p99 })
                    );
                } else {
                    println!(
                        "{split:<6} {mode_name:<9} {fusion:<12} {:>7} {:>8.4} {:>10.4} {:>7.4} {:>9.2} {:>9.2}",
                        e.queries, e.ndcg, e.recall, e.mrr, e.p50, e.p99
                    );
                }
            }
        }
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
