//! The write path, in two steps per group (see [`crate::write::queue`]). The lead step, one
//! group at a time: room in the memtable (switching memtables and stalling when flush or
//! compaction fall behind), transaction validation, one WAL record and fsync for the whole
//! group, which fixes its sequence numbers. The apply step, overlapping the next group's lead
//! step: memtable inserts (concurrent with the previous group's, if it is still inserting),
//! then publication of the group's sequence numbers after every earlier group's.
//!
//! When the write queue asks for it (see [`crate::write::queue`]), a synced group's fsync moves
//! from its lead step to the start of its apply step, so that it overlaps the next group's
//! lead step and fsync. Nothing is lost by that: the group is published only after its sync,
//! and every later group only after it; an fsync covers every record written before it. A
//! failed deferred sync poisons the engine and abandons the group's sequence numbers, so that
//! no later group is published (or acknowledged) either.
//!
//! Whether a group may write, must wait, or must be slowed is not decided here: the lead step
//! takes a snapshot of level 0 and the memtables and obeys [`crate::flow::writers`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use crate::db::inner::{DbInner, SuperVersion};
use crate::flow::writers::{STALL_WAIT, Stall, WriterStep, WriterView, go_without_lock, owes_delay, write_rate};
use crate::key::{SeqNo, ValueKind};
use crate::memtable::{Memtable, Splice};
use crate::wal::Wal;
use crate::wal::log::{LogWriter, PendingSync};
use crate::wal::record::BatchOp;
use crate::wal::spare::{SealingLog, SpareLog, create_wal};
use crate::write::batch::{WriteBatch, group_parts};
use crate::write::lead::Lead;
use crate::write::queue::{Slot, Validation, WriteRequest};
use crate::write::sequences::Sequences;
use crate::{Error, Result};

/// What a group's lead step leaves for its apply step: the requests, their results so far,
/// and, if anything is to be inserted, the super version whose memtable takes it and the
/// group's first sequence number.
pub(crate) struct Led {
    reqs: Vec<WriteRequest>,
    results: Vec<Result<()>>,
    insert: Option<Insert>,
}

/// What a group whose record was logged inserts: the super version whose memtable takes its
/// writes, its first sequence number, and the sync of its record when deferred to the apply
/// step.
struct Insert {
    sv: Arc<SuperVersion>,
    base: SeqNo,
    sync: Option<PendingSync>,
}

/// The lead step of one group, run by the queue's leader (one group at a time): room in the
/// memtable, validation, and the group's WAL record, which fixes its sequence numbers. With
/// `defer_sync`, a synced group's record is synced by its apply step instead.
pub(crate) fn lead_group(inner: &Arc<DbInner>, group: &[&Slot], defer_sync: bool) -> Led {
    let mut reqs: Vec<WriteRequest> =
        group.iter().map(|s| s.request.lock().take()).map(|r| r.unwrap_or_else(empty_req)).collect();
    let (results, insert) = lead(inner, &mut reqs, defer_sync);
    Led { reqs, results, insert }
}

/// The apply step of one group, overlapping the next group's lead step: the record's sync if
/// it was deferred, memtable inserts, then publication of the group's sequence numbers once every earlier group's are; every
/// slot gets its result.
pub(crate) fn apply_group(inner: &Arc<DbInner>, group: &[&Slot], led: Led) {
    let Led { reqs, mut results, insert } = led;
    if let Some(Insert { sv, base, sync }) = insert {
        if let Err(e) = sync.map_or(Ok(()), |s| timed_sync(inner, || s.run())) {
            inner.poison(format!("write-ahead log sync failed: {e}"));
            inner.seqs.abandon();
            fail_included(&mut results, &e);
        } else {
            // If the inserts panic, the group's numbers are never published: the later groups
            // waiting for them must fail instead of waiting forever.
            let _abandon = AbandonOnUnwind(&inner.seqs);
            let included = reqs.iter().zip(&results).filter(|(_, r)| r.is_ok()).map(|(q, _)| &q.batch);
            let next = insert_batches(inner, &sv, base, included);
            if let Err(e) = inner.seqs.publish(base, next - 1) {
                fail_included(&mut results, &e);
            }
        }
    }
    // Each request goes back to its slot before the result, so that its writer, not this
    // thread, frees it: the allocator then never frees one thread's memory on another (with
    // glibc, that takes the other thread's arena lock while it allocates).
    for ((slot, req), r) in group.iter().zip(reqs).zip(results) {
        *slot.request.lock() = Some(req);
        slot.finish(r);
    }
}

