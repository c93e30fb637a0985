//! Checkout: materialize a snapshot into a new directory by hard link (one read-only file per
//! unique content and executable bit, shared), reflink (copy-on-write clone where the file
//! system supports it, else a copy), or copy.
//!
//! Every name was checked when the tree object was decoded (one component, not `.`/`..`, no
//! `/` or NUL), paths are built only by joining such names onto the destination, the
//! destination must be new or empty, and files are created with `create_new` and directories
//! with `create_dir`, which never follow an existing symlink: nothing can be written outside it.

use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use cairn_cas::Id;
use rayon::prelude::*;

use crate::object::{Entry, Kind};
use crate::{Error, Result, Trees};

/// How files are materialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckoutMode {
    /// Hard links to a shared, read-only copy of each unique content (falls back to copy across
    /// file systems). Files in the checkout must not be modified in place.
    Hardlink,
    /// Copy-on-write clones where the file system supports them, copies otherwise.
    Reflink,
    /// Independent copies.
    Copy,
}

impl std::str::FromStr for CheckoutMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "hardlink" => Ok(CheckoutMode::Hardlink),
            "reflink" => Ok(CheckoutMode::Reflink),
            "copy" => Ok(CheckoutMode::Copy),
            _ => Err(format!("unknown mode {s:?} (hardlink, reflink or copy)")),
        }
    }
}

/// What a checkout did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckoutStats {
    /// Files materialized.
    pub files: u64,
    /// Directories created (the destination included).
    pub dirs: u64,
    /// Symbolic links created.
    pub symlinks: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Files hard-linked.
    pub linked: u64,
    /// Files cloned by reflink.
    pub reflinked: u64,
    /// Files copied.
    pub copied: u64,
}

fn time(ns: i64) -> std::time::SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn perm(mode: u32) -> fs::Permissions {
    fs::Permissions::from_mode(mode & 0o7777)
}

impl Trees {
    /// Materializes snapshot `name` into `dest` (which must not exist, or be an empty directory).
    pub fn checkout(&self, name: &str, dest: &Path, mode: CheckoutMode) -> Result<CheckoutStats> {
        let snap = self.snapshot_info(name)?;
        match fs::read_dir(dest) {
            Ok(mut rd) => {
                if rd.next().is_some() {
                    return Err(Error::InvalidArgument(format!("{} is not empty", dest.display())));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = dest.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
                }
                fs::create_dir(dest).map_err(|e| Error::io(dest, e))?;
            }
            Err(e) => return Err(Error::io(dest, e)),
        }
        // Directories first (sequentially, parents before children), then files in parallel.
        let mut dirs: Vec<(PathBuf, Entry)> = Vec::new();
        let mut leaves: Vec<(PathBuf, Entry)> = Vec::new();
        self.collect(&snap.root, dest, &mut dirs, &mut leaves)?;
        for (path, _) in &dirs {
            fs::create_dir(path).map_err(|e| Error::io(path, e))?;
        }
        // Without clones between the data directory and the destination, a reflink checkout
        // copies straight from the store (no shared copy is made for it).
        let mode = if mode == CheckoutMode::Reflink && !self.reflinks_to(dest) { CheckoutMode::Copy } else { mode };
        let stats = Counters::default();
        leaves.par_iter().try_for_each(|(path, e)| self.materialize(path, e, mode, &stats))?;
        // Directory permissions and times last (creating children changes a directory's mtime).
        for (path, e) in dirs.iter().rev() {
            fs::set_permissions(path, perm(e.mode | 0o700)).map_err(|er| Error::io(path, er))?;
            let f = fs::File::open(path).map_err(|er| Error::io(path, er))?;
            f.set_modified(time(e.mtime_ns)).map_err(|er| Error::io(path, er))?;
            fs::set_permissions(path, perm(e.mode)).map_err(|er| Error::io(path, er))?;
        }
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Ok(CheckoutStats {
            files: g(&stats.files),
            dirs: dirs.len() as u64 + 1,
            symlinks: g(&stats.symlinks),
            bytes: g(&stats.bytes),
            linked: g(&stats.linked),
            reflinked: g(&stats.reflinked),
            copied: g(&stats.copied),
        })
    }

