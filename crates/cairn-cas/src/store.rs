//! [`Store`]: put, get, release and inspect blobs; [`Batch`]: many changes committed with one
//! pack fsync and one engine write.
//!
//! Durability order of a commit: pack bytes are fsynced (and a new pack's directory entry),
//! then the index rows are written to the engine with a synced batch. The index therefore never
//! names bytes that are not durable; a crash before the index write leaves unreferenced bytes
//! in a pack, which garbage collection reclaims. A small batch skips the pack fsync: its pack
//! bytes are journaled in its engine write instead, and put back into the pack at open if a
//! power cut lost them (see [`Batch::commit`]), so it costs one sync.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::{Keyspace, KeyspaceBatch, RandomAccessFile, Storage};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::backend::Remote;
use crate::index::{self, BlobRow, ChunkRow, IDS_PER_PAGE, Meta, PackRow};
use crate::pack::{self, Group, PackWriter};
use crate::{Error, HashAlgo, Id, Result};

/// Settings of a store. The hash and chunk sizes are fixed when the store is created; later
/// opens use the stored ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreConfig {
    /// Hash of chunk and blob ids (default BLAKE3).
    pub hash: HashAlgo,
    /// Smallest chunk cut by content-defined chunking (default 4 KiB).
    pub min_chunk: u32,
    /// Average chunk size (default 16 KiB).
    pub avg_chunk: u32,
    /// Largest chunk (default 64 KiB).
    pub max_chunk: u32,
    /// Larger chunks for large content (default: content of 4 MiB or more is cut into chunks
    /// of 256 KiB to 4 MiB, 1 MiB on average, which compress better and cost fewer index rows;
    /// `None`: one chunking for all content).
    pub large_chunks: Option<LargeChunks>,
    /// A pack is closed once it reaches this many bytes (default 64 MiB).
    pub pack_target: u64,
    /// zstd level for groups (default 2: with 128 KiB groups, level 3 stores 2-5 % less and
    /// costs 6 % more ingest time on `node_modules`).
    pub zstd_level: i32,
    /// New chunks are stored in groups of up to this many raw bytes, compressed together
    /// (default 128 KiB; a chunk at least this long is stored alone). Small chunks compress
    /// much better together: 16 % less stored for a Linux source tree or `node_modules` than
    /// each chunk alone. Reading a chunk decompresses its group (recently decoded groups are
    /// cached). Only affects writing: any store reads any grouping.
    pub group_target: u32,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            hash: HashAlgo::Blake3,
            min_chunk: 4 << 10,
            avg_chunk: 16 << 10,
            max_chunk: 64 << 10,
            large_chunks: Some(LargeChunks { threshold: 4 << 20, min: 256 << 10, avg: 1 << 20, max: 4 << 20 }),
            pack_target: 64 << 20,
            zstd_level: 2,
            group_target: 128 << 10,
        }
    }
}

/// The chunking of content at least `threshold` bytes long (see [`StoreConfig::large_chunks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LargeChunks {
    /// Content of at least this many bytes uses these sizes.
    pub threshold: u64,
    /// Smallest chunk.
    pub min: u32,
    /// Average chunk.
    pub avg: u32,
    /// Largest chunk.
    pub max: u32,
}

fn check_chunk_sizes(mi: u32, av: u32, ma: u32) -> Result<()> {
    use fastcdc::v2020::{AVERAGE_MAX, AVERAGE_MIN, MAXIMUM_MAX, MAXIMUM_MIN, MINIMUM_MAX, MINIMUM_MIN};
    let (mi, av, ma) = (mi as usize, av as usize, ma as usize);
    let ok = (MINIMUM_MIN..=MINIMUM_MAX).contains(&mi)
        && (AVERAGE_MIN..=AVERAGE_MAX).contains(&av)
        && (MAXIMUM_MIN..=MAXIMUM_MAX.min(pack::MAX_CHUNK as usize)).contains(&ma)
        && mi <= av
        && av <= ma
        && [mi, av, ma].iter().all(|x| x % 2 == 0);
    if !ok {
        return Err(Error::InvalidArgument(format!(
            "chunk sizes {mi}/{av}/{ma} must be even, ordered, and within FastCDC's limits"
        )));
    }
    Ok(())
}

impl StoreConfig {
    fn check(&self) -> Result<()> {
        check_chunk_sizes(self.min_chunk, self.avg_chunk, self.max_chunk)?;
        if self.group_target > pack::MAX_CHUNK {
            return Err(Error::InvalidArgument(format!("group target {} is above 16 MiB", self.group_target)));
        }
        if let Some(l) = self.large_chunks {
            check_chunk_sizes(l.min, l.avg, l.max)?;
            if l.threshold < u64::from(l.max) {
                return Err(Error::InvalidArgument(format!(
                    "large-content threshold {} is below its largest chunk {}",
                    l.threshold, l.max
                )));
            }
        }
        Ok(())
    }
}

/// What a put did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutOutcome {
    /// The blob's id (hash of its whole content).
    pub id: Id,
    /// Logical size in bytes.
    pub size: u64,
    /// Chunks the blob is made of.
    pub chunks: u64,
    /// Chunks that were not stored before.
    pub new_chunks: u64,
    /// Raw bytes of the chunks this put stores for the first time (0 when everything was
    /// deduplicated). They are compressed and appended to a pack when the batch writes them;
    /// [`Batch::commit`] returns the bytes appended.
    pub new_bytes: u64,
    /// Whether the whole blob was already stored (only its reference count changed).
    pub existed: bool,
}

/// Content chunked and hashed outside the writer lock by [`Store::prepare`], ready for
/// [`Batch::put_prepared`]. Chunks the index already held when prepared carry no data.
#[derive(Clone, Debug)]
pub struct Prepared {
    id: Id,
    size: u64,
    existed: bool,
    chunks: Vec<(Id, Option<Vec<u8>>)>,
}

impl Prepared {
    /// The blob id.
    pub fn id(&self) -> Id {
        self.id
    }

    /// The content's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// A stored blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobInfo {
    /// Logical size in bytes.
    pub size: u64,
    /// References held on it.
    pub refs: u64,
    /// Number of chunks.
    pub chunks: u64,
}

/// Space used by a set of blobs, shared chunks counted once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// Distinct blobs.
    pub blobs: u64,
    /// Sum of their sizes.
    pub logical_bytes: u64,
    /// Distinct chunks.
    pub chunks: u64,
    /// Raw bytes of those chunks.
    pub chunk_bytes: u64,
    /// Bytes those chunks take in packs.
    pub stored_bytes: u64,
}

/// Totals of a store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Distinct blobs.
    pub blobs: u64,
    /// Sum of the sizes of distinct blobs.
    pub logical_bytes: u64,
    /// Distinct chunks.
    pub chunks: u64,
    /// Sum of the raw sizes of distinct chunks (after deduplication, before compression).
    pub chunk_bytes: u64,
    /// Pack bytes committed (after compression, including dead entries).
    pub stored_bytes: u64,
    /// Pack bytes still referenced.
    pub live_bytes: u64,
    /// Pack files.
    pub packs: u64,
}

pub(crate) struct WriterState {
    pub pack: Option<PackWriter>,
    /// Whether the open pack's directory entry is durable.
    pub pack_in_dir: bool,
    pub next_pack: u64,
    /// The `next_pack` value the index holds.
    pub persisted_next_pack: u64,
    /// Closed packs the backend does not hold yet (uploaded after the next commit).
    pub sealed: Vec<u64>,
    /// Journal rows (pack, offset) of the open pack's bytes that are committed but not synced.
    pub journal: Vec<(u64, u64)>,
    /// Bytes those rows hold.
    pub journal_bytes: u64,
}

/// What the store knows of its backend's packs and its local copies of them.
#[derive(Default)]
pub(crate) struct RemoteState {
    /// Packs the backend holds.
    pub uploaded: HashSet<u64>,
    /// Local copies of uploaded packs (the read cache): size and last use.
    pub cached: HashMap<u64, (u64, u64)>,
    clock: u64,
    /// `uploaded` is known (the backend was listed) and what a crash left local is uploaded.
    /// Until then no local copy counts as uploaded, so none is evicted.
    reconciled: bool,
}

