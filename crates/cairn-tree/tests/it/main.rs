//! Integration tests of `cairn-tree` on real directories.

mod trees;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use cairn_cas::{Store, StoreConfig};
use cairn_kv::{Db, FsStorage, Options};
use cairn_tree::Trees;

/// A data directory with engine, packs and shared files.
pub fn open(data: &Path) -> Trees {
    let db = Db::open(data.join("kv"), Options::default()).unwrap();
    let store = Store::open(
        db.keyspace(cairn_kv::keyspace::CAS),
        Arc::new(FsStorage::new()),
        data.join("packs"),
        StoreConfig::default(),
    )
    .unwrap();
    Trees::new(db.keyspace(cairn_kv::keyspace::TREE), store, data.join("files"))
}

/// Writes a file and dates it two seconds in the past (so the inode cache may trust it).
pub fn write(path: &Path, content: &[u8], mode: u32) {
    if let Some(p) = path.parent() {
        fs::create_dir_all(p).unwrap();
    }
    fs::write(path, content).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    let f = fs::File::open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(5)).unwrap();
}

pub use cairn_kv::testing::noise;

/// A small project tree: nested dirs, an executable, a symlink, empty file and directory.
pub fn project(root: &Path, flavor: u8) {
    write(&root.join("package.json"), format!("{{\"name\": \"p{flavor}\"}}").as_bytes(), 0o644);
    write(&root.join("bin/run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    for i in 0..40 {
        let body = format!("module.exports = {i}; // {}\n", "x".repeat(i * 50));
        write(
            &root.join(format!("node_modules/lib{}/index.js", i % 8)).with_file_name(format!("f{i}.js")),
            body.as_bytes(),
            0o644,
        );
    }
    write(&root.join("big.bin"), &noise(7, 300_000), 0o644);
    write(&root.join("empty.txt"), b"", 0o600);
    fs::create_dir_all(root.join("empty_dir")).unwrap();
    std::os::unix::fs::symlink("bin/run.sh", root.join("link")).unwrap();
}
