//! Power cuts during ingest and during garbage collection: after reopening, every
//! acknowledged blob reads back intact, nothing dangles, reference counts hold.

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
