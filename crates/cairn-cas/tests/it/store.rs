use std::io::Read;

use cairn_cas::{HashAlgo, Id, StoreConfig};
use cairn_kv::MemStorage;

use crate::{config, noise, open};

/// Bytes in the store's packs.
fn stored(store: &cairn_cas::Store) -> u64 {
    store.stats().unwrap().stored_bytes
}

#[test]
fn put_get_and_exact_dedup() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let data = noise(1, 300_000);
    let a = store.put(&data).unwrap();
    assert!(!a.existed);
    assert!(a.chunks > 5, "300 KB is cut into several chunks, got {}", a.chunks);
    assert_eq!(a.new_chunks, a.chunks);
    assert_eq!(a.id, HashAlgo::Blake3.hash(&data));
    let before = stored(&store);
    let b = store.put(&data).unwrap();
    assert!(b.existed);
    assert_eq!(b.new_bytes, 0, "content already present stores no chunk");
    assert_eq!(stored(&store), before, "content already present writes no chunk data");
    assert_eq!(store.get(&a.id).unwrap(), data);
    assert_eq!(store.blob_info(&a.id).unwrap().unwrap().refs, 2);
    let s = store.stats().unwrap();
    assert_eq!(s.blobs, 1);
    assert_eq!(s.logical_bytes, 300_000);
}

#[test]
fn shifted_content_shares_most_chunks() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let base = noise(2, 1_000_000);
    let first = store.put(&base).unwrap();
    let first_stored = stored(&store);
    // Insert 100 bytes near the start: content-defined cuts realign after the edit.
    let mut edited = base[..5000].to_vec();
    edited.extend_from_slice(&noise(3, 100));
    edited.extend_from_slice(&base[5000..]);
    let second = store.put(&edited).unwrap();
    assert!(!second.existed);
    assert!(second.new_chunks <= 3, "only chunks around the edit are new: {} of {}", second.new_chunks, second.chunks);
    assert!(second.new_bytes < first.new_bytes / 10);
    let second_stored = stored(&store) - first_stored;
    assert!(second_stored < first_stored / 10, "{second_stored} stored for the edit, {first_stored} for the original");
    assert_eq!(store.get(&second.id).unwrap(), edited);
}

#[test]
fn small_content_is_one_chunk_and_compression_only_when_it_helps() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let small = b"a small file".to_vec();
    let o = store.put(&small).unwrap();
    assert_eq!(o.chunks, 1);
    let empty = store.put(b"").unwrap();
    assert_eq!(store.get(&empty.id).unwrap(), b"");
    let text = b"the quick brown fox jumps over the lazy dog. ".repeat(5000);
    let before = stored(&store);
    let t = store.put(&text).unwrap();
    let t_stored = stored(&store) - before;
    assert!(t_stored < text.len() as u64 / 5, "text compresses: {t_stored} stored for {}", text.len());
    let before = stored(&store);
    let random = noise(4, 100_000);
    let r = store.put(&random).unwrap();
    let r_stored = stored(&store) - before;
    assert!(r_stored >= 100_000 && r_stored < 100_000 + 100 * r.chunks, "random data is stored raw: {r_stored}");
    assert_eq!(store.get(&t.id).unwrap(), text);
    assert_eq!(store.get(&o.id).unwrap(), small);
}

#[test]
fn sha256_store() {
    let storage = MemStorage::new();
    let (db, store) = open(&storage, StoreConfig { hash: HashAlgo::Sha256, ..config() });
    let o = store.put(b"abc").unwrap();
    assert_eq!(o.id.to_hex(), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    drop(store);
    // The hash is fixed at creation: reopening with another config keeps SHA-256.
    let store = cairn_cas::Store::open(
        db.keyspace(cairn_kv::keyspace::CAS),
        std::sync::Arc::new(storage.clone()),
        "/d/packs",
        config(),
    )
    .unwrap();
    assert_eq!(store.hash_algo(), HashAlgo::Sha256);
    assert_eq!(store.put(b"abc").unwrap().id, o.id);
}

/// A reader producing `len` pseudo-random bytes without holding them.
struct Stream {
    left: usize,
    x: u64,
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.left);
        for b in &mut buf[..n] {
            self.x ^= self.x << 13;
            self.x ^= self.x >> 7;
            self.x ^= self.x << 17;
            *b = self.x as u8;
        }
        self.left -= n;
        Ok(n)
    }
}

