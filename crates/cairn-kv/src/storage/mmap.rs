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
//! The writer does not make the slow calls of moving from one segment to the next: two helper
//! threads of the log's do (each can take milliseconds, and far longer with a compaction
//! keeping the disk busy: `docs/design/2026-12-07-engine-measurements.md`). One
//! reserves and maps the next segment (`fallocate`, `mmap`, and faulting its pages in) while
//! the writer fills the current one. The other unmaps each filled segment and, while the log
//! is told to write back ([`WritableFile::set_write_back`]: synced writes go into it), starts
//! its write-back (`sync_file_range`), so that a sync waits for little more than the last
//! segment. A log no synced write goes into leaves its pages to the operating system, which
//! writes none of them if the log is deleted first (its memtable flushed within the kernel's
//! 30 s writeback delay): without fsync, a write costs the device no log bytes. Without the
//! threads (if they cannot be started) the writer does both itself.
//!
//! Besides the arena skiplist, this is cairn-kv's only `unsafe` code: `mmap`, `madvise`,
//! `munmap`, `fallocate`, `sync_file_range` (also for plain files' [`start_write_back`]),
//! `posix_fadvise` (plain files' [`advise_will_need`]) and copies into the mapped segments.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, mpsc};

use crate::storage::{DeferredSync, WritableFile};

/// Bytes per mapped segment.
const SEGMENT: usize = 4 << 20;
/// Zeros the file keeps after the last byte appended: the log reader takes a record header's
/// worth of zeros at a record boundary as the end of the log (`docs/format/log.md`), so
/// this is `crate::wal::log::LOG_RECORD_HEADER_LEN`, restated here to keep storage below the
/// log (a test checks the two agree).
pub(crate) const MIN_ZEROS_AFTER: u64 = 8;

/// One mapped segment of `SEGMENT` bytes.
struct Segment(NonNull<u8>);

// SAFETY: the mapping is owned by this value alone (no pointer to it escapes), so moving the
// value to another thread (to map or unmap it there) moves sole access with it.
unsafe impl Send for Segment {}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: the pointer is a live mapping of `SEGMENT` bytes made by `map_segment`,
        // unmapped once.
        unsafe { libc::munmap(self.0.as_ptr().cast(), SEGMENT) };
    }
}

/// A log file appended to through a shared mapping of the segment being written.
pub(crate) struct MappedLog {
    /// Shared with deferred syncs (see [`WritableFile::sync_later`]).
    file: Arc<File>,
    /// The mapped segment (its index and mapping). Filled segments are unmapped, so that their
    /// dirty pages are written back like a plain file's (no mapped pages to write-protect).
    current: Option<(usize, Segment)>,
    /// File bytes known reserved on disk (whole segments).
    reserved: u64,
    /// Bytes appended.
    len: u64,
    /// Set by `finish` (the file was trimmed to `len`) and `seal`: appends fail.
    finished: bool,
    /// The next segment, asked of the preparing thread or ready.
    ahead: Ahead,
    /// The helper threads, started with the first segment; `None` if they could not be.
    helpers: Option<Helpers>,
    /// Whether to start them (tests turn them off to check the writer alone).
    want_helpers: bool,
    /// Whether filled segments are written back as they are retired (see the module doc).
    write_back: bool,
}

/// The segment after the current one.
enum Ahead {
    None,
    /// Asked of the preparing thread, which answers on `Helpers::prepared`.
    Asked(usize),
    /// Reserved and mapped.
    Ready(usize, Segment),
}

struct Helpers {
    /// Segments to reserve (when `true`) and map, by index.
    prepare: mpsc::Sender<(usize, bool)>,
    preparing: std::thread::JoinHandle<()>,
    prepared: mpsc::Receiver<io::Result<Segment>>,
    /// Filled segments to unmap (and write back, when `true`), with their indexes.
    retire: mpsc::Sender<(usize, Segment, bool)>,
}

impl Helpers {
    fn start(file: &File) -> io::Result<Helpers> {
        let (prep_file, wb_file) = (file.try_clone()?, file.try_clone()?);
        let (prepare, prepare_rx) = mpsc::channel::<(usize, bool)>();
        let (prepared_tx, prepared) = mpsc::channel();
        let preparing = std::thread::Builder::new().name("cairn-wal-map".into()).spawn(move || {
            for (index, reserve) in prepare_rx {
                if prepared_tx.send(prepare_segment(&prep_file, index, reserve, true)).is_err() {
                    return;
                }
            }
        })?;
        let (retire, retire_rx) = mpsc::channel::<(usize, Segment, bool)>();
        std::thread::Builder::new().name("cairn-wal-wb".into()).spawn(move || {
            for (index, segment, write_back) in retire_rx {
                retire_segment(&wb_file, index, segment, write_back);
            }
        })?;
        Ok(Helpers { prepare, preparing, prepared, retire })
    }

