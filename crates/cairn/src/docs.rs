//! The document memory's operations: add, versions, get, content, restore, ls, rm, tag, meta,
//! search, grep, reindex.
//!
//! Documents come in two kinds that never mix: **file documents**, added from files and named
//! by their absolute path, and **named documents**, added from standard input, HTTP or MCP
//! under a name (`notes/plan.md`): UTF-8, relative, without `.` or `..` components or control
//! characters. A reference to a document ([`DocRef`]) is `name:NAME`, an absolute path, or a
//! relative argument, which means the file document at that path under the caller's working
//! directory or else the named document; when both exist the reference is ambiguous and fails.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use cairn_docs::{AddOptions, AddStatus, DocRecord, Memory, NewDoc, QueryMode, VersionRecord};
use serde::{Deserialize, Serialize};

pub use cairn_docs::{DocRecord as Doc, VersionRecord as Version, display_path, format_time, parse_time};

use crate::text::Blob;
use crate::{Cairn, Call, Error, Progress, Result, absolute};

/// A reference to a document: `name:NAME`, an absolute file path, or a relative argument (see
/// the module documentation).
pub type DocRef = String;

/// Which documents a listing, search or grep looks at. Empty fields do not filter.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Documents with every one of these tags.
    pub tags: Vec<String>,
    /// Documents with every one of these key=value pairs.
    pub meta: BTreeMap<String, String>,
    /// Documents whose path matches this glob (`*` also matches `/`).
    pub path_glob: Option<String>,
    /// Updated at or after: `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SSZ` or Unix seconds.
    pub since: Option<String>,
    /// Updated before (same forms).
    pub until: Option<String>,
}

impl Filter {
    fn library(&self) -> Result<cairn_docs::Filter> {
        let time = |s: &Option<String>| s.as_deref().map(cairn_docs::parse_time).transpose();
        Ok(cairn_docs::Filter {
            tags: self.tags.clone(),
            meta: self.meta.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            path_glob: self.path_glob.clone(),
            since: time(&self.since)?,
            until: time(&self.until)?,
        })
    }
}

/// Content given inline, under a name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NamedContent {
    /// The document's name.
    pub name: String,
    /// UTF-8 content.
    pub content: Option<String>,
    /// Binary content, base64.
    pub content_base64: Option<String>,
}

/// Add documents: files (directories with `recursive`), inline named content, and standard
/// input under a name. Re-adding changed content makes a new version.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AddRequest {
    /// Files or directories (relative ones against the caller's working directory).
    pub files: Vec<PathBuf>,
    /// Descend into directories (hidden and `.gitignore`d files skipped, as ripgrep does).
    pub recursive: bool,
    /// Named documents with their content.
    pub docs: Vec<NamedContent>,
    /// The name of a document whose content is the call's standard input.
    pub stdin: Option<String>,
    /// Tags for every added document.
    pub tags: Vec<String>,
    /// Metadata for every added document.
    pub meta: BTreeMap<String, String>,
}

/// What an add did to one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A new document.
    Added,
    /// A new version of an existing document.
    NewVersion,
    /// The same content it already had (tags and metadata may have changed).
    Unchanged,
}

/// One added document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AddedDoc {
    /// Its path or name.
    pub path: String,
    /// Its id.
    pub id: u64,
    /// What happened.
    pub status: Status,
    /// Its version now.
    pub version: u32,
    /// Content size in bytes.
    pub size: u64,
    /// Content type.
    pub mime: String,
    /// Whether the content is in the full-text index (text up to 64 MiB).
    pub indexed: bool,
    /// Content hash (hex).
    pub hash: String,
    /// Why it is not indexed, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A path an operation could not read, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// The path.
    pub path: String,
    /// What went wrong.
    pub error: String,
}

/// What an add did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AddResult {
    /// Every document, in the order given (files in walk order).
    pub docs: Vec<AddedDoc>,
    /// New documents.
    pub added: u64,
    /// New versions.
    pub new_versions: u64,
    /// Unchanged documents.
    pub unchanged: u64,
    /// Bytes of content.
    pub bytes: u64,
    /// Paths that could not be read (everything else was added).
    pub skipped: Vec<Skipped>,
    /// Wall time.
    pub seconds: f64,
}

/// A document's versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionsRequest {
    /// The document.
    pub doc: DocRef,
}

/// Every version of a document, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionsResult {
    /// The document's path or name.
    pub path: String,
    /// Its versions.
    pub versions: Vec<VersionRecord>,
}

