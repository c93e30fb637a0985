//! Fuzzes the SSTable reader: arbitrary bytes are opened as a table; if that succeeds, the table
//! is verified, iterated both ways and probed with point lookups. Nothing may panic.

#![no_main]

use std::io;
use std::sync::Arc;

use cairn_kv::RandomAccessFile;
use cairn_kv::internals::BlockCache;
use cairn_kv::internals::InternalIterator;
use cairn_kv::internals::key::lookup_key;
use cairn_kv::internals::TableReader;
use libfuzzer_sys::fuzz_target;

struct Contents(Vec<u8>);

impl RandomAccessFile for Contents {
    fn read_at(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let end = start.checked_add(len).ok_or(io::ErrorKind::UnexpectedEof)?;
        Ok(self.0.get(start..end).ok_or(io::ErrorKind::UnexpectedEof)?.to_vec())
    }
    fn len(&self) -> u64 {
        self.0.len() as u64
    }
}

fuzz_target!(|data: &[u8]| {
    let cache = Arc::new(BlockCache::new(1 << 16));
    let file = Arc::new(Contents(data.to_vec()));
    let Ok(table) = TableReader::open(file, "fuzz.sst".into(), 1, &cache) else {
        return;
    };
    let table = Arc::new(table);
    let _ = table.verify();
    // Block by block, going on past damage: what it hands out is in order.
    let mut last: Option<Vec<u8>> = None;
    let _ = table.check_blocks(Some(&mut |k: &[u8], _: &[u8]| {
        assert!(last.as_deref().is_none_or(|l| cairn_kv::internals::key::compare_internal(l, k).is_lt()));
        last = Some(k.to_vec());
        Ok(())
    }));
    let mut it = table.iter();
    if it.seek_to_first().is_ok() {
        while it.valid() && it.next().is_ok() {}
    }
    if it.seek_to_last().is_ok() {
        while it.valid() && it.prev().is_ok() {}
    }
    for uk in data.chunks(5).take(8) {
        let lk = lookup_key(uk, 1 << 40);
        let _ = table.get(uk, &lk);
        if it.seek(&lk).is_ok() && it.valid() {
            let _ = it.prev();
        }
        if it.seek_for_prev(&lk).is_ok() && it.valid() {
            let _ = it.next();
        }
    }
});
