//! `cairn-docs`: the document memory. A document is a path with a series of content versions
//! (content in the blob store, deduplicated), tags, key/value metadata and times; its current
//! content is in a full-text index (tantivy, BM25, code-aware tokens, English stemming) and can
//! be grepped with regular expressions. With an embedding model attached, its passages are also
//! embedded in the background for semantic and hybrid search ([`semantic`]).
//!
//! Durability: every change is one durable engine write (document rows, blob references and a
//! `docs/q/` queue row together). The full-text index is updated right after and committed
//! lazily (before a search, on [`Memory::commit`] and [`Memory::close`]); on open, the queue rows
//! left by a crash are replayed into the index, so a document acknowledged by `add` is always
//! searchable after a reopen.

mod error;
pub mod extract;
mod grep;
mod index;
pub mod ngram;
pub mod rows;
pub mod semantic;
pub mod tokenizer;
mod verify;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use cairn_cas::{BlobReader, Id, Prepared, Store};
use cairn_kv::{Keyspace, KeyspaceBatch, WriteOptions};
use parking_lot::Mutex;
use rayon::prelude::*;

pub use error::{Error, Result};
pub use extract::Kind;
pub use grep::{GrepFile, GrepLine, GrepOptions, GrepStats};
pub use index::QueryMode;
pub use rows::{DocRecord, VersionRecord, display_path, format_time, parse_time, path_from_display};
pub use semantic::{Fusion, ModelSpec, Ranking, SemanticStatus};
pub use verify::{Problem, VerifyReport};

use rows::{decode, encode};

/// Content larger than this is not put in the full-text index (it is stored, and grep streams
/// it).
pub const MAX_INDEXED: u64 = 64 << 20;

/// A document to add: its path (a file path, a URL, a name: 1 to 4096 bytes without NUL) and
/// content.
#[derive(Clone, Debug)]
pub struct NewDoc {
    /// The document's path as text ([`display_path`] of `key` when that is not UTF-8).
    pub path: String,
    /// The path's bytes, when they are not `path`'s (a file name that is not UTF-8).
    pub key: Option<Vec<u8>>,
    /// Its content.
    pub content: Vec<u8>,
}

impl NewDoc {
    /// A document at `path` with `content`.
    pub fn new(path: impl Into<String>, content: Vec<u8>) -> NewDoc {
        NewDoc { path: path.into(), key: None, content }
    }

    /// A document whose path is the bytes `key` (any bytes: a file name that may not be UTF-8).
    pub fn with_key(key: Vec<u8>, content: Vec<u8>) -> NewDoc {
        match String::from_utf8(key) {
            Ok(path) => NewDoc { path, key: None, content },
            Err(e) => {
                let key = e.into_bytes();
                NewDoc { path: display_path(&key), key: Some(key), content }
            }
        }
    }

    fn key(&self) -> &[u8] {
        self.key.as_deref().unwrap_or(self.path.as_bytes())
    }
}

/// A metadata change of one document: its path and `(key, Some(value))` to set or
/// `(key, None)` to remove.
pub type MetaUpdate = (String, Vec<(String, Option<String>)>);

/// Tags and metadata given to every document of an `add`.
#[derive(Clone, Debug, Default)]
pub struct AddOptions {
    /// Tags to add.
    pub tags: Vec<String>,
    /// Metadata to set.
    pub meta: Vec<(String, String)>,
}

/// What an `add` did to one document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddStatus {
    /// A new document.
    Added,
    /// A new version of an existing path.
    NewVersion,
    /// The path already has this content; nothing but tags/metadata changed.
    Unchanged,
}

/// The outcome of adding one document.
#[derive(Clone, Debug)]
pub struct Added {
    /// The document (as it is now).
    pub doc: DocRecord,
    /// What happened.
    pub status: AddStatus,
}

/// Which documents a listing, search or grep looks at. Empty fields do not filter.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Documents must have every one of these tags.
    pub tags: Vec<String>,
    /// Documents must have every one of these key=value pairs.
    pub meta: Vec<(String, String)>,
    /// Documents whose path matches this glob (`*` also matches `/`; `**`, `?`, `[..]`, `{a,b}`).
    pub path_glob: Option<String>,
    /// Documents updated at or after this time (microseconds since the epoch).
    pub since: Option<i64>,
    /// Documents updated before this time (microseconds since the epoch).
    pub until: Option<i64>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.tags.is_empty()
            && self.meta.is_empty()
            && self.path_glob.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }
}

/// Search settings.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    /// How many hits to return (default 10).
    pub limit: usize,
    /// Hits to skip first (paging).
    pub offset: usize,
    /// Which documents may match.
    pub filter: Filter,
    /// How the query text is read.
    pub mode: QueryMode,
    /// Cut a snippet with highlights from each hit's content.
    pub snippets: bool,
    /// Which lists rank the hits (semantic and hybrid need a model: [`Memory::attach_model`]).
    pub ranking: Ranking,
    /// How hybrid ranking fuses its lists.
    pub fusion: Fusion,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            offset: 0,
            filter: Filter::default(),
            mode: QueryMode::Syntax,
            snippets: true,
            ranking: Ranking::Keyword,
            fusion: Fusion::default(),
        }
    }
}

/// A fragment of a hit's text with the matched words marked.
#[derive(Clone, Debug, PartialEq)]
pub struct Snippet {
    /// The fragment.
    pub text: String,
    /// Byte ranges of `text` that matched.
    pub highlights: Vec<std::ops::Range<usize>>,
}

/// One search hit.
#[derive(Clone, Debug)]
pub struct SearchHit {
    /// The score hits are ranked by: BM25, the vector score, or the fused score.
    pub score: f32,
    /// The BM25 score, when the document is in the BM25 list.
    pub bm25: Option<f32>,
    /// The best passage's vector score (cosine similarity), when the document is in the vector
    /// list.
    pub vector: Option<f32>,
    /// The document.
    pub doc: DocRecord,
    /// A snippet, when asked for and the content has matching words.
    pub snippet: Option<Snippet>,
}

/// The result of a search.
#[derive(Clone, Debug)]
pub struct SearchResults {
    /// Documents that match (before `limit`).
    pub total: usize,
    /// The best hits, best first.
    pub hits: Vec<SearchHit>,
    /// Parts of the query that did not parse and were searched as words or dropped.
    pub warnings: Vec<String>,
}

