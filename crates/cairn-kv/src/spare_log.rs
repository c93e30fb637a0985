//! The next write-ahead log, made ahead of time on a thread of its own ([`SpareLog`]).
//!
//! Starting a log costs a file creation, the reservation of its first segment, an `fdatasync`
//! (which commits the new extent to the file system's journal) and a sync of the directory:
//! 20 to 45 ms on a busy disk, seen in traces of 10M-record loads. Made at the memtable switch,
//! that time stalled the writer and every writer queued behind it, once per memtable. The
//! spare is made right after a switch instead, while the new memtable fills, and the next
//! switch only takes it.
//!
//! The spare is an ordinary write-ahead log holding no record, numbered above every log in
//! use, so recovery after a crash replays it as an empty log (or, if the crash cut its
//! creation short, as an empty log ending torn, which recovery accepts since no log after it
//! holds a record). A clean close deletes it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::Result;
use crate::error::IoContext;
use crate::log::LogWriter;
use crate::recovery::{WAL_MAGIC, wal_path};
use crate::storage::Storage;

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
            _ => create_wal(&*self.storage, &self.dir, self.number)?,
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
