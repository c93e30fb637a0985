//! HTTP/REST over the application layer (axum). Every route needs `Authorization: Bearer
//! <token>`: the full token grants everything inside the configured roots, the read-only token
//! only reads. Each route translates its path, query and body into one [`cairn::Request`] and
//! answers with the result's JSON ([`cairn::Response::to_json`]), the same JSON the CLI's
//! `--json`, the IPC and MCP give. Every error, axum's own included (400, 404, 405, 413, 415,
//! 422), is the [`cairn::ErrorBody`] JSON: `{"error": {"kind": "...", "message": "..."}}`.
//! `GET /openapi.json` describes the routes.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use cairn::docs::{self, Filter};
use cairn::text::Blob;
use cairn::{Access, Cairn, Call, Error, ErrorKind, kv, tables, trees};
use serde_json::Value;
use tokio::net::TcpListener;

use crate::{Config, Shared};

/// Largest request body (document content).
const BODY_LIMIT: usize = 64 << 20;

pub(crate) async fn serve(l: TcpListener, shared: Arc<Shared>) {
    let app = router(shared.cairn.clone(), shared.config.clone());
    let stop = shared.shutdown.clone();
    let _ = axum::serve(l, app).with_graceful_shutdown(async move { stop.cancelled().await }).await;
}

#[derive(Clone)]
struct App {
    cairn: Cairn,
    config: Arc<Config>,
}

/// The REST routes over `cairn`, with the tokens and roots of `config`.
pub fn router(cairn: Cairn, config: Config) -> Router {
    let app = App { cairn, config: Arc::new(config) };
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/v1/docs", get(list_docs).post(add_docs))
        .route("/v1/doc", get(get_doc).delete(delete_doc))
        .route("/v1/doc/content", get(get_content))
        .route("/v1/doc/versions", get(versions))
        .route("/v1/tags", post(tag_docs))
        .route("/v1/meta", get(meta_get).post(meta_set))
        .route("/v1/search", get(search))
        .route("/v1/grep", get(grep))
        .route("/v1/reindex", post(reindex))
        .route("/v1/model", get(model_status).post(model_install))
        .route("/v1/verify", get(verify))
        .route("/v1/repair", post(repair))
        .route("/v1/gc", post(gc))
        .route("/v1/du", get(du))
        .route("/v1/snapshots", get(list_snapshots).post(take_snapshot))
        .route("/v1/snapshots/{name}", get(snapshot_info).delete(delete_snapshot))
        .route("/v1/snapshots/{name}/checkout", post(checkout))
        .route("/v1/snapshots/{a}/diff/{b}", get(diff_snapshots))
        .route("/v1/kv", get(scan_kv))
        .route("/v1/kv/{*key}", get(get_kv).put(put_kv).delete(delete_kv))
        .route("/v1/tables", get(list_tables).post(batch_write))
        .route("/v1/tables/{t}", get(query_table).post(insert_record).put(create_table).delete(drop_table))
        .route("/v1/tables/{t}/_indexes", get(list_indexes))
        .route("/v1/tables/{t}/_indexes/{name}", put(create_index).delete(drop_index))
        .route("/v1/tables/{t}/_verify", get(verify_table))
        .route("/v1/tables/{t}/{id}", get(get_record).put(put_record).patch(patch_record).delete(delete_record))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .layer(middleware::from_fn(json_errors))
        .with_state(app)
}

/// The HTTP status of an error kind (the one place they are paired).
pub fn status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
        ErrorKind::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::Corrupt => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The error kind of a status axum answered with itself.
fn kind_of(status: StatusCode) -> ErrorKind {
    match status {
        StatusCode::NOT_FOUND => ErrorKind::NotFound,
        StatusCode::UNAUTHORIZED => ErrorKind::Unauthorized,
        StatusCode::FORBIDDEN => ErrorKind::Forbidden,
        StatusCode::CONFLICT => ErrorKind::Conflict,
        StatusCode::PRECONDITION_FAILED => ErrorKind::PreconditionFailed,
        s if s.is_client_error() => ErrorKind::BadRequest,
        _ => ErrorKind::Internal,
    }
}