/// Counts of what the memory holds.
#[derive(Clone, Debug, Default)]
pub struct MemoryStats {
    /// Documents.
    pub documents: u64,
    /// Versions of all documents.
    pub versions: u64,
    /// Entries in the committed full-text index.
    pub indexed: u64,
    /// Sum of current content sizes.
    pub bytes: u64,
    /// Bytes of the committed full-text index, and of its n-gram part (grep's candidates).
    pub index_bytes: u64,
    /// Bytes of the n-gram part of the committed index.
    pub ngram_bytes: u64,
}

pub(crate) struct WriteState {
    next_id: u64,
    next_seq: u64,
    /// Queue rows whose changes were written to the disk index directly, not committed yet.
    uncommitted: Vec<u64>,
    /// Whether changes also queue their documents for embedding (a model is enabled).
    embed: bool,
    /// The next `docs/e/` queue row's sequence number.
    next_embed_seq: u64,
}

impl WriteState {
    /// Puts a `docs/q/` row for document `id` into `batch`: its index entry must be redone if
    /// the index on disk does not have it before a crash. Returns the row's sequence number.
    fn queue_index(&mut self, rows_ks: &Keyspace, batch: &mut cairn_cas::Batch<'_>, id: u64) -> Result<u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        batch.kv_put(rows_ks, rows::queue_key(seq), id.to_be_bytes())?;
        if self.embed {
            batch.kv_put(rows_ks, rows::embed_queue_key(self.next_embed_seq), id.to_be_bytes())?;
            self.next_embed_seq += 1;
        }
        Ok(seq)
    }
}

/// Deletes queue rows whose index changes are on disk.
fn forget_queued(rows_ks: &Keyspace, seqs: Vec<u64>) -> Result<()> {
    if seqs.is_empty() {
        return Ok(());
    }
    let mut b = KeyspaceBatch::new();
    for seq in seqs {
        b.delete(rows_ks, rows::queue_key(seq))?;
    }
    // Losing these deletes only makes the next open redo idempotent index work.
    rows_ks.write_opt(b, WriteOptions::no_sync())?;
    Ok(())
}

/// Index changes of one write beyond which they go to the disk index directly (bulk adds)
/// instead of through the in-memory layer.
const BULK_CHANGES: usize = 1024;
const BULK_BYTES: usize = 8 << 20;

struct Inner {
    /// The memory's rows (the engine's `docs` keyspace).
    rows: Keyspace,
    store: Store,
    index: Arc<index::SearchIndex>,
    write: Mutex<WriteState>,
    /// Add jobs waiting for the next group commit.
    queue: Mutex<Vec<AddJob>>,
    /// What opening found and worked around (documents whose content could not be read).
    warnings: Arc<Mutex<Vec<String>>>,
    /// The index's background flusher: stopped and joined when the memory is dropped, so the
    /// engine is released with the last handle.
    flusher: Mutex<Option<Flusher>>,
    /// The semantic index, once a model is attached.
    semantic: OnceLock<Arc<semantic::Semantic>>,
}

