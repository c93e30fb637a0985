//! `cairn-bench trees`: directory snapshots of real trees with cairn against restic, borg and
//! git, every tool run as its own process on the same tree.
//!
//! For every run, data set and tool (the tools' order rotated per run), on a fresh repository:
//! first ingest, unchanged re-ingest, ingest of a second project into the same repository
//! (cross-project dedup), and restore of the first snapshot; then the repository's disk use.
//! Before each timed step the tree (or, before a restore, the repository) is read whole and
//! `sync` runs, so every tool starts from a warm page cache and pays no write-back of the
//! step before it. Prints medians and cairn/peer ratios.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use crate::measure::disk_usage;
use crate::report::median;

#[derive(Args)]
pub struct TreesArgs {
    /// A data set: `NAME=DIR`, or `NAME=DIR,SECOND` to also ingest SECOND into the same
    /// repository after DIR (cross-project dedup). Repeatable.
    #[arg(long = "set", required = true)]
    sets: Vec<String>,
    /// Tools, comma-separated: cairn, restic, borg, git.
    #[arg(long, value_delimiter = ',', default_value = "cairn,restic,borg,git")]
    tools: Vec<String>,
    /// Runs per tool and data set; the table shows medians.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where repositories and restores are made.
    #[arg(long, default_value = "target/cairn-bench/trees")]
    dir: PathBuf,
    /// The cairn binary (default: `cairn` next to this program).
    #[arg(long)]
    cairn: Option<PathBuf>,
}

/// A data set: its tree, an optional second project, and what the tree holds.
struct Set {
    name: String,
    src: PathBuf,
    second: Option<PathBuf>,
    files: u64,
    bytes: u64,
    second_bytes: u64,
}

/// One run of one tool on one set.
#[derive(Clone, Copy, Default)]
struct Run {
    ingest: f64,
    again: f64,
    second: f64,
    restore: f64,
    /// Repository bytes after the first ingest and its unchanged re-ingest.
    size_first: u64,
    /// Repository bytes after the second project too.
    size: u64,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Tool {
    Cairn,
    Restic,
    Borg,
    Git,
}

impl Tool {
    fn parse(s: &str) -> Result<Tool> {
        Ok(match s {
            "cairn" => Tool::Cairn,
            "restic" => Tool::Restic,
            "borg" => Tool::Borg,
            "git" => Tool::Git,
            other => bail!("unknown tool {other:?} (cairn, restic, borg, git)"),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Tool::Cairn => "cairn",
            Tool::Restic => "restic",
            Tool::Borg => "borg",
            Tool::Git => "git",
        }
    }
}

/// The commands of one tool on one repository.
struct Ops<'a> {
    tool: Tool,
    cairn: &'a Path,
    repo: PathBuf,
}

impl Ops<'_> {
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("RESTIC_PASSWORD", "bench")
            .env("BORG_PASSPHRASE", "bench")
            .env("BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK", "yes")
            .env("BORG_RELOCATED_REPO_ACCESS_IS_OK", "yes")
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    /// `cairn --dir REPO ARGS`, its output discarded.
    fn cairn(&self, args: &[&OsStr]) -> Command {
        let mut c = Command::new(self.cairn);
        c.arg("--dir").arg(&self.repo).args(args).stdout(Stdio::null());
        c
    }

    fn git(&self, work_tree: &Path) -> Command {
        let mut c = self.cmd("git");
        c.arg(format!("--git-dir={}", self.repo.display())).arg(format!("--work-tree={}", work_tree.display()));
        c
    }

    /// A fresh, empty repository (not timed).
    fn init(&self) -> Result<()> {
        remove(&self.repo)?;
        let r = &self.repo;
        match self.tool {
            Tool::Cairn => Ok(()),
            Tool::Restic => run(self.cmd("restic").args(["init", "-q", "--repo"]).arg(r)),
            Tool::Borg => run(self.cmd("borg").args(["init", "-e", "none"]).arg(r)),
            Tool::Git => run(self.cmd("git").args(["init", "-q", "--bare"]).arg(r)),
        }
    }

