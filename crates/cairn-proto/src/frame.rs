//! Frames: the unit on the wire. See `docs/format/ipc.md`.
//!
//! ```text
//! offset size field
//!      0    4 magic    "CAIR"
//!      4    1 version  1
//!      5    1 flags    bit 0 END (last frame of a stream), other bits zero
//!      6    2 reserved zero
//!      8    4 stream   u32 LE: the request this frame belongs to
//!     12    4 length   u32 LE: payload bytes that follow the header
//!     16    4 crc      u32 LE: CRC-32C of header bytes 0..16 and the payload
//!     20    n payload
//! ```

use thiserror::Error;

/// First four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"CAIR";
/// Frame layout version written and accepted.
pub const FRAME_VERSION: u8 = 1;
/// Bytes in a frame header.
pub const HEADER_LEN: usize = 20;
/// Flag: the last frame of a stream (a unary reply is a stream of one frame).
pub const FLAG_END: u8 = 1;
/// Default largest payload accepted: 4 MiB.
pub const DEFAULT_MAX_PAYLOAD: u32 = 4 << 20;

/// One decoded frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The request (stream) it belongs to.
    pub stream: u32,
    /// Flag bits ([`FLAG_END`]).
    pub flags: u8,
    /// The encoded message.
    pub payload: Vec<u8>,
}

impl Frame {
    /// Whether this is the last frame of its stream.
    pub fn is_end(&self) -> bool {
        self.flags & FLAG_END != 0
    }
}

/// Why bytes are not a valid frame. Every variant is fatal for the connection: after it the
/// byte stream cannot be resynchronized.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The first bytes are not `CAIR`.
    #[error("bad frame magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// A frame layout version this build does not know.
    #[error("unsupported frame version {0}")]
    BadVersion(u8),
    /// Unknown flag bits or a nonzero reserved field.
    #[error("bad frame flags {flags:#04x} / reserved {reserved:#06x}")]
    BadFlags {
        /// The flags byte.
        flags: u8,
        /// The reserved field.
        reserved: u16,
    },
    /// The payload is larger than the receiver accepts (rejected before allocating).
    #[error("frame payload of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Announced length.
        len: u32,
        /// Accepted maximum.
        max: u32,
    },
    /// The checksum does not match.
    #[error("frame checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    Checksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the bytes received.
        computed: u32,
    },
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&header[..16]), payload)
}

/// Appends one frame to `out`.
///
/// # Panics
/// If `payload` is longer than `u32::MAX` bytes.
pub fn encode(out: &mut Vec<u8>, stream: u32, flags: u8, payload: &[u8]) {
    let len = u32::try_from(payload.len()).expect("frame payload over 4 GiB");
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.push(FRAME_VERSION);
    out.push(flags);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&stream.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    let crc = checksum(&out[start..], payload);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Turns `buf`, which holds [`HEADER_LEN`] placeholder bytes followed by a payload, into one
/// whole frame by writing the header in place (saves copying the payload once more).
///
/// # Panics
/// If `buf` is shorter than a header or the payload is longer than `u32::MAX` bytes.
pub fn seal(buf: &mut [u8], stream: u32, flags: u8) {
    let len = u32::try_from(buf.len() - HEADER_LEN).expect("frame payload over 4 GiB");
    let (header, payload) = buf.split_at_mut(HEADER_LEN);
    header[..4].copy_from_slice(&MAGIC);
    header[4] = FRAME_VERSION;
    header[5] = flags;
    header[6..8].copy_from_slice(&0u16.to_le_bytes());
    header[8..12].copy_from_slice(&stream.to_le_bytes());
    header[12..16].copy_from_slice(&len.to_le_bytes());
    let crc = checksum(header, payload);
    header[16..20].copy_from_slice(&crc.to_le_bytes());
}

/// A checked frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Stream id.
    pub stream: u32,
    /// Flags.
    pub flags: u8,
    /// Payload length (already checked against the limit).
    pub len: u32,
    /// Stored checksum.
    pub crc: u32,
}

/// Checks the header at the start of `buf`: `Ok(None)` while fewer than [`HEADER_LEN`] bytes
/// are there (but a wrong magic is reported as soon as it is visible), an error when the
/// header is invalid or announces more than `max_payload` bytes.
pub fn decode_header(buf: &[u8], max_payload: u32) -> Result<Option<Header>, FrameError> {
    let seen = buf.len().min(4);
    if buf[..seen] != MAGIC[..seen] {
        let mut m = [0u8; 4];
        m[..seen].copy_from_slice(&buf[..seen]);
        return Err(FrameError::BadMagic(m));
    }
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let u32_at = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    if buf[4] != FRAME_VERSION {
        return Err(FrameError::BadVersion(buf[4]));
    }
    let (flags, reserved) = (buf[5], u16::from_le_bytes([buf[6], buf[7]]));
    if flags & !FLAG_END != 0 || reserved != 0 {
        return Err(FrameError::BadFlags { flags, reserved });
    }
    let len = u32_at(12);
    if len > max_payload {
        return Err(FrameError::TooLarge { len, max: max_payload });
    }
    Ok(Some(Header { stream: u32_at(8), flags, len, crc: u32_at(16) }))
}

