//! `cairn-bench mixed`: many clients doing a mixed add/search/ls load on a `cairn serve`
//! daemon, and SQLite FTS5 doing the same load side by side in the same run.
//!
//! Every cell (engine, client count, mix, repetition) runs in a child process of its own
//! (`cairn-bench mixed-run-one`) on a fresh directory: for cairn the child starts `cairn serve`
//! and each client thread talks to it over its own connection to the Unix socket; for SQLite each
//! client thread has its own connection to one database file (WAL, `synchronous=FULL`, a
//! 60 s busy timeout, one `BEGIN IMMEDIATE` transaction per add). Both get the same 1 KiB
//! documents (SciFact abstracts behind a unique first line), the same queries (SciFact claims
//! as bags of words, top 10 by BM25 with snippets) and the same listings (every document the
//! client added, by the client's tag, sorted by path). The child prints one JSON line per round
//! (`RoundResult`); the parent writes them to `results.jsonl`, prints medians as a markdown table
//! and writes them to `summary.json`.
//!
//! Failures (errors, and listings missing acknowledged adds: see `mixed_load`) are counted and
//! reported, never dropped. `--long` runs rounds into one daemon (one database) instead, to show whether
//! throughput and memory stay flat as the store grows.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Serialize;

use crate::mixed_load::{Cell, OpStats, RoundResult, mix_name, parse_mix};
use crate::report::median;

/// `cairn-bench mixed` options.
#[derive(Args)]
pub struct MixedArgs {
    /// The `cairn` binary the daemon runs from.
    #[arg(long, default_value = "target/release/cairn")]
    cairn: PathBuf,
    /// Engines: cairn, sqlite.
    #[arg(long, value_delimiter = ',', default_value = "cairn,sqlite")]
    engines: Vec<String>,
    /// Client counts.
    #[arg(long, value_delimiter = ',', default_value = "16,64")]
    clients: Vec<usize>,
    /// Mixes, as add/search/ls percentages.
    #[arg(long, value_delimiter = ',', default_value = "60/30/10,10/80/10")]
    mix: Vec<String>,
    /// Operations per client.
    #[arg(long, default_value_t = 200)]
    ops: usize,
    /// Documents added (untimed, in batches of 100) before the clients start.
    #[arg(long, default_value_t = 1000)]
    preload: usize,
    /// Repetitions (engines rotated in each); medians are reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Instead of the client counts and mixes: `--rounds` rounds of `--round-clients` clients
    /// x `--round-ops` operations of `--round-mix` into one daemon (one database), nothing
    /// preloaded.
    #[arg(long)]
    long: bool,
    /// Rounds of the long run.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Clients per round of the long run.
    #[arg(long, default_value_t = 64)]
    round_clients: usize,
    /// Operations per client per round of the long run.
    #[arg(long, default_value_t = 200)]
    round_ops: usize,
    /// The long run's mix (add/search/ls percentages).
    #[arg(long, default_value = "100/0/0")]
    round_mix: String,
    /// BEIR corpus whose abstracts and queries make the documents and searches.
    #[arg(long, default_value = "../shared/data/ir")]
    corpus: PathBuf,
    /// Scratch directory and results (`results.jsonl`, `summary.json`, `long.jsonl`).
    #[arg(long, default_value = "target/cairn-bench/mixed")]
    dir: PathBuf,
}

