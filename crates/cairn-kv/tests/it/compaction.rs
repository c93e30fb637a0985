use std::sync::Arc;

use cairn_kv::{Db, MemStorage, Options, WriteBatch, WriteOptions};

use crate::noise;

/// Writes keys `0..n` in a scattered order (so every flush overlaps the previous ones) with
/// incompressible values of `value_len` bytes.
fn load(db: &Db, n: u32, value_len: usize) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(100) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            let k = (u64::from(i) * 2_654_435_761) % u64::from(n);
            b.put(format!("key{k:08}"), noise(k, value_len)).unwrap();
        }
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
    }
}

#[test]
fn leveled_compaction_keeps_level0_small_and_levels_sorted() {
    let storage = MemStorage::new();
    let opts = Options { compaction_threads: 2, dynamic_level_bytes: false, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    load(&db, 20_000, 100);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let s = db.stats();
    assert!(s.compactions > 0);
    assert!(s.levels[1].tables > 0, "fixed targets: level 0 compacts into level 1: {:?}", s.levels);
    assert!(s.levels[0].tables < opts.level0_compaction_trigger, "L0 has {} tables", s.levels[0].tables);
    assert!(s.levels.iter().skip(2).any(|l| l.tables > 0), "data reached L2+: {:?}", s.levels);
    assert!(s.write_amplification() > 1.0);
    for (i, l) in s.levels.iter().enumerate().skip(1) {
        let target = opts.max_bytes_for_level_base * opts.level_size_multiplier.pow(i as u32 - 1);
        assert!(l.bytes <= target * 2, "level {i} holds {} bytes, target {target}", l.bytes);
    }
    // Every key readable, scan sorted and complete.
    assert_eq!(db.iter().count(), 20_000);
    assert!(db.verify().unwrap() >= 20_000, "tables hold at least every live key");
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
    assert_eq!(db.iter().count(), 20_000);
}

/// The levels' byte counts after loading `n` keys into a database with `opts` and waiting
/// for compactions, checking every key is still there.
fn settled_levels(db: &Db, n: u32) -> Vec<u64> {
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!(db.iter().count(), n as usize);
    db.stats().levels.iter().map(|l| l.bytes).collect()
}

#[test]
fn dynamic_level_targets_grow_the_tree_from_the_bottom() {
    let opts = Options { compaction_threads: 2, ..Options::small_for_tests() };
    assert!(opts.dynamic_level_bytes, "the default");
    let (base, mult) = (opts.max_bytes_for_level_base, opts.level_size_multiplier);
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(MemStorage::new())).unwrap();
    // While the data fits the base size, level 0 compacts straight into the last level.
    load(&db, 1_000, 100);
    let levels = settled_levels(&db, 1_000);
    assert!(levels[6] > 0 && levels[1..6].iter().all(|&b| b == 0), "{levels:?}");
    // Grown to many times the base size, the tree has a base level part way down, nothing
    // above it, and each level at most about its share of the last one.
    load(&db, 20_000, 100);
    let levels = settled_levels(&db, 20_000);
    let last = levels[6];
    assert!(last > base * mult, "{levels:?}");
    let first = (1..7).find(|&l| levels[l] > 0).unwrap();
    assert!(first > 1, "levels above the base level stay empty: {levels:?}");
    for (l, &bytes) in levels.iter().enumerate().take(6).skip(first) {
        let share = last / mult.pow(6 - l as u32);
        assert!(bytes <= 2 * share.max(base / mult), "level {l} holds {bytes}, share {share}: {levels:?}");
    }
    assert!(last * 2 >= levels.iter().sum::<u64>(), "the last level holds most of the data: {levels:?}");
    assert!(db.verify().unwrap() >= 20_000);
}

#[test]
fn a_tree_built_with_fixed_targets_drains_into_the_dynamic_shape() {
    let storage = MemStorage::new();
    let fixed = Options { dynamic_level_bytes: false, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", fixed.clone(), Arc::new(storage.clone())).unwrap();
    load(&db, 20_000, 100);
    let before = settled_levels(&db, 20_000);
    assert!(before[1] > 0, "{before:?}");
    let want = contents(&db);
    drop(db);
    let dynamic = Options { dynamic_level_bytes: true, ..fixed };
    let db = Db::open_with_storage("/db", dynamic, Arc::new(storage)).unwrap();
    // Writes (level 0 tables) go on meanwhile; level 1 must still drain downwards.
    let mut b = WriteBatch::new();
    b.put("zzz-new", "v").unwrap();
    db.write(b).unwrap();
    let after = settled_levels(&db, 20_001);
    assert_eq!(after[1], 0, "level 1 drained: {before:?} -> {after:?}");
    assert_eq!(after[6], *after.iter().max().unwrap(), "{after:?}");
    let got = contents(&db);
    assert_eq!(got.len(), want.len() + 1);
    assert!(want.iter().all(|kv| got.binary_search(kv).is_ok()));
}

/// Every live key and its value, in order.
fn contents(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))).collect::<Result<_, _>>().unwrap()
}

