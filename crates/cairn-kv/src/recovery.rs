//! Opening a database: lock the directory, replay the MANIFEST named by `CURRENT`, replay the
//! write-ahead logs newer than the last flush into tables, start a new MANIFEST and WAL, and
//! delete files no version refers to.

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::batch::{BatchOp, decode_record};
use crate::block_cache::BlockCache;
use crate::db::{DbInner, State, Wal};
use crate::error::IoContext;
use crate::flush::build_table;
use crate::key::{SeqNo, ValueKind};
use crate::log::{LogTail, read_log};
use crate::manifest::{ManifestWriter, parse_manifest_name, read_current};
use crate::memtable::{Memtable, Splice};
use crate::spare_log::{SpareLog, create_wal};
use crate::storage::Storage;
use crate::table_cache::TableCache;
use crate::version::{Cleaner, Version};
use crate::version_edit::VersionEdit;
use crate::{Error, Options, Result};

/// Magic of write-ahead log files.
pub(crate) const WAL_MAGIC: [u8; 8] = *b"CAIRNWAL";

pub(crate) fn wal_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

fn parse_numbered(name: &str, suffix: &str) -> Option<u64> {
    name.strip_suffix(suffix)?.parse().ok()
}

fn check_options(o: &Options) -> Result<()> {
    let bad = |m: &str| Err(Error::InvalidArgument(m.to_string()));
    if o.num_levels < 2 || o.num_levels > crate::version_edit::MAX_LEVELS {
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

pub(crate) fn open(dir: &Path, opts: Options, storage: Arc<dyn Storage>) -> Result<DbInner> {
    check_options(&opts)?;
    let exists = storage.exists(&dir.join("CURRENT"));
    if !exists && !opts.create_if_missing {
        return Err(Error::InvalidArgument(format!("no database at {} (create_if_missing is off)", dir.display())));
    }
    if exists && opts.error_if_exists {
        return Err(Error::InvalidArgument(format!("a database already exists at {}", dir.display())));
    }
    storage.create_dir_all(dir).at(dir)?;
    let lock_path = dir.join("LOCK");
    let lock = storage.lock(&lock_path).map_err(|e| match e.kind() {
        std::io::ErrorKind::WouldBlock => Error::Locked(dir.to_path_buf()),
        _ => Error::io(&lock_path, e),
    })?;

    let block_cache = Arc::new(BlockCache::new(opts.block_cache_bytes));
    let table_cache =
        Arc::new(TableCache::new(storage.clone(), dir.to_path_buf(), opts.max_open_files.max(1), block_cache.clone()));
    let cleaner = Cleaner::new(storage.clone(), dir.to_path_buf(), table_cache.clone());

    // 1. The MANIFEST.
    let mut version = Version::empty(opts.num_levels);
    let mut log_number = 0;
    let mut next_file_no = 1;
    let mut last_seq: SeqNo = 0;
    if exists {
        let (number, edits) = read_current(&storage, dir)?;
        for e in &edits {
            version = version.apply(e, &cleaner)?;
            log_number = e.log_number.unwrap_or(log_number);
            next_file_no = e.next_file_number.unwrap_or(next_file_no);
            last_seq = e.last_seq.unwrap_or(last_seq);
        }
        version.check_invariants().map_err(|why| Error::corruption(dir.join("CURRENT"), 0, why))?;
        next_file_no = next_file_no.max(number + 1);
    }
    let names = storage.list_dir(dir).at(dir)?;
    for n in &names {
        for suffix in [".log", ".sst"] {
            if let Some(no) = parse_numbered(n, suffix) {
                next_file_no = next_file_no.max(no + 1);
            }
        }
        if let Some(no) = parse_manifest_name(n) {
            next_file_no = next_file_no.max(no + 1);
        }
    }

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
    for &no in &wals {
        let path = wal_path(dir, no);
        let data = storage.read_all(&path).at(&path)?;
        let (records, tail) = read_log(&data, &path, WAL_MAGIC)?;
        // Only the newest log that holds records can end in a torn write: older ones were
        // synced before the next one was used. Logs after it may hold none (the spare made
        // ahead of the next memtable switch, perhaps itself cut short while being made).
        if let Some((torn_path, offset, reason)) = &torn
            && !records.is_empty()
        {
            return Err(Error::corruption(torn_path, *offset, format!("damaged log record: {reason}")));
        }
        if let LogTail::Torn { offset, reason } = tail
            && torn.is_none()
        {
            torn = Some((path.clone(), offset, reason));
        }
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
            }
            if mem.approximate_bytes() + pending_bytes >= opts.memtable_size {
                insert_sorted(&mem, &mut pending);
                pending_bytes = 0;
                flush_recovered(&storage, dir, &opts, &mem, &mut next_file_no, &mut edit)?;
                mem = Arc::new(Memtable::new(0, opts.memtable_size));
                flushed_during_replay = true;
            }
        }
        insert_sorted(&mem, &mut pending);
    }
    // After a clean shutdown the replayed logs are intact: keep their memtable frozen, with the
    // logs, for the background flush, so opening does not wait for a table to be written.
    // After a crash (a torn tail) or a replay larger than a memtable, write the tables now, so
    // that no log that ends torn is ever followed by a newer one and no record is replayed
    // into a table twice.
    let keep_frozen = !mem.is_empty() && torn.is_none() && !flushed_during_replay;
    if !mem.is_empty() && !keep_frozen {
        flush_recovered(&storage, dir, &opts, &mem, &mut next_file_no, &mut edit)?;
    }
    version = version.apply(&edit, &cleaner)?;

    // 3. A new MANIFEST describing everything (CURRENT switches atomically), then the new WAL.
    //    The WAL comes second: until CURRENT names the new MANIFEST the old logs are the truth,
    //    and a new log beside them would make the newest of them look older than it is.
    let wal_no = next_file_no;
    let manifest_no = next_file_no + 1;
    let spare_no = next_file_no + 2;
    next_file_no += 3;
    let log_number = if keep_frozen { first_wal } else { wal_no };
    let mut first = version.snapshot_edit();
    first.log_number = Some(log_number);
    first.next_file_number = Some(next_file_no);
    first.last_seq = Some(last_seq);
    let manifest = ManifestWriter::create(&storage, dir, manifest_no, &first)?;
    let writer = create_wal(&*storage, dir, wal_no)?;

    // 4. Delete what the new MANIFEST does not name.
    let live = version.all_file_numbers();
    remove_unused(&storage, dir, &live, log_number, manifest_no);

    let state = State {
        mem: Arc::new(Memtable::new(wal_no, opts.memtable_size)),
        imms: if keep_frozen { VecDeque::from([mem]) } else { VecDeque::new() },
        version: Arc::new(version),
        manifest,
        next_file_no,
        compaction: crate::compaction::Compacting::new(opts.num_levels),
        flushing: false,
    };
    // Made after the new MANIFEST, for the reason the new WAL is; numbered above it.
    let spare = Some(SpareLog::start(&storage, dir, spare_no));
    let wal = Wal { writer, slowdown_owed: std::time::Duration::ZERO, spare };
    Ok(DbInner::new(dir.to_path_buf(), opts, storage, block_cache, cleaner, state, wal, last_seq, lock))
}

