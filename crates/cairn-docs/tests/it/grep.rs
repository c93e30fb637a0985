use cairn_docs::{Filter, GrepFile, GrepOptions, Memory};

use crate::{add, tagged};

fn grep(m: &Memory, o: GrepOptions) -> Vec<GrepFile> {
    let mut v = Vec::new();
    m.grep(&o, |f| {
        v.push(f);
        Ok(())
    })
    .unwrap();
    v
}

fn opts(p: &str) -> GrepOptions {
    GrepOptions { pattern: p.into(), ..Default::default() }
}

#[test]
fn regex_case_word_fixed_and_context() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    add(&m, "b.txt", "one\ntwo Foo\nthree\nfour\nfive\nsix\nseven foo.bar\n");
    add(&m, "a.txt", "fooXbar\nnothing\n");
    m.add(vec![cairn_docs::NewDoc::new("bin", b"foo\0foo".to_vec())], &tagged(&["x"])).unwrap();

    let r = grep(&m, opts("foo"));
    assert_eq!(r.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["a.txt", "b.txt"], "binary skipped, path order");
    assert_eq!(r[1].matched_lines, 1, "case-sensitive: 'Foo' does not match, 'foo.bar' does");
    let line = &r[1].groups[0][0];
    assert_eq!(
        (line.number, line.text.as_str(), line.matches.len(), line.matches[0].clone()),
        (7, "seven foo.bar", 1, 6..9)
    );

    let r = grep(&m, GrepOptions { ignore_case: true, ..opts("foo") });
    assert_eq!(r[1].matched_lines, 2);
    let r = grep(&m, GrepOptions { word: true, ..opts("foo") });
    assert_eq!(r.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["b.txt"], "fooXbar is not the word foo");
    let r = grep(&m, GrepOptions { fixed: true, ..opts("foo.bar") });
    assert_eq!((r.len(), r[0].path.as_str()), (1, "b.txt"));
    assert_eq!(grep(&m, opts("foo.bar")).len(), 2, "as a regex '.' matches any character");

    // Context: -C 1 around lines 2 and 7 gives two groups.
    let r = grep(&m, GrepOptions { ignore_case: true, context: 1, ..opts("foo") });
    let b = &r[1];
    let nums: Vec<Vec<(u64, bool)>> =
        b.groups.iter().map(|g| g.iter().map(|l| (l.number, l.is_match)).collect()).collect();
    assert_eq!(nums, [vec![(1, false), (2, true), (3, false)], vec![(6, false), (7, true)]]);
    // -C 2: lines 1-4 and 5-7 touch, so they print as one run (as ripgrep does).
    let r = grep(&m, GrepOptions { ignore_case: true, context: 2, ..opts("foo") });
    assert_eq!(r[1].groups.len(), 1, "adjacent context merges");
    assert_eq!(r[1].groups[0].len(), 7);

    // Filters.
    assert!(
        grep(&m, GrepOptions { filter: Filter { tags: vec!["x".into()], ..Default::default() }, ..opts("foo") })
            .is_empty()
    );
    let mut n = 0;
    let s = m.grep(&GrepOptions { max_files: Some(1), ..opts("o") }, |_| {
        n += 1;
        Ok(())
    });
    assert_eq!((s.unwrap().files_matched, n), (1, 1));
}

#[test]
fn bad_patterns_are_errors() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    add(&m, "a", "x");
    let e = m.grep(&opts("a("), |_| Ok(())).unwrap_err();
    assert!(matches!(e, cairn_docs::Error::Query(_)), "{e}");
    // As a fixed string the same pattern is fine.
    assert!(m.grep(&GrepOptions { fixed: true, ..opts("a(") }, |_| Ok(())).is_ok());
}

/// Text too large for the full-text index is still grepped (streamed), not skipped.
#[test]
fn documents_too_large_to_index_are_grepped() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let mut big = "filler line of ordinary text\n".repeat(((cairn_docs::MAX_INDEXED as usize) / 29) + 1000);
    big.push_str("the needle is here at the very end\n");
    let a = m.add_reader("big.txt", std::io::Cursor::new(big.as_bytes()), &Default::default()).unwrap();
    assert!(!a.doc.indexed && a.doc.size > cairn_docs::MAX_INDEXED);
    add(&m, "small.txt", "a needle in a small file\n");
    let r = grep(&m, opts("needle"));
    assert_eq!(r.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["big.txt", "small.txt"]);
    let line = &r[0].groups[0][0];
    assert_eq!(line.text, "the needle is here at the very end");
    assert_eq!(line.number, big.lines().count() as u64);
}

/// A document whose content is damaged is reported; the grep goes on with the others.
#[test]
fn an_unreadable_document_does_not_stop_the_grep() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    // The large document is the pack's first entry, the small one a few bytes at its end.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut noise = String::new();
    while noise.len() < 100_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        noise.push_str(&format!("{x:016x} needle\n"));
    }
    add(&m, "damaged.txt", &noise);
    add(&m, "fine.txt", "one needle\n");
    drop(m);
    let pack = std::fs::read_dir(t.path().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "pack"));
    let pack = pack.expect("a pack");
    let mut bytes = std::fs::read(&pack).unwrap();
    assert!(bytes.len() > 20_000, "{} bytes", bytes.len());
    let at = bytes.len() / 3;
    bytes[at] ^= 0x01;
    std::fs::write(&pack, bytes).unwrap();
    let m = crate::open(t.path());
    // Opening replayed the index work the drop left (the content of damaged.txt cannot be
    // read): it says so instead of failing.
    let warnings = m.take_warnings();
    assert!(warnings.len() == 1 && warnings[0].contains("damaged.txt"), "{warnings:?}");
    let mut found = Vec::new();
    let stats = m
        .grep(&opts("needle"), |f| {
            found.push(f.path);
            Ok(())
        })
        .unwrap();
    assert_eq!(found, ["fine.txt"]);
    assert_eq!(stats.errors.len(), 1, "{:?}", stats.errors);
    assert_eq!(stats.errors[0].0, "damaged.txt");
    assert!(stats.files_searched == 1 && stats.files_matched == 1);
}