impl RemoteState {
    /// Counts a local copy of `no` of `size` bytes in the cache, as just used.
    fn cache(&mut self, no: u64, size: u64) {
        self.clock += 1;
        self.cached.insert(no, (size, self.clock));
    }

    /// Marks the local copy of `no`, if cached, as just used.
    fn touch(&mut self, no: u64) {
        self.clock += 1;
        if let Some(c) = self.cached.get_mut(&no) {
            c.1 = self.clock;
        }
    }
}

pub(crate) struct Inner {
    /// The store's rows (the `cas` keyspace).
    pub rows: Keyspace,
    pub meta: Meta,
    pub pack_target: u64,
    pub zstd_level: i32,
    pub group_target: usize,
    pub writer: Mutex<WriterState>,
    /// Recently decoded group entries.
    groups: Mutex<GroupCache>,
    /// One lock per pack being downloaded, so that readers needing it wait for one download.
    fetching: Mutex<HashMap<u64, Arc<Mutex<()>>>>,
    /// The local pack directory and the backend, shared with the upload threads.
    local: Arc<Local>,
    /// Chunks and packs known damaged or missing (see [`crate::damage`]).
    pub suspects: Mutex<crate::damage::Suspects>,
}

impl std::ops::Deref for Inner {
    type Target = Local;
    fn deref(&self) -> &Local {
        &self.local
    }
}

/// What the store shares with its upload threads: the local pack directory, open pack files,
/// the backend and what is known of it, and the upload queue. (The threads never hold the
/// store itself, so dropping it never waits on one of them to let go.)
pub(crate) struct Local {
    pub storage: Arc<dyn Storage>,
    pub dir: PathBuf,
    readers: Mutex<HashMap<u64, Arc<dyn RandomAccessFile>>>,
    pub remote: Option<Remote>,
    pub remote_state: Mutex<RemoteState>,
    uploads: Uploads,
}

/// Upload threads work on this many packs at once; commits that seal more wait (so local
/// packs not uploaded yet stay bounded).
const UPLOADERS: usize = 2;
const MAX_QUEUED: usize = 4;

#[derive(Default)]
struct Uploads {
    state: Mutex<UploadState>,
    changed: Condvar,
}

#[derive(Default)]
struct UploadState {
    queue: VecDeque<u64>,
    /// Packs taken from the queue and not finished.
    active: HashSet<u64>,
    /// The first failure since [`Inner::wait_uploads`] last reported one. While it is set,
    /// queued packs are not attempted: they stay local, and reconciling uploads them.
    error: Option<Error>,
    /// The store is closed: the threads exit.
    closed: bool,
    /// Packs were queued since the store opened (it is not read-only).
    wrote: bool,
}

/// An upload thread: uploads queued packs until the store is closed.
fn upload_worker(local: Arc<Local>) {
    loop {
        let (no, skip) = {
            let mut st = local.uploads.state.lock();
            loop {
                if let Some(no) = st.queue.pop_front() {
                    st.active.insert(no);
                    break (no, st.error.is_some());
                }
                if st.closed {
                    return;
                }
                local.uploads.changed.wait(&mut st);
            }
        };
        let result = if skip { Ok(()) } else { local.upload(no).inspect(|()| local.evict_cached(None)) };
        if skip || result.is_err() {
            // The next upload, verify or gc lists the backend again and uploads what was left
            // local.
            local.remote_state.lock().reconciled = false;
        }
        let mut st = local.uploads.state.lock();
        st.active.remove(&no);
        if let Err(e) = result {
            st.error.get_or_insert(e);
        }
        local.uploads.changed.notify_all();
    }
}

impl Drop for Inner {
    /// With a backend, the open pack is sealed and every queued pack uploaded (best effort:
    /// whatever is not uploaded now is uploaded by the next open); then the upload threads end.
    fn drop(&mut self) {
        if self.remote.is_none() {
            // Best effort: what stays journaled is replayed by the next open.
            let mut w = self.writer.lock();
            if !w.journal.is_empty() && w.pack.as_mut().is_some_and(|p| p.sync().is_ok()) {
                let _ = self.retire_journal(&mut w);
            }
            return;
        }
        let _ = self.seal_open_pack();
        self.uploads.state.lock().closed = true;
        self.uploads.changed.notify_all();
    }
}

/// A content-addressed blob store: packs in a directory, index rows in the engine's `cas`
/// keyspace. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

impl Store {
    /// Opens (or creates) the store whose packs live in `dir` and whose index rows live in
    /// `rows` (the engine's [`cairn_kv::keyspace::CAS`] keyspace).
    pub fn open(
        rows: Keyspace,
        storage: Arc<dyn Storage>,
        dir: impl Into<PathBuf>,
        config: StoreConfig,
    ) -> Result<Store> {
        Store::open_with_remote(rows, storage, dir, config, None)
    }

    /// [`Store::open`] with sealed packs kept in a [`Backend`](crate::Backend): `dir` then holds
    /// the pack being written, packs not uploaded yet and a cache of recently used packs. Packs
    /// a crash left un-uploaded are uploaded now.
    pub fn open_with_remote(
        rows: Keyspace,
        storage: Arc<dyn Storage>,
        dir: impl Into<PathBuf>,
        config: StoreConfig,
        remote: Option<Remote>,
    ) -> Result<Store> {
        config.check()?;
        let dir = dir.into();
        storage.create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        replay_journal(storage.as_ref(), &dir, &rows)?;
        let persisted_next_pack = match rows.get(index::NEXT_PACK)? {
            Some(b) => u64::from_le_bytes(
                b.as_ref().try_into().map_err(|_| Error::corruption("<index>", 0, "malformed next_pack row"))?,
            ),
            None => 1,
        };
        let (suspects, next_pack) =
            crate::damage::survey(storage.as_ref(), &dir, &rows, persisted_next_pack, remote.is_none())?;
        let meta = match rows.get(index::META)? {
            Some(b) => Meta::decode(&b)?,
            None if !suspects.unaccounted_packs.is_empty() => {
                // An empty index beside packs: opening must not start numbering packs anew.
                let packs = suspects.unaccounted_packs.iter().map(|no| pack::pack_name(*no, "pack")).collect();
                return Err(Error::Unaccounted { dir, packs });
            }
            None => {
                let m = Meta {
                    hash: config.hash,
                    min_chunk: config.min_chunk,
                    avg_chunk: config.avg_chunk,
                    max_chunk: config.max_chunk,
                    large: config.large_chunks,
                };
                rows.put(index::META, m.encode())?;
                m
            }
        };
        let local = Arc::new(Local {
            storage,
            dir,
            readers: Mutex::new(HashMap::new()),
            remote,
            remote_state: Mutex::new(RemoteState::default()),
            uploads: Uploads::default(),
        });
        let inner = Inner {
            rows,
            meta,
            pack_target: config.pack_target.max(1 << 16),
            zstd_level: config.zstd_level,
            group_target: config.group_target as usize,
            groups: Mutex::new(GroupCache::default()),
            writer: Mutex::new(WriterState {
                pack: None,
                pack_in_dir: false,
                next_pack,
                persisted_next_pack,
                sealed: Vec::new(),
                journal: Vec::new(),
                journal_bytes: 0,
            }),
            fetching: Mutex::new(HashMap::new()),
            local,
            suspects: Mutex::new(suspects),
        };
        if inner.remote.is_some() {
            inner.remove_interrupted_downloads()?;
            let w = inner.writer.lock();
            let reconciled = inner.reconcile(&w);
            drop(w);
            match reconciled {
                // An unreachable backend does not stop the store from opening: everything local
                // stays readable, and the next upload, `verify` or `gc` reconciles first.
                Ok(()) | Err(Error::Backend { .. }) => {}
                Err(e) => return Err(e),
            }
            for _ in 0..UPLOADERS {
                let local = inner.local.clone();
                std::thread::Builder::new()
                    .name("cairn-upload".into())
                    .spawn(move || upload_worker(local))
                    .map_err(|e| Error::io(&inner.dir, e))?;
            }
        }
        Ok(Store { inner: Arc::new(inner) })
    }