    /// Stores `src` as snapshot `tag`; returns the wall seconds.
    fn ingest(&self, src: &Path, tag: &str) -> Result<f64> {
        let r = &self.repo;
        let start = Instant::now();
        match self.tool {
            Tool::Cairn => run(&mut self.cairn(&["snapshot".as_ref(), src.as_ref(), "--name".as_ref(), tag.as_ref()]))?,
            Tool::Restic => {
                run(self.cmd("restic").args(["-q", "--repo"]).arg(r).args(["backup", "--tag", tag]).arg(src))?
            }
            Tool::Borg => {
                run(self.cmd("borg").arg("create").arg(format!("{}::{tag}", r.display())).arg(".").current_dir(src))?
            }
            Tool::Git => {
                // -f: every file, as the other tools take (Debian's linux-source has a
                // .gitignore ending in `/*`); --allow-empty: an unchanged tree is still a new
                // snapshot. The automatic gc `git commit` would start in the background is run
                // after the timed step instead (below), so the time is what a user waits for and
                // the repository measured is the one git ends up with.
                run(self.git(src).args(["add", "-A", "-f"]))?;
                run(self.git(src).args(["-c", "user.name=b", "-c", "user.email=b@b", "-c", "gc.auto=0"]).args([
                    "commit",
                    "--allow-empty",
                    "-qm",
                    tag,
                ]))?;
                run(self.git(src).args(["tag", tag]))?;
                let took = start.elapsed().as_secs_f64();
                run(self.git(src).args(["-c", "gc.autoDetach=false", "gc", "--auto", "--quiet"]))?;
                return Ok(took);
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Materializes snapshot `tag` in `dest` (hard links for cairn); returns the wall seconds.
    fn restore(&self, tag: &str, dest: &Path) -> Result<f64> {
        remove(dest)?;
        let r = &self.repo;
        let start = Instant::now();
        match self.tool {
            Tool::Cairn => run(&mut self.cairn(&[
                "checkout".as_ref(),
                tag.as_ref(),
                dest.as_ref(),
                "--mode".as_ref(),
                "hardlink".as_ref(),
            ]))?,
            Tool::Restic => run(self
                .cmd("restic")
                .args(["-q", "--repo"])
                .arg(r)
                .args(["restore", "latest", "--tag", tag, "--target"])
                .arg(dest))?,
            Tool::Borg => {
                std::fs::create_dir_all(dest)?;
                run(self.cmd("borg").arg("extract").arg(format!("{}::{tag}", r.display())).current_dir(dest))?
            }
            Tool::Git => {
                std::fs::create_dir_all(dest)?;
                run(self.git(dest).args(["checkout", "-f", tag, "--", "."]))?
            }
        }
        Ok(start.elapsed().as_secs_f64())
    }

    /// Disk use of the repository. cairn's is its engine and packs; its `files/` holds the
    /// shared copies hard-link checkouts link to (the checkout's own disk use, like the other
    /// tools' restores).
    fn size(&self) -> Result<u64> {
        match self.tool {
            Tool::Cairn => Ok(disk_usage(&self.repo.join("kv"))? + disk_usage(&self.repo.join("packs"))?),
            _ => disk_usage(&self.repo),
        }
    }
}

fn run(c: &mut Command) -> Result<()> {
    let out = c.stderr(Stdio::piped()).output().with_context(|| format!("starting {:?}", c.get_program()))?;
    if !out.status.success() {
        bail!("{:?} failed ({}): {}", c, out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

fn remove(p: &Path) -> Result<()> {
    match std::fs::remove_dir_all(p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("removing {}", p.display()))
        }
        _ => Ok(()),
    }
}

/// Regular files under `dir` and their bytes.
fn walk(dir: &Path, mut each: impl FnMut(&Path, u64) -> Result<()>) -> Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| format!("reading {}", d.display()))? {
            let e = e?;
            let t = e.file_type()?;
            if t.is_dir() {
                stack.push(e.path());
            } else if t.is_file() {
                each(&e.path(), e.metadata()?.len())?;
            }
        }
    }
    Ok(())
}

fn count(dir: &Path) -> Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    walk(dir, |_, len| {
        files += 1;
        bytes += len;
        Ok(())
    })?;
    Ok((files, bytes))
}

/// Reads every file under `dir` (into the page cache), then `sync`s: this machine reclaims idle
/// cache within seconds, and a tool's fsyncs must not wait for the step before it.
fn settle(dir: &Path) -> Result<()> {
    walk(dir, |p, _| {
        if let Ok(mut f) = std::fs::File::open(p) {
            let _ = std::io::copy(&mut f, &mut std::io::sink());
        }
        Ok(())
    })?;
    run(&mut Command::new("sync"))
}

fn parse_set(s: &str) -> Result<Set> {
    let (name, dirs) = s.split_once('=').context("a set is NAME=DIR or NAME=DIR,SECOND")?;
    let (src, second) = match dirs.split_once(',') {
        Some((a, b)) => (PathBuf::from(a), Some(PathBuf::from(b))),
        None => (PathBuf::from(dirs), None),
    };
    let (files, bytes) = count(&src)?;
    let second_bytes = match &second {
        Some(b) => count(b)?.1,
        None => 0,
    };
    Ok(Set { name: name.to_string(), src, second, files, bytes, second_bytes })
}

