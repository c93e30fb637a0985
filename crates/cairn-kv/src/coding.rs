//! Little-endian fixed-width and LEB128 varint helpers shared by every on-disk format.

/// Appends a LEB128 varint.
#[inline]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Decodes a LEB128 varint from the front of `buf`, returning the value and the bytes used.
/// Returns `None` for truncated input or more than 10 bytes / 64 bits.
#[inline]
pub fn get_varint(buf: &[u8]) -> Option<(u64, usize)> {
    // Block entries' key lengths are almost always below 128 (one byte) and their value
    // lengths below 16 Ki (two bytes): both decode inline.
    match *buf {
        [b, ..] if b < 0x80 => Some((b as u64, 1)),
        [b0, b1, ..] if b1 < 0x80 => Some(((b0 & 0x7F) as u64 | (b1 as u64) << 7, 2)),
        [] => None,
        _ => get_varint_long(buf),
    }
}

#[cold]
fn get_varint_long(buf: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        let bits = (b & 0x7F) as u64;
        if i == 9 && b > 1 {
            return None;
        }
        v |= bits << (7 * i);
        if b < 0x80 {
            return Some((v, i + 1));
        }
    }
    None
}

/// A cursor that decodes from a byte slice and reports truncation instead of panicking.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading at the beginning of `buf`.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes consumed so far.
    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Bytes left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Whether everything was consumed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    /// Reads a varint.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        let (v, n) = get_varint(&self.buf[self.pos..])?;
        self.pos += n;
        Some(v)
    }
    /// Reads a varint that must fit in `usize` and be at most `max`.
    #[inline]
    pub fn varint_len(&mut self, max: usize) -> Option<usize> {
        let v = self.varint()?;
        let v = usize::try_from(v).ok()?;
        (v <= max).then_some(v)
    }
    /// Reads `n` raw bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    /// Reads a varint length followed by that many bytes.
    #[inline]
    pub fn len_prefixed(&mut self) -> Option<&'a [u8]> {
        let n = self.varint_len(self.remaining())?;
        self.bytes(n)
    }
    /// Reads one byte.
    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }
    /// Reads a little-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    /// Reads a little-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
}

/// Masks a CRC stored next to the data it covers (as LevelDB does), so that a CRC of data that
/// itself contains CRCs stays well distributed: `((crc >> 15) | (crc << 17)) + 0xa282ead8`.
/// Used by the record log, SSTable blocks and blob-store packs.
#[inline]
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Appends a varint length and the bytes.
#[inline]
pub fn put_len_prefixed(out: &mut Vec<u8>, data: &[u8]) {
    put_varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trip(v: u64) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(get_varint(&out), Some((v, out.len())));
            // Every strict prefix is truncated.
            for i in 0..out.len() {
                prop_assert!(get_varint(&out[..i]).is_none());
            }
        }

        #[test]
        fn varint_fast_paths_agree_with_the_loop(buf in proptest::collection::vec(any::<u8>(), 0..12)) {
            prop_assert_eq!(get_varint(&buf), get_varint_long(&buf));
        }

        #[test]
        fn varint_never_panics(buf: Vec<u8>) {
            let _ = get_varint(&buf);
        }
    }
}
