//! `cairn mcp`: JSON-RPC over stdio, by hand and with the official MCP Python SDK.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn session(data: &Path, lines: &[Value], raw: &[&str]) -> Vec<Value> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("--dir")
        .arg(data)
        .arg("mcp")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = String::new();
    for l in lines {
        input += &format!("{l}\n");
    }
    for r in raw {
        input += &format!("{r}\n");
    }
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
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
            call(3, "add", json!({ "path": "a.txt", "content": "snake_case_words and camelCaseWords" })),
            call(4, "search", json!({ "query": "camel" })),
            call(5, "add", json!({ "path": 7 })),
            call(6, "nope", json!({})),
            json!({ "jsonrpc": "2.0", "id": 7, "method": "resources/list" }),
            json!({ "jsonrpc": "2.0", "id": 8, "method": "ping" }),
        ],
        &["{broken json"],
    );
    assert_eq!(replies.len(), 9, "{replies:#?}");
    assert_eq!(replies[0]["result"]["protocolVersion"], "2024-11-05");
    let names: Vec<&str> =
        replies[1]["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["add", "search", "grep", "get", "ls", "tag"]);
    for tool in replies[1]["result"]["tools"].as_array().unwrap() {
        assert_eq!(tool["inputSchema"]["type"], "object");
    }
    assert_eq!(replies[2]["result"]["isError"], false);
    let hit: Value =
        serde_json::from_str(replies[3]["result"]["content"][0]["text"].as_str().unwrap().lines().next().unwrap())
            .unwrap();
    assert_eq!(hit["path"], "a.txt", "camelCase split: `camel` finds camelCaseWords");
    assert_eq!(replies[4]["result"]["isError"], true);
    assert_eq!(replies[5]["error"]["code"], -32602);
    assert_eq!(replies[6]["error"]["code"], -32601);
    assert_eq!(replies[7]["result"], json!({}));
    assert_eq!(replies[8]["error"]["code"], -32700);
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
            let sock = data.join("cairn.sock");
            for _ in 0..1500 {
                if std::os::unix::net::UnixStream::connect(&sock).is_ok() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            child
        });
        let out = Command::new(&python).arg(&script).arg(env!("CARGO_BIN_EXE_cairn")).arg(&data).output().unwrap();
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
