//! Messages: the payload of a frame, encoded with postcard (see `docs/format/ipc.md`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Message protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;

/// What a client sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientMsg {
    /// First message of a connection, on stream 0.
    Hello {
        /// Oldest protocol version the client speaks.
        min_version: u16,
        /// Newest protocol version the client speaks.
        max_version: u16,
        /// Free-form client name (logged).
        client: String,
        /// Bearer token (required on TCP, ignored on the Unix socket).
        token: Option<String>,
    },
    /// Starts a request on a new stream id.
    Request(Request),
    /// Input for the stream's request (`cairn add -` over the daemon); the END flag marks the
    /// last chunk.
    Input(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Stop the stream's request; the server answers with an `Error { code: Cancelled }` end
    /// frame unless the request already ended.
    Cancel,
}

/// Which documents a typed request looks at (empty fields do not filter).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    /// Required tags.
    pub tags: Vec<String>,
    /// Required key=value pairs.
    pub meta: Vec<(String, String)>,
    /// Path glob.
    pub path_glob: Option<String>,
    /// Updated at or after (microseconds since the epoch).
    pub since: Option<i64>,
    /// Updated before (microseconds since the epoch).
    pub until: Option<i64>,
}

/// A request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// Answered by `Pong`.
    Ping,
    /// Answered by `chunks` `Data` frames of `chunk_len` bytes each (the last one flagged END):
    /// measures the transport.
    Echo {
        /// Frames in the answer (at least one is sent).
        chunks: u32,
        /// Bytes per frame.
        chunk_len: u32,
    },
    /// Runs a `cairn` command line (everything after the global options) in the daemon;
    /// answered by `Stdout`/`Stderr` frames and a final `Exit`.
    Cli {
        /// The arguments.
        args: Vec<String>,
        /// The client's working directory (relative paths are resolved against it).
        cwd: String,
        /// The command reads `Input` frames as its standard input.
        input: bool,
        /// The client's standard output is a terminal (colors).
        tty: bool,
    },
    /// Adds (or makes a new version of) one document; answered by `Added`.
    Add {
        /// Document path.
        path: String,
        /// Content.
        #[serde(with = "serde_bytes")]
        content: Vec<u8>,
        /// Tags to add.
        tags: Vec<String>,
        /// Metadata to set.
        meta: Vec<(String, String)>,
    },
    /// Full-text search; answered by `Hit` frames then `Done { total }`.
    Search {
        /// Query text.
        query: String,
        /// Most hits.
        limit: u32,
        /// Hits skipped first.
        offset: u32,
        /// Bag-of-words instead of the query syntax.
        words: bool,
        /// Cut snippets.
        snippets: bool,
        /// Which documents.
        filter: Filter,
    },
    /// Documents matching a filter; answered by `Doc` frames then `Done`.
    Ls {
        /// Which documents.
        filter: Filter,
    },
    /// A document's content; answered by `Data` frames (the last flagged END).
    Get {
        /// Document path.
        path: String,
        /// Version (default: current).
        version: Option<u32>,
    },
}

/// A document's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DocInfo {
    /// Id.
    pub id: u64,
    /// Path.
    pub path: String,
    /// Current version.
    pub version: u32,
    /// Content size.
    pub size: u64,
    /// MIME type.
    pub mime: String,
    /// Title, if any.
    pub title: Option<String>,
    /// Last change (microseconds since the epoch).
    pub updated: i64,
    /// Tags.
    pub tags: Vec<String>,
    /// Metadata.
    pub meta: Vec<(String, String)>,
}

/// Error classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or its arguments are invalid.
    BadRequest,
    /// Missing or wrong token.
    Unauthorized,
    /// The named document, snapshot or key does not exist.
    NotFound,
    /// No common protocol version.
    Version,
    /// The client cancelled the request.
    Cancelled,
    /// The server is shutting down.
    ShuttingDown,
    /// The operation failed inside the server.
    Internal,
}

