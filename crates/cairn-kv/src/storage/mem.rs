//! [`MemStorage`]: an in-memory [`Storage`] that models what survives a power cut, with fault
//! injection, for crash tests.
//!
//! The model:
//! - Every file is a node with its *current* content and its *durable* content. `append` and
//!   `flush` change only the current content; [`WritableFile::sync`] copies it to the durable one.
//! - Directory entries live in two namespaces, *live* and *durable*, that share the nodes.
//!   `create`, `rename` and `remove_file` change the live namespace at once;
//!   [`Storage::sync_dir`]`(d)` makes the durable entries directly under `d` equal to the live
//!   ones (removals included). A rename moves the node, so content and durable content follow it.
//! - [`MemStorage::crash`] is a power cut: the durable namespace becomes the live one and every
//!   file's content falls back to its durable content. Handles opened before the crash fail
//!   from then on (each handle remembers the generation it was opened in).
//! - [`MemStorage::fail_after`] kills the storage after a number of mutating operations; the
//!   append that crosses the limit applies the first half of its bytes (a torn write).
//!   [`MemStorage::set_sync_failure`] makes syncs fail without making anything durable.
//!
//! Directories made by `create_dir_all` are remembered (for `exists` and `list_dir`) but are not
//! part of the power-cut model: they survive every crash. Files may be created in a directory
//! that was never made; its entries are then listed all the same.
//!
//! Locks: the state lock is always taken before a node's lock, and every change to a node's
//! content happens while the state lock is held, so a crash never races with a write.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::storage::{DeferredSync, FileLock, RandomAccessFile, Storage, WritableFile};

/// One file: what a reader sees now, and what a power cut would leave.
#[derive(Default)]
struct Node {
    data: Vec<u8>,
    durable: Vec<u8>,
    /// Successful syncs of this file.
    syncs: u64,
}

type NodeRef = Arc<Mutex<Node>>;

#[derive(Default)]
struct State {
    /// Entries as the running process sees them.
    live: BTreeMap<PathBuf, NodeRef>,
    /// Entries that survive a power cut.
    durable: BTreeMap<PathBuf, NodeRef>,
    /// Directories made by `create_dir_all` (and their ancestors).
    dirs: BTreeSet<PathBuf>,
    /// Paths locked by a live [`MemLock`].
    locks: BTreeSet<PathBuf>,
    /// Bumped by every crash; handles from an older generation fail.
    generation: u64,
    /// Mutating operations so far (the failing one included).
    ops: u64,
    /// The storage dies when `ops` goes above this.
    fail_at: Option<u64>,
    /// Every operation fails until the next crash.
    dead: bool,
    /// `sync` and `sync_dir` fail while set.
    sync_failure: bool,
    /// Time every file sync takes.
    sync_delay: Option<Duration>,
    /// Successful file syncs so far.
    syncs: u64,
    /// File syncs under way, and the most seen at once.
    syncing: usize,
    max_syncing: usize,
    /// Calls of `WritableFile::write_back`.
    write_backs: u64,
    /// Calls of `RandomAccessFile::will_need`.
    will_needs: u64,
}

/// In-memory storage with power-cut simulation and fault injection (see the module docs).
/// Clones share the same files.
#[derive(Clone, Default)]
pub struct MemStorage {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for MemStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("MemStorage")
            .field("live_files", &s.live.len())
            .field("durable_files", &s.durable.len())
            .field("generation", &s.generation)
            .field("mutating_ops", &s.ops)
            .field("fail_at", &s.fail_at)
            .field("dead", &s.dead)
            .field("sync_failure", &s.sync_failure)
            .finish()
    }
}

fn power_loss() -> io::Error {
    io::Error::other("simulated power loss")
}

fn fsync_failure() -> io::Error {
    io::Error::other("simulated fsync failure")
}

fn not_found(p: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} not found", p.display()))
}

fn eof() -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file")
}

/// What a counted mutating operation may do.
enum Permit {
    /// Everything.
    Full,
    /// The storage dies during this operation: it may apply part of itself (a torn write), then
    /// must fail.
    Torn,
}

impl State {
    /// Fails if the storage is dead or the handle is from before a crash.
    fn check(&self, generation: u64) -> io::Result<()> {
        if self.dead || generation != self.generation {
            return Err(power_loss());
        }
        Ok(())
    }

