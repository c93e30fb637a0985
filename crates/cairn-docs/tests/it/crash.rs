//! Power cuts at every storage operation of a document workload: after reopening, every
//! acknowledged add, new version, tag change and removal holds, in the engine and in search.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use cairn_cas::{Store, StoreConfig};
use cairn_docs::{AddOptions, Memory, NewDoc, SearchOptions};
use cairn_kv::{Db, MemStorage, Options, Storage};

fn open(storage: &MemStorage, index: &Path) -> cairn_docs::Result<Memory> {
    let s: Arc<dyn Storage> = Arc::new(storage.clone());
    let db = Db::open_with_storage("/d/kv", Options::small_for_tests(), s.clone())?;
    let store = Store::open(
        db.keyspace(cairn_kv::keyspace::CAS),
        s,
        "/d/packs",
        StoreConfig { pack_target: 64 << 10, ..Default::default() },
    )?;
    Memory::with_parts(db.keyspace(cairn_kv::keyspace::DOCS), store, index)
}

/// What the workload has had acknowledged: path -> (content, tag) (None: removed).
type Acked = BTreeMap<String, Option<(String, Option<String>)>>;

fn text(i: u32, v: u32) -> String {
    format!("document w{i}x{v} body with shared words and some filler {}", "lorem ipsum ".repeat(i as usize % 5))
}

fn workload(storage: &MemStorage, index: &Path) -> Acked {
    let mut acked = Acked::new();
    let Ok(m) = open(storage, index) else { return acked };
    for step in 0..30u32 {
        let i = step % 12;
        let path = format!("/d/{i}");
        let v = step / 12;
        let r = match step % 5 {
            // Two documents in one batch.
            0 => {
                let j = (step + 5) % 12;
                let p2 = format!("/d/{j}");
                let docs = vec![
                    NewDoc::new(path.clone(), text(i, v).into_bytes()),
                    NewDoc::new(p2.clone(), text(j, v + 7).into_bytes()),
                ];
                m.add(docs, &AddOptions::default()).map(|_| {
                    for (p, k, vv) in [(&path, i, v), (&p2, j, v + 7)] {
                        let tag = acked.get(p).cloned().flatten().and_then(|(_, t)| t);
                        acked.insert(p.clone(), Some((text(k, vv), tag)));
                    }
                })
            }
            3 if acked.get(&path).is_some_and(|d| d.is_some()) => m.remove(std::slice::from_ref(&path)).map(|_| {
                acked.insert(path.clone(), None);
            }),
            4 if acked.get(&path).is_some_and(|d| d.is_some()) => {
                let tag = format!("t{step}");
                m.tag(std::slice::from_ref(&path), std::slice::from_ref(&tag), &[]).map(|_| {
                    if let Some(Some((_, t))) = acked.get_mut(&path) {
                        *t = Some(tag.clone());
                    }
                })
            }
            _ => m.add(vec![NewDoc::new(path.clone(), text(i, v).into_bytes())], &AddOptions::default()).map(|_| {
                let tag = acked.get(&path).cloned().flatten().and_then(|(_, t)| t);
                acked.insert(path.clone(), Some((text(i, v), tag)));
            }),
        };
        if r.is_err() {
            break;
        }
        // Now and then a search commits the index, so cuts also land between index commits.
        if step % 7 == 6 && m.search("shared", &SearchOptions::default()).is_err() {
            break;
        }
    }
    acked
}

fn check(storage: &MemStorage, index: &Path, acked: &Acked, cut: u64) {
    let m = open(storage, index).unwrap_or_else(|e| panic!("cut {cut}: reopen failed: {e}"));
    for (path, want) in acked {
        match want {
            None => assert!(m.doc_by_path(path).unwrap().is_none(), "cut {cut}: removed {path} is back"),
            Some((content, tag)) => {
                let got = m.content(path, None).unwrap_or_else(|e| panic!("cut {cut}: acknowledged {path} lost: {e}"));
                assert_eq!(String::from_utf8(got).unwrap(), *content, "cut {cut}: {path}");
                let doc = m.get(path).unwrap();
                if let Some(t) = tag {
                    assert!(doc.tags.contains(t), "cut {cut}: tag {t} of {path} lost");
                }
                // Searchable by its unique word, right after reopen.
                let word = content.split_whitespace().nth(1).unwrap();
                let hits = m.search(word, &SearchOptions::default()).unwrap().hits;
                assert!(hits.iter().any(|h| &h.doc.path == path), "cut {cut}: {path} not searchable for {word}");
            }
        }
    }
    // Nothing searchable that is not a document.
    let all = m.search("shared", &SearchOptions { limit: 1000, ..Default::default() }).unwrap();
    assert_eq!(all.hits.len(), all.total, "cut {cut}: index entries without a document");
    assert_eq!(m.stats().unwrap().indexed as usize, all.total, "cut {cut}");
    assert!(m.store().verify().unwrap().is_ok(), "cut {cut}");
}

