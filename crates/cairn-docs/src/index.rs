//! The full-text index: a tantivy index with one entry per document (its current content),
//! keyed by the document id. It holds no stored fields: snippets are cut from the content in the
//! blob store.
//!
//! Requests never wait for a commit of the index on disk
//! ([design](../../../docs/design/2026-12-07-index-layers.md)). A write queues its changes in
//! the *active* layer; the next search (or flush) indexes every queued change as one *part*, a
//! one-segment tantivy index in memory, before it looks, so a change is searchable the moment
//! its write returns and writes never pay for indexing. A flush (a background thread, or
//! [`SearchIndex::flush`]) freezes the active layer, writes its changes to the disk index, commits
//! that, and drops the frozen layer. A search sees the disk index, the frozen layer's parts and
//! the active layer's as of one moment; an entry of an older part or layer is hidden when a newer
//! one changed its document, and BM25
//! statistics are summed over the layers, so scores are those of one index holding it all.
//! Durability comes from the engine: the `docs/q/` queue rows written with each change name the
//! documents whose entries must be redone after a crash (see `Memory::open`); they are deleted
//! once a flush has the entries on disk.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;
use tantivy::collector::{Count, FilterCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::query::Bm25StatisticsProvider;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::snippet::SnippetGenerator;
use tantivy::{
    DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, SegmentReader, SingleSegmentIndexWriter,
    TantivyDocument, Term,
};

use crate::ngram::{Gram, GramQuery};
use crate::tokenizer::{ANALYZER, analyzer, indexing_analyzer};
use crate::{Error, Result};

#[derive(Clone, Copy)]
pub(crate) struct Fields {
    pub id: Field,
    pub title: Field,
    pub body: Field,
    pub path: Field,
    /// The content's trigrams ([`crate::ngram`]): doc ids only, for grep's candidates.
    pub grams: Field,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer(ANALYZER).set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let id = b.add_u64_field("id", INDEXED | FAST);
    let title = b.add_text_field("title", text.clone());
    let body = b.add_text_field("body", text.clone());
    let path = b.add_text_field("path", text);
    let grams = b.add_u64_field("grams", INDEXED);
    (b.build(), Fields { id, title, body, path, grams })
}

/// Runs `f`, turning a panic of the index library (it panics on some damaged files instead
/// of returning an error) into [`Error::IndexDamaged`].
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "the index library failed".into());
            Err(Error::IndexDamaged(why))
        }
    }
}

/// How a query string is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueryMode {
    /// Query syntax: words (any may match, ranked by BM25), `"phrases"`, `AND`/`OR`/`NOT`,
    /// `+must`/`-mustnot`, parentheses and `title:`/`body:`/`path:` fields.
    #[default]
    Syntax,
    /// A bag of words: every analyzed word of the text is one optional BM25 clause on title and
    /// body (as the BEIR/Pyserini baselines score natural-language queries).
    Words,
}

/// One change of the index: the entry of document `id` replaced by this text, or removed.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub id: u64,
    /// (path, title, body); `None` removes the entry.
    pub text: Option<(String, Option<String>, String)>,
    /// The trigrams of the content (with `text` only).
    pub grams: Arc<[Gram]>,
    /// The document's id was new to this write: no index holds an entry of it to remove.
    pub fresh: bool,
}

impl Change {
    /// The entry of `id` becomes `text` with the content's `grams` (none: no entry).
    pub fn new(id: u64, path: &str, text: Option<(Option<&str>, &str)>, grams: Vec<Gram>) -> Change {
        let text = text.map(|(t, b)| (path.to_string(), t.map(str::to_string), b.to_string()));
        let grams = if text.is_some() {
            crate::ngram::entry_grams(grams, crate::ngram::MAX_GRAMS).into()
        } else {
            Arc::from([])
        };
        Change { id, text, grams, fresh: false }
    }