    /// Closes the pack being written and, with a backend, uploads every sealed pack and waits
    /// for the uploads, returning the first failure since the last `seal` (the packs whose
    /// upload failed stay in the local directory and are uploaded later). Packs are also
    /// sealed when full (and uploaded in the background) and when the last handle to the store
    /// is dropped.
    pub fn seal(&self) -> Result<()> {
        self.inner.seal_open_pack()
    }

    /// The backend's location, if the store has one.
    pub fn remote_location(&self) -> Option<String> {
        self.inner.remote.as_ref().map(|r| r.backend.location())
    }

    /// The store's hash function.
    pub fn hash_algo(&self) -> HashAlgo {
        self.inner.meta.hash
    }

    /// The directory holding the packs.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Starts a batch; it holds the store's writer until committed or dropped.
    pub fn batch(&self) -> Batch<'_> {
        Batch {
            inner: &self.inner,
            w: self.inner.writer.lock(),
            chunks: HashMap::new(),
            blobs: HashMap::new(),
            packs: HashMap::new(),
            extra: KeyspaceBatch::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            written: 0,
            restored: HashSet::new(),
            capturing: false,
        }
    }

    /// Chunks and hashes `data` and looks its chunks up without taking the writer, so many
    /// threads can prepare at once; a [`Batch`] then stores (and compresses) the result.
    pub fn prepare(&self, data: &[u8]) -> Result<Prepared> {
        let m = self.inner.meta;
        let id = m.hash.hash(data);
        let existed = self.inner.blob_row(&id)?.is_some();
        // A stored blob is shared as it is unless something is known damaged: then its
        // suspect chunks are carried, to be stored again.
        if existed && !self.inner.any_suspect() {
            return Ok(Prepared { id, size: data.len() as u64, existed: true, chunks: Vec::new() });
        }
        // Hash the chunks of large content on every core.
        use rayon::prelude::*;
        let chunks = cut_points(&m, data)
            .into_par_iter()
            .map(|(off, len)| -> Result<(Id, Option<Vec<u8>>)> {
                let chunk = &data[off..off + len];
                let cid = m.hash.hash(chunk);
                let raw = match self.inner.chunk_row(&cid)? {
                    Some(row) if !self.inner.is_suspect_chunk(&cid, &row) => None,
                    _ => Some(chunk.to_vec()),
                };
                Ok((cid, raw))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Prepared { id, size: data.len() as u64, existed, chunks })
    }

    /// Stores `data` (one reference) and commits.
    pub fn put(&self, data: &[u8]) -> Result<PutOutcome> {
        let mut b = self.batch();
        let o = b.put(data)?;
        b.commit()?;
        Ok(o)
    }

    /// Stores everything `r` yields, chunk by chunk in bounded memory, and commits.
    pub fn put_reader(&self, r: impl Read) -> Result<PutOutcome> {
        let mut b = self.batch();
        let o = b.put_reader(r)?;
        b.commit()?;
        Ok(o)
    }

    /// Drops one reference; returns whether the blob existed. Chunks no blob needs any more
    /// become garbage for [`Store::gc`].
    pub fn release(&self, id: &Id) -> Result<bool> {
        let mut b = self.batch();
        let existed = b.release(id)?;
        b.commit()?;
        Ok(existed)
    }

    /// Size, references and chunk count of a blob.
    pub fn blob_info(&self, id: &Id) -> Result<Option<BlobInfo>> {
        Ok(self
            .inner
            .rows
            .get(index::key(index::BLOB_PREFIX, id))?
            .map(|b| BlobRow::decode(&b))
            .transpose()?
            .map(|r| BlobInfo { size: r.size, refs: r.refs, chunks: r.chunk_count }))
    }

    /// Whether a blob is stored.
    pub fn contains(&self, id: &Id) -> Result<bool> {
        Ok(self.inner.rows.get(index::key(index::BLOB_PREFIX, id))?.is_some())
    }

    /// Reads a whole blob into memory (see [`Store::reader`] for large blobs).
    pub fn get(&self, id: &Id) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.reader(id)?.read_to_end(&mut out).map_err(unwrap_io)?;
        Ok(out)
    }

    /// A reader streaming a blob chunk by chunk; every chunk is checked against its hash.
    pub fn reader(&self, id: &Id) -> Result<crate::BlobReader> {
        let row = self.inner.blob_row(id)?.ok_or(Error::NotFound(*id))?;
        let ids = self.inner.chunk_ids(id, &row)?;
        Ok(crate::BlobReader::new(self.clone(), ids, row.size))
    }

    /// Space used by `blobs` (each distinct blob and chunk counted once).
    pub fn usage<'a>(&self, blobs: impl IntoIterator<Item = &'a Id>) -> Result<Usage> {
        let mut u = Usage::default();
        let mut seen_blobs = std::collections::HashSet::new();
        let mut seen_chunks = std::collections::HashSet::new();
        for id in blobs {
            if !seen_blobs.insert(*id) {
                continue;
            }
            let row = self.inner.blob_row(id)?.ok_or(Error::NotFound(*id))?;
            u.blobs += 1;
            u.logical_bytes += row.size;
            for cid in self.inner.chunk_ids(id, &row)? {
                if seen_chunks.insert(cid) {
                    let c = self.inner.chunk_row(&cid)?.ok_or(Error::MissingChunk(cid))?;
                    u.chunks += 1;
                    u.chunk_bytes += c.raw_len as u64;
                    u.stored_bytes += c.share();
                }
            }
        }
        Ok(u)
    }

    /// Totals over the whole store.
    pub fn stats(&self) -> Result<StoreStats> {
        let db = &self.inner.rows;
        let mut s = StoreStats::default();
        for item in db.prefix(index::BLOB_PREFIX) {
            let (_, v) = item?;
            s.blobs += 1;
            s.logical_bytes += BlobRow::decode(&v)?.size;
        }
        for item in db.prefix(index::CHUNK_PREFIX) {
            let (_, v) = item?;
            s.chunks += 1;
            s.chunk_bytes += ChunkRow::decode(&v)?.raw_len as u64;
        }
        for item in db.prefix(index::PACK_PREFIX) {
            let (_, v) = item?;
            let p = PackRow::decode(&v)?;
            s.packs += 1;
            s.stored_bytes += p.total;
            s.live_bytes += p.live;
        }
        Ok(s)
    }
}

/// Content-defined cut points of `data` as (offset, length); content up to the minimum chunk
/// size is one chunk.
fn cut_points(m: &Meta, data: &[u8]) -> Vec<(usize, usize)> {
    let (min, avg, max) = m.chunk_sizes(data.len() as u64);
    if data.len() <= min {
        return vec![(0, data.len())];
    }
    fastcdc::v2020::FastCDC::new(data, min, avg, max).map(|c| (c.offset, c.length)).collect()
}

/// The error inside an `io::Error` made by [`crate::BlobReader`], if any.
pub(crate) fn unwrap_io(e: std::io::Error) -> Error {
    match e.downcast::<Error>() {
        Ok(inner) => inner,
        Err(e) => Error::io("<blob reader>", e),
    }
}

impl Local {
    pub fn forget_pack(&self, no: u64) {
        self.readers.lock().remove(&no);
    }

    /// Forgets pack `no` in the backend bookkeeping (deleted).
    pub(crate) fn forget_remote(&self, no: u64) {
        let mut rs = self.remote_state.lock();
        rs.uploaded.remove(&no);
        rs.cached.remove(&no);
    }

    /// A backend failure on pack `no` (`None`: on the backend as a whole, e.g. listing).
    pub(crate) fn remote_err(&self, no: Option<u64>, source: std::io::Error) -> Error {
        let at = self.remote.as_ref().map_or_else(String::new, |r| r.backend.location());
        let object = match no {
            Some(no) => format!("{}/{}", at.trim_end_matches('/'), pack::pack_name(no, "pack")),
            None => at,
        };
        Error::Backend { object, source }
    }

