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
    m.add(vec![cairn_docs::NewDoc { path: "bin".into(), content: b"foo\0foo".to_vec() }], &tagged(&["x"])).unwrap();

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
