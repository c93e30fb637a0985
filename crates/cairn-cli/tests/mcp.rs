//! `cairn mcp`: JSON-RPC over stdio, by hand and with the official MCP Python SDK.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Sends each line and, unless it is a notification, waits for its one answer before the
/// next (the server may answer pipelined requests in any order).
fn session(data: &Path, lines: &[Value], raw: &[&str]) -> Vec<Value> {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--dir")
        .arg(data)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut replies = Vec::new();
    let mut exchange = |text: String, answered: bool| {
        writeln!(stdin, "{text}").unwrap();
        stdin.flush().unwrap();
        if answered {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            replies.push(serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}")));
        }
    };
    for l in lines {
        exchange(l.to_string(), l.get("id").is_some());
    }
    for r in raw {
        exchange(r.to_string(), true);
    }
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert_eq!(rest, "", "nothing more after the last answer");
    assert!(child.wait().unwrap().success());
    replies
}

fn call(id: u64, name: &str, args: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": name, "arguments": args } })
}

#[test]
fn json_rpc_by_hand() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path().join("data");
    let replies = session(
        &d,
        &[
            json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } }),
            json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
            json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }),
            call(3, "add", json!({ "name": "a.txt", "content": "snake_case_words and camelCaseWords" })),
            call(4, "search", json!({ "query": "camel" })),
            call(5, "add", json!({ "name": 7 })),
            call(6, "nope", json!({})),
            json!({ "jsonrpc": "2.0", "id": 7, "method": "resources/list" }),
            json!({ "jsonrpc": "2.0", "id": 8, "method": "ping" }),
            call(9, "add", json!({ "name": "../escape", "content": "x" })),
            call(10, "grep", json!({ "pattern": "camel", "ignore_case": true })),
            call(11, "get", json!({ "doc": "a.txt", "max_bytes": 5 })),
        ],
        &["{broken json", r#"[{"jsonrpc":"2.0","id":20,"method":"ping"}]"#, r#"{"id":21,"hello":1}"#],
    );
    let by_id =
        |id: i64| replies.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("no reply {id}: {replies:#?}"));
    assert_eq!(replies.len(), 14, "every request answered, notifications not: {replies:#?}");
    assert_eq!(by_id(1)["result"]["protocolVersion"], "2024-11-05");
    let names: Vec<&str> =
        by_id(2)["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["add", "search", "grep", "get", "ls", "tag", "versions", "meta", "snapshot", "diff", "table_query"]
    );
    for tool in by_id(2)["result"]["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object");
    }
    assert_eq!(by_id(3)["result"]["isError"], false);
    let found: Value = serde_json::from_str(by_id(4)["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(found["hits"][0]["path"], "a.txt", "camelCase split: `camel` finds camelCaseWords");
    assert_eq!(by_id(4)["result"]["structuredContent"], found);
    assert_eq!(by_id(5)["result"]["isError"], true);
    assert_eq!(by_id(6)["error"]["code"], -32602);
    assert_eq!(by_id(7)["error"]["code"], -32601, "no resources: method not found");
    assert_eq!(by_id(8)["result"], json!({}));
    let escaped = &by_id(9)["result"];
    assert_eq!(escaped["isError"], true);
    assert_eq!(escaped["structuredContent"]["error"]["kind"], "bad_request");
    let grep = &by_id(10)["result"]["structuredContent"];
    assert_eq!(grep["files"][0]["path"], "a.txt");
    assert_eq!(grep["truncated"], false);
    let get = &by_id(11)["result"]["structuredContent"];
    assert_eq!((get["content"]["text"].clone(), get["truncated"].clone()), (json!("snake"), json!(true)));
    // Answered here, never silently dropped: a parse error, a batch, a non-message.
    let nulls: Vec<&Value> = replies.iter().filter(|r| r["id"].is_null()).collect();
    let codes: Vec<i64> = nulls.iter().map(|r| r["error"]["code"].as_i64().unwrap()).collect();
    assert_eq!(codes, [-32700, -32600], "{replies:#?}");
    assert_eq!(by_id(21)["error"]["code"], -32600);
}

/// The official MCP Python SDK as the client (installed from PyPI into a venv under the
/// target directory on first run).
#[test]
fn official_python_sdk_client() {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mcp-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        let ok = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3 is needed");
        assert!(ok.success(), "creating {}", venv.display());
        let ok = Command::new(venv.join("bin/pip")).args(["install", "-q", "mcp>=1.9,<2"]).status().unwrap();
        assert!(ok.success(), "pip install mcp");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    // Embedded, then through a running daemon.
    for daemon in [false, true] {
        let t = tempfile::tempdir().unwrap();
        let data = t.path().join("data");
        let server = daemon.then(|| {
            let child = Command::new(env!("CARGO_BIN_EXE_cairn"))
                .arg("--dir")
                .arg(&data)
                .arg("serve")
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let sock = cairn::Layout::new(&data).socket();
            for _ in 0..1500 {
                if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            child
        });
        let tree = t.path().join("tree");
        std::fs::create_dir_all(&tree).unwrap();
        std::fs::write(tree.join("first.txt"), "first file\n").unwrap();
        // A table for table_query (through the daemon when one runs).
        let cli = |args: &[&str], stdin: Option<&str>| {
            use std::io::Write;
            let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"))
                .arg("--dir")
                .arg(&data)
                .args(args)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .spawn()
                .unwrap();
            c.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
            assert!(c.wait().unwrap().success(), "{args:?}");
        };
        cli(&["table", "create", "people"], None);
        cli(
            &["table", "put", "people"],
            Some("{\"id\":1,\"name\":\"Ada\",\"age\":36}\n{\"id\":2,\"name\":\"Alan\",\"age\":41}\n"),
        );
        let out =
            Command::new(&python).arg(&script).arg(env!("CARGO_BIN_EXE_cairn")).arg(&data).arg(&tree).output().unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && stdout.trim() == "OK", "daemon={daemon}: {stdout}\n{stderr}");
        if let Some(mut child) = server {
            assert!(Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap().success());
            assert!(child.wait().unwrap().success());
            // What the agent added went through the daemon and is there after it stopped.
            let ls = Command::new(env!("CARGO_BIN_EXE_cairn")).arg("--dir").arg(&data).arg("ls").output().unwrap();
            assert!(String::from_utf8_lossy(&ls.stdout).contains("notes/raft.md"));
        }
    }
}
