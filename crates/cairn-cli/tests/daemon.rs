//! End-to-end tests of `cairn serve`: the CLI through the daemon, raw frames, cancellation,
//! slow and vanishing clients, TCP tokens, the serve lock, SIGTERM and kill -9.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cairn_proto::frame::{self, HEADER_LEN};
use cairn_proto::{ClientMsg, ErrorCode, PROTOCOL_VERSION, Request, ServerMsg};
use cairn_server::client;
use serde_json::{Value, json};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_cairn")
}

struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(dir: &Path, extra: &[&str]) -> Daemon {
        Daemon::start_env(dir, extra, &[])
    }

    fn start_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.arg("--dir").arg(dir).arg("serve").args(extra).stdin(Stdio::null()).stdout(Stdio::null());
        cmd.stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let sock = cairn_server::socket_path(dir);
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

    fn client(&self) -> client::Client {
        client::connect_unix(&cairn_server::socket_path(&self.dir), None).unwrap()
    }

    fn stop(mut self) -> String {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let out = std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap()).wait_with_output().unwrap();
        assert!(out.status.success(), "daemon exit {:?}", out.status);
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    fn rss_kib(&self) -> u64 {
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

fn run(dir: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("--dir").arg(dir).args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn().unwrap();
    if let Some(s) = stdin {
        child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Output with timings, dates and the data directory's own name masked.
fn normalize(s: &str, dir: &Path) -> String {
    let mut s = s.replace(&dir.display().to_string(), "<DIR>");
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

/// The same session of commands gives the same output embedded and through the daemon.
#[test]
fn cli_output_is_the_same_through_the_daemon() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("cache.rs"), "fn handle_request() {}\n// group commit and fsync\n").unwrap();
    std::fs::write(src.join("notes.md"), "# Notes\nThe group commit batches writers.\n").unwrap();
    std::fs::write(src.join("sub/a.txt"), "alpha beta\ngamma\n").unwrap();
    let session: Vec<(Vec<&str>, Option<&str>)> = vec![
        (vec!["add", "-r", "src", "--tag", "t1"], None),
        (vec!["add", "-", "--name", "note", "--meta", "k=v"], Some("piped words for the memory\n")),
        (vec!["search", "group commit"], None),
        (vec!["search", "handle", "--json", "--no-snippets"], None),
        (vec!["ls", "--tag", "t1"], None),
        (vec!["cat", "note"], None),
        (vec!["tag", "note", "-t", "x"], None),
        (vec!["meta", "set", "note", "--set", "a=b"], None),
        (vec!["meta", "get", "note"], None),
        (vec!["versions", "note"], None),
        (vec!["grep", "-i", "GROUP", "-C", "1"], None),
        (vec!["grep", "nothing-matches-this"], None),
        (vec!["get", "nope"], None),
        (vec!["kv", "put", "k1", "v1"], None),
        (vec!["kv", "get", "k1"], None),
        (vec!["kv", "scan", "--prefix", "k", "--json"], None),
        (vec!["snapshot", "src", "--name", "s1"], None),
        (vec!["snapshots"], None),
        (vec!["checkout", "s1", "out", "--mode", "copy"], None),
        (vec!["du", "s1"], None),
        (vec!["rm", "note"], None),
        (vec!["ls"], None),
    ];
    let mut transcripts = Vec::new();
    for remote in [false, true] {
        let root = t.path().join(if remote { "remote" } else { "embedded" });
        std::fs::create_dir_all(&root).unwrap();
        let d = root.join("data");
        let daemon = remote.then(|| Daemon::start(&d, &[]));
        let mut transcript = String::new();
        for (args, stdin) in &session {
            // Relative paths are the caller's: run from a directory holding `src`.
            let mut cmd = Command::new(bin());
            cmd.current_dir(t.path()).arg("--dir").arg(&d);
            if remote {
                cmd.arg("--remote");
            }
            cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
            cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
            let mut child = cmd.spawn().unwrap();
            if let Some(s) = stdin {
                child.stdin.take().unwrap().write_all(s.as_bytes()).unwrap();
            }
            let out = child.wait_with_output().unwrap();
            transcript += &format!(
                "$ {args:?} -> {}\n{}{}",
                out.status.code().unwrap(),
                normalize(&String::from_utf8_lossy(&out.stdout), &d),
                normalize(&String::from_utf8_lossy(&out.stderr), &d)
            );
            std::fs::remove_dir_all(t.path().join("out")).ok();
        }
        if let Some(d) = daemon {
            d.stop();
        }
        transcripts.push(transcript);
    }
    assert!(transcripts[0].contains("added 3 documents"), "{}", transcripts[0]);
    assert!(transcripts[0].contains("src/cache.rs:2:// group commit"), "{}", transcripts[0]);
    assert_eq!(transcripts[0], transcripts[1]);
}

fn raw_frame(stream: u32, msg: &ClientMsg) -> Vec<u8> {
    msg.to_frame(stream, true)
}

fn hello() -> Vec<u8> {
    raw_frame(
        0,
        &ClientMsg::Hello {
            min_version: PROTOCOL_VERSION,
            max_version: PROTOCOL_VERSION,
            client: "t".into(),
            token: None,
        },
    )
}

/// Reads frames until the server closes; returns the decoded messages.
fn read_all(s: &mut UnixStream) -> Vec<ServerMsg> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let mut msgs = Vec::new();
    let mut at = 0;
    while let Ok(Some((f, n))) = frame::decode(&buf[at..], 1 << 30) {
        msgs.push(ServerMsg::decode(&f.payload).unwrap());
        at += n;
    }
    msgs
}

fn is_error(m: &ServerMsg, code: ErrorCode) -> bool {
    matches!(m, ServerMsg::Error { code: c, .. } if *c == code)
}

#[test]
fn malformed_oversized_and_truncated_frames_never_take_the_daemon_down() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let daemon = Daemon::start(&d, &[]);
    let sock = cairn_server::socket_path(&d);
    // Permissions: only the owner may connect.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777, 0o600);

    // Garbage instead of a frame.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let msgs = read_all(&mut s);
    assert!(msgs.iter().all(|m| is_error(m, ErrorCode::BadRequest)), "{msgs:?}");

    // A header announcing 1 GiB: refused from the header alone, nothing allocated.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&hello()).unwrap();
    let mut big = Vec::new();
    frame::encode(&mut big, 1, 0, &[]);
    big[12..16].copy_from_slice(&(1u32 << 30).to_le_bytes());
    s.write_all(&big[..HEADER_LEN]).unwrap();
    let msgs = read_all(&mut s);
    assert!(matches!(msgs[0], ServerMsg::Welcome { .. }));
    assert!(matches!(&msgs[1], ServerMsg::Error { message, .. } if message.contains("exceeds")), "{msgs:?}");

    // A bad checksum.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&hello()).unwrap();
    let mut f = raw_frame(1, &ClientMsg::Request(Request::Ping));
    let last = f.len() - 1;
    f[last] ^= 0xff;
    s.write_all(&f).unwrap();
    let msgs = read_all(&mut s);
    assert!(matches!(&msgs[1], ServerMsg::Error { message, .. } if message.contains("checksum")), "{msgs:?}");

    // A valid frame carrying a malformed message: an error for that stream, the connection
    // goes on.
    let mut c = daemon.client();
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&hello()).unwrap();
    let mut bad = Vec::new();
    frame::encode(&mut bad, 5, cairn_proto::FLAG_END, &[0xff, 0xff, 0xff]);
    s.write_all(&bad).unwrap();
    s.write_all(&raw_frame(6, &ClientMsg::Request(Request::Ping))).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let msgs = read_all(&mut s);
    assert!(is_error(&msgs[1], ErrorCode::BadRequest), "{msgs:?}");

    // A frame cut in the middle, then the client leaves.
    for cut in [3, HEADER_LEN - 1, HEADER_LEN + 2] {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.write_all(&hello()).unwrap();
        let f = raw_frame(
            1,
            &ClientMsg::Request(Request::Search {
                query: "x".into(),
                limit: 1,
                offset: 0,
                words: false,
                snippets: false,
                filter: Default::default(),
            }),
        );
        s.write_all(&f[..cut]).unwrap();
        drop(s);
    }
    // No hello: the first message must be Hello.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&raw_frame(1, &ClientMsg::Request(Request::Ping))).unwrap();
    let msgs = read_all(&mut s);
    assert!(is_error(&msgs[0], ErrorCode::BadRequest), "{msgs:?}");
    // A version nobody speaks.
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(&raw_frame(
        0,
        &ClientMsg::Hello { min_version: 99, max_version: 100, client: "t".into(), token: None },
    ))
    .unwrap();
    let msgs = read_all(&mut s);
    assert!(is_error(&msgs[0], ErrorCode::Version), "{msgs:?}");

    // Still serving, on an old connection and new ones.
    assert_eq!(c.call(Request::Ping).unwrap(), ServerMsg::Pong);
    assert_eq!(daemon.client().call(Request::Ping).unwrap(), ServerMsg::Pong);
    daemon.stop();
}

