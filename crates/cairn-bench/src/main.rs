//! `cairn-bench`: whole-workload benchmarks of cairn against other embedded engines.
//!
//! `cairn-bench ycsb` generates each YCSB workload's op stream once, then, for every repetition,
//! workload, thread count and engine (engines interleaved, their order rotated per repetition),
//! re-executes itself as `cairn-bench ycsb-run-one` (or runs the Go peer program for Pebble and
//! Badger) on a fresh directory, so every engine is measured in its own process; it collects one
//! JSON line per run and prints medians and cairn/peer ratios.

mod daemon;
mod docs_bench;
mod engine;
mod engines;
mod generator;
mod grep_bench;
mod ir;
mod measure;
mod mixed_bench;
mod mixed_load;
mod report;
mod runner;
mod semantic_bench;
mod serve_bench;
mod stream;
mod tables_bench;
mod trees_bench;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};

use engine::{GO_ENGINES, Settings, compiled_engines};
use runner::{Phases, RunResult};
use stream::{Spec, Workload};

#[derive(Parser)]
#[command(name = "cairn-bench", version, about = "Benchmarks cairn against other embedded engines")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// YCSB workloads A-G on cairn and peer engines, side by side.
    Ycsb(YcsbArgs),
    /// Runs one engine on one stream and prints one JSON line (used by `ycsb`).
    #[command(hide = true)]
    YcsbRunOne(RunOneArgs),
    /// The document-memory benchmarks (YAMS set, search and grep on a source tree) against
    /// SQLite FTS5 and ripgrep.
    Docs(docs_bench::DocsArgs),
    /// Grep through the n-gram index against ripgrep over the same files, on a source tree.
    Grep(grep_bench::GrepArgs),
    /// Retrieval quality (nDCG@10, Recall@100, MRR@10) of the document memory on a BEIR-format
    /// collection.
    Ir(ir::IrArgs),
    /// What an embedding model costs: adds of 1 KB documents with and without one, and search
    /// latency at a multiple of a collection's size.
    Semantic(semantic_bench::SemanticArgs),
    /// The daemon: framing against a plain length-prefixed exchange, 1-64 clients adding
    /// documents.
    Serve(serve_bench::ServeArgs),
    /// Many clients doing a mixed add/search/ls load on the daemon, against SQLite FTS5 doing the
    /// same load (`--long`: rounds into one daemon, throughput and memory per round).
    Mixed(mixed_bench::MixedArgs),
    /// Runs one engine of `mixed` and prints one JSON line per round (used by `mixed`).
    #[command(hide = true)]
    MixedRunOne {
        /// The cell, as JSON.
        #[arg(long)]
        cell: String,
    },
    /// Record tables (create, read, update, delete, 70/30 mix with 0-2 indexes, index lookup,
    /// range scan, filter evaluation) against SQLite and PostgreSQL.
    Tables(tables_bench::TablesArgs),
    /// Directory snapshots of real trees (first ingest, unchanged re-ingest, a second project
    /// into the same repository, restore, repository size) against restic, borg and git.
    Trees(trees_bench::TreesArgs),
    /// Prints the table again from a `results.jsonl` written by `ycsb`.
    YcsbReport {
        /// The raw results (one JSON line per run).
        file: PathBuf,
    },
}

