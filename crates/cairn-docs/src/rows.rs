//! The memory's rows in the engine (the `docs` keyspace, physical prefix `docs/`; keys below
//! are relative to it; see docs/format/docs.md) and their encodings. Records are one format
//! byte followed by JSON.

use std::collections::{BTreeMap, BTreeSet};

use cairn_cas::Id;
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// `docs/d/<id u64 BE>` -> [`DocRecord`].
pub const DOC: &[u8] = b"d/";
/// `docs/v/<id u64 BE><version u32 BE>` -> [`VersionRecord`].
pub const VERSION: &[u8] = b"v/";
/// `docs/p/<path>` -> id (u64 BE).
pub const PATH: &[u8] = b"p/";
/// `docs/t/<tag> 0x00 <id u64 BE>` -> empty.
pub const TAG: &[u8] = b"t/";
/// `docs/m/<key> 0x00 <value> 0x00 <id u64 BE>` -> empty.
pub const META: &[u8] = b"m/";
/// `docs/q/<seq u64 BE>` -> id (u64 BE): a document whose index entry must be redone.
pub const QUEUE: &[u8] = b"q/";

/// `docs/e/<seq u64 BE>` -> id (u64 BE): a document whose passage vectors must be redone
/// (written with the document's change while a model is enabled; see [`crate::semantic`]).
pub const EMBED_QUEUE: &[u8] = b"e/";
/// `docs/x/<id u64 BE><passage u32 BE>` -> a passage vector ([`crate::semantic`],
/// docs/format/docs.md).
pub const VECTOR: &[u8] = b"x/";
/// `docs/s/model` -> the model the stored vectors were made by (JSON record).
pub const SEMANTIC_MODEL: &[u8] = b"s/model";

/// `docs/u/<id u64 BE>` -> empty: a text document whose current content the n-gram index does
/// not cover (too large, not UTF-8 throughout, or left out because its content cannot be read):
/// grep reads it whatever the pattern ([`crate::ngram`]).
pub const SCAN: &[u8] = b"u/";

/// Format byte of the JSON records.
pub const FORMAT: u8 = 1;

/// A document's current state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DocRecord {
    /// Document id.
    pub id: u64,
    /// Its path (unique among documents): a file's absolute path, or a name. A file name that
    /// is not UTF-8 shows each byte that is not as `\xHH` ([`display_path`]); its bytes are
    /// in `raw_path`.
    pub path: String,
    /// The path's bytes in base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_path: Option<String>,
    /// Current version (versions are numbered from 1).
    pub version: u32,
    /// Blob id of the current content, hex.
    pub hash: String,
    /// Size of the current content in bytes.
    pub size: u64,
    /// MIME type of the current content.
    pub mime: String,
    /// Title found in the content, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Whether the current content is in the full-text index.
    pub indexed: bool,
    /// When the document was first added (microseconds since the Unix epoch).
    pub created: i64,
    /// When its content, tags or metadata last changed (microseconds since the Unix epoch).
    pub updated: i64,
    /// Tags.
    #[serde(default)]
    pub tags: BTreeSet<String>,
    /// Key/value metadata.
    #[serde(default)]
    pub meta: BTreeMap<String, String>,
}

/// One version of a document's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VersionRecord {
    /// Version number, from 1.
    pub version: u32,
    /// Blob id, hex.
    pub hash: String,
    /// Size in bytes.
    pub size: u64,
    /// MIME type.
    pub mime: String,
    /// When this version was added (microseconds since the Unix epoch).
    pub added: i64,
}

/// Encodes a record: the format byte, then JSON.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    let mut b = vec![FORMAT];
    // Serializing these plain structs to a Vec cannot fail.
    serde_json::to_writer(&mut b, v).expect("record serializes");
    b
}

/// Decodes a record stored under `key` (named in errors).
pub fn decode<T: for<'de> Deserialize<'de>>(key: &[u8], b: &[u8]) -> Result<T> {
    let corrupt = |msg: String| Error::Corrupt { key: String::from_utf8_lossy(key).escape_debug().to_string(), msg };
    match b.split_first() {
        Some((&FORMAT, rest)) => serde_json::from_slice(rest).map_err(|e| corrupt(e.to_string())),
        Some((f, _)) => Err(corrupt(format!("unknown record format {f}"))),
        None => Err(corrupt("empty record".into())),
    }
}