/// A document's record.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GetRequest {
    /// The document.
    pub doc: DocRef,
    /// Also describe this version.
    pub version: Option<u32>,
}

/// A document's record, and the version asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetResult {
    /// The document now.
    pub doc: DocRecord,
    /// The version asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_version: Option<VersionRecord>,
}

/// A document's content (a version of it).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentRequest {
    /// The document.
    pub doc: DocRef,
    /// The version (default: current).
    #[serde(default)]
    pub version: Option<u32>,
    /// Return at most this many bytes (default: all).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

/// A document's content in JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContentResult {
    /// The document's path or name.
    pub path: String,
    /// The version.
    pub version: u32,
    /// Content type.
    pub mime: String,
    /// Size of the whole content.
    pub size: u64,
    /// The content (`text` when UTF-8, else `base64`).
    pub content: Blob,
    /// Whether `max_bytes` cut it.
    pub truncated: bool,
}

/// Write a document's content (a version of it) to a file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RestoreRequest {
    /// The document.
    pub doc: DocRef,
    /// The version (default: current).
    pub version: Option<u32>,
    /// Where (default: a file document's own path; a named document's name under the caller's
    /// working directory).
    pub to: Option<PathBuf>,
}

/// What a restore wrote.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RestoreResult {
    /// The document's path or name.
    pub path: String,
    /// The version written.
    pub version: u32,
    /// The file written.
    pub to: PathBuf,
    /// Bytes written.
    pub bytes: u64,
}

/// List documents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LsRequest {
    /// Which documents.
    pub filter: Filter,
    /// At most this many (default: all).
    pub limit: Option<usize>,
}

/// Documents, by path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LsResult {
    /// The documents (at most `limit`).
    pub docs: Vec<DocRecord>,
    /// Documents matching in all.
    pub total: u64,
    /// Whether `limit` cut the list.
    pub truncated: bool,
}

/// Remove documents with all their versions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RmRequest {
    /// The documents.
    pub docs: Vec<DocRef>,
}

/// Documents removed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RmResult {
    /// Their paths or names.
    pub removed: Vec<String>,
}

/// Add and remove tags.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TagRequest {
    /// The documents.
    pub docs: Vec<DocRef>,
    /// Tags to add.
    #[serde(default)]
    pub add: Vec<String>,
    /// Tags to remove.
    #[serde(default)]
    pub remove: Vec<String>,
}

/// Documents whose tags or metadata were updated.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpdatedResult {
    /// Their paths or names.
    pub updated: Vec<String>,
}

/// Set and remove metadata on documents named and/or selected by tag and path glob, in one
/// write.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetaSetRequest {
    /// Documents named.
    pub docs: Vec<DocRef>,
    /// Also every document with all these tags.
    pub where_tags: Vec<String>,
    /// Also every document whose path matches this glob.
    pub where_path: Option<String>,
    /// Keys to set.
    pub set: BTreeMap<String, String>,
    /// Keys to remove.
    pub unset: Vec<String>,
}

/// A document's metadata (one key, or all).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetaGetRequest {
    /// The document.
    pub doc: DocRef,
    /// Only this key.
    #[serde(default)]
    pub key: Option<String>,
}

/// Metadata of a document.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetaResult {
    /// The document's path or name.
    pub path: String,
    /// Its metadata (the one key asked for, or all).
    pub meta: BTreeMap<String, String>,
    /// The value of the one key asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// Full-text search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    /// The query: words, "phrases", AND/OR/NOT, +must, -mustnot, field:word.
    pub query: String,
    /// Hits to return (default 10).
    #[serde(default = "ten")]
    pub limit: usize,
    /// Hits to skip.
    #[serde(default)]
    pub offset: usize,
    /// Read the query as a bag of words (no syntax).
    #[serde(default)]
    pub words: bool,
    /// Cut snippets from the hits (default true).
    #[serde(default = "yes")]
    pub snippets: bool,
    /// Which documents.
    #[serde(default)]
    pub filter: Filter,
    /// How hits are ranked: `keyword` (BM25), `semantic` (passage vectors) or `hybrid` (both
    /// fused). Default: hybrid when an embedding model is installed, keyword otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SearchMode>,
}

/// How search ranks its hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// BM25 over the full-text index.
    Keyword,
    /// Passage vectors of the embedding model.
    Semantic,
    /// BM25 and passage vectors fused.
    Hybrid,
}

impl SearchMode {
    /// The mode's name.
    pub fn as_str(self) -> &'static str {
        match self {
            SearchMode::Keyword => "keyword",
            SearchMode::Semantic => "semantic",
            SearchMode::Hybrid => "hybrid",
        }
    }
}

