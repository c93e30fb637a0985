//! Fuzzes the MANIFEST decoder: record framing and version-edit decoding of arbitrary bytes.

#![no_main]

use std::path::Path;

use cairn_kv::internals::log::read_log;
use cairn_kv::internals::VersionEdit;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((records, _)) = read_log(data, Path::new("MANIFEST"), *b"CAIRNMAN") {
        for (_, payload) in records {
            let _ = VersionEdit::decode(&payload);
        }
    }
    if let Ok(edit) = VersionEdit::decode(data) {
        // Whatever decodes must encode back to something that decodes to the same edit.
        let mut out = Vec::new();
        edit.encode(&mut out);
        assert_eq!(VersionEdit::decode(&out).ok(), Some(edit));
    }
});
