//! Opening says what it discarded: a torn or damaged write-ahead log tail, a log whose writes
//! followed lost ones, a torn MANIFEST edit ([`cairn_kv::Db::recovery_report`]).

use std::fs;
use std::path::{Path, PathBuf};

use cairn_kv::internals::log::{LogWriter, read_log};
use cairn_kv::storage::Storage;
use cairn_kv::{Db, FsStorage, Options};

use crate::copy_dir;

const WAL_MAGIC: [u8; 8] = *b"CAIRNWAL";

fn opts() -> Options {
    Options { memtable_size: 1 << 30, ..Options::default() }
}

/// A directory whose log holds 100 synced writes that no table holds (the process left
/// without a clean close), and that log's path in a copy of it.
fn unflushed() -> (tempfile::TempDir, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}"), format!("value{i}")).unwrap();
    }
    std::mem::forget(db);
    let copy = copy_dir(dir.path());
    let log = log_with_records(copy.path());
    (dir, copy, log)
}

/// The directory's log that holds records.
fn log_with_records(dir: &Path) -> PathBuf {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .find(|p| read_log(&fs::read(p).unwrap(), p, WAL_MAGIC).unwrap().0.len() > 1)
        .unwrap()
}

/// Offsets of the log's records.
fn record_offsets(path: &Path) -> Vec<u64> {
    read_log(&fs::read(path).unwrap(), path, WAL_MAGIC).unwrap().0.iter().map(|(o, _)| *o).collect()
}

#[test]
fn a_log_cut_inside_its_last_record_is_reported() {
    let (_dir, copy, log) = unflushed();
    let offsets = record_offsets(&log);
    let data = fs::read(&log).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    fs::write(&log, &data[..end - 3]).unwrap();
    let db = Db::open(copy.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), 99);
    let report = db.recovery_report();
    let l = report.logs.iter().find(|l| l.path == log).expect("the log is reported");
    assert_eq!((l.records_replayed, l.records_discarded), (99, 1));
    assert_eq!(l.discarded_from, Some(offsets[99]));
    assert_eq!(l.bytes_discarded, end as u64 - 3 - offsets[99]);
    assert_eq!(l.reason.as_deref(), Some("truncated record"));
    assert!(!report.is_clean());
    assert_eq!(report.records_discarded(), 1);
    let warnings = report.warnings();
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains(&log.display().to_string()) && warnings[0].contains("1 records"), "{warnings:?}");
    drop(db);
    // The next open replays what the last one flushed: nothing is lost, nothing to report.
    let db = Db::open(copy.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), 99);
    assert!(db.recovery_report().is_clean(), "{:?}", db.recovery_report());
}

/// A damaged record in the middle of a log that was not ended: replay stops there, and the
/// intact records after it are counted among those discarded.
#[test]
fn a_damaged_record_in_the_middle_of_a_log_is_reported_with_the_records_after_it() {
    let (_dir, copy, log) = unflushed();
    let offsets = record_offsets(&log);
    let mut data = fs::read(&log).unwrap();
    data[offsets[40] as usize + 12] ^= 0x5A;
    fs::write(&log, &data).unwrap();
    let db = Db::open(copy.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), 40);
    let l = db.recovery_report().logs.into_iter().find(|l| l.path == log).unwrap();
    assert_eq!((l.records_replayed, l.records_discarded), (40, 60));
    assert_eq!(l.discarded_from, Some(offsets[40]));
    assert_eq!(l.reason.as_deref(), Some("checksum mismatch"));
}

/// A later log whose writes skip past a torn one's is dropped whole: reported with its records.
#[test]
fn a_log_dropped_after_a_torn_one_is_reported() {
    let (_dir, copy, log) = unflushed();
    let data = fs::read(&log).unwrap();
    let (records, _) = read_log(&data, &log, WAL_MAGIC).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    fs::write(&log, &data[..end - 3]).unwrap();
    // Ten records numbered past the torn one's (its writes were 1..=100).
    let no: u64 = log.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let later = copy.path().join(format!("{:06}.log", no + 50));
    let mut w = LogWriter::create(FsStorage.create_new(&later).unwrap(), later.clone(), WAL_MAGIC).unwrap();
    for (i, (_, r)) in records.iter().take(10).enumerate() {
        let mut r = r.clone();
        r[..8].copy_from_slice(&(102 + i as u64).to_le_bytes());
        w.add_record(&r).unwrap();
    }
    w.sync().unwrap();
    drop(w);
    let db = Db::open(copy.path(), opts()).unwrap();
    assert_eq!(db.iter().count(), 99);
    let report = db.recovery_report();
    let dropped = report.logs.iter().find(|l| l.path == later).expect("the later log is reported");
    assert_eq!((dropped.records_replayed, dropped.records_discarded), (0, 10));
    assert!(dropped.reason.as_deref().unwrap().contains(&log.display().to_string()), "{dropped:?}");
    assert_eq!(report.records_discarded(), 11);
}

/// A clean close and reopen discards nothing.
#[test]
fn a_clean_reopen_reports_nothing_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i:03}"), b"v").unwrap();
    }
    db.close().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    let report = db.recovery_report();
    assert!(report.is_clean() && report.warnings().is_empty(), "{report:?}");
    assert_eq!(report.logs.iter().map(|l| l.records_replayed).sum::<u64>(), 100);
}

/// A torn last MANIFEST edit (its write never completed) is ignored and reported.
#[test]
fn a_torn_manifest_edit_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let current = fs::read_to_string(dir.path().join("CURRENT")).unwrap();
    let manifest = dir.path().join(current.trim_end());
    let len = fs::metadata(&manifest).unwrap().len();
    let mut data = fs::read(&manifest).unwrap();
    data.extend_from_slice(&[9, 0, 0, 0, 1, 2]);
    fs::write(&manifest, &data).unwrap();
    let db = Db::open(dir.path(), opts()).unwrap();
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    let tail = db.recovery_report().manifest_tail.expect("reported");
    assert_eq!((tail.path, tail.offset, tail.bytes), (manifest, len, 6));
    assert_eq!(db.recovery_report().warnings().len(), 1);
}
