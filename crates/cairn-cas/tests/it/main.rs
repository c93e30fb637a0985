//! Integration tests of `cairn-cas`.

mod crash;
#[cfg(feature = "s3")]
#[path = "../support/minio.rs"]
mod minio;
mod remote;
#[cfg(feature = "s3")]
mod s3;
mod store;

use std::sync::Arc;

use cairn_cas::{Store, StoreConfig};
use cairn_kv::{Db, MemStorage, Options, Storage};

/// Small packs so tests span several.
pub fn config() -> StoreConfig {
    StoreConfig { pack_target: 256 << 10, ..StoreConfig::default() }
}

/// Opens the engine and the store on `storage`.
pub fn open(storage: &MemStorage, config: StoreConfig) -> (Db, Store) {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    let db = Db::open_with_storage("/d/kv", Options::small_for_tests(), s.clone()).unwrap();
    let store = Store::open(db.clone(), s, "/d/packs", config).unwrap();
    (db, store)
}

/// Deterministic pseudo-random bytes (incompressible).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
