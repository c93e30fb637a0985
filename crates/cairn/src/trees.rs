//! Directory snapshots: snapshot, checkout, diff, list, remove, gc, du.

use std::path::PathBuf;

use cairn_tree::{Change, CheckoutMode, SnapshotInfo};
use serde::{Deserialize, Serialize};

use crate::{Cairn, Call, Error, Progress, Result};

/// A snapshot's record in JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Its name.
    pub name: String,
    /// Root tree id (hex).
    pub root: String,
    /// Creation time (nanoseconds since the epoch).
    pub created_ns: i64,
    /// Regular files.
    pub files: u64,
    /// Directories (the root included).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Sum of file sizes.
    pub bytes: u64,
    /// The directory it was taken of.
    pub source: String,
}

impl From<&SnapshotInfo> for Snapshot {
    fn from(i: &SnapshotInfo) -> Snapshot {
        Snapshot {
            name: i.name.clone(),
            root: i.root.to_hex(),
            created_ns: i.created_ns,
            files: i.files,
            dirs: i.dirs,
            symlinks: i.symlinks,
            bytes: i.bytes,
            source: i.source.clone(),
        }
    }
}

/// Snapshot a directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    /// The directory (relative: against the caller's working directory).
    pub source: PathBuf,
    /// The snapshot's name (default: the directory's name and the time).
    #[serde(default)]
    pub name: Option<String>,
}

/// What a snapshot did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SnapshotResult {
    /// The new snapshot.
    pub snapshot: Snapshot,
    /// Files read and hashed.
    pub files_read: u64,
    /// Files skipped as unchanged.
    pub files_cached: u64,
    /// Blobs newly stored.
    pub blobs_stored: u64,
    /// Bytes appended to packs.
    pub bytes_stored: u64,
    /// Sockets, FIFOs and devices skipped.
    pub special_skipped: u64,
    /// Wall time.
    pub seconds: f64,
}

/// How a checkout materializes files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Copy-on-write clones where the file system supports them, else copies (the default:
    /// the checkout shares nothing writable with the store).
    #[default]
    Reflink,
    /// Independent copies.
    Copy,
    /// Hard links to shared read-only copies in the data directory (fastest, least space; the
    /// files must not be changed in place).
    Hardlink,
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Mode> {
        match s {
            "reflink" => Ok(Mode::Reflink),
            "copy" => Ok(Mode::Copy),
            "hardlink" => Ok(Mode::Hardlink),
            _ => Err(Error::bad_request(format!("unknown checkout mode {s:?} (reflink, copy or hardlink)"))),
        }
    }
}

/// Materialize a snapshot into a new or empty directory.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CheckoutRequest {
    /// The snapshot.
    pub snapshot: String,
    /// The destination (relative: against the caller's working directory).
    pub dest: PathBuf,
    /// How files are materialized.
    pub mode: Mode,
}

/// What a checkout did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckoutResult {
    /// The destination.
    pub dest: PathBuf,
    /// Files materialized.
    pub files: u64,
    /// Directories created.
    pub dirs: u64,
    /// Symbolic links created.
    pub symlinks: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Files hard-linked.
    pub linked: u64,
    /// Files cloned.
    pub reflinked: u64,
    /// Files copied.
    pub copied: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Paths that differ between two snapshots.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffRequest {
    /// The first snapshot.
    pub a: String,
    /// The second snapshot.
    pub b: String,
}

/// One difference.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffEntry {
    /// `added`, `removed`, `modified` or `renamed`.
    pub change: String,
    /// The path (in the second snapshot for renames).
    pub path: String,
    /// The path in the first snapshot (renames).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
}

/// The differences, by path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffResult {
    /// Every difference.
    pub changes: Vec<DiffEntry>,
}

/// Every snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotsResult {
    /// The snapshots, by name.
    pub snapshots: Vec<Snapshot>,
}

/// Remove snapshots (their space is freed by gc).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RmSnapshotRequest {
    /// The snapshots.
    pub names: Vec<String>,
}

/// Snapshots removed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RmSnapshotResult {
    /// Their records.
    pub removed: Vec<Snapshot>,
}

/// What a garbage collection did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcResult {
    /// Blobs still reachable from a snapshot.
    pub reachable: u64,
    /// Blobs released.
    pub released: u64,
    /// Stale inode-cache rows removed.
    pub cache_rows_removed: u64,
    /// Shared checkout files removed.
    pub shared_files_removed: u64,
    /// Pack bytes before.
    pub bytes_before: u64,
    /// Pack bytes after.
    pub bytes_after: u64,
}

/// Disk usage of one snapshot or all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DuRequest {
    /// The snapshot (default: all).
    pub snapshot: Option<String>,
}

