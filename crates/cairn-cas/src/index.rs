//! The store's rows in the key-value engine, in the `cas` keyspace (physical prefix `cas/`;
//! keys below are relative to it; format in `docs/format/cas.md`):
//!
//! | key | value |
//! |---|---|
//! | `cas/meta` | format version, hash algorithm, chunk sizes |
//! | `cas/next_pack` | u64: number of the next pack to create |
//! | `cas/c/<chunk id>` | [`ChunkRow`]: where the chunk is and how many references it has |
//! | `cas/b/<blob id>` | [`BlobRow`]: references, size and the chunk list (first page) |
//! | `cas/x/<blob id><page u32 BE>` | further pages of a long chunk list |
//! | `cas/p/<pack u64 BE>` | [`PackRow`]: committed and live bytes of a pack |
//! | `cas/d/<chunk id>` | UTF-8: why the chunk is known damaged (recorded by verify) |
//! | `cas/j/<pack u64 BE><offset u64 BE>` | bytes a small batch appended to the open pack there, not synced yet |

use crate::store::LargeChunks;
use crate::{Error, HashAlgo, Id, Result};

pub(crate) const META: &[u8] = b"meta";
pub(crate) const NEXT_PACK: &[u8] = b"next_pack";
pub(crate) const CHUNK_PREFIX: &[u8] = b"c/";
pub(crate) const BLOB_PREFIX: &[u8] = b"b/";
pub(crate) const PAGE_PREFIX: &[u8] = b"x/";
pub(crate) const PACK_PREFIX: &[u8] = b"p/";
/// `d/<chunk id>` -> why: a chunk found damaged (by verify); writes re-store it from new
/// content instead of sharing the damaged copy.
pub(crate) const DAMAGED_PREFIX: &[u8] = b"d/";

/// `j/<pack u64 BE><offset u64 BE>` -> the bytes a batch appended to that pack at that offset
/// without syncing it: the journal that makes a small batch durable with one sync (the
/// engine's), replayed into the pack at open (see [`crate::store`]).
pub(crate) const JOURNAL_PREFIX: &[u8] = b"j/";

/// Chunk ids per blob row or page (2 MiB of ids).
pub(crate) const IDS_PER_PAGE: usize = 65_536;

fn bad(what: &str) -> Error {
    Error::corruption("<index>", 0, format!("malformed {what} row"))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

pub(crate) fn key(prefix: &[u8], id: &Id) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + 32);
    k.extend_from_slice(prefix);
    k.extend_from_slice(id.as_bytes());
    k
}

pub(crate) fn page_key(id: &Id, page: u32) -> Vec<u8> {
    let mut k = key(PAGE_PREFIX, id);
    k.extend_from_slice(&page.to_be_bytes());
    k
}

pub(crate) fn journal_key(pack: u64, offset: u64) -> Vec<u8> {
    let mut k = JOURNAL_PREFIX.to_vec();
    k.extend_from_slice(&pack.to_be_bytes());
    k.extend_from_slice(&offset.to_be_bytes());
    k
}

/// The pack and offset of a journal key (relative), or `None` if malformed.
pub(crate) fn parse_journal_key(k: &[u8]) -> Option<(u64, u64)> {
    let rest = k.strip_prefix(JOURNAL_PREFIX)?;
    if rest.len() != 16 {
        return None;
    }
    let (p, o) = rest.split_at(8);
    Some((u64::from_be_bytes(p.try_into().ok()?), u64::from_be_bytes(o.try_into().ok()?)))
}

pub(crate) fn pack_key(no: u64) -> Vec<u8> {
    let mut k = PACK_PREFIX.to_vec();
    k.extend_from_slice(&no.to_be_bytes());
    k
}

/// The store's fixed settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub hash: HashAlgo,
    pub min_chunk: u32,
    pub avg_chunk: u32,
    pub max_chunk: u32,
    /// Chunk sizes of large content (version 2 rows; stores made before have none).
    pub large: Option<LargeChunks>,
}

