//! Block compression: the one-byte compression tag stored after every SSTable block, and the
//! codecs behind it (none, LZ4 with a prepended size, Zstandard).
//!
//! Tags (see `docs/format/sstable.md`): `0` = stored as is, `1` = LZ4 block with the
//! uncompressed length prepended as a u32 LE (`lz4_flex::block::compress_prepend_size`),
//! `2` = one Zstandard frame carrying its content size (`zstd::bulk`).
//!
//! Decoders never trust a declared size: anything above [`MAX_DECOMPRESSED_LEN`] is rejected
//! before a buffer is allocated.

use std::borrow::Cow;
use std::cell::RefCell;
use std::path::Path;

use bytes::Bytes;

use crate::{Compression, Error, Result};

/// Tag of a block stored uncompressed.
pub const TAG_NONE: u8 = 0;
/// Tag of an LZ4 block (u32 LE uncompressed size, then the LZ4 block).
pub const TAG_LZ4: u8 = 1;
/// Tag of a Zstandard block (one frame with its content size).
pub const TAG_ZSTD: u8 = 2;

/// Largest uncompressed block a reader accepts (128 MiB).
pub const MAX_DECOMPRESSED_LEN: usize = 128 << 20;

/// The tag written for blocks compressed with `kind`.
pub fn compression_tag(kind: Compression) -> u8 {
    match kind {
        Compression::None => TAG_NONE,
        Compression::Lz4 => TAG_LZ4,
        Compression::Zstd(_) => TAG_ZSTD,
    }
}

/// Compresses `data` with `kind`. Returns `None` for [`Compression::None`] or if the codec
/// failed (the caller then stores the block uncompressed).
pub fn compress(kind: Compression, data: &[u8]) -> Option<Vec<u8>> {
    match kind {
        Compression::None => None,
        Compression::Lz4 => Some(lz4_flex::block::compress_prepend_size(data)),
        Compression::Zstd(level) => zstd::bulk::compress(data, level).ok(),
    }
}

/// Whether a compressed form of `compressed_len` bytes is worth storing instead of
/// `raw_len` bytes: it must save at least 1/8 of the raw size.
pub fn worth_compressing(raw_len: usize, compressed_len: usize) -> bool {
    compressed_len <= raw_len - raw_len / 8
}

/// Compresses `data` if that saves at least 1/8 of its size; returns the tag and the bytes to
/// store (borrowing `data` when it is stored as is). (Tests; the builder keeps a
/// [`BlockCompressor`].)
#[cfg(test)]
pub fn compress_block(kind: Compression, data: &[u8]) -> (u8, Cow<'_, [u8]>) {
    BlockCompressor::new(kind).compress_block(data)
}

/// Compresses the blocks of one table, reusing the Zstandard context or the LZ4 hash table
/// between blocks (allocating and zeroing a fresh LZ4 table per block cost a fifth of a flush).
pub struct BlockCompressor {
    kind: Compression,
    zstd: Option<zstd::bulk::Compressor<'static>>,
    lz4: Option<lz4_flex::block::CompressTable>,
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCompressor").field("kind", &self.kind).finish_non_exhaustive()
    }
}

impl BlockCompressor {
    /// A compressor for `kind`.
    pub fn new(kind: Compression) -> Self {
        let zstd = match kind {
            Compression::Zstd(level) => zstd::bulk::Compressor::new(level).ok(),
            _ => None,
        };
        let lz4 = (kind == Compression::Lz4).then(lz4_flex::block::CompressTable::default);
        BlockCompressor { kind, zstd, lz4 }
    }

    /// LZ4 with the size prepended, as [`compress`] writes it, through the reused table.
    fn lz4(table: &mut lz4_flex::block::CompressTable, data: &[u8]) -> Option<Vec<u8>> {
        let len = u32::try_from(data.len()).ok()?;
        let mut out = vec![0u8; 4 + lz4_flex::block::get_maximum_output_size(data.len())];
        out[..4].copy_from_slice(&len.to_le_bytes());
        let n = lz4_flex::block::compress_into_with_table(data, &mut out[4..], table).ok()?;
        out.truncate(4 + n);
        Some(out)
    }

    /// Like [`compress_block`]: the tag and the bytes to store.
    pub fn compress_block<'a>(&mut self, data: &'a [u8]) -> (u8, Cow<'a, [u8]>) {
        let compressed = match (&mut self.zstd, &mut self.lz4, self.kind) {
            (Some(z), _, _) => z.compress(data).ok(),
            (None, _, Compression::Zstd(_)) => None,
            (None, Some(t), _) => Self::lz4(t, data),
            (None, None, kind) => compress(kind, data),
        };
        match compressed {
            Some(c) if worth_compressing(data.len(), c.len()) => (compression_tag(self.kind), Cow::Owned(c)),
            _ => (TAG_NONE, Cow::Borrowed(data)),
        }
    }
}

