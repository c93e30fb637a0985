//! Reads SSTables written by [`crate::table::builder::TableBuilder`]: point lookups through the
//! bloom filter and the index, data blocks through the table's slots in the shared
//! [`BlockCache`] ([`TableBlocks`], by block number: the index entry's), and
//! [`TableIter`], a two-level (index, then data block) bidirectional iterator.
//!
//! Every block is checksum-verified when read from the file; any damage is an
//! [`Error::Corruption`] naming the file and the block's offset.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::block::{Block, BlockHandle, BlockIter, RestartPrefixes};
use crate::cache::{BlockCache, TableBlocks};
use crate::error::IoContext;
use crate::iter::InternalIterator;
use crate::key;
use crate::table::compression::{decompress, decompress_pooled};
use crate::table::filter::TableFilter;
use crate::table::format::{BLOCK_TRAILER_LEN, FOOTER_LEN, Footer, block_checksum};
#[cfg(test)]
use crate::table::iter::TableIter;
use crate::{Error, RandomAccessFile, Result};

thread_local! {
    /// The key buffer of this thread's point lookups (see [`TableReader::get_hashed`]).
    static LOOKUP_KEY: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    /// Stored bytes of a data block read on a cache miss, before they are decompressed.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An open SSTable. Shared between threads behind an `Arc`.
pub struct TableReader {
    pub(super) file: Arc<dyn RandomAccessFile>,
    path: Arc<Path>,
    table_id: u64,
    /// This table's cached data blocks.
    pub(super) blocks: Arc<TableBlocks>,
    file_size: u64,
    /// End of the data blocks (start of the filter or index block).
    pub(super) data_end: u64,
    pub(super) index: Arc<Block>,
    /// Prefixes of the index keys, for seeks (`None` if the index block is damaged).
    index_prefixes: Option<RestartPrefixes>,
    filter: Option<TableFilter>,
}

impl std::fmt::Debug for TableReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableReader")
            .field("path", &self.path)
            .field("table_id", &self.table_id)
            .field("file_size", &self.file_size)
            .finish_non_exhaustive()
    }
}

impl TableReader {
    /// Reads footer, index and filter (kept in memory); verifies their checksums.
    pub fn open(
        file: Arc<dyn RandomAccessFile>,
        path: PathBuf,
        table_id: u64,
        cache: &Arc<BlockCache>,
    ) -> Result<TableReader> {
        let path: Arc<Path> = Arc::from(path);
        let file_size = file.len();
        let Some(footer_at) = file_size.checked_sub(FOOTER_LEN as u64) else {
            let reason = format!("file of {file_size} bytes is shorter than a table footer");
            return Err(Error::corruption(&path, 0, reason));
        };
        let buf = file.read_at(footer_at, FOOTER_LEN).at(&path)?;
        let footer = Footer::decode(&buf, &path, footer_at)?;
        let misplaced =
            |what: &str| Error::corruption(&path, footer_at, format!("footer points to a misplaced {what} block"));
        if block_end(footer.index) != Some(footer_at) {
            return Err(misplaced("index"));
        }
        let has_filter = footer.filter != BlockHandle::default();
        if has_filter && block_end(footer.filter) != Some(footer.index.offset) {
            return Err(misplaced("filter"));
        }
        let data_end = if has_filter { footer.filter.offset } else { footer.index.offset };
        let index = read_block(&*file, &path, footer.index, footer_at)?;
        let index = Arc::new(Block::new(index, path.clone(), footer.index.offset)?);
        let filter = if has_filter {
            // A filter that passed its checksum but does not decode fails open.
            let data = read_block(&*file, &path, footer.filter, footer.index.offset)?;
            Some(TableFilter::new(data))
        } else {
            None
        };
        let index_prefixes = RestartPrefixes::new(&index);
        // One slot per index entry: the index has a restart point at every entry.
        let blocks = cache.open_table(table_id, index.num_restarts());
        Ok(TableReader { file, path, table_id, blocks, file_size, data_end, index, index_prefixes, filter })
    }

    /// Reads a data block for the block cache: through a per-thread scratch buffer into a
    /// pooled one ([`crate::cache::pool`]), so that cache misses do not allocate. The read's
    /// latency goes to the compaction pacer ([`crate::Options::read_pacing`]).
    fn read_data_block(&self, h: BlockHandle) -> Result<Block> {
        self.read_data_block_noting(h, true)
    }

    /// [`TableReader::read_data_block`], telling the block cache how long the read took only
    /// with `note`.
    fn read_data_block_noting(&self, h: BlockHandle, note: bool) -> Result<Block> {
        let data = READ_BUF.with_borrow_mut(|buf| {
            let start = std::time::Instant::now();
            read_span_into(&*self.file, &self.path, h, self.data_end, 0, buf)?;
            if note {
                self.blocks.note_read(start.elapsed());
            }
            let (tag, size) = check_trailer(buf, &self.path, h)?;
            let data = decompress_pooled(tag, &buf[..size], &self.path, h.offset);
            if buf.capacity() > MAX_READ_BUF {
                *buf = Vec::new();
            }
            data
        })?;
        Block::new(data, self.path.clone(), h.offset)
    }

    /// Reads a data block through `ra`: from its buffer when the buffer holds the block, else
    /// after refilling the buffer with the next [`READAHEAD`] bytes of data blocks from `h` on.
    pub(super) fn read_data_block_ahead(&self, h: BlockHandle, ra: &mut Readahead) -> Result<Block> {
        let end = match block_end(h) {
            Some(end) if h.offset >= ra.offset && end <= ra.offset + ra.buf.len() as u64 => end,
            _ => {
                let (buf, end) = read_span(&*self.file, &self.path, h, self.data_end, READAHEAD)?;
                *ra = Readahead { buf, offset: h.offset };
                end
            }
        };
        let raw = ra.buf.slice((h.offset - ra.offset) as usize..(end - ra.offset) as usize);
        Block::new(unseal_block(raw, &self.path, h)?, self.path.clone(), h.offset)
    }