    /// Counts one mutating operation and says whether it may proceed.
    fn mutate(&mut self, generation: u64) -> io::Result<Permit> {
        self.check(generation)?;
        self.ops += 1;
        if self.fail_at.is_some_and(|n| self.ops > n) {
            self.dead = true;
            return Ok(Permit::Torn);
        }
        Ok(Permit::Full)
    }

    /// Counts a mutating operation of the storage itself that applies all or nothing.
    fn mutate_whole(&mut self) -> io::Result<()> {
        match self.mutate(self.generation)? {
            Permit::Full => Ok(()),
            Permit::Torn => Err(power_loss()),
        }
    }
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        MemStorage::default()
    }

    /// Simulates a power cut: only durable entries with their durable content remain, every
    /// handle opened before becomes unusable, locks are released, and the storage is alive again
    /// ([`MemStorage::fail_after`] is cleared; [`MemStorage::set_sync_failure`] is kept).
    pub fn crash(&self) {
        let mut s = self.state.lock();
        s.live = s.durable.clone();
        for node in s.live.values() {
            let mut n = node.lock();
            n.data = n.durable.clone();
        }
        s.generation += 1;
        s.dead = false;
        s.fail_at = None;
        s.locks.clear();
    }

    /// After `n` more mutating operations (`append`, `flush`, `sync`, `create`, `rename`,
    /// `remove_file`, `sync_dir`, `create_dir_all`) the storage dies: the next one and every
    /// later operation, reads included, fail with "simulated power loss". An append that
    /// crosses the limit first applies half of its bytes.
    pub fn fail_after(&self, n: u64) {
        let mut s = self.state.lock();
        s.fail_at = Some(s.ops.saturating_add(n));
    }

    /// Mutating operations so far, the one that killed the storage included. Run a workload
    /// once to count them, then cut it at every point with [`MemStorage::fail_after`].
    pub fn mutating_ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Whether the storage died (see [`MemStorage::fail_after`]); cleared by a crash.
    pub fn is_dead(&self) -> bool {
        self.state.lock().dead
    }

    /// While set, `WritableFile::sync` and `sync_dir` fail with "simulated fsync failure" and
    /// make nothing durable; other operations work.
    pub fn set_sync_failure(&self, fail: bool) {
        self.state.lock().sync_failure = fail;
    }

    /// Makes every file sync take this long (to let group commit form groups in tests).
    pub fn set_sync_delay(&self, d: Duration) {
        self.state.lock().sync_delay = Some(d);
    }

    /// Successful file syncs so far.
    pub fn syncs(&self) -> u64 {
        self.state.lock().syncs
    }

    /// Successful syncs so far of the files now in `dir` or below it (a test counts the syncs
    /// of one component's files, apart from other threads' syncs elsewhere).
    pub fn syncs_under(&self, dir: &Path) -> u64 {
        let s = self.state.lock();
        s.live.iter().filter(|(p, _)| p.starts_with(dir)).map(|(_, n)| n.lock().syncs).sum()
    }

    /// Calls of [`WritableFile::write_back`] so far (each only hands bytes over: memory has no
    /// write-back to start).
    pub fn write_backs(&self) -> u64 {
        self.state.lock().write_backs
    }

    /// Calls of [`RandomAccessFile::will_need`] so far (memory has nothing to read ahead).
    pub fn will_needs(&self) -> u64 {
        self.state.lock().will_needs
    }

    /// The most file syncs that were ever under way at once.
    pub fn max_concurrent_syncs(&self) -> usize {
        self.state.lock().max_syncing
    }

    /// An independent deep copy of the storage as it is now (live and durable state), with no
    /// locks held and no fault injection: lets a test replay the same starting point many times.
    pub fn clone_state(&self) -> MemStorage {
        let s = self.state.lock();
        let mut copies: BTreeMap<*const Mutex<Node>, NodeRef> = BTreeMap::new();
        let mut copy = |n: &NodeRef| -> NodeRef {
            copies
                .entry(Arc::as_ptr(n))
                .or_insert_with(|| {
                    let g = n.lock();
                    Arc::new(Mutex::new(Node { data: g.data.clone(), durable: g.durable.clone(), syncs: g.syncs }))
                })
                .clone()
        };
        let live = s.live.iter().map(|(p, n)| (p.clone(), copy(n))).collect();
        let durable = s.durable.iter().map(|(p, n)| (p.clone(), copy(n))).collect();
        let state = State { live, durable, dirs: s.dirs.clone(), ops: s.ops, ..State::default() };
        MemStorage { state: Arc::new(Mutex::new(state)) }
    }

    /// Current content of a file, for tests (`None` if there is no such live entry).
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        s.live.get(path).map(|n| n.lock().data.clone())
    }
}

