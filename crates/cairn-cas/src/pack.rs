//! Pack files: entries appended back to back (format in `docs/format/cas.md`).
//!
//! ```text
//! header  16 bytes: magic "CAIRNPAK", u32 version (1 or 2), u32 CRC32C of the first 12 bytes
//! group   (version 2) u32 stored_len, u8 codec (2 raw, 3 zstd), u32 raw_len, u32 count,
//!         count x ([32] chunk id, u32 chunk raw_len), stored bytes,
//!         u32 masked CRC32C of everything before it in the entry
//! single  (version 1) u32 stored_len, u8 codec (0 raw, 1 zstd), u32 raw_len, [32] chunk id,
//!         stored bytes, u32 masked CRC32C of everything before it in the entry
//! ```
//!
//! A group holds consecutive new chunks compressed together as one zstd frame: small chunks
//! (most files of a source tree or `node_modules`) compress much better together than alone.
//! Version 1 packs (single entries only) are still read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::coding::mask_crc;
use cairn_kv::{RandomAccessFile, Storage, WritableFile};

use crate::{Error, Id, Result};

/// Magic at the start of every pack.
pub const PACK_MAGIC: [u8; 8] = *b"CAIRNPAK";
/// Pack format version written (version 1 packs are read too).
pub const PACK_VERSION: u32 = 2;
/// Bytes of the pack header.
pub const PACK_HEADER_LEN: u64 = 16;
/// Bytes of an entry's fixed header.
pub const ENTRY_HEADER_LEN: usize = 41;
/// Bytes an entry adds around its data (header and checksum).
pub const ENTRY_OVERHEAD: u64 = ENTRY_HEADER_LEN as u64 + 4;
/// Largest chunk accepted (stored or raw).
pub const MAX_CHUNK: u32 = 16 << 20;
/// Bytes of a group entry's fixed header (before its directory).
pub const GROUP_HEADER_LEN: usize = 13;
/// Bytes of one chunk's line in a group's directory.
pub const GROUP_DIR_LINE: usize = 36;
/// Largest group accepted (stored or raw, directory included).
pub const MAX_GROUP: u32 = 32 << 20;

/// Chunk stored as is (version 1 single entry).
pub const CODEC_RAW: u8 = 0;
/// Chunk stored zstd-compressed (version 1 single entry).
pub const CODEC_ZSTD: u8 = 1;
/// Group of chunks stored as is.
pub const CODEC_GROUP_RAW: u8 = 2;
/// Group of chunks stored as one zstd frame.
pub const CODEC_GROUP_ZSTD: u8 = 3;

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

