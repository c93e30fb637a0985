//! [`MergingIterator`]: merges sorted children into one sorted stream, in either direction,
//! switching direction the way LevelDB's merger does.

use std::cmp::Ordering;

use crate::Result;
use crate::iter::PendingRead;
use crate::iter::{InternalIterator, PrepareSeek};
use crate::key::compare_internal;

/// A merge of several internal iterators. Internal keys are unique across children.
///
/// Forward, the valid children form a min-heap by key: a step advances the top child and
/// compares it with the smaller of the top's two children in the heap, which the iterator
/// remembers while they stay where they are, so a step that leaves the top child on top (one
/// child supplying a run of keys) costs one comparison. Backward steps pick the largest child
/// by a linear scan.
pub(crate) struct MergingIterator<C: InternalIterator = Box<dyn InternalIterator>> {
    children: Vec<C>,
    current: Option<usize>,
    forward: bool,
    /// While `forward`: indices of the valid children, a min-heap by key (`heap[0]` is current).
    heap: Vec<usize>,
    /// Which of `heap[1]` and `heap[2]` holds the smaller key, if known (they have not moved
    /// since it was found).
    runner_up: Option<usize>,
    /// Reused by each seek: the blocks its children will read from files.
    reads: Vec<PendingRead>,
}

impl<C: InternalIterator> MergingIterator<C> {
    pub fn new(children: Vec<C>) -> Self {
        let heap = Vec::with_capacity(children.len());
        MergingIterator { children, current: None, forward: true, heap, runner_up: None, reads: Vec::new() }
    }

    /// Backward: the child with the largest key.
    fn pick_largest(&mut self) {
        let mut best: Option<usize> = None;
        for (i, c) in self.children.iter().enumerate() {
            if !c.valid() {
                continue;
            }
            match best {
                Some(b) if compare_internal(c.key(), self.children[b].key()) != Ordering::Greater => {}
                _ => best = Some(i),
            }
        }
        self.current = best;
    }

    fn less(&self, a: usize, b: usize) -> bool {
        compare_internal(self.children[a].key(), self.children[b].key()) == Ordering::Less
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let m = if l + 1 < n && self.less(self.heap[l + 1], self.heap[l]) { l + 1 } else { l };
            if !self.less(self.heap[m], self.heap[i]) {
                break;
            }
            self.heap.swap(i, m);
            i = m;
        }
    }

    /// Forward: heapifies the valid children; the smallest becomes current.
    fn rebuild_heap(&mut self) {
        let mut heap = std::mem::take(&mut self.heap);
        heap.clear();
        heap.extend((0..self.children.len()).filter(|&i| self.children[i].valid()));
        self.heap = heap;
        for i in (0..self.heap.len() / 2).rev() {
            self.sift_down(i);
        }
        self.runner_up = None;
        self.current = self.heap.first().copied();
    }

    /// Forward, after the top child stepped: restores the heap.
    fn fix_top(&mut self) {
        let n = self.heap.len();
        if n < 2 {
            return;
        }
        let s = match self.runner_up {
            Some(s) => s,
            None => {
                let s = if n > 2 && self.less(self.heap[2], self.heap[1]) { 2 } else { 1 };
                self.runner_up = Some(s);
                s
            }
        };
        if self.less(self.heap[s], self.heap[0]) {
            self.heap.swap(0, s);
            self.sift_down(s);
            self.runner_up = None;
        }
    }

    fn cur(&mut self) -> &mut C {
        let i = self.current.unwrap_or_default();
        &mut self.children[i]
    }
}

