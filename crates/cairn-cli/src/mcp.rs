//! `cairn mcp`: a Model Context Protocol server on stdin/stdout, served with `rmcp` (the
//! official Rust SDK). Each tool is one request of the application layer, run embedded or in
//! the daemon serving the data directory; its result is the request's JSON (as text and as
//! structured content), the same JSON the CLI's `--json`, the IPC and HTTP give.
//!
//! Tools that can return much (search, grep, ls, get, table_query) take a limit with a small
//! default, and their results say when they were cut (`truncated`, `total`). Lines that are
//! not one JSON-RPC message are answered here, before the SDK sees them: a batch (a JSON
//! array) gets `-32600` (MCP has no batches since 2025-06-18), unparsable text `-32700`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use cairn::{Request, Response, docs, tables, trees};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::backend::Backend;

/// Default result sizes for agents (they can ask for more).
const SEARCH_LIMIT: usize = 10;
const GREP_FILES: usize = 20;
const LS_LIMIT: usize = 50;
const GET_BYTES: u64 = 256 << 10;
const QUERY_LIMIT: usize = 100;

/// `add`'s arguments: one named document.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct AddArgs {
    /// The document's name, e.g. notes/meeting.md (relative; no `.` or `..` components).
    name: String,
    /// UTF-8 content.
    #[serde(default)]
    content: Option<String>,
    /// Binary content, base64 (instead of `content`).
    #[serde(default)]
    content_base64: Option<String>,
    /// Tags.
    #[serde(default)]
    tags: Vec<String>,
    /// Metadata key=value pairs.
    #[serde(default)]
    meta: BTreeMap<String, String>,
}

/// The tools, in the order `tools/list` gives them: (name, description, schema).
fn tools() -> Vec<Tool> {
    fn schema<T: schemars::JsonSchema>() -> Arc<serde_json::Map<String, Value>> {
        let v = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(json!({ "type": "object" }));
        Arc::new(v.as_object().cloned().unwrap_or_default())
    }
    vec![
        Tool::new(
            "add",
            "Store a named document in the memory (a new version if the name holds other content). Returns what was stored.",
            schema::<AddArgs>(),
        ),
        Tool::new(
            "search",
            "Search with snippets: BM25 over words (syntax: words, \"exact phrases\", AND/OR/NOT, +required, -excluded) and, with an embedding model installed, passage vectors that find text by meaning. `mode`: keyword, semantic or hybrid (default hybrid with a model, keyword without); each hit reports its `bm25` and `vector` scores. Default limit 10; `total` says how many match.",
            schema::<docs::SearchRequest>(),
        ),
        Tool::new(
            "grep",
            "Regular-expression search over stored document content. Default limit 20 documents; `truncated` says when the limit cut it.",
            schema::<docs::GrepRequest>(),
        ),
        Tool::new(
            "get",
            "A document's content (the current version, or the given one), as text (or base64 when binary). Default max_bytes 262144; `truncated` says when cut.",
            schema::<docs::ContentRequest>(),
        ),
        Tool::new(
            "ls",
            "List documents (path, version, size, type, tags, metadata). Default limit 50; `total` and `truncated` say how many there are.",
            schema::<docs::LsRequest>(),
        ),
        Tool::new("tag", "Add and/or remove tags on documents.", schema::<docs::TagRequest>()),
        Tool::new("versions", "Every version of a document.", schema::<docs::VersionsRequest>()),
        Tool::new("meta", "A document's metadata (one key, or all).", schema::<docs::MetaGetRequest>()),
        Tool::new("snapshot", "Snapshot a directory tree into the store.", schema::<trees::SnapshotRequest>()),
        Tool::new(
            "diff",
            "Paths added, removed, modified or renamed between two snapshots.",
            schema::<trees::DiffRequest>(),
        ),
        Tool::new(
            "table_query",
            "Records of a JSON table matching a FIQL filter (e.g. `age=ge=30;city==Oslo`). Default limit 100.",
            schema::<tables::QueryRequest>(),
        ),
    ]
}

