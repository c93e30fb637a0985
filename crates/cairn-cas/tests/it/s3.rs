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
    Store::open_with_remote(
        db.keyspace(cairn_kv::keyspace::CAS),
        Arc::new(FsStorage::new()),
        dir.join("packs"),
        config,
        Some(remote),
    )
    .unwrap()
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

/// A proxy in front of MinIO that answers the first `reject` requests with `503 Slow Down`
/// (as S3 does when throttling) and forwards everything after that.
struct FlakyProxy {
    port: u16,
    rejected: Arc<std::sync::atomic::AtomicUsize>,
}

impl FlakyProxy {
    fn start(upstream: u16, reject: usize) -> FlakyProxy {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let rejected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = rejected.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(client) = conn else { return };
                if count.load(Ordering::SeqCst) < reject {
                    // Read the whole request, then refuse it and close the connection.
                    let mut r = BufReader::new(client.try_clone().unwrap());
                    let mut len = 0usize;
                    loop {
                        let mut line = String::new();
                        if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let _ = std::io::copy(&mut r.by_ref().take(len as u64), &mut std::io::sink());
                    count.fetch_add(1, Ordering::SeqCst);
                    let body =
                        "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";
                    let mut c = client;
                    let _ = write!(
                        c,
                        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    continue;
                }
                let server = std::net::TcpStream::connect(("127.0.0.1", upstream)).unwrap();
                let (mut c2, mut s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut c, mut s) = (client, server);
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut c2, &mut s2);
                    let _ = s2.shutdown(std::net::Shutdown::Write);
                });
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut s, &mut c);
                    let _ = c.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        FlakyProxy { port, rejected }
    }
}

#[test]
fn server_errors_are_retried_and_bad_credentials_are_clear_errors() {
    let minio = Minio::start();
    let proxy = FlakyProxy::start(minio.port(), 4);
    let mut c = minio.config();
    c.endpoint = Some(format!("http://127.0.0.1:{}", proxy.port));
    let backend = Arc::new(S3Backend::new(c).unwrap());
    let d = tempfile::tempdir().unwrap();
    let store = open(d.path(), backend.clone());
    let ids: Vec<Id> = (0..12).map(|i| store.put(&blob(i)).unwrap().id).collect();
    store.seal().unwrap();
    assert_eq!(proxy.rejected.load(std::sync::atomic::Ordering::SeqCst), 4, "every 503 was retried");
    assert_eq!(backend.list().unwrap().len() as u64, store.stats().unwrap().packs);
    drop(store);
    std::fs::remove_dir_all(d.path().join("packs")).unwrap();
    let store = open(d.path(), backend);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), blob(i as u64));
    }

    // A wrong secret is not retried for minutes: the error says what the server said.
    let mut c = minio.config();
    c.credentials = Some((crate::minio::USER.into(), "wrong-secret".into()));
    let e = S3Backend::new(c).unwrap().list().unwrap_err().to_string();
    assert!(e.contains("SignatureDoesNotMatch") && e.contains("403"), "{e}");
    // (A retried failure says "after N retries".)
    assert!(!e.contains("retries"), "a client error is not retried: {e}");
}
