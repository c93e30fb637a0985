//! Fuzzes the write-ahead log decoder: the record framing (`read_log`) over arbitrary bytes, with
//! and without a valid header, and the write-group decoder over every record it accepts.

#![no_main]

use std::path::Path;

use cairn_kv::internals::decode_record;
use cairn_kv::internals::log::{LogWriter, read_log};
use cairn_kv::{MemStorage, Storage};
use libfuzzer_sys::fuzz_target;

const MAGIC: [u8; 8] = *b"CAIRNWAL";

fuzz_target!(|data: &[u8]| {
    // A valid header followed by the fuzzer's bytes.
    let storage = MemStorage::new();
    let p = Path::new("/wal");
    let w = LogWriter::create(storage.create(p).unwrap(), p.into(), MAGIC).unwrap();
    drop(w);
    let mut image = storage.contents(p).unwrap();
    image.extend_from_slice(data);
    for input in [&image[..], data] {
        if let Ok((records, _tail)) = read_log(input, p, MAGIC) {
            for (_, payload) in records {
                let _ = decode_record(&payload);
            }
        }
    }
    // The payload decoder on its own.
    let _ = decode_record(data);
});
