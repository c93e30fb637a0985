use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use cairn_kv::{Error, with_retries};

use crate::mem_db;

#[test]
fn read_your_writes_and_commit() {
    let (db, _) = mem_db();
    db.put(b"a", b"1").unwrap();
    let mut t = db.transaction();
    assert_eq!(t.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    t.put(b"a", b"2").unwrap();
    t.delete(b"b").unwrap();
    assert_eq!(t.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]), "not visible before commit");
    t.commit().unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"2"[..]));
}

#[test]
fn conflicting_commit_fails_with_a_distinct_error() {
    let (db, _) = mem_db();
    db.put(b"balance", b"10").unwrap();
    let mut t1 = db.transaction();
    let mut t2 = db.transaction();
    assert_eq!(t1.get(b"balance").unwrap().as_deref(), Some(&b"10"[..]));
    assert_eq!(t2.get(b"balance").unwrap().as_deref(), Some(&b"10"[..]));
    t1.put(b"balance", b"11").unwrap();
    t2.put(b"balance", b"12").unwrap();
    t1.commit().unwrap();
    let err = t2.commit().unwrap_err();
    assert!(err.is_conflict(), "got {err}");
    assert!(matches!(err, Error::Conflict { .. }));
    assert_eq!(db.get(b"balance").unwrap().as_deref(), Some(&b"11"[..]), "the loser wrote nothing");
}

#[test]
fn tracked_keys_conflict_without_being_read() {
    let (db, _) = mem_db();
    db.put(b"def", b"1").unwrap();
    let mut t = db.transaction();
    t.track(b"def");
    t.put(b"x", b"1").unwrap();
    db.put(b"def", b"2").unwrap();
    assert!(t.commit().unwrap_err().is_conflict(), "a change of a tracked key after the snapshot");
    assert_eq!(db.get(b"x").unwrap(), None);
    let mut t = db.transaction();
    t.track(b"def");
    t.put(b"x", b"1").unwrap();
    t.commit().unwrap();
    assert_eq!(db.get(b"x").unwrap().as_deref(), Some(&b"1"[..]));
}

#[test]
fn blind_writes_and_range_deletes_conflict_too() {
    let (db, _) = mem_db();
    let mut t = db.transaction();
    assert_eq!(t.get(b"k").unwrap(), None);
    db.delete_range(b"a", b"z").unwrap();
    t.put(b"k", b"v").unwrap();
    assert!(t.commit().unwrap_err().is_conflict());

    let mut t = db.transaction();
    t.put(b"w", b"mine").unwrap();
    db.put(b"w", b"theirs").unwrap();
    assert!(t.commit().unwrap_err().is_conflict(), "write-write conflict");

    // Disjoint keys commit fine.
    let mut t = db.transaction();
    t.get(b"x").unwrap();
    t.put(b"x", b"1").unwrap();
    db.put(b"y", b"2").unwrap();
    t.commit().unwrap();
}

#[test]
fn concurrent_increments_are_serializable() {
    let (db, _) = mem_db();
    db.put(b"counter", 0u64.to_le_bytes()).unwrap();
    let conflicts = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            let conflicts = conflicts.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    with_retries(&db, 1000, |t| {
                        let v = t.get(b"counter")?.unwrap();
                        let n = u64::from_le_bytes(v[..8].try_into().unwrap());
                        t.put(b"counter", (n + 1).to_le_bytes())?;
                        conflicts.fetch_add(1, Ordering::Relaxed);
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let v = db.get(b"counter").unwrap().unwrap();
    assert_eq!(u64::from_le_bytes(v[..8].try_into().unwrap()), 200);
}

#[test]
fn conflicts_are_found_after_the_newer_write_is_flushed_and_compacted() {
    let (db, _) = mem_db();
    db.put(b"k", b"0").unwrap();
    db.put(b"other", b"0").unwrap();
    db.flush().unwrap();
    // Both keys live in a table older than the snapshot: a commit needs no table search.
    let mut quiet = db.transaction();
    quiet.get(b"k").unwrap();
    quiet.put(b"other", b"1").unwrap();
    quiet.commit().unwrap();

    let mut t = db.transaction();
    assert_eq!(t.get(b"k").unwrap().as_deref(), Some(&b"0"[..]));
    db.put(b"k", b"1").unwrap();
    db.flush().unwrap();
    t.put(b"unrelated", b"x").unwrap();
    assert!(t.commit().unwrap_err().is_conflict(), "the change is in a table, not a memtable");

    let mut t = db.transaction();
    t.get(b"k").unwrap();
    db.put(b"k", b"2").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert!(t.commit().unwrap_err().is_conflict(), "and after compaction");
    assert_eq!(db.get(b"unrelated").unwrap(), None);
}

#[test]
fn untracked_writes_are_not_validated_but_land_atomically() {
    let (db, _) = mem_db();
    let mut t1 = db.transaction();
    let mut t2 = db.transaction();
    t1.put_untracked(b"entry", b"1").unwrap();
    t1.put(b"row1", b"a").unwrap();
    t2.put_untracked(b"entry", b"2").unwrap();
    t2.delete_untracked(b"gone").unwrap();
    t2.put(b"row2", b"b").unwrap();
    assert_eq!(t2.get(b"entry").unwrap().as_deref(), Some(&b"2"[..]), "read your own untracked write");
    t1.commit().unwrap();
    t2.commit().unwrap();
    assert_eq!(db.get(b"entry").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(db.get(b"row1").unwrap().as_deref(), Some(&b"a"[..]));
    assert_eq!(db.get(b"row2").unwrap().as_deref(), Some(&b"b"[..]));

    // A tracked write of a key an untracked write also touched still conflicts.
    let mut t3 = db.transaction();
    let mut t4 = db.transaction();
    t3.put_untracked(b"entry", b"3").unwrap();
    t3.put(b"row1", b"c").unwrap();
    t4.put(b"entry", b"4").unwrap();
    t3.commit().unwrap();
    assert!(t4.commit().unwrap_err().is_conflict());
    assert_eq!(db.get(b"entry").unwrap().as_deref(), Some(&b"3"[..]));
}
