//! Reads blocks written by [`crate::block::builder::BlockBuilder`]: [`Block`] validates the
//! restart trailer, [`BlockIter`] walks the entries in both directions and seeks by binary search
//! over the restart points, as LevelDB does. The same iterator serves index blocks, whose values
//! are [`BlockHandle`]s.
//!
//! Keys in blocks are internal keys ordered by [`key::compare_internal`]. Every malformed entry
//! met while iterating is an [`Error::Corruption`] naming the file and the block's offset.

pub mod builder;

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::coding::{Reader, put_varint};
use crate::iter::InternalIterator;
use crate::key::{self, TRAILER_LEN};
use crate::storage::prefetch::prefetch_in;
use crate::{Error, Result};

/// Where a block lies in its file. `size` excludes the 5-byte block trailer
/// (compression tag and checksum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockHandle {
    /// Offset of the block's first byte.
    pub offset: u64,
    /// Length of the stored (possibly compressed) block, trailer excluded.
    pub size: u64,
}

impl BlockHandle {
    /// Appends the handle as two varints (offset, size).
    pub fn encode_to(&self, out: &mut Vec<u8>) {
        put_varint(out, self.offset);
        put_varint(out, self.size);
    }

    /// Decodes a handle that fills `buf` exactly; `None` if truncated or followed by bytes.
    pub fn decode(buf: &[u8]) -> Option<BlockHandle> {
        let mut r = Reader::new(buf);
        let h = BlockHandle { offset: r.varint()?, size: r.varint()? };
        r.is_empty().then_some(h)
    }
}

/// A decoded, validated block. Cloning is cheap (reference-counted bytes and path).
#[derive(Clone, Debug)]
pub struct Block {
    data: Bytes,
    /// Start of the restart array, which is also the end of the entries.
    restarts_offset: usize,
    num_restarts: usize,
    path: Arc<Path>,
    offset: u64,
}

impl Block {
    /// Validates the restart trailer of `data`, the uncompressed block found at `offset` in the
    /// file at `path` (both only name the block in errors).
    pub fn new(data: Bytes, path: Arc<Path>, offset: u64) -> Result<Block> {
        let corrupt = |reason: String| Error::corruption(&path, offset, reason);
        let len = data.len();
        if len < 4 {
            return Err(corrupt(format!("block of {len} bytes has no restart count")));
        }
        let count = u32::from_le_bytes([data[len - 4], data[len - 3], data[len - 2], data[len - 1]]);
        let num_restarts = count as usize;
        let restarts_offset = num_restarts
            .checked_mul(4)
            .and_then(|n| (len - 4).checked_sub(n))
            .ok_or_else(|| corrupt(format!("{count} restart points do not fit in {len} bytes")))?;
        if num_restarts == 0 {
            return Err(corrupt("block has no restart points".into()));
        }
        let block = Block { data, restarts_offset, num_restarts, path: path.clone(), offset };
        let mut prev = None;
        for i in 0..num_restarts {
            let r = block.restart_point(i);
            let ok = match prev {
                None => r == 0,
                Some(p) => r > p && r < restarts_offset,
            };
            if !ok {
                return Err(corrupt(format!("restart point {i} at {r} is out of order or range")));
            }
            prev = Some(r);
        }
        Ok(block)
    }

    #[inline]
    fn restart_point(&self, i: usize) -> usize {
        let p = self.restarts_offset + 4 * i;
        u32::from_le_bytes([self.data[p], self.data[p + 1], self.data[p + 2], self.data[p + 3]]) as usize
    }

    /// Byte length of the (uncompressed) block, trailer included.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the block holds no entries.
    pub fn is_empty(&self) -> bool {
        self.restarts_offset == 0
    }

    /// The block's bytes, restart trailer included.
    pub fn data(&self) -> &Bytes {
        &self.data
    }

    /// Number of restart points (in a table's index: of entries, hence of data blocks).
    pub fn num_restarts(&self) -> usize {
        self.num_restarts
    }

    /// Offset of the block in its file.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The file the block came from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An unpositioned iterator over the block (sharing it: one reference count).
    pub fn iter(self: &Arc<Self>) -> BlockIter {
        BlockIter::new(self.clone())
    }

    /// Requests the block's first entry and its restart array (a scan about to enter it).
    pub fn prefetch_start(&self) {
        prefetch_in(&self.data, 0);
        prefetch_in(&self.data, self.restarts_offset);
    }
}