#[test]
fn subcompactions_merge_key_ranges_in_parallel_into_the_same_contents() {
    let mut results = Vec::new();
    for max_subcompactions in [1, 4] {
        let storage = MemStorage::new();
        let opts = Options { max_subcompactions, ..Options::small_for_tests() };
        let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
        load(&db, 20_000, 100);
        // Overwrites, deletes and a range deletion, some under a snapshot, so that the merge
        // filters versions within every key range.
        let snap = db.snapshot();
        for i in (0..20_000u32).step_by(3) {
            let mut b = WriteBatch::new();
            if i % 2 == 0 {
                b.delete(format!("key{i:08}")).unwrap();
            } else {
                b.put(format!("key{i:08}"), format!("v2-{i}")).unwrap();
            }
            db.write_opt(b, WriteOptions::no_sync()).unwrap();
        }
        db.delete_range("key00005000", "key00006000").unwrap();
        load(&db, 5_000, 100);
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let old = snap.iter().count();
        drop(snap);
        db.compact_all().unwrap();
        let s = db.stats();
        if max_subcompactions == 1 {
            assert_eq!(s.subcompactions, 0);
        } else {
            assert!(s.subcompactions > 0, "compactions were split: {s:?}");
        }
        assert!(db.verify().is_ok());
        let live = contents(&db);
        drop(db);
        let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
        assert_eq!(contents(&db), live, "the same after reopening");
        results.push((old, live));
    }
    assert_eq!(results[0], results[1]);
    assert_eq!(results[0].0, 20_000);
}

#[test]
fn tombstones_are_dropped_at_the_bottom_level() {
    let storage = MemStorage::new();
    let db = Db::open_with_storage("/db", Options::small_for_tests(), Arc::new(storage.clone())).unwrap();
    load(&db, 5_000, 50);
    db.flush().unwrap();
    db.compact_all().unwrap();
    let full = db.stats().table_bytes();
    assert!(full > 0);
    for i in 0..5_000u32 {
        db.write_opt(
            {
                let mut b = WriteBatch::new();
                b.delete(format!("key{i:08}")).unwrap();
                b
            },
            WriteOptions::no_sync(),
        )
        .unwrap();
    }
    db.flush().unwrap();
    db.compact_all().unwrap();
    let s = db.stats();
    assert_eq!(s.table_bytes(), 0, "values and tombstones are gone: {:?}", s.levels);
    assert_eq!(db.iter().count(), 0);
    // Their files are deleted once unreferenced.
    let names = cairn_kv::Storage::list_dir(&storage, std::path::Path::new("/db")).unwrap();
    let ssts = names.into_iter().filter(|n| n.ends_with(".sst")).count();
    assert_eq!(ssts, 0);
}

#[test]
fn writes_are_held_to_the_delayed_write_rate_over_the_slowdown_trigger() {
    let opts = Options {
        memtable_size: 4 << 10,
        level0_compaction_trigger: 1000,
        level0_slowdown_trigger: 2,
        level0_stop_trigger: 1000,
        delayed_write_rate: 64 << 10,
        ..Options::small_for_tests()
    };
    let db = Db::open_with_storage("/db", opts, Arc::new(MemStorage::new())).unwrap();
    let put = |i: u32| {
        let mut b = WriteBatch::new();
        b.put(format!("key{i:08}"), noise(u64::from(i), 1000)).unwrap();
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
    };
    let mut i = 0;
    while db.stats().levels[0].tables < 2 {
        put(i);
        i += 1;
        db.flush().unwrap();
    }
    assert_eq!(db.stats().stall_micros, 0, "no delay under the slowdown trigger");
    // 64 KiB more at 64 KiB/s (level 0 stays far below the stop trigger): about a second.
    let t = std::time::Instant::now();
    for j in 0..64 {
        put(i + j);
    }
    let stalled = db.stats().stall_micros;
    assert!(stalled >= 800_000, "stalled {stalled} µs");
    assert!(t.elapsed() >= std::time::Duration::from_micros(stalled));
    assert_eq!(db.iter().count(), i as usize + 64);
}