/// The request a tool call makes (`Err`: a message for the agent about its arguments).
fn request(name: &str, args: Value) -> Result<Option<Request>, String> {
    fn parse<T: serde::de::DeserializeOwned>(args: Value) -> Result<T, String> {
        serde_json::from_value(args).map_err(|e| format!("invalid arguments: {e}"))
    }
    Ok(Some(match name {
        "add" => {
            let a: AddArgs = parse(args)?;
            let doc = docs::NamedContent { name: a.name, content: a.content, content_base64: a.content_base64 };
            Request::Add(docs::AddRequest { docs: vec![doc], tags: a.tags, meta: a.meta, ..Default::default() })
        }
        "search" => {
            let mut r: docs::SearchRequest = parse(args.clone())?;
            if args.get("limit").is_none() {
                r.limit = SEARCH_LIMIT;
            }
            Request::Search(r)
        }
        "grep" => {
            let mut r: docs::GrepRequest = parse(args)?;
            r.limit = Some(r.limit.unwrap_or(GREP_FILES));
            Request::Grep(r)
        }
        "get" => {
            let mut r: docs::ContentRequest = parse(args)?;
            r.max_bytes = Some(r.max_bytes.unwrap_or(GET_BYTES));
            Request::Content(r)
        }
        "ls" => {
            let mut r: docs::LsRequest = parse(args)?;
            r.limit = Some(r.limit.unwrap_or(LS_LIMIT));
            Request::Ls(r)
        }
        "tag" => Request::Tag(parse(args)?),
        "versions" => Request::Versions(parse(args)?),
        "meta" => Request::MetaGet(parse(args)?),
        "snapshot" => Request::Snapshot(parse(args)?),
        "diff" => Request::Diff(parse(args)?),
        "table_query" => {
            let mut r: tables::QueryRequest = parse(args)?;
            r.limit = Some(r.limit.unwrap_or(QUERY_LIMIT));
            Request::TableQuery(r)
        }
        _ => return Ok(None),
    }))
}

struct Server {
    backend: Arc<Mutex<Backend>>,
}

fn text_result(v: &Value, error: bool) -> CallToolResult {
    let text = serde_json::to_string(v).unwrap_or_default();
    let mut r = if error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(v.clone());
    r
}

impl rmcp::ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cairn", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "cairn memory: add named notes, then search (BM25) or grep them; get reads a document; \
                 ls, tag, versions and meta manage them; snapshot/diff handle directory trees; \
                 table_query reads JSON tables.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let req = match self::request(&request.name, args) {
            Ok(Some(r)) => r,
            Ok(None) => return Err(ErrorData::invalid_params(format!("unknown tool {:?}", request.name), None)),
            Err(msg) => {
                let body = cairn::Error::bad_request(msg).body();
                return Ok(text_result(&serde_json::to_value(body).unwrap_or_default(), true).into());
            }
        };
        let backend = self.backend.clone();
        let res = tokio::task::spawn_blocking(move || {
            let mut b = backend.lock().unwrap_or_else(|p| p.into_inner());
            b.execute(req, None, None)
        })
        .await
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(match res {
            Ok(r) => text_result(&result_json(&r), false),
            Err(e) => text_result(&serde_json::to_value(e.body()).unwrap_or_default(), true),
        }
        .into())
    }
}

fn result_json(r: &Response) -> Value {
    r.to_json()
}

/// A JSON-RPC error answer for a line the SDK is not given.
fn error_line(id: Value, code: i64, message: &str) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string()
}

/// What to do with one input line: forward it to the SDK, or answer it here.
fn screen(line: &str) -> Result<(), String> {
    let v: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return Err(error_line(Value::Null, -32700, &format!("parse error: {e}"))),
    };
    match &v {
        Value::Array(_) => Err(error_line(
            Value::Null,
            -32600,
            "invalid request: JSON-RPC batches are not supported (MCP removed them); send one message per line",
        )),
        Value::Object(o) => {
            let id = o.get("id").cloned().unwrap_or(Value::Null);
            let versioned = o.get("jsonrpc").and_then(Value::as_str) == Some("2.0");
            let shaped =
                o.get("method").is_some_and(Value::is_string) || o.contains_key("result") || o.contains_key("error");
            if versioned && shaped {
                Ok(())
            } else {
                Err(error_line(id, -32600, "invalid request: not a JSON-RPC 2.0 message"))
            }
        }
        _ => Err(error_line(Value::Null, -32600, "invalid request: not a JSON-RPC 2.0 message")),
    }
}

