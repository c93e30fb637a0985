//! The record log shared by the write-ahead log and the MANIFEST (format in
//! `docs/format/log.md`): a 16-byte header (magic, version, CRC32C), then records of
//! `u32 length, u32 masked CRC32C(length ++ payload), payload`.

use std::path::{Path, PathBuf};

use crate::error::IoContext;
use crate::storage::WritableFile;
use crate::{Error, Result};

/// Bytes of the file header.
pub const LOG_HEADER_LEN: usize = 16;
/// Largest record payload accepted by the reader.
pub const MAX_LOG_RECORD: usize = 1 << 30;
/// Format version written in the header.
pub const LOG_VERSION: u32 = 1;

/// Masks a CRC stored next to the data it covers (as LevelDB does), so that a CRC of data that
/// itself contains CRCs stays well distributed.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn header(magic: [u8; 8]) -> [u8; LOG_HEADER_LEN] {
    let mut h = [0u8; LOG_HEADER_LEN];
    h[..8].copy_from_slice(&magic);
    h[8..12].copy_from_slice(&LOG_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&h[..12]);
    h[12..].copy_from_slice(&crc.to_le_bytes());
    h
}

fn record_crc(len: &[u8; 4], payload: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(len), payload))
}

/// Appends records to a log file.
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
}

impl LogWriter {
    /// Writes the header into a fresh file.
    pub fn create(mut file: Box<dyn WritableFile>, path: PathBuf, magic: [u8; 8]) -> Result<Self> {
        file.append(&header(magic)).at(&path)?;
        Ok(LogWriter { file, path })
    }

    /// Appends one record (buffered; call [`LogWriter::flush`] or [`LogWriter::sync`]).
    pub fn add_record(&mut self, payload: &[u8]) -> Result<()> {
        let len = u32::try_from(payload.len())
            .ok()
            .filter(|&l| l as usize <= MAX_LOG_RECORD)
            .ok_or_else(|| Error::InvalidArgument(format!("log record of {} bytes is too large", payload.len())))?;
        let len = len.to_le_bytes();
        let mut head = [0u8; 8];
        head[..4].copy_from_slice(&len);
        head[4..].copy_from_slice(&record_crc(&len, payload).to_le_bytes());
        self.file.append(&head).at(&self.path)?;
        self.file.append(payload).at(&self.path)
    }

    /// Hands buffered records to the operating system.
    pub fn flush(&mut self) -> Result<()> {
        self.file.flush().at(&self.path)
    }

    /// Makes every record durable.
    pub fn sync(&mut self) -> Result<()> {
        self.file.sync().at(&self.path)
    }

    /// Bytes written, header included.
    pub fn len(&self) -> u64 {
        self.file.len()
    }

