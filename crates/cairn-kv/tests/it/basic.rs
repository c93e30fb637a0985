use std::sync::Arc;

use cairn_kv::{Db, Error, MAX_KEY_LEN, MAX_VALUE_LEN, MemStorage, Options, WriteBatch, WriteOptions};

use crate::{mem_db, noise, reopen};

#[test]
fn put_get_delete() {
    let (db, _) = mem_db();
    assert_eq!(db.get(b"a").unwrap(), None);
    db.put(b"a", b"1").unwrap();
    db.put(b"b", b"2").unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
    db.put(b"a", b"3").unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"3"[..]));
    db.delete(b"a").unwrap();
    assert_eq!(db.get(b"a").unwrap(), None);
    assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    // Empty keys and values are ordinary bytes.
    db.put(b"", b"").unwrap();
    assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b""[..]));
}

#[test]
fn write_batch_is_atomic_and_ordered() {
    let (db, storage) = mem_db();
    let mut b = WriteBatch::new();
    b.put(b"x", b"1").unwrap();
    b.put(b"y", b"2").unwrap();
    b.delete(b"x").unwrap();
    b.put(b"z", b"3").unwrap();
    db.write(b).unwrap();
    assert_eq!(db.get(b"x").unwrap(), None, "later operations in a batch win");
    assert_eq!(db.get(b"y").unwrap().as_deref(), Some(&b"2"[..]));
    drop(db);
    let db = reopen(&storage, Options::small_for_tests());
    assert_eq!(db.get(b"x").unwrap(), None);
    assert_eq!(db.get(b"z").unwrap().as_deref(), Some(&b"3"[..]));
}

#[test]
fn delete_range_hides_keys_in_memtable_and_tables() {
    let (db, storage) = mem_db();
    for i in 0..200u32 {
        db.put(format!("k{i:03}"), b"v").unwrap();
    }
    db.flush().unwrap();
    db.delete_range(b"k050", b"k150").unwrap();
    db.put(b"k100", b"new").unwrap(); // written after the range delete: visible
    let check = |db: &Db| {
        assert!(db.get(b"k049").unwrap().is_some());
        assert!(db.get(b"k050").unwrap().is_none());
        assert!(db.get(b"k149").unwrap().is_none());
        assert!(db.get(b"k150").unwrap().is_some());
        assert_eq!(db.get(b"k100").unwrap().as_deref(), Some(&b"new"[..]));
        let n = db.iter().count();
        assert_eq!(n, 200 - 100 + 1);
        assert_eq!(db.iter().rev().count(), n);
    };
    check(&db);
    db.flush().unwrap();
    check(&db);
    db.compact_all().unwrap();
    check(&db);
    drop(db);
    let db = reopen(&storage, Options::small_for_tests());
    check(&db);
    db.compact_all().unwrap();
    check(&db);
    assert_eq!(db.stats().range_tombstones, 0, "compaction applied and forgot the tombstone");
}

#[test]
fn key_and_value_limits() {
    let (db, _) = mem_db();
    let big_key = vec![7u8; MAX_KEY_LEN];
    db.put(&big_key, b"v").unwrap();
    assert!(matches!(db.put(vec![7u8; MAX_KEY_LEN + 1], b"v"), Err(Error::KeyTooLarge { .. })));
    let big_value = vec![9u8; MAX_VALUE_LEN];
    db.put(b"big", &big_value).unwrap();
    assert!(matches!(db.put(b"big2", vec![0u8; MAX_VALUE_LEN + 1]), Err(Error::ValueTooLarge { .. })));
    assert_eq!(db.get(&big_key).unwrap().as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get(b"big").unwrap().map(|v| v.len()), Some(MAX_VALUE_LEN));
    db.flush().unwrap();
    let v = db.get(b"big").unwrap().unwrap();
    assert!(v.len() == MAX_VALUE_LEN && v.iter().all(|&b| b == 9));
}

#[test]
fn data_survives_reopen_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
        for i in 0..3000u32 {
            db.put(format!("key{i:05}"), format!("value{i}")).unwrap();
        }
        db.delete(b"key00010").unwrap();
        db.close().unwrap();
    }
    let db = Db::open(dir.path(), Options::small_for_tests()).unwrap();
    assert_eq!(db.get(b"key02999").unwrap().as_deref(), Some(&b"value2999"[..]));
    assert_eq!(db.get(b"key00010").unwrap(), None);
    assert_eq!(db.iter().count(), 2999);
    assert!(db.stats().levels.iter().any(|l| l.tables > 0), "data reached tables");
}

/// Bytes of write-ahead log in `dir` (each log starts with a header of its own).
fn log_bytes(dir: &std::path::Path) -> u64 {
    let logs = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "log"));
    logs.map(|e| e.metadata().unwrap().len()).sum()
}