/// Runs a synced group's log sync and tells the pacer how long it took.
fn timed_sync(inner: &DbInner, sync: impl FnOnce() -> Result<()>) -> Result<()> {
    let start = Instant::now();
    let r = sync();
    inner.pacer.on_sync(start.elapsed());
    r
}

/// Fails every request of a group that had not failed yet with (a copy of) `e`.
fn fail_included(results: &mut [Result<()>], e: &Error) {
    for r in results.iter_mut().filter(|r| r.is_ok()) {
        *r = Err(clone_err(e));
    }
}

/// Abandons the sequence numbers of the group being applied if it unwinds (see
/// [`Sequences::abandon`]).
struct AbandonOnUnwind<'a>(&'a Sequences);

impl Drop for AbandonOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abandon();
        }
    }
}

fn empty_req() -> WriteRequest {
    WriteRequest { batch: WriteBatch::new(), sync: false, validation: None }
}

fn lead(inner: &Arc<DbInner>, reqs: &mut [WriteRequest], defer_sync: bool) -> (Vec<Result<()>>, Option<Insert>) {
    let fail_all = |e: &Error| reqs.iter().map(|_| Err(clone_err(e))).collect::<Vec<_>>();
    if let Err(e) = inner.check_poisoned() {
        return (fail_all(&e), None);
    }
    let mut lead = inner.lead.lock();
    let bytes: usize = reqs.iter().map(|r| r.batch.approximate_size()).sum();
    if let Err(e) = make_room(inner, &mut lead, bytes as u64) {
        return (fail_all(&e), None);
    }
    let wal = &mut lead.wal;
    let any_txn = reqs.iter().any(|r| r.validation.is_some());
    // Validation looks for writes after a snapshot: those of earlier groups must be in the
    // memtable first.
    if any_txn && let Err(e) = inner.seqs.wait_all_published() {
        return (fail_all(&e), None);
    }
    let sv = inner.sv.load_full();
    let mut results: Vec<Result<()>> = Vec::with_capacity(reqs.len());
    let mut group_writes = GroupWrites::default();
    for r in reqs.iter() {
        let res = match &r.validation {
            Some(v) => validate(inner, &sv, v, &group_writes),
            None => Ok(()),
        };
        if res.is_ok() && any_txn {
            group_writes.add(&r.batch);
        }
        results.push(res);
    }
    let included = || reqs.iter().zip(&results).filter(|(_, r)| r.is_ok()).map(|(q, _)| &q.batch);
    let count: u64 = included().map(|b| b.count() as u64).sum();
    if count == 0 {
        return (results, None);
    }
    let sync = reqs.iter().zip(&results).any(|(q, r)| r.is_ok() && q.sync);
    let base = inner.seqs.allocated() + 1;
    let (head, reps) = group_parts(base, included());
    let mut parts: Vec<&[u8]> = Vec::with_capacity(reqs.len() + 1);
    parts.push(&head);
    parts.extend(reps);
    let record_len: usize = parts.iter().map(|p| p.len()).sum();
    // A synced write's acknowledgement promises every earlier write durable: those in the logs
    // earlier memtable switches left too. From the first one on, the log writes its filled
    // segments back as it goes, so that the next sync finds little left to write.
    let sealed = if sync && !wal.synced {
        let needed = inner.sv.load().oldest_log();
        wal.synced = true;
        wal.writer.set_write_back(true);
        wal.end_earlier(needed)
    } else {
        Ok(())
    };
    let logged = sealed.and_then(|()| wal.writer.add_record_parts(&parts)).and_then(|_| wal.writer.flush());
    let logged = logged.and_then(|()| match (sync, defer_sync) {
        (false, _) => Ok(None),
        (true, false) => timed_sync(inner, || wal.writer.sync()).map(|()| None),
        (true, true) => wal.writer.sync_later().map(Some),
    });
    let sync = match logged {
        Ok(sync) => sync,
        Err(e) => {
            inner.poison(format!("write-ahead log write failed: {e}"));
            let results = results.into_iter().map(|r| r.and(Err(clone_err(&e)))).collect();
            return (results, None);
        }
    };
    inner.counters.add_wal_bytes(record_len as u64);
    inner.seqs.set_allocated(base + count - 1);
    (results, Some(Insert { sv, base, sync }))
}