#[derive(Args)]
struct YcsbArgs {
    /// Workloads: letters a-g, comma-separated, or `all`.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    workload: Vec<String>,
    /// Records loaded before each run.
    #[arg(long, default_value_t = 1_000_000)]
    records: u64,
    /// Ops in each run phase.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 256)]
    value_size: u32,
    /// Client threads, comma-separated for several (e.g. 1,2).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<usize>,
    /// Engines, comma-separated, or `all` (every built-in engine, plus pebble and badger when
    /// the Go peer program is built).
    #[arg(long, value_delimiter = ',', default_value = "all")]
    engines: Vec<String>,
    /// Repetitions (engines interleaved within each); the table shows medians.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Where databases, streams and raw results live.
    #[arg(long, default_value = "target/cairn-bench")]
    dir: PathBuf,
    #[command(flatten)]
    settings: Settings,
    /// Directory to write the generated op stream files to (for external engines); default
    /// `<dir>/streams`.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Only generate the streams, run nothing.
    #[arg(long)]
    generate_only: bool,
    /// PRNG seed of the streams.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// The Go peer program (Pebble, Badger); default `cairnbench-peers` next to this binary.
    #[arg(long, env = "CAIRN_BENCH_PEERS")]
    peers: Option<PathBuf>,
    /// `ENGINE=PATH` (repeatable): run the in-process engine ENGINE from PATH, another
    /// cairn-bench binary built with its feature, instead of from this one. bench/ycsb.sh runs
    /// fjall so: its lsm-tree turns on lz4_flex's safe (slower) encoder for every crate of the
    /// binary it is in, cairn-kv's included.
    #[arg(long = "engine-exe", value_parser = parse_engine_exe)]
    engine_exe: Vec<(String, PathBuf)>,
    /// Load each engine's database once, close it, and start every run from a byte copy of it,
    /// with the copy's and the original's pages dropped from the page cache (every run starts
    /// cold). Every workload of a run has the same load phase (records, value size, seed), so
    /// one load serves them all; runs larger than the cache then cost a copy instead of a load
    /// (10M records into redb take 8.5-11 minutes here, into sled up to 26). Needs disk for
    /// every engine's loaded database and one run's copy (removed after its run). The load
    /// figures are the single load's; write amplification counts the load's writes and the
    /// run's (not the copy's).
    #[arg(long)]
    load_once: bool,
}

/// Parses `ENGINE=PATH` for `--engine-exe`.
fn parse_engine_exe(s: &str) -> std::result::Result<(String, PathBuf), String> {
    match s.split_once('=') {
        Some((e, p)) if !e.trim().is_empty() && !p.is_empty() => {
            let engine = e.trim().to_ascii_lowercase();
            if GO_ENGINES.contains(&engine.as_str()) {
                return Err(format!("{engine} runs in the Go peer program (--peers), not from a cairn-bench binary"));
            }
            Ok((engine, PathBuf::from(p)))
        }
        _ => Err(format!("expected ENGINE=PATH, got {s:?}")),
    }
}

#[derive(Args)]
struct RunOneArgs {
    /// Engine name.
    #[arg(long)]
    engine: String,
    /// Stream file.
    #[arg(long)]
    stream: PathBuf,
    /// Database directory (removed first).
    #[arg(long)]
    db: PathBuf,
    /// Client threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Which phases to run.
    #[arg(long, value_enum, default_value_t = Phases::Both)]
    phases: Phases,
    #[command(flatten)]
    settings: Settings,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Ycsb(a) => ycsb(a),
        Cmd::YcsbRunOne(a) => run_one(a),
        Cmd::YcsbReport { file } => report_file(&file),
        Cmd::Ir(a) => ir::run(a),
        Cmd::Semantic(a) => semantic_bench::run(a),
        Cmd::Docs(a) => docs_bench::run(a),
        Cmd::Grep(a) => grep_bench::run(a),
        Cmd::Serve(a) => serve_bench::run(a),
        Cmd::Mixed(a) => mixed_bench::run(a),
        Cmd::MixedRunOne { cell } => mixed_load::run_one(&cell),
        Cmd::Tables(a) => tables_bench::run(a),
        Cmd::Trees(a) => trees_bench::run_trees(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cairn-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run_one(a: RunOneArgs) -> Result<()> {
    let r = runner::run_one(&a.engine, &a.stream, &a.db, a.threads, &a.settings, a.phases)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&r)?)?;
    Ok(())
}

