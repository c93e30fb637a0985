//! What a caller may do: write or only read, and which parts of the file system it may make the
//! daemon read (add files, snapshot) or write (check out, restore).
//!
//! Local callers (the command line, the daemon's Unix socket, which only its owner can open)
//! have full access. Remote callers (TCP and HTTP clients with a token) act only inside the
//! configured roots (`[server] roots`), none when none are configured; a read-only token cannot
//! change anything.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A caller's rights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// May only read.
    pub read_only: bool,
    /// Directories the caller may make the daemon read or write files in (`None`: anywhere).
    pub roots: Option<Vec<PathBuf>>,
}

impl Access {
    /// Everything (local callers).
    pub fn full() -> Access {
        Access { read_only: false, roots: None }
    }

    /// A remote caller: inside `roots` only (none configured: no file-system access).
    pub fn remote(roots: Option<&[PathBuf]>, read_only: bool) -> Access {
        Access { read_only, roots: Some(roots.map(<[PathBuf]>::to_vec).unwrap_or_default()) }
    }

    /// Fails unless the caller may write.
    pub fn check_write(&self, what: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::forbidden(format!("{what} changes data; this caller's token is read-only")));
        }
        Ok(())
    }

    /// Fails unless the caller may have the daemon read or write the file-system path `p`
    /// (absolute). Symbolic links are resolved as far as the path exists, so a link inside a
    /// root that points outside it does not count as inside.
    pub fn check_path(&self, p: &Path, what: &str) -> Result<()> {
        let Some(roots) = &self.roots else { return Ok(()) };
        if roots.is_empty() {
            return Err(Error::forbidden(format!(
                "{what} {}: remote clients have no file-system access (set `roots` in [server] of cairn.toml)",
                p.display()
            )));
        }
        let real = resolve_existing(p);
        for r in roots {
            let root = std::fs::canonicalize(r).unwrap_or_else(|_| r.clone());
            if real.starts_with(&root) {
                return Ok(());
            }
        }
        Err(Error::forbidden(format!(
            "{what} {}: outside the roots remote clients may use ({})",
            p.display(),
            roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        )))
    }
}

/// `p` with its longest existing ancestor canonicalized (symbolic links and `..` resolved) and
/// the rest appended.
fn resolve_existing(p: &Path) -> PathBuf {
    let p = crate::absolute(Path::new("/"), p);
    let mut base = p.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(base) {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return out;
        }
        match (base.parent(), base.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                base = parent;
            }
            _ => return p,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_callers_stay_inside_their_roots() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let outside = t.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let a = Access::remote(Some(std::slice::from_ref(&root)), false);
        assert!(a.check_path(&root.join("sub/new/file"), "checkout").is_ok());
        assert!(a.check_path(&root.join("../outside/x"), "checkout").is_err());
        assert!(a.check_path(&root.join("escape/x"), "checkout").is_err(), "a link out of the root");
        assert!(a.check_path(&outside, "snapshot").is_err());
        assert!(a.check_path(Path::new("/etc/shadow"), "snapshot").is_err());
        let none = Access::remote(None, false);
        let e = none.check_path(&root, "snapshot").unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Forbidden);
        assert!(e.to_string().contains("roots"), "{e}");
        assert!(Access::full().check_path(Path::new("/etc"), "snapshot").is_ok());
        assert!(Access::remote(None, true).check_write("add").is_err());
        assert!(Access::full().check_write("add").is_ok());
    }
}
