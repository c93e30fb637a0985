//! Version edits: the records of the MANIFEST. Each edit adds and removes tables and range
//! tombstones and advances counters; replaying every edit of a MANIFEST rebuilds the set of
//! live tables. Encoding (tag-prefixed fields) in `docs/format/kv.md`.

use bytes::Bytes;

use crate::coding::{Reader, put_len_prefixed, put_varint};
use crate::key::{SeqNo, TRAILER_LEN};
use crate::memtable::range_del::RangeTombstone;

/// Levels a MANIFEST may name; more than any configuration uses.
pub const MAX_LEVELS: usize = 16;

const TAG_LOG_NUMBER: u64 = 1;
const TAG_NEXT_FILE: u64 = 2;
const TAG_LAST_SEQ: u64 = 3;
const TAG_DELETED_FILE: u64 = 4;
const TAG_NEW_FILE: u64 = 5;
const TAG_ADD_TOMBSTONE: u64 = 6;
const TAG_REMOVE_TOMBSTONE: u64 = 7;

/// What the MANIFEST knows about one SSTable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// File number; the file is `{file_no:06}.sst`.
    pub file_no: u64,
    /// Size in bytes.
    pub size: u64,
    /// Smallest internal key.
    pub smallest: Bytes,
    /// Largest internal key.
    pub largest: Bytes,
    /// Lowest sequence number of any entry.
    pub min_seq: SeqNo,
    /// Highest sequence number of any entry.
    pub max_seq: SeqNo,
    /// Entries in the table.
    pub num_entries: u64,
    /// Point tombstones in the table.
    pub num_deletions: u64,
    /// Every range tombstone with a sequence number up to this one has been applied to the
    /// table: it holds no entry such a tombstone hides (0: no such promise).
    pub tombstones_applied: SeqNo,
}

impl FileInfo {
    /// Smallest user key.
    pub fn smallest_user(&self) -> &[u8] {
        crate::key::user_key(&self.smallest)
    }
    /// Largest user key.
    pub fn largest_user(&self) -> &[u8] {
        crate::key::user_key(&self.largest)
    }
}

/// A change to the set of live tables.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionEdit {
    /// WAL files numbered below this hold nothing that is not in tables.
    pub log_number: Option<u64>,
    /// Next unused file number.
    pub next_file_number: Option<u64>,
    /// Highest sequence number stored in tables.
    pub last_seq: Option<SeqNo>,
    /// Tables removed, as (level, file number).
    pub deleted_files: Vec<(usize, u64)>,
    /// Tables added, as (level, table).
    pub new_files: Vec<(usize, FileInfo)>,
    /// Range tombstones that moved from a flushed memtable into the version.
    pub added_tombstones: Vec<RangeTombstone>,
    /// Range tombstones no longer needed, by sequence number.
    pub removed_tombstones: Vec<SeqNo>,
}

