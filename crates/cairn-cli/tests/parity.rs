//! The same operations through every front-end (the CLI's `--json`, the daemon's IPC, HTTP and
//! MCP) give the same JSON, timing fields aside: one application layer, one shape.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cairn::Request;
use cairn::docs::SearchMode;
use cairn::docs::{
    AddRequest, ContentRequest, Filter, GetRequest, GrepRequest, LsRequest, MetaGetRequest, NamedContent,
    SearchRequest, TagRequest, VersionsRequest,
};
use cairn::kv::{KeyRequest, PutRequest as KvPut, ScanRequest};
use cairn::model::{ModelInstallRequest, ModelStatusRequest};
use cairn::tables::{CreateTableRequest, PutRequest, QueryRequest};
use cairn::text::Blob;
use cairn::trees::{DiffRequest, SnapshotRequest};
use common::{Daemon, TOKEN, bin, free_addr, http, run_in, without_timing};
use serde_json::{Value, json};

/// One operation, as each front-end is asked for it (`None`: the front-end does not offer it).
struct Op {
    name: &'static str,
    cli: Vec<String>,
    stdin: Option<&'static str>,
    ipc: Request,
    http: Option<(&'static str, String, Option<String>)>,
    mcp: Option<(&'static str, Value)>,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

const NOTE_V1: &str = "alpha beta gamma\nsecond line with a zebra\n";
const NOTE_V2: &str = "alpha beta gamma delta\nsecond line with a zebra\nthird line\n";

fn ops(tree_a: &Path, tree_b: &Path, model: &str) -> Vec<Op> {
    let named = |content: &str| AddRequest {
        docs: vec![NamedContent { name: "notes/a.md".into(), content: Some(content.into()), content_base64: None }],
        tags: vec!["t1".into()],
        meta: [("k".to_string(), "v".to_string())].into(),
        ..Default::default()
    };
    let add_http = |content: &str| {
        let body =
            json!({ "docs": [{ "name": "notes/a.md", "content": content }], "tags": ["t1"], "meta": { "k": "v" } });
        Some(("POST", "/v1/docs".to_string(), Some(body.to_string())))
    };
    let add_mcp = |content: &str| {
        Some(("add", json!({ "name": "notes/a.md", "content": content, "tags": ["t1"], "meta": { "k": "v" } })))
    };
    let (a, b) = (tree_a.to_str().unwrap(), tree_b.to_str().unwrap());
    vec![
        Op {
            name: "add",
            cli: s(&["add", "-", "--name", "notes/a.md", "--tag", "t1", "--meta", "k=v"]),
            stdin: Some(NOTE_V1),
            ipc: Request::Add(named(NOTE_V1)),
            http: add_http(NOTE_V1),
            mcp: add_mcp(NOTE_V1),
        },
        Op {
            name: "add a new version",
            cli: s(&["add", "-", "--name", "notes/a.md", "--tag", "t1", "--meta", "k=v"]),
            stdin: Some(NOTE_V2),
            ipc: Request::Add(named(NOTE_V2)),
            http: add_http(NOTE_V2),
            mcp: add_mcp(NOTE_V2),
        },
        Op {
            name: "search",
            cli: s(&["search", "zebra"]),
            stdin: None,
            ipc: Request::Search(SearchRequest::new("zebra")),
            http: Some(("GET", "/v1/search?q=zebra".into(), None)),
            mcp: Some(("search", json!({ "query": "zebra" }))),
        },
        Op {
            name: "grep",
            cli: s(&["grep", "-i", "ZEBRA", "-C", "1"]),
            stdin: None,
            ipc: Request::Grep(GrepRequest {
                pattern: "ZEBRA".into(),
                ignore_case: true,
                context: 1,
                limit: Some(20),
                ..Default::default()
            }),
            http: Some(("GET", "/v1/grep?pattern=ZEBRA&i=true&C=1&limit=20".into(), None)),
            mcp: Some(("grep", json!({ "pattern": "ZEBRA", "ignore_case": true, "context": 1 }))),
        },
        Op {
            name: "get",
            cli: s(&["get", "name:notes/a.md", "--version", "1"]),
            stdin: None,
            ipc: Request::Get(GetRequest { doc: "name:notes/a.md".into(), version: Some(1) }),
            http: Some(("GET", "/v1/doc?doc=name:notes/a.md&version=1".into(), None)),
            mcp: None,
        },
        Op {
            name: "content",
            cli: s(&["cat", "notes/a.md", "--version", "1"]),
            stdin: None,
            ipc: Request::Content(ContentRequest { doc: "notes/a.md".into(), version: Some(1), max_bytes: None }),
            http: Some(("GET", "/v1/doc/content?doc=notes/a.md&version=1&json=true".into(), None)),
            mcp: Some(("get", json!({ "doc": "notes/a.md", "version": 1, "max_bytes": 1_000_000 }))),
        },
        Op {
            name: "tag",
            cli: s(&["tag", "notes/a.md", "-t", "t2"]),
            stdin: None,
            ipc: Request::Tag(TagRequest { docs: vec!["notes/a.md".into()], add: vec!["t2".into()], remove: vec![] }),
            http: Some(("POST", "/v1/tags".into(), Some(json!({ "docs": ["notes/a.md"], "add": ["t2"] }).to_string()))),
            mcp: Some(("tag", json!({ "docs": ["notes/a.md"], "add": ["t2"] }))),
        },
        Op {
            name: "ls",
            cli: s(&["ls", "--tag", "t2", "-n", "50"]),
            stdin: None,
            ipc: Request::Ls(LsRequest {
                filter: Filter { tags: vec!["t2".into()], ..Default::default() },
                limit: Some(50),
            }),
            http: Some(("GET", "/v1/docs?tag=t2&limit=50".into(), None)),
            mcp: Some(("ls", json!({ "filter": { "tags": ["t2"] } }))),
        },
        Op {
            name: "meta",
            cli: s(&["meta", "get", "notes/a.md", "k"]),
            stdin: None,
            ipc: Request::MetaGet(MetaGetRequest { doc: "notes/a.md".into(), key: Some("k".into()) }),
            http: Some(("GET", "/v1/meta?doc=notes/a.md&key=k".into(), None)),
            mcp: Some(("meta", json!({ "doc": "notes/a.md", "key": "k" }))),
        },
        Op {
            name: "versions",
            cli: s(&["versions", "notes/a.md"]),
            stdin: None,
            ipc: Request::Versions(VersionsRequest { doc: "notes/a.md".into() }),
            http: Some(("GET", "/v1/doc/versions?doc=notes/a.md".into(), None)),
            mcp: Some(("versions", json!({ "doc": "notes/a.md" }))),
        },
        Op {
            name: "snapshot a",
            cli: s(&["snapshot", a, "--name", "s1"]),
            stdin: None,
            ipc: Request::Snapshot(SnapshotRequest { source: tree_a.into(), name: Some("s1".into()) }),
            http: Some(("POST", "/v1/snapshots".into(), Some(json!({ "source": a, "name": "s1" }).to_string()))),
            mcp: Some(("snapshot", json!({ "source": a, "name": "s1" }))),
        },
        Op {
            name: "snapshot b",
            cli: s(&["snapshot", b, "--name", "s2"]),
            stdin: None,
            ipc: Request::Snapshot(SnapshotRequest { source: tree_b.into(), name: Some("s2".into()) }),
            http: Some(("POST", "/v1/snapshots".into(), Some(json!({ "source": b, "name": "s2" }).to_string()))),
            mcp: Some(("snapshot", json!({ "source": b, "name": "s2" }))),
        },
        Op {
            name: "diff",
            cli: s(&["diff", "s1", "s2"]),
            stdin: None,
            ipc: Request::Diff(DiffRequest { a: "s1".into(), b: "s2".into() }),
            http: Some(("GET", "/v1/snapshots/s1/diff/s2".into(), None)),
            mcp: Some(("diff", json!({ "a": "s1", "b": "s2" }))),
        },
        Op {
            name: "table create",
            cli: s(&["table", "create", "people"]),
            stdin: None,
            ipc: Request::TableCreate(CreateTableRequest { table: "people".into(), pk: "id".into(), schema: None }),
            http: Some(("PUT", "/v1/tables/people".into(), Some("{}".into()))),
            mcp: None,
        },
        Op {
            name: "table put",
            cli: s(&["table", "put", "people", r#"{"id":1,"name":"Ada","age":36}"#]),
            stdin: None,
            ipc: Request::TablePut(PutRequest {
                table: "people".into(),
                records: vec![json!({ "id": 1, "name": "Ada", "age": 36 })],
                ..Default::default()
            }),
            http: Some(("PUT", "/v1/tables/people/1".into(), Some(r#"{"id":1,"name":"Ada","age":36}"#.into()))),
            mcp: None,
        },
        Op {
            name: "table query",
            cli: s(&["table", "query", "people", "age=gt=30", "--fields", "name"]),
            stdin: None,
            ipc: Request::TableQuery(QueryRequest {
                table: "people".into(),
                filter: Some("age=gt=30".into()),
                fields: Some(vec!["name".into()]),
                limit: Some(100),
                ..Default::default()
            }),
            http: Some(("GET", "/v1/tables/people?age=gt=30&fields=name&limit=100".into(), None)),
            mcp: Some(("table_query", json!({ "table": "people", "filter": "age=gt=30", "fields": ["name"] }))),
        },
        Op {
            name: "kv put",
            cli: s(&["kv", "put", "color", "blue"]),
            stdin: None,
            ipc: Request::KvPut(KvPut {
                key: Blob::of(b"color"),
                value: Some(Blob::of(b"blue")),
                no_sync: false,
                raw: false,
            }),
            http: Some(("PUT", "/v1/kv/color".into(), Some("blue".into()))),
            mcp: None,
        },
        Op {
            name: "kv get",
            cli: s(&["kv", "get", "color"]),
            stdin: None,
            ipc: Request::KvGet(KeyRequest { key: Blob::of(b"color"), raw: false }),
            http: Some(("GET", "/v1/kv/color".into(), None)),
            mcp: None,
        },
        Op {
            name: "kv scan",
            cli: s(&["kv", "scan", "--prefix", "co"]),
            stdin: None,
            ipc: Request::KvScan(ScanRequest {
                prefix: Some(Blob::of(b"co")),
                limit: Some(1000),
                ..Default::default()
            }),
            http: Some(("GET", "/v1/kv?prefix=co".into(), None)),
            mcp: None,
        },
        // Last: with a model installed, search defaults to hybrid (the searches above stay BM25).
        Op {
            name: "model install",
            cli: s(&["model", "install", model]),
            stdin: None,
            ipc: Request::ModelInstall(ModelInstallRequest { source: model.into() }),
            http: Some(("POST", "/v1/model".into(), Some(json!({ "source": model }).to_string()))),
            mcp: None,
        },
        Op {
            name: "model status",
            cli: s(&["model", "status", "--wait"]),
            stdin: None,
            ipc: Request::ModelStatus(ModelStatusRequest { wait: true }),
            http: Some(("GET", "/v1/model?wait=true".into(), None)),
            mcp: None,
        },
        Op {
            name: "semantic search",
            cli: s(&["search", "--mode", "semantic", "second line with a zebra"]),
            stdin: None,
            ipc: Request::Search(SearchRequest {
                mode: Some(SearchMode::Semantic),
                ..SearchRequest::new("second line with a zebra")
            }),
            http: Some(("GET", "/v1/search?q=second+line+with+a+zebra&mode=semantic".into(), None)),
            mcp: Some(("search", json!({ "query": "second line with a zebra", "mode": "semantic" }))),
        },
        Op {
            name: "hybrid search",
            cli: s(&["search", "zebra"]),
            stdin: None,
            ipc: Request::Search(SearchRequest::new("zebra")),
            http: Some(("GET", "/v1/search?q=zebra".into(), None)),
            mcp: Some(("search", json!({ "query": "zebra" }))),
        },
    ]
}

/// An MCP session: a `cairn mcp` process fed one request at a time.
struct Mcp {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
    next: u64,
}

impl Mcp {
    fn start(dir: &Path) -> Mcp {
        let mut child = Command::new(bin())
            .arg("--dir")
            .arg(dir)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut m = Mcp { child, out, next: 1 };
        m.send(json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": { "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": { "name": "parity", "version": "0" } } }));
        m.recv();
        m.send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
        m
    }

    fn send(&mut self, v: Value) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    }

    fn recv(&mut self) -> Value {
        let mut line = String::new();
        self.out.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        let id = self.next;
        self.next += 1;
        self.send(json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": tool, "arguments": args } }));
        let r = self.recv();
        assert_eq!(r["id"], id, "{r}");
        assert_eq!(r["result"]["isError"], false, "{tool}: {r}");
        r["result"]["structuredContent"].clone()
    }

    fn finish(mut self) {
        drop(self.child.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

fn tree(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
    let d = root.join(name);
    for (f, content) in files {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        // Fixed times, so every front-end's snapshot of the tree has the same root id.
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000)).unwrap();
    }
    d
}

#[test]
fn every_front_end_gives_the_same_json() {
    let t = tempfile::tempdir().unwrap();
    let trees = t.path().join("trees");
    let a = tree(&trees, "a", &[("x.txt", "x\n"), ("sub/y.txt", "y\n")]);
    let b = tree(&trees, "b", &[("x.txt", "x changed\n"), ("sub/y.txt", "y\n"), ("z.txt", "z\n")]);
    // A tiny random model inside the HTTP daemon's roots.
    let model = trees.join("model");
    std::fs::create_dir_all(&model).unwrap();
    cairn_embed::test_model::write(&model, "mean");
    let ops = ops(&a, &b, model.to_str().unwrap());
    let mut results: Vec<Vec<(String, Option<Value>)>> = Vec::new();

    // CLI --json, embedded.
    let d = t.path().join("cli");
    let mut got = Vec::new();
    for op in &ops {
        let mut args: Vec<&str> = vec!["--json"];
        args.extend(op.cli.iter().map(String::as_str));
        let (code, out, err) = run_in(Some(t.path()), &d, &args, op.stdin.map(str::as_bytes));
        assert_eq!(code, 0, "cli {}: {err}", op.name);
        assert_eq!(out.lines().count(), 1, "cli {}: one JSON document: {out}", op.name);
        got.push(("cli".to_string(), Some(serde_json::from_str::<Value>(&out).unwrap())));
    }
    results.push(got);

    // IPC, through a daemon.
    let d = t.path().join("ipc");
    let daemon = Daemon::start(&d, &[]);
    let mut c = daemon.client();
    let mut got = Vec::new();
    for op in &ops {
        let r = c.execute(&op.ipc, Some(t.path()), None).unwrap_or_else(|e| panic!("ipc {}: {e}", op.name));
        got.push(("ipc".to_string(), Some(r.to_json())));
    }
    daemon.stop();
    results.push(got);

    // HTTP.
    let d = t.path().join("http");
    let addr = free_addr();
    let daemon =
        Daemon::start_env(&d, &["--http", &addr, "--root", trees.to_str().unwrap()], &[("CAIRN_TOKEN", TOKEN)]);
    let mut got = Vec::new();
    for op in &ops {
        let v = op.http.as_ref().map(|(method, path, body)| {
            let (code, body) = http(&addr, method, path, Some(TOKEN), body.as_deref());
            assert!((200..300).contains(&code), "http {}: {code} {body}", op.name);
            serde_json::from_str::<Value>(&body).unwrap_or_else(|e| panic!("http {}: {e}: {body}", op.name))
        });
        got.push(("http".to_string(), v));
    }
    daemon.stop();
    results.push(got);

    // MCP (tables need a table first: made through the CLI before the session).
    let d = t.path().join("mcp");
    let mut mcp = Mcp::start(&d);
    let mut got = Vec::new();
    for op in &ops {
        if ["table create", "table put", "model install", "model status"].contains(&op.name) {
            // Not MCP tools: the session is closed for them and reopened.
            mcp.finish();
            let mut args: Vec<&str> = vec!["--json"];
            args.extend(op.cli.iter().map(String::as_str));
            let (code, _, err) = run_in(Some(t.path()), &d, &args, None);
            assert_eq!(code, 0, "{err}");
            mcp = Mcp::start(&d);
            got.push(("mcp".to_string(), None));
            continue;
        }
        let v = op.mcp.as_ref().map(|(tool, args)| mcp.call(tool, args.clone()));
        got.push(("mcp".to_string(), v));
    }
    mcp.finish();
    results.push(got);

    for (i, op) in ops.iter().enumerate() {
        let mut seen: Vec<(String, Value)> = Vec::new();
        for fe in &results {
            if let (name, Some(v)) = &fe[i] {
                seen.push((name.clone(), without_timing(v.clone())));
            }
        }
        assert!(seen.len() >= 3, "{}: at least three front-ends", op.name);
        for (name, v) in &seen[1..] {
            assert_eq!(v, &seen[0].1, "{}: {name} differs from {}", op.name, seen[0].0);
        }
    }
    // The operations did what they say (not only the same thing everywhere).
    let cli = &results[0];
    let v = |i: usize| cli[i].1.clone().unwrap();
    assert_eq!(v(0)["docs"][0]["status"], "added");
    assert_eq!(v(1)["docs"][0]["status"], "new_version");
    assert_eq!(v(2)["hits"][0]["path"], "notes/a.md");
    assert_eq!(v(3)["files"][0]["lines"][1]["text"], "second line with a zebra");
    assert_eq!(v(4)["selected_version"]["version"], 1);
    assert_eq!(v(5)["content"]["text"], NOTE_V1);
    assert_eq!(v(7)["docs"][0]["tags"], json!(["t1", "t2"]));
    assert_eq!(v(8)["value"], "v");
    assert_eq!(v(9)["versions"].as_array().unwrap().len(), 2);
    assert_eq!(v(12)["changes"].as_array().unwrap().len(), 2);
    assert_eq!(v(15)["records"], json!([{ "name": "Ada" }]));
    assert_eq!(v(17)["value"]["text"], "blue");
    assert_eq!(v(18)["rows"][0]["key"]["text"], "color");
    let n = ops.len();
    assert_eq!(v(n - 4)["model"]["name"], "tiny");
    assert_eq!((v(n - 3)["queued"].clone(), v(n - 3)["loaded"].clone()), (json!(0), json!(true)));
    assert_eq!(v(n - 2)["mode"], "semantic");
    assert!(v(n - 2)["hits"][0]["vector"].is_number());
    assert_eq!(v(n - 1)["mode"], "hybrid");
    assert_eq!(v(n - 1)["hits"][0]["path"], "notes/a.md");
    assert!(v(n - 1)["hits"][0]["bm25"].is_number() && v(n - 1)["hits"][0]["vector"].is_number());
}