/// Writes a whole pack as `tmp` (replacing any), syncs it and renames it over `path`: a reader
/// sees the old file or the new one whole. Durable once the directory is synced.
pub fn replace_file(storage: &dyn Storage, tmp: &Path, path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = storage.create(tmp)?;
    f.append(data)?;
    f.sync()?;
    drop(f);
    storage.rename(tmp, path)
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
    /// Encodes `raw` as a version 1 single entry holds it, compressing it with zstd at `level`
    /// only when that saves space (stores write groups; this makes version 1 data for tests).
    #[cfg(test)]
    pub fn encode(raw: &[u8], level: i32) -> StoredChunk {
        let raw_len = raw.len() as u32;
        match compress(raw, level) {
            Some(c) => StoredChunk { codec: CODEC_ZSTD, raw_len, data: c },
            None => StoredChunk { codec: CODEC_RAW, raw_len, data: raw.to_vec() },
        }
    }

    /// Decodes back to the raw bytes.
    pub fn decode(&self, path: &Path, offset: u64) -> Result<Vec<u8>> {
        match self.codec {
            CODEC_RAW if self.data.len() == self.raw_len as usize => Ok(self.data.clone()),
            CODEC_ZSTD => decompress(&self.data, self.raw_len as usize, path, offset),
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
    /// A copy of the bytes appended since [`PackWriter::begin_capture`], for the store's
    /// journal (see `docs/design/2026-12-07-one-sync-add.md`).
    capture: Option<Capture>,
}

/// Bytes appended from `start` on, as long as they stay within `limit` (past it, `bytes` is
/// dropped and `over` set: the batch is too large to journal).
struct Capture {
    start: u64,
    bytes: Vec<u8>,
    limit: usize,
    over: bool,
}

impl PackWriter {
    /// Creates pack `no` and writes its header (not yet synced).
    pub fn create(storage: &Arc<dyn Storage>, dir: &Path, no: u64) -> Result<PackWriter> {
        let path = pack_path(dir, no);
        // A pack file that exists is never replaced (its number was not this store's to give).
        let mut file = storage.create_new(&path).map_err(|e| Error::io(&path, e))?;
        file.append(&header()).map_err(|e| Error::io(&path, e))?;
        Ok(PackWriter { no, path, file, capture: None })
    }

    /// Appends a version 1 single entry; returns its offset (stores write groups; this makes
    /// version 1 data for tests).
    #[cfg(test)]
    pub fn append(&mut self, id: &Id, chunk: &StoredChunk) -> Result<u64> {
        let mut head = Vec::with_capacity(ENTRY_HEADER_LEN);
        head.extend_from_slice(&(chunk.data.len() as u32).to_le_bytes());
        head.push(chunk.codec);
        head.extend_from_slice(&chunk.raw_len.to_le_bytes());
        head.extend_from_slice(id.as_bytes());
        self.write_entry(&head, &chunk.data)
    }

    /// Appends a group entry; returns its offset.
    pub fn append_group(&mut self, g: &Group) -> Result<u64> {
        let mut head = Vec::with_capacity(GROUP_HEADER_LEN + GROUP_DIR_LINE * g.dir.len());
        head.extend_from_slice(&(g.data.len() as u32).to_le_bytes());
        head.push(g.codec);
        head.extend_from_slice(&(g.raw_len() as u32).to_le_bytes());
        head.extend_from_slice(&(g.dir.len() as u32).to_le_bytes());
        for (id, len) in &g.dir {
            head.extend_from_slice(id.as_bytes());
            head.extend_from_slice(&len.to_le_bytes());
        }
        self.write_entry(&head, &g.data)
    }

    /// Appends an entry: its header, its stored bytes and the masked CRC32C of both; returns
    /// its offset.
    fn write_entry(&mut self, head: &[u8], data: &[u8]) -> Result<u64> {
        let offset = self.file.len();
        let crc = mask_crc(crc32c::crc32c_append(crc32c::crc32c(head), data));
        for part in [head, data, &crc.to_le_bytes()] {
            self.file.append(part).map_err(|e| Error::io(&self.path, e))?;
            if let Some(c) = self.capture.as_mut().filter(|c| !c.over) {
                if c.bytes.len() + part.len() > c.limit {
                    c.over = true;
                    c.bytes = Vec::new();
                } else {
                    c.bytes.extend_from_slice(part);
                }
            }
        }
        Ok(offset)
    }

    /// Starts keeping a copy of what is appended from now on, up to `limit` bytes (replacing
    /// any copy kept before).
    pub fn begin_capture(&mut self, limit: usize) {
        self.capture = Some(Capture { start: self.len(), bytes: Vec::new(), limit, over: false });
    }

    /// Ends the copy begun by [`PackWriter::begin_capture`]: the offset it began at and the
    /// bytes appended since, or `None` if none was begun or it outgrew its limit.
    pub fn take_capture(&mut self) -> Option<(u64, Vec<u8>)> {
        let c = self.capture.take()?;
        (!c.over).then_some((c.start, c.bytes))
    }

    /// Hands everything appended to the operating system (readers see it, a process crash
    /// keeps it; a power cut may not).
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().map_err(|e| Error::io(&self.path, e))
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

/// Checks a pack header (version 1 or 2).
pub fn check_header(file: &dyn RandomAccessFile, path: &Path) -> Result<()> {
    let h = file.read_at(0, PACK_HEADER_LEN as usize).map_err(|e| Error::io(path, e))?;
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    let crc = u32::from_le_bytes([h[12], h[13], h[14], h[15]]);
    if h[..8] != PACK_MAGIC || !(1..=PACK_VERSION).contains(&version) || crc32c::crc32c(&h[..12]) != crc {
        return Err(Error::corruption(path, 0, "bad pack header (magic, version or checksum)"));
    }
    Ok(())
}

/// Cuts chunks of the given lengths, in order, into groups of at most `target` raw bytes (a
/// chunk at least that long is a group of its own). Returns index ranges.
pub fn plan_groups(lens: &[usize], target: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &len) in lens.iter().enumerate() {
        if i > start && bytes + len > target {
            out.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += len;
    }
    if start < lens.len() {
        out.push(start..lens.len());
    }
    out
}

/// A group entry ready to append: the chunks' ids and lengths, and their content compressed
/// together (or raw, when compression saves nothing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// [`CODEC_GROUP_RAW`] or [`CODEC_GROUP_ZSTD`].
    pub codec: u8,
    /// The chunks in order: id and raw length.
    pub dir: Vec<(Id, u32)>,
    /// The stored bytes.
    pub data: Vec<u8>,
}

impl Group {
    /// Encodes `chunks` (in order) as one group, compressed with zstd at `level` when that
    /// saves space. Each thread reuses one compression context.
    pub fn encode(chunks: &[(Id, &[u8])], level: i32) -> Group {
        let mut raw = Vec::with_capacity(chunks.iter().map(|(_, d)| d.len()).sum());
        for (_, d) in chunks {
            raw.extend_from_slice(d);
        }
        let dir = chunks.iter().map(|(id, d)| (*id, d.len() as u32)).collect();
        match compress(&raw, level) {
            Some(c) => Group { codec: CODEC_GROUP_ZSTD, dir, data: c },
            None => Group { codec: CODEC_GROUP_RAW, dir, data: raw },
        }
    }

    /// Total raw length of the chunks.
    pub fn raw_len(&self) -> u64 {
        self.dir.iter().map(|(_, l)| *l as u64).sum()
    }

    /// Bytes the entry takes in a pack.
    pub fn entry_len(&self) -> u64 {
        (GROUP_HEADER_LEN + GROUP_DIR_LINE * self.dir.len() + self.data.len() + 4) as u64
    }
}

/// A decoded entry: its chunks (id, offset in `raw`, length) and their raw content.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    /// The chunks in order.
    pub dir: Vec<(Id, u32, u32)>,
    /// All chunks' raw bytes, back to back.
    pub raw: Vec<u8>,
    /// What is wrong with the entry when it failed its checksum but still decoded: each
    /// chunk's hash then decides which chunks are intact.
    pub damage: Option<String>,
}

impl Entry {
    /// The raw bytes of chunk `id`, which the index says starts at `inner` and is `len` long.
    pub fn chunk(&self, id: &Id, inner: u32, len: u32) -> Option<&[u8]> {
        self.dir.iter().find(|(i, o, l)| i == id && *o == inner && *l == len)?;
        self.raw.get(inner as usize..inner as usize + len as usize)
    }
}

/// `raw` compressed with zstd at `level`, if that is smaller. Each thread reuses one
/// compression context (creating one per chunk cost a tenth of ingest).
fn compress(raw: &[u8], level: i32) -> Option<Vec<u8>> {
    COMPRESSOR
        .with(|c| {
            let mut c = c.borrow_mut();
            if c.as_ref().is_none_or(|(l, _)| *l != level) {
                *c = zstd::bulk::Compressor::new(level).ok().map(|z| (level, z));
            }
            c.as_mut().and_then(|(_, z)| z.compress(raw).ok())
        })
        .filter(|c| c.len() < raw.len())
}

fn decompress(data: &[u8], raw_len: usize, path: &Path, offset: u64) -> Result<Vec<u8>> {
    let out = DECOMPRESSOR
        .with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new()?);
            }
            match d.as_mut() {
                Some(d) => d.decompress(data, raw_len),
                None => Err(std::io::Error::other("no zstd context")),
            }
        })
        .map_err(|e| Error::corruption(path, offset, format!("zstd: {e}")))?;
    if out.len() != raw_len {
        return Err(Error::corruption(path, offset, "decompressed length differs from the entry's"));
    }
    Ok(out)
}