impl<C: InternalIterator + PrepareSeek> InternalIterator for MergingIterator<C> {
    #[inline]
    fn valid(&self) -> bool {
        self.current.is_some()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_first()?;
        }
        self.forward = true;
        self.rebuild_heap();
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        for c in &mut self.children {
            c.seek_to_last()?;
        }
        self.forward = false;
        self.pick_largest();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        // A seek reads a block from each table whose block is not cached: cold, one device
        // read after another, each waiting for the last. Asked for all at once first, they
        // are read in parallel (as RocksDB's `async_io` seeks do), and each child's seek then
        // finds its block in the page cache or in flight. One read alone gains nothing,
        // unless it asks for the blocks after its own too.
        let mut reads = std::mem::take(&mut self.reads);
        for c in &mut self.children {
            c.prepare_seek(target, &mut reads)?;
        }
        if reads.len() >= 2 || reads.iter().any(PendingRead::reads_ahead) {
            for r in &reads {
                r.start();
            }
        }
        reads.clear();
        self.reads = reads;
        for c in &mut self.children {
            c.seek(target)?;
        }
        self.forward = true;
        self.rebuild_heap();
        Ok(())
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        for c in &mut self.children {
            c.seek_for_prev(target)?;
        }
        self.forward = false;
        self.pick_largest();
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
            self.cur().next()?;
            self.rebuild_heap();
            return Ok(());
        }
        self.cur().next()?;
        if self.children[cur].valid() {
            self.fix_top();
        } else {
            self.heap.swap_remove(0);
            self.sift_down(0);
            self.runner_up = None;
        }
        self.current = self.heap.first().copied();
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
        self.pick_largest();
        Ok(())
    }
    #[inline]
    fn key(&self) -> &[u8] {
        self.current.map(|i| self.children[i].key()).unwrap_or_default()
    }
    #[inline]
    fn value(&self) -> &[u8] {
        self.current.map(|i| self.children[i].value()).unwrap_or_default()
    }
    fn value_bytes(&self) -> bytes::Bytes {
        self.current.map(|i| self.children[i].value_bytes()).unwrap_or_default()
    }
    fn in_hot_block(&self) -> bool {
        self.current.is_some_and(|i| self.children[i].in_hot_block())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::key::{ValueKind, internal_key};
    use crate::memtable::Memtable;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Op {
        First,
        Last,
        Seek(u8, u64),
        SeekForPrev(u8, u64),
        Next,
        Prev,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::First),
            Just(Op::Last),
            (any::<u8>(), 0u64..200).prop_map(|(k, s)| Op::Seek(k, s)),
            (any::<u8>(), 0u64..200).prop_map(|(k, s)| Op::SeekForPrev(k, s)),
            Just(Op::Next),
            Just(Op::Next),
            Just(Op::Next),
            Just(Op::Prev),
        ]
    }

    proptest! {
        /// Any sequence of seeks and steps in both directions over up to 8 children visits the
        /// same keys as a walk over their sorted union.
        #[test]
        fn matches_the_sorted_union(
            entries in proptest::collection::vec((0usize..8, any::<u8>()), 0..200),
            ops in proptest::collection::vec(op(), 1..60),
        ) {
            let mems: Vec<Arc<Memtable>> = (0..8).map(|_| Arc::new(Memtable::new(1, 1 << 16))).collect();
            let mut all = Vec::new();
            for (seq, (child, k)) in entries.into_iter().enumerate() {
                let seq = seq as u64 + 1;
                mems[child].insert(&[k], seq, ValueKind::Put, &seq.to_le_bytes());
                all.push(internal_key(&[k], seq, ValueKind::Put as u8));
            }
            all.sort_by(|a, b| compare_internal(a, b));
            let mut m = MergingIterator::new(mems.iter().map(|mem| Box::new(mem.iter()) as Box<dyn InternalIterator>).collect());
            let mut pos: Option<usize> = None;
            for op in ops {
                match op {
                    Op::First => { m.seek_to_first().unwrap(); pos = (!all.is_empty()).then_some(0); }
                    Op::Last => { m.seek_to_last().unwrap(); pos = all.len().checked_sub(1); }
                    Op::Seek(k, s) => {
                        let t = internal_key(&[k], s, 0xFF);
                        m.seek(&t).unwrap();
                        let i = all.partition_point(|x| compare_internal(x, &t) == Ordering::Less);
                        pos = (i < all.len()).then_some(i);
                    }
                    Op::SeekForPrev(k, s) => {
                        let t = internal_key(&[k], s, 0xFF);
                        m.seek_for_prev(&t).unwrap();
                        let i = all.partition_point(|x| compare_internal(x, &t) != Ordering::Greater);
                        pos = i.checked_sub(1);
                    }
                    Op::Next => {
                        if pos.is_none() { continue; }
                        m.next().unwrap();
                        pos = pos.map(|p| p + 1).filter(|&p| p < all.len());
                    }
                    Op::Prev => {
                        if pos.is_none() { continue; }
                        m.prev().unwrap();
                        pos = pos.and_then(|p| p.checked_sub(1));
                    }
                }
                prop_assert_eq!(m.valid(), pos.is_some());
                if let Some(p) = pos {
                    prop_assert_eq!(m.key(), all[p].as_slice());
                }
            }
        }
    }
}
