//! Packs kept in a backend (here a [`LocalBackend`] directory on the same simulated storage, so
//! power cuts hit it too): uploads, the local read cache and its budget, reads of packs only the
//! backend holds, verify rereading the backend, garbage collection of backend objects, and power
//! cuts between a commit and its upload.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_cas::{Backend, Error, Id, LocalBackend, Remote, Store};
use cairn_kv::{Db, MemStorage, Options, Storage};

use crate::{config, noise};

const CACHE: u64 = 600 << 10;

/// The engine and a store whose sealed packs go to `backend`, on `storage`.
fn open_on(storage: &MemStorage, backend: Arc<dyn Backend>) -> Option<(Db, Store)> {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    let db = Db::open_with_storage("/d/kv", Options::small_for_tests(), s.clone()).ok()?;
    let remote = Remote { backend, cache_bytes: CACHE };
    let store = Store::open_with_remote(db.keyspace(cairn_kv::keyspace::CAS), s, PACKS, config(), Some(remote)).ok()?;
    Some((db, store))
}

/// The backend directory `/remote` on `storage`.
fn backend_dir(storage: &MemStorage) -> io::Result<LocalBackend> {
    LocalBackend::new(Arc::new(storage.clone()), "/remote")
}

fn try_open(storage: &MemStorage) -> Option<(Db, Store, Arc<LocalBackend>)> {
    let backend = Arc::new(backend_dir(storage).ok()?);
    let (db, store) = open_on(storage, backend.clone())?;
    Some((db, store, backend))
}

fn blob(i: u64) -> Vec<u8> {
    let mut v = noise(i % 5, 30_000);
    v.extend_from_slice(&noise(500 + i, 40_000));
    v
}

/// The store's local pack directory.
const PACKS: &str = "/d/packs";

fn local_pack_bytes(storage: &MemStorage) -> u64 {
    let dir = Path::new(PACKS);
    let names = storage.list_dir(dir).unwrap();
    names.iter().filter(|n| n.ends_with(".pack")).map(|n| storage.open_read(&dir.join(n)).unwrap().len()).sum()
}

/// Writes `bytes` as the synced file `path`.
fn write_file(storage: &MemStorage, path: &Path, bytes: &[u8]) {
    let mut f = storage.create(path).unwrap();
    f.append(bytes).unwrap();
    f.sync().unwrap();
}

#[test]
fn packs_go_to_the_backend_and_the_local_cache_keeps_its_budget() {
    let storage = MemStorage::new();
    let (_db, store, backend) = try_open(&storage).unwrap();
    let ids: Vec<Id> = (0..40).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    let listed = backend.list().unwrap();
    assert!(listed.len() >= 4, "several packs uploaded: {listed:?}");
    assert!(local_pack_bytes(&storage) <= CACHE, "local copies {} > budget", local_pack_bytes(&storage));
    // Every blob reads back, whether its packs are cached or must be downloaded.
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
    assert!(local_pack_bytes(&storage) <= CACHE + (300 << 10), "one fetched pack over budget at most");
    let v = store.verify().unwrap();
    assert!(v.is_ok(), "{v:?}");
    drop((store, _db));
    // A new process with an empty cache reads everything from the backend.
    for n in storage.list_dir(Path::new(PACKS)).unwrap() {
        storage.remove_file(&Path::new(PACKS).join(n)).unwrap();
    }
    let (_db, store, _) = try_open(&storage).unwrap();
    for (i, id) in ids.iter().enumerate().rev() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
}

