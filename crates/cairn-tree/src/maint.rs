//! Listing and removing snapshots, garbage collection (mark from every snapshot, release every
//! owned blob nothing reaches, then repack), disk usage and verification.

use std::collections::HashSet;

use cairn_cas::{Id, Usage};

use crate::object::Kind;
use crate::rows::{self, CacheRow, SnapshotInfo};
use crate::{Error, Result, Trees};

/// What a collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeGcReport {
    /// Blobs still reachable from some snapshot.
    pub reachable: u64,
    /// Blobs released because no snapshot reaches them.
    pub released: u64,
    /// Stale inode-cache rows removed.
    pub cache_rows_removed: u64,
    /// Shared checkout files removed.
    pub shared_files_removed: u64,
    /// Pack bytes before repacking.
    pub bytes_before: u64,
    /// Pack bytes after repacking.
    pub bytes_after: u64,
}

/// Disk usage of snapshots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DuReport {
    /// Sum of file sizes over the snapshots (what copies would take).
    pub logical_bytes: u64,
    /// Blobs reachable (file contents, trees, link targets), each counted once.
    pub usage: Usage,
}

impl DuReport {
    /// Logical bytes per stored byte.
    pub fn dedup_ratio(&self) -> f64 {
        if self.usage.stored_bytes == 0 { 0.0 } else { self.logical_bytes as f64 / self.usage.stored_bytes as f64 }
    }
}

/// Problems found by [`Trees::verify`], beyond the blob store's own report.
#[derive(Clone, Debug, Default)]
pub struct TreeVerifyReport {
    /// The blob store's report (every chunk reread and rehashed).
    pub store: cairn_cas::VerifyReport,
    /// Snapshots checked.
    pub snapshots: u64,
    /// Tree objects read and decoded.
    pub trees: u64,
    /// (snapshot, problem) pairs: unreadable trees, missing or unowned blobs.
    pub problems: Vec<(String, String)>,
}

impl TreeVerifyReport {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.store.is_ok() && self.problems.is_empty()
    }
}

