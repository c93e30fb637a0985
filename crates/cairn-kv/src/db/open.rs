//! Opening a database: lock the directory, replay the MANIFEST named by `CURRENT`, replay the
//! write-ahead logs newer than the last flush into tables, start a new MANIFEST and WAL, and
//! delete the files the recovered state shows to be obsolete.
//!
//! Opening never deletes or reuses a file it cannot account for. Without a usable `CURRENT`
//! and MANIFEST, a directory holding a database's files is refused
//! ([`Error::NeedsRepair`]); only one holding none of them (or only what an interrupted
//! creation leaves, which holds no data) becomes a new database. A table no version names is
//! deleted only if its number is below the limit the MANIFEST recorded (see
//! [`FileNumbers`]: every file this database made is numbered below it); one at or above it,
//! which the database did not make, is set aside under `lost/` and reported
//! ([`RecoveryReport::set_aside`]). New files take numbers above every file present and are
//! created new ([`Storage::create_new`]), never over an existing one.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cache::BlockCache;
use crate::compaction::output::build_table;
use crate::db::inner::{DbInner, State};
use crate::db::recovery_report::{LogRecovery, RecoveryReport};
use crate::error::IoContext;
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{Memtable, Splice};
use crate::storage::Storage;
use crate::table::table_cache::TableCache;
use crate::version::edit::VersionEdit;
use crate::version::manifest::{FileNumbers, ManifestWriter, parse_manifest_name, read_current_with_tail};
use crate::version::{Cleaner, Version};
use crate::wal::log::{LOG_HEADER_LEN, LogTail, read_log, torn_tail};
use crate::wal::record::{BatchOp, decode_record};
use crate::wal::spare::{SpareLog, create_wal};
use crate::wal::{WAL_MAGIC, Wal, wal_path};
use crate::write::lead::Lead;
use crate::{Error, Options, Result};

/// Subdirectory of the database directory where files the engine cannot account for, or
/// cannot read (`Db::repair`), are moved instead of being deleted.
pub const LOST_DIR: &str = "lost";

fn parse_numbered(name: &str, suffix: &str) -> Option<u64> {
    name.strip_suffix(suffix)?.parse().ok()
}

/// The number of an engine file's name (`NNNNNN.sst`, `NNNNNN.log`, `MANIFEST-NNNNNN`).
pub(crate) fn file_number(name: &str) -> Option<u64> {
    parse_numbered(name, ".sst").or_else(|| parse_numbered(name, ".log")).or_else(|| parse_manifest_name(name))
}

/// Whether `name` is one of the engine's files (`CURRENT`, `CURRENT.tmp` or a numbered file).
pub(crate) fn is_engine_file(name: &str) -> bool {
    name == "CURRENT" || name == "CURRENT.tmp" || file_number(name).is_some()
}

pub(crate) fn check_options(o: &Options) -> Result<()> {
    let bad = |m: &str| Err(Error::InvalidArgument(m.to_string()));
    if o.num_levels < 2 || o.num_levels > crate::version::edit::MAX_LEVELS {
        return bad("num_levels must be between 2 and 16");
    }
    if o.block_size == 0 || o.block_restart_interval == 0 || o.memtable_size == 0 || o.target_file_size == 0 {
        return bad("sizes must be positive");
    }
    if o.level0_compaction_trigger == 0 || o.level_size_multiplier < 2 {
        return bad("level0_compaction_trigger must be > 0 and level_size_multiplier >= 2");
    }
    Ok(())
}

