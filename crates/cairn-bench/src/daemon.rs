//! A `cairn serve` daemon started by a benchmark on a data directory of its own: starting it,
//! connecting clients over its Unix socket, reading its memory (`/proc/<pid>/status`), adding a
//! document through it, and stopping it (SIGTERM, then wait) when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use cairn_server::client::{self, Client};

/// A running daemon.
pub struct Daemon {
    child: Child,
    /// Its Unix socket.
    pub sock: PathBuf,
}

impl Daemon {
    /// Starts `bin --dir dir serve` and waits (up to 30 s) until it accepts a connection.
    pub fn start(bin: &Path, dir: &Path) -> Result<Daemon> {
        let child = Command::new(bin)
            .arg("--dir")
            .arg(dir)
            .arg("serve")
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let sock = cairn_app::Layout::new(dir).socket();
        let mut daemon = Daemon { child, sock };
        let t = Instant::now();
        while client::connect_unix(&daemon.sock, None).is_err() {
            if let Some(status) = daemon.child.try_wait()? {
                bail!("the daemon exited with {status} before it accepted a connection");
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("the daemon did not come up");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Dropping `daemon` on an error above stops the child.
        Ok(daemon)
    }

    /// A new connection.
    pub fn client(&self) -> Result<Client> {
        client::connect_unix(&self.sock, None)
    }

    /// The daemon's peak resident set (VmHWM), MiB.
    pub fn peak_rss_mib(&self) -> f64 {
        proc_status_mib(self.child.id(), "VmHWM:")
    }

    /// The daemon's resident set now (VmRSS), MiB.
    pub fn rss_mib(&self) -> f64 {
        proc_status_mib(self.child.id(), "VmRSS:")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// A `kB` field of `/proc/<pid>/status` in MiB (0 when the process or field is gone).
pub fn proc_status_mib(pid: u32, field: &str) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: f64 = s
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// Adds named documents, all with `tags`, in one request through the daemon.
pub fn add(c: &mut Client, docs: Vec<(String, Vec<u8>)>, tags: Vec<String>) -> cairn_app::Result<cairn_app::Response> {
    let docs = docs
        .into_iter()
        .map(|(name, content)| cairn_app::docs::NamedContent {
            name,
            content: None,
            content_base64: Some(cairn_app::text::base64(&content)),
        })
        .collect();
    let req = cairn_app::docs::AddRequest { docs, tags, ..Default::default() };
    c.execute(&cairn_app::Request::Add(req), None, None)
}
