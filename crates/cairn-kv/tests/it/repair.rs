//! `Db::repair`: a database whose `CURRENT` or MANIFEST is gone, or whose tables or logs are
//! damaged, is rebuilt from the files present; every key of a readable table or log comes
//! back, and nothing is deleted that repair could not use.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn_kv::{Compression, Db, Error, MemStorage, Options, Storage, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// Small tables; level 0 is merged down only by `compact_all`, so that tables on several levels
/// hold different versions of a key.
fn opts() -> Options {
    Options {
        compression: Compression::None,
        flush_on_close_bytes: 0,
        memtable_size: 16 << 10,
        target_file_size: 8 << 10,
        ..crate::level0_kept()
    }
}

fn contents(db: &Db) -> Model {
    db.iter().map(|r| r.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Writes overwrites and deletes over 300 keys, flushed and compacted into several levels
/// (tables on different levels hold different versions of a key), then writes that stay in
/// the log; closes. Returns what the database holds.
fn build(dir: &Path, range_deletes: bool) -> Model {
    let db = Db::open(dir, opts()).unwrap();
    let mut model = Model::new();
    for round in 0..6u32 {
        for i in 0..900u32 {
            let k = format!("key{:03}", (i * 7 + round * 13) % 300).into_bytes();
            if (i + round) % 11 == 0 {
                db.delete(&k).unwrap();
                model.remove(&k);
            } else {
                let v = format!("v{round}-{i}-{}", "x".repeat((i % 40) as usize)).into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
            }
        }
        if range_deletes && round == 4 {
            db.delete_range(b"key100", b"key120").unwrap();
            model.retain(|k, _| !(k.as_slice() >= &b"key100"[..] && k.as_slice() < &b"key120"[..]));
        }
        db.flush().unwrap();
        if round == 1 || round == 3 {
            db.compact_all().unwrap();
        }
    }
    // Writes that only the log holds.
    let mut b = WriteBatch::new();
    for i in 0..50u32 {
        let k = format!("log{i:03}").into_bytes();
        b.put(&k, b"in the log").unwrap();
        model.insert(k, b"in the log".to_vec());
    }
    db.write(b).unwrap();
    db.delete(b"key001").unwrap();
    model.remove(&b"key001"[..]);
    let levels: Vec<usize> = db.stats().levels.iter().map(|l| l.tables).collect();
    assert!(levels[0] >= 2 && levels[1..].iter().sum::<usize>() >= 2, "{levels:?}");
    assert_eq!(contents(&db), model);
    db.close().unwrap();
    model
}

fn files(dir: &Path, pred: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file() && pred(&p.file_name().unwrap().to_string_lossy()))
        .collect();
    v.sort();
    v
}

fn manifests(dir: &Path) -> Vec<PathBuf> {
    files(dir, |n| n.starts_with("MANIFEST-"))
}

#[test]
fn without_current_the_manifest_is_used_and_every_key_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), true);
    fs::remove_file(dir.path().join("CURRENT")).unwrap();
    let err = Db::open(dir.path(), opts()).err().expect("must not open");
    assert!(matches!(&err, Error::NeedsRepair { files, .. } if files.iter().any(|f| f.ends_with(".sst"))), "{err}");
    let report = Db::repair(dir.path(), opts()).unwrap();
    assert_eq!(report.manifest_used.as_deref(), manifests(dir.path()).first().map(PathBuf::as_path));
    assert!(!report.tables_kept.is_empty() && report.tables_merged.is_empty());
    assert!(report.records_recovered > 0, "{report:?}");
    assert_eq!(report.range_tombstones, 1);
    assert!(!report.lost_data(), "{report:?}");
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(contents(&db), model);
    assert!(db.recovery_report().is_clean(), "{:?}", db.recovery_report());
    assert!(db.verify_detailed().unwrap().is_clean());
}

