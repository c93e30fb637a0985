//! Fuzzes the wire decoders: frames (header checks, length limit, checksum) and the client and
//! server messages inside them. Nothing may panic or allocate beyond the input; whatever
//! decodes must re-encode to the same bytes.

#![no_main]

use cairn_proto::frame::{self, HEADER_LEN};
use cairn_proto::{ClientMsg, ServerMsg};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Raw bytes as a frame stream.
    let mut at = 0;
    while let Ok(Some((f, n))) = frame::decode(&data[at..], 1 << 16) {
        assert!(n >= HEADER_LEN && n <= data.len() - at);
        let mut again = Vec::new();
        frame::encode(&mut again, f.stream, f.flags, &f.payload);
        assert_eq!(&again[..], &data[at..at + n]);
        at += n;
    }
    // Raw bytes as message payloads.
    if let Ok(m) = ClientMsg::decode(data) {
        assert_eq!(ClientMsg::decode(&m.encode()).ok(), Some(m));
    }
    if let Ok(m) = ServerMsg::decode(data) {
        // Floats (search scores) may be NaN, which never equals itself: compare bytes.
        assert_eq!(ServerMsg::decode(&m.encode()).map(|x| x.encode()).ok(), Some(m.encode()));
    }
    // A valid frame around the bytes, so message decoding is reached through the frame path.
    let mut framed = Vec::new();
    frame::encode(&mut framed, 1, 0, data);
    let (f, _) = frame::decode(&framed, u32::MAX).unwrap().unwrap();
    let _ = ClientMsg::decode(&f.payload);
});
