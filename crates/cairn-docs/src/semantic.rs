//! Semantic search: passage vectors as a derived index of the memory, beside the full-text index.
//!
//! - **Rows.** While a model is enabled (`docs/s/model` names it), every change of a document's
//!   content or removal writes a `docs/e/<seq>` queue row in the same engine write as the change
//!   (the hook is `WriteState::queue_index`). A background thread takes queue rows, splits the
//!   document's extracted text into token windows ([`cairn_embed::Splitter`], 256 tokens
//!   overlapping by 32), embeds them, and writes the vectors as `docs/x/<id><passage>` rows and
//!   deletes the queue rows it handled, in one engine write (not synced: the queue rows come
//!   back with the vectors if it is lost). Adds never wait for the model; a document not yet
//!   embedded is found by BM25 alone. Opening catches up on the queue left by a crash.
//! - **Memory.** Every vector is also in a [`VectorIndex`] (a contiguous int8 matrix, exact scan,
//!   a 1-bit prefilter with int8 rescoring past 200,000 passages), loaded from the rows when the
//!   model is attached.
//! - **Search.** Passages are ranked by dot product, a document scores its best passage, and
//!   hybrid search fuses the BM25 and vector lists ([`Fusion`]). Filters apply as in BM25 search.
//!   Snippets come from the best passage. Choice of fusion and figures:
//!   docs/design/2026-12-07-hybrid-search.md.
//! - **Checks.** `verify` reports documents without vectors and vectors without documents;
//!   [`Memory::requeue_embeddings`] queues every document again.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use cairn_embed::{Embedder, QuantizedVector, Splitter, VectorIndex, fusion};
use cairn_kv::{KeyspaceBatch, WriteOptions};
use parking_lot::{Condvar, Mutex, RwLock};
use serde::{Deserialize, Serialize};

use crate::rows::{self, DocRecord, decode, encode};
use crate::verify::{Problem, VerifyReport};
use crate::{Error, Filter, Inner, Kind, Memory, Result, SearchHit, SearchOptions, SearchResults, Snippet, extract};

/// Tokens per passage (special tokens not counted), or the model's limit if lower.
pub const PASSAGE_TOKENS: usize = 256;
/// Tokens shared by consecutive passages.
pub const PASSAGE_OVERLAP: usize = 32;
/// Bits of a vector's id that number the passage within its document.
const PASSAGE_BITS: u32 = 20;
/// Passages embedded per document at most (text past them is found by BM25 only).
pub const MAX_PASSAGES: usize = 1 << PASSAGE_BITS;
/// Passages embedded per round of the background thread (one engine write).
const ROUND_PASSAGES: usize = 256;
/// Passage vectors remembered by their text, so identical passages (copies of a document, the
/// unchanged start of a new version) are embedded once.
const CACHE_PASSAGES: usize = 32_768;
/// Format byte of a vector row.
const VECTOR_FORMAT: u8 = 1;
/// Bytes of a vector row before the vector's own encoding: format, version, start, end.
const VECTOR_HEADER: usize = 13;

/// Which lists a search ranks by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ranking {
    /// BM25 over the full-text index.
    #[default]
    Keyword,
    /// Passage vectors alone.
    Semantic,
    /// BM25 and passage vectors fused.
    Hybrid,
}

/// How hybrid search combines the BM25 list with the vector list.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fusion {
    /// Reciprocal rank fusion with constant `k` (60 is the usual choice).
    Rrf {
        /// The rank offset.
        k: f64,
    },
    /// Min-max normalized scores combined as `weight * vector + (1 - weight) * bm25`.
    Convex {
        /// The vector list's weight, in [0, 1].
        weight: f64,
    },
    /// [`Fusion::Convex`] over the union of both lists with each document's missing score
    /// computed (its BM25 score, 0 when no word matches; its best passage's cosine), instead of
    /// counting as the list's minimum.
    Complete {
        /// The vector list's weight, in [0, 1].
        weight: f64,
    },
    /// Scores divided by their list's best (both scores' floor is 0: BM25's, and the cosine's
    /// of unrelated texts, clipped), combined as `weight * vector + (1 - weight) * bm25`: the
    /// theoretical-minimum normalization of Bruch et al. (2023).
    Scaled {
        /// The vector list's weight, in [0, 1].
        weight: f64,
    },
}

/// The combination of [`Fusion::Scaled`]; best first, ties by the smaller id.
fn scaled_combination(vector: &[(u64, f64)], bm25: &[(u64, f64)], weight: f64) -> Vec<(u64, f64)> {
    let w = if weight.is_nan() { 0.5 } else { weight.clamp(0.0, 1.0) };
    let mut combined: HashMap<u64, f64> = HashMap::new();
    for (list, factor) in [(vector, w), (bm25, 1.0 - w)] {
        let best = list.iter().map(|x| x.1).fold(0.0, f64::max);
        if best <= 0.0 {
            continue;
        }
        for (id, s) in list {
            *combined.entry(*id).or_default() += factor * s.max(0.0) / best;
        }
    }
    let mut v: Vec<(u64, f64)> = combined.into_iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

impl Default for Fusion {
    /// The completed convex combination with the vector list weighted 0.75, the best of the
    /// settings tried on SciFact's train split (docs/design/2026-12-07-hybrid-search.md).
    fn default() -> Self {
        Fusion::Complete { weight: 0.75 }
    }
}

/// The model vectors are made by: what a data directory records when one is installed. Vectors
/// of another model are never mixed in: attaching a different one re-embeds every document.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// The model's name.
    pub name: String,
    /// The length of its vectors.
    pub dimension: usize,
    /// The sha256 of its weights, lowercase hex.
    pub sha256: String,
}

