//! `Db::verify_detailed` goes on past damage and says which keys each damaged block may hold.

use std::fs;
use std::path::Path;

use cairn_kv::{Compression, Db, Options};

/// 2000 keys in level-0 tables (no compaction, so the layout is the same every run).
fn build(dir: &Path) {
    let opts = Options { compression: Compression::None, ..crate::level0_kept() };
    let db = Db::open(dir, opts).unwrap();
    for i in 0..2000u32 {
        db.put(format!("key{i:05}"), format!("value{i:05}")).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
}

fn tables(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_damaged_block_is_reported_with_its_keys() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let sst = tables(dir.path()).into_iter().max_by_key(|p| fs::metadata(p).unwrap().len()).unwrap();
    let mut data = fs::read(&sst).unwrap();
    // Two places far apart in the data blocks (which take nine tenths of the file): its start
    // and a third of the way in.
    for at in [10, data.len() / 3] {
        data[at] ^= 0x5A;
    }
    fs::write(&sst, &data).unwrap();
    let db = Db::open(dir.path(), crate::level0_kept()).unwrap();
    assert!(db.verify().unwrap_err().is_corruption(), "verify stops at the first");
    let report = db.verify_detailed().unwrap();
    assert_eq!(report.damaged.len(), 2, "{:#?}", report.damaged);
    assert!(!report.is_clean());
    for d in &report.damaged {
        assert_eq!(d.table, sst);
        assert!(!d.whole_table);
        assert!(d.first_key <= d.last_key);
        assert!(d.error.is_corruption());
    }
    assert!(report.damaged[0].offset < report.damaged[1].offset);
    // Every key that cannot be read lies within a damaged block's keys, and every damaged
    // block holds one.
    let within = |k: &[u8]| report.damaged.iter().position(|d| d.first_key.as_ref() <= k && k <= d.last_key.as_ref());
    let mut unreadable = vec![0; report.damaged.len()];
    for i in 0..2000u32 {
        let k = format!("key{i:05}");
        if db.get(&k).is_err() {
            let block = within(k.as_bytes()).unwrap_or_else(|| panic!("{k} unreadable, in no damaged block"));
            unreadable[block] += 1;
        }
    }
    assert!(unreadable.iter().all(|&n| n > 0), "{unreadable:?}");
    assert_eq!(report.entries + unreadable.iter().sum::<u64>(), 2000);
}

#[test]
fn a_table_that_does_not_open_is_reported_whole_with_its_key_range() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let sst = tables(dir.path()).into_iter().next().unwrap();
    let mut data = fs::read(&sst).unwrap();
    let footer = data.len() - 10;
    data[footer] ^= 0x5A;
    fs::write(&sst, &data).unwrap();
    let db = Db::open(dir.path(), crate::level0_kept()).unwrap();
    let report = db.verify_detailed().unwrap();
    assert_eq!(report.damaged.len(), 1);
    let d = &report.damaged[0];
    assert!(d.whole_table);
    assert_eq!(d.table, sst);
    let unreadable: Vec<String> = (0..2000u32).map(|i| format!("key{i:05}")).filter(|k| db.get(k).is_err()).collect();
    assert!(!unreadable.is_empty());
    for k in &unreadable {
        assert!(d.first_key.as_ref() <= k.as_bytes() && k.as_bytes() <= d.last_key.as_ref(), "{k} outside {d:?}");
    }
}

#[test]
fn a_clean_database_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    build(dir.path());
    let db = Db::open(dir.path(), crate::level0_kept()).unwrap();
    let report = db.verify_detailed().unwrap();
    assert!(report.is_clean());
    assert_eq!(report.entries, 2000);
    assert_eq!(report.entries, db.verify().unwrap());
}
