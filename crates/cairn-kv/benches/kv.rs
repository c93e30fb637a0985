//! Criterion benchmarks of the engine's basic operations on real files: durable and
//! non-durable puts, batched puts, point reads from memtable and from tables (cache warm),
//! forward/reverse range scans, and a table filter's build and probe (bloom against binary fuse).

use std::hint::black_box;

use cairn_kv::{Db, Options, WriteBatch, WriteOptions};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};

const N: u64 = 100_000;
const VALUE: usize = 256;

fn key(i: u64) -> [u8; 16] {
    // Scrambled so that consecutive operations touch unrelated keys.
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(b"user0000");
    k[8..].copy_from_slice(&h.to_be_bytes());
    k
}

fn loaded(dir: &std::path::Path, flush: bool) -> Db {
    let db = Db::open(dir, Options::default()).unwrap();
    let value = vec![0xABu8; VALUE];
    for chunk in (0..N).collect::<Vec<_>>().chunks(1000) {
        let mut b = WriteBatch::new();
        for &i in chunk {
            b.put(key(i), &value).unwrap();
        }
        db.write_opt(b, WriteOptions::no_sync()).unwrap();
    }
    if flush {
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
    }
    db
}

fn puts(c: &mut Criterion) {
    let mut g = c.benchmark_group("put");
    g.throughput(Throughput::Elements(1));
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let value = vec![0xCDu8; VALUE];
    let mut i = 0u64;
    g.bench_function("no_sync_256B", |b| {
        b.iter(|| {
            i += 1;
            let mut batch = WriteBatch::new();
            batch.put(key(i), &value).unwrap();
            db.write_opt(batch, WriteOptions::no_sync()).unwrap();
        })
    });
    g.sample_size(20);
    g.bench_function("sync_256B", |b| {
        b.iter(|| {
            i += 1;
            db.put(key(i), &value).unwrap();
        })
    });
    g.throughput(Throughput::Elements(100));
    g.bench_function("batch100_no_sync_256B", |b| {
        b.iter_batched(
            || {
                let mut batch = WriteBatch::new();
                for _ in 0..100 {
                    i += 1;
                    batch.put(key(i), &value).unwrap();
                }
                batch
            },
            |batch| db.write_opt(batch, WriteOptions::no_sync()).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn gets(c: &mut Criterion) {
    let mut g = c.benchmark_group("get");
    g.throughput(Throughput::Elements(1));
    for (name, flush) in [("memtable", false), ("tables", true)] {
        let dir = tempfile::tempdir().unwrap();
        let db = loaded(dir.path(), flush);
        let mut i = 0u64;
        g.bench_function(format!("hit_{name}"), |b| {
            b.iter(|| {
                i = (i + 7919) % N;
                black_box(db.get(key(i)).unwrap().unwrap());
            })
        });
        g.bench_function(format!("miss_{name}"), |b| {
            b.iter(|| {
                i += 1;
                black_box(db.get(key(N + i)).unwrap());
            })
        });
    }
    g.finish();
}

fn scans(c: &mut Criterion) {
    let mut g = c.benchmark_group("scan");
    let dir = tempfile::tempdir().unwrap();
    let db = loaded(dir.path(), true);
    g.throughput(Throughput::Elements(100));
    let mut i = 0u64;
    g.bench_function("seek_then_100_forward", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(db.range(key(i)..).take(100).count());
        })
    });
    g.bench_function("seek_then_100_reverse", |b| {
        b.iter(|| {
            i = (i + 7919) % N;
            black_box(db.range(..key(i)).rev().take(100).count());
        })
    });
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("full_scan", |b| b.iter(|| black_box(db.iter().count())));
    g.finish();
}

/// One table's filter at 10 bits per key over 65,536 keys (a 64 MiB table of 1,000-byte
/// values): building it, and probing it with absent keys (what a read pays per table it skips).
fn filters(c: &mut Criterion) {
    use cairn_kv::internals::filter::{FilterBuilder, TableFilter, key_hash};
    const KEYS: u64 = 65_536;
    let mut fb = FilterBuilder::new(10);
    for i in 0..KEYS {
        fb.add_key(&key(i));
    }
    let absent: Vec<u64> = (KEYS..KEYS + 4096).map(|i| key_hash(&key(i))).collect();
    let mut g = c.benchmark_group("filter");
    for (name, build) in
        [("bloom", FilterBuilder::finish_bloom as fn(&FilterBuilder) -> Vec<u8>), ("fuse", FilterBuilder::finish)]
    {
        g.throughput(Throughput::Elements(KEYS));
        g.bench_function(format!("build_{name}_64k"), |b| b.iter(|| black_box(build(&fb))));
        let f = TableFilter::new(build(&fb).into());
        assert_eq!(f.is_fuse(), name == "fuse");
        g.throughput(Throughput::Elements(absent.len() as u64));
        g.bench_function(format!("probe_absent_{name}_64k"), |b| {
            b.iter(|| absent.iter().filter(|&&h| f.may_contain_hash(h)).count())
        });
    }
    g.finish();
}

// The macro generates an undocumented function.
#[allow(missing_docs)]
mod group {
    use super::*;
    criterion_group!(benches, puts, gets, scans, filters);
}
use group::benches;
criterion_main!(benches);
