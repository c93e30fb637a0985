//! The child side of `cairn-bench mixed` (`cairn-bench mixed-run-one`): one engine on a fresh
//! directory under many clients, each with its own connection, for one or more rounds; one
//! JSON line (`RoundResult`) per round on standard output.
//!
//! cairn: the child starts `cairn serve` and every client thread talks to it over its own Unix
//! socket connection. SQLite: every client thread has its own connection to one database file.
//! An ls that does not return every document its client's acknowledged adds wrote (or more
//! than the client tried to add) is a failure, as is every error.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Barrier;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use rusqlite::{Connection, TransactionBehavior, params};
use serde::{Deserialize, Serialize};

use crate::daemon::{self, Daemon, proc_status_mib};
use crate::docs_bench::{Sqlite, abstracts, fts_search};
use crate::generator::Rng;

/// One child run: an engine on a fresh directory, `rounds` rounds of `clients` x `ops`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Cell {
    /// cairn or sqlite.
    pub engine: String,
    /// Client threads.
    pub clients: usize,
    /// add/search/ls percentages.
    pub mix: [u32; 3],
    /// Operations per client per round.
    pub ops: usize,
    /// Rounds into the same daemon (database).
    pub rounds: usize,
    /// Documents added before the first round, untimed.
    pub preload: usize,
    /// The BEIR corpus of documents and queries.
    pub corpus: PathBuf,
    /// The `cairn` binary.
    pub cairn: PathBuf,
    /// The directory (removed first and after).
    pub dir: PathBuf,
}

/// One operation kind's figures in one round.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OpStats {
    /// Operations that succeeded.
    pub ok: u64,
    /// Operations that failed (an error, or an ls missing acknowledged documents).
    pub failures: u64,
    /// Latency of the successful ones, ms.
    pub p50_ms: f64,
    /// 95th percentile, ms.
    pub p95_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Hits per search, documents per ls (mean).
    pub mean_results: f64,
}

/// What a child measured in one round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RoundResult {
    /// cairn or sqlite.
    pub engine: String,
    /// Client threads, each with its own connection.
    pub clients: usize,
    /// add/search/ls percentages.
    pub mix: String,
    /// Operations per client.
    pub ops_per_client: usize,
    /// Round number (0 for the matrix).
    pub round: usize,
    /// Repetition (set by the parent).
    #[serde(default)]
    pub rep: usize,
    /// Wall time from the barrier to the last client's end.
    pub secs: f64,
    /// Successful operations per second.
    pub ops_per_sec: f64,
    /// add, search, ls.
    pub ops: [OpStats; 3],
    /// The first error of the round, if any.
    pub first_error: Option<String>,
    /// Resident set after the round, MiB (the daemon's; for SQLite the benchmark process's).
    pub rss_mib: f64,
    /// Peak resident set so far, MiB (VmHWM).
    pub peak_rss_mib: f64,
    /// SQLite only: the process's resident set before the database opened, MiB.
    pub base_rss_mib: f64,
}

impl RoundResult {
    /// Failed operations of every kind.
    pub fn failures(&self) -> u64 {
        self.ops.iter().map(|o| o.failures).sum()
    }
}

/// The operation kinds, in the order of `RoundResult::ops`.
pub const OPS: [&str; 3] = ["add", "search", "ls"];

/// Parses `60/30/10`.
pub fn parse_mix(s: &str) -> Result<[u32; 3]> {
    let v: Vec<u32> = s.split('/').map(|p| p.trim().parse::<u32>()).collect::<Result<_, _>>()?;
    match v[..] {
        [a, b, c] if a + b + c == 100 => Ok([a, b, c]),
        _ => bail!("mix {s:?}: three percentages add/search/ls that sum to 100"),
    }
}

/// `60/30/10`.
pub fn mix_name(m: [u32; 3]) -> String {
    format!("{}/{}/{}", m[0], m[1], m[2])
}

/// A client's operation kinds for every 100 operations: exactly the mix's counts, shuffled
/// with the client's seed so that clients do not move in step.
fn pattern(mix: [u32; 3], seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..3).flat_map(|k| std::iter::repeat_n(k, mix[k] as usize)).collect();
    let mut rng = Rng::new(seed);
    for i in (1..v.len()).rev() {
        let j = rng.range_inclusive(0, i as u64) as usize;
        v.swap(i, j);
    }
    v
}

/// The documents and queries.
struct Corpus {
    abstracts: Vec<String>,
    queries: Vec<String>,
}

impl Corpus {
    fn load(dir: &Path) -> Result<Corpus> {
        let abstracts = abstracts(dir)?;
        let queries: Vec<String> = crate::ir::jsonl(dir, "queries")?
            .iter()
            .filter_map(|q| q.get("text").and_then(|t| t.as_str()).map(str::to_string))
            .filter(|q| !q.trim().is_empty())
            .collect();
        if queries.is_empty() {
            bail!("no queries in {}", dir.display());
        }
        Ok(Corpus { abstracts, queries })
    }