    /// Data block number `i` (at `h`), from the block cache or else from the file (then
    /// cached). A cached block is checked to be the one at `h`: a damaged index whose entries do
    /// not each start a restart interval numbers blocks wrongly, which must cost reads, never
    /// return another block.
    pub(super) fn data_block(&self, i: usize, h: BlockHandle) -> Result<Arc<Block>> {
        if let Some(b) = self.blocks.get(i)
            && b.offset() == h.offset
        {
            return Ok(b);
        }
        let block = Arc::new(self.read_data_block(h)?);
        self.blocks.insert(i, block.clone());
        Ok(block)
    }

    /// Reads data blocks `numbers` (ascending) into the block cache's main part, where not
    /// cached already: the blocks a compaction wrote with entries it read from hot blocks
    /// ([`crate::iter::InternalIterator::in_hot_block`]), read when the compaction is
    /// installed and the hot blocks of its inputs leave the cache. The reads are the
    /// compaction's, not readers', so the pacer does not count them. Returns the blocks read.
    pub(crate) fn warm_hot_blocks(&self, numbers: &[usize]) -> Result<u64> {
        let mut read = 0;
        let mut wanted = numbers.iter().copied().peekable();
        let mut index = self.index.iter();
        index.seek_to_first()?;
        while index.valid() {
            let Some(&next) = wanted.peek() else { break };
            let number = index.restart_index();
            if number == next {
                wanted.next();
                let h = index.handle()?;
                if self.blocks.holds(number, h.offset) {
                    self.blocks.promote(number);
                } else {
                    self.blocks.insert_hot(number, Arc::new(self.read_data_block_noting(h, false)?));
                    read += 1;
                }
            }
            index.next()?;
        }
        Ok(read)
    }

    /// Drops this table's data blocks from the block cache (its file is being deleted).
    pub fn forget_cached_blocks(&self) {
        self.blocks.clear();
    }

    /// Whether the bloom filter allows `user_key` (true when the table has no filter).
    pub fn may_contain(&self, user_key: &[u8]) -> bool {
        self.filter.as_ref().is_none_or(|f| f.may_contain(user_key))
    }

    /// Point lookup with the key's filter hash already computed ([`crate::key::key_hash`]);
    /// returns the entry's trailer (`seq << 8 | kind`) and value without copying the key.
    pub fn get_hashed(&self, user_key: &[u8], hash: u64, lookup: &[u8]) -> Result<Option<(u64, Bytes)>> {
        if !self.filter.as_ref().is_none_or(|f| f.may_contain_hash(hash)) {
            return Ok(None);
        }
        // Both cursors borrow their block and share one thread-local key buffer: a lookup
        // allocates nothing and touches no reference count but the data block's (the index
        // block is read by every lookup from every thread).
        let mut index = BlockIter::with_key_buffer(&*self.index, LOOKUP_KEY.take());
        let found = self
            .seek_index(&mut index, lookup)
            .and_then(|()| if index.valid() { index.handle().map(Some) } else { Ok(None) });
        let number = index.restart_index();
        let key = index.into_key_buffer();
        let Some(handle) = found? else {
            LOOKUP_KEY.set(key);
            return Ok(None);
        };
        let block = self.data_block(number, handle)?;
        let mut it = BlockIter::with_key_buffer(&*block, key);
        let found = it.seek(lookup).map(|()| {
            (it.valid() && key::user_key(it.key()) == user_key).then(|| (key::trailer(it.key()), it.value_bytes()))
        });
        LOOKUP_KEY.set(it.into_key_buffer());
        found
    }

    /// Seeks a cursor over this table's index block.
    pub(super) fn seek_index<B: std::ops::Deref<Target = Block> + Send>(
        &self,
        index: &mut BlockIter<B>,
        target: &[u8],
    ) -> Result<()> {
        match &self.index_prefixes {
            Some(p) => index.seek_with(p, target),
            None => index.seek(target),
        }
    }

    /// Point lookup: if the bloom filter may contain `user_key`, finds the first entry whose
    /// internal key is `>= lookup` (built with [`key::lookup_key`]`(user_key, seq)`) and returns
    /// it as (internal key, value) if its user key equals `user_key`.
    pub fn get(&self, user_key: &[u8], lookup: &[u8]) -> Result<Option<(Vec<u8>, Bytes)>> {
        let found = self.get_hashed(user_key, crate::key::key_hash(user_key), lookup)?;
        Ok(found.map(|(trailer, value)| ([user_key, &trailer.to_be_bytes()].concat(), value)))
    }

    /// Reads every data block bypassing the cache, checking checksums, entry decoding, key
    /// order and the index; returns the number of entries.
    pub fn verify(&self) -> Result<u64> {
        let mut count = 0u64;
        let mut prev: Option<Vec<u8>> = None;
        let mut expected_offset = 0u64;
        let mut readahead = Readahead::default();
        let mut index = self.index.iter();
        index.seek_to_first()?;
        while index.valid() {
            let h = index.handle()?;
            let corrupt = |reason: &str| Error::corruption(&self.path, h.offset, reason);
            if h.offset != expected_offset {
                return Err(corrupt("data blocks are not contiguous"));
            }
            expected_offset = block_end(h).ok_or_else(|| corrupt("block out of range"))?;
            let mut it = BlockIter::new(Arc::new(self.read_data_block_ahead(h, &mut readahead)?));
            it.seek_to_first()?;
            if !it.valid() {
                return Err(corrupt("empty data block"));
            }
            while it.valid() {
                if prev.as_deref().is_some_and(|p| key::compare_internal(p, it.key()).is_ge()) {
                    return Err(corrupt("keys out of order"));
                }
                prev = Some(it.key().to_vec());
                count += 1;
                it.next()?;
            }
            if prev.as_deref() != Some(index.key()) {
                return Err(corrupt("index key differs from the block's last key"));
            }
            index.next()?;
        }
        if expected_offset != self.data_end {
            return Err(Error::corruption(&self.path, expected_offset, "index misses data blocks"));
        }
        Ok(count)
    }

