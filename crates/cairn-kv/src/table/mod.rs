//! SSTables: their blocks (made of [`crate::block`]s) and filters ([`filter`]), block compression, the
//! builder and the reader, and the cache of open tables.

pub mod builder;
pub mod compression;
pub mod filter;
pub mod format;
pub mod iter;
pub mod reader;
pub mod table_cache;
