//! The table cache: an LRU-like map (quick_cache, one unit of weight per table) from file
//! number to open [`TableReader`], bounding the number of open SSTable files to
//! `max_open_files`. Concurrent misses on one file open it once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use quick_cache::sync::Cache;

use crate::cache::BlockCache;
use crate::error::IoContext;
use crate::table::reader::TableReader;
use crate::{Result, Storage};

/// Open tables by file number.
pub struct TableCache {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    block_cache: Arc<BlockCache>,
    tables: Cache<u64, Arc<TableReader>>,
}

impl std::fmt::Debug for TableCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCache")
            .field("dir", &self.dir)
            .field("open_tables", &self.tables.len())
            .finish_non_exhaustive()
    }
}

impl TableCache {
    /// The path of SSTable `file_no` in `dir`: `{file_no:06}.sst`.
    pub fn table_path(dir: &Path, file_no: u64) -> PathBuf {
        dir.join(format!("{file_no:06}.sst"))
    }

    /// A cache keeping up to `capacity` (at least 1) tables of `dir` open; their data blocks go
    /// through `block_cache`.
    pub fn new(storage: Arc<dyn Storage>, dir: PathBuf, capacity: usize, block_cache: Arc<BlockCache>) -> Self {
        let capacity = capacity.max(1);
        TableCache { storage, dir, block_cache, tables: Cache::new(capacity) }
    }

    /// The open table `file_no`, opening it (footer, index and filter reads) on a miss.
    pub fn get(&self, file_no: u64) -> Result<Arc<TableReader>> {
        self.tables.get_or_insert_with(&file_no, || {
            let path = Self::table_path(&self.dir, file_no);
            let file = self.storage.open_read(&path).at(&path)?;
            let table = TableReader::open(file, path, file_no, &self.block_cache)?;
            Ok(Arc::new(table))
        })
    }

    /// Closes table `file_no` (once no iterator holds it), e.g. after its file was deleted.
    pub fn evict(&self, file_no: u64) {
        self.tables.remove(&file_no);
    }

    /// Closes table `file_no`, whose file is being deleted, and drops its cached data blocks
    /// (those of an open table at once, whoever still reads it, and those written for it but
    /// not yet taken by an open).
    pub fn forget(&self, file_no: u64) {
        if let Some(t) = self.tables.peek(&file_no) {
            t.forget_cached_blocks();
        }
        self.block_cache.forget_pending(file_no);
        self.evict(file_no);
    }

    /// Tables currently open through the cache.
    pub fn len(&self) -> usize {
        self.tables.len()
    }

    /// Whether no table is open.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }
}

