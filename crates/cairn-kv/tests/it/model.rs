//! The engine against a `BTreeMap` model: random operations, reopenings and power cuts.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cairn_kv::{Db, Iter, KvPair, MemStorage, Options, Snapshot, WriteBatch, WriteOptions};
use proptest::prelude::*;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    Put(u8, Vec<u8>, bool),
    Delete(u8, bool),
    DeleteRange(u8, u8),
    Batch(Vec<(u8, Option<Vec<u8>>)>),
    Get(u8),
    Scan(u8, u8, bool),
    TakeSnapshot,
    CheckSnapshots,
    Flush,
    /// Holds the flush thread (for up to 200 ms) until `ReleaseFlushes`, a flush, a
    /// compaction or a reopening: frozen memtables pile up and are flushed together.
    HoldFlushes,
    ReleaseFlushes,
    CompactAll,
    Reopen,
    Crash,
}

fn key(k: u8) -> Vec<u8> {
    format!("key{:03}", k % 60).into_bytes()
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..24),
        1 => (0u8..255, 1000usize..20_000).prop_map(|(b, n)| vec![b; n]),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (any::<u8>(), value(), any::<bool>()).prop_map(|(k, v, s)| Op::Put(k, v, s)),
        8 => (any::<u8>(), any::<bool>()).prop_map(|(k, s)| Op::Delete(k, s)),
        3 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::DeleteRange(a, b)),
        5 => proptest::collection::vec((any::<u8>(), proptest::option::of(value())), 1..8).prop_map(Op::Batch),
        15 => any::<u8>().prop_map(Op::Get),
        6 => (any::<u8>(), any::<u8>(), any::<bool>()).prop_map(|(a, b, r)| Op::Scan(a, b, r)),
        2 => Just(Op::TakeSnapshot),
        3 => Just(Op::CheckSnapshots),
        3 => Just(Op::Flush),
        2 => Just(Op::HoldFlushes),
        2 => Just(Op::ReleaseFlushes),
        2 => Just(Op::CompactAll),
        2 => Just(Op::Reopen),
        2 => Just(Op::Crash),
    ]
}

fn opts() -> Options {
    Options {
        memtable_size: 16 << 10,
        target_file_size: 16 << 10,
        max_immutable_memtables: 6,
        ..Options::small_for_tests()
    }
}

fn open(storage: &MemStorage, hold: &Arc<AtomicBool>) -> Db {
    let db = Db::open_with_storage("/m", opts(), Arc::new(storage.clone())).unwrap();
    let hold = hold.clone();
    db.set_failpoint_hook(Some(Arc::new(move |name: &str| {
        let start = Instant::now();
        while name == "flush.build" && hold.load(Ordering::Acquire) && start.elapsed() < Duration::from_millis(200) {
            std::thread::sleep(Duration::from_millis(1));
        }
    })));
    db
}

fn contents(db: &Db) -> Model {
    collected(db.iter())
}

