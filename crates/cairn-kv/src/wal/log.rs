//! The record log shared by the write-ahead log and the MANIFEST (format byte by byte in
//! `docs/format/log.md`): a 16-byte header (8-byte magic, u32 version, u32 CRC32C of the first
//! 12 bytes), then records of `u32 length, u32 masked CRC32C(length ++ payload), payload`, all
//! little-endian.
//!
//! [`LogWriter`] appends records; [`read_log`] decodes a whole file image and reports where the
//! intact records end ([`LogTail`]). Whether a torn tail is acceptable is the caller's decision.

use std::path::{Path, PathBuf};

use crate::error::IoContext;
use crate::storage::WritableFile;
use crate::{Error, Result};

/// Bytes of the file header.
pub const LOG_HEADER_LEN: usize = 16;
/// Bytes in front of every record's payload (length and checksum).
pub const LOG_RECORD_HEADER_LEN: usize = 8;
/// Largest record payload, in bytes; the writer refuses and the reader stops at larger ones.
pub const MAX_LOG_RECORD: usize = 1 << 30;
/// Format version written in the header.
pub const LOG_VERSION: u32 = 1;

pub use crate::coding::mask_crc;

/// The header of a log with this magic.
fn header(magic: [u8; 8]) -> [u8; LOG_HEADER_LEN] {
    let mut h = [0u8; LOG_HEADER_LEN];
    h[..8].copy_from_slice(&magic);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The stored checksum of a record: masked CRC32C of its length bytes followed by its payload.
fn record_crc(len: &[u8; 4], payload: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(len), payload))
}

/// The bytes of a record with an empty payload (its header alone), as
/// `add_record(&[])` writes them.
pub fn empty_record() -> [u8; LOG_RECORD_HEADER_LEN] {
    let mut head = [0u8; LOG_RECORD_HEADER_LEN];
    head[4..].copy_from_slice(&record_crc(&[0; 4], &[]).to_le_bytes());
    head
}

/// Appends records to a log file. Records are buffered by the file; nothing is durable before
/// [`LogWriter::sync`] returns.
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
}

impl LogWriter {
    /// Writes the header into a fresh file. `path` names the file in errors.
    pub fn create(mut file: Box<dyn WritableFile>, path: PathBuf, magic: [u8; 8]) -> Result<Self> {
        file.append(&header(magic)).at(&path)?;
        Ok(LogWriter { file, path })
    }

