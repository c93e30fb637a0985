//! [`crate::Db::repair`]: rebuilds a database's MANIFEST from the files in its directory, for
//! when `CURRENT` or the MANIFEST is missing or damaged ([`crate::Error::NeedsRepair`]) or
//! tables or logs are damaged. It never deletes user data: a file it cannot read whole is
//! copied under `lost/` before anything else changes, and what it loses is reported
//! ([`RepairReport`]).
//!
//! - **A readable MANIFEST** (the one `CURRENT` names, or without a usable `CURRENT` the
//!   newest): its tables stay at their levels. A damaged table's intact blocks are copied into
//!   a new table at its level (keeping its sequence bounds, so level 0 keeps its order); a
//!   table that does not open is set aside; a table it names that is missing is reported. A
//!   table it does not name is left to the next open (below its next file number: an obsolete
//!   table, deleted then) or set aside (at or above: not this database's).
//! - **No readable MANIFEST**: every readable table (its intact blocks, if damaged) is merged
//!   into one sorted run of new tables at the last level, keeping every entry (exact
//!   duplicates once). Which level a table was on is not recorded in the table, and a point
//!   read takes the first version a level holds, so tables are not put back as they are. Range
//!   deletions live only in MANIFESTs (they move there when their memtable is flushed): those
//!   of every readable MANIFEST are kept, the others are lost, and deleted keys may come back.
//!   A table a compaction had made obsolete but that was not deleted yet is merged too (its
//!   versions are older, but where the compaction dropped a deletion they reappear).
//! - **Logs** from the MANIFEST's log number on (every log, without one) are replayed into
//!   level-0 tables, each write not already in a table (sequence number above the tables'),
//!   as opening does; a torn or damaged tail, and a log whose writes follow writes lost from an
//!   earlier log that was not ended, are discarded and reported, the log copied under `lost/`.
//!
//! Then a new MANIFEST describes the result (`CURRENT` switches atomically), numbered above
//! every file present, with a log number above every log: the next open deletes what it
//! replaced (tables merged or salvaged, logs replayed, old MANIFESTs). A repair cut short
//! changes nothing the next repair cannot redo.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::BlockCache;
use crate::compaction::output::{TableOutput, build_table};
use crate::db::open::{
    LOST_DIR, check_options, first_free_number, insert_sorted, list_names, lock_dir, lost_path, set_aside,
};
use crate::db::recovery_report::LogRecovery;
use crate::error::IoContext;
use crate::iter::InternalIterator;
use crate::iter::merge::MergingIterator;
use crate::key::{SeqNo, ValueKind};
use crate::memtable::Memtable;
use crate::memtable::range_del::RangeTombstone;
use crate::storage::Storage;
use crate::table::reader::{BlockDamage, TableReader};
use crate::table::table_cache::TableCache;
use crate::version::edit::{FileInfo, MAX_LEVELS, VersionEdit};
use crate::version::manifest::{FileNumbers, MANIFEST_MAGIC, ManifestWriter, manifest_name, parse_manifest_name};
use crate::wal::log::{read_log, torn_tail};
use crate::wal::record::{BatchOp, decode_record};
use crate::wal::{WAL_MAGIC, wal_path};
use crate::{Error, Options, Result};