/// Every entry `it` yields, copied out.
fn collected<C: FromIterator<(Vec<u8>, Vec<u8>)>>(it: impl Iterator<Item = cairn_kv::Result<KvPair>>) -> C {
    it.map(|r| r.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Every entry the borrowing walk of `it` passes, copied out.
fn walk_all(it: Iter) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut walked = Vec::new();
    it.for_each_ref(|k, v| {
        walked.push((k.to_vec(), v.to_vec()));
        Ok::<_, cairn_kv::Error>(true)
    })
    .unwrap();
    walked
}

fn wopts(sync: bool) -> WriteOptions {
    WriteOptions { sync }
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let storage = MemStorage::new();
    let hold = Arc::new(AtomicBool::new(false));
    let mut db = open(&storage, &hold);
    let mut model = Model::new();
    // States reached by writes not yet known durable (a power cut may roll back to any of them).
    let mut since_sync: Vec<Model> = Vec::new();
    let mut durable = Model::new();
    let mut snaps: Vec<(Snapshot, Model)> = Vec::new();
    for op in ops {
        match op {
            Op::Put(k, v, sync) => {
                db.write_opt(one(|b| b.put(key(k), &v)), wopts(sync)).unwrap();
                model.insert(key(k), v);
                note(&mut durable, &mut since_sync, &model, sync);
            }
            Op::Delete(k, sync) => {
                db.write_opt(one(|b| b.delete(key(k))), wopts(sync)).unwrap();
                model.remove(&key(k));
                note(&mut durable, &mut since_sync, &model, sync);
            }
            Op::DeleteRange(a, b) => {
                let (a, b) = (key(a), key(b));
                db.delete_range(&a, &b).unwrap();
                model.retain(|k, _| !(a <= *k && *k < b));
                note(&mut durable, &mut since_sync, &model, true);
            }
            Op::Batch(items) => {
                let mut b = WriteBatch::new();
                for (k, v) in &items {
                    match v {
                        Some(v) => {
                            b.put(key(*k), v).unwrap();
                            model.insert(key(*k), v.clone());
                        }
                        None => {
                            b.delete(key(*k)).unwrap();
                            model.remove(&key(*k));
                        }
                    }
                }
                db.write(b).unwrap();
                note(&mut durable, &mut since_sync, &model, true);
            }
            Op::Get(k) => {
                prop_assert_eq!(db.get(key(k)).unwrap().map(|v| v.to_vec()), model.get(&key(k)).cloned());
            }
            Op::Scan(a, b, rev) => {
                let (lo, hi) = (key(a).min(key(b)), key(a).max(key(b)));
                let expect: Vec<_> = model
                    .range::<Vec<u8>, _>((Bound::Included(&lo), Bound::Excluded(&hi)))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                let mut got: Vec<_> = if rev {
                    collected(db.range(lo.clone()..hi.clone()).rev())
                } else {
                    collected(db.range(lo.clone()..hi.clone()))
                };
                if rev {
                    got.reverse();
                }
                prop_assert_eq!(&got, &expect);
                // The borrowing walk sees the same entries, and stops where it is told to.
                let mut walked = Vec::new();
                let stop = a as usize % 4;
                db.range(lo.clone()..hi.clone())
                    .for_each_ref(|k, v| {
                        walked.push((k.to_vec(), v.to_vec()));
                        Ok::<_, cairn_kv::Error>(stop == 0 || walked.len() < stop)
                    })
                    .unwrap();
                let want = if stop == 0 { expect.len() } else { expect.len().min(stop) };
                prop_assert_eq!(&walked[..], &expect[..want]);
                // An excluded lower bound (its key's versions skipped), by both walks.
                // (Filtered, not ranged: a map's range panics on equal excluded bounds.)
                let excluded: Vec<_> =
                    model.iter().filter(|(k, _)| **k > lo && **k < hi).map(|(k, v)| (k.clone(), v.clone())).collect();
                let bounds = || (Bound::Excluded(lo.clone()), Bound::Excluded(hi.clone()));
                prop_assert_eq!(&collected::<Vec<_>>(db.range(bounds())), &excluded);
                prop_assert_eq!(&walk_all(db.range(bounds())), &excluded);
                // After the back end took the last entry, the walk stops before it.
                let mut it = db.range(lo.clone()..hi.clone());
                let last = it.next_back().map(|r| r.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec()));
                prop_assert_eq!(last.as_ref(), expect.last());
                prop_assert_eq!(&walk_all(it)[..], &expect[..expect.len().saturating_sub(1)]);
            }
            Op::TakeSnapshot => {
                if snaps.len() < 4 {
                    snaps.push((db.snapshot(), model.clone()));
                }
            }
            Op::CheckSnapshots => {
                for (s, m) in &snaps {
                    prop_assert_eq!(&collected::<Model>(s.iter()), m);
                    let mut walked = Model::new();
                    s.iter()
                        .for_each_ref(|k, v| Ok::<_, cairn_kv::Error>(walked.insert(k.to_vec(), v.to_vec()).is_none()))
                        .unwrap();
                    prop_assert_eq!(&walked, m);
                    // From a lower bound inside the snapshot's keys, by both walks.
                    if let Some(lo) = m.keys().nth(m.len() / 2) {
                        let want: Vec<_> = m.range(lo.clone()..).map(|(k, v)| (k.clone(), v.clone())).collect();
                        prop_assert_eq!(&collected::<Vec<_>>(s.range(lo.clone()..)), &want);
                        prop_assert_eq!(&walk_all(s.range(lo.clone()..)), &want);
                    }
                }
            }
            Op::HoldFlushes => hold.store(true, Ordering::Release),
            Op::ReleaseFlushes => hold.store(false, Ordering::Release),
            Op::Flush => {
                hold.store(false, Ordering::Release);
                db.flush().unwrap()
            }
            Op::CompactAll => {
                hold.store(false, Ordering::Release);
                db.compact_all().unwrap()
            }
            Op::Reopen => {
                hold.store(false, Ordering::Release);
                snaps.clear();
                drop(db);
                db = open(&storage, &hold);
                since_sync.clear();
                durable = model.clone();
                prop_assert_eq!(contents(&db), model.clone());
            }
            Op::Crash => {
                hold.store(false, Ordering::Release);
                snaps.clear();
                drop(db);
                storage.crash();
                db = open(&storage, &hold);
                let got = contents(&db);
                // Everything synced survives; unsynced writes survive as a prefix.
                let ok = got == durable || since_sync.contains(&got);
                prop_assert!(ok, "state after power cut is not a prefix of the writes");
                model = got;
                durable = model.clone();
                since_sync.clear();
            }
        }
    }
    for (s, m) in &snaps {
        let got: Model = collected(s.iter());
        prop_assert_eq!(&got, m);
    }
    prop_assert_eq!(contents(&db), model);
    Ok(())
}

fn one(f: impl FnOnce(&mut WriteBatch) -> cairn_kv::Result<()>) -> WriteBatch {
    let mut b = WriteBatch::new();
    f(&mut b).unwrap();
    b
}

/// Records the model state after a write: a synced write makes everything before it durable;
/// an unsynced one adds a state a power cut may roll back to.
fn note(durable: &mut Model, since_sync: &mut Vec<Model>, model: &Model, synced: bool) {
    if synced {
        *durable = model.clone();
        since_sync.clear();
    } else {
        since_sync.push(model.clone());
    }
}

proptest! {
    // 256 cases by default; PROPTEST_CASES raises it for longer runs.
    #[test]
    fn engine_matches_model(ops in proptest::collection::vec(op(), 1..150)) {
        run(ops)?;
    }
}