/// Blocks with at most this many restart points have all of them prefetched before a seek's
/// binary search (data blocks: 4 KiB of entries, a restart every 4 entries).
const PREFETCH_RESTARTS: usize = 8;

/// Bytes past an entry's start that a prefetch also covers: its header and a short key.
const KEY_REACH: usize = 32;

/// Eight bytes of every restart key of a block, as big-endian integers, for seeks in large
/// blocks (a table's index: one restart per data block, thousands of them): a binary search
/// over the keys themselves costs two cache misses a probe (the restart offset, then the
/// entry), one over this dense array a fraction of one. The eight bytes are those of the user
/// key right after the prefix that every restart key shares (zero-padded), so that
/// hashed or numbered keys with a common stem (`user…`) still differ in them.
#[derive(Debug)]
pub struct RestartPrefixes {
    /// The user-key prefix all restart keys share.
    common: Box<[u8]>,
    prefixes: Box<[u64]>,
    /// Every [`LINE`]th prefix: a search finds the group of eight `prefixes` to look in here
    /// (a few KiB that stay in the CPU cache), then reads that group (one or two cache lines),
    /// instead of a binary search over the whole array taking a cache miss at most of its
    /// probes.
    top: Box<[u64]>,
}

/// Prefixes per 64-byte line.
const LINE: usize = 8;

impl RestartPrefixes {
    /// Builds the prefixes of `block`'s restart keys; `None` if a restart entry is malformed
    /// (then seeks take the ordinary path, which reports the damage).
    pub fn new(block: &Block) -> Option<RestartPrefixes> {
        let mut it = BlockIter::new(block);
        let first = key::user_key(it.restart_key(0).ok()?).to_vec();
        let last = key::user_key(it.restart_key(block.num_restarts - 1).ok()?);
        let shared = first.iter().zip(last).take_while(|(a, b)| a == b).count();
        let common: Box<[u8]> = first[..shared].into();
        let mut prefixes = Vec::with_capacity(block.num_restarts);
        for i in 0..block.num_restarts {
            let user_key = key::user_key(it.restart_key(i).ok()?);
            prefixes.push(prefix_after(user_key, common.len()));
        }
        // Sorted keys give sorted prefixes; anything else is a damaged block.
        prefixes.is_sorted().then(|| RestartPrefixes::from_sorted(common, prefixes))
    }

    /// The search structure over sorted `prefixes` of keys sharing `common`.
    fn from_sorted(common: Box<[u8]>, prefixes: Vec<u64>) -> RestartPrefixes {
        let top = prefixes.iter().step_by(LINE).copied().collect();
        RestartPrefixes { common, prefixes: prefixes.into(), top }
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.common.len() + (self.prefixes.len() + self.top.len()) * 8
    }

    /// The first index whose prefix is `>= want` (the length if none is).
    fn lower_bound(&self, want: u64) -> usize {
        // `top[j]` is `prefixes[j * LINE]`: the first line starting at `>= want` is `j`, so the
        // answer is in line `j - 1` or is `j * LINE`.
        let j = self.top.partition_point(|&p| p < want);
        let Some(line) = j.checked_sub(1) else { return 0 };
        let start = line * LINE;
        let end = (start + LINE).min(self.prefixes.len());
        start + self.prefixes[start..end].partition_point(|&p| p < want)
    }

    /// `(lo, hi)`: restart keys before `lo` have user keys `< user_key`, those from `hi` on
    /// `> user_key`; those in `lo..hi` may be either or equal.
    fn equal_range(&self, user_key: &[u8]) -> (usize, usize) {
        let n = self.prefixes.len();
        let stem = &user_key[..user_key.len().min(self.common.len())];
        match stem.cmp(&self.common[..stem.len()]) {
            std::cmp::Ordering::Less => return (0, 0),
            std::cmp::Ordering::Greater => return (n, n),
            // A key that is a proper prefix of the common prefix precedes every restart key.
            std::cmp::Ordering::Equal if stem.len() < self.common.len() => return (0, 0),
            std::cmp::Ordering::Equal => {}
        }
        let want = prefix_after(user_key, self.common.len());
        let lo = self.lower_bound(want);
        // Equal prefixes are few (keys differing only past the eight bytes): count them from
        // `lo` rather than binary-search the rest of the array, which would cost a cache miss
        // per probe for the one or two lines the answer lies in.
        let rest = &self.prefixes[lo..];
        let mut hi = lo + rest.iter().take(LINE).take_while(|&&p| p == want).count();
        if hi == lo + LINE {
            hi = lo + rest.partition_point(|&p| p == want);
        }
        (lo, hi)
    }
}

