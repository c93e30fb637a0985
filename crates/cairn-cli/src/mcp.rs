//! `cairn mcp`: a Model Context Protocol server on stdin/stdout (JSON-RPC 2.0, one message
//! per line) exposing the document memory to agents: add, search, grep, get, ls, tag.
//!
//! Each tool runs the matching `cairn` command with `--json` (or raw content for `get`),
//! in-process or in the daemon serving the data directory, so agents, the CLI and the daemon
//! share one implementation and one output format.

use std::io::{self, BufRead, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Result;
use cairn_server::client::Client;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::run_line;

/// The tools, in the order `tools/list` gives them.
const TOOLS: [&str; 6] = ["add", "search", "grep", "get", "ls", "tag"];

/// Protocol revisions this server speaks, newest first.
const VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

enum Backend {
    Embedded(Box<Ctx>),
    Remote(Client),
}

/// A `Write` whose bytes can be taken out later (the embedded command's stderr).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Backend {
    /// Runs a command line with `input` as its standard input; returns (exit status, stdout,
    /// stderr).
    fn run(&mut self, args: Vec<String>, input: Option<Vec<u8>>) -> Result<(u8, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        match self {
            Backend::Remote(c) => {
                let mut err = Vec::new();
                let cwd = std::env::current_dir().unwrap_or_default();
                let mut r = io::Cursor::new(input.unwrap_or_default());
                let reader: Option<&mut dyn io::Read> = if r.get_ref().is_empty() { None } else { Some(&mut r) };
                let code = c.run_cli(args, &cwd, false, reader, &mut out, &mut err)?;
                Ok((code, out, err))
            }
            Backend::Embedded(ctx) => {
                let err = Captured::default();
                ctx.err = Box::new(err.clone());
                ctx.input = Box::new(io::Cursor::new(input.unwrap_or_default()));
                let code = run_line(ctx, args, &mut out);
                ctx.input = Box::new(io::empty());
                let err = std::mem::take(&mut *err.0.lock().expect("not poisoned"));
                Ok((code, out, err))
            }
        }
    }
}

fn tools() -> Value {
    let filter = json!({
        "tag": { "type": "array", "items": { "type": "string" }, "description": "only documents with all these tags" },
        "path_glob": { "type": "string", "description": "only documents whose path matches this glob" },
        "meta": { "type": "object", "additionalProperties": { "type": "string" }, "description": "only documents with these key=value pairs" }
    });
    let with_filter = |mut props: Value| {
        props.as_object_mut().expect("object").extend(filter.as_object().expect("object").clone());
        props
    };
    json!([
        {
            "name": "add",
            "description": "Store a document in the memory (a new version if the path already holds other content). Returns the stored record as JSON.",
            "inputSchema": { "type": "object", "required": ["path", "content"], "properties": {
                "path": { "type": "string", "description": "document path or name, e.g. notes/meeting.md" },
                "content": { "type": "string", "description": "the text" },
                "tags": { "type": "array", "items": { "type": "string" } },
                "meta": { "type": "object", "additionalProperties": { "type": "string" } }
            } }
        },
        {
            "name": "search",
            "description": "BM25 full-text search with snippets. Query syntax: words, \"exact phrases\", AND/OR/NOT, +required, -excluded. One JSON line per hit.",
            "inputSchema": { "type": "object", "required": ["query"], "properties": with_filter(json!({
                "query": { "type": "string" },
                "limit": { "type": "integer", "minimum": 1, "maximum": 1000, "default": 10 }
            })) }
        },
        {
            "name": "grep",
            "description": "Regular-expression search over stored document content, one JSON line per matching line.",
            "inputSchema": { "type": "object", "required": ["pattern"], "properties": with_filter(json!({
                "pattern": { "type": "string", "description": "Rust regex syntax" },
                "ignore_case": { "type": "boolean" },
                "word": { "type": "boolean", "description": "whole words only" },
                "fixed": { "type": "boolean", "description": "the pattern is a literal string" },
                "context": { "type": "integer", "minimum": 0, "maximum": 20 }
            })) }
        },
        {
            "name": "get",
            "description": "A document's content (the current version, or the given one).",
            "inputSchema": { "type": "object", "required": ["path"], "properties": {
                "path": { "type": "string" },
                "version": { "type": "integer", "minimum": 1 }
            } }
        },
        {
            "name": "ls",
            "description": "List documents (path, version, size, type, tags, metadata), one JSON line each.",
            "inputSchema": { "type": "object", "properties": with_filter(json!({})) }
        },
        {
            "name": "tag",
            "description": "Add and/or remove tags on documents.",
            "inputSchema": { "type": "object", "required": ["paths"], "properties": {
                "paths": { "type": "array", "items": { "type": "string" }, "minItems": 1 },
                "add": { "type": "array", "items": { "type": "string" } },
                "remove": { "type": "array", "items": { "type": "string" } }
            } }
        }
    ])
}