fn ten() -> usize {
    10
}

fn yes() -> bool {
    true
}

impl Default for SearchRequest {
    fn default() -> Self {
        SearchRequest {
            query: String::new(),
            limit: 10,
            offset: 0,
            words: false,
            snippets: true,
            filter: Filter::default(),
            mode: None,
        }
    }
}

impl SearchRequest {
    /// A search for `query` with the defaults.
    pub fn new(query: impl Into<String>) -> SearchRequest {
        SearchRequest { query: query.into(), ..Default::default() }
    }
}

/// Highlighted text from a hit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Snippet {
    /// The fragment.
    pub text: String,
    /// Byte ranges of `text` that matched, `[start, end]`.
    pub highlights: Vec<[usize; 2]>,
}

/// One search hit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hit {
    /// Position in the whole ranking, from 1.
    pub rank: usize,
    /// The score hits are ranked by (BM25 in keyword mode, the vector score in semantic mode,
    /// the fused score in hybrid mode).
    pub score: f32,
    /// The BM25 score, when the document is among the BM25 hits.
    pub bm25: Option<f32>,
    /// The best passage's cosine similarity to the query, when the document is among the
    /// vector hits.
    pub vector: Option<f32>,
    /// Document id.
    pub id: u64,
    /// Path or name.
    pub path: String,
    /// Current version.
    pub version: u32,
    /// Title, if the content has one.
    pub title: Option<String>,
    /// Content type.
    pub mime: String,
    /// Content size.
    pub size: u64,
    /// Last change (microseconds since the epoch).
    pub updated: i64,
    /// Tags.
    pub tags: Vec<String>,
    /// Metadata.
    pub meta: BTreeMap<String, String>,
    /// A snippet with the matched words.
    pub snippet: Option<Snippet>,
}

/// Search results.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Documents matching (before `limit`).
    pub total: u64,
    /// The hits, best first.
    pub hits: Vec<Hit>,
    /// Parts of the query that did not parse and were searched leniently.
    pub warnings: Vec<String>,
    /// How the hits were ranked.
    pub mode: SearchMode,
    /// Time taken (milliseconds).
    pub took_ms: f64,
}

/// Regular-expression search over stored content.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepRequest {
    /// The pattern (Rust regex syntax; a literal with `fixed`).
    pub pattern: String,
    /// Case-insensitive.
    #[serde(default)]
    pub ignore_case: bool,
    /// Whole words only.
    #[serde(default)]
    pub word: bool,
    /// The pattern is a literal string.
    #[serde(default)]
    pub fixed: bool,
    /// Lines of context around matches.
    #[serde(default)]
    pub context: usize,
    /// Which documents.
    #[serde(default)]
    pub filter: Filter,
    /// Stop after this many documents with matches (default: all).
    #[serde(default)]
    pub limit: Option<usize>,
    /// Read every document in scope instead of the n-gram index's candidates (the same
    /// output, slower: for checks and measurements).
    #[serde(default)]
    pub scan_all: bool,
}

/// One line of grep output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrepLine {
    /// Line number, from 1.
    pub line: u64,
    /// The line (invalid UTF-8 replaced).
    pub text: String,
    /// A matching line (else context).
    #[serde(rename = "match")]
    pub is_match: bool,
    /// Byte ranges of the matches in `text`, `[start, end]`.
    pub ranges: Vec<[usize; 2]>,
}

/// The matches in one document (lines whose numbers are not consecutive start a new group).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GrepFile {
    /// Path or name.
    pub path: String,
    /// Matching and context lines, in order.
    pub lines: Vec<GrepLine>,
}

/// Grep results.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GrepResult {
    /// Documents with matches, by path.
    pub files: Vec<GrepFile>,
    /// Text documents the filter allows.
    #[serde(default)]
    pub in_scope: u64,
    /// Documents the n-gram index named as candidates (with those it does not cover); `null`
    /// when every document in scope was read (a pattern with no usable trigram, `scan_all`, or
    /// an index that could not be read: see `warnings`).
    #[serde(default)]
    pub candidates: Option<u64>,
    /// Trigram terms in the index query.
    #[serde(default)]
    pub index_terms: u64,
    /// Documents read and searched.
    pub files_searched: u64,
    /// Documents with a match.
    pub files_matched: u64,
    /// Matching lines.
    pub lines_matched: u64,
    /// Bytes of content searched.
    #[serde(default)]
    pub bytes_searched: u64,
    /// Whether `limit` stopped the search early.
    pub truncated: bool,
    /// Documents that could not be read (the search went on without them).
    pub errors: Vec<Skipped>,
    /// What went wrong around the documents (the grep still read every one it had to).
    #[serde(default)]
    pub warnings: Vec<String>,
    /// Time taken in the library, in milliseconds.
    #[serde(default)]
    pub took_ms: f64,
}

