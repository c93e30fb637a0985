//! Power cuts at every mutating storage operation: during writes, flushes, compactions,
//! MANIFEST updates and recovery itself. After each cut the reopened database must hold every
//! acknowledged write and nothing torn: exactly the acknowledged prefix of the workload, or
//! that prefix plus the one write in flight.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_kv::{Db, MemStorage, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const OPS: usize = 240;

fn opts() -> Options {
    Options {
        memtable_size: 8 << 10,
        target_file_size: 8 << 10,
        level0_compaction_trigger: 2,
        max_bytes_for_level_base: 32 << 10,
        ..Options::small_for_tests()
    }
}

/// Operation `i` of the workload, as a batch.
fn op(i: usize) -> WriteBatch {
    let mut b = WriteBatch::new();
    let k = |j: usize| format!("key{:03}", (j * 37) % 101).into_bytes();
    let v = |j: usize| format!("value-{j}-{}", "x".repeat(j % 200)).into_bytes();
    match i % 10 {
        0..=5 => b.put(k(i), v(i)).unwrap(),
        6 => b.delete(k(i + 3)).unwrap(),
        7 | 8 => {
            // A multi-key batch: must never be half applied.
            b.put(k(i), v(i)).unwrap();
            b.put(k(i + 1), v(i + 1)).unwrap();
            b.delete(k(i + 2)).unwrap();
        }
        _ => {
            if i % 30 == 9 {
                b.delete_range(k(i).as_slice().min(k(i + 5).as_slice()), k(i).as_slice().max(k(i + 5).as_slice()))
                    .unwrap();
            } else {
                b.put(k(i), v(i)).unwrap();
            }
        }
    }
    b
}

fn apply(model: &mut Model, b: &WriteBatch) {
    for o in b.iter() {
        match o {
            cairn_kv::BatchOp::Put(k, v) => {
                model.insert(k.to_vec(), v.to_vec());
            }
            cairn_kv::BatchOp::Delete(k) => {
                model.remove(k);
            }
            cairn_kv::BatchOp::DeleteRange(s, e) => model.retain(|k, _| !(s <= k.as_slice() && k.as_slice() < e)),
        }
    }
}

fn model_after(n: usize) -> Model {
    let mut m = Model::new();
    for i in 0..n {
        apply(&mut m, &op(i));
    }
    m
}

fn contents(db: &Db) -> Model {
    db.iter().map(|r| r.unwrap()).map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
}

/// Runs the workload until the storage dies; returns how many writes were acknowledged.
fn run_workload(storage: &MemStorage) -> usize {
    let Ok(db) = Db::open_with_storage("/c", opts(), Arc::new(storage.clone())) else { return 0 };
    let mut acked = 0;
    for i in 0..OPS {
        if db.write(op(i)).is_err() {
            break;
        }
        acked = i + 1;
    }
    acked
}

fn check_recovered(storage: &MemStorage, acked: usize, cut: u64) {
    let db = Db::open_with_storage("/c", opts(), Arc::new(storage.clone()))
        .unwrap_or_else(|e| panic!("cut at op {cut}: reopen failed: {e}"));
    let got = contents(&db);
    let ok = got == model_after(acked) || (acked < OPS && got == model_after(acked + 1));
    assert!(ok, "cut at op {cut}: {acked} writes acknowledged, recovered state is not that prefix");
    db.verify().unwrap();
}