    /// Appends one record (buffered; call [`LogWriter::flush`] or [`LogWriter::sync`]).
    /// A payload above [`MAX_LOG_RECORD`] bytes is [`Error::InvalidArgument`].
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        self.add_record_parts(&[payload])
    }

    /// Appends one record whose payload is the concatenation of `parts` (no copy to join them).
    pub fn add_record_parts(&mut self, parts: &[&[u8]]) -> Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let len = u32::try_from(total).ok().filter(|_| total <= MAX_LOG_RECORD).ok_or_else(|| {
            Error::InvalidArgument(format!("log record of {total} bytes is too large (maximum {MAX_LOG_RECORD})"))
        })?;
        let len = len.to_le_bytes();
        let crc = parts.iter().fold(crc32c::crc32c(&len), |c, p| crc32c::crc32c_append(c, p));
        let mut head = [0u8; LOG_RECORD_HEADER_LEN];
        head[..4].copy_from_slice(&len);
        head[4..].copy_from_slice(&mask_crc(crc).to_le_bytes());
        self.file.append(&head).at(&self.path)?;
        for p in parts {
            self.file.append(p).at(&self.path)?;
        }
        Ok(())
    }

    /// Hands buffered records to the operating system (survives a process crash only).
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().at(&self.path)
    }

    /// Makes every record added so far durable.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync().at(&self.path)
    }

    /// Hands every record added so far to the operating system and returns their sync, to run
    /// later (on any thread, while more records are added): once it succeeds they are
    /// durable. See [`crate::storage::WritableFile::sync_later`].
    pub fn sync_later(&mut self) -> Result<PendingSync> {
        let run = self.file.sync_later().at(&self.path)?;
        Ok(PendingSync { run, path: self.path.clone() })
    }

    /// Makes every record durable and trims space the file reserved past them; the log takes
    /// no more records. Used on the write-ahead log at a memtable switch and a clean close. (A
    /// log that was never finished, after a crash, may end in reserved zeros; the reader stops
    /// there.)
    pub fn finish(&mut self) -> Result<()> {
        self.file.finish().at(&self.path)
    }

    /// Makes every record durable; the log takes no more records, but may keep the zeros it
    /// reserved past them (see [`crate::storage::WritableFile::seal`]). Used on the
    /// write-ahead log at a memtable switch: it is deleted once its memtable is flushed.
    pub fn seal(&mut self) -> Result<()> {
        self.file.seal().at(&self.path)
    }

    /// Whether the file writes its filled parts to the device as it goes, ahead of the next
    /// sync ([`crate::storage::WritableFile::set_write_back`]; off for a new log).
    pub fn set_write_back(&mut self, on: bool) {
        self.file.set_write_back(on);
    }

    /// Bytes written, header included.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether no record was added (only the header was written).
    pub fn is_empty(&self) -> bool {
        self.len() <= LOG_HEADER_LEN as u64
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A log's sync returned by [`LogWriter::sync_later`], not yet run.
pub struct PendingSync {
    run: crate::storage::DeferredSync,
    path: PathBuf,
}

impl PendingSync {
    /// Runs the sync: once it returns `Ok`, every record added before it was made is durable.
    pub fn run(self) -> Result<()> {
        (self.run)().at(&self.path)
    }
}

/// How a log ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTail {
    /// Right after a complete record (or the header).
    Clean,
    /// In a truncated or damaged record (or header) starting at `offset`.
    Torn {
        /// Offset of the first bad record; 0 when the header itself is missing.
        offset: u64,
        /// What was wrong with it.
        reason: String,
    },
}

/// The intact records of a log, as `(offset, payload)` pairs; `offset` is where the record
/// (its length field) starts in the file.
pub type LogRecords = Vec<(u64, Vec<u8>)>;

/// Reads every intact record of the whole log file image `data` and says how the log ends.
///
/// - A header that is present but wrong (magic, version or checksum) is [`Error::Corruption`]
///   naming `path` at offset 0.
/// - A file shorter than the header, or whose header bytes are all zero (its first write never
///   reached the disk), holds no records and ends [`LogTail::Torn`] at 0.
/// - Records are returned up to the first one that is truncated, declares a length above
///   [`MAX_LOG_RECORD`], or fails its checksum; the log then ends [`LogTail::Torn`] at that
///   record's offset. Nothing here panics or allocates more than `data` holds.
/// - At least [`LOG_RECORD_HEADER_LEN`] zero bytes from a record boundary to the end of the
///   file are space the writer reserved (a memory-mapped write-ahead log grows its file ahead of
///   its records and always keeps that many zeros after them): the log ends
///   [`LogTail::Clean`] there. No record has an all-zero header: only an empty payload has
///   length 0, and its checksum is not 0. Fewer zeros are a truncated record header.
pub fn read_log(data: &[u8], path: &Path, magic: [u8; 8]) -> Result<(LogRecords, LogTail)> {
    let Some(head) = data.get(..LOG_HEADER_LEN) else {
        return Ok((Vec::new(), LogTail::Torn { offset: 0, reason: "no complete header".into() }));
    };
    if head.iter().all(|&b| b == 0) {
        return Ok((Vec::new(), LogTail::Torn { offset: 0, reason: "header is all zeros".into() }));
    }
    if *head != header(magic) {
        let why = if head[..8] != magic {
            format!(
                "bad magic {:?}, expected {:?}",
                String::from_utf8_lossy(&head[..8]),
                String::from_utf8_lossy(&magic)
            )
        } else if head[8..12] != LOG_VERSION.to_le_bytes() {
            format!(
                "unsupported log format version {} (expected {LOG_VERSION})",
                u32::from_le_bytes([head[8], head[9], head[10], head[11]])
            )
        } else {
            "header checksum mismatch".to_string()
        };
        return Err(Error::corruption(path, 0, why));
    }
    let mut records = Vec::new();
    let mut pos = LOG_HEADER_LEN;
    let torn = |pos: usize, reason: &str| LogTail::Torn { offset: pos as u64, reason: reason.to_string() };
    while let Some(rest) = data.get(pos..).filter(|r| !r.is_empty()) {
        if rest.len() >= LOG_RECORD_HEADER_LEN && rest.iter().all(|&b| b == 0) {
            break;
        }
        let Some(head) = rest.get(..LOG_RECORD_HEADER_LEN) else {
            return Ok((records, torn(pos, "truncated record header")));
        };
        let len_bytes = [head[0], head[1], head[2], head[3]];
        let stored_crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let len = usize::try_from(u32::from_le_bytes(len_bytes)).unwrap_or(usize::MAX);
        if len > MAX_LOG_RECORD {
            return Ok((records, torn(pos, "record length out of range")));
        }
        let Some(payload) = rest.get(LOG_RECORD_HEADER_LEN..LOG_RECORD_HEADER_LEN + len) else {
            return Ok((records, torn(pos, "truncated record")));
        };
        if record_crc(&len_bytes, payload) != stored_crc {
            return Ok((records, torn(pos, "checksum mismatch")));
        }
        records.push((pos as u64, payload.to_vec()));
        pos += LOG_RECORD_HEADER_LEN + len;
    }
    Ok((records, LogTail::Clean))
}

