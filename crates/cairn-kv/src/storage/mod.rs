//! The storage abstraction: every byte the engine reads or writes goes through [`Storage`].
//!
//! Implementations: [`crate::FsStorage`] (real files) and [`crate::MemStorage`] (in memory, with
//! power-cut simulation and fault injection for crash tests).

pub mod fs;
pub mod mem;
pub mod mmap;
pub mod prefetch;

pub use fs::FsStorage;
pub use mem::MemStorage;

use std::io;
use std::path::Path;
use std::sync::Arc;

/// A file system as the engine sees it. Paths are absolute or relative to the process.
pub trait Storage: Send + Sync + 'static {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Creates (or truncates) a file for appending. The engine uses it only for files it
    /// replaces by name (`CURRENT.tmp`); numbered files are made with
    /// [`Storage::create_new`].
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>>;
    /// Creates a new file for appending, failing with [`io::ErrorKind::AlreadyExists`] if
    /// `path` exists: an existing file is never replaced. The engine makes every numbered file
    /// (tables, write-ahead logs, MANIFESTs) this way, so a file it did not expect at a number
    /// it hands out is an error, never overwritten. The default checks [`Storage::exists`] and
    /// then calls [`Storage::create`], which is not atomic; [`crate::FsStorage`] and
    /// [`crate::MemStorage`] create atomically.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        if self.exists(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} already exists", path.display())));
        }
        self.create(path)
    }
    /// Creates a new write-ahead log file, failing with [`io::ErrorKind::AlreadyExists`] if
    /// `path` exists, like [`Storage::create_new`]. Its appends must reach the operating system
    /// by the time `flush` returns, like [`Storage::create`]'s; the file may be longer than what
    /// was appended, the rest zeros (the log reader stops there). Defaults to
    /// [`Storage::create_new`].
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        self.create_new(path)
    }
    /// Opens a file for positional reads.
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>>;
    /// Reads a whole file.
    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        let f = self.open_read(path)?;
        let len = usize::try_from(f.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        f.read_at(0, len)
    }
    /// Atomically renames `from` to `to`, replacing `to`. Durable after [`Storage::sync_dir`].
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Removes a file. Durable after [`Storage::sync_dir`].
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Names (not paths) of the entries in a directory.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Makes creations, renames and removals of entries in the directory durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes an exclusive advisory lock on `path` (creating it), held until the guard drops.
    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>>;
}

/// A file being written sequentially.
pub trait WritableFile: Send {
    /// Appends bytes (may be buffered in the process).
    fn append(&mut self, data: &[u8]) -> io::Result<()>;
    /// Hands buffered bytes to the operating system (survives a process crash, not a power cut).
    fn flush(&mut self) -> io::Result<()>;
    /// Flushes and makes the file's content durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// Syncs, then gives back space reserved past the appended bytes (see
    /// [`Storage::create_log`]), so that the file's length is [`WritableFile::len`]; nothing can be
    /// appended after. The default just syncs (plain files reserve nothing).
    fn finish(&mut self) -> io::Result<()> {
        self.sync()
    }
    /// Syncs; nothing can be appended after. Unlike [`WritableFile::finish`] the file may keep
    /// space reserved past the appended bytes (zeros, which the log reader takes as the end),
    /// which saves trimming it (a metadata update and a second sync) when it is about to be
    /// deleted anyway. The default just syncs.
    fn seal(&mut self) -> io::Result<()> {
        self.sync()
    }
    /// Whether nothing was appended yet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hands buffered bytes to the operating system and starts writing every byte appended so
    /// far to the device without waiting for it (`sync_file_range(SYNC_FILE_RANGE_WRITE)` on
    /// Linux): the bytes then reach the device as they are written rather than in one burst at
    /// the final sync. Not a sync: nothing is durable until [`WritableFile::sync`]. The
    /// default only hands buffered bytes over.
    fn write_back(&mut self) -> io::Result<()> {
        self.flush()
    }
    /// Hands buffered bytes to the operating system and returns a sync of them to run later,
    /// on any thread, while more bytes are appended: once it returns `Ok`, every byte appended
    /// before this call is durable (later ones may be too). The write path syncs a group's
    /// log record this way after letting the next group write its own, so that the two
    /// syncs can overlap. The default syncs now and returns a sync with nothing left to do.
    fn sync_later(&mut self) -> io::Result<DeferredSync> {
        self.sync()?;
        Ok(Box::new(|| Ok(())))
    }
    /// Whether the file starts writing its filled parts to the device as it goes (`on`), so
    /// that the next sync waits for little more than the last part, or leaves them to the
    /// operating system (off). A log whose records nobody waits to see durable, deleted once
    /// its memtable is flushed, then never costs the device its bytes. Files that write back
    /// nothing ahead of a sync (the default) ignore it.
    fn set_write_back(&mut self, on: bool) {
        let _ = on;
    }
}

/// A sync returned by [`WritableFile::sync_later`].
pub type DeferredSync = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// A deferred `fdatasync` of `file` (for files whose appends are already in the operating
/// system).
pub(crate) fn sync_data_later(file: &Arc<std::fs::File>) -> DeferredSync {
    let file = Arc::clone(file);
    Box::new(move || file.sync_data())
}

/// A file read at arbitrary offsets, shared between threads.
pub trait RandomAccessFile: Send + Sync {
    /// Reads exactly `len` bytes at `offset`; a short file is an `UnexpectedEof` error.
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Reads exactly `len` bytes at `offset` into `buf`, replacing its contents; files that
    /// can reuse `buf`'s allocation do.
    fn read_at_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        *buf = self.read_at(offset, len)?;
        Ok(())
    }
    /// Length of the file in bytes.
    fn len(&self) -> u64;
    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A hint that `len` bytes at `offset` will be read soon: files on a device start reading
    /// them into the OS page cache and return without waiting, so that several reads a seek
    /// needs go to the device at once, not one after another. Does nothing by default.
    fn will_need(&self, offset: u64, len: u64) {
        let _ = (offset, len);
    }
}

/// Guard of a lock taken with [`Storage::lock`]; dropping it releases the lock.
pub trait FileLock: Send + Sync {}