/// An error answer.
struct ApiError(Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> ApiError {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (status(self.0.kind()), axum::Json(self.0.body())).into_response();
        if self.0.kind() == ErrorKind::Unauthorized {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

type ApiResult<T> = Result<T, ApiError>;

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError(Error::bad_request(msg))
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError(Error::not_found(format!("no route {}", uri.path())))
}

async fn method_not_allowed(req: Request) -> Response {
    let e = Error::bad_request(format!("method {} is not allowed on {}", req.method(), req.uri().path()));
    (StatusCode::METHOD_NOT_ALLOWED, axum::Json(e.body())).into_response()
}

/// Rewrites every error answer that is not JSON (axum's own rejections: malformed JSON, wrong
/// content type, body too large) into the error JSON, keeping its status.
async fn json_errors(req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    let s = r.status();
    let is_json = r.headers().get(header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(s.is_client_error() || s.is_server_error()) || is_json {
        return r;
    }
    let (parts, body) = r.into_parts();
    let text = axum::body::to_bytes(body, 64 << 10).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = s.canonical_reason().unwrap_or("error").to_string();
    }
    let mut out = (s, axum::Json(Error::new(kind_of(s), message).body())).into_response();
    for (k, v) in parts.headers.iter() {
        if k != header::CONTENT_TYPE && k != header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

/// Checks the bearer token and records what it grants.
async fn auth(State(app): State<App>, mut req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    match app.config.access_for(given) {
        Some(access) => {
            req.extensions_mut().insert(access);
            next.run(req).await
        }
        None => ApiError(Error::new(ErrorKind::Unauthorized, "missing or wrong bearer token")).into_response(),
    }
}

/// Runs a request on the blocking pool.
async fn exec(app: &App, access: Access, req: cairn::Request) -> ApiResult<cairn::Response> {
    let c = app.cairn.clone();
    tokio::task::spawn_blocking(move || c.execute(req, &mut Call { access, cwd: None, input: None, progress: None }))
        .await
        .map_err(|e| ApiError(Error::internal(e.to_string())))?
        .map_err(ApiError)
}

/// Runs a request and answers with its JSON.
async fn answer(app: &App, access: Access, status: StatusCode, req: cairn::Request) -> ApiResult<Response> {
    let r = exec(app, access, req).await?;
    Ok((status, axum::Json(r.to_json())).into_response())
}

type Access_ = axum::Extension<Access>;

/// The pairs of a query string, values percent-decoded to bytes (`+` is a space).
fn query_pairs(uri: &Uri) -> ApiResult<Vec<(String, Vec<u8>)>> {
    let mut out = Vec::new();
    for part in uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let dec = |s: &str| percent_encoding::percent_decode_str(&s.replace('+', " ")).collect::<Vec<u8>>();
        let k = String::from_utf8(dec(k)).map_err(|_| bad(format!("query parameter {k:?} is not UTF-8")))?;
        out.push((k, dec(v)));
    }
    Ok(out)
}

/// The query string as text parameters (each name once, the last value wins), with the names
/// `known` allows; any other name is an error.
fn query_map(uri: &Uri, known: &[&str]) -> ApiResult<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (k, v) in query_pairs(uri)? {
        if !known.contains(&k.as_str()) {
            return Err(bad(format!("unknown query parameter {k:?} (known: {})", known.join(", "))));
        }
        let v = String::from_utf8(v).map_err(|_| bad(format!("query parameter {k} is not UTF-8")))?;
        out.insert(k, v);
    }
    Ok(out)
}

fn flag(q: &BTreeMap<String, String>, k: &str) -> ApiResult<Option<bool>> {
    match q.get(k).map(String::as_str) {
        None => Ok(None),
        Some("" | "1" | "true") => Ok(Some(true)),
        Some("0" | "false") => Ok(Some(false)),
        Some(v) => Err(bad(format!("{k}={v}: expected true or false"))),
    }
}

fn number<T: std::str::FromStr>(q: &BTreeMap<String, String>, k: &str) -> ApiResult<Option<T>> {
    q.get(k).map(|v| v.parse().map_err(|_| bad(format!("{k}={v} is not a number")))).transpose()
}

const FILTER_PARAMS: [&str; 5] = ["tag", "meta", "path_glob", "since", "until"];

/// The document filter of a query string: `tag` and `meta` (`k=v`) comma-separated.
fn filter(q: &BTreeMap<String, String>) -> ApiResult<Filter> {
    let list = |k: &str| -> Vec<String> {
        q.get(k).map(|s| s.split(',').filter(|t| !t.is_empty()).map(String::from).collect()).unwrap_or_default()
    };
    let mut meta = BTreeMap::new();
    for kv in list("meta") {
        let (k, v) = kv.split_once('=').ok_or_else(|| bad(format!("meta {kv:?} is not k=v")))?;
        meta.insert(k.to_string(), v.to_string());
    }
    Ok(Filter {
        tags: list("tag"),
        meta,
        path_glob: q.get("path_glob").cloned(),
        since: q.get("since").cloned(),
        until: q.get("until").cloned(),
    })
}

fn params<'a>(own: &[&'a str], with_filter: bool) -> Vec<&'a str> {
    let mut v = own.to_vec();
    if with_filter {
        v.extend(FILTER_PARAMS);
    }
    v
}

