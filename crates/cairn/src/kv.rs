//! Key-value access for users: put, get, delete, delete-range, scan and load work in the user
//! keyspace (physical prefix `user/`), so no key a user writes or deletes can touch the rows
//! of the blob store, the documents, the trees or the tables. `raw: true` is the expert's
//! escape hatch to the whole engine (documented as such; never the default). Engine-wide
//! statistics, compaction and the table checksum check are here too.
//!
//! In JSON, keys and values are [`Blob`]s: `{"text": "..."}` when UTF-8, else
//! `{"base64": "..."}`.

use std::io::BufRead;
use std::ops::Bound;
use std::path::PathBuf;
use std::time::Instant;

use cairn_kv::{Db, Keyspace, KeyspaceBatch, WriteBatch, WriteOptions, keyspace};
use serde::{Deserialize, Serialize};

use crate::text::Blob;
use crate::{Cairn, Call, Error, Result};

/// Set a key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PutRequest {
    /// The key.
    pub key: Blob,
    /// The value (none: the call's standard input).
    pub value: Option<Blob>,
    /// Do not wait for the write to reach the disk.
    pub no_sync: bool,
    /// The whole engine instead of the user keyspace (experts only).
    pub raw: bool,
}

/// Names a key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyRequest {
    /// The key.
    pub key: Blob,
    /// The whole engine instead of the user keyspace (experts only).
    pub raw: bool,
}

/// A key and its value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Row {
    /// The key.
    pub key: Blob,
    /// The value (absent with `keys_only`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Blob>,
}

/// Delete every key in `[start, end)`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeleteRangeRequest {
    /// First key deleted.
    pub start: Blob,
    /// First key kept after the range.
    pub end: Blob,
    /// The whole engine instead of the user keyspace (experts only).
    pub raw: bool,
}

/// List keys in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScanRequest {
    /// Only keys with this prefix.
    pub prefix: Option<Blob>,
    /// From this key (inclusive).
    pub start: Option<Blob>,
    /// Before this key.
    pub end: Option<Blob>,
    /// Last key first.
    pub reverse: bool,
    /// At most this many (default 1,000; 0: no limit).
    pub limit: Option<usize>,
    /// Keys only.
    pub keys_only: bool,
    /// The whole engine instead of the user keyspace (experts only).
    pub raw: bool,
}

/// Rows in key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanResult {
    /// The rows.
    pub rows: Vec<Row>,
    /// Whether the limit cut the scan.
    pub truncated: bool,
}

/// Something done to keys.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoneResult {
    /// What was done (`put`, `delete`, `delete_range`, `compact`).
    pub done: String,
}

/// Load a JSON-lines file (gzip allowed) as records keyed by a field, then read every record
/// back and scan them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadRequest {
    /// The file (relative: against the caller's working directory).
    pub file: PathBuf,
    /// The field holding each record's key (default `_id`).
    #[serde(default = "default_key_field")]
    pub key_field: String,
    /// Prefix added to every key.
    #[serde(default)]
    pub key_prefix: String,
    /// Records per write batch (default 1,000).
    #[serde(default = "default_batch")]
    pub batch: usize,
}

fn default_key_field() -> String {
    "_id".into()
}

fn default_batch() -> usize {
    1000
}

/// What a load did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    /// The file.
    pub file: PathBuf,
    /// Records loaded.
    pub records: u64,
    /// Bytes of keys and values.
    pub bytes: u64,
    /// Seconds to load.
    pub load_secs: f64,
    /// Seconds to read every record back by key.
    pub get_secs: f64,
    /// Seconds to scan them.
    pub scan_secs: f64,
    /// Keys the scan met.
    pub scanned: u64,
}

/// One level of the engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LevelStats {
    /// Tables.
    pub tables: u64,
    /// Bytes.
    pub bytes: u64,
}

/// Engine statistics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsResult {
    /// Tables and bytes per level.
    pub levels: Vec<LevelStats>,
    /// Bytes in the memtable.
    pub memtable_bytes: u64,
    /// Frozen memtables waiting for a flush.
    pub immutable_memtables: u64,
    /// The last sequence number.
    pub last_seq: u64,
    /// Range tombstones.
    pub range_tombstones: u64,
    /// Bytes in the block cache.
    pub block_cache_bytes: u64,
    /// Live snapshots.
    pub snapshots: u64,
}

