//! `cairn-bench docs`: the document-memory benchmarks, cairn side by side with SQLite (WAL mode,
//! `synchronous=FULL`, FTS5 with the porter tokenizer) doing the same work, both durable per
//! operation:
//!
//! - the YAMS set: Ingestion_SmallDocument (1 KB documents, one durable add each),
//!   Ingestion_MediumDocument (100 KB), Metadata_SingleUpdate (one key on one document per
//!   write), Metadata_BulkUpdate(500) (500 documents per write); documents are cut from the real
//!   SciFact abstracts;
//! - on a source tree (the Debian linux-source tree): ingest of every file, search latency of a
//!   fixed query list (top 10 with snippets) against SQLite FTS5, and grep throughput against
//!   ripgrep (`rg`) on the same files on disk.
//!
//! Engines are interleaved within every repetition; the report gives medians.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_docs::{AddOptions, GrepOptions, Memory, NewDoc, SearchOptions};
use clap::Args;
use rusqlite::{Connection, params};

#[derive(Args)]
pub struct DocsArgs {
    /// BEIR corpus whose abstracts make the small and medium documents.
    #[arg(long, default_value = "../shared/data/ir")]
    corpus: PathBuf,
    /// Small (1 KB) documents added one by one.
    #[arg(long, default_value_t = 2000)]
    small: usize,
    /// Medium (100 KB) documents added one by one.
    #[arg(long, default_value_t = 200)]
    medium: usize,
    /// Single metadata updates.
    #[arg(long, default_value_t = 2000)]
    updates: usize,
    /// Bulk metadata updates of 500 entries.
    #[arg(long, default_value_t = 20)]
    bulk: usize,
    /// Repetitions of the YAMS set (engines interleaved).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// A source tree for the search and grep comparison (skipped when absent).
    #[arg(long)]
    tree: Option<PathBuf>,
    /// Repetitions of the query list and of the grep patterns.
    #[arg(long, default_value_t = 5)]
    query_repeat: usize,
    /// Scratch directory.
    #[arg(long, default_value = "target/cairn-bench/docs")]
    dir: PathBuf,
}

/// Search queries for a source tree (identifiers, words, phrases, booleans).
const QUERIES: &[&str] = &[
    "spin_lock_irqsave",
    "mutex_lock",
    "dma_alloc_coherent",
    "memory barrier",
    "page fault handler",
    "\"device tree\"",
    "interrupt controller",
    "copy_from_user",
    "kmalloc GFP_KERNEL",
    "scheduler runqueue",
    "ext4 journal",
    "tcp congestion window",
    "usb endpoint descriptor",
    "workqueue",
    "rcu_read_lock",
    "\"reference count\"",
    "pci_enable_device",
    "netif_rx",
    "hrtimer",
    "cgroup memory limit",
];

/// Grep patterns (regex, case-sensitive) for the source tree.
const PATTERNS: &[&str] = &["spin_lock_irqsave", r"EXPORT_SYMBOL_GPL\(\w+\)", r"\bTODO\b", "copy_(to|from)_user"];

/// The corpus's documents as `title\ntext` (BEIR `corpus.jsonl`, optionally gzip-compressed).
pub(crate) fn abstracts(corpus: &Path) -> Result<Vec<String>> {
    let f = corpus.join("corpus.jsonl.gz");
    let r: Box<dyn std::io::Read> = if f.exists() {
        Box::new(flate2::read::MultiGzDecoder::new(std::fs::File::open(&f)?))
    } else {
        Box::new(std::fs::File::open(corpus.join("corpus.jsonl")).context("corpus.jsonl")?)
    };
    let mut out = Vec::new();
    for line in std::io::BufRead::lines(std::io::BufReader::new(r)) {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        out.push(format!("{}\n{}", v["title"].as_str().unwrap_or(""), v["text"].as_str().unwrap_or("")));
    }
    if out.is_empty() {
        bail!("empty corpus");
    }
    Ok(out)
}

/// Text documents of about `size` bytes made of consecutive abstracts (cut at a char boundary).
fn make_docs(abs: &[String], n: usize, size: usize, seed: usize) -> Vec<(String, Vec<u8>)> {
    let mut k = seed;
    (0..n)
        .map(|i| {
            let mut s = String::with_capacity(size + 2048);
            while s.len() < size {
                s.push_str(&abs[k % abs.len()]);
                s.push('\n');
                k += 1;
            }
            let mut cut = size;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            (format!("bench/{seed}/{i}.txt"), s.into_bytes())
        })
        .collect()
}

