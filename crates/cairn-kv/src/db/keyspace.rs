//! Keyspaces: every upper layer's rows live under a prefix of their own, handed out here from
//! one registry ([`REGISTRY`]). A layer gets a [`Keyspace`] handle, not the [`Db`]: every key it
//! reads or writes through the handle is relative to its prefix, so it cannot reach another
//! layer's rows. Writes that must span layers (a blob store commit carrying a document's rows)
//! go into one [`KeyspaceBatch`], each put naming the keyspace handle it writes through.
//!
//! The physical key of a row is the keyspace's prefix followed by the relative key; iterators
//! give back relative keys (a zero-copy slice of the physical key).

use std::ops::{Bound, RangeBounds};

use bytes::Bytes;

use crate::db::iter::{Iter, KvPair, prefix_successor};
use crate::db::snapshot::Snapshot;
use crate::db::txn::Transaction;
use crate::db::{Db, WriteOptions};
use crate::write::batch::WriteBatch;
use crate::{MAX_KEY_LEN, Result};

/// A registered keyspace: a name and the key prefix its rows live under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KeyspaceId {
    name: &'static str,
    prefix: &'static [u8],
}

impl KeyspaceId {
    /// The keyspace's name (`cas`, `docs`, ...).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The prefix of its physical keys.
    pub fn prefix(&self) -> &'static [u8] {
        self.prefix
    }
}

/// The blob store's index rows (`cairn-cas`).
pub const CAS: KeyspaceId = KeyspaceId { name: "cas", prefix: b"cas/" };
/// Directory snapshots and the checkout cache (`cairn-tree`).
pub const TREE: KeyspaceId = KeyspaceId { name: "tree", prefix: b"tree/" };
/// The document memory and its derived indexes' queues (`cairn-docs`).
pub const DOCS: KeyspaceId = KeyspaceId { name: "docs", prefix: b"docs/" };
/// Record tables and their secondary indexes (`cairn-tables`).
pub const TABLES: KeyspaceId = KeyspaceId { name: "tables", prefix: b"tb/" };
/// Keys users write themselves (`cairn kv`, `/v1/kv`, the IPC key-value requests).
pub const USER: KeyspaceId = KeyspaceId { name: "user", prefix: b"user/" };

/// Every keyspace, the one place prefixes are assigned. No prefix is a prefix of another, so
/// no key belongs to two keyspaces.
pub const REGISTRY: &[KeyspaceId] = &[CAS, TREE, DOCS, TABLES, USER];

/// The keyspace a physical key belongs to, if any (keys outside every keyspace were written
/// raw, e.g. by a `cairn kv put` of an earlier release).
pub fn owner(key: &[u8]) -> Option<KeyspaceId> {
    REGISTRY.iter().copied().find(|k| key.starts_with(k.prefix))
}

/// A prefix-bound view of a [`Db`]: reads and writes of one keyspace. Cheap to clone.
#[derive(Clone)]
pub struct Keyspace {
    db: Db,
    id: KeyspaceId,
}

impl Db {
    /// The handle of keyspace `id` of this database.
    pub fn keyspace(&self, id: KeyspaceId) -> Keyspace {
        Keyspace { db: self.clone(), id }
    }
}

/// The physical form of a relative key.
fn physical(prefix: &[u8], key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(prefix.len() + key.len());
    k.extend_from_slice(prefix);
    k.extend_from_slice(key);
    k
}

/// Physical bounds of a relative range inside `prefix`.
fn physical_bounds<K: AsRef<[u8]>, R: RangeBounds<K>>(prefix: &[u8], range: R) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let lower = match range.start_bound() {
        Bound::Included(k) => Bound::Included(physical(prefix, k.as_ref())),
        Bound::Excluded(k) => Bound::Excluded(physical(prefix, k.as_ref())),
        Bound::Unbounded => Bound::Included(prefix.to_vec()),
    };
    let upper = match range.end_bound() {
        Bound::Included(k) => Bound::Included(physical(prefix, k.as_ref())),
        Bound::Excluded(k) => Bound::Excluded(physical(prefix, k.as_ref())),
        Bound::Unbounded => end_of(prefix),
    };
    (lower, upper)
}

/// The exclusive end of everything under `prefix`.
fn end_of(prefix: &[u8]) -> Bound<Vec<u8>> {
    match prefix_successor(prefix) {
        Some(s) => Bound::Excluded(s),
        None => Bound::Unbounded,
    }
}

impl Keyspace {
    /// Which keyspace this is.
    pub fn id(&self) -> KeyspaceId {
        self.id
    }