fn report_file(file: &Path) -> Result<()> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let mut results: Vec<RunResult> = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        results.push(serde_json::from_str(line).with_context(|| format!("{}:{}", file.display(), i + 1))?);
    }
    let mut engines: Vec<String> = Vec::new();
    for r in &results {
        if !engines.contains(&r.engine) {
            engines.push(r.engine.clone());
        }
    }
    // cairn first, the others in first-seen order.
    engines.sort_by_key(|e| e != "cairn");
    let mut out = std::io::stdout().lock();
    write!(out, "{}", report::table(&report::summarize(&results, &engines), "cairn"))?;
    Ok(())
}

fn parse_workloads(list: &[String]) -> Result<Vec<Workload>> {
    let mut v = Vec::new();
    for w in list {
        let w = w.trim();
        if w.eq_ignore_ascii_case("all") {
            v.extend(Workload::ALL);
            continue;
        }
        let mut chars = w.chars();
        match (chars.next().and_then(Workload::from_letter), chars.next()) {
            (Some(wl), None) => v.push(wl),
            _ => bail!("unknown workload {w:?} (a-g or all)"),
        }
    }
    v.sort();
    v.dedup();
    Ok(v)
}

fn peers_path(a: &YcsbArgs) -> Option<PathBuf> {
    if let Some(p) = &a.peers {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.join("cairnbench-peers"))
}

fn resolve_engines(a: &YcsbArgs, peers: Option<&Path>) -> Result<Vec<String>> {
    let mut built: Vec<&str> = compiled_engines();
    for (e, path) in &a.engine_exe {
        if !path.exists() {
            bail!("--engine-exe {e}={}: no such file", path.display());
        }
        if !built.contains(&e.as_str()) {
            built.push(e.as_str());
        }
    }
    let have_peers = peers.is_some_and(Path::exists);
    let mut v: Vec<String> = Vec::new();
    for e in &a.engines {
        let e = e.trim().to_ascii_lowercase();
        if e == "all" {
            v.extend(built.iter().map(|s| s.to_string()));
            if have_peers {
                v.extend(GO_ENGINES.iter().map(|s| s.to_string()));
            } else {
                eprintln!(
                    "note: the Go peer program is not built (bench/build-go-peers.sh): pebble and badger skipped"
                );
            }
        } else if GO_ENGINES.contains(&e.as_str()) {
            if have_peers {
                v.push(e);
            } else {
                eprintln!(
                    "note: {e} skipped: the Go peer program {} does not exist (run bench/build-go-peers.sh)",
                    peers.map(|p| p.display().to_string()).unwrap_or_default()
                );
            }
        } else if built.contains(&e.as_str()) {
            v.push(e);
        } else {
            bail!("engine {e} is not built into this binary (built: {built:?}; Go peers: {GO_ENGINES:?})");
        }
    }
    let mut seen = std::collections::HashSet::new();
    v.retain(|e| seen.insert(e.clone()));
    if v.is_empty() {
        bail!("no engine to run");
    }
    Ok(v)
}