/// Runs `cell` in a child process (`cairn-bench mixed-run-one`) and collects its rounds, printing
/// each to stderr as it ends.
fn child(exe: &Path, cell: &Cell, label: &str) -> Result<Vec<RoundResult>> {
    use std::io::BufRead as _;
    // Write back the previous run's dirty pages now, not during this one.
    let _ = Command::new("sync").status();
    let mut c = Command::new(exe)
        .arg("mixed-run-one")
        .arg("--cell")
        .arg(serde_json::to_string(cell)?)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let mut out = Vec::new();
    let stdout = c.stdout.take().context("child stdout")?;
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line?;
        if !line.trim_start().starts_with('{') {
            continue;
        }
        let r: RoundResult = serde_json::from_str(&line).with_context(|| format!("bad JSON line: {line}"))?;
        eprintln!(
            "{label} {} {} clients {} round {}: {:.0} ops/s, add p95 {:.2} ms, search p95 {:.2} ms, failures {}, RSS {:.0} MiB (peak {:.0}){}",
            r.engine,
            r.clients,
            r.mix,
            r.round,
            r.ops_per_sec,
            r.ops[0].p95_ms,
            r.ops[1].p95_ms,
            r.failures(),
            r.rss_mib,
            r.peak_rss_mib,
            r.first_error.as_deref().map(|e| format!("; first error: {e}")).unwrap_or_default()
        );
        out.push(r);
    }
    let status = c.wait()?;
    if !status.success() {
        bail!("{} {} clients {}: child exited with {status}", cell.engine, cell.clients, mix_name(cell.mix));
    }
    if out.len() != cell.rounds {
        bail!("{}: {} of {} rounds reported", cell.engine, out.len(), cell.rounds);
    }
    Ok(out)
}

/// Medians of one (clients, mix, engine) over repetitions.
#[derive(Debug, Serialize)]
struct Row {
    clients: usize,
    mix: String,
    engine: String,
    runs: usize,
    ops_per_sec: f64,
    ops_per_sec_runs: Vec<f64>,
    /// Per operation, medians over runs of each figure; failures summed over runs.
    ops: [OpStats; 3],
    failures_all_runs: u64,
    /// The highest peak RSS of the runs.
    peak_rss_mib: f64,
    first_error: Option<String>,
}

fn rows(results: &[RoundResult], engines: &[String]) -> Vec<Row> {
    let mut keys: Vec<(usize, String)> = Vec::new();
    for r in results {
        if !keys.contains(&(r.clients, r.mix.clone())) {
            keys.push((r.clients, r.mix.clone()));
        }
    }
    let mut out = Vec::new();
    for (clients, mix) in keys {
        for e in engines {
            let runs: Vec<&RoundResult> =
                results.iter().filter(|r| r.clients == clients && r.mix == mix && &r.engine == e).collect();
            if runs.is_empty() {
                continue;
            }
            let med = |f: &dyn Fn(&RoundResult) -> f64| median(runs.iter().map(|r| f(r)).collect());
            let ops = std::array::from_fn(|k| OpStats {
                ok: median(runs.iter().map(|r| r.ops[k].ok as f64).collect()) as u64,
                failures: runs.iter().map(|r| r.ops[k].failures).sum(),
                p50_ms: med(&|r| r.ops[k].p50_ms),
                p95_ms: med(&|r| r.ops[k].p95_ms),
                p99_ms: med(&|r| r.ops[k].p99_ms),
                mean_results: med(&|r| r.ops[k].mean_results),
            });
            out.push(Row {
                clients,
                mix: mix.clone(),
                engine: e.clone(),
                runs: runs.len(),
                ops_per_sec: med(&|r| r.ops_per_sec),
                ops_per_sec_runs: runs.iter().map(|r| r.ops_per_sec).collect(),
                ops,
                failures_all_runs: runs.iter().map(|r| r.failures()).sum(),
                peak_rss_mib: runs.iter().map(|r| r.peak_rss_mib).fold(0.0, f64::max),
                first_error: runs.iter().find_map(|r| r.first_error.clone()),
            });
        }
    }
    out
}

