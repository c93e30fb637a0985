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
    let store = Store::open(db.keyspace(cairn_kv::keyspace::CAS), s, "/d/packs", config).unwrap();
    (db, store)
}

pub use cairn_kv::testing::noise;