/// What the table checksum check read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvVerifyResult {
    /// Table entries read (every block checksum matched).
    pub entries: u64,
}

/// Where a kv request reads and writes: the user keyspace, or with `raw` the whole engine.
enum Space {
    User(Keyspace),
    Raw(Db),
}

impl Space {
    fn get(&self, k: &[u8]) -> Result<Option<bytes::Bytes>> {
        Ok(match self {
            Space::User(ks) => ks.get(k)?,
            Space::Raw(db) => db.get(k)?,
        })
    }
}

fn key_bytes(b: &Blob, what: &str) -> Result<Vec<u8>> {
    b.bytes(what)
}

impl Cairn {
    fn space(&self, raw: bool, create: bool) -> Result<Space> {
        let db = self.db(create)?;
        Ok(if raw { Space::Raw(db) } else { Space::User(db.keyspace(keyspace::USER)) })
    }

    /// Sets a key.
    pub fn kv_put(&self, req: PutRequest, call: &mut Call<'_>) -> Result<DoneResult> {
        call.access.check_write("kv put")?;
        let key = key_bytes(&req.key, "key")?;
        let value = match &req.value {
            Some(v) => v.bytes("value")?,
            None => {
                let input = call.input.take().ok_or_else(|| Error::bad_request("no value and no standard input"))?;
                let mut v = Vec::new();
                input.read_to_end(&mut v).map_err(|e| Error::io(std::path::Path::new("<stdin>"), e))?;
                v
            }
        };
        let opts = WriteOptions { sync: !req.no_sync };
        match self.space(req.raw, true)? {
            Space::User(ks) => {
                let mut b = KeyspaceBatch::new();
                b.put(&ks, &key, &value)?;
                ks.write_opt(b, opts)?;
            }
            Space::Raw(db) => {
                let mut b = WriteBatch::new();
                b.put(&key, &value)?;
                db.write_opt(b, opts)?;
            }
        }
        Ok(DoneResult { done: "put".into() })
    }

    /// A key's value.
    pub fn kv_get(&self, req: KeyRequest) -> Result<Row> {
        let key = key_bytes(&req.key, "key")?;
        match self.space(req.raw, false)?.get(&key)? {
            Some(v) => Ok(Row { key: req.key, value: Some(Blob::of(&v)) }),
            None => Err(Error::not_found(format!("key {} not found", crate::text::escape(&key)))),
        }
    }

    /// Deletes a key.
    pub fn kv_delete(&self, req: KeyRequest, call: &Call<'_>) -> Result<DoneResult> {
        call.access.check_write("kv delete")?;
        let key = key_bytes(&req.key, "key")?;
        match self.space(req.raw, false)? {
            Space::User(ks) => ks.delete(&key)?,
            Space::Raw(db) => db.delete(&key)?,
        }
        Ok(DoneResult { done: "delete".into() })
    }

    /// Deletes every key in `[start, end)`.
    pub fn kv_delete_range(&self, req: DeleteRangeRequest, call: &Call<'_>) -> Result<DoneResult> {
        call.access.check_write("kv delete-range")?;
        let (start, end) = (key_bytes(&req.start, "start")?, key_bytes(&req.end, "end")?);
        match self.space(req.raw, false)? {
            Space::User(ks) => ks.delete_range(&start, &end)?,
            Space::Raw(db) => db.delete_range(&start, &end)?,
        }
        Ok(DoneResult { done: "delete_range".into() })
    }

    /// Keys (and values) in order.
    pub fn kv_scan(&self, req: ScanRequest) -> Result<ScanResult> {
        let bytes = |b: &Option<Blob>, what| b.as_ref().map(|b| key_bytes(b, what)).transpose();
        let (prefix, start, end) =
            (bytes(&req.prefix, "prefix")?, bytes(&req.start, "start")?, bytes(&req.end, "end")?);
        let range = match (prefix, start, end) {
            (Some(p), None, None) => {
                let end = cairn_kv::prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
                (Bound::Included(p), end)
            }
            (None, s, e) => (s.map_or(Bound::Unbounded, Bound::Included), e.map_or(Bound::Unbounded, Bound::Excluded)),
            _ => return Err(Error::bad_request("a prefix cannot be combined with start/end")),
        };
        let limit = match req.limit {
            Some(0) => usize::MAX,
            Some(n) => n,
            None => 1000,
        };
        let it: Box<dyn Iterator<Item = cairn_kv::Result<cairn_kv::KvPair>>> = match self.space(req.raw, false)? {
            Space::User(ks) => {
                let it = ks.range::<Vec<u8>, _>(range);
                if req.reverse { Box::new(it.rev()) } else { Box::new(it) }
            }
            Space::Raw(db) => {
                let it = db.range::<Vec<u8>, _>(range);
                if req.reverse { Box::new(it.rev()) } else { Box::new(it) }
            }
        };
        let mut rows = Vec::new();
        let mut truncated = false;
        for item in it {
            let (k, v) = item?;
            if rows.len() == limit {
                truncated = true;
                break;
            }
            rows.push(Row { key: Blob::of(&k), value: (!req.keys_only).then(|| Blob::of(&v)) });
        }
        Ok(ScanResult { rows, truncated })
    }

