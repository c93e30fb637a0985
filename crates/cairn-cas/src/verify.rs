//! `verify`: rereads and rehashes every chunk, and checks every blob's chunk list and every
//! reference count against the index.

use std::collections::HashMap;

use crate::index::{self, BlobRow, ChunkRow};
use crate::pack;
use crate::{Error, Id, Result, Store};

/// One damaged chunk and the blobs it breaks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// The chunk.
    pub chunk: Id,
    /// Its pack.
    pub pack: u64,
    /// Offset of its entry in the pack.
    pub offset: u64,
    /// What is wrong.
    pub problem: String,
    /// Blobs that contain it.
    pub blobs: Vec<Id>,
}

/// The result of [`Store::verify`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Chunks reread.
    pub chunks: u64,
    /// Raw bytes reread and rehashed.
    pub bytes: u64,
    /// Blobs whose chunk lists were checked.
    pub blobs: u64,
    /// Chunks that failed.
    pub damaged: Vec<Damage>,
    /// (blob, chunk) pairs where the blob names a chunk the index does not have.
    pub dangling: Vec<(Id, Id)>,
    /// (chunk, references in the index, references counted from blobs) where they differ.
    pub refcount_errors: Vec<(Id, u64, u64)>,
    /// Blobs whose rows or chunk lists could not be read.
    pub broken_blobs: Vec<(Id, String)>,
}

impl VerifyReport {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.damaged.is_empty()
            && self.dangling.is_empty()
            && self.refcount_errors.is_empty()
            && self.broken_blobs.is_empty()
    }
}

impl Store {
    /// Rereads every chunk (checksum, decompression, hash) and checks every blob's chunk list
    /// and every reference count. Damage is reported, not returned as an error; errors are for
    /// failures to read the index itself.
    pub fn verify(&self) -> Result<VerifyReport> {
        let inner = &self.inner;
        // Uploaded packs are reread from the backend, so it must be known which they are.
        inner.wait_uploads()?;
        inner.ensure_reconciled(&inner.writer.lock())?;
        let mut report = VerifyReport::default();
        let mut rows: HashMap<Id, ChunkRow> = HashMap::new();
        for item in inner.rows.prefix(index::CHUNK_PREFIX) {
            let (k, v) = item?;
            let id = Id::from_slice(&k[index::CHUNK_PREFIX.len()..])
                .ok_or_else(|| Error::corruption("<index>", 0, "malformed chunk key"))?;
            rows.insert(id, ChunkRow::decode(&v)?);
        }
        let mut damaged: HashMap<Id, Damage> = HashMap::new();
        let mut sorted: Vec<(&Id, &ChunkRow)> = rows.iter().collect();
        sorted.sort_by_key(|(_, r)| (r.pack, r.offset));
        // With a backend, uploaded packs are reread from it, not from local copies.
        let mut fetched: Option<(u64, std::io::Result<MemPack>)> = None;
        // The last entry decoded (a group holds many chunks in a row), or what is wrong with it.
        let mut entry: Option<((u64, u64), std::result::Result<pack::Entry, String>)> = None;
        for (id, row) in sorted {
            report.chunks += 1;
            let key = (row.pack, row.offset);
            if entry.as_ref().is_none_or(|(k, _)| *k != key) {
                let uploaded_to =
                    inner.remote.as_ref().filter(|_| inner.remote_state.lock().uploaded.contains(&row.pack));
                let decoded = if let Some(r) = uploaded_to {
                    if fetched.as_ref().is_none_or(|(no, _)| *no != row.pack) {
                        fetched = Some((row.pack, r.backend.download(row.pack).map(MemPack)));
                    }
                    match fetched.as_ref().map(|(_, f)| f) {
                        Some(Ok(f)) => inner.read_entry_in(f, row, id),
                        Some(Err(e)) => {
                            Err(inner.remote_err(Some(row.pack), std::io::Error::new(e.kind(), e.to_string())))
                        }
                        None => unreachable!("fetched above"),
                    }
                } else {
                    // No backend, or a pack not uploaded yet (only the local copy exists).
                    inner.pack_file(row.pack).and_then(|f| inner.read_entry_in(f.as_ref(), row, id))
                };
                let decoded = match decoded {
                    Ok(e) => Ok(e),
                    // An unreachable backend says nothing about the data: the check fails instead.
                    Err(e @ Error::Backend { .. }) if !is_not_found(&e) => return Err(e),
                    Err(e) => Err(match &e {
                        Error::Io { path, source } if source.kind() == std::io::ErrorKind::NotFound => {
                            format!("pack {} is missing", path.display())
                        }
                        Error::Backend { object, .. } => format!("pack {object} is missing from the backend"),
                        other => other.to_string(),
                    }),
                };
                entry = Some((key, decoded));
            }
            let read = match entry.as_ref().map(|(_, e)| e) {
                Some(Ok(e)) => inner.chunk_of(e, id, row).map_err(|e| e.to_string()),
                Some(Err(problem)) => Err(problem.clone()),
                None => unreachable!("decoded above"),
            };
            match read {
                Ok(raw) => report.bytes += raw.len() as u64,
                Err(problem) => {
                    damaged.insert(
                        *id,
                        Damage { chunk: *id, pack: row.pack, offset: row.offset, problem, blobs: Vec::new() },
                    );
                }
            }
        }
        let mut counted: HashMap<Id, u64> = HashMap::new();
        for item in inner.rows.prefix(index::BLOB_PREFIX) {
            let (k, v) = item?;
            let Some(blob) = Id::from_slice(&k[index::BLOB_PREFIX.len()..]) else {
                report.broken_blobs.push((Id([0; 32]), "malformed blob key".into()));
                continue;
            };
            report.blobs += 1;
            let ids = match BlobRow::decode(&v).and_then(|row| inner.chunk_ids(&blob, &row)) {
                Ok(ids) => ids,
                Err(e) => {
                    report.broken_blobs.push((blob, e.to_string()));
                    continue;
                }
            };
            for cid in ids {
                *counted.entry(cid).or_default() += 1;
                if !rows.contains_key(&cid) {
                    report.dangling.push((blob, cid));
                }
                if let Some(d) = damaged.get_mut(&cid)
                    && !d.blobs.contains(&blob)
                {
                    d.blobs.push(blob);
                }
            }
        }
        for (id, row) in &rows {
            let n = counted.get(id).copied().unwrap_or(0);
            if n != row.refs {
                report.refcount_errors.push((*id, row.refs, n));
            }
        }
        report.damaged = damaged.into_values().collect();
        report.damaged.sort_by_key(|d| (d.pack, d.offset));
        Ok(report)
    }
}

/// A pack read whole from a backend.
struct MemPack(Vec<u8>);

impl cairn_kv::RandomAccessFile for MemPack {
    fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let start = usize::try_from(offset).map_err(|_| std::io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(len).filter(|&e| e <= self.0.len()).ok_or(std::io::ErrorKind::UnexpectedEof)?;
        Ok(self.0[start..end].to_vec())
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Backend { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}
