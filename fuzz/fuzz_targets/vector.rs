//! The int8 vector decoder (cairn-embed's `QuantizedVector::decode`): never panics, and what it
//! accepts encodes back to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = cairn_embed::QuantizedVector::decode(data) {
        assert_eq!(v.encode(), data);
        assert_eq!(v.dimension() + cairn_embed::VECTOR_OVERHEAD, data.len());
    }
});