    /// This change, of a document whose id the write just allocated: writing it to the disk
    /// index removes nothing (a removal costs a query in the index writer's queue, and a
    /// lookup in every segment at the commit).
    pub fn fresh(self) -> Change {
        Change { fresh: true, ..self }
    }

    /// The entry of `id` removed.
    pub fn remove(id: u64) -> Change {
        Change::new(id, "", None, Vec::new())
    }

    /// About what the change holds in memory until a flush has it on disk: its text, and
    /// 20 bytes per trigram (4 in the change, about 16 as a value of the document a flush
    /// gives the index writer).
    fn bytes(&self) -> usize {
        64 + 20 * self.grams.len()
            + self.text.as_ref().map_or(0, |(p, t, b)| p.len() + t.as_ref().map_or(0, String::len) + b.len())
    }
}

/// One write's changes, indexed in memory: a one-segment tantivy index built for them alone
/// (much cheaper than a commit of a shared in-memory writer, which makes a segment with a large
/// fresh arena each time; see the design record).
struct Part {
    /// None when the write only removed entries.
    searcher: Option<Searcher>,
    /// Documents whose entries this part changed (hidden in older parts and layers).
    touched: Arc<HashSet<u64>>,
}

/// The in-memory layer changes go to first: changes not indexed yet, and the parts that index
/// the earlier ones.
#[derive(Default)]
struct Active {
    parts: Vec<Arc<Part>>,
    /// Every document the parts changed (hidden in the frozen layer and on disk).
    touched: Arc<HashSet<u64>>,
    /// Changes applied since the last part, in order: the next search or flush indexes them
    /// as one part before it looks (a write only queues them here).
    pending: Vec<Change>,
    /// The documents `pending` changes.
    pending_touched: HashSet<u64>,
    /// The changes, in order, to write to the disk index.
    changes: Vec<Change>,
    /// Their size, and when the first came.
    bytes: usize,
    since: Option<Instant>,
    /// Queue rows to delete once the changes are on disk.
    seqs: Vec<u64>,
}

impl Active {
    /// Adds `part`, which indexes the first `indexed` pending changes.
    fn push_part(&mut self, part: Part, indexed: usize) {
        Arc::make_mut(&mut self.touched).extend(part.touched.iter().copied());
        self.parts.push(Arc::new(part));
        self.pending.drain(..indexed);
        self.pending_touched = self.pending.iter().map(|c| c.id).collect();
    }
}

/// A layer being written to disk: searched until the disk index has it.
struct Frozen {
    parts: Vec<Arc<Part>>,
    touched: Arc<HashSet<u64>>,
    changes: Vec<Change>,
    seqs: Vec<u64>,
}

#[derive(Default)]
struct Layers {
    active: Option<Active>,
    frozen: Option<Arc<Frozen>>,
}

/// The layers a search sees, taken at one moment: the disk index, then the frozen layer's
/// parts, then the active layer's, oldest first.
pub(crate) struct View {
    disk: Searcher,
    /// The frozen parts, then the active ones.
    parts: Vec<Arc<Part>>,
    /// How many of `parts` are frozen.
    frozen: usize,
    /// The documents the frozen and the active layer changed.
    frozen_touched: Arc<HashSet<u64>>,
    active_touched: Arc<HashSet<u64>>,
}

impl View {
    /// The searchers of the disk index and of each part (none for a part that only removed
    /// entries), oldest first: the positions [`View::newer`] takes.
    fn searchers(&self) -> impl Iterator<Item = Option<&Searcher>> {
        std::iter::once(Some(&self.disk)).chain(self.parts.iter().map(|p| p.searcher.as_ref()))
    }

    /// The sets of documents whose entries in searcher `i` (0: the disk, then part `i - 1`)
    /// a newer part or layer replaced.
    fn newer(&self, i: usize) -> Vec<Arc<HashSet<u64>>> {
        let sets: Vec<Arc<HashSet<u64>>> = if i == 0 {
            vec![self.frozen_touched.clone(), self.active_touched.clone()]
        } else if i <= self.frozen {
            let mut v: Vec<_> = self.parts[i..self.frozen].iter().map(|p| p.touched.clone()).collect();
            v.push(self.active_touched.clone());
            v
        } else {
            self.parts[i..].iter().map(|p| p.touched.clone()).collect()
        };
        sets.into_iter().filter(|t| !t.is_empty()).collect()
    }
}

