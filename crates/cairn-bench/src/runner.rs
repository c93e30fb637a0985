//! Replays a stream against one engine (in its own process) and measures it. The result is one
//! JSON line, the same schema the Go peers print.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::engine::{self, Engine, Settings};
use crate::generator::format_key;
use crate::measure;
use crate::stream::{OpKind, Phase, Stream};

/// What one engine did on one stream: the JSON line a `ycsb-run-one` child (or a Go peer) prints.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// Engine name.
    pub engine: String,
    /// The engine's configuration, and the settings it lacks.
    pub settings: String,
    /// Workload letter.
    pub workload: String,
    /// Records loaded.
    pub records: u64,
    /// Run-phase ops.
    pub ops: u64,
    /// Client threads.
    pub threads: u64,
    /// Bytes per value.
    pub value_size: u64,
    /// Wall seconds of the load phase.
    pub load_secs: f64,
    /// Load-phase inserts per second.
    pub load_ops_per_sec: f64,
    /// Wall seconds of the run phase.
    pub run_secs: f64,
    /// Run-phase ops per second.
    pub ops_per_sec: f64,
    /// Mean run-phase op latency, microseconds.
    pub mean_us: f64,
    /// Median op latency, microseconds.
    pub p50_us: f64,
    /// 99th percentile op latency, microseconds.
    pub p99_us: f64,
    /// 99.9th percentile op latency, microseconds.
    pub p999_us: f64,
    /// Longest op, microseconds (in the raw results only).
    #[serde(default)]
    pub max_us: f64,
    /// User + system CPU seconds of the process over the run phase (background threads included).
    pub cpu_secs: f64,
    /// CPU microseconds per run-phase op.
    pub cpu_us_per_op: f64,
    /// Key + value bytes written by the workload (load + run).
    pub user_bytes: u64,
    /// Bytes the process sent to storage from open to after close (load + run + final flush).
    pub disk_write_bytes: u64,
    /// `disk_write_bytes / user_bytes`.
    pub write_amp: f64,
    /// Disk space of the database directory after close.
    pub space_bytes: u64,
    /// Peak resident set size of the process.
    pub peak_rss_bytes: u64,
    /// Point reads (reads and the reads of read-modify-writes).
    pub reads: u64,
    /// Point reads that found their key.
    pub reads_found: u64,
    /// Scans.
    pub scans: u64,
    /// Keys returned by scans.
    pub scan_keys: u64,
    /// Writes in the run phase (inserts, updates, read-modify-writes).
    pub writes: u64,
}

/// Per-thread counters of the run phase.
struct ThreadStats {
    hist: Histogram<u64>,
    reads: u64,
    found: u64,
    scans: u64,
    scan_keys: u64,
    writes: u64,
    user_bytes: u64,
}

fn load_thread(engine: &dyn Engine, stream: &Stream, t: usize, threads: usize, batch: usize) -> Result<u64> {
    // The batch's keys, formatted into buffers kept from batch to batch (one, for the single
    // inserts of `batch` 1), and its values.
    let mut keys = vec![Vec::with_capacity(32); batch.max(1)];
    let mut values: Vec<&[u8]> = Vec::with_capacity(batch);
    let mut bytes = 0;
    for op in stream.reader(Phase::Load, t, threads)? {
        let op = op?;
        let key = &mut keys[values.len()];
        format_key(op.key, key);
        let value = stream.value(&op);
        bytes += (key.len() + value.len()) as u64;
        if batch <= 1 {
            engine.insert(key, value)?;
            continue;
        }
        values.push(value);
        if values.len() == batch {
            insert_batch(engine, &keys, &mut values)?;
        }
    }
    if !values.is_empty() {
        insert_batch(engine, &keys, &mut values)?;
    }
    Ok(bytes)
}

/// Writes the batch of `values` and the first as many `keys`, and empties it.
fn insert_batch(engine: &dyn Engine, keys: &[Vec<u8>], values: &mut Vec<&[u8]>) -> Result<()> {
    let items: Vec<(&[u8], &[u8])> = keys.iter().zip(values.iter()).map(|(k, &v)| (k.as_slice(), v)).collect();
    engine.insert_batch(&items)?;
    values.clear();
    Ok(())
}

