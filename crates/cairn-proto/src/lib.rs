//! cairn's wire protocol, without I/O: frames (magic, version, flags, stream id, length,
//! CRC-32C; the size limit is checked before a payload is buffered) and the messages they
//! carry. The layout is documented in `docs/format/ipc.md`.
//!
//! A connection starts with `ClientMsg::Hello` on stream 0, answered by `ServerMsg::Welcome`
//! (or an `Error` and a closed connection). Each request then takes a new stream id; its
//! answer is one frame (unary) or several (streaming), the last flagged [`frame::FLAG_END`].

pub mod frame;
pub mod message;

pub use frame::{DEFAULT_MAX_PAYLOAD, FLAG_END, Frame, FrameError, HEADER_LEN};
pub use message::{ClientMsg, DecodeError, ErrorCode, PROTOCOL_VERSION, Request, ServerMsg, negotiate};
