//! `cairn-bench tables`: the record-table benchmarks (the set Yeti publishes: create, read,
//! update, delete and a 70/30 read/update mix with 0, 1 and 2 secondary indexes; hash-index
//! lookup; range scan on a range index; filter evaluation over a whole table), run side by side
//! on cairn-tables, SQLite (WAL, a table of JSON text with expression indexes) and PostgreSQL
//! (a `jsonb` table with expression indexes, over loopback).
//!
//! Records are about 1 KB with 8 attributes besides the integer key. Every engine gets the same
//! records as `serde_json::Value`s (generated before the clock starts) and hands reads back as
//! parsed `Value`s, so JSON encoding and decoding count for every engine. Writes are
//! acknowledged without an fsync per commit in the default regime (cairn `no_sync`, SQLite
//! `synchronous=NORMAL`, PostgreSQL `synchronous_commit=off`: each survives a crash of the
//! process, a power cut may lose the last ones) and with one in `--durable` (cairn synced,
//! SQLite `synchronous=FULL`, PostgreSQL `synchronous_commit=on`).
//!
//! SQLite writers serialize on a mutex in this process (SQLite allows one writer; waiting on its
//! busy handler would sleep) while readers use their own connections concurrently.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_kv::{Db, Options, WriteOptions};
use cairn_tables::{Expect, IndexKind, Query, Tables};
use clap::Args;
use serde_json::{Value, json};

#[derive(Args)]
pub struct TablesArgs {
    /// Records created in each table.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Operations in each read, update and mixed phase (long enough that each phase pays
    /// for the flushes and compactions its own writes cause, not those of the phase before).
    #[arg(long, default_value_t = 300_000)]
    ops: u64,
    /// Client threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Engines: cairn, sqlite, postgres (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "cairn,sqlite,postgres")]
    engines: Vec<String>,
    /// Index counts to run the CRUD phases with (0, 1: hash on `city`, 2: and range on `score`).
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    indexes: Vec<usize>,
    /// Repetitions (engines interleaved, order rotated); the table shows medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Phases after create (which always runs): read, update, mixed, queries, delete.
    #[arg(long, value_delimiter = ',', default_value = "read,update,mixed,queries,delete")]
    phases: Vec<String>,
    /// Fsync every commit (all engines).
    #[arg(long)]
    durable: bool,
    /// PostgreSQL connection string (the bench script starts a server on loopback).
    #[arg(long, env = "CAIRN_BENCH_PG", default_value = "host=127.0.0.1 port=54329 user=postgres dbname=postgres")]
    pg: String,
    /// Scratch directory.
    #[arg(long, default_value = "target/cairn-bench/tables")]
    dir: PathBuf,
}

/// Cache budget: cairn's block cache and PostgreSQL's `shared_buffers` (set by bench/tables.sh).
/// SQLite keeps a 64 MiB page cache per connection (8 of them): 256 MiB each measured slower
/// (reads 110-118K/s against 192-209K/s), the operating system's page cache serving it better.
const CACHE_BYTES: usize = 256 << 20;

/// Distinct `city` values: a hash lookup finds about records / CITIES of them.
const CITIES: u64 = 10_000;
/// `score` is uniform in 0..SCORES; a range scan covers RANGE_WIDTH of it.
const SCORES: u64 = 1_000_000;
const RANGE_WIDTH: u64 = 500;
const STATUSES: [&str; 4] = ["active", "inactive", "pending", "banned"];

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ceb9fe1a85ec53);
    x ^ (x >> 33)
}

/// Record `id` as of update generation `g` (0 when created): ~1 KB, 8 attributes + `id`.
fn record(id: u64, g: u64) -> Value {
    let h = mix(id.wrapping_mul(31).wrapping_add(g));
    let mut bio = String::with_capacity(760);
    let mut w = h;
    while bio.len() < 740 {
        w = mix(w);
        bio.push_str(WORDS[(w % WORDS.len() as u64) as usize]);
        bio.push(' ');
    }
    json!({
        "id": id,
        "name": format!("user {id:08}"),
        "email": format!("user{id}@example.org"),
        "city": format!("city-{}", h % CITIES),
        "age": 18 + (mix(id) % 70),
        "score": mix(h) % SCORES,
        "status": STATUSES[(mix(id ^ 7) % 4) as usize],
        "tags": [WORDS[(h % 32) as usize], WORDS[((h >> 8) % 32) as usize]],
        "bio": bio,
    })
}

