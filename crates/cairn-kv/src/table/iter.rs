//! [`TableIter`]: a table's two-level iterator (the index block picks the data block, whose
//! own iterator yields the entries), reading blocks through the block cache, or for a
//! sequential read straight from the file with readahead; and the reads a seek will make,
//! listed ahead of it ([`PrepareSeek`]).

use std::sync::Arc;

use bytes::Bytes;

use crate::Result;
use crate::block::{Block, BlockHandle, BlockIter};
use crate::iter::{InternalIterator, PendingRead, PrepareSeek};
use crate::table::reader::{Readahead, TableReader, block_end};

impl TableReader {
    /// A bidirectional iterator over the whole table (unpositioned).
    pub fn iter(self: &Arc<Self>) -> TableIter {
        TableIter {
            table: self.clone(),
            index: self.index.iter(),
            data: None,
            data_number: 0,
            data_offset: 0,
            data_limit: 0,
            ahead: None,
            readahead: None,
            prepared: false,
            sought: Vec::new(),
            advised_end: 0,
            advise_window: FIRST_ADVICE,
            seek_ahead: false,
            data_hot: false,
        }
    }

    /// An iterator (as [`TableReader::iter`]) whose cold seeks ask for the data after the
    /// sought block too: for a table of a sorted level, which holds every key of its range,
    /// so that a short scan finds its next blocks there (see [`PrepareSeek::prepare_seek`]).
    pub fn level_iter(self: &Arc<Self>) -> TableIter {
        TableIter { seek_ahead: true, ..self.iter() }
    }

    /// An iterator for reading the table through once, front to back (compaction): it reads
    /// [`READAHEAD`] bytes of blocks per file read and neither consults nor fills the block
    /// cache, so a compaction costs few system calls and does not push out the blocks readers
    /// use.
    pub fn sequential_iter(self: &Arc<Self>) -> TableIter {
        TableIter { readahead: Some(Readahead::default()), ..self.iter() }
    }
}

/// A two-level iterator over a table: the index block picks the data block, whose own
/// iterator yields the entries. Empty blocks are skipped in both directions.
pub struct TableIter {
    table: Arc<TableReader>,
    index: BlockIter,
    data: Option<BlockIter>,
    /// Number of the block `data` walks, its offset, and the offset just past it (its trailer
    /// included): where the next data block starts, if it is not the end of the data.
    pub(super) data_number: usize,
    data_offset: u64,
    data_limit: u64,
    /// The next block (its offset), looked up in the block cache while a forward scan walks the
    /// last restart interval of the current one (`None` inside: it was not cached).
    ahead: Option<(u64, Option<Arc<Block>>)>,
    /// Set for a sequential iterator: blocks come from here, not the block cache.
    readahead: Option<Readahead>,
    /// Whether [`PrepareSeek::prepare_seek`] left the index on the block for a seek to `sought`.
    prepared: bool,
    sought: Vec<u8>,
    /// Going forward from a seek: the file is asked for the data up to here ahead of the reads
    /// (see [`TableIter::advise_ahead`]), and how much the next request asks for.
    advised_end: u64,
    advise_window: u64,
    /// A cold seek asks for [`FIRST_ADVICE`] bytes from the sought block on, not the block
    /// alone ([`TableReader::level_iter`]).
    seek_ahead: bool,
    /// For a sequential iterator: whether the block cache holds `data`'s block as one readers
    /// come back to ([`TableBlocks::is_hot`]).
    data_hot: bool,
}

/// The first read-ahead request of a forward scan that steps into a block not cached, in
/// bytes; each further one doubles, up to [`MAX_ADVICE`].
const FIRST_ADVICE: u64 = 16 << 10;
const MAX_ADVICE: u64 = 256 << 10;

impl TableIter {
    /// The current value as shared bytes (no copy). Requires `valid()`.
    pub fn value_bytes(&self) -> Bytes {
        self.data.as_ref().map_or_else(Bytes::new, |d| d.value_bytes())
    }

    fn data_valid(&self) -> bool {
        self.data.as_ref().is_some_and(|d| d.valid())
    }

    /// Points `data` at the block the index stands on (keeping it if already there).
    fn init_data_block(&mut self) -> Result<()> {
        match self.index_block()? {
            Some(h) => self.enter_block(h),
            None => Ok(()),
        }
    }

    /// The handle of the block the index stands on; past the index's end, `None`, and the
    /// cursor holds no data block.
    fn index_block(&mut self) -> Result<Option<BlockHandle>> {
        if !self.index.valid() {
            self.data = None;
            return Ok(None);
        }
        self.index.handle().map(Some)
    }

