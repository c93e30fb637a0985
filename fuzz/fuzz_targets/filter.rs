//! Fuzzes the table filter decoder: arbitrary bytes are decoded as a bloom or binary fuse
//! filter (a fuse trailer is appended to half the inputs so its checks are reached) and probed.
//! Nothing may panic; a filter that does not decode must answer "may contain".

#![no_main]

use bytes::Bytes;
use cairn_kv::internals::TableFilter;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (&first, rest) = match data.split_first() {
        Some(x) => x,
        None => return,
    };
    let mut bytes = rest.to_vec();
    if first & 1 == 1 {
        bytes.push(cairn_kv::internals::fuse::TAG);
    }
    let f = TableFilter::new(Bytes::from(bytes));
    for key in [&b""[..], b"a", b"key00000001", rest] {
        let hit = f.may_contain(key);
        assert!(hit || f.is_well_formed());
    }
});