thread_local! {
    /// One Zstandard decompression context per thread, reused across blocks.
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn zstd_decompress(data: &[u8], capacity: usize) -> std::io::Result<Vec<u8>> {
    ZSTD_DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let mut d = match slot.take() {
            Some(d) => d,
            None => zstd::bulk::Decompressor::new()?,
        };
        let out = d.decompress(data, capacity);
        *slot = Some(d);
        out
    })
}

/// Decodes a stored block. `path` and `offset` (the block's offset in its file) name the
/// damage in the returned [`Error::Corruption`].
pub fn decompress(tag: u8, data: Bytes, path: &Path, offset: u64) -> Result<Bytes> {
    let corrupt = |reason: String| Error::corruption(path, offset, reason);
    match tag {
        TAG_NONE => Ok(data),
        TAG_LZ4 => lz4_decode(&data, path, offset, Vec::with_capacity).map(Bytes::from),
        TAG_ZSTD => {
            let declared = match zstd::zstd_safe::get_frame_content_size(&data) {
                Ok(Some(n)) => n,
                Ok(None) => return Err(corrupt("zstd frame without content size".into())),
                Err(_) => return Err(corrupt("zstd frame header is invalid".into())),
            };
            let declared = usize::try_from(declared)
                .ok()
                .filter(|&n| n <= MAX_DECOMPRESSED_LEN)
                .ok_or_else(|| corrupt(format!("zstd block declares {declared} bytes")))?;
            let out = zstd_decompress(&data, declared).map_err(|e| corrupt(format!("zstd block: {e}")))?;
            if out.len() != declared {
                return Err(corrupt(format!("zstd block decoded to {} bytes, frame declares {declared}", out.len())));
            }
            Ok(Bytes::from(out))
        }
        t => Err(corrupt(format!("unknown compression tag {t}"))),
    }
}

/// Decodes an LZ4 block (its size prepended) into a buffer from `alloc` (given the capacity
/// to allocate). The declared size is checked against [`MAX_DECOMPRESSED_LEN`] before
/// anything is allocated, and the block must decode to exactly that size: lz4_flex returns
/// what the sequences decode to, even when that is shorter than the header declares (a
/// block cut after a literal run).
fn lz4_decode(data: &[u8], path: &Path, offset: u64, alloc: impl FnOnce(usize) -> Vec<u8>) -> Result<Vec<u8>> {
    let corrupt = |reason: String| Error::corruption(path, offset, reason);
    let (declared, rest) =
        lz4_flex::block::uncompressed_size(data).map_err(|e| corrupt(format!("lz4 block header: {e}")))?;
    if declared > MAX_DECOMPRESSED_LEN {
        return Err(corrupt(format!("lz4 block declares {declared} bytes")));
    }
    let mut v = alloc(declared);
    v.resize(declared, 0);
    let n = lz4_flex::block::decompress_into(rest, &mut v).map_err(|e| corrupt(format!("lz4 block: {e}")))?;
    if n != declared {
        return Err(corrupt(format!("lz4 block decoded to {n} bytes, header declares {declared}")));
    }
    Ok(v)
}

