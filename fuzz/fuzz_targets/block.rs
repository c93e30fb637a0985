//! Fuzzes the SSTable block decoder: arbitrary bytes go to `Block::new`; a block that validates
//! is walked forward and backward and sought. Nothing may panic or loop forever.

#![no_main]

use std::path::Path;
use std::sync::Arc;

use cairn_kv::internals::Block;
use cairn_kv::internals::InternalIterator;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(block) = Block::new(data.to_vec().into(), Arc::from(Path::new("fuzz")), 0).map(Arc::new) else {
        return;
    };
    // Each entry takes at least 3 bytes, so a walk longer than the block is a bug.
    let limit = block.len() + 1;
    let mut it = block.iter();
    let mut steps = 0;
    if it.seek_to_first().is_ok() {
        while it.valid() && it.next().is_ok() {
            steps += 1;
            assert!(steps <= limit);
        }
    }
    steps = 0;
    if it.seek_to_last().is_ok() {
        while it.valid() && it.prev().is_ok() {
            steps += 1;
            assert!(steps <= limit);
        }
    }
    // Seek to internal keys made of the input's own bytes (targets must be >= 8 bytes).
    for t in data.chunks(11).filter(|c| c.len() >= 8).take(8) {
        if it.seek(t).is_ok() && it.valid() {
            let _ = it.prev();
        }
        if it.seek_for_prev(t).is_ok() && it.valid() {
            let _ = it.next();
        }
    }
});