/// What [`crate::Db::repair`] found and did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct RepairReport {
    /// The MANIFEST whose tables and levels were kept (`None`: no readable MANIFEST; the
    /// tables were merged into a new run).
    pub manifest_used: Option<PathBuf>,
    /// MANIFESTs that could not be read, with why; each was copied under `lost/`.
    pub manifests_unreadable: Vec<SetAside>,
    /// The MANIFEST written.
    pub manifest_written: PathBuf,
    /// Tables kept as they are.
    pub tables_kept: Vec<PathBuf>,
    /// Tables whose entries were merged into new ones (no readable MANIFEST); the next open
    /// deletes them.
    pub tables_merged: Vec<PathBuf>,
    /// Damaged tables whose intact blocks were copied into a new table.
    pub tables_salvaged: Vec<SalvagedTable>,
    /// Tables set aside under `lost/`: they do not open, or the MANIFEST does not account for
    /// them.
    pub tables_set_aside: Vec<SetAside>,
    /// Tables the MANIFEST names that are not in the directory: their data is lost.
    pub tables_missing: Vec<PathBuf>,
    /// Tables written (merged runs, salvaged tables, replayed logs), now live.
    pub tables_written: Vec<PathBuf>,
    /// Every log read, with the records replayed and those discarded.
    pub logs_replayed: Vec<LogRecovery>,
    /// Logs copied under `lost/` because part or all of them was discarded or unreadable.
    pub logs_set_aside: Vec<SetAside>,
    /// Log records (write groups) that added a write the tables did not hold.
    pub records_recovered: u64,
    /// Bytes of tables and logs that could not be used: damaged blocks, tables that do not
    /// open, discarded log tails and logs.
    pub bytes_discarded: u64,
    /// Range deletions in the new MANIFEST (from every readable MANIFEST and from the logs).
    pub range_tombstones: usize,
    /// Anything else the caller should know, one sentence each.
    pub notes: Vec<String>,
}

impl RepairReport {
    /// Whether the repair lost, or may have lost, anything: a damaged block, a table that
    /// does not open or is missing, a discarded log record, a MANIFEST that could not be read,
    /// or (tables merged without a MANIFEST) range deletions only a MANIFEST held.
    pub fn lost_data(&self) -> bool {
        !self.tables_salvaged.is_empty()
            || self.tables_set_aside.iter().any(|s| s.unreadable)
            || !self.tables_missing.is_empty()
            || self.logs_replayed.iter().any(|l| l.records_discarded > 0)
            || !self.manifests_unreadable.is_empty()
            || self.manifest_used.is_none() && !self.tables_merged.is_empty()
    }
}

/// A damaged table whose intact blocks were copied into a new table.
#[derive(Debug)]
#[non_exhaustive]
pub struct SalvagedTable {
    /// The table as it was.
    pub original: PathBuf,
    /// Where it was copied, whole, under `lost/`.
    pub copied_to: PathBuf,
    /// The new table holding its intact blocks (`None`: no block was intact).
    pub replacement: Option<PathBuf>,
    /// Entries in the intact blocks.
    pub entries_kept: u64,
    /// The damaged blocks, with the user keys each may have held (see
    /// [`crate::table::reader::BlockDamage`]).
    pub damaged: Vec<LostBlock>,
}

/// A damaged block of a salvaged table.
#[derive(Debug)]
#[non_exhaustive]
pub struct LostBlock {
    /// Offset in the original table.
    pub offset: u64,
    /// Bytes (0 when not known).
    pub len: u64,
    /// The lowest user key it may have held (`None`: from the table's start).
    pub first_key: Option<Bytes>,
    /// The highest user key it may have held (`None`: to the table's end).
    pub last_key: Option<Bytes>,
    /// What was wrong.
    pub reason: String,
}

/// A file set aside under `lost/`.
#[derive(Debug)]
#[non_exhaustive]
pub struct SetAside {
    /// Where it was.
    pub from: PathBuf,
    /// Where it is now (moved) or where a copy of it is (the original then goes with the next
    /// open, as the new MANIFEST does not need it).
    pub to: PathBuf,
    /// Whether its content could not be read (as opposed to not being accounted for).
    pub unreadable: bool,
    /// Why.
    pub reason: String,
}

/// What a MANIFEST describes once replayed.
struct ManifestState {
    path: PathBuf,
    /// Tables by level, then number.
    levels: Vec<HashMap<u64, FileInfo>>,
    tombstones: Vec<RangeTombstone>,
    log_number: u64,
    /// The highest `next_file_number` recorded.
    limit: u64,
    last_seq: SeqNo,
}