#[test]
fn without_any_manifest_the_tables_are_merged_and_every_key_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), false);
    fs::remove_file(dir.path().join("CURRENT")).unwrap();
    for m in manifests(dir.path()) {
        fs::remove_file(m).unwrap();
    }
    let tables = files(dir.path(), |n| n.ends_with(".sst"));
    let err = Db::open(dir.path(), opts()).err().expect("must not open");
    assert!(matches!(err, Error::NeedsRepair { .. }), "{err}");
    let report = Db::repair(dir.path(), opts()).unwrap();
    assert_eq!(report.manifest_used, None);
    assert_eq!(report.tables_merged, tables);
    assert!(report.tables_kept.is_empty() && report.tables_set_aside.is_empty());
    assert!(!report.notes.is_empty());
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(contents(&db), model);
    for (k, v) in &model {
        assert_eq!(db.get(k).unwrap().as_deref(), Some(v.as_slice()), "point read of {k:?}");
    }
    for k in [&b"key001"[..], b"nothere"] {
        assert_eq!(db.get(k).unwrap(), None);
    }
    // The merged tables are gone with that open; nothing else changed.
    for t in tables {
        assert!(!t.exists(), "{} left behind", t.display());
    }
    db.put(b"after", b"repair").unwrap();
    drop(db);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), model.len() + 1);
}

/// A damaged data block: the table's other blocks are kept (in a new table at its level), the
/// table itself is copied under `lost/` as it was, and the report names the keys lost.
#[test]
fn a_damaged_table_is_salvaged_set_aside_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let model = build(dir.path(), false);
    let sst = files(dir.path(), |n| n.ends_with(".sst")).into_iter().next().unwrap();
    let mut data = fs::read(&sst).unwrap();
    data[20] ^= 0x5A;
    fs::write(&sst, &data).unwrap();
    let report = Db::repair(dir.path(), opts()).unwrap();
    assert!(report.lost_data());
    assert_eq!(report.tables_salvaged.len(), 1, "{report:?}");
    let s = &report.tables_salvaged[0];
    assert_eq!(s.original, sst);
    assert_eq!(fs::read(&s.copied_to).unwrap(), data, "the damaged table is kept as it was");
    assert!(s.copied_to.starts_with(dir.path().join("lost")));
    assert_eq!(s.damaged.len(), 1);
    assert!(report.bytes_discarded >= s.damaged[0].len && s.damaged[0].len > 0);
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.verify_detailed().unwrap().is_clean());
    let got = contents(&db);
    let lost = &s.damaged[0];
    let in_lost_block =
        |k: &[u8]| lost.first_key.as_deref().is_none_or(|f| f <= k) && lost.last_key.as_deref().is_none_or(|l| k <= l);
    // Keys outside the lost block's range are exactly as they were; inside it, a key may be
    // missing or show an older version of itself, never anything else.
    for (k, v) in &model {
        if !in_lost_block(k) {
            assert_eq!(got.get(k), Some(v), "{k:?}");
        }
    }
    for k in got.keys() {
        assert!(model.contains_key(k) || in_lost_block(k), "{k:?} came back from nowhere");
    }
}

/// Unique keys: a damaged block's keys are gone after repair, every other key is there.
#[test]
fn a_damaged_block_loses_exactly_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..3000u32 {
        db.put(format!("key{i:05}"), format!("value{i:05}")).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let sst = files(dir.path(), |n| n.ends_with(".sst")).into_iter().nth(1).unwrap();
    let mut data = fs::read(&sst).unwrap();
    data[100] ^= 0x5A;
    fs::write(&sst, &data).unwrap();
    let report = Db::repair(dir.path(), opts()).unwrap();
    let [s] = &report.tables_salvaged[..] else { panic!("{report:?}") };
    let [lost] = &s.damaged[..] else { panic!("{s:?}") };
    assert!(s.entries_kept > 0 && s.replacement.is_some());
    let db = Db::open(dir.path(), opts()).unwrap();
    let mut missing = 0;
    for i in 0..3000u32 {
        let k = format!("key{i:05}");
        match db.get(&k).unwrap() {
            Some(v) => assert_eq!(v, format!("value{i:05}").as_bytes()),
            None => {
                missing += 1;
                let (first, last) = (lost.first_key.as_deref(), lost.last_key.as_deref());
                assert!(first.is_none_or(|f| f <= k.as_bytes()) && last.is_none_or(|l| k.as_bytes() <= l), "{k}");
            }
        }
    }
    assert!(missing > 0);
    assert_eq!(db.iter().count(), 3000 - missing);
}

