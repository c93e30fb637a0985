use std::path::PathBuf;

/// What went wrong in the document memory.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The key-value engine failed.
    #[error(transparent)]
    Kv(#[from] cairn_kv::Error),
    /// The blob store failed.
    #[error(transparent)]
    Cas(#[from] cairn_cas::Error),
    /// The full-text index failed.
    #[error("search index: {0}")]
    Index(#[from] tantivy::TantivyError),
    /// The full-text index's files are damaged (the index library failed on them).
    #[error("the full-text index is damaged: {0}")]
    IndexDamaged(String),
    /// The embedding model failed (or none is installed).
    #[error("embedding model: {0}")]
    Embed(#[from] cairn_embed::Error),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// No document has this path (or id).
    #[error("no document {0}")]
    NotFound(String),
    /// The document has no such version.
    #[error("{0} has no version {1}")]
    NoVersion(String, u32),
    /// The caller passed something the memory cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A stored row does not decode.
    #[error("corrupt document row {key}: {msg}")]
    Corrupt {
        /// The row's key (escaped).
        key: String,
        /// What is wrong with it.
        msg: String,
    },
    /// The search query or grep pattern is malformed.
    #[error("bad query: {0}")]
    Query(String),
    /// A group commit this call was part of failed; nothing of the group was written.
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        Error::Io { path: path.into(), source }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
