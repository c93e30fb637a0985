//! One module per engine under test, each behind its cargo feature.

#[cfg(feature = "cairn")]
pub mod cairn;
#[cfg(feature = "fjall")]
pub mod fjall;
#[cfg(feature = "redb")]
pub mod redb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
#[cfg(feature = "sled")]
pub mod sled;