impl ManifestState {
    fn tables(&self) -> impl Iterator<Item = (usize, &FileInfo)> {
        self.levels.iter().enumerate().flat_map(|(l, files)| files.values().map(move |f| (l, f)))
    }
}

/// Replays the MANIFEST at `path` (a torn last edit ignored, as opening does); damage is an
/// error.
fn read_manifest(storage: &dyn Storage, path: &Path) -> Result<ManifestState> {
    let data = storage.read_all(path).at(path)?;
    let (records, _) = read_log(&data, path, MANIFEST_MAGIC)?;
    if records.is_empty() {
        return Err(Error::corruption(path, 0, "MANIFEST holds no complete record"));
    }
    let mut m = ManifestState {
        path: path.to_path_buf(),
        levels: vec![HashMap::new(); MAX_LEVELS],
        tombstones: Vec::new(),
        log_number: 0,
        limit: 0,
        last_seq: 0,
    };
    for (offset, payload) in records {
        let e = VersionEdit::decode(&payload)
            .map_err(|(at, why)| Error::corruption(path, offset + at as u64, format!("bad version edit: {why}")))?;
        for (level, no) in &e.deleted_files {
            m.levels[*level].remove(no);
        }
        for (level, info) in &e.new_files {
            m.levels[*level].insert(info.file_no, info.clone());
        }
        m.tombstones.retain(|t| !e.removed_tombstones.contains(&t.seq));
        m.tombstones.extend(e.added_tombstones.iter().cloned());
        m.log_number = e.log_number.unwrap_or(m.log_number);
        m.limit = m.limit.max(e.next_file_number.unwrap_or(0));
        m.last_seq = e.last_seq.unwrap_or(m.last_seq);
    }
    for (level, files) in m.levels.iter().enumerate().skip(1) {
        let mut sorted: Vec<&FileInfo> = files.values().collect();
        sorted.sort_by(|a, b| a.smallest_user().cmp(b.smallest_user()));
        if let Some(w) = sorted.windows(2).find(|w| w[0].largest_user() >= w[1].smallest_user()) {
            let why = format!("level {level}: tables {} and {} overlap", w[0].file_no, w[1].file_no);
            return Err(Error::corruption(path, 0, why));
        }
    }
    Ok(m)
}

/// Copies file `name` of `dir`, whole, to a path of its own under `lost/` and makes the copy
/// durable; if it cannot be read, moves it there instead. Returns the new path.
fn copy_aside(storage: &dyn Storage, dir: &Path, name: &str) -> Result<PathBuf> {
    let lost = dir.join(LOST_DIR);
    storage.create_dir_all(&lost).at(&lost)?;
    let from = dir.join(name);
    let to = lost_path(storage, dir, name);
    let copied = (|| -> Result<()> {
        let src = storage.open_read(&from).at(&from)?;
        let mut dst = storage.create_new(&to).at(&to)?;
        let len = src.len();
        let mut at = 0;
        while at < len {
            let n = (len - at).min(4 << 20);
            let buf = src.read_at(at, n as usize).at(&from)?;
            dst.append(&buf).at(&to)?;
            at += n;
        }
        dst.sync().at(&to)
    })();
    if copied.is_err() {
        if storage.exists(&to) {
            storage.remove_file(&to).at(&to)?;
        }
        return Ok(set_aside(storage, dir, &[name.to_string()])?.remove(0));
    }
    storage.sync_dir(&lost).at(&lost)?;
    Ok(to)
}

fn open_table(storage: &dyn Storage, path: &Path, no: u64, cache: &Arc<BlockCache>) -> Result<Arc<TableReader>> {
    let file = storage.open_read(path).at(path)?;
    Ok(Arc::new(TableReader::open(file, path.to_path_buf(), no, cache)?))
}

