//! The write-ahead logs on disk: the next log is made ahead of the memtable switch that uses
//! it, a clean close deletes it, and recovery accepts it (empty, or cut short while being
//! made) after a log that ends torn.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc::channel;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use cairn_kv::internals::log::{LogTail, LogWriter, read_log};
use cairn_kv::storage::Storage;
use cairn_kv::{Db, FsStorage, MemStorage, Options, WriteBatch, WriteOptions};

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

/// The records of a log image, with how it ends.
fn read(data: &[u8]) -> (Vec<(u64, Vec<u8>)>, LogTail) {
    read_log(data, Path::new("x.log"), WAL_MAGIC).unwrap()
}

/// A write's log record numbered from `base` instead (its first 8 bytes).
fn with_base_seq(record: &[u8], base: u64) -> Vec<u8> {
    let mut r = record.to_vec();
    r[..8].copy_from_slice(&base.to_le_bytes());
    r
}

/// Writes a write-ahead log holding `records`, then its end record if `ended`.
fn forge_log(path: &Path, records: &[Vec<u8>], ended: bool) {
    let file = FsStorage.create(path).unwrap();
    let mut w = LogWriter::create(file, path.to_path_buf(), WAL_MAGIC).unwrap();
    for r in records {
        w.add_record(r).unwrap();
    }
    if ended {
        w.add_record(&[]).unwrap();
    }
    w.sync().unwrap();
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

    // A later log holding writes numbered past the torn record's: the torn log was not ended,
    // so a power cut cut it short while it was being ended and writes went on into the next
    // log (none of them synced: a synced write waits for the end). Replay stops at the torn
    // log's intact prefix, and the later log's writes go with its lost one.
    let (records, _) = read(&data[..end]);
    let renumbered: Vec<Vec<u8>> =
        records.iter().enumerate().map(|(i, (_, r))| with_base_seq(r, 101 + i as u64)).collect();
    let later = |d: &Path| d.join(format!("{:06}.log", spare_no + 10));
    let copy2 = copy_dir(dir.path());
    let used2 = copy2.path().join(used.file_name().unwrap());
    fs::write(&used2, &data[..end - 3]).unwrap();
    forge_log(&later(copy2.path()), &renumbered, false);
    {
        let db = Db::open(copy2.path(), opts.clone()).unwrap();
        assert_eq!(db.iter().count(), 99);
        assert!(!later(copy2.path()).exists(), "the later log's writes were dropped, so is the log");
    }
    assert_eq!(Db::open(copy2.path(), opts.clone()).unwrap().iter().count(), 99);

    // The same torn log with its end record after the damage was whole once: the damage is
    // real, and recovery refuses it, naming it.
    let copy3 = copy_dir(dir.path());
    let used3 = copy3.path().join(used.file_name().unwrap());
    forge_log(&used3, &records.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(), true);
    let mut damaged = fs::read(&used3).unwrap();
    let last_record = records.last().unwrap().0 as usize;
    damaged[last_record + 10] ^= 0x5A;
    fs::write(&used3, &damaged).unwrap();
    forge_log(&later(copy3.path()), &renumbered, false);
    match Db::open(copy3.path(), opts.clone()).err().expect("must not open") {
        cairn_kv::Error::Corruption { path, offset, .. } => assert_eq!((path, offset), (used3, last_record as u64)),
        other => panic!("expected corruption, got {other}"),
    }

    // Numbers that go back are damage too, whether or not the earlier log was ended.
    let copy4 = copy_dir(dir.path());
    fs::write(copy4.path().join(used.file_name().unwrap()), &data[..end - 3]).unwrap();
    forge_log(&later(copy4.path()), &records.iter().map(|(_, r)| r.clone()).collect::<Vec<_>>(), false);
    match Db::open(copy4.path(), opts).err().expect("must not open") {
        cairn_kv::Error::Corruption { path, .. } => assert_eq!(path, later(copy4.path())),
        other => panic!("expected corruption, got {other}"),
    }
}

/// Writes key `i` (a 200-byte value) without asking for a sync.
fn put_unsynced(db: &Db, i: u32) {
    let mut b = WriteBatch::new();
    b.put(format!("key{i:06}"), [b'v'; 200]).unwrap();
    db.write_opt(b, WriteOptions { sync: false }).unwrap();
}

/// Holds every thread that passes one failpoint until opened.
#[derive(Clone, Default)]
struct Gate(Arc<(Mutex<bool>, Condvar)>);

impl Gate {
    fn wait(&self) {
        let (open, cv) = &*self.0;
        let mut open = open.lock().unwrap();
        while !*open {
            open = cv.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.0.0.lock().unwrap() = true;
        self.0.1.notify_all();
    }
}

/// Opens its gates when dropped.
struct OpenOnDrop(Vec<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(Gate::open);
    }
}

