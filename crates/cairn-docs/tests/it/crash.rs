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