/// BM25 statistics summed over a view's layers: what the index would count had every write been
/// its own commit. As in one index, an entry a newer part or layer replaced still counts (a
/// deleted entry counts until a merge), except where every entry of a segment or part is
/// replaced: tantivy drops a segment with no live entry at the commit that empties it, so such a
/// segment counts for nothing. Each figure is summed once per search and remembered: tantivy
/// asks for them again for every searcher, and a view may have several parts.
struct Summed<'a> {
    /// The segments that count.
    segments: Vec<&'a SegmentReader>,
    docs: OnceLock<u64>,
    tokens: Mutex<HashMap<Field, u64>>,
    freqs: Mutex<HashMap<Term, u64>>,
}

impl<'a> Summed<'a> {
    fn new(view: &'a View) -> Result<Summed<'a>> {
        let mut segments = Vec::new();
        for (i, searcher) in view.searchers().enumerate() {
            let Some(searcher) = searcher else { continue };
            let newer = view.newer(i);
            let replaced: usize = newer.iter().map(|t| t.len()).sum();
            for seg in searcher.segment_readers() {
                let live = seg.num_docs() as usize;
                // Only a segment with no more live entries than the newer layers changed can
                // have all of them replaced.
                let counts = live > replaced || {
                    let ids = seg.fast_fields().u64("id")?;
                    seg.doc_ids_alive().any(|d| ids.first(d).is_none_or(|id| !newer.iter().any(|t| t.contains(&id))))
                };
                if counts {
                    segments.push(seg);
                }
            }
        }
        Ok(Summed { segments, docs: OnceLock::new(), tokens: Mutex::default(), freqs: Mutex::default() })
    }
}

impl Bm25StatisticsProvider for Summed<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if let Some(n) = self.tokens.lock().get(&field) {
            return Ok(*n);
        }
        let mut n = 0;
        for seg in &self.segments {
            n += seg.inverted_index(field)?.total_num_tokens();
        }
        self.tokens.lock().insert(field, n);
        Ok(n)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        Ok(*self.docs.get_or_init(|| self.segments.iter().map(|s| u64::from(s.max_doc())).sum()))
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        if let Some(n) = self.freqs.lock().get(term) {
            return Ok(*n);
        }
        let mut n = 0;
        for seg in &self.segments {
            n += u64::from(seg.inverted_index(term.field())?.doc_freq(term)?);
        }
        self.freqs.lock().insert(term.clone(), n);
        Ok(n)
    }
}

pub(crate) struct SearchIndex {
    index: Index,
    pub f: Fields,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
    layers: Mutex<Layers>,
    /// Held by a flush from freezing to dropping the frozen layer: one at a time.
    flushing: Mutex<()>,
    /// Held while pending changes become a part (and by a flush while it freezes the active
    /// layer): parts are made one at a time, in write order.
    sealing: Mutex<()>,
    /// Changes applied so far (counted under the layer lock), and how many of them parts index:
    /// a search waits only for the changes applied before it started, not for later ones.
    applied: AtomicU64,
    sealed: AtomicU64,
}

/// Changes in the active layer beyond which a flush is due whatever its age.
pub(crate) const FLUSH_BYTES: usize = 16 << 20;
/// The age of the oldest change in the active layer at which a flush is due.
pub(crate) const FLUSH_AGE: std::time::Duration = std::time::Duration::from_millis(1000);
/// Parts in the active layer at which a flush is due (each search visits every part).
pub(crate) const FLUSH_PARTS: usize = 8;
/// The memory budget a part's writer starts from.
const PART_BUDGET: usize = 1 << 20;