    /// Drops least recently used local copies of uploaded packs until they fit the cache
    /// budget (never `keep`, the pack just fetched).
    fn evict_cached(&self, keep: Option<u64>) {
        let Some(r) = &self.remote else { return };
        let mut rs = self.remote_state.lock();
        let mut total: u64 = rs.cached.values().map(|c| c.0).sum();
        while total > r.cache_bytes {
            let victim =
                rs.cached.iter().filter(|(n, _)| Some(**n) != keep).min_by_key(|(_, c)| c.1).map(|(n, c)| (*n, c.0));
            let Some((no, size)) = victim else { break };
            rs.cached.remove(&no);
            total -= size;
            self.forget_pack(no);
            // A copy that cannot be removed stays; it is still a valid copy.
            let _ = self.storage.remove_file(&pack::pack_path(&self.dir, no));
        }
    }

    /// Uploads sealed pack `no` and counts its local copy in the cache.
    fn upload(&self, no: u64) -> Result<()> {
        let Some(r) = &self.remote else { return Ok(()) };
        r.backend.upload(no, &pack::pack_path(&self.dir, no)).map_err(|e| self.remote_err(Some(no), e))?;
        self.remote_state.lock().uploaded.insert(no);
        self.cache_local_copy(no);
        Ok(())
    }

    /// Counts the local copy of uploaded pack `no` in the cache, as just used.
    fn cache_local_copy(&self, no: u64) {
        let size = self.storage.open_read(&pack::pack_path(&self.dir, no)).map(|f| f.len()).unwrap_or(0);
        self.remote_state.lock().cache(no, size);
    }
}

impl Inner {
    pub fn blob_row(&self, id: &Id) -> Result<Option<BlobRow>> {
        self.rows.get(index::key(index::BLOB_PREFIX, id))?.map(|b| BlobRow::decode(&b)).transpose()
    }

    pub fn chunk_row(&self, id: &Id) -> Result<Option<ChunkRow>> {
        self.rows.get(index::key(index::CHUNK_PREFIX, id))?.map(|b| ChunkRow::decode(&b)).transpose()
    }

    /// Every chunk id of a blob, in order (first page plus further pages).
    pub fn chunk_ids(&self, id: &Id, row: &BlobRow) -> Result<Vec<Id>> {
        let mut ids = row.first_page.clone();
        let mut page = 1u32;
        while (ids.len() as u64) < row.chunk_count {
            let b = self.rows.get(index::page_key(id, page))?.ok_or_else(|| {
                Error::corruption("<index>", 0, format!("blob {id} is missing chunk-list page {page}"))
            })?;
            ids.extend(index::decode_ids(&b).ok_or_else(|| Error::corruption("<index>", 0, "malformed page row"))?);
            page += 1;
        }
        if ids.len() as u64 != row.chunk_count {
            return Err(Error::corruption("<index>", 0, format!("blob {id} lists the wrong number of chunks")));
        }
        Ok(ids)
    }

    /// Hands out the number of a new pack file: the index records the next number (synced)
    /// before the file exists, so every pack file below it is this store's to account for, and
    /// one at or past it was never handed out (kept and reported, never reused or deleted; see
    /// [`crate::damage`]).
    pub(crate) fn hand_out_pack(&self, w: &mut WriterState) -> Result<u64> {
        let no = w.next_pack;
        let mut b = KeyspaceBatch::new();
        b.put(&self.rows, index::NEXT_PACK, (no + 1).to_le_bytes())?;
        self.rows.write(b)?;
        w.next_pack = no + 1;
        w.persisted_next_pack = no + 1;
        Ok(no)
    }