async fn list_docs(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &params(&["limit"], true))?;
    let req = docs::LsRequest { filter: filter(&q)?, limit: number(&q, "limit")? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::Ls(req)).await
}

async fn add_docs(State(app): State<App>, a: Access_, body: axum::Json<docs::AddRequest>) -> ApiResult<Response> {
    let req = body.0;
    if req.stdin.is_some() {
        return Err(bad("`stdin` has no meaning over HTTP; give the content in `docs`"));
    }
    let r = exec(&app, a.0, cairn::Request::Add(req)).await?;
    let created = match &r {
        cairn::Response::Add(x) => x.added + x.new_versions > 0,
        _ => false,
    };
    let status = if created { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, axum::Json(r.to_json())).into_response())
}

fn doc_param(q: &BTreeMap<String, String>) -> ApiResult<String> {
    q.get("doc").cloned().ok_or_else(|| bad("give the document: ?doc=NAME or an absolute path"))
}

async fn get_doc(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["doc", "version"])?;
    let req = docs::GetRequest { doc: doc_param(&q)?, version: number(&q, "version")? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::Get(req)).await
}

async fn versions(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["doc"])?;
    answer(&app, a.0, StatusCode::OK, cairn::Request::Versions(docs::VersionsRequest { doc: doc_param(&q)? })).await
}

async fn delete_doc(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["doc"])?;
    answer(&app, a.0, StatusCode::OK, cairn::Request::Rm(docs::RmRequest { docs: vec![doc_param(&q)?] })).await
}

