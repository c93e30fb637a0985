//! What the store knows to be damaged or missing, so that writes never build on it: chunks
//! `verify` found damaged (rows `cas/d/`), packs the index names that are gone from the local
//! pack directory, and pack files the index never handed out (left alone, never reused or
//! deleted). A write whose content holds a suspect chunk stores that chunk again (in a new
//! pack, the chunk row moved there) instead of sharing the damaged copy: adding or
//! snapshotting the intact source repairs the store.

use std::collections::{BTreeSet, HashMap, HashSet};

use cairn_kv::KeyspaceBatch;

use crate::index::{self, ChunkRow};
use crate::pack;
use crate::store::{Inner, Store};
use crate::{Error, Id, Result, VerifyReport};

/// Chunks and packs known damaged or missing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Suspects {
    /// Chunks found damaged, with why.
    pub damaged: HashMap<Id, String>,
    /// Packs the index names whose file is gone from the local directory (stores without a
    /// backend).
    pub missing_packs: HashSet<u64>,
    /// Pack files the index never handed out (numbers at or above its next pack number when
    /// the store opened).
    pub unaccounted_packs: BTreeSet<u64>,
}

impl Suspects {
    /// Whether nothing is suspect (the common case: writes skip every check).
    pub fn is_empty(&self) -> bool {
        self.damaged.is_empty() && self.missing_packs.is_empty()
    }

    /// Whether a chunk stored at `row` must not be shared.
    pub fn is_suspect(&self, id: &Id, row: &ChunkRow) -> bool {
        self.damaged.contains_key(id) || self.missing_packs.contains(&row.pack)
    }
}

/// What the store found at open about its packs (see [`Suspects`]).
pub(crate) fn survey(
    storage: &dyn cairn_kv::Storage,
    dir: &std::path::Path,
    rows: &cairn_kv::Keyspace,
    persisted_next_pack: u64,
    local_only: bool,
) -> Result<(Suspects, u64)> {
    let names = storage.list_dir(dir).map_err(|e| Error::io(dir, e))?;
    let files: BTreeSet<u64> = names.iter().filter_map(|n| pack::parse_pack_name(n)).collect();
    let mut s = Suspects::default();
    for kv in rows.prefix(index::DAMAGED_PREFIX) {
        let (k, v) = kv?;
        if let Some(id) = Id::from_slice(&k[index::DAMAGED_PREFIX.len()..]) {
            s.damaged.insert(id, String::from_utf8_lossy(&v).into_owned());
        }
    }
    if local_only {
        for kv in rows.prefix(index::PACK_PREFIX) {
            let (k, _) = kv?;
            let no = k.get(index::PACK_PREFIX.len()..).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
            if let Some(no) = no.filter(|no| !files.contains(no)) {
                s.missing_packs.insert(no);
            }
        }
    }
    s.unaccounted_packs = files.iter().copied().filter(|no| *no >= persisted_next_pack).collect();
    // New packs are numbered past every file there, so none is ever replaced.
    let next = files.iter().next_back().map_or(persisted_next_pack, |max| persisted_next_pack.max(max + 1));
    Ok((s, next))
}

impl Store {
    /// Records the damage a verify found (chunks whose content is damaged or whose pack is
    /// missing), so that later writes of the same content store it again instead of sharing the
    /// damaged copy; forgets recorded damage of chunks verify now reads whole (repaired). This
    /// is the one thing verify writes. Returns how many chunks are recorded damaged.
    pub fn record_damage(&self, report: &VerifyReport) -> Result<usize> {
        let inner = &self.inner;
        let rows = &inner.rows;
        let mut b = KeyspaceBatch::new();
        let found: HashMap<Id, String> = report.damaged.iter().map(|d| (d.chunk, d.problem.clone())).collect();
        let mut suspects = inner.suspects.lock();
        for (id, why) in &found {
            if suspects.damaged.get(id) != Some(why) {
                b.put(rows, index::key(index::DAMAGED_PREFIX, id), why.as_bytes())?;
            }
        }
        for id in suspects.damaged.keys() {
            if !found.contains_key(id) {
                b.delete(rows, index::key(index::DAMAGED_PREFIX, id))?;
            }
        }
        if !b.is_empty() {
            rows.write(b)?;
        }
        suspects.damaged = found;
        Ok(suspects.damaged.len())
    }

    /// Pack files the index never handed out (found when the store opened): left alone, never
    /// reused or deleted; verify reports them.
    pub fn unaccounted_packs(&self) -> Vec<std::path::PathBuf> {
        let s = self.inner.suspects.lock();
        s.unaccounted_packs.iter().map(|no| pack::pack_path(&self.inner.dir, *no)).collect()
    }

    /// Packs the index names that are missing from the local pack directory.
    pub fn missing_packs(&self) -> Vec<std::path::PathBuf> {
        let s = self.inner.suspects.lock();
        let mut v: Vec<u64> = s.missing_packs.iter().copied().collect();
        v.sort_unstable();
        v.into_iter().map(|no| pack::pack_path(&self.inner.dir, no)).collect()
    }