impl Meta {
    /// Version 1 without large-content chunking (as stores made before it have), else 2.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![if self.large.is_some() { 2 } else { 1 }, self.hash.code()];
        for x in [self.min_chunk, self.avg_chunk, self.max_chunk] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        if let Some(l) = self.large {
            v.extend_from_slice(&l.threshold.to_le_bytes());
            for x in [l.min, l.avg, l.max] {
                v.extend_from_slice(&x.to_le_bytes());
            }
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<Meta> {
        let large = match (b.first(), b.len()) {
            (Some(1), 14) => false,
            (Some(2), 34) => true,
            _ => return Err(bad("meta")),
        };
        let hash = HashAlgo::from_code(b[1]).ok_or_else(|| bad("meta"))?;
        let g = |at| u32_at(b, at).ok_or_else(|| bad("meta"));
        let large = match large {
            false => None,
            true => {
                let threshold = u64::from_le_bytes(b[14..22].try_into().map_err(|_| bad("meta"))?);
                Some(LargeChunks { threshold, min: g(22)?, avg: g(26)?, max: g(30)? })
            }
        };
        Ok(Meta { hash, min_chunk: g(2)?, avg_chunk: g(6)?, max_chunk: g(10)?, large })
    }

    /// FastCDC's (min, average, max) chunk sizes for content of `len` bytes.
    pub fn chunk_sizes(&self, len: u64) -> (usize, usize, usize) {
        match self.large {
            Some(l) if len >= l.threshold => (l.min as usize, l.avg as usize, l.max as usize),
            _ => (self.min_chunk as usize, self.avg_chunk as usize, self.max_chunk as usize),
        }
    }
}

/// Where a chunk is stored and how many blob references point at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ChunkRow {
    pub pack: u64,
    /// Offset of the entry holding the chunk.
    pub offset: u64,
    /// Bytes of that whole entry.
    pub entry_len: u32,
    pub raw_len: u32,
    pub refs: u64,
    /// `None`: a version 1 single entry; `Some((inner, group_raw))`: a group entry, the chunk
    /// at raw offset `inner` of the group's `group_raw` bytes.
    pub group: Option<(u32, u32)>,
}

impl ChunkRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(40);
        v.extend_from_slice(&self.pack.to_le_bytes());
        v.extend_from_slice(&self.offset.to_le_bytes());
        match self.group {
            // Version 1 rows hold the stored length, not the entry's.
            None => {
                v.extend_from_slice(&self.entry_len.saturating_sub(crate::pack::ENTRY_OVERHEAD as u32).to_le_bytes())
            }
            Some(_) => v.extend_from_slice(&self.entry_len.to_le_bytes()),
        }
        v.extend_from_slice(&self.raw_len.to_le_bytes());
        v.extend_from_slice(&self.refs.to_le_bytes());
        if let Some((inner, group_raw)) = self.group {
            v.extend_from_slice(&inner.to_le_bytes());
            v.extend_from_slice(&group_raw.to_le_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<ChunkRow> {
        let f = || -> Option<ChunkRow> {
            let group = match b.len() {
                32 => None,
                40 => Some((u32_at(b, 32)?, u32_at(b, 36)?)),
                _ => return None,
            };
            let len = u32_at(b, 16)?;
            let entry_len = match group {
                None => len.checked_add(crate::pack::ENTRY_OVERHEAD as u32)?,
                Some(_) => len,
            };
            Some(ChunkRow {
                pack: u64_at(b, 0)?,
                offset: u64_at(b, 8)?,
                entry_len,
                raw_len: u32_at(b, 20)?,
                refs: u64_at(b, 24)?,
                group,
            })
        };
        f().ok_or_else(|| bad("chunk"))
    }

    /// The rows of the chunks of group `g`, appended to pack `pack` at `offset` (no references
    /// yet).
    pub fn in_group(g: &crate::pack::Group, pack: u64, offset: u64) -> impl Iterator<Item = (Id, ChunkRow)> + '_ {
        let (entry_len, group_raw) = (g.entry_len() as u32, g.raw_len() as u32);
        g.dir.iter().scan(0u32, move |inner, &(id, raw_len)| {
            let row = ChunkRow { pack, offset, entry_len, raw_len, refs: 0, group: Some((*inner, group_raw)) };
            *inner += raw_len;
            Some((id, row))
        })
    }

    /// The chunk's share of its entry's bytes: the whole entry for a single entry, a part
    /// proportional to its raw length in a group. Pack rows count live bytes in shares.
    pub fn share(&self) -> u64 {
        match self.group {
            Some((_, group_raw)) if group_raw > 0 => self.entry_len as u64 * self.raw_len as u64 / group_raw as u64,
            _ => self.entry_len as u64,
        }
    }
}

/// A blob: references, logical size, chunk count and the first page of chunk ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlobRow {
    pub refs: u64,
    pub size: u64,
    pub chunk_count: u64,
    pub first_page: Vec<Id>,
}

