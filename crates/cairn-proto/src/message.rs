//! Messages: the payload of a frame, encoded with postcard (see `docs/format/ipc.md`).

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Message protocol version this build speaks. Version 2 carries the application layer's
/// requests and results as JSON (`Request::Call`) instead of command lines and typed messages.
pub const PROTOCOL_VERSION: u16 = 2;

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
    /// Input for the stream's request (its standard input); the END flag marks the last chunk.
    Input(#[serde(with = "serde_bytes")] Vec<u8>),
    /// Stop the stream's request; the server answers with an `Error { code: Cancelled }` end
    /// frame unless the request already ended.
    Cancel,
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
    /// Runs one operation of the application layer: `request` is its JSON (an object with an
    /// `op` tag, see the `cairn` crate's `Request`). Answered by `Data` frames whose bytes,
    /// concatenated, are the result's JSON (the last frame flagged END), or an `Error`.
    Call {
        /// The request's JSON.
        #[serde(with = "serde_bytes")]
        request: Vec<u8>,
        /// The client's working directory: relative paths and document references in the
        /// request are resolved against it.
        cwd: Option<String>,
        /// The request reads `Input` frames as its standard input.
        input: bool,
    },
    /// A document's content, streamed: answered by `Data` frames (the last flagged END).
    Content {
        /// The document (`name:NAME`, an absolute path, or relative to `cwd`).
        doc: String,
        /// Version (default: current).
        version: Option<u32>,
        /// The client's working directory.
        cwd: Option<String>,
    },
}

/// Error classes (the application layer's error kinds, and the protocol's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or its arguments are invalid.
    BadRequest,
    /// Missing or wrong token.
    Unauthorized,
    /// The named document, snapshot, table, record or key does not exist.
    NotFound,
    /// No common protocol version.
    Version,
    /// The client cancelled the request.
    Cancelled,
    /// The server is shutting down.
    ShuttingDown,
    /// The operation failed inside the server.
    Internal,
    /// The request conflicts with the current state.
    Conflict,
    /// A condition of the request (an expected version) does not hold.
    PreconditionFailed,
    /// Not allowed for this client (outside the daemon's roots, a read-only token).
    Forbidden,
    /// Stored data is damaged.
    Corrupt,
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
    /// Bytes (`Echo`, `Content`, and the result JSON of `Call`).
    Data(#[serde(with = "serde_bytes")] Vec<u8>),
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

    #[test]
    fn messages_round_trip() {
        let client = [
            ClientMsg::Hello { min_version: 1, max_version: 3, client: "t".into(), token: Some("s".into()) },
            ClientMsg::Request(Request::Call {
                request: br#"{"op":"search","query":"q"}"#.to_vec(),
                cwd: Some("/".into()),
                input: false,
            }),
            ClientMsg::Request(Request::Content { doc: "name:x".into(), version: Some(2), cwd: None }),
            ClientMsg::Input(vec![1, 2, 3]),
            ClientMsg::Cancel,
        ];
        for m in client {
            assert_eq!(ClientMsg::decode(&m.encode()).unwrap(), m);
        }
        let server = [
            ServerMsg::Welcome { version: 2, server: "cairn".into(), max_payload: 4 << 20 },
            ServerMsg::Data(b"{}".to_vec()),
            ServerMsg::error(ErrorCode::NotFound, "no document x"),
            ServerMsg::error(ErrorCode::Corrupt, "damaged"),
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
        let b = ServerMsg::Welcome { version: 2, server: "cairn".into(), max_payload: 1 }.encode();
        for cut in 0..b.len() {
            assert!(ServerMsg::decode(&b[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate(2, 2), Some(2));
        assert_eq!(negotiate(0, 9), Some(PROTOCOL_VERSION));
        assert_eq!(negotiate(1, 1), None);
        assert_eq!(negotiate(3, 9), None);
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