    /// Forgets missing packs no chunk is stored in any more (every chunk they held was stored
    /// again, or released): their index rows are deleted, as they describe a file that is gone
    /// and holds nothing anyone reads. Returns the packs forgotten.
    pub fn forget_emptied_missing_packs(&self) -> Result<Vec<std::path::PathBuf>> {
        let inner = &self.inner;
        let _w = inner.writer.lock();
        let missing: HashSet<u64> = inner.suspects.lock().missing_packs.clone();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let mut used: HashSet<u64> = HashSet::new();
        for item in inner.rows.prefix(index::CHUNK_PREFIX) {
            let (_, v) = item?;
            if let Ok(row) = ChunkRow::decode(&v)
                && missing.contains(&row.pack)
            {
                used.insert(row.pack);
            }
        }
        let gone: Vec<u64> = missing.difference(&used).copied().collect();
        if gone.is_empty() {
            return Ok(Vec::new());
        }
        let mut b = KeyspaceBatch::new();
        for no in &gone {
            b.delete(&inner.rows, index::pack_key(*no))?;
        }
        inner.rows.write(b)?;
        let mut s = inner.suspects.lock();
        for no in &gone {
            s.missing_packs.remove(no);
        }
        Ok(gone.into_iter().map(|no| pack::pack_path(&inner.dir, no)).collect())
    }

    /// Chunks known damaged (recorded by verify) or in a missing pack: how many.
    pub fn suspect_chunks(&self) -> usize {
        self.inner.suspects.lock().damaged.len()
    }

    /// Whether blob `id` has a chunk known damaged or missing (it must be stored again from
    /// its source, not shared).
    pub fn is_suspect(&self, id: &Id) -> Result<bool> {
        let suspects = self.inner.suspects.lock().clone();
        if suspects.is_empty() {
            return Ok(false);
        }
        let Some(row) = self.inner.blob_row(id)? else { return Ok(false) };
        for cid in self.inner.chunk_ids(id, &row)? {
            match self.inner.chunk_row(&cid)? {
                Some(r) if suspects.is_suspect(&cid, &r) => return Ok(true),
                None => return Ok(true),
                Some(_) => {}
            }
        }
        Ok(false)
    }

    /// Stores again every suspect chunk `data` holds (cut as a put of it would be), without
    /// taking a reference: repairing from a source. Returns the chunks stored again.
    pub fn restore_from(&self, data: &[u8]) -> Result<u64> {
        if self.inner.suspects.lock().is_empty() {
            return Ok(0);
        }
        let mut b = self.batch();
        let n = b.restore_suspects(data)?;
        b.commit()?;
        Ok(n)
    }
}

impl Inner {
    /// Whether chunk `id` stored at `row` must not be shared.
    pub(crate) fn is_suspect_chunk(&self, id: &Id, row: &ChunkRow) -> bool {
        let s = self.suspects.lock();
        !s.is_empty() && s.is_suspect(id, row)
    }

    /// Whether anything is suspect.
    pub(crate) fn any_suspect(&self) -> bool {
        !self.suspects.lock().is_empty()
    }

    /// Forgets chunks stored again (after the commit that moved them).
    pub(crate) fn restored(&self, ids: &HashSet<Id>) {
        let mut s = self.suspects.lock();
        for id in ids {
            s.damaged.remove(id);
        }
    }
}

/// What [`Store::fix_refcounts`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefcountFix {
    /// Blobs whose reference count was set to the references the layers hold.
    pub blobs_fixed: u64,
    /// Chunks whose reference count was set to the blobs that hold them.
    pub chunks_fixed: u64,
    /// Blobs no layer refers to that still count references (left as they are: their space is
    /// not reclaimed, their content not deleted).
    pub unreferenced: Vec<Id>,
}

impl Store {
    /// Sets every blob's reference count to what the layers hold (`held`: blob -> references,
    /// from document versions and tree ownership rows) where it differs and is not zero, and
    /// every chunk's to the number of blobs that list it where that is not zero. Counts are
    /// never set to zero: content nothing refers to is reported, not released. Writes in
    /// batches; the writer is held throughout.
    pub fn fix_refcounts(&self, held: &HashMap<Id, u64>) -> Result<RefcountFix> {
        let inner = &self.inner;
        let rows = &inner.rows;
        let _w = inner.writer.lock();
        let mut fix = RefcountFix::default();
        let mut b = KeyspaceBatch::new();
        let mut counted: HashMap<Id, u64> = HashMap::new();
        for item in rows.prefix(index::BLOB_PREFIX) {
            let (k, v) = item?;
            let Some(blob) = Id::from_slice(&k[index::BLOB_PREFIX.len()..]) else { continue };
            let Ok(mut row) = index::BlobRow::decode(&v) else { continue };
            if let Ok(ids) = inner.chunk_ids(&blob, &row) {
                for cid in ids {
                    *counted.entry(cid).or_default() += 1;
                }
            }
            match held.get(&blob).copied().unwrap_or(0) {
                0 => fix.unreferenced.push(blob),
                n if n != row.refs => {
                    row.refs = n;
                    b.put(rows, index::key(index::BLOB_PREFIX, &blob), row.encode())?;
                    fix.blobs_fixed += 1;
                }
                _ => {}
            }
            if b.len() >= 10_000 {
                rows.write(std::mem::take(&mut b))?;
            }
        }
        for item in rows.prefix(index::CHUNK_PREFIX) {
            let (k, v) = item?;
            let Some(cid) = Id::from_slice(&k[index::CHUNK_PREFIX.len()..]) else { continue };
            let Ok(mut row) = ChunkRow::decode(&v) else { continue };
            let n = counted.get(&cid).copied().unwrap_or(0);
            if n > 0 && n != row.refs {
                row.refs = n;
                b.put(rows, index::key(index::CHUNK_PREFIX, &cid), row.encode())?;
                fix.chunks_fixed += 1;
            }
            if b.len() >= 10_000 {
                rows.write(std::mem::take(&mut b))?;
            }
        }
        if !b.is_empty() {
            rows.write(b)?;
        }
        Ok(fix)
    }
}