/// Inserts `batches` into `sv`'s memtable with sequence numbers from `base`; returns the
/// next unused one.
fn insert_batches<'a>(
    inner: &DbInner,
    sv: &SuperVersion,
    base: SeqNo,
    batches: impl Iterator<Item = &'a WriteBatch>,
) -> SeqNo {
    let mut seq = base;
    let mut user_bytes = 0u64;
    let mut splice = Splice::default();
    for b in batches {
        for op in b.iter() {
            match op {
                BatchOp::Put(k, v) => {
                    sv.mem.insert_spliced(&mut splice, k, seq, ValueKind::Put, v);
                    user_bytes += (k.len() + v.len()) as u64;
                }
                BatchOp::Delete(k) => {
                    sv.mem.insert_spliced(&mut splice, k, seq, ValueKind::Delete, &[]);
                    user_bytes += k.len() as u64;
                }
                BatchOp::DeleteRange(s, e) => {
                    sv.mem.insert_range_delete(s, e, seq);
                    user_bytes += (s.len() + e.len()) as u64;
                }
            }
            seq += 1;
        }
    }
    inner.counters.add_user_bytes(user_bytes);
    seq
}

/// Keys and ranges written by earlier members of the group being processed.
#[derive(Default)]
struct GroupWrites {
    keys: HashSet<Vec<u8>>,
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
}

impl GroupWrites {
    fn add(&mut self, b: &WriteBatch) {
        for op in b.iter() {
            match op {
                BatchOp::Put(k, _) | BatchOp::Delete(k) => {
                    self.keys.insert(k.to_vec());
                }
                BatchOp::DeleteRange(s, e) => self.ranges.push((s.to_vec(), e.to_vec())),
            }
        }
    }

    fn touches(&self, key: &[u8]) -> bool {
        self.keys.contains(key) || self.ranges.iter().any(|(s, e)| s.as_slice() <= key && key < e.as_slice())
    }
}

fn validate(inner: &DbInner, sv: &SuperVersion, v: &Validation, group: &GroupWrites) -> Result<()> {
    for k in &v.keys {
        let changed = group.touches(k) || inner.changed_since(sv, k, v.snapshot)?;
        if changed {
            return Err(Error::Conflict { key: String::from_utf8_lossy(k).into_owned() });
        }
    }
    Ok(())
}

/// Errors are not `Clone`; group members other than the first get an equivalent error.
pub(crate) fn clone_err(e: &Error) -> Error {
    match e {
        Error::Conflict { key } => Error::Conflict { key: key.clone() },
        Error::Closed => Error::Closed,
        Error::Poisoned(s) => Error::Poisoned(s.clone()),
        Error::Io { path, source } => {
            Error::Io { path: path.clone(), source: std::io::Error::new(source.kind(), source.to_string()) }
        }
        Error::Corruption { path, offset, reason } => {
            Error::Corruption { path: path.clone(), offset: *offset, reason: reason.clone() }
        }
        other => Error::Poisoned(other.to_string()),
    }
}

