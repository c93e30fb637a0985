use std::collections::BTreeSet;

use cairn_docs::{AddOptions, AddStatus, Error, Filter, NewDoc, SearchOptions};

use crate::{add, doc, tagged};

#[test]
fn add_get_versions_and_unchanged_readd() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let a = add(&m, "/notes/a.md", "# Alpha\nfirst draft");
    assert_eq!(a.status, AddStatus::Added);
    assert_eq!((a.doc.version, a.doc.mime.as_str(), a.doc.title.as_deref()), (1, "text/markdown", Some("Alpha")));
    assert!(a.doc.indexed);
    let again = add(&m, "/notes/a.md", "# Alpha\nfirst draft");
    assert_eq!(again.status, AddStatus::Unchanged);
    assert_eq!(again.doc.version, 1);
    let b = add(&m, "/notes/a.md", "# Alpha\nsecond draft");
    assert_eq!((b.status, b.doc.version, b.doc.id), (AddStatus::NewVersion, 2, a.doc.id));
    let c = add(&m, "/notes/a.md", "# Alpha\nfirst draft");
    assert_eq!(c.doc.version, 3, "going back to old content is a new version");

    let vs = m.versions("/notes/a.md").unwrap();
    assert_eq!(vs.iter().map(|v| v.version).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(vs[0].hash, vs[2].hash);
    assert_eq!(m.content("/notes/a.md", Some(2)).unwrap(), b"# Alpha\nsecond draft");
    assert_eq!(m.content("/notes/a.md", None).unwrap(), b"# Alpha\nfirst draft");
    assert!(matches!(m.content("/notes/a.md", Some(9)), Err(Error::NoVersion(_, 9))));
    assert!(matches!(m.get("/nope"), Err(Error::NotFound(_))));

    // Everything survives a reopen.
    m.close().unwrap();
    let m = crate::open(t.path());
    assert_eq!(m.get("/notes/a.md").unwrap().version, 3);
    assert_eq!(m.versions("/notes/a.md").unwrap().len(), 3);
    let s = m.stats().unwrap();
    assert_eq!((s.documents, s.versions, s.indexed), (1, 3, 1));
}

#[test]
fn one_batch_with_the_same_path_twice_makes_two_versions() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let out = m.add(vec![doc("p", "one"), doc("p", "two"), doc("q", "one")], &AddOptions::default()).unwrap();
    let st: Vec<_> = out.iter().map(|a| (a.status, a.doc.version)).collect();
    assert_eq!(st, [(AddStatus::Added, 1), (AddStatus::NewVersion, 2), (AddStatus::Added, 1)]);
    assert_eq!(m.content("p", Some(1)).unwrap(), b"one");
    assert_eq!(m.content("p", None).unwrap(), b"two");
    // Same content under two paths is stored once.
    assert_eq!(m.get("q").unwrap().hash, m.versions("p").unwrap()[0].hash);
}

#[test]
fn binary_content_is_stored_not_indexed() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let bin = NewDoc::new("img.png", vec![0x89, b'P', b'N', b'G', 0, 1, 2, 0xff]);
    let a = m.add(vec![bin.clone()], &AddOptions::default()).unwrap().pop().unwrap();
    assert!(!a.doc.indexed);
    assert_eq!(a.doc.mime, "application/octet-stream");
    assert_eq!(m.content("img.png", None).unwrap(), bin.content);
    assert_eq!(m.stats().unwrap().indexed, 0);
}