#[test]
fn power_cut_at_every_point() {
    let probe = MemStorage::new();
    assert_eq!(run_workload(&probe), OPS);
    let total = probe.mutating_ops();
    {
        let db = Db::open_with_storage("/c", opts(), Arc::new(probe.clone())).unwrap();
        let s = db.stats();
        eprintln!(
            "workload: {total} mutating ops, tables per level {:?}",
            s.levels.iter().map(|l| l.tables).collect::<Vec<_>>()
        );
    }
    assert!(total > 500, "the workload should exercise flushes and compactions ({total} ops)");
    // Every cut point would take long in debug builds; a stride still hits every phase.
    // CAIRN_CRASH_STRIDE=1 cuts at every single operation.
    let stride = std::env::var("CAIRN_CRASH_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or((total / 400).max(1));
    let mut cut = 0;
    while cut < total {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        let acked = run_workload(&storage);
        storage.crash();
        check_recovered(&storage, acked, cut);
        cut += stride;
    }
}

#[test]
fn power_cut_during_recovery() {
    for first_cut in [300u64, 900, 1500] {
        let storage = MemStorage::new();
        storage.fail_after(first_cut);
        let acked = run_workload(&storage);
        storage.crash();
        // Cut again while recovery replays logs and writes its tables and MANIFEST.
        for second_cut in 0..300 {
            storage.fail_after(second_cut);
            let _ = Db::open_with_storage("/c", opts(), Arc::new(storage.clone()));
            storage.crash();
        }
        check_recovered(&storage, acked, first_cut);
    }
}

/// Runs the workload with every seventh write synced, the others not, until the storage dies;
/// returns how many writes were acknowledged and how many of them up to the last synced one.
fn run_mixed_workload(storage: &MemStorage) -> (usize, usize) {
    let Ok(db) = Db::open_with_storage("/c", opts(), Arc::new(storage.clone())) else { return (0, 0) };
    let (mut acked, mut synced) = (0, 0);
    for i in 0..OPS {
        let sync = i % 7 == 6;
        if db.write_opt(op(i), cairn_kv::WriteOptions { sync }).is_err() {
            break;
        }
        acked = i + 1;
        if sync {
            synced = acked;
        }
    }
    (acked, synced)
}

/// Power cuts at every point of a workload whose writes are mostly not synced, across memtable
/// switches (the log a switch leaves is ended on a thread of its own while writes go on into
/// the next): the reopened database holds a prefix of the workload, every synced write and
/// every write before it included, with nothing torn and no write missing from its middle.
#[test]
fn power_cut_with_unsynced_writes_recovers_a_prefix() {
    let probe = MemStorage::new();
    let last_synced = (0..OPS).rfind(|i| i % 7 == 6).unwrap() + 1;
    assert_eq!(run_mixed_workload(&probe), (OPS, last_synced));
    let total = probe.mutating_ops();
    let stride = std::env::var("CAIRN_CRASH_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or((total / 300).max(1));
    let prefixes: Vec<Model> = (0..=OPS).map(model_after).collect();
    let mut cut = 0;
    while cut < total {
        let storage = MemStorage::new();
        storage.fail_after(cut);
        let (acked, synced) = run_mixed_workload(&storage);
        storage.crash();
        let db = Db::open_with_storage("/c", opts(), Arc::new(storage.clone()))
            .unwrap_or_else(|e| panic!("cut at op {cut}: reopen failed: {e}"));
        let got = contents(&db);
        let upto = (acked + 1).min(OPS);
        assert!(
            (synced..=upto).any(|n| got == prefixes[n]),
            "cut at op {cut}: {acked} writes acknowledged, {synced} up to the last synced one; \
             the recovered state is no prefix of at least {synced} writes"
        );
        db.verify().unwrap();
        cut += stride;
    }
}

#[test]
fn unsynced_tail_is_lost_whole_or_kept_whole() {
    let storage = MemStorage::new();
    let db = Db::open_with_storage("/c", opts(), Arc::new(storage.clone())).unwrap();
    db.put(b"durable", b"1").unwrap();
    for i in 0..50u32 {
        let mut b = WriteBatch::new();
        b.put(format!("u{i:02}a"), b"x").unwrap();
        b.put(format!("u{i:02}b"), b"y").unwrap();
        db.write_opt(b, cairn_kv::WriteOptions::no_sync()).unwrap();
    }
    storage.fail_after(0);
    drop(db);
    storage.crash();
    let db = Db::open_with_storage("/c", opts(), Arc::new(storage.clone())).unwrap();
    assert_eq!(db.get(b"durable").unwrap().as_deref(), Some(&b"1"[..]));
    let keys: Vec<_> = db.prefix("u").map(|r| r.unwrap().0).collect();
    assert!(keys.len() % 2 == 0, "a batch was torn");
    for (i, pair) in keys.chunks(2).enumerate() {
        assert_eq!(pair[0].as_ref(), format!("u{i:02}a").as_bytes(), "recovered writes are a prefix");
    }
}

/// The child half of `killed_process_keeps_every_acknowledged_write`: when run with
/// `CAIRN_KV_KILL_CHILD=<dir>`, writes without fsync across several memtables (so that some
/// logs were finished and the newest was not), says so, and waits to be killed.
#[test]
fn kill_child() {
    let Ok(dir) = std::env::var("CAIRN_KV_KILL_CHILD") else { return };
    let opts = Options { memtable_size: 1 << 20, ..Options::default() };
    let db = Db::open(&dir, opts).unwrap();
    for i in 0..KILL_WRITES {
        db.put(format!("key{i:06}"), format!("value{i}").repeat(20)).unwrap();
    }
    println!("acknowledged");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

const KILL_WRITES: usize = 30_000;

/// A process killed (SIGKILL) right after its writes were acknowledged, none of them synced,
/// loses none of them: the memory-mapped write-ahead log has them in the page cache, and its
/// reserved zeros read as the end of the log.
#[test]
fn killed_process_keeps_every_acknowledged_write() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "crash::kill_child", "--nocapture", "--test-threads", "1"])
        .env("CAIRN_KV_KILL_CHILD", dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    let acked = out.lines().map_while(Result::ok).any(|l| l.contains("acknowledged"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(acked, "the child did not finish its writes");
    let logs = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "log"));
    assert!(logs.count() >= 1);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), KILL_WRITES);
    for i in (0..KILL_WRITES).step_by(997).chain([KILL_WRITES - 1]) {
        assert_eq!(db.get(format!("key{i:06}")).unwrap().unwrap(), format!("value{i}").repeat(20).as_bytes());
    }
}
