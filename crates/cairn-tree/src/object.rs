//! Tree objects: one directory's entries, sorted by name, serialized and stored as a blob (so a
//! tree's id is the hash of its content and unchanged subtrees keep their id).
//!
//! ```text
//! magic "CTREE" , u8 version 1, u32 entry count, then per entry:
//!   u16 name length, name bytes, u8 kind (0 file, 1 dir, 2 symlink), u32 mode,
//!   u64 size, i64 mtime (ns since the epoch), [32] id (file content, subtree, or link target)
//! ```

use cairn_cas::Id;

use crate::{Error, Result};

const MAGIC: &[u8; 5] = b"CTREE";
const VERSION: u8 = 1;

/// What an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A regular file; `id` is its content.
    File,
    /// A directory; `id` is its tree object.
    Dir,
    /// A symbolic link; `id` is the blob of its target path.
    Symlink,
}

/// One entry of a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// File name (one path component).
    pub name: Vec<u8>,
    /// What it is.
    pub kind: Kind,
    /// Unix mode bits (permissions; the executable bits matter for checkout).
    pub mode: u32,
    /// Size in bytes (files), or total of the subtree's files (directories).
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// Content, subtree or link-target id.
    pub id: Id,
}

/// Checks that `name` is one safe path component: not empty, not `.` or `..`, no `/` or NUL.
pub fn check_name(name: &[u8]) -> Result<()> {
    let bad = name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0);
    if bad || name.len() > u16::MAX as usize {
        return Err(Error::BadName(String::from_utf8_lossy(name).into_owned()));
    }
    Ok(())
}

/// Serializes entries; they must be sorted by name without duplicates.
pub fn encode(entries: &[Entry]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(10 + entries.len() * 64);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (i, e) in entries.iter().enumerate() {
        check_name(&e.name)?;
        if i > 0 && entries[i - 1].name >= e.name {
            return Err(Error::InvalidArgument("tree entries must be sorted and unique".into()));
        }
        out.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
        out.extend_from_slice(&e.name);
        out.push(match e.kind {
            Kind::File => 0,
            Kind::Dir => 1,
            Kind::Symlink => 2,
        });
        out.extend_from_slice(&e.mode.to_le_bytes());
        out.extend_from_slice(&e.size.to_le_bytes());
        out.extend_from_slice(&e.mtime_ns.to_le_bytes());
        out.extend_from_slice(e.id.as_bytes());
    }
    Ok(out)
}

/// Decodes a tree object, rejecting unsafe names, unsorted or duplicate entries and trailing
/// bytes.
pub fn decode(b: &[u8]) -> Result<Vec<Entry>> {
    let bad = |r: &str| Error::corrupt("tree object", r.to_string());
    if b.len() < 10 || &b[..5] != MAGIC || b[5] != VERSION {
        return Err(bad("bad magic or version"));
    }
    let count = u32::from_le_bytes([b[6], b[7], b[8], b[9]]) as usize;
    let mut pos = 10;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = b.get(pos..pos + n).ok_or_else(|| bad("truncated"))?;
        pos += n;
        Ok(s)
    };
    let mut entries: Vec<Entry> = Vec::with_capacity(count.min(b.len() / 59));
    for _ in 0..count {
        let nl = take(2)?;
        let name = take(u16::from_le_bytes([nl[0], nl[1]]) as usize)?.to_vec();
        check_name(&name).map_err(|_| bad("unsafe name"))?;
        let kind = match take(1)?[0] {
            0 => Kind::File,
            1 => Kind::Dir,
            2 => Kind::Symlink,
            _ => return Err(bad("unknown entry kind")),
        };
        let mode = u32::from_le_bytes(take(4)?.try_into().map_err(|_| bad("mode"))?);
        let size = u64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("size"))?);
        let mtime_ns = i64::from_le_bytes(take(8)?.try_into().map_err(|_| bad("mtime"))?);
        let id = Id::from_slice(take(32)?).ok_or_else(|| bad("id"))?;
        if entries.last().is_some_and(|l| l.name >= name) {
            return Err(bad("entries not sorted or duplicated"));
        }
        entries.push(Entry { name, kind, mode, size, mtime_ns, id });
    }
    if pos != b.len() {
        return Err(bad("trailing bytes"));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unsafe_names_are_rejected() {
        for n in [&b""[..], b".", b"..", b"a/b", b"/", b"a\0b"] {
            assert!(check_name(n).is_err(), "{n:?}");
        }
        assert!(check_name(b"...").is_ok());
        assert!(check_name(b".hidden").is_ok());
    }

    proptest! {
        #[test]
        fn round_trip(names in proptest::collection::btree_set("[a-zA-Z0-9._-]{1,12}", 0..20), seed: u8) {
            let entries: Vec<Entry> = names.into_iter().filter(|n| n != "." && n != "..").enumerate().map(|(i, n)| Entry {
                name: n.into_bytes(),
                kind: [Kind::File, Kind::Dir, Kind::Symlink][i % 3],
                mode: 0o100644 + i as u32,
                size: i as u64 * 1000,
                mtime_ns: -5 + i as i64,
                id: Id([seed.wrapping_add(i as u8); 32]),
            }).collect();
            let b = encode(&entries).unwrap();
            prop_assert_eq!(decode(&b).unwrap(), entries);
            for cut in 0..b.len() {
                prop_assert!(decode(&b[..cut]).is_err());
            }
        }

        #[test]
        fn decode_never_panics(b: Vec<u8>) {
            let _ = decode(&b);
            let mut with_magic = b"CTREE\x01".to_vec();
            with_magic.extend_from_slice(&b);
            let _ = decode(&with_magic);
        }
    }
}