    /// Whether files in the shared-copy directory can be cloned into `dest` (a probe file).
    fn reflinks_to(&self, dest: &Path) -> bool {
        if fs::create_dir_all(&self.files_dir).is_err() {
            return false;
        }
        let from = self.files_dir.join(format!(".reflink-probe.{}", std::process::id()));
        let to = dest.join(format!(".cairn-reflink-probe.{}", std::process::id()));
        let ok = fs::write(&from, b"probe").is_ok() && reflink_copy::reflink(&from, &to).is_ok();
        let _ = fs::remove_file(&from);
        let _ = fs::remove_file(&to);
        ok
    }

    fn collect(
        &self,
        tree: &Id,
        at: &Path,
        dirs: &mut Vec<(PathBuf, Entry)>,
        leaves: &mut Vec<(PathBuf, Entry)>,
    ) -> Result<()> {
        for e in self.read_tree(tree)? {
            let path = at.join(std::ffi::OsStr::from_bytes(&e.name));
            if e.kind == Kind::Dir {
                dirs.push((path.clone(), e.clone()));
                self.collect(&e.id, &path, dirs, leaves)?;
            } else {
                leaves.push((path, e));
            }
        }
        Ok(())
    }

    fn materialize(&self, path: &Path, e: &Entry, mode: CheckoutMode, c: &Counters) -> Result<()> {
        if e.kind == Kind::Symlink {
            let target = self.store.get(&e.id)?;
            std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(&target), path).map_err(|er| Error::io(path, er))?;
            c.symlinks.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        c.files.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(e.size, Ordering::Relaxed);
        match mode {
            CheckoutMode::Copy => {}
            CheckoutMode::Hardlink => {
                let shared = self.shared_file(&e.id, e.size, e.mode, e.mtime_ns)?;
                match fs::hard_link(&shared, path) {
                    Ok(()) => {
                        c.linked.fetch_add(1, Ordering::Relaxed);
                        return Ok(());
                    }
                    // Another file system (EXDEV) or too many links: copy instead.
                    Err(er) if matches!(er.raw_os_error(), Some(18) | Some(31)) => {}
                    Err(er) => return Err(Error::io(path, er)),
                }
            }
            CheckoutMode::Reflink => {
                let shared = self.shared_file(&e.id, e.size, e.mode, e.mtime_ns)?;
                if reflink_copy::reflink(&shared, path).is_ok() {
                    fs::set_permissions(path, perm(e.mode)).map_err(|er| Error::io(path, er))?;
                    set_mtime(path, e.mtime_ns)?;
                    c.reflinked.fetch_add(1, Ordering::Relaxed);
                    return Ok(());
                }
                let _ = fs::remove_file(path);
            }
        }
        self.copy_out(&e.id, path, e.mode)?;
        set_mtime(path, e.mtime_ns)?;
        c.copied.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes blob `id` to a new file at `path` with `mode`.
    pub(crate) fn copy_out(&self, id: &Id, path: &Path, mode: u32) -> Result<()> {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| Error::io(path, e))?;
        let mut r = self.store.reader(id)?;
        std::io::copy(&mut r, &mut f).map_err(|e| match e.downcast::<cairn_cas::Error>() {
            Ok(inner) => Error::Cas(inner),
            Err(e) => Error::io(path, e),
        })?;
        f.flush().map_err(|e| Error::io(path, e))?;
        fs::set_permissions(path, perm(mode)).map_err(|e| Error::io(path, e))
    }
}

pub(crate) fn set_mtime(path: &Path, ns: i64) -> Result<()> {
    // Open for writing would fail on read-only files; times can be set through a read handle.
    let f = fs::File::open(path).map_err(|e| Error::io(path, e))?;
    f.set_modified(time(ns)).map_err(|e| Error::io(path, e))
}

#[derive(Default)]
struct Counters {
    files: AtomicU64,
    symlinks: AtomicU64,
    bytes: AtomicU64,
    linked: AtomicU64,
    reflinked: AtomicU64,
    copied: AtomicU64,
}
