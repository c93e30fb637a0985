//! Errors of the record tables.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine failed.
    #[error(transparent)]
    Kv(#[from] cairn_kv::Error),
    /// No table by this name.
    #[error("no table {0}")]
    NoTable(String),
    /// A table by this name exists.
    #[error("table {0} exists")]
    TableExists(String),
    /// No record with this primary key.
    #[error("no record {1} in table {0}")]
    NotFound(String, String),
    /// Put-if-absent found a record.
    #[error("record {1} exists in table {0}")]
    Exists(String, String),
    /// Compare-and-set found another version.
    #[error("record {id} is at version {current}, not {expected}")]
    VersionMismatch {
        /// The record.
        id: String,
        /// The version the caller expected.
        expected: u64,
        /// The version stored (0: absent).
        current: u64,
    },
    /// No index by this name.
    #[error("no index {1} on table {0}")]
    NoIndex(String, String),
    /// A record, name, schema or option is not acceptable.
    #[error("invalid: {0}")]
    Invalid(String),
    /// The filter does not parse.
    #[error(transparent)]
    Filter(#[from] crate::fiql::ParseError),
    /// Concurrent writers kept changing what the transaction read; it was retried and gave up.
    #[error("transaction conflict after {0} attempts; retry")]
    Conflict(usize),
    /// A stored row does not decode.
    #[error("corrupt row {key}: {msg}")]
    Corrupt {
        /// The row's key (escaped).
        key: String,
        /// What is wrong.
        msg: String,
    },
}

impl Error {
    pub(crate) fn corrupt(key: &[u8], msg: impl Into<String>) -> Error {
        Error::Corrupt { key: key.escape_ascii().to_string(), msg: msg.into() }
    }
}

/// Result with [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
