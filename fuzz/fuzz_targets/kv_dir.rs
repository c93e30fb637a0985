//! Fuzzes opening and repairing a damaged database directory: a small database (tables on two
//! levels, writes only its log holds, a range deletion) has its files changed as the input
//! says (bytes flipped, files cut or removed); opening must not panic, repair must succeed, and
//! what it leaves must open, verify clean, read whole and open again.

#![no_main]

use std::path::Path;
use std::sync::{Arc, OnceLock};

use cairn_kv::testing::layered_options as opts;
use cairn_kv::{Db, MemStorage, Storage};
use libfuzzer_sys::fuzz_target;

fn pristine() -> &'static MemStorage {
    static BASE: OnceLock<MemStorage> = OnceLock::new();
    BASE.get_or_init(|| {
        let storage = MemStorage::new();
        cairn_kv::testing::layered_db(&storage, "/d").unwrap();
        storage
    })
}

fn rewrite(s: &MemStorage, path: &Path, data: &[u8]) {
    s.remove_file(path).unwrap();
    let mut f = s.create(path).unwrap();
    f.append(data).unwrap();
    f.sync().unwrap();
}

fuzz_target!(|data: &[u8]| {
    let s = pristine().clone_state();
    let dir = Path::new("/d");
    // Each 4 bytes: which file, what to do, where (two bytes), the XOR being the last byte.
    for op in data.chunks_exact(4).take(8) {
        let names: Vec<String> = s.list_dir(dir).unwrap().into_iter().filter(|n| n != "LOCK").collect();
        if names.is_empty() {
            break;
        }
        let path = dir.join(&names[op[0] as usize % names.len()]);
        let content = s.contents(&path).unwrap();
        let at = u16::from_le_bytes([op[2], op[3]]) as usize;
        match op[1] % 3 {
            0 if !content.is_empty() => {
                let mut c = content.clone();
                let i = at * 131 % c.len();
                c[i] ^= op[3] | 1;
                rewrite(&s, &path, &c);
            }
            1 => rewrite(&s, &path, &content[..at * 131 % (content.len() + 1)]),
            2 => s.remove_file(&path).unwrap(),
            _ => {}
        }
    }
    s.sync_dir(dir).unwrap();
    let open = || Db::open_with_storage("/d", opts(), Arc::new(s.clone()));
    if let Ok(db) = open() {
        for r in db.iter() {
            if r.is_err() {
                break;
            }
        }
    }
    Db::repair_with_storage("/d", opts(), Arc::new(s.clone())).expect("repair succeeds");
    let db = open().expect("opens after repair");
    assert!(db.verify_detailed().unwrap().is_clean());
    let n = db.iter().inspect(|r| assert!(r.is_ok(), "{r:?}")).count();
    drop(db);
    assert_eq!(open().unwrap().iter().count(), n);
});
