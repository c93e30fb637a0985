//! Record tables over cairn-kv: JSON objects keyed by a primary-key attribute, an optional
//! schema checked on every write, hash and range secondary indexes kept in the same engine
//! write as their record, FIQL queries planned onto the indexes, optimistic multi-record
//! transactions and conditional writes.
//!
//! Every write is a cairn-kv optimistic transaction that reads the table definition and the
//! record and writes the record with its index changes; the engine validates the reads at
//! commit, so a concurrent index creation or change of the same record makes it retry rather
//! than leave an index out of step. An index created on a populated table is filled by a
//! background builder in chunks (each chunk a transaction over the records it reads); queries
//! use an index only once it is marked ready, so they never see a half-built one.

#![deny(missing_docs)]

mod error;
pub mod fiql;
pub mod keys;
mod query;
pub mod record;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use cairn_kv::{Keyspace, KeyspaceTxn, WriteOptions, prefix_successor};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use error::{Error, Result};
pub use query::{Query, QueryResult};

/// Attempts of a transaction before [`Error::Conflict`].
pub const RETRIES: usize = 32;

/// Conflicts after which a transaction takes its turn alone (see [`Tables::transaction`]).
const ESCALATE: usize = 8;
/// Records an index builder covers per transaction.
const BUILD_CHUNK: usize = 512;

/// The kind of a secondary index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Equality (`==`, `=in=`): entries keyed by a 64-bit hash of the value.
    Hash,
    /// Equality, ranges and prefixes: entries keyed by the order-preserving value.
    Range,
}

/// A secondary index.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IndexDef {
    /// Its name, unique in the table.
    pub name: String,
    /// The indexed attribute (dotted path; arrays index each element).
    pub attr: String,
    /// Hash or range.
    pub kind: IndexKind,
    /// Number in the keyspace.
    pub id: u32,
    /// Filled: queries may use it.
    pub ready: bool,
}

/// The JSON type an attribute must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttrType {
    /// A string.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// An object.
    Object,
    /// An array.
    Array,
    /// Anything.
    Any,
}

/// One attribute of a schema.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttrSpec {
    /// Its type (`null` is accepted only when not required).
    #[serde(rename = "type")]
    pub ty: AttrType,
    /// Must be present and not null.
    #[serde(default)]
    pub required: bool,
}

/// A table's schema: attributes by dotted path. Attributes not listed are free unless
/// `strict`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Schema {
    /// The attributes.
    pub attributes: BTreeMap<String, AttrSpec>,
    /// Reject top-level attributes the schema does not list.
    #[serde(default)]
    pub strict: bool,
}

/// A table's definition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TableDef {
    /// Its name.
    pub name: String,
    /// The primary-key attribute (a string or an integer in every record).
    pub pk: String,
    /// The schema, if any.
    pub schema: Option<Schema>,
    /// Secondary indexes.
    pub indexes: Vec<IndexDef>,
    /// Id of the next index created.
    pub next_index: u32,
}

/// A stored record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Version: 1 when first created, +1 on every change; a record created again after a
    /// delete continues from the deleted record's version.
    pub version: u64,
    /// The JSON object.
    pub data: Value,
}

/// A decoded definition, with the bytes it was decoded from and the [`DefEpoch`] it is known
/// current for (`None`: unknown).
struct CachedDef {
    bytes: bytes::Bytes,
    def: Arc<TableDef>,
    epoch: Option<u64>,
}

/// Decoded definitions by meta key.
type DefCache = HashMap<Vec<u8>, CachedDef>;

/// Counts the commits that change table definitions, seqlock-style, so that a write can use a
/// cached definition instead of reading its row, and still never miss an index.
///
/// A changer bumps `begun` before its commit and `done` after it. A reader calls
/// [`DefEpoch::stable`] before taking its snapshot and [`DefEpoch::confirm`] after: when both
/// agree on an epoch `e`, no change was in flight or began around the snapshot, so the
/// snapshot holds exactly the changes counted in `e`, and a definition cached under `e`
/// is the one the snapshot holds. (Changes committed later are caught by the transaction's
/// validation of the row, which it still tracks.)
#[derive(Default)]
struct DefEpoch {
    begun: AtomicU64,
    done: AtomicU64,
}

impl DefEpoch {
    /// Runs `commit`, a write that may change definitions.
    fn change<T>(&self, commit: impl FnOnce() -> T) -> T {
        self.begun.fetch_add(1, Ordering::SeqCst);
        let out = commit();
        // A panic above leaves `begun` ahead for good: the cache is not used any more.
        self.done.fetch_add(1, Ordering::SeqCst);
        out
    }