/// Parses and decodes a group entry from its bytes (`buf`, exactly the entry); checks the CRC,
/// the directory and the decompressed length.
pub fn decode_group(buf: &[u8], path: &Path, offset: u64) -> Result<Entry> {
    let bad = |why: &str| Error::corruption(path, offset, why.to_string());
    if buf.len() < GROUP_HEADER_LEN + 4 {
        return Err(bad("group entry shorter than its header"));
    }
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let (body, crc) = buf.split_at(buf.len() - 4);
    // On a checksum mismatch the entry is still decoded if it can be: the chunks' own hashes
    // then tell the damaged ones from the intact ones (a flipped bit costs one chunk, not the
    // group, when the group is stored raw).
    let damage =
        (mask_crc(crc32c::crc32c(body)) != le32(crc)).then(|| "checksum mismatch in a group entry".to_string());
    let (stored_len, codec, raw_len, count) = (le32(&body[0..4]), body[4], le32(&body[5..9]), le32(&body[9..13]));
    let dir_len = (count as usize).checked_mul(GROUP_DIR_LINE).ok_or_else(|| bad("group directory too long"))?;
    if raw_len > MAX_GROUP || GROUP_HEADER_LEN + dir_len + stored_len as usize != body.len() {
        return Err(bad("group entry lengths do not add up"));
    }
    let mut dir = Vec::with_capacity(count as usize);
    let mut at = 0u32;
    for line in body[GROUP_HEADER_LEN..GROUP_HEADER_LEN + dir_len].chunks_exact(GROUP_DIR_LINE) {
        let id = Id::from_slice(&line[..32]).ok_or_else(|| bad("malformed group directory"))?;
        let len = le32(&line[32..]);
        dir.push((id, at, len));
        at = at.checked_add(len).filter(|&a| a <= raw_len).ok_or_else(|| bad("group chunks exceed its length"))?;
    }
    if at != raw_len {
        return Err(bad("group chunks do not fill its length"));
    }
    let data = &body[GROUP_HEADER_LEN + dir_len..];
    let raw = match codec {
        CODEC_GROUP_RAW if data.len() == raw_len as usize => data.to_vec(),
        CODEC_GROUP_ZSTD => decompress(data, raw_len as usize, path, offset)?,
        c => return Err(bad(&format!("unknown group codec {c} or bad length"))),
    };
    Ok(Entry { dir, raw, damage })
}