#[test]
fn power_cut_at_every_storage_operation() {
    let probe = MemStorage::new();
    let dir = tempfile::tempdir().unwrap();
    let full = workload(&probe, &dir.path().join("probe"));
    assert!(full.len() >= 12, "the workload runs to the end without cuts");
    let ops = probe.mutating_ops();
    eprintln!("document workload: {ops} mutating storage operations");
    let stride = std::env::var("CAIRN_CRASH_STRIDE").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    for cut in (0..ops).step_by(stride) {
        let storage = MemStorage::new();
        let index = dir.path().join(format!("cut{cut}"));
        storage.fail_after(cut);
        let acked = workload(&storage, &index);
        storage.crash();
        check(&storage, &index, &acked, cut);
        std::fs::remove_dir_all(&index).ok();
    }
}

/// A durable add of a small document, a new version, a tag change, a metadata update and a
/// removal each cost one sync (the engine's log: the document's pack bytes are journaled in
/// the same write, see `docs/design/2026-12-07-one-sync-add.md`); a power cut right after they
/// return loses none of them.
#[test]
fn small_writes_sync_once_and_survive_a_power_cut() {
    let storage = MemStorage::new();
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    // A memtable large enough that no engine flush (and its syncs) comes during the test.
    let open = |storage: &MemStorage| {
        let s: Arc<dyn Storage> = Arc::new(storage.clone());
        let db = Db::open_with_storage("/d/kv", Options::default(), s.clone()).unwrap();
        let store = Store::open(db.keyspace(cairn_kv::keyspace::CAS), s, "/d/packs", StoreConfig::default()).unwrap();
        Memory::with_parts(db.keyspace(cairn_kv::keyspace::DOCS), store, &index).unwrap()
    };
    let m = open(&storage);
    let add = |m: &Memory, path: &str, body: &str| {
        m.add(vec![NewDoc::new(path.to_string(), body.as_bytes().to_vec())], &AddOptions::default()).unwrap();
    };
    // The first add creates the pack file, which is synced with its directory entry.
    add(&m, "/n/first", "the first note");
    // Each small write syncs the engine's log and not the pack. (The engine also makes its next
    // log ahead of time on a thread of its own and syncs it once, at a moment the test does
    // not control: one sync more in all, counted apart.)
    let packs = Path::new("/d/packs");
    let (all, in_packs) = (storage.syncs(), storage.syncs_under(packs));
    let writes = std::cell::Cell::new(0u64);
    let one_sync = |what: &str, f: &dyn Fn()| {
        let before = storage.syncs();
        f();
        writes.set(writes.get() + 1);
        assert!(storage.syncs() > before, "{what}: synced the log");
        assert_eq!(storage.syncs_under(packs), in_packs, "{what}: did not sync the pack");
    };
    let body = |i: usize| format!("note{i} about the daemon and its agents {}", "filler text ".repeat(80));
    for i in 0..20 {
        one_sync("an add of 1 KiB", &|| add(&m, &format!("/n/{i}"), &body(i)));
    }
    one_sync("a new version", &|| add(&m, "/n/3", "note3 changed its mind"));
    one_sync("a tag", &|| {
        m.tag(&["/n/4".to_string()], &["kept".to_string()], &[]).unwrap();
    });
    one_sync("a metadata update", &|| {
        m.set_meta(&[("/n/5".to_string(), vec![("source".to_string(), Some("agent".to_string()))])]).unwrap();
    });
    one_sync("a removal", &|| {
        m.remove(&["/n/6".to_string()]).unwrap();
    });
    let syncs = storage.syncs() - all;
    let n = writes.get();
    assert!((n..=n + 1).contains(&syncs), "{n} small writes made {syncs} syncs");
    storage.crash();
    drop(m);
    let m = open(&storage);
    for i in (0..20).filter(|i| ![3, 6].contains(i)) {
        let path = format!("/n/{i}");
        assert_eq!(m.content(&path, None).unwrap(), body(i).into_bytes(), "{path}");
        let hits = m.search(&format!("note{i}"), &SearchOptions::default()).unwrap().hits;
        assert!(hits.iter().any(|h| h.doc.path == path), "{path} is searchable");
    }
    assert_eq!(m.content("/n/3", None).unwrap(), b"note3 changed its mind");
    assert!(m.get("/n/4").unwrap().tags.contains("kept"));
    assert_eq!(m.get("/n/5").unwrap().meta.get("source").map(String::as_str), Some("agent"));
    assert!(m.doc_by_path("/n/6").unwrap().is_none());
    assert!(m.store().verify().unwrap().is_ok());
    let v = m.verify().unwrap();
    assert!(v.problems.is_empty(), "{:?}", v.problems);
}
