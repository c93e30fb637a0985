//! Shared by the end-to-end tests: a daemon under test, running the binary, raw HTTP, and
//! masking what differs between two runs of the same session (times, the data directory).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_server::client;
use serde_json::Value;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cairn")
}

pub fn socket(dir: &Path) -> PathBuf {
    cairn::Layout::new(dir).socket()
}

/// A token long enough to be accepted.
pub const TOKEN: &str = "test-token-0123456789";
/// The read-only token of tests.
pub const READ_TOKEN: &str = "read-only-token-0123456789";

pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
}

impl Daemon {
    pub fn start(dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_env(dir, extra, &[])
    }

    pub fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.arg("--dir").arg(dir).arg("serve").args(extra).stdin(Stdio::null()).stdout(Stdio::null());
        cmd.stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let sock = socket(dir);
        let t = Instant::now();
        while client::connect_unix(&sock, None).is_err() {
            if let Some(status) = child.try_wait().unwrap() {
                let mut err = String::new();
                child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
                panic!("daemon exited ({status}): {err}");
            }
            assert!(t.elapsed() < Duration::from_secs(30), "daemon did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, dir: dir.to_path_buf() }
    }

    pub fn client(&self) -> client::Client {
        client::connect_unix(&socket(&self.dir), None).unwrap()
    }

    pub fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
        assert!(out.status.success(), "daemon exit {:?}", out.status);
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub fn rss_kib(&self) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cairn --dir DIR ARGS` in `cwd` (default: the current directory) with `stdin`.
pub fn run_in(cwd: Option<&Path>, dir: &Path, args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    if let Some(c) = cwd {
        cmd.current_dir(c);
    }
    cmd.arg("--dir").arg(dir).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().unwrap();
    if let Some(s) = stdin {
        // A command that refuses its arguments may exit before reading stdin; the broken
        // pipe is then not what a test judges (the exit code is).
        match child.stdin.take().unwrap().write_all(s) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.unwrap(),
        }
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn run(dir: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    run_in(None, dir, args, stdin.map(str::as_bytes))
}

/// Fields that differ between two runs of the same operations: times.
pub const TIMING_FIELDS: &[&str] =
    &["took_ms", "seconds", "load_secs", "get_secs", "scan_secs", "created", "updated", "added", "created_ns"];

/// `v` with every timing field set to 0 (at any depth).
pub fn without_timing(mut v: Value) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(o) => {
                for (k, x) in o.iter_mut() {
                    if TIMING_FIELDS.contains(&k.as_str()) && x.is_number() {
                        *x = Value::from(0);
                    } else {
                        walk(x);
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// Output with timings, dates and the data directory's own name masked (JSON lines with their
/// timing fields zeroed).
pub fn normalize(s: &str, dir: &Path) -> String {
    let s = s.replace(&dir.display().to_string(), "<DIR>");
    let s: String = s
        .split_inclusive('\n')
        .map(|line| match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => format!("{}\n", without_timing(v)),
            _ => line.to_string(),
        })
        .collect();
    let mut s = s;
    for unit in [" docs/s", " files/s"] {
        let mut masked = String::new();
        let mut rest = s.as_str();
        while let Some(i) = rest.find(unit) {
            let digits = rest[..i].trim_end_matches(|c: char| c.is_ascii_digit());
            masked.push_str(digits);
            masked.push('#');
            masked.push_str(unit);
            rest = &rest[i + unit.len()..];
        }
        masked.push_str(rest);
        s = masked;
    }
    let mut out = String::new();
    for word in s.split_inclusive([' ', '\t', '\n', '(', ')']) {
        let core = word.trim_end_matches([' ', '\t', '\n', '(', ')']);
        let tail = &word[core.len()..];
        let timing = core.ends_with('s') && core[..core.len() - 1].trim_end_matches('m').parse::<f64>().is_ok();
        let date = core.len() == 20 && core.as_bytes()[4] == b'-' && core.ends_with('Z');
        if timing || date || core.parse::<f64>().is_ok_and(|_| tail.starts_with(' ') && word.contains('.')) {
            out.push('#');
            out.push_str(tail);
        } else {
            out.push_str(word);
        }
    }
    out
}

/// One HTTP/1.1 request: (status, body).
pub fn http(addr: &str, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
    http_h(addr, method, path, token, body, &[])
}

/// One HTTP/1.1 request with extra header lines: (status, body).
pub fn http_h(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    headers: &[&str],
) -> (u16, String) {
    let (status, _, body) = http_full(addr, method, path, token, body.map(str::as_bytes), headers);
    (status, body)
}

/// One HTTP/1.1 request: (status, response headers, body).
pub fn http_full(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    headers: &[&str],
) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    let mut has_type = false;
    for h in headers {
        has_type |= h.to_ascii_lowercase().starts_with("content-type");
        req += &format!("{h}\r\n");
    }
    if let Some(t) = token {
        req += &format!("Authorization: Bearer {t}\r\n");
    }
    let mut bytes = Vec::new();
    if let Some(b) = body {
        if !has_type {
            req += "Content-Type: application/json\r\n";
        }
        req += &format!("Content-Length: {}\r\n\r\n", b.len());
        bytes.extend_from_slice(req.as_bytes());
        bytes.extend_from_slice(b);
    } else {
        req += "Content-Length: 0\r\n\r\n";
        bytes.extend_from_slice(req.as_bytes());
    }
    s.write_all(&bytes).unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let resp = String::from_utf8_lossy(&resp).into_owned();
    let status = resp[9..12].parse().unwrap();
    let (head, body) = resp.split_once("\r\n\r\n").map(|(h, b)| (h.to_string(), b.to_string())).unwrap_or_default();
    // Bodies are small: undo chunked encoding if used.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        let mut out = String::new();
        let mut rest = body.as_str();
        while let Some((len, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(len.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            out += &after[..n];
            rest = &after[n + 2..];
        }
        out
    } else {
        body
    };
    (status, head, body)
}

/// A free loopback port.
pub fn free_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    format!("127.0.0.1:{port}")
}