/// Invalid tool arguments.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadArgs(String);

fn s(args: &Value, k: &str) -> Result<String, BadArgs> {
    args.get(k)
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| BadArgs(format!("`{k}` (a string) is required")))
}

fn strings(args: &Value, k: &str) -> Result<Vec<String>, BadArgs> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(String::from).ok_or_else(|| BadArgs(format!("`{k}` must hold strings"))))
            .collect(),
        Some(_) => Err(BadArgs(format!("`{k}` must be an array of strings"))),
    }
}

fn meta_args(args: &Value, argv: &mut Vec<String>) -> Result<(), BadArgs> {
    if let Some(m) = args.get("meta").and_then(Value::as_object) {
        for (k, v) in m {
            let v = v.as_str().ok_or_else(|| BadArgs("`meta` values must be strings".into()))?;
            argv.extend(["--meta".into(), format!("{k}={v}")]);
        }
    }
    Ok(())
}

fn filter_args(args: &Value, argv: &mut Vec<String>) -> Result<(), BadArgs> {
    for t in strings(args, "tag")? {
        argv.extend(["--tag".into(), t]);
    }
    if let Some(g) = args.get("path_glob").and_then(Value::as_str) {
        argv.extend(["--path-glob".into(), g.into()]);
    }
    meta_args(args, argv)
}

fn uint(args: &Value, k: &str) -> Result<Option<u64>, BadArgs> {
    match args.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| BadArgs(format!("`{k}` must be a non-negative integer"))),
    }
}

/// A command line a tool call runs, with its standard input.
struct Line {
    args: Vec<String>,
    input: Option<Vec<u8>>,
}

impl Line {
    fn new(args: Vec<String>) -> Line {
        Line { args, input: None }
    }
}

/// The command lines a tool call runs, in order (`tag` may need `tag` and `untag`).
fn command_lines(name: &str, args: &Value) -> Result<Vec<Line>, BadArgs> {
    let mut argv: Vec<String> = vec![];
    match name {
        "add" => {
            // The content is the standard input of `cairn add - --name PATH`.
            argv.extend(["add".into(), "--json".into(), "--name".into(), s(args, "path")?]);
            for t in strings(args, "tags")? {
                argv.extend(["--tag".into(), t]);
            }
            meta_args(args, &mut argv)?;
            argv.extend(["--".into(), "-".into()]);
            return Ok(vec![Line { args: argv, input: Some(s(args, "content")?.into_bytes()) }]);
        }
        "search" => {
            let limit = uint(args, "limit")?.unwrap_or(10).clamp(1, 1000);
            argv.extend(["search".into(), "--json".into(), "-n".into(), limit.to_string()]);
            filter_args(args, &mut argv)?;
            argv.extend(["--".into(), s(args, "query")?]);
        }
        "grep" => {
            argv.extend(["grep".into(), "--json".into()]);
            for (k, flag) in [("ignore_case", "-i"), ("word", "-w"), ("fixed", "-F")] {
                if args.get(k).and_then(Value::as_bool).unwrap_or(false) {
                    argv.push(flag.into());
                }
            }
            if let Some(c) = uint(args, "context")? {
                argv.extend(["-C".into(), c.min(20).to_string()]);
            }
            filter_args(args, &mut argv)?;
            argv.extend(["--".into(), s(args, "pattern")?]);
        }
        "get" => {
            argv.push("cat".into());
            if let Some(v) = uint(args, "version")? {
                argv.extend(["--version".into(), v.to_string()]);
            }
            argv.extend(["--".into(), s(args, "path")?]);
        }
        "ls" => {
            argv.extend(["ls".into(), "--json".into()]);
            filter_args(args, &mut argv)?;
        }
        "tag" => {
            let paths = strings(args, "paths")?;
            if paths.is_empty() {
                return Err(BadArgs("`paths` must name at least one document".into()));
            }
            let mut lines = Vec::new();
            for (command, key) in [("tag", "add"), ("untag", "remove")] {
                let tags = strings(args, key)?;
                if tags.is_empty() {
                    continue;
                }
                let mut argv = vec![command.to_string()];
                for t in tags {
                    argv.extend(["-t".into(), t]);
                }
                argv.push("--".into());
                argv.extend(paths.iter().cloned());
                lines.push(Line::new(argv));
            }
            if lines.is_empty() {
                return Err(BadArgs("give `add` and/or `remove`".into()));
            }
            return Ok(lines);
        }
        other => return Err(BadArgs(format!("unknown tool {other:?}"))),
    }
    Ok(vec![Line::new(argv)])
}

