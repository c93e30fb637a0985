//! [`Iter`]: the user-facing range iterator. It merges every source of a super version, keeps
//! the newest version of each key visible at its sequence number, hides deleted keys, and can
//! be consumed from both ends (a second merged cursor serves `next_back`).

use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use bytes::Bytes;

use crate::db::inner::{DbInner, SuperVersion};
use crate::iter::PendingRead;
use crate::iter::merge::MergingIterator;
use crate::iter::{InternalIterator, PrepareSeek};
use crate::key::{self, MAX_SEQ, SeqNo, ValueKind};
use crate::memtable::MemtableIter;
use crate::memtable::range_del::FragmentedTombstones;
use crate::table::iter::TableIter;
use crate::version::level_iter::{LevelFiles, LevelIter};
use crate::{Error, Result};

/// A key-value pair returned by iterators.
pub type KvPair = (Bytes, Bytes);

/// One sorted run a read merges, dispatched without a virtual call (the merge calls `key` and
/// `next` on its children several times per entry).
enum Source {
    Mem(MemtableIter),
    Table(TableIter),
    Level(LevelIter),
}

macro_rules! each_source {
    ($s:expr, $it:ident => $e:expr) => {
        match $s {
            Source::Mem($it) => $e,
            Source::Table($it) => $e,
            Source::Level($it) => $e,
        }
    };
}

impl PrepareSeek for Source {
    fn prepare_seek(&mut self, target: &[u8], reads: &mut Vec<PendingRead>) -> Result<()> {
        match self {
            Source::Mem(_) => Ok(()),
            Source::Table(it) => it.prepare_seek(target, reads),
            Source::Level(it) => it.prepare_seek(target, reads),
        }
    }
}

impl InternalIterator for Source {
    #[inline]
    fn valid(&self) -> bool {
        each_source!(self, it => it.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        each_source!(self, it => it.seek_to_first())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        each_source!(self, it => it.seek_to_last())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        each_source!(self, it => it.seek(target))
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        each_source!(self, it => it.seek_for_prev(target))
    }
    #[inline]
    fn next(&mut self) -> Result<()> {
        each_source!(self, it => it.next())
    }
    fn prev(&mut self) -> Result<()> {
        each_source!(self, it => it.prev())
    }
    #[inline]
    fn key(&self) -> &[u8] {
        each_source!(self, it => it.key())
    }
    #[inline]
    fn value(&self) -> &[u8] {
        each_source!(self, it => it.value())
    }
    fn value_bytes(&self) -> Bytes {
        each_source!(self, it => it.value_bytes())
    }
}

/// The merge of a read's sources.
type Merged = MergingIterator<Source>;

/// What both cursors of an iterator share.
struct Shared {
    /// Keeps the engine alive while the iterator is.
    inner: Arc<DbInner>,
    sv: Arc<SuperVersion>,
    seq: SeqNo,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    tombstones: Option<FragmentedTombstones>,
}

impl Shared {
    fn merged(&self) -> Result<Merged> {
        let sv = &self.sv;
        let mut children = Vec::with_capacity(1 + sv.imms.len() + sv.version.levels.len() + 4);
        children.push(Source::Mem(sv.mem.iter()));
        for m in &sv.imms {
            children.push(Source::Mem(m.iter()));
        }
        let (lo, hi) = (bound_slice(&self.lower), bound_slice(&self.upper));
        let mut level0 = 0;
        for f in &sv.version.levels[0] {
            let below = hi.is_some_and(|h| f.info.smallest_user() > h);
            let above = lo.is_some_and(|l| f.info.largest_user() < l);
            if !below && !above {
                children.push(Source::Table(f.open()?.iter()));
                level0 += 1;
            }
        }
        if crate::flow::pacer::slows_reads(&self.inner.opts, level0) {
            self.inner.pacer.note_slow_read();
        }
        for (level, files) in sv.version.levels.iter().enumerate().skip(1) {
            // The tables that intersect the bounds (a level is sorted and non-overlapping).
            let start = lo.map_or(0, |l| files.partition_point(|f| f.info.largest_user() < l));
            let end = hi.map_or(files.len(), |h| files.partition_point(|f| f.info.smallest_user() <= h));
            if start < end {
                let range = LevelFiles::Version { version: sv.version.clone(), level, range: start..end };
                children.push(Source::Level(LevelIter::new(range)));
            }
        }
        Ok(MergingIterator::new(children))
    }

    #[inline]
    fn deleted(&self, user_key: &[u8], seq: SeqNo) -> bool {
        self.tombstones.as_ref().and_then(|t| t.max_covering(user_key, self.seq)).is_some_and(|t| t > seq)
    }