/// What the server sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerMsg {
    /// Answer to `Hello`.
    Welcome {
        /// The version both speak.
        version: u16,
        /// Server name and version.
        server: String,
        /// Largest frame payload the server accepts.
        max_payload: u32,
    },
    /// Answer to `Ping`.
    Pong,
    /// Bytes (`Echo`, `Get`).
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Standard output of a `Cli` request.
    Stdout(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Standard error of a `Cli` request.
    Stderr(#[serde(with = "serde_bytes")] Vec<u8>),
    /// The exit status of a `Cli` request (last frame).
    Exit(u8),
    /// Answer to `Add`.
    Added {
        /// The document now.
        doc: DocInfo,
        /// "added", "new-version" or "unchanged".
        status: String,
    },
    /// One search hit.
    Hit {
        /// BM25 score.
        score: f32,
        /// The document.
        doc: DocInfo,
        /// Snippet text.
        snippet: Option<String>,
        /// Byte ranges of the snippet that matched.
        highlights: Vec<(u32, u32)>,
    },
    /// One listed document.
    Doc(DocInfo),
    /// End of a stream of `Hit` or `Doc` frames.
    Done {
        /// Matching documents in all (for search, before the limit).
        total: u64,
    },
    /// The request failed (last frame of its stream).
    Error {
        /// Class.
        code: ErrorCode,
        /// Human-readable reason.
        message: String,
    },
}

/// A payload that is not a valid message.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("malformed message: {0}")]
pub struct DecodeError(pub String);

/// `m` encoded as one whole frame, serialized straight behind the header.
fn framed<T: Serialize>(m: &T, stream: u32, end: bool) -> Vec<u8> {
    let mut b = postcard::to_extend(m, vec![0u8; crate::HEADER_LEN]).expect("messages always serialize");
    crate::frame::seal(&mut b, stream, if end { crate::FLAG_END } else { 0 });
    b
}

fn to_vec<T: Serialize>(m: &T) -> Vec<u8> {
    postcard::to_allocvec(m).expect("messages always serialize")
}

fn from_slice<'a, T: Deserialize<'a>>(b: &'a [u8]) -> Result<T, DecodeError> {
    let (m, rest) = postcard::take_from_bytes(b).map_err(|e| DecodeError(e.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError(format!("{} trailing bytes", rest.len())));
    }
    Ok(m)
}

impl ClientMsg {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        to_vec(self)
    }
    /// Decodes a whole payload (trailing bytes are an error).
    pub fn decode(b: &[u8]) -> Result<ClientMsg, DecodeError> {
        from_slice(b)
    }
    /// The message as one frame on `stream` (`end`: flagged END).
    pub fn to_frame(&self, stream: u32, end: bool) -> Vec<u8> {
        framed(self, stream, end)
    }
}

impl ServerMsg {
    /// Encodes the message.
    pub fn encode(&self) -> Vec<u8> {
        to_vec(self)
    }
    /// Decodes a whole payload (trailing bytes are an error).
    pub fn decode(b: &[u8]) -> Result<ServerMsg, DecodeError> {
        from_slice(b)
    }
    /// The message as one frame on `stream` (`end`: flagged END).
    pub fn to_frame(&self, stream: u32, end: bool) -> Vec<u8> {
        framed(self, stream, end)
    }
    /// An error message.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> ServerMsg {
        ServerMsg::Error { code, message: message.into() }
    }
}

/// Picks the version both sides speak, if any.
pub fn negotiate(min_version: u16, max_version: u16) -> Option<u16> {
    (min_version <= PROTOCOL_VERSION && PROTOCOL_VERSION <= max_version).then_some(PROTOCOL_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn doc() -> DocInfo {
        DocInfo {
            id: 3,
            path: "/a/b.md".into(),
            version: 2,
            size: 10,
            mime: "text/markdown".into(),
            title: Some("B".into()),
            updated: 1_700_000_000_000_000,
            tags: vec!["x".into()],
            meta: vec![("k".into(), "v".into())],
        }
    }

    #[test]
    fn messages_round_trip() {
        let client = [
            ClientMsg::Hello { min_version: 1, max_version: 3, client: "t".into(), token: Some("s".into()) },
            ClientMsg::Request(Request::Cli { args: vec!["ls".into()], cwd: "/".into(), input: false, tty: true }),
            ClientMsg::Request(Request::Search {
                query: "q".into(),
                limit: 10,
                offset: 0,
                words: false,
                snippets: true,
                filter: Filter { tags: vec!["t".into()], since: Some(-5), ..Filter::default() },
            }),
            ClientMsg::Input(vec![1, 2, 3]),
            ClientMsg::Cancel,
        ];
        for m in client {
            assert_eq!(ClientMsg::decode(&m.encode()).unwrap(), m);
        }
        let server = [
            ServerMsg::Welcome { version: 1, server: "cairn".into(), max_payload: 4 << 20 },
            ServerMsg::Hit { score: 1.5, doc: doc(), snippet: Some("s".into()), highlights: vec![(0, 1)] },
            ServerMsg::Doc(doc()),
            ServerMsg::Exit(1),
            ServerMsg::error(ErrorCode::NotFound, "no document x"),
        ];
        for m in server {
            assert_eq!(ServerMsg::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn trailing_and_truncated_payloads_are_errors() {
        let mut b = ClientMsg::Request(Request::Ping).encode();
        b.push(0);
        assert!(ClientMsg::decode(&b).is_err());
        let b = ServerMsg::Doc(doc()).encode();
        for cut in 0..b.len() {
            assert!(ServerMsg::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate(1, 1), Some(1));
        assert_eq!(negotiate(0, 9), Some(PROTOCOL_VERSION));
        assert_eq!(negotiate(2, 9), None);
    }

    proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(b in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = ClientMsg::decode(&b);
            let _ = ServerMsg::decode(&b);
        }

        #[test]
        fn huge_announced_lengths_do_not_allocate(len in 1u64 << 40..1u64 << 62) {
            // Input(Vec<u8>) announcing a giant length with no bytes behind it.
            let mut b = vec![2u8];
            let mut n = len;
            while n >= 0x80 {
                b.push((n as u8) | 0x80);
                n >>= 7;
            }
            b.push(n as u8);
            prop_assert!(ClientMsg::decode(&b).is_err());
        }
    }
}
