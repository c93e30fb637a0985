//! Semantic and hybrid search with a tiny random model built in the test: background embedding,
//! recovery of the queue after a crash, versions and removals, filters, verify and repair.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_docs::{Filter, Fusion, Memory, ModelSpec, QueryMode, Ranking, SearchOptions};
use cairn_embed::Embedder;
use cairn_kv::keyspace::{CAS, DOCS};

/// Writes the tiny model (mean pooling, no query instruction, so a query equal to a passage's
/// text gets that passage's vector) into `dir/model`.
fn tiny_model(dir: &Path) -> PathBuf {
    let model = dir.join("model");
    std::fs::create_dir_all(&model).unwrap();
    cairn_embed::test_model::write(&model, "mean");
    let manifest = model.join(cairn_embed::MANIFEST_FILE);
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("query_instruction");
    std::fs::write(&manifest, serde_json::to_vec(&m).unwrap()).unwrap();
    model
}

fn spec(model: &Path) -> ModelSpec {
    ModelSpec::of(&Embedder::load(model).unwrap())
}

/// Opens the memory in `dir` (keeping the engine, for tests that damage rows).
fn open_with_db(dir: &Path) -> (Memory, cairn_kv::Db) {
    let db = cairn_kv::Db::open(dir.join("kv"), cairn_kv::Options::default()).unwrap();
    let fs: std::sync::Arc<dyn cairn_kv::Storage> = std::sync::Arc::new(cairn_kv::FsStorage::new());
    let store = cairn_cas::Store::open(db.keyspace(CAS), fs, dir.join("packs"), Default::default()).unwrap();
    let m = Memory::with_parts(db.keyspace(DOCS), store, dir.join("docs-index")).unwrap();
    (m, db)
}

fn attach(m: &Memory, model: &Path) {
    let dir = model.to_path_buf();
    m.attach_model(spec(model), move || Embedder::load(&dir)).unwrap();
}

fn wait(m: &Memory) {
    assert!(m.wait_for_embeddings(Some(Duration::from_secs(60))).unwrap(), "embedding did not finish");
}

fn opts(ranking: Ranking) -> SearchOptions {
    SearchOptions { ranking, mode: QueryMode::Words, ..Default::default() }
}

fn paths(m: &Memory, q: &str, o: &SearchOptions) -> Vec<String> {
    m.search(q, o).unwrap().hits.into_iter().map(|h| h.doc.path).collect()
}

const TEXTS: [(&str, &str); 4] = [
    ("a.txt", "the cat sat on the mat"),
    ("b.txt", "bees make honey in the park"),
    ("c.txt", "the stock market fell today"),
    ("d.txt", "the dog ran in the park today"),
];

fn add_texts(m: &Memory, tags: &[&str]) {
    for (p, t) in TEXTS {
        crate::add(m, p, t);
    }
    m.tag(&["b.txt".into(), "d.txt".into()], &tags.iter().map(|t| t.to_string()).collect::<Vec<_>>(), &[]).unwrap();
}

