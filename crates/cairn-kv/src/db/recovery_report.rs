//! What opening a database found and did that its user should know of
//! ([`crate::Db::recovery_report`]).

use std::path::PathBuf;

pub use crate::wal::log::DiscardedTail;

/// What opening found and did that the caller should know of ([`crate::Db::recovery_report`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryReport {
    /// Every write-ahead log read, oldest first, with what was replayed from it and what was
    /// discarded.
    pub logs: Vec<LogRecovery>,
    /// A torn last edit of the MANIFEST, ignored: an edit whose fsync never returned.
    pub manifest_tail: Option<DiscardedTail>,
    /// Files the recovered state could not account for (tables and MANIFESTs numbered at or
    /// above the MANIFEST's next file number that no version names), moved to these paths
    /// under `lost/` rather than deleted.
    pub set_aside: Vec<PathBuf>,
}

impl RecoveryReport {
    /// Whether opening discarded no log record and set no file aside.
    pub fn is_clean(&self) -> bool {
        self.records_discarded() == 0 && self.set_aside.is_empty()
    }

    /// Log records (write groups) discarded, over every log.
    pub fn records_discarded(&self) -> u64 {
        self.logs.iter().map(|l| l.records_discarded).sum()
    }

    /// Log bytes discarded, over every log.
    pub fn bytes_discarded(&self) -> u64 {
        self.logs.iter().map(|l| l.bytes_discarded).sum()
    }

    /// One line per thing discarded or set aside, for a warning: every log that lost records,
    /// a torn MANIFEST edit, every file set aside.
    pub fn warnings(&self) -> Vec<String> {
        let mut w: Vec<String> =
            self.logs.iter().filter(|l| l.records_discarded > 0).map(ToString::to_string).collect();
        if let Some(t) = &self.manifest_tail {
            w.push(format!(
                "{}: a torn last edit ({} bytes from offset {}, {}) was ignored: its write never completed",
                t.path.display(),
                t.bytes,
                t.offset,
                t.reason
            ));
        }
        w.extend(
            self.set_aside.iter().map(|p| format!("{}: set aside, not accounted for by the MANIFEST", p.display())),
        );
        w
    }
}

/// How one write-ahead log was replayed at open.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogRecovery {
    /// The log file.
    pub path: PathBuf,
    /// Records (each one write group: the batches of one group commit) replayed.
    pub records_replayed: u64,
    /// Records not replayed: a torn or damaged record counts as one, plus the intact records
    /// found after it ([`crate::wal::log::torn_tail`]); every record of a log dropped whole.
    pub records_discarded: u64,
    /// Bytes not replayed, up to the last one written (reserved zeros not counted).
    pub bytes_discarded: u64,
    /// Where in the file the discarded part starts.
    pub discarded_from: Option<u64>,
    /// Why it was discarded.
    pub reason: Option<String>,
}

impl std::fmt::Display for LogRecovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} records replayed", self.path.display(), self.records_replayed)?;
        if let (Some(at), Some(why)) = (self.discarded_from, &self.reason) {
            write!(
                f,
                ", {} records ({} bytes) from offset {at} discarded: {why}",
                self.records_discarded, self.bytes_discarded
            )?;
        }
        Ok(())
    }
}