/// Writes change `c` through `w`: the document's old entry removed, its new one (if any) added.
/// `again`: the change may be on disk already (a flush that failed after its commit is
/// redone), so even a fresh document's entry is removed first.
fn put(w: &IndexWriter, f: &Fields, c: &Change, again: bool) -> Result<()> {
    if again || !c.fresh {
        w.delete_term(Term::from_field_u64(f.id, c.id));
    }
    if let Some(d) = entry(f, c) {
        w.add_document(d)?;
    }
    Ok(())
}

fn entry(f: &Fields, c: &Change) -> Option<TantivyDocument> {
    let (path, title, body) = c.text.as_ref()?;
    let mut d = TantivyDocument::new();
    d.add_u64(f.id, c.id);
    d.add_text(f.path, path);
    if let Some(t) = title {
        d.add_text(f.title, t);
    }
    d.add_text(f.body, body);
    for &g in c.grams.iter() {
        d.add_u64(f.grams, u64::from(g));
    }
    Some(d)
}

impl SearchIndex {
    /// Opens the index in `dir`, creating it if absent; also says whether it was created, and
    /// why it was made anew when it existed but could not be opened (the index is derived:
    /// the caller rebuilds it from the documents).
    pub fn open_or_rebuild(dir: &Path) -> Result<(SearchIndex, bool, Option<String>)> {
        match guarded(|| SearchIndex::open(dir)) {
            Ok((ix, created)) => Ok((ix, created, None)),
            Err(Error::Io { path, source }) => Err(Error::Io { path, source }),
            Err(e) => {
                std::fs::remove_dir_all(dir).map_err(|er| Error::io(dir, er))?;
                let (ix, _) = SearchIndex::open(dir)?;
                Ok((ix, true, Some(e.to_string())))
            }
        }
    }

