//! Taking a snapshot: scan in parallel, reuse content ids of files whose size, mtime, inode and
//! ctime are unchanged (inode cache), read, chunk and hash the others in parallel, store them
//! in batches (which compress their new chunks; one pack fsync and one engine write per batch), then build tree
//! objects bottom-up. A tree or blob the tree layer already owns is not stored again, so an
//! unchanged subtree costs nothing but its scan.

use std::collections::HashSet;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use cairn_cas::{Batch, Id, Prepared};
use rayon::prelude::*;

use crate::object::{self, Entry, Kind};
use crate::rows::{self, CacheRow, SnapshotInfo};
use crate::scan::{self, Node};
use crate::{Error, Result, Trees};

/// Files bigger than this are streamed into the store one chunk at a time.
const STREAM_ABOVE: u64 = 256 << 20;
/// Bytes of file content prepared in memory before a batch is committed.
const WINDOW_BYTES: u64 = 64 << 20;
/// Files per batch at most.
const WINDOW_FILES: usize = 4096;

/// Progress of a snapshot, reported as it goes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Progress {
    /// Files found by the scan.
    pub files_total: u64,
    /// Files whose content id is known (cached or stored).
    pub files_done: u64,
    /// Bytes of those files.
    pub bytes_done: u64,
}

/// What a snapshot did.
#[derive(Clone, Debug)]
pub struct SnapshotStats {
    /// The snapshot's record.
    pub info: SnapshotInfo,
    /// Files read and hashed.
    pub files_read: u64,
    /// Files skipped because the inode cache showed them unchanged.
    pub files_cached: u64,
    /// Blobs (file contents, trees, link targets) newly stored.
    pub blobs_stored: u64,
    /// Bytes appended to packs.
    pub bytes_stored: u64,
    /// Sockets, FIFOs and devices skipped.
    pub special_skipped: u64,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Snapshot names: 1 to 255 bytes, no `/`, no control characters, not `.` or `..` (they are
/// used in URLs and file names).
pub fn check_snapshot_name(name: &str) -> Result<()> {
    if name.is_empty()
        || name.len() > 255
        || name.contains('/')
        || name.chars().any(char::is_control)
        || name == "."
        || name == ".."
    {
        return Err(Error::InvalidArgument(format!(
            "snapshot name {name:?} must be 1 to 255 bytes without `/` or control characters, and not . or .."
        )));
    }
    Ok(())
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Collects the files of a scanned tree in depth-first order.
fn files<'a>(nodes: &'a [Node], out: &mut Vec<&'a Node>) {
    for n in nodes {
        match n {
            Node::File { .. } => out.push(n),
            Node::Dir { children, .. } => files(children, out),
            Node::Symlink { .. } => {}
        }
    }
}

struct Writer<'a> {
    trees: &'a Trees,
    /// Blobs owned by the tree layer that this snapshot has made sure of.
    owned: HashSet<Id>,
    blobs_stored: u64,
    bytes_stored: u64,
}

impl Writer<'_> {
    fn is_owned(&mut self, id: &Id) -> Result<bool> {
        if self.owned.contains(id) {
            return Ok(true);
        }
        let yes = self.trees.rows.get(rows::own_key(id))?.is_some();
        if yes {
            self.owned.insert(*id);
        }
        Ok(yes)
    }

    /// Takes the tree layer's reference on prepared content unless it holds one already.
    fn own_prepared(&mut self, b: &mut Batch<'_>, p: Prepared, path: &Path) -> Result<Id> {
        let id = p.id();
        if self.is_owned(&id)? {
            // Held already; a chunk of it known damaged is stored again from this copy.
            b.restore_prepared(p)?;
            return Ok(id);
        }
        let o = match b.put_prepared(p) {
            Ok(o) => o,
            Err(cairn_cas::Error::Stale(_)) => {
                let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
                b.put(&data)?
            }
            Err(e) => return Err(e.into()),
        };
        self.note_new(b, o)
    }