impl ModelSpec {
    /// The spec of a loaded model.
    pub fn of(e: &Embedder) -> ModelSpec {
        ModelSpec { name: e.info().name.clone(), dimension: e.dimension(), sha256: e.info().weights_sha256_hex() }
    }
}

/// The `docs/s/model` record: the model and the passage settings the stored vectors follow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct ModelState {
    model: ModelSpec,
    window: usize,
    overlap: usize,
}

/// What the semantic index holds and does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SemanticStatus {
    /// The attached model.
    pub model: ModelSpec,
    /// Whether the model is loaded (it loads in the background on first need).
    pub loaded: bool,
    /// Documents with vectors.
    pub documents: u64,
    /// Passage vectors in memory.
    pub passages: u64,
    /// Document changes waiting to be embedded.
    pub queued: u64,
    /// Why embedding stopped, if it did (a model that does not load, a failed write).
    pub error: Option<String>,
    /// Whether searches use the 1-bit prefilter now.
    pub prefilter: bool,
}

type Loader = Box<dyn FnOnce() -> cairn_embed::Result<Embedder> + Send>;

enum Model {
    Pending(Loader),
    Loading,
    Loaded(Arc<Embedder>),
    Failed(String),
}

/// Vectors in memory: the index, and per document the version embedded and its passage count.
struct Vectors {
    index: VectorIndex,
    docs: HashMap<u64, (u32, u32)>,
}

impl Vectors {
    /// The vector ids of every passage of the documents `ids` that are embedded.
    fn passages_of<'a>(&self, ids: impl IntoIterator<Item = &'a u64>) -> HashSet<u64> {
        ids.into_iter()
            .filter_map(|id| self.docs.get(id).map(|(_, n)| (*id, *n)))
            .flat_map(|(id, n)| (0..n as usize).filter_map(move |p| vector_id(id, p)))
            .collect()
    }
}

#[derive(Default)]
struct Work {
    /// Queue rows may be waiting.
    wake: bool,
    /// A round is running.
    busy: bool,
    /// The last round found the queue empty.
    idle: bool,
    stop: bool,
    /// Embedding is paused ([`Memory::pause_embedding`]).
    paused: bool,
    error: Option<String>,
}

/// The semantic index of one memory.
pub(crate) struct Semantic {
    state: ModelState,
    model: Mutex<Model>,
    model_cv: Condvar,
    vectors: RwLock<Vectors>,
    work: Mutex<Work>,
    work_cv: Condvar,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Recent passage vectors by a hash of their text (used by the background thread only).
    cache: Mutex<PassageCache>,
}

/// A bounded map from passage text (a 128-bit keyed hash of it) to its vector, oldest out first.
struct PassageCache {
    hashers: (std::hash::RandomState, std::hash::RandomState),
    map: HashMap<u128, QuantizedVector>,
    order: std::collections::VecDeque<u128>,
}

impl PassageCache {
    fn new() -> PassageCache {
        PassageCache {
            hashers: (std::hash::RandomState::new(), std::hash::RandomState::new()),
            map: HashMap::new(),
            order: std::collections::VecDeque::new(),
        }
    }

    fn key(&self, text: &str) -> u128 {
        use std::hash::BuildHasher;
        (u128::from(self.hashers.0.hash_one(text)) << 64) | u128::from(self.hashers.1.hash_one(text))
    }

    fn insert(&mut self, key: u128, v: QuantizedVector) {
        if self.map.insert(key, v).is_none() {
            self.order.push_back(key);
            while self.order.len() > CACHE_PASSAGES {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }
}

fn vector_id(doc: u64, passage: usize) -> Option<u64> {
    (doc < 1 << (64 - PASSAGE_BITS) && passage < MAX_PASSAGES).then_some(doc << PASSAGE_BITS | passage as u64)
}

fn doc_of(vector_id: u64) -> u64 {
    vector_id >> PASSAGE_BITS
}

fn vectors_prefix(doc: u64) -> Vec<u8> {
    [rows::VECTOR, &doc.to_be_bytes()].concat()
}

fn vector_key(doc: u64, passage: u32) -> Vec<u8> {
    [rows::VECTOR, &doc.to_be_bytes(), &passage.to_be_bytes()].concat()
}

/// A decoded vector row.
struct VectorRow {
    doc: u64,
    passage: u32,
    version: u32,
    range: Range<usize>,
    vector: QuantizedVector,
}

fn encode_vector(version: u32, range: &Range<usize>, v: &QuantizedVector) -> Vec<u8> {
    let mut out = Vec::with_capacity(VECTOR_HEADER + QuantizedVector::encoded_len(v.dimension()));
    out.push(VECTOR_FORMAT);
    out.extend_from_slice(&version.to_le_bytes());
    // Passage ranges lie in indexed text, at most 64 MiB (crate::MAX_INDEXED).
    out.extend_from_slice(&(range.start as u32).to_le_bytes());
    out.extend_from_slice(&(range.end as u32).to_le_bytes());
    out.extend_from_slice(&v.encode());
    out
}

fn decode_vector(key: &[u8], value: &[u8]) -> Result<VectorRow> {
    let corrupt = |msg: String| Error::Corrupt { key: String::from_utf8_lossy(key).escape_debug().to_string(), msg };
    let body = key.strip_prefix(rows::VECTOR).filter(|b| b.len() == 12).ok_or_else(|| corrupt("bad key".into()))?;
    let doc = u64::from_be_bytes(body[..8].try_into().map_err(|_| corrupt("bad key".into()))?);
    let passage = u32::from_be_bytes(body[8..].try_into().map_err(|_| corrupt("bad key".into()))?);
    if value.len() < VECTOR_HEADER || value[0] != VECTOR_FORMAT {
        return Err(corrupt("unknown vector row format".into()));
    }
    let u32_at = |at: usize| u32::from_le_bytes([value[at], value[at + 1], value[at + 2], value[at + 3]]);
    let (version, start, end) = (u32_at(1), u32_at(5) as usize, u32_at(9) as usize);
    if start > end {
        return Err(corrupt(format!("passage range {start}..{end}")));
    }
    let vector = QuantizedVector::decode(&value[VECTOR_HEADER..]).map_err(|e| corrupt(e.to_string()))?;
    Ok(VectorRow { doc, passage, version, range: start..end, vector })
}

/// A document's new vectors in a round: id, version, and (vector id, vector) per passage.
type Embedded<'a> = (u64, u32, Vec<(u64, &'a QuantizedVector)>);