/// Names of the entries of `dir`, none if it does not exist.
pub(crate) fn list_names(storage: &dyn Storage, dir: &Path) -> Result<Vec<String>> {
    match storage.list_dir(dir) {
        Ok(mut names) => {
            names.sort();
            Ok(names)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(Error::io(dir, e)),
    }
}

/// The engine files of `names` that hold, or may hold, data: every table, every log holding a
/// write or not readable as a log, and every MANIFEST naming a table or range tombstone or not
/// readable. What an interrupted creation leaves (a MANIFEST describing nothing, or cut short
/// before its first record; an empty log) holds none.
fn files_with_data(storage: &dyn Storage, dir: &Path, names: &[String]) -> Vec<String> {
    let holds_data = |name: &String| -> bool {
        if name.ends_with(".sst") {
            return parse_numbered(name, ".sst").is_some();
        }
        let magic = if parse_numbered(name, ".log").is_some() {
            WAL_MAGIC
        } else if parse_manifest_name(name).is_some() {
            crate::version::manifest::MANIFEST_MAGIC
        } else {
            return false;
        };
        let path = dir.join(name);
        let Ok(data) = storage.read_all(&path) else { return true };
        let Ok((records, _)) = read_log(&data, &path, magic) else { return true };
        if magic == WAL_MAGIC {
            // (An end record, empty, holds no write.)
            return records.iter().any(|(_, payload)| !payload.is_empty());
        }
        records.iter().any(|(_, payload)| match VersionEdit::decode(payload) {
            Ok(e) => !e.new_files.is_empty() || !e.added_tombstones.is_empty() || e.last_seq.is_some_and(|s| s > 0),
            Err(_) => true,
        })
    };
    names.iter().filter(|n| holds_data(n)).cloned().collect()
}

/// The engine's files among `names`.
fn engine_files(names: &[String]) -> Vec<String> {
    names.iter().filter(|n| is_engine_file(n)).cloned().collect()
}

fn needs_repair(dir: &Path, reason: impl Into<String>, files: Vec<String>, source: Option<Error>) -> Error {
    Error::NeedsRepair { dir: dir.to_path_buf(), reason: reason.into(), files, source: source.map(Box::new) }
}

/// Moves `names` (files of `dir`) into `dir/lost/`, under a name of their own there, and
/// makes the moves durable. Returns the new paths.
pub(crate) fn set_aside(storage: &dyn Storage, dir: &Path, names: &[String]) -> Result<Vec<PathBuf>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let lost = dir.join(LOST_DIR);
    storage.create_dir_all(&lost).at(&lost)?;
    let mut moved = Vec::new();
    for name in names {
        let to = lost_path(storage, dir, name);
        let from = dir.join(name);
        storage.rename(&from, &to).at(&from)?;
        moved.push(to);
    }
    storage.sync_dir(&lost).at(&lost)?;
    storage.sync_dir(dir).at(dir)?;
    Ok(moved)
}

/// A path under `dir/lost/` for file `name` that no file takes: the name itself, or with
/// `.1`, `.2`, ... added.
pub(crate) fn lost_path(storage: &dyn Storage, dir: &Path, name: &str) -> PathBuf {
    let lost = dir.join(LOST_DIR);
    let mut to = lost.join(name);
    let mut n = 1;
    while storage.exists(&to) {
        to = lost.join(format!("{name}.{n}"));
        n += 1;
    }
    to
}

/// The MANIFEST opening writes: made when the first file number is needed (a table replayed
/// logs are flushed to) or at the end, so that every number handed out is below the limit a
/// durable MANIFEST records.
struct NewManifest {
    writer: Option<ManifestWriter>,
}

impl NewManifest {
    /// Makes the MANIFEST, holding `first` (the version as recovered so far), if not made yet.
    fn make(
        &mut self,
        storage: &Arc<dyn Storage>,
        dir: &Path,
        files: &mut FileNumbers,
        mut first: VersionEdit,
    ) -> Result<&mut ManifestWriter> {
        if self.writer.is_none() {
            let no = files.take_unrecorded();
            let limit = files.edit_limit();
            first.next_file_number = Some(limit);
            self.writer = Some(ManifestWriter::create(storage, dir, no, &first)?);
            files.recorded(limit);
        }
        self.writer.as_mut().ok_or(Error::Closed)
    }
}