    /// The physical key of relative key `key`.
    fn key(&self, key: &[u8]) -> Vec<u8> {
        physical(self.id.prefix, key)
    }

    /// The longest relative key this keyspace accepts.
    pub fn max_key_len(&self) -> usize {
        MAX_KEY_LEN - self.id.prefix.len()
    }

    /// Reads the current value of `key`.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.db.get(self.key(key.as_ref()))
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: impl AsRef<[u8]>) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Sets `key` to `value`, durably.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let mut b = KeyspaceBatch::new();
        b.put(self, key, value)?;
        self.write(b)
    }

    /// Removes `key`, durably.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        let mut b = KeyspaceBatch::new();
        b.delete(self, key)?;
        self.write(b)
    }

    /// Removes every key `k` of this keyspace with `start <= k < end`, durably.
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let mut b = KeyspaceBatch::new();
        b.delete_range(self, start, end)?;
        self.write(b)
    }

    /// Removes every key of this keyspace (and of no other), durably.
    pub fn clear(&self) -> Result<()> {
        let mut b = KeyspaceBatch::new();
        b.clear(self)?;
        self.write(b)
    }

    /// Applies a batch (which may also hold writes to other keyspaces) atomically and durably.
    pub fn write(&self, batch: KeyspaceBatch) -> Result<()> {
        self.db.write(batch.inner)
    }

    /// Applies a batch atomically with the given options.
    pub fn write_opt(&self, batch: KeyspaceBatch, opts: WriteOptions) -> Result<()> {
        self.db.write_opt(batch.inner, opts)
    }

    /// Iterates over a range of relative keys (both directions).
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> KeyspaceIter {
        KeyspaceIter::new(self.db.range(physical_bounds(self.id.prefix, range)), self.id)
    }

    /// Iterates over every key starting with `prefix` (relative).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> KeyspaceIter {
        KeyspaceIter::new(self.db.prefix(self.key(prefix.as_ref())), self.id)
    }

    /// Iterates over every key of the keyspace.
    pub fn iter(&self) -> KeyspaceIter {
        self.prefix([])
    }

    /// A consistent read-only view of the keyspace as of now.
    pub fn snapshot(&self) -> KeyspaceSnapshot {
        KeyspaceSnapshot { snap: self.db.snapshot(), id: self.id }
    }

    /// Starts an optimistic transaction over this keyspace (see [`Transaction`]).
    pub fn transaction(&self) -> KeyspaceTxn {
        KeyspaceTxn { txn: self.db.transaction(), id: self.id }
    }
}

impl std::fmt::Debug for Keyspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keyspace").field("name", &self.id.name).field("path", &self.db.path()).finish()
    }
}

/// An atomic group of writes to one or more keyspaces, each write made through the handle of
/// the keyspace it goes to.
#[derive(Clone, Debug, Default)]
pub struct KeyspaceBatch {
    inner: WriteBatch,
}

impl KeyspaceBatch {
    /// An empty batch.
    pub fn new() -> KeyspaceBatch {
        KeyspaceBatch::default()
    }

    /// Sets `key` of keyspace `ks` to `value`.
    pub fn put(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.inner.put_prefixed(ks.id.prefix, key.as_ref(), value.as_ref())
    }

    /// Removes `key` of keyspace `ks`.
    pub fn delete(&mut self, ks: &Keyspace, key: impl AsRef<[u8]>) -> Result<()> {
        self.inner.delete(ks.key(key.as_ref()))
    }

    /// Removes every key `k` of keyspace `ks` with `start <= k < end`.
    pub fn delete_range(&mut self, ks: &Keyspace, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.inner.delete_range(ks.key(start.as_ref()), ks.key(end.as_ref()))
    }

    /// Removes every key of keyspace `ks`.
    pub fn clear(&mut self, ks: &Keyspace) -> Result<()> {
        match end_of(ks.id.prefix) {
            Bound::Excluded(end) => self.inner.delete_range(ks.id.prefix, end),
            // No registered prefix is all 0xFF bytes.
            _ => unreachable!("keyspace prefixes have a successor"),
        }
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Encoded size in bytes.
    pub fn approximate_size(&self) -> usize {
        self.inner.approximate_size()
    }
}

/// An iterator over a keyspace's `(relative key, value)` pairs in key order (both directions).
pub struct KeyspaceIter {
    inner: Iter,
    plen: usize,
}

impl KeyspaceIter {
    fn new(inner: Iter, id: KeyspaceId) -> KeyspaceIter {
        KeyspaceIter { inner, plen: id.prefix.len() }
    }