/// [`decompress`] for a block read into a scratch buffer: the result is built in a buffer
/// from [`crate::cache::pool`], which it returns to when dropped (zstd blocks excepted).
pub fn decompress_pooled(tag: u8, data: &[u8], path: &Path, offset: u64) -> Result<Bytes> {
    match tag {
        TAG_NONE => {
            let mut v = crate::cache::pool::take(data.len());
            v.extend_from_slice(data);
            Ok(crate::cache::pool::into_bytes(v))
        }
        TAG_LZ4 => lz4_decode(data, path, offset, crate::cache::pool::take).map(crate::cache::pool::into_bytes),
        _ => decompress(tag, Bytes::copy_from_slice(data), path, offset),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KINDS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd(3)];

    fn round_trip(kind: Compression, data: &[u8]) -> Vec<u8> {
        let (tag, stored) = compress_block(kind, data);
        let out = decompress(tag, Bytes::copy_from_slice(&stored), Path::new("t"), 7).unwrap();
        out.to_vec()
    }

    #[test]
    fn compressible_data_is_compressed() {
        let data = b"abcdefgh".repeat(512);
        for kind in [Compression::Lz4, Compression::Zstd(1)] {
            let (tag, stored) = compress_block(kind, &data);
            assert_eq!(tag, compression_tag(kind));
            assert!(stored.len() < data.len() / 2);
            assert_eq!(round_trip(kind, &data), data);
        }
    }

    #[test]
    fn incompressible_data_is_stored_raw() {
        let data = crate::testing::noise(1, 4096);
        for kind in KINDS {
            let (tag, stored) = compress_block(kind, &data);
            assert_eq!(tag, TAG_NONE);
            assert_eq!(&*stored, &data[..]);
        }
    }

    /// A block whose sequences decode to fewer bytes than its header declares (found by
    /// `pooled_decoding_matches_plain_decoding`: 16 MiB declared, a 12-byte literal run) is
    /// corrupt for both decoders.
    #[test]
    fn lz4_blocks_shorter_than_declared_are_corrupt() {
        let mut data = vec![0, 0, 0, 1, 0xC0];
        data.extend_from_slice(&[0; 12]);
        let e = decompress(TAG_LZ4, Bytes::from(data.clone()), Path::new("f"), 3).unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("declares 16777216"), "{e}");
        let e = decompress_pooled(TAG_LZ4, &data, Path::new("f"), 3).unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("declares 16777216"), "{e}");
    }

    #[test]
    fn oversized_declarations_are_rejected() {
        let mut lz = (u32::MAX).to_le_bytes().to_vec();
        lz.extend_from_slice(&[0u8; 8]);
        let e = decompress(TAG_LZ4, Bytes::from(lz), Path::new("f"), 9).unwrap_err();
        assert!(matches!(e, Error::Corruption { offset: 9, .. }));
        // A frame header (magic, single-segment descriptor, 8-byte content size) declaring 1 TiB.
        let mut zs = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
        zs.extend_from_slice(&(1u64 << 40).to_le_bytes());
        let e = decompress(TAG_ZSTD, Bytes::from(zs), Path::new("f"), 1).unwrap_err();
        assert!(e.to_string().contains("declares"), "{e}");
        assert!(e.is_corruption());
        let e = decompress(9, Bytes::new(), Path::new("f"), 1).unwrap_err();
        assert!(e.is_corruption());
    }

    proptest! {
        #[test]
        fn codecs_round_trip(data in proptest::collection::vec(0u8..4, 0..3000)) {
            for kind in KINDS {
                prop_assert_eq!(round_trip(kind, &data), data.clone());
            }
        }

        /// One compressor reused across blocks (its LZ4 table carried over) writes each block
        /// exactly as a fresh one-shot compression would.
        #[test]
        fn reused_compressor_matches_one_shot(blocks in proptest::collection::vec(proptest::collection::vec(0u8..6, 0..5000), 1..6)) {
            let mut c = BlockCompressor::new(Compression::Lz4);
            for b in &blocks {
                let (tag, stored) = c.compress_block(b);
                let one_shot = compress(Compression::Lz4, b).unwrap();
                if tag == TAG_LZ4 {
                    prop_assert_eq!(&*stored, &one_shot[..]);
                } else {
                    prop_assert!(!worth_compressing(b.len(), one_shot.len()));
                }
                let out = decompress(tag, Bytes::copy_from_slice(&stored), Path::new("t"), 0).unwrap();
                prop_assert_eq!(&out[..], &b[..]);
            }
        }

        #[test]
        fn pooled_decoding_matches_plain_decoding(tag in 0u8..4, data: Vec<u8>, valid in any::<bool>()) {
            // Either a real block of `data` under `tag`'s codec, or `data` itself as garbage.
            let stored = match (valid, tag) {
                (true, TAG_LZ4) => lz4_flex::block::compress_prepend_size(&data),
                (true, TAG_ZSTD) => compress(Compression::Zstd(3), &data).unwrap_or_default(),
                _ => data.clone(),
            };
            let p = std::path::Path::new("t");
            let plain = decompress(tag, Bytes::from(stored.clone()), p, 0).map(|b| b.to_vec()).map_err(|e| e.to_string());
            let pooled = decompress_pooled(tag, &stored, p, 0).map(|b| b.to_vec()).map_err(|e| e.to_string());
            prop_assert_eq!(plain.is_ok(), pooled.is_ok());
            if let (Ok(a), Ok(b)) = (&plain, &pooled) {
                prop_assert_eq!(a, b);
            }
            if valid && (tag == TAG_NONE || tag == TAG_LZ4) {
                prop_assert_eq!(pooled, Ok(data));
            }
        }

        #[test]
        fn garbage_never_panics(tag in 0u8..4, data: Vec<u8>) {
            let _ = decompress(tag, Bytes::from(data), Path::new("g"), 0);
        }
    }
}
