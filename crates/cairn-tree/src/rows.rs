//! The tree layer's rows in the engine, in the `tree` keyspace (physical prefix `tree/`; keys
//! below are relative to it):
//!
//! | key | value |
//! |---|---|
//! | `tree/s/<name>` | snapshot: version, root tree id, creation time, counts, source path |
//! | `tree/o/<blob id>` | empty: the tree layer holds one blob-store reference on this blob |
//! | `tree/i/<absolute path>` | inode cache: size, mtime, inode, ctime and content id of a file |

use cairn_cas::Id;

use crate::{Error, Result};

pub(crate) const SNAP_PREFIX: &[u8] = b"s/";
pub(crate) const OWN_PREFIX: &[u8] = b"o/";
pub(crate) const CACHE_PREFIX: &[u8] = b"i/";

pub(crate) fn key(prefix: &[u8], rest: &[u8]) -> Vec<u8> {
    [prefix, rest].concat()
}

pub(crate) fn own_key(id: &Id) -> Vec<u8> {
    key(OWN_PREFIX, id.as_bytes())
}

/// A snapshot's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its name.
    pub name: String,
    /// Root tree id.
    pub root: Id,
    /// Creation time, ns since the epoch.
    pub created_ns: i64,
    /// Regular files.
    pub files: u64,
    /// Directories (the root included).
    pub dirs: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Sum of file sizes.
    pub bytes: u64,
    /// The directory it was taken of.
    pub source: String,
}

impl SnapshotInfo {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut v = vec![1u8];
        v.extend_from_slice(self.root.as_bytes());
        v.extend_from_slice(&self.created_ns.to_le_bytes());
        for x in [self.files, self.dirs, self.symlinks, self.bytes] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(self.source.as_bytes());
        v
    }

    pub(crate) fn decode(name: &str, b: &[u8]) -> Result<SnapshotInfo> {
        let bad = || Error::corrupt(format!("snapshot {name:?}"), "malformed row");
        if b.len() < 73 || b[0] != 1 {
            return Err(bad());
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        Ok(SnapshotInfo {
            name: name.to_string(),
            root: Id::from_slice(&b[1..33]).ok_or_else(bad)?,
            created_ns: u(33) as i64,
            files: u(41),
            dirs: u(49),
            symlinks: u(57),
            bytes: u(65),
            source: String::from_utf8_lossy(&b[73..]).into_owned(),
        })
    }
}

/// What the inode cache remembers of a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CacheRow {
    pub size: u64,
    pub mtime_ns: i64,
    pub ino: u64,
    pub ctime_ns: i64,
    pub id: Id,
}

impl CacheRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.mtime_ns.to_le_bytes());
        v.extend_from_slice(&self.ino.to_le_bytes());
        v.extend_from_slice(&self.ctime_ns.to_le_bytes());
        v.extend_from_slice(self.id.as_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Option<CacheRow> {
        if b.len() != 64 {
            return None;
        }
        let u = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        Some(CacheRow {
            size: u(0),
            mtime_ns: u(8) as i64,
            ino: u(16),
            ctime_ns: u(24) as i64,
            id: Id::from_slice(&b[32..])?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_reject_garbage() {
        let s = SnapshotInfo {
            name: "n".into(),
            root: Id([3; 32]),
            created_ns: 42,
            files: 1,
            dirs: 2,
            symlinks: 3,
            bytes: 4,
            source: "/src".into(),
        };
        assert_eq!(SnapshotInfo::decode("n", &s.encode()).unwrap(), s);
        assert!(SnapshotInfo::decode("n", &[1, 2, 3]).is_err());
        let c = CacheRow { size: 1, mtime_ns: -2, ino: 3, ctime_ns: 4, id: Id([9; 32]) };
        assert_eq!(CacheRow::decode(&c.encode()).unwrap(), c);
        assert!(CacheRow::decode(&[0; 10]).is_none());
    }
}