/// Bytes `skip..skip + 8` of `user_key`, zero-padded, as a big-endian integer (so integer
/// order agrees with byte order wherever the prefixes differ).
fn prefix_after(user_key: &[u8], skip: usize) -> u64 {
    let rest = user_key.get(skip..).unwrap_or_default();
    let mut b = [0u8; 8];
    let n = rest.len().min(8);
    b[..n].copy_from_slice(&rest[..n]);
    u64::from_be_bytes(b)
}

/// One decoded entry header.
struct Entry {
    shared: usize,
    unshared: usize,
    /// Offset of the key delta.
    key_start: usize,
    value_len: usize,
    /// Offset just past the value.
    end: usize,
}

/// A bidirectional cursor over a [`Block`], held as `B`: an `Arc<Block>` lets the cursor
/// outlive the cache entry it came from (scans; opening one costs one reference count), a
/// `&Block` costs nothing (point lookups, which would otherwise touch the index block's
/// reference count from every reading thread).
#[derive(Debug)]
pub struct BlockIter<B: Deref<Target = Block> = Arc<Block>> {
    block: B,
    /// Offset of the current entry (`restarts_offset` when not valid).
    current: usize,
    /// Offset just past the current entry.
    next_offset: usize,
    /// Index of the restart interval holding the current entry.
    restart_index: usize,
    /// Where that interval starts and ends (the next restart point, or the end of the
    /// entries), so that a step checks an entry against them without reading the restart array.
    interval_start: usize,
    interval_end: usize,
    key: Vec<u8>,
    value_start: usize,
    value_end: usize,
    valid: bool,
}

impl<B: Deref<Target = Block>> BlockIter<B> {
    /// An unpositioned iterator over `block`.
    pub fn new(block: B) -> Self {
        // Room for most keys: a scan's first steps do not grow the buffer.
        Self::with_key_buffer(block, Vec::with_capacity(64))
    }

    /// An unpositioned iterator over `block` that builds keys in `key` (its contents do not
    /// matter), so a lookup can reuse one allocation; [`BlockIter::into_key_buffer`] gives it
    /// back.
    pub fn with_key_buffer(block: B, mut key: Vec<u8>) -> Self {
        key.clear();
        let end = block.restarts_offset;
        BlockIter {
            block,
            current: end,
            next_offset: end,
            restart_index: 0,
            interval_start: end,
            interval_end: end,
            key,
            value_start: 0,
            value_end: 0,
            valid: false,
        }
    }

    /// The key buffer, for the next [`BlockIter::with_key_buffer`].
    pub fn into_key_buffer(self) -> Vec<u8> {
        self.key
    }

    /// Makes this an unpositioned iterator over `block`, keeping the key buffer (a scan moving
    /// from block to block allocates none).
    pub fn reset(&mut self, block: B) {
        self.block = block;
        self.key.clear();
        self.invalidate();
    }

    /// Whether the iterator stands in the block's last restart interval: a forward scan is at
    /// most a restart interval away from the next block.
    pub fn in_last_interval(&self) -> bool {
        self.restart_index + 1 >= self.block.num_restarts
    }

    /// The current value as shared bytes (no copy). Requires `valid()`.
    pub fn value_bytes(&self) -> Bytes {
        self.block.data.slice(self.value_start..self.value_end)
    }

    /// Index of the restart interval holding the current entry: in a block with a restart at
    /// every entry (a table's index), the entry's number.
    pub fn restart_index(&self) -> usize {
        self.restart_index
    }

    /// Decodes the current value as a [`BlockHandle`] (index blocks). Requires `valid()`.
    pub fn handle(&self) -> Result<BlockHandle> {
        BlockHandle::decode(&self.block.data[self.value_start..self.value_end]).ok_or_else(|| {
            let reason = format!("bad block handle in index entry at {}", self.current);
            Error::corruption(&self.block.path, self.block.offset, reason)
        })
    }

    /// The block being iterated.
    pub fn block(&self) -> &Block {
        &self.block
    }

    fn invalidate(&mut self) {
        self.valid = false;
        self.current = self.block.restarts_offset;
        self.next_offset = self.current;
        self.restart_index = self.block.num_restarts;
        self.interval_start = self.current;
        self.interval_end = self.current;
    }