/// `GET /v1/doc/content?doc=&version=`: the raw content, streamed in 64 KiB pieces read on the
/// blocking pool (a large document never sits whole in memory; a slow client holds back the
/// reader through the channel). With `json=true`, the content in JSON (text, or base64 when
/// binary; `max_bytes` cuts it).
async fn get_content(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["doc", "version", "json", "max_bytes"])?;
    let (doc, version) = (doc_param(&q)?, number(&q, "version")?);
    if flag(&q, "json")?.unwrap_or(false) {
        let req = docs::ContentRequest { doc, version, max_bytes: number(&q, "max_bytes")? };
        return answer(&app, a.0, StatusCode::OK, cairn::Request::Content(req)).await;
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let c = app.cairn.clone();
    let access = a.0;
    let mime = tokio::task::spawn_blocking(move || -> cairn::Result<String> {
        let call = Call { access, cwd: None, input: None, progress: None };
        let (record, _, mut r) = c.content_reader(&doc, version, &call)?;
        tokio::task::spawn_blocking(move || {
            use std::io::Read;
            loop {
                let mut buf = vec![0u8; 64 << 10];
                let item = match r.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        buf.truncate(n);
                        Ok(Bytes::from(buf))
                    }
                    Err(e) => Err(e),
                };
                let stop = item.is_err();
                if tx.blocking_send(item).is_err() || stop {
                    return;
                }
            }
        });
        Ok(record.mime)
    })
    .await
    .map_err(|e| ApiError(Error::internal(e.to_string())))??;
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Ok(([(header::CONTENT_TYPE, mime)], Body::from_stream(body)).into_response())
}

async fn tag_docs(State(app): State<App>, a: Access_, body: axum::Json<docs::TagRequest>) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Tag(body.0)).await
}

async fn meta_set(State(app): State<App>, a: Access_, body: axum::Json<docs::MetaSetRequest>) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::MetaSet(body.0)).await
}

async fn meta_get(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["doc", "key"])?;
    let req = docs::MetaGetRequest { doc: doc_param(&q)?, key: q.get("key").cloned() };
    answer(&app, a.0, StatusCode::OK, cairn::Request::MetaGet(req)).await
}

async fn search(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &params(&["q", "limit", "offset", "words", "snippets", "mode"], true))?;
    let d = docs::SearchRequest::default();
    let mode = match q.get("mode").map(String::as_str) {
        None => None,
        Some("keyword") => Some(docs::SearchMode::Keyword),
        Some("semantic") => Some(docs::SearchMode::Semantic),
        Some("hybrid") => Some(docs::SearchMode::Hybrid),
        Some(m) => return Err(bad(format!("mode={m}: expected keyword, semantic or hybrid"))),
    };
    let req = docs::SearchRequest {
        query: q.get("q").cloned().ok_or_else(|| bad("give the query: ?q=..."))?,
        limit: number(&q, "limit")?.unwrap_or(d.limit).min(10_000),
        offset: number(&q, "offset")?.unwrap_or(0),
        words: flag(&q, "words")?.unwrap_or(false),
        snippets: flag(&q, "snippets")?.unwrap_or(true),
        filter: filter(&q)?,
        mode,
    };
    answer(&app, a.0, StatusCode::OK, cairn::Request::Search(req)).await
}

async fn grep(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &params(&["pattern", "i", "w", "F", "C", "limit", "scan_all"], true))?;
    let req = docs::GrepRequest {
        pattern: q.get("pattern").cloned().ok_or_else(|| bad("give the pattern: ?pattern=..."))?,
        ignore_case: flag(&q, "i")?.unwrap_or(false),
        word: flag(&q, "w")?.unwrap_or(false),
        fixed: flag(&q, "F")?.unwrap_or(false),
        context: number::<usize>(&q, "C")?.unwrap_or(0).min(100),
        filter: filter(&q)?,
        limit: Some(number(&q, "limit")?.unwrap_or(1000)),
        scan_all: flag(&q, "scan_all")?.unwrap_or(false),
    };
    answer(&app, a.0, StatusCode::OK, cairn::Request::Grep(req)).await
}

async fn reindex(State(app): State<App>, a: Access_) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Reindex(Default::default())).await
}

async fn model_status(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["wait"])?;
    let req = cairn::model::ModelStatusRequest { wait: flag(&q, "wait")?.unwrap_or(false) };
    answer(&app, a.0, StatusCode::OK, cairn::Request::ModelStatus(req)).await
}

async fn model_install(
    State(app): State<App>,
    a: Access_,
    body: axum::Json<cairn::model::ModelInstallRequest>,
) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::ModelInstall(body.0)).await
}

