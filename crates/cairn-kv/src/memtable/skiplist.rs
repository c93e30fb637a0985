//! The memtable's index: a skiplist of internal keys with concurrent inserts (each links its
//! node by compare-and-swap, level by level from the bottom) and any number of lock-free
//! readers, whose nodes (tower, key and value together) are carved out of 1 MiB arena chunks.
//!
//! Compared with a general concurrent map this saves three allocations per insert (node, key,
//! value), all epoch bookkeeping, and per-node frees when a flushed memtable is dropped (the
//! chunks go at once). Nodes are never removed or moved: a node lives as long as the list, and
//! readers hold the list (an `Arc`) while they hold a node.
//!
//! Besides the system calls of `storage_mmap`, `prefetch` and `background`, this is the only
//! module of cairn-kv with `unsafe` code. The invariants every block relies on:
//! 1. Chunks are allocated once, never resized or freed before the list is dropped, and only
//!    reached through raw pointers (no `&mut` to a chunk ever exists after it is created).
//! 2. A node's memory is handed out under `arena`'s lock to one insert, which alone writes it.
//!    Its header, key, value and bottom link are written before the node is published at
//!    level 0 by a compare-and-swap (release) into its predecessor's link; its link at each
//!    higher level L is written before the release compare-and-swap that links it at L. A node
//!    is reached at level L only through a link at level L or above, loaded with `Acquire`
//!    (searches only go down levels), so whoever reaches it sees its contents and every link
//!    it may follow from it.
//! 3. After publication a node's header, key and value are never written again; its tower
//!    links are atomics.
#![allow(unsafe_code)]

use std::cmp::Ordering;
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering as AtOrd};

use parking_lot::Mutex;

use crate::key::compare_bytes;

/// Tallest tower. With a branching factor of 4, 12 levels index 4^12 (16 million) entries well.
const MAX_HEIGHT: usize = 12;
/// Arena chunk size in 8-byte words (1 MiB).
const CHUNK_WORDS: usize = (1 << 20) / 8;
/// Bytes of a node before its tower.
const HEADER: usize = std::mem::size_of::<Node>();

/// A node's fixed header; `height` tower links, the internal key and the value follow it.
#[repr(C)]
struct Node {
    /// `seq << 8 | kind`, unpacked from the key for comparisons.
    trailer: u64,
    /// Length of the internal key (user key + 8-byte trailer).
    key_len: u32,
    value_len: u32,
    height: u32,
    _pad: u32,
}

impl Node {
    fn tower(&self, level: usize) -> &AtomicPtr<Node> {
        debug_assert!(level < self.height as usize);
        // SAFETY: the node was allocated with room for `height` links right after the header
        // (8-byte aligned, as the arena is); a link is written before the node is linked at
        // its level (invariant 2), and zeroed (null) memory before that.
        unsafe { &*(ptr::from_ref(self).cast::<u8>().add(HEADER + 8 * level).cast::<AtomicPtr<Node>>()) }
    }

    fn key(&self) -> &[u8] {
        // SAFETY: `key_len` bytes follow the tower; written before publication and never again
        // (invariants 2 and 3). The head has `key_len` 0.
        unsafe {
            let p = ptr::from_ref(self).cast::<u8>().add(HEADER + 8 * self.height as usize);
            std::slice::from_raw_parts(p, self.key_len as usize)
        }
    }

    fn user_key(&self) -> &[u8] {
        let k = self.key();
        &k[..k.len().saturating_sub(8)]
    }

    fn value(&self) -> &[u8] {
        // SAFETY: `value_len` bytes follow the key, under the same invariants as `key`.
        unsafe {
            let p = ptr::from_ref(self).cast::<u8>().add(HEADER + 8 * self.height as usize + self.key_len as usize);
            std::slice::from_raw_parts(p, self.value_len as usize)
        }
    }

    /// Starts loading the node a search descends to from here at `level - 1`: a search compares
    /// this node's successor at `level` next, and if it must go down, that is the node it
    /// compares after, so its cache miss overlaps the current one instead of following it.
    #[inline(always)]
    fn hint_below(&self, level: usize) {
        if level > 0 {
            crate::storage::prefetch::prefetch(self.tower(level - 1).load(AtOrd::Relaxed).cast_const());
        }
    }