impl VersionEdit {
    /// Appends the encoded edit to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        for (tag, v) in
            [(TAG_LOG_NUMBER, self.log_number), (TAG_NEXT_FILE, self.next_file_number), (TAG_LAST_SEQ, self.last_seq)]
        {
            if let Some(v) = v {
                put_varint(out, tag);
                put_varint(out, v);
            }
        }
        for &(level, no) in &self.deleted_files {
            put_varint(out, TAG_DELETED_FILE);
            put_varint(out, level as u64);
            put_varint(out, no);
        }
        for (level, f) in &self.new_files {
            put_varint(out, TAG_NEW_FILE);
            put_varint(out, *level as u64);
            put_varint(out, f.file_no);
            put_varint(out, f.size);
            put_len_prefixed(out, &f.smallest);
            put_len_prefixed(out, &f.largest);
            put_varint(out, f.min_seq);
            put_varint(out, f.max_seq);
            put_varint(out, f.num_entries);
            put_varint(out, f.num_deletions);
            put_varint(out, f.tombstones_applied);
        }
        for t in &self.added_tombstones {
            put_varint(out, TAG_ADD_TOMBSTONE);
            put_len_prefixed(out, &t.start);
            put_len_prefixed(out, &t.end);
            put_varint(out, t.seq);
        }
        for &seq in &self.removed_tombstones {
            put_varint(out, TAG_REMOVE_TOMBSTONE);
            put_varint(out, seq);
        }
    }

    /// Decodes an edit; the error gives the offset within `data` and the reason.
    pub fn decode(data: &[u8]) -> Result<VersionEdit, (usize, String)> {
        let mut r = Reader::new(data);
        let mut e = VersionEdit::default();
        while !r.is_empty() {
            let at = r.pos();
            let trunc = || (at, "truncated field".to_string());
            let tag = r.varint().ok_or_else(trunc)?;
            match tag {
                TAG_LOG_NUMBER => e.log_number = Some(r.varint().ok_or_else(trunc)?),
                TAG_NEXT_FILE => e.next_file_number = Some(r.varint().ok_or_else(trunc)?),
                TAG_LAST_SEQ => e.last_seq = Some(r.varint().ok_or_else(trunc)?),
                TAG_DELETED_FILE => {
                    let level = r.varint_len(MAX_LEVELS - 1).ok_or((at, "bad level".into()))?;
                    e.deleted_files.push((level, r.varint().ok_or_else(trunc)?));
                }
                TAG_NEW_FILE => {
                    let level = r.varint_len(MAX_LEVELS - 1).ok_or((at, "bad level".into()))?;
                    let mut f = || -> Option<FileInfo> {
                        Some(FileInfo {
                            file_no: r.varint()?,
                            size: r.varint()?,
                            smallest: Bytes::copy_from_slice(r.len_prefixed()?),
                            largest: Bytes::copy_from_slice(r.len_prefixed()?),
                            min_seq: r.varint()?,
                            max_seq: r.varint()?,
                            num_entries: r.varint()?,
                            num_deletions: r.varint()?,
                            tombstones_applied: r.varint()?,
                        })
                    };
                    let f = f().ok_or_else(trunc)?;
                    if f.smallest.len() < TRAILER_LEN || f.largest.len() < TRAILER_LEN {
                        return Err((at, "table bound shorter than an internal key".into()));
                    }
                    e.new_files.push((level, f));
                }
                TAG_ADD_TOMBSTONE => {
                    let start = Bytes::copy_from_slice(r.len_prefixed().ok_or_else(trunc)?);
                    let end = Bytes::copy_from_slice(r.len_prefixed().ok_or_else(trunc)?);
                    let seq = r.varint().ok_or_else(trunc)?;
                    e.added_tombstones.push(RangeTombstone { start, end, seq });
                }
                TAG_REMOVE_TOMBSTONE => e.removed_tombstones.push(r.varint().ok_or_else(trunc)?),
                t => return Err((at, format!("unknown field tag {t}"))),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> VersionEdit {
        VersionEdit {
            log_number: Some(7),
            next_file_number: Some(12),
            last_seq: Some(99),
            deleted_files: vec![(0, 3), (2, 5)],
            new_files: vec![(
                1,
                FileInfo {
                    file_no: 11,
                    size: 4096,
                    smallest: Bytes::from(crate::key::internal_key(b"a", 1, 1)),
                    largest: Bytes::from(crate::key::internal_key(b"z", 9, 1)),
                    min_seq: 1,
                    max_seq: 9,
                    num_entries: 10,
                    num_deletions: 2,
                    tombstones_applied: 40,
                },
            )],
            added_tombstones: vec![RangeTombstone {
                start: Bytes::from_static(b"c"),
                end: Bytes::from_static(b"f"),
                seq: 50,
            }],
            removed_tombstones: vec![40],
        }
    }

    #[test]
    fn round_trip() {
        let e = sample();
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(VersionEdit::decode(&out).unwrap(), e);
    }

    #[test]
    fn truncation_is_an_error() {
        let mut out = Vec::new();
        sample().encode(&mut out);
        for cut in 1..out.len() {
            // A cut may land on a field boundary and decode to a shorter edit; it must never panic
            // and, when it decodes, must not equal the full edit.
            if let Ok(e) = VersionEdit::decode(&out[..cut]) {
                assert_ne!(e, sample());
            }
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics(data: Vec<u8>) {
            let _ = VersionEdit::decode(&data);
        }
    }
}