    fn own_bytes(&mut self, b: &mut Batch<'_>, data: &[u8]) -> Result<Id> {
        let id = self.trees.store.hash_algo().hash(data);
        if self.is_owned(&id)? {
            b.restore_suspects(data)?;
            return Ok(id);
        }
        let o = b.put(data)?;
        self.note_new(b, o)
    }

    fn note_new(&mut self, b: &mut Batch<'_>, o: cairn_cas::PutOutcome) -> Result<Id> {
        b.kv_put(&self.trees.rows, rows::own_key(&o.id), [])?;
        self.owned.insert(o.id);
        self.blobs_stored += 1;
        Ok(o.id)
    }
}

impl Trees {
    /// Snapshots `dir` under `name` (default: the directory name and the time).
    pub fn snapshot(
        &self,
        dir: &Path,
        name: Option<&str>,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<SnapshotStats> {
        self.snapshot_excluding(dir, name, &[], progress)
    }

    /// Like [`Trees::snapshot`], leaving out the given paths (and everything under them); the
    /// CLI passes its own data directory, so `cairn snapshot .` never stores the store.
    pub fn snapshot_excluding(
        &self,
        dir: &Path,
        name: Option<&str>,
        exclude: &[std::path::PathBuf],
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<SnapshotStats> {
        let exclude: Vec<std::path::PathBuf> = exclude.iter().filter_map(|p| std::fs::canonicalize(p).ok()).collect();
        let start = Instant::now();
        let started_ns = now_ns();
        let dir = std::fs::canonicalize(dir).map_err(|e| Error::io(dir, e))?;
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                let base = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "root".into());
                format!("{base}-{}", started_ns / 1_000_000)
            }
        };
        check_snapshot_name(&name)?;
        if self.rows.get(rows::key(rows::SNAP_PREFIX, name.as_bytes()))?.is_some() {
            return Err(Error::SnapshotExists(name));
        }
        let root_md = std::fs::metadata(&dir).map_err(|e| Error::io(&dir, e))?;
        if !root_md.is_dir() {
            return Err(Error::InvalidArgument(format!("{} is not a directory", dir.display())));
        }
        let special = AtomicU64::new(0);
        let nodes = scan::scan_dir(&dir, &exclude, &special)?;
        let mut all = Vec::new();
        files(&nodes, &mut all);
        let total = all.len() as u64;
        let done = AtomicU64::new(0);
        let done_bytes = AtomicU64::new(0);
        let report = |n: u64, b: u64| {
            let f = done.fetch_add(n, Ordering::Relaxed) + n;
            let by = done_bytes.fetch_add(b, Ordering::Relaxed) + b;
            progress(Progress { files_total: total, files_done: f, bytes_done: by });
        };

        // 1. Content ids from the inode cache where the file is unchanged and still owned.
        //    A file modified within the last second may change again without its mtime
        //    changing, so it is neither trusted from nor written to the cache.
        let racy_after = started_ns - 1_000_000_000;
        let mut w = Writer { trees: self, owned: HashSet::new(), blobs_stored: 0, bytes_stored: 0 };
        let mut ids = self.cached_ids(&dir, &all, racy_after, &mut w)?;
        let files_cached = ids.iter().filter(|i| i.is_some()).count() as u64;
        report(files_cached, 0);