    fn next(&self, level: usize) -> Option<&Node> {
        // SAFETY: non-null links point at published nodes of the same list (invariant 2), which
        // live as long as the list and so as long as `self`'s borrow.
        unsafe { self.tower(level).load(AtOrd::Acquire).as_ref() }
    }

    /// Orders this node against the internal key (`user_key`, `trailer`): user key ascending,
    /// then trailer descending (newest first).
    #[inline]
    fn cmp_to(&self, user_key: &[u8], trailer: u64) -> Ordering {
        compare_bytes(self.user_key(), user_key).then_with(|| trailer.cmp(&self.trailer))
    }
}

/// The arena's allocation state, behind `SkipList::arena`'s lock (held only to carve out a
/// node: the search and the linking run outside it).
struct Arena {
    /// Every chunk, as (start, words), freed when the list is dropped.
    chunks: Vec<(NonNull<u64>, usize)>,
    /// Free space of the current chunk.
    cursor: *mut u64,
    left: usize,
}

impl Arena {
    /// `words` 8-byte words of zeroed, 8-byte aligned arena memory.
    fn alloc(&mut self, words: usize) -> *mut u64 {
        if words > self.left {
            let size = if words > CHUNK_WORDS / 4 { words } else { CHUNK_WORDS };
            let chunk = Box::into_raw(vec![0u64; size].into_boxed_slice()).cast::<u64>();
            // SAFETY: `Box::into_raw` never returns null.
            self.chunks.push((unsafe { NonNull::new_unchecked(chunk) }, size));
            if size != CHUNK_WORDS {
                return chunk;
            }
            self.cursor = chunk;
            self.left = CHUNK_WORDS;
        }
        let p = self.cursor;
        // SAFETY: `words <= left`, so the result stays inside (or one past) the current chunk.
        self.cursor = unsafe { self.cursor.add(words) };
        self.left -= words;
        p
    }
}

/// A tower height with P(h) = 4^-(h-1) · 3/4, drawn from the entry's trailer (unique per
/// entry: sequence numbers are) through the splitmix64 finaliser, so that concurrent inserts
/// share no generator state.
fn tower_height(trailer: u64) -> usize {
    let mut z = trailer.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (1 + (z.trailing_zeros() / 2) as usize).min(MAX_HEIGHT)
}

/// Where one inserter's last insert went: its node and its predecessors at every level. An
/// insert of a later key through the same splice (a batch or a log replayed in key order)
/// starts its search there instead of at the head. Each inserter keeps its own, so
/// concurrent inserts share nothing but the list.
pub(crate) struct Splice {
    /// [`SkipList::id`] of the list the pointers below are into (0: none). A splice used with
    /// another list starts over; ids are never reused, so a splice that outlived its list can
    /// never pass for one of a new list at the same address.
    list: u64,
    prev: [*const Node; MAX_HEIGHT],
    last: *const Node,
}

impl Default for Splice {
    fn default() -> Self {
        Splice { list: 0, prev: [ptr::null(); MAX_HEIGHT], last: ptr::null() }
    }
}

/// The skiplist. See the module docs.
pub(crate) struct SkipList {
    head: NonNull<Node>,
    /// Height of the tallest tower (at least 1).
    height: AtomicUsize,
    len: AtomicUsize,
    arena: Mutex<Arena>,
    /// Unique among the lists of the process (see [`Splice`]).
    id: u64,
}

/// The next [`SkipList::id`].
static NEXT_LIST_ID: AtomicU64 = AtomicU64::new(1);

// SAFETY: the raw pointers are into chunks the list owns; node memory is written only by the
// insert it was handed to, before publication and is read-only afterwards except for atomic links
// (invariants 1-3), so the list can be shared and sent between threads.
unsafe impl Send for SkipList {}
// SAFETY: as for `Send`.
unsafe impl Sync for SkipList {}

impl Drop for SkipList {
    fn drop(&mut self) {
        for &(start, words) in &self.arena.get_mut().chunks {
            // SAFETY: each chunk came from `Box::into_raw` of a boxed slice of `words` words and
            // is freed once, here; no reader can hold a node, since readers hold the list.
            drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(start.as_ptr(), words)) });
        }
    }
}

