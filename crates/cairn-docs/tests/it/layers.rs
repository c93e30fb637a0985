//! The full-text index's in-memory layers (issue 74): a document is searchable the moment its
//! add returns, searches never commit, scores equal those of one index holding everything, and
//! what was only in memory at a crash is found again after reopening.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_docs::{AddOptions, Filter, SearchOptions};

use crate::{add, doc, tagged};

fn opts(limit: usize) -> SearchOptions {
    SearchOptions { limit, snippets: false, ..Default::default() }
}

fn hits(m: &cairn_docs::Memory, q: &str, limit: usize) -> Vec<(String, f32)> {
    m.search(q, &opts(limit)).unwrap().hits.into_iter().map(|h| (h.doc.path, h.score)).collect()
}

#[test]
fn scores_are_the_same_before_and_after_the_flush() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    // Some documents on disk, then changes only in memory: new ones, a new version, a removal.
    for i in 0..40 {
        add(&m, &format!("/d/{i:02}.txt"), &format!("alpha beta {} gamma {}", "delta ".repeat(i % 7), i));
    }
    m.commit().unwrap();
    for i in 40..60 {
        add(&m, &format!("/d/{i:02}.txt"), &format!("alpha {} epsilon", "beta ".repeat(i % 5)));
    }
    add(&m, "/d/03.txt", "alpha alpha alpha rewritten");
    m.remove(&["/d/07.txt".to_string()]).unwrap();
    let queries = ["alpha", "beta delta", "epsilon", "rewritten", "gamma 7"];
    let before: Vec<_> = queries.iter().map(|q| hits(&m, q, 100)).collect();
    assert!(before[3].iter().any(|(p, _)| p == "/d/03.txt"), "a new version is found at once");
    assert!(before[0].iter().all(|(p, _)| p != "/d/07.txt"), "a removed document is gone at once");
    assert_eq!(before[0].len(), 59);
    m.commit().unwrap();
    let after: Vec<_> = queries.iter().map(|q| hits(&m, q, 100)).collect();
    for (q, (b, a)) in queries.iter().zip(before.iter().zip(&after)) {
        let mut b = b.clone();
        let mut a = a.clone();
        b.sort_by(|x, y| x.0.cmp(&y.0));
        a.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(b.len(), a.len(), "{q}");
        for ((pb, sb), (pa, sa)) in b.iter().zip(&a) {
            assert_eq!(pb, pa, "{q}");
            assert!((sb - sa).abs() <= 1e-4 * sa.abs().max(1.0), "{q} {pb}: {sb} in layers, {sa} on disk");
        }
    }
}

#[test]
fn filters_and_pages_see_every_layer() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    for i in 0..15 {
        let o = if i % 2 == 0 { tagged(&["even"]) } else { AddOptions::default() };
        m.add(vec![doc(&format!("/p/{i:02}"), "zebra stripes")], &o).unwrap();
        if i == 6 {
            m.commit().unwrap();
        }
    }
    let mut seen = Vec::new();
    for page in 0..2 {
        let r =
            m.search("zebra", &SearchOptions { limit: 10, offset: page * 10, snippets: false, ..Default::default() });
        let r = r.unwrap();
        assert_eq!(r.total, 15);
        seen.extend(r.hits.into_iter().map(|h| h.doc.path));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 15, "pages over layers show each document once: {seen:?}");
    let filter = Filter { tags: vec!["even".into()], ..Default::default() };
    let r = m.search("zebra", &SearchOptions { limit: 100, filter, snippets: false, ..Default::default() }).unwrap();
    assert_eq!(r.hits.len(), 8);
    assert!(r.hits.iter().all(|h| h.doc.tags.contains("even")));
}