fn lost_block(d: BlockDamage) -> LostBlock {
    LostBlock {
        offset: d.offset,
        len: d.len,
        first_key: d.first_key.map(Bytes::from),
        last_key: d.last_key.map(Bytes::from),
        reason: d.error.to_string(),
    }
}

/// The replay of write-ahead logs into level-0 tables.
struct Replay<'a> {
    storage: &'a Arc<dyn Storage>,
    dir: &'a Path,
    opts: &'a Options,
    mem: Arc<Memtable>,
    /// The highest sequence number in a table or replayed.
    applied: SeqNo,
    /// Level-0 tables written.
    tables: Vec<FileInfo>,
    tombstones: Vec<RangeTombstone>,
}

impl Replay<'_> {
    /// Replays one log record; whether it added a write. Errors say where in the record it is
    /// damaged and how.
    fn record(&mut self, payload: &[u8]) -> std::result::Result<bool, (usize, String)> {
        let rec = decode_record(payload)?;
        let mut pending = Vec::new();
        let mut added = false;
        for (seq, op) in (rec.base_seq..).zip(rec.ops) {
            if seq <= self.applied {
                continue;
            }
            match op {
                BatchOp::Put(k, v) => pending.push((k, seq, ValueKind::Put, v)),
                BatchOp::Delete(k) => pending.push((k, seq, ValueKind::Delete, &[][..])),
                BatchOp::DeleteRange(s, e) => self.mem.insert_range_delete(s, e, seq),
            }
            self.applied = seq;
            added = true;
        }
        insert_sorted(&self.mem, &mut pending);
        Ok(added)
    }

    /// Writes the memtable as a level-0 table if it is full (or, with `all`, holds anything).
    fn flush(&mut self, files: &mut FileNumbers, all: bool) -> Result<()> {
        if self.mem.is_empty() || !all && self.mem.approximate_bytes() < self.opts.memtable_size {
            return Ok(());
        }
        let mem = std::mem::replace(&mut self.mem, Arc::new(Memtable::new(0, self.opts.memtable_size)));
        let no = files.take_unrecorded();
        if let Some(info) =
            build_table(self.storage, self.dir, self.opts, no, std::slice::from_ref(&mem), &[], &|_| {})?
        {
            self.tables.push(info);
        }
        self.tombstones.extend(mem.range_tombstones());
        Ok(())
    }
}