    /// The current epoch if no change is in flight; call before taking a snapshot.
    fn stable(&self) -> Option<u64> {
        let done = self.done.load(Ordering::SeqCst);
        (self.begun.load(Ordering::SeqCst) == done).then_some(done)
    }

    /// `epoch` (from [`DefEpoch::stable`]) if no change began since; call after the snapshot.
    fn confirm(&self, epoch: Option<u64>) -> Option<u64> {
        epoch.filter(|&e| self.begun.load(Ordering::SeqCst) == e)
    }
}

struct Inner {
    /// The rows (the engine's `tables` keyspace).
    rows: Keyspace,
    writes: WriteOptions,
    /// Decoded table definitions by meta key, with the bytes they were decoded from: a reader
    /// still reads the row (so it sees changes and a transaction validates it) but decodes
    /// it only when it changed.
    defs: Mutex<DefCache>,
    epoch: DefEpoch,
    closing: AtomicBool,
    /// Held by a transaction that conflicted [`ESCALATE`] times, while `escalated` counts such
    /// transactions: others wait for it before they start, so it cannot starve.
    turn: parking_lot::ReentrantMutex<()>,
    escalated: std::sync::atomic::AtomicUsize,
    builders: Mutex<Vec<std::thread::JoinHandle<()>>>,
    build_errors: Mutex<HashMap<(String, String), String>>,
}

/// The record tables of one engine. Cheap to clone.
#[derive(Clone)]
pub struct Tables {
    inner: Arc<Inner>,
}

fn check_name(kind: &str, n: &str) -> Result<()> {
    if n.is_empty() || n.len() > 64 || !n.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-') {
        return Err(Error::Invalid(format!("{kind} name {n:?}: use 1-64 letters, digits, _ or -")));
    }
    Ok(())
}

impl IndexDef {
    /// The top-level attribute the indexed path starts at.
    fn root(&self) -> &str {
        self.attr.split('.').next().unwrap_or(&self.attr)
    }
}

fn path_of(attr: &str) -> Vec<String> {
    attr.split('.').map(str::to_string).collect()
}

/// The primary key of `rec`, encoded.
fn pk_of(def: &TableDef, rec: &Value) -> Result<(Vec<u8>, Value)> {
    let obj = rec.as_object().ok_or_else(|| Error::Invalid("a record must be a JSON object".into()))?;
    let id = obj.get(&def.pk).ok_or_else(|| Error::Invalid(format!("record has no primary key {:?}", def.pk)))?;
    encode_id(id).map(|b| (b, id.clone()))
}

/// Encodes a primary-key value (a string, or an integer).
pub fn encode_id(id: &Value) -> Result<Vec<u8>> {
    let ok = match id {
        Value::String(s) => !s.is_empty() && s.len() <= 1024,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    };
    if !ok {
        return Err(Error::Invalid(format!("primary key {id} must be a non-empty string (up to 1 KiB) or an integer")));
    }
    let mut b = Vec::new();
    keys::encode_scalar(id, &mut b);
    Ok(b)
}

/// A primary key written as text (a command-line argument, a URL segment): an integer, a JSON
/// string (`"42"` for text digits), or else the text itself.
pub fn id_from_text(s: &str) -> Value {
    match serde_json::from_str::<Value>(s) {
        Ok(v @ (Value::Number(_) | Value::String(_))) => v,
        _ => Value::String(s.to_string()),
    }
}

fn id_text(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        v => v.to_string(),
    }
}