    /// Checks every data block as [`TableReader::verify`] does, but goes on past damage:
    /// returns the entries checked in intact blocks and every damaged block, with the keys it
    /// may hold as far as the index tells them. `visit`, if given, sees the entries of every
    /// intact block, in order (a block is visited only once it checked whole); its error ends
    /// the check. A block is damaged if it does not read, decode or checksum, if its keys are
    /// out of order (within it, or against the last intact block's), or if its last key is not
    /// its index entry's.
    pub fn check_blocks(&self, mut visit: Option<&mut EntryVisitor<'_>>) -> Result<TableCheck> {
        let mut check = TableCheck::default();
        let mut index = self.index.iter();
        // The last internal key of the last intact block, and the index key before the current
        // one (the lowest key the current block may hold).
        let mut last_good: Option<Vec<u8>> = None;
        let mut before: Option<Vec<u8>> = None;
        let mut expected_offset = 0u64;
        let mut readahead = Readahead::default();
        if let Err(error) = index.seek_to_first() {
            check.damaged.push(BlockDamage { offset: 0, len: self.data_end, first_key: None, last_key: None, error });
            return Ok(check);
        }
        while index.valid() {
            let index_key = index.key().to_vec();
            // Where the block starts and its length with its trailer, as far as known.
            let (mut block_offset, mut block_len) = (expected_offset, 0);
            let checked = index.handle().and_then(|h| {
                block_offset = h.offset;
                block_len = h.size.saturating_add(BLOCK_TRAILER_LEN as u64);
                let corrupt = |reason: &str| Error::corruption(&self.path, h.offset, reason);
                let at = std::mem::replace(&mut expected_offset, block_end(h).unwrap_or(u64::MAX));
                if h.offset != at {
                    return Err(corrupt("data blocks are not contiguous"));
                }
                if expected_offset == u64::MAX {
                    return Err(corrupt("block out of range"));
                }
                let block = Arc::new(self.read_data_block_ahead(h, &mut readahead)?);
                let mut it = BlockIter::new(block.clone());
                it.seek_to_first()?;
                if !it.valid() {
                    return Err(corrupt("empty data block"));
                }
                let mut prev = last_good.clone();
                let mut n = 0u64;
                while it.valid() {
                    if prev.as_deref().is_some_and(|p| key::compare_internal(p, it.key()).is_ge()) {
                        return Err(corrupt("keys out of order"));
                    }
                    prev = Some(it.key().to_vec());
                    n += 1;
                    it.next()?;
                }
                if prev.as_deref() != Some(index_key.as_slice()) {
                    return Err(corrupt("index key differs from the block's last key"));
                }
                Ok((block, n))
            });
            match checked {
                Ok((block, n)) => {
                    if let Some(visit) = visit.as_mut() {
                        let mut it = BlockIter::new(block);
                        it.seek_to_first()?;
                        while it.valid() {
                            visit(it.key(), it.value())?;
                            it.next()?;
                        }
                    }
                    check.entries += n;
                    last_good = Some(index_key.clone());
                }
                Err(error) => {
                    check.damaged.push(BlockDamage {
                        offset: block_offset,
                        len: block_len,
                        first_key: before.as_deref().map(|k| key::user_key(k).to_vec()),
                        last_key: Some(key::user_key(&index_key).to_vec()),
                        error,
                    });
                }
            }
            before = Some(index_key);
            if let Err(error) = index.next() {
                // The rest of the index does not decode: every block after the last one read.
                let first_key = before.as_deref().map(|k| key::user_key(k).to_vec());
                let len = self.data_end.saturating_sub(expected_offset);
                check.damaged.push(BlockDamage { offset: expected_offset, len, first_key, last_key: None, error });
                return Ok(check);
            }
        }
        if expected_offset != self.data_end {
            let error = Error::corruption(&self.path, expected_offset, "index misses data blocks");
            let first_key = before.as_deref().map(|k| key::user_key(k).to_vec());
            let len = self.data_end.saturating_sub(expected_offset);
            check.damaged.push(BlockDamage { offset: expected_offset, len, first_key, last_key: None, error });
        }
        Ok(check)
    }

    /// User keys that cut the table's data blocks into `pieces` runs of about as many blocks
    /// each: the largest user key of every (`blocks / pieces`)-th block, ascending and
    /// distinct; fewer (none for a table of one block) when there are too few blocks or keys.
    pub(crate) fn block_bounds(&self, pieces: usize) -> Result<Vec<Vec<u8>>> {
        let blocks = self.index.num_restarts();
        let mut bounds: Vec<Vec<u8>> = Vec::new();
        if pieces < 2 || blocks < 2 {
            return Ok(bounds);
        }
        let mut it = self.index.iter();
        it.seek_to_first()?;
        let mut n = 0;
        while it.valid() && bounds.len() + 1 < pieces {
            n += 1;
            if n * pieces >= blocks * (bounds.len() + 1) && n < blocks {
                let uk = key::user_key(it.key());
                if bounds.last().is_none_or(|b| b.as_slice() < uk) {
                    bounds.push(uk.to_vec());
                }
            }
            it.next()?;
        }
        Ok(bounds)
    }

