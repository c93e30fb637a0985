//! End-to-end tests of `cairn serve`: the CLI through the daemon, raw frames, cancellation,
//! slow and vanishing clients, TCP tokens, the serve lock, SIGTERM and kill -9.

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::Duration;

use cairn_proto::frame::{self, HEADER_LEN};
use cairn_proto::{ClientMsg, ErrorCode, PROTOCOL_VERSION, Request, ServerMsg};
use cairn_server::client;
use common::{Daemon, READ_TOKEN, TOKEN, bin, free_addr, http, http_h, normalize, run, socket};
use serde_json::{Value, json};

/// A named document added through a client.
fn add_named(c: &mut client::Client, name: &str, content: &[u8]) -> cairn::Result<cairn::Response> {
    let doc = cairn::docs::NamedContent {
        name: name.into(),
        content: None,
        content_base64: Some(cairn::text::base64(content)),
    };
    let req = cairn::Request::Add(cairn::docs::AddRequest { docs: vec![doc], ..Default::default() });
    c.execute(&req, None, None)
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
    let sock = socket(&d);
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
    // A well-framed call whose JSON is not a request of the application layer.
    let call = Request::Call { request: br#"{"op":"nope"}"#.to_vec(), cwd: None, input: false };
    s.write_all(&raw_frame(7, &ClientMsg::Request(call))).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let msgs = read_all(&mut s);
    assert!(is_error(&msgs[1], ErrorCode::BadRequest), "{msgs:?}");
    let bad_requests = msgs.iter().filter(|m| is_error(m, ErrorCode::BadRequest)).count();
    assert_eq!(bad_requests, 2, "the malformed message and the unknown operation: {msgs:?}");

    // A frame cut in the middle, then the client leaves.
    for cut in [3, HEADER_LEN - 1, HEADER_LEN + 2] {
        let mut s = UnixStream::connect(&sock).unwrap();
        s.write_all(&hello()).unwrap();
        let f = raw_frame(
            1,
            &ClientMsg::Request(Request::Call {
                request: br#"{"op":"search","query":"x"}"#.to_vec(),
                cwd: None,
                input: false,
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
    // Refuses a token shorter than 16 bytes.
    let (code, _, err) = common::run_in(None, &d, &["serve", "--tcp", "127.0.0.1:0"], None);
    assert_ne!(code, 0);
    let mut cmd = Command::new(bin());
    let out =
        cmd.arg("--dir").arg(&d).args(["serve", "--tcp", "127.0.0.1:0"]).env("CAIRN_TOKEN", "s3cret").output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least 16 bytes"), "{err}");
    let daemon = Daemon::start_env(&d, &["--tcp", &addr], &[("CAIRN_TOKEN", TOKEN)]);
    let url = format!("tcp://{addr}");
    let e = client::connect(&url, None).err().unwrap();
    assert!(format!("{e:#}").contains("Unauthorized"), "{e:#}");
    let wrong = TOKEN.replace('0', "1");
    let e = client::connect(&url, Some(&wrong)).err().unwrap();
    assert!(format!("{e:#}").contains("Unauthorized"), "{e:#}");
    let mut c = client::connect(&url, Some(TOKEN)).unwrap();
    assert_eq!(c.call(Request::Ping).unwrap(), ServerMsg::Pong);
    // The CLI through TCP; the value comes back byte for byte.
    let mut cmd = Command::new(bin());
    cmd.args(["--addr", &url, "kv", "put", "a", "b"]).env("CAIRN_TOKEN", TOKEN);
    assert!(cmd.status().unwrap().success());
    let mut cmd = Command::new(bin());
    let out = cmd.args(["--addr", &url, "kv", "get", "a"]).env("CAIRN_TOKEN", TOKEN).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "b");
    // --dir and --addr together: an error, not one silently ignored.
    let mut cmd = Command::new(bin());
    let out =
        cmd.arg("--dir").arg(&d).args(["--addr", &url, "kv", "get", "a"]).env("CAIRN_TOKEN", TOKEN).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
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
    let sock = socket(&d);
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let sock = sock.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                let Ok(mut c) = client::connect_unix(&sock, None) else { return acked };
                for i in 0.. {
                    let path = format!("w{w}/doc{i}");
                    match add_named(&mut c, &path, format!("writer {w} document {i}").as_bytes()) {
                        Ok(cairn::Response::Add(_)) => acked.push(path),
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
    let added = add_named(&mut c, "after", b"kill nine survivor");
    assert!(matches!(added, Ok(cairn::Response::Add(_))), "{added:?}");
    // The first add of a process starts a pack and syncs it; later small ones sync only the
    // engine's log, their pack bytes journaled in it. After kill -9 the next open rewrites the
    // pack from that journal (the bytes are still in the OS's cache here; power cuts, which
    // lose them, are cairn-cas's and cairn-docs' crash tests): everything reads back and
    // verifies.
    for i in 0..5 {
        let added = add_named(&mut c, &format!("journaled{i}"), format!("journaled survivor {i}").as_bytes());
        assert!(matches!(added, Ok(cairn::Response::Add(_))), "{added:?}");
    }
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    assert!(sock.exists());
    // Embedded use sees the stale socket, finds nobody, and runs in-process.
    let (code, out, err) = run(&d, &["search", "survivor"], None);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("after"), "{out}");
    for i in 0..5 {
        let (code, out, err) = run(&d, &["cat", &format!("journaled{i}")], None);
        assert_eq!((code, out.as_str()), (0, format!("journaled survivor {i}").as_str()), "{err}");
    }
    let (code, out, err) = run(&d, &["verify"], None);
    assert_eq!(code, 0, "verify after kill -9: {out}{err}");
    let daemon = Daemon::start(&d, &[]);
    let (code, out, _) = run(&d, &["--remote", "cat", "after"], None);
    assert_eq!((code, out.as_str()), (0, "kill nine survivor"));
    daemon.stop();
}

/// An error answer is the one error JSON, with this kind.
fn error_kind(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not the error JSON ({e}): {body}"));
    v["error"]["kind"].as_str().unwrap_or_else(|| panic!("no error kind: {body}")).to_string()
}

#[test]
fn http_rest_with_bearer_token() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let addr = free_addr();
    let root = t.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let daemon = Daemon::start_env(
        &d,
        &["--http", &addr, "--root", root.to_str().unwrap()],
        &[("CAIRN_TOKEN", TOKEN), ("CAIRN_READ_ONLY_TOKEN", READ_TOKEN)],
    );
    let tok = Some(TOKEN);

    let add = r##"{"docs":[{"name":"notes/a.md","content":"# Alpha\nThe group commit protocol batches fsync calls."}],"tags":["x"],"meta":{"k":"v"}}"##;
    // Refused without the token, with a wrong one, and with another scheme: 401, never data.
    let wrong = TOKEN.replace('0', "1");
    for bad in [None, Some(wrong.as_str()), Some("")] {
        let (code, body) = http(&addr, "POST", "/v1/docs", bad, Some(add));
        assert_eq!(code, 401, "{body}");
        assert_eq!(error_kind(&body), "unauthorized");
        assert!(!body.contains("Alpha"));
    }
    let (code, body) = http(&addr, "GET", "/v1/docs", None, None);
    assert!(code == 401 && !body.contains("notes"), "nothing was added by refused requests");
    // The read-only token reads but cannot write.
    let (code, body) = http(&addr, "POST", "/v1/docs", Some(READ_TOKEN), Some(add));
    assert!(code == 403 && error_kind(&body) == "forbidden", "{code} {body}");

    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some(add));
    assert_eq!(code, 201, "{body}");
    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some(add));
    assert!(code == 200 && body.contains("\"unchanged\""), "{body}");
    // Names may not escape: `..` and absolute names are refused.
    for bad in ["../../etc/evil", "/home/u/plan.md", "a/./b", "a\u{1b}b"] {
        let body = json!({ "docs": [{ "name": bad, "content": "x" }] }).to_string();
        let (code, resp) = http(&addr, "POST", "/v1/docs", tok, Some(&body));
        assert!(code == 400 && error_kind(&resp) == "bad_request", "{bad}: {code} {resp}");
    }
    let (code, body) = http(&addr, "GET", "/v1/search?q=group%20commit&limit=5", Some(READ_TOKEN), None);
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["total"], 1);
    assert_eq!(v["hits"][0]["path"], "notes/a.md");
    assert_eq!(v["hits"][0]["rank"], 1);
    assert!(v["hits"][0]["snippet"]["text"].as_str().unwrap().contains("group commit"));
    let (code, body) = http(&addr, "GET", "/v1/doc/content?doc=notes/a.md", tok, None);
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
    let (code, body) = http(&addr, "GET", "/v1/doc/content?doc=big.txt", tok, None);
    assert_eq!(code, 200);
    assert!(body == big, "content of {} bytes came back as {} bytes", big.len(), body.len());
    let (code, body) = http(&addr, "GET", "/v1/doc/content?doc=nope", tok, None);
    assert!(code == 404 && error_kind(&body) == "not_found", "{body}");
    let (code, body) = http(&addr, "GET", "/v1/docs?tag=x&meta=k=v", tok, None);
    assert!(code == 200 && body.contains("notes/a.md"), "{body}");
    let (code, _) = http(&addr, "POST", "/v1/tags", tok, Some(r#"{"docs":["notes/a.md"],"add":["y"]}"#));
    assert_eq!(code, 200);
    let (code, _) = http(&addr, "POST", "/v1/meta", tok, Some(r#"{"docs":["notes/a.md"],"set":{"z":"1"}}"#));
    assert_eq!(code, 200);
    let (_, body) = http(&addr, "GET", "/v1/doc?doc=notes/a.md", tok, None);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["doc"]["tags"], json!(["x", "y"]));
    assert_eq!(v["doc"]["meta"]["z"], "1");
    let (code, body) = http(&addr, "GET", "/v1/grep?pattern=FSYNC&i=true", tok, None);
    assert!(code == 200 && body.contains("\"line\":2"), "{body}");
    let (code, body) = http(&addr, "GET", "/v1/doc?doc=missing", tok, None);
    assert!(code == 404 && body.contains("no document"), "{body}");
    let (code, _) = http(&addr, "GET", "/v1/search?q=%22unclosed", tok, None);
    assert_eq!(code, 200, "lenient query syntax");

    // Every error is the error JSON, axum's own rejections included.
    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some("{not json"));
    assert!(code == 400 && error_kind(&body) == "bad_request", "{code} {body}");
    let (code, body) = http_h(&addr, "POST", "/v1/docs", tok, Some("x"), &["Content-Type: text/plain"]);
    assert!(code == 415 && error_kind(&body) == "bad_request", "{code} {body}");
    let (code, body) = http(&addr, "POST", "/v1/docs", tok, Some(r#"{"docs":5}"#));
    assert!(code == 422 && error_kind(&body) == "bad_request", "{code} {body}");
    let (code, body) = http(&addr, "GET", "/v1/nowhere", tok, None);
    assert!(code == 404 && error_kind(&body) == "not_found", "{code} {body}");
    let (code, body) = http(&addr, "PATCH", "/v1/docs", tok, None);
    assert!(code == 405 && error_kind(&body) == "bad_request", "{code} {body}");
    let (code, body) = http(&addr, "GET", "/v1/search?q=x&lmit=3", tok, None);
    assert!(code == 400 && body.contains("lmit"), "unknown parameters are errors: {code} {body}");
    let huge = "x".repeat((64 << 20) + 16);
    let (code, body) =
        http_h(&addr, "PUT", "/v1/kv/huge", tok, Some(&huge), &["Content-Type: application/octet-stream"]);
    assert!(code == 413 && error_kind(&body) == "bad_request", "{code} {body}");

    // Key-value in the user keyspace, JSON both ways.
    let (code, body) = http(&addr, "PUT", "/v1/kv/color", tok, Some("blue"));
    assert_eq!(code, 200, "{body}");
    let (code, body) = http(&addr, "GET", "/v1/kv/color", tok, None);
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({ "key": { "text": "color" }, "value": { "text": "blue" } })
    );
    let (code, body) = http(&addr, "GET", "/v1/kv/none", tok, None);
    assert!(code == 404 && error_kind(&body) == "not_found", "{body}");
    // The blob store's rows are not reachable: `cas/meta` here is a user key.
    let (code, _) = http(&addr, "PUT", "/v1/kv/cas%2Fmeta", tok, Some("x"));
    assert_eq!(code, 200);
    let (code, body) = http(&addr, "GET", "/v1/doc/content?doc=notes/a.md", tok, None);
    assert!(code == 200 && body.contains("Alpha"), "the store still opens and reads: {body}");

    // Snapshots: inside the roots only.
    let src = root.join("tree");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), "x").unwrap();
    let body = json!({ "source": src, "name": "s1" }).to_string();
    let (code, resp) = http(&addr, "POST", "/v1/snapshots", tok, Some(&body));
    assert_eq!(code, 201, "{resp}");
    let (code, resp) = http(&addr, "GET", "/v1/snapshots", tok, None);
    assert!(code == 200 && resp.contains("\"s1\""), "{resp}");
    for outside in ["/etc", t.path().to_str().unwrap()] {
        let body = json!({ "source": outside, "name": "leak" }).to_string();
        let (code, resp) = http(&addr, "POST", "/v1/snapshots", tok, Some(&body));
        assert!(code == 403 && error_kind(&resp) == "forbidden", "{outside}: {code} {resp}");
    }
    let out = t.path().join("outside-checkout");
    let body = json!({ "dest": out }).to_string();
    let (code, resp) = http(&addr, "POST", "/v1/snapshots/s1/checkout", tok, Some(&body));
    assert!(code == 403 && !out.exists(), "{code} {resp}");
    let inside = root.join("checkout");
    let body = json!({ "dest": inside }).to_string();
    let (code, resp) = http(&addr, "POST", "/v1/snapshots/s1/checkout", tok, Some(&body));
    assert_eq!(code, 201, "{resp}");
    assert_eq!(std::fs::read_to_string(inside.join("f")).unwrap(), "x");

    // The OpenAPI description names every route.
    let (code, body) = http(&addr, "GET", "/openapi.json", tok, None);
    assert_eq!(code, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    for p in ["/v1/docs", "/v1/search", "/v1/grep", "/v1/snapshots", "/v1/kv/{key}", "/v1/tables", "/v1/verify"] {
        assert!(v["paths"][p].is_object(), "{p} missing");
    }
    assert!(v["components"]["schemas"]["Error"].is_object());
    daemon.stop();
}

#[test]
fn content_streams_in_chunks() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let daemon = Daemon::start(&d, &[]);
    let mut c = daemon.client();
    for (path, len) in [("empty", 0usize), ("one-chunk", 64 << 10), ("more", (150 << 10) + 7)] {
        let content: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let added = add_named(&mut c, path, &content);
        assert!(matches!(added, Ok(cairn::Response::Add(_))), "{added:?}");
        let mut got = Vec::new();
        let mut frames = 0;
        c.call_stream(Request::Content { doc: path.into(), version: None, cwd: None }, |m| {
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
    let missing = c.call_stream(Request::Content { doc: "nope".into(), version: None, cwd: None }, |_| Ok(()));
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
    assert_eq!(want[7].0, 4, "put --if-absent on a taken key fails (a conflict)");
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
    let addr = free_addr();
    let daemon = Daemon::start_env(&d, &["--http", &addr], &[("CAIRN_TOKEN", TOKEN)]);
    let tok = Some(TOKEN);
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
    assert!(code == 201 && b.contains("\"versions\":[1]"), "{b}");
    let (code, b) = h("GET", "/v1/tables/people/10", None);
    assert!(code == 200 && b.contains("\"id\":10"), "the key from the URL is the record's: {b}");
    let (code, _) = h("PUT", "/v1/tables/people/10", Some(r#"{"id":11,"name":"New"}"#));
    assert_eq!(code, 400);
    assert_eq!(http_h(&addr, "DELETE", "/v1/tables/people/10", tok, None, &["If-Match: \"2\""]).0, 412);
    assert_eq!(h("DELETE", "/v1/tables/people/10", None).0, 200);
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
    assert_eq!(h("DELETE", "/v1/tables/people/_indexes/by_age", None).0, 200);
    assert_eq!(h("GET", "/v1/tables/nope?a==1", None).0, 404);
    assert_eq!(h("DELETE", "/v1/tables/people", None).0, 200);
    assert_eq!(h("GET", "/v1/tables/people/1", None).0, 404);
    daemon.stop();
}