const WORDS: [&str; 32] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima",
    "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray",
    "yankee", "zulu", "storage", "engine", "record", "index", "query", "table",
];

/// One client's handle on an engine.
trait Client: Send {
    fn insert(&mut self, id: u64, rec: &Value) -> Result<()>;
    fn read(&mut self, id: u64) -> Result<Option<Value>>;
    fn update(&mut self, id: u64, rec: &Value) -> Result<()>;
    fn delete(&mut self, id: u64) -> Result<()>;
    /// Records with `city == c` (hash index).
    fn lookup(&mut self, city: &str) -> Result<Vec<Value>>;
    /// Records with `lo <= score < hi` (range index).
    fn range(&mut self, lo: u64, hi: u64) -> Result<Vec<Value>>;
    /// Records with `status == pending` and `age > 60` (no index): every record is evaluated.
    fn filter(&mut self) -> Result<Vec<Value>>;
}

/// An engine: a fresh table with `indexes` indexes, then clients on it.
trait Engine: Sync {
    fn client(&self) -> Result<Box<dyn Client + '_>>;
}

// ---------------------------------------------------------------------------------------------
// cairn

struct Cairn {
    tables: Tables,
}

impl Cairn {
    fn open(dir: &Path, indexes: usize, durable: bool) -> Result<Cairn> {
        let db = Db::open(dir, Options { block_cache_bytes: CACHE_BYTES, ..Options::default() })?;
        let writes = if durable { WriteOptions::default() } else { WriteOptions::no_sync() };
        let tables = Tables::open_with(db.keyspace(cairn_kv::keyspace::TABLES), writes)?;
        tables.create_table("t", "id", None)?;
        if indexes >= 1 {
            tables.create_index("t", "city", "city", IndexKind::Hash)?;
            tables.wait_for_index("t", "city")?;
        }
        if indexes >= 2 {
            tables.create_index("t", "score", "score", IndexKind::Range)?;
            tables.wait_for_index("t", "score")?;
        }
        Ok(Cairn { tables })
    }
}

impl Drop for Cairn {
    fn drop(&mut self) {
        self.tables.close();
    }
}

struct CairnClient<'a>(&'a Tables);

impl Engine for Cairn {
    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(CairnClient(&self.tables)))
    }
}

impl CairnClient<'_> {
    fn query(&self, filter: String) -> Result<Vec<Value>> {
        Ok(self.0.query("t", &Query { filter: Some(filter), ..Query::default() })?.records)
    }
}

impl Client for CairnClient<'_> {
    fn insert(&mut self, _id: u64, rec: &Value) -> Result<()> {
        self.0.put_with("t", rec, Expect::Absent)?;
        Ok(())
    }
    fn read(&mut self, id: u64) -> Result<Option<Value>> {
        Ok(self.0.get("t", &json!(id))?.map(|r| r.data))
    }
    fn update(&mut self, _id: u64, rec: &Value) -> Result<()> {
        self.0.put_with("t", rec, Expect::Any)?;
        Ok(())
    }
    fn delete(&mut self, id: u64) -> Result<()> {
        self.0.delete("t", &json!(id), None)?;
        Ok(())
    }
    fn lookup(&mut self, city: &str) -> Result<Vec<Value>> {
        self.query(format!("city=={city}"))
    }
    fn range(&mut self, lo: u64, hi: u64) -> Result<Vec<Value>> {
        self.query(format!("score=ge={lo};score=lt={hi}"))
    }
    fn filter(&mut self) -> Result<Vec<Value>> {
        self.query("status==pending;age=gt=60".into())
    }
}

// ---------------------------------------------------------------------------------------------
// SQLite

struct Sqlite {
    path: PathBuf,
    durable: bool,
    writer: Mutex<()>,
}

impl Sqlite {
    fn open(dir: &Path, indexes: usize, durable: bool) -> Result<Sqlite> {
        std::fs::create_dir_all(dir)?;
        let s = Sqlite { path: dir.join("t.sqlite"), durable, writer: Mutex::new(()) };
        let c = s.connect()?;
        for sql in &SQLITE_DDL[..=indexes.min(2)] {
            c.execute_batch(sql)?;
        }
        Ok(s)
    }

    fn connect(&self) -> Result<rusqlite::Connection> {
        let c = rusqlite::Connection::open(&self.path)?;
        let sync = if self.durable { "FULL" } else { "NORMAL" };
        c.execute_batch(&format!(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA busy_timeout=60000;
             PRAGMA cache_size=-65536;"
        ))?;
        c.set_prepared_statement_cache_capacity(32);
        Ok(c)
    }
}