#[test]
fn streaming_put_and_get_of_a_large_blob() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let len = 24 << 20;
    let o = store.put_reader(Stream { left: len, x: 99 }).unwrap();
    assert_eq!(o.size, len as u64);
    assert!(o.chunks > 24 * 1024 / 64, "cut into many chunks");
    // The same stream again deduplicates completely.
    let again = store.put_reader(Stream { left: len, x: 99 }).unwrap();
    assert!(again.existed);
    assert_eq!(again.id, o.id);
    // Stream it back and compare with a fresh generator, 1 MiB at a time.
    let mut r = store.reader(&o.id).unwrap();
    let mut expect = Stream { left: len, x: 99 };
    let (mut got, mut want) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut total = 0;
    loop {
        let n = read_full(&mut r, &mut got);
        let m = read_full(&mut expect, &mut want[..n.max(1)]);
        assert_eq!(n, m.min(n));
        if n == 0 {
            break;
        }
        assert_eq!(got[..n], want[..n]);
        total += n;
    }
    assert_eq!(total, len);
    let s = store.stats().unwrap();
    assert!(s.packs > 10, "packs are cut at the target size: {}", s.packs);
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]).unwrap() {
            0 => break,
            k => n += k,
        }
    }
    n
}

#[test]
fn release_and_gc_reclaim_space_and_keep_the_rest() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let keep: Vec<Id> = (0..20).map(|i| store.put(&noise(100 + i, 50_000)).unwrap().id).collect();
    let drop_: Vec<Id> = (0..20).map(|i| store.put(&noise(200 + i, 50_000)).unwrap().id).collect();
    let before = store.stats().unwrap();
    for id in &drop_ {
        assert!(store.release(id).unwrap());
        assert!(!store.contains(id).unwrap());
    }
    let mid = store.stats().unwrap();
    assert_eq!(mid.stored_bytes, before.stored_bytes, "release alone frees nothing on disk");
    assert!(mid.live_bytes < before.live_bytes * 6 / 10);
    let r = store.gc(0.9).unwrap();
    assert!(r.packs_collected > 0);
    let after = store.stats().unwrap();
    assert!(after.stored_bytes < before.stored_bytes * 6 / 10, "{} -> {}", before.stored_bytes, after.stored_bytes);
    assert_eq!(after.stored_bytes, after.live_bytes);
    for (i, id) in keep.iter().enumerate() {
        assert_eq!(store.get(id).unwrap(), noise(100 + i as u64, 50_000));
    }
    assert!(matches!(store.get(&drop_[0]), Err(cairn_cas::Error::NotFound(_))));
    let v = store.verify().unwrap();
    assert!(v.is_ok(), "{v:?}");
    assert_eq!(v.blobs, 20);
    // Releasing one of two references keeps the blob.
    let twice = store.put(&noise(7, 1000)).unwrap().id;
    store.put(&noise(7, 1000)).unwrap();
    store.release(&twice).unwrap();
    assert!(store.contains(&twice).unwrap());
}

#[test]
fn verify_reports_damage_precisely() {
    let dir = tempfile::tempdir().unwrap();
    let fs: std::sync::Arc<dyn cairn_kv::Storage> = std::sync::Arc::new(cairn_kv::FsStorage::new());
    let db = cairn_kv::Db::open(dir.path().join("kv"), cairn_kv::Options::default()).unwrap();
    let store =
        cairn_cas::Store::open(db.keyspace(cairn_kv::keyspace::CAS), fs, dir.path().join("packs"), config()).unwrap();
    let a = store.put(&noise(1, 40_000)).unwrap().id;
    let b = store.put(&noise(2, 40_000)).unwrap().id;
    assert!(store.verify().unwrap().is_ok());
    let pack = std::fs::read_dir(dir.path().join("packs")).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes.len() - 10; // inside the last chunk of blob b
    bytes[at] ^= 1;
    std::fs::write(&pack, bytes).unwrap();
    let v = store.verify().unwrap();
    assert!(!v.is_ok());
    assert_eq!(v.damaged.len(), 1);
    let d = &v.damaged[0];
    assert_eq!(d.blobs, vec![b]);
    assert!(d.problem.contains("checksum"), "{}", d.problem);
    assert!(d.offset > 0 && d.pack >= 1);
    assert!(store.get(&a).is_ok());
    assert!(matches!(store.get(&b), Err(cairn_cas::Error::Corruption { .. })));
}