/// A search's fused list, the BM25 scores by document, and the query's warnings.
type Fused = (Vec<(u64, f64)>, HashMap<u64, f32>, Vec<String>);

/// One document's work in a round: its passages and their text.
struct DocJob {
    id: u64,
    version: u32,
    text: String,
    passages: Vec<Range<usize>>,
}

impl Semantic {
    /// Windows of [`PASSAGE_TOKENS`] tokens, or of the model's limit if lower.
    fn splitter(&self, e: &Embedder) -> Result<Splitter> {
        let limit = e.tokenizer().max_tokens().saturating_sub(2).max(2);
        let window = self.state.window.min(limit);
        Ok(Splitter::new(window, self.state.overlap.min(window - 1))?)
    }

    /// The model, loading it on first need (callers wait while another thread loads it).
    fn embedder(&self) -> Result<Arc<Embedder>> {
        let mut m = self.model.lock();
        loop {
            match std::mem::replace(&mut *m, Model::Loading) {
                Model::Loaded(e) => {
                    *m = Model::Loaded(e.clone());
                    return Ok(e);
                }
                Model::Failed(why) => {
                    *m = Model::Failed(why.clone());
                    return Err(Error::InvalidArgument(format!("the embedding model did not load: {why}")));
                }
                Model::Loading => self.model_cv.wait(&mut m),
                Model::Pending(load) => {
                    drop(m);
                    let loaded = load().map_err(|e| e.to_string()).and_then(|e| {
                        let spec = ModelSpec::of(&e);
                        if spec.dimension != self.state.model.dimension {
                            return Err(format!(
                                "the model makes {}-component vectors, {} were recorded",
                                spec.dimension, self.state.model.dimension
                            ));
                        }
                        Ok(Arc::new(e))
                    });
                    m = self.model.lock();
                    *m = match loaded {
                        Ok(e) => Model::Loaded(e),
                        Err(why) => Model::Failed(why),
                    };
                    self.model_cv.notify_all();
                }
            }
        }
    }

    fn wake(&self) {
        let mut w = self.work.lock();
        w.wake = true;
        w.idle = false;
        self.work_cv.notify_all();
    }

    /// The vectors of `texts`, from the cache or the model (only what the cache lacks, each
    /// distinct text once).
    fn embed_cached(&self, embedder: Option<&Embedder>, texts: &[&str]) -> Result<Vec<QuantizedVector>> {
        let Some(e) = embedder.filter(|_| !texts.is_empty()) else { return Ok(Vec::new()) };
        let cache = self.cache.lock();
        let keys: Vec<u128> = texts.iter().map(|t| cache.key(t)).collect();
        let mut missing: Vec<(u128, &str)> = Vec::new();
        let mut asked = HashSet::new();
        for (k, t) in keys.iter().zip(texts) {
            if !cache.map.contains_key(k) && asked.insert(*k) {
                missing.push((*k, t));
            }
        }
        drop(cache);
        let batch: Vec<&str> = missing.iter().map(|(_, t)| *t).collect();
        let vectors = if batch.is_empty() { Vec::new() } else { e.embed_passages(&batch)? };
        let mut fresh: HashMap<u128, QuantizedVector> = HashMap::with_capacity(vectors.len());
        for ((k, _), v) in missing.iter().zip(&vectors) {
            if v.len() != self.state.model.dimension {
                return Err(Error::InvalidArgument(format!(
                    "the model returned {} components, {} expected",
                    v.len(),
                    self.state.model.dimension
                )));
            }
            fresh.insert(*k, QuantizedVector::quantize(v)?);
        }
        let mut cache = self.cache.lock();
        let mut out = Vec::with_capacity(texts.len());
        for k in &keys {
            let v = match fresh.get(k) {
                Some(v) => v.clone(),
                None => cache.map.get(k).cloned().ok_or_else(|| Error::InvalidArgument("passage cache lost".into()))?,
            };
            out.push(v);
        }
        for (k, v) in fresh {
            cache.insert(k, v);
        }
        Ok(out)
    }