impl Default for SkipList {
    fn default() -> Self {
        Self::new()
    }
}

impl SkipList {
    /// An empty list.
    pub fn new() -> Self {
        let mut arena = Arena { chunks: Vec::new(), cursor: ptr::null_mut(), left: 0 };
        let head = arena.alloc((HEADER + 8 * MAX_HEIGHT) / 8).cast::<Node>();
        // SAFETY: fresh, zeroed, aligned arena memory of the head's size; nothing else sees it
        // yet. Zeroed links are null pointers.
        unsafe { head.write(Node { trailer: 0, key_len: 0, value_len: 0, height: MAX_HEIGHT as u32, _pad: 0 }) };
        // SAFETY: the arena never returns null.
        let head = unsafe { NonNull::new_unchecked(head) };
        let id = NEXT_LIST_ID.fetch_add(1, AtOrd::Relaxed);
        SkipList { head, height: AtomicUsize::new(1), len: AtomicUsize::new(0), arena: Mutex::new(arena), id }
    }

    fn head(&self) -> &Node {
        // SAFETY: the head is written in `new` and lives as long as the list.
        unsafe { self.head.as_ref() }
    }

    fn is_head(&self, n: &Node) -> bool {
        ptr::eq(n, self.head.as_ptr())
    }

    /// Entries inserted.
    pub fn len(&self) -> usize {
        self.len.load(AtOrd::Relaxed)
    }

    /// Bytes a node for this key and value takes.
    pub fn node_bytes(height: usize, key_len: usize, value_len: usize) -> usize {
        (HEADER + 8 * height + key_len + value_len).next_multiple_of(8)
    }

    /// Inserts the internal key `user_key ++ be(trailer)` with `value`. Internal keys must be
    /// unique (sequence numbers are). Inserts may run on several threads at once (each links
    /// its node with compare-and-swap, each with a splice of its own); readers never wait.
    ///
    /// # Panics
    /// If the key or value is 4 GiB or longer (the write path limits them far below that).
    pub fn insert(&self, splice: &mut Splice, user_key: &[u8], trailer: u64, value: &[u8]) {
        let key_len = u32::try_from(user_key.len() + 8).expect("key under 4 GiB");
        let value_len = u32::try_from(value.len()).expect("value under 4 GiB");
        let height = tower_height(trailer);
        let size = Self::node_bytes(height, key_len as usize, value_len as usize);
        let node = self.arena.lock().alloc(size / 8).cast::<Node>();
        // SAFETY: `node` is fresh, zeroed, aligned arena memory of the node's size, handed to
        // this insert alone, that no reader can reach until a link below publishes it
        // (invariant 2).
        let node = unsafe {
            node.write(Node { trailer, key_len, value_len, height: height as u32, _pad: 0 });
            let data = node.cast::<u8>().add(HEADER + 8 * height);
            ptr::copy_nonoverlapping(user_key.as_ptr(), data, user_key.len());
            ptr::copy_nonoverlapping(trailer.to_be_bytes().as_ptr(), data.add(user_key.len()), 8);
            ptr::copy_nonoverlapping(value.as_ptr(), data.add(key_len as usize), value.len());
            &*node
        };
        // SAFETY: a splice of this list holds the head or published nodes of it (and this list
        // is alive).
        let after_last = splice.list == self.id
            && unsafe { splice.last.as_ref() }.is_some_and(|l| l.cmp_to(user_key, trailer).is_lt());
        // Raise the list's height only when this tower is taller (rarely): a read-modify-write
        // on every insert would pull the line away from the other inserting thread each time.
        let mut list_height = self.height.load(AtOrd::Acquire);
        if height > list_height {
            list_height = self.height.fetch_max(height, AtOrd::AcqRel);
        }
        // Predecessor and successor at each level. In-order inserts start from the splice.
        let mut prev = [self.head.as_ptr().cast_const(); MAX_HEIGHT];
        let mut next = [ptr::null_mut::<Node>(); MAX_HEIGHT];
        let mut x: &Node = self.head();
        for level in (0..list_height.max(height)).rev() {
            if after_last && level < list_height {
                // SAFETY: as for `after_last`; below the list height each entry is set.
                let s = unsafe { &*splice.prev[level] };
                // The splice node precedes the last key, hence the new one; start from
                // whichever of it and the node found above is further along.
                if self.is_head(x) || (!self.is_head(s) && s.cmp_to(x.user_key(), x.trailer).is_gt()) {
                    x = s;
                }
            }
            if level < list_height {
                x.hint_below(level);
            }
            let (p, n) = Self::find_at_level(x, level, user_key, trailer);
            x = p;
            prev[level] = p;
            next[level] = n;
        }
        let node_ptr = ptr::from_ref(node).cast_mut();
        // Linked bottom-up: a node reachable at a level is linked at every level below it.
        for level in 0..height {
            loop {
                node.tower(level).store(next[level], AtOrd::Relaxed);
                // SAFETY: `prev` entries are the head or published nodes of this list.
                let p = unsafe { &*prev[level] };
                // The release half publishes the node with its contents and its link.
                match p.tower(level).compare_exchange(next[level], node_ptr, AtOrd::AcqRel, AtOrd::Acquire) {
                    Ok(_) => break,
                    Err(_) => {
                        // Another insert linked a node after `p` at this level; every node
                        // stays where it is, so the search goes on from `p`.
                        (prev[level], next[level]) = Self::find_at_level(p, level, user_key, trailer);
                    }
                }
            }
        }
        // Levels at or above the list height seen by the search may be unset in `prev` (the
        // head): a later insert through this splice searches those from the head anyway.
        splice.list = self.id;
        for (level, s) in splice.prev.iter_mut().enumerate() {
            *s = if level < height { ptr::from_ref(node) } else { prev[level] };
        }
        splice.last = node;
        self.len.fetch_add(1, AtOrd::Relaxed);
    }

