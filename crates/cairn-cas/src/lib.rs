//! `cairn-cas`: a content-addressed, deduplicating, compressed blob store.
//!
//! Content is cut into chunks by FastCDC (about 16 KiB on average, 1 MiB for content of 4 MiB
//! or more; content smaller than the minimum chunk is stored whole), each chunk is identified
//! by its hash (BLAKE3, or SHA-256 per store), compressed with zstd when that saves space, and
//! appended to a pack file. The chunk
//! index, blob chunk lists and reference counts are rows in the [`cairn_kv`] engine under the
//! prefix `cas/`. Storing content that is already present writes no chunk data.
//! Formats: `docs/format/cas.md`.

pub mod backend;
pub mod config;
mod damage;
mod error;
mod gc;
mod id;
mod index;
pub mod pack;
mod reader;
#[cfg(feature = "s3")]
pub mod s3;
mod store;
mod verify;

pub use backend::{Backend, LocalBackend, Remote};
pub use damage::RefcountFix;
pub use error::{Error, Result};
pub use gc::GcReport;
pub use id::{HashAlgo, Hasher, Id};
pub use reader::BlobReader;
#[cfg(feature = "s3")]
pub use s3::{S3Backend, S3Config};
pub use store::{Batch, BlobInfo, LargeChunks, Prepared, PutOutcome, Store, StoreConfig, StoreStats, Usage};
pub use verify::{Damage, VerifyReport};