/// The table, then its first and second index.
const SQLITE_DDL: [&str; 3] = [
    "CREATE TABLE t(id INTEGER PRIMARY KEY, doc TEXT NOT NULL)",
    "CREATE INDEX t_city ON t(json_extract(doc, '$.city'))",
    "CREATE INDEX t_score ON t(json_extract(doc, '$.score'))",
];

struct SqliteClient<'a> {
    c: rusqlite::Connection,
    writer: &'a Mutex<()>,
}

impl Engine for Sqlite {
    fn client(&self) -> Result<Box<dyn Client + '_>> {
        Ok(Box::new(SqliteClient { c: self.connect()?, writer: &self.writer }))
    }
}

impl SqliteClient<'_> {
    fn write(&self, sql: &str, params: impl rusqlite::Params) -> Result<usize> {
        let _w = self.writer.lock().expect("writer lock");
        Ok(self.c.prepare_cached(sql)?.execute(params)?)
    }

    fn docs(&self, sql: &str, params: impl rusqlite::Params) -> Result<Vec<Value>> {
        let mut st = self.c.prepare_cached(sql)?;
        let mut rows = st.query(params)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            out.push(serde_json::from_str(r.get_ref(0)?.as_str()?)?);
        }
        Ok(out)
    }
}

impl Client for SqliteClient<'_> {
    fn insert(&mut self, id: u64, rec: &Value) -> Result<()> {
        let doc = serde_json::to_string(rec)?;
        self.write("INSERT INTO t(id, doc) VALUES (?1, ?2)", rusqlite::params![id as i64, doc])?;
        Ok(())
    }
    fn read(&mut self, id: u64) -> Result<Option<Value>> {
        Ok(self.docs("SELECT doc FROM t WHERE id = ?1", [id as i64])?.pop())
    }
    fn update(&mut self, id: u64, rec: &Value) -> Result<()> {
        let doc = serde_json::to_string(rec)?;
        self.write("UPDATE t SET doc = ?2 WHERE id = ?1", rusqlite::params![id as i64, doc])?;
        Ok(())
    }
    fn delete(&mut self, id: u64) -> Result<()> {
        self.write("DELETE FROM t WHERE id = ?1", [id as i64])?;
        Ok(())
    }
    fn lookup(&mut self, city: &str) -> Result<Vec<Value>> {
        self.docs("SELECT doc FROM t WHERE json_extract(doc, '$.city') = ?1", [city])
    }
    fn range(&mut self, lo: u64, hi: u64) -> Result<Vec<Value>> {
        self.docs(
            "SELECT doc FROM t WHERE json_extract(doc, '$.score') >= ?1 AND json_extract(doc, '$.score') < ?2",
            [lo as i64, hi as i64],
        )
    }
    fn filter(&mut self) -> Result<Vec<Value>> {
        self.docs(
            "SELECT doc FROM t WHERE json_extract(doc, '$.status') = 'pending' AND json_extract(doc, '$.age') > 60",
            [],
        )
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

struct Postgres {
    url: String,
    durable: bool,
}

impl Postgres {
    fn open(url: &str, indexes: usize, durable: bool) -> Result<Postgres> {
        let p = Postgres { url: url.to_string(), durable };
        let mut c = p.connect()?;
        for sql in &PG_DDL[..=indexes.min(2)] {
            c.batch_execute(sql)?;
        }
        Ok(p)
    }

    fn connect(&self) -> Result<postgres::Client> {
        let mut c = postgres::Client::connect(&self.url, postgres::NoTls)
            .with_context(|| format!("connecting to PostgreSQL at {:?} (bench/tables.sh starts one)", self.url))?;
        let sync = if self.durable { "on" } else { "off" };
        c.batch_execute(&format!("SET synchronous_commit = {sync}"))?;
        Ok(c)
    }
}

/// The table (replacing the previous run's), then its first and second index.
const PG_DDL: [&str; 3] = [
    "DROP TABLE IF EXISTS t; CREATE TABLE t(id bigint PRIMARY KEY, doc jsonb NOT NULL)",
    "CREATE INDEX t_city ON t USING hash ((doc->>'city'))",
    "CREATE INDEX t_score ON t (((doc->>'score')::bigint))",
];

struct PgClient {
    c: postgres::Client,
    st: Vec<postgres::Statement>,
}

const PG_SQL: [&str; 7] = [
    "INSERT INTO t(id, doc) VALUES ($1, $2)",
    "SELECT doc FROM t WHERE id = $1",
    "UPDATE t SET doc = $2 WHERE id = $1",
    "DELETE FROM t WHERE id = $1",
    "SELECT doc FROM t WHERE doc->>'city' = $1",
    "SELECT doc FROM t WHERE (doc->>'score')::bigint >= $1 AND (doc->>'score')::bigint < $2",
    "SELECT doc FROM t WHERE doc->>'status' = 'pending' AND (doc->>'age')::bigint > 60",
];

impl Engine for Postgres {
    fn client(&self) -> Result<Box<dyn Client + '_>> {
        let mut c = self.connect()?;
        let st = PG_SQL.iter().map(|s| c.prepare(s)).collect::<std::result::Result<_, _>>()?;
        Ok(Box::new(PgClient { c, st }))
    }
}

