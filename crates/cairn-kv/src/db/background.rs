//! Background threads: one flushing frozen memtables, `compaction_threads` compacting.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;

use crate::compaction::output::{TableOutput, build_table};
use crate::compaction::state::Compaction;
use crate::db::inner::DbInner;
use crate::memtable::Memtable;
use crate::table::builder::WarmPolicy;
use crate::version::edit::VersionEdit;
use crate::{Error, Result};

pub(crate) fn spawn(inner: &Arc<DbInner>) -> Result<Vec<JoinHandle<()>>> {
    let mut threads = Vec::new();
    let spawn_err = |e| Error::io("", e);
    let i = inner.clone();
    let flush = move || guarded(&i, "flush", flush_loop);
    threads.push(std::thread::Builder::new().name("cairn-flush".into()).spawn(flush).map_err(spawn_err)?);
    for n in 0..inner.opts.compaction_threads.max(1) {
        let i = inner.clone();
        let compact = move || guarded(&i, "compaction", compaction_loop);
        let t = std::thread::Builder::new().name(format!("cairn-compact-{n}")).spawn(compact);
        threads.push(t.map_err(spawn_err)?);
    }
    Ok(threads)
}

/// Runs compaction `c`, at the priority its kind deserves.
///
/// A compaction out of level 0 (into the base level, or level-0 tables merged among
/// themselves) runs on the compaction thread at the process's priority: writers are slowed and
/// then stopped by the number of level-0 tables, so they wait for it much as they wait for a
/// flush. Any other compaction runs on a thread of its own that lowers its priority by
/// `Options::compaction_nice` (a thread may lower its own priority but, without privileges,
/// never raise it again, hence a new thread per compaction rather than one switching): it is
/// only debt (read and space amplification), paid from the CPU time clients leave idle. A
/// level-0 compaction run at low priority instead was the longest wait of writers under
/// insert load with as many busy clients as cores: it took the CPU only when writers were
/// already held at the slowdown trigger, so level 0 grew to the trigger again and again.
fn run_compaction(inner: &Arc<DbInner>, c: Compaction) -> Result<()> {
    let nice = inner.opts.compaction_nice;
    if c.level == 0 || nice <= 0 {
        return crate::db::compact::run(inner, c);
    }
    // The compaction moves into the thread through `slot`; if the thread cannot be started,
    // it runs here instead (at this thread's priority) rather than being lost.
    let slot = parking_lot::Mutex::new(Some(c));
    std::thread::scope(|scope| {
        let low = std::thread::Builder::new().name("cairn-deepcomp".into()).spawn_scoped(scope, || {
            lower_priority(nice);
            let c = slot.lock().take().expect("taken once");
            crate::db::compact::run(inner, c)
        });
        match low {
            Ok(handle) => handle.join().unwrap_or_else(|p| std::panic::resume_unwind(p)),
            Err(_) => crate::db::compact::run(inner, slot.lock().take().expect("the thread never started")),
        }
    })
}

/// Adds `nice` to the calling thread's scheduling niceness (Linux: niceness is per thread, and
/// threads it starts inherit it). Best effort: an error leaves the priority as it was. Other
/// layers' background threads use it too (the document memory's embedding thread).
pub fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: plain system calls on the calling thread; no memory is passed.
        #[allow(unsafe_code)]
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, now.saturating_add(nice).min(19));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}

/// Runs a worker; a panic poisons the engine instead of leaving it on unknown state.
fn guarded(inner: &Arc<DbInner>, what: &str, work: fn(&Arc<DbInner>)) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(inner))).is_err() {
        inner.poison(format!("the {what} thread panicked"));
    }
}

fn stopping(inner: &DbInner) -> bool {
    inner.shutting_down.load(Ordering::Acquire) || inner.is_poisoned()
}

fn flush_loop(inner: &Arc<DbInner>) {
    loop {
        let (mems, file_no, snapshots) = {
            let mut st = inner.state.lock();
            while !stopping(inner) && (st.imms.is_empty() || st.flushing) {
                inner.bg_cv.wait(&mut st);
            }
            if stopping(inner) {
                return;
            }
            // Every frozen memtable waiting goes into one table (see `build_table`).
            let mems: Vec<Arc<Memtable>> = st.imms.iter().cloned().collect();
            let file_no = match st.alloc_file_no() {
                Ok(no) => no,
                Err(e) => {
                    drop(st);
                    inner.poison(format!("memtable flush failed: {e}"));
                    return;
                }
            };
            st.flushing = true;
            (mems, file_no, inner.snapshots.list())
        };
        inner.failpoint("flush.build");
        let setup = |out: &mut TableOutput<'_>| {
            if inner.opts.prepopulate_block_cache {
                out.warm(inner.block_cache.clone(), WarmPolicy::Always);
            }
            out.pace(inner.pacer.clone(), crate::flow::pacer::FLUSH, inner.opts.memtable_size as u64);
        };
        let built = build_table(&inner.storage, &inner.dir, &inner.opts, file_no, &mems, &snapshots, &setup);
        let mut st = inner.state.lock();
        st.flushing = false;
        let res = built.and_then(|info| {
            let mut edit = VersionEdit::default();
            if let Some(info) = info {
                inner.counters.add_flush(info.size);
                let flushed: usize = mems.iter().map(|m| m.approximate_bytes()).sum();
                if flushed > 0 {
                    st.compaction.flush_ratio = info.size as f64 / flushed as f64;
                }
                edit.new_files.push((0, info));
            }
            edit.added_tombstones = mems.iter().flat_map(|m| m.range_tombstones()).collect();
            // Logs older than the next unflushed memtable's are no longer needed.
            let next_wal = st.imms.get(mems.len()).map_or(st.mem.wal_number(), |m| m.wal_number());
            edit.log_number = Some(next_wal);
            // The frozen memtables leave the read path in the same step as their table enters it.
            let popped: Vec<Arc<Memtable>> = st.imms.drain(..mems.len()).collect();
            if let Err(e) = crate::db::inner::log_and_apply(inner, &mut st, edit) {
                for m in popped.into_iter().rev() {
                    st.imms.push_front(m);
                }
                return Err(e);
            }
            Ok(next_wal)
        });
        match res {
            Ok(next_wal) => {
                drop(st);
                crate::db::compact::open_new_tables(inner, &[file_no]);
                remove_old_wals(inner, next_wal);
            }
            Err(e) => {
                drop(st);
                inner.block_cache.forget_pending(file_no);
                inner.poison(format!("memtable flush failed: {e}"));
            }
        }
        inner.bg_cv.notify_all();
    }
}

fn remove_old_wals(inner: &DbInner, below: u64) {
    let Ok(names) = inner.storage.list_dir(&inner.dir) else { return };
    for n in names {
        if let Some(no) = n.strip_suffix(".log").and_then(|s| s.parse::<u64>().ok())
            && no < below
        {
            let _ = inner.storage.remove_file(&inner.dir.join(n));
        }
    }
}

fn compaction_loop(inner: &Arc<DbInner>) {
    loop {
        let c = {
            let mut st = inner.state.lock();
            loop {
                if stopping(inner) {
                    return;
                }
                // The version is not held while waiting: its tables would stay on disk.
                let v = st.version.clone();
                if let Some(c) = crate::compaction::picker::pick(&inner.opts, &v, &mut st.compaction) {
                    break c;
                }
                drop(v);
                inner.bg_cv.wait(&mut st);
            }
        };
        match run_compaction(inner, c) {
            Ok(()) | Err(Error::Closed) => {}
            Err(e) => inner.poison(format!("compaction failed: {e}")),
        }
        inner.bg_cv.notify_all();
    }
}
