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

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
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
