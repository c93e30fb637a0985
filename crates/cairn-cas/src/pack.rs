//! Pack files: chunks appended back to back (format in `docs/format/cas.md`).
//!
//! ```text
//! header  16 bytes: magic "CAIRNPAK", u32 version = 1, u32 CRC32C of the first 12 bytes
//! entry   u32 stored_len, u8 codec, u32 raw_len, [32] chunk id, stored bytes,
//!         u32 masked CRC32C of everything before it in the entry
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::coding::mask_crc;
use cairn_kv::{RandomAccessFile, Storage, WritableFile};

use crate::{Error, Id, Result};

/// Magic at the start of every pack.
pub const PACK_MAGIC: [u8; 8] = *b"CAIRNPAK";
/// Pack format version.
pub const PACK_VERSION: u32 = 1;
/// Bytes of the pack header.
pub const PACK_HEADER_LEN: u64 = 16;
/// Bytes of an entry's fixed header.
pub const ENTRY_HEADER_LEN: usize = 41;
/// Bytes an entry adds around its data (header and checksum).
pub const ENTRY_OVERHEAD: u64 = ENTRY_HEADER_LEN as u64 + 4;
/// Largest chunk accepted (stored or raw).
pub const MAX_CHUNK: u32 = 16 << 20;

/// Chunk stored as is.
pub const CODEC_RAW: u8 = 0;
/// Chunk stored zstd-compressed.
pub const CODEC_ZSTD: u8 = 1;

thread_local! {
    static COMPRESSOR: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

fn header() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(&PACK_MAGIC);
    h[8..12].copy_from_slice(&PACK_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The file (or object) name of pack `no`, with `ext` (`pack`, or a temporary's extension).
pub fn pack_name(no: u64, ext: &str) -> String {
    format!("pack-{no:08}.{ext}")
}

/// The path of pack `no` in `dir`.
pub fn pack_path(dir: &Path, no: u64) -> PathBuf {
    dir.join(pack_name(no, "pack"))
}

/// Parses a pack file name back into its number.
pub fn parse_pack_name(name: &str) -> Option<u64> {
    name.strip_prefix("pack-")?.strip_suffix(".pack")?.parse().ok()
}

/// A chunk's content as stored: codec, raw length and the stored bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    /// [`CODEC_RAW`] or [`CODEC_ZSTD`].
    pub codec: u8,
    /// Length once decoded.
    pub raw_len: u32,
    /// The bytes as written in the pack.
    pub data: Vec<u8>,
}

impl StoredChunk {
    /// Encodes `raw`, compressing it with zstd at `level` only when that saves space. Each
    /// thread reuses one compression context (creating one per chunk cost a tenth of ingest).
    pub fn encode(raw: &[u8], level: i32) -> StoredChunk {
        let raw_len = raw.len() as u32;
        let compressed = COMPRESSOR.with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = zstd::bulk::Compressor::new(level).ok().map(|z| (level, z));
            }
            c.as_mut().and_then(|(_, z)| z.compress(raw).ok())
        });
        match compressed {
            Some(c) if c.len() < raw.len() => StoredChunk { codec: CODEC_ZSTD, raw_len, data: c },
            _ => StoredChunk { codec: CODEC_RAW, raw_len, data: raw.to_vec() },
        }
    }

    /// Decodes back to the raw bytes.
    pub fn decode(&self, path: &Path, offset: u64) -> Result<Vec<u8>> {
        match self.codec {
            CODEC_RAW if self.data.len() == self.raw_len as usize => Ok(self.data.clone()),
            CODEC_ZSTD => {
                let out = DECOMPRESSOR
                    .with(|d| {
                        let mut d = d.borrow_mut();
                        if d.is_none() {
                            *d = Some(zstd::bulk::Decompressor::new()?);
                        }
                        match d.as_mut() {
                            Some(d) => d.decompress(&self.data, self.raw_len as usize),
                            None => Err(std::io::Error::other("no zstd context")),
                        }
                    })
                    .map_err(|e| Error::corruption(path, offset, format!("zstd: {e}")))?;
                if out.len() != self.raw_len as usize {
                    return Err(Error::corruption(path, offset, "decompressed length differs from the entry's"));
                }
                Ok(out)
            }
            c => Err(Error::corruption(path, offset, format!("unknown codec {c} or bad length"))),
        }
    }
}

/// Appends entries to a new pack.
pub struct PackWriter {
    /// Pack number.
    pub no: u64,
    path: PathBuf,
    file: Box<dyn WritableFile>,
}

impl PackWriter {
    /// Creates pack `no` and writes its header (not yet synced).
    pub fn create(storage: &Arc<dyn Storage>, dir: &Path, no: u64) -> Result<PackWriter> {
        let path = pack_path(dir, no);
        let mut file = storage.create(&path).map_err(|e| Error::io(&path, e))?;
        file.append(&header()).map_err(|e| Error::io(&path, e))?;
        Ok(PackWriter { no, path, file })
    }

