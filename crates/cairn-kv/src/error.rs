//! The engine's error type.

use std::io;
use std::path::{Path, PathBuf};

/// Result alias used across the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `cairn-kv`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O operation failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// File or directory the operation touched (may be empty when unknown).
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A file's content does not decode or fails its checksum.
    #[error("corruption in {} at offset {offset}: {reason}", path.display())]
    Corruption {
        /// The damaged file.
        path: PathBuf,
        /// Byte offset of the damaged record or block.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A key is longer than [`crate::MAX_KEY_LEN`] (or empty where not allowed).
    #[error("key of {len} bytes is too large (maximum {max} bytes)")]
    KeyTooLarge {
        /// Length of the rejected key.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A value is longer than [`crate::MAX_VALUE_LEN`].
    #[error("value of {len} bytes is too large (maximum {max} bytes)")]
    ValueTooLarge {
        /// Length of the rejected value.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An optimistic transaction lost a race: a key it read or wrote was changed by another
    /// writer after the transaction's snapshot. Retry the transaction.
    #[error("transaction conflict: key {key:?} was modified after the transaction began")]
    Conflict {
        /// The first conflicting key found (lossy UTF-8 for display).
        key: String,
    },
    /// An earlier write, fsync or background job failed; the engine refuses writes because its
    /// state on disk is unknown. Close and reopen the database to recover.
    #[error("database refuses writes after an earlier failure ({0}); reopen it to recover")]
    Poisoned(String),
    /// Another process (or another handle in this process) holds the database lock.
    #[error("database at {} is locked by another process", .0.display())]
    Locked(PathBuf),
    /// The caller passed something the engine cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The database is shutting down.
    #[error("database is closed")]
    Closed,
    /// The directory holds a database's files that its state cannot account for: `CURRENT` or
    /// the MANIFEST it names is missing or damaged while tables, logs or MANIFESTs are
    /// present, or the MANIFEST names tables that are gone. Nothing was changed; `Db::repair`
    /// rebuilds the state from the files that are there.
    #[error(
        "cannot open the database at {}: {reason}; it holds {}; nothing was changed (Db::repair rebuilds the MANIFEST from the tables and logs present)",
        dir.display(),
        list_files(files)
    )]
    NeedsRepair {
        /// The database directory.
        dir: PathBuf,
        /// What is missing or damaged.
        reason: String,
        /// The files concerned, by name: the database's files found (or, when the MANIFEST
        /// names missing tables, those tables).
        files: Vec<String>,
        /// The error met reading `CURRENT` or the MANIFEST, if any.
        #[source]
        source: Option<Box<Error>>,
    },
}

/// The first few of `files`, for a message.
fn list_files(files: &[String]) -> String {
    const SHOWN: usize = 12;
    let mut s = files.iter().take(SHOWN).map(String::as_str).collect::<Vec<_>>().join(", ");
    if files.len() > SHOWN {
        s.push_str(&format!(" and {} more", files.len() - SHOWN));
    }
    if s.is_empty() { "no files".into() } else { s }
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl AsRef<Path>, source: io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), source }
    }

    /// Builds a corruption error.
    pub fn corruption(path: impl AsRef<Path>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { path: path.as_ref().to_path_buf(), offset, reason: reason.into() }
    }

    /// True for [`Error::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// True for [`Error::Corruption`], and for [`Error::NeedsRepair`] (damage to the
    /// database's state as a whole).
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. } | Error::NeedsRepair { .. })
    }
}

/// Adds a path to `io::Result`s.
pub(crate) trait IoContext<T> {
    /// Maps the error to [`Error::Io`] naming `path`.
    fn at(self, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn at(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(path, e))
    }
}