struct MemWritable {
    storage: MemStorage,
    node: NodeRef,
    generation: u64,
    len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let mut s = self.storage.state.lock();
        let permit = s.mutate(self.generation)?;
        let mut n = self.node.lock();
        match permit {
            Permit::Full => {
                n.data.extend_from_slice(data);
                self.len += data.len() as u64;
                Ok(())
            }
            Permit::Torn => {
                n.data.extend_from_slice(&data[..data.len() / 2]);
                Err(power_loss())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.storage.state.lock().mutate(self.generation)? {
            Permit::Full => Ok(()),
            Permit::Torn => Err(power_loss()),
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        sync_node(&self.storage, &self.node, self.generation)
    }

    fn write_back(&mut self) -> io::Result<()> {
        self.flush()?;
        self.storage.state.lock().write_backs += 1;
        Ok(())
    }

    fn sync_later(&mut self) -> io::Result<DeferredSync> {
        self.flush()?;
        let (storage, node, generation) = (self.storage.clone(), self.node.clone(), self.generation);
        Ok(Box::new(move || sync_node(&storage, &node, generation)))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Syncs a file written by a writer of `generation`: after the configured delay (a crash or
/// death meanwhile fails it), everything appended to it so far is durable.
fn sync_node(storage: &MemStorage, node: &NodeRef, generation: u64) -> io::Result<()> {
    let delay = {
        let mut s = storage.state.lock();
        if let Permit::Torn = s.mutate(generation)? {
            return Err(power_loss());
        }
        if s.sync_failure {
            return Err(fsync_failure());
        }
        s.syncing += 1;
        s.max_syncing = s.max_syncing.max(s.syncing);
        s.sync_delay
    };
    if let Some(d) = delay {
        std::thread::sleep(d);
    }
    let mut s = storage.state.lock();
    s.syncing -= 1;
    // A crash or death during the delay: the sync never completed.
    s.check(generation)?;
    s.syncs += 1;
    let mut n = node.lock();
    n.durable = n.data.clone();
    n.syncs += 1;
    Ok(())
}

struct MemRandom {
    storage: MemStorage,
    node: NodeRef,
    generation: u64,
}

impl RandomAccessFile for MemRandom {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let s = self.storage.state.lock();
        s.check(self.generation)?;
        let n = self.node.lock();
        let start = usize::try_from(offset).map_err(|_| eof())?;
        let end = start.checked_add(len).ok_or_else(eof)?;
        n.data.get(start..end).map(<[u8]>::to_vec).ok_or_else(eof)
    }

    fn len(&self) -> u64 {
        self.node.lock().data.len() as u64
    }

    fn will_need(&self, _offset: u64, _len: u64) {
        self.storage.state.lock().will_needs += 1;
    }
}

struct MemLock {
    storage: MemStorage,
    path: PathBuf,
    generation: u64,
}

impl FileLock for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut s = self.storage.state.lock();
        // A crash already released this lock; the path may be locked again since.
        if s.generation == self.generation {
            s.locks.remove(&self.path);
        }
    }
}

impl Storage for MemStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        for a in path.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            s.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        let node = NodeRef::default();
        s.live.insert(path.to_path_buf(), node.clone());
        Ok(Box::new(MemWritable { storage: self.clone(), node, generation: s.generation, len: 0 }))
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        if s.live.contains_key(path) {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("{} already exists", path.display())));
        }
        let node = NodeRef::default();
        s.live.insert(path.to_path_buf(), node.clone());
        Ok(Box::new(MemWritable { storage: self.clone(), node, generation: s.generation, len: 0 }))
    }

    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let s = self.state.lock();
        s.check(s.generation)?;
        let node = s.live.get(path).cloned().ok_or_else(|| not_found(path))?;
        Ok(Arc::new(MemRandom { storage: self.clone(), node, generation: s.generation }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        let node = s.live.remove(from).ok_or_else(|| not_found(from))?;
        s.live.insert(to.to_path_buf(), node);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        s.live.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        s.check(s.generation)?;
        let under = |p: &&PathBuf| p.parent() == Some(path);
        let mut names: Vec<String> = s
            .live
            .keys()
            .chain(s.dirs.iter())
            .filter(under)
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        if names.is_empty() && !s.dirs.contains(path) {
            return Err(not_found(path));
        }
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }

    fn exists(&self, path: &Path) -> bool {
        let s = self.state.lock();
        s.live.contains_key(path) || s.dirs.contains(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        s.mutate_whole()?;
        if s.sync_failure {
            return Err(fsync_failure());
        }
        let in_dir = |p: &PathBuf| p.parent() == Some(path);
        s.durable.retain(|p, _| !in_dir(p));
        let live: Vec<_> = s.live.iter().filter(|(p, _)| in_dir(p)).map(|(p, n)| (p.clone(), n.clone())).collect();
        s.durable.extend(live);
        Ok(())
    }

    fn lock(&self, path: &Path) -> io::Result<Box<dyn FileLock>> {
        let mut s = self.state.lock();
        s.check(s.generation)?;
        if !s.locks.insert(path.to_path_buf()) {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, format!("{} is already locked", path.display())));
        }
        Ok(Box::new(MemLock { storage: self.clone(), path: path.to_path_buf(), generation: s.generation }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    /// A file `path` holding `data`, synced and with its directory entry synced.
    fn durable_file(s: &MemStorage, path: &str, data: &[u8]) -> Box<dyn WritableFile> {
        let mut f = s.create(&p(path)).unwrap();
        f.append(data).unwrap();
        f.sync().unwrap();
        s.sync_dir(p(path).parent().unwrap()).unwrap();
        f
    }

    #[test]
    fn unsynced_data_is_dropped_on_crash() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"synced");
        f.append(b"-lost").unwrap();
        f.flush().unwrap();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"synced-lost");
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"synced");
        assert_eq!(s.read_all(&p("/d/a")).unwrap(), b"synced");
    }

    #[test]
    fn synced_data_survives_crash() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"one");
        f.append(b"two").unwrap();
        f.sync().unwrap();
        s.crash();
        s.crash();
        assert_eq!(s.read_all(&p("/d/a")).unwrap(), b"onetwo");
    }

    #[test]
    fn file_synced_without_dir_sync_disappears() {
        let s = MemStorage::new();
        let mut g = s.create(&p("/d/b")).unwrap();
        g.append(b"no dir sync").unwrap();
        g.sync().unwrap();
        assert!(s.exists(&p("/d/b")));
        // A directory sync elsewhere does not help.
        s.sync_dir(&p("/other")).unwrap();
        s.crash();
        assert!(!s.exists(&p("/d/b")));
        assert_eq!(s.open_read(&p("/d/b")).err().unwrap().kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn created_then_dir_synced_but_content_unsynced_is_empty() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/d/a")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        f.append(b"data").unwrap();
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"");
    }

    #[test]
    fn rename_is_durable_only_after_dir_sync() {
        let s = MemStorage::new();
        durable_file(&s, "/d/tmp", b"x");
        s.rename(&p("/d/tmp"), &p("/d/cur")).unwrap();
        assert!(s.exists(&p("/d/cur")) && !s.exists(&p("/d/tmp")), "visible at once");
        s.crash();
        assert!(s.contents(&p("/d/tmp")).is_some());
        assert!(s.contents(&p("/d/cur")).is_none());
        s.rename(&p("/d/tmp"), &p("/d/cur")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        s.crash();
        assert_eq!(s.contents(&p("/d/cur")).unwrap(), b"x");
        assert!(s.contents(&p("/d/tmp")).is_none());
    }

    #[test]
    fn rename_replaces_target_and_keeps_the_node() {
        let s = MemStorage::new();
        durable_file(&s, "/d/CURRENT", b"old");
        let mut f = durable_file(&s, "/d/CURRENT.tmp", b"new");
        s.rename(&p("/d/CURRENT.tmp"), &p("/d/CURRENT")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        // The handle still writes the renamed node.
        f.append(b"+more").unwrap();
        f.sync().unwrap();
        s.crash();
        assert_eq!(s.contents(&p("/d/CURRENT")).unwrap(), b"new+more");
        assert_eq!(s.list_dir(&p("/d")).unwrap(), vec!["CURRENT".to_string()]);
    }

    #[test]
    fn remove_is_durable_only_after_dir_sync() {
        let s = MemStorage::new();
        durable_file(&s, "/d/a", b"x");
        s.remove_file(&p("/d/a")).unwrap();
        assert!(!s.exists(&p("/d/a")));
        assert_eq!(s.remove_file(&p("/d/a")).unwrap_err().kind(), io::ErrorKind::NotFound);
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"x", "the removal was not durable");
        s.remove_file(&p("/d/a")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        s.crash();
        assert!(!s.exists(&p("/d/a")));
    }

    #[test]
    fn handles_fail_after_crash() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"abc");
        let r = s.open_read(&p("/d/a")).unwrap();
        s.crash();
        assert!(f.append(b"x").is_err());
        assert!(f.flush().is_err());
        assert!(f.sync().is_err());
        assert!(r.read_at(0, 1).is_err());
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"abc", "old handles resurrect nothing");
        // New handles work.
        assert_eq!(s.open_read(&p("/d/a")).unwrap().read_at(1, 2).unwrap(), b"bc");
    }

    #[test]
    fn fail_after_cuts_at_exactly_n_ops() {
        // Eight mutating operations of every kind.
        type Step = dyn Fn(&MemStorage, &mut Option<Box<dyn WritableFile>>) -> io::Result<()>;
        fn workload(s: &MemStorage) -> usize {
            let steps: [&Step; 8] = [
                &|s, _| s.create_dir_all(&p("/d")),
                &|s, f| s.create(&p("/d/a")).map(|w| *f = Some(w)),
                &|_, f| f.as_mut().map_or(Ok(()), |f| f.append(b"data")),
                &|_, f| f.as_mut().map_or(Ok(()), |f| f.flush()),
                &|_, f| f.as_mut().map_or(Ok(()), |f| f.sync()),
                &|s, _| s.rename(&p("/d/a"), &p("/d/b")),
                &|s, _| s.sync_dir(&p("/d")),
                &|s, _| s.remove_file(&p("/d/b")),
            ];
            let mut f = None;
            steps.iter().take_while(|step| step(s, &mut f).is_ok()).count()
        }
        let probe = MemStorage::new();
        assert_eq!(workload(&probe), 8);
        assert_eq!(probe.mutating_ops(), 8);
        for n in 0..=8u64 {
            let s = MemStorage::new();
            s.fail_after(n);
            assert_eq!(workload(&s) as u64, n, "cut after {n} ops");
            assert_eq!(s.is_dead(), n < 8);
            assert_eq!(s.mutating_ops(), (n + 1).min(8));
        }
    }

    #[test]
    fn dead_storage_fails_everything_until_crash() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"abc");
        let r = s.open_read(&p("/d/a")).unwrap();
        s.fail_after(0);
        assert_eq!(s.create(&p("/d/b")).err().unwrap().to_string(), "simulated power loss");
        assert!(s.is_dead());
        let ops = s.mutating_ops();
        assert!(f.append(b"x").is_err());
        assert!(s.sync_dir(&p("/d")).is_err());
        assert_eq!(s.mutating_ops(), ops, "operations after death are not counted");
        assert!(r.read_at(0, 1).is_err());
        assert!(s.open_read(&p("/d/a")).is_err());
        assert!(s.read_all(&p("/d/a")).is_err());
        assert!(s.list_dir(&p("/d")).is_err());
        assert!(s.lock(&p("/d/LOCK")).is_err());
        s.crash();
        assert!(!s.is_dead());
        assert_eq!(s.read_all(&p("/d/a")).unwrap(), b"abc");
        s.create(&p("/d/c")).unwrap();
    }

    #[test]
    fn append_crossing_the_limit_is_torn() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/a")).unwrap(); // op 1
        s.fail_after(1);
        f.append(b"ok").unwrap(); // op 2: allowed
        assert!(f.append(b"123456").is_err()); // op 3: torn
        assert!(s.is_dead());
        assert_eq!(s.contents(&p("/a")).unwrap(), b"ok123");
        assert_eq!(f.len(), 2, "a failed append is not counted in the length");
        assert!(s.create(&p("/b")).is_err());
        assert_eq!(s.mutating_ops(), 3);
    }

    #[test]
    fn torn_tail_survives_only_if_synced() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"head");
        s.fail_after(0);
        assert!(f.append(b"tail").is_err());
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"headta");
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"head");
    }

    #[test]
    fn sync_failure_makes_nothing_durable() {
        let s = MemStorage::new();
        let mut f = durable_file(&s, "/d/a", b"");
        f.append(b"data").unwrap();
        s.set_sync_failure(true);
        assert_eq!(f.sync().unwrap_err().to_string(), "simulated fsync failure");
        let mut g = s.create(&p("/d/b")).unwrap();
        g.append(b"other ops still work").unwrap();
        assert!(s.sync_dir(&p("/d")).is_err());
        assert!(!s.is_dead());
        s.set_sync_failure(false);
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"");
        assert!(!s.exists(&p("/d/b")));
    }

    #[test]
    fn sync_counts_and_delay() {
        let s = MemStorage::new();
        s.set_sync_delay(Duration::from_millis(1));
        let mut f = s.create(&p("/a")).unwrap();
        f.sync().unwrap();
        f.sync().unwrap();
        assert_eq!(s.syncs(), 2);
    }

    #[test]
    fn locks_are_exclusive() {
        let s = MemStorage::new();
        let l = s.lock(&p("/LOCK")).unwrap();
        assert_eq!(s.lock(&p("/LOCK")).err().unwrap().kind(), io::ErrorKind::WouldBlock);
        assert_eq!(s.clone().lock(&p("/LOCK")).err().unwrap().kind(), io::ErrorKind::WouldBlock);
        let _other = s.lock(&p("/OTHER")).unwrap();
        drop(l);
        let old = s.lock(&p("/LOCK")).unwrap();
        s.crash();
        let _new = s.lock(&p("/LOCK")).unwrap();
        // Dropping a guard from before the crash does not release the new lock.
        drop(old);
        assert_eq!(s.lock(&p("/LOCK")).err().unwrap().kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn dirs_exist_and_list() {
        let s = MemStorage::new();
        s.create_dir_all(&p("/db/sub")).unwrap();
        assert!(s.exists(&p("/db")) && s.exists(&p("/db/sub")));
        assert!(!s.exists(&p("/nope")));
        assert_eq!(s.list_dir(&p("/db")).unwrap(), vec!["sub".to_string()]);
        s.create(&p("/db/b")).unwrap();
        s.create(&p("/db/a")).unwrap();
        s.create(&p("/db/sub/deep")).unwrap();
        assert_eq!(s.list_dir(&p("/db")).unwrap(), vec!["a".to_string(), "b".to_string(), "sub".to_string()]);
        assert_eq!(s.list_dir(&p("/db/sub")).unwrap(), vec!["deep".to_string()]);
        assert_eq!(s.list_dir(&p("/nope")).unwrap_err().kind(), io::ErrorKind::NotFound);
        // An empty directory that exists lists as empty.
        s.create_dir_all(&p("/empty")).unwrap();
        assert!(s.list_dir(&p("/empty")).unwrap().is_empty());
    }

    #[test]
    fn reads_at_offsets() {
        let s = MemStorage::new();
        durable_file(&s, "/a", b"0123456789");
        let r = s.open_read(&p("/a")).unwrap();
        assert_eq!(r.len(), 10);
        assert_eq!(r.read_at(3, 4).unwrap(), b"3456");
        assert_eq!(r.read_at(10, 0).unwrap(), b"");
        assert_eq!(r.read_at(8, 3).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(r.read_at(u64::MAX, 1).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(r.read_at(1, usize::MAX).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn clones_share_state_and_clone_state_does_not() {
        let s = MemStorage::new();
        let c = s.clone();
        durable_file(&c, "/a", b"x");
        assert_eq!(s.contents(&p("/a")).unwrap(), b"x");
        let copy = s.clone_state();
        s.remove_file(&p("/a")).unwrap();
        assert_eq!(copy.contents(&p("/a")).unwrap(), b"x");
        copy.crash();
        assert_eq!(copy.contents(&p("/a")).unwrap(), b"x");
    }

    proptest! {
        /// Whatever the appends and syncs, a crash leaves exactly what was last synced.
        #[test]
        fn crash_keeps_the_last_synced_content(ops in proptest::collection::vec((proptest::collection::vec(any::<u8>(), 0..16), any::<bool>()), 0..32)) {
            let s = MemStorage::new();
            let mut f = s.create(&p("/d/f")).unwrap();
            s.sync_dir(&p("/d")).unwrap();
            let mut all = Vec::new();
            let mut synced = Vec::new();
            for (data, sync) in &ops {
                f.append(data).unwrap();
                all.extend_from_slice(data);
                if *sync {
                    f.sync().unwrap();
                    synced = all.clone();
                }
            }
            prop_assert_eq!(s.contents(&p("/d/f")).unwrap(), all.clone());
            prop_assert_eq!(f.len(), all.len() as u64);
            s.crash();
            prop_assert_eq!(s.contents(&p("/d/f")).unwrap(), synced);
        }
    }
}
