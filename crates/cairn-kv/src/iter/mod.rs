//! The positioned iterator every internal source implements (memtable, block, table, level,
//! merge). Keys are internal keys (see [`crate::key`]) in internal-key order.

pub mod merge;

use std::sync::Arc;

use crate::Result;
use crate::storage::RandomAccessFile;

/// A bidirectional cursor over internal entries, in the style of LevelDB's `Iterator`.
///
/// After any positioning call returns `Ok`, [`InternalIterator::valid`] tells whether the
/// cursor stands on an entry. `key`/`value` may only be called while valid.
pub trait InternalIterator: Send {
    /// Whether the cursor stands on an entry.
    fn valid(&self) -> bool;
    /// Moves to the first entry.
    fn seek_to_first(&mut self) -> Result<()>;
    /// Moves to the last entry.
    fn seek_to_last(&mut self) -> Result<()>;
    /// Moves to the first entry whose internal key is `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the last entry whose internal key is `<= target`.
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()>;
    /// Moves to the next entry. Requires `valid()`.
    fn next(&mut self) -> Result<()>;
    /// Moves to the previous entry. Requires `valid()`.
    fn prev(&mut self) -> Result<()>;
    /// The current internal key.
    fn key(&self) -> &[u8];
    /// The current value.
    fn value(&self) -> &[u8];
    /// The current value as shared bytes: without a copy where the entry lives in a block (the
    /// bytes keep that block alive); memtable values are copied.
    fn value_bytes(&self) -> bytes::Bytes {
        bytes::Bytes::copy_from_slice(self.value())
    }
    /// Whether the current entry was read (by a sequential table iterator, which bypasses the
    /// block cache) from a block the cache holds as one readers come back to: a compaction
    /// puts its copy of such entries in the cache when it is installed.
    fn in_hot_block(&self) -> bool {
        false
    }
}

/// Boxed iterators are iterators.
impl<I: InternalIterator + ?Sized> InternalIterator for Box<I> {
    fn valid(&self) -> bool {
        (**self).valid()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        (**self).seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        (**self).seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek(target)
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        (**self).seek_for_prev(target)
    }
    fn next(&mut self) -> Result<()> {
        (**self).next()
    }
    fn prev(&mut self) -> Result<()> {
        (**self).prev()
    }
    fn key(&self) -> &[u8] {
        (**self).key()
    }
    fn value(&self) -> &[u8] {
        (**self).value()
    }
    fn value_bytes(&self) -> bytes::Bytes {
        (**self).value_bytes()
    }
    fn in_hot_block(&self) -> bool {
        (**self).in_hot_block()
    }
}

/// Before a seek: what can be positioned without reading a data block is positioned, and the
/// data blocks the seek will read that are not cached are listed, so that a merge of many
/// tables asks the device for all of them at once ([`crate::iter::merge::MergingIterator`]).
pub(crate) trait PrepareSeek {
    /// Adds to `reads` the blocks `seek(target)` will read from files. The next positioning
    /// call must be `seek(target)` (an iterator may keep what it positioned for it).
    fn prepare_seek(&mut self, target: &[u8], reads: &mut Vec<PendingRead>) -> Result<()> {
        let _ = (target, reads);
        Ok(())
    }
}

impl PrepareSeek for Box<dyn InternalIterator> {}

/// A data block a seek is about to read from a table's file: [`PendingRead::start`] asks the
/// file to start reading it ([`RandomAccessFile::will_need`]).
pub(crate) struct PendingRead {
    file: Arc<dyn RandomAccessFile>,
    offset: u64,
    len: u64,
    /// It asks for the data after the block too.
    ahead: bool,
}

impl PendingRead {
    /// A read of `len` bytes at `offset` of `file`; `ahead` if that is more than the block the
    /// seek reads.
    pub fn new(file: Arc<dyn RandomAccessFile>, offset: u64, len: u64, ahead: bool) -> Self {
        PendingRead { file, offset, len, ahead }
    }

    /// Starts the read without waiting for it.
    pub fn start(&self) {
        self.file.will_need(self.offset, self.len);
    }

    /// Whether starting it gains something even when it is the seek's only read: it asks for
    /// more than the block the seek reads at once.
    pub fn reads_ahead(&self) -> bool {
        self.ahead
    }
}