#[test]
fn streams_are_cancellable_and_vanishing_or_slow_clients_cost_nothing_lasting() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let daemon = Daemon::start(&d, &[]);
    // Cancel: a 64 GiB stream stops after a few frames; the connection stays usable.
    let mut c = daemon.client();
    let stream = c.start(Request::Echo { chunks: 1 << 20, chunk_len: 64 << 10 }).unwrap();
    for _ in 0..4 {
        assert!(matches!(c.recv().unwrap(), (false, ServerMsg::Data(_))));
    }
    c.cancel(stream).unwrap();
    let mut frames = 0;
    loop {
        let (end, m) = c.recv().unwrap();
        frames += 1;
        if end {
            assert!(is_error(&m, ErrorCode::Cancelled), "{m:?}");
            break;
        }
    }
    assert!(frames < 100, "{frames} frames after cancel");
    assert_eq!(c.call(Request::Ping).unwrap(), ServerMsg::Pong);

    // A slow client that stops reading mid-stream does not stall anybody else.
    let mut slow = daemon.client();
    slow.start(Request::Echo { chunks: 1 << 20, chunk_len: 64 << 10 }).unwrap();
    let mut other = daemon.client();
    for _ in 0..50 {
        assert_eq!(other.call(Request::Ping).unwrap(), ServerMsg::Pong);
    }
    let baseline = daemon.rss_kib();
    // Clients that vanish mid-stream free what they held.
    for _ in 0..64 {
        let mut v = daemon.client();
        v.start(Request::Echo { chunks: 1 << 20, chunk_len: 64 << 10 }).unwrap();
        v.recv().unwrap();
        drop(v);
    }
    drop(slow);
    assert_eq!(other.call(Request::Ping).unwrap(), ServerMsg::Pong);
    let after = daemon.rss_kib();
    // 64 abandoned 64 GiB streams: memory held is bounded by the per-connection queues.
    assert!(after < baseline + 256 * 1024, "RSS grew from {baseline} KiB to {after} KiB");
    daemon.stop();
}

