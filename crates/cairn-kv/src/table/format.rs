//! The SSTable's framing: the trailer after every block (compression tag and masked
//! checksum) and the fixed footer that says where the filter and index blocks are. Shared by
//! the builder and the reader; byte by byte in `docs/format/sstable.md`.
//!
//! ```text
//! data block*   block bytes (maybe compressed) ++ tag u8 ++ masked CRC32C u32 LE
//! filter block  same framing, uncompressed (absent when bloom_bits_per_key == 0)
//! index block   same framing, uncompressed; key = last internal key of a data block,
//!               value = varint offset ++ varint size of that block
//! footer        48 bytes, see [`Footer`]
//! ```

use std::path::Path;

use crate::block::BlockHandle;
use crate::{Error, Result};

/// Last 8 bytes of every table (`u64` LE; the bytes on disk read `1STCAIRN`).
pub const TABLE_MAGIC: u64 = 0x4E52_4941_4354_5331;
/// The table format version written in the footer.
pub const FORMAT_VERSION: u32 = 1;
/// Length of the footer.
pub const FOOTER_LEN: usize = 48;
/// Length of the trailer after every block: compression tag and masked checksum.
pub const BLOCK_TRAILER_LEN: usize = 5;
/// Data blocks are cut at `min(block_size, MAX_BLOCK_SIZE)` bytes, so that even a block ending
/// in a maximal entry stays below [`crate::table::compression::MAX_DECOMPRESSED_LEN`].
pub const MAX_BLOCK_SIZE: usize = 32 << 20;

/// The masked CRC32C stored after a block: over the stored block bytes, then the tag.
pub fn block_checksum(stored: &[u8], tag: u8) -> u32 {
    crate::coding::mask_crc(crc32c::crc32c_append(crc32c::crc32c(stored), &[tag]))
}

/// The fixed-size end of a table: where the filter and index blocks are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footer {
    /// The filter block (`0/0` when the table has none).
    pub filter: BlockHandle,
    /// The index block.
    pub index: BlockHandle,
}

impl Footer {
    /// Encodes: filter offset, filter size, index offset, index size (u64 LE each), format
    /// version (u32 LE), CRC32C of the 36 bytes before it (u32 LE, unmasked), magic (u64 LE).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut out = [0u8; FOOTER_LEN];
        let fields = [self.filter.offset, self.filter.size, self.index.offset, self.index.size];
        for (i, f) in fields.iter().enumerate() {
            out[8 * i..8 * i + 8].copy_from_slice(&f.to_le_bytes());
        }
        out[32..36].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let crc = crc32c::crc32c(&out[..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
        out[40..48].copy_from_slice(&TABLE_MAGIC.to_le_bytes());
        out
    }

    /// Decodes and checks a footer read at `offset` of the file at `path`.
    pub fn decode(buf: &[u8], path: &Path, offset: u64) -> Result<Footer> {
        let corrupt = |reason: &str| Error::corruption(path, offset, reason);
        let buf: &[u8; FOOTER_LEN] = buf.try_into().map_err(|_| corrupt("short footer"))?;
        let u64_at = |i: usize| {
            u64::from_le_bytes([
                buf[i],
                buf[i + 1],
                buf[i + 2],
                buf[i + 3],
                buf[i + 4],
                buf[i + 5],
                buf[i + 6],
                buf[i + 7],
            ])
        };
        let u32_at = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        if u64_at(40) != TABLE_MAGIC {
            return Err(corrupt("bad table magic (not an SSTable)"));
        }
        if u32_at(36) != crc32c::crc32c(&buf[..36]) {
            return Err(corrupt("footer checksum mismatch"));
        }
        let version = u32_at(32);
        if version != FORMAT_VERSION {
            return Err(corrupt(&format!("unsupported table format version {version}")));
        }
        Ok(Footer {
            filter: BlockHandle { offset: u64_at(0), size: u64_at(8) },
            index: BlockHandle { offset: u64_at(16), size: u64_at(24) },
        })
    }
}