    fn strip(&self, item: Result<KvPair>) -> Result<KvPair> {
        item.map(|(k, v)| (k.slice(self.plen.min(k.len())..), v))
    }

    /// Visits the remaining entries in key order with borrowed relative keys and values (see
    /// [`Iter::for_each_ref`]); `f` returns whether to go on.
    pub fn for_each_ref<E: From<crate::Error>>(
        self,
        mut f: impl FnMut(&[u8], &[u8]) -> std::result::Result<bool, E>,
    ) -> std::result::Result<(), E> {
        let plen = self.plen;
        self.inner.for_each_ref(|k, v| f(&k[plen.min(k.len())..], v))
    }
}

impl Iterator for KeyspaceIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next()?;
        Some(self.strip(item))
    }
}

impl DoubleEndedIterator for KeyspaceIter {
    fn next_back(&mut self) -> Option<Self::Item> {
        let item = self.inner.next_back()?;
        Some(self.strip(item))
    }
}

/// A consistent read-only view of one keyspace.
pub struct KeyspaceSnapshot {
    snap: Snapshot,
    id: KeyspaceId,
}

impl KeyspaceSnapshot {
    /// Reads a key as of the snapshot.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.snap.get(physical(self.id.prefix, key.as_ref()))
    }

    /// Iterates over a range of relative keys as of the snapshot.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> KeyspaceIter {
        KeyspaceIter::new(self.snap.range(physical_bounds(self.id.prefix, range)), self.id)
    }

    /// Iterates over every key starting with `prefix` (relative), as of the snapshot.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> KeyspaceIter {
        KeyspaceIter::new(self.snap.prefix(physical(self.id.prefix, prefix.as_ref())), self.id)
    }
}

/// An optimistic transaction over one keyspace (see [`Transaction`]); keys are relative.
pub struct KeyspaceTxn {
    txn: Transaction,
    id: KeyspaceId,
}

impl KeyspaceTxn {
    fn key(&self, key: &[u8]) -> Vec<u8> {
        physical(self.id.prefix, key)
    }

    /// Sets the durability of the commit (default: synced).
    pub fn set_write_options(&mut self, opts: WriteOptions) {
        self.txn.set_write_options(opts);
    }

    /// Reads `key` (see [`Transaction::get`]).
    pub fn get(&mut self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        let k = self.key(key.as_ref());
        self.txn.get(k)
    }

    /// Adds `key` to the read set without reading it (see [`Transaction::track`]).
    pub fn track(&mut self, key: impl AsRef<[u8]>) {
        let k = self.key(key.as_ref());
        self.txn.track(k);
    }