/// The thread that writes the index's in-memory layers to disk.
struct Flusher {
    stop: Arc<(Mutex<bool>, parking_lot::Condvar)>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Flusher {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// One `add` call waiting to be written by whoever holds the write lock next.
struct AddJob {
    staged: Vec<Staged>,
    opts: AddOptions,
    slot: Arc<Mutex<Option<Result<Vec<Added>>>>>,
}

/// The document memory. Cheap to clone; all clones share one engine, store and index.
#[derive(Clone)]
pub struct Memory {
    inner: Arc<Inner>,
}

/// A document's content prepared outside the write lock.
struct Staged {
    path: String,
    key: Vec<u8>,
    kind: Kind,
    text: Option<extract::Extracted>,
    /// The content's trigrams, when its text is indexed.
    grams: Vec<ngram::Gram>,
    prepared: Prepared,
}

impl Memory {
    /// Opens the memory over an open engine and store, with its index in `index_dir`. Replays
    /// index work a crash left undone; rebuilds the index if it is missing.
    pub fn with_parts(rows: Keyspace, store: Store, index_dir: impl Into<PathBuf>) -> Result<Memory> {
        let index_dir = index_dir.into();
        let (index, created, damaged) = index::SearchIndex::open_or_rebuild(&index_dir)?;
        let next_id = match rows.prefix(rows::DOC).next_back() {
            Some(kv) => rows::trailing_id(&kv?.0)? + 1,
            None => 1,
        };
        let next_seq = match rows.prefix(rows::QUEUE).next_back() {
            Some(kv) => rows::trailing_id(&kv?.0)? + 1,
            None => 0,
        };
        let next_embed_seq = match rows.prefix(rows::EMBED_QUEUE).next_back() {
            Some(kv) => rows::trailing_id(&kv?.0)? + 1,
            None => 0,
        };
        // Once a model was enabled, changes queue their documents even while none is attached.
        let embed = rows.get(rows::SEMANTIC_MODEL)?.is_some();
        let write = Mutex::new(WriteState { next_id, next_seq, uncommitted: Vec::new(), embed, next_embed_seq });
        let m = Memory {
            inner: Arc::new(Inner {
                rows,
                store,
                index: Arc::new(index),
                write,
                queue: Mutex::default(),
                warnings: Arc::default(),
                flusher: Mutex::default(),
                semantic: OnceLock::new(),
            }),
        };
        if let Some(why) = damaged {
            m.inner.warnings.lock().push(format!(
                "the full-text index in {} could not be opened ({why}); it was made anew from the documents",
                index_dir.display()
            ));
        }
        m.reconcile(created)?;
        m.spawn_flusher();
        Ok(m)
    }

    /// Starts the thread that writes the index's in-memory layers to disk when they are due
    /// (by age or size). A failed flush is retried (the changes stay searchable in memory and
    /// durable in the queue rows) and reported once.
    fn spawn_flusher(&self) {
        let stop: Arc<(Mutex<bool>, parking_lot::Condvar)> = Arc::default();
        let (index, rows, warnings) = (self.inner.index.clone(), self.inner.rows.clone(), self.inner.warnings.clone());
        let st = stop.clone();
        let spawned = std::thread::Builder::new().name("cairn-docs-flush".into()).spawn(move || {
            let mut failing = false;
            loop {
                {
                    let mut stopped = st.0.lock();
                    if !*stopped {
                        st.1.wait_for(&mut stopped, std::time::Duration::from_millis(50));
                    }
                    if *stopped {
                        return;
                    }
                }
                if !index.flush_due() {
                    continue;
                }
                match index.flush().and_then(|seqs| forget_queued(&rows, seqs)) {
                    Ok(()) => failing = false,
                    Err(e) if !failing => {
                        failing = true;
                        warnings.lock().push(format!(
                            "writing the full-text index to disk failed ({e}); retrying (searches see every change, \
                             and the next open redoes what is not on disk)"
                        ));
                    }
                    Err(_) => {}
                }
            }
        });
        match spawned {
            Ok(h) => *self.inner.flusher.lock() = Some(Flusher { stop, handle: Some(h) }),
            // No thread: flushes happen when writers find the layer overdue, and on commit.
            Err(_) => self.inner.warnings.lock().push("could not start the index flusher thread".into()),
        }
    }

    /// The blob store underneath.
    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    fn reconcile(&self, index_created: bool) -> Result<()> {
        let mut w = self.inner.write.lock();
        let mut ids = BTreeSet::new();
        for kv in self.inner.rows.prefix(rows::QUEUE) {
            let (k, v) = kv?;
            w.uncommitted.push(rows::trailing_id(&k)?);
            ids.insert(rows::id_value(&k, &v)?);
        }
        if index_created && next_is_nonempty(&self.inner.rows)? {
            // The index is gone (deleted, never written, or of an older schema): rebuild it from
            // the documents.
            self.inner.index.clear()?;
            self.rewrite_scan_rows()?;
            for kv in self.inner.rows.prefix(rows::DOC) {
                ids.insert(rows::trailing_id(&kv?.0)?);
            }
        }
        for id in ids {
            match self.doc_by_id(id)? {
                Some(doc) => {
                    if let Some(why) = self.reindex_or_leave_out(&doc)? {
                        self.inner.warnings.lock().push(why);
                    }
                }
                None => self.inner.index.write_direct(&index::Change::remove(id))?,
            }
        }
        if !w.uncommitted.is_empty() || index_created {
            self.commit_locked(&mut w)?;
        }
        Ok(())
    }

    /// Takes what opening found and worked around (each once).
    pub fn take_warnings(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.warnings.lock())
    }

    /// Puts the current content of `doc` into the index; when its content cannot be read
    /// (damaged or missing in the blob store), leaves it out of the index and says why (the
    /// index is derived: `rebuild_index` puts it back once the content is repaired).
    pub(crate) fn reindex_or_leave_out(&self, doc: &DocRecord) -> Result<Option<String>> {
        match self.reindex(doc) {
            Ok(()) => Ok(None),
            Err(Error::Cas(e)) => {
                self.inner.index.write_direct(&index::Change::remove(doc.id))?;
                // Grep reads it (and reports that it cannot) rather than trust the index.
                self.inner.rows.put(rows::scan_key(doc.id), b"")?;
                Ok(Some(format!(
                    "document {} v{}: its content cannot be read ({e}); it is left out of the full-text \
                     index until repaired (`cairn verify` names the damage)",
                    doc.path, doc.version
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Puts the current content of `doc` into the index (reading it from the blob store).
    fn reindex(&self, doc: &DocRecord) -> Result<()> {
        let (text, grams) = if doc.indexed {
            let content = self.inner.store.get(&rows::parse_hash(&doc.path, &doc.hash)?)?;
            let text = extract::extract(Kind::from_mime(&doc.mime), &content);
            let grams = if text.is_some() { ngram::grams(&content) } else { Vec::new() };
            (text, grams)
        } else {
            (None, Vec::new())
        };
        let text = text.as_ref().map(|t| (t.title.as_deref(), t.body.as_str()));
        self.inner.index.replace(doc.id, &doc.path, text, grams)
    }

    /// Writes the in-memory index layers to the disk index and commits it, with the changes
    /// written to it directly; deletes the queue rows of everything now on disk.
    pub(crate) fn commit_locked(&self, w: &mut WriteState) -> Result<()> {
        let mut seqs = self.inner.index.flush()?;
        self.inner.index.commit()?;
        seqs.append(&mut w.uncommitted);
        self.forget_queued(seqs)
    }

    /// Deletes queue rows whose index changes are on disk.
    fn forget_queued(&self, seqs: Vec<u64>) -> Result<()> {
        forget_queued(&self.inner.rows, seqs)
    }

    /// Writes the index's in-memory layers to disk (what the background flusher does); adds
    /// and removals meanwhile go on, and searches never wait for it.
    pub fn flush_index(&self) -> Result<()> {
        let seqs = self.inner.index.flush()?;
        self.forget_queued(seqs)
    }

    /// Commits the full-text index to disk: every change so far is durable there (searches see
    /// every change as soon as it returns, without this).
    pub fn commit(&self) -> Result<()> {
        let mut w = self.inner.write.lock();
        self.commit_locked(&mut w)
    }

    /// Applies the index changes of one write: through the in-memory layer, or, for a bulk
    /// write, to the disk index directly (after the layers, which must not hide them) and
    /// committed before the write returns.
    fn index_changes(&self, w: &mut WriteState, changes: Vec<index::Change>, seqs: Vec<u64>) -> Result<()> {
        let bytes: usize = changes.iter().map(|c| c.text.as_ref().map_or(0, |t| t.2.len())).sum();
        if changes.len() < BULK_CHANGES && bytes < BULK_BYTES {
            // A second change of a document in the active layer goes to a layer of its own (at
            // most two flushes: one may be writing the frozen layer). The write itself is done:
            // a failed flush only leaves scores counting the replaced entry differently.
            for _ in 0..2 {
                if !self.inner.index.replaces_active(&changes) || self.flush_index().is_err() {
                    break;
                }
            }
            self.inner.index.apply(changes, seqs)?;
            if self.inner.index.flush_overdue() {
                // The flusher is behind: this writer waits for it, so memory stays bounded. The
                // write itself is done (durable, searchable): a failed flush is the flusher's
                // to retry, not this write's error.
                let _ = self.flush_index();
            }
            return Ok(());
        }
        self.flush_index()?;
        for c in &changes {
            self.inner.index.write_direct(c)?;
        }
        w.uncommitted.extend(seqs);
        self.commit_locked(w)
    }

    /// Commits the index, waits for queued documents to be embedded (when a model is attached)
    /// and stops the embedding thread.
    pub fn close(self) -> Result<()> {
        self.commit()?;
        self.stop_embedding();
        Ok(())
    }

    fn stage(&self, doc: NewDoc) -> Result<Staged> {
        check_key(doc.key())?;
        let key = doc.key().to_vec();
        let kind = extract::detect(&doc.path, &doc.content);
        let text = if doc.content.len() as u64 <= MAX_INDEXED { extract::extract(kind, &doc.content) } else { None };
        let grams = if text.is_some() { ngram::grams(&doc.content) } else { Vec::new() };
        let prepared = self.inner.store.prepare(&doc.content)?;
        Ok(Staged { path: doc.path, key, kind, text, grams, prepared })
    }

    /// Adds documents (new paths, or new versions of existing paths) in one durable write.
    /// Content is hashed, chunked and compressed in parallel. Returns one outcome per document,
    /// in order.
    pub fn add(&self, docs: Vec<NewDoc>, opts: &AddOptions) -> Result<Vec<Added>> {
        check_labels(opts)?;
        let staged: Vec<Staged> = docs.into_par_iter().map(|d| self.stage(d)).collect::<Result<_>>()?;
        // Group commit: queue the job, then take the write lock. Whoever holds the lock writes
        // every queued job in one batch (one pack sync, one engine write), so concurrent adds
        // share their syncs instead of waiting in line for them.
        let slot: Arc<Mutex<Option<Result<Vec<Added>>>>> = Arc::default();
        self.inner.queue.lock().push(AddJob { staged, opts: opts.clone(), slot: slot.clone() });
        let mut w = self.inner.write.lock();
        if let Some(r) = slot.lock().take() {
            return r;
        }
        let jobs = std::mem::take(&mut *self.inner.queue.lock());
        let slots: Vec<_> = jobs.iter().map(|j| j.slot.clone()).collect();
        match self.add_group(&mut w, jobs) {
            Ok(outs) => {
                for (s, out) in slots.iter().zip(outs) {
                    *s.lock() = Some(Ok(out));
                }
            }
            Err(e) => {
                let e = Arc::new(e);
                for s in &slots {
                    *s.lock() = Some(Err(Error::Shared(e.clone())));
                }
            }
        }
        drop(w);
        self.wake_embedding();
        let r = slot.lock().take();
        r.unwrap_or_else(|| Err(Error::InvalidArgument("add job lost".into())))
    }

    /// Writes queued add jobs in one batch; one list of outcomes per job.
    fn add_group(&self, w: &mut WriteState, jobs: Vec<AddJob>) -> Result<Vec<Vec<Added>>> {
        let now = rows::now_micros();
        let mut batch = self.inner.store.batch();
        let mut touched: HashMap<Vec<u8>, (DocRecord, Option<DocRecord>)> = HashMap::new();
        let mut outs = Vec::with_capacity(jobs.len());
        let mut reindex: Vec<(u64, Option<extract::Extracted>, Vec<ngram::Gram>)> = Vec::new();
        // Ids this write allocates: no index has an entry of them.
        let mut fresh = HashSet::new();
        let mut seqs = Vec::new();
        for job in jobs {
            let opts = &job.opts;
            let mut out = Vec::with_capacity(job.staged.len());
            for s in job.staged {
                let before = match touched.get(&s.key) {
                    Some((now, _)) => Some(now.clone()),
                    None => self.doc_by_key(&s.key)?,
                };
                let hash = s.prepared.id().to_hex();
                let (mut doc, status) = match &before {
                    Some(d) if d.hash == hash => {
                        // The same content: a chunk of it known damaged is stored again from
                        // this copy.
                        batch.restore_prepared(s.prepared)?;
                        (d.clone(), AddStatus::Unchanged)
                    }
                    _ => {
                        let put = match batch.put_prepared(s.prepared) {
                            Err(cairn_cas::Error::Stale(_)) => {
                                return Err(Error::InvalidArgument(
                                    "content changed under a concurrent gc; retry".into(),
                                ));
                            }
                            r => r?,
                        };
                        let (id, version, created, tags, meta) = match &before {
                            Some(d) => (d.id, d.version + 1, d.created, d.tags.clone(), d.meta.clone()),
                            None => {
                                w.next_id += 1;
                                fresh.insert(w.next_id - 1);
                                (w.next_id - 1, 1, now, BTreeSet::new(), BTreeMap::new())
                            }
                        };
                        let indexed = s.text.is_some();
                        let doc = DocRecord {
                            id,
                            path: s.path.clone(),
                            raw_path: rows::raw_path(&s.key),
                            version,
                            hash: hash.clone(),
                            size: put.size,
                            mime: s.kind.mime().to_string(),
                            title: s.text.as_ref().and_then(|t| t.title.clone()),
                            indexed,
                            created,
                            updated: now,
                            tags,
                            meta,
                        };
                        let v = VersionRecord { version, hash, size: doc.size, mime: doc.mime.clone(), added: now };
                        batch.kv_put(&self.inner.rows, rows::version_key(id, version), encode(&v))?;
                        seqs.push(w.queue_index(&self.inner.rows, &mut batch, id)?);
                        reindex.retain(|(i, _, _)| *i != id);
                        reindex.push((id, s.text, s.grams));
                        let status = if before.is_some() { AddStatus::NewVersion } else { AddStatus::Added };
                        (doc, status)
                    }
                };
                let mut changed = status != AddStatus::Unchanged;
                for t in &opts.tags {
                    changed |= doc.tags.insert(t.clone());
                }
                for (k, v) in &opts.meta {
                    changed |= doc.meta.get(k) != Some(v);
                    doc.meta.insert(k.clone(), v.clone());
                }
                if changed {
                    doc.updated = now;
                }
                let original = match touched.remove(&s.key) {
                    Some((_, original)) => original,
                    None => before,
                };
                out.push(Added { doc: doc.clone(), status });
                touched.insert(s.key, (doc, original));
            }
            outs.push(out);
        }
        for (doc, before) in touched.values() {
            if before.as_ref() != Some(doc) {
                write_doc_rows(&mut RowSink::Cas(&self.inner.rows, &mut batch), doc, before.as_ref())?;
            }
        }
        batch.commit()?;
        let by_id: HashMap<u64, &DocRecord> = touched.values().map(|(d, _)| (d.id, d)).collect();
        let mut changes = Vec::with_capacity(reindex.len());
        for (id, text, grams) in reindex {
            let Some(doc) = by_id.get(&id) else { continue };
            let c =
                index::Change::new(id, &doc.path, text.as_ref().map(|t| (t.title.as_deref(), t.body.as_str())), grams);
            changes.push(if fresh.contains(&id) { c.fresh() } else { c });
        }
        self.index_changes(w, changes, seqs)?;
        Ok(outs)
    }

    /// Adds one document from a reader, streaming its content into the store in bounded memory.
    /// The first 8 KiB decide its kind; content larger than [`MAX_INDEXED`] is stored but not
    /// indexed, otherwise the text is indexed as with [`Memory::add`].
    pub fn add_reader(&self, path: &str, r: impl Read, opts: &AddOptions) -> Result<Added> {
        self.add_reader_key(path.as_bytes(), r, opts)
    }

    /// [`Memory::add_reader`] of a document whose path is the bytes `key` (a file name that
    /// may not be UTF-8).
    pub fn add_reader_key(&self, key: &[u8], mut r: impl Read, opts: &AddOptions) -> Result<Added> {
        check_key(key)?;
        let shown = display_path(key);
        let path = shown.as_str();
        let mut head = Vec::with_capacity(MAX_INDEXED as usize / 64);
        (&mut r).take(MAX_INDEXED + 1).read_to_end(&mut head).map_err(|e| Error::io(path, e))?;
        if head.len() as u64 <= MAX_INDEXED {
            let mut v = self.add(vec![NewDoc::with_key(key.to_vec(), head)], opts)?;
            return v.pop().ok_or_else(|| Error::InvalidArgument("nothing added".into()));
        }
        check_labels(opts)?;
        let kind = extract::detect(path, &head);
        let mut w = self.inner.write.lock();
        let now = rows::now_micros();
        let before = self.doc_by_key(key)?;
        let mut batch = self.inner.store.batch();
        let put = batch.put_reader(std::io::Cursor::new(head).chain(r))?;
        let hash = put.id.to_hex();
        if before.as_ref().is_some_and(|d| d.hash == hash) {
            batch.release(&put.id)?;
        }
        let (id, version, created, tags, meta, status) = match &before {
            Some(d) if d.hash == hash => {
                (d.id, d.version, d.created, d.tags.clone(), d.meta.clone(), AddStatus::Unchanged)
            }
            Some(d) => (d.id, d.version + 1, d.created, d.tags.clone(), d.meta.clone(), AddStatus::NewVersion),
            None => {
                w.next_id += 1;
                (w.next_id - 1, 1, now, BTreeSet::new(), BTreeMap::new(), AddStatus::Added)
            }
        };
        let mut doc = DocRecord {
            id,
            path: path.to_string(),
            raw_path: rows::raw_path(key),
            version,
            hash: hash.clone(),
            size: put.size,
            mime: kind.mime().to_string(),
            title: None,
            indexed: false,
            created,
            updated: now,
            tags,
            meta,
        };
        doc.tags.extend(opts.tags.iter().cloned());
        doc.meta.extend(opts.meta.iter().cloned());
        let mut seqs = Vec::new();
        if status != AddStatus::Unchanged {
            let v = VersionRecord { version, hash, size: put.size, mime: doc.mime.clone(), added: now };
            batch.kv_put(&self.inner.rows, rows::version_key(id, version), encode(&v))?;
            seqs.push(w.queue_index(&self.inner.rows, &mut batch, id)?);
        }
        write_doc_rows(&mut RowSink::Cas(&self.inner.rows, &mut batch), &doc, before.as_ref())?;
        batch.commit()?;
        if status != AddStatus::Unchanged {
            self.index_changes(&mut w, vec![index::Change::remove(id)], seqs)?;
            self.wake_embedding();
        }
        Ok(Added { doc, status })
    }

    /// The document at `path`, if any: the document whose path bytes are `path`'s, else, when
    /// `path` shows bytes that are not UTF-8 as `\xHH` ([`display_path`]), the document whose
    /// path bytes those are.
    pub fn doc_by_path(&self, path: &str) -> Result<Option<DocRecord>> {
        if let Some(d) = self.doc_by_key(path.as_bytes())? {
            return Ok(Some(d));
        }
        match path_from_display(path) {
            Some(key) => self.doc_by_key(&key),
            None => Ok(None),
        }
    }

    /// The document whose path is the bytes `key`, if any.
    pub fn doc_by_key(&self, key: &[u8]) -> Result<Option<DocRecord>> {
        let k = rows::path_key(key);
        match self.inner.rows.get(&k)? {
            Some(v) => self.doc_by_id(rows::id_value(&k, &v)?),
            None => Ok(None),
        }
    }

    /// The document with id `id`, if any.
    pub fn doc_by_id(&self, id: u64) -> Result<Option<DocRecord>> {
        let k = rows::doc_key(id);
        self.inner.rows.get(&k)?.map(|v| decode(&k, &v)).transpose()
    }

    /// The document at `path`, or [`Error::NotFound`].
    pub fn get(&self, path: &str) -> Result<DocRecord> {
        self.doc_by_path(path)?.ok_or_else(|| Error::NotFound(path.to_string()))
    }

    /// Every version of the document at `path`, oldest first.
    pub fn versions(&self, path: &str) -> Result<Vec<VersionRecord>> {
        let doc = self.get(path)?;
        self.inner
            .rows
            .prefix(rows::versions_prefix(doc.id))
            .map(|kv| {
                let (k, v) = kv?;
                decode(&k, &v)
            })
            .collect()
    }

    /// The blob id of version `version` (default: current) of the document at `path`.
    pub fn version_hash(&self, path: &str, version: Option<u32>) -> Result<Id> {
        let doc = self.get(path)?;
        let hash = match version {
            None => doc.hash,
            Some(n) => {
                let k = rows::version_key(doc.id, n);
                let v = self.inner.rows.get(&k)?.ok_or_else(|| Error::NoVersion(path.to_string(), n))?;
                decode::<VersionRecord>(&k, &v)?.hash
            }
        };
        rows::parse_hash(path, &hash)
    }

    /// The content of a version (default: current) of the document at `path`, whole.
    pub fn content(&self, path: &str, version: Option<u32>) -> Result<Vec<u8>> {
        Ok(self.inner.store.get(&self.version_hash(path, version)?)?)
    }

    /// A streaming reader of a version (default: current) of the document at `path`.
    pub fn reader(&self, path: &str, version: Option<u32>) -> Result<BlobReader> {
        Ok(self.inner.store.reader(&self.version_hash(path, version)?)?)
    }

    /// Removes documents with all their versions (their content is released to the store).
    /// Returns the paths that were not found.
    pub fn remove(&self, paths: &[String]) -> Result<Vec<String>> {
        let mut w = self.inner.write.lock();
        let mut batch = self.inner.store.batch();
        let mut missing = Vec::new();
        let mut removed = Vec::new();
        let mut seqs = Vec::new();
        for p in paths {
            let Some(doc) = self.doc_by_path(p)? else {
                missing.push(p.clone());
                continue;
            };
            if removed.contains(&doc.id) {
                continue;
            }
            for kv in self.inner.rows.prefix(rows::versions_prefix(doc.id)) {
                let (k, v) = kv?;
                let ver: VersionRecord = decode(&k, &v)?;
                batch.release(&rows::parse_hash(p, &ver.hash)?)?;
                batch.kv_delete(&self.inner.rows, &k)?;
            }
            let mut sink = RowSink::Cas(&self.inner.rows, &mut batch);
            delete_doc_rows(&mut sink, &doc)?;
            seqs.push(w.queue_index(&self.inner.rows, &mut batch, doc.id)?);
            removed.push(doc.id);
        }
        batch.commit()?;
        let changes = removed.into_iter().map(index::Change::remove).collect();
        self.index_changes(&mut w, changes, seqs)?;
        self.wake_embedding();
        Ok(missing)
    }

    /// Adds and removes tags on documents, in one durable write. Returns the paths not found.
    pub fn tag(&self, paths: &[String], add: &[String], remove: &[String]) -> Result<Vec<String>> {
        for t in add.iter().chain(remove) {
            rows::check_label("tag", t, false)?;
        }
        self.update(paths, |doc| {
            let mut changed = false;
            for t in add {
                changed |= doc.tags.insert(t.clone());
            }
            for t in remove {
                changed |= doc.tags.remove(t);
            }
            changed
        })
    }

    /// Sets (`Some`) or removes (`None`) metadata on many documents in one durable write.
    /// Returns the paths not found.
    pub fn set_meta(&self, updates: &[MetaUpdate]) -> Result<Vec<String>> {
        for (_, kvs) in updates {
            for (k, v) in kvs {
                rows::check_label("metadata key", k, false)?;
                if let Some(v) = v {
                    rows::check_label("metadata value", v, true)?;
                }
            }
        }
        let by_path: HashMap<&str, &Vec<(String, Option<String>)>> =
            updates.iter().map(|(p, kvs)| (p.as_str(), kvs)).collect();
        let paths: Vec<String> = updates.iter().map(|(p, _)| p.clone()).collect();
        self.update(&paths, |doc| {
            let mut changed = false;
            for (k, v) in by_path.get(doc.path.as_str()).copied().into_iter().flatten() {
                changed |= match v {
                    Some(v) => doc.meta.insert(k.clone(), v.clone()).as_ref() != Some(v),
                    None => doc.meta.remove(k).is_some(),
                };
            }
            changed
        })
    }

    /// Applies `f` to each document's record; writes the changed ones in one durable batch.
    fn update(&self, paths: &[String], mut f: impl FnMut(&mut DocRecord) -> bool) -> Result<Vec<String>> {
        let _w = self.inner.write.lock();
        let now = rows::now_micros();
        let mut b = KeyspaceBatch::new();
        let mut missing = Vec::new();
        let mut seen = HashSet::new();
        for p in paths {
            let Some(before) = self.doc_by_path(p)? else {
                missing.push(p.clone());
                continue;
            };
            if !seen.insert(before.id) {
                continue;
            }
            let mut doc = before.clone();
            if f(&mut doc) {
                doc.updated = now;
                write_doc_rows(&mut RowSink::Kv(&self.inner.rows, &mut b), &doc, Some(&before))?;
            }
        }
        if !b.is_empty() {
            self.inner.rows.write(b)?;
        }
        Ok(missing)
    }

    /// Ids of the documents having every tag and key=value of `filter` (`None`: no such
    /// condition, every document).
    fn label_ids(&self, filter: &Filter) -> Result<Option<HashSet<u64>>> {
        let mut set: Option<HashSet<u64>> = None;
        let prefixes = filter
            .tags
            .iter()
            .map(|t| rows::tag_prefix(t))
            .chain(filter.meta.iter().map(|(k, v)| rows::meta_prefix(k, v)));
        for prefix in prefixes {
            let mut ids = HashSet::new();
            for kv in self.inner.rows.prefix(&prefix) {
                let id = rows::trailing_id(&kv?.0)?;
                if set.as_ref().is_none_or(|s| s.contains(&id)) {
                    ids.insert(id);
                }
            }
            set = Some(ids);
        }
        Ok(set)
    }

    /// Documents matching `filter`, by path.
    pub fn list(&self, filter: &Filter) -> Result<Vec<DocRecord>> {
        let glob = match &filter.path_glob {
            Some(g) => Some(
                globset::Glob::new(g)
                    .map_err(|e| Error::InvalidArgument(format!("glob {g:?}: {e}")))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let keep = |d: &DocRecord| {
            glob.as_ref().is_none_or(|g| g.is_match(&d.path))
                && filter.since.is_none_or(|t| d.updated >= t)
                && filter.until.is_none_or(|t| d.updated < t)
        };
        let mut out = Vec::new();
        match self.label_ids(filter)? {
            Some(ids) => {
                for id in ids {
                    if let Some(d) = self.doc_by_id(id)?
                        && keep(&d)
                    {
                        out.push(d);
                    }
                }
            }
            None => {
                for kv in self.inner.rows.prefix(rows::DOC) {
                    let (k, v) = kv?;
                    let d: DocRecord = decode(&k, &v)?;
                    if keep(&d) {
                        out.push(d);
                    }
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// Search over the current content of the documents `opts.filter` allows: full-text (BM25),
    /// semantic or hybrid, by `opts.ranking`.
    pub fn search(&self, query: &str, opts: &SearchOptions) -> Result<SearchResults> {
        match opts.ranking {
            Ranking::Keyword => index::guarded(|| self.search_unguarded(query, opts)),
            Ranking::Semantic | Ranking::Hybrid => index::guarded(|| semantic::search(self, query, opts)),
        }
    }

    /// The BM25 scores of the documents `ids` for `query` (those no word of it matches are
    /// left out).
    pub(crate) fn bm25_of(&self, query: &str, mode: QueryMode, ids: HashSet<u64>) -> Result<HashMap<u64, f64>> {
        let idx = &self.inner.index;
        let (q, _) = idx.parse(query, mode)?;
        let n = ids.len();
        let (top, _) = idx.top(&idx.view()?, q.as_ref(), n, 0, Some(Arc::new(ids)))?;
        Ok(top.into_iter().map(|(score, id)| (id, f64::from(score))).collect())
    }

    fn search_unguarded(&self, query: &str, opts: &SearchOptions) -> Result<SearchResults> {
        let idx = &self.inner.index;
        let (q, warnings) = idx.parse(query, opts.mode)?;
        let allowed = if opts.filter.is_empty() {
            None
        } else if opts.filter.path_glob.is_none() && opts.filter.since.is_none() && opts.filter.until.is_none() {
            self.label_ids(&opts.filter)?.map(Arc::new)
        } else {
            Some(Arc::new(self.list(&opts.filter)?.into_iter().map(|d| d.id).collect()))
        };
        // Every change made so far, without waiting for a commit.
        let view = idx.view()?;
        // An entry whose document is gone (a removal not committed to the index yet, or rows a
        // crash lost) is skipped, and the page is filled from further entries, so a page of
        // ten shows ten while there are ten.
        let mut want = opts.limit;
        let (docs, total) = loop {
            let (top, total) = idx.top(&view, q.as_ref(), want, opts.offset, allowed.clone())?;
            let exhausted = top.len() < want;
            let mut docs = Vec::with_capacity(opts.limit);
            for (score, id) in top {
                if let Some(doc) = self.doc_by_id(id)? {
                    docs.push((score, doc));
                    if docs.len() == opts.limit {
                        break;
                    }
                }
            }
            if docs.len() == opts.limit || exhausted || want >= opts.limit + 10_000 {
                break (docs, total);
            }
            want += (opts.limit - docs.len()) * 2 + 8;
        };
        let generator = if opts.snippets { Some(idx.snippets(&view, q.as_ref())?) } else { None };
        let mut hits = Vec::with_capacity(docs.len());
        for (score, doc) in docs {
            let snippet = match &generator {
                // A hit whose content cannot be read is still a hit, without a snippet.
                Some(g) if doc.indexed => rows::parse_hash(&doc.path, &doc.hash)
                    .ok()
                    .and_then(|id| self.inner.store.get(&id).ok())
                    .and_then(|content| extract::extract(Kind::from_mime(&doc.mime), &content))
                    .and_then(|t| {
                        let s = g.snippet(&t.body);
                        (!s.fragment().is_empty())
                            .then(|| Snippet { text: s.fragment().to_string(), highlights: s.highlighted().to_vec() })
                    }),
                _ => None,
            };
            hits.push(SearchHit { score, bm25: Some(score), vector: None, doc, snippet });
        }
        Ok(SearchResults { total, hits, warnings })
    }

    /// Regex search over the stored content of the current versions of the documents the filter
    /// allows (text documents, those too large for the full-text index included: they are
    /// streamed), in path order; `on_file` gets each file with matches. A document that cannot
    /// be read is counted in [`GrepStats::errors`] and the search goes on.
    ///
    /// The n-gram index ([`ngram`]) names the candidates: only documents holding the trigrams
    /// every match needs, and those the index does not cover, are read. A pattern with no usable
    /// trigram reads every document in scope; so does every pattern when the index cannot be
    /// read (said in [`GrepStats::warnings`]). The output is the same either way.
    pub fn grep(&self, opts: &GrepOptions, on_file: impl FnMut(GrepFile) -> Result<()>) -> Result<GrepStats> {
        let started = std::time::Instant::now();
        // A bad pattern is the caller's error whichever way the documents are found.
        let matcher = grep::matcher(opts)?;
        let plan = ngram::plan(&opts.pattern, opts.ignore_case, opts.fixed);
        let mut warnings = Vec::new();
        let planned = match plan {
            _ if opts.scan_all => None,
            ngram::GramQuery::All => None,
            q => match index::guarded(|| self.grep_candidates(&opts.filter, &q)) {
                Ok(found) => Some((found, q.terms())),
                Err(e @ (Error::Index(_) | Error::IndexDamaged(_))) => {
                    warnings.push(format!("the n-gram index cannot be read ({e}); every document was read"));
                    None
                }
                Err(e) => return Err(e),
            },
        };
        let (docs, in_scope, candidates, grams) = match planned {
            Some(((docs, in_scope), grams)) => {
                let n = docs.len() as u64;
                (docs, in_scope, Some(n), grams)
            }
            None => {
                let docs = self.grep_scope(&opts.filter)?;
                let n = docs.len() as u64;
                (docs, n, None, 0)
            }
        };
        let mut stats = grep::run(self, opts, &matcher, &docs, on_file)?;
        stats.in_scope = in_scope;
        stats.candidates = candidates;
        stats.grams = grams;
        stats.warnings = warnings;
        stats.micros = started.elapsed().as_micros() as u64;
        Ok(stats)
    }

    /// The text documents `filter` allows, by path.
    fn grep_scope(&self, filter: &Filter) -> Result<Vec<DocRecord>> {
        Ok(self.list(filter)?.into_iter().filter(|d| Kind::from_mime(&d.mime).is_text()).collect())
    }

    /// The documents in scope that may hold a match of `q` (by path), and how many are in
    /// scope: the index's candidates and the documents it does not cover.
    fn grep_candidates(&self, filter: &Filter, q: &ngram::GramQuery) -> Result<(Vec<DocRecord>, u64)> {
        let view = self.inner.index.view()?;
        let (mut ids, live) = self.inner.index.gram_candidates(&view, q)?;
        let mut scan = 0u64;
        for kv in self.inner.rows.prefix(rows::SCAN) {
            ids.insert(rows::trailing_id(&kv?.0)?);
            scan += 1;
        }
        let (mut docs, in_scope) = if filter.is_empty() {
            let mut docs = Vec::with_capacity(ids.len());
            for id in ids {
                if let Some(d) = self.doc_by_id(id)?
                    && Kind::from_mime(&d.mime).is_text()
                {
                    docs.push(d);
                }
            }
            (docs, live + scan)
        } else {
            let scope = self.grep_scope(filter)?;
            let n = scope.len() as u64;
            (scope.into_iter().filter(|d| ids.contains(&d.id)).collect(), n)
        };
        docs.sort_by(|a, b| a.path.cmp(&b.path));
        Ok((docs, in_scope))
    }

    /// Drops the full-text index and rebuilds it from the stored documents. Returns the number
    /// of documents indexed.
    pub fn rebuild_index(&self) -> Result<u64> {
        Ok(self.rebuild_index_report()?.0)
    }

    /// [`Memory::rebuild_index`], also saying which documents were left out because their
    /// content cannot be read (path, why).
    pub fn rebuild_index_report(&self) -> Result<(u64, Vec<(String, String)>)> {
        let mut w = self.inner.write.lock();
        self.flush_index()?;
        self.inner.index.clear()?;
        self.rewrite_scan_rows()?;
        let mut n = 0;
        let mut left_out = Vec::new();
        for kv in self.inner.rows.prefix(rows::DOC) {
            let (k, v) = kv?;
            let doc: DocRecord = decode(&k, &v)?;
            match self.reindex_or_leave_out(&doc)? {
                None => n += u64::from(doc.indexed),
                Some(why) => left_out.push((doc.path.clone(), why)),
            }
        }
        self.commit_locked(&mut w)?;
        Ok((n, left_out))
    }

    /// Writes the scan rows ([`rows::SCAN`]) of the documents afresh from their records (rows of
    /// content left out of the index are added back as it is left out).
    fn rewrite_scan_rows(&self) -> Result<()> {
        let mut b = KeyspaceBatch::new();
        let end = cairn_kv::prefix_successor(rows::SCAN).ok_or_else(|| Error::InvalidArgument("scan prefix".into()))?;
        b.delete_range(&self.inner.rows, rows::SCAN, end)?;
        for kv in self.inner.rows.prefix(rows::DOC) {
            let (k, v) = kv?;
            let d: DocRecord = decode(&k, &v)?;
            if needs_scan(&d) {
                b.put(&self.inner.rows, rows::scan_key(d.id), b"")?;
            }
        }
        self.inner.rows.write(b)?;
        Ok(())
    }

    /// What the memory holds.
    pub fn stats(&self) -> Result<MemoryStats> {
        let (index_bytes, ngram_bytes) = self.inner.index.space()?;
        let mut s =
            MemoryStats { indexed: self.inner.index.num_docs(), index_bytes, ngram_bytes, ..Default::default() };
        for kv in self.inner.rows.prefix(rows::DOC) {
            let (k, v) = kv?;
            let d: DocRecord = decode(&k, &v)?;
            s.documents += 1;
            s.versions += u64::from(d.version);
            s.bytes += d.size;
        }
        Ok(s)
    }
}

fn next_is_nonempty(rows: &Keyspace) -> Result<bool> {
    Ok(rows.prefix(rows::DOC).next().transpose()?.is_some())
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() || key.contains(&0) || key.len() > 4096 {
        let shown = display_path(key);
        return Err(Error::InvalidArgument(format!("document path {shown:?} must be 1..=4096 bytes without NUL")));
    }
    Ok(())
}

fn check_labels(opts: &AddOptions) -> Result<()> {
    for t in &opts.tags {
        rows::check_label("tag", t, false)?;
    }
    for (k, v) in &opts.meta {
        rows::check_label("metadata key", k, false)?;
        rows::check_label("metadata value", v, true)?;
    }
    Ok(())
}

/// Where row changes go: a blob-store batch (with blob references) or a plain engine batch.
pub(crate) enum RowSink<'a, 'b> {
    Cas(&'a Keyspace, &'a mut cairn_cas::Batch<'b>),
    Kv(&'a Keyspace, &'a mut KeyspaceBatch),
}

impl RowSink<'_, '_> {
    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<()> {
        match self {
            RowSink::Cas(ks, b) => b.kv_put(ks, k, v)?,
            RowSink::Kv(ks, b) => b.put(ks, k, v)?,
        }
        Ok(())
    }

    fn delete(&mut self, k: &[u8]) -> Result<()> {
        match self {
            RowSink::Cas(ks, b) => b.kv_delete(ks, k)?,
            RowSink::Kv(ks, b) => b.delete(ks, k)?,
        }
        Ok(())
    }
}

/// Whether grep must read `doc` whatever the pattern: text the n-gram index does not cover.
pub(crate) fn needs_scan(doc: &DocRecord) -> bool {
    Kind::from_mime(&doc.mime).is_text() && !doc.indexed
}

/// Writes a document's record and its path/tag/metadata/scan rows, removing the rows of
/// `before` that no longer hold.
pub(crate) fn write_doc_rows(sink: &mut RowSink<'_, '_>, doc: &DocRecord, before: Option<&DocRecord>) -> Result<()> {
    sink.put(&rows::doc_key(doc.id), &encode(doc))?;
    if needs_scan(doc) {
        sink.put(&rows::scan_key(doc.id), b"")?;
    } else if before.is_some_and(|b| needs_scan(b) || b.hash != doc.hash) {
        // New content the index covers (a scan row of content left out of the index goes too).
        sink.delete(&rows::scan_key(doc.id))?;
    }
    if before.is_none_or(|b| b.key() != doc.key()) {
        sink.put(&rows::path_key(&doc.key()), &doc.id.to_be_bytes())?;
    }
    let empty = DocRecord { tags: BTreeSet::new(), meta: BTreeMap::new(), ..doc.clone() };
    let before = before.unwrap_or(&empty);
    for t in before.tags.difference(&doc.tags) {
        sink.delete(&rows::tag_key(t, doc.id))?;
    }
    for t in doc.tags.difference(&before.tags) {
        sink.put(&rows::tag_key(t, doc.id), b"")?;
    }
    for (k, v) in &before.meta {
        if doc.meta.get(k) != Some(v) {
            sink.delete(&rows::meta_key(k, v, doc.id))?;
        }
    }
    for (k, v) in &doc.meta {
        if before.meta.get(k) != Some(v) {
            sink.put(&rows::meta_key(k, v, doc.id), b"")?;
        }
    }
    Ok(())
}

fn delete_doc_rows(sink: &mut RowSink<'_, '_>, doc: &DocRecord) -> Result<()> {
    sink.delete(&rows::doc_key(doc.id))?;
    sink.delete(&rows::scan_key(doc.id))?;
    sink.delete(&rows::path_key(&doc.key()))?;
    for t in &doc.tags {
        sink.delete(&rows::tag_key(t, doc.id))?;
    }
    for (k, v) in &doc.meta {
        sink.delete(&rows::meta_key(k, v, doc.id))?;
    }
    Ok(())
}