    /// One round: takes queue rows until about [`ROUND_PASSAGES`] passages are found, embeds
    /// them, writes their vectors and deletes the queue rows in one write, then updates the
    /// in-memory index. Returns whether it did anything.
    fn round(&self, m: &Memory) -> Result<bool> {
        let rows_ks = &m.inner.rows;
        let mut taken: Vec<Vec<u8>> = Vec::new();
        let mut jobs: Vec<DocJob> = Vec::new();
        let mut seen = HashSet::new();
        let mut passages = 0;
        let mut embedder = None;
        for kv in rows_ks.prefix(rows::EMBED_QUEUE) {
            let (k, v) = kv?;
            let id = rows::id_value(&k, &v)?;
            taken.push(k.to_vec());
            if !seen.insert(id) {
                continue;
            }
            let job = match m.doc_by_id(id)? {
                None => DocJob { id, version: 0, text: String::new(), passages: Vec::new() },
                Some(doc) => {
                    let e = match &embedder {
                        Some(e) => e,
                        None => embedder.insert(self.embedder()?),
                    };
                    let text = document_text(m, &doc)?.unwrap_or_default();
                    let mut ranges = self.splitter(e)?.split(e.tokenizer(), &text)?;
                    ranges.truncate(MAX_PASSAGES);
                    DocJob { id, version: doc.version, text, passages: ranges }
                }
            };
            passages += job.passages.len();
            jobs.push(job);
            if passages >= ROUND_PASSAGES || taken.len() >= 4 * ROUND_PASSAGES {
                break;
            }
        }
        if taken.is_empty() {
            return Ok(false);
        }
        let texts: Vec<&str> = jobs.iter().flat_map(|j| j.passages.iter().map(|r| &j.text[r.clone()])).collect();
        let quantized = self.embed_cached(embedder.as_deref(), &texts)?;
        let mut b = KeyspaceBatch::new();
        let mut next = quantized.iter();
        let mut fresh: Vec<Embedded<'_>> = Vec::new();
        for j in &jobs {
            let end = match j.id.checked_add(1) {
                Some(n) => vectors_prefix(n),
                None => [rows::VECTOR, &[0xff; 13][..]].concat(),
            };
            b.delete_range(rows_ks, vectors_prefix(j.id), end)?;
            let mut doc_vectors = Vec::with_capacity(j.passages.len());
            for (p, r) in j.passages.iter().enumerate() {
                let Some(v) = next.next() else { break };
                let Some(vid) = vector_id(j.id, p) else { break };
                b.put(rows_ks, vector_key(j.id, p as u32), encode_vector(j.version, r, v))?;
                doc_vectors.push((vid, v));
            }
            fresh.push((j.id, j.version, doc_vectors));
        }
        for k in &taken {
            b.delete(rows_ks, k)?;
        }
        // Derived data: a lost write leaves the queue rows, so the work is redone.
        rows_ks.write_opt(b, WriteOptions::no_sync())?;
        let mut vs = self.vectors.write();
        for (id, version, doc_vectors) in fresh {
            if let Some((_, n)) = vs.docs.remove(&id) {
                for p in 0..n as usize {
                    if let Some(vid) = vector_id(id, p) {
                        vs.index.remove(vid);
                    }
                }
            }
            if !doc_vectors.is_empty() {
                vs.docs.insert(id, (version, doc_vectors.len() as u32));
            }
            for (vid, v) in doc_vectors {
                vs.index.insert(vid, v)?;
            }
        }
        Ok(true)
    }
}

/// The text of a document's current version as the full-text index sees it (`None`: binary,
/// too large, or its content cannot be read, which `verify` reports on its own).
fn document_text(m: &Memory, doc: &DocRecord) -> Result<Option<String>> {
    if !doc.indexed {
        return Ok(None);
    }
    let content = match m.inner.store.get(&rows::parse_hash(&doc.path, &doc.hash)?) {
        Ok(c) => c,
        Err(_) => return Ok(None),
    };
    Ok(extract::extract(Kind::from_mime(&doc.mime), &content).map(|t| t.body))
}

/// Niceness added to the embedding thread (and the model's threads it starts): embedding is
/// background work and must not slow adds and searches down (docs/design/2026-12-07-hybrid-search.md).
const EMBED_NICE: i32 = 19;

fn run_worker(sem: Arc<Semantic>, inner: Weak<Inner>) {
    cairn_kv::lower_priority(EMBED_NICE);
    loop {
        {
            let mut w = sem.work.lock();
            while (!w.wake || w.paused) && !w.stop {
                sem.work_cv.wait_for(&mut w, Duration::from_millis(250));
                if inner.strong_count() == 0 {
                    return;
                }
            }
            if w.stop {
                return;
            }
            w.wake = false;
            w.busy = true;
        }
        // Load the model before taking hold of the memory, so a slow or stuck load never keeps
        // a dropped memory (and its engine) alive.
        if let Err(e) = sem.embedder() {
            let mut w = sem.work.lock();
            w.busy = false;
            w.error = Some(e.to_string());
            sem.work_cv.notify_all();
            continue;
        }
        let Some(inner) = inner.upgrade() else { return };
        let m = Memory { inner };
        let r = sem.round(&m);
        drop(m);
        let mut w = sem.work.lock();
        w.busy = false;
        match r {
            Ok(true) => {
                w.wake = true;
                w.error = None;
            }
            Ok(false) => {
                w.idle = !w.wake;
                w.error = None;
            }
            // Tried again at the next change or wait.
            Err(e) => w.error = Some(e.to_string()),
        }
        sem.work_cv.notify_all();
    }
}