    /// Length of the file in bytes.
    pub fn file_size(&self) -> u64 {
        self.file_size
    }

    /// The id (file number) the table's blocks are cached under.
    pub fn table_id(&self) -> u64 {
        self.table_id
    }

    /// The table's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A function [`TableReader::check_blocks`] hands each entry of an intact block
/// (internal key, value).
pub type EntryVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// What [`TableReader::check_blocks`] found.
#[derive(Debug, Default)]
pub struct TableCheck {
    /// Entries in the intact data blocks.
    pub entries: u64,
    /// The damaged data blocks, in file order.
    pub damaged: Vec<BlockDamage>,
}

/// A damaged data block (or, with no last key, every block from it to the end of the table).
#[derive(Debug)]
pub struct BlockDamage {
    /// Offset of the block in the table file.
    pub offset: u64,
    /// Bytes of the damaged part, trailer included (0 when its handle does not decode).
    pub len: u64,
    /// The lowest user key the block may hold: the last user key of the block before it, whose
    /// later versions may continue into this one (`None`: from the table's start).
    pub first_key: Option<Vec<u8>>,
    /// The highest user key the block may hold: its index entry's (`None`: to the table's end).
    pub last_key: Option<Vec<u8>>,
    /// What was wrong.
    pub error: Error,
}

/// Reads, checksums and decompresses the block at `h` of `file`, which must end by `limit`.
fn read_block(file: &dyn RandomAccessFile, path: &Path, h: BlockHandle, limit: u64) -> Result<Bytes> {
    let (buf, _) = read_span(file, path, h, limit, 0)?;
    unseal_block(buf, path, h)
}

/// Reads the block at `h` with its trailer, which must end by `limit`, and the bytes after it
/// up to `at_least` bytes in all (or up to `limit`); returns what was read, starting at
/// `h.offset`, and the offset where the block ends.
fn read_span(
    file: &dyn RandomAccessFile,
    path: &Path,
    h: BlockHandle,
    limit: u64,
    at_least: u64,
) -> Result<(Bytes, u64)> {
    let mut buf = Vec::new();
    let end = read_span_into(file, path, h, limit, at_least, &mut buf)?;
    Ok((Bytes::from(buf), end))
}

/// [`read_span`] into `buf` (its contents replaced, its allocation reused where the file
/// allows); returns the offset where the block ends.
fn read_span_into(
    file: &dyn RandomAccessFile,
    path: &Path,
    h: BlockHandle,
    limit: u64,
    at_least: u64,
    buf: &mut Vec<u8>,
) -> Result<u64> {
    let corrupt = |reason: &str| Error::corruption(path, h.offset, reason);
    let end = block_end(h).filter(|&e| e <= limit).ok_or_else(|| corrupt("block out of range"))?;
    let want = (end - h.offset).max(at_least.min(limit - h.offset));
    let len = usize::try_from(want).map_err(|_| corrupt("block too large"))?;
    file.read_at_into(h.offset, len, buf).at(path)?;
    if buf.len() != len {
        return Err(corrupt("short read"));
    }
    Ok(end)
}

/// Checks a block's trailer (compression tag and checksum) and returns its decompressed
/// contents. `raw` is the block with its trailer, at least [`BLOCK_TRAILER_LEN`] bytes.
fn unseal_block(mut raw: Bytes, path: &Path, h: BlockHandle) -> Result<Bytes> {
    let (tag, size) = check_trailer(&raw, path, h)?;
    raw.truncate(size);
    decompress(tag, raw, path, h.offset)
}

/// Checks the trailer of `raw` (a block with its trailer, at least [`BLOCK_TRAILER_LEN`]
/// bytes): returns the compression tag and the stored length before the trailer.
fn check_trailer(raw: &[u8], path: &Path, h: BlockHandle) -> Result<(u8, usize)> {
    let size = raw.len() - BLOCK_TRAILER_LEN;
    let tag = raw[size];
    let stored = u32::from_le_bytes([raw[size + 1], raw[size + 2], raw[size + 3], raw[size + 4]]);
    if block_checksum(&raw[..size], tag) != stored {
        return Err(Error::corruption(path, h.offset, "block checksum mismatch"));
    }
    Ok((tag, size))
}

/// A per-thread scratch buffer larger than this after a read is freed rather than kept.
const MAX_READ_BUF: usize = 1 << 20;

/// Bytes of data blocks a sequential read ([`TableReader::sequential_iter`], verification)
/// asks the file for at once.
pub const READAHEAD: u64 = 1 << 20;

/// A buffer of consecutive data-block bytes read ahead, and the file offset it starts at.
#[derive(Default)]
pub(super) struct Readahead {
    buf: Bytes,
    offset: u64,
}

/// Offset just past a block and its trailer, if it does not overflow.
pub(super) fn block_end(h: BlockHandle) -> Option<u64> {
    h.offset.checked_add(h.size)?.checked_add(BLOCK_TRAILER_LEN as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{internal_key, lookup_key};
    use crate::table::table_cache::test_support::{build, build_with, open};
    use crate::{Compression, TableOptions};

    fn model() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..60u64)
            .map(|i| (internal_key(format!("k{i:03}").as_bytes(), i + 1, 1), vec![b'a' + (i % 7) as u8; 20]))
            .collect()
    }