    /// Appends a chunk; returns the entry's offset.
    pub fn append(&mut self, id: &Id, chunk: &StoredChunk) -> Result<u64> {
        let offset = self.file.len();
        let mut head = Vec::with_capacity(ENTRY_HEADER_LEN);
        head.extend_from_slice(&(chunk.data.len() as u32).to_le_bytes());
        head.push(chunk.codec);
        head.extend_from_slice(&chunk.raw_len.to_le_bytes());
        head.extend_from_slice(id.as_bytes());
        let crc = mask_crc(crc32c::crc32c_append(crc32c::crc32c(&head), &chunk.data));
        let io = |e| Error::io(&self.path, e);
        self.file.append(&head).map_err(io)?;
        self.file.append(&chunk.data).map_err(|e| Error::io(&self.path, e))?;
        self.file.append(&crc.to_le_bytes()).map_err(|e| Error::io(&self.path, e))?;
        Ok(offset)
    }

    /// Makes everything appended durable.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync().map_err(|e| Error::io(&self.path, e))
    }

    /// Bytes written, header included.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether only the header was written.
    pub fn is_empty(&self) -> bool {
        self.len() <= PACK_HEADER_LEN
    }
}

/// Reads and checks the entry at `offset`, which the index says holds chunk `id` with
/// `stored_len` stored bytes.
pub fn read_entry(
    file: &dyn RandomAccessFile,
    path: &Path,
    offset: u64,
    id: &Id,
    stored_len: u32,
) -> Result<StoredChunk> {
    if stored_len > MAX_CHUNK {
        return Err(Error::corruption(path, offset, format!("index claims a {stored_len}-byte chunk")));
    }
    let total = ENTRY_HEADER_LEN + stored_len as usize + 4;
    let buf = file.read_at(offset, total).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::corruption(path, offset, "pack ends inside the entry"),
        _ => Error::io(path, e),
    })?;
    let (head, rest) = buf.split_at(ENTRY_HEADER_LEN);
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (data, crc) = rest.split_at(stored_len as usize);
    if mask_crc(crc32c::crc32c_append(crc32c::crc32c(head), data)) != le32(crc) {
        return Err(Error::corruption(path, offset, format!("checksum mismatch in the entry of chunk {id}")));
    }
    if le32(&head[0..4]) != stored_len || &head[9..41] != id.as_bytes() {
        return Err(Error::corruption(path, offset, format!("entry does not hold chunk {id}")));
    }
    let raw_len = le32(&head[5..9]);
    if raw_len > MAX_CHUNK {
        return Err(Error::corruption(path, offset, format!("entry claims a {raw_len}-byte chunk")));
    }
    Ok(StoredChunk { codec: head[4], raw_len, data: data.to_vec() })
}

/// Checks a pack header.
pub fn check_header(file: &dyn RandomAccessFile, path: &Path) -> Result<()> {
    let h = file.read_at(0, PACK_HEADER_LEN as usize).map_err(|e| Error::io(path, e))?;
    if h[..] != header()[..] {
        return Err(Error::corruption(path, 0, "bad pack header (magic, version or checksum)"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_kv::MemStorage;

    #[test]
    fn entries_round_trip_and_damage_is_caught() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let dir = Path::new("/p");
        let mut w = PackWriter::create(&storage, dir, 7).unwrap();
        let text = b"hello hello hello hello hello hello hello hello".repeat(20);
        let a = StoredChunk::encode(&text, 3);
        assert_eq!(a.codec, CODEC_ZSTD);
        let random = cairn_kv::testing::noise(2, 1000);
        let b = StoredChunk::encode(&random, 3);
        assert_eq!(b.codec, CODEC_RAW, "incompressible data is stored raw");
        let ida = crate::HashAlgo::Blake3.hash(&text);
        let idb = crate::HashAlgo::Blake3.hash(&random);
        let oa = w.append(&ida, &a).unwrap();
        let ob = w.append(&idb, &b).unwrap();
        w.sync().unwrap();
        let path = pack_path(dir, 7);
        let f = storage.open_read(&path).unwrap();
        check_header(f.as_ref(), &path).unwrap();
        let ra = read_entry(f.as_ref(), &path, oa, &ida, a.data.len() as u32).unwrap();
        assert_eq!(ra.decode(&path, oa).unwrap(), text);
        let rb = read_entry(f.as_ref(), &path, ob, &idb, b.data.len() as u32).unwrap();
        assert_eq!(rb.decode(&path, ob).unwrap(), random);
        assert!(read_entry(f.as_ref(), &path, oa, &idb, a.data.len() as u32).is_err(), "wrong id");
        // Flip every byte of entry b in turn: always detected.
        let image = storage.read_all(&path).unwrap();
        for i in ob as usize..image.len() {
            let mut bad = image.clone();
            bad[i] ^= 0x40;
            let mut w = storage.create(&path).unwrap();
            w.append(&bad).unwrap();
            let f = storage.open_read(&path).unwrap();
            let r = read_entry(f.as_ref(), &path, ob, &idb, b.data.len() as u32);
            assert!(matches!(r, Err(Error::Corruption { .. })), "byte {i}");
        }
    }
}