    pub fn pack_file(&self, no: u64) -> Result<Arc<dyn RandomAccessFile>> {
        if self.remote.is_some() {
            self.remote_state.lock().touch(no);
        }
        if let Some(f) = self.readers.lock().get(&no) {
            return Ok(f.clone());
        }
        let path = pack::pack_path(&self.dir, no);
        let f = match self.storage.open_read(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.remote.is_some() => {
                // One download per pack: readers that need it meanwhile wait, then find it.
                let lock = self.fetching.lock().entry(no).or_default().clone();
                let _fetching = lock.lock();
                let found = self.readers.lock().get(&no).cloned();
                let f = match found {
                    Some(f) => f,
                    None => match self.storage.open_read(&path) {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => self.fetch_pack(no),
                        r => r.map_err(|e| Error::io(&path, e)),
                    }?,
                };
                // The last one out removes the lock (clones are only taken under the map's
                // lock, so no one else holds or waits for it then).
                let mut fetching = self.fetching.lock();
                if Arc::strong_count(&lock) == 2 {
                    fetching.remove(&no);
                }
                f
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.rows.get(index::pack_key(no))?.is_some() => {
                // The index names it: the file was lost, which is damage, not an I/O hiccup.
                return Err(Error::corruption(
                    &path,
                    0,
                    "the pack file is missing (`cairn repair` stores its chunks again from a source)",
                ));
            }
            r => r.map_err(|e| Error::io(&path, e))?,
        };
        self.readers.lock().insert(no, f.clone());
        Ok(f)
    }

    /// Downloads uploaded pack `no` into the local cache and opens it.
    fn fetch_pack(&self, no: u64) -> Result<Arc<dyn RandomAccessFile>> {
        let Some(r) = &self.remote else { unreachable!("checked by the caller") };
        let data = r.backend.download(no).map_err(|e| self.remote_err(Some(no), e))?;
        let path = pack::pack_path(&self.dir, no);
        let tmp = self.dir.join(pack::pack_name(no, "download"));
        pack::replace_file(self.storage.as_ref(), &tmp, &path, &data).map_err(|e| Error::io(&tmp, e))?;
        // Opened before it is counted in the cache, where another reader's eviction may drop it.
        let f = self.storage.open_read(&path).map_err(|e| Error::io(&path, e))?;
        self.remote_state.lock().cache(no, data.len() as u64);
        self.evict_cached(Some(no));
        Ok(f)
    }

    /// Queues the sealed packs of `w` for upload (after a commit), waiting while the upload
    /// threads have [`MAX_QUEUED`] packs. Failures are reported by [`Inner::wait_uploads`].
    pub(crate) fn upload_sealed(&self, w: &mut WriterState) {
        if w.sealed.is_empty() {
            return;
        }
        let mut st = self.uploads.state.lock();
        st.wrote = true;
        for no in w.sealed.drain(..) {
            while st.queue.len() + st.active.len() >= MAX_QUEUED && st.error.is_none() {
                self.uploads.changed.wait(&mut st);
            }
            st.queue.push_back(no);
            self.uploads.changed.notify_all();
        }
    }

    /// Queues the sealed packs of `w` and waits for every upload; returns the first failure
    /// since the last wait.
    pub(crate) fn upload_all(&self, w: &mut WriterState) -> Result<()> {
        self.upload_sealed(w);
        self.wait_uploads()
    }

    /// Waits until every queued upload is done; returns the first failure since the last call.
    pub(crate) fn wait_uploads(&self) -> Result<()> {
        let mut st = self.uploads.state.lock();
        while !st.queue.is_empty() || !st.active.is_empty() {
            self.uploads.changed.wait(&mut st);
        }
        st.error.take().map_or(Ok(()), Err)
    }

    /// Closes the pack being written, if any: synced (with its directory entry), and with a
    /// backend queued for upload. It stops taking appends; the next write starts a new pack.
    pub(crate) fn close_pack(&self, w: &mut WriterState) -> Result<()> {
        let Some(mut p) = w.pack.take() else { return Ok(()) };
        p.sync()?;
        if !w.pack_in_dir {
            self.storage.sync_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        }
        self.retire_journal(w)?;
        if self.remote.is_some() {
            w.sealed.push(p.no);
        }
        Ok(())
    }

    /// Deletes the journal rows of the open pack, once its bytes are synced.
    fn retire_journal(&self, w: &mut WriterState) -> Result<()> {
        if w.journal.is_empty() {
            return Ok(());
        }
        let mut b = KeyspaceBatch::new();
        self.forget_journal(w, &mut b)?;
        self.rows.write(b)?;
        Ok(())
    }

    /// Adds the deletion of every journal row to `b` and forgets them: the pack is synced.
    fn forget_journal(&self, w: &mut WriterState, b: &mut KeyspaceBatch) -> Result<()> {
        for (no, offset) in w.journal.drain(..) {
            b.delete(&self.rows, index::journal_key(no, offset))?;
        }
        w.journal_bytes = 0;
        Ok(())
    }

    /// Seals the pack being written (its committed bytes are durable already), uploads every
    /// sealed pack and waits for the uploads; then, if the store wrote packs and the backend
    /// was unreachable earlier, reconciles (uploading what was left local). A store that only
    /// read needs no backend here.
    pub(crate) fn seal_open_pack(&self) -> Result<()> {
        let mut w = self.writer.lock();
        let closed = self.close_pack(&mut w);
        // Waited for even after a failure, so that no upload is running when this returns.
        let uploaded = self.upload_all(&mut w);
        closed.and(uploaded)?;
        if self.uploads.state.lock().wrote {
            self.ensure_reconciled(&w)?;
        }
        Ok(())
    }

    /// Lists the backend, uploads the sealed local packs the index names that it lacks (a crash
    /// came between their commit and upload), and counts the local copies of uploaded packs in
    /// the cache. `w` (the caller holds the writer) names the open pack, which is never uploaded,
    /// and the packs sealed in this session, which [`Inner::upload_sealed`] and the upload
    /// threads upload.
    fn reconcile(&self, w: &WriterState) -> Result<()> {
        let Some(r) = &self.remote else { return Ok(()) };
        let open = w.pack.as_ref().map(|p| p.no);
        let queued: HashSet<u64> = {
            let st = self.uploads.state.lock();
            st.queue.iter().chain(&st.active).copied().collect()
        };
        let skip = |no: &u64| Some(*no) == open || w.sealed.contains(no) || queued.contains(no);
        let listed = r.backend.list().map_err(|e| self.remote_err(None, e))?;
        let names = self.storage.list_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        self.remote_state.lock().uploaded = listed.into_iter().map(|(no, _)| no).collect();
        for no in names.iter().filter_map(|n| pack::parse_pack_name(n)).filter(|no| !skip(no)) {
            let uploaded = self.remote_state.lock().uploaded.contains(&no);
            if uploaded {
                self.cache_local_copy(no);
            } else if self.rows.get(index::pack_key(no))?.is_some() {
                self.upload(no)?;
            }
        }
        self.remote_state.lock().reconciled = true;
        self.evict_cached(None);
        Ok(())
    }

    /// Reconciles with the backend if that has not succeeded yet (the store was opened while
    /// the backend was unreachable).
    pub(crate) fn ensure_reconciled(&self, w: &WriterState) -> Result<()> {
        if self.remote.is_some() && !self.remote_state.lock().reconciled {
            self.reconcile(w)?;
        }
        Ok(())
    }

    /// Removes the temporary files of downloads a crash interrupted.
    fn remove_interrupted_downloads(&self) -> Result<()> {
        let names = self.storage.list_dir(&self.dir).map_err(|e| Error::io(&self.dir, e))?;
        for n in names.iter().filter(|n| n.ends_with(".download")) {
            let path = self.dir.join(n);
            self.storage.remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    }

    /// Reads, checks and decodes one chunk.
    pub fn read_chunk(&self, id: &Id) -> Result<Vec<u8>> {
        let row = self.chunk_row(id)?.ok_or(Error::MissingChunk(*id))?;
        if let Some((_, group_raw)) = row.group
            && group_raw > row.raw_len
        {
            // A group of several chunks: its neighbours are likely read next (a checkout
            // reads files in the order they were stored).
            let key = (row.pack, row.offset);
            let cached = self.groups.lock().get(key);
            let entry = match cached {
                Some(e) => e,
                None => {
                    let e = Arc::new(self.read_entry_in(self.pack_file(row.pack)?.as_ref(), &row, id)?);
                    if e.damage.is_none() {
                        self.groups.lock().insert(key, e.clone());
                    }
                    e
                }
            };
            return self.chunk_of(&entry, id, &row);
        }
        self.read_chunk_in(self.pack_file(row.pack)?.as_ref(), id, &row)
    }

    /// Reads, checks and decodes chunk `id` (at `row`) from `file`, a copy of its pack.
    pub fn read_chunk_in(&self, file: &dyn RandomAccessFile, id: &Id, row: &ChunkRow) -> Result<Vec<u8>> {
        self.chunk_of(&self.read_entry_in(file, row, id)?, id, row)
    }

    /// Reads and decodes the whole entry holding chunk `id` (at `row`) from `file`.
    pub fn read_entry_in(&self, file: &dyn RandomAccessFile, row: &ChunkRow, id: &Id) -> Result<pack::Entry> {
        let path = pack::pack_path(&self.dir, row.pack);
        if row.group.is_some() {
            return pack::read_group(file, &path, row.offset, row.entry_len);
        }
        let stored_len = row.entry_len.saturating_sub(pack::ENTRY_OVERHEAD as u32);
        let stored = pack::read_entry(file, &path, row.offset, id, stored_len)?;
        if stored.raw_len != row.raw_len {
            return Err(Error::corruption(&path, row.offset, "entry length differs from the index"));
        }
        Ok(pack::Entry { dir: vec![(*id, 0, row.raw_len)], raw: stored.decode(&path, row.offset)?, damage: None })
    }

    /// Chunk `id` (at `row`) out of its decoded entry, checked against its id.
    pub fn chunk_of(&self, entry: &pack::Entry, id: &Id, row: &ChunkRow) -> Result<Vec<u8>> {
        let path = || pack::pack_path(&self.dir, row.pack);
        let inner = row.group.map_or(0, |(inner, _)| inner);
        let raw = entry
            .chunk(id, inner, row.raw_len)
            .ok_or_else(|| Error::corruption(path(), row.offset, format!("entry does not hold chunk {id}")))?;
        if self.meta.hash.hash(raw) != *id {
            let why = match &entry.damage {
                Some(damage) => format!("{damage}: chunk {id} does not hash to its id"),
                None => format!("chunk {id} does not hash to its id"),
            };
            return Err(Error::corruption(path(), row.offset, why));
        }
        Ok(raw.to_vec())
    }
}

/// Decoded group entries kept for reads of their other chunks, by (pack, offset); the least
/// recently used goes first. Packs are never rewritten in place, so an entry never changes.
#[derive(Default)]
struct GroupCache {
    entries: VecDeque<((u64, u64), Arc<pack::Entry>)>,
}

/// Decoded groups kept (about 8 MiB with the default 128 KiB groups).
const GROUP_CACHE_ENTRIES: usize = 64;

impl GroupCache {
    fn get(&mut self, key: (u64, u64)) -> Option<Arc<pack::Entry>> {
        let at = self.entries.iter().position(|(k, _)| *k == key)?;
        let e = self.entries.remove(at)?;
        let found = e.1.clone();
        self.entries.push_front(e);
        Some(found)
    }

    fn insert(&mut self, key: (u64, u64), e: Arc<pack::Entry>) {
        if self.entries.iter().any(|(k, _)| *k == key) {
            return;
        }
        self.entries.push_front((key, e));
        self.entries.truncate(GROUP_CACHE_ENTRIES);
    }
}

type PendingBlob = (BlobRow, Option<Vec<Id>>);

/// A group of puts and releases committed together: one pack fsync, one engine write.
///
/// Holds the store's writer: other batches wait until this one is committed or dropped.
/// Dropping a batch without committing discards its changes (bytes it appended to a pack stay
/// as unreferenced garbage).
pub struct Batch<'a> {
    inner: &'a Inner,
    w: MutexGuard<'a, WriterState>,
    chunks: HashMap<Id, ChunkRow>,
    /// Pending blob rows (`None`: deleted), with the chunk ids beyond the first page of new blobs.
    blobs: HashMap<Id, Option<PendingBlob>>,
    packs: HashMap<u64, PackRow>,
    /// Rows of other layers committed with the store's.
    extra: KeyspaceBatch,
    /// New chunks not written yet, in the order they came (their rows say [`PENDING`]).
    pending: Vec<(Id, Vec<u8>)>,
    pending_bytes: usize,
    /// Bytes appended to packs.
    written: u64,
    /// Suspect chunks this batch stores again.
    restored: HashSet<Id>,
    /// The open pack keeps a copy of what this batch appends to it, for the journal.
    capturing: bool,
}

/// The blob store's own rows are written by the store alone.
fn check_foreign(ks: &Keyspace) -> Result<()> {
    if ks.id() == cairn_kv::keyspace::CAS {
        return Err(Error::InvalidArgument("the cas keyspace belongs to the blob store".into()));
    }
    Ok(())
}

/// The pack number in the row of a chunk a batch holds but has not written yet.
const PENDING: u64 = u64::MAX;

/// A batch writes its new chunks once they add up to this many raw bytes (and at commit), so
/// memory stays bounded however much a batch stores.
const PENDING_LIMIT: usize = 32 << 20;

/// The most a batch may append to a pack and still be made durable through the journal (small
/// documents and small batches of them): larger batches sync the pack. Journaled bytes are
/// written twice and fill the engine's memtable, and larger documents gained little from one
/// sync less (`docs/design/2026-12-07-one-sync-add.md`).
const JOURNAL_BATCH_MAX: usize = 32 << 10;

/// The most journaled bytes outstanding: the batch that would pass it syncs the pack instead
/// (and deletes the rows), so the journal's rows stay few and small.
const JOURNAL_MAX: u64 = 4 << 20;

/// How far past a pack's end a journal row may reach: the unsynced tail a power cut may have
/// lost (the journal's limit, and the bytes of batches that never committed between its rows).
const REPLAY_GAP: u64 = 1 << 30;

/// Puts back into their packs the bytes small batches journaled (see [`Batch::commit`]): a
/// power cut may have lost them, since the packs were not synced. Each pack with journal rows
/// is rewritten (to a temporary file, synced, renamed over it) with the journaled bytes at
/// their offsets, then the rows are deleted. A pack whose file is gone keeps its rows (the only
/// copy of those bytes) and is reported missing as any other.
fn replay_journal(storage: &dyn Storage, dir: &Path, rows: &Keyspace) -> Result<()> {
    let mut packs: BTreeMap<u64, Vec<(u64, Vec<u8>)>> = BTreeMap::new();
    for kv in rows.prefix(index::JOURNAL_PREFIX) {
        let (k, v) = kv?;
        let (no, offset) =
            index::parse_journal_key(&k).ok_or_else(|| Error::corruption("<index>", 0, "malformed journal key"))?;
        packs.entry(no).or_default().push((offset, v.to_vec()));
    }
    if packs.is_empty() {
        return Ok(());
    }
    let mut done = KeyspaceBatch::new();
    for (no, entries) in &packs {
        let path = pack::pack_path(dir, *no);
        let mut content = match storage.read_all(&path) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io(&path, e)),
        };
        for (offset, bytes) in entries {
            // A power cut loses at most the pack's unsynced tail; a row past that is damage.
            let end = offset.checked_add(bytes.len() as u64).filter(|end| *end <= content.len() as u64 + REPLAY_GAP);
            let Some(end) = end.map(|e| e as usize) else {
                return Err(Error::corruption(
                    &path,
                    *offset,
                    format!("a journal row of {} bytes lies past the end of the pack", bytes.len()),
                ));
            };
            let start = *offset as usize;
            if content.len() < end {
                content.resize(end, 0);
            }
            content[start..end].copy_from_slice(bytes);
        }
        let tmp = dir.join(pack::pack_name(*no, "replay"));
        pack::replace_file(storage, &tmp, &path, &content).map_err(|e| Error::io(&tmp, e))?;
        storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        for (offset, _) in entries {
            done.delete(rows, index::journal_key(*no, *offset))?;
        }
    }
    if !done.is_empty() {
        rows.write(done)?;
    }
    Ok(())
}