async fn verify(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["chunks"])?;
    let req = cairn::verify::VerifyRequest { chunks: flag(&q, "chunks")?.unwrap_or(true) };
    answer(&app, a.0, StatusCode::OK, cairn::Request::Verify(req)).await
}

async fn repair(
    State(app): State<App>,
    a: Access_,
    body: axum::Json<cairn::repair::RepairRequest>,
) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Repair(body.0)).await
}

async fn gc(State(app): State<App>, a: Access_) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Gc(Default::default())).await
}

async fn du(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let q = query_map(&uri, &["snapshot"])?;
    answer(&app, a.0, StatusCode::OK, cairn::Request::Du(trees::DuRequest { snapshot: q.get("snapshot").cloned() }))
        .await
}

async fn list_snapshots(State(app): State<App>, a: Access_) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Snapshots(Default::default())).await
}

async fn take_snapshot(
    State(app): State<App>,
    a: Access_,
    body: axum::Json<trees::SnapshotRequest>,
) -> ApiResult<Response> {
    if !body.0.source.is_absolute() {
        return Err(bad("source must be an absolute path"));
    }
    answer(&app, a.0, StatusCode::CREATED, cairn::Request::Snapshot(body.0)).await
}

async fn snapshot_info(State(app): State<App>, a: Access_, Path(name): Path<String>) -> ApiResult<Response> {
    let r = exec(&app, a.0, cairn::Request::Snapshots(Default::default())).await?;
    let cairn::Response::Snapshots(list) = r else { return Err(ApiError(Error::internal("unexpected answer"))) };
    match list.snapshots.into_iter().find(|s| s.name == name) {
        Some(s) => Ok(axum::Json(s).into_response()),
        None => Err(ApiError(Error::not_found(format!("no snapshot {name}")))),
    }
}

async fn delete_snapshot(State(app): State<App>, a: Access_, Path(name): Path<String>) -> ApiResult<Response> {
    let req = trees::RmSnapshotRequest { names: vec![name] };
    answer(&app, a.0, StatusCode::OK, cairn::Request::RmSnapshot(req)).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CheckoutBody {
    dest: std::path::PathBuf,
    #[serde(default)]
    mode: trees::Mode,
}

async fn checkout(
    State(app): State<App>,
    a: Access_,
    Path(name): Path<String>,
    body: axum::Json<CheckoutBody>,
) -> ApiResult<Response> {
    if !body.0.dest.is_absolute() {
        return Err(bad("dest must be an absolute path"));
    }
    let req = trees::CheckoutRequest { snapshot: name, dest: body.0.dest, mode: body.0.mode };
    answer(&app, a.0, StatusCode::CREATED, cairn::Request::Checkout(req)).await
}

async fn diff_snapshots(
    State(app): State<App>,
    a: Access_,
    Path((x, y)): Path<(String, String)>,
) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::Diff(trees::DiffRequest { a: x, b: y })).await
}

/// A key from the path after `/v1/kv/`, percent-decoded to bytes (keys need not be UTF-8).
fn kv_key(uri: &Uri) -> ApiResult<Blob> {
    let raw = uri.path().strip_prefix("/v1/kv/").ok_or_else(|| bad("no key"))?;
    let key: Vec<u8> = percent_encoding::percent_decode_str(raw).collect();
    if key.is_empty() {
        return Err(bad("empty key"));
    }
    Ok(Blob::of(&key))
}

