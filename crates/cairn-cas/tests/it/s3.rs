//! The S3 backend against a real MinIO server on loopback (see `tests/support/minio.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use cairn_cas::{Backend, Id, Remote, S3Backend, Store, StoreConfig};
use cairn_kv::{Db, FsStorage, Options};

use crate::minio::Minio;
use crate::noise;

fn blob(i: u64) -> Vec<u8> {
    let mut v = noise(i % 5, 40_000);
    v.extend_from_slice(&noise(900 + i, 60_000));
    v
}

fn open(dir: &Path, backend: Arc<S3Backend>) -> Store {
    let db = Db::open(dir.join("kv"), Options::small_for_tests()).unwrap();
    let config = StoreConfig { pack_target: 512 << 10, ..StoreConfig::default() };
    let remote = Remote { backend, cache_bytes: 1 << 20 };
    Store::open_with_remote(db, Arc::new(FsStorage::new()), dir.join("packs"), config, Some(remote)).unwrap()
}

#[test]
fn packs_round_trip_through_minio_with_verify_and_gc() {
    let minio = Minio::start();
    let backend = Arc::new(S3Backend::new(minio.config()).unwrap());
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), backend.clone());
    let ids: Vec<Id> = (0..40).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    let listed = backend.list().unwrap();
    assert!(listed.len() >= 5, "{listed:?}");
    assert_eq!(listed.len() as u64, store.stats().unwrap().packs);
    // A multipart upload (a pack over the part size) and ranged reads.
    let big = noise(77, 20 << 20);
    let f = d.path().join("big");
    std::fs::write(&f, &big).unwrap();
    backend.upload(999_999, &f).unwrap();
    assert_eq!(backend.read_at(999_999, 12 << 20, 1000).unwrap(), big[12 << 20..(12 << 20) + 1000]);
    assert_eq!(backend.download(999_999).unwrap(), big);
    drop(store);
    // Cold cache: every pack comes from MinIO.
    std::fs::remove_dir_all(d.path().join("packs")).unwrap();
    let store = open(d.path(), backend.clone());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
    assert!(store.verify().unwrap().is_ok());
    for id in ids.iter().step_by(2) {
        store.release(id).unwrap();
    }
    let r = store.gc(1.0).unwrap();
    assert!(r.packs_collected > 0 && r.orphan_packs == 1, "{r:?} (the 20 MiB object is an orphan)");
    let s = store.stats().unwrap();
    assert_eq!(s.stored_bytes, s.live_bytes);
    assert_eq!(backend.list().unwrap().len() as u64, s.packs);
    for (i, id) in ids.iter().enumerate().skip(1).step_by(2) {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn minio_stopped_mid_ingest_loses_nothing() {
    let mut minio = Minio::start();
    let d = tempfile::tempdir().unwrap();
    let mut acked = Vec::new();
    {
        // Short retries, so that an outage longer than them fails the upload.
        let mut c = minio.config();
        c.retry_timeout = Duration::from_secs(2);
        c.max_retries = 2;
        let store = open(d.path(), Arc::new(S3Backend::new(c).unwrap()));
        for i in 0..20 {
            if i == 8 {
                minio.stop();
            }
            // Commits are durable locally; a failed upload is an error the caller sees.
            match store.put(&blob(i)) {
                Ok(o) => acked.push((i, o.id)),
                Err(e) => {
                    assert!(e.to_string().contains("packs/pack-"), "the error names the pack: {e}");
                    let id = cairn_cas::HashAlgo::Blake3.hash(&blob(i));
                    if store.contains(&id).unwrap() {
                        acked.push((i, id));
                    }
                }
            }
        }
    }
    assert!(acked.len() >= 8);
    minio.restart();
    // Reopened with MinIO back: what was left local is uploaded, nothing acknowledged is lost.
    let backend = Arc::new(S3Backend::new(minio.config()).unwrap());
    let store = open(d.path(), backend.clone());
    store.seal().unwrap();
    assert_eq!(backend.list().unwrap().len() as u64, store.stats().unwrap().packs);
    drop(store);
    std::fs::remove_dir_all(d.path().join("packs")).unwrap();
    let store = open(d.path(), backend);
    for (i, id) in &acked {
        assert_eq!(store.get(id).unwrap(), blob(*i), "blob {i}");
    }
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn a_short_outage_is_ridden_out_by_retries() {
    let mut minio = Minio::start();
    let backend = Arc::new(S3Backend::new(minio.config()).unwrap());
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), backend.clone());
    let ids: Vec<Id> = (0..6).map(|i| store.put(&blob(i)).unwrap().id).collect();
    minio.stop();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        minio.restart();
        minio
    });
    // Uploads during the outage retry until the server is back.
    let more: Vec<Id> = (6..14).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    let _minio = restarter.join().unwrap();
    assert_eq!(backend.list().unwrap().len() as u64, store.stats().unwrap().packs);
    drop(store);
    std::fs::remove_dir_all(d.path().join("packs")).unwrap();
    let store = open(d.path(), backend);
    for (i, id) in ids.iter().chain(&more).enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }
}