/// What a rebuild of the full-text index did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReindexResult {
    /// Documents indexed.
    pub indexed: u64,
    /// Documents left out because their content cannot be read.
    pub skipped: Vec<Skipped>,
    /// Documents queued to be embedded again (0 without an embedding model).
    pub embeddings_queued: u64,
    /// Wall time.
    pub seconds: f64,
}

/// Names given by users and agents: UTF-8, 1 to 4096 bytes, relative, no empty, `.` or `..`
/// components, no control characters. A leading `name:` is dropped.
pub fn check_name(name: &str) -> Result<&str> {
    let n = name.strip_prefix("name:").unwrap_or(name);
    let bad = |why: &str| Err(Error::bad_request(format!("document name {name:?}: {why}")));
    if n.is_empty() || n.len() > 4096 {
        return bad("must be 1 to 4096 bytes");
    }
    if n.starts_with('/') {
        return bad("must be relative (absolute paths name file documents, which are added from files)");
    }
    if n.chars().any(char::is_control) {
        return bad("must not contain control characters");
    }
    if n.split('/').any(|c| c.is_empty() || c == "." || c == "..") {
        return bad("must not have empty, `.` or `..` components");
    }
    Ok(n)
}

fn status(s: AddStatus) -> Status {
    match s {
        AddStatus::Added => Status::Added,
        AddStatus::NewVersion => Status::NewVersion,
        AddStatus::Unchanged => Status::Unchanged,
    }
}

fn added_doc(a: &cairn_docs::Added) -> AddedDoc {
    let d = &a.doc;
    let note = (!d.indexed && d.size > cairn_docs::MAX_INDEXED).then(|| {
        format!(
            "stored but not full-text indexed: larger than {} MiB (grep still searches it)",
            cairn_docs::MAX_INDEXED >> 20
        )
    });
    AddedDoc {
        path: d.path.clone(),
        id: d.id,
        status: status(a.status),
        version: d.version,
        size: d.size,
        mime: d.mime.clone(),
        indexed: d.indexed,
        hash: d.hash.clone(),
        note,
    }
}

/// A file path as a document path: its bytes, shown as [`display_path`] does.
fn shown(p: &Path) -> String {
    cairn_docs::display_path(p.as_os_str().as_bytes())
}

/// The working directory relative paths of `call` are resolved against.
fn cwd(call: &Call<'_>, what: &str) -> Result<PathBuf> {
    call.cwd.clone().ok_or_else(|| Error::bad_request(format!("{what}: a relative path needs a working directory")))
}

pub(crate) fn resolve_path(call: &Call<'_>, p: &Path, what: &str) -> Result<PathBuf> {
    if p.is_absolute() { Ok(absolute(Path::new("/"), p)) } else { Ok(absolute(&cwd(call, what)?, p)) }
}

impl Cairn {
    /// The stored path of the document `r` refers to (see the module documentation).
    pub fn resolve_doc(&self, m: &Memory, r: &str, call: &Call<'_>) -> Result<String> {
        if let Some(name) = r.strip_prefix("name:") {
            return match m.doc_by_path(name)? {
                Some(d) => Ok(d.path),
                None => Err(Error::not_found(format!("no document named {name}"))),
            };
        }
        if r.starts_with('/') {
            let p = shown(&absolute(Path::new("/"), Path::new(r)));
            return match m.doc_by_path(&p)? {
                Some(d) => Ok(d.path),
                None => Err(Error::not_found(format!("no document {r}"))),
            };
        }
        let file = match &call.cwd {
            Some(cwd) => m.doc_by_path(&shown(&absolute(cwd, Path::new(r))))?.map(|d| d.path),
            None => None,
        };
        let relative_path = r.starts_with("./") || r.starts_with("../");
        let named = if relative_path { None } else { m.doc_by_path(r)?.map(|d| d.path) };
        match (file, named) {
            (Some(f), Some(_)) => Err(Error::new(
                crate::ErrorKind::Conflict,
                format!(
                    "{r} is ambiguous: it names the file document {f} and a named document; write name:{r} or ./{r}"
                ),
            )),
            (Some(p), None) | (None, Some(p)) => Ok(p),
            (None, None) => Err(Error::not_found(format!("no document {r}"))),
        }
    }