pub(crate) fn open(dir: &Path, opts: Options, storage: Arc<dyn Storage>) -> Result<DbInner> {
    check_options(&opts)?;
    let exists = storage.exists(&dir.join("CURRENT"));
    if !exists && !opts.create_if_missing {
        let data = files_with_data(&*storage, dir, &list_names(&*storage, dir)?);
        if !data.is_empty() {
            return Err(needs_repair(dir, "CURRENT is missing", engine_files(&data), None));
        }
        return Err(Error::InvalidArgument(format!("no database at {} (create_if_missing is off)", dir.display())));
    }
    if exists && opts.error_if_exists {
        return Err(Error::InvalidArgument(format!("a database already exists at {}", dir.display())));
    }
    storage.create_dir_all(dir).at(dir)?;
    let lock = lock_dir(&*storage, dir)?;
    let names = list_names(&*storage, dir)?;

    let block_cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
    let table_cache =
        Arc::new(TableCache::new(storage.clone(), dir.to_path_buf(), opts.max_open_files.max(1), block_cache.clone()));
    let cleaner = Cleaner::new(storage.clone(), dir.to_path_buf(), table_cache.clone());

    // 1. The MANIFEST. Files that hold no data (what an interrupted creation leaves) may be
    //    deleted; files that do, without a usable MANIFEST, refuse the open.
    let mut version = Version::empty(opts.num_levels);
    let mut log_number = 0;
    // Every file this database made is numbered below `limit` (see `FileNumbers`).
    let mut limit = 0;
    let mut last_seq: SeqNo = 0;
    let mut current_manifest = None;
    let mut manifest_tail = None;
    if exists {
        let damaged = |e: Error| match e {
            Error::Corruption { .. } => {
                needs_repair(dir, "CURRENT or the MANIFEST it names is damaged", engine_files(&names), Some(e))
            }
            Error::Io { ref source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                needs_repair(dir, "the MANIFEST CURRENT names is missing", engine_files(&names), Some(e))
            }
            e => e,
        };
        let (number, edits, tail) = read_current_with_tail(&storage, dir).map_err(damaged)?;
        manifest_tail = tail;
        for e in &edits {
            version = version.apply(e, &cleaner)?;
            log_number = e.log_number.unwrap_or(log_number);
            limit = limit.max(e.next_file_number.unwrap_or(0));
            last_seq = e.last_seq.unwrap_or(last_seq);
        }
        version.check_invariants().map_err(|why| damaged(Error::corruption(dir.join("CURRENT"), 0, why)))?;
        limit = limit.max(number + 1);
        current_manifest = Some(number);
    } else {
        let data = files_with_data(&*storage, dir, &names);
        if !data.is_empty() {
            return Err(needs_repair(dir, "CURRENT is missing", engine_files(&names), None));
        }
    }
    let live = version.all_file_numbers();
    let present: HashSet<u64> = names.iter().filter_map(|n| parse_numbered(n, ".sst")).collect();
    let mut missing: Vec<String> =
        live.iter().filter(|no| !present.contains(no)).map(|&no| format!("{no:06}.sst")).collect();
    if !missing.is_empty() {
        missing.sort();
        return Err(needs_repair(dir, "the MANIFEST names tables that are missing", missing, None));
    }

    // Files the state does not account for are set aside; numbers go above every file present
    // (set aside ones included).
    let unaccounted: Vec<String> = if exists {
        names
            .iter()
            .filter(|n| match (parse_numbered(n, ".sst"), parse_manifest_name(n)) {
                (Some(no), _) => !live.contains(&no) && no >= limit,
                (_, Some(no)) => Some(no) != current_manifest && no >= limit,
                _ => false,
            })
            .cloned()
            .collect()
    } else {
        Vec::new()
    };
    let mut report =
        RecoveryReport { set_aside: set_aside(&*storage, dir, &unaccounted)?, manifest_tail, logs: Vec::new() };
    let next_file_no = first_free_number(&*storage, dir, &names, limit)?;
    let mut files = FileNumbers::new(next_file_no, next_file_no);
    let mut new_manifest = NewManifest { writer: None };
    // The first edit of a MANIFEST made before the end: the version as recovered from the old one.
    let recovered_seq = last_seq;
    let recovered_edit = move |version: &Version| {
        let mut e = version.snapshot_edit();
        e.log_number = Some(log_number);
        e.last_seq = Some(recovered_seq);
        e
    };

    // 2. Replay write-ahead logs not yet flushed, oldest first, into level-0 tables.
    let mut wals: Vec<u64> =
        names.iter().filter_map(|n| parse_numbered(n, ".log")).filter(|&n| n >= log_number).collect();
    wals.sort_unstable();
    let mut edit = VersionEdit::default();
    let first_wal = wals.first().copied().unwrap_or(0);
    let mut mem = Arc::new(Memtable::new(first_wal, opts.memtable_size));
    let mut flushed_during_replay = false;
    // The first log that ended torn, with where and why.
    let mut torn: Option<(PathBuf, u64, String)> = None;
    // The last log read that held writes or ended torn: the next log holding writes must run
    // on from it.
    let mut prev: Option<ReadLog> = None;
    // Where replay stopped before a log whose writes follow lost ones, and why.
    let mut stopped: Option<(usize, String)> = None;
    for (i, &no) in wals.iter().enumerate() {
        let path = wal_path(dir, no);
        let data = storage.read_all(&path).at(&path)?;
        let (mut records, tail) = read_log(&data, &path, WAL_MAGIC)?;
        // The end record (empty; no write makes one) comes last, and only intact bytes may
        // follow it: nothing is written to a log after it.
        let ended = records.last().is_some_and(|(_, p)| p.is_empty());
        if ended {
            records.pop();
            if let LogTail::Torn { offset, reason } = &tail {
                return Err(Error::corruption(
                    &path,
                    *offset,
                    format!("damaged bytes after the log's end record: {reason}"),
                ));
            }
        }
        if let Some((offset, _)) = records.iter().find(|(_, p)| p.is_empty()) {
            return Err(Error::corruption(&path, *offset, "record after the log's end record"));
        }
        if let Some((offset, payload)) = records.first() {
            let first = decode_record(payload)
                .map_err(|(at, why)| Error::corruption(&path, offset + at as u64, format!("bad write batch: {why}")))?
                .base_seq;
            // Replay stops before this log (`prev`, not ended, then keeps the memtable from
            // being kept frozen).
            if let Some(p) = &prev
                && !runs_on(p, &path, *offset, first)?
            {
                let why = format!("its writes follow writes lost from {} (a power cut)", p.path.display());
                stopped = Some((i, why));
                break;
            }
        }
        let torn_here = match tail {
            LogTail::Torn { offset, reason } => Some((offset, reason)),
            LogTail::Clean => None,
        };
        if torn.is_none()
            && let Some((offset, reason)) = &torn_here
        {
            torn = Some((path.clone(), *offset, reason.clone()));
        }
        let mut log_last = None;
        // Point entries are inserted in key order, a memtable's worth at a time: a skiplist
        // filled in order touches only its recently inserted nodes, several times faster than
        // the log's (random) order.
        let mut pending = Vec::new();
        let mut pending_bytes = 0;
        for (offset, payload) in &records {
            let rec = decode_record(payload)
                .map_err(|(at, why)| Error::corruption(&path, offset + at as u64, format!("bad write batch: {why}")))?;
            for (seq, op) in (rec.base_seq..).zip(rec.ops) {
                match op {
                    BatchOp::Put(k, v) => {
                        pending_bytes += Memtable::entry_bytes(k, v);
                        pending.push((k, seq, ValueKind::Put, v));
                    }
                    BatchOp::Delete(k) => {
                        pending_bytes += Memtable::entry_bytes(k, &[]);
                        pending.push((k, seq, ValueKind::Delete, &[][..]));
                    }
                    BatchOp::DeleteRange(s, e) => mem.insert_range_delete(s, e, seq),
                }
                last_seq = last_seq.max(seq);
                log_last = Some(seq);
            }
            if mem.approximate_bytes() + pending_bytes >= opts.memtable_size {
                insert_sorted(&mem, &mut pending);
                pending_bytes = 0;
                let manifest = new_manifest.make(&storage, dir, &mut files, recovered_edit(&version))?;
                let no = files.alloc(manifest)?;
                flush_recovered(&storage, dir, &opts, &mem, no, &mut edit)?;
                mem = Arc::new(Memtable::new(0, opts.memtable_size));
                flushed_during_replay = true;
            }
        }
        insert_sorted(&mem, &mut pending);
        let (records_discarded, bytes_discarded) = torn_here.as_ref().map_or((0, 0), |(at, _)| torn_tail(&data, *at));
        report.logs.push(LogRecovery {
            path: path.clone(),
            records_replayed: records.len() as u64,
            records_discarded,
            bytes_discarded,
            discarded_from: torn_here.as_ref().map(|t| t.0),
            reason: torn_here.as_ref().map(|t| t.1.clone()),
        });
        if !records.is_empty() || torn_here.is_some() {
            let ended = ended || (torn_here.is_some() && ends_in_end_record(&data));
            prev = Some(ReadLog { path, last: log_last, ended, torn: torn_here });
        }
    }
    if let Some((i, why)) = stopped {
        for &no in &wals[i..] {
            report.logs.push(dropped_log(&*storage, &wal_path(dir, no), &why));
        }
    }
    // After a clean shutdown the replayed logs are intact, the last one holding writes ended
    // by the close: keep their memtable frozen, with the logs, for the background flush, so
    // opening does not wait for a table to be written. After a crash (a log not ended, which
    // may have lost its last writes even if it reads clean) or a replay larger than a
    // memtable, write the tables now, so that no log that may have lost writes is ever
    // followed by a newer one (whose numbers would not run on from it) and no record is
    // replayed into a table twice.
    // (A MANIFEST edit records the sequence numbers visible when it was made, which may include
    // writes a power cut then took from a log that was not ended: a new log numbered above
    // them would not run on from the kept ones.)
    let clean_close = prev.as_ref().is_some_and(|p| p.ended && p.torn.is_none() && p.last == Some(last_seq));
    let keep_frozen = !mem.is_empty() && clean_close && torn.is_none() && !flushed_during_replay;
    if !mem.is_empty() && !keep_frozen {
        let manifest = new_manifest.make(&storage, dir, &mut files, recovered_edit(&version))?;
        let no = files.alloc(manifest)?;
        flush_recovered(&storage, dir, &opts, &mem, no, &mut edit)?;
    }
    version = version.apply(&edit, &cleaner)?;

    // 3. The new MANIFEST describing everything (CURRENT switches atomically; made earlier if
    //    tables were flushed), then the new WAL. The WAL comes second: until CURRENT names the
    //    new MANIFEST (and it names the logs replayed as flushed) the old logs are the truth,
    //    and a new log beside them would make the newest of them look older than it is.
    let (manifest, wal_no, spare_no) = match new_manifest.writer {
        None => {
            let wal_no = files.take_unrecorded();
            let manifest_no = files.take_unrecorded();
            let spare_no = files.take_unrecorded();
            let log_number = if keep_frozen { first_wal } else { wal_no };
            let mut first = version.snapshot_edit();
            first.log_number = Some(log_number);
            let limit = files.edit_limit();
            first.next_file_number = Some(limit);
            first.last_seq = Some(last_seq);
            let manifest = ManifestWriter::create(&storage, dir, manifest_no, &first)?;
            files.recorded(limit);
            (manifest, wal_no, spare_no)
        }
        Some(mut manifest) => {
            let wal_no = files.alloc(&mut manifest)?;
            let spare_no = files.alloc(&mut manifest)?;
            edit.log_number = Some(if keep_frozen { first_wal } else { wal_no });
            edit.last_seq = Some(last_seq);
            let limit = files.edit_limit();
            edit.next_file_number = Some(limit);
            manifest.append(&edit)?;
            files.recorded(limit);
            (manifest, wal_no, spare_no)
        }
    };
    let log_number = if keep_frozen { first_wal } else { wal_no };
    let writer = create_wal(&*storage, dir, wal_no)?;

    // 4. Delete what the recovered state shows to be obsolete: tables no version names that
    //    this database made (numbered below the limit), logs older than the new log number,
    //    and the MANIFESTs before the new one.
    let live = version.all_file_numbers();
    let obsolete: Vec<&String> = names
        .iter()
        .filter(|n| !unaccounted.contains(n))
        .filter(|n| match () {
            _ if n.as_str() == "CURRENT.tmp" => true,
            _ if n.ends_with(".sst") => parse_numbered(n, ".sst").is_some_and(|no| !live.contains(&no) && no < limit),
            _ if n.ends_with(".log") => parse_numbered(n, ".log").is_some_and(|no| no < log_number),
            _ => parse_manifest_name(n).is_some_and(|no| no != manifest.number),
        })
        .collect();
    remove_files(&storage, dir, &obsolete);

    let state = State {
        mem: Arc::new(Memtable::new(wal_no, opts.memtable_size)),
        imms: if keep_frozen { VecDeque::from([mem]) } else { VecDeque::new() },
        version: Arc::new(version),
        manifest,
        files,
        compaction: crate::compaction::state::Compacting::new(opts.num_levels),
        flushing: false,
    };
    // Made after the new MANIFEST, for the reason the new WAL is; numbered above it.
    let spare = Some(SpareLog::start(&storage, dir, spare_no));
    let lead = Lead::new(Wal::new(writer, spare));
    Ok(DbInner::new(dir.to_path_buf(), opts, storage, block_cache, cleaner, state, lead, last_seq, lock, report))
}