    /// Buffers a validated put (see [`Transaction::put`]).
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let k = self.key(key.as_ref());
        self.txn.put(k, value)
    }

    /// Buffers a validated delete (see [`Transaction::delete`]).
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let k = self.key(key.as_ref());
        self.txn.delete(k)
    }

    /// Buffers a put not validated at commit (see [`Transaction::put_untracked`]).
    pub fn put_untracked(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let k = self.key(key.as_ref());
        self.txn.put_untracked(k, value)
    }

    /// Buffers a delete not validated at commit (see [`Transaction::delete_untracked`]).
    pub fn delete_untracked(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let k = self.key(key.as_ref());
        self.txn.delete_untracked(k)
    }

    /// Iterates over every key starting with `prefix` (relative) at the transaction's snapshot
    /// (not validated at commit).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> KeyspaceIter {
        KeyspaceIter::new(self.txn.snapshot().prefix(self.key(prefix.as_ref())), self.id)
    }

    /// Validates and applies the transaction (see [`Transaction::commit`]).
    pub fn commit(self) -> Result<()> {
        self.txn.commit()
    }

    /// Discards the transaction.
    pub fn rollback(self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MemStorage, Options};
    use std::sync::Arc;

    fn db() -> Db {
        Db::open_with_storage("/db", Options::small_for_tests(), Arc::new(MemStorage::new())).unwrap()
    }

    #[test]
    fn registered_prefixes_are_prefix_free() {
        for a in REGISTRY {
            for b in REGISTRY {
                if a != b {
                    assert!(!a.prefix.starts_with(b.prefix), "{} inside {}", a.name, b.name);
                }
            }
            assert!(prefix_successor(a.prefix).is_some());
            assert_eq!(owner(&physical(a.prefix, b"x")), Some(*a));
        }
        assert_eq!(owner(b"greeting"), None);
    }

    #[test]
    fn a_keyspace_reads_and_writes_only_its_own_rows() {
        let db = db();
        let user = db.keyspace(USER);
        let docs = db.keyspace(DOCS);
        docs.put(b"d/1", b"doc").unwrap();
        db.put(b"raw", b"r").unwrap();
        user.put(b"a", b"1").unwrap();
        user.put(b"m", b"2").unwrap();
        user.put(b"z", b"3").unwrap();
        assert_eq!(db.get(b"user/a").unwrap().as_deref(), Some(&b"1"[..]));
        // The README's delete-range example over every user key, then the whole keyspace.
        user.delete_range(b"a", b"n").unwrap();
        let keys: Vec<_> = user.iter().map(|kv| kv.unwrap().0).collect();
        assert_eq!(keys, vec![Bytes::from_static(b"z")]);
        user.delete_range(b"", b"\xff\xff\xff").unwrap();
        user.clear().unwrap();
        assert_eq!(user.iter().count(), 0);
        assert_eq!(docs.get(b"d/1").unwrap().as_deref(), Some(&b"doc"[..]));
        assert_eq!(db.get(b"raw").unwrap().as_deref(), Some(&b"r"[..]));
        // A relative key that looks like another keyspace's physical key stays inside.
        user.put(b"docs/d/1", b"x").unwrap();
        assert_eq!(docs.get(b"d/1").unwrap().as_deref(), Some(&b"doc"[..]));
        assert_eq!(db.get(b"user/docs/d/1").unwrap().as_deref(), Some(&b"x"[..]));
    }

    #[test]
    fn iterators_and_snapshots_give_relative_keys_both_ways() {
        let db = db();
        let t = db.keyspace(TABLES);
        db.keyspace(TREE).put(b"a", b"other").unwrap();
        db.keyspace(USER).put(b"a", b"other").unwrap();
        for k in [&b"r/1"[..], b"r/2", b"r/3", b"s/1"] {
            t.put(k, k).unwrap();
        }
        let fwd: Vec<_> = t.prefix(b"r/").map(|kv| kv.unwrap().0).collect();
        assert_eq!(fwd, vec![&b"r/1"[..], b"r/2", b"r/3"]);
        let back: Vec<_> = t.iter().rev().map(|kv| kv.unwrap().0).collect();
        assert_eq!(back, vec![&b"s/1"[..], b"r/3", b"r/2", b"r/1"]);
        let ranged: Vec<_> = t.range(&b"r/2"[..]..).map(|kv| kv.unwrap().0).collect();
        assert_eq!(ranged, vec![&b"r/2"[..], b"r/3", b"s/1"]);
        let snap = t.snapshot();
        t.put(b"r/4", b"late").unwrap();
        assert_eq!(snap.prefix(b"r/").count(), 3);
        assert!(snap.get(b"r/4").unwrap().is_none());
        let mut seen = Vec::new();
        t.prefix(b"r/")
            .for_each_ref::<crate::Error>(|k, _| {
                seen.push(k.to_vec());
                Ok(true)
            })
            .unwrap();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0], b"r/1");
    }

    #[test]
    fn one_batch_spans_keyspaces_and_transactions_stay_inside() {
        let db = db();
        let (cas, docs) = (db.keyspace(CAS), db.keyspace(DOCS));
        let mut b = KeyspaceBatch::new();
        b.put(&cas, b"c/1", b"chunk").unwrap();
        b.put(&docs, b"d/1", b"doc").unwrap();
        cas.write(b).unwrap();
        assert!(db.get(b"cas/c/1").unwrap().is_some() && db.get(b"docs/d/1").unwrap().is_some());
        let mut t = docs.transaction();
        assert_eq!(t.get(b"d/1").unwrap().as_deref(), Some(&b"doc"[..]));
        t.put(b"d/2", b"two").unwrap();
        t.commit().unwrap();
        assert!(db.get(b"docs/d/2").unwrap().is_some());
        let mut a = docs.transaction();
        let mut b = docs.transaction();
        a.get(b"d/1").unwrap();
        b.put(b"d/1", b"changed").unwrap();
        b.commit().unwrap();
        a.put(b"d/3", b"x").unwrap();
        assert!(a.commit().unwrap_err().is_conflict());
    }

    #[test]
    fn relative_keys_are_bounded_so_physical_keys_fit() {
        let db = db();
        let u = db.keyspace(USER);
        assert!(u.put(vec![b'k'; u.max_key_len()], b"v").is_ok());
        assert!(u.put(vec![b'k'; u.max_key_len() + 1], b"v").is_err());
    }
}