    /// From `x` (which precedes the key), walks `level` to the last node before (`user_key`,
    /// `trailer`): that node and its successor there (null at the end).
    fn find_at_level<'a>(mut x: &'a Node, level: usize, user_key: &[u8], trailer: u64) -> (&'a Node, *mut Node) {
        loop {
            let n = x.tower(level).load(AtOrd::Acquire);
            // SAFETY: non-null links point at published nodes of the same list, which live as
            // long as the list (invariant 2).
            match unsafe { n.as_ref() } {
                Some(next) if next.cmp_to(user_key, trailer).is_lt() => x = next,
                _ => return (x, n),
            }
        }
    }

    /// The first entry at or after (`user_key`, `trailer`).
    fn seek_ge(&self, user_key: &[u8], trailer: u64) -> Option<&Node> {
        let mut x = self.head();
        let mut level = self.height.load(AtOrd::Acquire) - 1;
        loop {
            x.hint_below(level);
            match x.next(level) {
                Some(next) if next.cmp_to(user_key, trailer).is_lt() => x = next,
                found => {
                    if level == 0 {
                        return found;
                    }
                    level -= 1;
                }
            }
        }
    }

    /// The last entry before (`user_key`, `trailer`), or at it with `inclusive`.
    fn seek_before(&self, user_key: &[u8], trailer: u64, inclusive: bool) -> Option<&Node> {
        let mut x = self.head();
        let mut level = self.height.load(AtOrd::Acquire) - 1;
        loop {
            match x.next(level) {
                Some(next)
                    if next.cmp_to(user_key, trailer).is_lt()
                        || (inclusive && next.cmp_to(user_key, trailer).is_eq()) =>
                {
                    x = next
                }
                _ => {
                    if level == 0 {
                        return (!self.is_head(x)).then_some(x);
                    }
                    level -= 1;
                }
            }
        }
    }

    fn last(&self) -> Option<&Node> {
        let mut x = self.head();
        let mut level = self.height.load(AtOrd::Acquire) - 1;
        loop {
            match x.next(level) {
                Some(next) => x = next,
                None => {
                    if level == 0 {
                        return (!self.is_head(x)).then_some(x);
                    }
                    level -= 1;
                }
            }
        }
    }

    /// The newest version of `user_key` with a trailer `<= trailer`: (trailer, value).
    pub fn get(&self, user_key: &[u8], trailer: u64) -> Option<(u64, &[u8])> {
        let n = self.seek_ge(user_key, trailer)?;
        (n.user_key() == user_key).then(|| (n.trailer, n.value()))
    }

    /// Every entry in order as (internal key, value).
    pub fn entries(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        std::iter::successors(self.head().next(0), |n| n.next(0)).map(|n| (n.key(), n.value()))
    }
}