pub(crate) fn repair(dir: &Path, opts: Options, storage: Arc<dyn Storage>) -> Result<RepairReport> {
    check_options(&opts)?;
    if !storage.exists(dir) {
        return Err(Error::InvalidArgument(format!("no database directory at {}", dir.display())));
    }
    let _lock = lock_dir(&*storage, dir)?;
    let names = list_names(&*storage, dir)?;
    let mut report = RepairReport::default();
    let cache = Arc::new(BlockCache::new(8 << 20));

    // 1. The MANIFESTs: the one CURRENT names (or the newest) gives the tables' levels; every
    //    readable one gives its range deletions.
    let mut manifest_numbers: Vec<u64> = names.iter().filter_map(|n| parse_manifest_name(n)).collect();
    manifest_numbers.sort_unstable_by(|a, b| b.cmp(a));
    let current = storage
        .read_all(&dir.join("CURRENT"))
        .ok()
        .and_then(|text| String::from_utf8(text).ok())
        .and_then(|s| s.strip_suffix('\n').and_then(parse_manifest_name))
        .filter(|no| manifest_numbers.contains(no));
    let chosen = current.or(manifest_numbers.first().copied());
    let mut base: Option<ManifestState> = None;
    let mut tombstones: HashSet<RangeTombstone> = HashSet::new();
    // No new write may be numbered at or below a number any MANIFEST recorded: a range
    // deletion kept from it would hide the write.
    let mut seq_floor: SeqNo = 0;
    for &no in &manifest_numbers {
        let name = manifest_name(no);
        match read_manifest(&*storage, &dir.join(&name)) {
            Ok(m) => {
                seq_floor = seq_floor.max(m.last_seq);
                tombstones.extend(m.tombstones.iter().cloned());
                if Some(no) == chosen {
                    base = Some(m);
                }
            }
            Err(e) => {
                let to = copy_aside(&*storage, dir, &name)?;
                report.manifests_unreadable.push(SetAside {
                    from: dir.join(&name),
                    to,
                    unreadable: true,
                    reason: e.to_string(),
                });
            }
        }
    }
    if let Some(b) = &base
        && let Some((level, f)) = b.tables().find(|(level, _)| *level >= opts.num_levels)
    {
        return Err(Error::InvalidArgument(format!(
            "{} places table {} at level {level}; repair with num_levels above {level}",
            b.path.display(),
            f.file_no
        )));
    }
    report.manifest_used = base.as_ref().map(|b| b.path.clone());
    if base.is_none() {
        report.notes.push(
            "no readable MANIFEST: the tables were merged into one sorted run at the last level; range deletions \
             recorded only in a lost MANIFEST are gone, and keys they deleted may be back"
                .to_string(),
        );
    }

    // Numbers go above every file present, and above the MANIFEST's limit.
    let limit = base.as_ref().map_or(0, |b| b.limit);
    let next = first_free_number(&*storage, dir, &names, limit)?;
    let mut files = FileNumbers::new(next, next);

    // 2. Tables.
    let named: HashMap<u64, (usize, FileInfo)> =
        base.as_ref().map(|b| b.tables().map(|(l, f)| (f.file_no, (l, f.clone()))).collect()).unwrap_or_default();
    let mut levels: Vec<Vec<FileInfo>> = vec![Vec::new(); opts.num_levels];
    let mut to_merge: Vec<Arc<TableReader>> = Vec::new();
    let mut present = HashSet::new();
    for name in &names {
        let Some(no) = name.strip_suffix(".sst").and_then(|s| s.parse::<u64>().ok()) else { continue };
        present.insert(no);
        let path = dir.join(name);
        if base.is_some() && !named.contains_key(&no) {
            if no >= limit {
                let to = set_aside(&*storage, dir, std::slice::from_ref(name))?.remove(0);
                let reason = "not named by the MANIFEST, and numbered at or above its next file number".to_string();
                report.tables_set_aside.push(SetAside { from: path, to, unreadable: false, reason });
            }
            // Below it: an obsolete table of this database, which the next open deletes.
            continue;
        }
        let reader = match open_table(&*storage, &path, no, &cache) {
            Ok(r) => r,
            Err(e) => {
                report.bytes_discarded += storage.open_read(&path).map_or(0, |f| f.len());
                let to = copy_aside(&*storage, dir, name)?;
                report.tables_set_aside.push(SetAside { from: path, to, unreadable: true, reason: e.to_string() });
                continue;
            }
        };
        let check = reader.check_blocks(None)?;
        if check.damaged.is_empty() {
            match named.get(&no) {
                Some((level, info)) => {
                    levels[*level].push(info.clone());
                    report.tables_kept.push(path);
                }
                None => {
                    to_merge.push(reader);
                    report.tables_merged.push(path);
                }
            }
            continue;
        }
        // Damaged: its intact blocks go into a new table, the table itself under `lost/`.
        let mut out = TableOutput::new(&storage, dir, &opts, u64::MAX);
        let mut alloc = || Ok(files.take_unrecorded());
        let check = reader.check_blocks(Some(&mut |k: &[u8], v: &[u8]| out.add(k, v, &mut alloc)))?;
        let applied = named.get(&no).map_or(0, |(_, f)| f.tombstones_applied);
        let (written, _) = out.finish(applied)?;
        let copied_to = copy_aside(&*storage, dir, name)?;
        report.bytes_discarded += check.damaged.iter().map(|d| d.len).sum::<u64>();
        let replacement = written.into_iter().next();
        report.tables_salvaged.push(SalvagedTable {
            original: path,
            copied_to,
            replacement: replacement.as_ref().map(|f| TableCache::table_path(dir, f.file_no)),
            entries_kept: check.entries,
            damaged: check.damaged.into_iter().map(lost_block).collect(),
        });
        let Some(mut info) = replacement else { continue };
        match named.get(&no) {
            Some((level, original)) => {
                // Its sequence bounds stay the original's: level 0 is ordered by them.
                info.min_seq = info.min_seq.min(original.min_seq);
                info.max_seq = info.max_seq.max(original.max_seq);
                report.tables_written.push(TableCache::table_path(dir, info.file_no));
                levels[*level].push(info);
            }
            None => {
                to_merge.push(open_table(&*storage, &TableCache::table_path(dir, info.file_no), info.file_no, &cache)?)
            }
        }
    }
    let mut missing: Vec<u64> = named.keys().filter(|no| !present.contains(no)).copied().collect();
    missing.sort_unstable();
    report.tables_missing = missing.iter().map(|&no| TableCache::table_path(dir, no)).collect();

    // 3. Without a MANIFEST: one sorted run of every readable entry, at the last level.
    if !to_merge.is_empty() {
        let mut it = MergingIterator::new(to_merge.iter().map(|t| t.sequential_iter()).collect());
        let mut out = TableOutput::new(&storage, dir, &opts, opts.target_file_size);
        let mut alloc = || Ok(files.take_unrecorded());
        let mut last: Option<Vec<u8>> = None;
        it.seek_to_first()?;
        while it.valid() {
            if last.as_deref() != Some(it.key()) {
                out.add(it.key(), it.value(), &mut alloc)?;
                last = Some(it.key().to_vec());
            }
            it.next()?;
        }
        let (written, _) = out.finish(0)?;
        report.tables_written.extend(written.iter().map(|f| TableCache::table_path(dir, f.file_no)));
        levels[opts.num_levels - 1].extend(written);
    }

    // 4. Logs: the writes the tables do not hold.
    let tables_max = named.values().map(|(_, f)| f.max_seq).chain(levels.iter().flatten().map(|f| f.max_seq)).max();
    let mut replay = Replay {
        storage: &storage,
        dir,
        opts: &opts,
        mem: Arc::new(Memtable::new(0, opts.memtable_size)),
        applied: tables_max.unwrap_or(0),
        tables: Vec::new(),
        tombstones: Vec::new(),
    };
    let log_floor = base.as_ref().map_or(0, |b| b.log_number);
    let mut logs: Vec<u64> =
        names.iter().filter_map(|n| n.strip_suffix(".log")?.parse::<u64>().ok()).filter(|&n| n >= log_floor).collect();
    logs.sort_unstable();
    // The last log replayed from, if it was not ended; and why replay stopped, once it did.
    let mut unended: Option<PathBuf> = None;
    let mut stopped: Option<String> = None;
    for no in logs {
        let path = wal_path(dir, no);
        let name = format!("{no:06}.log");
        let data = storage.read_all(&path).unwrap_or_default();
        let mut log = LogRecovery {
            path: path.clone(),
            records_replayed: 0,
            records_discarded: 0,
            bytes_discarded: 0,
            discarded_from: None,
            reason: None,
        };
        let read = read_log(&data, &path, WAL_MAGIC);
        // A log whose writes skip past those of one that was not ended follows lost writes.
        if let (None, Some(prev), Ok((records, _))) = (&stopped, &unended, &read)
            && let Some((_, first)) = records.iter().find(|(_, p)| !p.is_empty())
            && decode_record(first).is_ok_and(|r| r.base_seq > replay.applied.saturating_add(1))
        {
            stopped = Some(format!("its writes follow writes lost from {} (a power cut)", prev.display()));
        }
        let (mut records, tail) = match read {
            Ok(r) if stopped.is_none() => r,
            read => {
                // Dropped whole: unreadable, or after a log that lost writes.
                let records = read.as_ref().map_or(0, |(r, _)| r.iter().filter(|(_, p)| !p.is_empty()).count());
                let reason = stopped.clone().unwrap_or_else(|| read.err().map(|e| e.to_string()).unwrap_or_default());
                let written = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
                log.records_discarded = records as u64;
                log.bytes_discarded = written as u64;
                log.discarded_from = Some(0);
                log.reason = Some(reason.clone());
                if written > 0 {
                    let to = copy_aside(&*storage, dir, &name)?;
                    let unreadable = stopped.is_none();
                    report.logs_set_aside.push(SetAside { from: path, to, unreadable, reason });
                }
                report.bytes_discarded += log.bytes_discarded;
                report.logs_replayed.push(log);
                continue;
            }
        };
        let ended = records.last().is_some_and(|(_, p)| p.is_empty());
        records.retain(|(_, p)| !p.is_empty());
        let mut damaged_at = None;
        for (i, (offset, payload)) in records.iter().enumerate() {
            match replay.record(payload) {
                Ok(added) => {
                    log.records_replayed += 1;
                    report.records_recovered += u64::from(added);
                    replay.flush(&mut files, false)?;
                }
                Err((at, why)) => {
                    damaged_at = Some((i, offset + at as u64, format!("bad write batch: {why}")));
                    break;
                }
            }
        }
        let torn = match (damaged_at, tail) {
            (Some((i, offset, why)), _) => {
                let (_, bytes) = torn_tail(&data, records[i].0);
                Some((offset, (records.len() - i) as u64, bytes, why))
            }
            (None, crate::wal::log::LogTail::Torn { offset, reason }) => {
                let (n, bytes) = torn_tail(&data, offset);
                (bytes > 0).then_some((offset, n, bytes, reason))
            }
            (None, crate::wal::log::LogTail::Clean) => None,
        };
        if let Some((offset, n, bytes, why)) = torn {
            log.records_discarded = n;
            log.bytes_discarded = bytes;
            log.discarded_from = Some(offset);
            log.reason = Some(why.clone());
            report.bytes_discarded += bytes;
            let to = copy_aside(&*storage, dir, &name)?;
            report.logs_set_aside.push(SetAside { from: path.clone(), to, unreadable: false, reason: why });
        }
        if !records.is_empty() || log.records_discarded > 0 {
            unended = (!ended || log.records_discarded > 0).then_some(path);
        }
        report.logs_replayed.push(log);
    }
    replay.flush(&mut files, true)?;
    tombstones.extend(replay.tombstones);
    let max_tombstone = tombstones.iter().map(|t| t.seq).max().unwrap_or(0);
    let last_seq = replay.applied.max(seq_floor).max(max_tombstone);
    report.tables_written.extend(replay.tables.iter().map(|f| TableCache::table_path(dir, f.file_no)));
    levels[0].extend(replay.tables);

    // 5. The new MANIFEST, once every table it names is durable.
    storage.sync_dir(dir).at(dir)?;
    let manifest_no = files.take_unrecorded();
    let mut tombstones: Vec<RangeTombstone> = tombstones.into_iter().collect();
    tombstones.sort_by(|a, b| a.seq.cmp(&b.seq).then_with(|| a.start.cmp(&b.start)));
    report.range_tombstones = tombstones.len();
    let first = VersionEdit {
        log_number: Some(manifest_no),
        next_file_number: Some(files.edit_limit()),
        last_seq: Some(last_seq),
        new_files: levels
            .into_iter()
            .enumerate()
            .flat_map(|(l, files)| files.into_iter().map(move |f| (l, f)))
            .collect(),
        added_tombstones: tombstones,
        ..VersionEdit::default()
    };
    ManifestWriter::create(&storage, dir, manifest_no, &first)?;
    report.manifest_written = dir.join(manifest_name(manifest_no));
    Ok(report)
}
