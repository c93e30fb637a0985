//! A MinIO server on loopback for tests, shared by cairn-cas's and cairn-cli's test binaries
//! (included with `#[path]`). The binary comes from `CAIRN_MINIO`, `target/tools/minio`,
//! `~/go/bin/minio` or `PATH`; when none exists, it is installed with
//! `go install github.com/minio/minio@latest` into `target/tools` (about three minutes, once).
//! Each [`Minio`] is its own server on a free port with a temporary data directory, killed on
//! drop.

// Each including test binary uses a different part.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_cas::S3Config;

pub const USER: &str = "cairnadmin";
pub const SECRET: &str = "cairn-secret-123";
pub const BUCKET: &str = "cairn-test";

fn tools_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools")
}

/// The MinIO binary, installed with the Go toolchain if needed.
pub fn minio_binary() -> PathBuf {
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
pub struct Minio {
    child: Option<Child>,
    data: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Minio {
    pub fn start() -> Minio {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // A top-level directory of the drive is a bucket.
        std::fs::create_dir_all(data.join(BUCKET)).unwrap();
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut m = Minio { child: None, data, port, _dir: dir };
        m.restart();
        m
    }

    pub fn restart(&mut self) {
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

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server's data directory (buckets are its top-level directories).
    pub fn data(&self) -> &Path {
        &self.data
    }

    /// The standard credential variables for a client process.
    pub fn credentials_env(&self) -> [(&'static str, &'static str); 2] {
        [("AWS_ACCESS_KEY_ID", USER), ("AWS_SECRET_ACCESS_KEY", SECRET)]
    }

    /// A client configuration: bucket [`BUCKET`], prefix `packs/`, the root credentials, 5 s
    /// per request.
    pub fn config(&self) -> S3Config {
        let mut c = S3Config::new(BUCKET);
        c.endpoint = Some(self.endpoint());
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