#[test]
fn tcp_needs_the_token() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    // Refuses to listen on TCP without a token.
    let (code, _, err) = run(&d, &["serve", "--tcp", "127.0.0.1:0"], None);
    assert_ne!(code, 0);
    assert!(err.contains("token"), "{err}");

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_env(&d, &["--tcp", &addr], &[("CAIRN_TOKEN", "s3cret")]);
    let url = format!("tcp://{addr}");
    let e = client::connect(&url, None).err().unwrap();
    assert!(format!("{e:#}").contains("Unauthorized"), "{e:#}");
    let e = client::connect(&url, Some("s3creT")).err().unwrap();
    assert!(format!("{e:#}").contains("Unauthorized"), "{e:#}");
    let mut c = client::connect(&url, Some("s3cret")).unwrap();
    assert_eq!(c.call(Request::Ping).unwrap(), ServerMsg::Pong);
    // The CLI through TCP.
    let mut cmd = Command::new(bin());
    cmd.args(["--addr", &url, "kv", "put", "a", "b"]).env("CAIRN_TOKEN", "s3cret");
    assert!(cmd.status().unwrap().success());
    let mut cmd = Command::new(bin());
    let out = cmd.args(["--addr", &url, "kv", "get", "a"]).env("CAIRN_TOKEN", "s3cret").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b\n");
    daemon.stop();
}