    /// 300 entries `k0000`.. with 20-byte values: about six to a 200-byte block ([`opts`]).
    fn hot_model() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..300u64)
            .map(|i| (internal_key(format!("k{i:04}").as_bytes(), i + 1, 1), vec![b'a' + (i % 7) as u8; 20]))
            .collect()
    }

    /// The number of the data block holding each entry, in order, read with a sequential
    /// iterator (which leaves the cache as it was).
    fn entry_blocks(t: &Arc<TableReader>) -> Vec<usize> {
        let mut it = t.sequential_iter();
        it.seek_to_first().unwrap();
        let mut blocks = Vec::new();
        while it.valid() {
            blocks.push(it.data_number);
            it.next().unwrap();
        }
        blocks
    }

    fn opts(compression: Compression) -> TableOptions {
        TableOptions { block_size: 200, restart_interval: 3, bloom_bits_per_key: 10, compression }
    }

    /// Everything a reader can do with a table; each answer must be right or a corruption error.
    fn check_damaged(data: Vec<u8>, model: &[(Vec<u8>, Vec<u8>)]) -> bool {
        let is_corrupt = |e: &Error| assert!(e.is_corruption(), "{e}");
        let t = match open(data, &Arc::new(BlockCache::new(1 << 16))) {
            Ok(t) => t,
            Err(e) => {
                is_corrupt(&e);
                return true;
            }
        };
        for (k, v) in model.iter().step_by(7) {
            let uk = key::user_key(k);
            match t.get(uk, &lookup_key(uk, u64::from(u32::MAX))) {
                Ok(found) => assert_eq!(found.map(|(k, v)| (k, v.to_vec())), Some((k.clone(), v.clone()))),
                Err(e) => is_corrupt(&e),
            }
        }
        // A forward pass yields the model or a corruption error.
        let forward = |it: &mut TableIter| {
            let mut got = Vec::new();
            let mut r = it.seek_to_first();
            while r.is_ok() && it.valid() {
                got.push((it.key().to_vec(), it.value().to_vec()));
                r = it.next();
            }
            match r {
                Ok(()) => assert_eq!(got, model),
                Err(e) => is_corrupt(&e),
            }
        };
        let mut it = t.iter();
        forward(&mut it);
        let mut r = it.seek_to_last();
        while r.is_ok() && it.valid() {
            r = it.prev();
        }
        if let Err(e) = r {
            is_corrupt(&e);
        }
        forward(&mut t.sequential_iter());
        match t.verify() {
            Ok(n) => {
                assert_eq!(n, model.len() as u64);
                false
            }
            Err(e) => {
                is_corrupt(&e);
                true
            }
        }
    }

    /// Entries marked hot list their data blocks (numbered as the index numbers them), blocks
    /// that hold no unmarked entry where the runs on both sides fill a quarter block; a
    /// sequential iterator tells which entries come from blocks the cache holds as hot; and
    /// warming the listed blocks caches exactly those, in the main part.
    #[test]
    fn hot_entries_list_their_blocks_and_warming_caches_those_blocks() {
        let model = hot_model();
        // Runs of two marked entries (66 bytes, over a quarter of the 200-byte blocks).
        let hot = [5usize, 6, 150, 151, 298, 299];
        let (data, info) =
            build_with(&model, opts(Compression::Lz4), |b, i, k, v| b.add_marked(k, v, hot.contains(&i)).unwrap());
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = open(data, &cache).unwrap();
        let blocks = entry_blocks(&t);
        assert_eq!(blocks.len(), model.len());
        // The blocks holding the hot entries are the ones listed.
        let mut expected: Vec<usize> = hot.iter().map(|&i| blocks[i]).collect();
        expected.dedup();
        assert_eq!(info.hot_blocks, expected);
        assert_eq!(expected.len(), 3, "each run shares a block: {expected:?}");
        // Marked and unmarked entries never share a block: a block is listed exactly when the
        // entries in it are marked.
        for (i, block) in blocks.iter().enumerate() {
            assert_eq!(expected.contains(block), hot.contains(&i), "entry {i} in block {block}");
        }

        assert_eq!(t.warm_hot_blocks(&info.hot_blocks).unwrap(), 3);
        assert_eq!(t.warm_hot_blocks(&info.hot_blocks).unwrap(), 0, "cached blocks are not read again");
        let cached: Vec<usize> = (0..1000).filter(|&i| t.blocks.peek(i).is_some()).collect();
        assert_eq!(cached, expected);
        assert!(expected.iter().all(|&i| t.blocks.is_hot(i)), "warmed blocks go to the main part");
        let misses = cache.stats().misses;
        for &i in &hot {
            let uk = key::user_key(&model[i].0);
            assert!(t.get(uk, &lookup_key(uk, key::MAX_SEQ)).unwrap().is_some());
        }
        assert_eq!(cache.stats().misses, misses, "hot keys are read from the cache");

        // A compaction's iterator sees which entries come from those blocks.
        let mut it = t.sequential_iter();
        it.seek_to_first().unwrap();
        let mut from_hot = Vec::new();
        while it.valid() {
            if crate::iter::InternalIterator::in_hot_block(&it) {
                from_hot.push(it.data_number);
            }
            it.next().unwrap();
        }
        from_hot.dedup();
        assert_eq!(from_hot, expected);
    }

    /// Entries marked and unmarked in turn (a hot block's entries among a lower level's) cut no
    /// block of less than a quarter of the block size: each block of the run holds two entries
    /// (66 bytes of 200) or more, not one, and every block holding a marked entry is listed.
    #[test]
    fn alternating_marks_cut_no_block_under_a_quarter() {
        let model = hot_model();
        let marked = |i: usize| (100..160).contains(&i) && i.is_multiple_of(2);
        let (data, info) =
            build_with(&model, opts(Compression::Lz4), |b, i, k, v| b.add_marked(k, v, marked(i)).unwrap());
        let t = open(data, &Arc::new(BlockCache::new(1 << 20))).unwrap();
        let blocks = entry_blocks(&t);
        assert_eq!(blocks.len(), model.len());
        let mut per_block = std::collections::BTreeMap::<usize, usize>::new();
        for &block in &blocks {
            *per_block.entry(block).or_default() += 1;
        }
        let mut listed: Vec<usize> = (0..blocks.len()).filter(|&i| marked(i)).map(|i| blocks[i]).collect();
        listed.dedup();
        assert_eq!(info.hot_blocks, listed);
        let last = *per_block.keys().last().unwrap();
        for (&block, &n) in &per_block {
            assert!(n >= 2 || block == last, "block {block} holds {n} entry: {per_block:?}");
        }
    }

    /// An entry marked after it was added ([`crate::TableBuilder::mark_last_hot`]: a shadowed
    /// version of its key came from a hot block) lists its block, whether the entry ended that
    /// block or not, and the marking cuts no block.
    #[test]
    fn entries_marked_after_they_were_added_list_their_blocks() {
        let model = hot_model();
        let marked: Vec<usize> = (40..=60).chain([150, 299]).collect();
        let build = |mark: bool| {
            build_with(&model, opts(Compression::Lz4), |b, i, k, v| {
                b.add(k, v).unwrap();
                if mark && marked.contains(&i) {
                    b.mark_last_hot();
                }
            })
        };
        let (data, info) = build(true);
        assert!(data == build(false).0, "the same blocks as unmarked");
        let t = open(data, &Arc::new(BlockCache::new(1 << 20))).unwrap();
        for (k, v) in &model {
            let uk = key::user_key(k);
            assert_eq!(
                t.get(uk, &lookup_key(uk, key::MAX_SEQ)).unwrap().map(|(_, got)| got.to_vec()).as_ref(),
                Some(v)
            );
        }
        let blocks = entry_blocks(&t);
        assert_eq!(blocks.len(), model.len());
        let mut expected: Vec<usize> = marked.iter().map(|&i| blocks[i]).collect();
        expected.dedup();
        assert!(expected.len() >= 5, "entries 40-60 span blocks: {expected:?}");
        assert!(
            marked.iter().any(|&i| i + 1 < model.len() && blocks[i] != blocks[i + 1]),
            "a marked entry ended its block"
        );
        assert!(marked.iter().any(|&i| i + 1 < model.len() && blocks[i] == blocks[i + 1]), "and one did not");
        assert_eq!(info.hot_blocks, expected);
    }

    #[test]
    fn every_flipped_byte_is_detected_and_nothing_panics() {
        let model = model();
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd(1)] {
            let (data, _) = build(&model, opts(compression));
            assert!(!check_damaged(data.clone(), &model));
            for i in 0..data.len() {
                for x in [0x01, 0xA5] {
                    let mut bad = data.clone();
                    bad[i] ^= x;
                    assert!(check_damaged(bad, &model), "flip {x:#x} at {i} went unnoticed");
                }
            }
            for len in 0..data.len() {
                assert!(check_damaged(data[..len].to_vec(), &model), "truncation to {len}");
            }
        }
    }

    #[test]
    fn sequential_iter_reads_ahead_across_refills_and_bypasses_the_cache() {
        // ~3.5 MiB of blocks: the read-ahead buffer refills several times, and a block
        // straddles each refill boundary.
        let model: Vec<_> = (0..3500u64)
            .map(|i| {
                (
                    internal_key(format!("key{i:06}").as_bytes(), i + 1, 1),
                    vec![(i % 251) as u8; 1000 + (i % 17) as usize],
                )
            })
            .collect();
        for compression in [Compression::None, Compression::Lz4] {
            let (data, _) = build(&model, TableOptions { block_size: 4096, ..opts(compression) });
            assert!(data.len() as u64 > 3 * READAHEAD || compression != Compression::None, "{}", data.len());
            let cache = Arc::new(BlockCache::new(64 << 20));
            let t = open(data, &cache).unwrap();
            let drain = |mut it: TableIter| {
                let mut got = Vec::new();
                it.seek_to_first().unwrap();
                while it.valid() {
                    got.push((it.key().to_vec(), it.value().to_vec()));
                    it.next().unwrap();
                }
                got
            };
            assert_eq!(drain(t.sequential_iter()), model);
            assert_eq!(cache.usage_bytes(), 0, "a sequential pass leaves the cache alone");
            // Seeking back and forth still works (the buffer is refilled from the sought block).
            let mut it = t.sequential_iter();
            for i in [3000u64, 10, 2999, 1500] {
                let k = format!("key{i:06}");
                it.seek(&lookup_key(k.as_bytes(), u64::from(u32::MAX))).unwrap();
                assert_eq!(it.key(), &model[i as usize].0[..]);
                it.prev().unwrap();
                if i > 0 {
                    assert_eq!(it.key(), &model[i as usize - 1].0[..]);
                }
            }
            assert_eq!(t.verify().unwrap(), model.len() as u64);
            assert_eq!(drain(t.iter()), model);
            assert!(cache.usage_bytes() > 0, "the ordinary iterator fills the cache");
        }
    }

    /// A forward scan looks the next block up ahead of stepping into it: every block is still
    /// counted once (a miss when cold, a hit when cached), the entries are the table's, and a
    /// seek elsewhere drops the block looked up for the old position.
    #[test]
    fn forward_scans_look_one_block_ahead_and_count_each_block_once() {
        let model: Vec<_> = (0..400u64)
            .map(|i| (internal_key(format!("key{i:04}").as_bytes(), i + 1, 1), vec![(i % 251) as u8; 100]))
            .collect();
        let (data, _) = build(&model, TableOptions { block_size: 1024, ..opts(Compression::None) });
        let cache = Arc::new(BlockCache::new(64 << 20));
        let t = open(data, &cache).unwrap();
        let blocks = {
            let mut index = t.index.iter();
            index.seek_to_first().unwrap();
            let mut n = 0u64;
            while index.valid() {
                n += 1;
                index.next().unwrap();
            }
            n
        };
        assert!(blocks >= 30, "{blocks} blocks");
        for cold in [true, false] {
            let before = cache.stats();
            let mut it = t.iter();
            it.seek_to_first().unwrap();
            let mut got = Vec::new();
            while it.valid() {
                got.push((it.key().to_vec(), it.value().to_vec()));
                it.next().unwrap();
            }
            assert_eq!(got, model);
            let after = cache.stats();
            let (hits, misses) = (after.hits - before.hits, after.misses - before.misses);
            if cold {
                assert_eq!((hits, misses), (0, blocks));
            } else {
                assert_eq!((hits, misses), (blocks, 0));
            }
        }
        // Step into the last interval of a block (the next one is looked up), then seek far
        // away and walk on: the entries come from the sought block.
        let mut it = t.iter();
        it.seek(&model[0].0).unwrap();
        for _ in 0..8 {
            it.next().unwrap();
        }
        for i in [300usize, 12, 399, 150] {
            it.seek(&model[i].0).unwrap();
            for m in &model[i..(i + 20).min(model.len())] {
                assert_eq!(it.key(), &m.0[..]);
                it.next().unwrap();
            }
        }
    }

    #[test]
    fn readers_are_shareable() {
        fn check<T: Send + Sync>() {}
        check::<TableReader>();
        check::<crate::table::table_cache::TableCache>();
    }

    #[test]
    fn checksum_errors_name_the_file_and_block() {
        let model = model();
        let (mut data, _) = build(&model, opts(Compression::None));
        data[3] ^= 0x40;
        let t = open(data, &Arc::new(BlockCache::new(0))).unwrap();
        let err = t.get(b"k000", &lookup_key(b"k000", 9)).unwrap_err();
        match err {
            Error::Corruption { path, offset, reason } => {
                assert_eq!((path.to_str(), offset), (Some("t.sst"), 0));
                assert!(reason.contains("checksum"), "{reason}");
            }
            e => panic!("unexpected {e}"),
        }
        // Other blocks still read.
        assert!(t.get(b"k059", &lookup_key(b"k059", 99)).unwrap().is_some());
    }

    #[test]
    fn bloom_filter_skips_absent_keys() {
        let (data, _) = build(&model(), opts(Compression::Lz4));
        let cache = Arc::new(BlockCache::new(1 << 20));
        let t = open(data, &cache).unwrap();
        let absent = (0..1000).filter(|i| !t.may_contain(format!("absent{i}").as_bytes())).count();
        assert!(absent > 950, "{absent}");
        for i in 0..1000 {
            let uk = format!("absent{i}");
            assert!(t.get(uk.as_bytes(), &lookup_key(uk.as_bytes(), 5)).unwrap().is_none());
        }
        assert!(cache.stats().misses < 60, "{:?}", cache.stats());
    }

    /// A table of 20,000 keys at 10 bits per key gets a fuse filter, at 12 a bloom filter (the
    /// kind tables written before the fuse filter hold); both find every key, and the fuse
    /// filter lets fewer absent keys through.
    #[test]
    fn tables_with_either_filter_find_every_key_and_skip_absent_ones() {
        let entries: Vec<(Vec<u8>, Vec<u8>)> =
            (0..20_000u64).map(|i| (internal_key(format!("k{i:06}").as_bytes(), i + 1, 1), vec![b'v'; 8])).collect();
        let mut passed = Vec::new();
        for (bits, fuse) in [(10, true), (12, false)] {
            let o = TableOptions {
                block_size: 4096,
                restart_interval: 4,
                bloom_bits_per_key: bits,
                compression: Compression::None,
            };
            let (data, _) = build(&entries, o);
            let t = open(data, &Arc::new(BlockCache::new(1 << 22))).unwrap();
            assert_eq!(t.filter.as_ref().map(|f| f.is_fuse()), Some(fuse), "{bits} bits per key");
            for i in (0..20_000u64).step_by(7) {
                let uk = format!("k{i:06}");
                assert!(t.get(uk.as_bytes(), &lookup_key(uk.as_bytes(), key::MAX_SEQ)).unwrap().is_some(), "{uk}");
            }
            passed.push((0..100_000).filter(|i| t.may_contain(format!("absent{i}").as_bytes())).count());
        }
        // 1/256 (about 390 of 100,000) against a 12-bit bloom filter's 0.31 % (about 310).
        assert!(passed[0] < 550 && passed[1] < 450, "{passed:?}");
    }

    proptest::proptest! {
        /// Well-framed tables (valid checksums) whose index and data blocks hold arbitrary
        /// entries and handles: every answer is an error or an entry, never a panic.
        #[test]
        fn arbitrary_well_framed_tables_never_panic(
            blocks in proptest::collection::vec(
                (proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0u8..4), 0..4),
            handles in proptest::collection::vec((0usize..8, 0u64..300, 0u8..4), 0..6),
        ) {
            use crate::block::builder::BlockBuilder;
            use crate::table::format::{Footer, block_checksum};
            let frame = |file: &mut Vec<u8>, data: &[u8], tag: u8| {
                let h = BlockHandle { offset: file.len() as u64, size: data.len() as u64 };
                file.extend_from_slice(data);
                file.push(tag);
                file.extend_from_slice(&block_checksum(data, tag).to_le_bytes());
                h
            };
            let mut file = Vec::new();
            let mut written = Vec::new();
            for (bytes, kind) in &blocks {
                // Kind 0: a real block holding the random bytes as keys; else raw bytes + tag.
                let h = if *kind == 0 {
                    let mut b = BlockBuilder::new(2);
                    for (i, c) in bytes.chunks(9).enumerate() {
                        b.add(c, &[i as u8]);
                    }
                    frame(&mut file, &b.finish(), 0)
                } else {
                    frame(&mut file, bytes, kind - 1)
                };
                written.push(h);
            }
            let mut index = BlockBuilder::new(1);
            for (i, &(sel, x, how)) in handles.iter().enumerate() {
                let mut h = written.get(sel).copied().unwrap_or_default();
                match how {
                    0 => {}
                    1 => h.offset = x,
                    2 => h.size = x,
                    _ => h.size = u64::MAX - x,
                }
                let mut v = Vec::new();
                h.encode_to(&mut v);
                index.add(&internal_key(&[sel as u8], 100 - i as u64, 1), &v);
            }
            let filter = frame(&mut file, &[0xff, 0xff, 3], 0);
            let index = frame(&mut file, &index.finish(), 0);
            file.extend_from_slice(&Footer { filter, index }.encode());
            let t = open(file, &Arc::new(BlockCache::new(1 << 12))).unwrap();
            let _ = t.verify();
            let _ = t.get(&[1], &lookup_key(&[1], 50));
            let mut it = t.iter();
            let mut r = it.seek_to_first();
            while r.is_ok() && it.valid() {
                r = it.next();
            }
            let mut r = it.seek_to_last();
            while r.is_ok() && it.valid() {
                r = it.prev();
            }
            for k in 0..3u8 {
                if it.seek_for_prev(&lookup_key(&[k], 99)).is_ok() && it.valid() {
                    let _ = it.next();
                }
                if it.seek(&lookup_key(&[k], 99)).is_ok() && it.valid() {
                    let _ = it.prev();
                }
            }
        }
    }

    proptest::proptest! {
        /// Bytes damaged anywhere in the data blocks: `check_blocks` visits exactly the entries
        /// of the intact blocks, in order, and every entry it does not visit lies within the
        /// keys of a damaged block it reports (one per block damaged, at most).
        #[test]
        fn check_blocks_accounts_for_every_entry(
            flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 1u8..=255), 0..4),
            lz4: bool,
        ) {
            let model = hot_model();
            let compression = if lz4 { Compression::Lz4 } else { Compression::None };
            let (mut data, _) = build(&model, opts(compression));
            let data_end = open(data.clone(), &Arc::new(BlockCache::new(1 << 16))).unwrap().data_end as usize;
            for (at, xor) in &flips {
                data[at.index(data_end)] ^= xor;
            }
            let t = open(data, &Arc::new(BlockCache::new(1 << 16))).unwrap();
            let mut seen = Vec::new();
            let check = t.check_blocks(Some(&mut |k: &[u8], v: &[u8]| {
                seen.push((k.to_vec(), v.to_vec()));
                Ok(())
            })).unwrap();
            proptest::prop_assert_eq!(check.entries, seen.len() as u64);
            proptest::prop_assert!(check.damaged.len() <= flips.len());
            proptest::prop_assert_eq!(check.damaged.is_empty(), seen.len() == model.len());
            let mut rest = seen.iter().peekable();
            for entry in &model {
                if rest.peek() == Some(&entry) {
                    rest.next();
                    continue;
                }
                let uk = key::user_key(&entry.0);
                let covered = check.damaged.iter().any(|d| {
                    d.first_key.as_deref().is_none_or(|f| f <= uk) && d.last_key.as_deref().is_none_or(|l| uk <= l)
                });
                proptest::prop_assert!(covered, "entry {:?} missing and in no damaged block", uk);
            }
            proptest::prop_assert!(rest.next().is_none(), "visited an entry out of order or not in the table");
            for d in &check.damaged {
                proptest::prop_assert!(d.error.is_corruption(), "{}", d.error);
            }
        }
    }

    #[test]
    fn block_bounds_cut_the_blocks_into_even_runs() {
        let model = model();
        let (data, _) = build(&model, opts(Compression::Lz4));
        let t = open(data, &Arc::new(BlockCache::new(1 << 16))).unwrap();
        let blocks = t.index.num_restarts();
        assert!(blocks >= 8, "{blocks}");
        let keys: Vec<&[u8]> = model.iter().map(|(k, _)| key::user_key(k)).collect();
        assert!(t.block_bounds(1).unwrap().is_empty());
        for pieces in [2, 3, 4, blocks, blocks + 5] {
            let bounds = t.block_bounds(pieces).unwrap();
            assert_eq!(bounds.len(), (pieces - 1).min(blocks - 1), "{pieces}");
            assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
            // Each bound is a key of the table, and no run gets more than its share of keys
            // plus a block's worth.
            let mut at = vec![0];
            for b in &bounds {
                at.push(keys.iter().position(|k| k == &b.as_slice()).unwrap() + 1);
            }
            at.push(keys.len());
            let per_block = keys.len().div_ceil(blocks);
            for w in at.windows(2) {
                assert!(w[1] > w[0] && w[1] - w[0] <= keys.len() / pieces.min(blocks) + 2 * per_block, "{at:?}");
            }
        }
        // One block: nothing to cut.
        let (data, _) = build(&model[..3], opts(Compression::None));
        let t = open(data, &Arc::new(BlockCache::new(1 << 16))).unwrap();
        assert!(t.block_bounds(4).unwrap().is_empty());
    }
}