/// In-memory files and tables for the sstable unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::collections::HashMap;
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use parking_lot::Mutex;

    use crate::cache::BlockCache;
    use crate::table::builder::{TableBuilder, TableInfo};
    use crate::table::reader::TableReader;
    use crate::{FileLock, RandomAccessFile, Storage, TableOptions, WritableFile};

    /// A file whose bytes live in a shared vector.
    pub(crate) struct VecFile(pub Arc<Mutex<Vec<u8>>>);

    impl WritableFile for VecFile {
        fn append(&mut self, data: &[u8]) -> io::Result<()> {
            self.0.lock().extend_from_slice(data);
            Ok(())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn len(&self) -> u64 {
            self.0.lock().len() as u64
        }
    }

    /// Immutable file contents.
    pub(crate) struct Contents(pub Vec<u8>);

    impl RandomAccessFile for Contents {
        fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
            let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
            let end = start.checked_add(len).ok_or(io::ErrorKind::UnexpectedEof)?;
            Ok(self.0.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?.to_vec())
        }
        fn len(&self) -> u64 {
            self.0.len() as u64
        }
    }

    /// Builds a table from sorted entries and returns its bytes.
    pub(crate) fn build(entries: &[(Vec<u8>, Vec<u8>)], opts: TableOptions) -> (Vec<u8>, TableInfo) {
        build_with(entries, opts, |b, _, k, v| b.add(k, v).unwrap())
    }

    /// [`build`], with `add(builder, i, key, value)` adding the `i`th entry.
    pub(crate) fn build_with(
        entries: &[(Vec<u8>, Vec<u8>)],
        opts: TableOptions,
        mut add: impl FnMut(&mut TableBuilder, usize, &[u8], &[u8]),
    ) -> (Vec<u8>, TableInfo) {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let mut b = TableBuilder::new(Box::new(VecFile(buf.clone())), "t.sst".into(), opts);
        for (i, (k, v)) in entries.iter().enumerate() {
            add(&mut b, i, k, v);
        }
        let info = b.finish().unwrap();
        let data = std::mem::take(&mut *buf.lock());
        (data, info)
    }

    /// Opens table bytes as table 1.
    pub(crate) fn open(data: Vec<u8>, cache: &Arc<BlockCache>) -> crate::Result<Arc<TableReader>> {
        TableReader::open(Arc::new(Contents(data)), "t.sst".into(), 1, cache).map(Arc::new)
    }

    /// A storage that only supports creating and reading files, counting opens.
    #[derive(Default)]
    pub(crate) struct FilesOnly {
        pub files: Mutex<HashMap<PathBuf, Arc<Mutex<Vec<u8>>>>>,
        pub opens: Mutex<usize>,
    }

    fn unsupported<T>() -> io::Result<T> {
        Err(io::Error::new(io::ErrorKind::Unsupported, "test storage"))
    }

    impl Storage for FilesOnly {
        fn create_dir_all(&self, _: &Path) -> io::Result<()> {
            Ok(())
        }
        fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
            let buf = Arc::new(Mutex::new(Vec::new()));
            self.files.lock().insert(path.to_path_buf(), buf.clone());
            Ok(Box::new(VecFile(buf)))
        }
        fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
            *self.opens.lock() += 1;
            let files = self.files.lock();
            let f = files.get(path).ok_or(io::ErrorKind::NotFound)?;
            Ok(Arc::new(Contents(f.lock().clone())))
        }
        fn rename(&self, _: &Path, _: &Path) -> io::Result<()> {
            unsupported()
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            self.files.lock().remove(path).map(drop).ok_or_else(|| io::ErrorKind::NotFound.into())
        }
        fn list_dir(&self, _: &Path) -> io::Result<Vec<String>> {
            unsupported()
        }
        fn exists(&self, path: &Path) -> bool {
            self.files.lock().contains_key(path)
        }
        fn sync_dir(&self, _: &Path) -> io::Result<()> {
            Ok(())
        }
        fn lock(&self, _: &Path) -> io::Result<Box<dyn FileLock>> {
            unsupported()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::FilesOnly;
    use super::*;
    use crate::key::{internal_key, lookup_key};
    use crate::table::builder::TableBuilder;
    use crate::{Compression, TableOptions};

    #[test]
    fn opens_on_miss_reuses_and_evicts() {
        let storage = Arc::new(FilesOnly::default());
        let dir = PathBuf::from("/db");
        assert_eq!(TableCache::table_path(&dir, 7), PathBuf::from("/db/000007.sst"));
        let opts = TableOptions {
            block_size: 256,
            restart_interval: 4,
            bloom_bits_per_key: 10,
            compression: Compression::Lz4,
        };
        for file_no in 1..=3u64 {
            let path = TableCache::table_path(&dir, file_no);
            let mut b = TableBuilder::new(storage.create(&path).unwrap(), path, opts);
            b.add(&internal_key(format!("k{file_no}").as_bytes(), file_no, 1), b"v").unwrap();
            b.finish().unwrap();
        }
        let tc = TableCache::new(storage.clone(), dir, 2, Arc::new(BlockCache::new(1 << 20)));
        let t1 = tc.get(1).unwrap();
        assert_eq!(t1.table_id(), 1);
        assert!(Arc::ptr_eq(&t1, &tc.get(1).unwrap()));
        assert_eq!(*storage.opens.lock(), 1);
        let found = t1.get(b"k1", &lookup_key(b"k1", 9)).unwrap().unwrap();
        assert_eq!(&found.1[..], b"v");
        tc.evict(1);
        tc.get(1).unwrap();
        assert_eq!(*storage.opens.lock(), 2);
        // Capacity 2: opening three tables closes one.
        tc.get(2).unwrap();
        tc.get(3).unwrap();
        assert!(tc.len() <= 2);
        let err = tc.get(99).unwrap_err();
        assert!(matches!(err, crate::Error::Io { .. }), "{err}");
    }
}