#[test]
fn one_daemon_per_dir_sigterm_loses_nothing_and_kill_9_recovers() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let daemon = Daemon::start(&d, &[]);
    let (code, _, err) = run(&d, &["serve"], None);
    assert_ne!(code, 0);
    assert!(err.contains("already serves"), "{err}");

    // Writers keep adding while SIGTERM arrives; every acknowledged add survives.
    let sock = cairn_server::socket_path(&d);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = client::connect_unix(&sock, None) else { return acked };
                for i in 0.. {
                    let path = format!("w{w}/doc{i}");
                    let req = Request::Add {
                        path: path.clone(),
                        content: format!("writer {w} document {i}").into_bytes(),
                        tags: vec![],
                        meta: vec![],
                    };
                    match c.call(req) {
                        Ok(ServerMsg::Added { .. }) => acked.push(path),
                        _ => break,
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let err = daemon.stop();
    assert!(err.contains("stopped"), "{err}");
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(!acked.is_empty());
    assert!(!sock.exists(), "the socket is removed on shutdown");
    let (code, listing, _) = run(&d, &["ls"], None);
    assert_eq!(code, 0);
    for p in &acked {
        assert!(listing.contains(&format!("{p}\t")), "acknowledged {p} lost");
    }
    let (_, hits, _) = run(&d, &["search", "writer", "-n", "1"], None);
    // Exactly the acknowledged adds: in-flight ones were finished and answered before exit.
    assert!(hits.contains(&format!("1 of {} matching", acked.len())), "{hits} vs {} acked", acked.len());

    // kill -9: the lock dies with the process; the stale socket is replaced.
    let mut daemon = Daemon::start(&d, &[]);
    let mut c = daemon.client();
    let added = c.call(Request::Add {
        path: "after".into(),
        content: b"kill nine survivor".to_vec(),
        tags: vec![],
        meta: vec![],
    });
    assert!(matches!(added, Ok(ServerMsg::Added { .. })));
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    assert!(sock.exists());
    // Embedded use sees the stale socket, finds nobody, and runs in-process.
    let (code, out, err) = run(&d, &["search", "survivor"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("after"), "{out}");
    let daemon = Daemon::start(&d, &[]);
    let (code, out, _) = run(&d, &["--remote", "cat", "after"], None);
    assert_eq!((code, out.as_str()), (0, "kill nine survivor"));
    daemon.stop();
}

fn http(addr: &str, method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> (u16, String) {
    http_h(addr, method, path, token, body, &[])
}

fn http_h(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
    headers: &[&str],
) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for h in headers {
        req += &format!("{h}\r\n");
    }
    if let Some(t) = token {
        req += &format!("Authorization: Bearer {t}\r\n");
    }
    if let Some(b) = body {
        req += &format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", b.len());
    } else {
        req += "Content-Length: 0\r\n\r\n";
    }
    s.write_all(req.as_bytes()).unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status = resp[9..12].parse().unwrap();
    let body = resp.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    // Bodies are small: undo chunked encoding if used.
    let body = if resp.to_ascii_lowercase().contains("transfer-encoding: chunked") {
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
    (status, body)
}

#[test]
fn http_rest_with_bearer_token() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_env(&d, &["--http", &addr], &[("CAIRN_TOKEN", "tok-123")]);
    let tok = Some("tok-123");

    let add = r##"{"path":"notes/a.md","content":"# Alpha\nThe group commit protocol batches fsync calls.","tags":["x"],"meta":{"k":"v"}}"##;
    // Refused without the token, with a wrong one, and with another scheme: 401, never data.
    for bad in [None, Some("tok-124"), Some("")] {
        let (code, body) = http(&addr, "POST", "/v1/docs", bad, Some(add));
        assert_eq!(code, 401, "{body}");
        assert!(!body.contains("Alpha"));
    }
    let (code, _) = http(&addr, "GET", "/v1/docs", None, None);
    assert_eq!(code, 401);
    let (code, body) = http(&addr, "GET", "/v1/docs", None, None);
    assert!(code == 401 && !body.contains("notes"), "nothing was added by refused requests");

    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some(add));
    assert_eq!(code, 201, "{body}");
    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some(add));
    assert!(code == 200 && body.contains("\"unchanged\""), "{body}");
    let (code, body) = http(&addr, "GET", "/v1/search?q=group%20commit&limit=5", tok, None);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["total"], 1);
    assert_eq!(v["hits"][0]["path"], "notes/a.md");
    assert!(v["hits"][0]["snippet"]["text"].as_str().unwrap().contains("group commit"));
    let (code, body) = http(&addr, "GET", "/v1/doc/content?path=notes/a.md", tok, None);
    assert_eq!((code, body.as_str()), (200, "# Alpha\nThe group commit protocol batches fsync calls."));
    // A large document streams out whole (in 64 KiB pieces), a missing one is a 404.
    let mut big = String::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while big.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big += &format!("{x:016x}\n");
    }
    let (code, _, err) = run(&d, &["--remote", "add", "-", "--name", "big.txt"], Some(&big));
    assert_eq!(code, 0, "{err}");
    let (code, body) = http(&addr, "GET", "/v1/doc/content?path=big.txt", tok, None);
    assert_eq!(code, 200);
    assert!(body == big, "content of {} bytes came back as {} bytes", big.len(), body.len());
    let (code, _) = http(&addr, "GET", "/v1/doc/content?path=nope", tok, None);
    assert_eq!(code, 404);
    let (code, body) = http(&addr, "GET", "/v1/docs?tag=x&meta=k=v", tok, None);
    assert!(code == 200 && body.contains("notes/a.md"), "{body}");
    let (code, _) = http(&addr, "POST", "/v1/tags", tok, Some(r#"{"paths":["notes/a.md"],"add":["y"]}"#));
    assert_eq!(code, 200);
    let (code, _) =
        http(&addr, "POST", "/v1/meta", tok, Some(r#"{"updates":[{"path":"notes/a.md","set":{"z":"1"}}]}"#));
    assert_eq!(code, 200);
    let (_, body) = http(&addr, "GET", "/v1/doc?path=notes/a.md", tok, None);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["doc"]["tags"], serde_json::json!(["x", "y"]));
    assert_eq!(v["doc"]["meta"]["z"], "1");
    let (code, body) = http(&addr, "GET", "/v1/grep?pattern=FSYNC&i=true", tok, None);
    assert!(code == 200 && body.contains("\"line\":2"), "{body}");
    let (code, body) = http(&addr, "GET", "/v1/doc?path=missing", tok, None);
    assert!(code == 404 && body.contains("no document"), "{body}");
    let (code, _) = http(&addr, "GET", "/v1/search?q=%22unclosed", tok, None);
    assert_eq!(code, 200, "lenient query syntax");
    let (code, _) = http(&addr, "POST", "/v1/docs", tok, Some("{not json"));
    assert!((400..500).contains(&code));

    // Key-value and snapshots.
    let (code, _) = http(&addr, "PUT", "/v1/kv/color", tok, Some("blue"));
    assert_eq!(code, 204);
    let (code, body) = http(&addr, "GET", "/v1/kv/color", tok, None);
    assert_eq!((code, body.as_str()), (200, "blue"));
    let (code, _) = http(&addr, "GET", "/v1/kv/none", tok, None);
    assert_eq!(code, 404);
    let src = t.path().join("tree");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), "x").unwrap();
    let body = format!(r#"{{"dir":"{}","name":"s1"}}"#, src.display());
    let (code, resp) = http(&addr, "POST", "/v1/snapshots", tok, Some(&body));
    assert_eq!(code, 201, "{resp}");
    let (code, resp) = http(&addr, "GET", "/v1/snapshots", tok, None);
    assert!(code == 200 && resp.contains("\"s1\""), "{resp}");

    // The OpenAPI description names every route.
    let (code, body) = http(&addr, "GET", "/openapi.json", tok, None);
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    for p in ["/v1/docs", "/v1/search", "/v1/grep", "/v1/snapshots", "/v1/kv/{key}", "/v1/tables"] {
        assert!(v["paths"][p].is_object(), "{p} missing");
    }
    daemon.stop();
}

#[test]
fn get_streams_content_in_chunks() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let daemon = Daemon::start(&d, &[]);
    let mut c = daemon.client();
    for (path, len) in [("empty", 0usize), ("one-chunk", 64 << 10), ("more", (150 << 10) + 7)] {
        let content: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let added = c.call(Request::Add { path: path.into(), content: content.clone(), tags: vec![], meta: vec![] });
        assert!(matches!(added, Ok(ServerMsg::Added { .. })), "{added:?}");
        let mut got = Vec::new();
        let mut frames = 0;
        c.call_stream(Request::Get { path: path.into(), version: None }, |m| {
            let ServerMsg::Data(b) = m else { panic!("{m:?}") };
            assert!(b.len() <= 64 << 10);
            got.extend(b);
            frames += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(got, content, "{path}");
        assert_eq!(frames, len / (64 << 10) + 1, "{path}: whole chunks, then a short (maybe empty) END chunk");
    }
    let missing = c.call_stream(Request::Get { path: "nope".into(), version: None }, |_| Ok(()));
    assert!(format!("{:#}", missing.unwrap_err()).contains("NotFound"));
    daemon.stop();
}

#[test]
fn tables_embedded_and_through_the_daemon_print_the_same() {
    let t = tempfile::tempdir().unwrap();
    let script: &[(&[&str], Option<&str>)] = &[
        (&["table", "create", "people", "--pk", "id"], None),
        (
            &["table", "put", "people"],
            Some(
                "{\"id\":1,\"name\":\"Ada\",\"age\":36,\"city\":\"London\"}\n{\"id\":2,\"name\":\"Alan\",\"age\":41,\"city\":\"Wilmslow\"}\n{\"id\":3,\"name\":\"Grace\",\"age\":85,\"city\":\"Arlington\"}\n",
            ),
        ),
        (&["table", "index", "create", "people", "by_age", "age"], None),
        (&["table", "query", "people", "age=gt=40", "--sort", "-age", "--fields", "name"], None),
        (&["table", "query", "people", "name==A*;city!=London"], None),
        (&["table", "patch", "people", "2", "{\"age\":42}", "--if-version", "1"], None),
        (&["table", "get", "people", "2", "--json"], None),
        (&["table", "put", "people", "{\"id\":2,\"name\":\"x\"}", "--if-absent"], None),
        (&["table", "query", "people", "age=zz=1"], None),
        (&["table", "rm", "people", "3"], None),
        (&["table", "index", "ls", "people"], None),
        (&["table", "ls"], None),
        (&["table", "verify", "people"], None),
    ];
    let embedded = t.path().join("embedded");
    let mut want = Vec::new();
    for (args, stdin) in script {
        want.push(run(&embedded, args, *stdin));
    }
    assert_eq!(want[3].1, "{\"name\":\"Grace\"}\n{\"name\":\"Alan\"}\n");
    assert_eq!(want[4].1, "{\"age\":41,\"city\":\"Wilmslow\",\"id\":2,\"name\":\"Alan\"}\n");
    assert_eq!(want[6].1, "{\"data\":{\"age\":42,\"city\":\"Wilmslow\",\"id\":2,\"name\":\"Alan\"},\"version\":2}\n");
    assert_eq!(want[7].0, 1, "put --if-absent on a taken key fails");
    assert!(want[7].2.contains("exists"), "{}", want[7].2);
    assert!(want[8].0 != 0 && want[8].2.contains("byte 3"), "{}", want[8].2);
    assert_eq!(want[10].1, "by_age\tage\trange\tready\n");
    assert!(want[12].1.contains("2 records"), "{}", want[12].1);

    let remote = t.path().join("remote");
    let daemon = Daemon::start(&remote, &[]);
    for ((args, stdin), want) in script.iter().zip(&want) {
        let mut a = vec!["--remote"];
        a.extend_from_slice(args);
        assert_eq!(&run(&remote, &a, *stdin), want, "{args:?}");
    }
    daemon.stop();
}

#[test]
fn tables_over_rest() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let daemon = Daemon::start_env(&d, &["--http", &addr], &[("CAIRN_TOKEN", "tk")]);
    let tok = Some("tk");
    let h = |m: &str, p: &str, b: Option<&str>| http(&addr, m, p, tok, b);

    assert_eq!(http(&addr, "GET", "/v1/tables", None, None).0, 401);
    let schema =
        r#"{"pk":"id","schema":{"attributes":{"name":{"type":"string","required":true},"age":{"type":"integer"}}}}"#;
    assert_eq!(h("PUT", "/v1/tables/people", Some(schema)).0, 201);
    assert_eq!(h("PUT", "/v1/tables/people", Some(schema)).0, 409);
    for (i, (name, age, city)) in
        [("Ada", 36, "London"), ("Alan", 41, "Wilmslow"), ("Grace", 85, "Arlington"), ("Edsger", 72, "Nuenen")]
            .iter()
            .enumerate()
    {
        let body = format!(r#"{{"id":{i},"name":"{name}","age":{age},"city":"{city}"}}"#);
        let (code, b) = h("POST", "/v1/tables/people", Some(&body));
        assert_eq!(code, 201, "{b}");
    }
    assert_eq!(h("POST", "/v1/tables/people", Some(r#"{"id":0,"name":"dup"}"#)).0, 409);
    let (code, b) = h("POST", "/v1/tables/people", Some(r#"{"id":9,"age":"old","name":"x"}"#));
    assert!(code == 400 && b.contains("age"), "{b}");
    let (code, b) = h("PUT", "/v1/tables/people/_indexes/by_age?wait=true", Some(r#"{"attr":"age","kind":"range"}"#));
    assert_eq!(code, 201, "{b}");
    let (code, b) = h("GET", "/v1/tables/people?age=gt=40;name==*a*&sort=-age&fields=name,age", None);
    assert_eq!(code, 200, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["records"], json!([{"name": "Grace", "age": 85}, {"name": "Alan", "age": 41}]));
    assert!(v["plan"].as_str().unwrap().starts_with("index by_age"), "{b}");
    let (code, b) = h("GET", "/v1/tables/people?q=city%3D%3DLondon%2CEdsger%3D%3Dx&limit=5", None);
    assert_eq!(code, 200, "{b}");
    assert_eq!(serde_json::from_str::<Value>(&b).unwrap()["records"][0]["name"], "Ada");
    let (code, b) = h("GET", "/v1/tables/people?age=zz=1", None);
    assert!(code == 400 && b.contains("byte 3"), "{b}");

    // Conditional writes with If-Match / If-None-Match.
    let (code, b) = h("GET", "/v1/tables/people/1", None);
    assert!(code == 200 && b.contains("\"version\":1"), "{b}");
    let stale = ["If-Match: \"7\""];
    let (code, _) = http_h(&addr, "PATCH", "/v1/tables/people/1", tok, Some(r#"{"age":42}"#), &stale);
    assert_eq!(code, 412);
    let (code, b) = http_h(&addr, "PATCH", "/v1/tables/people/1", tok, Some(r#"{"age":42}"#), &["If-Match: \"1\""]);
    assert!(code == 200 && b.contains("\"age\":42") && b.contains("\"version\":2"), "{b}");
    let (code, _) =
        http_h(&addr, "PUT", "/v1/tables/people/1", tok, Some(r#"{"name":"Alan T"}"#), &["If-None-Match: *"]);
    assert_eq!(code, 412, "put-if-absent on a taken key");
    let (code, b) = h("PUT", "/v1/tables/people/10", Some(r#"{"name":"New"}"#));
    assert!(code == 201 && b.contains("\"id\":10"), "{b}");
    let (code, _) = h("PUT", "/v1/tables/people/10", Some(r#"{"id":11,"name":"New"}"#));
    assert_eq!(code, 400);
    assert_eq!(http_h(&addr, "DELETE", "/v1/tables/people/10", tok, None, &["If-Match: \"2\""]).0, 412);
    assert_eq!(h("DELETE", "/v1/tables/people/10", None).0, 204);
    assert_eq!(h("GET", "/v1/tables/people/10", None).0, 404);

    // A batch is one transaction: every write lands, or (a stale version) none does.
    let batch = r#"{"writes":[
        {"op":"patch","table":"people","id":0,"patch":{"age":37},"version":1},
        {"op":"insert","table":"people","record":{"id":20,"name":"Zuse","age":85}},
        {"op":"put","table":"people","record":{"id":2,"name":"Grace H","age":85},"version":1},
        {"op":"delete","table":"people","id":3},
        {"op":"delete","table":"people","id":99}]}"#;
    let (code, b) = h("POST", "/v1/tables", Some(batch));
    assert_eq!(code, 200, "{b}");
    let v: Value = serde_json::from_str(&b).unwrap();
    assert_eq!(v["results"][0]["data"]["age"], 37);
    assert_eq!(v["results"][0]["version"], 2);
    assert_eq!(v["results"][1]["version"], 1);
    assert_eq!(v["results"][2]["version"], 2);
    assert_eq!((v["results"][3]["deleted"].clone(), v["results"][4]["deleted"].clone()), (json!(true), json!(false)));
    assert_eq!(h("GET", "/v1/tables/people/3", None).0, 404);
    let stale = r#"{"writes":[
        {"op":"insert","table":"people","record":{"id":21,"name":"Hopper"}},
        {"op":"patch","table":"people","id":0,"patch":{"age":38},"version":1}]}"#;
    let (code, b) = h("POST", "/v1/tables", Some(stale));
    assert!(code == 412 && b.contains("write 1"), "{code} {b}");
    assert_eq!(h("GET", "/v1/tables/people/21", None).0, 404, "the batch's first write was not kept");
    let (code, b) = h("GET", "/v1/tables/people/0", None);
    assert!(code == 200 && b.contains("\"age\":37"), "{b}");
    let (code, b) =
        h("POST", "/v1/tables", Some(r#"{"writes":[{"op":"insert","table":"people","record":{"id":0,"name":"x"}}]}"#));
    assert!(code == 409 && b.contains("write 0"), "{code} {b}");
    let (code, b) = h("POST", "/v1/tables", Some(r#"{"writes":[{"op":"upsert","table":"people"}]}"#));
    assert_eq!(code, 422, "{b}");
    let (code, b) = h("GET", "/v1/tables/people/_indexes", None);
    assert!(code == 200 && b.contains("\"ready\":true"), "{b}");
    assert_eq!(h("DELETE", "/v1/tables/people/_indexes/by_age", None).0, 204);
    assert_eq!(h("GET", "/v1/tables/nope?a==1", None).0, 404);
    assert_eq!(h("DELETE", "/v1/tables/people", None).0, 204);
    assert_eq!(h("GET", "/v1/tables/people/1", None).0, 404);
    daemon.stop();
}
