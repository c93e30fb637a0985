//! [`FsStorage`]: the [`Storage`] trait over the real file system.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::storage::{FileLock, RandomAccessFile, Storage, WritableFile};

/// Real files through `std::fs`.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsStorage;

impl FsStorage {
    /// The real file system.
    pub fn new() -> Self {
        FsStorage
    }
}

const BUF: usize = 64 << 10;

struct FsWritable {
    file: File,
    buf: Vec<u8>,
    len: u64,
}

impl WritableFile for FsWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.buf.len() + data.len() > BUF {
            self.flush()?;
        }
        if data.len() >= BUF {
            self.file.write_all(data)?;
        } else {
            self.buf.extend_from_slice(data);
        }
        self.len += data.len() as u64;
        Ok(())
    }
    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.flush()?;
        self.file.sync_data()
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct FsRandom {
    file: File,
    len: u64,
}

impl RandomAccessFile for FsRandom {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        // Never allocate past the end of the file (a damaged length must not exhaust memory).
        // A file still being appended to (a pack) may have grown since it was opened, so a
        // read past the length seen at open asks the file system again.
        let eof = || io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file");
        let end = offset.checked_add(len as u64).ok_or_else(eof)?;
        if end > self.len && end > self.file.metadata()?.len() {
            return Err(eof());
        }
        let mut v = vec![0u8; len];
        self.file.read_exact_at(&mut v, offset)?;
        Ok(v)
    }
    fn len(&self) -> u64 {
        self.len
    }
}

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
        Ok(Box::new(FsWritable { file, buf: Vec::with_capacity(BUF), len: 0 }))
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
            Err(fs::TryLockError::WouldBlock) => Err(io::Error::new(io::ErrorKind::WouldBlock, "already locked")),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_rename_lock() {
        let d = tempfile::tempdir().unwrap();
        let s = FsStorage::new();
        let p = d.path().join("f");
        let mut f = s.create(&p).unwrap();
        f.append(b"hello ").unwrap();
        f.append(&vec![b'x'; BUF + 10]).unwrap();
        f.sync().unwrap();
        assert_eq!(f.len(), 6 + BUF as u64 + 10);
        let r = s.open_read(&p).unwrap();
        assert_eq!(r.read_at(0, 6).unwrap(), b"hello ");
        assert!(r.read_at(r.len() - 1, 2).is_err());
        s.rename(&p, &d.path().join("g")).unwrap();
        assert_eq!(s.list_dir(d.path()).unwrap(), vec!["g".to_string()]);
        s.sync_dir(d.path()).unwrap();
        let l = s.lock(&d.path().join("LOCK")).unwrap();
        assert_eq!(s.lock(&d.path().join("LOCK")).err().unwrap().kind(), io::ErrorKind::WouldBlock);
        drop(l);
        s.lock(&d.path().join("LOCK")).unwrap();
    }
}
