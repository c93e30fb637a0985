//! The write-ahead logs on disk: the next log is made ahead of the memtable switch that uses
//! it, a clean close deletes it, and recovery accepts it (empty, or cut short while being
//! made) after a log that ends torn.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_kv::log::{LogTail, read_log};
use cairn_kv::{Db, Options};

use crate::copy_dir;

const WAL_MAGIC: [u8; 8] = *b"CAIRNWAL";

/// The directory's logs, oldest first, with their record counts and how each ends.
fn logs(dir: &Path) -> Vec<(u64, PathBuf, usize, LogTail)> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let no = p.file_name()?.to_str()?.strip_suffix(".log")?.parse::<u64>().ok()?;
            let data = fs::read(&p).ok()?;
            let (records, tail) = read_log(&data, &p, WAL_MAGIC).unwrap();
            Some((no, p, records.len(), tail))
        })
        .collect();
    v.sort_by_key(|l| l.0);
    v
}

/// Polls until the newest log holds no record, ends clean, and is numbered above every other
/// (the spare is made on a thread of its own); returns its number.
fn wait_for_spare(dir: &Path) -> u64 {
    let t = Instant::now();
    loop {
        let l = logs(dir);
        if l.len() >= 2 && l.last().is_some_and(|(_, _, n, tail)| *n == 0 && *tail == LogTail::Clean) {
            return l.last().unwrap().0;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "no spare log appeared: {:?}", l);
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_next_log_is_made_ahead_used_by_the_switch_and_deleted_by_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { memtable_size: 64 << 10, ..Options::default() };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let spare = wait_for_spare(dir.path());
    // Fill the memtable past its size: the next write switches to the spare.
    let mut i = 0u32;
    while logs(dir.path()).iter().all(|(no, _, n, _)| *no != spare || *n == 0) {
        for _ in 0..20 {
            db.put(format!("key{i:06}"), [b'v'; 200]).unwrap();
            i += 1;
        }
        assert!(i < 100_000, "the memtable never switched to log {spare}");
    }
    // The switch started another spare, numbered above the log it put in use.
    let next = wait_for_spare(dir.path());
    assert!(next > spare);
    db.put(b"last", b"1").unwrap();
    db.close().unwrap();
    let left = logs(dir.path());
    assert!(left.iter().all(|(_, _, n, _)| *n > 0), "a clean close leaves no empty log: {left:?}");
    assert!(left.iter().all(|(no, ..)| *no != next));
    let db = Db::open(dir.path(), opts).unwrap();
    assert_eq!(db.iter().count(), i as usize + 1);
}

#[test]
fn a_torn_log_followed_by_logs_without_records_recovers_its_intact_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { memtable_size: 1 << 30, ..Options::default() };
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..100u32 {
            db.put(format!("k{i:03}"), b"v").unwrap();
        }
        wait_for_spare(dir.path());
        // No clean shutdown: the log keeps its reserved zeros and the spare stays.
        std::mem::forget(db);
    }
    let copy = copy_dir(dir.path());
    let l = logs(copy.path());
    let (used_no, used, records, _) = l.iter().find(|(_, _, n, _)| *n > 0).cloned().unwrap();
    assert_eq!(records, 100);
    // The log in use is cut inside its last record (a power cut before the page reached the
    // disk), the spare after it is whole and empty, and a later one was cut short while being
    // made (a few bytes of header).
    let data = fs::read(&used).unwrap();
    let end = data.iter().rposition(|&b| b != 0).unwrap() + 1;
    fs::write(&used, &data[..end - 3]).unwrap();
    let spare_no = l.last().unwrap().0;
    assert!(spare_no > used_no);
    fs::write(copy.path().join(format!("{:06}.log", spare_no + 10)), &data[..5]).unwrap();
    {
        let db = Db::open(copy.path(), opts.clone()).unwrap();
        assert_eq!(db.iter().count(), 99);
        db.put(b"after", b"1").unwrap();
    }
    let db = Db::open(copy.path(), opts.clone()).unwrap();
    assert_eq!(db.iter().count(), 100);
    drop(db);

    // A record in any later log makes the torn one real damage: recovery refuses it.
    let copy2 = copy_dir(dir.path());
    let used2 = copy2.path().join(used.file_name().unwrap());
    fs::write(&used2, &data[..end - 3]).unwrap();
    fs::write(copy2.path().join(format!("{:06}.log", spare_no + 10)), &data[..end]).unwrap();
    let err = Db::open(copy2.path(), opts).err().expect("must not open");
    match err {
        cairn_kv::Error::Corruption { path, .. } => assert_eq!(path, used2),
        other => panic!("expected corruption, got {other}"),
    }
}
