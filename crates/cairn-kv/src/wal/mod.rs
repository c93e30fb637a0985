//! The write-ahead log: its record framing ([`log`], shared with the MANIFEST), the log in use
//! and the logs on either side of it ([`spare`]).

pub mod log;
pub mod record;
pub mod spare;

use std::path::{Path, PathBuf};

use crate::Result;
use crate::wal::log::LogWriter;

/// Magic of write-ahead log files.
pub(crate) const WAL_MAGIC: [u8; 8] = *b"CAIRNWAL";

/// The path of write-ahead log `number` in `dir`.
pub(crate) fn wal_path(dir: &Path, number: u64) -> PathBuf {
    dir.join(format!("{number:06}.log"))
}

/// The write-ahead log being appended to.
pub(crate) struct Wal {
    pub writer: LogWriter,
    /// The log the next memtable switch will use, made ahead of time.
    pub spare: Option<spare::SpareLog>,
    /// The log the last memtable switch left, while it is being ended on a thread of its own.
    pub sealing: Option<spare::SealingLog>,
    /// Logs memtable switches left without ending them, oldest first, with their numbers: no
    /// synced write went into them, so nothing waits for their records to be durable. The
    /// next synced write ends them first (its acknowledgement promises every earlier write
    /// durable); one whose memtable is flushed first is dropped unended, its records never
    /// synced (see `db::write::switch_memtable`). All are newer than `sealing`'s.
    pub unended: std::collections::VecDeque<(u64, LogWriter)>,
    /// Whether a synced write went into `writer`.
    pub synced: bool,
}

impl Wal {
    /// A log in use, with nothing left behind.
    pub fn new(writer: LogWriter, spare: Option<spare::SpareLog>) -> Wal {
        Wal { writer, spare, sealing: None, unended: Default::default(), synced: false }
    }

    /// Waits until the log the last memtable switch left is ended, if one is being ended.
    pub fn wait_for_end(&mut self) -> Result<()> {
        self.sealing.take().map_or(Ok(()), spare::SealingLog::wait)
    }

    /// Makes every log before the current one durable: waits for the one being ended, drops
    /// the unended ones numbered below `needed` (the oldest log whose memtable is not flushed
    /// yet: the others' records are in tables) and ends the rest, oldest first. A synced
    /// write calls it before its own sync, a clean close before ending the current log.
    pub fn end_earlier(&mut self, needed: u64) -> Result<()> {
        self.wait_for_end()?;
        self.drop_flushed(needed);
        while let Some((_, mut log)) = self.unended.pop_front() {
            spare::end_wal(&mut log, false)?;
        }
        Ok(())
    }

    /// Drops the unended logs numbered below `needed`: their memtables are flushed.
    pub fn drop_flushed(&mut self, needed: u64) {
        while self.unended.front().is_some_and(|(number, _)| *number < needed) {
            self.unended.pop_front();
        }
    }
}
