//! Allocation behaviour of the write path, counted by a global allocator that tallies the calls
//! of each thread (this test binary only).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cairn_kv::{Db, Options, WriteBatch, WriteOptions};

struct Counting;

thread_local! {
    static REALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the counter is a
// thread-local `Cell` with a const initialiser, which never allocates.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = REALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn reallocs_during(f: impl FnOnce()) -> u64 {
    let before = REALLOCS.with(Cell::get);
    f();
    REALLOCS.with(Cell::get) - before
}

/// Encoding a batch's first operation reserves its buffer once instead of growing it through
/// reallocations (with glibc, each `realloc` takes the arena's lock, which a writer thread
/// sharing its arena with a flush thread was seen waiting on).
#[test]
fn a_batch_of_one_write_never_reallocates() {
    let n = reallocs_during(|| {
        let mut b = WriteBatch::new();
        b.put(vec![b'k'; 24], vec![b'v'; 256]).unwrap();
        std::hint::black_box(&b);
        let mut d = WriteBatch::new();
        d.delete(vec![b'k'; 24]).unwrap();
        std::hint::black_box(&d);
        let mut r = WriteBatch::new();
        r.delete_range(b"a", b"b").unwrap();
        std::hint::black_box(&r);
    });
    assert_eq!(n, 0);
}

/// A put on an engine with no other writer makes no reallocation on the writer's thread once
/// the engine is warm (memtable and log in place), on real files (the in-memory test storage
/// grows its files' buffers).
#[test]
fn a_put_never_reallocates() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..100u32 {
        db.write_opt(batch(i), WriteOptions::no_sync()).unwrap();
    }
    let batches: Vec<WriteBatch> = (100..200u32).map(batch).collect();
    let n = reallocs_during(|| {
        for b in batches {
            db.write_opt(b, WriteOptions::no_sync()).unwrap();
        }
    });
    assert_eq!(n, 0);
}

fn batch(i: u32) -> WriteBatch {
    let mut b = WriteBatch::new();
    b.put(format!("key{i:08}"), vec![7u8; 256]).unwrap();
    b
}