#[test]
fn every_add_is_searchable_when_it_returns_under_concurrency() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let stop = Arc::new(AtomicBool::new(false));
    // Searchers running all along (they must never wait for or cause a commit).
    let searchers: Vec<_> = (0..2)
        .map(|_| {
            let m = m.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    m.search("common", &opts(10)).unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let m = m.clone();
            std::thread::spawn(move || {
                for i in 0..150 {
                    let token = format!("uniq{w}x{i}");
                    add(&m, &format!("/w{w}/{i}"), &format!("common words and {token}"));
                    let h = hits(&m, &token, 10);
                    assert_eq!(h.len(), 1, "{token} must be found the moment its add returns");
                    if i % 50 == 0 {
                        m.remove(&[format!("/w{w}/{}", i / 2)]).unwrap();
                        assert!(hits(&m, &format!("uniq{w}x{}", i / 2), 10).is_empty() || i == 0);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for s in searchers {
        assert!(s.join().unwrap() > 0);
    }
    let total = m.search("common", &opts(1)).unwrap().total;
    // 600 added, 4 writers removed 3 each (i = 50, 100 remove 25 and 50; i = 0 removes 0).
    assert_eq!(total, 600 - 4 * 3);
}

#[test]
fn changes_only_in_memory_at_a_crash_are_found_after_reopening() {
    let t = tempfile::tempdir().unwrap();
    {
        let m = crate::open(t.path());
        add(&m, "/a", "kept on disk");
        m.commit().unwrap();
        add(&m, "/b", "only in memory quokka");
        add(&m, "/a", "kept on disk, then changed: wombat");
        m.remove(&["/a".to_string()]).ok();
        add(&m, "/a", "back again numbat");
        assert_eq!(hits(&m, "quokka", 10).len(), 1);
        // Dropped without a commit or close: the in-memory layer is lost with the process.
    }
    let m = crate::open(t.path());
    assert_eq!(hits(&m, "quokka", 10).len(), 1);
    assert_eq!(hits(&m, "numbat", 10).len(), 1);
    assert!(hits(&m, "wombat", 10).is_empty());
    let v = m.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems.iter().map(|p| &p.problem).collect::<Vec<_>>());
}

#[test]
fn the_background_flush_writes_the_layers_to_disk() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    add(&m, "/x", "flushed by the background thread");
    // The flusher writes layers older than a second; wait for it (bounded), without commit.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while m.stats().unwrap().indexed == 0 {
        assert!(std::time::Instant::now() < deadline, "the layer was never flushed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(hits(&m, "background", 10).len(), 1);
}

/// Scores in memory, after the flush and after reopening are those of an index given one commit
/// per write (what one process per command gives), also when a write replaces or removes an
/// entry still in memory, or every entry of an older segment.
#[test]
fn scores_equal_those_of_one_commit_per_write() {
    let (t1, t2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let layered = crate::open(t1.path());
    let committed = crate::open(t2.path());
    let writes: Vec<(&str, Option<&str>)> = vec![
        ("/a.md", Some("alpha beta gamma")),
        ("/a.md", Some("alpha beta gamma delta\nsecond line")),
        ("/b.md", Some("alpha zeta")),
        ("/c.md", Some("alpha alpha eta")),
        ("/b.md", None),
        ("/c.md", Some("alpha theta")),
        ("/a.md", Some("alpha again")),
        ("/d.md", Some("beta gamma alpha")),
    ];
    let queries = ["alpha", "beta gamma", "theta", "again"];
    let all = |m: &cairn_docs::Memory| -> Vec<Vec<(String, f32)>> { queries.iter().map(|q| hits(m, q, 10)).collect() };
    for (i, (path, text)) in writes.iter().enumerate() {
        for m in [&layered, &committed] {
            match text {
                Some(text) => {
                    add(m, path, text);
                }
                None => {
                    m.remove(&[path.to_string()]).unwrap();
                }
            }
        }
        committed.commit().unwrap();
        let want = all(&committed);
        assert_eq!(all(&layered), want, "in memory, after write {i}");
        if i % 3 == 2 {
            layered.flush_index().unwrap();
            assert_eq!(all(&layered), want, "after the flush of write {i}");
        }
    }
    let want = all(&committed);
    layered.commit().unwrap();
    assert_eq!(all(&layered), want, "committed");
    drop(layered);
    assert_eq!(all(&crate::open(t1.path())), want, "reopened");
}