/// What a log dropped whole at open held: every write record, its bytes past the header.
fn dropped_log(storage: &dyn Storage, path: &Path, why: &str) -> LogRecovery {
    let data = storage.read_all(path).unwrap_or_default();
    let records = read_log(&data, path, WAL_MAGIC).map_or(0, |(r, _)| r.iter().filter(|(_, p)| !p.is_empty()).count());
    let written = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    LogRecovery {
        path: path.to_path_buf(),
        records_replayed: 0,
        records_discarded: records as u64,
        bytes_discarded: written.saturating_sub(LOG_HEADER_LEN) as u64,
        discarded_from: Some(LOG_HEADER_LEN as u64),
        reason: Some(why.to_string()),
    }
}

/// Takes the database directory's lock ([`Error::Locked`] if another handle holds it).
pub(crate) fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<Box<dyn crate::storage::FileLock>> {
    let lock_path = dir.join("LOCK");
    storage.lock(&lock_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(dir.to_path_buf()),
        _ => Error::io(&lock_path, e),
    })
}

/// The first file number above `limit` and above every numbered file of `dir` (`names`) and
/// of its `lost/`: new files never take the number of one that exists or was set aside.
pub(crate) fn first_free_number(storage: &dyn Storage, dir: &Path, names: &[String], limit: u64) -> Result<u64> {
    let lost_names = list_names(storage, &dir.join(LOST_DIR))?;
    Ok(names
        .iter()
        .filter_map(|n| file_number(n))
        .chain(lost_names.iter().filter_map(|n| lost_number(n)))
        .fold(limit.max(1), |m, no| m.max(no.saturating_add(1))))
}

