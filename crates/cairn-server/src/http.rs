//! HTTP/REST over the same layers (axum). Every route needs `Authorization: Bearer <token>`;
//! anything else gets 401 and no data. JSON in and out; `GET /openapi.json` describes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use cairn_docs::{AddOptions, GrepOptions, MetaUpdate, NewDoc, QueryMode, SearchOptions};
use cairn_tables::Expect;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{Services, Shared, token_matches};

/// Largest request body (document content).
const BODY_LIMIT: usize = 64 << 20;

pub(crate) async fn serve(l: TcpListener, shared: Arc<Shared>) {
    let app = router(shared.services.clone(), shared.config.token.clone().unwrap_or_default());
    let stop = shared.shutdown.clone();
    let _ = axum::serve(l, app).with_graceful_shutdown(async move { stop.cancelled().await }).await;
}

#[derive(Clone)]
struct App {
    services: Arc<Services>,
    token: Arc<str>,
}

/// The REST routes over `services`, requiring `token`.
pub fn router(services: Arc<Services>, token: String) -> Router {
    let app = App { services, token: token.into() };
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/v1/docs", get(list_docs).post(add_doc))
        .route("/v1/doc", get(get_doc).delete(delete_doc))
        .route("/v1/doc/content", get(get_content))
        .route("/v1/tags", axum::routing::post(tag_docs))
        .route("/v1/meta", axum::routing::post(set_meta))
        .route("/v1/search", get(search))
        .route("/v1/grep", get(grep))
        .route("/v1/snapshots", get(list_snapshots).post(take_snapshot))
        .route("/v1/snapshots/{name}", get(snapshot_info).delete(delete_snapshot))
        .route("/v1/snapshots/{a}/diff/{b}", get(diff_snapshots))
        .route("/v1/kv", get(scan_kv))
        .route("/v1/kv/{key}", get(get_kv).put(put_kv).delete(delete_kv))
        .route("/v1/tables", get(list_tables).post(batch_write))
        .route("/v1/tables/{t}", get(query_table).post(insert_record).put(create_table).delete(drop_table))
        .route("/v1/tables/{t}/_indexes", get(list_indexes))
        .route("/v1/tables/{t}/_indexes/{name}", axum::routing::put(create_index).delete(drop_index))
        .route("/v1/tables/{t}/{id}", get(get_record).put(put_record).patch(patch_record).delete(delete_record))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(app.clone(), auth))
        .with_state(app)
}

async fn auth(State(app): State<App>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !token_matches(given.as_bytes(), app.token.as_bytes()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            axum::Json(json!({ "error": "missing or wrong bearer token" })),
        )
            .into_response();
    }
    next.run(req).await
}