        // 2. Read, chunk and hash the rest in parallel, a window at a time; commit each window
        //    as one batch, which groups and compresses its new chunks.
        let todo: Vec<usize> = (0..all.len()).filter(|&i| ids[i].is_none()).collect();
        let mut windows: Vec<&[usize]> = Vec::new();
        let mut start_at = 0;
        while start_at < todo.len() {
            let mut end = start_at;
            let mut bytes = 0;
            while end < todo.len() && end - start_at < WINDOW_FILES && (bytes < WINDOW_BYTES || end == start_at) {
                if let Node::File { meta, .. } = all[todo[end]] {
                    bytes += meta.size.min(STREAM_ABOVE);
                }
                end += 1;
            }
            windows.push(&todo[start_at..end]);
            start_at = end;
        }
        let prepare = |window: &[usize]| -> Result<Vec<Option<Prepared>>> {
            window
                .par_iter()
                .map(|&i| -> Result<Option<Prepared>> {
                    let Node::File { path, meta, .. } = all[i] else { return Ok(None) };
                    if meta.size > STREAM_ABOVE {
                        return Ok(None);
                    }
                    let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
                    Ok(Some(self.store.prepare(&data)?))
                })
                .collect()
        };
        // Pipeline: while one window is committed (compression of its new chunks on every core,
        // then pack appends, index rows, one fsync), the next is read, chunked and hashed.
        let mut pending: Option<(&[usize], Vec<Option<Prepared>>)> = None;
        for window in windows.iter().copied().map(Some).chain(std::iter::once(None)) {
            let to_commit = pending.take();
            let (prepared, committed) = rayon::join(
                || window.map(prepare).transpose(),
                || match to_commit {
                    Some((win, prep)) => self.commit_window(&mut w, win, prep, &all, &mut ids, racy_after, &report),
                    None => Ok(()),
                },
            );
            committed?;
            if let (Some(win), Some(prep)) = (window, prepared?) {
                pending = Some((win, prep));
            }
        }