/// Inserts replayed point entries into `mem` in internal-key order (user key ascending, newest
/// first), emptying `pending`.
fn insert_sorted(mem: &Memtable, pending: &mut Vec<(&[u8], SeqNo, ValueKind, &[u8])>) {
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
    next_file_no: &mut u64,
    edit: &mut VersionEdit,
) -> Result<()> {
    let no = *next_file_no;
    *next_file_no += 1;
    // No snapshot exists while opening.
    if let Some(info) = build_table(storage, dir, opts, no, std::slice::from_ref(mem), &[], &|_| {})? {
        edit.new_files.push((0, info));
    }
    edit.added_tombstones.extend(mem.range_tombstones());
    Ok(())
}

fn remove_unused(storage: &Arc<dyn Storage>, dir: &Path, live: &HashSet<u64>, log_number: u64, manifest_no: u64) {
    let Ok(names) = storage.list_dir(dir) else { return };
    for n in names {
        let remove = match () {
            _ if n == "CURRENT.tmp" => true,
            _ if n.ends_with(".sst") => parse_numbered(&n, ".sst").is_some_and(|no| !live.contains(&no)),
            _ if n.ends_with(".log") => parse_numbered(&n, ".log").is_some_and(|no| no < log_number),
            _ => parse_manifest_name(&n).is_some_and(|no| no != manifest_no),
        };
        if remove {
            let _ = storage.remove_file(&dir.join(&n));
        }
    }
    let _ = storage.sync_dir(dir);
}