impl PgClient {
    fn docs(&mut self, i: usize, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Result<Vec<Value>> {
        let rows = self.c.query(&self.st[i], params)?;
        Ok(rows.iter().map(|r| r.get::<_, Value>(0)).collect())
    }
}

impl Client for PgClient {
    fn insert(&mut self, id: u64, rec: &Value) -> Result<()> {
        self.c.execute(&self.st[0], &[&(id as i64), rec])?;
        Ok(())
    }
    fn read(&mut self, id: u64) -> Result<Option<Value>> {
        Ok(self.docs(1, &[&(id as i64)])?.pop())
    }
    fn update(&mut self, id: u64, rec: &Value) -> Result<()> {
        self.c.execute(&self.st[2], &[&(id as i64), rec])?;
        Ok(())
    }
    fn delete(&mut self, id: u64) -> Result<()> {
        self.c.execute(&self.st[3], &[&(id as i64)])?;
        Ok(())
    }
    fn lookup(&mut self, city: &str) -> Result<Vec<Value>> {
        self.docs(4, &[&city])
    }
    fn range(&mut self, lo: u64, hi: u64) -> Result<Vec<Value>> {
        self.docs(5, &[&(lo as i64), &(hi as i64)])
    }
    fn filter(&mut self) -> Result<Vec<Value>> {
        self.docs(6, &[])
    }
}

// ---------------------------------------------------------------------------------------------
// Phases

/// Runs `f(client, thread)` on `threads` threads once they all have a client; returns the
/// time from the first thread starting to the last one finishing (each thread reads the clock
/// itself: the coordinating thread may be scheduled late on a busy machine).
fn parallel<E: Engine + ?Sized>(
    engine: &E,
    threads: usize,
    f: impl Fn(&mut dyn Client, usize) -> Result<()> + Sync,
) -> Result<Duration> {
    let barrier = Barrier::new(threads);
    let spans = std::thread::scope(|s| -> Result<Vec<(Instant, Instant)>> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (barrier, f) = (&barrier, &f);
                s.spawn(move || -> Result<(Instant, Instant)> {
                    let client = engine.client();
                    barrier.wait();
                    let start = Instant::now();
                    f(client?.as_mut(), t)?;
                    Ok((start, Instant::now()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("bench thread panicked")).collect()
    })?;
    let first = spans.iter().map(|s| s.0).min().expect("threads > 0");
    let last = spans.iter().map(|s| s.1).max().expect("threads > 0");
    Ok(last - first)
}

/// A small per-thread PRNG.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        mix(self.0)
    }
}

/// Results of one engine at one index count: (row name, ops or records per second).
type Rows = Vec<(String, f64)>;

fn crud(engine: &dyn Engine, a: &TablesArgs, indexes: usize, rows: &mut Rows) -> Result<()> {
    let (n, t) = (a.records, a.threads);
    // Every thread's share of records, generated before the clock starts.
    let created: Vec<Vec<(u64, Value)>> =
        (0..t).map(|k| (k as u64..n).step_by(t).map(|id| (id, record(id, 0))).collect()).collect();
    let el = parallel(engine, t, |c, k| {
        for (id, r) in &created[k] {
            c.insert(*id, r)?;
        }
        Ok(())
    })?;
    drop(created);
    rows.push((format!("create, {indexes} idx"), n as f64 / el.as_secs_f64()));

    let phase = |p: &str| a.phases.iter().any(|x| x == p);
    if indexes == 0 && phase("read") {
        let found = AtomicU64::new(0);
        let el = parallel(engine, t, |c, k| {
            let mut rng = Rng(k as u64 + 1);
            for _ in 0..a.ops / t as u64 {
                if c.read(rng.next() % n)?.is_some() {
                    found.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })?;
        if found.load(Ordering::Relaxed) != a.ops / t as u64 * t as u64 {
            bail!("read: records missing");
        }
        rows.push(("read".into(), (a.ops / t as u64 * t as u64) as f64 / el.as_secs_f64()));
    }

    // Updates change every indexed attribute. Thread k owns ids == k (mod t), so no two
    // threads write one record (the mix below too): the rows measure throughput, not retries.
    let per = (a.ops / t as u64) as usize;
    let updates = |generation: u64| -> Vec<Vec<(u64, Value)>> {
        (0..t)
            .map(|k| {
                let mut rng = Rng(generation * 1000 + k as u64);
                (0..per)
                    .map(|_| {
                        let id = (rng.next() % (n / t as u64)) * t as u64 + k as u64;
                        (id, record(id, generation))
                    })
                    .collect()
            })
            .collect()
    };
    if phase("update") {
        let up = updates(1);
        let el = parallel(engine, t, |c, k| {
            for (id, r) in &up[k] {
                c.update(*id, r)?;
            }
            Ok(())
        })?;
        drop(up);
        rows.push((format!("update, {indexes} idx"), (per * t) as f64 / el.as_secs_f64()));
    }
    if phase("mixed") {
        let up = updates(2);
        let el = parallel(engine, t, |c, k| {
            let mut rng = Rng(77 + k as u64);
            for (id, r) in &up[k] {
                if rng.next() % 10 < 3 {
                    c.update(*id, r)?;
                } else if c.read(*id)?.is_none() {
                    bail!("mixed: record {id} missing");
                }
            }
            Ok(())
        })?;
        drop(up);
        rows.push((format!("mixed 70R/30W, {indexes} idx"), (per * t) as f64 / el.as_secs_f64()));
    }
    if indexes == 2 && phase("queries") {
        queries(engine, a, rows)?;
    }
    if !phase("delete") {
        return Ok(());
    }

    let gone = n / 2;
    let el = parallel(engine, t, |c, k| {
        for id in (k as u64..gone).step_by(t) {
            c.delete(id)?;
        }
        Ok(())
    })?;
    rows.push((format!("delete, {indexes} idx"), gone as f64 / el.as_secs_f64()));
    let mut c = engine.client()?;
    if c.read(0)?.is_some() || c.read(gone)?.is_none() {
        bail!("delete: wrong records left");
    }
    Ok(())
}

fn queries(engine: &dyn Engine, a: &TablesArgs, rows: &mut Rows) -> Result<()> {
    let t = a.threads;
    let lookups = (a.ops / 4 / t as u64).max(1);
    let hits = AtomicU64::new(0);
    let el = parallel(engine, t, |c, k| {
        let mut rng = Rng(500 + k as u64);
        for _ in 0..lookups {
            let city = format!("city-{}", rng.next() % CITIES);
            let got = c.lookup(&city)?;
            if got.iter().any(|r| r["city"] != city.as_str()) {
                bail!("lookup: wrong record");
            }
            hits.fetch_add(got.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    })?;
    if hits.load(Ordering::Relaxed) == 0 {
        bail!("lookup found nothing");
    }
    rows.push(("hash index lookup".into(), (lookups * t as u64) as f64 / el.as_secs_f64()));

    let scans = (a.ops / 20 / t as u64).max(1);
    let hits = AtomicU64::new(0);
    let el = parallel(engine, t, |c, k| {
        let mut rng = Rng(900 + k as u64);
        for _ in 0..scans {
            let lo = rng.next() % (SCORES - RANGE_WIDTH);
            let got = c.range(lo, lo + RANGE_WIDTH)?;
            if got.iter().any(|r| r["score"].as_u64().is_none_or(|s| s < lo || s >= lo + RANGE_WIDTH)) {
                bail!("range: wrong record");
            }
            hits.fetch_add(got.len() as u64, Ordering::Relaxed);
        }
        Ok(())
    })?;
    if hits.load(Ordering::Relaxed) == 0 {
        bail!("range found nothing");
    }
    rows.push(("range scan (~50 records)".into(), (scans * t as u64) as f64 / el.as_secs_f64()));

    // Every thread evaluates the filter over the whole table twice.
    let el = parallel(engine, t, |c, _| {
        for _ in 0..2 {
            let got = c.filter()?;
            if got.is_empty() || got.iter().any(|r| r["status"] != "pending" || r["age"].as_u64() <= Some(60)) {
                bail!("filter: wrong answer");
            }
        }
        Ok(())
    })?;
    rows.push(("filter evaluation (records/s)".into(), (a.records * 2 * t as u64) as f64 / el.as_secs_f64()));
    Ok(())
}

fn open(name: &str, a: &TablesArgs, dir: &Path, indexes: usize) -> Result<Box<dyn Engine>> {
    let _ = std::fs::remove_dir_all(dir);
    Ok(match name {
        "cairn" => Box::new(Cairn::open(dir, indexes, a.durable)?),
        "sqlite" => Box::new(Sqlite::open(dir, indexes, a.durable)?),
        "postgres" => Box::new(Postgres::open(&a.pg, indexes, a.durable)?),
        other => bail!("unknown engine {other:?} (cairn, sqlite, postgres)"),
    })
}

pub fn run(a: TablesArgs) -> Result<()> {
    if a.threads == 0 || a.records < 2 * a.threads as u64 || a.ops < a.threads as u64 {
        bail!("need threads > 0, records >= 2 x threads and ops >= threads");
    }
    eprintln!(
        "{} records of ~{} B, {} ops per phase, {} threads, {} commits",
        a.records,
        serde_json::to_string(&record(1, 0))?.len(),
        a.ops,
        a.threads,
        if a.durable { "durable (fsync)" } else { "unsynced" }
    );
    // results[row][engine] = values over repetitions
    let mut results: Vec<(String, Vec<Vec<f64>>)> = Vec::new();
    let ne = a.engines.len();
    for rep in 0..a.repeat {
        for i in 0..ne {
            let name = &a.engines[(i + rep) % ne];
            let ei = a.engines.iter().position(|e| e == name).expect("listed");
            for &ix in &a.indexes {
                let dir = a.dir.join(name);
                let engine = open(name, &a, &dir, ix)?;
                let mut rows = Rows::new();
                crud(engine.as_ref(), &a, ix, &mut rows).with_context(|| format!("{name}, {ix} indexes"))?;
                drop(engine);
                let _ = std::fs::remove_dir_all(&dir);
                for (row, v) in rows {
                    eprintln!("  rep {} {name:>8} {row:<32} {v:>12.0}", rep + 1);
                    let pos = match results.iter().position(|(r, _)| *r == row) {
                        Some(p) => p,
                        None => {
                            results.push((row, vec![Vec::new(); ne]));
                            results.len() - 1
                        }
                    };
                    results[pos].1[ei].push(v);
                }
            }
        }
    }
    results.sort_by_key(|(r, _)| row_order(r));
    let mut out = format!("| operation (ops/s, median of {}) |", a.repeat);
    for e in &a.engines {
        out += &format!(" {e} |");
    }
    for e in a.engines.iter().skip(1) {
        out += &format!(" {}/{e} |", a.engines[0]);
    }
    out += "\n|---|";
    out += &"---:|".repeat(2 * ne - 1);
    out += "\n";
    for (row, per) in &results {
        let meds: Vec<f64> = per.iter().map(|v| crate::report::median(v.clone())).collect();
        out += &format!("| {row} |");
        for m in &meds {
            out += &format!(" {m:.0} |");
        }
        for m in meds.iter().skip(1) {
            out += &format!(" {:.2}x |", meds[0] / m);
        }
        out += "\n";
    }
    // Index maintenance cost: 2-index write throughput over 0-index, per engine.
    for op in ["create", "update", "mixed 70R/30W"] {
        let get = |ix: usize, e: usize| {
            results
                .iter()
                .find(|(r, _)| *r == format!("{op}, {ix} idx"))
                .map(|(_, per)| crate::report::median(per[e].clone()))
        };
        let mut line = format!("{op}: 2 idx / 0 idx:");
        for (e, name) in a.engines.iter().enumerate() {
            if let (Some(two), Some(zero)) = (get(2, e), get(0, e)) {
                line += &format!(" {name} {:.0}%", 100.0 * two / zero);
            }
        }
        out += &format!("\n{line}");
    }
    println!("{out}");
    Ok(())
}

fn row_order(r: &str) -> (usize, String) {
    let ops = ["read", "create", "update", "delete", "mixed", "hash", "range", "filter"];
    (ops.iter().position(|o| r.starts_with(o)).unwrap_or(ops.len()), r.to_string())
}