/// The chunk is stored already, so its data is never asked for.
fn unreachable_chunk() -> Vec<u8> {
    Vec::new()
}

impl Batch<'_> {
    fn chunk_row(&self, id: &Id) -> Result<Option<ChunkRow>> {
        match self.chunks.get(id) {
            Some(r) if r.refs == 0 => Ok(None),
            Some(r) => Ok(Some(*r)),
            None => self.inner.chunk_row(id),
        }
    }

    fn blob_row(&self, id: &Id) -> Result<Option<BlobRow>> {
        match self.blobs.get(id) {
            Some(Some((r, _))) => Ok(Some(r.clone())),
            Some(None) => Ok(None),
            None => self.inner.blob_row(id),
        }
    }

    fn pack_row(&mut self, no: u64) -> Result<&mut PackRow> {
        if !self.packs.contains_key(&no) {
            let row = match self.inner.rows.get(index::pack_key(no))? {
                Some(b) => PackRow::decode(&b)?,
                None => PackRow::default(),
            };
            self.packs.insert(no, row);
        }
        Ok(self.packs.entry(no).or_default())
    }

    /// The pack to append to, starting a new one when needed.
    fn writer(&mut self) -> Result<&mut PackWriter> {
        if self.w.pack.as_ref().is_some_and(|p| p.len() >= self.inner.pack_target) {
            self.inner.close_pack(&mut self.w)?;
        }
        if self.w.pack.is_none() {
            let no = self.inner.hand_out_pack(&mut self.w)?;
            self.w.pack_in_dir = false;
            self.w.pack = Some(PackWriter::create(&self.inner.storage, &self.inner.dir, no)?);
        }
        let capture = !self.capturing;
        self.capturing = true;
        let p = self.w.pack.as_mut().ok_or_else(|| Error::InvalidArgument("no pack".into()))?;
        if capture {
            p.begin_capture(JOURNAL_BATCH_MAX);
        }
        Ok(p)
    }

    /// Adds a reference to chunk `id`, storing its content (from `make`) if it is not stored
    /// yet. Returns the raw length of a chunk newly stored, `None` for one stored already.
    fn add_chunk_ref(&mut self, id: Id, make: impl FnOnce() -> Vec<u8>) -> Result<Option<u64>> {
        if let Some(mut row) = self.chunk_row(&id)? {
            if self.is_stored_suspect(&id, &row) {
                // Known damaged or missing: store this copy instead of sharing that one.
                let raw = make();
                if self.inner.meta.hash.hash(&raw) == id {
                    let n = raw.len() as u64;
                    self.restore_chunk(id, row, raw, 1)?;
                    return Ok(Some(n));
                }
            }
            row.refs += 1;
            self.chunks.insert(id, row);
            return Ok(None);
        }
        let raw = make();
        let raw_len = raw.len() as u32;
        self.chunks.insert(id, ChunkRow { pack: PENDING, offset: 0, entry_len: 0, raw_len, refs: 1, group: None });
        self.pending_bytes += raw.len();
        self.pending.push((id, raw));
        if self.pending_bytes >= PENDING_LIMIT {
            self.write_pending()?;
        }
        Ok(Some(raw_len as u64))
    }

    /// Writes the pending chunks still referenced, in groups compressed on every core.
    fn write_pending(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_bytes = 0;
        // A chunk released while pending, or queued twice (released, then stored again), is
        // written once or not at all.
        let mut seen = HashSet::new();
        let todo: Vec<(Id, Vec<u8>)> = pending
            .into_iter()
            .filter(|(id, _)| self.chunks.get(id).is_some_and(|r| r.pack == PENDING && r.refs > 0) && seen.insert(*id))
            .collect();
        let groups = encode_groups(&todo, self.inner.group_target, self.inner.zstd_level);
        for g in groups {
            let w = self.writer()?;
            let pack = w.no;
            let offset = w.append_group(&g)?;
            for (id, placed) in ChunkRow::in_group(&g, pack, offset) {
                if let Some(row) = self.chunks.get_mut(&id) {
                    *row = ChunkRow { refs: row.refs, ..placed };
                }
            }
            let entry_len = g.entry_len();
            let p = self.pack_row(pack)?;
            p.total += entry_len;
            p.live += entry_len;
            self.written += entry_len;
        }
        Ok(())
    }

    /// Whether chunk `id`, stored at `row` before this batch, is known damaged or missing.
    fn is_stored_suspect(&self, id: &Id, row: &ChunkRow) -> bool {
        row.pack != PENDING && self.inner.is_suspect_chunk(id, row)
    }

    /// Stores `raw` again for chunk `id` (now at `row`, suspect), with `more` references added:
    /// its old copy becomes dead bytes of its pack, the new one is written with the batch.
    fn restore_chunk(&mut self, id: Id, row: ChunkRow, raw: Vec<u8>, more: u64) -> Result<()> {
        if row.pack != PENDING {
            let share = row.share();
            let p = self.pack_row(row.pack)?;
            p.live = p.live.saturating_sub(share);
        }
        let raw_len = raw.len() as u32;
        let refs = row.refs + more;
        self.chunks.insert(id, ChunkRow { pack: PENDING, offset: 0, entry_len: 0, raw_len, refs, group: None });
        self.pending_bytes += raw.len();
        self.pending.push((id, raw));
        self.restored.insert(id);
        if self.pending_bytes >= PENDING_LIMIT {
            self.write_pending()?;
        }
        Ok(())
    }

    /// Stores again the suspect chunks prepared content carries (no reference taken): for a
    /// caller that already holds a reference on the blob. Returns how many.
    pub fn restore_prepared(&mut self, p: Prepared) -> Result<u64> {
        let mut n = 0;
        for (cid, raw) in p.chunks {
            if let (Some(raw), Some(row)) = (raw, self.chunk_row(&cid)?)
                && self.is_stored_suspect(&cid, &row)
            {
                self.restore_chunk(cid, row, raw, 0)?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// Stores again every suspect chunk of `data` (no reference taken); returns how many.
    pub fn restore_suspects(&mut self, data: &[u8]) -> Result<u64> {
        let m = self.inner.meta;
        let mut n = 0;
        for (off, len) in cut_points(&m, data) {
            let chunk = &data[off..off + len];
            let cid = m.hash.hash(chunk);
            if let Some(row) = self.chunk_row(&cid)?
                && self.is_stored_suspect(&cid, &row)
            {
                self.restore_chunk(cid, row, chunk.to_vec(), 0)?;
                n += 1;
            }
        }
        Ok(n)
    }

    fn drop_chunk_ref(&mut self, id: &Id) -> Result<()> {
        let mut row = self.chunk_row(id)?.ok_or(Error::MissingChunk(*id))?;
        row.refs -= 1;
        if row.refs == 0 && row.pack != PENDING {
            let share = row.share();
            let p = self.pack_row(row.pack)?;
            p.live = p.live.saturating_sub(share);
        }
        self.chunks.insert(*id, row);
        Ok(())
    }

    fn add_existing(&mut self, id: Id, mut row: BlobRow) -> PutOutcome {
        row.refs += 1;
        let o = PutOutcome { id, size: row.size, chunks: row.chunk_count, new_chunks: 0, new_bytes: 0, existed: true };
        let pages = match self.blobs.remove(&id) {
            Some(Some((_, pages))) => pages,
            _ => None,
        };
        self.blobs.insert(id, Some((row, pages)));
        o
    }

    fn add_new(&mut self, id: Id, size: u64, ids: Vec<Id>, new_chunks: u64, new_bytes: u64) -> PutOutcome {
        let chunks = ids.len() as u64;
        let first_page = ids[..ids.len().min(IDS_PER_PAGE)].to_vec();
        let rest = (ids.len() > IDS_PER_PAGE).then(|| ids[IDS_PER_PAGE..].to_vec());
        let row = BlobRow { refs: 1, size, chunk_count: chunks, first_page };
        self.blobs.insert(id, Some((row, rest)));
        PutOutcome { id, size, chunks, new_chunks, new_bytes, existed: false }
    }

    /// Stores `data` with one reference.
    pub fn put(&mut self, data: &[u8]) -> Result<PutOutcome> {
        let hash = self.inner.meta.hash;
        let id = hash.hash(data);
        if let Some(row) = self.blob_row(&id)? {
            if self.inner.any_suspect() {
                self.restore_suspects(data)?;
            }
            return Ok(self.add_existing(id, row));
        }
        let m = self.inner.meta;
        let mut ids = Vec::new();
        let (mut new_chunks, mut new_bytes) = (0, 0);
        for (off, len) in cut_points(&m, data) {
            let chunk = &data[off..off + len];
            let cid = hash.hash(chunk);
            if let Some(n) = self.add_chunk_ref(cid, || chunk.to_vec())? {
                new_chunks += 1;
                new_bytes += n;
            }
            ids.push(cid);
        }
        Ok(self.add_new(id, data.len() as u64, ids, new_chunks, new_bytes))
    }

    /// Stores prepared content with one reference. Fails with [`Error::Stale`] if a chunk the
    /// preparation skipped (because it was stored) has been deleted since; prepare again.
    pub fn put_prepared(&mut self, p: Prepared) -> Result<PutOutcome> {
        if let Some(row) = self.blob_row(&p.id)? {
            // Stored already: the chunks preparation carried are the suspect ones.
            let id = p.id;
            self.restore_prepared(p)?;
            return Ok(self.add_existing(id, row));
        }
        if p.existed {
            return Err(Error::Stale(p.id));
        }
        let mut taken = Vec::with_capacity(p.chunks.len());
        let (mut new_chunks, mut new_bytes) = (0, 0);
        for (cid, raw) in p.chunks {
            let res = match (self.chunk_row(&cid)?, raw) {
                (Some(_), _) => self.add_chunk_ref(cid, unreachable_chunk),
                (None, Some(raw)) => self.add_chunk_ref(cid, move || raw),
                (None, None) => Err(Error::Stale(p.id)),
            };
            match res {
                Ok(n) => {
                    if let Some(n) = n {
                        new_chunks += 1;
                        new_bytes += n;
                    }
                    taken.push(cid);
                }
                Err(e) => {
                    for c in &taken {
                        self.drop_chunk_ref(c)?;
                    }
                    return Err(e);
                }
            }
        }
        Ok(self.add_new(p.id, p.size, taken, new_chunks, new_bytes))
    }

    /// Adds a row of another layer (written through its keyspace handle `ks`) to the batch's
    /// engine write, committed atomically with the store's rows.
    pub fn kv_put(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        check_foreign(ks)?;
        self.extra.put(ks, key, value)?;
        Ok(())
    }

    /// Deletes a row of another layer (see [`Batch::kv_put`]) in the batch's engine write.
    pub fn kv_delete(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        check_foreign(ks)?;
        self.extra.delete(ks, key)?;
        Ok(())
    }

    /// Stores everything `r` yields, one chunk in memory at a time.
    pub fn put_reader(&mut self, r: impl Read) -> Result<PutOutcome> {
        self.put_reader_len(r, 0)
    }

    /// [`Batch::put_reader`] of content expected to be `len` bytes long (a file's size): it is
    /// cut as [`Batch::put`] would cut content of that length, so that storing the same file
    /// either way shares its chunks. Any length is accepted; `len` only picks the chunk sizes.
    pub fn put_reader_len(&mut self, r: impl Read, len: u64) -> Result<PutOutcome> {
        let m = self.inner.meta;
        let hash = m.hash;
        let mut whole = hash.hasher();
        let mut ids = Vec::new();
        let (mut new_chunks, mut new_bytes, mut size) = (0, 0, 0u64);
        let (min, avg, max) = m.chunk_sizes(len);
        let cdc = fastcdc::v2020::StreamCDC::new(r, min, avg, max);
        for chunk in cdc {
            let chunk = chunk.map_err(|e| Error::Source(e.into()))?;
            whole.update(&chunk.data);
            size += chunk.data.len() as u64;
            let cid = hash.hash(&chunk.data);
            if let Some(n) = self.add_chunk_ref(cid, || chunk.data)? {
                new_chunks += 1;
                new_bytes += n;
            }
            ids.push(cid);
        }
        let id = whole.finish();
        if let Some(row) = self.blob_row(&id)? {
            // Stored already: the chunk references taken above are not needed.
            for cid in &ids {
                self.drop_chunk_ref(cid)?;
            }
            return Ok(self.add_existing(id, row));
        }
        if ids.is_empty() {
            // Empty content is one empty chunk, as `put` stores it.
            let cid = hash.hash(&[]);
            new_chunks += u64::from(self.add_chunk_ref(cid, Vec::new)?.is_some());
            ids.push(cid);
        }
        Ok(self.add_new(id, size, ids, new_chunks, new_bytes))
    }

    /// Drops one reference to a blob; returns whether it existed.
    pub fn release(&mut self, id: &Id) -> Result<bool> {
        let Some(mut row) = self.blob_row(id)? else { return Ok(false) };
        row.refs -= 1;
        if row.refs > 0 {
            let pages = match self.blobs.remove(id) {
                Some(Some((_, pages))) => pages,
                _ => None,
            };
            self.blobs.insert(*id, Some((row, pages)));
            return Ok(true);
        }
        let ids = match self.blobs.get(id) {
            Some(Some((r, pages))) => {
                let mut v = r.first_page.clone();
                v.extend(pages.iter().flatten().copied());
                v
            }
            _ => self.inner.chunk_ids(id, &row)?,
        };
        for cid in &ids {
            self.drop_chunk_ref(cid)?;
        }
        self.blobs.insert(*id, None);
        Ok(true)
    }

    /// Makes the batch durable: pack bytes first, then the index rows. Returns the bytes the
    /// batch appended to packs.
    ///
    /// A small batch appending to a pack whose file is durable already is made durable with
    /// one sync: its bytes also go into a journal row of the same engine write, and the pack is
    /// synced later (when a larger batch syncs it, when the journal grows past
    /// [`JOURNAL_MAX`], or when the pack is closed), after which the rows are deleted.
    pub fn commit(mut self) -> Result<u64> {
        self.write_pending()?;
        let rows = &self.inner.rows;
        let mut wb = std::mem::take(&mut self.extra);
        // Bytes this batch appended to the open pack must be durable before the index names them.
        // (A batch that only released chunks of it appended nothing.)
        let wrote = self.written > 0 && self.w.pack.as_ref().is_some_and(|p| self.packs.contains_key(&p.no));
        let captured = match self.w.pack.as_mut() {
            Some(p) if self.capturing => p.take_capture().filter(|(_, b)| !b.is_empty()),
            _ => None,
        };
        let journaled = captured
            .filter(|(_, b)| wrote && self.w.pack_in_dir && self.w.journal_bytes + b.len() as u64 <= JOURNAL_MAX);
        if let (Some((offset, bytes)), Some(p)) = (journaled, self.w.pack.as_mut()) {
            p.flush()?;
            let no = p.no;
            wb.put(rows, index::journal_key(no, offset), &bytes)?;
            self.w.journal.push((no, offset));
            self.w.journal_bytes += bytes.len() as u64;
        } else if wrote {
            if let Some(p) = self.w.pack.as_mut() {
                p.sync()?;
            }
            if !self.w.pack_in_dir {
                let dir = &self.inner.dir;
                self.inner.storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
                self.w.pack_in_dir = true;
            }
            // Synced: the journal's copies are not needed any more.
            self.inner.forget_journal(&mut self.w, &mut wb)?;
        }
        for (id, row) in &self.chunks {
            let k = index::key(index::CHUNK_PREFIX, id);
            if row.refs == 0 { wb.delete(rows, k)? } else { wb.put(rows, k, row.encode())? }
        }
        for (id, b) in &self.blobs {
            let k = index::key(index::BLOB_PREFIX, id);
            match b {
                Some((row, pages)) => {
                    wb.put(rows, k, row.encode())?;
                    for (i, page) in pages.iter().flat_map(|p| p.chunks(IDS_PER_PAGE)).enumerate() {
                        wb.put(rows, index::page_key(id, i as u32 + 1), index::encode_ids(page))?;
                    }
                }
                None => {
                    wb.delete(rows, k)?;
                    let mut end = index::key(index::PAGE_PREFIX, id);
                    end.extend_from_slice(&[0xFF; 5]);
                    wb.delete_range(rows, index::key(index::PAGE_PREFIX, id), end)?;
                }
            }
        }
        for (no, row) in &self.packs {
            wb.put(rows, index::pack_key(*no), row.encode())?;
        }
        for id in &self.restored {
            wb.delete(rows, index::key(index::DAMAGED_PREFIX, id))?;
        }
        let next_pack = self.w.next_pack;
        if next_pack != self.w.persisted_next_pack {
            wb.put(rows, index::NEXT_PACK, next_pack.to_le_bytes())?;
        }
        rows.write(wb)?;
        self.w.persisted_next_pack = next_pack;
        self.inner.restored(&self.restored);
        // Only now may a sealed pack be uploaded: the index names its committed bytes.
        self.inner.upload_sealed(&mut self.w);
        Ok(self.written)
    }
}

/// Encodes chunks (in order) as groups of about `target` raw bytes, compressed on every core.
pub(crate) fn encode_groups(chunks: &[(Id, Vec<u8>)], target: usize, level: i32) -> Vec<Group> {
    use rayon::prelude::*;
    let lens: Vec<usize> = chunks.iter().map(|(_, d)| d.len()).collect();
    pack::plan_groups(&lens, target)
        .into_par_iter()
        .map(|r| {
            let refs: Vec<(Id, &[u8])> = chunks[r].iter().map(|(id, d)| (*id, d.as_slice())).collect();
            Group::encode(&refs, level)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_kv::keyspace::CAS;
    use cairn_kv::{Db, MemStorage, Options, WriteBatch};

    fn physical(k: Vec<u8>) -> Vec<u8> {
        [CAS.prefix(), &k].concat()
    }

    /// A store written before group entries existed (a version 1 entry and a 32-byte chunk
    /// row) still reads, verifies, and is regrouped by gc.
    #[test]
    fn version_1_entries_read_verify_and_are_regrouped() {
        let storage = MemStorage::new();
        let s: Arc<dyn Storage> = Arc::new(storage.clone());
        let db = Db::open_with_storage("/d/kv", Options::small_for_tests(), s.clone()).unwrap();
        let store = Store::open(db.keyspace(CAS), s.clone(), "/d/packs", StoreConfig::default()).unwrap();
        let data = b"an old chunk, stored alone ".repeat(100);
        let id = HashAlgo::Blake3.hash(&data);
        let mut w = PackWriter::create(&s, Path::new("/d/packs"), 1).unwrap();
        let stored = pack::StoredChunk::encode(&data, 3);
        let offset = w.append(&id, &stored).unwrap();
        w.sync().unwrap();
        let entry_len = stored.data.len() as u32 + pack::ENTRY_OVERHEAD as u32;
        let row = ChunkRow { pack: 1, offset, entry_len, raw_len: data.len() as u32, refs: 1, group: None };
        assert_eq!(row.encode().len(), 32);
        let mut wb = WriteBatch::new();
        wb.put(physical(index::key(index::CHUNK_PREFIX, &id)), row.encode()).unwrap();
        let blob = BlobRow { refs: 1, size: data.len() as u64, chunk_count: 1, first_page: vec![id] };
        wb.put(physical(index::key(index::BLOB_PREFIX, &id)), blob.encode()).unwrap();
        let total = w.len() - pack::PACK_HEADER_LEN;
        wb.put(physical(index::pack_key(1)), PackRow { total, live: total }.encode()).unwrap();
        wb.put(physical(index::NEXT_PACK.to_vec()), 2u64.to_le_bytes()).unwrap();
        db.write(wb).unwrap();
        drop(store);
        let store = Store::open(db.keyspace(CAS), s, "/d/packs", StoreConfig::default()).unwrap();
        assert_eq!(store.get(&id).unwrap(), data);
        assert!(store.verify().unwrap().is_ok());
        let r = store.gc(1.1).unwrap();
        assert_eq!((r.packs_collected, r.chunks_moved), (1, 1));
        let moved = store.inner.chunk_row(&id).unwrap().unwrap();
        assert!(moved.group.is_some() && moved.pack == 2, "{moved:?}");
        assert_eq!(store.get(&id).unwrap(), data);
        let v = store.verify().unwrap();
        assert!(v.is_ok() && v.chunks == 1, "{v:?}");
    }
}
