//! [`MergingIterator`]: merges sorted children into one sorted stream, in either direction,
//! switching direction the way LevelDB's merger does; and [`LevelIter`], which walks the
//! non-overlapping tables of one level, opening each table only when the cursor reaches it.

use std::cmp::Ordering;
use std::sync::Arc;

use crate::Result;
use crate::iter::InternalIterator;
use crate::key::compare_internal;
use crate::version::{TableFile, Version};

/// A merge of several internal iterators. Internal keys are unique across children.
pub(crate) struct MergingIterator {
    children: Vec<Box<dyn InternalIterator>>,
    current: Option<usize>,
    forward: bool,
}

impl MergingIterator {
    pub fn new(children: Vec<Box<dyn InternalIterator>>) -> Self {
        MergingIterator { children, current: None, forward: true }
    }

    fn pick(&mut self, want: Ordering) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            match best {
                Some(b) if compare_internal(c.key(), self.children[b].key()) != want => {}
                _ => best = Some(i),
            }
        }
        self.current = best;
    }

    fn cur(&mut self) -> &mut Box<dyn InternalIterator> {
        let i = self.current.unwrap_or_default();
        &mut self.children[i]
    }
}

impl InternalIterator for MergingIterator {
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.forward = true;
        self.pick(Ordering::Less);
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.forward = false;
        self.pick(Ordering::Greater);
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.forward = true;
        self.pick(Ordering::Less);
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek_for_prev(target)?;
        }
        self.forward = false;
        self.pick(Ordering::Greater);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        let Some(cur) = self.current else { return Ok(()) };
        if !self.forward {
            // Every other child must stand on its first entry after the current key.
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek(&key)?;
                    if c.valid() && c.key() == key.as_slice() {
                        c.next()?;
                    }
                }
            }
            self.forward = true;
        }
        self.cur().next()?;
        self.pick(Ordering::Less);
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        let Some(cur) = self.current else { return Ok(()) };
        if self.forward {
            let key = self.children[cur].key().to_vec();
            for (i, c) in self.children.iter_mut().enumerate() {
                if i != cur {
                    c.seek_for_prev(&key)?;
                    if c.valid() && c.key() == key.as_slice() {
                        c.prev()?;
                    }
                }
            }
            self.forward = false;
        }
        self.cur().prev()?;
        self.pick(Ordering::Greater);
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.current.map(|i| self.children[i].key()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.current.map(|i| self.children[i].value()).unwrap_or_default()
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.current.map(|i| self.children[i].value_bytes()).unwrap_or_default()
    }
}

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
    cur: Option<Box<dyn InternalIterator>>,
}

impl LevelIter {
    pub fn new(files: LevelFiles) -> Self {
        LevelIter { files, idx: 0, cur: None }
    }

    fn open(&mut self, idx: usize) -> Result<bool> {
        self.idx = idx;
        match self.files.as_slice().get(idx) {
            Some(f) => {
                let reader = f.open()?;
                self.cur = Some(Box::new(reader.iter()));
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

impl InternalIterator for LevelIter {
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
        let i = self.files.as_slice().partition_point(|f| compare_internal(&f.info.largest, target) == Ordering::Less);
        if self.open(i)?
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
    fn next(&mut self) -> Result<()> {
        if let Some(c) = self.cur.as_mut() {
            c.next()?;
        }
        self.skip_forward()
    }
    fn prev(&mut self) -> Result<()> {
        if let Some(c) = self.cur.as_mut() {
            c.prev()?;
        }
        self.skip_backward()
    }
    fn key(&self) -> &[u8] {
        self.cur.as_ref().map(|c| c.key()).unwrap_or_default()
    }
    fn value(&self) -> &[u8] {
        self.cur.as_ref().map(|c| c.value()).unwrap_or_default()
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.cur.as_ref().map(|c| c.value_bytes()).unwrap_or_default()
    }
}