async fn scan_kv(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let known = ["prefix", "start", "end", "limit", "reverse", "keys_only", "raw"];
    let mut req = kv::ScanRequest::default();
    let mut flags = BTreeMap::new();
    for (k, v) in query_pairs(&uri)? {
        match k.as_str() {
            "prefix" => req.prefix = Some(Blob::of(&v)),
            "start" => req.start = Some(Blob::of(&v)),
            "end" => req.end = Some(Blob::of(&v)),
            k if known.contains(&k) => {
                flags.insert(k.to_string(), String::from_utf8_lossy(&v).into_owned());
            }
            _ => return Err(bad(format!("unknown query parameter {k:?} (known: {})", known.join(", ")))),
        }
    }
    req.limit = Some(number::<usize>(&flags, "limit")?.unwrap_or(1000).min(100_000));
    req.reverse = flag(&flags, "reverse")?.unwrap_or(false);
    req.keys_only = flag(&flags, "keys_only")?.unwrap_or(false);
    req.raw = flag(&flags, "raw")?.unwrap_or(false);
    answer(&app, a.0, StatusCode::OK, cairn::Request::KvScan(req)).await
}

fn raw_flag(uri: &Uri) -> ApiResult<bool> {
    Ok(flag(&query_map(uri, &["raw"])?, "raw")?.unwrap_or(false))
}

async fn get_kv(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let req = kv::KeyRequest { key: kv_key(&uri)?, raw: raw_flag(&uri)? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::KvGet(req)).await
}

async fn put_kv(State(app): State<App>, a: Access_, uri: Uri, body: Bytes) -> ApiResult<Response> {
    let req = kv::PutRequest { key: kv_key(&uri)?, value: Some(Blob::of(&body)), no_sync: false, raw: raw_flag(&uri)? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::KvPut(req)).await
}

async fn delete_kv(State(app): State<App>, a: Access_, uri: Uri) -> ApiResult<Response> {
    let req = kv::KeyRequest { key: kv_key(&uri)?, raw: raw_flag(&uri)? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::KvDelete(req)).await
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The OpenAPI 3.1 description of the routes.
pub const OPENAPI: &str = include_str!("openapi.json");

// ---- Record tables ----

/// The version an `If-Match: "N"` header asks for; `If-None-Match: *` asks for absence (0).
fn precondition(h: &HeaderMap) -> ApiResult<Option<u64>> {
    if h.get(header::IF_NONE_MATCH).is_some_and(|v| v == "*") {
        return Ok(Some(0));
    }
    let Some(v) = h.get(header::IF_MATCH) else { return Ok(None) };
    let v = v.to_str().unwrap_or("").trim().trim_start_matches("W/").trim_matches('"');
    v.parse().map(Some).map_err(|_| bad(format!("If-Match {v:?} is not a record version")))
}

/// An answer carrying a record version as its ETag.
fn with_etag(status: StatusCode, version: u64, json: Value) -> Response {
    (status, [(header::ETAG, format!("\"{version}\""))], axum::Json(json)).into_response()
}

async fn list_tables(State(app): State<App>, a: Access_) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableLs(Default::default())).await
}

/// `POST /v1/tables`: writes to records of any tables as one atomic transaction. A client does
/// an optimistic read-modify-write by reading records (their versions), then sending its
/// writes with the versions it read: if any record changed meanwhile nothing is written, the
/// answer is 412 naming the write, and the client starts again from its reads.
async fn batch_write(
    State(app): State<App>,
    a: Access_,
    body: axum::Json<tables::BatchRequest>,
) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableBatch(body.0)).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTableBody {
    #[serde(default)]
    pk: Option<String>,
    #[serde(default)]
    schema: Option<Value>,
}

async fn create_table(
    State(app): State<App>,
    a: Access_,
    Path(t): Path<String>,
    body: axum::Json<CreateTableBody>,
) -> ApiResult<Response> {
    let b = body.0;
    let mut req = serde_json::json!({ "table": t, "pk": b.pk.unwrap_or_else(|| "id".into()) });
    if let Some(s) = b.schema {
        req["schema"] = s;
    }
    let req: tables::CreateTableRequest = serde_json::from_value(req).map_err(|e| bad(e.to_string()))?;
    answer(&app, a.0, StatusCode::CREATED, cairn::Request::TableCreate(req)).await
}

async fn drop_table(State(app): State<App>, a: Access_, Path(t): Path<String>) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableDrop(tables::TableRequest { table: t })).await
}

