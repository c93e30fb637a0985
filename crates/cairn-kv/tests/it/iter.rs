use std::ops::Bound;

use crate::{keys, mem_db};

fn fill(db: &cairn_kv::Db) {
    for k in ["a", "b", "ba", "bb", "c", "d", "e"] {
        db.put(k, format!("v-{k}")).unwrap();
    }
}

#[test]
fn ranges_forward_and_reverse() {
    let (db, _) = mem_db();
    fill(&db);
    db.flush().unwrap();
    db.put(b"bz", b"new").unwrap(); // memtable and table mixed
    db.delete(b"d").unwrap();
    assert_eq!(keys(db.iter()), ["a", "b", "ba", "bb", "bz", "c", "e"]);
    assert_eq!(keys(db.iter().rev()), ["e", "c", "bz", "bb", "ba", "b", "a"]);
    assert_eq!(keys(db.range("b".."c")), ["b", "ba", "bb", "bz"]);
    assert_eq!(keys(db.range("b"..="c")), ["b", "ba", "bb", "bz", "c"]);
    assert_eq!(keys(db.range("b".."c").rev()), ["bz", "bb", "ba", "b"]);
    assert_eq!(keys(db.range::<&str, _>((Bound::Excluded("b"), Bound::Included("c")))), ["ba", "bb", "bz", "c"]);
    assert_eq!(keys(db.range::<&str, _>((Bound::Excluded("b"), Bound::Excluded("c"))).rev()), ["bz", "bb", "ba"]);
    assert_eq!(keys(db.range("x"..)), Vec::<String>::new());
    assert_eq!(keys(db.range(.."b")), ["a"]);
}

#[test]
fn seek_is_a_range_start() {
    let (db, _) = mem_db();
    fill(&db);
    // Seek to a key that does not exist: the next one comes first.
    let first = db.range("bc"..).next().unwrap().unwrap();
    assert_eq!(&first.0[..], b"c");
    assert_eq!(&first.1[..], b"v-c");
    let last_before = db.range(.."bc").next_back().unwrap().unwrap();
    assert_eq!(&last_before.0[..], b"bb");
}

#[test]
fn prefix_scans() {
    let (db, _) = mem_db();
    fill(&db);
    db.put([0xFFu8, 0xFF], b"x").unwrap();
    db.put([0xFFu8, 0xFF, 1], b"y").unwrap();
    assert_eq!(keys(db.prefix("b")), ["b", "ba", "bb"]);
    assert_eq!(keys(db.prefix("b").rev()), ["bb", "ba", "b"]);
    assert_eq!(db.prefix([0xFFu8, 0xFF]).count(), 2);
    assert_eq!(keys(db.prefix("zz")), Vec::<String>::new());
}

