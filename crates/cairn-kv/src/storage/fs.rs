//! [`FsStorage`]: the [`Storage`] trait over the real file system (`std::fs`, Unix).
//!
//! Writable files buffer appends in the process (64 KiB); `flush` hands the buffer to the
//! operating system and `sync` also calls `fdatasync`. Dropping a writable file does not flush
//! it: writers are finished explicitly (see `CONVENTIONS.md`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::storage::{DeferredSync, FileLock, RandomAccessFile, Storage, WritableFile};

/// Real files through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsStorage;

impl FsStorage {
    /// The real file system.
    pub fn new() -> Self {
        FsStorage
    }
}

/// Size of the in-process append buffer.
const BUF: usize = 64 << 10;

struct FsWritable {
    /// Shared with deferred syncs (see [`WritableFile::sync_later`]).
    file: Arc<File>,
    buf: Vec<u8>,
    /// Bytes appended, buffered ones included.
    len: u64,
}

impl WritableFile for FsWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.buf.len() + data.len() > BUF {
            self.flush()?;
        }
        if data.len() >= BUF {
            // Larger than the buffer: copying it there would only cost time.
            (&*self.file).write_all(data)?;
        } else {
            self.buf.extend_from_slice(data);
        }
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            (&*self.file).write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }

    fn sync_later(&mut self) -> io::Result<DeferredSync> {
        self.flush()?;
        Ok(crate::storage::sync_data_later(&self.file))
    }

    fn write_back(&mut self) -> io::Result<()> {
        self.flush()?;
        match crate::storage::mmap::start_write_back(&self.file, 0, 0) {
            // A file system without it loses nothing: the final sync writes everything.
            Err(e)
                if !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL | libc::ESPIPE)) =>
            {
                Err(e)
            }
            _ => Ok(()),
        }
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct FsRandom {
    file: File,
    /// Length when opened.
    len: u64,
}

fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file")
}

impl RandomAccessFile for FsRandom {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        self.read_at_into(offset, len, &mut v)?;
        Ok(v)
    }

    fn read_at_into(&self, offset: u64, len: usize, buf: &mut Vec<u8>) -> io::Result<()> {
        // Never allocate past the end of the file (a damaged length must not exhaust memory).
        // A file still being appended to (a pack) may have grown since it was opened, so a
        // read past the length seen at open asks the file system again.
        let end = offset.checked_add(len as u64).ok_or_else(eof)?;
        if end > self.len && end > self.file.metadata()?.len() {
            return Err(eof());
        }
        buf.clear();
        buf.resize(len, 0);
        self.file.read_exact_at(buf, offset)
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn will_need(&self, offset: u64, len: u64) {
        crate::storage::mmap::advise_will_need(&self.file, offset, len);
    }
}

/// Holds the locked file; closing it releases the lock.
struct FsLock {
    _file: File,
}

impl FileLock for FsLock {}