    fn resolve_all(&self, m: &Memory, refs: &[DocRef], call: &Call<'_>) -> Result<Vec<String>> {
        refs.iter().map(|r| self.resolve_doc(m, r, call)).collect()
    }

    /// Adds documents (see [`AddRequest`]); everything added is searchable when this returns.
    pub fn add(&self, req: AddRequest, call: &mut Call<'_>) -> Result<AddResult> {
        call.access.check_write("add")?;
        let t = std::time::Instant::now();
        let opts = AddOptions { tags: req.tags.clone(), meta: req.meta.clone().into_iter().collect() };
        // Names are checked before anything is written.
        let mut named = Vec::new();
        for d in &req.docs {
            let name = check_name(&d.name)?.to_string();
            let content = match (&d.content, &d.content_base64) {
                (Some(c), None) => c.clone().into_bytes(),
                (None, Some(b)) => crate::text::from_base64(b, "content_base64")?,
                _ => return Err(Error::bad_request(format!("{name}: give exactly one of content and content_base64"))),
            };
            named.push(NewDoc::new(name, content));
        }
        let stdin_name = req.stdin.as_deref().map(check_name).transpose()?.map(str::to_string);
        let mut files = Vec::new();
        for f in &req.files {
            let p = resolve_path(call, f, "add")?;
            call.access.check_path(&p, "add")?;
            files.push(p);
        }
        let m = self.memory(true)?;
        let mut out = AddResult::default();
        let mut added = Vec::new();
        if !named.is_empty() {
            added.extend(m.add(named, &opts)?);
        }
        if let Some(name) = stdin_name {
            let input = call.input.take().ok_or_else(|| Error::bad_request("no standard input for `stdin`"))?;
            added.extend(std::iter::once(m.add_reader(&name, input, &opts)?));
        }
        let found = self.collect_files(&files, req.recursive, &mut out.skipped)?;
        self.add_files(&m, &found, &opts, call, &mut added, &mut out.skipped)?;
        // Searchable once this returns, without a commit of the index on disk: the memory's
        // in-memory layers show it, and its queue rows make it durable
        // (docs/design/2026-12-07-index-layers.md).
        for a in &added {
            match a.status {
                AddStatus::Added => out.added += 1,
                AddStatus::NewVersion => out.new_versions += 1,
                AddStatus::Unchanged => out.unchanged += 1,
            }
            out.bytes += a.doc.size;
        }
        out.docs = added.iter().map(added_doc).collect();
        out.seconds = t.elapsed().as_secs_f64();
        Ok(out)
    }

    /// Files to add: every argument, directories walked when recursive (the data directory is
    /// never added). What a walk cannot read is reported in `skipped`.
    fn collect_files(&self, paths: &[PathBuf], recursive: bool, skipped: &mut Vec<Skipped>) -> Result<Vec<PathBuf>> {
        let data = std::fs::canonicalize(self.layout().root()).unwrap_or_else(|_| self.layout().root().to_path_buf());
        let mut files = Vec::new();
        for p in paths {
            let meta = std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
            if meta.is_file() {
                files.push(p.clone());
            } else if meta.is_dir() {
                if !recursive {
                    return Err(Error::bad_request(format!(
                        "{} is a directory: add it with --recursive (`recursive: true`)",
                        p.display()
                    )));
                }
                for e in ignore::WalkBuilder::new(p).build() {
                    match e {
                        Ok(e) if e.file_type().is_some_and(|t| t.is_file()) => {
                            let abs = absolute(Path::new("/"), e.path());
                            let real = std::fs::canonicalize(&abs).unwrap_or_else(|_| abs.clone());
                            if !real.starts_with(&data) {
                                files.push(abs);
                            }
                        }
                        Ok(_) => {}
                        Err(err) => skipped.push(Skipped { path: p.display().to_string(), error: err.to_string() }),
                    }
                }
            }
        }
        Ok(files)
    }

