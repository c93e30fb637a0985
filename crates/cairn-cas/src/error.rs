//! The blob store's error type.

use std::path::PathBuf;

use crate::Id;

/// Result alias of the blob store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in `cairn-cas`.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key-value engine failed.
    #[error(transparent)]
    Kv(#[from] cairn_kv::Error),
    /// An I/O operation on a pack file failed.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The pack file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The backend holding sealed packs (S3, another directory) failed, after its retries.
    #[error("backend error on {object}: {source}")]
    Backend {
        /// The backend object (`s3://bucket/prefix/pack-00000004.pack`), or the backend itself.
        object: String,
        /// The underlying error (`NotFound` when the object does not exist).
        #[source]
        source: std::io::Error,
    },
    /// Reading the content being stored failed.
    #[error("reading the content to store failed: {0}")]
    Source(#[source] std::io::Error),
    /// Stored data is damaged: a pack entry fails its checksum or hash, or an index row is
    /// malformed.
    #[error("corruption in {} at offset {offset}: {reason}", path.display())]
    Corruption {
        /// The damaged file (a pack, or the index).
        path: PathBuf,
        /// Offset of the damaged entry.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// No blob with this id is stored.
    #[error("no blob {0}")]
    NotFound(Id),
    /// A chunk a blob needs is missing from the index (a dangling reference).
    #[error("blob refers to chunk {0}, which is not in the index")]
    MissingChunk(Id),
    /// Prepared content refers to a chunk deleted since it was prepared; prepare it again.
    #[error("prepared blob {0} is stale: a chunk it relied on was deleted; prepare it again")]
    Stale(Id),
    /// The caller passed something the store cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The pack directory holds packs the index cannot account for (an empty index beside
    /// packs: the engine's data is missing). Nothing was changed.
    #[error(
        "{} holds {} pack files but the blob store's index is empty (was the engine's directory deleted or replaced?); nothing was changed: restore the engine's files, or move the packs aside to start anew",
        dir.display(),
        packs.len()
    )]
    Unaccounted {
        /// The pack directory.
        dir: PathBuf,
        /// The pack files found.
        packs: Vec<String>,
    },
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn corruption(path: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corruption { path: path.into(), offset, reason: reason.into() }
    }
}