/// Operations slower than `CAIRN_BENCH_SLOW_US` microseconds (when set) are printed to stderr
/// after the run, each with its start (milliseconds into the run) and kind: where a tail comes
/// from in time.
fn slow_threshold() -> Option<u64> {
    std::env::var("CAIRN_BENCH_SLOW_US").ok().and_then(|v| v.parse::<u64>().ok()).map(|us| us * 1000)
}

fn run_thread(engine: &dyn Engine, stream: &Stream, t: usize, threads: usize, t0: Instant) -> Result<ThreadStats> {
    let mut s =
        ThreadStats { hist: Histogram::new(3)?, reads: 0, found: 0, scans: 0, scan_keys: 0, writes: 0, user_bytes: 0 };
    let mut key = Vec::with_capacity(32);
    let slow = slow_threshold();
    let mut slow_ops: Vec<(f64, OpKind, u64)> = Vec::new();
    for op in stream.reader(Phase::Run, t, threads)? {
        let op = op?;
        format_key(op.key, &mut key);
        let start = Instant::now();
        match op.kind {
            OpKind::Read => {
                s.reads += 1;
                s.found += engine.read(&key)? as u64;
            }
            OpKind::Update => engine.update(&key, stream.value(&op))?,
            OpKind::Insert => engine.insert(&key, stream.value(&op))?,
            OpKind::Scan => {
                s.scans += 1;
                s.scan_keys += engine.scan(&key, op.scan_len as usize)? as u64;
            }
            OpKind::ReadModifyWrite => {
                s.reads += 1;
                s.found += engine.rmw(&key, stream.value(&op))? as u64;
            }
        }
        let nanos = start.elapsed().as_nanos() as u64;
        s.hist.record(nanos.max(1))?;
        if slow.is_some_and(|limit| nanos >= limit) {
            slow_ops.push(((start - t0).as_secs_f64() * 1e3, op.kind, nanos / 1000));
        }
        if op.writes() {
            s.writes += 1;
            s.user_bytes += (key.len() + stream.spec.value_size as usize) as u64;
        }
    }
    for (at_ms, kind, us) in slow_ops {
        eprintln!("SLOW thread {t} at {at_ms:.1} ms {kind:?} {us} us");
    }
    Ok(s)
}

/// Runs `threads` scoped threads of `f` and collects their results.
fn in_threads<T: Send>(threads: usize, f: impl Fn(usize) -> Result<T> + Sync) -> Result<Vec<T>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let f = &f;
                scope.spawn(move || f(t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h.join() {
                Ok(r) => r,
                Err(_) => bail!("a client thread panicked"),
            })
            .collect()
    })
}

/// The phases one run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Phases {
    /// Load a new database, then run the workload on it.
    Both,
    /// Load a new database and close it (kept for `run-only` runs on copies of it).
    LoadOnly,
    /// Run the workload on the database already at the path (a copy of a `load-only` one).
    RunOnly,
}

impl Phases {
    /// The flag value.
    pub fn as_str(self) -> &'static str {
        match self {
            Phases::Both => "both",
            Phases::LoadOnly => "load-only",
            Phases::RunOnly => "run-only",
        }
    }
}

impl RunResult {
    /// Takes the load phase's figures from `load`, the `load-only` run whose database this
    /// `run-only` run started from a copy of: its time and rate, and its key + value bytes
    /// and bytes written to storage in the sums write amplification is taken over.
    pub fn add_load(&mut self, load: &RunResult) {
        self.load_secs = load.load_secs;
        self.load_ops_per_sec = load.load_ops_per_sec;
        self.user_bytes += load.user_bytes;
        self.disk_write_bytes += load.disk_write_bytes;
        self.write_amp = self.disk_write_bytes as f64 / self.user_bytes.max(1) as f64;
    }
}