pub fn run_trees(a: TreesArgs) -> Result<()> {
    let tools: Vec<Tool> = a.tools.iter().map(|t| Tool::parse(t)).collect::<Result<_>>()?;
    let cairn = match a.cairn {
        Some(p) => p,
        None => std::env::current_exe()?.with_file_name("cairn"),
    };
    if tools.contains(&Tool::Cairn) && !cairn.exists() {
        bail!("no cairn binary at {} (build it: cargo build --release -p cairn-cli)", cairn.display());
    }
    let sets: Vec<Set> = a.sets.iter().map(|s| parse_set(s)).collect::<Result<_>>()?;
    std::fs::create_dir_all(&a.dir)?;
    let dir = a.dir.canonicalize()?;
    println!(
        "cairn-bench trees: {} run(s), tools {}, {} cores; warm page cache and sync before each timed step",
        a.runs,
        tools.iter().map(|t| t.name()).collect::<Vec<_>>().join(","),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    for set in &sets {
        let mut results: Vec<Vec<Run>> = vec![Vec::new(); tools.len()];
        for r in 0..a.runs {
            for k in 0..tools.len() {
                // Rotate the order per run, so no tool always runs first.
                let i = (k + r) % tools.len();
                let ops = Ops { tool: tools[i], cairn: &cairn, repo: dir.join(format!("{}-repo", tools[i].name())) };
                ops.init()?;
                let mut run = Run::default();
                settle(&set.src)?;
                run.ingest = ops.ingest(&set.src, "a1")?;
                settle(&set.src)?;
                run.again = ops.ingest(&set.src, "a2")?;
                run.size_first = ops.size()?;
                if let Some(second) = &set.second {
                    settle(second)?;
                    run.second = ops.ingest(second, "b1")?;
                }
                run.size = ops.size()?;
                let dest = dir.join("restore");
                remove(&dest)?;
                settle(&ops.repo)?;
                run.restore = ops.restore("a1", &dest)?;
                remove(&dest)?;
                results[i].push(run);
            }
        }
        print_set(set, &tools, &results);
    }
    Ok(())
}

fn print_set(set: &Set, tools: &[Tool], results: &[Vec<Run>]) {
    let mib = |b: f64| b / (1 << 20) as f64;
    println!(
        "\n{}: {} ({} files, {:.0} MiB of content){}",
        set.name,
        set.src.display(),
        set.files,
        mib(set.bytes as f64),
        set.second.as_ref().map_or(String::new(), |s| format!(
            "; second project {} ({:.0} MiB)",
            s.display(),
            mib(set.second_bytes as f64)
        ))
    );
    println!(
        "{:<7} {:>9} {:>9} {:>7} {:>11} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "tool",
        "ingest s",
        "files/s",
        "MB/s",
        "re-ingest s",
        "files/s",
        "+2nd s",
        "+2nd MiB",
        "2nd dedup",
        "restore s",
        "repo MiB"
    );
    let med = |rs: &[Run], f: fn(&Run) -> f64| median(rs.iter().map(f).collect());
    let mut rows = Vec::new();
    for (tool, rs) in tools.iter().zip(results) {
        let ingest = med(rs, |r| r.ingest);
        let again = med(rs, |r| r.again);
        let second = med(rs, |r| r.second);
        let restore = med(rs, |r| r.restore);
        let size = med(rs, |r| r.size_first as f64);
        // Cross-project dedup: the second project's content over what it added to the repository.
        let added = med(rs, |r| r.size.saturating_sub(r.size_first) as f64);
        let dedup = if set.second.is_some() && added > 0.0 {
            format!("{:.1}x", set.second_bytes as f64 / added)
        } else {
            "-".into()
        };
        println!(
            "{:<7} {:>9.2} {:>9.0} {:>7.0} {:>11.2} {:>10.0} {:>8.2} {:>9.1} {:>9} {:>9.2} {:>9.1}",
            tool.name(),
            ingest,
            set.files as f64 / ingest,
            set.bytes as f64 / 1e6 / ingest,
            again,
            set.files as f64 / again,
            second,
            mib(added),
            dedup,
            restore,
            mib(size)
        );
        rows.push((*tool, [ingest, again, second, restore, size]));
    }
    let Some((_, c)) = rows.iter().find(|(t, _)| *t == Tool::Cairn) else { return };
    for (t, p) in rows.iter().filter(|(t, _)| *t != Tool::Cairn) {
        let ratio = |i: usize| if p[i] > 0.0 { format!("{:.2}", c[i] / p[i]) } else { "-".into() };
        println!(
            "cairn/{:<6} ingest {}  re-ingest {}  +2nd {}  restore {}  repository {}",
            t.name(),
            ratio(0),
            ratio(1),
            ratio(2),
            ratio(3),
            ratio(4)
        );
    }
}