    fn corrupt(&mut self, at: usize, reason: &str) -> Error {
        self.invalidate();
        let reason = format!("{reason} (entry at byte {at} of the block)");
        Error::corruption(&self.block.path, self.block.offset, reason)
    }

    #[inline]
    fn decode_entry(&self, pos: usize) -> Option<Entry> {
        let limit = self.block.restarts_offset;
        // Nearly every entry has one-byte key lengths and a value length of one or two bytes
        // (below 16 KiB): decoded here with one bounds check; the rest take the general path.
        if let Some(&[shared, unshared, v0, v1]) =
            self.block.data.get(pos..pos + 4).and_then(|b| <&[u8; 4]>::try_from(b).ok())
            && shared < 0x80
            && unshared < 0x80
            && (v0 < 0x80 || v1 < 0x80)
        {
            let (value_len, header) =
                if v0 < 0x80 { (v0 as usize, 3) } else { ((v0 & 0x7F) as usize | (v1 as usize) << 7, 4) };
            let key_start = pos + header;
            let end = key_start + unshared as usize + value_len;
            return (end <= limit).then_some(Entry {
                shared: shared as usize,
                unshared: unshared as usize,
                key_start,
                value_len,
                end,
            });
        }
        self.decode_entry_long(pos, limit)
    }

    #[cold]
    fn decode_entry_long(&self, pos: usize, limit: usize) -> Option<Entry> {
        let mut r = Reader::new(self.block.data.get(pos..limit)?);
        let shared = r.varint_len(usize::MAX)?;
        let unshared = r.varint_len(limit)?;
        let value_len = r.varint_len(limit)?;
        let key_start = pos + r.pos();
        let end = key_start.checked_add(unshared)?.checked_add(value_len)?;
        (end <= limit).then_some(Entry { shared, unshared, key_start, value_len, end })
    }

    /// The full key stored at restart point `i` (which must not share a prefix).
    fn restart_key(&mut self, i: usize) -> Result<&[u8]> {
        let pos = self.block.restart_point(i);
        match self.decode_entry(pos) {
            Some(e) if e.shared == 0 && e.unshared >= TRAILER_LEN => {
                Ok(&self.block.data[e.key_start..e.key_start + e.unshared])
            }
            _ => Err(self.corrupt(pos, "malformed restart entry")),
        }
    }