/// Runs `phases` of `stream` on `engine_name`'s database at `db_dir` with `threads` client
/// threads (a load starts from a new, empty database); closes the database and measures it.
pub fn run_one(
    engine_name: &str,
    stream_path: &Path,
    db_dir: &Path,
    threads: usize,
    s: &Settings,
    phases: Phases,
) -> Result<RunResult> {
    let threads = threads.max(1);
    let stream = Stream::open(stream_path)?;
    let (load, run) = (phases != Phases::RunOnly, phases != Phases::LoadOnly);
    if load && db_dir.exists() {
        std::fs::remove_dir_all(db_dir).with_context(|| format!("remove {}", db_dir.display()))?;
    }
    if !load && !db_dir.is_dir() {
        bail!("no loaded database at {} to run on", db_dir.display());
    }
    if let Some(parent) = db_dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let io0 = measure::disk_write_bytes()?;
    let engine = engine::open(engine_name, db_dir, s)?;

    engine.set_sync(false);
    let t0 = Instant::now();
    let loaded = if load {
        in_threads(threads, |t| load_thread(engine.as_ref(), &stream, t, threads, s.load_batch as usize))?
    } else {
        Vec::new()
    };
    let load_secs = t0.elapsed().as_secs_f64();

    engine.set_sync(s.durability == engine::Durability::Groupsync);
    let cpu0 = measure::cpu_seconds()?;
    let t1 = Instant::now();
    let per_thread =
        if run { in_threads(threads, |t| run_thread(engine.as_ref(), &stream, t, threads, t1))? } else { Vec::new() };
    let run_secs = t1.elapsed().as_secs_f64();
    let cpu_secs = measure::cpu_seconds()? - cpu0;
    let ops = if run { stream.spec.ops } else { 0 };

    let name = engine.name().to_string();
    let settings = engine.settings();
    engine.flush_and_close()?;
    let disk_write_bytes = measure::disk_write_bytes()?.saturating_sub(io0);
    let space_bytes = measure::disk_usage(db_dir)?;
    let peak_rss_bytes = measure::peak_rss_bytes()?;

    let mut hist = Histogram::<u64>::new(3)?;
    let mut r = RunResult {
        engine: name,
        settings,
        workload: stream.spec.workload.letter().to_string(),
        records: stream.spec.records,
        ops,
        threads: threads as u64,
        value_size: stream.spec.value_size as u64,
        load_secs: if load { load_secs } else { 0.0 },
        load_ops_per_sec: if load { stream.spec.records as f64 / load_secs } else { 0.0 },
        run_secs,
        ops_per_sec: if run { ops as f64 / run_secs } else { 0.0 },
        cpu_secs,
        cpu_us_per_op: cpu_secs * 1e6 / ops.max(1) as f64,
        disk_write_bytes,
        space_bytes,
        peak_rss_bytes,
        user_bytes: loaded.iter().sum(),
        ..RunResult::default()
    };
    for ts in per_thread {
        hist.add(&ts.hist)?;
        r.reads += ts.reads;
        r.reads_found += ts.found;
        r.scans += ts.scans;
        r.scan_keys += ts.scan_keys;
        r.writes += ts.writes;
        r.user_bytes += ts.user_bytes;
    }
    r.mean_us = hist.mean() / 1e3;
    r.p50_us = hist.value_at_quantile(0.5) as f64 / 1e3;
    r.p99_us = hist.value_at_quantile(0.99) as f64 / 1e3;
    r.p999_us = hist.value_at_quantile(0.999) as f64 / 1e3;
    r.max_us = hist.max() as f64 / 1e3;
    r.write_amp = r.disk_write_bytes as f64 / r.user_bytes.max(1) as f64;
    Ok(r)
}

#[cfg(all(test, feature = "cairn"))]
mod tests {
    use super::*;
    use crate::engine::{CompressionArg, Durability};
    use crate::stream::{Spec, Workload, ensure_stream};

    /// Small settings (1 MiB memtable, so the runs flush and compact).
    fn small_settings(load_batch: u32) -> Settings {
        Settings {
            cache_mb: 8,
            memtable_mb: 1,
            block_size: 4096,
            bloom_bits: 10,
            compression: CompressionArg::Lz4,
            bg_threads: 1,
            durability: Durability::Nosync,
            load_batch,
        }
    }