/// A table that does not open (damaged footer) is set aside; the rest is intact.
#[test]
fn a_table_that_does_not_open_is_set_aside() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path(), false);
    let sst = files(dir.path(), |n| n.ends_with(".sst")).into_iter().last().unwrap();
    let mut data = fs::read(&sst).unwrap();
    let at = data.len() - 10;
    data[at] ^= 0x5A;
    fs::write(&sst, &data).unwrap();
    let report = Db::repair(dir.path(), opts()).unwrap();
    assert_eq!(report.tables_set_aside.len(), 1);
    let aside = &report.tables_set_aside[0];
    assert!(aside.unreadable);
    assert_eq!((aside.from.as_path(), fs::read(&aside.to).unwrap()), (sst.as_path(), data));
    assert!(report.lost_data());
    let db = Db::open(dir.path(), opts()).unwrap();
    assert!(db.verify_detailed().unwrap().is_clean());
    assert!(db.iter().count() > 0);
}

/// A log cut inside its last record: the intact records are replayed, the tail is reported,
/// and the log is copied under `lost/`.
#[test]
fn a_torn_log_is_replayed_up_to_the_damage_and_copied_aside() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options { memtable_size: 1 << 30, ..opts() }).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}"), b"v").unwrap();
    }
    std::mem::forget(db);
    let copy = crate::copy_dir(dir.path());
    let log = files(copy.path(), |n| n.ends_with(".log"))
        .into_iter()
        .find(|p| cairn_kv::internals::log::read_log(&fs::read(p).unwrap(), p, *b"CAIRNWAL").unwrap().0.len() > 1)
        .unwrap();
    let data = fs::read(&log).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    fs::write(&log, &data[..end - 3]).unwrap();
    fs::remove_file(copy.path().join("CURRENT")).unwrap();
    let report = Db::repair(copy.path(), opts()).unwrap();
    let l = report.logs_replayed.iter().find(|l| l.path == log).unwrap();
    assert_eq!((l.records_replayed, l.records_discarded), (99, 1));
    assert_eq!(report.records_recovered, 99);
    assert_eq!(report.logs_set_aside.len(), 1);
    assert_eq!(fs::read(&report.logs_set_aside[0].to).unwrap(), &data[..end - 3]);
    let db = Db::open(copy.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), 99);
}

/// Power cuts anywhere in a repair, with and without a MANIFEST: running it again ends with
/// every key back.
#[test]
fn a_repair_cut_short_can_be_run_again() {
    for without_manifest in [false, true] {
        let storage = MemStorage::new();
        let open = |s: &MemStorage| Db::open_with_storage("/r", opts(), Arc::new(s.clone()));
        let model = {
            let db = open(&storage).unwrap();
            let mut model = Model::new();
            for i in 0..1500u32 {
                let k = format!("key{:03}", (i * 7) % 400).into_bytes();
                let v = format!("value{i}").into_bytes();
                db.put(&k, &v).unwrap();
                model.insert(k, v);
                if i == 600 {
                    db.compact_all().unwrap();
                }
                if i == 1200 {
                    db.flush().unwrap();
                }
            }
            db.close().unwrap();
            model
        };
        for name in storage.list_dir(Path::new("/r")).unwrap() {
            if name == "CURRENT" || without_manifest && name.starts_with("MANIFEST-") {
                storage.remove_file(&Path::new("/r").join(name)).unwrap();
            }
        }
        let probe = storage.clone_state();
        let before = probe.mutating_ops();
        let report = Db::repair_with_storage("/r", opts(), Arc::new(probe.clone())).unwrap();
        assert_eq!(report.manifest_used.is_none(), without_manifest);
        let total = probe.mutating_ops() - before;
        assert!(report.records_recovered > 0);
        assert_eq!(contents(&open(&probe).unwrap()), model);
        assert!(total > 20, "{total}");
        for cut in 0..total {
            let s = storage.clone_state();
            s.fail_after(cut);
            assert!(Db::repair_with_storage("/r", opts(), Arc::new(s.clone())).is_err(), "cut at {cut} of {total}");
            s.crash();
            // Opening may work (the cut came after the new MANIFEST) or ask for repair.
            let db = match open(&s) {
                Ok(db) => db,
                Err(Error::NeedsRepair { .. }) => {
                    Db::repair_with_storage("/r", opts(), Arc::new(s.clone())).unwrap();
                    open(&s).unwrap()
                }
                Err(e) => panic!("cut at {cut}: {e}"),
            };
            assert_eq!(contents(&db), model, "cut at {cut} of {total}");
        }
    }
}

