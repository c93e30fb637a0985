//! Where sealed packs live when the local disk is not enough: a [`Backend`] holds whole pack
//! objects (named by pack number); the store keeps the pack being written, packs not uploaded
//! yet, and a byte-budgeted cache of recently used packs in its local directory, and the chunk
//! index in cairn-kv.
//!
//! Order of a commit with a backend: pack bytes are fsynced locally, the index rows are
//! written, and packs that are full (sealed) are uploaded. A crash before an upload leaves the
//! pack in the local directory, and the next open uploads it; a crash after an upload but before
//! the index names the pack (garbage collection's copies) leaves an object no row names, which
//! the next collection deletes. A local pack is dropped from the cache only once the backend
//! holds it.

use std::fmt::Debug;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::Storage;

use crate::pack;

/// A store of whole pack objects. Implementations retry transient failures themselves.
pub trait Backend: Send + Sync + Debug {
    /// Where the packs are, for messages (`/mnt/big/packs`, `s3://bucket/prefix`).
    fn location(&self) -> String;
    /// Stores pack `no` from the local file `path`, replacing any earlier (partial) object.
    /// When it returns, the object is durable in the backend.
    fn upload(&self, no: u64, path: &Path) -> io::Result<()>;
    /// Fetches pack `no` whole.
    fn download(&self, no: u64) -> io::Result<Vec<u8>>;
    /// Reads `len` bytes at `offset` of pack `no`.
    fn read_at(&self, no: u64, offset: u64, len: usize) -> io::Result<Vec<u8>>;
    /// Every stored pack, with its size in bytes.
    fn list(&self) -> io::Result<Vec<(u64, u64)>>;
    /// Deletes pack `no` (no error if it is absent).
    fn delete(&self, no: u64) -> io::Result<()>;
}

/// Packs in a directory of another file system (a second disk, a network mount), written
/// through a [`Storage`]: copied to a temporary name, synced, renamed, and the directory synced.
pub struct LocalBackend {
    storage: Arc<dyn Storage>,
    dir: PathBuf,
}

impl Debug for LocalBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBackend").field("dir", &self.dir).finish_non_exhaustive()
    }
}

impl LocalBackend {
    /// Packs in `dir` (created if missing).
    pub fn new(storage: Arc<dyn Storage>, dir: impl Into<PathBuf>) -> io::Result<LocalBackend> {
        let dir = dir.into();
        storage.create_dir_all(&dir)?;
        Ok(LocalBackend { storage, dir })
    }
}

impl Backend for LocalBackend {
    fn location(&self) -> String {
        self.dir.display().to_string()
    }

    fn upload(&self, no: u64, path: &Path) -> io::Result<()> {
        let data = self.storage.read_all(path)?;
        let tmp = self.dir.join(pack::pack_name(no, "upload"));
        pack::replace_file(self.storage.as_ref(), &tmp, &pack::pack_path(&self.dir, no), &data)?;
        self.storage.sync_dir(&self.dir)
    }

    fn download(&self, no: u64) -> io::Result<Vec<u8>> {
        self.storage.read_all(&pack::pack_path(&self.dir, no))
    }

    fn read_at(&self, no: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.open_read(&pack::pack_path(&self.dir, no))?.read_at(offset, len)
    }

    fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for name in self.storage.list_dir(&self.dir)? {
            if let Some(no) = pack::parse_pack_name(&name) {
                out.push((no, self.storage.open_read(&self.dir.join(&name))?.len()));
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn delete(&self, no: u64) -> io::Result<()> {
        match self.storage.remove_file(&pack::pack_path(&self.dir, no)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => self.storage.sync_dir(&self.dir),
        }
    }
}

/// How a store uses a backend.
#[derive(Clone, Debug)]
pub struct Remote {
    /// The backend holding sealed packs.
    pub backend: Arc<dyn Backend>,
    /// Bytes of uploaded packs kept in the local directory as a read cache (default
    /// [`Remote::DEFAULT_CACHE_BYTES`]). Packs not uploaded yet are kept whatever their size.
    pub cache_bytes: u64,
}

impl Remote {
    /// The default read cache: 1 GiB.
    pub const DEFAULT_CACHE_BYTES: u64 = 1 << 30;

    /// `backend` with the default read cache.
    pub fn new(backend: Arc<dyn Backend>) -> Remote {
        Remote { backend, cache_bytes: Remote::DEFAULT_CACHE_BYTES }
    }
}