        // 3. Tree objects bottom-up, link targets, and the snapshot row, in one last batch.
        let mut b = self.store.batch();
        let mut it = ids.into_iter();
        let mut counts = (0u64, 1u64, 0u64, 0u64); // files, dirs, symlinks, bytes
        let (root, _) = build(&mut w, &mut b, &nodes, &mut it, &mut counts)?;
        let info = SnapshotInfo {
            name: name.clone(),
            root,
            created_ns: started_ns,
            files: counts.0,
            dirs: counts.1,
            symlinks: counts.2,
            bytes: counts.3,
            source: dir.to_string_lossy().into_owned(),
        };
        b.kv_put(&self.rows, rows::key(rows::SNAP_PREFIX, name.as_bytes()), info.encode())?;
        w.bytes_stored += b.commit()?;
        Ok(SnapshotStats {
            info,
            files_read: total - files_cached,
            files_cached,
            blobs_stored: w.blobs_stored,
            bytes_stored: w.bytes_stored,
            special_skipped: special.load(Ordering::Relaxed),
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}

impl Trees {
    /// The content id of every file of `all` that the inode cache shows unchanged and whose
    /// content the tree layer still owns (`None` for the others).
    ///
    /// The cache rows under `dir` are read in one ordered walk and merged with the files sorted
    /// by path, and the ownership rows of the hits are looked up in id order: both touch each
    /// table block once, where a point lookup per file searched the index every time (that was
    /// a third of an unchanged re-snapshot).
    fn cached_ids(&self, dir: &Path, all: &[&Node], racy_after: i64, w: &mut Writer<'_>) -> Result<Vec<Option<Id>>> {
        let mut order: Vec<(&[u8], usize)> = all
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match n {
                Node::File { path, .. } => Some((path.as_os_str().as_bytes(), i)),
                _ => None,
            })
            .collect();
        // Nearly sorted already (tree order differs from byte order only around names with
        // bytes below `/`), which the stable sort exploits.
        order.sort();
        let mut under = rows::key(rows::CACHE_PREFIX, dir.as_os_str().as_bytes());
        if !under.ends_with(b"/") {
            // (`/` itself ends in one.)
            under.push(b'/');
        }
        let mut candidates: Vec<(Id, usize)> = Vec::new();
        let mut at = 0;
        self.rows.prefix(&under).for_each_ref(|k, v| -> Result<bool> {
            let path = &k[rows::CACHE_PREFIX.len()..];
            while at < order.len() && order[at].0 < path {
                at += 1;
            }
            if at == order.len() {
                return Ok(false);
            }
            if order[at].0 == path
                && let Some(c) = CacheRow::decode(v)
                && let Node::File { meta, .. } = all[order[at].1]
                && c.size == meta.size
                && c.mtime_ns == meta.mtime_ns
                && c.ino == meta.ino
                && c.ctime_ns == meta.ctime_ns
                && meta.mtime_ns < racy_after
            {
                candidates.push((c.id, order[at].1));
            }
            Ok(true)
        })?;
        candidates.sort_unstable();
        // With chunks known damaged or missing, a file whose content holds one is read again
        // (its chunk is stored anew from it) instead of being taken as unchanged.
        let suspects = self.store.suspect_chunks() > 0 || !self.store.missing_packs().is_empty();
        let mut ids = vec![None; all.len()];
        for (id, i) in candidates {
            if w.is_owned(&id)? && !(suspects && self.store.is_suspect(&id)?) {
                ids[i] = Some(id);
            }
        }
        Ok(ids)
    }

    /// Stores one window of prepared files as one batch and records their ids.
    #[allow(clippy::too_many_arguments)]
    fn commit_window(
        &self,
        w: &mut Writer<'_>,
        window: &[usize],
        prepared: Vec<Option<Prepared>>,
        all: &[&Node],
        ids: &mut [Option<Id>],
        racy_after: i64,
        report: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<()> {
        let mut b = self.store.batch();
        for (&i, p) in window.iter().zip(prepared) {
            let Node::File { path, meta, .. } = all[i] else { continue };
            let id = match p {
                Some(p) => w.own_prepared(&mut b, p, path)?,
                None => {
                    let f = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
                    let o = b.put_reader_len(std::io::BufReader::with_capacity(1 << 20, f), meta.size)?;
                    if w.is_owned(&o.id)? {
                        // Already held: give back the reference this put took.
                        b.release(&o.id)?;
                        o.id
                    } else {
                        w.note_new(&mut b, o)?
                    }
                }
            };
            if meta.mtime_ns < racy_after {
                let row =
                    CacheRow { size: meta.size, mtime_ns: meta.mtime_ns, ino: meta.ino, ctime_ns: meta.ctime_ns, id };
                b.kv_put(&self.rows, rows::key(rows::CACHE_PREFIX, path.as_os_str().as_bytes()), row.encode())?;
            }
            ids[i] = Some(id);
            report(1, meta.size);
        }
        w.bytes_stored += b.commit()?;
        Ok(())
    }
}

/// Builds (and stores, unless owned) the tree object of `nodes`; returns its id and total size.
fn build(
    w: &mut Writer<'_>,
    b: &mut Batch<'_>,
    nodes: &[Node],
    ids: &mut impl Iterator<Item = Option<Id>>,
    counts: &mut (u64, u64, u64, u64),
) -> Result<(Id, u64)> {
    let mut entries = Vec::with_capacity(nodes.len());
    let mut total = 0u64;
    for n in nodes {
        let e = match n {
            Node::File { name, meta, .. } => {
                let id = ids.next().flatten().ok_or_else(|| Error::InvalidArgument("file without an id".into()))?;
                counts.0 += 1;
                counts.3 += meta.size;
                total += meta.size;
                Entry {
                    name: name.clone(),
                    kind: Kind::File,
                    mode: meta.mode,
                    size: meta.size,
                    mtime_ns: meta.mtime_ns,
                    id,
                }
            }
            Node::Dir { name, meta, children } => {
                counts.1 += 1;
                let (id, size) = build(w, b, children, ids, counts)?;
                total += size;
                Entry { name: name.clone(), kind: Kind::Dir, mode: meta.mode, size, mtime_ns: meta.mtime_ns, id }
            }
            Node::Symlink { name, target, meta } => {
                counts.2 += 1;
                let id = w.own_bytes(b, target)?;
                Entry {
                    name: name.clone(),
                    kind: Kind::Symlink,
                    mode: meta.mode,
                    size: target.len() as u64,
                    mtime_ns: meta.mtime_ns,
                    id,
                }
            }
        };
        entries.push(e);
    }
    let bytes = object::encode(&entries)?;
    Ok((w.own_bytes(b, &bytes)?, total))
}
