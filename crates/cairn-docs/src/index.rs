//! The full-text index: a tantivy index with one entry per document (its current content),
//! keyed by the document id. It holds no stored fields: snippets are cut from the content in the
//! blob store. Its commits lag the engine; the `docs/q/` queue rows say which entries to redo
//! after a crash (see `Memory::open`).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use tantivy::collector::{Count, FilterCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::snippet::SnippetGenerator;
use tantivy::{DocAddress, Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::tokenizer::{ANALYZER, analyzer};
use crate::{Error, Result};

#[derive(Clone, Copy)]
pub(crate) struct Fields {
    pub id: Field,
    pub title: Field,
    pub body: Field,
    pub path: Field,
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
    (b.build(), Fields { id, title, body, path })
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

pub(crate) struct SearchIndex {
    index: Index,
    pub f: Fields,
    writer: Mutex<IndexWriter>,
    reader: IndexReader,
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
        index.tokenizers().register(ANALYZER, analyzer());
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4);
        let writer = index.writer_with_num_threads(threads, (threads * 48) << 20)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok((SearchIndex { index, f, writer: Mutex::new(writer), reader }, !existed))
    }

    /// Replaces the entry of `id`: removes it, then adds the new text if any.
    pub fn replace(&self, id: u64, path: &str, text: Option<(Option<&str>, &str)>) -> Result<()> {
        self.writer.lock().delete_term(Term::from_field_u64(self.f.id, id));
        self.insert(id, path, text)
    }

    /// Adds the entry of an `id` the index has never held (no delete to apply).
    pub fn insert(&self, id: u64, path: &str, text: Option<(Option<&str>, &str)>) -> Result<()> {
        if let Some((title, body)) = text {
            let mut d = TantivyDocument::new();
            d.add_u64(self.f.id, id);
            d.add_text(self.f.path, path);
            if let Some(t) = title {
                d.add_text(self.f.title, t);
            }
            d.add_text(self.f.body, body);
            self.writer.lock().add_document(d)?;
        }
        Ok(())
    }

    /// Makes every change so far durable and visible to searches.
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

    pub fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The document id of every entry in the committed index (an id twice means a duplicate).
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

    /// Entries in the committed index.
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

    /// The best `limit` hits after `offset` (score, document id) and the number of matches;
    /// with `allowed`, only those document ids count.
    pub fn top(
        &self,
        searcher: &Searcher,
        query: &dyn Query,
        limit: usize,
        offset: usize,
        allowed: Option<Arc<HashSet<u64>>>,
    ) -> Result<(Vec<(f32, u64)>, usize)> {
        let top = TopDocs::with_limit(limit.max(1)).and_offset(offset);
        let (count, hits): (usize, Vec<(f32, DocAddress)>) = match allowed {
            None => searcher.search(query, &(Count, top))?,
            Some(set) => {
                let pred = move |id: u64| set.contains(&id);
                searcher.search(query, &FilterCollector::new("id".to_string(), pred, (Count, top)))?
            }
        };
        let mut out = Vec::with_capacity(hits.len());
        for (score, addr) in hits.into_iter().take(limit) {
            let col = searcher.segment_reader(addr.segment_ord).fast_fields().u64("id")?;
            if let Some(id) = col.first(addr.doc_id) {
                out.push((score, id));
            }
        }
        Ok((out, count))
    }

    pub fn snippets(&self, searcher: &Searcher, query: &dyn Query) -> Result<SnippetGenerator> {
        let mut g = SnippetGenerator::create(searcher, query, self.f.body)?;
        g.set_max_num_chars(240);
        Ok(g)
    }
}