    /// Client `id`'s document `i`: a unique first line, then abstracts from a point that depends
    /// on both, cut to 1 KiB at a character boundary.
    fn doc(&self, id: u64, i: usize) -> (String, Vec<u8>) {
        let mut s = format!("note {id}-{i}\n");
        let mut k = (Rng::new((id << 20) ^ i as u64).next_u64() % self.abstracts.len() as u64) as usize;
        while s.len() < 1024 {
            s.push_str(&self.abstracts[k]);
            s.push('\n');
            k = (k + 1) % self.abstracts.len();
        }
        let mut cut = 1024;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        (format!("c{id}/{i}.txt"), s.into_bytes())
    }

    fn query(&self, id: u64, i: usize) -> &str {
        &self.queries[(Rng::new(id.wrapping_mul(31) + i as u64).next_u64() % self.queries.len() as u64) as usize]
    }
}

/// The client ids of the preloaded documents (clients count up from 0 in every round).
const PRELOAD_ID: u64 = 1 << 40;

/// One client's connection.
trait Session {
    /// Adds one document with the client's tag, durably.
    fn add(&mut self, path: &str, content: &[u8], tag: &str) -> Result<()>;
    /// Top 10 by BM25 with snippets; returns the hits.
    fn search(&mut self, q: &str) -> Result<usize>;
    /// Every document with `tag`, sorted by path; returns how many.
    fn ls(&mut self, tag: &str) -> Result<usize>;
}

/// An engine under load.
trait Engine: Sync {
    fn session(&self) -> Result<Box<dyn Session + '_>>;
    /// Adds `docs` (untagged) in one request or transaction.
    fn add_batch(&self, docs: &[(String, Vec<u8>)]) -> Result<()>;
    /// (resident now, peak) in MiB.
    fn rss(&self) -> (f64, f64);
}

struct CairnEngine(Daemon);

struct CairnSession(cairn_server::client::Client);

impl Engine for CairnEngine {
    fn session(&self) -> Result<Box<dyn Session + '_>> {
        Ok(Box::new(CairnSession(self.0.client()?)))
    }
    fn add_batch(&self, docs: &[(String, Vec<u8>)]) -> Result<()> {
        daemon::add(&mut self.0.client()?, docs.to_vec(), vec![])?;
        Ok(())
    }
    fn rss(&self) -> (f64, f64) {
        (self.0.rss_mib(), self.0.peak_rss_mib())
    }
}

impl Session for CairnSession {
    fn add(&mut self, path: &str, content: &[u8], tag: &str) -> Result<()> {
        match daemon::add(&mut self.0, vec![(path.to_string(), content.to_vec())], vec![tag.to_string()])? {
            cairn_app::Response::Add(r) if r.added + r.new_versions + r.unchanged == 1 && r.skipped.is_empty() => {
                Ok(())
            }
            other => bail!("add answered {:?}", other.to_json()),
        }
    }
    fn search(&mut self, q: &str) -> Result<usize> {
        let mut req = cairn_app::docs::SearchRequest::new(q);
        req.words = true;
        match self.0.execute(&cairn_app::Request::Search(req), None, None)? {
            cairn_app::Response::Search(r) => Ok(r.hits.len()),
            other => bail!("search answered {:?}", other.to_json()),
        }
    }
    fn ls(&mut self, tag: &str) -> Result<usize> {
        let filter = cairn_app::docs::Filter { tags: vec![tag.to_string()], ..Default::default() };
        let req = cairn_app::docs::LsRequest { filter, limit: None };
        match self.0.execute(&cairn_app::Request::Ls(req), None, None)? {
            cairn_app::Response::Ls(r) => Ok(r.docs.len()),
            other => bail!("ls answered {:?}", other.to_json()),
        }
    }
}

struct SqliteEngine {
    file: PathBuf,
}

struct SqliteSession(Connection);

/// Each connection's settings (`synchronous` is per connection; WAL is the file's).
const SQLITE_PRAGMAS: &str = "PRAGMA synchronous=FULL; PRAGMA busy_timeout=60000;";

impl SqliteEngine {
    fn create(dir: &Path) -> Result<SqliteEngine> {
        let s = Sqlite::open(dir)?;
        s.0.execute_batch(
            "CREATE TABLE tags(tag TEXT NOT NULL, doc INTEGER NOT NULL, PRIMARY KEY(tag, doc)) WITHOUT ROWID;",
        )?;
        Ok(SqliteEngine { file: dir.join("docs.sqlite") })
    }
}

