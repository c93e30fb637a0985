//! Opening never deletes or reuses a file it cannot account for: a missing or damaged
//! `CURRENT` or MANIFEST beside a database's files is an error naming them, and files the
//! recovered state does not explain are kept.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use cairn_kv::{Db, Error, MemStorage, Options, Storage};

/// Every file directly in `dir` with its content.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), fs::read(e.path()).unwrap()))
        .collect()
}

/// A database with tables and a log holding writes not in any table.
fn build(dir: &Path) {
    let db = Db::open(dir, Options { flush_on_close_bytes: 0, ..Options::small_for_tests() }).unwrap();
    for i in 0..500u32 {
        db.put(format!("key{i:04}"), format!("value{i}")).unwrap();
    }
    db.flush().unwrap();
    for i in 500..600u32 {
        db.put(format!("key{i:04}"), format!("value{i}")).unwrap();
    }
    db.close().unwrap();
}

fn names_with(files: &[String], suffix: &str) -> usize {
    files.iter().filter(|f| f.ends_with(suffix)).count()
}

#[test]
fn a_missing_current_refuses_to_open_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    fs::remove_file(dir.path().join("CURRENT")).unwrap();
    let before = snapshot(dir.path());
    assert!(before.keys().any(|n| n.ends_with(".sst")) && before.keys().any(|n| n.ends_with(".log")));
    for opts in [Options::default(), Options { create_if_missing: false, ..Options::default() }] {
        let err = Db::open(dir.path(), opts).err().expect("must not open");
        match &err {
            Error::NeedsRepair { dir: d, files, .. } => {
                assert_eq!(d, dir.path());
                assert!(names_with(files, ".sst") > 0, "{files:?}");
                assert!(names_with(files, ".log") > 0, "{files:?}");
                assert!(files.iter().any(|f| f.starts_with("MANIFEST-")), "{files:?}");
            }
            other => panic!("expected NeedsRepair, got {other}"),
        }
        assert!(err.to_string().contains("CURRENT"), "{err}");
        assert!(err.to_string().contains(".sst"), "{err}");
        assert_eq!(snapshot(dir.path()), before, "opening changed the directory");
    }
}

#[test]
fn a_damaged_or_missing_manifest_refuses_to_open_and_deletes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let manifest = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("MANIFEST-"))
        .unwrap();
    let pristine = fs::read(&manifest).unwrap();
    // Missing: CURRENT names a MANIFEST that is not there.
    fs::remove_file(&manifest).unwrap();
    let before = snapshot(dir.path());
    let err = Db::open(dir.path(), Options::default()).err().expect("must not open");
    assert!(matches!(&err, Error::NeedsRepair { files, .. } if names_with(files, ".sst") > 0), "{err}");
    assert!(err.is_corruption());
    assert_eq!(snapshot(dir.path()), before);
    // Damaged inside its first record.
    let mut damaged = pristine.clone();
    damaged[20] ^= 0x5A;
    fs::write(&manifest, &damaged).unwrap();
    let before = snapshot(dir.path());
    let err = Db::open(dir.path(), Options::default()).err().expect("must not open");
    assert!(matches!(&err, Error::NeedsRepair { files, .. } if names_with(files, ".log") > 0), "{err}");
    assert_eq!(snapshot(dir.path()), before);
    // Whole again: everything is there.
    fs::write(&manifest, &pristine).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), 600);
}

/// The MANIFEST names a table that is gone: an error naming it, not reads that fail later.
#[test]
fn a_missing_table_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let sst = snapshot(dir.path()).into_keys().find(|n| n.ends_with(".sst")).unwrap();
    fs::remove_file(dir.path().join(&sst)).unwrap();
    let before = snapshot(dir.path());
    let err = Db::open(dir.path(), Options::default()).err().expect("must not open");
    assert!(matches!(&err, Error::NeedsRepair { files, .. } if files == &vec![sst.clone()]), "{err}");
    assert_eq!(snapshot(dir.path()), before);
}

