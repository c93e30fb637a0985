use cairn_docs::{AddOptions, Filter, Memory, QueryMode, SearchOptions};

use crate::{add, doc, tagged};

fn paths(m: &Memory, q: &str) -> Vec<String> {
    m.search(q, &SearchOptions::default()).unwrap().hits.into_iter().map(|h| h.doc.path).collect()
}

fn corpus(m: &Memory) {
    m.add(
        vec![
            doc(
                "/src/wal.rs",
                "/// Group commit for the write-ahead log.\nfn append_record(log: &mut Log) { sync_data(); }",
            ),
            doc("/src/cache.rs", "struct BlockCache { budget: usize }\nimpl BlockCache { fn getBlockHandle() {} }"),
            doc(
                "/doc/intro.md",
                "# Introduction\nThe engine writes records to a log and syncs them. Dogs are running.",
            ),
            doc(
                "/doc/page.html",
                "<html><title>Cache tuning</title><body><p>Tune the block cache budget.</p></body></html>",
            ),
            doc("/data/x.json", r#"{"title": "compaction notes", "levels": [1, 2, 3]}"#),
        ],
        &tagged(&["corpus"]),
    )
    .unwrap();
}

#[test]
fn bm25_stemming_and_code_tokens() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    corpus(&m);
    // Stemming: "running dog" finds "Dogs are running".
    assert_eq!(paths(&m, "running dog"), ["/doc/intro.md"]);
    // snake_case: whole and parts.
    assert_eq!(paths(&m, "append_record"), ["/src/wal.rs"]);
    assert_eq!(paths(&m, "record")[..2].iter().filter(|p| p.contains("wal") || p.contains("intro")).count(), 2);
    // camelCase and PascalCase split.
    assert_eq!(paths(&m, "getBlockHandle"), ["/src/cache.rs"]);
    assert_eq!(paths(&m, "handle"), ["/src/cache.rs"]);
    // HTML text and title, JSON values; markup is not indexed.
    assert_eq!(paths(&m, "tuning"), ["/doc/page.html"]);
    assert!(paths(&m, "body:html body:body body:p").is_empty());
    assert_eq!(paths(&m, "compaction"), ["/data/x.json"]);
    // Path components are searchable.
    assert_eq!(paths(&m, "path:wal"), ["/src/wal.rs"]);
    // BM25 ranks the document with more (and rarer) matches first.
    assert_eq!(paths(&m, "block cache budget")[0], "/src/cache.rs");
}

#[test]
fn phrases_and_boolean_queries() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    corpus(&m);
    assert_eq!(paths(&m, "\"group commit\""), ["/src/wal.rs"]);
    assert!(paths(&m, "\"commit group\"").is_empty());
    assert_eq!(paths(&m, "\"append record\""), ["/src/wal.rs"], "phrase over a snake_case word's parts");
    assert_eq!(paths(&m, "log AND engine"), ["/doc/intro.md"]);
    assert_eq!(paths(&m, "log -engine"), ["/src/wal.rs"]);
    assert_eq!(paths(&m, "+cache +tune"), ["/doc/page.html"]);
    let mut both = paths(&m, "(dogs OR compaction)");
    both.sort();
    assert_eq!(both, ["/data/x.json", "/doc/intro.md"]);
    // Malformed syntax is searched leniently and reported, never an error.
    let r = m.search("cache AND (", &SearchOptions::default()).unwrap();
    assert!(!r.hits.is_empty());
    // Words mode ignores syntax.
    let words = SearchOptions { mode: QueryMode::Words, ..Default::default() };
    let r = m.search("log -engine", &words).unwrap();
    assert_eq!(r.hits.len(), 2);
}