/// The torn end of a record log that a reader ignored (see [`read_log`], [`torn_tail`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscardedTail {
    /// The file.
    pub path: PathBuf,
    /// Where the torn record starts.
    pub offset: u64,
    /// Bytes from there to the last one written.
    pub bytes: u64,
    /// What was wrong with it.
    pub reason: String,
}

/// What the log image `data` holds from `offset` on, where [`read_log`] found it torn, as far
/// as it can be told: `(records, bytes)`. `bytes` runs to the last non-zero byte or the end of
/// the last intact record counted, whichever is later (zeros after both are reserved space, never
/// written). `records` counts the torn or damaged record as one, plus the intact records
/// (checksums verified, end records not counted) that follow it where its declared length says
/// it ends; none when the damage is in the file header.
pub fn torn_tail(data: &[u8], offset: u64) -> (u64, u64) {
    let start = usize::try_from(offset).unwrap_or(usize::MAX).min(data.len());
    let written = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    if written <= start {
        return (0, 0);
    }
    if start < LOG_HEADER_LEN {
        return (0, (written - start) as u64);
    }
    // (offset of the record after the one at `pos`, payload length), if it lies within `data`.
    let frame = |pos: usize| -> Option<(usize, usize)> {
        let head = data.get(pos..pos.checked_add(LOG_RECORD_HEADER_LEN)?)?;
        let len = usize::try_from(u32::from_le_bytes([head[0], head[1], head[2], head[3]])).ok()?;
        let next = pos.checked_add(LOG_RECORD_HEADER_LEN)?.checked_add(len)?;
        (len <= MAX_LOG_RECORD && next <= data.len()).then_some((next, len))
    };
    let mut records = 1;
    let mut end = written;
    let Some((mut pos, _)) = frame(start) else { return (records, (end - start) as u64) };
    while let Some((next, len)) = frame(pos) {
        let head = &data[pos..pos + LOG_RECORD_HEADER_LEN];
        let len_bytes = [head[0], head[1], head[2], head[3]];
        let stored = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if record_crc(&len_bytes, &data[pos + LOG_RECORD_HEADER_LEN..next]) != stored {
            break;
        }
        if len > 0 {
            records += 1;
        }
        pos = next;
        end = end.max(next);
    }
    (records, (end - start) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Storage;
    use crate::{FsStorage, MemStorage};
    use proptest::prelude::*;

    const MAGIC: [u8; 8] = *b"TESTLOG!";

    fn path() -> &'static Path {
        Path::new("/l")
    }

    /// A synced log holding `records`.
    fn write(records: &[Vec<u8>]) -> Vec<u8> {
        let s = MemStorage::new();
        let mut w = LogWriter::create(s.create(path()).unwrap(), path().into(), MAGIC).unwrap();
        for r in records {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        let data = s.read_all(path()).unwrap();
        assert_eq!(w.len(), data.len() as u64);
        data
    }

    /// Offsets where each record starts, then the end of the last one.
    fn boundaries(records: &[Vec<u8>]) -> Vec<usize> {
        let mut b = vec![LOG_HEADER_LEN];
        for r in records {
            b.push(b[b.len() - 1] + LOG_RECORD_HEADER_LEN + r.len());
        }
        b
    }

    fn read(data: &[u8]) -> (LogRecords, LogTail) {
        read_log(data, path(), MAGIC).unwrap()
    }

    /// Records of assorted sizes, empty ones included.
    fn assorted(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| (0..(i * 7) % 40).map(|j| (i * 31 + j) as u8).collect()).collect()
    }

    /// `data` (a log of `records`, damaged or cut at or after `bounds[k]`'s record) must yield
    /// exactly the first `k` records, in order, at their offsets.
    fn assert_prefix(got: &LogRecords, records: &[Vec<u8>], bounds: &[usize], k: usize) {
        assert_eq!(got.len(), k);
        for (i, (off, payload)) in got.iter().enumerate() {
            assert_eq!(*off, bounds[i] as u64);
            assert_eq!(payload, &records[i]);
        }
    }

    #[test]
    fn header_bytes_match_the_format_doc() {
        // The worked example in docs/format/log.md.
        let s = MemStorage::new();
        let mut w = LogWriter::create(s.create(path()).unwrap(), path().into(), *b"CAIRNWAL").unwrap();
        w.add_record(b"hi").unwrap();
        w.add_record(b"").unwrap();
        w.flush().unwrap();
        let want: Vec<u8> = [
            &b"CAIRNWAL"[..],
            &[0x01, 0x00, 0x00, 0x00, 0x84, 0x37, 0x04, 0x3f],
            &[0x02, 0x00, 0x00, 0x00, 0x8c, 0xfb, 0x35, 0x87, b'h', b'i'],
            &[0x00, 0x00, 0x00, 0x00, 0xa6, 0x7b, 0x11, 0x3a],
        ]
        .concat();
        assert_eq!(s.contents(path()).unwrap(), want);
        assert_eq!(empty_record()[..], want[26..]);
        assert_eq!(mask_crc(0), 0xa282_ead8);
        assert_eq!(mask_crc(0x885a_7259), 0x8735_fb8c);
    }

    #[test]
    fn round_trip_many_records() {
        let mut recs = assorted(300);
        recs.insert(0, Vec::new());
        recs.insert(150, vec![0xA5; 1 << 20]);
        recs.push(Vec::new());
        let data = write(&recs);
        let bounds = boundaries(&recs);
        assert_eq!(data.len(), bounds[recs.len()]);
        let (got, tail) = read(&data);
        assert_eq!(tail, LogTail::Clean);
        assert_prefix(&got, &recs, &bounds, recs.len());
    }

    #[test]
    fn empty_log_is_clean() {
        let data = write(&[]);
        assert_eq!(data.len(), LOG_HEADER_LEN);
        assert_eq!(read(&data), (Vec::new(), LogTail::Clean));
    }

    #[test]
    fn every_truncation_point_yields_a_prefix() {
        let recs = assorted(60);
        let data = write(&recs);
        let bounds = boundaries(&recs);
        for cut in 0..=data.len() {
            let (got, tail) = read(&data[..cut]);
            if cut < LOG_HEADER_LEN {
                assert!(got.is_empty());
                assert!(matches!(tail, LogTail::Torn { offset: 0, .. }), "cut {cut}");
                continue;
            }
            let k = bounds.iter().filter(|&&b| b <= cut).count() - 1;
            assert_prefix(&got, &recs, &bounds, k);
            if bounds.contains(&cut) {
                assert_eq!(tail, LogTail::Clean, "cut {cut}");
            } else {
                assert!(matches!(tail, LogTail::Torn { offset, .. } if offset == bounds[k] as u64), "cut {cut}");
            }
        }
    }

    #[test]
    fn truncating_a_large_record() {
        let recs = vec![b"before".to_vec(), vec![3u8; 1 << 20], b"after".to_vec()];
        let data = write(&recs);
        let bounds = boundaries(&recs);
        for cut in (bounds[1] + 1..bounds[2]).step_by(4099).chain([bounds[1] + 7, bounds[2] - 1]) {
            let (got, tail) = read(&data[..cut]);
            assert_prefix(&got, &recs, &bounds, 1);
            assert!(matches!(tail, LogTail::Torn { offset, .. } if offset == bounds[1] as u64));
        }
    }

    #[test]
    fn every_bit_flip_after_the_header_yields_a_prefix() {
        let recs = assorted(25);
        let data = write(&recs);
        let bounds = boundaries(&recs);
        let mut bad = data.clone();
        for i in LOG_HEADER_LEN..data.len() {
            // The record that holds byte `i`.
            let k = bounds.iter().filter(|&&b| b <= i).count() - 1;
            for bit in 0..8 {
                bad[i] ^= 1 << bit;
                let (got, tail) = read(&bad);
                assert_prefix(&got, &recs, &bounds, k);
                assert!(
                    matches!(tail, LogTail::Torn { offset, .. } if offset == bounds[k] as u64),
                    "byte {i} bit {bit}: {tail:?}"
                );
                bad[i] ^= 1 << bit;
            }
        }
    }

    #[test]
    fn every_bit_flip_in_the_header_is_corruption() {
        let data = write(&[b"payload".to_vec()]);
        let mut bad = data.clone();
        for i in 0..LOG_HEADER_LEN {
            for bit in 0..8 {
                bad[i] ^= 1 << bit;
                match read_log(&bad, path(), MAGIC) {
                    Err(Error::Corruption { path: p, offset: 0, .. }) => assert_eq!(p, path()),
                    other => panic!("byte {i} bit {bit}: {other:?}"),
                }
                bad[i] ^= 1 << bit;
            }
        }
    }

    #[test]
    fn wrong_magic_version_or_header_crc_is_corruption() {
        let data = write(&[b"a".to_vec()]);
        let err = read_log(&data, path(), *b"OTHERLOG").unwrap_err();
        assert!(err.is_corruption());
        assert!(err.to_string().contains("bad magic"), "{err}");
        assert!(err.to_string().contains("/l"), "{err}");

        let mut v2 = data.clone();
        v2[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&v2[..12]);
        v2[12..16].copy_from_slice(&crc.to_le_bytes());
        let err = read_log(&v2, path(), MAGIC).unwrap_err();
        assert!(err.to_string().contains("unsupported log format version 2"), "{err}");

        let mut bad_crc = data;
        bad_crc[15] ^= 0xFF;
        let err = read_log(&bad_crc, path(), MAGIC).unwrap_err();
        assert!(err.to_string().contains("header checksum"), "{err}");
    }

    #[test]
    fn short_or_zeroed_header_holds_no_records() {
        let full = write(&[b"a".to_vec()]);
        for data in [&[][..], &full[..LOG_HEADER_LEN - 1], &[0u8; LOG_HEADER_LEN], &[0u8; 4096]] {
            let (got, tail) = read(data);
            assert!(got.is_empty());
            assert!(matches!(tail, LogTail::Torn { offset: 0, .. }));
        }
    }

    /// Zeros after the last record are reserved space (a mapped log's file runs ahead of its
    /// records): every record, and a clean end.
    #[test]
    fn zero_filled_tail_is_reserved_space() {
        let recs = assorted(5);
        let mut data = write(&recs);
        let end = data.len();
        data.resize(end + 4096, 0);
        let (got, tail) = read(&data);
        assert_prefix(&got, &recs, &boundaries(&recs), recs.len());
        assert_eq!(tail, LogTail::Clean);
    }

    /// A record cut short and followed by zeros (the rest of its page never reached the disk)
    /// is still a torn tail; so is a zero gap followed by data.
    #[test]
    fn partial_record_before_zeros_or_data_after_zeros_is_torn() {
        let recs = assorted(5);
        let data = write(&recs);
        let b = boundaries(&recs);
        let mut cut = data[..b[3] + 5].to_vec();
        cut.resize(data.len() + 4096, 0);
        let (got, tail) = read(&cut);
        assert_prefix(&got, &recs, &b, 3);
        assert!(matches!(tail, LogTail::Torn { offset, .. } if offset == b[3] as u64));
        let mut gap = data[..b[2]].to_vec();
        gap.resize(b[2] + 64, 0);
        gap.extend_from_slice(&data[b[2]..]);
        let (got, tail) = read(&gap);
        assert_prefix(&got, &recs, &b, 2);
        assert!(matches!(tail, LogTail::Torn { offset, .. } if offset == b[2] as u64));
    }

    #[test]
    fn oversized_length_is_torn_without_allocating() {
        let mut data = write(&[b"ok".to_vec()]);
        let end = data.len() as u64;
        for len in [MAX_LOG_RECORD as u32 + 1, u32::MAX, MAX_LOG_RECORD as u32] {
            let mut d = data.clone();
            d.extend_from_slice(&len.to_le_bytes());
            d.extend_from_slice(&[0xEE; 4]);
            let (got, tail) = read(&d);
            assert_eq!(got.len(), 1);
            let LogTail::Torn { offset, reason } = tail else { panic!("not torn") };
            assert_eq!(offset, end);
            let want = if len as usize > MAX_LOG_RECORD { "length out of range" } else { "truncated record" };
            assert!(reason.contains(want), "{reason}");
        }
        // A partial record header.
        data.extend_from_slice(&[1, 0, 0]);
        let (_, tail) = read(&data);
        assert!(matches!(tail, LogTail::Torn { offset, reason } if offset == end && reason.contains("header")));
    }

    #[test]
    fn writer_reports_len_path_and_emptiness() {
        let s = MemStorage::new();
        let mut w = LogWriter::create(s.create(path()).unwrap(), path().into(), MAGIC).unwrap();
        assert_eq!(w.len(), LOG_HEADER_LEN as u64);
        assert!(w.is_empty());
        assert_eq!(w.path(), path());
        w.add_record(b"abc").unwrap();
        assert_eq!(w.len(), (LOG_HEADER_LEN + LOG_RECORD_HEADER_LEN + 3) as u64);
        assert!(!w.is_empty());
    }

    #[test]
    fn writer_errors_name_the_path() {
        let s = MemStorage::new();
        let mut w = LogWriter::create(s.create(path()).unwrap(), path().into(), MAGIC).unwrap();
        s.fail_after(0);
        match w.add_record(b"abc") {
            Err(Error::Io { path: p, .. }) => assert_eq!(p, path()),
            other => panic!("{other:?}"),
        }
        assert!(w.sync().is_err());
    }

    #[test]
    fn crash_keeps_only_synced_records() {
        let s = MemStorage::new();
        let mut w = LogWriter::create(s.create(path()).unwrap(), path().into(), MAGIC).unwrap();
        s.sync_dir(Path::new("/")).unwrap();
        w.add_record(b"durable").unwrap();
        w.sync().unwrap();
        w.add_record(b"lost").unwrap();
        s.fail_after(0);
        assert!(w.add_record(b"torn record").is_err());
        s.crash();
        let (got, tail) = read(&s.read_all(path()).unwrap());
        assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), vec![b"durable".to_vec()]);
        assert_eq!(tail, LogTail::Clean);
    }

    #[test]
    fn writer_over_the_file_system() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("000001.log");
        let s = FsStorage::new();
        let recs = vec![b"one".to_vec(), vec![9u8; 200 << 10], Vec::new(), b"four".to_vec()];
        let mut w = LogWriter::create(s.create(&p).unwrap(), p.clone(), MAGIC).unwrap();
        for r in &recs {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        let (got, tail) = read_log(&s.read_all(&p).unwrap(), &p, MAGIC).unwrap();
        assert_eq!(tail, LogTail::Clean);
        assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), recs);
    }

    fn payloads() -> impl Strategy<Value = Vec<Vec<u8>>> {
        proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20)
    }

    proptest! {
        #[test]
        fn round_trip(recs in payloads()) {
            let data = write(&recs);
            let (got, tail) = read(&data);
            prop_assert_eq!(tail, LogTail::Clean);
            prop_assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), recs);
        }

        #[test]
        fn truncation_yields_a_prefix(recs in payloads(), at: prop::sample::Index) {
            let data = write(&recs);
            let bounds = boundaries(&recs);
            let cut = LOG_HEADER_LEN + at.index(data.len() - LOG_HEADER_LEN + 1);
            let (got, tail) = read(&data[..cut]);
            let k = bounds.iter().filter(|&&b| b <= cut).count() - 1;
            assert_prefix(&got, &recs, &bounds, k);
            prop_assert_eq!(tail == LogTail::Clean, bounds.contains(&cut));
        }

        #[test]
        fn random_corruption_yields_a_prefix(recs in payloads(), at: prop::sample::Index, xor in 1u8..=255) {
            prop_assume!(!recs.is_empty());
            let mut data = write(&recs);
            let bounds = boundaries(&recs);
            let i = LOG_HEADER_LEN + at.index(data.len() - LOG_HEADER_LEN);
            data[i] ^= xor;
            let k = bounds.iter().filter(|&&b| b <= i).count() - 1;
            let (got, tail) = read(&data);
            assert_prefix(&got, &recs, &bounds, k);
            let torn_at_k = matches!(tail, LogTail::Torn { offset, .. } if offset == bounds[k] as u64);
            prop_assert!(torn_at_k, "{:?}", tail);
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            let mut with_header = header(MAGIC).to_vec();
            with_header.extend_from_slice(&data);
            let _ = read_log(&with_header, path(), MAGIC);
            let _ = read_log(&data, path(), MAGIC);
        }

        /// A log damaged inside one record's payload (its length intact) loses exactly the
        /// records from that one on, and `torn_tail` counts them and their bytes.
        #[test]
        fn torn_tail_counts_what_damage_to_a_payload_discards(
            recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..12),
            at: prop::sample::Index,
            xor in 1u8..=255,
            zeros in 8usize..64,
        ) {
            let mut data = write(&recs);
            let bounds = boundaries(&recs);
            let k = at.index(recs.len());
            // A byte of record k's payload.
            let i = bounds[k] + LOG_RECORD_HEADER_LEN + (xor as usize % recs[k].len());
            data[i] ^= xor;
            data.resize(data.len() + zeros, 0);
            let (got, tail) = read(&data);
            prop_assert_eq!(got.len(), k);
            let LogTail::Torn { offset, .. } = tail else { panic!("not torn") };
            // To the end of the last record, or (the damaged record last) its last non-zero byte.
            let last = data.iter().rposition(|&b| b != 0).unwrap() + 1;
            let end = if k + 1 < recs.len() { bounds[recs.len()] } else { last };
            prop_assert_eq!(torn_tail(&data, offset), ((recs.len() - k) as u64, (end - bounds[k]) as u64));
        }

        /// `torn_tail` never panics and never counts more bytes than there are.
        #[test]
        fn torn_tail_never_panics(data: Vec<u8>, offset: u64) {
            let (_, bytes) = torn_tail(&data, offset);
            prop_assert!(bytes <= data.len() as u64);
        }
    }

    /// The memory-mapped log file keeps the zeros the reader needs to see its end.
    #[test]
    fn mapped_logs_keep_a_record_header_of_zeros() {
        assert_eq!(crate::storage::mmap::MIN_ZEROS_AFTER, LOG_RECORD_HEADER_LEN as u64);
    }

    /// A log cut inside its last record, or inside its header, loses one record or none.
    #[test]
    fn torn_tail_of_a_cut_log() {
        let recs = assorted(5).into_iter().filter(|r| !r.is_empty()).collect::<Vec<_>>();
        let data = write(&recs);
        let bounds = boundaries(&recs);
        let cut = &data[..data.len() - 3];
        let (_, tail) = read(cut);
        assert_eq!(tail, LogTail::Torn { offset: bounds[recs.len() - 1] as u64, reason: "truncated record".into() });
        let last = cut.iter().rposition(|&b| b != 0).unwrap() + 1;
        assert_eq!(torn_tail(cut, bounds[recs.len() - 1] as u64), (1, (last - bounds[recs.len() - 1]) as u64));
        assert_eq!(torn_tail(&data[..5], 0), (0, 5));
        assert_eq!(torn_tail(&data, data.len() as u64), (0, 0));
    }
}