    /// Whether only the header was written.
    pub fn is_empty(&self) -> bool {
        self.len() <= LOG_HEADER_LEN as u64
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How a log ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogTail {
    /// After a complete record (or the header).
    Clean,
    /// In a truncated or damaged record starting at `offset`.
    Torn {
        /// Offset of the first bad record.
        offset: u64,
        /// What was wrong with it.
        reason: String,
    },
}

/// The intact records of a log, as `(offset, payload)` pairs.
pub type LogRecords = Vec<(u64, Vec<u8>)>;

/// Reads every intact record of the log image `data`, as `(offset, payload)` pairs, and how the
/// log ends. A wrong header is `Corruption`; a file shorter than its header (or all zeros there)
/// holds no records and ends torn at 0.
pub fn read_log(data: &[u8], path: &Path, magic: [u8; 8]) -> Result<(LogRecords, LogTail)> {
    if data.len() < LOG_HEADER_LEN || data[..LOG_HEADER_LEN].iter().all(|&b| b == 0) {
        return Ok((Vec::new(), LogTail::Torn { offset: 0, reason: "no complete header".into() }));
    }
    if data[..LOG_HEADER_LEN] != header(magic) {
        let why = if data[..8] != magic {
            format!(
                "bad magic {:?}, expected {:?}",
                String::from_utf8_lossy(&data[..8]),
                String::from_utf8_lossy(&magic)
            )
        } else {
            "unsupported version or damaged header".to_string()
        };
        return Err(Error::corruption(path, 0, why));
    }
    let mut records = Vec::new();
    let mut pos = LOG_HEADER_LEN;
    let torn = |pos: usize, reason: &str| LogTail::Torn { offset: pos as u64, reason: reason.to_string() };
    while pos < data.len() {
        let Some(head) = data.get(pos..pos + 8) else {
            return Ok((records, torn(pos, "truncated record header")));
        };
        let len_bytes: [u8; 4] = [head[0], head[1], head[2], head[3]];
        let len = u32::from_le_bytes(len_bytes) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if len > MAX_LOG_RECORD {
            return Ok((records, torn(pos, "record length out of range")));
        }
        let Some(payload) = data.get(pos + 8..pos + 8 + len) else {
            return Ok((records, torn(pos, "truncated record")));
        };
        if record_crc(&len_bytes, payload) != crc {
            return Ok((records, torn(pos, "checksum mismatch")));
        }
        records.push((pos as u64, payload.to_vec()));
        pos += 8 + len;
    }
    Ok((records, LogTail::Clean))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::Storage;
    use crate::storage_mem::MemStorage;
    use proptest::prelude::*;

    const MAGIC: [u8; 8] = *b"TESTLOG!";

    fn write(records: &[Vec<u8>]) -> Vec<u8> {
        let s = MemStorage::new();
        let p = Path::new("/l");
        let mut w = LogWriter::create(s.create(p).unwrap(), p.into(), MAGIC).unwrap();
        for r in records {
            w.add_record(r).unwrap();
        }
        w.sync().unwrap();
        s.read_all(p).unwrap()
    }

    #[test]
    fn round_trip_and_truncation() {
        let recs = vec![vec![], b"hello".to_vec(), vec![7u8; 1 << 20], b"x".to_vec()];
        let data = write(&recs);
        let (got, tail) = read_log(&data, Path::new("/l"), MAGIC).unwrap();
        assert_eq!(tail, LogTail::Clean);
        assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), recs);
        let mut boundaries = vec![LOG_HEADER_LEN];
        for r in &recs {
            boundaries.push(boundaries.last().unwrap() + 8 + r.len());
        }
        for cut in (0..data.len()).step_by(997).chain(boundaries.iter().copied()) {
            let (got, tail) = read_log(&data[..cut], Path::new("/l"), MAGIC).unwrap();
            let n = boundaries.iter().filter(|&&b| b <= cut).count().saturating_sub(1);
            assert_eq!(got.len(), n, "cut {cut}");
            assert_eq!(tail == LogTail::Clean, boundaries.contains(&cut), "cut {cut}");
        }
    }

    #[test]
    fn wrong_magic_is_corruption() {
        let data = write(&[b"a".to_vec()]);
        let err = read_log(&data, Path::new("/l"), *b"OTHERLOG").unwrap_err();
        assert!(err.is_corruption());
    }

    proptest! {
        #[test]
        fn any_flipped_byte_yields_a_prefix(recs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..8), at: prop::sample::Index, bit in 0u8..8) {
            let data = write(&recs);
            let mut bad = data.clone();
            let i = LOG_HEADER_LEN + at.index(data.len() - LOG_HEADER_LEN);
            bad[i] ^= 1 << bit;
            let (got, tail) = read_log(&bad, Path::new("/l"), MAGIC).unwrap();
            prop_assert!(got.len() < recs.len());
            prop_assert!(tail != LogTail::Clean);
            for (j, (_, p)) in got.iter().enumerate() {
                prop_assert_eq!(p, &recs[j]);
            }
        }

        #[test]
        fn never_panics(data: Vec<u8>) {
            let mut with_header = header(MAGIC).to_vec();
            with_header.extend_from_slice(&data);
            let _ = read_log(&with_header, Path::new("/l"), MAGIC);
            let _ = read_log(&data, Path::new("/l"), MAGIC);
        }
    }
}
