//! FIQL filters and index-key scalars: arbitrary text never panics the parser or the
//! evaluator; arbitrary bytes never panic the scalar decoder, and what decodes re-encodes to
//! the same bytes; a filter evaluated on JSON text through the sparse reader answers as on the
//! whole decoded object, and the sparse reader accepts every object serde_json accepts; arbitrary
//! bytes as a stored record (either format) never panic, and what decodes whole decodes by
//! attribute to the same values and matches the filter read in place as when built.
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
    let f = cairn_tables::fiql::parse("a=gt=0;b==x*,c=in=(z,2),d.e==true").expect("parses");
    let sparse = f.matches_json(data);
    if let Ok(whole @ serde_json::Value::Object(_)) = serde_json::from_slice::<serde_json::Value>(data) {
        assert_eq!(sparse, Ok(f.matches(&whole)));
    }
    let roots: Vec<String> = f.roots();
    let part = cairn_tables::record::decode_roots(b"k", data, &roots);
    let _ = cairn_tables::record::matches(b"k", data, &f, &roots);
    if let Ok(r) = cairn_tables::record::decode(b"k", data) {
        let part = part.expect("what decodes whole decodes by attribute");
        assert_eq!(f.matches(&part), f.matches(&r.data));
        let m = cairn_tables::record::matches(b"k", data, &f, &roots);
        assert_eq!(m.expect("what decodes whole is matched in place"), f.matches(&r.data));
        for k in &roots {
            assert_eq!(part.get(k), r.data.get(k));
        }
    }
    if let Some((v, n)) = cairn_tables::keys::decode_scalar(data) {
        let mut b = Vec::new();
        cairn_tables::keys::encode_scalar(&v, &mut b).expect("decoded scalars encode");
        assert_eq!(&b[..], &data[..n]);
    }
});