    /// Points `data` at the block at `h`, the one the index stands on (keeping it if already
    /// there).
    fn enter_block(&mut self, h: BlockHandle) -> Result<()> {
        if self.data.is_none() || self.data_offset != h.offset {
            let number = self.index.restart_index();
            let ahead = self.ahead.take().and_then(|(offset, b)| b.filter(|_| offset == h.offset));
            let block = match (&mut self.readahead, ahead) {
                (_, Some(b)) => {
                    self.table.blocks.count_hit();
                    b
                }
                (None, None) => self.table.data_block(number, h)?,
                (Some(ra), None) => Arc::new(self.table.read_data_block_ahead(h, ra)?),
            };
            match &mut self.data {
                Some(d) => d.reset(block),
                None => self.data = Some(BlockIter::new(block)),
            }
            self.data_hot = self.readahead.is_some() && self.table.blocks.is_hot(number);
            if self.readahead.is_none() {
                // A forward scan takes the next block after a few steps (`look_ahead`); a
                // backward one does not, and pays one prefetch for nothing.
                self.table.blocks.prefetch(number + 1);
            }
            self.data_number = number;
            self.data_offset = h.offset;
            self.data_limit = block_end(h).unwrap_or(u64::MAX);
        }
        Ok(())
    }

    /// Near the end of a block, going forward: looks the next data block up in the block cache
    /// and requests its first lines, so that stepping into it does not wait on memory. Blocks
    /// not in the cache are left for the step into them to read.
    fn look_ahead(&mut self) {
        let looked = matches!(self.ahead, Some((offset, _)) if offset == self.data_limit);
        if looked || self.readahead.is_some() || self.data_limit >= self.table.data_end {
            return;
        }
        let next = self.table.blocks.peek(self.data_number + 1).filter(|b| b.offset() == self.data_limit);
        if let Some(b) = &next {
            b.prefetch_start();
        }
        self.ahead = Some((self.data_limit, next));
    }

    /// Going forward into the block the index stands on: if it is not cached and not already
    /// asked for, asks the file for it and the blocks after it, 16 KiB at first and twice as
    /// much each further time this scan gets past what it asked for (up to 256 KiB), as
    /// RocksDB's iterators read ahead. A scan of a few blocks so reads them in one or two
    /// device requests instead of one per block; a short one asks for at most 16 KiB more than
    /// it uses.
    fn advise_ahead(&mut self, h: BlockHandle) {
        // A block `look_ahead` found cached needs no advice.
        let looked_up = matches!(self.ahead, Some((offset, Some(_))) if offset == h.offset);
        if self.readahead.is_some() || looked_up {
            return;
        }
        let Some(end) = block_end(h) else { return };
        if end <= self.advised_end || self.table.blocks.holds(self.index.restart_index(), h.offset) {
            return;
        }
        let until = self.advice_end(h.offset, end, self.advise_window);
        self.table.file.will_need(h.offset, until.saturating_sub(h.offset));
        self.advised_end = until;
        self.advise_window = (self.advise_window * 2).min(MAX_ADVICE);
    }

    /// Where a request for `window` bytes from a block at `offset` (ending at `end`) ends: past
    /// the block, within the table's data.
    fn advice_end(&self, offset: u64, end: u64, window: u64) -> u64 {
        offset.saturating_add(window).max(end).min(self.table.data_end.max(end))
    }

    /// [`InternalIterator::next`] after a step left the data block: on into the next one.
    #[cold]
    fn step_out(&mut self) -> Result<()> {
        self.step(|s| s.skip_forward())
    }