/// An error answer.
struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(json!({ "error": self.1 }))).into_response()
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> ApiError {
        let status = if let Some(d) = e.downcast_ref::<cairn_docs::Error>() {
            match d {
                cairn_docs::Error::NotFound(_) | cairn_docs::Error::NoVersion(..) => StatusCode::NOT_FOUND,
                cairn_docs::Error::InvalidArgument(_) | cairn_docs::Error::Query(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            }
        } else if let Some(t) = e.downcast_ref::<cairn_tree::Error>() {
            match t {
                cairn_tree::Error::NoSuchSnapshot(_) => StatusCode::NOT_FOUND,
                cairn_tree::Error::InvalidArgument(_) | cairn_tree::Error::BadName(_) => StatusCode::BAD_REQUEST,
                cairn_tree::Error::SnapshotExists(_) => StatusCode::CONFLICT,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            }
        } else if let Some(t) = e.downcast_ref::<cairn_tables::Error>() {
            use cairn_tables::Error as T;
            match t {
                T::NoTable(_) | T::NotFound(..) | T::NoIndex(..) => StatusCode::NOT_FOUND,
                T::Exists(..) | T::TableExists(_) | T::Conflict(_) => StatusCode::CONFLICT,
                T::VersionMismatch { .. } => StatusCode::PRECONDITION_FAILED,
                T::Invalid(_) | T::Filter(_) => StatusCode::BAD_REQUEST,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            }
        } else if e.downcast_ref::<BadRequest>().is_some() {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        ApiError(status, format!("{e:#}"))
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct BadRequest(String);

type ApiResult<T> = Result<T, ApiError>;

/// Runs storage work on the blocking pool.
async fn blocking<T: Send + 'static>(
    app: &App,
    f: impl FnOnce(&Services) -> anyhow::Result<T> + Send + 'static,
) -> ApiResult<T> {
    let s = app.services.clone();
    tokio::task::spawn_blocking(move || f(&s))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
}

/// Filter query parameters (`tag` and `meta=k=v` comma-separated).
#[derive(Deserialize, Default)]
struct FilterQuery {
    tag: Option<String>,
    meta: Option<String>,
    path_glob: Option<String>,
    since: Option<String>,
    until: Option<String>,
}

impl FilterQuery {
    fn filter(&self) -> anyhow::Result<cairn_docs::Filter> {
        let list = |s: &Option<String>| -> Vec<String> {
            s.as_deref().map(|s| s.split(',').filter(|t| !t.is_empty()).map(String::from).collect()).unwrap_or_default()
        };
        let mut meta = Vec::new();
        for kv in list(&self.meta) {
            let (k, v) = kv.split_once('=').ok_or_else(|| BadRequest(format!("meta {kv:?} is not k=v")))?;
            meta.push((k.to_string(), v.to_string()));
        }
        let time = |s: &Option<String>| -> anyhow::Result<Option<i64>> {
            s.as_deref().map(|t| cairn_docs::parse_time(t).map_err(|e| BadRequest(e.to_string()).into())).transpose()
        };
        Ok(cairn_docs::Filter {
            tags: list(&self.tag),
            meta,
            path_glob: self.path_glob.clone(),
            since: time(&self.since)?,
            until: time(&self.until)?,
        })
    }
}

#[derive(Deserialize)]
struct AddBody {
    path: String,
    /// UTF-8 content.
    content: Option<String>,
    /// Binary content, base64.
    content_base64: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default)]
    meta: BTreeMap<String, String>,
}

async fn add_doc(State(app): State<App>, body: axum::Json<AddBody>) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let b = body.0;
    let content = match (b.content, b.content_base64) {
        (Some(c), None) => c.into_bytes(),
        (None, Some(c)) => {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(c)
                .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("content_base64: {e}")))?
        }
        _ => return Err(ApiError(StatusCode::BAD_REQUEST, "give exactly one of content, content_base64".into())),
    };
    let opts = AddOptions { tags: b.tags, meta: b.meta.into_iter().collect() };
    let path = b.path;
    let added = blocking(&app, move |s| Ok(s.memory.add(vec![NewDoc { path, content }], &opts)?)).await?;
    let a = &added[0];
    let code = if a.status == cairn_docs::AddStatus::Unchanged { StatusCode::OK } else { StatusCode::CREATED };
    Ok((code, axum::Json(json!({ "status": crate::api::status_word(a.status), "doc": a.doc }))))
}

async fn list_docs(State(app): State<App>, q: Query<FilterQuery>) -> ApiResult<axum::Json<Value>> {
    let f = q.filter()?;
    let docs = blocking(&app, move |s| Ok(s.memory.list(&f)?)).await?;
    Ok(axum::Json(json!({ "docs": docs })))
}

#[derive(Deserialize)]
struct DocQuery {
    path: String,
    version: Option<u32>,
}

async fn get_doc(State(app): State<App>, q: Query<DocQuery>) -> ApiResult<axum::Json<Value>> {
    let path = q.0.path;
    let (doc, versions) = blocking(&app, move |s| Ok((s.memory.get(&path)?, s.memory.versions(&path)?))).await?;
    Ok(axum::Json(json!({ "doc": doc, "versions": versions })))
}

