//! FIQL filters and index-key scalars: arbitrary text never panics the parser or the
//! evaluator; arbitrary bytes never panic the scalar decoder, and what decodes re-encodes to
//! the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::json;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data)
        && let Ok(e) = cairn_tables::fiql::parse(s)
    {
        let rec = json!({"a": 1, "b": "x*y", "c": [1, "z", null], "d": {"e": true}});
        e.matches(&rec);
    }
    if let Some((v, n)) = cairn_tables::keys::decode_scalar(data) {
        let mut b = Vec::new();
        cairn_tables::keys::encode_scalar(&v, &mut b).expect("decoded scalars encode");
        assert_eq!(&b[..], &data[..n]);
    }
});
