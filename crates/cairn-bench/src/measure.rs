//! Process figures read from `/proc` (Linux): CPU time, bytes sent to storage, peak RSS, and
//! the disk space a directory takes.

use std::path::Path;

use anyhow::{Context, Result, bail};

/// Clock ticks per second of `/proc/<pid>/stat` times (`USER_HZ`, 100 on every Linux ABI).
const TICKS_PER_SEC: f64 = 100.0;

/// User + system CPU seconds of this process, all threads (fields 14 and 15 of
/// `/proc/self/stat`; 10 ms resolution).
pub fn cpu_seconds() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("read /proc/self/stat")?;
    // The command name (field 2) is in parentheses and may hold spaces: split after it.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("bad /proc/self/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state), so field n is fields[n - 3].
    let utime: f64 = fields.get(11).context("no utime")?.parse()?;
    let stime: f64 = fields.get(12).context("no stime")?.parse()?;
    Ok((utime + stime) / TICKS_PER_SEC)
}

/// Bytes this process caused to be written to storage so far: `write_bytes` of `/proc/self/io`,
/// counted in whole pages when a clean page is dirtied (by `write` or through a shared mapping),
/// so it needs no fsync to show and does not depend on when the kernel writes back. Pages of
/// files deleted before write-back (`cancelled_write_bytes`, e.g. a WAL dropped after its
/// memtable was flushed) stay counted: the engine did write them.
pub fn disk_write_bytes() -> Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io").context("read /proc/self/io")?;
    let field = |name: &str| -> u64 {
        io.lines().find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
    };
    Ok(field("write_bytes:"))
}

/// Peak resident set size in bytes (`VmHWM` of `/proc/self/status`).
pub fn peak_rss_bytes() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("read /proc/self/status")?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmHWM in /proc/self/status")?;
    Ok(kib * 1024)
}

/// Calls `f` with every path under `path` (itself included) and its metadata (not following
/// symbolic links), depth first.
fn walk(path: &Path, mut f: impl FnMut(&Path, &std::fs::Metadata) -> Result<()>) -> Result<()> {
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).with_context(|| format!("stat {}", p.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
        f(&p, &meta)?;
    }
    Ok(())
}

/// Disk space under `path` as `du` counts it (allocated blocks, each hard-linked file once).
pub fn disk_usage(path: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    walk(path, |_, meta| {
        if seen.insert((meta.dev(), meta.ino())) {
            total += meta.blocks() * 512;
        }
        Ok(())
    })?;
    Ok(total)
}

/// Copies the tree at `from` to `to` (which must not exist): directories, and regular files
/// byte for byte (`copy_file_range` where the kernel has it). Anything else is an error.
pub fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).with_context(|| format!("create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).with_context(|| format!("copy {} to {}", src.display(), dst.display()))?;
        } else {
            bail!("{}: neither a file nor a directory", src.display());
        }
    }
    Ok(())
}

/// Writes every file under `path` to the disk and drops its pages from the page cache
/// (`fdatasync`, then `posix_fadvise(DONTNEED)`), so the next reader starts cold. Returns the
/// number of files.
pub fn evict_tree(path: &Path) -> Result<u64> {
    let mut files = 0;
    walk(path, |p, meta| {
        if meta.is_file() {
            let f = std::fs::File::open(p).with_context(|| format!("open {}", p.display()))?;
            f.sync_data().with_context(|| format!("fdatasync {}", p.display()))?;
            rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
                .with_context(|| format!("posix_fadvise {}", p.display()))?;
            files += 1;
        }
        Ok(())
    })?;
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_figures_are_readable() {
        assert!(cpu_seconds().unwrap() >= 0.0);
        assert!(peak_rss_bytes().unwrap() > 0);
        let before = disk_write_bytes().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), vec![7u8; 1 << 20]).unwrap();
        assert!(disk_usage(dir.path()).unwrap() >= 1 << 20);
        // Dirtied pages count without fsync (unless the file system does not account them).
        let after = disk_write_bytes().unwrap();
        assert!(after >= before);
    }

    #[test]
    fn copy_tree_copies_nested_files_and_evict_tree_counts_them() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir_all(src.join("a/b")).unwrap();
        std::fs::write(src.join("top"), b"1").unwrap();
        std::fs::write(src.join("a/b/deep"), vec![7u8; 100_000]).unwrap();
        let dst = dir.path().join("dst");
        copy_tree(&src, &dst).unwrap();
        assert_eq!(std::fs::read(dst.join("top")).unwrap(), b"1");
        assert_eq!(std::fs::read(dst.join("a/b/deep")).unwrap(), vec![7u8; 100_000]);
        assert_eq!(evict_tree(&dst).unwrap(), 2);
        // The destination must be new: copying onto an existing tree is refused.
        assert!(copy_tree(&src, &dst).is_err());
    }
}