/// Reads and decodes the group entry of `entry_len` bytes at `offset`.
pub fn read_group(file: &dyn RandomAccessFile, path: &Path, offset: u64, entry_len: u32) -> Result<Entry> {
    if entry_len > MAX_GROUP {
        return Err(Error::corruption(path, offset, format!("index claims a {entry_len}-byte entry")));
    }
    let buf = file.read_at(offset, entry_len as usize).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::corruption(path, offset, "pack ends inside the entry"),
        _ => Error::io(path, e),
    })?;
    decode_group(&buf, path, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_kv::MemStorage;

    /// The copy kept for the journal holds exactly the bytes appended since it began, and
    /// gives up (rather than keep part of them) past its limit.
    #[test]
    fn a_capture_holds_what_was_appended_within_its_limit() {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let mut w = PackWriter::create(&storage, Path::new("/p"), 3).unwrap();
        let a = StoredChunk::encode(&cairn_kv::testing::noise(1, 500), 3);
        w.append(&Id([1; 32]), &a).unwrap();
        assert_eq!(w.take_capture(), None, "nothing begun");
        w.begin_capture(4096);
        let start = w.len();
        w.append(&Id([2; 32]), &a).unwrap();
        w.append(&Id([3; 32]), &a).unwrap();
        w.flush().unwrap();
        let (offset, bytes) = w.take_capture().unwrap();
        assert_eq!(offset, start);
        let file = storage.read_all(&pack_path(Path::new("/p"), 3)).unwrap();
        assert_eq!(&file[start as usize..], &bytes[..]);
        assert_eq!(w.take_capture(), None, "taken once");
        w.begin_capture(1000);
        w.append(&Id([4; 32]), &a).unwrap();
        w.append(&Id([5; 32]), &a).unwrap();
        assert_eq!(w.take_capture(), None, "past its limit");
    }

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

    #[test]
    fn groups_are_planned_up_to_the_target() {
        assert_eq!(plan_groups(&[], 100), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(plan_groups(&[40, 40, 20, 1, 150, 10], 100), vec![0..3, 3..4, 4..5, 5..6]);
        assert_eq!(plan_groups(&[0, 0, 100], 100), vec![0..3]);
        assert_eq!(plan_groups(&[200], 100), vec![0..1], "a chunk above the target is alone");
    }

    fn group_of(chunks: &[Vec<u8>]) -> (Group, Vec<Id>) {
        let ids: Vec<Id> = chunks.iter().map(|c| crate::HashAlgo::Blake3.hash(c)).collect();
        let refs: Vec<(Id, &[u8])> = ids.iter().copied().zip(chunks.iter().map(|c| c.as_slice())).collect();
        (Group::encode(&refs, 3), ids)
    }

    fn write_group(g: &Group) -> (Arc<dyn Storage>, PathBuf, u64) {
        let storage: Arc<dyn Storage> = Arc::new(MemStorage::new());
        let mut w = PackWriter::create(&storage, Path::new("/p"), 1).unwrap();
        let at = w.append_group(g).unwrap();
        w.sync().unwrap();
        assert_eq!(w.len(), PACK_HEADER_LEN + g.entry_len());
        (storage, pack_path(Path::new("/p"), 1), at)
    }

    #[test]
    fn every_damaged_byte_of_a_group_is_caught_and_never_yields_wrong_chunks() {
        let text = b"const x = require('y'); module.exports = x;\n".repeat(40);
        for chunks in [
            vec![text.clone(), text[7..900].to_vec(), Vec::new()],
            vec![cairn_kv::testing::noise(5, 3000), cairn_kv::testing::noise(6, 500)],
        ] {
            let (g, ids) = group_of(&chunks);
            assert_eq!(g.codec, if chunks[0] == text { CODEC_GROUP_ZSTD } else { CODEC_GROUP_RAW });
            let (storage, path, at) = write_group(&g);
            let image = storage.read_all(&path).unwrap();
            let f = storage.open_read(&path).unwrap();
            let e = read_group(f.as_ref(), &path, at, g.entry_len() as u32).unwrap();
            assert_eq!(e.damage, None);
            let mut off = 0;
            for (c, id) in chunks.iter().zip(&ids) {
                assert_eq!(e.chunk(id, off, c.len() as u32), Some(&c[..]));
                off += c.len() as u32;
            }
            assert_eq!(e.chunk(&ids[0], 1, chunks[0].len() as u32), None, "wrong offset");
            for i in at as usize..image.len() {
                let mut bad = image.clone();
                bad[i] ^= 0x10;
                let e = decode_group(&bad[at as usize..], &path, at);
                let Ok(e) = e else { continue };
                assert!(e.damage.is_some(), "byte {i}: damage goes unnoticed");
                // Whatever still decodes is only trusted when it hashes to its id.
                for (id, o, l) in &e.dir {
                    if let Some(raw) = e.chunk(id, *o, *l)
                        && crate::HashAlgo::Blake3.hash(raw) == *id
                    {
                        assert!(chunks.iter().any(|c| c == raw));
                    }
                }
            }
            // Truncated entries are errors.
            for cut in [0, 5, 13, g.entry_len() as usize - 1] {
                assert!(decode_group(&image[at as usize..at as usize + cut], &path, at).is_err(), "cut {cut}");
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn groups_round_trip(chunks in proptest::collection::vec(proptest::collection::vec(0u8..4, 0..3000), 1..8)) {
            let (g, ids) = group_of(&chunks);
            let (storage, path, at) = write_group(&g);
            let f = storage.open_read(&path).unwrap();
            let e = read_group(f.as_ref(), &path, at, g.entry_len() as u32).unwrap();
            proptest::prop_assert_eq!(e.raw, chunks.concat());
            let dir: Vec<(Id, u32)> = e.dir.iter().map(|(id, _, l)| (*id, *l)).collect();
            proptest::prop_assert_eq!(dir, ids.into_iter().zip(chunks.iter().map(|c| c.len() as u32)).collect::<Vec<_>>());
        }

        #[test]
        fn group_decoder_never_panics(b: Vec<u8>, codec in 0u8..5, count in 0u32..4) {
            let _ = decode_group(&b, Path::new("/p"), 0);
            // Also with a well-formed header and checksum around arbitrary content.
            let mut e = (b.len() as u32).to_le_bytes().to_vec();
            e.push(codec);
            e.extend_from_slice(&(b.len() as u32).to_le_bytes());
            e.extend_from_slice(&count.to_le_bytes());
            e.extend_from_slice(&b);
            let crc = mask_crc(crc32c::crc32c(&e));
            e.extend_from_slice(&crc.to_le_bytes());
            let _ = decode_group(&e, Path::new("/p"), 0);
        }
    }
}
