//! [`LevelIter`]: walks the non-overlapping tables of one level, opening each table only when
//! the cursor reaches it.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::Result;
use crate::iter::{InternalIterator, PendingRead, PrepareSeek};
use crate::key::compare_internal;
use crate::table::iter::TableIter;
use crate::version::{TableFile, Version};

/// The tables a [`LevelIter`] walks.
pub(crate) enum LevelFiles {
    /// A list of its own (a compaction's inputs).
    Owned(Vec<Arc<TableFile>>),
    /// Tables `range` of a level of a version it holds (a read: no per-table reference counting).
    Version { version: Arc<Version>, level: usize, range: std::ops::Range<usize> },
}

impl LevelFiles {
    fn as_slice(&self) -> &[Arc<TableFile>] {
        match self {
            LevelFiles::Owned(v) => v,
            LevelFiles::Version { version, level, range } => &version.levels[*level][range.clone()],
        }
    }
}

/// A cursor over the sorted, non-overlapping tables of one level.
pub(crate) struct LevelIter {
    files: LevelFiles,
    idx: usize,
    cur: Option<TableIter>,
    /// Open tables with [`crate::table::reader::TableReader::sequential_iter`] (compaction).
    sequential: bool,
}

impl LevelIter {
    pub fn new(files: LevelFiles) -> Self {
        LevelIter { files, idx: 0, cur: None, sequential: false }
    }

    /// A level iterator for one pass front to back: tables are read ahead in large pieces,
    /// bypassing the block cache.
    pub fn sequential(files: LevelFiles) -> Self {
        LevelIter { sequential: true, ..Self::new(files) }
    }

    fn open(&mut self, idx: usize) -> Result<bool> {
        self.idx = idx;
        match self.files.as_slice().get(idx) {
            Some(f) => {
                let reader = f.open()?;
                self.cur = Some(if self.sequential { reader.sequential_iter() } else { reader.level_iter() });
                Ok(true)
            }
            None => {
                self.cur = None;
                Ok(false)
            }
        }
    }

    fn skip_forward(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if !self.open(self.idx + 1)? {
                break;
            }
            if let Some(c) = self.cur.as_mut() {
                c.seek_to_first()?;
            }
        }
        Ok(())
    }

    fn skip_backward(&mut self) -> Result<()> {
        while self.cur.as_ref().is_some_and(|c| !c.valid()) {
            if self.idx == 0 {
                self.cur = None;
                break;
            }
            self.open(self.idx - 1)?;
            if let Some(c) = self.cur.as_mut() {
                c.seek_to_last()?;
            }
        }
        Ok(())
    }
}

impl LevelIter {
    /// The first table whose largest key is `>= target`.
    fn first_reaching(&self, target: &[u8]) -> usize {
        self.files.as_slice().partition_point(|f| compare_internal(&f.info.largest, target) == Ordering::Less)
    }

    /// Table `i`'s cursor, kept if already open (by `prepare_seek`, or an earlier seek), else
    /// opened; false past the last table.
    fn reach(&mut self, i: usize) -> Result<bool> {
        if self.cur.is_some() && self.idx == i { Ok(true) } else { self.open(i) }
    }
}

impl PrepareSeek for LevelIter {
    fn prepare_seek(&mut self, target: &[u8], reads: &mut Vec<PendingRead>) -> Result<()> {
        let i = self.first_reaching(target);
        if self.reach(i)?
            && let Some(c) = self.cur.as_mut()
        {
            c.prepare_seek(target, reads)?;
        }
        Ok(())
    }
}

impl InternalIterator for LevelIter {
    #[inline]
    fn valid(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        if self.open(0)?
            && let Some(c) = self.cur.as_mut()
        {
            c.seek_to_first()?;
        }
        self.skip_forward()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        let n = self.files.as_slice().len();
        if n == 0 {
            self.cur = None;
            return Ok(());
        }
        self.open(n - 1)?;
        if let Some(c) = self.cur.as_mut() {
            c.seek_to_last()?;
        }
        self.skip_backward()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self.first_reaching(target);
        if self.reach(i)?
            && let Some(c) = self.cur.as_mut()
        {
            c.seek(target)?;
        }
        self.skip_forward()
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let i =
            self.files.as_slice().partition_point(|f| compare_internal(&f.info.smallest, target) != Ordering::Greater);
        if i == 0 {
            self.cur = None;
            return Ok(());
        }
        self.open(i - 1)?;
        if let Some(c) = self.cur.as_mut() {
            c.seek_for_prev(target)?;
        }
        self.skip_backward()
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        if let Some(c) = self.cur.as_mut() {
            c.next()?;
            if c.valid() {
                return Ok(());
            }
        }
        self.skip_forward()
    }
    fn prev(&mut self) -> Result<()> {
        if let Some(c) = self.cur.as_mut() {
            c.prev()?;
        }
        self.skip_backward()
    }
    #[inline]
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map(|c| c.key()).unwrap_or_default()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map(|c| c.value()).unwrap_or_default()
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.cur.as_ref().map(|c| c.value_bytes()).unwrap_or_default()
    }
    fn in_hot_block(&self) -> bool {
        self.cur.as_ref().is_some_and(|c| c.in_hot_block())
    }
}