fn validate(def: &TableDef, rec: &Value) -> Result<()> {
    let Some(schema) = &def.schema else { return Ok(()) };
    let obj = rec.as_object().ok_or_else(|| Error::Invalid("a record must be a JSON object".into()))?;
    if schema.strict {
        for k in obj.keys() {
            if k != &def.pk && !schema.attributes.keys().any(|a| a == k || a.starts_with(&format!("{k}."))) {
                return Err(Error::Invalid(format!("attribute {k:?} is not in the schema of table {}", def.name)));
            }
        }
    }
    for (attr, spec) in &schema.attributes {
        let mut v = Some(rec);
        for part in attr.split('.') {
            v = v.and_then(|x| x.get(part));
        }
        match v {
            None | Some(Value::Null) if spec.required => {
                return Err(Error::Invalid(format!("attribute {attr:?} is required")));
            }
            None | Some(Value::Null) => {}
            Some(v) => {
                let ok = match spec.ty {
                    AttrType::String => v.is_string(),
                    AttrType::Number => v.is_number(),
                    AttrType::Integer => v.is_i64() || v.is_u64(),
                    AttrType::Boolean => v.is_boolean(),
                    AttrType::Object => v.is_object(),
                    AttrType::Array => v.is_array(),
                    AttrType::Any => true,
                };
                if !ok {
                    let mut shown = v.to_string();
                    if shown.len() > 60 {
                        shown.truncate(57);
                        shown += "...";
                    }
                    return Err(Error::Invalid(
                        format!("attribute {attr:?} must be {:?}, got {shown}", spec.ty).to_lowercase(),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The index entry keys of `rec` under `ix`.
fn entries(table: &str, ix: &IndexDef, pk: &[u8], rec: Option<&Value>) -> BTreeSet<Vec<u8>> {
    let mut out = BTreeSet::new();
    let Some(rec) = rec else { return out };
    let mut vals = Vec::new();
    fiql::lookup(rec, &path_of(&ix.attr), &mut vals);
    let prefix = keys::index_prefix(table, ix.id);
    for v in vals {
        let mut k = prefix.clone();
        let ok = match ix.kind {
            IndexKind::Range => keys::encode_scalar(v, &mut k),
            IndexKind::Hash => keys::hash_scalar(v).map(|h| k.extend_from_slice(&h)),
        };
        if ok.is_some() {
            k.extend_from_slice(pk);
            out.insert(k);
        }
    }
    out
}

fn decode_def(key: &[u8], b: &[u8]) -> Result<TableDef> {
    serde_json::from_slice(b).map_err(|e| Error::corrupt(key, e.to_string()))
}

impl Inner {
    /// The definition of table `name`, its row read by `get` (from the engine, a snapshot or a
    /// transaction) and decoded once per change of the row.
    fn def(
        &self,
        name: &str,
        get: impl FnOnce(&[u8]) -> cairn_kv::Result<Option<bytes::Bytes>>,
    ) -> Result<Arc<TableDef>> {
        self.def_at(&keys::meta_key(name), name, None, get)
    }

    /// [`Inner::def`] for a reader at `epoch` (see [`DefEpoch`]), which caches the definition
    /// as current for that epoch. The row is read by `get` and decoded when it changed.
    fn def_at(
        &self,
        key: &[u8],
        name: &str,
        epoch: Option<u64>,
        get: impl FnOnce(&[u8]) -> cairn_kv::Result<Option<bytes::Bytes>>,
    ) -> Result<Arc<TableDef>> {
        let b = get(key)?.ok_or_else(|| Error::NoTable(name.to_string()))?;
        let mut defs = self.defs.lock();
        if let Some(c) = defs.get_mut(key)
            && c.bytes == b
        {
            if epoch.is_some() {
                c.epoch = epoch;
            }
            return Ok(c.def.clone());
        }
        drop(defs);
        let def = Arc::new(decode_def(key, &b)?);
        self.defs.lock().insert(key.to_vec(), CachedDef { bytes: b, def: def.clone(), epoch });
        Ok(def)
    }

    /// The cached definition at meta key `key` if it is known current for `epoch`.
    fn cached_def(&self, key: &[u8], epoch: Option<u64>) -> Option<Arc<TableDef>> {
        let e = epoch?;
        self.defs.lock().get(key).filter(|c| c.epoch == Some(e)).map(|c| c.def.clone())
    }
}

/// RFC 7396 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let t = target.as_object_mut().expect("object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
        } else {
            merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// A transaction's turn alone ([`Tables::transaction`]): counted in `escalated` while held.
struct Turn<'a> {
    inner: &'a Inner,
    _held: parking_lot::ReentrantMutexGuard<'a, ()>,
}

impl Turn<'_> {
    fn take(inner: &Inner) -> Turn<'_> {
        inner.escalated.fetch_add(1, Ordering::AcqRel);
        Turn { inner, _held: inner.turn.lock() }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.inner.escalated.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What replacing a record needs of the current one.
struct Prior {
    version: u64,
    /// The attributes indexes read (all of them, or only those).
    indexed: Value,
}

/// A multi-record transaction: reads see a snapshot plus the transaction's own writes; the
/// commit fails with a conflict (and [`Tables::transaction`] retries the closure) if another
/// writer changed a record or table this transaction read or wrote.
pub struct Tx {
    txn: KeyspaceTxn,
    defs: HashMap<String, Arc<TableDef>>,
    inner: Arc<Inner>,
    /// The [`DefEpoch`] the snapshot is known to be at, if any.
    epoch: Option<u64>,
    /// Whether this transaction writes a definition (its commit is a [`DefEpoch::change`]).
    changes_defs: bool,
}

impl Tx {
    fn new(inner: &Arc<Inner>) -> Tx {
        let epoch = inner.epoch.stable();
        let mut txn = inner.rows.transaction();
        txn.set_write_options(inner.writes);
        let epoch = inner.epoch.confirm(epoch);
        Tx { txn, defs: HashMap::new(), inner: inner.clone(), epoch, changes_defs: false }
    }

    fn def(&mut self, table: &str) -> Result<Arc<TableDef>> {
        if let Some(d) = self.defs.get(table) {
            return Ok(d.clone());
        }
        let key = keys::meta_key(table);
        let d = match self.inner.cached_def(&key, self.epoch).filter(|_| !self.changes_defs) {
            Some(d) => {
                // Not read, but validated at commit as if it were: a change makes this retry.
                self.txn.track(&key);
                d
            }
            None => self.inner.def_at(&key, table, self.epoch.filter(|_| !self.changes_defs), |k| self.txn.get(k))?,
        };
        self.defs.insert(table.to_string(), d.clone());
        Ok(d)
    }

    /// Writes the definition of `def.name` (or deletes it: `None`).
    fn put_def(&mut self, name: &str, def: Option<&TableDef>) -> Result<()> {
        self.changes_defs = true;
        self.defs.remove(name);
        let k = keys::meta_key(name);
        match def {
            Some(d) => self.txn.put(&k, serde_json::to_vec(d).expect("serializes"))?,
            None => self.txn.delete(&k)?,
        }
        Ok(())
    }

    /// The record with primary key `id`.
    pub fn get(&mut self, table: &str, id: &Value) -> Result<Option<Record>> {
        self.def(table)?;
        let k = keys::record_key(table, &encode_id(id)?);
        self.txn.get(&k)?.map(|b| record::decode(&k, &b)).transpose()
    }

    /// The record at row `k` as far as replacing it needs: its version and the attributes
    /// `def`'s indexes read (the rest is not decoded).
    fn prior(&mut self, def: &TableDef, k: &[u8]) -> Result<Option<Prior>> {
        let Some(b) = self.txn.get(k)? else { return Ok(None) };
        let version = record::version(k, &b)?;
        let indexed = match def.indexes.is_empty() {
            true => Value::Null,
            false => {
                let mut roots: Vec<String> = def.indexes.iter().map(|ix| ix.root().to_string()).collect();
                roots.sort();
                roots.dedup();
                record::decode_roots(k, &b, &roots)?
            }
        };
        Ok(Some(Prior { version, indexed }))
    }

    fn write(&mut self, def: &TableDef, pk: &[u8], old: Option<&Prior>, new: Option<&Value>) -> Result<u64> {
        // A record created again after a delete continues from the deleted one's version.
        let tomb = keys::tombstone_key(&def.name, pk);
        let before = match old {
            Some(r) => r.version,
            None => match self.txn.get(&tomb)? {
                Some(b) => {
                    let v = b.as_ref().try_into().map(u64::from_le_bytes).map_err(|_| Error::Corrupt {
                        key: String::from_utf8_lossy(&tomb).into(),
                        msg: "a deleted record's version is not 8 bytes".into(),
                    })?;
                    self.txn.delete_untracked(&tomb)?;
                    v
                }
                None => 0,
            },
        };
        let version = before + 1;
        for ix in &def.indexes {
            let before = entries(&def.name, ix, pk, old.map(|r| &r.indexed));
            let after = entries(&def.name, ix, pk, new);
            // Entries are keyed by record: only writers of this record (tracked above) or
            // the builder (which reads it) touch them, so they need no validation.
            for k in before.difference(&after) {
                self.txn.delete_untracked(k)?;
            }
            for k in after.difference(&before) {
                self.txn.put_untracked(k, [])?;
            }
        }
        let k = keys::record_key(&def.name, pk);
        match new {
            Some(Value::Object(m)) => self.txn.put(&k, record::encode(version, m))?,
            Some(_) => return Err(Error::Invalid("a record is a JSON object".into())),
            None => {
                self.txn.delete(&k)?;
                self.txn.put_untracked(&tomb, before.to_le_bytes())?;
            }
        }
        Ok(version)
    }

    /// Creates or replaces the record `rec` (its primary key is in it) if the current record
    /// is as `expect`ed; returns the new version. The record is borrowed, not kept.
    pub fn put_with(&mut self, table: &str, rec: &Value, expect: Expect) -> Result<u64> {
        let def = self.def(table)?;
        validate(&def, rec)?;
        let (pk, id) = pk_of(&def, rec)?;
        let k = keys::record_key(table, &pk);
        let old = self.prior(&def, &k)?;
        expect.check(table, &id, old.as_ref().map(|o| o.version))?;
        self.write(&def, &pk, old.as_ref(), Some(rec))
    }

    /// Creates or replaces the record (its primary key is in it).
    pub fn put(&mut self, table: &str, rec: Value) -> Result<Record> {
        let version = self.put_with(table, &rec, Expect::Any)?;
        Ok(Record { version, data: rec })
    }

    /// Creates the record; [`Error::Exists`] if its key is taken.
    pub fn insert(&mut self, table: &str, rec: Value) -> Result<Record> {
        let version = self.put_with(table, &rec, Expect::Absent)?;
        Ok(Record { version, data: rec })
    }

    /// Replaces the record only if it is at `version` ([`Error::VersionMismatch`] otherwise;
    /// 0 means absent).
    pub fn put_if_version(&mut self, table: &str, rec: Value, version: u64) -> Result<Record> {
        let version = self.put_with(table, &rec, Expect::Version(version))?;
        Ok(Record { version, data: rec })
    }

    /// Applies a JSON merge patch to the record (the primary key cannot change), optionally
    /// only at `version`.
    pub fn patch(&mut self, table: &str, id: &Value, patch: &Value, version: Option<u64>) -> Result<Record> {
        let def = self.def(table)?;
        let pk = encode_id(id)?;
        let k = keys::record_key(table, &pk);
        let old = self.txn.get(&k)?.map(|b| record::decode(&k, &b)).transpose()?;
        let Some(old) = old else { return Err(Error::NotFound(table.into(), id_text(id))) };
        if let Some(v) = version {
            Expect::Version(v).check(table, id, Some(old.version))?;
        }
        let mut data = old.data.clone();
        merge_patch(&mut data, patch);
        if data.get(&def.pk) != Some(id) {
            return Err(Error::Invalid(format!("a patch cannot change the primary key {:?}", def.pk)));
        }
        validate(&def, &data)?;
        let old = Prior { version: old.version, indexed: old.data };
        let version = self.write(&def, &pk, Some(&old), Some(&data))?;
        Ok(Record { version, data })
    }

    /// Deletes the record, optionally only at `version`; false if there was none.
    pub fn delete(&mut self, table: &str, id: &Value, version: Option<u64>) -> Result<bool> {
        let def = self.def(table)?;
        let pk = encode_id(id)?;
        let k = keys::record_key(table, &pk);
        let old = self.prior(&def, &k)?;
        if let Some(v) = version {
            Expect::Version(v).check(table, id, old.as_ref().map(|o| o.version))?;
        }
        let Some(old) = old else { return Ok(false) };
        self.write(&def, &pk, Some(&old), None)?;
        Ok(true)
    }
}

/// What a conditional write expects of the current record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Anything: the write creates or replaces.
    Any,
    /// No record ([`Error::Exists`] otherwise).
    Absent,
    /// The record at this version, 0 meaning absent ([`Error::VersionMismatch`] otherwise).
    Version(u64),
}

impl Expect {
    /// `old`: the version of the current record, if there is one.
    fn check(&self, table: &str, id: &Value, old: Option<u64>) -> Result<()> {
        let current = old.unwrap_or(0);
        match self {
            Expect::Any => Ok(()),
            Expect::Absent if old.is_some() => Err(Error::Exists(table.into(), id_text(id))),
            Expect::Absent => Ok(()),
            Expect::Version(v) if *v != current => {
                Err(Error::VersionMismatch { id: id_text(id), expected: *v, current })
            }
            Expect::Version(_) => Ok(()),
        }
    }
}

impl Tables {
    /// Opens the tables whose rows live in `rows` (the engine's `tables` keyspace); resumes
    /// building indexes a restart interrupted. Every write
    /// is durable (synced) before it returns.
    pub fn open(rows: Keyspace) -> Result<Tables> {
        Tables::open_with(rows, WriteOptions::default())
    }

    /// [`Tables::open`] with the durability of record writes: with
    /// [`WriteOptions::no_sync`] a write survives a crash of the process but the last ones
    /// may be lost in a power cut (never torn, never out of order, indexes always in step).
    pub fn open_with(rows: Keyspace, writes: WriteOptions) -> Result<Tables> {
        let t = Tables {
            inner: Arc::new(Inner {
                rows,
                writes,
                defs: Mutex::default(),
                epoch: DefEpoch::default(),
                closing: AtomicBool::new(false),
                turn: parking_lot::ReentrantMutex::new(()),
                escalated: std::sync::atomic::AtomicUsize::new(0),
                builders: Mutex::default(),
                build_errors: Mutex::default(),
            }),
        };
        for def in t.list()? {
            for ix in def.indexes.iter().filter(|i| !i.ready) {
                t.spawn_builder(&def.name, ix.id, &ix.name);
            }
        }
        Ok(t)
    }

    /// The rows underneath (the `tables` keyspace).
    pub fn rows(&self) -> &Keyspace {
        &self.inner.rows
    }

    /// Runs `f` in a transaction, retrying it on conflicts (up to [`RETRIES`] times, with
    /// [`cairn_kv::retry_backoff`] between them). `f` may run more than once; its writes land
    /// only with a successful commit. A transaction that keeps conflicting (a thread that is
    /// descheduled between its reads and its commit can lose every race) takes a turn alone:
    /// transactions starting meanwhile wait for it, so once those in flight are done it commits.
    pub fn transaction<T>(&self, mut f: impl FnMut(&mut Tx) -> Result<T>) -> Result<T> {
        if self.inner.escalated.load(Ordering::Acquire) > 0 {
            drop(self.inner.turn.lock());
        }
        let mut _alone = None;
        for attempt in 0..RETRIES {
            if attempt == ESCALATE {
                _alone = Some(Turn::take(&self.inner));
            }
            let mut tx = Tx::new(&self.inner);
            let out = f(&mut tx)?;
            let committed = match tx.changes_defs {
                true => self.inner.epoch.change(|| tx.txn.commit()),
                false => tx.txn.commit(),
            };
            match committed {
                Ok(()) => return Ok(out),
                Err(e) if e.is_conflict() => cairn_kv::retry_backoff(attempt),
                Err(e) => return Err(e.into()),
            }
        }
        Err(Error::Conflict(RETRIES))
    }

    /// Every table.
    pub fn list(&self) -> Result<Vec<TableDef>> {
        self.inner
            .rows
            .prefix(keys::META)
            .map(|kv| {
                let (k, v) = kv?;
                decode_def(&k, &v)
            })
            .collect()
    }

    /// One table's definition.
    pub fn table(&self, name: &str) -> Result<TableDef> {
        Ok((*self.inner.def(name, |k| self.inner.rows.get(k))?).clone())
    }

    /// Creates a table whose records are keyed by attribute `pk`.
    pub fn create_table(&self, name: &str, pk: &str, schema: Option<Schema>) -> Result<TableDef> {
        check_name("table", name)?;
        if pk.is_empty() || pk.contains('.') {
            return Err(Error::Invalid(format!("primary key attribute {pk:?} must be a top-level attribute name")));
        }
        if let Some(s) = &schema {
            for a in s.attributes.keys() {
                if a.is_empty() || a.split('.').any(str::is_empty) {
                    return Err(Error::Invalid(format!("schema attribute {a:?} is not a dotted path")));
                }
            }
        }
        let def = TableDef { name: name.into(), pk: pk.into(), schema, indexes: Vec::new(), next_index: 1 };
        self.transaction(|tx| {
            if tx.txn.get(keys::meta_key(name))?.is_some() {
                return Err(Error::TableExists(name.into()));
            }
            tx.put_def(name, Some(&def))
        })?;
        Ok(def)
    }

    /// Drops a table with its records and indexes.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.table(name)?;
        let rows = &self.inner.rows;
        let mut b = cairn_kv::KeyspaceBatch::new();
        b.delete(rows, keys::meta_key(name))?;
        for p in [keys::records_prefix(name), keys::table_index_prefix(name), keys::tombstones_prefix(name)] {
            let end = prefix_successor(&p).expect("ends in /");
            b.delete_range(rows, p, end)?;
        }
        self.inner.epoch.change(|| self.inner.rows.write(b))?;
        Ok(())
    }

    /// Creates or replaces the record `rec` if the current one is as `expect`ed; returns the
    /// new version. Like [`Tables::put`], [`Tables::insert`] and [`Tables::put_if_version`],
    /// but the record is borrowed (nothing is cloned) and not returned.
    pub fn put_with(&self, table: &str, rec: &Value, expect: Expect) -> Result<u64> {
        self.transaction(|tx| tx.put_with(table, rec, expect))
    }

    /// Creates or replaces a record.
    pub fn put(&self, table: &str, rec: Value) -> Result<Record> {
        let version = self.transaction(|tx| tx.put_with(table, &rec, Expect::Any))?;
        Ok(Record { version, data: rec })
    }

    /// Creates a record; [`Error::Exists`] if its key is taken.
    pub fn insert(&self, table: &str, rec: Value) -> Result<Record> {
        let version = self.transaction(|tx| tx.put_with(table, &rec, Expect::Absent))?;
        Ok(Record { version, data: rec })
    }

    /// Replaces a record only at `version` (0: only if absent).
    pub fn put_if_version(&self, table: &str, rec: Value, version: u64) -> Result<Record> {
        let version = self.transaction(|tx| tx.put_with(table, &rec, Expect::Version(version)))?;
        Ok(Record { version, data: rec })
    }

    /// Merge-patches a record, optionally only at `version`.
    pub fn patch(&self, table: &str, id: &Value, patch: &Value, version: Option<u64>) -> Result<Record> {
        self.transaction(|tx| tx.patch(table, id, patch, version))
    }

    /// Deletes a record, optionally only at `version`; false if there was none.
    pub fn delete(&self, table: &str, id: &Value, version: Option<u64>) -> Result<bool> {
        self.transaction(|tx| tx.delete(table, id, version))
    }

    /// The record with primary key `id`.
    pub fn get(&self, table: &str, id: &Value) -> Result<Option<Record>> {
        // Only to check that the table exists: a cached definition known current will do.
        let epoch = self.inner.epoch.stable();
        let key = keys::meta_key(table);
        if self.inner.cached_def(&key, epoch).is_none() {
            self.inner.def_at(&key, table, epoch, |k| self.inner.rows.get(k))?;
        }
        let k = keys::record_key(table, &encode_id(id)?);
        self.inner.rows.get(&k)?.map(|b| record::decode(&k, &b)).transpose()
    }

    /// Creates an index on attribute `attr` (dotted path) and fills it in the background;
    /// queries use it once [`IndexDef::ready`]. [`Tables::wait_for_index`] waits for that.
    pub fn create_index(&self, table: &str, name: &str, attr: &str, kind: IndexKind) -> Result<IndexDef> {
        check_name("index", name)?;
        if attr.is_empty() || attr.split('.').any(str::is_empty) {
            return Err(Error::Invalid(format!("attribute {attr:?} is not a dotted path")));
        }
        let ix = self.transaction(|tx| {
            let mut def = (*tx.def(table)?).clone();
            if def.indexes.iter().any(|i| i.name == name) {
                return Err(Error::Invalid(format!("table {table} already has an index {name}")));
            }
            let ix = IndexDef { name: name.into(), attr: attr.into(), kind, id: def.next_index, ready: false };
            def.next_index += 1;
            def.indexes.push(ix.clone());
            tx.put_def(table, Some(&def))?;
            Ok(ix)
        })?;
        self.spawn_builder(table, ix.id, name);
        Ok(ix)
    }

    /// Drops an index and its entries.
    pub fn drop_index(&self, table: &str, name: &str) -> Result<()> {
        let id = self.transaction(|tx| {
            let mut def = (*tx.def(table)?).clone();
            let pos = def
                .indexes
                .iter()
                .position(|i| i.name == name)
                .ok_or_else(|| Error::NoIndex(table.into(), name.into()))?;
            let id = def.indexes.remove(pos).id;
            tx.put_def(table, Some(&def))?;
            Ok(id)
        })?;
        // Nothing writes entries of an index missing from the definition any more.
        let p = keys::index_prefix(table, id);
        let end = prefix_successor(&p).expect("ends in /");
        self.inner.rows.delete_range(p, end)?;
        Ok(())
    }

    /// Waits until the index is ready (or its build failed).
    pub fn wait_for_index(&self, table: &str, name: &str) -> Result<()> {
        loop {
            let def = self.table(table)?;
            let ix =
                def.indexes.iter().find(|i| i.name == name).ok_or_else(|| Error::NoIndex(table.into(), name.into()))?;
            if ix.ready {
                return Ok(());
            }
            if let Some(e) = self.inner.build_errors.lock().get(&(table.to_string(), name.to_string())) {
                return Err(Error::Invalid(format!("building index {name}: {e}")));
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    fn spawn_builder(&self, table: &str, id: u32, name: &str) {
        let t = self.clone();
        let (table, name) = (table.to_string(), name.to_string());
        let h = std::thread::Builder::new()
            .name(format!("cairn-index-{table}-{name}"))
            .spawn(move || {
                if let Err(e) = t.build(&table, id) {
                    t.inner.build_errors.lock().insert((table, name), e.to_string());
                }
            })
            .expect("spawn an index builder");
        self.inner.builders.lock().push(h);
    }

    /// Fills index `id` of `table` from its records, a chunk per transaction; marks it ready.
    fn build(&self, table: &str, id: u32) -> Result<()> {
        let prefix = keys::records_prefix(table);
        let end = prefix_successor(&prefix).expect("ends in /");
        let mut from = prefix.clone();
        loop {
            if self.inner.closing.load(Ordering::Relaxed) {
                return Ok(());
            }
            let chunk: Vec<Vec<u8>> = self
                .inner
                .rows
                .range(from.clone()..end.clone())
                .take(BUILD_CHUNK)
                .map(|kv| kv.map(|(k, _)| k.to_vec()))
                .collect::<std::result::Result<_, _>>()?;
            let last = chunk.len() < BUILD_CHUNK;
            let gone = self.transaction(|tx| {
                let def = tx.def(table)?;
                let Some(ix) = def.indexes.iter().find(|i| i.id == id) else { return Ok(true) };
                tx.txn.set_write_options(WriteOptions::no_sync());
                let roots = [ix.root().to_string()];
                for k in &chunk {
                    if let Some(b) = tx.txn.get(k)? {
                        let r = record::decode_roots(k, &b, &roots)?;
                        for e in entries(table, ix, &k[prefix.len()..], Some(&r)) {
                            tx.txn.put_untracked(e, [])?;
                        }
                    }
                }
                if last {
                    let mut def = (*def).clone();
                    def.indexes.iter_mut().filter(|i| i.id == id).for_each(|i| i.ready = true);
                    tx.txn.set_write_options(WriteOptions::default());
                    tx.put_def(table, Some(&def))?;
                }
                Ok(false)
            });
            match gone {
                Err(Error::NoTable(_)) | Ok(true) => return Ok(()),
                Err(e) => return Err(e),
                Ok(false) if last => return Ok(()),
                Ok(false) => {
                    from = chunk.last().expect("a full chunk").clone();
                    from.push(0);
                }
            }
        }
    }

    /// Checks every index of `table` against its records: each record's entries exist and no
    /// other entries do. Returns the number of records.
    pub fn verify(&self, table: &str) -> Result<u64> {
        let snap = self.inner.rows.snapshot();
        let def = self.inner.def(table, |k| snap.get(k))?;
        let prefix = keys::records_prefix(table);
        let mut want: BTreeMap<u32, BTreeSet<Vec<u8>>> = BTreeMap::new();
        let mut n = 0;
        for kv in snap.prefix(&prefix) {
            let (k, v) = kv?;
            let r = record::decode(&k, &v)?;
            let (pk, _) = pk_of(&def, &r.data)?;
            if pk != k[prefix.len()..] {
                return Err(Error::corrupt(&k, "primary key attribute differs from the row key"));
            }
            for ix in &def.indexes {
                want.entry(ix.id).or_default().extend(entries(table, ix, &pk, Some(&r.data)));
            }
            n += 1;
        }
        for ix in def.indexes.iter().filter(|i| i.ready) {
            let have: BTreeSet<Vec<u8>> = snap
                .prefix(keys::index_prefix(table, ix.id))
                .map(|kv| kv.map(|(k, _)| k.to_vec()))
                .collect::<std::result::Result<_, _>>()?;
            let want = want.remove(&ix.id).unwrap_or_default();
            if let Some(k) = have.symmetric_difference(&want).next() {
                let what = if have.contains(k) { "stale" } else { "missing" };
                return Err(Error::corrupt(k, format!("{what} entry in index {}", ix.name)));
            }
        }
        Ok(n)
    }

    /// Rebuilds every index of `table` from its records (after `verify` found one that
    /// disagrees): each is marked not ready, its entries are dropped, and it is filled again
    /// in the background while writes go on; waits until all are ready. Returns their names.
    pub fn rebuild_indexes(&self, table: &str) -> Result<Vec<String>> {
        let ixs = self.transaction(|tx| {
            let mut def = (*tx.def(table)?).clone();
            def.indexes.iter_mut().for_each(|i| i.ready = false);
            tx.put_def(table, Some(&def))?;
            Ok(def.indexes.clone())
        })?;
        for ix in &ixs {
            let p = keys::index_prefix(table, ix.id);
            let end = prefix_successor(&p).expect("ends in /");
            self.inner.rows.delete_range(p, end)?;
            self.spawn_builder(table, ix.id, &ix.name);
        }
        for ix in &ixs {
            self.wait_for_index(table, &ix.name)?;
        }
        Ok(ixs.into_iter().map(|i| i.name).collect())
    }

    /// Stops index builders (they resume on the next open).
    pub fn close(&self) {
        self.inner.closing.store(true, Ordering::Relaxed);
        for h in self.inner.builders.lock().drain(..) {
            let _ = h.join();
        }
    }
}
