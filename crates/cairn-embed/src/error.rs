//! The crate's error type.

use std::path::PathBuf;

/// Everything that can go wrong in cairn-embed.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of a model could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// A model directory's manifest (or the files it names) is missing or invalid.
    #[error("model manifest {path}: {message}")]
    Manifest {
        /// The manifest or model directory.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The tokenizer could not be loaded or failed on an input.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// The model runtime (onnxruntime or candle) failed.
    #[error("model runtime: {0}")]
    Runtime(String),
    /// The model's output does not have the shape this crate expects.
    #[error("model output: {0}")]
    ModelOutput(String),
    /// The model needs a runtime this build does not include (a cargo feature that is off).
    #[error("unsupported model: {0}")]
    Unsupported(String),
    /// An encoded vector is truncated or corrupt.
    #[error("corrupt vector at byte {offset}: {message}")]
    CorruptVector {
        /// Byte offset in the encoded input where the problem was found.
        offset: usize,
        /// What is wrong.
        message: &'static str,
    },
    /// A vector does not have the dimension the index or model expects.
    #[error("dimension mismatch: expected {expected}, got {got}")]
    Dimension {
        /// The dimension expected.
        expected: usize,
        /// The dimension given.
        got: usize,
    },
    /// An argument is out of its valid range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    pub(crate) fn manifest(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Manifest { path: path.into(), message: message.into() }
    }
}
