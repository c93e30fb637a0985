//! How bytes that may not be text are shown: escaped for terminals (as ripgrep and `xxd` would),
//! and in JSON as a string when they are UTF-8, else base64 under a `_base64` field.

use base64::Engine;

/// `b` for a terminal: UTF-8 text as it is, except control characters and `\` escaped (`\n`,
/// `\t`, `\r`, `\\`, `\xHH`), and every byte of invalid UTF-8 as `\xHH`.
pub fn escape(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                '\r' => out.push_str("\\r"),
                c if c.is_control() => {
                    for byte in c.to_string().bytes() {
                        out.push_str(&format!("\\x{byte:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// Reverses [`escape`]; `None` when `s` holds an escape it does not make.
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1)? {
            b'\\' => out.push(b'\\'),
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'r' => out.push(b'\r'),
            b'x' => {
                let hex = std::str::from_utf8(b.get(i + 2..i + 4)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            _ => return None,
        }
        i += 2;
    }
    Some(out)
}

/// Standard base64 with padding.
pub fn base64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Decodes standard base64 (`what` names the field in the error).
pub fn from_base64(s: &str, what: &str) -> crate::Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| crate::Error::bad_request(format!("{what} is not base64: {e}")))
}

/// Bytes in JSON: `text` when they are UTF-8, else `base64`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Blob {
    /// The bytes as text, when they are UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The bytes in base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

impl Blob {
    /// The JSON form of `b`.
    pub fn of(b: &[u8]) -> Blob {
        match std::str::from_utf8(b) {
            Ok(t) => Blob { text: Some(t.to_string()), base64: None },
            Err(_) => Blob { text: None, base64: Some(base64(b)) },
        }
    }

    /// The bytes (`what` names the field in errors).
    pub fn bytes(&self, what: &str) -> crate::Result<Vec<u8>> {
        match (&self.text, &self.base64) {
            (Some(t), None) => Ok(t.as_bytes().to_vec()),
            (None, Some(b)) => from_base64(b, what),
            _ => Err(crate::Error::bad_request(format!("{what}: give exactly one of text and base64"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escapes_what_a_terminal_should_not_get_raw() {
        assert_eq!(escape(b"plain/key"), "plain/key");
        assert_eq!(escape("café".as_bytes()), "café");
        assert_eq!(escape(b"caf\xe9.txt"), "caf\\xe9.txt");
        assert_eq!(escape(b"a\nb\tc\\d\x1b[31m\x00"), "a\\nb\\tc\\\\d\\x1b[31m\\x00");
    }

    proptest! {
        #[test]
        fn escape_round_trips(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let e = escape(&b);
            prop_assert!(!e.chars().any(|c| c.is_control()));
            prop_assert_eq!(unescape(&e), Some(b));
        }

        #[test]
        fn unescape_never_panics(s in ".{0,40}") {
            let _ = unescape(&s);
        }

        #[test]
        fn blobs_round_trip(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert_eq!(Blob::of(&b).bytes("v").unwrap(), b);
        }
    }
}
