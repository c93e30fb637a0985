//! Engine internals that cairn-kv's fuzz targets, benchmarks and tests reach into: not API,
//! hidden from the documentation, and free to change with any commit.

pub use crate::block::Block;
pub use crate::cache::BlockCache;
pub use crate::iter::InternalIterator;
pub use crate::memtable::range_del::RangeTombstone;
pub use crate::table::builder::{TableBuilder, TableInfo};
pub use crate::table::filter::{self, FilterBuilder, TableFilter, fuse};
pub use crate::table::iter::TableIter;
pub use crate::table::reader::TableReader;
pub use crate::table::table_cache::TableCache;
pub use crate::version::edit::{FileInfo, VersionEdit};
pub use crate::wal::log;
pub use crate::wal::record::{DecodedRecord, decode_record};

/// Internal keys (`docs/format/kv.md`).
pub mod key {
    pub use crate::key::{SeqNo, ValueKind, compare_internal, internal_key, lookup_key, user_key};
}
