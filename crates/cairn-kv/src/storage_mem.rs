//! [`MemStorage`]: an in-memory [`Storage`] that models what survives a power cut, with fault
//! injection, for crash tests.
//!
//! File content is durable only after `sync`; creations, renames and removals only after
//! `sync_dir` of the parent. [`MemStorage::crash`] throws away everything not durable.
//! [`MemStorage::fail_after`] kills the storage after a number of mutating operations (the
//! operation that crosses the limit may write half its bytes: a torn write).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::storage::{FileLock, RandomAccessFile, Storage, WritableFile};

#[derive(Default)]
struct Node {
    data: Vec<u8>,
    durable: Vec<u8>,
}

type NodeRef = Arc<Mutex<Node>>;

#[derive(Default)]
struct State {
    live: BTreeMap<PathBuf, NodeRef>,
    durable: BTreeMap<PathBuf, NodeRef>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    generation: u64,
    ops: u64,
    fail_at: Option<u64>,
    dead: bool,
    sync_failure: bool,
    sync_delay: Option<Duration>,
    syncs: u64,
}

/// In-memory storage with power-cut simulation. Clones share the same files.
#[derive(Clone, Default)]
pub struct MemStorage {
    state: Arc<Mutex<State>>,
}

fn power_loss() -> io::Error {
    io::Error::other("simulated power loss")
}

/// What a mutating operation may do once counted.
enum Permit {
    Full,
    /// The storage dies during this operation: apply part of it (torn write), then fail.
    Torn,
}

impl State {
    fn check(&self, generation: u64) -> io::Result<()> {
        if self.dead || generation != self.generation {
            return Err(power_loss());
        }
        Ok(())
    }

    fn mutate(&mut self, generation: u64) -> io::Result<Permit> {
        self.check(generation)?;
        self.ops += 1;
        if self.fail_at.is_some_and(|n| self.ops > n) {
            self.dead = true;
            return Ok(Permit::Torn);
        }
        Ok(Permit::Full)
    }
}

impl MemStorage {
    /// An empty storage.
    pub fn new() -> Self {
        MemStorage::default()
    }

    /// Simulates a power cut: only durable files and durable content remain; every open handle
    /// becomes unusable; fault injection is cleared and locks are released.
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

    /// After `n` more mutating operations the storage dies (see the module docs).
    pub fn fail_after(&self, n: u64) {
        let mut s = self.state.lock();
        s.fail_at = Some(s.ops + n);
    }

    /// Mutating operations so far.
    pub fn mutating_ops(&self) -> u64 {
        self.state.lock().ops
    }

    /// Whether the storage died (see [`MemStorage::fail_after`]).
    pub fn is_dead(&self) -> bool {
        self.state.lock().dead
    }

    /// While set, `sync` and `sync_dir` fail and make nothing durable.
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
}

struct MemWritable {
    storage: MemStorage,
    node: NodeRef,
    generation: u64,
    len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> io::Result<()> {
        let permit = self.storage.state.lock().mutate(self.generation)?;
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
        let delay = {
            let mut s = self.storage.state.lock();
            if let Permit::Torn = s.mutate(self.generation)? {
                return Err(power_loss());
            }
            if s.sync_failure {
                return Err(io::Error::other("simulated fsync failure"));
            }
            s.syncs += 1;
            s.sync_delay
        };
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        let mut n = self.node.lock();
        n.durable = n.data.clone();
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
}

struct MemRandom {
    storage: MemStorage,
    node: NodeRef,
    generation: u64,
}

impl RandomAccessFile for MemRandom {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.storage.state.lock().check(self.generation)?;
        let n = self.node.lock();
        let start = usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        n.data
            .get(start..start.saturating_add(len))
            .map(|s| s.to_vec())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end of the file"))
    }
    fn len(&self) -> u64 {
        self.node.lock().data.len() as u64
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
        if s.generation == self.generation {
            s.locks.remove(&self.path);
        }
    }
}

fn not_found(p: &Path) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{} not found", p.display()))
}