impl BlobRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(24 + 32 * self.first_page.len());
        v.extend_from_slice(&self.refs.to_le_bytes());
        v.extend_from_slice(&self.size.to_le_bytes());
        v.extend_from_slice(&self.chunk_count.to_le_bytes());
        for id in &self.first_page {
            v.extend_from_slice(id.as_bytes());
        }
        v
    }

    pub fn decode(b: &[u8]) -> Result<BlobRow> {
        let (refs, size, chunk_count) = match (u64_at(b, 0), u64_at(b, 8), u64_at(b, 16)) {
            (Some(r), Some(s), Some(c)) => (r, s, c),
            _ => return Err(bad("blob")),
        };
        let first_page = decode_ids(&b[24..]).ok_or_else(|| bad("blob"))?;
        let expect = (chunk_count as usize).min(IDS_PER_PAGE);
        if first_page.len() != expect {
            return Err(bad("blob"));
        }
        Ok(BlobRow { refs, size, chunk_count, first_page })
    }
}

pub(crate) fn encode_ids(ids: &[Id]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.0).collect()
}

pub(crate) fn decode_ids(b: &[u8]) -> Option<Vec<Id>> {
    if !b.len().is_multiple_of(32) {
        return None;
    }
    Some(b.chunks_exact(32).filter_map(Id::from_slice).collect())
}

/// Committed and live bytes of a pack (entries referenced by at least one blob).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct PackRow {
    pub total: u64,
    pub live: u64,
}

impl PackRow {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = self.total.to_le_bytes().to_vec();
        v.extend_from_slice(&self.live.to_le_bytes());
        v
    }

    pub fn decode(b: &[u8]) -> Result<PackRow> {
        match (b.len(), u64_at(b, 0), u64_at(b, 8)) {
            (16, Some(total), Some(live)) => Ok(PackRow { total, live }),
            _ => Err(bad("pack")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn journal_keys_round_trip_and_malformed_ones_are_refused() {
        let k = journal_key(7, 1 << 40);
        assert_eq!(parse_journal_key(&k), Some((7, 1 << 40)));
        assert_eq!(parse_journal_key(&k[..k.len() - 1]), None);
        assert_eq!(parse_journal_key(&[k.as_slice(), b"x"].concat()), None);
        assert_eq!(parse_journal_key(&pack_key(7)), None);
    }

    proptest! {
        #[test]
        fn journal_keys_round_trip_and_any_bytes_decode_or_fail(pack: u64, offset: u64, junk: Vec<u8>) {
            prop_assert_eq!(parse_journal_key(&journal_key(pack, offset)), Some((pack, offset)));
            let parsed = parse_journal_key(&junk);
            prop_assert_eq!(parsed.is_some(), junk.len() == 18 && junk.starts_with(JOURNAL_PREFIX));
        }

        #[test]
        fn rows_round_trip(pack: u64, offset: u64, len: u32, raw_len: u32, refs: u64, group: Option<(u32, u32)>, n in 0usize..5) {
            // A version 1 row's entry is at least its header and checksum long.
            let entry_len = if group.is_some() { len } else { len.max(crate::pack::ENTRY_OVERHEAD as u32) };
            let c = ChunkRow { pack, offset, entry_len, raw_len, refs, group };
            prop_assert_eq!(ChunkRow::decode(&c.encode()).unwrap(), c);
            let ids: Vec<Id> = (0..n).map(|i| Id([i as u8; 32])).collect();
            let b = BlobRow { refs, size: offset, chunk_count: n as u64, first_page: ids };
            prop_assert_eq!(BlobRow::decode(&b.encode()).unwrap(), b);
            let p = PackRow { total: offset, live: pack };
            prop_assert_eq!(PackRow::decode(&p.encode()).unwrap(), p);
        }

        #[test]
        fn meta_round_trips(code in 1u8..=2, min: u32, avg: u32, max: u32, large: Option<(u64, u32, u32, u32)>) {
            let hash = HashAlgo::from_code(code).unwrap();
            let large = large.map(|(threshold, min, avg, max)| LargeChunks { threshold, min, avg, max });
            let m = Meta { hash, min_chunk: min, avg_chunk: avg, max_chunk: max, large };
            let b = m.encode();
            prop_assert_eq!(b[0], if large.is_some() { 2 } else { 1 });
            prop_assert_eq!(Meta::decode(&b).unwrap(), m);
            // Any other length is refused.
            prop_assert!(Meta::decode(&b[..b.len() - 1]).is_err());
        }

        #[test]
        fn decoders_never_panic(b: Vec<u8>) {
            let _ = ChunkRow::decode(&b);
            let _ = BlobRow::decode(&b);
            let _ = PackRow::decode(&b);
            let _ = Meta::decode(&b);
        }
    }
}