/// Decodes one frame from the front of `buf`: `Ok(None)` when more bytes are needed,
/// `Ok(Some((frame, consumed)))` when a whole valid frame is there.
pub fn decode(buf: &[u8], max_payload: u32) -> Result<Option<(Frame, usize)>, FrameError> {
    let Some(h) = decode_header(buf, max_payload)? else { return Ok(None) };
    let total = HEADER_LEN + h.len as usize;
    if buf.len() < total {
        return Ok(None);
    }
    let payload = &buf[HEADER_LEN..total];
    let computed = checksum(buf, payload);
    if computed != h.crc {
        return Err(FrameError::Checksum { stored: h.crc, computed });
    }
    Ok(Some((Frame { stream: h.stream, flags: h.flags, payload: payload.to_vec() }, total)))
}

/// Checks a complete payload read separately from its header (for readers that read the
/// header, then exactly `len` bytes).
pub fn check_payload(header_bytes: &[u8; HEADER_LEN], h: &Header, payload: &[u8]) -> Result<(), FrameError> {
    let computed = checksum(header_bytes, payload);
    if computed != h.crc {
        return Err(FrameError::Checksum { stored: h.crc, computed });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seal_in_place_matches_encode() {
        for payload in [&b""[..], b"x", &[7u8; 5000]] {
            let mut a = Vec::new();
            encode(&mut a, 9, FLAG_END, payload);
            let mut b = vec![0u8; HEADER_LEN];
            b.extend_from_slice(payload);
            seal(&mut b, 9, FLAG_END);
            assert_eq!(a, b);
        }
    }

    #[test]
    fn round_trip_and_limits() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, FLAG_END, b"hello");
        encode(&mut buf, 8, 0, b"");
        let (f, n) = decode(&buf, 16).unwrap().unwrap();
        assert_eq!((f.stream, f.is_end(), f.payload.as_slice()), (7, true, &b"hello"[..]));
        let (g, m) = decode(&buf[n..], 16).unwrap().unwrap();
        assert_eq!((g.stream, g.is_end(), g.payload.len(), n + m), (8, false, 0, buf.len()));
        assert_eq!(decode(&buf, 4), Err(FrameError::TooLarge { len: 5, max: 4 }));
        assert_eq!(decode(b"CAX", 16), Err(FrameError::BadMagic(*b"CAX\0")));
        assert_eq!(decode(b"CA", 16), Ok(None));
    }

    #[test]
    fn oversized_header_rejected_before_payload_arrives() {
        let mut buf = Vec::new();
        encode(&mut buf, 1, 0, &[0u8; 64]);
        // Only the header has arrived: the length is judged already.
        assert!(matches!(decode(&buf[..HEADER_LEN], 63), Err(FrameError::TooLarge { .. })));
        assert_eq!(decode(&buf[..HEADER_LEN], 64), Ok(None));
    }

    proptest! {
        #[test]
        fn every_truncation_waits_and_every_flip_is_caught(
            payload in proptest::collection::vec(any::<u8>(), 0..200),
            stream in any::<u32>(),
            end in any::<bool>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let mut buf = Vec::new();
            encode(&mut buf, stream, if end { FLAG_END } else { 0 }, &payload);
            for cut in 0..buf.len() {
                prop_assert_eq!(decode(&buf[..cut], 1 << 20), Ok(None));
            }
            let (f, n) = decode(&buf, 1 << 20).unwrap().unwrap();
            prop_assert_eq!(n, buf.len());
            prop_assert_eq!(f, Frame { stream, flags: if end { FLAG_END } else { 0 }, payload: payload.clone() });
            let i = flip.index(buf.len());
            buf[i] ^= 1 << bit;
            // A flipped bit is never accepted as the same frame: it is an error, or (a length
            // grown within limits) a wait for more bytes.
            match decode(&buf, 1 << 20) {
                Err(_) | Ok(None) => {}
                Ok(Some(_)) => prop_assert!(false, "flipped bit {} of byte {} accepted", bit, i),
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
            let _ = decode(&bytes, 64);
        }
    }
}