#[test]
fn a_clean_close_flushes_a_large_memtable_and_keeps_a_small_one_in_the_log() {
    let opts = |min| Options { memtable_size: 64 << 20, flush_on_close_bytes: min, ..Options::default() };
    let write = |db: &Db, n: u32| {
        for i in 0..n {
            db.put(format!("key{i:05}"), vec![i as u8; 100]).unwrap();
        }
    };
    for (min, n, flushes) in [(64 << 10, 2000, true), (64 << 10, 100, false), (0, 2000, false)] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts(min)).unwrap();
        write(&db, n);
        let held = db.stats().memtable_bytes;
        assert_eq!(held >= 64 << 10, n == 2000, "{held} bytes in the memtable");
        db.close().unwrap();
        // Only the logs' headers remain when the close flushed; the writes otherwise.
        assert_eq!(log_bytes(dir.path()) < 100, flushes, "threshold {min}, {n} keys");
        let db = Db::open(dir.path(), opts(min)).unwrap();
        if flushes {
            // (Otherwise the replayed memtable may be flushed in the background by now.)
            assert!(db.stats().levels.iter().any(|l| l.tables > 0), "the close wrote a table");
        }
        assert_eq!(db.iter().count(), n as usize);
        assert_eq!(db.get(format!("key{:05}", n - 1)).unwrap().as_deref(), Some(&vec![(n - 1) as u8; 100][..]));
    }
}

#[test]
fn second_open_is_refused_while_locked() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(Db::open(dir.path(), Options::default()), Err(Error::Locked(_))));
    drop(db);
    Db::open(dir.path(), Options::default()).unwrap();
}

#[test]
fn group_commit_shares_fsyncs() {
    let storage = MemStorage::new();
    storage.set_sync_delay(std::time::Duration::from_millis(2));
    let db = Db::open_with_storage("/db", Options::default(), Arc::new(storage.clone())).unwrap();
    let before = storage.syncs();
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..50 {
                    db.put(format!("t{t}-{i}"), b"v").unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let syncs = storage.syncs() - before;
    assert!(syncs < 400 / 2, "400 synced writes took {syncs} fsyncs; group commit should share them");
    assert_eq!(db.iter().count(), 400);
}

/// The fsyncs `storage` has made once the spare log a new engine makes ahead, on a thread of
/// its own, is made and synced: two logs in `/db`, and no sync for 100 ms after that.
/// Counted before then, that sync could land among the writes a test makes.
fn syncs_once_the_spare_log_is_made(storage: &MemStorage) -> u64 {
    use cairn_kv::Storage;
    let t = std::time::Instant::now();
    let logs = || storage.list_dir(std::path::Path::new("/db")).unwrap().iter().filter(|n| n.ends_with(".log")).count();
    while logs() < 2 {
        assert!(t.elapsed() < std::time::Duration::from_secs(20), "no spare log appeared");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let mut syncs = storage.syncs();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let now = storage.syncs();
        if now == syncs {
            return now;
        }
        syncs = now;
    }
}

#[test]
fn unsynced_writes_do_not_fsync() {
    let (db, storage) = mem_db();
    // Not `storage.syncs()` at once: the spare log's sync landed among the writes below now
    // and then (4 syncs counted against 3).
    let before = syncs_once_the_spare_log_is_made(&storage);
    for i in 0..100 {
        db.write_opt(batch_of(i), WriteOptions::no_sync()).unwrap();
    }
    assert_eq!(storage.syncs(), before);
    db.put(b"synced", b"1").unwrap();
    assert!(storage.syncs() > before);
}

fn batch_of(i: u32) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(format!("k{i}"), b"v").unwrap();
    b
}

#[test]
fn fsync_failure_poisons_the_engine() {
    let (db, storage) = mem_db();
    db.put(b"before", b"1").unwrap();
    storage.set_sync_failure(true);
    assert!(db.put(b"during", b"2").is_err());
    storage.set_sync_failure(false);
    let err = db.put(b"after", b"3").unwrap_err();
    assert!(matches!(err, Error::Poisoned(_)), "got {err}");
    assert!(err.to_string().contains("reopen"));
    // Reads still work.
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    drop(db);
    storage.crash();
    let db = reopen(&storage, Options::small_for_tests());
    assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
    db.put(b"after", b"3").unwrap();
}