/// `p50 / p95 / p99` in ms, or `-` for an operation the mix does not have.
fn lat(o: &OpStats) -> String {
    if o.ok == 0 && o.failures == 0 {
        return "-".into();
    }
    format!("{:.2} / {:.2} / {:.2}", o.p50_ms, o.p95_ms, o.p99_ms)
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| clients | add/search/ls % | engine | ops/s | cairn / SQLite | add ms p50 / p95 / p99 | search ms p50 / p95 / p99 | ls ms p50 / p95 / p99 | failures | peak RSS MiB | hits / search |\n\
         |---:|---|---|---:|---:|---|---|---|---:|---:|---:|\n",
    );
    for r in rows {
        let peer = rows.iter().find(|p| p.clients == r.clients && p.mix == r.mix && p.engine == "sqlite");
        let ratio = match peer {
            Some(p) if r.engine != "sqlite" && p.ops_per_sec > 0.0 => {
                format!("**{:.2}**", r.ops_per_sec / p.ops_per_sec)
            }
            _ => String::new(),
        };
        s += &format!(
            "| {} | {} | {} | {:.0} | {ratio} | {} | {} | {} | {} | {:.0} | {} |\n",
            r.clients,
            r.mix,
            r.engine,
            r.ops_per_sec,
            lat(&r.ops[0]),
            lat(&r.ops[1]),
            lat(&r.ops[2]),
            r.failures_all_runs,
            r.peak_rss_mib,
            if r.ops[1].ok > 0 { format!("{:.1}", r.ops[1].mean_results) } else { "-".into() },
        );
    }
    s
}

fn long_table(results: &[RoundResult], engines: &[String]) -> String {
    let mut s = String::from("| round |");
    let mut rule = String::from("|---:|");
    for e in engines {
        s +=
            &format!(" {e} ops/s | {e} add ms p50 / p95 / p99 | {e} failures | {e} RSS after MiB | {e} peak RSS MiB |");
        rule += "---:|---|---:|---:|---:|";
    }
    s += "\n";
    s += &rule;
    s += "\n";
    let rounds = results.iter().map(|r| r.round + 1).max().unwrap_or(0);
    for round in 0..rounds {
        s += &format!("| {} |", round + 1);
        for e in engines {
            match results.iter().find(|r| r.round == round && &r.engine == e) {
                Some(r) => {
                    s += &format!(
                        " {:.0} | {} | {} | {:.0} | {:.0} |",
                        r.ops_per_sec,
                        lat(&r.ops[0]),
                        r.failures(),
                        r.rss_mib,
                        r.peak_rss_mib
                    )
                }
                None => s += " | | | | |",
            }
        }
        s += "\n";
    }
    for e in engines {
        let of: Vec<&RoundResult> = results.iter().filter(|r| &r.engine == e).collect();
        if let (Some(first), Some(last)) = (of.first(), of.last()) {
            s += &format!(
                "\n{e}: last round / first round {:.2}; RSS after the first round {:.0} MiB, after the last {:.0} MiB{}",
                last.ops_per_sec / first.ops_per_sec,
                first.rss_mib,
                last.rss_mib,
                if e == "sqlite" {
                    format!(" (the benchmark process, {:.0} MiB before the database opened)", first.base_rss_mib)
                } else {
                    String::new()
                }
            );
        }
    }
    s + "\n"
}