#[test]
fn prepared_in_parallel_committed_in_one_batch_with_own_rows() {
    let storage = MemStorage::new();
    let (db, store) = open(&storage, config());
    let shared = noise(50, 30_000);
    store.put(&shared).unwrap();
    let datas: Vec<Vec<u8>> = (0..8).map(|i| [shared.clone(), noise(60 + i, 20_000)].concat()).collect();
    let prepared: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = datas.iter().map(|d| s.spawn(|| store.prepare(d).unwrap())).collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let user = db.keyspace(cairn_kv::keyspace::USER);
    let mut b = store.batch();
    for (i, p) in prepared.into_iter().enumerate() {
        let o = b.put_prepared(p).unwrap();
        assert!(o.new_chunks < o.chunks, "the shared part is deduplicated");
        b.kv_put(&user, format!("mine/{i}"), o.id.as_bytes()).unwrap();
    }
    assert!(b.kv_put(&db.keyspace(cairn_kv::keyspace::CAS), "evil", b"x").is_err(), "the cas keyspace is the store's");
    b.commit().unwrap();
    for (i, d) in datas.iter().enumerate() {
        let id = Id::from_slice(&user.get(format!("mine/{i}")).unwrap().unwrap()).unwrap();
        assert_eq!(&store.get(&id).unwrap(), d);
    }
    assert!(store.verify().unwrap().is_ok());
}

#[test]
fn a_prepared_blob_whose_chunk_was_collected_is_stale() {
    let storage = MemStorage::new();
    let (_db, store) = open(&storage, config());
    let data = noise(70, 100_000);
    let first = store.put(&data).unwrap().id;
    let p = store.prepare(&[data.clone(), noise(71, 10)].concat()).unwrap();
    store.release(&first).unwrap();
    store.gc(1.0).unwrap();
    let mut b = store.batch();
    assert!(matches!(b.put_prepared(p), Err(cairn_cas::Error::Stale(_))));
}

#[test]
fn large_content_is_cut_into_large_chunks_whichever_way_it_is_stored() {
    let storage = MemStorage::new();
    let (db, store) = open(&storage, config());
    // Above the 4 MiB threshold: chunks of 256 KiB to 4 MiB.
    let big = noise(7, 9 << 20);
    let a = store.put(&big).unwrap();
    assert!((3..=36).contains(&a.chunks), "9 MiB in 1 MiB chunks, got {}", a.chunks);
    // Below it: the usual 4-64 KiB chunks.
    let small = noise(8, 3 << 20);
    let s = store.put(&small).unwrap();
    assert!(s.chunks >= 48, "3 MiB in small chunks, got {}", s.chunks);
    // A stream of a file of known length is cut the same way, so its chunks are shared; a
    // stream of unknown length is cut small.
    let mut changed = big.clone();
    changed[5 << 20] ^= 1;
    let mut b = store.batch();
    let o = b.put_reader_len(&changed[..], changed.len() as u64).unwrap();
    b.commit().unwrap();
    assert!(!o.existed && o.new_chunks <= 2, "one changed byte rewrites its chunk: {o:?}");
    let p = store.prepare(&changed).unwrap();
    let mut b = store.batch();
    let again = b.put_prepared(p).unwrap();
    b.commit().unwrap();
    assert!(again.existed && again.new_bytes == 0);
    let other = noise(9, 9 << 20);
    let streamed = store.put_reader(&other[..]).unwrap();
    assert!(streamed.chunks > 100, "{streamed:?}");
    assert_eq!(store.get(&a.id).unwrap(), big);
    assert_eq!(store.get(&o.id).unwrap(), changed);
    assert!(store.verify().unwrap().is_ok());
    drop((store, db));

    // A store made without large chunking keeps its chunking when reopened with the default.
    let storage = MemStorage::new();
    let (db, store) = open(&storage, StoreConfig { large_chunks: None, ..config() });
    drop((store, db));
    let (_db, store) = open(&storage, config());
    let o = store.put(&big).unwrap();
    assert!(o.chunks > 100, "the chunking recorded when the store was made: {}", o.chunks);
}