#[test]
fn background_flush_and_block_cache_budget() {
    let storage = MemStorage::new();
    let opts = Options { block_cache_bytes: 256 << 10, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts, Arc::new(storage.clone())).unwrap();
    let value = vec![b'x'; 300];
    for i in 0..5000u32 {
        db.write_opt(
            {
                let mut b = WriteBatch::new();
                b.put(format!("{i:08}"), &value).unwrap();
                b
            },
            WriteOptions::no_sync(),
        )
        .unwrap();
    }
    db.wait_for_compactions().unwrap();
    for i in (0..5000u32).step_by(7) {
        assert!(db.get(format!("{i:08}")).unwrap().is_some());
    }
    let s = db.stats();
    assert!(s.flushes > 0);
    assert!(s.block_cache_bytes <= 256 << 10, "cache holds {} bytes", s.block_cache_bytes);
    assert!(s.block_cache_hits + s.block_cache_misses > 0);
}

/// Writes 3,000 incompressible 300-byte values over several flushes and compactions, then
/// reads every key; returns the block-cache misses of those reads and the final stats.
fn write_then_read_all(prepopulate: bool) -> (u64, cairn_kv::Stats) {
    let opts =
        Options { block_cache_bytes: 16 << 20, prepopulate_block_cache: prepopulate, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts, Arc::new(MemStorage::new())).unwrap();
    for round in 0..3u64 {
        for i in 0..1000u32 {
            let mut b = WriteBatch::new();
            b.put(format!("{i:08}"), noise(round * 1000 + u64::from(i), 300)).unwrap();
            db.write_opt(b, WriteOptions::no_sync()).unwrap();
        }
        if round == 1 {
            db.wait_for_compactions().unwrap();
        }
    }
    db.compact_all().unwrap();
    let before = db.stats().block_cache_misses;
    for i in 0..1000u32 {
        assert!(db.get(format!("{i:08}")).unwrap().is_some());
    }
    let s = db.stats();
    (s.block_cache_misses - before, s)
}

#[test]
fn new_tables_are_cached_as_they_are_written_and_deleted_tables_leave_the_cache() {
    let (misses, s) = write_then_read_all(true);
    assert!(s.flushes > 1 && s.compactions > 0, "{s:?}");
    assert_eq!(misses, 0, "every block of the compacted tables was cached when written");
    // Only the live tables' blocks remain: the rewritten tables' blocks were dropped with them.
    let live = s.table_bytes();
    assert!(s.block_cache_bytes < live + live / 4, "cache {} bytes for {live} bytes of tables", s.block_cache_bytes);

    let (misses, _) = write_then_read_all(false);
    assert!(misses > 0, "without prepopulation, the first reads go to the files");
}

/// A database four times the cache, whose keys 0, 50, 100, ... are read again and again:
/// returns the block-cache misses of reading those keys right after a compaction rewrote every
/// table, the compactions run, and the blocks they read back into the cache. Without the
/// rewarm, compactions do not write their blocks into the cache either
/// (`prepopulate_block_cache`): where the cache had a block's room at the final compaction's
/// start, a hot key's block could be cached that way (2 runs in 100 saw 79 misses of 80).
fn hot_key_misses_after_a_rewrite(rewarm: bool) -> (u64, u64, u64) {
    let opts = Options {
        block_cache_bytes: 256 << 10,
        rewarm_hot_blocks: rewarm,
        prepopulate_block_cache: rewarm,
        ..Options::small_for_tests()
    };
    let db = Db::open_with_storage("/db", opts, Arc::new(MemStorage::new())).unwrap();
    let put = |i: u32, round: u64| {
        let mut b = WriteBatch::new();
        b.put(format!("{i:08}"), noise(round * 10_000 + u64::from(i), 300)).unwrap();
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
    };
    for i in 0..4000u32 {
        put(i, 0);
    }
    db.compact_all().unwrap();
    let hot = || (0..4000u32).step_by(50).map(|i| format!("{i:08}"));
    for _ in 0..3 {
        for k in hot() {
            assert!(db.get(&k).unwrap().is_some());
        }
    }
    // Keys read once, enough to fill the cache around the hot blocks.
    for i in (0..4000u32).filter(|i| i % 50 == 25) {
        assert!(db.get(format!("{i:08}")).unwrap().is_some());
    }
    for i in (1..4000u32).step_by(97) {
        put(i, 1);
    }
    let compactions = db.stats().compactions;
    db.compact_all().unwrap();
    let before = db.stats();
    for k in hot() {
        assert!(db.get(&k).unwrap().is_some());
    }
    let misses = db.stats().block_cache_misses - before.block_cache_misses;
    (misses, before.compactions - compactions, before.hot_blocks_rewarmed)
}

