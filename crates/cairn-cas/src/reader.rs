//! [`BlobReader`]: streams a blob chunk by chunk in bounded memory.

use std::io::{self, Read};

use crate::{Id, Store};

/// Reads a blob's content; each chunk is fetched, checked and decoded when reached.
/// Errors come out as `io::Error`s wrapping [`crate::Error`].
pub struct BlobReader {
    store: Store,
    ids: Vec<Id>,
    next: usize,
    buf: Vec<u8>,
    pos: usize,
    size: u64,
}

impl BlobReader {
    pub(crate) fn new(store: Store, ids: Vec<Id>, size: u64) -> Self {
        BlobReader { store, ids, next: 0, buf: Vec::new(), pos: 0, size }
    }

    /// The blob's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl Read for BlobReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            let Some(id) = self.ids.get(self.next) else { return Ok(0) };
            self.buf = self.store.inner.read_chunk(id).map_err(io::Error::other)?;
            self.pos = 0;
            self.next += 1;
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
