//! The tree layer's error type.

use std::path::PathBuf;

/// Result alias of `cairn-tree`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `cairn-tree`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The blob store failed.
    #[error(transparent)]
    Cas(#[from] cairn_cas::Error),
    /// The key-value engine failed.
    #[error(transparent)]
    Kv(#[from] cairn_kv::Error),
    /// A file system operation on the tree being read or written failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A stored tree object or snapshot row does not decode.
    #[error("corrupt {what}: {reason}")]
    Corrupt {
        /// What was being decoded.
        what: String,
        /// Why it failed.
        reason: String,
    },
    /// A name that could escape the checkout directory or is otherwise unusable.
    #[error("unsafe or invalid file name {0:?}")]
    BadName(String),
    /// No snapshot has this name.
    #[error("no snapshot named {0:?}")]
    NoSuchSnapshot(String),
    /// A snapshot with this name exists already.
    #[error("a snapshot named {0:?} exists already (remove it first)")]
    SnapshotExists(String),
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Corrupt { what: what.into(), reason: reason.into() }
    }
}