async fn verify_table(State(app): State<App>, a: Access_, Path(t): Path<String>) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableVerify(tables::TableRequest { table: t })).await
}

/// `GET /v1/tables/{t}?<fiql>&sort=-a,b&limit=&offset=&fields=`: the FIQL filter is the query
/// string's parts that are not parameters (joined with `;`), or `q=` / `filter=`.
async fn query_table(State(app): State<App>, a: Access_, Path(t): Path<String>, uri: Uri) -> ApiResult<Response> {
    let mut q = tables::QueryRequest { table: t, ..Default::default() };
    let mut filter = Vec::new();
    for part in uri.query().unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let decoded = percent_encoding::percent_decode_str(&part.replace('+', " "))
            .decode_utf8()
            .map_err(|_| bad(format!("query part {part:?} is not UTF-8")))?
            .into_owned();
        let param = decoded.split_once('=').filter(|(k, v)| {
            matches!(*k, "limit" | "offset" | "sort" | "fields" | "q" | "filter") && !v.starts_with('=')
        });
        match param {
            Some(("limit", v)) => q.limit = Some(v.parse().map_err(|_| bad(format!("limit {v:?} is not a number")))?),
            Some(("offset", v)) => q.offset = v.parse().map_err(|_| bad(format!("offset {v:?} is not a number")))?,
            Some(("sort", v)) => q.sort = v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect(),
            Some(("fields", v)) => {
                q.fields = Some(v.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
            }
            Some((_, v)) => filter.push(v.to_string()),
            None => filter.push(decoded),
        }
    }
    if !filter.is_empty() {
        let n = filter.len();
        q.filter =
            Some(filter.iter().map(|f| if n > 1 { format!("({f})") } else { f.clone() }).collect::<Vec<_>>().join(";"));
    }
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableQuery(q)).await
}

/// The one version of a put's answer.
fn put_version(r: &cairn::Response) -> ApiResult<u64> {
    match r {
        cairn::Response::TablePut(p) => {
            p.versions.first().copied().ok_or_else(|| ApiError(Error::internal("no version")))
        }
        _ => Err(ApiError(Error::internal("unexpected answer"))),
    }
}

async fn insert_record(
    State(app): State<App>,
    a: Access_,
    Path(t): Path<String>,
    body: axum::Json<Value>,
) -> ApiResult<Response> {
    let req = tables::PutRequest { table: t, records: vec![body.0], if_absent: true, ..Default::default() };
    let r = exec(&app, a.0, cairn::Request::TablePut(req)).await?;
    Ok(with_etag(StatusCode::CREATED, put_version(&r)?, r.to_json()))
}

async fn get_record(State(app): State<App>, a: Access_, Path((t, id)): Path<(String, String)>) -> ApiResult<Response> {
    let req = tables::RecordRequest { table: t, id: tables::id_from_text(&id) };
    let r = exec(&app, a.0, cairn::Request::TableGet(req)).await?;
    let version = match &r {
        cairn::Response::TableGet(rec) => rec.version,
        _ => 0,
    };
    Ok(with_etag(StatusCode::OK, version, r.to_json()))
}