impl Engine for SqliteEngine {
    fn session(&self) -> Result<Box<dyn Session + '_>> {
        let c = Connection::open(&self.file)?;
        c.execute_batch(SQLITE_PRAGMAS)?;
        Ok(Box::new(SqliteSession(c)))
    }
    fn add_batch(&self, docs: &[(String, Vec<u8>)]) -> Result<()> {
        let mut c = Connection::open(&self.file)?;
        c.execute_batch(SQLITE_PRAGMAS)?;
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (p, content) in docs {
            Sqlite::insert(&tx, p, content)?;
        }
        tx.commit()?;
        Ok(())
    }
    fn rss(&self) -> (f64, f64) {
        (proc_status_mib(std::process::id(), "VmRSS:"), proc_status_mib(std::process::id(), "VmHWM:"))
    }
}

impl Session for SqliteSession {
    fn add(&mut self, path: &str, content: &[u8], tag: &str) -> Result<()> {
        let tx = self.0.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = Sqlite::insert(&tx, path, content)?;
        tx.execute("INSERT OR IGNORE INTO tags(tag, doc) VALUES (?1, ?2)", params![tag, id])?;
        tx.commit()?;
        Ok(())
    }
    fn search(&mut self, q: &str) -> Result<usize> {
        fts_search(&self.0, q)
    }
    fn ls(&mut self, tag: &str) -> Result<usize> {
        // What cairn's ls returns per document: path, size, version, update time and tags.
        let mut st = self.0.prepare_cached(
            "SELECT d.path, length(d.content), d.version, d.updated,
                    (SELECT group_concat(t2.tag) FROM tags t2 WHERE t2.doc = d.id)
             FROM tags t JOIN docs d ON d.id = t.doc WHERE t.tag = ?1 ORDER BY d.path",
        )?;
        let mut rows = st.query([tag])?;
        let mut n = 0;
        while let Some(r) = rows.next()? {
            let _: (String, i64, i64, i64, Option<String>) = (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?);
            n += 1;
        }
        Ok(n)
    }
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

/// One client's record of a round.
struct ClientLog {
    hist: [Histogram<u64>; 3],
    failures: [u64; 3],
    results: [u64; 3],
    first_error: Option<String>,
}

impl ClientLog {
    fn fail(&mut self, kind: usize, e: String) {
        self.failures[kind] += 1;
        self.first_error.get_or_insert(e);
    }
}

/// Client `id`: `ops` operations of `mix` through `s` (or, if the connection failed, all failed).
fn client(s: Result<Box<dyn Session + '_>>, corpus: &Corpus, id: u64, mix: [u32; 3], ops: usize) -> ClientLog {
    let mut log = ClientLog { hist: [hist(), hist(), hist()], failures: [0; 3], results: [0; 3], first_error: None };
    let pattern = pattern(mix, id);
    let mut s = match s {
        Ok(s) => s,
        Err(e) => {
            for i in 0..ops {
                log.fail(pattern[i % pattern.len()], format!("connect: {e:#}"));
            }
            return log;
        }
    };
    let tag = format!("client{id}");
    let (mut added, mut add_failed) = (0usize, 0usize);
    for i in 0..ops {
        let kind = pattern[i % pattern.len()];
        let t = Instant::now();
        let r = match kind {
            0 => {
                let (path, content) = corpus.doc(id, i);
                s.add(&path, &content, &tag).map(|()| 0)
            }
            1 => s.search(corpus.query(id, i)),
            _ => s.ls(&tag).and_then(|n| {
                if n < added || n > added + add_failed {
                    bail!("ls of {tag} returned {n} documents after {added} acknowledged adds ({add_failed} failed)");
                }
                Ok(n)
            }),
        };
        let us = t.elapsed().as_micros().max(1) as u64;
        match r {
            Ok(n) => {
                let _ = log.hist[kind].record(us);
                log.results[kind] += n as u64;
                if kind == 0 {
                    added += 1;
                }
            }
            Err(e) => {
                log.fail(kind, format!("{}: {e:#}", OPS[kind]));
                if kind == 0 {
                    add_failed += 1;
                }
            }
        }
    }
    log
}

/// Runs one round of `cell.clients` clients; ids count up from `first_id`.
fn round(engine: &dyn Engine, corpus: &Corpus, cell: &Cell, first_id: u64) -> Result<(f64, Vec<ClientLog>)> {
    let ready = Barrier::new(cell.clients + 1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..cell.clients as u64)
            .map(|k| {
                let ready = &ready;
                scope.spawn(move || {
                    // Every client connects before the clock starts.
                    let s = engine.session();
                    ready.wait();
                    client(s, corpus, first_id + k, cell.mix, cell.ops)
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        let mut logs = Vec::new();
        for h in handles {
            logs.push(h.join().map_err(|_| anyhow::anyhow!("a client thread panicked"))?);
        }
        Ok((start.elapsed().as_secs_f64(), logs))
    })
}

fn summarize_round(
    cell: &Cell,
    r: usize,
    secs: f64,
    logs: Vec<ClientLog>,
    rss: (f64, f64),
    base: f64,
) -> Result<RoundResult> {
    let mut hist = [hist(), hist(), hist()];
    let (mut failures, mut results) = ([0u64; 3], [0u64; 3]);
    let mut first_error = None;
    for l in logs {
        for k in 0..3 {
            hist[k].add(&l.hist[k])?;
            failures[k] += l.failures[k];
            results[k] += l.results[k];
        }
        first_error = first_error.or(l.first_error);
    }
    let ops = std::array::from_fn(|k| {
        let h = &hist[k];
        let q = |p: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(p) as f64 / 1000.0 };
        OpStats {
            ok: h.len(),
            failures: failures[k],
            p50_ms: q(0.5),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            mean_results: if h.is_empty() { 0.0 } else { results[k] as f64 / h.len() as f64 },
        }
    });
    let ok: u64 = hist.iter().map(Histogram::len).sum();
    Ok(RoundResult {
        engine: cell.engine.clone(),
        clients: cell.clients,
        mix: mix_name(cell.mix),
        ops_per_client: cell.ops,
        round: r,
        rep: 0,
        secs,
        ops_per_sec: ok as f64 / secs,
        ops,
        first_error,
        rss_mib: rss.0,
        peak_rss_mib: rss.1,
        base_rss_mib: base,
    })
}

/// The child: runs `cell` and prints one JSON line per round.
pub fn run_one(cell_json: &str) -> Result<()> {
    let cell: Cell = serde_json::from_str(cell_json).context("--cell")?;
    let corpus = Corpus::load(&cell.corpus)?;
    let _ = std::fs::remove_dir_all(&cell.dir);
    std::fs::create_dir_all(&cell.dir)?;
    let base = proc_status_mib(std::process::id(), "VmRSS:");
    let engine: Box<dyn Engine> = match cell.engine.as_str() {
        "cairn" => Box::new(CairnEngine(Daemon::start(&cell.cairn, &cell.dir.join("data"))?)),
        "sqlite" => Box::new(SqliteEngine::create(&cell.dir)?),
        e => bail!("unknown engine {e} (cairn, sqlite)"),
    };
    preload(engine.as_ref(), &cell, &corpus)?;
    let mut out = std::io::stdout().lock();
    for r in 0..cell.rounds {
        let (secs, logs) = round(engine.as_ref(), &corpus, &cell, (r * cell.clients) as u64)?;
        let res =
            summarize_round(&cell, r, secs, logs, engine.rss(), if cell.engine == "sqlite" { base } else { 0.0 })?;
        writeln!(out, "{}", serde_json::to_string(&res)?)?;
        out.flush()?;
    }
    drop(engine);
    let _ = std::fs::remove_dir_all(&cell.dir);
    Ok(())
}

/// Adds `cell.preload` documents in batches of 100, then searches once, untimed (for cairn the
/// search commits the full-text index of the preload).
fn preload(engine: &dyn Engine, cell: &Cell, corpus: &Corpus) -> Result<()> {
    if cell.preload == 0 {
        return Ok(());
    }
    let docs: Vec<_> = (0..cell.preload).map(|i| corpus.doc(PRELOAD_ID, i)).collect();
    for batch in docs.chunks(100) {
        engine.add_batch(batch)?;
    }
    engine.session()?.search(corpus.query(PRELOAD_ID, 0))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_must_sum_to_100() {
        assert_eq!(parse_mix("60/30/10").unwrap(), [60, 30, 10]);
        assert_eq!(parse_mix("10/80/10").unwrap(), [10, 80, 10]);
        assert!(parse_mix("60/30/20").is_err());
        assert!(parse_mix("60/40").is_err());
        assert!(parse_mix("a/b/c").is_err());
    }

    #[test]
    fn patterns_hold_the_mix_exactly_and_differ_by_client() {
        let a = pattern([60, 30, 10], 1);
        for (k, want) in [60, 30, 10].into_iter().enumerate() {
            assert_eq!(a.iter().filter(|&&x| x == k).count(), want);
        }
        assert_eq!(a, pattern([60, 30, 10], 1));
        assert_ne!(a, pattern([60, 30, 10], 2));
    }

    #[test]
    fn documents_are_1_kib_unique_and_deterministic() {
        let c = Corpus { abstracts: vec!["é".repeat(300), "a short one".into()], queries: vec!["q".into()] };
        let (p, d) = c.doc(3, 7);
        assert_eq!(p, "c3/7.txt");
        assert!((1021..=1024).contains(&d.len()));
        assert!(std::str::from_utf8(&d).is_ok());
        assert_eq!(c.doc(3, 7).1, d);
        assert_ne!(c.doc(3, 8).1, d);
        assert_ne!(c.doc(4, 7).1, d);
    }
}