/// The number of a file set aside under `lost/` (its engine name, perhaps with a `.N`
/// suffix added to keep it apart from an earlier one of the same name).
fn lost_number(name: &str) -> Option<u64> {
    file_number(name).or_else(|| file_number(name.rsplit_once('.')?.0))
}

/// A write-ahead log recovery read, as the next one holding writes is checked against it.
struct ReadLog {
    path: PathBuf,
    /// Sequence number of its last write, if it held any.
    last: Option<SeqNo>,
    /// Whether it was whole and durable once: it ends in its end record, or its end record
    /// follows the damage it reads torn at ([`ends_in_end_record`]).
    ended: bool,
    /// Where and why it reads torn, if it does.
    torn: Option<(u64, String)>,
}

/// Whether a log holding writes whose first sequence number is `first` (its first record at
/// `offset` of `path`) is replayed after `prev`, the last log read that held writes or ended
/// torn.
///
/// Sequence numbers run on from one log to the next, each write's record numbered from the
/// last one's. A memtable switch leaves its log to be ended (made durable, then its end record
/// appended and made durable) on a thread of its own while writes go on into the next log
/// (see `spare_log`), so after a power cut the next log can hold writes that follow records
/// the earlier one lost. Then the numbers skip: replay stops before this log, whose writes,
/// none of them synced (a synced write waits for the earlier log's end), are lost with the
/// earlier log's last ones, as a power cut loses the last writes not synced. If the numbers run
/// on, the earlier log lost none of its writes, whatever it ends in (a torn end record). An
/// earlier log that was ended is whole: numbers that skip after it, or go back, are damage.
fn runs_on(prev: &ReadLog, path: &Path, offset: u64, first: SeqNo) -> Result<bool> {
    if let Some(last) = prev.last {
        if first == last.wrapping_add(1) {
            return Ok(true);
        }
        if first <= last {
            return Err(Error::corruption(
                path,
                offset,
                format!("write numbered {first} follows write {last} of {}", prev.path.display()),
            ));
        }
    }
    if !prev.ended {
        return Ok(false);
    }
    Err(match &prev.torn {
        Some((at, reason)) => Error::corruption(&prev.path, *at, format!("damaged log record: {reason}")),
        None => Error::corruption(
            path,
            offset,
            format!(
                "write numbered {first} does not follow the last write of {}, which was whole",
                prev.path.display()
            ),
        ),
    })
}