    /// Reads and adds files in windows of up to 2,000 files / 64 MiB, one durable write each.
    fn add_files(
        &self,
        m: &Memory,
        files: &[PathBuf],
        opts: &AddOptions,
        call: &Call<'_>,
        added: &mut Vec<cairn_docs::Added>,
        skipped: &mut Vec<Skipped>,
    ) -> Result<()> {
        let mut window: Vec<NewDoc> = Vec::new();
        let mut window_bytes = 0u64;
        let mut progress = Progress { total: files.len() as u64, ..Progress::default() };
        let report = |p: &Progress| {
            if let Some(f) = call.progress {
                f(*p);
            }
        };
        let flush = |window: &mut Vec<NewDoc>, added: &mut Vec<cairn_docs::Added>, p: &mut Progress| {
            if !window.is_empty() {
                let n = window.len() as u64;
                let bytes: u64 = window.iter().map(|d| d.content.len() as u64).sum();
                added.extend(m.add(std::mem::take(window), opts)?);
                p.done += n;
                p.bytes += bytes;
                report(p);
            }
            Ok::<(), Error>(())
        };
        for f in files {
            // A file's path is its bytes: two names that differ only in bytes that are not
            // UTF-8 stay two documents.
            let key = f.as_os_str().as_bytes().to_vec();
            let path = cairn_docs::display_path(&key);
            let opened = std::fs::File::open(f).and_then(|h| Ok((h.metadata()?.len(), h)));
            let (size, mut file) = match opened {
                Ok(x) => x,
                Err(e) => {
                    skipped.push(Skipped { path, error: e.to_string() });
                    progress.done += 1;
                    continue;
                }
            };
            if size > cairn_docs::MAX_INDEXED {
                added.push(m.add_reader_key(&key, file, opts)?);
                progress.done += 1;
                progress.bytes += size;
                report(&progress);
                continue;
            }
            let mut content = Vec::with_capacity(size as usize);
            if let Err(e) = file.read_to_end(&mut content) {
                skipped.push(Skipped { path, error: e.to_string() });
                progress.done += 1;
                continue;
            }
            window_bytes += content.len() as u64;
            window.push(NewDoc::with_key(key, content));
            if window.len() >= 2000 || window_bytes >= 64 << 20 {
                flush(&mut window, added, &mut progress)?;
                window_bytes = 0;
            }
        }
        flush(&mut window, added, &mut progress)
    }

    /// Every version of a document.
    pub fn versions(&self, req: VersionsRequest, call: &Call<'_>) -> Result<VersionsResult> {
        let m = self.memory(false)?;
        let path = self.resolve_doc(&m, &req.doc, call)?;
        Ok(VersionsResult { versions: m.versions(&path)?, path })
    }

    /// A document's record.
    pub fn get(&self, req: GetRequest, call: &Call<'_>) -> Result<GetResult> {
        let m = self.memory(false)?;
        let path = self.resolve_doc(&m, &req.doc, call)?;
        let doc = m.get(&path)?;
        let selected_version = match req.version {
            Some(n) => Some(
                m.versions(&path)?
                    .into_iter()
                    .find(|v| v.version == n)
                    .ok_or_else(|| Error::not_found(format!("{path} has no version {n}")))?,
            ),
            None => None,
        };
        Ok(GetResult { doc, selected_version })
    }

    /// A streaming reader of a document's content, with the document's record.
    pub fn content_reader(
        &self,
        doc: &str,
        version: Option<u32>,
        call: &Call<'_>,
    ) -> Result<(DocRecord, u32, cairn_cas::BlobReader)> {
        let m = self.memory(false)?;
        let path = self.resolve_doc(&m, doc, call)?;
        let record = m.get(&path)?;
        let v = version.unwrap_or(record.version);
        let r = m.reader(&path, Some(v))?;
        Ok((record, v, r))
    }

    /// A document's content, in JSON.
    pub fn content(&self, req: ContentRequest, call: &Call<'_>) -> Result<ContentResult> {
        let (doc, version, r) = self.content_reader(&req.doc, req.version, call)?;
        let size = match req.version {
            Some(_) => self.memory(false)?.versions(&doc.path)?.iter().find(|v| v.version == version).map(|v| v.size),
            None => Some(doc.size),
        }
        .unwrap_or(doc.size);
        let limit = req.max_bytes.unwrap_or(u64::MAX);
        let mut content = Vec::new();
        r.take(limit).read_to_end(&mut content).map_err(|e| Error::io(Path::new(&doc.path), e))?;
        let truncated = (content.len() as u64) < size;
        Ok(ContentResult { path: doc.path, version, mime: doc.mime, size, content: Blob::of(&content), truncated })
    }