#[test]
fn filters_limit_offset_and_snippets() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    corpus(&m);
    m.add(vec![doc("/other/log.txt", "a log about logs and log records")], &AddOptions::default()).unwrap();
    m.set_meta(&[("/src/wal.rs".into(), vec![("lang".into(), Some("rust".into()))])]).unwrap();
    let with = |f: Filter| SearchOptions { filter: f, ..Default::default() };
    let found =
        |o: &SearchOptions| m.search("log", o).unwrap().hits.into_iter().map(|h| h.doc.path).collect::<Vec<_>>();
    assert_eq!(found(&SearchOptions::default()).len(), 3);
    assert_eq!(found(&with(Filter { tags: vec!["corpus".into()], ..Default::default() })).len(), 2);
    assert_eq!(
        found(&with(Filter { meta: vec![("lang".into(), "rust".into())], ..Default::default() })),
        ["/src/wal.rs"]
    );
    assert_eq!(found(&with(Filter { path_glob: Some("/doc/**".into()), ..Default::default() })), ["/doc/intro.md"]);
    let r = m.search("log", &with(Filter { tags: vec!["nope".into()], ..Default::default() })).unwrap();
    assert_eq!((r.total, r.hits.len()), (0, 0));

    let all = m.search("log", &SearchOptions::default()).unwrap();
    assert_eq!(all.total, 3);
    assert!(all.hits.windows(2).all(|w| w[0].score >= w[1].score));
    let page = m.search("log", &SearchOptions { limit: 1, offset: 1, ..Default::default() }).unwrap();
    assert_eq!(page.hits.len(), 1);
    assert_eq!(page.hits[0].doc.path, all.hits[1].doc.path);
    assert_eq!(page.total, 3);

    let s = all.hits[0].snippet.as_ref().expect("snippet");
    assert!(!s.highlights.is_empty());
    for h in &s.highlights {
        assert!(s.text[h.clone()].to_lowercase().starts_with("log"), "{:?}", &s.text[h.clone()]);
    }
}

#[test]
fn new_versions_replace_the_indexed_text_and_removals_vanish() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    add(&m, "n", "apples and pears");
    assert_eq!(paths(&m, "apples"), ["n"]);
    add(&m, "n", "only pears now");
    assert!(paths(&m, "apples").is_empty(), "the old version is not searchable");
    assert_eq!(paths(&m, "pears"), ["n"]);
    m.remove(&["n".into()]).unwrap();
    assert!(paths(&m, "pears").is_empty());
    // A search sees an add made right before it, without an explicit commit.
    add(&m, "z", "zebra");
    assert_eq!(paths(&m, "zebra"), ["z"]);
}

#[test]
fn uncommitted_index_work_is_redone_on_open() {
    let t = tempfile::tempdir().unwrap();
    {
        let m = crate::open(t.path());
        add(&m, "kept", "committed words");
        m.commit().unwrap();
        add(&m, "late", "uncommitted words");
        add(&m, "kept", "replacement text");
        m.tag(&["late".into()], &["x".into()], &[]).unwrap();
        add(&m, "gone", "removed words");
        m.commit().unwrap();
        m.remove(&["gone".into()]).unwrap();
        // Dropped without close: the index never commits the last changes (as after a crash).
    }
    let m = crate::open(t.path());
    assert_eq!(paths(&m, "uncommitted"), ["late"]);
    assert_eq!(paths(&m, "replacement"), ["kept"]);
    assert!(paths(&m, "committed").iter().all(|p| p == "late"), "old text of 'kept' is gone");
    assert!(paths(&m, "removed").is_empty());
    assert_eq!(m.stats().unwrap().indexed, 2);
}

#[test]
fn a_lost_index_is_rebuilt_on_open() {
    let t = tempfile::tempdir().unwrap();
    {
        let m = crate::open(t.path());
        corpus(&m);
        m.close().unwrap();
    }
    std::fs::remove_dir_all(t.path().join("docs-index")).unwrap();
    let m = crate::open(t.path());
    assert_eq!(paths(&m, "getBlockHandle"), ["/src/cache.rs"]);
    assert_eq!(m.stats().unwrap().indexed, 5);
    assert_eq!(m.rebuild_index().unwrap(), 5);
    assert_eq!(paths(&m, "tuning"), ["/doc/page.html"]);
}

/// A damaged full-text index does not take the memory down: opening rebuilds it from the
/// documents and says so.
#[test]
fn a_damaged_index_is_rebuilt_on_open() {
    let t = tempfile::tempdir().unwrap();
    {
        let m = crate::open(t.path());
        corpus(&m);
        m.close().unwrap();
    }
    let meta = t.path().join("docs-index/meta.json");
    std::fs::write(&meta, b"{ this is not tantivy's meta").unwrap();
    let m = crate::open(t.path());
    let w = m.take_warnings();
    assert!(w.len() == 1 && w[0].contains("made anew"), "{w:?}");
    assert_eq!(paths(&m, "getBlockHandle"), ["/src/cache.rs"]);
    assert_eq!(m.stats().unwrap().indexed, 5);
    assert!(m.verify().unwrap().problems.is_empty());
    // Segment files damaged below an intact meta.json: also rebuilt.
    drop(m);
    let dir = t.path().join("docs-index");
    let mut damaged = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "idx" || x == "term") {
            std::fs::write(&p, b"garbage").unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0);
    let m = crate::open(t.path());
    assert_eq!(paths(&m, "getBlockHandle"), ["/src/cache.rs"], "warnings: {:?}", m.take_warnings());
}