    #[inline]
    fn above_upper(&self, k: &[u8]) -> bool {
        match &self.upper {
            Bound::Included(u) => key::compare_bytes(k, u).is_gt(),
            Bound::Excluded(u) => key::compare_bytes(k, u).is_ge(),
            Bound::Unbounded => false,
        }
    }

    /// Whether `k` is below the lower bound. Keys come in order going forward, so once one is
    /// not, none after it is: `past` remembers that, and spares the comparison from then on.
    #[inline]
    fn below_lower_fwd(&self, k: &[u8], past: &mut bool) -> bool {
        if *past {
            return false;
        }
        let below = self.below_lower(k);
        *past = !below;
        below
    }

    fn below_lower(&self, k: &[u8]) -> bool {
        match &self.lower {
            Bound::Included(l) => key::compare_bytes(k, l).is_lt(),
            Bound::Excluded(l) => key::compare_bytes(k, l).is_le(),
            Bound::Unbounded => false,
        }
    }
}

fn bound_slice(b: &Bound<Vec<u8>>) -> Option<&[u8]> {
    match b {
        Bound::Included(v) | Bound::Excluded(v) => Some(v),
        Bound::Unbounded => None,
    }
}

fn corrupt(ikey: &[u8]) -> Error {
    Error::corruption("", 0, format!("iterator met a malformed internal key of {} bytes", ikey.len()))
}

/// An iterator over `(key, value)` pairs in key order; `.rev()` or `next_back` walk backwards.
/// Items are `Result`s: an I/O error or corruption ends the iteration after being returned.
pub struct Iter {
    shared: Arc<Shared>,
    front: Option<Merged>,
    back: Option<Merged>,
    /// Last key returned from each end; the ends stop when they meet.
    front_key: Option<Bytes>,
    back_key: Option<Bytes>,
    /// The front has met a key not below the lower bound.
    front_past_lower: bool,
    done: bool,
}

impl Iter {
    pub(crate) fn new<K: AsRef<[u8]>, R: RangeBounds<K>>(inner: &Arc<DbInner>, seq: SeqNo, range: R) -> Iter {
        let own = |b: Bound<&K>| match b {
            Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        Iter::with_bounds(inner, seq, own(range.start_bound()), own(range.end_bound()))
    }

    pub(crate) fn prefix(inner: &Arc<DbInner>, seq: SeqNo, prefix: &[u8]) -> Iter {
        let upper = match prefix_successor(prefix) {
            Some(s) => Bound::Excluded(s),
            None => Bound::Unbounded,
        };
        Iter::with_bounds(inner, seq, Bound::Included(prefix.to_vec()), upper)
    }

    fn with_bounds(inner: &Arc<DbInner>, seq: SeqNo, lower: Bound<Vec<u8>>, upper: Bound<Vec<u8>>) -> Iter {
        let sv = inner.sv.load_full();
        let tombstones = if !sv.has_range_tombstones() {
            None
        } else {
            let all: Vec<_> = sv
                .imms
                .iter()
                .chain(std::iter::once(&sv.mem))
                .flat_map(|m| m.range_tombstones())
                .chain(sv.version.tombstones.iter().cloned())
                .filter(|t| t.seq <= seq)
                .collect();
            Some(FragmentedTombstones::new(&all))
        };
        let shared = Arc::new(Shared { inner: inner.clone(), sv, seq, lower, upper, tombstones });
        Iter { shared, front: None, back: None, front_key: None, back_key: None, front_past_lower: false, done: false }
    }

    /// The merged iterator the front walks with, positioned at the lower bound on first use.
    fn front(&mut self) -> Result<&mut Merged> {
        if self.front.is_none() {
            let mut m = self.shared.merged()?;
            match &self.shared.lower {
                Bound::Included(k) | Bound::Excluded(k) => m.seek(&key::lookup_key(k, MAX_SEQ))?,
                Bound::Unbounded => m.seek_to_first()?,
            }
            self.front = Some(m);
        }
        Ok(self.front.as_mut().expect("set above"))
    }

    fn step_front(&mut self) -> Result<Option<KvPair>> {
        let sh = self.shared.clone();
        let mut past_lower = self.front_past_lower;
        let found = self.step_front_from(&sh, &mut past_lower);
        self.front_past_lower = past_lower;
        found
    }

    fn step_front_from(&mut self, sh: &Shared, past_lower: &mut bool) -> Result<Option<KvPair>> {
        let m = self.front()?;
        while m.valid() {
            let p = key::parse_internal_key(m.key()).ok_or_else(|| corrupt(m.key()))?;
            if sh.above_upper(p.user_key) {
                return Ok(None);
            }
            if p.seq > sh.seq || sh.below_lower_fwd(p.user_key, past_lower) {
                m.next()?;
                continue;
            }
            // The newest visible version of this key; skip its older versions.
            let uk = Bytes::copy_from_slice(p.user_key);
            let (seq, kind) = (p.seq, p.kind);
            let value = m.value_bytes();
            m.next()?;
            while m.valid() && key::eq_bytes(key::user_key(m.key()), &uk) {
                m.next()?;
            }
            if kind == ValueKind::Put && !sh.deleted(&uk, seq) {
                return Ok(Some((uk, value)));
            }
        }
        Ok(None)
    }

    /// Visits the remaining entries from the front in key order, each key and value borrowed
    /// for the call: no key is copied and no value shares its block, so nothing is allocated or
    /// counted per entry (the fastest way through a large range). `f` returns whether to go on;
    /// an error from it or from the engine stops the walk and is returned.
    pub fn for_each_ref<E: From<Error>>(
        mut self,
        mut f: impl FnMut(&[u8], &[u8]) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        if self.done {
            return Ok(());
        }
        let sh = self.shared.clone();
        let back_key = self.back_key.clone();
        let mut past_lower = self.front_past_lower;
        let m = self.front()?;
        // The user key whose newest visible version was last met, while its older versions
        // may follow.
        let mut uk = Vec::with_capacity(64);
        let mut skipping = false;
        while m.valid() {
            let k = m.key();
            // Older versions are skipped unparsed, as `step_front` skips them.
            if skipping {
                if key::eq_bytes(key::user_key(k), &uk) {
                    m.next()?;
                    continue;
                }
                skipping = false;
            }
            let p = key::parse_internal_key(k).ok_or_else(|| corrupt(k))?;
            if sh.above_upper(p.user_key)
                || back_key.as_ref().is_some_and(|b| key::compare_bytes(p.user_key, b).is_ge())
            {
                break;
            }
            if p.seq > sh.seq || sh.below_lower_fwd(p.user_key, &mut past_lower) {
                m.next()?;
                continue;
            }
            // The newest visible version of this key; its older versions are skipped after.
            uk.clear();
            uk.extend_from_slice(p.user_key);
            skipping = true;
            if p.kind == ValueKind::Put && !sh.deleted(p.user_key, p.seq) && !f(p.user_key, m.value())? {
                return Ok(());
            }
            m.next()?;
        }
        Ok(())
    }

    fn step_back(&mut self) -> Result<Option<KvPair>> {
        let sh = self.shared.clone();
        if self.back.is_none() {
            let mut m = sh.merged()?;
            match &sh.upper {
                Bound::Included(k) => m.seek_for_prev(&key::internal_key(k, 0, 0))?,
                Bound::Excluded(k) => m.seek_for_prev(&key::lookup_key(k, MAX_SEQ))?,
                Bound::Unbounded => m.seek_to_last()?,
            }
            self.back = Some(m);
        }
        let Some(m) = self.back.as_mut() else { return Ok(None) };
        while m.valid() {
            let p = key::parse_internal_key(m.key()).ok_or_else(|| corrupt(m.key()))?;
            if sh.below_lower(p.user_key) {
                return Ok(None);
            }
            let uk = Bytes::copy_from_slice(p.user_key);
            // Walking backwards meets a key's versions oldest first: the last visible one seen
            // is the newest.
            let mut best: Option<(SeqNo, ValueKind, Bytes)> = None;
            while m.valid() && key::user_key(m.key()) == uk.as_ref() {
                let p = key::parse_internal_key(m.key()).ok_or_else(|| corrupt(m.key()))?;
                if p.seq <= sh.seq {
                    best = Some((p.seq, p.kind, m.value_bytes()));
                }
                m.prev()?;
            }
            if sh.above_upper(&uk) {
                continue;
            }
            if let Some((seq, ValueKind::Put, value)) = best
                && !sh.deleted(&uk, seq)
            {
                return Ok(Some((uk, value)));
            }
        }
        Ok(None)
    }
}

impl Iterator for Iter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step_front() {
            Ok(Some(kv)) if self.back_key.as_ref().is_none_or(|b| kv.0 < *b) => {
                self.front_key = Some(kv.0.clone());
                Some(Ok(kv))
            }
            Ok(_) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

impl DoubleEndedIterator for Iter {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step_back() {
            Ok(Some(kv)) if self.front_key.as_ref().is_none_or(|f| kv.0 > *f) => {
                self.back_key = Some(kv.0.clone());
                Some(Ok(kv))
            }
            Ok(_) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, if any (none when the
/// prefix is all `0xFF` bytes): the exclusive end of a prefix range.
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut s = prefix.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xFF {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}