async fn put_record(
    State(app): State<App>,
    a: Access_,
    Path((t, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> ApiResult<Response> {
    let expect = precondition(&headers)?;
    let req = tables::PutRequest {
        table: t,
        records: vec![body.0],
        id: Some(tables::id_from_text(&id)),
        if_absent: false,
        // `If-None-Match: *` is version 0: absent, or 412 like any other version mismatch.
        if_version: expect,
        stdin: false,
    };
    let r = exec(&app, a.0, cairn::Request::TablePut(req)).await?;
    let v = put_version(&r)?;
    Ok(with_etag(if v == 1 { StatusCode::CREATED } else { StatusCode::OK }, v, r.to_json()))
}

async fn patch_record(
    State(app): State<App>,
    a: Access_,
    Path((t, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> ApiResult<Response> {
    let req = tables::PatchRequest {
        table: t,
        id: tables::id_from_text(&id),
        patch: body.0,
        if_version: precondition(&headers)?,
    };
    let r = exec(&app, a.0, cairn::Request::TablePatch(req)).await?;
    let version = match &r {
        cairn::Response::TablePatch(rec) => rec.version,
        _ => 0,
    };
    Ok(with_etag(StatusCode::OK, version, r.to_json()))
}

async fn delete_record(
    State(app): State<App>,
    a: Access_,
    Path((t, id)): Path<(String, String)>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let req = tables::DeleteRequest { table: t, id: tables::id_from_text(&id), if_version: precondition(&headers)? };
    answer(&app, a.0, StatusCode::OK, cairn::Request::TableRm(req)).await
}

async fn list_indexes(State(app): State<App>, a: Access_, Path(t): Path<String>) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::IndexLs(tables::TableRequest { table: t })).await
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateIndexBody {
    attr: String,
    #[serde(default)]
    kind: Option<Value>,
}

/// Creates an index; it fills in the background (`ready` in the listing says when queries use
/// it). `?wait=true` answers once it is ready.
async fn create_index(
    State(app): State<App>,
    a: Access_,
    Path((t, name)): Path<(String, String)>,
    uri: Uri,
    body: axum::Json<CreateIndexBody>,
) -> ApiResult<Response> {
    let q = query_map(&uri, &["wait"])?;
    let b = body.0;
    let mut req =
        serde_json::json!({ "table": t, "name": name, "attr": b.attr, "wait": flag(&q, "wait")?.unwrap_or(false) });
    if let Some(k) = b.kind {
        req["kind"] = k;
    }
    let req: tables::CreateIndexRequest = serde_json::from_value(req).map_err(|e| bad(e.to_string()))?;
    answer(&app, a.0, StatusCode::CREATED, cairn::Request::IndexCreate(req)).await
}

async fn drop_index(
    State(app): State<App>,
    a: Access_,
    Path((t, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    answer(&app, a.0, StatusCode::OK, cairn::Request::IndexDrop(tables::DropIndexRequest { table: t, name })).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    /// Every path and method the OpenAPI description names is routed, and every route is
    /// described: a request to each never meets the router's own 404 or 405.
    #[tokio::test]
    async fn the_openapi_description_matches_the_routes() {
        let t = tempfile::tempdir().unwrap();
        let cairn = Cairn::open(t.path().join("data")).unwrap();
        let mut config = Config::new(&cairn);
        config.token = Some("0123456789abcdef-token".into());
        let app = router(cairn, config);
        let spec: Value = serde_json::from_str(OPENAPI).unwrap();
        let mut described = 0;
        for (path, item) in spec["paths"].as_object().unwrap() {
            for method in ["get", "put", "post", "patch", "delete"] {
                if item.get(method).is_none() {
                    continue;
                }
                described += 1;
                let uri = path.replace("{key}", "k").replace(['{', '}'], "");
                let req = axum::http::Request::builder()
                    .method(method.to_uppercase().as_str())
                    .uri(&uri)
                    .header(header::AUTHORIZATION, "Bearer 0123456789abcdef-token")
                    .body(Body::empty())
                    .unwrap();
                let r = app.clone().oneshot(req).await.unwrap();
                let status = r.status();
                let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
                let text = String::from_utf8_lossy(&body);
                assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}: {text}");
                assert!(!text.contains("no route"), "{method} {path} is not routed: {text}");
            }
        }
        assert!(described >= 40, "{described} operations described");
        // And a route the description does not name is not served.
        let req = axum::http::Request::builder()
            .uri("/v1/undocumented")
            .header(header::AUTHORIZATION, "Bearer 0123456789abcdef-token")
            .body(Body::empty())
            .unwrap();
        assert_eq!(app.oneshot(req).await.unwrap().status(), StatusCode::NOT_FOUND);
    }
}