mod damage {
    //! Arbitrary damage to a database's files: opening never panics, repair always succeeds,
    //! and what it leaves opens, verifies clean, reads whole and opens again.

    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn pristine() -> &'static MemStorage {
        static BASE: OnceLock<MemStorage> = OnceLock::new();
        BASE.get_or_init(|| {
            let storage = MemStorage::new();
            cairn_kv::testing::layered_db(&storage, "/d").unwrap();
            storage
        })
    }

    /// One change to one file: flip a byte, cut the file, or remove it.
    #[derive(Clone, Debug)]
    enum Damage {
        Flip(prop::sample::Index, prop::sample::Index, u8),
        Cut(prop::sample::Index, prop::sample::Index),
        Remove(prop::sample::Index),
    }

    fn damage() -> impl Strategy<Value = Damage> {
        prop_oneof![
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1u8..=255)
                .prop_map(|(f, at, x)| Damage::Flip(f, at, x)),
            (any::<prop::sample::Index>(), any::<prop::sample::Index>()).prop_map(|(f, at)| Damage::Cut(f, at)),
            any::<prop::sample::Index>().prop_map(Damage::Remove),
        ]
    }

    fn rewrite(s: &MemStorage, path: &Path, data: &[u8]) {
        s.remove_file(path).unwrap();
        let mut f = s.create(path).unwrap();
        f.append(data).unwrap();
        f.sync().unwrap();
        s.sync_dir(Path::new("/d")).unwrap();
    }

    fn apply(s: &MemStorage, d: &Damage) {
        let names: Vec<String> = s.list_dir(Path::new("/d")).unwrap().into_iter().filter(|n| n != "LOCK").collect();
        if names.is_empty() {
            return;
        }
        let pick = |f: &prop::sample::Index| Path::new("/d").join(&names[f.index(names.len())]);
        match d {
            Damage::Flip(f, at, x) => {
                let p = pick(f);
                let mut data = s.contents(&p).unwrap();
                if !data.is_empty() {
                    let i = at.index(data.len());
                    data[i] ^= x;
                    rewrite(s, &p, &data);
                }
            }
            Damage::Cut(f, at) => {
                let p = pick(f);
                let data = s.contents(&p).unwrap();
                rewrite(s, &p, &data[..at.index(data.len() + 1)]);
            }
            Damage::Remove(f) => {
                s.remove_file(&pick(f)).unwrap();
                s.sync_dir(Path::new("/d")).unwrap();
            }
        }
    }

    proptest! {
        // 64 cases unless PROPTEST_CASES asks for more.
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
        ))]
        #[test]
        fn repair_recovers_from_any_damage(damages in proptest::collection::vec(damage(), 1..4)) {
            let s = pristine().clone_state();
            for d in &damages {
                apply(&s, d);
            }
            let opts = cairn_kv::testing::layered_options;
            let open = || Db::open_with_storage("/d", opts(), Arc::new(s.clone()));
            if let Ok(db) = open() {
                // Reads give answers or errors, never panics.
                for r in db.iter() {
                    if r.is_err() {
                        break;
                    }
                }
            }
            let report = Db::repair_with_storage("/d", opts(), Arc::new(s.clone()));
            let report = report.unwrap_or_else(|e| panic!("repair failed after {damages:?}: {e}"));
            let db = open().unwrap_or_else(|e| panic!("no open after repair ({damages:?}): {e}\n{report:?}"));
            prop_assert!(db.verify_detailed().unwrap().is_clean());
            let n = db.iter().inspect(|r| assert!(r.is_ok(), "{r:?}")).count();
            drop(db);
            prop_assert_eq!(open().unwrap().iter().count(), n);
        }
    }
}