pub(crate) fn doc_key(id: u64) -> Vec<u8> {
    [DOC, &id.to_be_bytes()].concat()
}

pub(crate) fn version_key(id: u64, version: u32) -> Vec<u8> {
    [VERSION, &id.to_be_bytes(), &version.to_be_bytes()].concat()
}

pub(crate) fn versions_prefix(id: u64) -> Vec<u8> {
    [VERSION, &id.to_be_bytes()].concat()
}

pub(crate) fn path_key(path: &[u8]) -> Vec<u8> {
    [PATH, path].concat()
}

/// A path's bytes as text: UTF-8 as it is, every byte that is not valid UTF-8 as `\xHH`.
pub fn display_path(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(chunk.valid());
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// The bytes a [`display_path`] names, when it has `\xHH` escapes (`None` otherwise, or when
/// an escape is malformed).
pub fn path_from_display(s: &str) -> Option<Vec<u8>> {
    if !s.contains("\\x") {
        return None;
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') {
            let hex = std::str::from_utf8(b.get(i + 2..i + 4)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

impl DocRecord {
    /// The bytes of its path (its identity among documents).
    pub fn key(&self) -> Vec<u8> {
        use base64::Engine;
        match &self.raw_path {
            Some(b) => {
                base64::engine::general_purpose::STANDARD.decode(b).unwrap_or_else(|_| self.path.as_bytes().to_vec())
            }
            None => self.path.as_bytes().to_vec(),
        }
    }
}

/// `raw_path` for path bytes: base64 when they are not UTF-8.
pub(crate) fn raw_path(key: &[u8]) -> Option<String> {
    use base64::Engine;
    std::str::from_utf8(key).is_err().then(|| base64::engine::general_purpose::STANDARD.encode(key))
}

pub(crate) fn tag_prefix(tag: &str) -> Vec<u8> {
    [TAG, tag.as_bytes(), &[0]].concat()
}

pub(crate) fn tag_key(tag: &str, id: u64) -> Vec<u8> {
    [tag_prefix(tag).as_slice(), &id.to_be_bytes()].concat()
}

pub(crate) fn meta_prefix(key: &str, value: &str) -> Vec<u8> {
    [META, key.as_bytes(), &[0], value.as_bytes(), &[0]].concat()
}

pub(crate) fn meta_key(key: &str, value: &str, id: u64) -> Vec<u8> {
    [meta_prefix(key, value).as_slice(), &id.to_be_bytes()].concat()
}

pub(crate) fn scan_key(id: u64) -> Vec<u8> {
    [SCAN, &id.to_be_bytes()].concat()
}

pub(crate) fn queue_key(seq: u64) -> Vec<u8> {
    [QUEUE, &seq.to_be_bytes()].concat()
}

pub(crate) fn embed_queue_key(seq: u64) -> Vec<u8> {
    [EMBED_QUEUE, &seq.to_be_bytes()].concat()
}

/// The trailing big-endian u64 of an index row key.
pub(crate) fn trailing_id(key: &[u8]) -> Result<u64> {
    key.len()
        .checked_sub(8)
        .and_then(|at| key[at..].try_into().ok())
        .map(u64::from_be_bytes)
        .ok_or_else(|| Error::Corrupt { key: String::from_utf8_lossy(key).into(), msg: "key too short".into() })
}

pub(crate) fn id_value(key: &[u8], v: &[u8]) -> Result<u64> {
    v.try_into()
        .map(u64::from_be_bytes)
        .map_err(|_| Error::Corrupt { key: String::from_utf8_lossy(key).into(), msg: "id is not 8 bytes".into() })
}

pub(crate) fn parse_hash(key: &str, hex: &str) -> Result<Id> {
    let mut b = [0u8; 32];
    let ok =
        hex.len() == 64 && (0..32).all(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map(|x| b[i] = x).is_ok());
    if ok { Ok(Id(b)) } else { Err(Error::Corrupt { key: key.into(), msg: format!("bad blob id {hex:?}") }) }
}

/// Tags and metadata keys/values may not contain NUL (it separates index row key parts) and may
/// not be empty (tags, keys).
pub(crate) fn check_label(what: &str, s: &str, allow_empty: bool) -> Result<()> {
    if s.contains('\0') || (!allow_empty && s.is_empty()) || s.len() > 1024 {
        return Err(Error::InvalidArgument(format!("{what} {s:?} must be 1..=1024 bytes without NUL")));
    }
    Ok(())
}

/// Microseconds since the Unix epoch, now.
pub fn now_micros() -> i64 {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    d.as_micros() as i64
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

/// RFC 3339 UTC rendering of microseconds since the epoch (`2026-11-23T10:04:05Z`).
pub fn format_time(micros: i64) -> String {
    let secs = micros.div_euclid(1_000_000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", sod / 3600, sod / 60 % 60, sod % 60)
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS]Z` (UTC) or Unix seconds into microseconds.
pub fn parse_time(s: &str) -> Result<i64> {
    let bad = || Error::InvalidArgument(format!("time {s:?}: use YYYY-MM-DD, YYYY-MM-DDTHH:MM:SSZ or Unix seconds"));
    if let Ok(secs) = s.parse::<i64>() {
        return secs.checked_mul(1_000_000).ok_or_else(bad);
    }
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t.trim_end_matches('Z'))),
        None => (s, None),
    };
    let mut it = date.split('-');
    let (y, m, d) = match (it.next(), it.next(), it.next(), it.next()) {
        (Some(y), Some(m), Some(d), None) => (y, m, d),
        _ => return Err(bad()),
    };
    let (y, m, d): (i64, u32, u32) =
        (y.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?, d.parse().map_err(|_| bad())?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || !(0..=9999).contains(&y) {
        return Err(bad());
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    if let Some(t) = time {
        let f: Vec<&str> = t.split(':').collect();
        if !(2..=3).contains(&f.len()) {
            return Err(bad());
        }
        let v: Vec<i64> =
            f.iter().map(|x| x.parse::<i64>()).collect::<std::result::Result<_, _>>().map_err(|_| bad())?;
        if v[0] > 23 || v[1] > 59 || v.get(2).is_some_and(|s| *s > 60) {
            return Err(bad());
        }
        secs += v[0] * 3600 + v[1] * 60 + v.get(2).copied().unwrap_or(0);
    }
    Ok(secs * 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(parse_time("2026-11-23").unwrap(), 1_795_392_000 * 1_000_000);
        let t = parse_time("2024-02-29T13:45:07Z").unwrap();
        assert_eq!(format_time(t), "2024-02-29T13:45:07Z");
        assert_eq!(parse_time("1700000000").unwrap(), 1_700_000_000_000_000);
        for bad in ["", "2024-13-01", "2024-1", "x", "2024-01-01T25:00Z", "2024-01-01-01"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn civil_days_round_trip(days in -1_000_000i64..1_000_000) {
            let (y, m, d) = civil_from_days(days);
            proptest::prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn record_decoder_rejects_garbage(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = decode::<DocRecord>(b"k", &b);
        }
    }

    #[test]
    fn display_paths_round_trip_what_is_not_utf8() {
        assert_eq!(display_path(b"caf\xe9.txt"), "caf\\xe9.txt");
        assert_eq!(display_path("café.txt".as_bytes()), "café.txt");
        assert_eq!(path_from_display("caf\\xe9.txt").unwrap(), b"caf\xe9.txt");
        assert_eq!(path_from_display("plain"), None);
        assert_eq!(path_from_display("bad\\xzz"), None);
    }

    proptest::proptest! {
        #[test]
        fn display_paths_of_bytes_round_trip(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let shown = display_path(&b);
            let back = path_from_display(&shown).unwrap_or_else(|| shown.as_bytes().to_vec());
            // Invalid UTF-8 comes back exactly, unless it also holds a literal `\x` (then the
            // document is found by its bytes, as a command line gives them).
            if std::str::from_utf8(&b).is_err() && !b.windows(2).any(|w| w == b"\\x") {
                proptest::prop_assert_eq!(back, b);
            }
        }
    }

    #[test]
    fn records_round_trip() {
        let v = VersionRecord { version: 3, hash: "ab".repeat(32), size: 9, mime: "text/plain".into(), added: 5 };
        let b = encode(&v);
        assert_eq!(decode::<VersionRecord>(b"k", &b).unwrap(), v);
        assert!(matches!(decode::<VersionRecord>(b"k", &b[..b.len() - 1]), Err(Error::Corrupt { .. })));
        assert!(matches!(decode::<VersionRecord>(b"k", &[2, b'{', b'}']), Err(Error::Corrupt { .. })));
        assert!(parse_hash("k", &v.hash).is_ok());
        assert!(parse_hash("k", "zz").is_err());
    }
}