    /// Writes a version of a document to a file (atomically: a temporary file renamed over it).
    pub fn restore(&self, req: RestoreRequest, call: &Call<'_>) -> Result<RestoreResult> {
        let m = self.memory(false)?;
        let path = self.resolve_doc(&m, &req.doc, call)?;
        let doc = m.get(&path)?;
        let dest = match &req.to {
            Some(to) => resolve_path(call, to, "restore")?,
            // A file document goes back to its own file (its path's bytes).
            None if path.starts_with('/') => PathBuf::from(std::ffi::OsStr::from_bytes(&doc.key())),
            None => {
                let cwd = cwd(call, "restore of a named document without a destination")?;
                let dest = absolute(&cwd, Path::new(&path));
                if !dest.starts_with(&cwd) || check_name(&path).is_err() {
                    return Err(Error::bad_request(format!(
                        "the name {path:?} would restore outside the working directory; give a destination"
                    )));
                }
                dest
            }
        };
        call.access.check_path(&dest, "restore")?;
        let version = req.version.unwrap_or(doc.version);
        let mut r = m.reader(&path, Some(version))?;
        let dir = dest.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let tmp = dir.join(format!(".cairn-restore-{}-{}", std::process::id(), version));
        let res = (|| -> Result<u64> {
            let mut f = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            let n = std::io::copy(&mut r, &mut f).map_err(|e| Error::io(&tmp, e))?;
            f.sync_all().map_err(|e| Error::io(&tmp, e))?;
            std::fs::rename(&tmp, &dest).map_err(|e| Error::io(&dest, e))?;
            Ok(n)
        })();
        if res.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        Ok(RestoreResult { path, version, to: dest, bytes: res? })
    }

    /// Documents matching a filter.
    pub fn ls(&self, req: LsRequest) -> Result<LsResult> {
        let m = self.memory(false)?;
        let mut docs = m.list(&req.filter.library()?)?;
        let total = docs.len() as u64;
        let truncated = req.limit.is_some_and(|l| docs.len() > l);
        if let Some(l) = req.limit {
            docs.truncate(l);
        }
        Ok(LsResult { docs, total, truncated })
    }

    /// Removes documents.
    pub fn rm(&self, req: RmRequest, call: &Call<'_>) -> Result<RmResult> {
        call.access.check_write("rm")?;
        let m = self.memory(false)?;
        let paths = self.resolve_all(&m, &req.docs, call)?;
        m.remove(&paths)?;
        Ok(RmResult { removed: paths })
    }

    /// Adds and removes tags.
    pub fn tag(&self, req: TagRequest, call: &Call<'_>) -> Result<UpdatedResult> {
        call.access.check_write("tag")?;
        if req.add.is_empty() && req.remove.is_empty() {
            return Err(Error::bad_request("nothing to do: give tags to add or remove"));
        }
        let m = self.memory(false)?;
        let paths = self.resolve_all(&m, &req.docs, call)?;
        m.tag(&paths, &req.add, &req.remove)?;
        Ok(UpdatedResult { updated: paths })
    }

    /// Sets and removes metadata in one write.
    pub fn meta_set(&self, req: MetaSetRequest, call: &Call<'_>) -> Result<UpdatedResult> {
        call.access.check_write("meta set")?;
        if req.set.is_empty() && req.unset.is_empty() {
            return Err(Error::bad_request("nothing to do: give keys to set or unset"));
        }
        let m = self.memory(false)?;
        let mut targets = self.resolve_all(&m, &req.docs, call)?;
        if !req.where_tags.is_empty() || req.where_path.is_some() {
            let f = cairn_docs::Filter {
                tags: req.where_tags.clone(),
                path_glob: req.where_path.clone(),
                ..Default::default()
            };
            targets.extend(m.list(&f)?.into_iter().map(|d| d.path));
        }
        targets.sort();
        targets.dedup();
        let changes: Vec<(String, Option<String>)> = req
            .set
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .chain(req.unset.iter().map(|k| (k.clone(), None)))
            .collect();
        let updates: Vec<_> = targets.iter().map(|p| (p.clone(), changes.clone())).collect();
        m.set_meta(&updates)?;
        Ok(UpdatedResult { updated: targets })
    }

    /// A document's metadata.
    pub fn meta_get(&self, req: MetaGetRequest, call: &Call<'_>) -> Result<MetaResult> {
        let m = self.memory(false)?;
        let doc = m.get(&self.resolve_doc(&m, &req.doc, call)?)?;
        let (meta, value) = match &req.key {
            Some(k) => match doc.meta.get(k) {
                Some(v) => (BTreeMap::from([(k.clone(), v.clone())]), Some(v.clone())),
                None => return Err(Error::not_found(format!("{} has no metadata key {k:?}", doc.path))),
            },
            None => (doc.meta, None),
        };
        Ok(MetaResult { path: doc.path, meta, value })
    }

