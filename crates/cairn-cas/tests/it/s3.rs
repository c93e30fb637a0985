//! The S3 backend against a real MinIO server on loopback. The MinIO binary comes from
//! `CAIRN_MINIO`, `target/tools/minio`, `~/go/bin/minio` or `PATH`; when none exists, the test
//! installs it with `go install github.com/minio/minio@latest` into `target/tools` (about three
//! minutes, once). Each test starts its own server on a free port with a temporary data
//! directory and stops it at the end.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_cas::{Backend, Id, Remote, S3Backend, S3Config, Store, StoreConfig};
use cairn_kv::{Db, FsStorage, Options};

use crate::noise;

const USER: &str = "cairnadmin";
const SECRET: &str = "cairn-secret-123";
const BUCKET: &str = "cairn-test";

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools")
}

/// The MinIO binary, installed with the Go toolchain if needed.
fn minio_binary() -> PathBuf {
    static ONCE: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let mut found = ONCE.lock().unwrap();
    if let Some(p) = found.as_ref() {
        return p.clone();
    }
    let home = std::env::var("HOME").unwrap_or_default();
    let mut candidates: Vec<PathBuf> = std::env::var("CAIRN_MINIO").ok().map(PathBuf::from).into_iter().collect();
    candidates.push(tools_dir().join("minio"));
    candidates.push(Path::new(&home).join("go/bin/minio"));
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        *found = Some(p.clone());
        return p.clone();
    }
    if let Ok(out) = Command::new("sh").args(["-c", "command -v minio"]).output()
        && out.status.success()
    {
        let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        *found = Some(p.clone());
        return p;
    }
    std::fs::create_dir_all(tools_dir()).unwrap();
    eprintln!("installing MinIO with `go install github.com/minio/minio@latest` (a few minutes, once)");
    let status = Command::new("go")
        .args(["install", "github.com/minio/minio@latest"])
        .env("GOBIN", tools_dir())
        .status()
        .expect("the Go toolchain is needed to install MinIO for this test");
    assert!(status.success(), "go install of MinIO failed");
    let p = tools_dir().join("minio");
    *found = Some(p.clone());
    p
}

/// A MinIO server on 127.0.0.1, killed on drop.
struct Minio {
    child: Option<Child>,
    data: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Minio {
    fn start() -> Minio {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // A top-level directory of the drive is a bucket.
        std::fs::create_dir_all(data.join(BUCKET)).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut m = Minio { child: None, data, port, _dir: dir };
        m.restart();
        m
    }

    fn restart(&mut self) {
        let console = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(minio_binary())
            .arg("server")
            .arg(&self.data)
            .args(["--address", &format!("127.0.0.1:{}", self.port)])
            .args(["--console-address", &format!("127.0.0.1:{console}")])
            .env("MINIO_ROOT_USER", USER)
            .env("MINIO_ROOT_PASSWORD", SECRET)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start MinIO");
        self.child = Some(child);
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(t.elapsed() < Duration::from_secs(30), "MinIO did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn config(&self) -> S3Config {
        let mut c = S3Config::new(BUCKET);
        c.endpoint = Some(format!("http://127.0.0.1:{}", self.port));
        c.prefix = "packs/".into();
        c.credentials = Some((USER.into(), SECRET.into()));
        c.timeout = Duration::from_secs(5);
        c.retry_timeout = Duration::from_secs(60);
        c
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.stop();
    }
}

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