/// Whether the log image `data` ends in an intact end record (an empty record) followed only
/// by zeros: the end record is written once the log's other records are durable, so a log
/// that reads torn before it was damaged after it was whole.
pub(crate) fn ends_in_end_record(data: &[u8]) -> bool {
    // (Its last byte is not zero: `log::tests::header_bytes_match_the_format_doc`.)
    let end_record = crate::wal::log::empty_record();
    let last = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    last >= crate::wal::log::LOG_HEADER_LEN + end_record.len() && data[..last].ends_with(&end_record)
}

/// Inserts replayed point entries into `mem` in internal-key order (user key ascending, newest
/// first), emptying `pending`.
pub(crate) fn insert_sorted(mem: &Memtable, pending: &mut Vec<(&[u8], SeqNo, ValueKind, &[u8])>) {
    pending.sort_unstable_by(|a, b| a.0.cmp(b.0).then(b.1.cmp(&a.1)));
    let mut splice = Splice::default();
    for (k, seq, kind, v) in pending.drain(..) {
        mem.insert_spliced(&mut splice, k, seq, kind, v);
    }
}

fn flush_recovered(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    opts: &Options,
    mem: &Arc<Memtable>,
    no: u64,
    edit: &mut VersionEdit,
) -> Result<()> {
    // No snapshot exists while opening.
    if let Some(info) = build_table(storage, dir, opts, no, std::slice::from_ref(mem), &[], &|_| {})? {
        edit.new_files.push((0, info));
    }
    edit.added_tombstones.extend(mem.range_tombstones());
    Ok(())
}

