//! Garbage collection: packs whose live fraction fell below a threshold are rewritten (their
//! live chunks copied to new packs) and deleted; packs nothing refers to are deleted.
//!
//! Crash safety: the copies are fsynced before the index switches to them in one synced engine
//! write; old packs are deleted only after that. A crash before the switch leaves new packs no
//! row names (orphans); a crash after it leaves old packs no row names. Either kind of orphan
//! is deleted by the next collection.

use std::collections::{BTreeMap, HashMap, HashSet};

use cairn_kv::KeyspaceBatch;

use crate::index::{self, ChunkRow, PackRow};
use crate::pack::{self, PackWriter};
use crate::store::WriterState;
use crate::{Error, Id, Result, Store};

/// Raw bytes of live chunks collected before they are regrouped and written.
const MOVE_BATCH: usize = 8 << 20;

/// Writes the live chunks of collected packs into new packs.
struct Mover {
    wb: KeyspaceBatch,
    new_rows: BTreeMap<u64, PackRow>,
    out: Option<PackWriter>,
    moved: u64,
}

impl Mover {
    fn write(
        &mut self,
        store: &Store,
        w: &mut WriterState,
        chunks: Vec<(Id, Vec<u8>)>,
        refs: &HashMap<Id, u64>,
    ) -> Result<()> {
        let inner = &store.inner;
        for g in crate::store::encode_groups(&chunks, inner.group_target, inner.zstd_level) {
            if self.out.as_ref().is_some_and(|p| p.len() >= inner.pack_target)
                && let Some(mut p) = self.out.take()
            {
                p.sync()?;
            }
            let p = match &mut self.out {
                Some(p) => p,
                None => {
                    let no = inner.hand_out_pack(w)?;
                    self.out.insert(PackWriter::create(&inner.storage, &inner.dir, no)?)
                }
            };
            let offset = p.append_group(&g)?;
            let nr = self.new_rows.entry(p.no).or_default();
            nr.total += g.entry_len();
            nr.live += g.entry_len();
            for (id, placed) in ChunkRow::in_group(&g, p.no, offset) {
                let row = ChunkRow { refs: refs.get(&id).copied().unwrap_or(1), ..placed };
                self.wb.put(&inner.rows, index::key(index::CHUNK_PREFIX, &id), row.encode())?;
                self.moved += 1;
            }
        }
        Ok(())
    }
}

/// What a collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Packs with an index row before the collection.
    pub packs_before: u64,
    /// Packs rewritten or deleted because too little of them was live.
    pub packs_collected: u64,
    /// Pack files no index row named (left by a crash), deleted.
    pub orphan_packs: u64,
    /// Live chunks copied to new packs.
    pub chunks_moved: u64,
    /// Committed pack bytes before.
    pub bytes_before: u64,
    /// Committed pack bytes after.
    pub bytes_after: u64,
}

