//! The write-ahead logs on either side of the one in use, each handled on a thread of its own:
//! the next, made ahead of time ([`SpareLog`]), and the previous, sealed behind
//! ([`SealingLog`]).
//!
//! Starting a log costs a file creation, the reservation of its first segment, an `fdatasync`
//! (which commits the new extent to the file system's journal) and a sync of the directory:
//! tens of milliseconds on a busy disk (`docs/design/2026-12-07-engine-measurements.md`). Made at the memtable switch,
//! that time stalled the writer and every writer queued behind it, once per memtable. The
//! spare is made right after a switch instead, while the new memtable fills, and the next
//! switch only takes it.
//!
//! The spare is an ordinary write-ahead log holding no record, numbered above every log in
//! use, so recovery after a crash replays it as an empty log (or, if the crash cut its
//! creation short, as an empty log ending torn, which recovery accepts since no log after it
//! holds a record). A clean close deletes it.
//!
//! Ending the log a switch leaves ([`end_wal`]) costs two `fdatasync`s, the first of a
//! memtable's worth of records (tens of milliseconds on a busy disk, with the hole punch:
//! `docs/design/2026-12-07-engine-measurements.md`), again stalling every writer. Writes go on into the next
//! log meanwhile. A synced write waits for the seal before its own sync (its acknowledgement
//! promises every earlier write durable too), and so does the next switch, so at most one log
//! is being sealed. Recovery
//! takes a log that does not end in its end record, followed by one holding records, as cut
//! short by a power cut only if their sequence numbers do not run on, and then replays up to
//! the end of the first (the later log's writes were not synced; see `recovery`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::Result;
use crate::error::IoContext;
use crate::storage::Storage;
use crate::wal::log::LogWriter;
use crate::wal::{WAL_MAGIC, wal_path};

/// A write-ahead log being made, or made, ahead of the memtable switch that will use it.
pub(crate) struct SpareLog {
    number: u64,
    storage: Arc<dyn Storage>,
    dir: PathBuf,
    /// The thread making it; `None` once joined, or if no thread could be started.
    making: Option<JoinHandle<Result<LogWriter>>>,
}

impl SpareLog {
    /// Starts making log `number` in `dir`.
    pub fn start(storage: &Arc<dyn Storage>, dir: &Path, number: u64) -> SpareLog {
        let (s, d) = (storage.clone(), dir.to_path_buf());
        let making =
            std::thread::Builder::new().name("cairn-wal-spare".into()).spawn(move || create_wal(&*s, &d, number)).ok();
        SpareLog { number, storage: storage.clone(), dir: dir.to_path_buf(), making }
    }

    /// The log's number and writer, waiting for the thread if it is not done. If the thread
    /// failed (or never started), makes the log here, under the same number: a half-made
    /// spare must not stay behind a newer log (recovery would take it for a damaged one).
    pub fn take(mut self) -> Result<(u64, LogWriter)> {
        let made = self.making.take().and_then(|t| t.join().ok());
        let writer = match made {
            Some(Ok(w)) => w,
            _ => {
                // What the thread made of the log, if anything, is this spare's own file.
                let path = wal_path(&self.dir, self.number);
                if self.storage.exists(&path) {
                    self.storage.remove_file(&path).at(&path)?;
                }
                create_wal(&*self.storage, &self.dir, self.number)?
            }
        };
        Ok((self.number, writer))
    }

    /// Waits for the thread, then deletes the log (best effort: recovery replays a leftover
    /// spare as an empty log).
    pub fn discard(mut self) {
        if let Some(t) = self.making.take() {
            let _ = t.join();
        }
        let path = wal_path(&self.dir, self.number);
        if self.storage.exists(&path) && self.storage.remove_file(&path).is_ok() {
            let _ = self.storage.sync_dir(&self.dir);
        }
    }
}

impl Drop for SpareLog {
    /// Never leaves the thread behind: it would create its file in a directory the engine no
    /// longer holds, under a number a later open may hand out again.
    fn drop(&mut self) {
        if let Some(t) = self.making.take() {
            let _ = t.join();
        }
    }
}

/// Creates write-ahead log `number` in `dir`: header written, synced, and its directory entry
/// durable, so that records appended and synced later are found after a power cut.
pub(crate) fn create_wal(storage: &dyn Storage, dir: &Path, number: u64) -> Result<LogWriter> {
    let path = wal_path(dir, number);
    let file = storage.create_log(&path).at(&path)?;
    let mut w = LogWriter::create(file, path, WAL_MAGIC)?;
    w.sync()?;
    storage.sync_dir(dir).at(dir)?;
    Ok(w)
}

/// Ends write-ahead log `w`: its records made durable, then its end record appended (an empty
/// record, which no write makes: a write's record holds at least its 12-byte header) and made
/// durable in turn, so that a log ending in its end record holds every record written to it,
/// even after a power cut during the end. With `trim` the log gives back the space it reserved
/// past its records ([`LogWriter::finish`], for a clean close); without, it keeps it
/// ([`LogWriter::seal`], at a memtable switch: it is deleted once its memtable is flushed).
pub(crate) fn end_wal(w: &mut LogWriter, trim: bool) -> Result<()> {
    w.sync()?;
    w.add_record(&[])?;
    if trim { w.finish() } else { w.seal() }
}

/// The write-ahead log a memtable switch left, being ended ([`end_wal`], without trimming) on
/// a thread of its own.
pub(crate) struct SealingLog {
    /// The thread; `None` once joined.
    thread: Option<JoinHandle<Result<()>>>,
    /// The outcome, when no thread could be started and the log was ended here.
    inline: Option<Result<()>>,
}

impl SealingLog {
    /// Starts ending `log`; the thread calls `before` first (a failpoint, in tests).
    pub fn start(mut log: LogWriter, before: impl FnOnce() + Send + 'static) -> SealingLog {
        let (tx, rx) = std::sync::mpsc::sync_channel::<LogWriter>(1);
        let spawned = std::thread::Builder::new().name("cairn-wal-seal".into()).spawn(move || {
            let mut log = rx.recv().map_err(|_| crate::Error::Closed)?;
            before();
            end_wal(&mut log, false)
        });
        match spawned {
            Ok(thread) => {
                // The receiver lives until the thread returns, and it takes one writer.
                let _ = tx.send(log);
                SealingLog { thread: Some(thread), inline: None }
            }
            Err(_) => SealingLog { thread: None, inline: Some(end_wal(&mut log, false)) },
        }
    }

    /// Waits until the log is ended: `Ok` once its records and its end record are durable.
    pub fn wait(mut self) -> Result<()> {
        if let Some(t) = self.thread.take() {
            return t.join().unwrap_or_else(|_| {
                Err(crate::Error::Poisoned("the write-ahead log's sealing thread panicked".into()))
            });
        }
        self.inline.take().unwrap_or(Ok(()))
    }
}

impl Drop for SealingLog {
    /// Never leaves the thread behind: it would touch a file of a directory the engine no
    /// longer holds.
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