trait DocEngine {
    fn add_one(&mut self, path: &str, content: &[u8]) -> Result<()>;
    fn add_many(&mut self, docs: Vec<(String, Vec<u8>)>) -> Result<()>;
    fn set_meta(&mut self, items: &[(String, String, String)]) -> Result<()>;
    fn search(&mut self, q: &str) -> Result<usize>;
}

struct Cairn(Memory);

impl DocEngine for Cairn {
    fn add_one(&mut self, path: &str, content: &[u8]) -> Result<()> {
        let d = NewDoc::new(path.to_string(), content.to_vec());
        self.0.add(vec![d], &AddOptions::default())?;
        Ok(())
    }
    fn add_many(&mut self, docs: Vec<(String, Vec<u8>)>) -> Result<()> {
        let docs = docs.into_iter().map(|(path, content)| NewDoc::new(path, content)).collect();
        self.0.add(docs, &AddOptions::default())?;
        Ok(())
    }
    fn set_meta(&mut self, items: &[(String, String, String)]) -> Result<()> {
        let u: Vec<_> = items.iter().map(|(p, k, v)| (p.clone(), vec![(k.clone(), Some(v.clone()))])).collect();
        let missing = self.0.set_meta(&u)?;
        if !missing.is_empty() {
            bail!("missing {missing:?}");
        }
        Ok(())
    }
    fn search(&mut self, q: &str) -> Result<usize> {
        Ok(self.0.search(q, &SearchOptions::default())?.hits.len())
    }
}

/// The SQLite peer: documents in a table, their text in an FTS5 table (WAL, `synchronous=FULL`).
pub(crate) struct Sqlite(pub(crate) Connection);

impl Sqlite {
    /// Creates the database in `dir` (`docs.sqlite`).
    pub(crate) fn open(dir: &Path) -> Result<Sqlite> {
        let c = Connection::open(dir.join("docs.sqlite"))?;
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
             CREATE TABLE docs(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, content BLOB NOT NULL,
                               version INTEGER NOT NULL, updated INTEGER NOT NULL);
             CREATE TABLE meta(doc INTEGER NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY(doc, key));
             CREATE INDEX meta_kv ON meta(key, value);
             CREATE VIRTUAL TABLE fts USING fts5(path, body, tokenize='porter unicode61');",
        )?;
        Ok(Sqlite(c))
    }

    /// Adds or replaces the document at `path` and its full-text entry; returns its row id.
    pub(crate) fn insert(tx: &rusqlite::Transaction<'_>, path: &str, content: &[u8]) -> Result<i64> {
        tx.execute(
            "INSERT INTO docs(path, content, version, updated) VALUES (?1, ?2, 1, unixepoch())
             ON CONFLICT(path) DO UPDATE SET content = excluded.content, version = version + 1",
            params![path, content],
        )?;
        let id: i64 = tx.query_row("SELECT id FROM docs WHERE path = ?1", [path], |r| r.get(0))?;
        tx.execute("DELETE FROM fts WHERE rowid = ?1", [id])?;
        if let Ok(text) = std::str::from_utf8(content) {
            tx.execute("INSERT INTO fts(rowid, path, body) VALUES (?1, ?2, ?3)", params![id, path, text])?;
        }
        Ok(id)
    }
}

impl DocEngine for Sqlite {
    fn add_one(&mut self, path: &str, content: &[u8]) -> Result<()> {
        let tx = self.0.transaction()?;
        Sqlite::insert(&tx, path, content)?;
        tx.commit()?;
        Ok(())
    }
    fn add_many(&mut self, docs: Vec<(String, Vec<u8>)>) -> Result<()> {
        let tx = self.0.transaction()?;
        for (p, c) in &docs {
            Sqlite::insert(&tx, p, c)?;
        }
        tx.commit()?;
        Ok(())
    }
    fn set_meta(&mut self, items: &[(String, String, String)]) -> Result<()> {
        let tx = self.0.transaction()?;
        for (p, k, v) in items {
            let n = tx.execute(
                "INSERT INTO meta(doc, key, value) SELECT id, ?2, ?3 FROM docs WHERE path = ?1
                 ON CONFLICT(doc, key) DO UPDATE SET value = excluded.value",
                params![p, k, v],
            )?;
            if n == 0 {
                bail!("missing {p}");
            }
            tx.execute("UPDATE docs SET updated = unixepoch() WHERE path = ?1", [p])?;
        }
        tx.commit()?;
        Ok(())
    }
    fn search(&mut self, q: &str) -> Result<usize> {
        fts_search(&self.0, q)
    }
}