#[test]
fn large_content_streams_in_and_out() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let size = cairn_docs::MAX_INDEXED + 3 * 1024 * 1024 + 7;
    let mut data = Vec::with_capacity(size as usize);
    let mut x = 88172645463325252u64;
    for _ in 0..size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.push(if x.is_multiple_of(11) { b'\n' } else { (x % 26) as u8 + b'a' });
    }
    let a = m.add_reader("big.txt", std::io::Cursor::new(&data), &tagged(&["big"])).unwrap();
    assert_eq!((a.status, a.doc.size, a.doc.indexed), (AddStatus::Added, size, false));
    let mut back = Vec::new();
    std::io::Read::read_to_end(&mut m.reader("big.txt", None).unwrap(), &mut back).unwrap();
    assert!(back == data, "streamed content differs");
    let again = m.add_reader("big.txt", std::io::Cursor::new(&data), &AddOptions::default()).unwrap();
    assert_eq!((again.status, again.doc.version), (AddStatus::Unchanged, 1));
    assert!(m.store().verify().unwrap().is_ok());
    // The unchanged re-add took no extra reference: removing the document frees the blob.
    let id = m.version_hash("big.txt", None).unwrap();
    assert!(m.remove(&["big.txt".into()]).unwrap().is_empty());
    assert!(m.store().blob_info(&id).unwrap().is_none());
}

#[test]
fn tags_metadata_and_listing_filters() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    m.add(vec![doc("/p/a.rs", "fn a() {}"), doc("/p/b.rs", "fn b() {}")], &tagged(&["code", "rust"])).unwrap();
    let opts = AddOptions { tags: vec!["notes".into()], meta: vec![("author".into(), "ann".into())] };
    m.add(vec![doc("/n/x.md", "# X"), doc("/n/y.txt", "y")], &opts).unwrap();
    let paths = |f: &Filter| m.list(f).unwrap().into_iter().map(|d| d.path).collect::<Vec<_>>();
    assert_eq!(paths(&Filter::default()), ["/n/x.md", "/n/y.txt", "/p/a.rs", "/p/b.rs"]);
    assert_eq!(paths(&Filter { tags: vec!["rust".into()], ..Default::default() }), ["/p/a.rs", "/p/b.rs"]);
    assert_eq!(
        paths(&Filter { tags: vec!["rust".into(), "notes".into()], ..Default::default() }),
        Vec::<String>::new()
    );
    assert_eq!(paths(&Filter { path_glob: Some("*.md".into()), ..Default::default() }), ["/n/x.md"]);
    assert_eq!(paths(&Filter { path_glob: Some("/p/{a,z}.rs".into()), ..Default::default() }), ["/p/a.rs"]);
    let meta = |k: &str, v: &str| Filter { meta: vec![(k.into(), v.into())], ..Default::default() };
    assert_eq!(paths(&meta("author", "ann")), ["/n/x.md", "/n/y.txt"]);

    // Tag and untag.
    assert!(m.tag(&["/n/x.md".into()], &["todo".into()], &["notes".into()]).unwrap().is_empty());
    assert_eq!(m.get("/n/x.md").unwrap().tags.into_iter().collect::<Vec<_>>(), ["todo"]);
    assert_eq!(paths(&Filter { tags: vec!["notes".into()], ..Default::default() }), ["/n/y.txt"]);
    assert_eq!(m.tag(&["/missing".into()], &["t".into()], &[]).unwrap(), ["/missing"]);

    // Bulk metadata: many documents in one write; None removes a key.
    let updates: Vec<_> = ["/p/a.rs", "/p/b.rs", "/n/y.txt"]
        .iter()
        .map(|p| (p.to_string(), vec![("stage".to_string(), Some("review".to_string()))]))
        .collect();
    assert!(m.set_meta(&updates).unwrap().is_empty());
    assert_eq!(paths(&meta("stage", "review")), ["/n/y.txt", "/p/a.rs", "/p/b.rs"]);
    m.set_meta(&[("/n/y.txt".into(), vec![("stage".into(), Some("done".into())), ("author".into(), None)])]).unwrap();
    assert_eq!(paths(&meta("stage", "review")), ["/p/a.rs", "/p/b.rs"]);
    assert_eq!(paths(&meta("stage", "done")), ["/n/y.txt"]);
    assert_eq!(paths(&meta("author", "ann")), ["/n/x.md"]);
    assert_eq!(m.get("/n/y.txt").unwrap().meta.len(), 1);

    // Time filters use the last update.
    let y = m.get("/n/y.txt").unwrap();
    assert!(paths(&Filter { since: Some(y.updated), ..Default::default() }).contains(&"/n/y.txt".to_string()));
    assert!(paths(&Filter { until: Some(y.updated), ..Default::default() }).iter().all(|p| p != "/n/y.txt"));

    // Reopen: the index rows are intact.
    drop(m);
    let m = crate::open(t.path());
    assert_eq!(m.list(&meta("stage", "review")).unwrap().len(), 2);
}