async fn get_content(State(app): State<App>, q: Query<DocQuery>) -> ApiResult<Response> {
    let DocQuery { path, version } = q.0;
    // The content streams out in 64 KiB pieces read on the blocking pool, so a large document
    // never sits whole in memory; a slow client holds back the reader through the channel.
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let mime = blocking(&app, move |s| {
        let doc = s.memory.get(&path)?;
        let mut r = s.memory.reader(&path, version)?;
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
        Ok(doc.mime)
    })
    .await?;
    let body = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) });
    Ok(([(header::CONTENT_TYPE, mime)], axum::body::Body::from_stream(body)).into_response())
}

async fn delete_doc(State(app): State<App>, q: Query<DocQuery>) -> ApiResult<axum::Json<Value>> {
    let path = q.0.path;
    let removed = blocking(&app, move |s| Ok(s.memory.remove(&[path])?)).await?;
    Ok(axum::Json(json!({ "removed": removed })))
}

#[derive(Deserialize)]
struct TagBody {
    paths: Vec<String>,
    #[serde(default)]
    add: Vec<String>,
    #[serde(default)]
    remove: Vec<String>,
}

async fn tag_docs(State(app): State<App>, body: axum::Json<TagBody>) -> ApiResult<axum::Json<Value>> {
    let b = body.0;
    let changed = blocking(&app, move |s| Ok(s.memory.tag(&b.paths, &b.add, &b.remove)?)).await?;
    Ok(axum::Json(json!({ "changed": changed })))
}

#[derive(Deserialize)]
struct MetaChange {
    path: String,
    #[serde(default)]
    set: BTreeMap<String, String>,
    #[serde(default)]
    unset: Vec<String>,
}

#[derive(Deserialize)]
struct MetaBody {
    updates: Vec<MetaChange>,
}

async fn set_meta(State(app): State<App>, body: axum::Json<MetaBody>) -> ApiResult<axum::Json<Value>> {
    let updates: Vec<MetaUpdate> = body
        .0
        .updates
        .into_iter()
        .map(|c| {
            let changes =
                c.set.into_iter().map(|(k, v)| (k, Some(v))).chain(c.unset.into_iter().map(|k| (k, None))).collect();
            (c.path, changes)
        })
        .collect();
    let changed = blocking(&app, move |s| Ok(s.memory.set_meta(&updates)?)).await?;
    Ok(axum::Json(json!({ "changed": changed })))
}

#[derive(Deserialize)]
struct SearchQuery {
    q: String,
    limit: Option<usize>,
    offset: Option<usize>,
    #[serde(default)]
    words: bool,
    #[serde(flatten)]
    filter: FilterQuery,
}

async fn search(State(app): State<App>, q: Query<SearchQuery>) -> ApiResult<axum::Json<Value>> {
    let q = q.0;
    let opts = SearchOptions {
        limit: q.limit.unwrap_or(10).min(10_000),
        offset: q.offset.unwrap_or(0),
        filter: q.filter.filter()?,
        mode: if q.words { QueryMode::Words } else { QueryMode::Syntax },
        snippets: true,
    };
    let query = q.q;
    let r = blocking(&app, move |s| Ok(s.memory.search(&query, &opts)?)).await?;
    Ok(axum::Json(search_json(&r)))
}

/// The JSON form of search results.
fn search_json(r: &cairn_docs::SearchResults) -> Value {
    let hits: Vec<Value> = r
        .hits
        .iter()
        .map(|h| {
            json!({
                "path": h.doc.path, "score": h.score, "version": h.doc.version, "title": h.doc.title,
                "tags": h.doc.tags, "meta": h.doc.meta,
                "snippet": h.snippet.as_ref().map(|s| json!({
                    "text": s.text,
                    "highlights": s.highlights.iter().map(|r| [r.start, r.end]).collect::<Vec<_>>(),
                })),
            })
        })
        .collect();
    json!({ "total": r.total, "hits": hits, "warnings": r.warnings })
}