/// Runs the benchmark.
pub fn run(a: MixedArgs) -> Result<()> {
    let exe = std::env::current_exe()?;
    let mut engines: Vec<String> = Vec::new();
    for e in &a.engines {
        let e = e.trim().to_ascii_lowercase();
        if e != "cairn" && e != "sqlite" {
            bail!("unknown engine {e} (cairn, sqlite)");
        }
        if !engines.contains(&e) {
            engines.push(e);
        }
    }
    if engines.iter().any(|e| e == "cairn") && !a.cairn.exists() {
        bail!("{} does not exist (cargo build --release -p cairn-cli)", a.cairn.display());
    }
    std::fs::create_dir_all(&a.dir)?;
    let cairn = std::fs::canonicalize(&a.cairn).unwrap_or_else(|_| a.cairn.clone());
    let cell = |engine: &str, clients: usize, mix: [u32; 3], ops: usize, rounds: usize, preload: usize| Cell {
        engine: engine.to_string(),
        clients,
        mix,
        ops,
        rounds,
        preload,
        corpus: a.corpus.clone(),
        cairn: cairn.clone(),
        dir: a.dir.join("data").join(engine),
    };
    let settings = format!(
        "1 KiB documents (SciFact abstracts behind a unique first line), each add durable and tagged with its \
         client's tag; search: a SciFact claim as a bag of words, top 10 by BM25 with snippets; ls: every \
         document with the client's tag, sorted by path. cairn: `cairn serve` ({}), one Unix-socket \
         connection per client. SQLite {}: one connection per client thread, WAL, synchronous=FULL, \
         busy_timeout 60 s, FTS5 porter unicode61, one BEGIN IMMEDIATE transaction per add, tags in a \
         (tag, doc) table. {} cores.",
        cairn.display(),
        rusqlite::version(),
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    if a.long {
        let mix = parse_mix(&a.round_mix)?;
        let path = a.dir.join("long.jsonl");
        let mut file = std::fs::File::create(&path)?;
        let mut all = Vec::new();
        for e in &engines {
            let c = cell(e, a.round_clients, mix, a.round_ops, a.rounds, 0);
            match child(&exe, &c, "[long]") {
                Ok(rs) => {
                    for r in rs {
                        writeln!(file, "{}", serde_json::to_string(&r)?)?;
                        all.push(r);
                    }
                }
                Err(err) => eprintln!("[long] {e}: FAILED: {err:#}"),
            }
        }
        println!(
            "## Long run: {} rounds of {} clients x {} ops ({} add/search/ls) into one daemon (one database), nothing preloaded\n",
            a.rounds, a.round_clients, a.round_ops, a.round_mix
        );
        println!("{settings}\n");
        print!("{}", long_table(&all, &engines));
        println!("\nraw results: {}", path.display());
        return Ok(());
    }
    let mixes: Vec<[u32; 3]> = a.mix.iter().map(|m| parse_mix(m)).collect::<Result<_>>()?;
    let path = a.dir.join("results.jsonl");
    let mut file = std::fs::File::create(&path)?;
    let mut all = Vec::new();
    let mut failed = Vec::new();
    let reps = a.repeat.max(1);
    for rep in 0..reps {
        for &n in &a.clients {
            for &m in &mixes {
                let mut order = engines.clone();
                order.rotate_left(rep % engines.len());
                for e in &order {
                    match child(&exe, &cell(e, n, m, a.ops, 1, a.preload), &format!("[{}/{reps}]", rep + 1)) {
                        Ok(rs) => {
                            for mut r in rs {
                                r.rep = rep;
                                writeln!(file, "{}", serde_json::to_string(&r)?)?;
                                all.push(r);
                            }
                        }
                        Err(err) => {
                            eprintln!("[{}/{reps}] {e} {n} clients {}: FAILED: {err:#}", rep + 1, mix_name(m));
                            failed.push(format!("{e} {n} clients {}: {err:#}", mix_name(m)));
                        }
                    }
                }
            }
        }
    }
    let rows = rows(&all, &engines);
    std::fs::write(a.dir.join("summary.json"), serde_json::to_string_pretty(&rows)?)?;
    println!(
        "## Mixed load: {} ops per client, {} documents preloaded, medians of {reps} runs (engines rotated)\n",
        a.ops, a.preload
    );
    println!("{settings}\n");
    print!("{}", table(&rows));
    println!(
        "\nops/s counts successful operations; failures are summed over all runs (errors, and ls results \
         missing a document whose add was acknowledged); peak RSS is the highest of the runs (cairn: the \
         daemon; SQLite: the benchmark process with its client threads); raw results: {}, medians: {}",
        path.display(),
        a.dir.join("summary.json").display()
    );
    for r in rows.iter().filter(|r| r.first_error.is_some()) {
        println!(
            "first error, {} {} clients {}: {}",
            r.engine,
            r.clients,
            r.mix,
            r.first_error.as_deref().unwrap_or("")
        );
    }
    for f in &failed {
        println!("failed run: {f}");
    }
    Ok(())
}