    /// Stops the threads, waiting for the preparing one: once this returns no reservation is
    /// under way that could grow the file again after it is trimmed.
    fn stop(self) {
        let Helpers { prepare, preparing, prepared, retire } = self;
        drop((prepare, retire));
        let _ = preparing.join();
        drop(prepared);
    }
}

/// Maps segment `index` of `file`, first reserving it on disk with `reserve`, and faulting
/// its pages in with `populate`.
fn prepare_segment(file: &File, index: usize, reserve: bool, populate: bool) -> io::Result<Segment> {
    let offset = index as u64 * SEGMENT as u64;
    let off = libc::off_t::try_from(offset).map_err(|_| io::Error::other("log too large"))?;
    // SAFETY: a plain system call on an open descriptor.
    if reserve && unsafe { libc::fallocate(file.as_raw_fd(), 0, off, SEGMENT as libc::off_t) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a plain system call on an open descriptor; the result is checked before use.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            SEGMENT,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            off,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let ptr = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
    if populate {
        // Fault the segment's pages in writable now, once, rather than one page fault (and
        // file-system block mapping) per 4 KiB of commits. Best effort: on kernels without it
        // the pages fault in as they are written.
        // SAFETY: advice on the mapping just made, which nothing else uses yet.
        let _ = unsafe { libc::madvise(ptr.as_ptr().cast(), SEGMENT, libc::MADV_POPULATE_WRITE) };
    }
    Ok(Segment(ptr))
}

/// Unmaps filled segment `index` and, with `write_back`, starts its write-back. Unmapped
/// first: write-back of mapped pages write-protects them, one TLB shootdown across every core
/// running the process per page. Best effort: a write-back error shows again at the next sync.
fn retire_segment(file: &File, index: usize, segment: Segment, write_back: bool) {
    drop(segment);
    if write_back {
        let _ = start_write_back(file, index as u64 * SEGMENT as u64, SEGMENT as u64);
    }
}

/// Starts write-back of `len` bytes of `file` from `offset` (`len` 0: through the end) without
/// waiting for it (`sync_file_range(SYNC_FILE_RANGE_WRITE)`); pages already under write-back
/// are skipped.
pub(crate) fn start_write_back(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let too_large = |_| io::Error::other("write-back range too large");
    let (off, len) =
        (libc::off64_t::try_from(offset).map_err(too_large)?, libc::off64_t::try_from(len).map_err(too_large)?);
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    if unsafe { libc::sync_file_range(file.as_raw_fd(), off, len, libc::SYNC_FILE_RANGE_WRITE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the kernel to start reading `len` bytes of `file` at `offset` into the page cache
/// (`POSIX_FADV_WILLNEED`), without waiting for them. Only a hint: errors are ignored.
pub(crate) fn advise_will_need(file: &File, offset: u64, len: u64) {
    let (Ok(off), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else { return };
    // SAFETY: a plain system call on an open descriptor; no memory is passed.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), off, len, libc::POSIX_FADV_WILLNEED) };
}

impl MappedLog {
    /// Creates `path`, which must not exist ([`std::io::ErrorKind::AlreadyExists`] otherwise),
    /// and reserves its first segment. Fails on file systems without `fallocate` (the caller
    /// then falls back to a buffered file, in the file this call created).
    pub fn create(path: &Path) -> io::Result<MappedLog> {
        Self::create_with(path, true)
    }

    fn create_with(path: &Path, want_helpers: bool) -> io::Result<MappedLog> {
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
        let mut log = MappedLog {
            file: Arc::new(file),
            current: None,
            reserved: 0,
            len: 0,
            finished: false,
            ahead: Ahead::None,
            helpers: None,
            want_helpers,
            write_back: false,
        };
        log.reserve_through(1)?;
        Ok(log)
    }

    /// Makes sure the file's first `segments` segments are reserved on disk, waiting for the
    /// preparing thread if it is reserving the last of them.
    fn reserve_through(&mut self, segments: usize) -> io::Result<()> {
        let want = segments as u64 * SEGMENT as u64;
        if self.reserved >= want {
            return Ok(());
        }
        if matches!(self.ahead, Ahead::Asked(i) if i + 1 == segments) {
            self.wait_ahead()?;
            if self.reserved >= want {
                return Ok(());
            }
        }
        let off = libc::off_t::try_from(self.reserved).map_err(|_| io::Error::other("log too large"))?;
        let len = libc::off_t::try_from(want - self.reserved).map_err(|_| io::Error::other("log too large"))?;
        // SAFETY: a plain system call on an open descriptor.
        if unsafe { libc::fallocate(self.file.as_raw_fd(), 0, off, len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        self.reserved = want;
        Ok(())
    }

    /// Waits for the segment asked of the preparing thread; it is then `Ready` (and reserved).
    fn wait_ahead(&mut self) -> io::Result<()> {
        let Ahead::Asked(index) = self.ahead else { return Ok(()) };
        self.ahead = Ahead::None;
        let Some(h) = &self.helpers else { return Ok(()) };
        let segment = h.prepared.recv().map_err(|_| io::Error::other("log segment thread stopped"))??;
        self.reserved = self.reserved.max((index as u64 + 1) * SEGMENT as u64);
        self.ahead = Ahead::Ready(index, segment);
        Ok(())
    }

    /// Maps segment `index` (reserved) in place of the current one, and asks for the next.
    fn map(&mut self, index: usize) -> io::Result<()> {
        if let Some((filled, segment)) = self.current.take() {
            // The filled segment will not change again: unmap it and (while synced writes go
            // into the log) start writing it back now, so that the `fdatasync` at the next
            // sync or memtable switch waits for the last segment only, not for a whole
            // memtable's log.
            let wb = self.write_back;
            match &self.helpers {
                Some(h) => {
                    if let Err(mpsc::SendError((filled, segment, wb))) = h.retire.send((filled, segment, wb)) {
                        retire_segment(&self.file, filled, segment, wb);
                    }
                }
                None => retire_segment(&self.file, filled, segment, wb),
            }
        }
        if self.helpers.is_none() && self.want_helpers {
            self.helpers = Helpers::start(&self.file).ok();
        }
        if matches!(self.ahead, Ahead::Asked(i) if i == index) {
            self.wait_ahead()?;
        }
        let segment = match std::mem::replace(&mut self.ahead, Ahead::None) {
            Ahead::Ready(i, segment) if i == index => segment,
            _ => {
                debug_assert!((index as u64 + 1) * SEGMENT as u64 <= self.reserved);
                // The first segment, mapped as the header is written, is not faulted in
                // ahead: a new log's header is synced at once, which would write the whole
                // segment's zeroed pages to disk.
                prepare_segment(&self.file, index, false, index > 0)?
            }
        };
        self.current = Some((index, segment));
        Ok(())
    }

    /// Gives the reserved space past the records (from the next 4 KiB boundary) back to the
    /// file system. Its pages were faulted in as zeros, writable, so they are dirty: a sync
    /// would write up to two segments of zeros (the rest of the current one and the one
    /// prepared ahead), tens of milliseconds seen at memtable switches. The hole still reads
    /// as zeros, which end the log. Best effort: without hole punching the sync writes them.
    fn drop_reserved_pages(&self) {
        // The file's size, not `reserved`: the preparing thread may have reserved a segment
        // the writer never took.
        let Ok(size) = self.file.metadata().map(|m| m.len()) else { return };
        let from = self.len.next_multiple_of(4096);
        if from >= size {
            return;
        }
        let (Ok(off), Ok(len)) = (libc::off_t::try_from(from), libc::off_t::try_from(size - from)) else {
            return;
        };
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a plain system call on an open descriptor; the range holds no record.
        let _ = unsafe { libc::fallocate(self.file.as_raw_fd(), mode, off, len) };
    }

    /// Asks the preparing thread for the segment after the current one, once the current one
    /// is half full (and not before: a log that is made ahead of its use, with its header
    /// only, should not hold a second segment of dirty zero pages).
    fn ask_ahead(&mut self) {
        let Some((index, _)) = &self.current else { return };
        if !matches!(self.ahead, Ahead::None) || self.len % (SEGMENT as u64) < SEGMENT as u64 / 2 {
            return;
        }
        let next = index + 1;
        if let Some(h) = &self.helpers {
            let reserve = self.reserved < (next as u64 + 1) * SEGMENT as u64;
            if h.prepare.send((next, reserve)).is_ok() {
                self.ahead = Ahead::Asked(next);
            }
        }
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
                self.reserve_through(index + 1)?;
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
        self.ask_ahead();
        // The log reader needs a full record header of zeros to tell reserved space from a
        // truncated record.
        if self.reserved - self.len < MIN_ZEROS_AFTER {
            self.reserve_through((self.reserved / SEGMENT as u64) as usize + 1)?;
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

    fn sync_later(&mut self) -> io::Result<DeferredSync> {
        // `fdatasync` through any descriptor of the file writes back the pages dirtied
        // through the map, including those another thread dirties meanwhile.
        Ok(crate::storage::sync_data_later(&self.file))
    }

    fn set_write_back(&mut self, on: bool) {
        self.write_back = on;
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn finish(&mut self) -> io::Result<()> {
        self.seal()?;
        self.file.set_len(self.len)?;
        self.file.sync_all()
    }

    fn seal(&mut self) -> io::Result<()> {
        // Unmapped first, the pages are written back without write-protecting mapped ones.
        self.current = None;
        self.ahead = Ahead::None;
        if let Some(h) = self.helpers.take() {
            h.stop();
        }
        self.finished = true;
        self.drop_reserved_pages();
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::log::{LogTail, LogWriter, read_log};

    const MAGIC: [u8; 8] = *b"TESTLOG!";

    /// Records across several segments read back whole, ending clean in the reserved zeros,
    /// without a sync (as after a process crash: the bytes are in the page cache); with and
    /// without the helper threads.
    #[test]
    fn records_across_segments_read_back() {
        for helpers in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("000001.log");
            let log = MappedLog::create_with(&path, helpers).unwrap();
            let mut w = LogWriter::create(Box::new(log), path.clone(), MAGIC).unwrap();
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
            // Trimmed exactly, even if the next segment was being reserved ahead.
            let data = std::fs::read(&path).unwrap();
            assert_eq!(data.len() as u64, written);
            let (got, tail) = read_log(&data, &path, MAGIC).unwrap();
            assert_eq!((got.len(), tail), (recs.len(), LogTail::Clean));
        }
    }

    /// Whether the file system under `dir` punches holes in files.
    fn punches_holes(dir: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        let path = dir.join("probe");
        let f = File::create(&path).unwrap();
        f.set_len(0).unwrap();
        std::fs::write(&path, vec![1u8; 1 << 20]).unwrap();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a plain system call on an open descriptor.
        let ok = unsafe { libc::fallocate(f.as_raw_fd(), mode, 0, 1 << 20) } == 0;
        f.sync_all().unwrap();
        let punched = ok && std::fs::metadata(&path).unwrap().blocks() * 512 < 1 << 20;
        std::fs::remove_file(&path).unwrap();
        punched
    }

    /// Records ending at and around every segment boundary (within a record header of it)
    /// leave the zeros the reader needs; a sealed log keeps its reserved zeros and reads back
    /// whole; with and without the helper threads.
    #[test]
    fn records_ending_near_segment_boundaries_and_sealed_logs_read_back() {
        for helpers in [true, false] {
            for slack in 0..=9u64 {
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("000002.log");
                let log = MappedLog::create_with(&path, helpers).unwrap();
                let mut w = LogWriter::create(Box::new(log), path.clone(), MAGIC).unwrap();
                let mut recs = Vec::new();
                for seg in 1..=3u64 {
                    // One record that ends `slack` bytes before the end of segment `seg`.
                    let end = seg * SEGMENT as u64 - slack;
                    let payload = (end - w.len() - crate::wal::log::LOG_RECORD_HEADER_LEN as u64) as usize;
                    let r = vec![seg as u8; payload];
                    w.add_record(&r).unwrap();
                    assert_eq!(w.len(), end);
                    recs.push(r);
                    let data = std::fs::read(&path).unwrap();
                    assert!(data.len() as u64 >= end + 8, "slack {slack}: too few zeros after the last record");
                    let (got, tail) = read_log(&data, &path, MAGIC).unwrap();
                    assert_eq!((got.len(), tail), (recs.len(), LogTail::Clean), "slack {slack}");
                }
                let written = w.len();
                w.seal().unwrap();
                assert!(w.add_record(b"late").is_err());
                drop(w);
                // The reserved space past the records went back to the file system (where
                // it can punch holes), so the sync wrote no zeros for it.
                if punches_holes(dir.path()) {
                    use std::os::unix::fs::MetadataExt;
                    let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
                    assert!(allocated <= written.next_multiple_of(4096) + (64 << 10), "{allocated} bytes allocated");
                }
                let data = std::fs::read(&path).unwrap();
                assert_eq!(data.len() % SEGMENT, 0);
                let (got, tail) = read_log(&data, &path, MAGIC).unwrap();
                assert_eq!(tail, LogTail::Clean);
                assert_eq!(got.into_iter().map(|(_, p)| p).collect::<Vec<_>>(), recs);
            }
        }
    }
}