    /// Positions at the first entry whose key is `>= target`, knowing that the last restart
    /// point whose key is `< target` (or restart 0 if none is) lies in `left..=right`.
    fn seek_between(&mut self, mut left: usize, mut right: usize, target: &[u8]) -> Result<()> {
        while left < right {
            let mid = left + (right - left).div_ceil(2);
            if key::compare_internal(self.restart_key(mid)?, target).is_lt() {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        self.seek_to_restart(left);
        while self.parse_next()? {
            if key::compare_internal(&self.key, target).is_ge() {
                break;
            }
        }
        Ok(())
    }

    /// [`InternalIterator::seek`] with the restart keys' [`RestartPrefixes`] (built from this
    /// block): the binary search runs over a dense array of integers, and only restart keys
    /// whose prefix equals the target's are decoded and compared in full.
    pub fn seek_with(&mut self, prefixes: &RestartPrefixes, target: &[u8]) -> Result<()> {
        debug_assert_eq!(prefixes.prefixes.len(), self.block.num_restarts);
        let (lo, hi) = prefixes.equal_range(key::user_key(target));
        // Restarts before `lo` are < target and from `hi` on > target, so the last one < target
        // is `lo - 1` or one of `lo..hi`.
        let left = lo.saturating_sub(1);
        self.seek_between(left, hi.saturating_sub(1).max(left), target)
    }

    fn seek_to_restart(&mut self, i: usize) {
        self.key.clear();
        self.restart_index = i;
        self.current = self.block.restart_point(i);
        self.next_offset = self.current;
        self.interval_start = self.current;
        self.interval_end = self.interval_end_of(i);
        self.valid = false;
    }

    /// Where restart interval `i` ends: the next restart point, or the end of the entries.
    fn interval_end_of(&self, i: usize) -> usize {
        if i + 1 < self.block.num_restarts { self.block.restart_point(i + 1) } else { self.block.restarts_offset }
    }

    /// Decodes the entry at `next_offset`; `Ok(false)` at the end of the block.
    fn parse_next(&mut self) -> Result<bool> {
        let pos = self.next_offset;
        self.current = pos;
        if pos >= self.block.restarts_offset {
            self.invalidate();
            return Ok(false);
        }
        let Some(e) = self.decode_entry(pos) else {
            return Err(self.corrupt(pos, "truncated entry"));
        };
        // Entries never overlap a restart point (checked below for each), so an entry starts
        // inside the current interval or exactly where the next one starts (`pos` is below
        // the end of the entries, so there is a next one then).
        if pos == self.interval_end {
            self.restart_index += 1;
            self.interval_start = pos;
            self.interval_end = self.interval_end_of(self.restart_index);
        }
        if e.shared > self.key.len() {
            return Err(self.corrupt(pos, "entry shares more bytes than the previous key has"));
        }
        if pos == self.interval_start && e.shared != 0 {
            return Err(self.corrupt(pos, "restart entry shares a prefix"));
        }
        if e.end > self.interval_end {
            return Err(self.corrupt(pos, "entry overlaps a restart point"));
        }
        self.key.truncate(e.shared);
        self.key.extend_from_slice(&self.block.data[e.key_start..e.key_start + e.unshared]);
        if self.key.len() < TRAILER_LEN {
            return Err(self.corrupt(pos, "key shorter than its 8-byte trailer"));
        }
        self.value_start = e.key_start + e.unshared;
        self.value_end = self.value_start + e.value_len;
        self.next_offset = e.end;
        self.valid = true;
        // The next two entries' headers and keys (which may run into the following line), the
        // second entry's place guessed from this entry's size (values of one table are often
        // of one size): a scan reaches them after a few merge steps, by when they are in cache.
        let entries = &self.block.data[..self.block.restarts_offset];
        let after = e.end + (e.end - pos);
        for at in [e.end, e.end + KEY_REACH, after, after + KEY_REACH] {
            prefetch_in(entries, at);
        }
        Ok(true)
    }
}

impl<B: Deref<Target = Block> + Send> InternalIterator for BlockIter<B> {
    #[inline]
    fn valid(&self) -> bool {
        self.valid
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.seek_to_restart(0);
        self.parse_next().map(drop)
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.seek_to_restart(self.block.num_restarts - 1);
        while self.parse_next()? && self.next_offset < self.block.restarts_offset {}
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // In a block of few restart points, every one the search may probe is requested at once.
        if self.block.num_restarts <= PREFETCH_RESTARTS {
            for i in 0..self.block.num_restarts {
                prefetch_in(&self.block.data, self.block.restart_point(i));
            }
        }
        self.seek_between(0, self.block.num_restarts - 1, target)
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.seek(target)?;
        if !self.valid {
            self.seek_to_last()
        } else if key::compare_internal(&self.key, target).is_gt() {
            self.prev()
        } else {
            Ok(())
        }
    }

    #[inline]
    fn next(&mut self) -> Result<()> {
        debug_assert!(self.valid);
        self.parse_next().map(drop)
    }

    fn prev(&mut self) -> Result<()> {
        debug_assert!(self.valid);
        let original = self.current;
        // Back up to the restart interval that starts before the current entry.
        while self.block.restart_point(self.restart_index) >= original {
            if self.restart_index == 0 {
                self.invalidate();
                return Ok(());
            }
            self.restart_index -= 1;
        }
        self.seek_to_restart(self.restart_index);
        while self.parse_next()? && self.next_offset < original {}
        if self.valid && self.next_offset != original {
            return Err(self.corrupt(original, "entries do not chain to the current entry"));
        }
        Ok(())
    }

    #[inline]
    fn key(&self) -> &[u8] {
        &self.key
    }

    #[inline]
    fn value(&self) -> &[u8] {
        &self.block.data[self.value_start..self.value_end]
    }
    fn value_bytes(&self) -> Bytes {
        BlockIter::value_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The two-step search over the prefixes finds what a binary search over all of them
        /// finds, for arrays of every length around the line size, with runs of equal values.
        #[test]
        fn lower_bound_matches_partition_point(
            mut values in proptest::collection::vec(0u64..40, 0..70),
            wants in proptest::collection::vec(0u64..42, 1..20),
        ) {
            values.sort_unstable();
            let p = RestartPrefixes::from_sorted(Box::default(), values.clone());
            for want in wants {
                prop_assert_eq!(p.lower_bound(want), values.partition_point(|&v| v < want));
            }
        }
    }
}