#[derive(Deserialize)]
struct GrepQuery {
    pattern: String,
    #[serde(default)]
    i: bool,
    #[serde(default)]
    w: bool,
    #[serde(default, rename = "F")]
    fixed: bool,
    #[serde(default, rename = "C")]
    context: usize,
    max_files: Option<usize>,
    #[serde(flatten)]
    filter: FilterQuery,
}

async fn grep(State(app): State<App>, q: Query<GrepQuery>) -> ApiResult<axum::Json<Value>> {
    let q = q.0;
    let opts = GrepOptions {
        pattern: q.pattern,
        ignore_case: q.i,
        word: q.w,
        fixed: q.fixed,
        context: q.context.min(100),
        filter: q.filter.filter()?,
        max_files: Some(q.max_files.unwrap_or(1000)),
    };
    let v = blocking(&app, move |s| grep_json(s, &opts)).await?;
    Ok(axum::Json(v))
}

/// Runs a grep and returns its JSON form.
fn grep_json(s: &Services, opts: &GrepOptions) -> anyhow::Result<Value> {
    let mut files = Vec::new();
    let stats = s.memory.grep(opts, |f| {
        let lines: Vec<Value> = f
            .groups
            .iter()
            .flatten()
            .map(|l| json!({ "line": l.number, "text": l.text, "match": l.is_match }))
            .collect();
        files.push(json!({ "path": f.path, "lines": lines }));
        Ok(())
    })?;
    Ok(json!({ "files": files, "files_matched": stats.files_matched, "lines_matched": stats.lines_matched }))
}

fn snapshot_json(i: &cairn_tree::SnapshotInfo) -> Value {
    json!({ "name": i.name, "root": i.root.to_string(), "created_ns": i.created_ns, "files": i.files,
            "dirs": i.dirs, "symlinks": i.symlinks, "bytes": i.bytes, "source": i.source })
}

async fn list_snapshots(State(app): State<App>) -> ApiResult<axum::Json<Value>> {
    let list = blocking(&app, |s| Ok(s.trees.snapshots()?)).await?;
    Ok(axum::Json(json!({ "snapshots": list.iter().map(snapshot_json).collect::<Vec<_>>() })))
}

#[derive(Deserialize)]
struct SnapshotBody {
    dir: String,
    name: Option<String>,
}

async fn take_snapshot(
    State(app): State<App>,
    body: axum::Json<SnapshotBody>,
) -> ApiResult<(StatusCode, axum::Json<Value>)> {
    let b = body.0;
    if !std::path::Path::new(&b.dir).is_absolute() {
        return Err(ApiError(StatusCode::BAD_REQUEST, "dir must be an absolute path".into()));
    }
    let st = blocking(&app, move |s| Ok(s.trees.snapshot(std::path::Path::new(&b.dir), b.name.as_deref(), &|_| {})?))
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({ "snapshot": snapshot_json(&st.info), "files_read": st.files_read,
                           "files_cached": st.files_cached, "bytes_stored": st.bytes_stored })),
    ))
}

async fn snapshot_info(State(app): State<App>, Path(name): Path<String>) -> ApiResult<axum::Json<Value>> {
    let i = blocking(&app, move |s| Ok(s.trees.snapshot_info(&name)?)).await?;
    Ok(axum::Json(snapshot_json(&i)))
}

async fn delete_snapshot(State(app): State<App>, Path(name): Path<String>) -> ApiResult<axum::Json<Value>> {
    let i = blocking(&app, move |s| Ok(s.trees.remove_snapshot(&name)?)).await?;
    Ok(axum::Json(json!({ "removed": snapshot_json(&i) })))
}

