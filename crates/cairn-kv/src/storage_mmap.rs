//! A write-ahead log file written through a shared memory map ([`MappedLog`]).
//!
//! An append copies the record into the file's pages in the page cache: it is in the operating
//! system as soon as the copy ends (a process crash loses nothing appended, as after a `write`),
//! without a system call per write. The file grows in 4 MiB segments, each reserved on disk
//! with `fallocate` before it is mapped, so that a full disk is an error from `append` and never
//! a fault on a store into the map; only the segment being written is mapped. `sync` is
//! `fdatasync`, which writes back the mapped pages too.
//! The file keeps the zeroed rest of its last segment, at least a record header's worth (8
//! bytes, growing early if needed); the log reader takes such zeros after the last record as
//! the end of the log.
//!
//! A filled segment is unmapped and its write-back started at once (`sync_file_range`), so a
//! sync waits for little more than the last segment.
//!
//! Besides the arena skiplist, this is cairn-kv's only `unsafe` code: `mmap`, `madvise`,
//! `munmap`, `fallocate`, `sync_file_range` and copies into the mapped segments.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

use crate::storage::WritableFile;

/// Bytes per mapped segment.
const SEGMENT: usize = 4 << 20;

/// One mapped segment of `SEGMENT` bytes.
struct Segment(NonNull<u8>);

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the pointer is a live mapping of `SEGMENT` bytes made by `map`, unmapped once.
        unsafe { libc::munmap(self.0.as_ptr().cast(), SEGMENT) };
    }
}

/// A log file appended to through a shared mapping of the segment being written.
pub(crate) struct MappedLog {
    file: File,
    /// The mapped segment (its index and mapping). Filled segments are unmapped, so that their
    /// dirty pages are written back like a plain file's (no mapped pages to write-protect).
    current: Option<(usize, Segment)>,
    /// File bytes reserved on disk (whole segments).
    reserved: u64,
    /// Bytes appended.
    len: u64,
    /// Set by `finish`: the file was trimmed to `len`, and appends fail.
    finished: bool,
}

// SAFETY: the mapping is owned by this value alone (no pointer to it escapes), so moving the
// value to another thread moves sole access with it.
unsafe impl Send for MappedLog {}

impl MappedLog {
    /// Creates (or truncates) `path` and reserves its first segment. Fails on file systems
    /// without `fallocate` (the caller then falls back to a buffered file).
    pub fn create(path: &Path) -> io::Result<MappedLog> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
        let mut log = MappedLog { file, current: None, reserved: 0, len: 0, finished: false };
        log.reserve()?;
        Ok(log)
    }

    /// Reserves the next segment on disk (the file grows by `SEGMENT` zero bytes).
    fn reserve(&mut self) -> io::Result<()> {
        let off = libc::off_t::try_from(self.reserved).map_err(|_| io::Error::other("log too large"))?;
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off, SEGMENT as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.reserved += SEGMENT as u64;
        Ok(())
    }

    /// Maps reserved segment `index` in place of the current one.
    fn map(&mut self, index: usize) -> io::Result<()> {
        let filled = self.current.take().map(|(index, segment)| {
            // Unmapped before its write-back starts: write-back of mapped pages write-protects
            // them, one TLB shootdown across every core running the process per page.
            drop(segment);
            index
        });
        if let Some(filled) = filled {
            // The filled segment, unmapped, will not change again: start writing it back now,
            // so that the `fdatasync` at the next sync or memtable switch waits for the last
            // segment only, not for a whole memtable's log (tens of milliseconds with the
            // writer, and every writer queued behind it, stalled). Best effort: an error here
            // shows again at that sync.
            let off = (filled as u64 * SEGMENT as u64) as libc::off64_t;
            // SAFETY: a plain system call on an open descriptor; it only starts write-back.
            let _ = unsafe {
                libc::sync_file_range(self.file.as_raw_fd(), off, SEGMENT as libc::off64_t, libc::SYNC_FILE_RANGE_WRITE)
            };
        }
        let offset = index as u64 * SEGMENT as u64;
        debug_assert!(offset + SEGMENT as u64 <= self.reserved);
        let off = libc::off_t::try_from(offset).map_err(|_| io::Error::other("log too large"))?;
        // SAFETY: a plain system call on an open descriptor; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SEGMENT,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                off,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        // Fault the segment's pages in writable now, once, rather than one page fault (and
        // file-system block mapping) per 4 KiB of commits. Best effort: on kernels without it
        // the pages fault in as they are written.
        // SAFETY: advice on the mapping just made, which this value owns.
        let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), SEGMENT, libc::MADV_POPULATE_WRITE) };
        self.current = Some((index, Segment(ptr)));
        Ok(())
    }
}

impl WritableFile for MappedLog {
    fn append(&mut self, mut data: &[u8]) -> io::Result<()> {
        if self.finished {
            return Err(io::Error::other("append to a finished log"));
        }
        while !data.is_empty() {
            let index = (self.len / SEGMENT as u64) as usize;
            let at = (self.len % SEGMENT as u64) as usize;
            if self.current.as_ref().is_none_or(|(i, _)| *i != index) {
                if self.len + 1 > self.reserved {
                    self.reserve()?;
                }
                self.map(index)?;
            }
            let Some((_, seg)) = &self.current else { return Err(io::Error::other("log segment not mapped")) };
            let n = data.len().min(SEGMENT - at);
            // SAFETY: `at + n <= SEGMENT`, inside a live mapping of reserved blocks of the file
            // that only this value writes; `data` is ordinary memory, not the mapping.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), seg.0.as_ptr().add(at), n) };
            self.len += n as u64;
            data = &data[n..];
        }
        // The log reader needs a full record header of zeros to tell reserved space from a
        // truncated record.
        if self.reserved - self.len < crate::log::LOG_RECORD_HEADER_LEN as u64 {
            self.reserve()?;
        }
        Ok(())
    }

    /// Nothing to do: appended bytes are already in the page cache.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn finish(&mut self) -> io::Result<()> {
        // Unmapped first, the pages are written back without write-protecting mapped ones.
        self.current = None;
        self.finished = true;
        self.file.sync_data()?;
        self.file.set_len(self.len)?;
        self.file.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{LogTail, LogWriter, read_log};

    const MAGIC: [u8; 8] = *b"TESTLOG!";

    /// Records across several segments read back whole, ending clean in the reserved zeros,
    /// without a sync (as after a process crash: the bytes are in the page cache).
    #[test]
    fn records_across_segments_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("000001.log");
        let mut w = LogWriter::create(Box::new(MappedLog::create(&path).unwrap()), path.clone(), MAGIC).unwrap();
        let recs: Vec<Vec<u8>> = (0..40u32).map(|i| vec![i as u8; 1 + (i as usize * 331_133) % 700_000]).collect();
        for r in &recs {
            w.add_record(r).unwrap();
            w.flush().unwrap();
        }
        let written = w.len();
        assert!(written > 3 * SEGMENT as u64);
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len() % SEGMENT, 0);
        assert!(data.len() as u64 >= written + 8);
        let (got, tail) = read_log(&data, &path, MAGIC).unwrap();
        assert_eq!(tail, LogTail::Clean);
        assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), recs);
        w.finish().unwrap();
        assert!(w.add_record(b"late").is_err());
        drop(w);
        let data = std::fs::read(&path).unwrap();
        assert_eq!(data.len() as u64, written);
        let (got, tail) = read_log(&data, &path, MAGIC).unwrap();
        assert_eq!((got.len(), tail), (recs.len(), LogTail::Clean));
    }
}