/// Runs one engine in a child process and parses the JSON line it prints last.
fn run_child(
    exe: &Path,
    engine: &str,
    stream: &Path,
    db: &Path,
    threads: usize,
    s: &Settings,
    phases: Phases,
) -> Result<RunResult> {
    // Write back the previous run's dirty pages now, not during this run.
    let _ = Command::new("sync").status();
    let mut cmd = Command::new(exe);
    if !GO_ENGINES.contains(&engine) {
        cmd.arg("ycsb-run-one");
    }
    cmd.arg("--engine")
        .arg(engine)
        .arg("--stream")
        .arg(stream)
        .arg("--db")
        .arg(db)
        .arg("--threads")
        .arg(threads.to_string())
        .arg("--phases")
        .arg(phases.as_str())
        .args(s.to_args())
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    let out = cmd.output().with_context(|| format!("run {}", exe.display()))?;
    if phases != Phases::LoadOnly {
        let _ = std::fs::remove_dir_all(db);
    }
    if !out.status.success() {
        bail!("{engine}: child exited with {}", out.status);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().rev().find(|l| l.trim_start().starts_with('{')).context("no JSON line from the child")?;
    serde_json::from_str(line).with_context(|| format!("bad JSON line from {engine}: {line}"))
}

/// Replaces `db` with a copy of the loaded database at `loaded`, then drops both from the page
/// cache, so the run starts as cold as the first read of a database that was never cached.
fn copy_loaded(loaded: &Path, db: &Path) -> Result<()> {
    if db.exists() {
        std::fs::remove_dir_all(db).with_context(|| format!("remove {}", db.display()))?;
    }
    measure::copy_tree(loaded, db)?;
    measure::evict_tree(db)?;
    measure::evict_tree(loaded)?;
    Ok(())
}

fn ycsb(a: YcsbArgs) -> Result<()> {
    let workloads = parse_workloads(&a.workload)?;
    let stream_dir = a.out.clone().unwrap_or_else(|| a.dir.join("streams"));
    let mut streams = Vec::new();
    for &w in &workloads {
        let spec = Spec { workload: w, records: a.records, ops: a.ops, value_size: a.value_size, seed: a.seed };
        let t = Instant::now();
        let path = stream::ensure_stream(&spec, &stream_dir)?;
        eprintln!("stream {} ({:.1}s)", path.display(), t.elapsed().as_secs_f64());
        streams.push((w, path));
    }
    if a.generate_only {
        return Ok(());
    }
    let peers = peers_path(&a);
    let engines = resolve_engines(&a, peers.as_deref())?;
    let self_exe = std::env::current_exe()?;
    let db_root = a.dir.join("db");
    std::fs::create_dir_all(&db_root)?;
    let results_path = a.dir.join("results.jsonl");
    let mut results_file = std::fs::File::create(&results_path)?;

    let mut threads = a.threads.clone();
    threads.retain(|&t| t > 0);
    threads.dedup();
    if threads.is_empty() {
        bail!("--threads must name at least one positive count");
    }
    let exe_of = |e: &str| -> Result<PathBuf> {
        if GO_ENGINES.contains(&e) {
            return peers.clone().context("no Go peer program");
        }
        Ok(a.engine_exe.iter().find(|(name, _)| name == e).map_or_else(|| self_exe.clone(), |(_, p)| p.clone()))
    };
    let mut results: Vec<RunResult> = Vec::new();
    let mut failures = Vec::new();

    // With --load-once: every engine's database, loaded once (with the most threads asked) and
    // closed, and what that load measured.
    let loaded_root = a.dir.join("loaded");
    let mut loads: Vec<(String, RunResult)> = Vec::new();
    if a.load_once {
        let t = *threads.iter().max().unwrap_or(&1);
        for e in &engines {
            let exe = exe_of(e)?;
            let db = loaded_root.join(e);
            let r = run_child(&exe, e, &streams[0].1, &db, t, &a.settings, Phases::LoadOnly)
                .with_context(|| format!("load {e} once"))?;
            eprintln!(
                "[load] t{t} {e:<7} {:>9.0} ops/s  {:.0} s  {:.1} GB on disk",
                r.load_ops_per_sec,
                r.load_secs,
                r.space_bytes as f64 / 1e9
            );
            loads.push((e.clone(), r));
        }
    }
    for rep in 0..a.repeat.max(1) {
        for (w, path) in &streams {
            for &t in &threads {
                let mut order = engines.clone();
                order.rotate_left(rep % engines.len());
                for e in &order {
                    let exe = exe_of(e)?;
                    let db = db_root.join(e);
                    let load = loads.iter().find(|(name, _)| name == e).map(|(_, r)| r);
                    let outcome = match load {
                        None => run_child(&exe, e, path, &db, t, &a.settings, Phases::Both),
                        Some(load) => {
                            let r = copy_loaded(&loaded_root.join(e), &db)
                                .and_then(|()| run_child(&exe, e, path, &db, t, &a.settings, Phases::RunOnly))
                                .map(|mut r| {
                                    r.add_load(load);
                                    r
                                });
                            // The run measured its own space; its copy goes, so that the disk holds
                            // one run's copy besides the loaded databases, not one per engine.
                            let _ = std::fs::remove_dir_all(&db);
                            r
                        }
                    };
                    match outcome {
                        Ok(r) => {
                            eprintln!(
                                "[{}/{}] {} t{} {:<7} {:>10.0} ops/s  p99 {:>8.1} µs  load {:>9.0} ops/s{}",
                                rep + 1,
                                a.repeat.max(1),
                                w.letter().to_ascii_uppercase(),
                                t,
                                e,
                                r.ops_per_sec,
                                r.p99_us,
                                r.load_ops_per_sec,
                                if r.max_us > 0.0 { format!("  max {:.1} ms", r.max_us / 1e3) } else { String::new() }
                            );
                            writeln!(results_file, "{}", serde_json::to_string(&r)?)?;
                            results.push(r);
                        }
                        Err(err) => {
                            eprintln!("[{}/{}] {} t{} {e}: FAILED: {err:#}", rep + 1, a.repeat.max(1), w.letter(), t);
                            failures.push(format!("{} t{t} {e}: {err:#}", w.letter()));
                        }
                    }
                }
            }
        }
    }

    if a.load_once {
        let _ = std::fs::remove_dir_all(&loaded_root);
    }

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "YCSB: {} records x {} B values, {} ops per run, threads {:?}, {} repetition(s), seed {}; {} cores",
        a.records,
        a.value_size,
        a.ops,
        threads,
        a.repeat.max(1),
        a.seed,
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    )?;
    writeln!(out, "asked of every engine: {}", a.settings.describe())?;
    if a.load_once {
        writeln!(
            out,
            "loaded once per engine: every run started from a copy of the engine's loaded and closed database, \
             with its pages dropped from the page cache; the load columns are that one load's"
        )?;
    }
    for w in &workloads {
        writeln!(out, "  {}: {}", w.letter().to_ascii_uppercase(), w.describe())?;
    }
    writeln!(out, "engine settings:")?;
    for e in &engines {
        if let Some(r) = results.iter().find(|r| &r.engine == e) {
            writeln!(out, "  {e}: {}", r.settings)?;
        }
    }
    writeln!(out)?;
    let rows = report::summarize(&results, &engines);
    write!(out, "{}", report::table(&rows, "cairn"))?;
    writeln!(
        out,
        "\nmedians over repetitions; spread = (max - min) / median of ops/s; cairn/peer ops/s > 1 means cairn is faster, cairn/peer p99 < 1 means cairn's p99 is lower; \
         write amp = bytes the process sent to storage (load + run + close) / key+value bytes written; raw results: {}",
        results_path.display()
    )?;
    if !failures.is_empty() {
        writeln!(out, "failed runs:")?;
        for f in &failures {
            writeln!(out, "  {f}")?;
        }
    }
    Ok(())
}

/// The document memory of data directory `dir`, opened through the application layer (which
/// owns the directory's layout).
pub fn open_memory(dir: &std::path::Path) -> anyhow::Result<cairn_docs::Memory> {
    Ok(cairn_app::Cairn::open(dir)?.memory(true)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_exe_takes_engine_equals_path() {
        assert_eq!(
            parse_engine_exe("Fjall=/x/cairn-bench").unwrap(),
            ("fjall".into(), PathBuf::from("/x/cairn-bench"))
        );
        assert!(parse_engine_exe("fjall").is_err());
        assert!(parse_engine_exe("=/x").is_err());
        assert!(parse_engine_exe("fjall=").is_err());
        assert!(parse_engine_exe("pebble=/x").unwrap_err().contains("Go peer"));
    }
}