/// Waits until the memtable has room, switching to a new one when it is full, and slows
/// (`bytes` being the size of the writes about to be made) or stops writes while level 0 is
/// over its limits: the steps [`WriterView::step`] asks for.
fn make_room(inner: &Arc<DbInner>, lead: &mut Lead, bytes: u64) -> Result<()> {
    let opts = &inner.opts;
    let mut slowed = false;
    loop {
        inner.check_poisoned()?;
        // The common case needs no state lock, which a flush or compaction holds while it
        // makes its edit durable in the MANIFEST (an `fdatasync`, which on a busy disk holds
        // every writer behind it: docs/design/2026-12-07-flow-control.md). The current view
        // is the state's (both change together under the lock), and its memtable is the one
        // being written: only the log's holder, the caller, switches it.
        {
            let sv = inner.sv.load();
            if go_without_lock(opts, sv.l0_weight, sv.mem.approximate_bytes()) {
                lead.slowdown.clear();
                return Ok(());
            }
        }
        let mut st = inner.state.lock();
        let view = WriterView {
            l0_weight: st.version.l0_weight(opts.memtable_size),
            memtable_bytes: st.mem.approximate_bytes(),
            frozen: st.imms.len(),
            slowed,
        };
        let step = view.step(opts);
        if step != WriterStep::Stop(Stall::Stop) && !owes_delay(opts, view.l0_weight) {
            lead.slowdown.clear();
        }
        match step {
            WriterStep::Go => return Ok(()),
            WriterStep::Stop(why) => {
                let t = Instant::now();
                inner.bg_cv.wait_for(&mut st, STALL_WAIT);
                inner.counters.add_stall(why, t.elapsed());
            }
            WriterStep::Slow => {
                let catch_up =
                    crate::compaction::picker::catch_up_rate(opts, &st.version, &st.compaction, st.imms.len() + 1);
                let rate = write_rate(opts, view.l0_weight, catch_up);
                drop(st);
                slowed = true;
                if let Some(nap) = lead.slowdown.owe(Instant::now(), bytes, rate) {
                    let t = Instant::now();
                    std::thread::sleep(nap);
                    inner.counters.add_stall(Stall::Slowdown, t.elapsed());
                }
            }
            WriterStep::SwitchMemtable => {
                drop(st);
                switch_memtable(inner, &mut lead.wal, false)?;
            }
        }
    }
}