/// Disk usage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DuResult {
    /// Sum of file sizes (what copies would take).
    pub logical_bytes: u64,
    /// Bytes of unique chunks.
    pub unique_bytes: u64,
    /// Bytes in packs (compressed).
    pub stored_bytes: u64,
    /// Blobs.
    pub blobs: u64,
    /// Chunks.
    pub chunks: u64,
    /// Logical bytes per stored byte.
    pub dedup_ratio: f64,
}

impl Cairn {
    /// Snapshots a directory (never the data directory itself).
    pub fn snapshot(&self, req: SnapshotRequest, call: &Call<'_>) -> Result<SnapshotResult> {
        call.access.check_write("snapshot")?;
        let src = crate::docs::resolve_path(call, &req.source, "snapshot")?;
        call.access.check_path(&src, "snapshot")?;
        if let Some(n) = &req.name {
            cairn_tree::check_snapshot_name(n)?;
        }
        let trees = self.trees(true)?;
        let report = call.progress;
        let progress = |p: cairn_tree::Progress| {
            if let Some(f) = report {
                f(Progress { total: p.files_total, done: p.files_done, bytes: p.bytes_done });
            }
        };
        let s =
            trees.snapshot_excluding(&src, req.name.as_deref(), &[self.layout().root().to_path_buf()], &progress)?;
        Ok(SnapshotResult {
            snapshot: Snapshot::from(&s.info),
            files_read: s.files_read,
            files_cached: s.files_cached,
            blobs_stored: s.blobs_stored,
            bytes_stored: s.bytes_stored,
            special_skipped: s.special_skipped,
            seconds: s.seconds,
        })
    }

    /// Materializes a snapshot.
    pub fn checkout(&self, req: CheckoutRequest, call: &Call<'_>) -> Result<CheckoutResult> {
        let dest = crate::docs::resolve_path(call, &req.dest, "checkout")?;
        call.access.check_path(&dest, "checkout")?;
        let trees = self.trees(false)?;
        let mode = match req.mode {
            Mode::Reflink => CheckoutMode::Reflink,
            Mode::Copy => CheckoutMode::Copy,
            Mode::Hardlink => CheckoutMode::Hardlink,
        };
        let t = std::time::Instant::now();
        let c = trees.checkout(&req.snapshot, &dest, mode)?;
        Ok(CheckoutResult {
            dest,
            files: c.files,
            dirs: c.dirs,
            symlinks: c.symlinks,
            bytes: c.bytes,
            linked: c.linked,
            reflinked: c.reflinked,
            copied: c.copied,
            seconds: t.elapsed().as_secs_f64(),
        })
    }

    /// What differs between two snapshots.
    pub fn diff(&self, req: DiffRequest) -> Result<DiffResult> {
        let changes = self
            .trees(false)?
            .diff(&req.a, &req.b)?
            .into_iter()
            .map(|c| match c {
                Change::Added(p) => DiffEntry { change: "added".into(), path: p, from: None },
                Change::Removed(p) => DiffEntry { change: "removed".into(), path: p, from: None },
                Change::Modified(p) => DiffEntry { change: "modified".into(), path: p, from: None },
                Change::Renamed { from, to } => DiffEntry { change: "renamed".into(), path: to, from: Some(from) },
            })
            .collect();
        Ok(DiffResult { changes })
    }

    /// Every snapshot.
    pub fn snapshots(&self) -> Result<SnapshotsResult> {
        let list = self.trees(false)?.snapshots()?;
        Ok(SnapshotsResult { snapshots: list.iter().map(Snapshot::from).collect() })
    }

    /// Removes snapshots.
    pub fn rm_snapshot(&self, req: RmSnapshotRequest, call: &Call<'_>) -> Result<RmSnapshotResult> {
        call.access.check_write("rm-snapshot")?;
        let trees = self.trees(false)?;
        // Every name must exist before any is removed.
        for n in &req.names {
            trees.snapshot_info(n)?;
        }
        let mut removed = Vec::new();
        for n in &req.names {
            removed.push(Snapshot::from(&trees.remove_snapshot(n)?));
        }
        Ok(RmSnapshotResult { removed })
    }

    /// Frees what no snapshot needs.
    pub fn gc(&self, call: &Call<'_>) -> Result<GcResult> {
        call.access.check_write("gc")?;
        let r = self.trees(false)?.gc()?;
        Ok(GcResult {
            reachable: r.reachable,
            released: r.released,
            cache_rows_removed: r.cache_rows_removed,
            shared_files_removed: r.shared_files_removed,
            bytes_before: r.bytes_before,
            bytes_after: r.bytes_after,
        })
    }

    /// Disk usage.
    pub fn du(&self, req: DuRequest) -> Result<DuResult> {
        let d = self.trees(false)?.du(req.snapshot.as_deref())?;
        Ok(DuResult {
            logical_bytes: d.logical_bytes,
            unique_bytes: d.usage.chunk_bytes,
            stored_bytes: d.usage.stored_bytes,
            blobs: d.usage.blobs,
            chunks: d.usage.chunks,
            dedup_ratio: d.dedup_ratio(),
        })
    }
}