/// Deletes `names` from `dir` (best effort: what is left is deleted by a later open).
fn remove_files(storage: &Arc<dyn Storage>, dir: &Path, names: &[&String]) {
    for n in names {
        let _ = storage.remove_file(&dir.join(n));
    }
    let _ = storage.sync_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::ends_in_end_record;
    use crate::storage::Storage;
    use crate::version::manifest::ManifestWriter;
    use crate::wal::log::{LogWriter, read_log};
    use crate::{MemStorage, Result};
    use proptest::prelude::*;
    use std::path::Path;
    use std::sync::Arc;

    /// A log image holding `records`, ended if `ended`, followed by `zeros` zero bytes.
    fn image(records: &[Vec<u8>], ended: bool, zeros: usize) -> Result<Vec<u8>> {
        let (s, p) = (MemStorage::new(), Path::new("/l.log"));
        let mut w = LogWriter::create(s.create(p).map_err(|e| crate::Error::io(p, e))?, p.into(), super::WAL_MAGIC)?;
        for r in records {
            w.add_record(r)?;
        }
        if ended {
            w.add_record(&[])?;
        }
        w.sync()?;
        let mut data = s.read_all(p).map_err(|e| crate::Error::io(p, e))?;
        data.resize(data.len() + zeros, 0);
        Ok(data)
    }

    /// A MANIFEST edit can record sequence numbers of writes a power cut then took from a log
    /// that was not ended (the last log holding writes was ended, the one after it lost its
    /// writes): recovery must not keep the ended log beside a new one numbered above the lost
    /// writes, or the next open finds numbers that skip after a whole log and refuses it.
    #[test]
    fn numbers_recorded_past_the_logs_do_not_keep_them() {
        let storage = MemStorage::new();
        let opts = crate::Options::small_for_tests();
        let open = || crate::Db::open_with_storage("/db", opts.clone(), Arc::new(storage.clone())).unwrap();
        let db = open();
        for i in 0..10u32 {
            db.put(format!("k{i}"), b"v").unwrap();
        }
        db.close().unwrap();
        // The MANIFEST rewritten with an edit recording 10 more writes than the logs hold.
        let dyn_storage: Arc<dyn Storage> = Arc::new(storage.clone());
        let (number, edits) = crate::version::manifest::read_current(&dyn_storage, Path::new("/db")).unwrap();
        let mut m = ManifestWriter::create(&dyn_storage, Path::new("/db"), number + 100, &edits[0]).unwrap();
        for e in &edits[1..] {
            m.append(e).unwrap();
        }
        m.append(&crate::version::edit::VersionEdit { last_seq: Some(20), ..Default::default() }).unwrap();
        drop(m);
        // Opened, written and cut off by a power cut twice: every synced write comes back.
        // (Slow syncs keep the background flush of what the first open replays, which would
        // delete the ended log, from finishing before the power cut.)
        storage.set_sync_delay(std::time::Duration::from_millis(100));
        for round in 0..2u32 {
            let db = open();
            db.put(format!("round{round}"), b"v").unwrap();
            std::mem::forget(db);
            storage.crash();
        }
        let db = open();
        assert_eq!(db.iter().count(), 12);
    }

    proptest! {
        /// The end record is found after any damage before it, through any zeros after it, and
        /// never where there is none.
        #[test]
        fn the_end_record_is_found_past_damage(
            records in proptest::collection::vec(proptest::collection::vec(1u8..=255, 12..40), 0..6),
            ended: bool,
            zeros in 0usize..40,
            flip in any::<proptest::sample::Index>(),
        ) {
            let mut data = image(&records, ended, zeros).unwrap();
            prop_assert_eq!(ends_in_end_record(&data), ended);
            // Damage a byte of a record before the end record: still found.
            let end = data.len() - zeros - if ended { 8 } else { 0 };
            if end > 16 {
                let at = 16 + flip.index(end - 16);
                data[at] ^= 0x5A;
                prop_assert_eq!(ends_in_end_record(&data), ended);
                let (got, _) = read_log(&data, Path::new("/l.log"), super::WAL_MAGIC).unwrap();
                prop_assert!(got.len() < records.len() + usize::from(ended));
            }
        }
    }
}