#[test]
fn remove_releases_content_and_rows() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let opts = AddOptions { tags: vec!["t".into()], meta: vec![("k".into(), "v".into())] };
    m.add(vec![doc("a", "version one of a")], &opts).unwrap();
    m.add(vec![doc("a", "version two of a")], &opts).unwrap();
    add(&m, "b", "version one of a");
    let before = m.store().stats().unwrap();
    assert_eq!(m.remove(&["a".into(), "zzz".into()]).unwrap(), ["zzz"]);
    assert!(m.get("a").is_err());
    assert!(m.list(&Filter { tags: vec!["t".into()], ..Default::default() }).unwrap().is_empty());
    assert!(m.list(&Filter { meta: vec![("k".into(), "v".into())], ..Default::default() }).unwrap().is_empty());
    // "b" shares version one's content: it must still read back.
    assert_eq!(m.content("b", None).unwrap(), b"version one of a");
    let after = m.store().stats().unwrap();
    assert!(after.blobs < before.blobs, "{before:?} -> {after:?}");
    assert!(m.store().verify().unwrap().is_ok());
    // The path can be added again, from version 1.
    assert_eq!(add(&m, "a", "new").doc.version, 1);
}

#[test]
fn bad_input_gets_clear_errors() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let bad = |r: cairn_docs::Result<_>| matches!(r, Err(Error::InvalidArgument(_)));
    assert!(bad(m.add(vec![doc("", "x")], &AddOptions::default()).map(|_| ())));
    assert!(bad(m.add(vec![doc("a\0b", "x")], &AddOptions::default()).map(|_| ())));
    assert!(bad(m.add(vec![doc("a", "x")], &tagged(&["bad\0tag"])).map(|_| ())));
    assert!(bad(m.add(vec![doc("a", "x")], &tagged(&[""])).map(|_| ())));
    assert!(bad(m.list(&Filter { path_glob: Some("[".into()), ..Default::default() }).map(|_| ())));
    // Nothing of the rejected adds was stored.
    assert_eq!(m.stats().unwrap().documents, 0);
}

#[test]
fn concurrent_adds_are_group_committed_without_losing_any() {
    let t = tempfile::tempdir().unwrap();
    let m = crate::open(t.path());
    let threads = 8;
    let per = 40;
    std::thread::scope(|s| {
        for th in 0..threads {
            let m = m.clone();
            s.spawn(move || {
                for i in 0..per {
                    let own = add(&m, &format!("/t{th}/{i}.txt"), &format!("thread{th} item{i} zebra"));
                    assert_eq!(own.status, AddStatus::Added);
                    // Every thread also writes new versions of one shared path.
                    let opts = tagged(&[&format!("t{th}")]);
                    m.add(vec![doc("/shared.txt", &format!("shared by {th} at {i}"))], &opts).unwrap();
                }
            });
        }
    });
    let ids: BTreeSet<u64> = m.list(&Default::default()).unwrap().iter().map(|d| d.id).collect();
    assert_eq!(ids.len(), threads * per + 1, "every document has its own id");
    let shared = m.get("/shared.txt").unwrap();
    assert_eq!(shared.version as usize, threads * per, "every shared add made a version");
    assert_eq!(m.versions("/shared.txt").unwrap().len(), threads * per);
    assert_eq!(shared.tags.len(), threads, "tags of every group member kept");
    let r = m.search("zebra", &SearchOptions { limit: 1000, ..Default::default() }).unwrap();
    assert_eq!(r.total, threads * per);
    drop(m);
    let m = crate::open(t.path());
    assert_eq!(m.list(&Default::default()).unwrap().len(), threads * per + 1);
}
