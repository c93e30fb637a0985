//! `cairn-bench grep`: grep through the n-gram index against ripgrep over the same files, on a
//! source tree (Debian's linux-source in `bench/docs.sh`).
//!
//! The tree is added to a fresh memory 2,000 files at a time (timed: the ingest, index commit
//! included). Then, for each pattern, with warm caches (one untimed run first), medians of
//! `--repeat` runs of: cairn's grep through the index, cairn's grep reading every document
//! (`scan_all`), and `rg -c --no-ignore --hidden` over the files. The indexed and the full grep
//! must find the same lines (the run fails otherwise); ripgrep's count is printed beside them
//! when it differs (ripgrep also reads text that is not UTF-8, which cairn stores as binary).
//! Prints the index's size against the stored (compressed) content.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use cairn_docs::{AddOptions, GrepOptions, Memory, NewDoc};
use clap::Args;

#[derive(Args, Debug)]
pub struct GrepArgs {
    /// The source tree.
    #[arg(long)]
    tree: PathBuf,
    /// Where the memory goes (made anew unless `--reuse`).
    #[arg(long, default_value = "target/cairn-bench/grep")]
    dir: PathBuf,
    /// Use the memory already in `--dir` (no ingest).
    #[arg(long)]
    reuse: bool,
    /// Timed runs per pattern and tool (the median is reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Patterns (regex, case-sensitive); default: the issue's selective and unselective sets.
    #[arg(long)]
    pattern: Vec<String>,
}

/// Selective patterns (few files hold them), then unselective ones.
const PATTERNS: &[(&str, &str)] = &[
    ("selective", "spin_lock_irqsave"),
    ("selective", r"EXPORT_SYMBOL_GPL\(\w+\)"),
    ("selective", "copy_(to|from)_user"),
    ("selective", "CONFIG_DEBUG_LOCK_ALLOC"),
    ("unselective", r"\bTODO\b"),
    ("unselective", r"\w+_init\("),
    ("unselective", "return -EINVAL;"),
    ("no trigram", r"[A-Z]{2}\d"),
];

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn dir_bytes(p: &Path) -> u64 {
    let mut n = 0;
    for e in walkdir(p) {
        n += e.metadata().map_or(0, |m| m.len());
    }
    n
}

fn walkdir(p: &Path) -> Vec<std::fs::DirEntry> {
    let mut out = Vec::new();
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            } else {
                out.push(e);
            }
        }
    }
    out
}

fn ingest(m: &Memory, files: &[PathBuf]) -> Result<f64> {
    let t = Instant::now();
    for window in files.chunks(2000) {
        let docs = window
            .iter()
            .filter_map(|f| std::fs::read(f).ok().map(|c| NewDoc::new(f.to_string_lossy().into_owned(), c)))
            .collect();
        m.add(docs, &AddOptions::default())?;
    }
    m.commit()?;
    Ok(t.elapsed().as_secs_f64())
}

/// Matching lines `rg` finds, and the seconds it took.
fn rg(pattern: &str, tree: &Path) -> Result<(u64, f64)> {
    let t = Instant::now();
    let o =
        Command::new("rg").args(["-c", "--no-ignore", "--hidden", "-e", pattern]).arg(tree).output().context("rg")?;
    let secs = t.elapsed().as_secs_f64();
    if !o.status.success() && o.status.code() != Some(1) {
        bail!("rg {pattern} failed: {}", String::from_utf8_lossy(&o.stderr));
    }
    let lines = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.rsplit_once(':').and_then(|(_, n)| n.parse::<u64>().ok()))
        .sum();
    Ok((lines, secs))
}

pub fn run(a: GrepArgs) -> Result<()> {
    let files = crate::docs_bench::tree_files(&a.tree);
    let total: u64 = files.iter().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum();
    if !a.reuse {
        let _ = std::fs::remove_dir_all(&a.dir);
        std::fs::create_dir_all(&a.dir)?;
    }
    let m = crate::open_memory(&a.dir)?;
    if !a.reuse {
        let secs = ingest(&m, &files)?;
        println!(
            "ingest: {} files, {:.0} MiB in {secs:.1} s ({:.0} files/s)",
            files.len(),
            total as f64 / 1048576.0,
            files.len() as f64 / secs
        );
    }
    let stats = m.stats()?;
    let stored = dir_bytes(&a.dir.join("packs"));
    println!(
        "stored content (packs) {:.1} MiB; full-text index {:.1} MiB, of which the n-gram index {:.1} MiB = {:.1} % of the stored content",
        stored as f64 / 1048576.0,
        stats.index_bytes as f64 / 1048576.0,
        stats.ngram_bytes as f64 / 1048576.0,
        100.0 * stats.ngram_bytes as f64 / stored.max(1) as f64
    );
    let patterns: Vec<(String, String)> = if a.pattern.is_empty() {
        PATTERNS.iter().map(|(k, p)| (k.to_string(), p.to_string())).collect()
    } else {
        a.pattern.iter().map(|p| ("given".to_string(), p.clone())).collect()
    };
    println!();
    println!(
        "Source tree {}: {} files, {:.0} MiB; medians of {}, warm caches",
        a.tree.display(),
        files.len(),
        total as f64 / 1048576.0,
        a.repeat
    );
    println!(
        "| pattern | kind | in scope | candidates | files matched | lines (rg) | cairn ms | cairn full scan ms | rg ms | rg / cairn |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (kind, p) in &patterns {
        let o = GrepOptions { pattern: p.clone(), ..Default::default() };
        let full = GrepOptions { scan_all: true, ..o.clone() };
        let mut times = [Vec::new(), Vec::new(), Vec::new()];
        let mut last = None;
        let mut rg_found = 0;
        for i in 0..=a.repeat {
            let t = Instant::now();
            let s = m.grep(&o, |_| Ok(()))?;
            let indexed = t.elapsed().as_secs_f64();
            let t = Instant::now();
            let f = m.grep(&full, |_| Ok(()))?;
            let scanned = t.elapsed().as_secs_f64();
            let (rg_lines, rg_secs) = rg(p, &a.tree)?;
            if s.lines_matched != f.lines_matched {
                bail!("{p}: cairn {} lines, full scan {}", s.lines_matched, f.lines_matched);
            }
            rg_found = rg_lines;
            if i > 0 {
                // The first round warms the caches.
                times[0].push(indexed * 1e3);
                times[1].push(scanned * 1e3);
                times[2].push(rg_secs * 1e3);
            }
            last = Some(s);
        }
        let s = last.context("no run")?;
        let [c, f, r] = times.map(|mut v| median(&mut v));
        let cand = s.candidates.map_or("-".to_string(), |n| n.to_string());
        println!(
            "| `{p}` | {kind} | {} | {cand} | {} | {}{} | {c:.1} | {f:.1} | {r:.1} | {:.2} |",
            s.in_scope,
            s.files_matched,
            s.lines_matched,
            if rg_found == s.lines_matched { String::new() } else { format!(" ({rg_found})") },
            r / c
        );
    }
    Ok(())
}