/// Splits an internal-key seek target into (user key, trailer); a target too short to be an
/// internal key is taken as a user key sorting before all its versions.
fn split_target(target: &[u8]) -> (&[u8], u64) {
    match target.len().checked_sub(8) {
        Some(n) => (&target[..n], u64::from_be_bytes(target[n..].try_into().unwrap_or_default())),
        None => (target, u64::MAX),
    }
}

/// A cursor over a list it keeps alive.
pub(crate) struct Cursor {
    list: Arc<SkipList>,
    node: Option<NonNull<Node>>,
}

// SAFETY: the node pointer is a published node of `list`, which the cursor keeps alive; nodes
// are read-only after publication except for atomic links (invariants 1-3).
unsafe impl Send for Cursor {}
// SAFETY: as for `Send`.
unsafe impl Sync for Cursor {}

impl Cursor {
    /// An unpositioned cursor.
    pub fn new(list: Arc<SkipList>) -> Self {
        Cursor { list, node: None }
    }

    fn node(&self) -> Option<&Node> {
        // SAFETY: `node` is a published node of `list`, alive while `self` holds the list.
        self.node.map(|n| unsafe { n.as_ref() })
    }

    pub fn valid(&self) -> bool {
        self.node.is_some()
    }

    pub fn seek_to_first(&mut self) {
        let n = self.list.head().next(0).map(NonNull::from);
        self.node = n;
    }

    pub fn seek_to_last(&mut self) {
        let n = self.list.last().map(NonNull::from);
        self.node = n;
    }

    /// Positions at the first entry `>=` the internal key `target`.
    pub fn seek(&mut self, target: &[u8]) {
        let (uk, t) = split_target(target);
        let n = self.list.seek_ge(uk, t);
        self.prefetch_after(n);
        self.node = n.map(NonNull::from);
    }

    /// Starts loading the node after `n`, which a forward scan reads next: in a merge over
    /// several sources a few steps pass before it does, time enough for the load.
    #[inline]
    fn prefetch_after(&self, n: Option<&Node>) {
        if let Some(next) = n.and_then(|n| n.next(0)) {
            crate::storage::prefetch::prefetch(next);
        }
    }