impl Memory {
    /// Enables semantic search with the model `spec` describes, loaded by `loader` when first
    /// needed (in the background, or by the first semantic search). Records the model in the
    /// memory; when the stored vectors were made by another model (or none), they are dropped
    /// and every document is queued. Loads the stored vectors, starts the background thread,
    /// and catches up on the queue. At most once per open memory.
    pub fn attach_model(
        &self,
        spec: ModelSpec,
        loader: impl FnOnce() -> cairn_embed::Result<Embedder> + Send + 'static,
    ) -> Result<()> {
        if self.inner.semantic.get().is_some() {
            return Err(Error::InvalidArgument("a model is already attached".into()));
        }
        let state = ModelState { model: spec, window: PASSAGE_TOKENS, overlap: PASSAGE_OVERLAP };
        let rows_ks = &self.inner.rows;
        let mut w = self.inner.write.lock();
        let recorded = match rows_ks.get(rows::SEMANTIC_MODEL)? {
            Some(v) => Some(decode::<ModelState>(rows::SEMANTIC_MODEL, &v)?),
            None => None,
        };
        if recorded.as_ref() != Some(&state) {
            // Start over: vectors of another model are useless, and every document is queued.
            let mut b = KeyspaceBatch::new();
            b.delete_range(rows_ks, rows::VECTOR, [rows::VECTOR, &[0xff; 13][..]].concat())?;
            b.delete_range(rows_ks, rows::EMBED_QUEUE, [rows::EMBED_QUEUE, &[0xff; 9][..]].concat())?;
            rows_ks.write_opt(b, WriteOptions::no_sync())?;
            let mut b = KeyspaceBatch::new();
            for kv in rows_ks.prefix(rows::DOC) {
                let id = rows::trailing_id(&kv?.0)?;
                b.put(rows_ks, rows::embed_queue_key(w.next_embed_seq), id.to_be_bytes())?;
                w.next_embed_seq += 1;
                if b.len() >= 10_000 {
                    rows_ks.write_opt(std::mem::take(&mut b), WriteOptions::no_sync())?;
                }
            }
            // Last, so a crash before it starts over again.
            b.put(rows_ks, rows::SEMANTIC_MODEL, encode(&state))?;
            rows_ks.write(b)?;
        }
        w.embed = true;
        let mut vectors = Vectors { index: VectorIndex::new(state.model.dimension), docs: HashMap::new() };
        for kv in rows_ks.prefix(rows::VECTOR) {
            let (k, v) = kv?;
            // A row that does not decode is left to `verify` (and `requeue_embeddings`).
            let Ok(row) = decode_vector(&k, &v) else { continue };
            let Some(vid) = vector_id(row.doc, row.passage as usize) else { continue };
            if row.vector.dimension() != state.model.dimension {
                continue;
            }
            vectors.index.insert(vid, &row.vector)?;
            let e = vectors.docs.entry(row.doc).or_insert((row.version, 0));
            e.1 = e.1.max(row.passage + 1);
        }
        drop(w);
        let sem = Arc::new(Semantic {
            state,
            model: Mutex::new(Model::Pending(Box::new(loader))),
            model_cv: Condvar::new(),
            vectors: RwLock::new(vectors),
            work: Mutex::new(Work { wake: true, ..Default::default() }),
            work_cv: Condvar::new(),
            worker: Mutex::new(None),
            cache: Mutex::new(PassageCache::new()),
        });
        if self.inner.semantic.set(sem.clone()).is_err() {
            return Err(Error::InvalidArgument("a model is already attached".into()));
        }
        let weak = Arc::downgrade(&self.inner);
        let worker = sem.clone();
        let handle = std::thread::Builder::new()
            .name("cairn-embed".into())
            .spawn(move || run_worker(worker, weak))
            .map_err(|e| Error::io("cairn-embed thread", e))?;
        *sem.worker.lock() = Some(handle);
        Ok(())
    }

    /// Wakes the background embedding thread (after a write queued work for it).
    pub(crate) fn wake_embedding(&self) {
        if let Some(s) = self.inner.semantic.get() {
            s.wake();
        }
    }

    /// Pauses (`true`) or resumes background embedding; queued documents stay queued (durably)
    /// while it is paused, and BM25 finds them.
    pub fn pause_embedding(&self, paused: bool) {
        if let Some(s) = self.inner.semantic.get() {
            let mut w = s.work.lock();
            w.paused = paused;
            w.wake = true;
            w.idle = false;
            s.work_cv.notify_all();
        }
    }

    /// Whether a model is attached.
    pub fn has_model(&self) -> bool {
        self.inner.semantic.get().is_some()
    }