/// A memtable switch ends the log it leaves, when a synced write went into it (its end
/// record, an empty record, after its records are durable), on a thread of its own: writes
/// that do not ask for a sync go on into the next log meanwhile, and a synced write waits for
/// the end.
#[test]
fn the_log_a_switch_leaves_is_ended_off_the_writers_path() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { memtable_size: 64 << 10, ..Options::default() };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    // The flush is held too: it would delete the log once its memtable is in a table.
    let (seal, flush) = (Gate::default(), Gate::default());
    let (reached_tx, reached) = channel::<()>();
    let reached_tx = Mutex::new(reached_tx);
    // Dropped before the engine, on a failed assertion too: the engine joins held threads.
    let _open_at_exit = OpenOnDrop(vec![seal.clone(), flush.clone()]);
    let (s2, f2) = (seal.clone(), flush.clone());
    db.set_failpoint_hook(Some(Arc::new(move |at: &str| match at {
        "wal.seal" => {
            let _ = reached_tx.lock().unwrap().send(());
            s2.wait();
        }
        "flush.build" => f2.wait(),
        _ => {}
    })));
    let put = |i: u32| put_unsynced(&db, i);
    // A synced write into the first log, then writes up to the switch, and no further: a
    // second switch would wait for the held end.
    db.put(b"synced first", b"1").unwrap();
    let mut i = 0u32;
    while db.stats().immutable_memtables == 0 {
        put(i);
        i += 1;
        assert!(i < 100_000, "the memtable never switched");
    }
    reached.recv_timeout(Duration::from_secs(20)).expect("the log the switch left is not being ended");
    // The end is held: writes go on, into the next log (fewer than a memtable's worth).
    for _ in 0..100 {
        put(i);
        i += 1;
    }
    let with_records: Vec<_> = logs(dir.path()).into_iter().filter(|l| l.2 > 0).collect();
    assert_eq!(with_records.len(), 2, "{with_records:?}");
    let old = &with_records[0].1;
    let last_payload = |p: &Path| read(&fs::read(p).unwrap()).0.last().unwrap().1.clone();
    assert!(!last_payload(old).is_empty(), "the log was ended while its end was held");
    let (in_old, in_new) = (with_records[0].2, with_records[1].2);
    assert!(in_new > 100, "{in_new} writes in the next log");
    assert_eq!(in_old + in_new, i as usize + 1, "every write is in one of the logs");
    let (tx, rx) = channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(db.put(b"synced", b"1").map_err(|e| e.to_string())).unwrap());
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "a synced write did not wait for the end of the log the switch left"
        );
        seal.open();
        assert_eq!(rx.recv_timeout(Duration::from_secs(20)), Ok(Ok(())));
    });
    let (records, tail) = read(&fs::read(old).unwrap());
    assert_eq!(tail, LogTail::Clean);
    assert!(records.last().unwrap().1.is_empty(), "the log does not end in its end record");
    assert!(records[..records.len() - 1].iter().all(|(_, r)| !r.is_empty()));
    flush.open();
    db.close().unwrap();
    let db = Db::open(dir.path(), opts).unwrap();
    assert_eq!(db.iter().count(), i as usize + 2);
}

/// A log that no synced write went into is left unended by the switch: none of its records is
/// synced (a power cut takes them, and recovery keeps a prefix of the writes) until a synced
/// write comes, which ends it first, so that the synced write's acknowledgement still covers
/// every earlier write. Once its memtable is flushed it is deleted unended; the data is in a
/// table, and a synced write after that has nothing earlier to end.
#[test]
fn a_log_no_synced_write_went_into_is_ended_only_when_a_synced_write_comes() {
    let storage = MemStorage::new();
    let opts = Options { memtable_size: 64 << 10, ..Options::default() };
    let db = Db::open_with_storage("/w", opts.clone(), Arc::new(storage.clone())).unwrap();
    let flush = Gate::default();
    let seals = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let _open_at_exit = OpenOnDrop(vec![flush.clone()]);
    let (f2, s2) = (flush.clone(), seals.clone());
    db.set_failpoint_hook(Some(Arc::new(move |at: &str| match at {
        "wal.seal" => {
            s2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        "flush.build" => f2.wait(),
        _ => {}
    })));
    let put = |i: u32| put_unsynced(&db, i);
    let mut i = 0u32;
    while db.stats().immutable_memtables == 0 {
        put(i);
        i += 1;
        assert!(i < 100_000, "the memtable never switched");
    }
    for _ in 0..100 {
        put(i);
        i += 1;
    }
    // A power cut now: nothing was synced, the log the switch left included.
    let cut = storage.clone_state();
    cut.crash();
    let recovered = Db::open_with_storage("/w", opts.clone(), Arc::new(cut)).unwrap();
    assert_eq!(recovered.iter().count(), 0, "unsynced writes were made durable");
    drop(recovered);
    assert_eq!(seals.load(std::sync::atomic::Ordering::SeqCst), 0, "the switch ended the log");

    // A synced write makes every earlier write durable: the log the switch left is ended.
    db.put(b"synced", b"1").unwrap();
    let cut = storage.clone_state();
    cut.crash();
    let recovered = Db::open_with_storage("/w", opts.clone(), Arc::new(cut)).unwrap();
    assert_eq!(recovered.iter().count(), i as usize + 1, "a write before the synced one was lost");
    assert_eq!(recovered.get(b"synced").unwrap().as_deref(), Some(&b"1"[..]));
    drop(recovered);

    // Unsynced writes again, across a switch, and their memtables flushed: the logs left
    // unended are deleted; a synced write and a reopen after a power cut lose nothing.
    flush.open();
    let before = db.stats().flushes;
    while db.stats().flushes < before + 2 {
        put(i);
        i += 1;
        assert!(i < 200_000, "the memtables were never flushed");
    }
    db.put(b"synced again", b"2").unwrap();
    let cut = storage.clone_state();
    cut.crash();
    let recovered = Db::open_with_storage("/w", opts.clone(), Arc::new(cut)).unwrap();
    assert_eq!(recovered.iter().count(), i as usize + 2);
    drop(recovered);
    db.close().unwrap();
    let db = Db::open_with_storage("/w", opts, Arc::new(storage)).unwrap();
    assert_eq!(db.iter().count(), i as usize + 2);
}