#[test]
fn writes_are_slowed_by_the_bytes_in_level0_not_only_its_table_count() {
    // One level-0 table of ~300 KiB (flushed from a 1 MiB memtable), then reopened with 4 KiB
    // memtables: the 16 flushes of the writes below keep the table count under the slowdown
    // trigger of 40, but the bytes are 75 memtables' worth and more (what intra-level-0 merges
    // leave), so writes are slowed; and level 0 is compacted although its table count is
    // under the compaction trigger.
    let storage = MemStorage::new();
    let first = Options { memtable_size: 1 << 20, dynamic_level_bytes: false, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", first, Arc::new(storage.clone())).unwrap();
    let put = |db: &Db, i: u32| {
        let mut b = WriteBatch::new();
        b.put(format!("key{i:08}"), noise(u64::from(i), 1000)).unwrap();
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
    };
    for i in 0..300 {
        put(&db, i);
    }
    db.flush().unwrap();
    assert_eq!(db.stats().levels[0].tables, 1);
    drop(db);
    let slowed = Options {
        memtable_size: 4 << 10,
        dynamic_level_bytes: false,
        level0_compaction_trigger: 1000,
        level0_slowdown_trigger: 40,
        level0_stop_trigger: 1000,
        delayed_write_rate: 64 << 10,
        ..Options::small_for_tests()
    };
    let db = Db::open_with_storage("/db", slowed.clone(), Arc::new(storage.clone())).unwrap();
    let t = std::time::Instant::now();
    for i in 300..364 {
        put(&db, i);
    }
    // 64 KiB at ~95% of 64 KiB/s (the rate falls toward the stop trigger): about a second.
    let stalled = db.stats().stall_slowdown_micros;
    assert!(db.stats().levels[0].tables < 40);
    assert!(stalled >= 800_000, "stalled {stalled} µs");
    assert!(t.elapsed() >= std::time::Duration::from_micros(stalled));
    drop(db);
    let compacted = Options { level0_compaction_trigger: 4, ..slowed };
    let db = Db::open_with_storage("/db", compacted, Arc::new(storage)).unwrap();
    db.wait_for_compactions().unwrap();
    let levels = db.stats().levels;
    assert_eq!(levels[0].tables, 0, "level 0 not compacted: {levels:?}");
    assert_eq!(db.iter().count(), 364);
}

#[test]
fn writes_stall_instead_of_growing_level0_without_bound() {
    let storage = MemStorage::new();
    let opts = Options {
        memtable_size: 4 << 10,
        level0_compaction_trigger: 2,
        level0_slowdown_trigger: 3,
        level0_stop_trigger: 4,
        compaction_threads: 1,
        ..Options::small_for_tests()
    };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage)).unwrap();
    let max_l0 = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = {
        let db = db.clone();
        let max_l0 = max_l0.clone();
        std::thread::spawn(move || {
            for _ in 0..400 {
                let l0 = db.stats().levels[0].tables;
                max_l0.fetch_max(l0, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
        })
    };
    load(&db, 20_000, 64);
    watcher.join().unwrap();
    let seen = max_l0.load(std::sync::atomic::Ordering::Relaxed);
    // At the stop trigger no memtable is frozen any more; the ones already frozen still flush.
    assert!(seen <= opts.level0_stop_trigger + opts.max_immutable_memtables, "L0 grew to {seen} tables");
    assert_eq!(db.iter().count(), 20_000);
}

/// Niceness of each of this process's threads named `prefix*`, from `/proc/self/task`.
#[cfg(target_os = "linux")]
fn thread_nices(prefix: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if !comm.starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        out.push(nice_in_stat(&stat));
    }
    out
}