/// Freezes the current memtable and starts a new one with a new WAL. With `force`, switches
/// even when the memtable is small (but never when it is empty).
pub(crate) fn switch_memtable(inner: &Arc<DbInner>, wal: &mut Wal, force: bool) -> Result<()> {
    // Groups whose records are in the current log may still be inserting into its memtable:
    // let them finish, so that the memtable is whole when it is judged, frozen and flushed.
    inner.seqs.wait_all_published()?;
    {
        let st = inner.state.lock();
        if st.mem.is_empty() || (!force && st.mem.approximate_bytes() < inner.opts.memtable_size) {
            return Ok(());
        }
    }
    // The memtable cannot change meanwhile (the caller holds the WAL, so no group starts), and
    // background work need not wait for the waits below: the state is locked again after them.
    let res = (|| -> Result<(u64, LogWriter)> {
        // The log is ended on a thread of its own while writes go on into the next one (see
        // `spare_log`); one at a time, so the one the last switch left must be ended first.
        wal.wait_for_end()?;
        match wal.spare.take() {
            Some(spare) => spare.take(),
            None => {
                let number = inner.state.lock().alloc_file_no()?;
                Ok((number, create_wal(&*inner.storage, &inner.dir, number)?))
            }
        }
    })();
    let (number, writer) = match res {
        Ok(w) => w,
        Err(e) => {
            inner.poison(format!("could not start a new write-ahead log: {e}"));
            return Err(e);
        }
    };
    let mut old_log = Some(std::mem::replace(&mut wal.writer, writer));
    // A log that synced writes went into is ended now (they are likely to go on, and the next
    // one waits for it). One that none went into is left as it is: nothing waits for its
    // records to be durable until a synced write comes, which ends it first; if its memtable
    // is flushed before that, it is deleted without ever being synced, and without fsync a
    // write costs the device no log bytes (the table holds them). A power cut may then take
    // more unsynced writes than the current log's, still only a suffix: recovery stops
    // before a log whose numbers skip past one that was not ended (point in time).
    let synced = std::mem::replace(&mut wal.synced, false);
    wal.writer.set_write_back(synced);
    if synced {
        debug_assert!(wal.unended.is_empty(), "a synced write ends every earlier log");
        wal.sealing = old_log.take().map(|log| SealingLog::start(log, inner.failpoint_fn("wal.seal")));
    }
    let mut st = inner.state.lock();
    // The next log is numbered above this one (and every table numbered so far, which does
    // not matter: only logs are ordered by number).
    match st.alloc_file_no() {
        Ok(no) => wal.spare = Some(SpareLog::start(&inner.storage, &inner.dir, no)),
        // No spare: the next switch makes its log itself (and meets the poison first).
        Err(e) => inner.poison(format!("MANIFEST write failed: {e}")),
    }
    let old = std::mem::replace(&mut st.mem, Arc::new(Memtable::new(number, inner.opts.memtable_size)));
    if let Some(log) = old_log {
        wal.unended.push_back((old.wal_number(), log));
    }
    st.imms.push_back(old);
    wal.drop_flushed(st.oldest_log());
    inner.install_super_version(&st);
    inner.bg_cv.notify_all();
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::{Db, Error, MemStorage, Options};
    use std::sync::Arc;
    use std::time::Duration;

    /// An engine over `storage` whose synced groups defer their syncs.
    fn deferring_db(storage: &MemStorage) -> Db {
        let db = Db::open_with_storage("/db", Options::default(), Arc::new(storage.clone())).unwrap();
        db.inner().queue.force_deferred_syncs();
        db
    }

    /// A write into a memtable with room, level 0 under its slowdown trigger, does not wait
    /// for the state lock (a flush or compaction holds it across a MANIFEST sync).
    #[test]
    fn writes_with_room_do_not_wait_for_the_state_lock() {
        let storage = MemStorage::new();
        let db = Db::open_with_storage("/db", Options::default(), Arc::new(storage.clone())).unwrap();
        db.put(b"a", b"1").unwrap();
        let st = db.inner().state.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            let db = &db;
            s.spawn(move || tx.send(db.put(b"b", b"2").map_err(|e| e.to_string())).unwrap());
            let got = rx.recv_timeout(Duration::from_secs(10));
            drop(st);
            assert_eq!(got, Ok(Ok(())), "the write waited for the state lock");
        });
        assert_eq!(db.get(b"b").unwrap().as_deref(), Some(&b"2"[..]));
    }

    /// Two writers' deferred syncs overlap, and a power cut loses no acknowledged write.
    #[test]
    fn deferred_syncs_overlap_and_lose_nothing() {
        let storage = MemStorage::new();
        storage.set_sync_delay(Duration::from_millis(1));
        let db = deferring_db(&storage);
        std::thread::scope(|s| {
            for t in 0..2 {
                let db = &db;
                s.spawn(move || {
                    for i in 0..100 {
                        db.put(format!("t{t}-{i:03}"), b"v").unwrap();
                        assert!(db.get(format!("t{t}-{i:03}")).unwrap().is_some(), "a writer reads its write");
                    }
                });
            }
        });
        assert!(storage.max_concurrent_syncs() >= 2, "no two syncs overlapped");
        drop(db);
        storage.crash();
        let db = Db::open_with_storage("/db", Options::default(), Arc::new(storage.clone())).unwrap();
        assert_eq!(db.iter().count(), 200);
    }

    /// A deferred sync that fails fails its write (never made visible) and poisons the
    /// engine; what was acknowledged before survives a power cut.
    #[test]
    fn a_failed_deferred_sync_fails_the_write_and_poisons() {
        let storage = MemStorage::new();
        let db = deferring_db(&storage);
        db.put(b"before", b"1").unwrap();
        storage.set_sync_failure(true);
        assert!(db.put(b"during", b"2").is_err());
        storage.set_sync_failure(false);
        assert_eq!(db.get(b"during").unwrap(), None, "a write whose sync failed is not visible");
        let err = db.put(b"after", b"3").unwrap_err();
        assert!(matches!(err, Error::Poisoned(_)), "got {err}");
        drop(db);
        storage.crash();
        let db = Db::open_with_storage("/db", Options::default(), Arc::new(storage.clone())).unwrap();
        assert_eq!(db.get(b"before").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(db.get(b"after").unwrap(), None);
    }
}