#[test]
fn verify_rereads_the_backend_and_gc_deletes_its_garbage() {
    let storage = MemStorage::new();
    let (_db, store, backend) = try_open(&storage).unwrap();
    let ids: Vec<Id> = (0..30).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    // Damage the backend's copy of the first pack; the local cached copy stays intact.
    let (first, _) = backend.list().unwrap()[0];
    let path = cairn_cas::pack::pack_path(Path::new("/remote"), first);
    let mut bytes = storage.read_all(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x55;
    backend.delete(first).unwrap();
    let tmp = Path::new("/d/damaged");
    write_file(&storage, tmp, &bytes);
    backend.upload(first, tmp).unwrap();
    let v = store.verify().unwrap();
    assert!(!v.is_ok() && v.damaged.iter().all(|d| d.pack == first), "{v:?}");
    // Repair (upload the undamaged bytes), then collect: half the blobs go away.
    bytes[at] ^= 0x55;
    write_file(&storage, tmp, &bytes);
    backend.upload(first, tmp).unwrap();
    assert!(store.verify().unwrap().is_ok());
    for id in ids.iter().step_by(2) {
        store.release(id).unwrap();
    }
    let before: Vec<u64> = backend.list().unwrap().into_iter().map(|(n, _)| n).collect();
    let r = store.gc(1.0).unwrap();
    assert!(r.packs_collected > 0, "{r:?}");
    let s = store.stats().unwrap();
    assert_eq!(s.stored_bytes, s.live_bytes);
    let after: Vec<u64> = backend.list().unwrap().into_iter().map(|(n, _)| n).collect();
    assert!(before.iter().any(|n| !after.contains(n)), "collected packs left the backend");
    assert_eq!(after.len() as u64, s.packs, "the backend holds exactly the packs the index names");
    for (i, id) in ids.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn power_cuts_between_commits_and_uploads_lose_nothing() {
    let ingest = |storage: &MemStorage| {
        let mut acked = Vec::new();
        let Some((_db, store, _)) = try_open(storage) else { return acked };
        for i in 0..16 {
            match store.put(&blob(i)) {
                Ok(o) => acked.push((i, o.id)),
                Err(_) => return acked,
            }
        }
        // A failed seal leaves the upload to the next open; the puts were acknowledged.
        let _ = store.seal();
        acked
    };
    let probe = MemStorage::new();
    let all = ingest(&probe);
    assert_eq!(all.len(), 16);
    let total = probe.mutating_ops();
    let stride = (total / 60).max(1);
    let mut cut = 0;
    while cut < total {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        let acked = ingest(&storage);
        storage.crash();
        let (_db, store, backend) = try_open(&storage).unwrap_or_else(|| panic!("cut {cut}: reopen failed"));
        for (i, id) in &acked {
            assert_eq!(store.get(id).unwrap(), blob(*i), "cut {cut}: blob {i}");
        }
        // The reopen uploaded what the crash left local: every pack the index names is in
        // the backend, and a collection removes objects no row names.
        store.gc(0.0).unwrap();
        let s = store.stats().unwrap();
        assert_eq!(backend.list().unwrap().len() as u64, s.packs, "cut {cut}");
        let v = store.verify().unwrap();
        assert!(v.is_ok(), "cut {cut}: {v:?}");
        cut += stride;
    }
}

#[test]
fn parallel_readers_of_a_cold_cache_download_each_pack_once() {
    let storage = MemStorage::new();
    let (_db, store, _) = try_open(&storage).unwrap();
    let ids: Vec<Id> = (0..40).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    drop((store, _db));
    for n in storage.list_dir(Path::new(PACKS)).unwrap() {
        storage.remove_file(&Path::new(PACKS).join(n)).unwrap();
    }
    let (_db, store, _) = try_open(&storage).unwrap();
    // Four readers start on the same packs at once (the cache holds only two of them).
    std::thread::scope(|s| {
        for t in 0..4 {
            let (store, ids) = (&store, &ids);
            s.spawn(move || {
                for round in 0..3 {
                    for (i, id) in ids.iter().enumerate().skip((t * round) % 7) {
                        assert_eq!(store.get(id).unwrap(), blob(i as u64), "reader {t}, blob {i}");
                    }
                }
            });
        }
    });
    assert!(store.verify().unwrap().is_ok());
}

/// The backend directory, with two controls for tests: switched off (`down`), every call
/// fails as a refused connection; with uploads held back, each waits for a permit.
#[derive(Debug)]
struct Controlled {
    inner: LocalBackend,
    down: AtomicBool,
    permits: parking_lot::Mutex<u64>,
    changed: parking_lot::Condvar,
}

impl Controlled {
    /// Up, with `permits` uploads allowed.
    fn new(storage: &MemStorage, permits: u64) -> Arc<Controlled> {
        Arc::new(Controlled {
            inner: backend_dir(storage).unwrap(),
            down: AtomicBool::new(false),
            permits: parking_lot::Mutex::new(permits),
            changed: parking_lot::Condvar::new(),
        })
    }

    fn release(&self, n: u64) {
        let mut p = self.permits.lock();
        *p = p.saturating_add(n);
        self.changed.notify_all();
    }

    fn check(&self) -> io::Result<()> {
        match self.down.load(Ordering::SeqCst) {
            true => Err(io::Error::new(io::ErrorKind::ConnectionRefused, "backend down")),
            false => Ok(()),
        }
    }
}

impl Backend for Controlled {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn upload(&self, no: u64, path: &Path) -> io::Result<()> {
        self.check()?;
        let mut p = self.permits.lock();
        while *p == 0 {
            self.changed.wait(&mut p);
        }
        *p -= 1;
        drop(p);
        self.inner.upload(no, path)
    }
    fn download(&self, no: u64) -> io::Result<Vec<u8>> {
        self.check()?;
        self.inner.download(no)
    }
    fn read_at(&self, no: u64, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        self.check()?;
        self.inner.read_at(no, offset, len)
    }
    fn list(&self) -> io::Result<Vec<(u64, u64)>> {
        self.check()?;
        self.inner.list()
    }
    fn delete(&self, no: u64) -> io::Result<()> {
        self.check()?;
        self.inner.delete(no)
    }
}

#[test]
fn an_unreachable_backend_leaves_local_data_usable_and_loses_nothing() {
    let storage = MemStorage::new();
    let backend = Controlled::new(&storage, u64::MAX);
    let open = || open_on(&storage, backend.clone()).unwrap();
    let (db, store) = open();
    let ids: Vec<Id> = (0..30).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    drop((store, db));

    // Opening while the backend is down succeeds; cached packs read, others fail clearly.
    backend.down.store(true, Ordering::SeqCst);
    let (db, store) = open();
    let (mut read, mut failed) = (0, 0);
    for (i, id) in ids.iter().enumerate() {
        match store.get(id) {
            Ok(b) => {
                assert_eq!(b, blob(i as u64));
                read += 1;
            }
            Err(e) => {
                assert!(matches!(e, Error::Backend { .. }) && e.to_string().contains("backend down"), "{e}");
                failed += 1;
            }
        }
    }
    assert!(read > 0 && failed > 0, "{read} read from the cache, {failed} needed the backend");
    // verify cannot reread the backend: an error, not a report of damage.
    assert!(matches!(store.verify(), Err(Error::Backend { .. })));
    assert!(matches!(store.gc(1.0), Err(Error::Backend { .. })));
    // Writes commit locally. A put whose commit fills a pack says that the upload failed; its
    // blob is stored all the same, and the upload is retried later.
    let mut more = Vec::new();
    for i in 30..45 {
        let id = match store.put(&blob(i)) {
            Ok(o) => o.id,
            Err(e) => {
                assert!(matches!(e, Error::Backend { .. }), "{e}");
                cairn_cas::HashAlgo::Blake3.hash(&blob(i))
            }
        };
        assert!(store.contains(&id).unwrap(), "blob {i} is committed");
        more.push(id);
    }
    let e = store.seal().unwrap_err();
    assert!(matches!(e, Error::Backend { .. }), "{e}");

    // Back up: the next seal reconciles and uploads everything.
    backend.down.store(false, Ordering::SeqCst);
    store.seal().unwrap();
    let stats = store.stats().unwrap();
    assert_eq!(backend.list().unwrap().len() as u64, stats.packs);
    assert!(store.verify().unwrap().is_ok());
    drop((store, db));
    for n in storage.list_dir(Path::new(PACKS)).unwrap() {
        storage.remove_file(&Path::new(PACKS).join(n)).unwrap();
    }
    let (_db, store) = open();
    for (i, id) in ids.iter().chain(&more).enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
}

#[test]
fn uploads_run_behind_the_commits_with_a_bounded_backlog() {
    let storage = MemStorage::new();
    let backend = Controlled::new(&storage, 0);
    let (_db, store) = open_on(&storage, backend.clone()).unwrap();
    // Whatever happens, the held-back uploads are let go at the end (dropping the store waits
    // for them).
    struct ReleaseAll<'a>(&'a Controlled);
    impl Drop for ReleaseAll<'_> {
        fn drop(&mut self) {
            self.0.release(1 << 20);
        }
    }
    let _release = ReleaseAll(&backend);
    let not_uploaded = || {
        let uploaded: Vec<u64> = backend.list().unwrap().into_iter().map(|(no, _)| no).collect();
        let names = storage.list_dir(Path::new(PACKS)).unwrap();
        names.iter().filter_map(|n| cairn_cas::pack::parse_pack_name(n)).filter(|no| !uploaded.contains(no)).count()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let ids = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut ids = Vec::new();
            for i in 0..60 {
                ids.push(store.put(&blob(i)).unwrap().id);
                tx.send(store.stats().unwrap().packs).unwrap();
            }
            ids
        });
        // With every upload held back, commits still go on: sealing a pack only queues it.
        let mut packs = 0;
        while packs < 3 {
            packs = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("puts wait for uploads");
        }
        assert!(backend.inner.list().unwrap().is_empty());
        // Released one at a time, the backlog of local packs not uploaded stays bounded: the
        // queue (4), the open pack, and a pack being sealed.
        // (The writer gets 20 ms without progress to run ahead before each check; the bound
        // holds whatever the timing.)
        loop {
            while rx.recv_timeout(std::time::Duration::from_millis(20)).is_ok() {}
            assert!(not_uploaded() <= 6, "{} packs not uploaded", not_uploaded());
            if writer.is_finished() {
                break;
            }
            backend.release(1);
        }
        writer.join().unwrap()
    });
    backend.release(1000);
    store.seal().unwrap();
    assert_eq!(not_uploaded(), 0);
    assert_eq!(backend.list().unwrap().len() as u64, store.stats().unwrap().packs);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
}

#[test]
fn gc_while_uploads_are_queued_collects_cleanly() {
    let storage = MemStorage::new();
    let backend = Controlled::new(&storage, 0);
    let (_db, store) = open_on(&storage, backend.clone()).unwrap();
    // Packs sealed and queued behind held-back uploads, half of their blobs released.
    let ids: Vec<Id> = (0..12).map(|i| store.put(&blob(i)).unwrap().id).collect();
    for id in ids.iter().step_by(2) {
        store.release(id).unwrap();
    }
    // The uploads are let go while gc waits for them.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(50));
            backend.release(1 << 20);
        });
        let r = store.gc(1.0).unwrap();
        assert!(r.packs_collected > 0, "{r:?}");
    });
    store.seal().unwrap();
    assert_eq!(backend.list().unwrap().len() as u64, store.stats().unwrap().packs);
    assert!(store.verify().unwrap().is_ok());
    for (i, id) in ids.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
}