#[test]
fn semantic_search_ranks_by_passage_vectors_with_filters() {
    let t = tempfile::tempdir().unwrap();
    let model = tiny_model(t.path());
    let m = crate::open(t.path());
    // Documents added before the model is attached are embedded when it is.
    crate::add(&m, "early.txt", "bees make honey");
    attach(&m, &model);
    add_texts(&m, &["outdoors"]);
    wait(&m);
    let status = m.semantic_status().unwrap().unwrap();
    assert_eq!((status.documents, status.queued), (5, 0));
    assert!(status.loaded && status.error.is_none());

    // A query equal to a document's text finds that document first, at cosine 1.
    for (p, text) in TEXTS {
        let r = m.search(text, &opts(Ranking::Semantic)).unwrap();
        assert_eq!(r.hits[0].doc.path, p, "{text}");
        let v = r.hits[0].vector.unwrap();
        assert!((v - 1.0).abs() < 0.02, "{v}");
        assert!(r.hits[0].bm25.is_none());
        // Every document has a vector, so every one is a hit (no word needs to match).
        assert_eq!(r.total, 5);
    }
    // Filters apply as in BM25 search.
    let tagged = SearchOptions {
        filter: Filter { tags: vec!["outdoors".into()], ..Default::default() },
        ..opts(Ranking::Semantic)
    };
    assert_eq!(sorted(paths(&m, "the cat sat on the mat", &tagged)), ["b.txt", "d.txt"]);
    let glob = SearchOptions {
        filter: Filter { path_glob: Some("[ab]*".into()), ..Default::default() },
        ..opts(Ranking::Semantic)
    };
    assert_eq!(sorted(paths(&m, "the stock market fell today", &glob)), ["a.txt", "b.txt"]);
    let since = m.get("d.txt").unwrap().updated;
    let recent =
        SearchOptions { filter: Filter { since: Some(since), ..Default::default() }, ..opts(Ranking::Semantic) };
    assert!(paths(&m, "bees", &recent).iter().all(|p| m.get(p).unwrap().updated >= since));

    // Hybrid: both scores where both lists have the document; each fusion puts the document
    // that matches the query's words and its meaning first.
    for fusion in [
        Fusion::Rrf { k: 60.0 },
        Fusion::Convex { weight: 0.5 },
        Fusion::Scaled { weight: 0.5 },
        Fusion::Complete { weight: 0.5 },
        Fusion::default(),
    ] {
        let o = SearchOptions { fusion, ..opts(Ranking::Hybrid) };
        let r = m.search("the stock market fell today", &o).unwrap();
        assert_eq!(r.hits[0].doc.path, "c.txt", "{fusion:?}");
        assert!(r.hits[0].bm25.is_some() && r.hits[0].vector.is_some());
        if matches!(fusion, Fusion::Complete { .. }) {
            // Every hit has both scores, the missing one computed (BM25 0 when no word matches).
            assert!(r.hits.len() > 1);
            assert!(r.hits.iter().all(|h| h.bm25.is_some() && h.vector.is_some()), "{fusion:?}");
        }
        let scores: Vec<f32> = r.hits.iter().map(|h| h.score).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
    }
    // Paging: offset skips the first hits of the same ranking.
    let all = paths(&m, "honey", &SearchOptions { limit: 5, ..opts(Ranking::Hybrid) });
    let page = paths(&m, "honey", &SearchOptions { limit: 2, offset: 1, ..opts(Ranking::Hybrid) });
    assert_eq!(page, all[1..3]);
    assert!(m.verify().unwrap().problems.is_empty(), "{:?}", m.verify().unwrap().problems);
    m.close().unwrap();
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[test]
fn snippets_come_from_the_best_passage() {
    let t = tempfile::tempdir().unwrap();
    let model = tiny_model(t.path());
    let m = crate::open(t.path());
    attach(&m, &model);
    // Long enough for several passages of the tiny model (62 tokens each).
    let filler = "the dog ran in the park today. ".repeat(30);
    let text = format!("{filler} bees make honey. {filler}");
    crate::add(&m, "long.txt", &text);
    wait(&m);
    assert!(m.semantic_status().unwrap().unwrap().passages >= 3);
    let r = m.search("bees make honey", &opts(Ranking::Semantic)).unwrap();
    let s = r.hits[0].snippet.as_ref().unwrap();
    assert!(text.contains(s.text.trim()), "{:?}", s.text);
    // The query's words are highlighted where the passage has them.
    for h in &s.highlights {
        assert!(s.text.get(h.clone()).is_some());
    }
}

#[test]
fn paused_embedding_leaves_bm25_and_a_crash_is_caught_up_at_open() {
    let t = tempfile::tempdir().unwrap();
    let model = tiny_model(t.path());
    {
        let m = crate::open(t.path());
        attach(&m, &model);
        wait(&m);
        m.pause_embedding(true);
        // Adds do not wait for the model: with embedding paused they return at once, queued.
        add_texts(&m, &[]);
        let s = m.semantic_status().unwrap().unwrap();
        assert_eq!((s.documents, s.queued), (0, 4));
        // Not yet embedded: found by BM25 in hybrid search, not by vectors.
        let r = m.search("honey", &opts(Ranking::Hybrid)).unwrap();
        assert_eq!(r.hits.len(), 1);
        assert_eq!(r.hits[0].doc.path, "b.txt");
        assert!(r.hits[0].vector.is_none() && r.hits[0].bm25.is_some());
        assert!(m.search("honey", &opts(Ranking::Semantic)).unwrap().hits.is_empty());
        // verify does not count queued documents as missing.
        assert!(m.verify().unwrap().problems.is_empty());
        // Dropped without close: the process dies before the queue drains.
    }
    let m = crate::open(t.path());
    attach(&m, &model);
    wait(&m);
    assert_eq!(m.semantic_status().unwrap().unwrap().documents, 4);
    assert_eq!(paths(&m, "bees make honey in the park", &opts(Ranking::Semantic))[0], "b.txt");
    assert!(m.verify().unwrap().problems.is_empty());
    m.close().unwrap();

    // Reopened with the same model: nothing is embedded again; the vectors load from rows.
    let m = crate::open(t.path());
    attach(&m, &model);
    let s = m.semantic_status().unwrap().unwrap();
    assert_eq!((s.documents, s.queued), (4, 0));
}

#[test]
fn versions_and_removals_replace_vectors_and_verify_and_repair_them() {
    let t = tempfile::tempdir().unwrap();
    let model = tiny_model(t.path());
    let (m, db) = open_with_db(t.path());
    attach(&m, &model);
    add_texts(&m, &[]);
    wait(&m);
    // A new version replaces the old one's vectors.
    crate::add(&m, "a.txt", "the stock market fell today");
    m.remove(&["c.txt".into()]).unwrap();
    wait(&m);
    let r = m.search("the stock market fell today", &opts(Ranking::Semantic)).unwrap();
    assert_eq!(r.hits[0].doc.path, "a.txt");
    assert_eq!(r.hits[0].doc.version, 2);
    assert!(r.hits.iter().all(|h| h.doc.path != "c.txt"));
    assert_eq!(m.semantic_status().unwrap().unwrap().documents, 3);
    assert!(m.verify().unwrap().problems.is_empty());

    // Damage: drop b's vectors and give a missing document some.
    let rows = db.keyspace(DOCS);
    let b = m.get("b.txt").unwrap().id;
    let prefix = [&b"x/"[..], &b.to_be_bytes()].concat();
    let (k, v) = rows.prefix(&prefix).next().unwrap().unwrap();
    rows.delete(&k).unwrap();
    rows.put([&b"x/"[..], &999u64.to_be_bytes(), &0u32.to_be_bytes()].concat(), &v).unwrap();
    let problems: Vec<String> = m.verify().unwrap().problems.into_iter().map(|p| p.problem).collect();
    assert!(problems.iter().any(|p| p.contains("b.txt has no passage vectors")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("belong to no document")), "{problems:?}");
    // Repair: queue every document again.
    assert!(m.requeue_embeddings().unwrap() >= 4);
    wait(&m);
    assert!(m.verify().unwrap().problems.is_empty(), "{:?}", m.verify().unwrap().problems);
    m.close().unwrap();
}

#[test]
fn another_model_re_embeds_everything_and_semantic_needs_a_model() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    crate::add(&m, "a.txt", "the cat sat on the mat");
    let e = m.search("cat", &opts(Ranking::Semantic)).unwrap_err();
    assert!(e.to_string().contains("no embedding model"), "{e}");
    let model = tiny_model(t.path());
    attach(&m, &model);
    wait(&m);
    m.close().unwrap();

    // A model with other weights: the stored vectors are dropped and every document queued.
    let other = t.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    cairn_embed::test_model::write(&other, "cls");
    let m = crate::open(t.path());
    let s = spec(&other);
    let dir = other.clone();
    m.attach_model(s.clone(), move || Embedder::load(&dir)).unwrap();
    wait(&m);
    let status = m.semantic_status().unwrap().unwrap();
    assert_eq!((status.model, status.documents), (s, 1));
    assert!(m.verify().unwrap().problems.is_empty());
    m.close().unwrap();
}

#[test]
fn a_model_that_does_not_load_is_reported_and_keeps_the_queue() {
    let t = tempfile::tempdir().unwrap();
    let model = tiny_model(t.path());
    let m = crate::open(t.path());
    let s = spec(&model);
    m.attach_model(s, || Err(cairn_embed::Error::InvalidArgument("no such model".into()))).unwrap();
    crate::add(&m, "a.txt", "the cat sat on the mat");
    assert!(m.wait_for_embeddings(Some(Duration::from_secs(30))).is_err());
    let status = m.semantic_status().unwrap().unwrap();
    assert!(status.error.unwrap().contains("no such model"));
    assert_eq!(status.queued, 1);
    // BM25 still answers; close does not hang.
    assert_eq!(paths(&m, "cat", &opts(Ranking::Keyword)), ["a.txt"]);
    m.close().unwrap();
    let m = crate::open(t.path());
    attach(&m, &model);
    wait(&m);
    assert_eq!(m.semantic_status().unwrap().unwrap().documents, 1);
}
