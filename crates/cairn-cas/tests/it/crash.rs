//! Power cuts during ingest and during garbage collection: after reopening, every
//! acknowledged blob reads back intact, nothing dangles, reference counts hold.

use std::path::Path;
use std::sync::Arc;

use cairn_cas::{Id, Store};
use cairn_kv::{Db, MemStorage, Options, Storage};

use crate::{config, noise};

fn try_open(storage: &MemStorage) -> Option<(Db, Store)> {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    let db = Db::open_with_storage("/d/kv", Options::small_for_tests(), s.clone()).ok()?;
    let store = Store::open(db.keyspace(cairn_kv::keyspace::CAS), s, "/d/packs", config()).ok()?;
    Some((db, store))
}

/// Blob `i` of the workload: some unique, some shared with others (dedup paths).
fn blob(i: u64) -> Vec<u8> {
    let mut v = noise(i % 7, 20_000); // shared prefix among blobs with equal i % 7
    v.extend_from_slice(&noise(1000 + i, 5_000 + (i as usize % 5) * 9_000));
    v
}

fn ingest(storage: &MemStorage, n: u64) -> Vec<(u64, Id)> {
    let mut acked = Vec::new();
    let Some((_db, store)) = try_open(storage) else { return acked };
    for i in 0..n {
        // Alternate single puts and multi-put batches.
        if i % 3 == 0 {
            let mut b = store.batch();
            let (Ok(x), Ok(y)) = (b.put(&blob(i)), b.put(&blob(i + 100))) else { break };
            if b.commit().is_err() {
                break;
            }
            acked.push((i, x.id));
            acked.push((i + 100, y.id));
        } else {
            match store.put(&blob(i)) {
                Ok(o) => acked.push((i, o.id)),
                Err(_) => break,
            }
        }
    }
    acked
}

fn check(storage: &MemStorage, acked: &[(u64, Id)], cut: u64) -> Store {
    let (_db, store) = try_open(storage).unwrap_or_else(|| panic!("cut {cut}: reopen failed"));
    for (i, id) in acked {
        let got = store.get(id).unwrap_or_else(|e| panic!("cut {cut}: acknowledged blob {i} lost: {e}"));
        assert_eq!(got, blob(*i), "cut {cut}: blob {i} differs");
    }
    let v = store.verify().unwrap();
    assert!(v.is_ok(), "cut {cut}: {v:?}");
    store
}

