//! Damaged files give `Error::Corruption` naming the file and offset, never a panic or a wrong
//! answer.

use std::fs;
use std::path::{Path, PathBuf};

use cairn_kv::{Db, Error, Options};

use crate::copy_dir;

fn build(dir: &Path) {
    let db = Db::open(dir, Options { compression: cairn_kv::Compression::None, ..Options::small_for_tests() }).unwrap();
    for i in 0..2000u32 {
        db.put(format!("key{i:05}"), format!("value{i:05}")).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
}

fn files(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

fn flip(path: &Path, offset: usize) {
    let mut data = fs::read(path).unwrap();
    data[offset] ^= 0x5A;
    fs::write(path, data).unwrap();
}

#[test]
fn damaged_table_block_is_reported_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let sst = files(dir.path(), ".sst").into_iter().next().unwrap();
    flip(&sst, 10); // inside the first data block
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    let err = db.iter().find_map(|r| r.err()).expect("the scan must fail");
    match &err {
        Error::Corruption { path, .. } => assert_eq!(path, &sst),
        other => panic!("expected corruption, got {other}"),
    }
    assert!(err.to_string().contains(".sst"));
    assert!(db.verify().unwrap_err().is_corruption());
}

#[test]
fn every_damaged_byte_of_a_table_is_caught_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let sst = files(dir.path(), ".sst").into_iter().next().unwrap();
    let pristine = fs::read(&sst).unwrap();
    let len = pristine.len();
    let step = (len / 60).max(1);
    for offset in (0..len).step_by(step).chain(len - 48..len) {
        fs::write(&sst, &pristine).unwrap();
        flip(&sst, offset);
        // Opening may already fail (footer, index); otherwise reads fail or return the truth.
        let Ok(db) = Db::open(dir.path(), Options::small_for_tests()) else { continue };
        for (i, r) in db.iter().enumerate() {
            match r {
                Ok((k, v)) => {
                    let n: u32 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
                    assert_eq!(&v[..], format!("value{n:05}").as_bytes(), "offset {offset}: wrong value at item {i}");
                }
                Err(e) => {
                    assert!(e.is_corruption(), "offset {offset}: {e}");
                    break;
                }
            }
        }
    }
}

#[test]
fn damaged_manifest_or_current_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let manifest = files(dir.path(), "")
        .into_iter()
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("MANIFEST-"))
        .unwrap();
    let pristine = fs::read(&manifest).unwrap();
    flip(&manifest, 20); // inside the first (and only complete) record
    let err = Db::open(dir.path(), Options::default()).err().expect("must not open");
    assert!(err.is_corruption(), "{err}");
    fs::write(&manifest, &pristine).unwrap();
    fs::write(dir.path().join("CURRENT"), b"garbage").unwrap();
    let err = Db::open(dir.path(), Options::default()).err().expect("must not open");
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("CURRENT"));
}

#[test]
fn damaged_log_before_the_last_is_corruption_but_a_torn_tail_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { memtable_size: 1 << 30, ..Options::default() };
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i}"), b"v").unwrap();
        }
        // Leave the process without a clean shutdown: the log is synced, the memtable unflushed.
        std::mem::forget(db);
    }
    // Same-process reopen needs the lock released: copy the directory instead.
    let copy = copy_dir(dir.path());
    let log = files(copy.path(), ".log").into_iter().next().unwrap();
    // Torn tail: cut the last record in half. Everything before it must come back. (A log
    // that was not finished still has the zeros it reserved after its records; they go too.)
    let data = fs::read(&log).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    fs::write(&log, &data[..end - 3]).unwrap();
    {
        let db = Db::open(copy.path(), opts.clone()).unwrap();
        assert_eq!(db.iter().count(), 99);
    }
    // A damaged older log (a newer one holding writes exists) that was ended, here by a clean
    // close, is real corruption: its end record, written once its records were durable,
    // follows the damage.
    let closed = tempfile::tempdir().unwrap();
    {
        let db = Db::open(closed.path(), opts.clone()).unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i}"), b"v").unwrap();
        }
        db.close().unwrap();
    }
    let copy2 = copy_dir(closed.path());
    let log = files(copy2.path(), ".log").into_iter().next().unwrap();
    let name = log.file_name().unwrap().to_string_lossy().to_string();
    let no: u64 = name.trim_end_matches(".log").parse().unwrap();
    fs::copy(&log, copy2.path().join(format!("{:06}.log", no + 100))).unwrap();
    flip(&log, 40);
    let err = Db::open(copy2.path(), opts).err().expect("must not open");
    match err {
        Error::Corruption { path, offset, .. } => assert_eq!((path, offset), (log, 16)),
        other => panic!("expected corruption, got {other}"),
    }
}
