//! `cairn-tree`: directory-tree snapshots over the blob store.
//!
//! A snapshot is a Merkle tree: each directory is a tree object (sorted entries with kind,
//! mode, size, mtime and the id of the content, subtree or link target) stored as a blob, so an
//! unchanged subtree keeps its id and costs nothing to store again. Re-snapshots skip reading
//! files whose size, mtime, inode and ctime are unchanged. Checkout materializes a snapshot by
//! hard link, reflink or copy. The tree layer holds one blob-store reference per blob it owns
//! (`tree/o/` rows); `gc` releases those no snapshot reaches. Rows: `tree/` prefix in the engine.

mod checkout;
mod diff;
mod error;
mod maint;
pub mod object;
mod rows;
mod scan;
mod shared;
mod snapshot;

use std::path::PathBuf;

use cairn_cas::{Id, Store};
use cairn_kv::Keyspace;

pub use checkout::{CheckoutMode, CheckoutStats};
pub use diff::Change;
pub use error::{Error, Result};
pub use maint::{DuReport, TreeGcReport, TreeVerifyReport};
pub use object::{Entry, Kind};
pub use rows::SnapshotInfo;
pub use snapshot::{Progress, SnapshotStats, check_snapshot_name};

/// A file name for messages: UTF-8 as it is, other bytes as `\xHH`.
pub fn escape_name(name: &[u8]) -> String {
    let mut out = String::new();
    for chunk in name.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The tree layer: snapshots of directories in a blob store.
#[derive(Clone)]
pub struct Trees {
    /// The layer's rows (the engine's `tree` keyspace).
    rows: Keyspace,
    store: Store,
    /// Shared read-only copies used by hard-link and reflink checkouts.
    files_dir: PathBuf,
}

impl Trees {
    /// The tree layer over `db` and `store`; `files_dir` holds the shared copies that
    /// hard-link checkouts link to.
    pub fn new(rows: Keyspace, store: Store, files_dir: impl Into<PathBuf>) -> Trees {
        Trees { rows, store, files_dir: files_dir.into() }
    }

    /// The blob store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// A snapshot's record.
    pub fn snapshot_info(&self, name: &str) -> Result<SnapshotInfo> {
        let v = self.rows.get(rows::key(rows::SNAP_PREFIX, name.as_bytes()))?;
        let v = v.ok_or_else(|| Error::NoSuchSnapshot(name.to_string()))?;
        SnapshotInfo::decode(name, &v)
    }

    /// Reads and decodes a tree object.
    pub fn read_tree(&self, id: &Id) -> Result<Vec<Entry>> {
        object::decode(&self.store.get(id)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn raw_tree(name: &[u8], kind: u8, id: Id) -> Vec<u8> {
        let mut b = b"CTREE\x01".to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&(name.len() as u16).to_le_bytes());
        b.extend_from_slice(name);
        b.push(kind);
        b.extend_from_slice(&0o644u32.to_le_bytes());
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(&0i64.to_le_bytes());
        b.extend_from_slice(id.as_bytes());
        b
    }

    #[test]
    fn a_malicious_tree_cannot_escape_the_checkout_directory() {
        let t = tempfile::tempdir().unwrap();
        let db = cairn_kv::Db::open(t.path().join("kv"), cairn_kv::Options::default()).unwrap();
        let fs: Arc<dyn cairn_kv::Storage> = Arc::new(cairn_kv::FsStorage::new());
        let store = Store::open(
            db.keyspace(cairn_kv::keyspace::CAS),
            fs,
            t.path().join("packs"),
            cairn_cas::StoreConfig::default(),
        )
        .unwrap();
        let trees = Trees::new(db.keyspace(cairn_kv::keyspace::TREE), store.clone(), t.path().join("files"));
        let payload = store.put(b"pwned").unwrap().id;
        for (i, name) in [&b".."[..], b"../escape", b"/etc/passwd", b"a/../../x", b"."].iter().enumerate() {
            let root = store.put(&raw_tree(name, 0, payload)).unwrap().id;
            let info = SnapshotInfo {
                name: format!("evil{i}"),
                root,
                created_ns: 0,
                files: 1,
                dirs: 1,
                symlinks: 0,
                bytes: 5,
                source: String::new(),
            };
            db.keyspace(cairn_kv::keyspace::TREE)
                .put(rows::key(rows::SNAP_PREFIX, info.name.as_bytes()), info.encode())
                .unwrap();
            let dest = t.path().join(format!("out{i}/inner"));
            let err = trees.checkout(&info.name, &dest, CheckoutMode::Copy).unwrap_err();
            assert!(matches!(err, Error::Corrupt { .. }), "{name:?}: {err}");
        }
        // Nothing was written next to the destinations.
        for i in 0..5 {
            let entries: Vec<_> = std::fs::read_dir(t.path().join(format!("out{i}"))).unwrap().collect();
            assert_eq!(entries.len(), 1, "only `inner` exists");
            assert_eq!(std::fs::read_dir(t.path().join(format!("out{i}/inner"))).unwrap().count(), 0);
        }
        assert!(!t.path().join("escape").exists() && !t.path().join("x").exists());
    }
}