    fn skip_forward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index.valid() {
                self.data = None;
                return Ok(());
            }
            self.index.next()?;
            let Some(h) = self.index_block()? else { return Ok(()) };
            self.advise_ahead(h);
            self.enter_block(h)?;
            if let Some(d) = &mut self.data {
                d.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn skip_backward(&mut self) -> Result<()> {
        while !self.data_valid() {
            if !self.index.valid() {
                self.data = None;
                return Ok(());
            }
            self.index.prev()?;
            self.init_data_block()?;
            if let Some(d) = &mut self.data {
                d.seek_to_last()?;
            }
        }
        Ok(())
    }

    /// Runs a positioning step; on error the iterator becomes invalid.
    fn step(&mut self, f: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        self.prepared = false;
        let r = f(self);
        if r.is_err() {
            self.data = None;
        }
        r
    }
}

impl InternalIterator for TableIter {
    #[inline]
    fn valid(&self) -> bool {
        self.data_valid()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.step(|s| {
            s.advised_end = 0;
            s.advise_window = FIRST_ADVICE;
            s.index.seek_to_first()?;
            s.init_data_block()?;
            if let Some(d) = &mut s.data {
                d.seek_to_first()?;
            }
            s.skip_forward()
        })
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.step(|s| {
            s.advised_end = 0;
            s.advise_window = FIRST_ADVICE;
            s.index.seek_to_last()?;
            s.init_data_block()?;
            if let Some(d) = &mut s.data {
                d.seek_to_last()?;
            }
            s.skip_backward()
        })
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let prepared = self.prepared && self.sought == target;
        self.step(|s| {
            // A prepared seek keeps the read-ahead state `prepare_seek` set.
            if !prepared {
                s.advised_end = 0;
                s.advise_window = FIRST_ADVICE;
                s.table.seek_index(&mut s.index, target)?;
            }
            s.init_data_block()?;
            if let Some(d) = &mut s.data {
                d.seek(target)?;
            }
            s.skip_forward()
        })
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.step(|s| {
            s.advised_end = 0;
            s.advise_window = FIRST_ADVICE;
            // The first block whose last key is >= target, or else the last block, holds the
            // answer or is preceded by the block that does.
            s.table.seek_index(&mut s.index, target)?;
            if !s.index.valid() {
                s.index.seek_to_last()?;
            }
            s.init_data_block()?;
            if let Some(d) = &mut s.data {
                d.seek_for_prev(target)?;
            }
            s.skip_backward()
        })
    }

    #[inline]
    fn next(&mut self) -> Result<()> {
        self.prepared = false;
        // A step inside the block is done here (an error invalidates, as in `step`); a step
        // out of it takes `step_out`.
        if let Some(d) = &mut self.data {
            if let Err(e) = d.next() {
                self.data = None;
                return Err(e);
            }
            if d.valid() {
                if d.in_last_interval() {
                    self.look_ahead();
                }
                return Ok(());
            }
        }
        self.step_out()
    }

    fn prev(&mut self) -> Result<()> {
        self.step(|s| {
            if let Some(d) = &mut s.data {
                d.prev()?;
            }
            s.skip_backward()
        })
    }

    #[inline]
    fn key(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.key())
    }

    #[inline]
    fn value(&self) -> &[u8] {
        self.data.as_ref().map_or(&[], |d| d.value())
    }
    fn value_bytes(&self) -> Bytes {
        TableIter::value_bytes(self)
    }
    fn in_hot_block(&self) -> bool {
        self.data_hot
    }
}

impl PrepareSeek for TableIter {
    /// Names the data block a seek to `target` will read, unless its slot in the block cache
    /// holds a block (whose header then starts loading into the CPU cache) or the cursor
    /// already holds it; with `seek_ahead` (a sorted level's table) the [`FIRST_ADVICE`]
    /// bytes from it on. A short scan (YCSB E's: 1-100 keys) takes the keys of a sorted level
    /// from consecutive blocks and of a level-0 table mostly from one; asked for with the
    /// seek, the blocks after the first come in the same parallel device requests instead of
    /// one more wait per level when the scan steps into them. Devices serve 16 KiB about as
    /// fast as 4 KiB.
    fn prepare_seek(&mut self, target: &[u8], reads: &mut Vec<PendingRead>) -> Result<()> {
        self.prepared = false;
        self.advised_end = 0;
        self.advise_window = FIRST_ADVICE;
        if self.readahead.is_some() {
            return Ok(());
        }
        if let Err(e) = self.table.seek_index(&mut self.index, target) {
            self.data = None;
            return Err(e);
        }
        self.sought.clear();
        self.sought.extend_from_slice(target);
        self.prepared = true;
        if self.index.valid() {
            let h = self.index.handle()?;
            let held = self.data.is_some() && self.data_offset == h.offset;
            if held {
                return Ok(());
            }
            // A cached block's header starts loading now, while the other tables prepare,
            // for the seek to take it without waiting.
            if !self.table.blocks.prefetch(self.index.restart_index())
                && let Some(end) = block_end(h)
            {
                let until = if self.seek_ahead {
                    // What is asked for here counts as read ahead: stepping into those blocks
                    // asks for nothing more, and the next request doubles.
                    self.advised_end = self.advice_end(h.offset, end, FIRST_ADVICE);
                    self.advise_window = FIRST_ADVICE * 2;
                    self.advised_end
                } else {
                    end
                };
                let ahead = until > end;
                reads.push(PendingRead::new(self.table.file.clone(), h.offset, until - h.offset, ahead));
            }
        }
        Ok(())
    }
}