#[test]
fn power_cut_during_ingest() {
    let probe = MemStorage::new();
    let all = ingest(&probe, 45);
    assert_eq!(all.len(), 60);
    let total = probe.mutating_ops();
    assert!(total > 300, "the workload spans packs, flushes and compactions ({total} ops)");
    eprintln!("ingest workload: {total} mutating storage operations");
    let stride = std::env::var("CAIRN_CRASH_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or((total / 150).max(1));
    let mut cut = 0;
    while cut < total {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        let acked = ingest(&storage, 45);
        storage.crash();
        let store = check(&storage, &acked, cut);
        // The store keeps working after recovery.
        store.put(b"after the crash").unwrap();
        cut += stride;
    }
}

#[test]
fn power_cut_during_gc() {
    let base = MemStorage::new();
    let acked = ingest(&base, 30);
    let (keep, release): (Vec<_>, Vec<_>) = acked.iter().copied().partition(|(i, _)| i % 2 == 0);
    {
        let (_db, store) = try_open(&base).unwrap();
        for (_, id) in &release {
            store.release(id).unwrap();
        }
    }
    // Count the GC's operations on a copy.
    let probe = base.clone_state();
    let (_db, store) = try_open(&probe).unwrap();
    let before = probe.mutating_ops();
    store.gc(1.0).unwrap();
    let gc_ops = probe.mutating_ops() - before;
    drop((store, _db));
    assert!(gc_ops > 10);
    eprintln!("gc: {gc_ops} mutating storage operations, each one a cut point");
    for cut in 0..gc_ops + 5 {
        let storage = base.clone_state();
        {
            let (_db, store) = try_open(&storage).unwrap();
            storage.fail_after(cut);
            let _ = store.gc(1.0);
        }
        storage.crash();
        let store = check(&storage, &keep, cut);
        // A later collection finishes the job and reclaims orphans.
        store.gc(1.0).unwrap();
        let s = store.stats().unwrap();
        assert_eq!(s.stored_bytes, s.live_bytes, "cut {cut}: garbage left after a full gc");
        for (_, id) in &release {
            assert!(!store.contains(id).unwrap());
        }
        let v = store.verify().unwrap();
        assert!(v.is_ok(), "cut {cut}: {v:?}");
    }
}

/// The engine and the store with a memtable large enough that no flush (and no flush's syncs)
/// comes during the test.
fn try_open_big(storage: &MemStorage, pack_target: u64) -> Option<(Db, Store)> {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    let db = Db::open_with_storage("/d/kv", Options::default(), s.clone()).ok()?;
    let config = cairn_cas::StoreConfig { pack_target, ..config() };
    let store = Store::open(db.keyspace(cairn_kv::keyspace::CAS), s, "/d/packs", config).ok()?;
    Some((db, store))
}

fn open_big(storage: &MemStorage, pack_target: u64) -> (Db, Store) {
    try_open_big(storage, pack_target).expect("the store opens")
}

fn journal_rows(db: &Db) -> usize {
    db.keyspace(cairn_kv::keyspace::CAS).prefix(b"j/").count()
}

/// Small batches are made durable with one sync, the engine's (their pack bytes are journaled
/// in the same engine write); a power cut right after they return loses the pack bytes that
/// were never synced, and reopening puts them back from the journal.
#[test]
fn small_batches_sync_once_and_survive_a_power_cut() {
    let storage = MemStorage::new();
    let (db, store) = open_big(&storage, 64 << 20);
    // The first batch creates the pack: the file and its directory entry are synced.
    let mut acked = vec![(store.put(&noise(1, 3000)).unwrap().id, noise(1, 3000))];
    // Each small put syncs the engine's log and not the pack. (The engine also makes its next
    // log ahead of time on a thread of its own and syncs it once, at a moment the test does
    // not control: one sync more in all, counted apart.)
    let packs = Path::new("/d/packs");
    let (all, in_packs) = (storage.syncs(), storage.syncs_under(packs));
    for i in 0..40u64 {
        let data = noise(100 + i, 1000 + i as usize * 37);
        let before = storage.syncs();
        let id = store.put(&data).unwrap().id;
        assert!(storage.syncs() > before, "put {i} synced the log");
        assert_eq!(storage.syncs_under(packs), in_packs, "put {i} did not sync the pack");
        acked.push((id, data));
    }
    // A batch of several small blobs: one sync too.
    let mut b = store.batch();
    for i in 0..5u64 {
        let data = noise(200 + i, 700);
        acked.push((b.put(&data).unwrap().id, data));
    }
    b.commit().unwrap();
    assert_eq!(storage.syncs_under(packs), in_packs, "a batch of small blobs did not sync the pack");
    let syncs = storage.syncs() - all;
    assert!((41..=42).contains(&syncs), "41 small commits made {syncs} syncs");
    assert_eq!(journal_rows(&db), 41);
    storage.crash();
    drop((store, db));
    let (db, store) = open_big(&storage, 64 << 20);
    assert_eq!(journal_rows(&db), 0, "the journal was replayed and retired");
    for (i, (id, data)) in acked.iter().enumerate() {
        let got = store.get(id).unwrap_or_else(|e| panic!("blob {i} lost: {e}"));
        assert_eq!(&got, data, "blob {i}");
    }
    let v = store.verify().unwrap();
    assert!(v.is_ok(), "{v:?}");
    // Closing syncs the pack and retires the journal. (A process starts a new pack, whose
    // first batch syncs it.)
    store.put(&noise(300, 2000)).unwrap();
    assert_eq!(journal_rows(&db), 0);
    store.put(&noise(301, 2000)).unwrap();
    assert_eq!(journal_rows(&db), 1);
    drop(store);
    assert_eq!(journal_rows(&db), 0, "a closed store leaves no journal");
}

/// The journal stays bounded: the batch that would take it past its limit syncs the pack and
/// deletes the rows, as does a batch too large to journal.
#[test]
fn the_journal_is_retired_by_size_and_by_large_batches() {
    let storage = MemStorage::new();
    let (db, store) = open_big(&storage, 64 << 20);
    store.put(&noise(1, 3000)).unwrap();
    let (mut most, mut retired, mut ids) = (0, 0, Vec::new());
    for i in 0..300u64 {
        let before = journal_rows(&db);
        ids.push(store.put(&noise(10 + i, 20 << 10)).unwrap().id);
        let now = journal_rows(&db);
        most = most.max(now);
        if now < before {
            retired += 1;
        }
    }
    assert!(most <= 205, "at most 4 MiB of 20 KiB batches are journaled ({most} rows)");
    assert!(retired >= 1, "the journal was retired on the way");
    // A large batch syncs its pack instead of journaling, and retires the rows before it.
    store.put(&noise(5000, 1 << 20)).unwrap();
    assert_eq!(journal_rows(&db), 0);
    storage.crash();
    drop((store, db));
    let (_db, store) = open_big(&storage, 64 << 20);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), noise(10 + i as u64, 20 << 10), "blob {i}");
    }
    assert!(store.verify().unwrap().is_ok());
}

/// A power cut at every storage operation of the replay itself: the journal is replayed
/// again by the next open, and nothing acknowledged is lost.
#[test]
fn power_cut_during_journal_replay() {
    let base = MemStorage::new();
    let mut acked = Vec::new();
    {
        let (_db, store) = open_big(&base, 64 << 20);
        for i in 0..12u64 {
            let data = noise(400 + i, 1500);
            acked.push((store.put(&data).unwrap().id, data));
        }
        base.crash();
    }
    let probe = base.clone_state();
    let before = probe.mutating_ops();
    drop(open_big(&probe, 64 << 20));
    let replay_ops = probe.mutating_ops() - before;
    assert!(replay_ops > 3, "the replay writes ({replay_ops} operations)");
    for cut in 0..replay_ops + 2 {
        let storage = base.clone_state();
        storage.fail_after(cut);
        drop(try_open_big(&storage, 64 << 20));
        storage.crash();
        let (db, store) = open_big(&storage, 64 << 20);
        for (i, (id, data)) in acked.iter().enumerate() {
            let got = store.get(id).unwrap_or_else(|e| panic!("cut {cut}: blob {i} lost: {e}"));
            assert_eq!(&got, data, "cut {cut}: blob {i}");
        }
        assert!(store.verify().unwrap().is_ok(), "cut {cut}");
        assert_eq!(journal_rows(&db), 0, "cut {cut}");
    }
}
