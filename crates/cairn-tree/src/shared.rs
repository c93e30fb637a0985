//! The shared read-only copies in `files/` that hard-link checkouts link to (and reflink
//! checkouts clone). One copy per content, permission bits and modification time, named
//! `<hh>/<id hex>.<mode octal>.<mtime ns>`, so a checked-out file keeps the mode (without write
//! bits) and the mtime it had when snapshotted, and an owner-only file stays owner-only.
//!
//! A hard-linked file is the shared copy: a user who makes it writable and edits it edits the
//! copy. Before a copy is reused its size, mode and mtime are compared with what its name says;
//! a copy that differs is unlinked from `files/` (the checkouts that link to it keep their
//! edited file) and made anew from the store, so an edit never reaches a later checkout.
//! `verify` rehashes every copy (edits that restored the mtime included).

use std::fs;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use cairn_cas::Id;

use crate::{Error, Result, Trees};

/// What a shared copy's name says about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedName {
    pub id: Id,
    /// Permission bits (no write bits); `None` for names of earlier releases.
    pub mode: Option<u32>,
    /// Modification time; `None` for names of earlier releases.
    pub mtime_ns: Option<i64>,
}

impl SharedName {
    fn file_name(&self) -> String {
        match (self.mode, self.mtime_ns) {
            (Some(m), Some(t)) => format!("{}.{m:o}.{t}", self.id.to_hex()),
            _ => self.id.to_hex(),
        }
    }

    /// Parses a name this module (or an earlier release: `<hex>`, `<hex>.x`) gave a copy.
    pub fn parse(name: &str) -> Option<SharedName> {
        let mut parts = name.split('.');
        let id: Id = parts.next()?.parse().ok()?;
        match (parts.next(), parts.next(), parts.next()) {
            (None, _, _) => Some(SharedName { id, mode: None, mtime_ns: None }),
            (Some("x"), None, _) => Some(SharedName { id, mode: None, mtime_ns: None }),
            (Some(m), Some(t), None) => {
                Some(SharedName { id, mode: Some(u32::from_str_radix(m, 8).ok()?), mtime_ns: Some(t.parse().ok()?) })
            }
            _ => None,
        }
    }
}

/// The permission bits of a shared copy of a file with `mode`: its read and execute bits.
pub(crate) fn shared_mode(mode: u32) -> u32 {
    mode & 0o555
}

/// Whether the file at `path` still is what `name` says (size, mode, mtime).
fn intact(path: &Path, name: &SharedName, size: u64) -> bool {
    let Ok(m) = fs::symlink_metadata(path) else { return false };
    let mtime = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
    m.is_file()
        && m.len() == size
        && name.mode.is_none_or(|mode| m.permissions().mode() & 0o7777 == mode)
        && name.mtime_ns.is_none_or(|t| mtime == t as i128)
}

impl Trees {
    /// The shared copy of blob `id` (of `size` bytes) for a file with `mode` and `mtime_ns`,
    /// made from the store if it does not exist or was changed since it was made.
    pub(crate) fn shared_file(&self, id: &Id, size: u64, mode: u32, mtime_ns: i64) -> Result<PathBuf> {
        let name = SharedName { id: *id, mode: Some(shared_mode(mode)), mtime_ns: Some(mtime_ns) };
        let hex = id.to_hex();
        let dir = self.files_dir.join(&hex[..2]);
        let path = dir.join(name.file_name());
        if path.exists() {
            if intact(&path, &name, size) {
                return Ok(path);
            }
            // Changed through a hard-linked checkout: the checkouts keep their (edited) file; a
            // new copy is made for the ones to come.
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        // Unique per process and per call, so parallel materializations never share a temp file.
        static NEXT_TMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT_TMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(".{hex}.{}.{n}.tmp", std::process::id()));
        self.copy_out(id, &tmp, shared_mode(mode))?;
        crate::checkout::set_mtime(&tmp, mtime_ns)?;
        // Concurrent checkouts may race to create it; either copy is the same content.
        fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
        Ok(path)
    }

    /// Every shared copy: (path, what its name says), and names it does not recognize.
    fn shared_files(&self) -> (Vec<(PathBuf, SharedName)>, Vec<PathBuf>) {
        let (mut known, mut unknown) = (Vec::new(), Vec::new());
        let Ok(rd) = fs::read_dir(&self.files_dir) else { return (known, unknown) };
        for sub in rd.flatten() {
            let Ok(files) = fs::read_dir(sub.path()) else {
                unknown.push(sub.path());
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name();
                match name.to_str().and_then(SharedName::parse) {
                    Some(n) => known.push((f.path(), n)),
                    None => unknown.push(f.path()),
                }
            }
        }
        (known, unknown)
    }

    /// Rehashes every shared copy against the content its name gives: (path, problem) for
    /// each that differs (changed through a hard-linked checkout). Names it does not recognize
    /// are left alone and not reported (temporary files of a checkout that was cut short
    /// start with a dot).
    pub fn verify_shared_files(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for (path, name) in self.shared_files().0 {
            let mut h = self.store.hash_algo().hasher();
            let read = fs::File::open(&path).and_then(|mut f| {
                let mut buf = vec![0u8; 1 << 20];
                loop {
                    let n = f.read(&mut buf)?;
                    if n == 0 {
                        return Ok(());
                    }
                    h.update(&buf[..n]);
                }
            });
            let shown = path.display().to_string();
            match read {
                Err(e) => out.push((shown, format!("cannot read a shared checkout copy: {e}"))),
                Ok(()) if h.finish() != name.id => out.push((
                    shown,
                    "a shared checkout copy was changed after checkout (edited through a hard-linked \
                     file); hard-linked checkouts of it hold the edited content, and the next checkout \
                     makes a fresh copy"
                        .into(),
                )),
                Ok(()) => {}
            }
        }
        Ok(out)
    }

    /// Unlinks shared copies whose content no snapshot reaches, and changed ones (checkouts
    /// linking to them keep their files). Names it does not recognize are left alone.
    pub(crate) fn prune_shared_files(&self, live: &std::collections::HashSet<Id>, changed: &[String]) -> Result<u64> {
        let mut n = 0;
        for (path, name) in self.shared_files().0 {
            let gone = !live.contains(&name.id) || changed.iter().any(|c| Path::new(c) == path);
            if gone && fs::remove_file(&path).is_ok() {
                n += 1;
            }
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_old_names_parse() {
        let id = cairn_cas::HashAlgo::Blake3.hash(b"x");
        let n = SharedName { id, mode: Some(0o444), mtime_ns: Some(1_700_000_000_123_456_789) };
        assert_eq!(SharedName::parse(&n.file_name()), Some(n));
        assert_eq!(SharedName::parse(&id.to_hex()).unwrap().mode, None);
        assert_eq!(SharedName::parse(&format!("{}.x", id.to_hex())).unwrap().id, id);
        for bad in ["", "zz", &format!(".{}.1.2.tmp", id.to_hex()), &format!("{}.9.1", id.to_hex())] {
            assert_eq!(SharedName::parse(bad), None, "{bad}");
        }
        assert_eq!(shared_mode(0o100600), 0o400);
        assert_eq!(shared_mode(0o755), 0o555);
    }
}