async fn diff_snapshots(State(app): State<App>, Path((a, b)): Path<(String, String)>) -> ApiResult<axum::Json<Value>> {
    let changes = blocking(&app, move |s| Ok(s.trees.diff(&a, &b)?)).await?;
    let v: Vec<Value> = changes
        .iter()
        .map(|c| match c {
            cairn_tree::Change::Added(p) => json!({ "change": "added", "path": p }),
            cairn_tree::Change::Removed(p) => json!({ "change": "removed", "path": p }),
            cairn_tree::Change::Modified(p) => json!({ "change": "modified", "path": p }),
            cairn_tree::Change::Renamed { from, to } => json!({ "change": "renamed", "from": from, "path": to }),
        })
        .collect();
    Ok(axum::Json(json!({ "changes": v })))
}

#[derive(Deserialize)]
struct ScanQuery {
    prefix: Option<String>,
    limit: Option<usize>,
}

async fn scan_kv(State(app): State<App>, q: Query<ScanQuery>) -> ApiResult<axum::Json<Value>> {
    let q = q.0;
    let rows = blocking(&app, move |s| {
        let prefix = q.prefix.unwrap_or_default();
        let mut rows = Vec::new();
        for kv in s.db.prefix(prefix.as_bytes()).take(q.limit.unwrap_or(1000).min(100_000)) {
            let (k, v) = kv?;
            rows.push(json!({ "key": String::from_utf8_lossy(&k), "value": String::from_utf8_lossy(&v) }));
        }
        Ok(rows)
    })
    .await?;
    Ok(axum::Json(json!({ "rows": rows })))
}

async fn get_kv(State(app): State<App>, Path(key): Path<String>) -> ApiResult<Response> {
    let k = key.clone();
    match blocking(&app, move |s| Ok(s.db.get(k.as_bytes())?)).await? {
        Some(v) => Ok(([(header::CONTENT_TYPE, "application/octet-stream")], v).into_response()),
        None => Err(ApiError(StatusCode::NOT_FOUND, format!("key {key:?} not found"))),
    }
}