fn call(backend: &mut Backend, name: &str, args: &Value) -> Result<Value> {
    let lines = match command_lines(name, args) {
        Ok(l) => l,
        Err(e) => return Ok(json!({ "content": [{ "type": "text", "text": e.0 }], "isError": true })),
    };
    let mut outs = Vec::new();
    let mut errs = Vec::new();
    let mut code = 0;
    for line in lines {
        let (c, o, e) = backend.run(line.args, line.input)?;
        outs.extend(o);
        errs.extend(e);
        code = code.max(c);
    }
    // grep exits 1 when nothing matches: not an error for an agent.
    if name == "grep" && code == 1 && errs.is_empty() {
        return Ok(result(0, b"no matches".to_vec(), errs));
    }
    Ok(result(code, outs, errs))
}

fn result(code: u8, out: Vec<u8>, err: Vec<u8>) -> Value {
    let mut t = String::from_utf8_lossy(&out).into_owned();
    if code != 0 {
        t = String::from_utf8_lossy(&err).trim().trim_start_matches("cairn: ").to_string();
    } else if t.is_empty() {
        t = "ok".into();
    }
    json!({ "content": [{ "type": "text", "text": t }], "isError": code != 0 })
}

fn reply(out: &mut impl Write, id: &Value, result: Result<Value, (i64, String)>) -> io::Result<()> {
    let msg = match result {
        Ok(r) => json!({ "jsonrpc": "2.0", "id": id, "result": r }),
        Err((code, message)) => json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }),
    };
    writeln!(out, "{msg}")?;
    out.flush()
}

/// Serves MCP on stdin/stdout until stdin closes.
pub fn run(data: &Path, remote: bool, addr: Option<&str>) -> Result<()> {
    let mut backend = match crate::remote::target(data, remote, addr)? {
        Some(c) => Backend::Remote(c),
        None => {
            let mut ctx = Ctx::embedded(data.to_path_buf());
            ctx.progress = false;
            ctx.tty = false;
            Backend::Embedded(Box::new(ctx))
        }
    };
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                reply(&mut out, &Value::Null, Err((-32700, format!("parse error: {e}"))))?;
                continue;
            }
        };
        let Some(method) = msg.get("method").and_then(Value::as_str) else {
            // A response to us (we send no requests) or garbage.
            if msg.get("id").is_some() && msg.get("result").is_none() && msg.get("error").is_none() {
                reply(&mut out, &msg["id"], Err((-32600, "invalid request: no method".into())))?;
            }
            continue;
        };
        let Some(id) = msg.get("id").cloned() else { continue }; // a notification
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let r = match method {
            "initialize" => {
                let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or(VERSIONS[0]);
                let v = VERSIONS.iter().find(|v| **v == asked).copied().unwrap_or(VERSIONS[0]);
                Ok(json!({
                    "protocolVersion": v,
                    "capabilities": { "tools": { "listChanged": false } },
                    "serverInfo": { "name": "cairn", "version": env!("CARGO_PKG_VERSION") },
                    "instructions": "cairn document memory: add notes and files, then search (BM25) or grep them."
                }))
            }
            "ping" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": tools() })),
            "tools/call" => match params.get("name").and_then(Value::as_str) {
                None => Err((-32602, "tools/call needs a tool name".to_string())),
                Some(name) if !TOOLS.contains(&name) => Err((-32602, format!("unknown tool {name:?}"))),
                Some(name) => {
                    let args = params.get("arguments").cloned().unwrap_or(json!({}));
                    call(&mut backend, name, &args).map_err(|e| (-32603, format!("{e:#}")))
                }
            },
            other => Err((-32601, format!("method not found: {other}"))),
        };
        reply(&mut out, &id, r)?;
    }
    if let Backend::Embedded(ctx) = backend {
        ctx.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_tools_are_the_callable_ones() {
        let listed: Vec<String> =
            tools().as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().into()).collect();
        assert_eq!(listed, TOOLS);
        let lines = command_lines("tag", &json!({ "paths": ["a"], "add": ["x"], "remove": ["y"] })).unwrap();
        let argv: Vec<Vec<String>> = lines.into_iter().map(|l| l.args).collect();
        assert_eq!(argv, [["tag", "-t", "x", "--", "a"], ["untag", "-t", "y", "--", "a"]]);
    }
}