    /// Positions at the last entry `<=` the internal key `target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) {
        let (uk, t) = split_target(target);
        let n = self.list.seek_before(uk, t, true).map(NonNull::from);
        self.node = n;
    }

    pub fn next(&mut self) {
        let n = self.node().and_then(|n| n.next(0));
        self.prefetch_after(n);
        self.node = n.map(NonNull::from);
    }

    /// Steps back: a search for the last entry before the current one (links go forward only).
    pub fn prev(&mut self) {
        let Some(cur) = self.node() else { return };
        let p = self.list.seek_before(cur.user_key(), cur.trailer, false).map(NonNull::from);
        self.node = p;
    }

    /// The internal key at the cursor (empty when not valid).
    pub fn key(&self) -> &[u8] {
        self.node().map_or(&[], |n| n.key())
    }

    pub fn value(&self) -> &[u8] {
        self.node().map_or(&[], |n| n.value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    /// Internal keys as the memtable orders them, for the model.
    fn model_key(uk: &[u8], trailer: u64) -> (Vec<u8>, std::cmp::Reverse<u64>) {
        (uk.to_vec(), std::cmp::Reverse(trailer))
    }

    fn ikey(uk: &[u8], trailer: u64) -> Vec<u8> {
        [uk, &trailer.to_be_bytes()].concat()
    }

    proptest! {
        /// Inserts (random or sorted) then every cursor operation agrees with a BTreeMap.
        #[test]
        fn matches_a_sorted_map(
            entries in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..12), 0u64..40, proptest::collection::vec(any::<u8>(), 0..20)), 0..300),
            sorted in any::<bool>(),
            probes in proptest::collection::vec((proptest::collection::vec(0u8..4, 0..12), 0u64..50), 0..40),
        ) {
            let mut model = BTreeMap::new();
            let mut unique = Vec::new();
            for (uk, t, v) in entries {
                if let std::collections::btree_map::Entry::Vacant(e) = model.entry(model_key(&uk, t)) {
                    e.insert(v.clone());
                    unique.push((uk, t, v));
                }
            }
            if sorted {
                unique.sort_by_key(|a| model_key(&a.0, a.1));
            }
            let list = Arc::new(SkipList::new());
            // One splice throughout: sorted inserts start from it, others from the head.
            let mut splice = Splice::default();
            for (uk, t, v) in &unique {
                list.insert(&mut splice, uk, *t, v);
            }
            prop_assert_eq!(list.len(), model.len());
            let all: Vec<(Vec<u8>, Vec<u8>)> = list.entries().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|((uk, t), v)| (ikey(uk, t.0), v.clone())).collect();
            prop_assert_eq!(&all, &want);
            // Backwards with prev.
            let mut c = Cursor::new(list.clone());
            c.seek_to_last();
            let mut back = Vec::new();
            while c.valid() {
                back.push((c.key().to_vec(), c.value().to_vec()));
                c.prev();
            }
            back.reverse();
            prop_assert_eq!(&back, &want);
            for (uk, t) in probes {
                let target = ikey(&uk, t);
                let ge = want.iter().find(|(k, _)| model_key(&k[..k.len() - 8], u64::from_be_bytes(k[k.len() - 8..].try_into().unwrap())) >= model_key(&uk, t));
                c.seek(&target);
                prop_assert_eq!(c.valid().then(|| c.key().to_vec()), ge.map(|e| e.0.clone()));
                let le = want.iter().rev().find(|(k, _)| model_key(&k[..k.len() - 8], u64::from_be_bytes(k[k.len() - 8..].try_into().unwrap())) <= model_key(&uk, t));
                c.seek_for_prev(&target);
                prop_assert_eq!(c.valid().then(|| c.key().to_vec()), le.map(|e| e.0.clone()));
                let got = list.get(&uk, t).map(|(tr, v)| (tr, v.to_vec()));
                let newest = model.range(model_key(&uk, t)..).next().filter(|((k, _), _)| *k == uk).map(|((_, tr), v)| (tr.0, v.clone()));
                prop_assert_eq!(got, newest);
            }
        }
    }

    /// Tower heights drawn from trailers follow P(h) = 4^-(h-1) * 3/4 over consecutive
    /// sequence numbers (as a write path numbers entries), and stay within the maximum.
    #[test]
    fn tower_heights_are_geometric_over_consecutive_trailers() {
        let n = 1u64 << 20;
        let mut at_least = [0u64; MAX_HEIGHT + 1];
        for seq in 0..n {
            let h = tower_height(seq << 8 | 1);
            assert!((1..=MAX_HEIGHT).contains(&h));
            for c in at_least.iter_mut().take(h + 1).skip(1) {
                *c += 1;
            }
        }
        for (h, &count) in at_least.iter().enumerate().take(6).skip(2) {
            let want = n as f64 / 4f64.powi(h as i32 - 1);
            let got = count as f64;
            assert!((got - want).abs() < want * 0.05, "height >= {h}: {got} of {n}, expected about {want}");
        }
    }

    #[test]
    fn large_values_get_their_own_chunk() {
        let list = SkipList::new();
        let big = vec![7u8; 3 << 20];
        let mut sp = Splice::default();
        list.insert(&mut sp, b"b", 5, &big);
        list.insert(&mut sp, b"a", 1, b"small");
        list.insert(&mut sp, b"c", 2, b"after");
        assert_eq!(list.get(b"b", u64::MAX).map(|(t, v)| (t, v.len())), Some((5, big.len())));
        assert_eq!(list.entries().map(|(k, _)| k[0]).collect::<Vec<_>>(), b"abc");
    }

    /// Readers walk and look up while one writer inserts: every walk is sorted and every key a
    /// reader saw inserted stays found.
    #[test]
    fn readers_run_during_inserts() {
        let list = Arc::new(SkipList::new());
        let n = 20_000u64;
        std::thread::scope(|s| {
            let writer = list.clone();
            s.spawn(move || {
                let mut sp = Splice::default();
                for i in 0..n {
                    let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
                    writer.insert(&mut sp, &k, i, &i.to_le_bytes());
                }
            });
            for _ in 0..2 {
                let list = list.clone();
                s.spawn(move || {
                    while list.len() < n as usize {
                        let keys: Vec<&[u8]> = list.entries().map(|(k, _)| k).collect();
                        assert!(keys.windows(2).all(|w| w[0] < w[1]));
                        for (k, v) in list.entries().step_by(97) {
                            let t = u64::from_be_bytes(k[8..].try_into().unwrap());
                            let (found_t, found_v) = list.get(&k[..8], t).unwrap();
                            assert_eq!((found_t, found_v), (t, v));
                        }
                    }
                });
            }
        });
        assert_eq!(list.entries().count(), n as usize);
    }

    /// The user key `concurrent_inserts_lose_nothing` gives trailer `x`: one of 4, scrambled.
    fn trailer_key(x: u64) -> u64 {
        (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 4
    }

    /// Four threads insert at once (interleaved keys, so their links race on the same
    /// predecessors) while two readers walk: every walk is sorted, and at the end every entry
    /// is there once, in order, with every level's links sorted too (a lost compare-and-swap
    /// race would drop a node from a level or link it out of order).
    #[test]
    fn concurrent_inserts_lose_nothing() {
        let list = Arc::new(SkipList::new());
        let (threads, per) = (4u64, 100_000u64);
        let start = std::sync::Barrier::new(threads as usize);
        std::thread::scope(|s| {
            for t in 0..threads {
                let (list, start) = (list.clone(), &start);
                s.spawn(move || {
                    start.wait();
                    let mut sp = Splice::default();
                    for i in 0..per {
                        // Every thread picks among the same 4 user keys at random, with
                        // trailers of its own: each new version goes in front of its key's
                        // older ones, so the threads keep linking after the same predecessors.
                        let k = (trailer_key(i * threads + t)).to_be_bytes();
                        let trailer = i * threads + t;
                        list.insert(&mut sp, &k, trailer, &trailer.to_le_bytes());
                    }
                });
            }
            for _ in 0..2 {
                let list = list.clone();
                s.spawn(move || {
                    while list.len() < (threads * per) as usize {
                        let keys: Vec<Vec<u8>> = list.entries().map(|(k, _)| k.to_vec()).collect();
                        for w in keys.windows(2) {
                            let (a, b) = (&w[0], &w[1]);
                            let ta = u64::from_be_bytes(a[8..].try_into().unwrap());
                            let tb = u64::from_be_bytes(b[8..].try_into().unwrap());
                            assert!(a[..8] < b[..8] || (a[..8] == b[..8] && ta > tb), "walk out of order");
                        }
                    }
                });
            }
        });
        let total = (threads * per) as usize;
        assert_eq!(list.len(), total);
        let entries: Vec<(Vec<u8>, Vec<u8>)> = list.entries().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(entries.len(), total);
        let mut want: Vec<(u64, u64)> = (0..threads * per).map(|x| (trailer_key(x), x)).collect();
        want.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        for ((k, v), (uk, t)) in entries.iter().zip(&want) {
            assert_eq!(&k[..8], &uk.to_be_bytes());
            assert_eq!(&k[8..], &t.to_be_bytes());
            assert_eq!(v.as_slice(), &t.to_le_bytes());
        }
        // Every level above 0 is a sorted sublist of level 0 holding exactly the nodes whose
        // towers reach it (a compare-and-swap race lost without a retry would leave a node out
        // of a level; searches would still find it through the levels below).
        for level in 1..MAX_HEIGHT {
            let mut x = list.head().next(level);
            let mut linked = 0;
            while let Some(n) = x {
                if let Some(m) = n.next(level) {
                    assert!(m.cmp_to(n.user_key(), n.trailer).is_gt(), "level {level} out of order");
                }
                linked += 1;
                x = n.next(level);
            }
            let tall = want.iter().filter(|&&(_, t)| tower_height(t) > level).count();
            assert_eq!(linked, tall, "nodes linked at level {level}");
        }
        for (uk, t) in want.iter().step_by(101) {
            assert_eq!(list.get(&uk.to_be_bytes(), *t).map(|(found, _)| found), Some(*t));
        }
    }
}
