//! Process figures read from `/proc` (Linux): CPU time, bytes sent to storage, peak RSS, and
//! the disk space a directory takes.

use std::path::Path;

use anyhow::{Context, Result};

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

/// Disk space under `path` as `du` counts it (allocated blocks, each hard-linked file once).
pub fn disk_usage(path: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).with_context(|| format!("stat {}", p.display()))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        }
        if seen.insert((meta.dev(), meta.ino())) {
            total += meta.blocks() * 512;
        }
    }
    Ok(total)
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
}