impl Storage for FsStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
        Ok(Box::new(FsWritable { file: Arc::new(file), buf: Vec::with_capacity(BUF), len: 0 }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(FsWritable { file: Arc::new(file), buf: Vec::with_capacity(BUF), len: 0 }))
    }

    /// A memory-mapped log ([`crate::storage::mmap::MappedLog`]): no system call per append.
    /// Falls back to a buffered file where the file system cannot `fallocate` or map it (the
    /// file the attempt created, empty, is then truncated and used).
    fn create_log(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        match crate::storage::mmap::MappedLog::create(path) {
            Ok(log) => Ok(Box::new(log)),
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::ENODEV | libc::EINVAL)) =>
            {
                self.create(path)
            }
            Err(e) => Err(e),
        }
    }

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(Arc::new(FsRandom { file, len }))
    }

    fn read_all(&self, path: &Path) -> io::Result<Vec<u8>> {
        fs::read(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for e in fs::read_dir(path)? {
            names.push(e?.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let file = OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(FsLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => {
                Err(io::Error::new(io::ErrorKind::WouldBlock, format!("{} is already locked", path.display())))
            }
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_buffered_until_flush() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let p = d.path().join("f");
        let mut f = s.create(&p).unwrap();
        f.append(b"hello").unwrap();
        assert_eq!(f.len(), 5);
        assert_eq!(fs::read(&p).unwrap(), b"", "still in the process buffer");
        f.flush().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"hello");
        f.append(b" world").unwrap();
        f.sync().unwrap();
        assert_eq!(s.read_all(&p).unwrap(), b"hello world");
        assert!(!f.is_empty());
    }

    #[test]
    fn write_back_hands_buffered_bytes_over_and_appends_go_on() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let p = d.path().join("f");
        let mut f = s.create(&p).unwrap();
        f.append(b"hello").unwrap();
        f.write_back().unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"hello", "in the operating system after write_back");
        f.append(b" world").unwrap();
        f.write_back().unwrap();
        f.sync().unwrap();
        assert_eq!(s.read_all(&p).unwrap(), b"hello world");
    }

    #[test]
    fn large_appends_go_straight_through_in_order() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let p = d.path().join("f");
        let mut f = s.create(&p).unwrap();
        let big = vec![b'x'; BUF + 10];
        f.append(b"head").unwrap();
        f.append(&big).unwrap();
        // The big append pushed out what was buffered before it, then itself.
        assert_eq!(fs::metadata(&p).unwrap().len(), 4 + big.len() as u64);
        f.append(b"tail").unwrap();
        // Filling the buffer exactly keeps it buffered; one more byte flushes it.
        f.append(&vec![b'y'; BUF - 4]).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().len(), 4 + big.len() as u64);
        f.append(b"z").unwrap();
        f.sync().unwrap();
        let mut want = b"head".to_vec();
        want.extend_from_slice(&big);
        want.extend_from_slice(b"tail");
        want.extend_from_slice(&vec![b'y'; BUF - 4]);
        want.push(b'z');
        assert_eq!(f.len(), want.len() as u64);
        assert_eq!(s.read_all(&p).unwrap(), want);
    }

    #[test]
    fn positional_reads_and_short_reads() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let p = d.path().join("f");
        let mut f = s.create(&p).unwrap();
        f.append(b"0123456789").unwrap();
        f.sync().unwrap();
        let r = s.open_read(&p).unwrap();
        assert_eq!(r.len(), 10);
        assert_eq!(r.read_at(3, 4).unwrap(), b"3456");
        assert_eq!(r.read_at(10, 0).unwrap(), b"");
        assert_eq!(r.read_at(9, 2).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(r.read_at(u64::MAX, 1).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(r.read_at(0, usize::MAX).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        // A file that grew after it was opened can be read to its new end.
        f.append(b"ab").unwrap();
        f.flush().unwrap();
        assert_eq!(r.read_at(10, 2).unwrap(), b"ab");
        assert_eq!(s.open_read(&d.path().join("missing")).err().unwrap().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn directory_operations() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let sub = d.path().join("a/b");
        s.create_dir_all(&sub).unwrap();
        assert!(s.exists(&sub));
        let p = sub.join("f");
        s.create(&p).unwrap().sync().unwrap();
        s.rename(&p, &sub.join("g")).unwrap();
        assert!(!s.exists(&p));
        assert_eq!(s.list_dir(&sub).unwrap(), vec!["g".to_string()]);
        s.sync_dir(&sub).unwrap();
        s.remove_file(&sub.join("g")).unwrap();
        assert!(s.list_dir(&sub).unwrap().is_empty());
        assert_eq!(s.remove_file(&sub.join("g")).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(s.list_dir(&d.path().join("missing")).unwrap_err().kind(), io::ErrorKind::NotFound);
        // `create` truncates.
        let mut f = s.create(&p).unwrap();
        f.append(b"long content").unwrap();
        f.sync().unwrap();
        s.create(&p).unwrap();
        assert_eq!(s.read_all(&p).unwrap(), b"");
    }

    #[test]
    fn lock_is_exclusive_until_dropped() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let lock = d.path().join("LOCK");
        let l = s.lock(&lock).unwrap();
        assert_eq!(s.lock(&lock).err().unwrap().kind(), io::ErrorKind::WouldBlock);
        drop(l);
        let _l = s.lock(&lock).unwrap();
        assert_eq!(FsStorage.lock(&lock).err().unwrap().kind(), io::ErrorKind::WouldBlock);
    }
}