/// A directory holding only what an interrupted first open leaves (a MANIFEST describing an
/// empty database, no `CURRENT`) holds no data: it opens as a new database.
#[test]
fn an_interrupted_creation_opens_as_a_new_database() {
    let storage = MemStorage::new();
    let open = || Db::open_with_storage("/db", Options::small_for_tests(), Arc::new(storage.clone()));
    drop(open().unwrap());
    storage.remove_file(Path::new("/db/CURRENT")).unwrap();
    let db = open().unwrap();
    db.put(b"k", b"v").unwrap();
    drop(db);
    assert_eq!(open().unwrap().get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}

/// A table the recovered state does not explain (numbered at or above the MANIFEST's next
/// file number, not live) is set aside under `lost/`, never deleted, and no new file takes
/// its number.
#[test]
fn an_unaccounted_table_is_set_aside_not_deleted() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let (sst, data) = snapshot(dir.path()).into_iter().find(|(n, _)| n.ends_with(".sst")).unwrap();
    let no: u64 = sst.trim_end_matches(".sst").parse().unwrap();
    let foreign = format!("{:06}.sst", no + 1_000_000);
    fs::write(dir.path().join(&foreign), &data).unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), 600);
    let report = db.recovery_report();
    assert_eq!(report.set_aside, vec![dir.path().join("lost").join(&foreign)]);
    for i in 0..2000u32 {
        db.put(format!("more{i:05}"), [7u8; 100]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    assert_eq!(fs::read(dir.path().join("lost").join(&foreign)).unwrap(), data);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), 2600);
    assert!(db.recovery_report().set_aside.is_empty());
}

/// Files are created new: a file already at a path the engine would create is an error, never
/// overwritten.
#[test]
fn storage_creates_new_files_without_overwriting() {
    let dir = tempfile::tempdir().unwrap();
    let storages: Vec<(Arc<dyn Storage>, std::path::PathBuf)> = vec![
        (Arc::new(cairn_kv::FsStorage::new()), dir.path().join("f")),
        (Arc::new(MemStorage::new()), "/m/f".into()),
    ];
    for (s, p) in storages {
        let mut f = s.create_new(&p).unwrap();
        f.append(b"first").unwrap();
        f.sync().unwrap();
        drop(f);
        assert_eq!(s.create_new(&p).err().map(|e| e.kind()), Some(std::io::ErrorKind::AlreadyExists));
        assert_eq!(s.create_log(&p).err().map(|e| e.kind()), Some(std::io::ErrorKind::AlreadyExists));
        assert_eq!(s.read_all(&p).unwrap(), b"first");
    }
}

/// Small sizes, so that a short workload flushes and compacts.
fn busy_opts() -> Options {
    Options {
        memtable_size: 8 << 10,
        target_file_size: 4 << 10,
        level0_compaction_trigger: 2,
        max_bytes_for_level_base: 16 << 10,
        ..Options::small_for_tests()
    }
}

fn busy_workload(storage: &MemStorage) {
    let Ok(db) = Db::open_with_storage("/u", busy_opts(), Arc::new(storage.clone())) else { return };
    for i in 0..400u32 {
        if db.put(format!("key{:03}", (i * 37) % 150), format!("value-{i}-{}", "x".repeat(i as usize % 90))).is_err() {
            return;
        }
    }
}

/// Every file the engine makes is accounted for, whenever a power cut comes (in a flush, a
/// compaction, a MANIFEST roll or recovery itself): reopening never finds a file of its own
/// that it must set aside.
#[test]
fn power_cuts_leave_no_file_the_engine_cannot_account_for() {
    let probe = MemStorage::new();
    busy_workload(&probe);
    let total = probe.mutating_ops();
    let stride = (total / 150).max(1);
    let mut cut = 0;
    while cut < total {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        busy_workload(&storage);
        storage.crash();
        // A second cut while recovery writes its tables and MANIFEST.
        storage.fail_after(cut % 40);
        let _ = Db::open_with_storage("/u", busy_opts(), Arc::new(storage.clone()));
        storage.crash();
        let db = Db::open_with_storage("/u", busy_opts(), Arc::new(storage.clone()))
            .unwrap_or_else(|e| panic!("cut at op {cut}: reopen failed: {e}"));
        assert_eq!(db.recovery_report().set_aside, Vec::<std::path::PathBuf>::new(), "cut at op {cut}");
        assert!(!storage.exists(Path::new("/u/lost")), "cut at op {cut}");
        cut += stride;
    }
}