async fn put_kv(State(app): State<App>, Path(key): Path<String>, body: Bytes) -> ApiResult<StatusCode> {
    blocking(&app, move |s| Ok(s.db.put(key.as_bytes(), &body)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_kv(State(app): State<App>, Path(key): Path<String>) -> ApiResult<StatusCode> {
    blocking(&app, move |s| Ok(s.db.delete(key.as_bytes())?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The OpenAPI 3.1 description of the routes.
pub const OPENAPI: &str = include_str!("openapi.json");

// ---- Record tables ----

/// The version an `If-Match: "N"` header asks for; `If-None-Match: *` asks for absence (0).
fn precondition(h: &axum::http::HeaderMap) -> ApiResult<Option<u64>> {
    if h.get(header::IF_NONE_MATCH).is_some_and(|v| v == "*") {
        return Ok(Some(0));
    }
    let Some(v) = h.get(header::IF_MATCH) else { return Ok(None) };
    let v = v.to_str().unwrap_or("").trim().trim_start_matches("W/").trim_matches('"');
    v.parse()
        .map(Some)
        .map_err(|_| ApiError(StatusCode::BAD_REQUEST, format!("If-Match {v:?} is not a record version")))
}

fn record_response(status: StatusCode, r: &cairn_tables::Record) -> Response {
    let etag = format!("\"{}\"", r.version);
    (status, [(header::ETAG, etag)], axum::Json(json!({ "version": r.version, "data": r.data }))).into_response()
}

async fn list_tables(State(app): State<App>) -> ApiResult<axum::Json<Value>> {
    let tables = blocking(&app, |s| Ok(s.tables.list()?)).await?;
    Ok(axum::Json(json!({ "tables": tables })))
}

/// One write of a `POST /v1/tables` batch. `version`: the version the record must be at (0: it
/// must not exist); without it the write is unconditional.
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "lowercase", deny_unknown_fields)]
enum BatchWrite {
    Put { table: String, record: Value, version: Option<u64> },
    Insert { table: String, record: Value },
    Patch { table: String, id: Value, patch: Value, version: Option<u64> },
    Delete { table: String, id: Value, version: Option<u64> },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Batch {
    writes: Vec<BatchWrite>,
}

/// `POST /v1/tables`: writes to records of any tables as one atomic transaction. A client does
/// an optimistic read-modify-write by reading records (their versions), then sending its
/// writes with the versions it read: if any record changed meanwhile nothing is written, the
/// answer is 412 naming the write, and the client starts again from its reads.
async fn batch_write(State(app): State<App>, body: axum::Json<Batch>) -> ApiResult<axum::Json<Value>> {
    let writes = body.0.writes;
    let results = blocking(&app, move |s| {
        let mut at = 0;
        s.tables
            .transaction(|tx| {
                let mut out = Vec::with_capacity(writes.len());
                for (i, w) in writes.iter().enumerate() {
                    at = i;
                    out.push(match w {
                        BatchWrite::Put { table, record, version } => {
                            json!({ "version": tx.put_with(table, record, expect_version(*version))? })
                        }
                        BatchWrite::Insert { table, record } => {
                            json!({ "version": tx.put_with(table, record, Expect::Absent)? })
                        }
                        BatchWrite::Patch { table, id, patch, version } => {
                            let r = tx.patch(table, id, patch, *version)?;
                            json!({ "version": r.version, "data": r.data })
                        }
                        BatchWrite::Delete { table, id, version } => {
                            json!({ "deleted": tx.delete(table, id, *version)? })
                        }
                    });
                }
                Ok(out)
            })
            .map_err(|e| anyhow::Error::from(e).context(format!("write {at}")))
    })
    .await?;
    Ok(axum::Json(json!({ "results": results })))
}

#[derive(Deserialize)]
struct CreateTable {
    #[serde(default = "default_pk")]
    pk: String,
    schema: Option<cairn_tables::Schema>,
}

fn default_pk() -> String {
    "id".into()
}

async fn create_table(
    State(app): State<App>,
    Path(t): Path<String>,
    body: axum::Json<CreateTable>,
) -> ApiResult<Response> {
    let b = body.0;
    let def = blocking(&app, move |s| Ok(s.tables.create_table(&t, &b.pk, b.schema)?)).await?;
    Ok((StatusCode::CREATED, axum::Json(json!(def))).into_response())
}

async fn drop_table(State(app): State<App>, Path(t): Path<String>) -> ApiResult<StatusCode> {
    blocking(&app, move |s| Ok(s.tables.drop_table(&t)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/tables/{t}?<fiql>&sort=-a,b&limit=&offset=&fields=`: the FIQL filter is the query
/// string's parts that are not parameters (joined with `;`), or `q=` / `filter=`.
async fn query_table(
    State(app): State<App>,
    Path(t): Path<String>,
    uri: axum::http::Uri,
) -> ApiResult<axum::Json<Value>> {
    let mut q = cairn_tables::Query::default();
    let mut filter = Vec::new();
    let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
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
        q.filter = Some(
            filter
                .iter()
                .map(|f| if filter.len() > 1 { format!("({f})") } else { f.clone() })
                .collect::<Vec<_>>()
                .join(";"),
        );
    }
    let r = blocking(&app, move |s| Ok(s.tables.query(&t, &q)?)).await?;
    Ok(axum::Json(json!(r)))
}

async fn insert_record(State(app): State<App>, Path(t): Path<String>, body: axum::Json<Value>) -> ApiResult<Response> {
    let rec = body.0;
    let r = blocking(&app, move |s| Ok(s.tables.insert(&t, rec)?)).await?;
    Ok(record_response(StatusCode::CREATED, &r))
}

async fn get_record(State(app): State<App>, Path((t, id)): Path<(String, String)>) -> ApiResult<Response> {
    let key = cairn_tables::id_from_text(&id);
    let r = blocking(&app, move |s| Ok(s.tables.get(&t, &key)?)).await?;
    match r {
        Some(r) => Ok(record_response(StatusCode::OK, &r)),
        None => Err(ApiError(StatusCode::NOT_FOUND, format!("no record {id}"))),
    }
}

async fn put_record(
    State(app): State<App>,
    Path((t, id)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::Json<Value>,
) -> ApiResult<Response> {
    let expect = precondition(&headers)?;
    let key = cairn_tables::id_from_text(&id);
    let mut rec = body.0;
    let r = blocking(&app, move |s| {
        let pk = s.tables.table(&t)?.pk;
        // The key in the URL is the record's key; a body may leave it out but not contradict it.
        match rec.as_object_mut() {
            Some(o) => match o.get(&pk) {
                None => {
                    o.insert(pk, key);
                }
                Some(v) if *v == key => {}
                Some(v) => return Err(BadRequest(format!("the body's {pk} {v} is not the URL's {id}")).into()),
            },
            None => return Err(BadRequest("a record must be a JSON object".into()).into()),
        }
        let version = s.tables.put_with(&t, &rec, expect_version(expect))?;
        Ok(cairn_tables::Record { version, data: rec })
    })
    .await?;
    let status = if r.version == 1 { StatusCode::CREATED } else { StatusCode::OK };
    Ok(record_response(status, &r))
}

/// A write's condition from an optional expected version (0: absent).
fn expect_version(version: Option<u64>) -> Expect {
    version.map_or(Expect::Any, Expect::Version)
}

async fn patch_record(
    State(app): State<App>,
    Path((t, id)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
    body: axum::Json<Value>,
) -> ApiResult<Response> {
    let expect = precondition(&headers)?;
    let key = cairn_tables::id_from_text(&id);
    let patch = body.0;
    let r = blocking(&app, move |s| Ok(s.tables.patch(&t, &key, &patch, expect)?)).await?;
    Ok(record_response(StatusCode::OK, &r))
}

async fn delete_record(
    State(app): State<App>,
    Path((t, id)): Path<(String, String)>,
    headers: axum::http::HeaderMap,
) -> ApiResult<StatusCode> {
    let expect = precondition(&headers)?;
    let key = cairn_tables::id_from_text(&id);
    let found = blocking(&app, move |s| Ok(s.tables.delete(&t, &key, expect)?)).await?;
    if found { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError(StatusCode::NOT_FOUND, format!("no record {id}"))) }
}

async fn list_indexes(State(app): State<App>, Path(t): Path<String>) -> ApiResult<axum::Json<Value>> {
    let def = blocking(&app, move |s| Ok(s.tables.table(&t)?)).await?;
    Ok(axum::Json(json!({ "indexes": def.indexes })))
}

#[derive(Deserialize)]
struct CreateIndex {
    attr: String,
    #[serde(default = "default_kind")]
    kind: cairn_tables::IndexKind,
}

fn default_kind() -> cairn_tables::IndexKind {
    cairn_tables::IndexKind::Range
}

/// Creates an index; it fills in the background (`ready` in the listing says when queries use
/// it). `?wait=true` answers once it is ready.
async fn create_index(
    State(app): State<App>,
    Path((t, name)): Path<(String, String)>,
    q: Query<BTreeMap<String, String>>,
    body: axum::Json<CreateIndex>,
) -> ApiResult<Response> {
    let wait = q.0.get("wait").is_some_and(|v| v == "true" || v == "1");
    let b = body.0;
    let ix = blocking(&app, move |s| {
        let ix = s.tables.create_index(&t, &name, &b.attr, b.kind)?;
        if wait {
            s.tables.wait_for_index(&t, &name)?;
            return Ok(cairn_tables::IndexDef { ready: true, ..ix });
        }
        Ok(ix)
    })
    .await?;
    Ok((StatusCode::CREATED, axum::Json(json!(ix))).into_response())
}

async fn drop_index(State(app): State<App>, Path((t, name)): Path<(String, String)>) -> ApiResult<StatusCode> {
    blocking(&app, move |s| Ok(s.tables.drop_index(&t, &name)?)).await?;
    Ok(StatusCode::NO_CONTENT)
}
