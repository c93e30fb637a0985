//! One error type for every operation, with a [`kind`](Error::kind) from which each front-end
//! derives its answer in one place: the CLI its exit status, the IPC its error code, HTTP its
//! status.

use serde::{Deserialize, Serialize};

/// What kind of failure an error is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The named document, snapshot, table, record, key or data directory does not exist.
    NotFound,
    /// The request is malformed or its arguments are invalid.
    BadRequest,
    /// It conflicts with the current state (already exists, concurrent change).
    Conflict,
    /// A condition of the request (an expected version) does not hold.
    PreconditionFailed,
    /// No or a wrong token.
    Unauthorized,
    /// Not allowed for this caller (outside the daemon's roots, a read-only token).
    Forbidden,
    /// Stored data is damaged or missing.
    Corrupt,
    /// Anything else (I/O errors, bugs).
    Internal,
}

impl ErrorKind {
    /// Its name in JSON (`not_found`, ...).
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::BadRequest => "bad_request",
            ErrorKind::Conflict => "conflict",
            ErrorKind::PreconditionFailed => "precondition_failed",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Forbidden => "forbidden",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Internal => "internal",
        }
    }
}

/// An operation's failure: its kind and a message naming what failed and why (every cause,
/// once).
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// Results of the application layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The wire and JSON form of an error: `{"error": {"kind": "not_found", "message": "..."}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorInfo,
}

/// The kind and message of an error.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorInfo {
    /// Its kind.
    pub kind: ErrorKind,
    /// What failed and why.
    pub message: String,
}

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), source: None }
    }

    /// [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::NotFound, message)
    }

    /// [`ErrorKind::BadRequest`].
    pub fn bad_request(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::BadRequest, message)
    }

    /// [`ErrorKind::Forbidden`].
    pub fn forbidden(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Forbidden, message)
    }

    /// [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Internal, message)
    }

    /// An I/O error on `path`.
    pub fn io(path: &std::path::Path, e: std::io::Error) -> Error {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::PermissionDenied => ErrorKind::Forbidden,
            std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => ErrorKind::BadRequest,
            _ => ErrorKind::Internal,
        };
        Error { kind, message: format!("{}: {e}", path.display()), source: Some(Box::new(e)) }
    }

    /// An error reading content named `what` (a blob reader's I/O error may carry the blob
    /// store's error, whose kind it keeps).
    pub fn from_io_chain(what: &str, e: std::io::Error) -> Error {
        match e.downcast::<cairn_cas::Error>() {
            Ok(inner) => Error::from(inner).context(what),
            Err(e) => Error::io(std::path::Path::new(what), e),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// Its message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The same error with `context` in front of its message (`context: message`).
    pub fn context(mut self, context: impl std::fmt::Display) -> Error {
        self.message = format!("{context}: {}", self.message);
        self
    }

    /// Its JSON form.
    pub fn body(&self) -> ErrorBody {
        ErrorBody { error: ErrorInfo { kind: self.kind, message: self.message.clone() } }
    }

    /// The error an [`ErrorBody`] describes (from a daemon).
    pub fn from_body(b: ErrorBody) -> Error {
        Error::new(b.error.kind, b.error.message)
    }

    fn from_std(kind: ErrorKind, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        Error { kind, message: chain(&e), source: Some(Box::new(e)) }
    }
}

/// The message of `e` and its causes, `: `-separated, leaving out a cause whose text the
/// message so far already ends with (errors that print their source as well as returning it).
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|s| s as &(dyn std::error::Error + 'static))
    }
}

fn kv_kind(e: &cairn_kv::Error) -> ErrorKind {
    use cairn_kv::Error as E;
    match e {
        E::Corruption { .. } | E::NeedsRepair { .. } => ErrorKind::Corrupt,
        E::Conflict { .. } => ErrorKind::Conflict,
        E::KeyTooLarge { .. } | E::ValueTooLarge { .. } | E::InvalidArgument(_) => ErrorKind::BadRequest,
        _ => ErrorKind::Internal,
    }
}

fn cas_kind(e: &cairn_cas::Error) -> ErrorKind {
    use cairn_cas::Error as E;
    match e {
        E::Kv(k) => kv_kind(k),
        E::Corruption { .. } | E::MissingChunk(_) | E::Unaccounted { .. } => ErrorKind::Corrupt,
        E::NotFound(_) => ErrorKind::NotFound,
        E::InvalidArgument(_) => ErrorKind::BadRequest,
        _ => ErrorKind::Internal,
    }
}

impl From<cairn_kv::Error> for Error {
    fn from(e: cairn_kv::Error) -> Error {
        let repair = matches!(e, cairn_kv::Error::NeedsRepair { .. });
        let err = Error::from_std(kv_kind(&e), e);
        if repair {
            return Error::new(ErrorKind::Corrupt, format!("{} — run `cairn repair`", err.message));
        }
        err
    }
}

impl From<cairn_cas::Error> for Error {
    fn from(e: cairn_cas::Error) -> Error {
        Error::from_std(cas_kind(&e), e)
    }
}

fn docs_kind(e: &cairn_docs::Error) -> ErrorKind {
    use cairn_docs::Error as E;
    match e {
        E::NotFound(_) | E::NoVersion(..) => ErrorKind::NotFound,
        E::InvalidArgument(_) | E::Query(_) => ErrorKind::BadRequest,
        E::Corrupt { .. } => ErrorKind::Corrupt,
        E::Kv(k) => kv_kind(k),
        E::Cas(c) => cas_kind(c),
        E::Shared(inner) => docs_kind(inner),
        _ => ErrorKind::Internal,
    }
}

impl From<cairn_docs::Error> for Error {
    fn from(e: cairn_docs::Error) -> Error {
        let index = matches!(e, cairn_docs::Error::Index(_) | cairn_docs::Error::IndexDamaged(_));
        let err = Error::from_std(docs_kind(&e), e);
        if index {
            // The index is derived: say how to get it back.
            return Error::new(
                ErrorKind::Corrupt,
                format!("{} (the full-text index may be damaged: `cairn reindex` rebuilds it)", err.message),
            );
        }
        err
    }
}

impl From<cairn_tree::Error> for Error {
    fn from(e: cairn_tree::Error) -> Error {
        use cairn_tree::Error as E;
        let kind = match &e {
            E::NoSuchSnapshot(_) => ErrorKind::NotFound,
            E::InvalidArgument(_) | E::BadName(_) => ErrorKind::BadRequest,
            E::SnapshotExists(_) => ErrorKind::Conflict,
            E::Corrupt { .. } => ErrorKind::Corrupt,
            E::Kv(k) => kv_kind(k),
            E::Cas(c) => cas_kind(c),
            _ => ErrorKind::Internal,
        };
        Error::from_std(kind, e)
    }
}

impl From<cairn_tables::Error> for Error {
    fn from(e: cairn_tables::Error) -> Error {
        use cairn_tables::Error as E;
        let kind = match &e {
            E::NoTable(_) | E::NotFound(..) | E::NoIndex(..) => ErrorKind::NotFound,
            E::Exists(..) | E::TableExists(_) | E::Conflict(_) => ErrorKind::Conflict,
            E::VersionMismatch { .. } => ErrorKind::PreconditionFailed,
            E::Invalid(_) | E::Filter(_) => ErrorKind::BadRequest,
            E::Corrupt { .. } => ErrorKind::Corrupt,
            E::Kv(k) => kv_kind(k),
        };
        Error::from_std(kind, e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::from_std(ErrorKind::BadRequest, e)
    }
}