impl Store {
    /// Collects garbage: every pack with `live / total < min_live_fraction` is rewritten
    /// (`0.5` is a sensible default; `1.0` rewrites every pack holding any garbage).
    pub fn gc(&self, min_live_fraction: f64) -> Result<GcReport> {
        let inner = &self.inner;
        let storage = &inner.storage;
        let dir = &inner.dir;
        let mut w = inner.writer.lock();
        // Close the open pack; whatever it holds beyond committed entries is garbage.
        inner.close_pack(&mut w)?;
        // Every pack is in the backend (and known to be) before any is chosen for rewriting.
        inner.upload_all(&mut w)?;
        inner.ensure_reconciled(&w)?;
        let mut rows: BTreeMap<u64, PackRow> = BTreeMap::new();
        for item in inner.rows.prefix(index::PACK_PREFIX) {
            let (k, v) = item?;
            let no = k.get(index::PACK_PREFIX.len()..).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes);
            let no = no.ok_or_else(|| Error::corruption("<index>", 0, "malformed pack key"))?;
            rows.insert(no, PackRow::decode(&v)?);
        }
        let mut report = GcReport {
            packs_before: rows.len() as u64,
            bytes_before: rows.values().map(|r| r.total).sum(),
            ..GcReport::default()
        };
        let names = storage.list_dir(dir).map_err(|e| Error::io(dir, e))?;
        let mut orphans: HashSet<u64> = HashSet::new();
        let unaccounted = inner.suspects.lock().unaccounted_packs.clone();
        for no in names.iter().filter_map(|n| pack::parse_pack_name(n)) {
            // Packs the index never handed out are not this store's to delete.
            if !rows.contains_key(&no) && !unaccounted.contains(&no) {
                inner.forget_pack(no);
                storage.remove_file(&pack::pack_path(dir, no)).map_err(|e| Error::io(pack::pack_path(dir, no), e))?;
                orphans.insert(no);
            }
        }
        if let Some(r) = &inner.remote {
            // Objects no row names: a crash between an upload and the index switch, or
            // between the switch and the deletion of the old packs.
            let listed = r.backend.list().map_err(|e| inner.remote_err(None, e))?;
            for (no, _) in listed {
                if !rows.contains_key(&no) {
                    r.backend.delete(no).map_err(|e| inner.remote_err(Some(no), e))?;
                    inner.forget_remote(no);
                    orphans.insert(no);
                }
            }
        }
        report.orphan_packs = orphans.len() as u64;
        let victims: HashSet<u64> = rows
            .iter()
            .filter(|(_, r)| (r.live as f64) < min_live_fraction * r.total as f64)
            .map(|(&no, _)| no)
            .collect();
        if victims.is_empty() {
            if report.orphan_packs > 0 {
                storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
            }
            report.bytes_after = report.bytes_before;
            return Ok(report);
        }
        let mut moves: Vec<(Id, ChunkRow)> = Vec::new();
        for item in inner.rows.prefix(index::CHUNK_PREFIX) {
            let (k, v) = item?;
            let row = ChunkRow::decode(&v)?;
            if victims.contains(&row.pack) {
                let id = Id::from_slice(&k[index::CHUNK_PREFIX.len()..])
                    .ok_or_else(|| Error::corruption("<index>", 0, "malformed chunk key"))?;
                moves.push((id, row));
            }
        }
        // Copy in pack order for sequential reads; decode each entry once and regroup its live
        // chunks (a group of which some chunks died is rewritten without them).
        moves.sort_by_key(|(_, r)| (r.pack, r.offset));
        let mut m = Mover { wb: KeyspaceBatch::new(), new_rows: BTreeMap::new(), out: None, moved: 0 };
        let mut todo: Vec<(Id, Vec<u8>)> = Vec::new();
        let mut refs: HashMap<Id, u64> = HashMap::new();
        let mut todo_bytes = 0;
        let mut entry: Option<((u64, u64), pack::Entry)> = None;
        for (id, row) in &moves {
            let key = (row.pack, row.offset);
            let decoded = match entry.take() {
                Some((k, e)) if k == key => e,
                _ => inner.read_entry_in(inner.pack_file(row.pack)?.as_ref(), row, id)?,
            };
            let raw = inner.chunk_of(&decoded, id, row)?;
            entry = Some((key, decoded));
            todo_bytes += raw.len();
            todo.push((*id, raw));
            refs.insert(*id, row.refs);
            if todo_bytes >= MOVE_BATCH {
                m.write(self, &mut w, std::mem::take(&mut todo), &refs)?;
                todo_bytes = 0;
            }
        }
        m.write(self, &mut w, todo, &refs)?;
        report.chunks_moved = m.moved;
        let Mover { mut wb, new_rows, out, .. } = m;
        if let Some(mut p) = out {
            p.sync()?;
        }
        storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        if inner.remote.is_some() {
            w.sealed.extend(new_rows.keys());
        }
        for no in &victims {
            wb.delete(&inner.rows, index::pack_key(*no))?;
        }
        for (no, r) in &new_rows {
            wb.put(&inner.rows, index::pack_key(*no), r.encode())?;
        }
        wb.put(&inner.rows, index::NEXT_PACK, w.next_pack.to_le_bytes())?;
        inner.rows.write(wb)?;
        w.persisted_next_pack = w.next_pack;
        // The copies are in the backend before the packs they replace are deleted from it.
        inner.upload_all(&mut w)?;
        for no in &victims {
            inner.forget_pack(*no);
            let path = pack::pack_path(dir, *no);
            match storage.remove_file(&path) {
                // With a backend, an old pack may have no local copy.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && inner.remote.is_some() => {}
                r => r.map_err(|e| Error::io(&path, e))?,
            }
            if let Some(r) = &inner.remote {
                r.backend.delete(*no).map_err(|e| inner.remote_err(Some(*no), e))?;
                inner.forget_remote(*no);
            }
        }
        storage.sync_dir(dir).map_err(|e| Error::io(dir, e))?;
        report.packs_collected = victims.len() as u64;
        report.bytes_after = report.bytes_before - victims.iter().map(|n| rows[n].total).sum::<u64>()
            + new_rows.values().map(|r| r.total).sum::<u64>();
        Ok(report)
    }
}