    /// Opens the index in `dir`, creating it if absent; also says whether it was created.
    pub fn open(dir: &Path) -> Result<(SearchIndex, bool)> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let mmap = MmapDirectory::open(dir).map_err(|e| Error::Index(e.into()))?;
        let existed = Index::exists(&mmap).map_err(|e| Error::Index(e.into()))?;
        let (schema, f) = schema();
        let index = Index::open_or_create(mmap, schema)?;
        index.tokenizers().register(ANALYZER, indexing_analyzer());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
        let writer = index.writer_with_num_threads(threads, (threads * 48) << 20)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let ix = SearchIndex {
            index,
            f,
            writer: Mutex::new(writer),
            reader,
            layers: Mutex::default(),
            flushing: Mutex::new(()),
            sealing: Mutex::new(()),
            applied: AtomicU64::new(0),
            sealed: AtomicU64::new(0),
        };
        Ok((ix, !existed))
    }

    /// Indexes `changes` (in order: the last change of a document wins) as one part.
    fn part(&self, changes: &[Change]) -> Result<Part> {
        let mut touched = HashSet::with_capacity(changes.len());
        let mut entries = Vec::new();
        for c in changes.iter().rev() {
            if touched.insert(c.id) {
                entries.extend(entry(&self.f, c));
            }
        }
        let searcher = if entries.is_empty() {
            None
        } else {
            let index = Index::create_in_ram(self.index.schema());
            index.tokenizers().register(ANALYZER, analyzer());
            // The budget only sizes the first hash table; it grows with the part.
            let mut w: SingleSegmentIndexWriter = SingleSegmentIndexWriter::new(index, PART_BUDGET)?;
            for d in entries.into_iter().rev() {
                w.add_document(d)?;
            }
            let index = w.finalize()?;
            let reader: IndexReader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
            Some(reader.searcher())
        };
        Ok(Part { searcher, touched: Arc::new(touched) })
    }

    /// Applies `changes` to the active layer: every search that starts after this returns sees
    /// them (it indexes pending changes first); `seqs` are the queue rows naming them, deleted by
    /// the flush that puts them on disk. Cheap: a write does not index (a part costs a fixed
    /// millisecond or so, which a search or a flush pays once for all the writes before it).
    pub fn apply(&self, changes: Vec<Change>, seqs: Vec<u64>) -> Result<()> {
        if changes.is_empty() && seqs.is_empty() {
            return Ok(());
        }
        let mut l = self.layers.lock();
        let a = l.active.get_or_insert_with(Active::default);
        a.bytes += changes.iter().map(Change::bytes).sum::<usize>();
        a.pending_touched.extend(changes.iter().map(|c| c.id));
        a.pending.extend(changes.iter().cloned());
        self.applied.fetch_add(changes.len() as u64, Ordering::SeqCst);
        a.changes.extend(changes);
        a.seqs.extend(seqs);
        a.since.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Indexes the pending changes as one part (the caller holds `sealing`). Built outside the
    /// layer lock: writes, and searches of parts already made, go on meanwhile.
    fn seal_locked(&self) -> Result<()> {
        let (batch, upto) = {
            let l = self.layers.lock();
            match l.active.as_ref() {
                Some(a) if !a.pending.is_empty() => (a.pending.clone(), self.applied.load(Ordering::SeqCst)),
                _ => return Ok(()),
            }
        };
        let part = self.part(&batch)?;
        let mut l = self.layers.lock();
        // Only a flush, which holds `sealing` too, replaces the active layer.
        let a = l.active.as_mut().ok_or_else(|| Error::InvalidArgument("the active layer went away".into()))?;
        a.push_part(part, batch.len());
        self.sealed.fetch_max(upto, Ordering::SeqCst);
        Ok(())
    }

    /// Whether one of `changes` replaces an entry of the active layer. Such a change is applied
    /// after a flush: a flush writes the active layer in one commit, where an entry replaced in
    /// the same commit no longer counts in BM25 statistics, whereas in memory and in
    /// separate commits it counts until a merge. Flushing first keeps scores the same before
    /// and after the flush, and the same as those of one commit per write.
    pub fn replaces_active(&self, changes: &[Change]) -> bool {
        let l = self.layers.lock();
        l.active
            .as_ref()
            .is_some_and(|a| changes.iter().any(|c| a.touched.contains(&c.id) || a.pending_touched.contains(&c.id)))
    }

    /// Whether the active layer has grown well past the flush size (the flusher is behind).
    pub fn flush_overdue(&self) -> bool {
        self.layers
            .lock()
            .active
            .as_ref()
            .is_some_and(|a| a.bytes >= 4 * FLUSH_BYTES || a.parts.len() >= 4 * FLUSH_PARTS)
    }

    /// Whether the active layer is due to be flushed (by size, parts or age).
    pub fn flush_due(&self) -> bool {
        let l = self.layers.lock();
        l.active.as_ref().is_some_and(|a| {
            a.bytes >= FLUSH_BYTES || a.parts.len() >= FLUSH_PARTS || a.since.is_some_and(|t| t.elapsed() >= FLUSH_AGE)
        })
    }

    /// Writes every change of the layers to the disk index and commits it; returns the queue
    /// rows the layers named, now to be deleted. A failed flush leaves the frozen layer to be
    /// searched and written again by the next one (writing a change twice is harmless).
    pub fn flush(&self) -> Result<Vec<u64>> {
        let _one = self.flushing.lock();
        let (frozen, again) = {
            // The frozen layer is searched until the disk has it: it must index every change.
            // Most pending changes become a part outside the layer lock; those a write adds
            // meanwhile are indexed under it, so nothing is frozen unindexed.
            let _sealing = self.sealing.lock();
            self.seal_locked()?;
            let mut l = self.layers.lock();
            if let Some(f) = l.frozen.clone() {
                // An earlier flush failed: write that layer first.
                (f, true)
            } else if let Some(mut a) = l.active.take() {
                if !a.pending.is_empty() {
                    match self.part(&a.pending) {
                        Ok(part) => a.push_part(part, a.pending.len()),
                        Err(e) => {
                            l.active = Some(a);
                            return Err(e);
                        }
                    }
                }
                self.sealed.fetch_max(self.applied.load(Ordering::SeqCst), Ordering::SeqCst);
                let f = Arc::new(Frozen { parts: a.parts, touched: a.touched, changes: a.changes, seqs: a.seqs });
                l.frozen = Some(f.clone());
                (f, false)
            } else {
                return Ok(Vec::new());
            }
        };
        {
            let mut w = self.writer.lock();
            let wrote = (|| {
                for c in &frozen.changes {
                    put(&w, &self.f, c, again)?;
                }
                w.commit()?;
                Ok::<_, Error>(())
            })();
            if let Err(e) = wrote {
                let _ = w.rollback();
                return Err(e);
            }
        }
        // At one moment (views are taken under the same lock): the disk reader sees the changes
        // and the frozen layer stops being searched.
        let mut l = self.layers.lock();
        self.reader.reload()?;
        l.frozen = None;
        drop(l);
        Ok(frozen.seqs.clone())
    }

    /// The layers to search, as of now: every change applied before this call, indexed.
    pub fn view(&self) -> Result<View> {
        // The changes this search must see; later ones (concurrent writes) may wait for the
        // next search, so searches queued behind one part's making share it.
        let target = self.applied.load(Ordering::SeqCst);
        if self.sealed.load(Ordering::SeqCst) < target {
            let _sealing = self.sealing.lock();
            if self.sealed.load(Ordering::SeqCst) < target {
                self.seal_locked()?;
            }
        }
        let l = self.layers.lock();
        let mut parts = Vec::new();
        let mut frozen_touched = Arc::default();
        let mut active_touched = Arc::default();
        if let Some(f) = &l.frozen {
            parts.extend(f.parts.iter().cloned());
            frozen_touched = f.touched.clone();
        }
        let frozen = parts.len();
        if let Some(a) = &l.active {
            parts.extend(a.parts.iter().cloned());
            active_touched = a.touched.clone();
        }
        Ok(View { disk: self.reader.searcher(), parts, frozen, frozen_touched, active_touched })
    }

    /// Writes `c` to the disk index directly (bulk work: the layers must be flushed first,
    /// and [`SearchIndex::commit`] called after).
    pub fn write_direct(&self, c: &Change) -> Result<()> {
        put(&self.writer.lock(), &self.f, c, true)
    }

    /// [`SearchIndex::write_direct`] of the entry of `id` becoming `text` with `grams` (none:
    /// no entry).
    pub fn replace(&self, id: u64, path: &str, text: Option<(Option<&str>, &str)>, grams: Vec<Gram>) -> Result<()> {
        self.write_direct(&Change::new(id, path, text, grams))
    }

    /// Makes the changes written to the disk index directly durable and visible to searches.
    pub fn commit(&self) -> Result<()> {
        self.writer.lock().commit()?;
        self.reader.reload()?;
        Ok(())
    }

    /// Removes every entry (the caller re-adds them).
    pub fn clear(&self) -> Result<()> {
        self.writer.lock().delete_all_documents()?;
        Ok(())
    }

    /// The document id of every entry in the disk index (an id twice means a duplicate); flush
    /// first to see every change.
    pub fn ids(&self) -> Result<Vec<u64>> {
        let searcher = self.reader.searcher();
        let mut out = Vec::new();
        for seg in searcher.segment_readers() {
            let col = seg.fast_fields().u64("id")?;
            for doc in seg.doc_ids_alive() {
                if let Some(id) = col.first(doc) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }

    /// Bytes of the disk index, and of its n-gram field (term dictionary, postings and norms).
    pub fn space(&self) -> Result<(u64, u64)> {
        let usage = self.reader.searcher().space_usage().map_err(|e| Error::Index(e.into()))?;
        let mut grams = 0;
        for seg in usage.segments() {
            for per_field in [seg.termdict(), seg.postings(), seg.fieldnorms()] {
                grams += per_field
                    .fields()
                    .filter(|(f, _)| **f == self.f.grams)
                    .map(|(_, u)| u.total().get_bytes())
                    .sum::<u64>();
            }
        }
        Ok((usage.total().get_bytes(), grams))
    }

    /// Entries in the disk index (flush first to count every change).
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    /// Parses `text`; in syntax mode, parts that do not parse are searched as words and reported.
    pub fn parse(&self, text: &str, mode: QueryMode) -> Result<(Box<dyn Query>, Vec<String>)> {
        match mode {
            QueryMode::Syntax => {
                let parser = QueryParser::for_index(&self.index, vec![self.f.title, self.f.body, self.f.path]);
                let (q, errors) = parser.parse_query_lenient(text);
                Ok((q, errors.into_iter().map(|e| e.to_string()).collect()))
            }
            QueryMode::Words => {
                let mut a = analyzer();
                let mut ts = a.token_stream(text);
                let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
                ts.process(&mut |t| {
                    for field in [self.f.title, self.f.body] {
                        let term = Term::from_field_text(field, &t.text);
                        clauses.push((Occur::Should, Box::new(TermQuery::new(term, IndexRecordOption::WithFreqs))));
                    }
                });
                Ok((Box::new(BooleanQuery::new(clauses)), Vec::new()))
            }
        }
    }

    /// The best `limit` hits after `offset` (score, document id) over the layers of `view`, and
    /// the number of matches; with `allowed`, only those document ids count.
    pub fn top(
        &self,
        view: &View,
        query: &dyn Query,
        limit: usize,
        offset: usize,
        allowed: Option<Arc<HashSet<u64>>>,
    ) -> Result<(Vec<(f32, u64)>, usize)> {
        let stats = Summed::new(view)?;
        let want = (offset + limit).max(1);
        let mut all: Vec<(f32, u64)> = Vec::new();
        let mut total = 0usize;
        for (i, searcher) in view.searchers().enumerate() {
            let Some(searcher) = searcher else { continue };
            // Entries of documents a newer part or layer changed are that one's to show.
            let newer = view.newer(i);
            let allowed = allowed.clone();
            let top = TopDocs::with_limit(want);
            let (count, hits): (usize, Vec<(f32, DocAddress)>) = if newer.is_empty() && allowed.is_none() {
                searcher.search_with_statistics_provider(query, &(Count, top), &stats)?
            } else {
                let pred = move |id: u64| {
                    allowed.as_ref().is_none_or(|a| a.contains(&id)) && !newer.iter().any(|t| t.contains(&id))
                };
                let c = FilterCollector::new("id".to_string(), pred, (Count, top));
                searcher.search_with_statistics_provider(query, &c, &stats)?
            };
            total += count;
            for (score, addr) in hits {
                let col = searcher.segment_reader(addr.segment_ord).fast_fields().u64("id")?;
                if let Some(id) = col.first(addr.doc_id) {
                    all.push((score, id));
                }
            }
        }
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        Ok((all.into_iter().skip(offset).take(limit).collect(), total))
    }

    /// The ids of the entries of `view` whose trigrams satisfy `q` (an entry a newer layer
    /// replaced is that layer's to answer for), and the number of live entries in `view`.
    pub fn gram_candidates(&self, view: &View, q: &GramQuery) -> Result<(HashSet<u64>, u64)> {
        // An entry with too many trigrams to list is a candidate whatever the query.
        let saturated = GramQuery::Gram(crate::ngram::SATURATED);
        let query: Box<dyn Query> = Box::new(BooleanQuery::new(vec![
            (Occur::Should, self.gram_query(q)),
            (Occur::Should, self.gram_query(&saturated)),
        ]));
        let mut ids = HashSet::new();
        let mut live = 0u64;
        for (i, searcher) in view.searchers().enumerate() {
            let Some(searcher) = searcher else { continue };
            let newer = view.newer(i);
            let hidden = |id: u64| newer.iter().any(|t| t.contains(&id));
            let weight = query.weight(tantivy::query::EnableScoring::disabled_from_searcher(searcher))?;
            for seg in searcher.segment_readers() {
                let col = seg.fast_fields().u64("id")?;
                if newer.is_empty() {
                    live += u64::from(seg.num_docs());
                } else {
                    live += seg.doc_ids_alive().filter(|&d| col.first(d).is_some_and(|id| !hidden(id))).count() as u64;
                }
                let alive = seg.alive_bitset();
                weight.for_each_no_score(seg, &mut |docs| {
                    for &d in docs {
                        if alive.is_none_or(|a| a.is_alive(d))
                            && let Some(id) = col.first(d)
                            && !hidden(id)
                        {
                            ids.insert(id);
                        }
                    }
                })?;
            }
        }
        Ok((ids, live))
    }

    fn gram_query(&self, q: &GramQuery) -> Box<dyn Query> {
        match q {
            GramQuery::All => Box::new(tantivy::query::AllQuery),
            GramQuery::None => Box::new(tantivy::query::EmptyQuery),
            GramQuery::Gram(g) => {
                Box::new(TermQuery::new(Term::from_field_u64(self.f.grams, u64::from(*g)), IndexRecordOption::Basic))
            }
            GramQuery::And(qs) => {
                Box::new(BooleanQuery::new(qs.iter().map(|q| (Occur::Must, self.gram_query(q))).collect()))
            }
            GramQuery::Or(qs) => {
                Box::new(BooleanQuery::new(qs.iter().map(|q| (Occur::Should, self.gram_query(q))).collect()))
            }
        }
    }

    /// A snippet generator for `query` whose term weights count every layer of `view` (a term
    /// only in memory still highlights).
    pub fn snippets(&self, view: &View, query: &dyn Query) -> Result<SnippetGenerator> {
        let mut terms: std::collections::BTreeSet<Term> = std::collections::BTreeSet::new();
        query.query_terms(&mut |term, _| {
            if term.field() == self.f.body {
                terms.insert(term.clone());
            }
        });
        let stats = Summed::new(view)?;
        let mut weights = std::collections::BTreeMap::new();
        for term in terms {
            let Some(text) = term.value().as_str().map(str::to_string) else { continue };
            let df = stats.doc_freq(&term)?;
            if df > 0 {
                weights.insert(text, 1.0 / (1.0 + df as f32));
            }
        }
        Ok(SnippetGenerator::new(weights, analyzer(), self.f.body, 240))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: u64, body: &str) -> Change {
        Change::new(id, &format!("d{id}"), Some((None, body)), crate::ngram::grams(body.as_bytes()))
    }

    fn sorted_ids(ix: &SearchIndex) -> Vec<u64> {
        let mut v = ix.ids().unwrap();
        v.sort_unstable();
        v
    }

    /// A fresh document's entry is added without a removal, yet a flush redone after its
    /// commit (the frozen layer written again) leaves one entry per document.
    #[test]
    fn fresh_entries_are_written_once_even_when_a_flush_is_redone() {
        let dir = tempfile::tempdir().unwrap();
        let (ix, _) = SearchIndex::open(dir.path()).unwrap();
        ix.apply(vec![change(1, "alpha beta").fresh(), change(2, "gamma delta").fresh()], vec![]).unwrap();
        ix.flush().unwrap();
        assert_eq!(sorted_ids(&ix), [1, 2]);
        // As if the flush had failed between its commit and dropping its frozen layer.
        let frozen = Frozen {
            parts: Vec::new(),
            touched: Arc::new([1, 2].into_iter().collect()),
            changes: vec![change(1, "alpha beta").fresh(), change(2, "gamma delta").fresh()],
            seqs: Vec::new(),
        };
        ix.layers.lock().frozen = Some(Arc::new(frozen));
        ix.flush().unwrap();
        assert_eq!(sorted_ids(&ix), [1, 2], "a redone flush duplicated entries");
        // A change that is not fresh replaces the entry.
        ix.apply(vec![change(2, "epsilon")], vec![]).unwrap();
        ix.flush().unwrap();
        assert_eq!(sorted_ids(&ix), [1, 2]);
    }
}