/// The top 10 documents for `q` by BM25, with their paths and snippets; returns how many.
pub(crate) fn fts_search(c: &Connection, q: &str) -> Result<usize> {
    let mut st = c.prepare_cached(
        "SELECT d.path, snippet(fts, 1, '[', ']', '...', 24) FROM fts JOIN docs d ON d.id = fts.rowid
         WHERE fts MATCH ?1 ORDER BY bm25(fts) LIMIT 10",
    )?;
    let mut rows = st.query([fts_query(q)])?;
    let mut n = 0;
    while let Some(r) = rows.next()? {
        let _: (String, String) = (r.get(0)?, r.get(1)?);
        n += 1;
    }
    Ok(n)
}

/// The same query in FTS5 syntax: phrases stay phrases, other words are OR'ed (as cairn's
/// default), each quoted so `_` and other punctuation are literal.
pub(crate) fn fts_query(q: &str) -> String {
    if q.starts_with('"') {
        return q.to_string();
    }
    q.split_whitespace().map(|w| format!("\"{}\"", w.replace('"', ""))).collect::<Vec<_>>().join(" OR ")
}

fn fresh(dir: &Path) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    Ok(dir.to_path_buf())
}

fn open(engine: &str, dir: &Path) -> Result<Box<dyn DocEngine>> {
    Ok(match engine {
        "cairn" => Box::new(Cairn(crate::open_memory(dir)?)),
        _ => Box::new(Sqlite::open(dir)?),
    })
}

const ENGINES: [&str; 2] = ["cairn", "sqlite"];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() { 0.0 } else { sorted[((sorted.len() - 1) as f64 * p).round() as usize] }
}

/// The YAMS set on one engine in a fresh directory: ops/s per row.
fn yams(engine: &str, dir: &Path, a: &DocsArgs, abs: &[String], rep: usize) -> Result<BTreeMap<&'static str, f64>> {
    let mut out = BTreeMap::new();
    let mut e = open(engine, &fresh(dir)?)?;
    let small = make_docs(abs, a.small, 1024, rep * 7919);
    let t = Instant::now();
    for (p, c) in &small {
        e.add_one(p, c)?;
    }
    out.insert("Ingestion_SmallDocument (docs/s)", small.len() as f64 / t.elapsed().as_secs_f64());
    let medium = make_docs(abs, a.medium, 100 * 1024, rep * 7919 + 17);
    let t = Instant::now();
    for (p, c) in &medium {
        e.add_one(p, c)?;
    }
    out.insert("Ingestion_MediumDocument (docs/s)", medium.len() as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for i in 0..a.updates {
        let (p, _) = &small[i % small.len()];
        e.set_meta(&[(p.clone(), "status".into(), format!("s{i}"))])?;
    }
    out.insert("Metadata_SingleUpdate (ops/s)", a.updates as f64 / t.elapsed().as_secs_f64());
    let t = Instant::now();
    for b in 0..a.bulk {
        let items: Vec<_> =
            (0..500).map(|j| (small[(b * 500 + j) % small.len()].0.clone(), "owner".into(), format!("o{b}"))).collect();
        e.set_meta(&items)?;
    }
    out.insert("Metadata_BulkUpdate(500) (entries/s)", (a.bulk * 500) as f64 / t.elapsed().as_secs_f64());
    Ok(out)
}

pub(crate) fn tree_files(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ignore::WalkBuilder::new(root)
        .hidden(false)
        .git_ignore(false)
        .build()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .collect();
    v.sort();
    v
}