    #[test]
    fn run_one_on_cairn() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec { workload: Workload::E, records: 3_000, ops: 2_000, value_size: 64, seed: 5 };
        let path = ensure_stream(&spec, dir.path()).unwrap();
        let r = run_one("cairn", &path, &dir.path().join("db"), 2, &small_settings(1), Phases::Both).unwrap();
        assert_eq!(r.engine, "cairn");
        assert_eq!(r.scans + r.writes, 2_000);
        // Scans start at existing keys and return at least that key.
        assert!(r.scan_keys >= r.scans);
        assert!(r.space_bytes > 0 && r.ops_per_sec > 0.0 && r.p99_us >= r.p50_us);
        let line = serde_json::to_string(&r).unwrap();
        let back: RunResult = serde_json::from_str(&line).unwrap();
        assert_eq!(back.scan_keys, r.scan_keys);
    }

    /// A batched load writes every record, the last short batch included, in every engine
    /// built in: C (reads only) then finds every key it reads, and the bytes loaded match a
    /// load of one insert at a time.
    #[test]
    fn batched_loads_write_every_record() {
        let dir = tempfile::tempdir().unwrap();
        // 3,001 records: batches of 64 leave a short last batch on each of the two threads.
        let spec = Spec { workload: Workload::C, records: 3_001, ops: 2_000, value_size: 100, seed: 9 };
        let path = ensure_stream(&spec, dir.path()).unwrap();
        for engine in crate::engine::compiled_engines() {
            let mut user_bytes = Vec::new();
            for load_batch in [1, 64] {
                let r = run_one(engine, &path, &dir.path().join(engine), 2, &small_settings(load_batch), Phases::Both)
                    .unwrap();
                assert_eq!((r.reads, r.reads_found), (2_000, 2_000), "{engine}, load batch {load_batch}");
                user_bytes.push(r.user_bytes);
            }
            assert_eq!(user_bytes[0], user_bytes[1], "{engine}");
        }
    }

    /// A database loaded once and closed, copied, then run on (every engine built in): the run
    /// finds every key, the loaded database is left as it was, and the merged result counts
    /// the load's bytes once.
    #[test]
    fn runs_on_a_copy_of_a_loaded_database() {
        let dir = tempfile::tempdir().unwrap();
        let spec = Spec { workload: Workload::C, records: 2_500, ops: 1_500, value_size: 100, seed: 3 };
        let path = ensure_stream(&spec, dir.path()).unwrap();
        let s = small_settings(1);
        for engine in crate::engine::compiled_engines() {
            let loaded = dir.path().join(format!("{engine}-loaded"));
            let load = run_one(engine, &path, &loaded, 1, &s, Phases::LoadOnly).unwrap();
            assert_eq!((load.ops, load.reads, load.ops_per_sec), (0, 0, 0.0), "{engine}");
            assert!(load.load_ops_per_sec > 0.0 && load.user_bytes > 0, "{engine}");
            let before = measure::disk_usage(&loaded).unwrap();
            for threads in [1, 2] {
                let copy = dir.path().join(format!("{engine}-{threads}"));
                measure::copy_tree(&loaded, &copy).unwrap();
                measure::evict_tree(&copy).unwrap();
                let mut r = run_one(engine, &path, &copy, threads, &s, Phases::RunOnly).unwrap();
                assert_eq!((r.reads, r.reads_found), (1_500, 1_500), "{engine} t{threads}");
                assert_eq!((r.load_secs, r.user_bytes), (0.0, 0), "{engine}: C writes nothing");
                r.add_load(&load);
                assert_eq!(r.user_bytes, load.user_bytes);
                assert_eq!(r.load_ops_per_sec, load.load_ops_per_sec);
            }
            assert_eq!(measure::disk_usage(&loaded).unwrap(), before, "{engine}: the loaded database changed");
            // A run with nothing loaded is refused rather than run on an empty database.
            let err = run_one(engine, &path, &dir.path().join("nothing"), 1, &s, Phases::RunOnly).unwrap_err();
            assert!(err.to_string().contains("no loaded database"), "{err:#}");
        }
    }
}