/// The niceness in a `/proc/.../stat` line.
#[cfg(target_os = "linux")]
fn nice_in_stat(stat: &str) -> i64 {
    // Fields after the parenthesised name: state is field 3, nice is field 19.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// Niceness of the calling thread, from `/proc/thread-self/stat`.
#[cfg(target_os = "linux")]
fn own_nice() -> i64 {
    nice_in_stat(&std::fs::read_to_string("/proc/thread-self/stat").unwrap())
}

/// Compactions out of level 0 run at the process's priority (writers wait for them), every
/// other compaction `compaction_nice` lower; the long-lived compaction and flush threads keep
/// the process's priority.
#[cfg(target_os = "linux")]
#[test]
fn deeper_compactions_run_at_the_configured_niceness_and_level0_ones_do_not() {
    let base = own_nice();
    let opts = Options { compaction_threads: 3, compaction_nice: 7, ..Options::small_for_tests() };
    let want = (base + 7).min(19);
    let db = Db::open_with_storage("/db", opts, Arc::new(MemStorage::new())).unwrap();
    let seen = Arc::new(std::sync::Mutex::new(Vec::<(String, i64)>::new()));
    let s = seen.clone();
    db.set_failpoint_hook(Some(Arc::new(move |name: &str| {
        if name.starts_with("compaction.merge.") {
            s.lock().unwrap().push((name.to_string(), own_nice()));
        }
    })));
    load(&db, 40_000, 100);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let ours = thread_nices("cairn-compact-");
    db.set_failpoint_hook(None);
    let seen = seen.lock().unwrap().clone();
    let at = |kind: &str| seen.iter().filter(|(n, _)| n.ends_with(kind)).map(|&(_, nice)| nice).collect::<Vec<_>>();
    let (level0, deeper) = (at("level0"), at("deeper"));
    assert!(!level0.is_empty() && !deeper.is_empty(), "both kinds of compaction ran: {seen:?}");
    assert!(level0.iter().all(|&n| n == base), "level-0 compactions at nice {base}: {level0:?}");
    assert!(deeper.iter().all(|&n| n == want), "deeper compactions at nice {want}: {deeper:?}");
    // The compaction threads themselves (not the short-lived ones of deeper compactions,
    // which are gone once compactions are done) and the flush thread keep the process's
    // priority.
    assert!(ours.len() >= 3 && ours.iter().all(|&n| n == base), "compaction threads: {ours:?}");
    assert!(thread_nices("cairn-flush").contains(&base));
    drop(db);
}

#[test]
fn intra_level0_compactions_lose_no_write() {
    let storage = MemStorage::new();
    let opts = Options { compaction_threads: 2, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    let mut model = std::collections::BTreeMap::new();
    let mut i = 0u64;
    // Write until level 0 has been merged into itself a few times (flushes landing while a
    // compaction into the base level runs), overwriting and deleting as we go.
    while db.stats().intra_l0_compactions < 3 {
        assert!(i < 3_000_000, "no intra-L0 compactions after {i} writes: {:?}", db.stats());
        let mut b = WriteBatch::new();
        for j in i..i + 100 {
            let k = format!("key{:08}", (j * 2_654_435_761) % 40_000).into_bytes();
            if j % 7 == 3 {
                b.delete(k.clone()).unwrap();
                model.remove(&k);
            } else {
                let v = noise(j, 100);
                b.put(k.clone(), v.clone()).unwrap();
                model.insert(k, v);
            }
        }
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
        i += 100;
    }
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.into_iter().collect();
    assert_eq!(contents(&db), want);
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!(contents(&db), want);
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
    assert_eq!(contents(&db), want);
}

/// A database opened with many level-0 tables over a base level several times larger (as a
/// bulk load can leave it) first merges level 0 into one table, then merges that down.
#[test]
fn a_level_0_of_many_tables_over_a_large_base_level_is_merged_into_one_table_first() {
    // Two levels: everything below level 0 is in the base level.
    let storage = MemStorage::new();
    let kept = Options { num_levels: 2, ..crate::level0_kept() };
    let db = Db::open_with_storage("/db", kept, Arc::new(storage.clone())).unwrap();
    let mut want = std::collections::BTreeMap::new();
    for i in 0..6000u64 {
        let k = format!("key{:08}", (i * 2_654_435_761) % 1_000_000);
        want.insert(k.clone(), noise(i, 100));
        db.put(&k, noise(i, 100)).unwrap();
    }
    db.compact_all().unwrap();
    // Six small flushes, each across the whole key range.
    for t in 0..6u64 {
        for i in (t * 7..6000).step_by(60) {
            let k = format!("key{:08}", (i * 2_654_435_761) % 1_000_000);
            want.insert(k.clone(), noise(i + 1, 100));
            db.put(&k, noise(i + 1, 100)).unwrap();
        }
        db.flush().unwrap();
    }
    drop(db);
    // The test options' triggers: compaction at 2 tables, slowdown at 8, so 6 tables are
    // halfway (5) or more; the base level holds ten times their bytes. The merge goes first
    // (after a compaction into the base level there would be nothing left to merge), then
    // its table goes down.
    let opts = Options { num_levels: 2, compaction_threads: 1, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    assert_eq!((stats.compactions, stats.intra_l0_compactions), (2, 1), "{stats:?}");
    assert_eq!(stats.levels[0].tables, 0, "{stats:?}");
    let want: Vec<(Vec<u8>, Vec<u8>)> = want.into_iter().map(|(k, v)| (k.into_bytes(), v)).collect();
    assert_eq!(contents(&db), want);
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
    assert_eq!(contents(&db), want);
}

#[test]
fn a_compaction_keeps_what_a_snapshot_taken_while_it_runs_reads_under_a_later_range_deletion() {
    use std::time::Duration;
    // A compaction is held after it read the version and before it listed the snapshots;
    // meanwhile a snapshot is taken, every key is deleted by range and the deletion is
    // flushed. The compaction must keep what the snapshot reads. (Listing the snapshots first
    // and reading the version second made it drop them: it met the range deletion but not
    // the snapshot under it.)
    let storage = MemStorage::new();
    let opts = Options { compaction_threads: 1, ..Options::small_for_tests() };
    let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
    let (reached, release) = crate::hold_at_failpoint(&db, "compaction.version_read");
    let mut want = Vec::new();
    for table in 0..2 {
        for i in 0..50 {
            let k = format!("key{:04}", i * 2 + table);
            db.put(&k, noise(i, 100)).unwrap();
            want.push(k);
        }
        db.flush().unwrap();
    }
    want.sort();
    // Two level-0 tables: a compaction starts and stops at the failpoint.
    reached.recv_timeout(Duration::from_secs(30)).expect("no compaction reached the failpoint");
    let snap = db.snapshot();
    db.delete_range(b"key", b"kez").unwrap();
    db.flush().unwrap();
    release.send(()).unwrap();
    db.wait_for_compactions().unwrap();
    db.set_failpoint_hook(None);
    assert_eq!(crate::keys(snap.iter()), want, "the snapshot lost keys");
    assert_eq!(db.iter().count(), 0);
    db.compact_all().unwrap();
    assert_eq!(crate::keys(snap.iter()), want, "the snapshot lost keys in a full compaction");
    drop(snap);
    db.compact_all().unwrap();
    assert_eq!(db.iter().count(), 0);
}

#[test]
fn frozen_memtables_waiting_together_are_flushed_as_one_table() {
    use std::time::Duration;
    // The first flush is held at a failpoint while the writer freezes six or more memtables
    // of ~1 KiB entries; released, the flush thread writes all of them as one level-0 table.
    // A snapshot is taken between them, and a later one holds a range deletion of keys that
    // earlier ones in the same flush hold: the snapshot must still read them, the current
    // state must not.
    let storage = MemStorage::new();
    let opts = Options { memtable_size: 16 << 10, max_immutable_memtables: 16, ..crate::level0_kept() };
    let db = Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
    let (reached, release) = crate::hold_at_failpoint(&db, "flush.build");
    let mut model = std::collections::BTreeMap::new();
    let put = |model: &mut std::collections::BTreeMap<Vec<u8>, Vec<u8>>, i: u64, round: u64| {
        let (k, v) = (format!("key{i:04}").into_bytes(), noise(i * 7 + round, 1000));
        let mut b = WriteBatch::new();
        b.put(&k, &v).unwrap();
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
        model.insert(k, v);
    };
    for i in 0..100 {
        put(&mut model, i, 0);
    }
    reached.recv_timeout(Duration::from_secs(30)).expect("no flush reached the failpoint");
    let before = db.snapshot();
    let seen_before: Vec<_> = model.clone().into_iter().collect();
    let mut b = WriteBatch::new();
    b.delete_range("key0020", "key0060").unwrap();
    db.write_opt(b, WriteOptions::no_sync()).unwrap();
    model.retain(|k, _| !(k.as_slice() >= b"key0020".as_slice() && k.as_slice() < b"key0060".as_slice()));
    for i in (0..100).step_by(3) {
        put(&mut model, i, 1);
    }
    // ~134 entries of ~1 KiB, at most 17 to a memtable: 7 memtables at least, all but the
    // newest frozen while the first flush was held.
    assert!(db.stats().immutable_memtables >= 6, "{:?}", db.stats());
    release.send(()).unwrap();
    db.flush().unwrap();
    db.set_failpoint_hook(None);
    let stats = db.stats();
    // The held flush, the memtables that waited for it, and the one `flush` froze (unless it
    // was frozen before the second flush began).
    assert!(stats.flushes <= 3, "{} flushes", stats.flushes);
    assert_eq!(stats.levels[0].tables as u64, stats.flushes, "{stats:?}");
    let model: Vec<_> = model.into_iter().collect();
    assert_eq!(contents(&db), model);
    let snap: Vec<(Vec<u8>, Vec<u8>)> =
        before.iter().map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec()))).collect::<Result<_, _>>().unwrap();
    assert_eq!(snap, seen_before, "the snapshot lost versions");
    drop(before);
    drop(db);
    let db = Db::open_with_storage("/db", opts, Arc::new(storage)).unwrap();
    assert_eq!(contents(&db), model);
}