impl Storage for MemStorage {
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let g = s.generation;
        if let Permit::Torn = s.mutate(g)? {
            return Err(power_loss());
        }
        for a in path.ancestors() {
            s.dirs.insert(a.to_path_buf());
        }
        Ok(())
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn WritableFile>> {
        let mut s = self.state.lock();
        let g = s.generation;
        if let Permit::Torn = s.mutate(g)? {
            return Err(power_loss());
        }
        let node = NodeRef::default();
        s.live.insert(path.to_path_buf(), node.clone());
        Ok(Box::new(MemWritable { storage: self.clone(), node, generation: g, len: 0 }))
    }
    fn open_read(&self, path: &Path) -> io::Result<Arc<dyn RandomAccessFile>> {
        let s = self.state.lock();
        s.check(s.generation)?;
        let node = s.live.get(path).cloned().ok_or_else(|| not_found(path))?;
        Ok(Arc::new(MemRandom { storage: self.clone(), node, generation: s.generation }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let g = s.generation;
        if let Permit::Torn = s.mutate(g)? {
            return Err(power_loss());
        }
        let node = s.live.remove(from).ok_or_else(|| not_found(from))?;
        s.live.insert(to.to_path_buf(), node);
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let g = s.generation;
        if let Permit::Torn = s.mutate(g)? {
            return Err(power_loss());
        }
        s.live.remove(path).map(|_| ()).ok_or_else(|| not_found(path))
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<String>> {
        let s = self.state.lock();
        s.check(s.generation)?;
        Ok(s.live
            .keys()
            .filter(|p| p.parent() == Some(path))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }
    fn exists(&self, path: &Path) -> bool {
        let s = self.state.lock();
        s.live.contains_key(path) || s.dirs.contains(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut s = self.state.lock();
        let g = s.generation;
        if let Permit::Torn = s.mutate(g)? {
            return Err(power_loss());
        }
        if s.sync_failure {
            return Err(io::Error::other("simulated fsync failure"));
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
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "already locked"));
        }
        Ok(Box::new(MemLock { storage: self.clone(), path: path.to_path_buf(), generation: s.generation }))
    }
}

impl MemStorage {
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
                    Arc::new(Mutex::new(Node { data: g.data.clone(), durable: g.durable.clone() }))
                })
                .clone()
        };
        let live = s.live.iter().map(|(p, n)| (p.clone(), copy(n))).collect();
        let durable = s.durable.iter().map(|(p, n)| (p.clone(), copy(n))).collect();
        let state = State { live, durable, dirs: s.dirs.clone(), ops: s.ops, ..State::default() };
        MemStorage { state: Arc::new(Mutex::new(state)) }
    }

    /// Current content of a file, for tests.
    pub fn contents(&self, path: &Path) -> Option<Vec<u8>> {
        let s = self.state.lock();
        s.live.get(path).map(|n| n.lock().data.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn unsynced_data_and_entries_vanish_on_crash() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/d/a")).unwrap();
        f.append(b"synced").unwrap();
        f.sync().unwrap();
        s.sync_dir(&p("/d")).unwrap();
        f.append(b"-lost").unwrap();
        let mut g = s.create(&p("/d/b")).unwrap();
        g.append(b"no dir sync").unwrap();
        g.sync().unwrap();
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"synced");
        assert!(s.contents(&p("/d/b")).is_none(), "created without a directory sync");
        assert!(f.append(b"x").is_err(), "handles from before the crash are dead");
    }

    #[test]
    fn rename_is_durable_after_dir_sync() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/d/tmp")).unwrap();
        f.append(b"x").unwrap();
        f.sync().unwrap();
        s.sync_dir(&p("/d")).unwrap();
        s.rename(&p("/d/tmp"), &p("/d/cur")).unwrap();
        s.crash();
        assert!(s.contents(&p("/d/tmp")).is_some());
        assert!(s.contents(&p("/d/cur")).is_none());
        s.rename(&p("/d/tmp"), &p("/d/cur")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        s.crash();
        assert_eq!(s.contents(&p("/d/cur")).unwrap(), b"x");
    }

    #[test]
    fn fail_after_cuts_exactly_and_tears_the_write() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/a")).unwrap(); // op 1
        s.fail_after(1);
        f.append(b"ok").unwrap(); // op 2: allowed
        assert!(f.append(b"1234").is_err()); // op 3: torn
        assert!(s.is_dead());
        assert_eq!(s.contents(&p("/a")).unwrap(), b"ok12");
        assert!(s.create(&p("/b")).is_err());
        assert_eq!(s.mutating_ops(), 3);
    }

    #[test]
    fn sync_failure_makes_nothing_durable() {
        let s = MemStorage::new();
        let mut f = s.create(&p("/d/a")).unwrap();
        s.sync_dir(&p("/d")).unwrap();
        f.append(b"data").unwrap();
        s.set_sync_failure(true);
        assert!(f.sync().is_err());
        s.set_sync_failure(false);
        s.crash();
        assert_eq!(s.contents(&p("/d/a")).unwrap(), b"");
    }

    #[test]
    fn locks_are_exclusive() {
        let s = MemStorage::new();
        let l = s.lock(&p("/LOCK")).unwrap();
        assert_eq!(s.lock(&p("/LOCK")).err().unwrap().kind(), io::ErrorKind::WouldBlock);
        drop(l);
        let _l = s.lock(&p("/LOCK")).unwrap();
        s.crash();
        let _l2 = s.lock(&p("/LOCK")).unwrap();
    }
}