#[test]
fn both_ends_meet_without_repeating() {
    let (db, _) = mem_db();
    for i in 0..100u32 {
        db.put(format!("{i:03}"), b"v").unwrap();
    }
    db.flush().unwrap();
    let mut it = db.iter();
    let mut seen = Vec::new();
    loop {
        match it.next() {
            Some(kv) => seen.push(kv.unwrap().0),
            None => break,
        }
        match it.next_back() {
            Some(kv) => seen.push(kv.unwrap().0),
            None => break,
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 100);
}

#[test]
fn iterator_sees_a_consistent_view() {
    let (db, _) = mem_db();
    for i in 0..1000u32 {
        db.put(format!("{i:04}"), b"old").unwrap();
    }
    let it = db.iter();
    // Writes, flushes and compactions after the iterator was created stay invisible to it.
    for i in 0..1000u32 {
        db.put(format!("{i:04}"), b"new").unwrap();
    }
    db.put(b"zzzz", b"late").unwrap();
    db.flush().unwrap();
    db.compact_all().unwrap();
    let all: Vec<_> = it.map(|r| r.unwrap()).collect();
    assert_eq!(all.len(), 1000);
    assert!(all.iter().all(|(_, v)| &v[..] == b"old"));
}

#[test]
fn snapshots_pin_old_versions_through_compaction() {
    let (db, storage) = mem_db();
    db.put(b"k", b"v1").unwrap();
    db.put(b"gone", b"x").unwrap();
    let snap = db.snapshot();
    db.put(b"k", b"v2").unwrap();
    db.delete(b"gone").unwrap();
    db.delete_range(b"a", b"z").unwrap();
    for i in 0..2000u32 {
        db.put(format!("fill{i:05}"), vec![0u8; 64]).unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    assert_eq!(snap.get(b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(snap.get(b"gone").unwrap().as_deref(), Some(&b"x"[..]));
    assert_eq!(keys(snap.iter()), ["gone", "k"]);
    assert_eq!(db.get(b"k").unwrap(), None, "the range delete covers k");
    drop(snap);
    db.compact_all().unwrap();
    assert_eq!(db.get(b"gone").unwrap(), None);
    drop(db);
    let db = crate::reopen(&storage, cairn_kv::Options::small_for_tests());
    assert_eq!(db.get(b"k").unwrap(), None);
    assert_eq!(db.iter().count(), 2000);
}

#[test]
fn a_cold_seek_asks_for_every_tables_block_at_once_and_a_long_scan_reads_ahead() {
    use cairn_kv::{Db, MemStorage, Options};
    use std::sync::Arc;
    // Six overlapping level-0 tables of 1 KiB blocks, each holding every sixth key.
    let storage = MemStorage::new();
    let opts = Options { memtable_size: 1 << 20, block_size: 1024, block_cache_bytes: 8 << 20, ..crate::level0_kept() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    for t in 0..6u64 {
        for i in (t..3000).step_by(6) {
            db.put(format!("key{i:06}"), crate::noise(i, 100)).unwrap();
        }
        db.flush().unwrap();
    }
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap();
    assert_eq!(db.stats().levels[0].tables, 6);
    let asked = || storage.will_needs();
    let misses = || db.stats().block_cache_misses;

    // Cold: the seek names each table's block before reading any.
    let before = asked();
    assert_eq!(keys(db.range("key001000".."key001003")), ["key001000", "key001001", "key001002"]);
    assert!(asked() - before >= 6, "{} reads asked for", asked() - before);
    // Cached: nothing to ask for.
    let before = asked();
    assert_eq!(db.range("key001000".."key001003").count(), 3);
    assert_eq!(asked(), before);

    // A long forward scan, 100 keys of ~110 bytes from each table: its blocks come in a few
    // requests per table, not one per block.
    let (before, read_before) = (asked(), misses());
    assert_eq!(db.range("key002000".."key002600").count(), 600);
    let (requests, reads) = (asked() - before, misses() - read_before);
    assert!(reads >= 60, "{reads} blocks read");
    assert!(requests * 3 <= reads, "{requests} requests for {reads} blocks");
    // Backward scans do not read ahead.
    let before = asked();
    assert_eq!(db.range("key000100".."key000700").rev().count(), 600);
    assert_eq!(asked(), before, "requests going backward");
}

#[test]
fn a_cold_seek_asks_for_a_sorted_levels_next_blocks_with_its_own() {
    use cairn_kv::{Db, MemStorage, Options};
    use std::sync::Arc;
    // A sorted level of 1 KiB blocks holding every key, under one level-0 table.
    let storage = MemStorage::new();
    let opts = Options { memtable_size: 1 << 20, block_size: 1024, block_cache_bytes: 8 << 20, ..crate::level0_kept() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    for i in 0..3000u64 {
        db.put(format!("key{i:06}"), crate::noise(i, 100)).unwrap();
    }
    db.compact_all().unwrap();
    for i in (0..3000u64).step_by(500) {
        db.put(format!("key{i:06}"), crate::noise(i + 1, 100)).unwrap();
    }
    db.flush().unwrap();
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap();
    let stats = db.stats();
    assert_eq!(stats.levels[0].tables, 1);
    assert!(stats.levels[1..].iter().any(|l| l.tables > 0));
    let asked = || storage.will_needs();
    let misses = || db.stats().block_cache_misses;

    // Cold: 60 keys of ~110 bytes, seven blocks of the level. The seek asks for the level's
    // block and the 16 KiB after it together with the level-0 table's block; the scan then
    // steps through the level's blocks without asking for more.
    let (before, read_before) = (asked(), misses());
    let got = keys(db.range("key001010".."key001070"));
    assert_eq!(got.len(), 60);
    assert_eq!(got[0], "key001010");
    let (requests, reads) = (asked() - before, misses() - read_before);
    assert!(reads >= 7, "{reads} blocks read");
    assert_eq!(requests, 2, "{requests} requests for {reads} blocks");
}
