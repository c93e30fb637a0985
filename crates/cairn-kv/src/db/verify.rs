//! [`crate::Db::verify_detailed`]: every live table checked block by block, going on past
//! damage, with the user keys each damaged block may hold ([`VerifyReport`]).

use std::path::PathBuf;

use bytes::Bytes;

use crate::db::inner::DbInner;
use crate::table::table_cache::TableCache;
use crate::{Error, Result};

/// What [`crate::Db::verify_detailed`] found.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Tables checked.
    pub tables: u64,
    /// Entries in the intact blocks.
    pub entries: u64,
    /// Every damaged block (or table), in level and file order.
    pub damaged: Vec<DamagedBlock>,
}

impl VerifyReport {
    /// Whether nothing was damaged.
    pub fn is_clean(&self) -> bool {
        self.damaged.is_empty()
    }
}

/// A damaged data block of a live table, or a whole table that does not open (footer, index
/// or filter damaged, or the file missing), with the user keys it may hold. The keys come
/// from the table's index (the last key of the block before it, the block's own last key) or,
/// for a whole table, from the MANIFEST; a key a damaged block held is within
/// `first_key..=last_key`.
#[derive(Debug)]
#[non_exhaustive]
pub struct DamagedBlock {
    /// The table file.
    pub table: PathBuf,
    /// The table's level.
    pub level: usize,
    /// Offset of the damaged block in the file (for a table that does not open, where the
    /// damage was found).
    pub offset: u64,
    /// Bytes of the damaged part (the whole file for a table that does not open; 0 when
    /// not known).
    pub len: u64,
    /// Whether the whole table is unreadable, not one block.
    pub whole_table: bool,
    /// The lowest user key the damaged part may hold.
    pub first_key: Bytes,
    /// The highest user key the damaged part may hold.
    pub last_key: Bytes,
    /// What was wrong.
    pub error: Error,
}

pub(crate) fn verify_detailed(inner: &DbInner) -> Result<VerifyReport> {
    let sv = inner.sv.load_full();
    let mut report = VerifyReport::default();
    for (level, files) in sv.version.levels.iter().enumerate() {
        for f in files {
            report.tables += 1;
            let table = TableCache::table_path(&inner.dir, f.no());
            let (smallest, largest) = (f.info.smallest_user(), f.info.largest_user());
            let check = match f.open() {
                Ok(reader) => reader.check_blocks(None)?,
                Err(error) => {
                    let offset = match &error {
                        Error::Corruption { offset, .. } => *offset,
                        _ => 0,
                    };
                    report.damaged.push(DamagedBlock {
                        table,
                        level,
                        offset,
                        len: f.info.size,
                        whole_table: true,
                        first_key: Bytes::copy_from_slice(smallest),
                        last_key: Bytes::copy_from_slice(largest),
                        error,
                    });
                    continue;
                }
            };
            report.entries += check.entries;
            for d in check.damaged {
                report.damaged.push(DamagedBlock {
                    table: table.clone(),
                    level,
                    offset: d.offset,
                    len: d.len,
                    whole_table: false,
                    first_key: Bytes::from(d.first_key.unwrap_or_else(|| smallest.to_vec())),
                    last_key: Bytes::from(d.last_key.unwrap_or_else(|| largest.to_vec())),
                    error: d.error,
                });
            }
        }
    }
    Ok(report)
}