#[test]
fn a_compaction_puts_its_copy_of_hot_blocks_in_the_cache() {
    let (misses, compactions, rewarmed) = hot_key_misses_after_a_rewrite(true);
    assert!(compactions > 0);
    // At least the hot keys' 80 blocks (blocks read once whose slot was a ghost, evicted from
    // probation since, are hot too), and no more than the cache holds: 256 KiB of blocks of
    // three 300-byte values.
    assert!((80..=280).contains(&rewarmed), "{rewarmed} blocks read back");
    assert_eq!(misses, 0, "the rewritten hot blocks were cached when the compaction was installed");
    let (misses, _, rewarmed) = hot_key_misses_after_a_rewrite(false);
    assert_eq!(rewarmed, 0);
    assert_eq!(misses, 80, "without it, every hot key's block is read from the file");
}

/// Four writers through group commit, across memtable switches and flushes. A reader checking
/// all along sees every batch whole or not at all, never a later batch of a writer without its
/// earlier ones, and never loses sight of a write it saw; a reopen finds every write.
#[test]
fn concurrent_writers_publish_whole_batches_in_order() {
    let opts = Options { memtable_size: 256 << 10, ..Options::small_for_tests() };
    let storage = MemStorage::new();
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    let (writers, batches) = (4u32, 1500u32);
    let done = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|s| {
        for w in 0..writers {
            let (db, done) = (db.clone(), &done);
            s.spawn(move || {
                for i in 0..batches {
                    // Three keys per batch, all carrying the batch's number.
                    let mut b = WriteBatch::new();
                    for part in 0..3 {
                        b.put(format!("w{w}-p{part}"), i.to_be_bytes()).unwrap();
                    }
                    b.put(format!("w{w}-i{i:05}"), noise(i as u64, 100)).unwrap();
                    db.write_opt(b, WriteOptions::no_sync()).unwrap();
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
        let (db, done) = (db.clone(), &done);
        s.spawn(move || {
            let mut seen = vec![None::<u32>; writers as usize];
            while done.load(std::sync::atomic::Ordering::Acquire) < writers {
                let snap = db.snapshot();
                for w in 0..writers {
                    let parts: Vec<Option<u32>> = (0..3)
                        .map(|part| {
                            snap.get(format!("w{w}-p{part}"))
                                .unwrap()
                                .map(|v| u32::from_be_bytes(v.as_ref().try_into().unwrap()))
                        })
                        .collect();
                    assert!(parts.windows(2).all(|p| p[0] == p[1]), "writer {w}: a batch seen half applied: {parts:?}");
                    let now = parts[0];
                    assert!(now >= seen[w as usize], "writer {w}: went back from {:?} to {now:?}", seen[w as usize]);
                    if let Some(i) = now {
                        // Every earlier batch of this writer is visible too.
                        for j in [0, i / 2, i] {
                            assert!(
                                snap.get(format!("w{w}-i{j:05}")).unwrap().is_some(),
                                "writer {w}: batch {j} missing under {i}"
                            );
                        }
                    }
                    seen[w as usize] = now;
                }
            }
        });
    });
    for w in 0..writers {
        assert_eq!(db.get(format!("w{w}-p0")).unwrap().as_deref(), Some(&(batches - 1).to_be_bytes()[..]));
    }
    assert_eq!(db.iter().count(), (writers * (batches + 3)) as usize);
    drop(db);
    let db = reopen(&storage, opts);
    assert_eq!(db.iter().count(), (writers * (batches + 3)) as usize);
}

/// With groups inserting concurrently (a group is applied while the next one writes its log
/// record), a write is visible to its writer as soon as it returns, and so is every write
/// that returned before it on any thread: each writer reads back its own key and the newest
/// key the other writers announced.
#[test]
fn a_returned_write_is_visible_at_once_to_every_thread() {
    let opts = Options { memtable_size: 128 << 10, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts, Arc::new(MemStorage::new())).unwrap();
    let writers = 4u32;
    let announced: Vec<std::sync::atomic::AtomicU32> = (0..writers).map(|_| Default::default()).collect();
    std::thread::scope(|s| {
        for w in 0..writers {
            let (db, announced) = (db.clone(), &announced);
            s.spawn(move || {
                for i in 1..=3000u32 {
                    let key = format!("w{w}-{i:05}");
                    let mut b = WriteBatch::new();
                    b.put(&key, noise(i as u64, 100)).unwrap();
                    db.write_opt(b, WriteOptions::no_sync()).unwrap();
                    assert!(db.get(&key).unwrap().is_some(), "{key} not visible after its write returned");
                    announced[w as usize].store(i, std::sync::atomic::Ordering::Release);
                    let other = (w + 1 + i % (writers - 1)) % writers;
                    let j = announced[other as usize].load(std::sync::atomic::Ordering::Acquire);
                    if j > 0 {
                        let key = format!("w{other}-{j:05}");
                        assert!(db.get(&key).unwrap().is_some(), "{key} announced but not visible");
                    }
                }
            });
        }
    });
}