    /// Loads a JSON-lines file into the user keyspace, then reads it back.
    pub fn kv_load(&self, req: LoadRequest, call: &Call<'_>) -> Result<LoadResult> {
        call.access.check_write("kv load")?;
        let file = crate::docs::resolve_path(call, &req.file, "kv load")?;
        call.access.check_path(&file, "kv load")?;
        let ks = self.db(true)?.keyspace(keyspace::USER);
        let f = std::fs::File::open(&file).map_err(|e| Error::io(&file, e))?;
        let reader: Box<dyn BufRead> = if file.extension().is_some_and(|e| e == "gz") {
            Box::new(std::io::BufReader::new(flate2::read::GzDecoder::new(f)))
        } else {
            Box::new(std::io::BufReader::new(f))
        };
        let t0 = Instant::now();
        let (mut keys, mut bytes) = (Vec::new(), 0u64);
        let mut batch = KeyspaceBatch::new();
        let at = |n: usize| format!("{}:{}", file.display(), n + 1);
        for (n, line) in reader.lines().enumerate() {
            let line = line.map_err(|e| Error::io(&file, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let rec: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| Error::bad_request(format!("{}: not JSON: {e}", at(n))))?;
            let id = match rec.get(&req.key_field) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(v) if !v.is_null() => v.to_string(),
                _ => return Err(Error::bad_request(format!("{}: no field {:?}", at(n), req.key_field))),
            };
            let key = format!("{}{id}", req.key_prefix);
            batch.put(&ks, key.as_bytes(), line.as_bytes())?;
            bytes += (key.len() + line.len()) as u64;
            keys.push(key);
            if batch.len() >= req.batch.max(1) {
                ks.write(std::mem::take(&mut batch))?;
            }
        }
        ks.write(batch)?;
        let load_secs = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        let mut found = 0;
        for k in &keys {
            found += u64::from(ks.get(k.as_bytes())?.is_some());
        }
        let get_secs = t1.elapsed().as_secs_f64();
        let t2 = Instant::now();
        let scanned = ks.prefix(req.key_prefix.as_bytes()).try_fold(0u64, |n, r| r.map(|_| n + 1))?;
        let scan_secs = t2.elapsed().as_secs_f64();
        if found != keys.len() as u64 {
            return Err(Error::new(crate::ErrorKind::Corrupt, format!("read back {found} of {} records", keys.len())));
        }
        Ok(LoadResult { file, records: keys.len() as u64, bytes, load_secs, get_secs, scan_secs, scanned })
    }

    /// Engine statistics.
    pub fn kv_stats(&self) -> Result<StatsResult> {
        let s = self.db(false)?.stats();
        Ok(StatsResult {
            levels: s.levels.iter().map(|l| LevelStats { tables: l.tables as u64, bytes: l.bytes }).collect(),
            memtable_bytes: s.memtable_bytes as u64,
            immutable_memtables: s.immutable_memtables as u64,
            last_seq: s.last_seq,
            range_tombstones: s.range_tombstones as u64,
            block_cache_bytes: s.block_cache_bytes,
            snapshots: s.snapshots as u64,
        })
    }

    /// Compacts every level to the bottom.
    pub fn kv_compact(&self, call: &Call<'_>) -> Result<DoneResult> {
        call.access.check_write("kv compact")?;
        self.db(false)?.compact_all()?;
        Ok(DoneResult { done: "compact".into() })
    }

    /// Rereads every table and checks every block checksum.
    pub fn kv_verify(&self) -> Result<KvVerifyResult> {
        Ok(KvVerifyResult { entries: self.db(false)?.verify()? })
    }
}