pub fn run(a: DocsArgs) -> Result<()> {
    let abs = abstracts(&a.corpus)?;
    let mut rows: BTreeMap<&'static str, BTreeMap<&'static str, Vec<f64>>> = BTreeMap::new();
    for rep in 0..a.repeat {
        for k in 0..ENGINES.len() {
            let engine = ENGINES[(k + rep) % ENGINES.len()];
            let r = yams(engine, &a.dir.join(engine), &a, &abs, rep)?;
            eprintln!("rep {rep} {engine}: {r:?}");
            for (row, v) in r {
                rows.entry(row).or_default().entry(engine).or_default().push(v);
            }
        }
    }
    println!(
        "## YAMS set: {} small, {} medium, {} single updates, {} x 500 bulk; {} repetitions, durable writes",
        a.small, a.medium, a.updates, a.bulk, a.repeat
    );
    println!("| benchmark | cairn | SQLite (WAL, FTS5) | cairn / SQLite |");
    println!("| --- | ---: | ---: | ---: |");
    for (row, by) in &mut rows {
        let c = median(by.get_mut("cairn").map(|v| v.as_mut_slice()).unwrap_or(&mut []));
        let s = median(by.get_mut("sqlite").map(|v| v.as_mut_slice()).unwrap_or(&mut []));
        println!("| {row} | {c:.0} | {s:.0} | {:.2} |", c / s);
    }
    if let Some(tree) = &a.tree {
        tree_bench(&a, tree)?;
    }
    Ok(())
}

fn tree_bench(a: &DocsArgs, tree: &Path) -> Result<()> {
    let files = tree_files(tree);
    let total: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    println!();
    println!("## Source tree {}: {} files, {:.0} MiB", tree.display(), files.len(), total as f64 / (1 << 20) as f64);
    println!("| engine | ingest s | files/s | search p50 ms | search p99 ms | grep MB/s (median over patterns) |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for engine in ENGINES {
        let dir = fresh(&a.dir.join(format!("tree-{engine}")))?;
        let mut e = open(engine, &dir)?;
        let t = Instant::now();
        for window in files.chunks(2000) {
            let docs = window
                .iter()
                .filter_map(|f| std::fs::read(f).ok().map(|c| (f.to_string_lossy().into_owned(), c)))
                .collect();
            e.add_many(docs)?;
        }
        let mut hits = 0;
        // The first search also commits cairn's index: count it in the ingest.
        hits += e.search(QUERIES[0])?;
        let ingest = t.elapsed().as_secs_f64();
        let mut lat = Vec::new();
        for _ in 0..a.query_repeat {
            for q in QUERIES {
                let t = Instant::now();
                hits += e.search(q)?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
        lat.sort_by(f64::total_cmp);
        let grep = if engine == "cairn" {
            drop(e);
            let m = crate::open_memory(&dir)?;
            let mut speeds = Vec::new();
            for p in PATTERNS {
                for _ in 0..a.query_repeat.min(3) {
                    let t = Instant::now();
                    let s = m.grep(&GrepOptions { pattern: p.to_string(), ..Default::default() }, |_| Ok(()))?;
                    speeds.push(s.bytes_searched as f64 / 1e6 / t.elapsed().as_secs_f64());
                }
            }
            format!("{:.0}", median(&mut speeds))
        } else {
            "-".to_string()
        };
        println!(
            "| {engine} | {ingest:.1} | {:.0} | {:.2} | {:.2} | {grep} |",
            files.len() as f64 / ingest,
            pct(&lat, 0.5),
            pct(&lat, 0.99)
        );
        eprintln!("{engine}: {hits} hits in total");
    }
    // ripgrep on the same files on disk (warm page cache: one untimed run first).
    let mut speeds = Vec::new();
    for p in PATTERNS {
        let _ = Command::new("rg").args(["-c", "--no-ignore", "--hidden", p]).arg(tree).output();
        for _ in 0..a.query_repeat.min(3) {
            let t = Instant::now();
            let o = Command::new("rg")
                .args(["-c", "--no-ignore", "--hidden", p])
                .arg(tree)
                .output()
                .context("running rg")?;
            if !o.status.success() {
                bail!("rg {p} failed");
            }
            speeds.push(total as f64 / 1e6 / t.elapsed().as_secs_f64());
        }
    }
    println!("| ripgrep (files on disk) | - | - | - | - | {:.0} |", median(&mut speeds));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fts_queries_quote_words_and_keep_phrases() {
        assert_eq!(fts_query("spin_lock_irqsave"), "\"spin_lock_irqsave\"");
        assert_eq!(fts_query("memory barrier"), "\"memory\" OR \"barrier\"");
        assert_eq!(fts_query("\"device tree\""), "\"device tree\"");
    }

    #[test]
    fn documents_have_the_asked_size() {
        let abs = vec!["é".repeat(100), "short".into()];
        for (_, d) in make_docs(&abs, 3, 1025, 0) {
            assert!(d.len() <= 1025 && d.len() >= 1023);
            assert!(std::str::from_utf8(&d).is_ok());
        }
    }
}
