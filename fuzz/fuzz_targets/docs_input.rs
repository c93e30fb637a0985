//! Fuzzes what the document memory decodes from untrusted bytes: stored records (format byte +
//! JSON), kind detection, text extraction (HTML, JSON, Markdown) and the analyzer over the
//! extracted text. Nothing may panic; records that decode must round-trip.

#![no_main]

use cairn_docs::extract::{Kind, detect, extract};
use cairn_docs::rows::{DocRecord, VersionRecord, decode, encode};
use libfuzzer_sys::fuzz_target;
use tantivy::tokenizer::TokenStream;

const KINDS: [Kind; 6] = [Kind::Text, Kind::Markdown, Kind::Code, Kind::Html, Kind::Json, Kind::Binary];

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = decode::<DocRecord>(b"k", data) {
        assert_eq!(decode::<DocRecord>(b"k", &encode(&d)).ok(), Some(d));
    }
    if let Ok(v) = decode::<VersionRecord>(b"k", data) {
        assert_eq!(decode::<VersionRecord>(b"k", &encode(&v)).ok(), Some(v));
    }
    let Some((&pick, content)) = data.split_first() else { return };
    let _ = detect("x", content);
    if let Some(t) = extract(KINDS[pick as usize % KINDS.len()], content) {
        let mut a = cairn_docs::tokenizer::analyzer();
        let mut ts = a.token_stream(&t.body);
        while ts.advance() {
            let tok = ts.token();
            assert!(tok.offset_to <= t.body.len() && tok.offset_from <= tok.offset_to);
        }
    }
});