    /// Waits until every queued document is embedded, at most `timeout` (`None`: no limit).
    /// Returns whether the queue is empty; an error when embedding fails (the model does not
    /// load, a write fails), or when no model is attached.
    pub fn wait_for_embeddings(&self, timeout: Option<Duration>) -> Result<bool> {
        let sem = self.inner.semantic.get().ok_or_else(no_model)?;
        let deadline = timeout.map(|t| Instant::now() + t);
        sem.wake();
        let mut w = sem.work.lock();
        loop {
            if let Some(e) = &w.error {
                return Err(Error::InvalidArgument(format!("embedding stopped: {e}")));
            }
            if w.idle && !w.wake && !w.busy {
                return Ok(true);
            }
            if w.stop || w.paused || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
            sem.work_cv.wait_for(&mut w, Duration::from_millis(100));
        }
    }

    /// Waits for the queue to drain (unless embedding fails) and stops the background thread.
    pub(crate) fn stop_embedding(&self) {
        let Some(sem) = self.inner.semantic.get() else { return };
        // A failure leaves the queue rows for the next open.
        let _ = self.wait_for_embeddings(None);
        sem.work.lock().stop = true;
        sem.work_cv.notify_all();
        if let Some(h) = sem.worker.lock().take() {
            let _ = h.join();
        }
    }

    /// What the semantic index holds, when a model is attached.
    pub fn semantic_status(&self) -> Result<Option<SemanticStatus>> {
        let Some(sem) = self.inner.semantic.get() else { return Ok(None) };
        let mut queued = 0;
        for kv in self.inner.rows.prefix(rows::EMBED_QUEUE) {
            kv?;
            queued += 1;
        }
        let (loaded, model_error) = match &*sem.model.lock() {
            Model::Loaded(_) => (true, None),
            Model::Failed(why) => (false, Some(why.clone())),
            _ => (false, None),
        };
        let vs = sem.vectors.read();
        Ok(Some(SemanticStatus {
            model: sem.state.model.clone(),
            loaded,
            documents: vs.docs.len() as u64,
            passages: vs.index.len() as u64,
            queued,
            error: model_error.or_else(|| sem.work.lock().error.clone()),
            prefilter: vs.index.prefilter_active(),
        }))
    }

    /// Queues every document (and every document that has vectors) to be embedded again: the
    /// repair of the semantic index. Returns the number queued.
    pub fn requeue_embeddings(&self) -> Result<u64> {
        let rows_ks = &self.inner.rows;
        let mut w = self.inner.write.lock();
        if !w.embed {
            return Ok(0);
        }
        let mut ids = std::collections::BTreeSet::new();
        for kv in rows_ks.prefix(rows::DOC) {
            ids.insert(rows::trailing_id(&kv?.0)?);
        }
        for kv in rows_ks.prefix(rows::VECTOR) {
            let (k, _) = kv?;
            if let Some(id) = k.get(rows::VECTOR.len()..rows::VECTOR.len() + 8) {
                ids.insert(u64::from_be_bytes(id.try_into().unwrap_or_default()));
            }
        }
        let mut b = KeyspaceBatch::new();
        for id in &ids {
            b.put(rows_ks, rows::embed_queue_key(w.next_embed_seq), id.to_be_bytes())?;
            w.next_embed_seq += 1;
        }
        rows_ks.write(b)?;
        drop(w);
        self.wake_embedding();
        Ok(ids.len() as u64)
    }

    /// Checks the vector rows against the documents (when a model is enabled): every document
    /// with text has vectors of its current version, every vector row decodes and belongs to a
    /// document, unless a queue row says the document is still to be embedded.
    pub(crate) fn verify_vectors(&self, docs: &HashMap<u64, DocRecord>, r: &mut VerifyReport) -> Result<()> {
        let rows_ks = &self.inner.rows;
        let Some(v) = rows_ks.get(rows::SEMANTIC_MODEL)? else { return Ok(()) };
        let state: ModelState = match decode(rows::SEMANTIC_MODEL, &v) {
            Ok(s) => s,
            Err(e) => {
                r.problems.push(Problem { problem: e.to_string(), affects: Vec::new(), index: true });
                return Ok(());
            }
        };
        let mut queued = HashSet::new();
        for kv in rows_ks.prefix(rows::EMBED_QUEUE) {
            let (k, v) = kv?;
            queued.insert(rows::id_value(&k, &v)?);
        }
        let mut have: HashMap<u64, (u32, u32)> = HashMap::new();
        for kv in rows_ks.prefix(rows::VECTOR) {
            let (k, v) = kv?;
            match decode_vector(&k, &v) {
                Ok(row) if row.vector.dimension() != state.model.dimension => r.problems.push(Problem {
                    problem: format!(
                        "a vector of document id {} has {} components, the model {}",
                        row.doc,
                        row.vector.dimension(),
                        state.model.dimension
                    ),
                    affects: docs.get(&row.doc).map(|d| format!("document {}", d.path)).into_iter().collect(),
                    index: true,
                }),
                Ok(row) => {
                    let e = have.entry(row.doc).or_insert((row.version, 0));
                    e.1 += 1;
                }
                Err(e) => r.problems.push(Problem { problem: e.to_string(), affects: Vec::new(), index: true }),
            }
        }
        for (id, (version, n)) in &have {
            if queued.contains(id) {
                continue;
            }
            match docs.get(id) {
                None => r.problems.push(Problem {
                    problem: format!("{n} passage vectors belong to no document (id {id})"),
                    affects: Vec::new(),
                    index: true,
                }),
                Some(d) if d.version != *version => r.problems.push(Problem {
                    problem: format!("the passage vectors of {} are of version {version}, not {}", d.path, d.version),
                    affects: vec![format!("document {}", d.path)],
                    index: true,
                }),
                Some(_) => {}
            }
        }
        for d in docs.values() {
            if have.contains_key(&d.id) || queued.contains(&d.id) || !d.indexed {
                continue;
            }
            // Only a document with words needs vectors.
            let has_words = document_text(self, d)?.is_some_and(|t| t.chars().any(char::is_alphanumeric));
            if has_words {
                r.problems.push(Problem {
                    problem: format!("{} has no passage vectors (semantic search misses it)", d.path),
                    affects: vec![format!("document {}", d.path)],
                    index: true,
                });
            }
        }
        Ok(())
    }
}