    /// Full-text search.
    pub fn search(&self, req: SearchRequest) -> Result<SearchResult> {
        let t = std::time::Instant::now();
        let m = self.memory(false)?;
        let mode = req.mode.unwrap_or(if m.has_model() { SearchMode::Hybrid } else { SearchMode::Keyword });
        let opts = cairn_docs::SearchOptions {
            limit: req.limit,
            offset: req.offset,
            filter: req.filter.library()?,
            mode: if req.words { QueryMode::Words } else { QueryMode::Syntax },
            snippets: req.snippets,
            ranking: match mode {
                SearchMode::Keyword => cairn_docs::Ranking::Keyword,
                SearchMode::Semantic => cairn_docs::Ranking::Semantic,
                SearchMode::Hybrid => cairn_docs::Ranking::Hybrid,
            },
            fusion: cairn_docs::Fusion::default(),
        };
        let r = m.search(&req.query, &opts)?;
        let hits = r
            .hits
            .into_iter()
            .enumerate()
            .map(|(i, h)| Hit {
                rank: req.offset + i + 1,
                score: h.score,
                bm25: h.bm25,
                vector: h.vector,
                id: h.doc.id,
                path: h.doc.path,
                version: h.doc.version,
                title: h.doc.title,
                mime: h.doc.mime,
                size: h.doc.size,
                updated: h.doc.updated,
                tags: h.doc.tags.into_iter().collect(),
                meta: h.doc.meta,
                snippet: h.snippet.map(|s| Snippet {
                    text: s.text,
                    highlights: s.highlights.iter().map(|r| [r.start, r.end]).collect(),
                }),
            })
            .collect();
        Ok(SearchResult {
            total: r.total as u64,
            hits,
            warnings: r.warnings,
            mode,
            took_ms: t.elapsed().as_secs_f64() * 1e3,
        })
    }

    /// Greps stored content; `on_file` gets each document with matches, in path order.
    pub fn grep_each(&self, req: &GrepRequest, mut on_file: impl FnMut(GrepFile) -> Result<()>) -> Result<GrepResult> {
        let m = self.memory(false)?;
        let opts = cairn_docs::GrepOptions {
            pattern: req.pattern.clone(),
            ignore_case: req.ignore_case,
            word: req.word,
            fixed: req.fixed,
            context: req.context,
            filter: req.filter.library()?,
            max_files: req.limit,
            scan_all: req.scan_all,
        };
        let mut failed = None;
        let stats = m.grep(&opts, |f| {
            let file = GrepFile {
                path: f.path,
                lines: f
                    .groups
                    .into_iter()
                    .flatten()
                    .map(|l| GrepLine {
                        line: l.number,
                        text: l.text,
                        is_match: l.is_match,
                        ranges: l.matches.iter().map(|r| [r.start, r.end]).collect(),
                    })
                    .collect(),
            };
            on_file(file).map_err(|e| {
                let msg = e.to_string();
                failed = Some(e);
                cairn_docs::Error::InvalidArgument(msg)
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let stats = stats?;
        Ok(GrepResult {
            files: Vec::new(),
            in_scope: stats.in_scope,
            candidates: stats.candidates,
            index_terms: stats.grams as u64,
            files_searched: stats.files_searched,
            files_matched: stats.files_matched,
            lines_matched: stats.lines_matched,
            bytes_searched: stats.bytes_searched,
            truncated: req.limit.is_some_and(|l| stats.files_matched as usize >= l),
            errors: stats.errors.into_iter().map(|(path, error)| Skipped { path, error }).collect(),
            warnings: stats.warnings,
            took_ms: stats.micros as f64 / 1e3,
        })
    }

    /// Greps stored content, every match collected.
    pub fn grep(&self, req: GrepRequest) -> Result<GrepResult> {
        let mut files = Vec::new();
        let mut r = self.grep_each(&req, |f| {
            files.push(f);
            Ok(())
        })?;
        r.files = files;
        Ok(r)
    }

    /// Rebuilds the full-text index from the stored documents.
    pub fn reindex(&self, call: &Call<'_>) -> Result<ReindexResult> {
        call.access.check_write("reindex")?;
        let t = std::time::Instant::now();
        let m = self.memory(false)?;
        let (indexed, left_out) = m.rebuild_index_report()?;
        let skipped = left_out.into_iter().map(|(path, error)| Skipped { path, error }).collect();
        // The vectors are derived too: queue every document for the background thread.
        let embeddings_queued = m.requeue_embeddings()?;
        Ok(ReindexResult { indexed, skipped, embeddings_queued, seconds: t.elapsed().as_secs_f64() })
    }
}
