//! Recycled buffers for data blocks read from table files.
//!
//! A block read on a cache miss lives in the block cache until some other thread's insert
//! evicts it, so with the system allocator (glibc) most blocks are freed by a thread other
//! than the one that allocated them, and every such free takes the allocating thread's arena
//! lock. With two threads scanning, the allocator's locks, their futex wake-ups and its
//! bookkeeping took a large share of the readers' CPU (`docs/design/2026-12-07-engine-measurements.md`). Blocks read here are instead built in buffers taken from a small shared pool, and a
//! buffer goes back to the pool when the last reference to its block (the cache's or a
//! value's) is dropped. At most [`MAX_POOLED`] buffers of at most [`MAX_POOLED_CAPACITY`]
//! bytes wait in the pool (4-5 MiB with 4 KiB blocks), outside the block cache's budget.

use bytes::Bytes;
use parking_lot::Mutex;

/// Most buffers kept for reuse.
pub const MAX_POOLED: usize = 1024;
/// Largest buffer kept for reuse; larger ones are freed.
pub const MAX_POOLED_CAPACITY: usize = 64 << 10;

struct Pool(Mutex<Vec<Vec<u8>>>);

static POOL: Pool = Pool(Mutex::new(Vec::new()));

/// An empty buffer with room for at least `len` bytes, from the pool when it has one.
pub fn take(len: usize) -> Vec<u8> {
    POOL.take(len)
}

/// `v` as shared bytes whose buffer goes back to the pool when the last clone is dropped.
pub fn into_bytes(v: Vec<u8>) -> Bytes {
    POOL.wrap(v)
}

impl Pool {
    fn take(&self, len: usize) -> Vec<u8> {
        let mut v = self.0.lock().pop().unwrap_or_default();
        v.clear();
        v.reserve(len);
        v
    }

    fn wrap(&'static self, v: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled(v, self))
    }

    fn put(&self, v: Vec<u8>) {
        if v.capacity() == 0 || v.capacity() > MAX_POOLED_CAPACITY {
            return;
        }
        let mut pool = self.0.lock();
        if pool.len() < MAX_POOLED {
            pool.push(v);
        }
    }
}

struct Pooled(Vec<u8>, &'static Pool);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.1.put(std::mem::take(&mut self.0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool of the test's own (the shared one serves every test thread).
    fn pool() -> &'static Pool {
        Box::leak(Box::new(Pool(Mutex::new(Vec::new()))))
    }

    #[test]
    fn a_buffer_returns_to_the_pool_when_its_last_clone_is_dropped() {
        let pool = pool();
        let mut v = pool.take(100);
        v.extend_from_slice(b"block contents");
        let ptr = v.as_ptr();
        let b = pool.wrap(v);
        let value = b.slice(6..);
        drop(b);
        // A slice still holds the buffer; its bytes are intact.
        assert_eq!(&value[..], b"contents");
        drop(value);
        let again = pool.take(10);
        assert_eq!(again.as_ptr(), ptr, "the same buffer, reused");
        assert!(again.is_empty() && again.capacity() >= 100);
        assert_eq!(pool.0.lock().len(), 0);
    }

    #[test]
    fn oversized_buffers_are_not_kept_and_the_pool_is_bounded() {
        let pool = pool();
        let mut v = Vec::with_capacity(MAX_POOLED_CAPACITY + 1);
        v.push(1u8);
        drop(pool.wrap(v));
        assert_eq!(pool.0.lock().len(), 0);
        for _ in 0..MAX_POOLED + 10 {
            pool.put(Vec::with_capacity(16));
        }
        assert_eq!(pool.0.lock().len(), MAX_POOLED);
    }
}