fn no_model() -> Error {
    Error::InvalidArgument("no embedding model is installed (`cairn model install`)".into())
}

/// The documents `filter` allows (`None`: every one), as BM25 search computes them.
fn allowed_docs(m: &Memory, filter: &Filter) -> Result<Option<HashSet<u64>>> {
    if filter.is_empty() {
        Ok(None)
    } else if filter.path_glob.is_none() && filter.since.is_none() && filter.until.is_none() {
        m.label_ids(filter)
    } else {
        Ok(Some(m.list(filter)?.into_iter().map(|d| d.id).collect()))
    }
}

/// A ranked list: (document id, score).
type Scored = Vec<(u64, f64)>;

/// The vector and BM25 lists extended to the union of their documents: a document missing
/// from one list gets its score computed (BM25 0 when no word matches; a document not embedded
/// yet stays out of the vector list). The computed scores are added to `vector_best` and
/// `bm25_scores`, so the hit reports both.
#[allow(clippy::too_many_arguments)]
fn complete(
    m: &Memory,
    sem: &Semantic,
    q: &[f32],
    query: &str,
    opts: &SearchOptions,
    vector_list: &[(u64, f64)],
    bm25: &[(u64, f64)],
    vector_best: &mut HashMap<u64, VectorHit>,
    bm25_scores: &mut HashMap<u64, f32>,
) -> Result<(Scored, Scored)> {
    let in_vector: HashSet<u64> = vector_list.iter().map(|x| x.0).collect();
    let in_bm25: HashSet<u64> = bm25.iter().map(|x| x.0).collect();
    let mut b = bm25.to_vec();
    let missing: HashSet<u64> = in_vector.difference(&in_bm25).copied().collect();
    if !missing.is_empty() {
        let scores = m.bm25_of(query, opts.mode, missing.clone())?;
        for id in &missing {
            let score = scores.get(id).copied().unwrap_or(0.0);
            b.push((*id, score));
            bm25_scores.insert(*id, score as f32);
        }
    }
    let mut v = vector_list.to_vec();
    let vs = sem.vectors.read();
    let unscored: Vec<u64> = in_bm25.difference(&in_vector).copied().collect();
    let wanted = vs.passages_of(&unscored);
    if !wanted.is_empty() {
        keep_best(vector_best, &vs.index.search_exact(q, wanted.len(), Some(&wanted))?);
        v.extend(unscored.iter().filter_map(|d| vector_best.get(d).map(|h| (*d, f64::from(h.score)))));
    }
    Ok((v, b))
}

/// A document's place in the vector list: its score and best passage.
struct VectorHit {
    score: f32,
    passage: u32,
}

/// Keeps in `best` the best of `hits` (passage vectors) for each document.
fn keep_best(best: &mut HashMap<u64, VectorHit>, hits: &[cairn_embed::Hit]) {
    for h in hits {
        let e = best.entry(doc_of(h.id)).or_insert(VectorHit { score: f32::NEG_INFINITY, passage: 0 });
        if h.score > e.score {
            *e = VectorHit { score: h.score, passage: (h.id & ((1 << PASSAGE_BITS) - 1)) as u32 };
        }
    }
}