/// Serves MCP on stdin/stdout until stdin closes.
pub fn run(data: &Path, remote: bool, addr: Option<&str>) -> cairn::Result<()> {
    let backend = Arc::new(Mutex::new(Backend::connect(data, remote, addr)?));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| cairn::Error::internal(format!("starting the runtime: {e}")))?;
    rt.block_on(async {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let (sdk_out, mut to_sdk) = tokio::io::split(ours);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
        // One writer: the SDK's answers and ours, whole lines each.
        let writer = tokio::spawn(async move {
            let mut stdout = tokio::io::stdout();
            while let Some(line) = rx.recv().await {
                if stdout.write_all(line.as_bytes()).await.is_err() || stdout.write_all(b"\n").await.is_err() {
                    return;
                }
                let _ = stdout.flush().await;
            }
        });
        let answers = tx.clone();
        let from_sdk = tokio::spawn(async move {
            let mut lines = BufReader::new(sdk_out).lines();
            while let Ok(Some(l)) = lines.next_line().await {
                if answers.send(l).await.is_err() {
                    return;
                }
            }
        });
        // Input is pumped from its own task: the SDK's handshake reads it before `serve` returns.
        let screened = tx.clone();
        let pump = tokio::spawn(async move {
            let mut stdin = BufReader::new(tokio::io::stdin()).lines();
            while let Ok(Some(line)) = stdin.next_line().await {
                if line.trim().is_empty() {
                    continue;
                }
                match screen(&line) {
                    Ok(()) => {
                        if to_sdk.write_all(line.as_bytes()).await.is_err() || to_sdk.write_all(b"\n").await.is_err() {
                            break;
                        }
                    }
                    Err(answer) => {
                        let _ = screened.send(answer).await;
                    }
                }
            }
            to_sdk
        });
        let service = Server { backend: backend.clone() }.serve(theirs).await;
        match service {
            Ok(s) => {
                // End of input: let the SDK finish what it was asked, then close.
                let mut to_sdk = pump.await.map_err(|e| cairn::Error::internal(e.to_string()))?;
                let _ = to_sdk.shutdown().await;
                drop(to_sdk);
                let _ = s.waiting().await;
            }
            // The client left, or its first message was not `initialize`: nothing to serve.
            Err(e) => {
                pump.abort();
                eprintln!("cairn: mcp: {e}");
            }
        }
        let _ = from_sdk.await;
        drop(tx);
        let _ = writer.await;
        Ok::<(), cairn::Error>(())
    })?;
    let backend = Arc::try_unwrap(backend)
        .map_err(|_| cairn::Error::internal("the MCP server still holds the data directory"))?
        .into_inner()
        .unwrap_or_else(|p| p.into_inner());
    backend.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_tool_is_callable_and_lines_are_screened() {
        for t in tools() {
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
            // Each tool maps to a request (or says what is wrong with empty arguments).
            assert!(request(&t.name, json!({})).map(|r| r.is_some()).unwrap_or(true), "{}", t.name);
        }
        assert_eq!(request("nope", json!({})), Ok(None));
        let search = tools().into_iter().find(|t| t.name == "search").unwrap();
        assert_eq!(search.input_schema.get("required"), Some(&json!(["query"])));
        assert!(screen(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).is_ok());
        let batch: Value = serde_json::from_str(&screen("[]").unwrap_err()).unwrap();
        assert_eq!(batch["error"]["code"], -32600);
        let broken: Value = serde_json::from_str(&screen("{broken").unwrap_err()).unwrap();
        assert_eq!(broken["error"]["code"], -32700);
        let odd: Value = serde_json::from_str(&screen(r#"{"id":4,"x":1}"#).unwrap_err()).unwrap();
        assert_eq!((odd["id"].clone(), odd["error"]["code"].clone()), (json!(4), json!(-32600)));
    }
}