impl Trees {
    /// Every snapshot, oldest first.
    pub fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let mut v = Vec::new();
        for item in self.rows.prefix(rows::SNAP_PREFIX) {
            let (k, val) = item?;
            let name = String::from_utf8_lossy(&k[rows::SNAP_PREFIX.len()..]).into_owned();
            v.push(SnapshotInfo::decode(&name, &val)?);
        }
        v.sort_by_key(|s| s.created_ns);
        Ok(v)
    }

    /// Removes a snapshot's record; its data goes at the next [`Trees::gc`].
    pub fn remove_snapshot(&self, name: &str) -> Result<SnapshotInfo> {
        let info = self.snapshot_info(name)?;
        self.rows.delete(rows::key(rows::SNAP_PREFIX, name.as_bytes()))?;
        Ok(info)
    }

    /// Every blob reachable from `roots` (trees, file contents, link targets).
    fn reachable(&self, roots: impl IntoIterator<Item = Id>) -> Result<HashSet<Id>> {
        let mut seen = HashSet::new();
        let mut stack: Vec<Id> = roots.into_iter().collect();
        while let Some(t) = stack.pop() {
            if !seen.insert(t) {
                continue;
            }
            for e in self.read_tree(&t)? {
                match e.kind {
                    Kind::Dir => stack.push(e.id),
                    Kind::File | Kind::Symlink => {
                        seen.insert(e.id);
                    }
                }
            }
        }
        Ok(seen)
    }

    /// Releases every blob no snapshot reaches, drops stale cache rows and shared checkout
    /// files, then repacks packs less than half live. The release and the removal of the
    /// ownership rows are one atomic batch.
    pub fn gc(&self) -> Result<TreeGcReport> {
        let live = self.reachable(self.snapshots()?.into_iter().map(|s| s.root))?;
        let mut report = TreeGcReport { reachable: live.len() as u64, ..TreeGcReport::default() };
        let mut dead = Vec::new();
        for item in self.rows.prefix(rows::OWN_PREFIX) {
            let (k, _) = item?;
            let id = Id::from_slice(&k[rows::OWN_PREFIX.len()..])
                .ok_or_else(|| Error::corrupt("ownership row", "bad key"))?;
            if !live.contains(&id) {
                dead.push(id);
            }
        }
        let mut stale_cache = Vec::new();
        for item in self.rows.prefix(rows::CACHE_PREFIX) {
            let (k, v) = item?;
            if CacheRow::decode(&v).is_none_or(|c| !live.contains(&c.id)) {
                stale_cache.push(k);
            }
        }
        for chunk in dead.chunks(10_000) {
            let mut b = self.store.batch();
            for id in chunk {
                b.release(id)?;
                b.kv_delete(&self.rows, rows::own_key(id))?;
            }
            b.commit()?;
        }
        let mut wb = cairn_kv::KeyspaceBatch::new();
        for k in &stale_cache {
            wb.delete(&self.rows, k)?;
        }
        self.rows.write(wb)?;
        report.released = dead.len() as u64;
        report.cache_rows_removed = stale_cache.len() as u64;
        report.shared_files_removed = self.prune_shared_files(&live, &[])?;
        let g = self.store.gc(0.5)?;
        report.bytes_before = g.bytes_before;
        report.bytes_after = g.bytes_after;
        Ok(report)
    }

    /// Every blob the tree layer holds a reference on (its ownership rows).
    pub fn owned_blobs(&self) -> Result<Vec<Id>> {
        let mut out = Vec::new();
        for item in self.rows.prefix(rows::OWN_PREFIX) {
            let (k, _) = item?;
            out.push(
                Id::from_slice(&k[rows::OWN_PREFIX.len()..])
                    .ok_or_else(|| Error::corrupt("ownership row", "bad key"))?,
            );
        }
        Ok(out)
    }

    /// The source directories of every snapshot (where damaged content can be read again).
    pub fn sources(&self) -> Result<Vec<std::path::PathBuf>> {
        let mut v: Vec<std::path::PathBuf> = self.snapshots()?.into_iter().map(|s| s.source.into()).collect();
        v.sort();
        v.dedup();
        Ok(v)
    }

    /// Unlinks shared checkout copies that were changed after checkout (`verify_shared_files`
    /// names them); checkouts linking to them keep their files. Returns how many.
    pub fn remove_changed_shared_files(&self, paths: &[String]) -> Result<u64> {
        let live: HashSet<Id> = self.owned_blobs()?.into_iter().collect();
        self.prune_shared_files(&live, paths)
    }

    /// Disk usage of one snapshot, or of all of them (`None`).
    pub fn du(&self, name: Option<&str>) -> Result<DuReport> {
        let snaps = match name {
            Some(n) => vec![self.snapshot_info(n)?],
            None => self.snapshots()?,
        };
        let logical_bytes = snaps.iter().map(|s| s.bytes).sum();
        let live = self.reachable(snaps.iter().map(|s| s.root))?;
        Ok(DuReport { logical_bytes, usage: self.store.usage(live.iter())? })
    }

    /// Verifies the blob store (every chunk reread and rehashed) and every snapshot's trees:
    /// each tree decodes and every blob it names is stored and owned by the tree layer.
    pub fn verify(&self) -> Result<TreeVerifyReport> {
        Ok(TreeVerifyReport { store: self.store.verify()?, ..self.verify_trees()? })
    }

    /// Verifies every snapshot's trees (not the blob store's chunks): each tree decodes and
    /// every blob it names is stored and owned by the tree layer.
    pub fn verify_trees(&self) -> Result<TreeVerifyReport> {
        let mut report = TreeVerifyReport::default();
        let mut checked = HashSet::new();
        for s in self.snapshots()? {
            report.snapshots += 1;
            let mut stack = vec![s.root];
            while let Some(t) = stack.pop() {
                if !checked.insert(t) {
                    continue;
                }
                if self.rows.get(rows::own_key(&t))?.is_none() {
                    report.problems.push((s.name.clone(), format!("tree {t} is not owned by the tree layer")));
                }
                let entries = match self.read_tree(&t) {
                    Ok(e) => e,
                    Err(e) => {
                        report.problems.push((s.name.clone(), format!("tree {t}: {e}")));
                        continue;
                    }
                };
                report.trees += 1;
                for e in entries {
                    if e.kind == Kind::Dir {
                        stack.push(e.id);
                    } else if checked.insert(e.id) {
                        if !self.store.contains(&e.id)? {
                            report.problems.push((s.name.clone(), format!("blob {} is missing", e.id)));
                        } else if self.rows.get(rows::own_key(&e.id))?.is_none() {
                            report
                                .problems
                                .push((s.name.clone(), format!("blob {} is not owned by the tree layer", e.id)));
                        }
                    }
                }
            }
        }
        Ok(report)
    }

    /// Where the blobs `ids` are used: (blob, snapshot, path) for every file, link and
    /// directory (a tree object) of every snapshot whose content is one of them. A tree that
    /// cannot be read is reported as its directory with what is below it unknown.
    pub fn blob_users(&self, ids: &HashSet<Id>) -> Result<Vec<(Id, String, String)>> {
        let mut out = Vec::new();
        for s in self.snapshots()? {
            let mut stack = vec![(s.root, String::new())];
            while let Some((t, dir)) = stack.pop() {
                let shown = if dir.is_empty() { "/".to_string() } else { dir.clone() };
                if ids.contains(&t) {
                    out.push((t, s.name.clone(), format!("{shown} (the directory listing)")));
                }
                let Ok(entries) = self.read_tree(&t) else { continue };
                for e in entries {
                    let path = format!("{dir}/{}", crate::escape_name(&e.name));
                    if e.kind == Kind::Dir {
                        stack.push((e.id, path));
                    } else if ids.contains(&e.id) {
                        out.push((e.id, s.name.clone(), path));
                    }
                }
            }
        }
        Ok(out)
    }
}