/// Semantic or hybrid search (see the module documentation).
pub(crate) fn search(m: &Memory, query: &str, opts: &SearchOptions) -> Result<SearchResults> {
    let sem = m.inner.semantic.get().ok_or_else(no_model)?;
    let want = opts.limit.saturating_add(opts.offset);
    let pool = want.max(100);
    let allowed = allowed_docs(m, &opts.filter)?;
    let embedder = sem.embedder()?;
    let q = embedder.embed_query(query)?;
    let (vector_list, mut vector_best) = {
        let vs = sem.vectors.read();
        let allowed_vectors: Option<HashSet<u64>> = allowed.as_ref().map(|ids| vs.passages_of(ids));
        // Documents have few passages: four per wanted document leave enough distinct ones.
        let hits = vs.index.search(&q, pool.saturating_mul(4), allowed_vectors.as_ref())?;
        let mut best: HashMap<u64, VectorHit> = HashMap::new();
        keep_best(&mut best, &hits);
        let mut list = fusion::max_per_document(best.iter().map(|(d, h)| (*d, f64::from(h.score))));
        list.truncate(pool);
        (list, best)
    };
    let (fused, bm25, warnings): Fused = match opts.ranking {
        crate::Ranking::Semantic => (vector_list.clone(), HashMap::new(), Vec::new()),
        _ => {
            let keyword = SearchOptions {
                limit: pool,
                offset: 0,
                filter: opts.filter.clone(),
                mode: opts.mode,
                snippets: false,
                ranking: crate::Ranking::Keyword,
                fusion: opts.fusion,
            };
            let r = m.search_unguarded(query, &keyword)?;
            let list: Vec<(u64, f64)> = r.hits.iter().map(|h| (h.doc.id, f64::from(h.score))).collect();
            let mut scores: HashMap<u64, f32> = r.hits.iter().map(|h| (h.doc.id, h.score)).collect();
            let fused = match opts.fusion {
                Fusion::Rrf { k } => {
                    let a: Vec<u64> = list.iter().map(|x| x.0).collect();
                    let b: Vec<u64> = vector_list.iter().map(|x| x.0).collect();
                    fusion::reciprocal_rank_fusion(&[&a, &b], k)
                }
                Fusion::Convex { weight } => fusion::convex_combination(&vector_list, &list, weight),
                Fusion::Scaled { weight } => scaled_combination(&vector_list, &list, weight),
                Fusion::Complete { weight } => {
                    let (v, b) = complete(m, sem, &q, query, opts, &vector_list, &list, &mut vector_best, &mut scores)?;
                    fusion::convex_combination(&v, &b, weight)
                }
            };
            (fused, scores, r.warnings)
        }
    };
    let total = fused.len();
    let mut hits = Vec::new();
    let snippets = if opts.snippets { Some(Snippets::new(m, query, opts)?) } else { None };
    for (id, score) in fused.into_iter().skip(opts.offset).take(opts.limit) {
        // A document removed since it was embedded is skipped.
        let Some(doc) = m.doc_by_id(id)? else { continue };
        let best = vector_best.get(&id);
        let snippet = match &snippets {
            Some(s) => s.cut(m, &doc, best.map(|b| b.passage))?,
            None => None,
        };
        hits.push(SearchHit {
            score: score as f32,
            bm25: bm25.get(&id).copied(),
            vector: best.map(|b| b.score),
            doc,
            snippet,
        });
    }
    Ok(SearchResults { total, hits, warnings })
}

/// Snippets of semantic hits: the query's words highlighted in the best passage, or the
/// passage's start when none of them is in it.
struct Snippets {
    generator: Option<tantivy::snippet::SnippetGenerator>,
}

/// Bytes of a passage shown when no query word is in it.
const PLAIN_SNIPPET: usize = 200;

impl Snippets {
    fn new(m: &Memory, query: &str, opts: &SearchOptions) -> Result<Snippets> {
        let idx = &m.inner.index;
        let generator = match idx.parse(query, opts.mode) {
            Ok((q, _)) => Some(idx.snippets(&idx.view()?, q.as_ref())?),
            Err(_) => None,
        };
        Ok(Snippets { generator })
    }

    fn cut(&self, m: &Memory, doc: &DocRecord, passage: Option<u32>) -> Result<Option<Snippet>> {
        let Some(text) = document_text(m, doc)? else { return Ok(None) };
        let range = match passage {
            Some(p) => match m.inner.rows.get(vector_key(doc.id, p))? {
                Some(v) => match decode_vector(&vector_key(doc.id, p), &v) {
                    Ok(row) if row.version == doc.version && text.get(row.range.clone()).is_some() => row.range,
                    _ => 0..text.len(),
                },
                None => 0..text.len(),
            },
            None => 0..text.len(),
        };
        let part = &text[range];
        if let Some(g) = &self.generator {
            let s = g.snippet(part);
            if !s.fragment().is_empty() {
                return Ok(Some(Snippet { text: s.fragment().to_string(), highlights: s.highlighted().to_vec() }));
            }
        }
        if passage.is_none() {
            return Ok(None);
        }
        let mut end = part.len().min(PLAIN_SNIPPET);
        while !part.is_char_boundary(end) {
            end -= 1;
        }
        if end < part.len()
            && let Some(space) = part[..end].rfind(char::is_whitespace)
        {
            end = space;
        }
        let text = part[..end].trim().to_string();
        Ok((!text.is_empty()).then_some(Snippet { text, highlights: Vec::new() }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_rows_round_trip_and_reject_garbage() {
        let v = QuantizedVector::quantize(&[0.5, -0.25, 0.125]).unwrap();
        let key = vector_key(7, 3);
        let row = decode_vector(&key, &encode_vector(2, &(10..20), &v)).unwrap();
        assert_eq!((row.doc, row.passage, row.version, row.range.clone()), (7, 3, 2, 10..20));
        assert_eq!(row.vector, v);
        let mut bad = encode_vector(2, &(10..20), &v);
        bad[VECTOR_HEADER + 5] ^= 1;
        assert!(decode_vector(&key, &bad).is_err());
        assert!(decode_vector(&key, &[VECTOR_FORMAT]).is_err());
        assert!(decode_vector(b"x/short", &encode_vector(2, &(10..20), &v)).is_err());
        assert!(decode_vector(&key, &encode_vector(2, &std::ops::Range { start: 20, end: 10 }, &v)).is_err());
    }

    #[test]
    fn vector_ids_pack_document_and_passage() {
        let id = vector_id(12345, 77).unwrap();
        assert_eq!(doc_of(id), 12345);
        assert_eq!(id & ((1 << PASSAGE_BITS) - 1), 77);
        assert!(vector_id(1 << 44, 0).is_none());
        assert!(vector_id(1, MAX_PASSAGES).is_none());
    }
}
