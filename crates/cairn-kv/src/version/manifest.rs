//! The MANIFEST (a record log of [`VersionEdit`]s) and the `CURRENT` file naming the live one.
//!
//! A new MANIFEST starts with an edit describing the whole version; `CURRENT` is replaced
//! atomically (write `CURRENT.tmp`, fsync, rename, fsync the directory).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::IoContext;
use crate::storage::Storage;
use crate::version::edit::VersionEdit;
use crate::wal::log::{LogTail, LogWriter, read_log};
use crate::{Error, Result};

/// Magic of MANIFEST files.
pub(crate) const MANIFEST_MAGIC: [u8; 8] = *b"CAIRNMAN";

pub(crate) fn manifest_name(no: u64) -> String {
    format!("MANIFEST-{no:06}")
}

/// Parses `MANIFEST-000123` into 123.
pub(crate) fn parse_manifest_name(name: &str) -> Option<u64> {
    name.strip_prefix("MANIFEST-")?.parse().ok()
}

/// An open MANIFEST being appended to.
pub(crate) struct ManifestWriter {
    log: LogWriter,
    pub number: u64,
}

impl ManifestWriter {
    /// Creates MANIFEST-`number` holding `first` (the full version), syncs it and points
    /// `CURRENT` at it.
    pub fn create(storage: &Arc<dyn Storage>, dir: &Path, number: u64, first: &VersionEdit) -> Result<Self> {
        let path = dir.join(manifest_name(number));
        let file = storage.create_new(&path).at(&path)?;
        let mut log = LogWriter::create(file, path, MANIFEST_MAGIC)?;
        let mut buf = Vec::new();
        first.encode(&mut buf);
        log.add_record(&buf)?;
        log.sync()?;
        set_current(storage, dir, number)?;
        Ok(ManifestWriter { log, number })
    }

    /// Appends an edit and makes it durable.
    pub fn append(&mut self, edit: &VersionEdit) -> Result<()> {
        let mut buf = Vec::new();
        edit.encode(&mut buf);
        self.log.add_record(&buf)?;
        self.log.sync()
    }

    pub fn len(&self) -> u64 {
        self.log.len()
    }
}

/// File numbers the MANIFEST records ahead of use ([`FileNumbers`]): every edit reserves at
/// least this many past the next one.
pub(crate) const RESERVED_FILE_NUMBERS: u64 = 64;

/// The counter of file numbers, shared by tables, logs and MANIFESTs, kept so that the
/// MANIFEST always accounts for every number handed out.
///
/// Each edit records, as its `next_file_number`, a limit at least
/// [`RESERVED_FILE_NUMBERS`] above the next number; a number at the limit is handed out only
/// after an edit raising it is durable. So every file the engine ever made is numbered below
/// the limit its MANIFEST records, and at open a table that no version names is either an
/// obsolete one of this database (below the limit: deleted) or one the database cannot
/// account for (at or above it: set aside, never deleted).
#[derive(Debug)]
pub(crate) struct FileNumbers {
    next: u64,
    /// The limit the MANIFEST records.
    limit: u64,
}

impl FileNumbers {
    /// A counter starting at `next`, with `limit` recorded in the MANIFEST.
    pub fn new(next: u64, limit: u64) -> Self {
        FileNumbers { next, limit }
    }

    /// The limit the next edit should record: at least [`RESERVED_FILE_NUMBERS`] above the
    /// next number. Call [`FileNumbers::recorded`] once the edit is durable.
    pub fn edit_limit(&self) -> u64 {
        self.limit.max(self.next.saturating_add(RESERVED_FILE_NUMBERS))
    }

    /// Notes that an edit recording `limit` is durable.
    pub fn recorded(&mut self, limit: u64) {
        self.limit = self.limit.max(limit);
    }

    /// Hands out the next number without checking it against the limit: for the numbers a
    /// new MANIFEST is about to record a limit above (its own, and the logs made with it).
    pub fn take_unrecorded(&mut self) -> u64 {
        let n = self.next;
        self.next += 1;
        n
    }

    /// Hands out the next number, first raising the MANIFEST's limit (an edit appended to
    /// `manifest`) if the number is at it.
    pub fn alloc(&mut self, manifest: &mut ManifestWriter) -> Result<u64> {
        if self.next >= self.limit {
            let limit = self.edit_limit();
            manifest.append(&VersionEdit { next_file_number: Some(limit), ..VersionEdit::default() })?;
            self.recorded(limit);
        }
        let n = self.next;
        self.next += 1;
        Ok(n)
    }
}

fn set_current(storage: &Arc<dyn Storage>, dir: &Path, number: u64) -> Result<()> {
    let tmp = dir.join("CURRENT.tmp");
    let cur = dir.join("CURRENT");
    let mut f = storage.create(&tmp).at(&tmp)?;
    f.append(format!("{}\n", manifest_name(number)).as_bytes()).at(&tmp)?;
    f.sync().at(&tmp)?;
    drop(f);
    storage.rename(&tmp, &cur).at(&cur)?;
    storage.sync_dir(dir).at(dir)
}

/// Reads `CURRENT` and replays the MANIFEST it names. Returns the manifest number and its edits.
#[cfg(test)]
pub(crate) fn read_current(storage: &Arc<dyn Storage>, dir: &Path) -> Result<(u64, Vec<VersionEdit>)> {
    read_current_with_tail(storage, dir).map(|(number, edits, _)| (number, edits))
}

/// [`read_current`], with the torn last edit it ignored, if any.
pub(crate) fn read_current_with_tail(
    storage: &Arc<dyn Storage>,
    dir: &Path,
) -> Result<(u64, Vec<VersionEdit>, Option<crate::wal::log::DiscardedTail>)> {
    let cur = dir.join("CURRENT");
    let text = storage.read_all(&cur).at(&cur)?;
    let name = std::str::from_utf8(&text)
        .ok()
        .and_then(|s| s.strip_suffix('\n'))
        .ok_or_else(|| Error::corruption(&cur, 0, "CURRENT is not a MANIFEST name followed by a newline"))?;
    let number = parse_manifest_name(name)
        .ok_or_else(|| Error::corruption(&cur, 0, format!("CURRENT names {name:?}, not a MANIFEST")))?;
    let path: PathBuf = dir.join(name);
    let data = storage.read_all(&path).at(&path)?;
    let (records, tail) = read_log(&data, &path, MANIFEST_MAGIC)?;
    if records.is_empty() {
        let offset = match tail {
            LogTail::Torn { offset, .. } => offset,
            LogTail::Clean => 0,
        };
        return Err(Error::corruption(&path, offset, "MANIFEST holds no complete record"));
    }
    // A torn tail is the last edit, never acknowledged (its fsync did not return): ignore it.
    let ignored = match tail {
        LogTail::Torn { offset, reason } => {
            let (_, bytes) = crate::wal::log::torn_tail(&data, offset);
            Some(crate::wal::log::DiscardedTail { path: path.clone(), offset, bytes, reason })
        }
        LogTail::Clean => None,
    };
    let mut edits = Vec::with_capacity(records.len());
    for (offset, payload) in records {
        let e = VersionEdit::decode(&payload)
            .map_err(|(at, why)| Error::corruption(&path, offset + at as u64, format!("bad version edit: {why}")))?;
        edits.push(e);
    }
    Ok((number, edits, ignored))
}
