//! Stored records (docs/format/tables.md): a format byte, the version, then the JSON object.
//!
//! Format 2, written by every write: `0x02`, the version (u64 little-endian), the byte length of
//! the attribute table (varint), the table (per top-level attribute a varint pair: length of the
//! key as written, length of the value's text), then the object as compact JSON text whose
//! attribute i is `"key":value`.
//! The table finds any attribute without reading the others, so a filter or an index update
//! parses only the attributes it reads. Format 1 (`0x01`, the version, JSON text) is still read;
//! its attributes are found by a scan that skips the others without building them.
//!
//! Every decoder here answers the same for the same bytes: [`decode`] builds each attribute the
//! way [`decode_roots`] builds the few it is asked for, so a filter evaluated on a partial
//! decoding agrees with the whole record, damaged or not.

use cairn_kv::coding::{get_varint, put_varint};
use serde_json::{Map, Value};
use smallvec::SmallVec;

use crate::fiql::{self, Attr, Scalar};
use crate::{Error, Record, Result};

const V1: u8 = 1;
const V2: u8 = 2;

/// Encodes record `m` at `version`.
pub fn encode(version: u64, m: &Map<String, Value>) -> Vec<u8> {
    let mut table = Vec::with_capacity(3 * m.len());
    let mut text = Vec::with_capacity(256);
    text.push(b'{');
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 {
            text.push(b',');
        }
        let s = text.len();
        serde_json::to_writer(&mut text, k).expect("strings serialize");
        put_varint(&mut table, (text.len() - s - 2) as u64);
        text.push(b':');
        let s = text.len();
        serde_json::to_writer(&mut text, v).expect("JSON values serialize");
        put_varint(&mut table, (text.len() - s) as u64);
    }
    text.push(b'}');
    let mut b = Vec::with_capacity(12 + table.len() + text.len());
    b.push(V2);
    b.extend_from_slice(&version.to_le_bytes());
    put_varint(&mut b, table.len() as u64);
    b.extend_from_slice(&table);
    b.extend_from_slice(&text);
    b
}

/// The version of stored record `b` (row key `key`, for errors), without decoding the rest.
pub fn version(key: &[u8], b: &[u8]) -> Result<u64> {
    if b.len() < 9 || !matches!(b[0], V1 | V2) {
        return Err(Error::corrupt(key, "bad record header"));
    }
    Ok(u64::from_le_bytes(b[1..9].try_into().expect("8 bytes")))
}

/// Decodes stored record `b` whole.
pub fn decode(key: &[u8], b: &[u8]) -> Result<Record> {
    let version = version(key, b)?;
    let data = match b[0] {
        // Records are objects (every write checks): anything else is damage.
        V1 => match serde_json::from_slice(&b[9..]).map_err(|e| Error::corrupt(key, e.to_string()))? {
            v @ Value::Object(_) => v,
            _ => return Err(Error::corrupt(key, "record is not an object")),
        },
        _ => {
            let mut out = Map::new();
            attrs(&b[9..], |raw, v| {
                out.insert(name(raw)?, value(v)?);
                Ok(())
            })
            .map_err(|e| Error::corrupt(key, e))?;
            Value::Object(out)
        }
    };
    Ok(Record { version, data })
}

/// The top-level attributes `roots` of stored record `b`, the others not built: enough to
/// evaluate a filter, or to find the index entries, that read only those. In format 1 skipped
/// values are only delimited (strings by `memchr`), not validated; [`crate::Tables::verify`]
/// decodes every record whole.
pub fn decode_roots(key: &[u8], b: &[u8], roots: &[String]) -> Result<Value> {
    version(key, b)?;
    match b[0] {
        V1 => sparse::object(&b[9..], roots),
        _ => {
            let mut out = Map::new();
            attrs(&b[9..], |raw, v| {
                if let Some(i) = root_index(roots, raw)? {
                    out.insert(roots[i].clone(), value(v)?);
                }
                Ok(())
            })
            .map(|()| Value::Object(out))
        }
    }
    .map_err(|e| Error::corrupt(key, e))
}

/// Whether stored record `b` matches filter `e`, whose [`fiql::Expr::roots`] are `roots`: only
/// those attributes are read, and in format 2 a scalar one is compared where it lies, without
/// being built. Answers as `e.matches` on [`decode`]'s record whenever that decodes.
pub fn matches(key: &[u8], b: &[u8], e: &fiql::Expr, roots: &[String]) -> Result<bool> {
    version(key, b)?;
    if b[0] == V1 {
        return Ok(e.matches(&decode_roots(key, b, roots)?));
    }
    static ABSENT: Attr<'static> = Attr::Absent;
    let mut found: SmallVec<[Attr<'_>; 4]> = smallvec::smallvec![Attr::Absent; roots.len()];
    attrs(&b[9..], |raw, v| {
        if let Some(i) = root_index(roots, raw)? {
            found[i] = attr(v)?;
        }
        Ok(())
    })
    .map_err(|e| Error::corrupt(key, e))?;
    Ok(e.matches_attrs(&|n| roots.iter().position(|r| r == n).map_or(&ABSENT, |i| &found[i])))
}

/// A value's text read without a parser where that is exact: text without escapes (validated
/// as UTF-8), `true`, `false`, `null`; numbers go through serde_json's number parser alone.
enum Quick<'a> {
    Str(&'a str),
    Bool(bool),
    Null,
    Number(serde_json::Number),
}

fn quick(v: &[u8]) -> Option<Quick<'_>> {
    match v {
        [b'"', s @ .., b'"'] if plain(s) => std::str::from_utf8(s).ok().map(Quick::Str),
        b"true" => Some(Quick::Bool(true)),
        b"false" => Some(Quick::Bool(false)),
        b"null" => Some(Quick::Null),
        [b'-' | b'0'..=b'9', ..] => serde_json::from_slice(v).ok().map(Quick::Number),
        _ => None,
    }
}

/// Whether `s` has no `"`, `\\` or control character: the text of a JSON string that needs no
/// unescaping. Eight bytes at a time (each test is exact for the word as a whole).
fn plain(s: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH != 0;
    let mut words = s.chunks_exact(8);
    for w in &mut words {
        let x = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        if below(x, 0x20) || below(x ^ (ONES * b'"' as u64), 1) || below(x ^ (ONES * b'\\' as u64), 1) {
            return false;
        }
    }
    words.remainder().iter().all(|&c| c >= 0x20 && c != b'"' && c != b'\\')
}

/// An attribute's value text as a filter reads it: scalars in place, the rest built.
fn attr(v: &[u8]) -> std::result::Result<Attr<'_>, String> {
    Ok(Attr::Scalar(match quick(v) {
        Some(Quick::Str(s)) => Scalar::Str(s),
        Some(Quick::Bool(b)) => Scalar::Bool(b),
        Some(Quick::Null) => Scalar::Null,
        Some(Quick::Number(n)) => match n.as_f64() {
            Some(f) => Scalar::Number(f),
            None => return value(v).map(Attr::Value),
        },
        None => return value(v).map(Attr::Value),
    }))
}

/// A value built from its text (scalars without the general parser).
fn value(v: &[u8]) -> std::result::Result<Value, String> {
    Ok(match quick(v) {
        Some(Quick::Str(s)) => Value::String(s.to_owned()),
        Some(Quick::Bool(b)) => Value::Bool(b),
        Some(Quick::Null) => Value::Null,
        Some(Quick::Number(n)) => Value::Number(n),
        None => return serde_json::from_slice(v).map_err(|e| e.to_string()),
    })
}

/// An attribute name from its text between the quotes.
fn name(raw: &[u8]) -> std::result::Result<String, String> {
    if !raw.contains(&b'\\') {
        if raw.iter().any(|&c| c < 0x20 || c == b'"') {
            return Err("bad attribute name".into());
        }
        return String::from_utf8(raw.to_vec()).map_err(|e| e.to_string());
    }
    let mut quoted = Vec::with_capacity(raw.len() + 2);
    quoted.push(b'"');
    quoted.extend_from_slice(raw);
    quoted.push(b'"');
    serde_json::from_slice(&quoted).map_err(|e| e.to_string())
}

/// Calls `f` with each attribute (key text between its quotes, value text) of a format-2 body
/// (what follows the version), checking that the table and the text agree; an error after
/// some calls means the record is damaged and what `f` saw must be dropped.
fn attrs<'a>(
    body: &'a [u8],
    mut f: impl FnMut(&'a [u8], &'a [u8]) -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    const BAD: &str = "bad attribute table";
    #[inline(always)]
    fn varint(b: &[u8], at: &mut usize) -> Option<usize> {
        let (v, used) = match b.get(*at) {
            Some(&x) if x < 0x80 => (x as u64, 1),
            _ => get_varint(b.get(*at..)?)?,
        };
        *at += used;
        usize::try_from(v).ok()
    }
    let mut at = 0;
    let len = varint(body, &mut at).ok_or(BAD)?;
    let table = body.get(at..at.checked_add(len).ok_or(BAD)?).ok_or(BAD)?;
    let text = &body[at + len..];
    if text.len() < 2 || text[0] != b'{' || text[text.len() - 1] != b'}' {
        return Err("record text is not an object".into());
    }
    // Attribute i is `"key":value` at text[p..stop], then ',' or the closing brace at `end`.
    let end = text.len() - 1;
    let (mut t, mut p) = (0, 1);
    while t < table.len() {
        let (k, v) = (varint(table, &mut t).ok_or(BAD)?, varint(table, &mut t).ok_or(BAD)?);
        if p > 1 {
            if text[p] != b',' {
                return Err(format!("expected ',' at byte {p} of the record text"));
            }
            p += 1;
        }
        let stop = k.checked_add(v).and_then(|n| n.checked_add(p + 3)).filter(|&s| s <= end).ok_or(BAD)?;
        if text[p] != b'"' || text[p + 1 + k] != b'"' || text[p + 2 + k] != b':' {
            return Err(format!("attribute at byte {p} is not where the table puts it"));
        }
        f(&text[p + 1..p + 1 + k], &text[p + 3 + k..stop])?;
        p = stop;
    }
    if p != end {
        return Err("attribute table does not match the record text".into());
    }
    Ok(())
}

/// Where attribute text `raw` (between its quotes) is in `roots`.
fn root_index(roots: &[String], raw: &[u8]) -> std::result::Result<Option<usize>, String> {
    if raw.contains(&b'\\') {
        let n = name(raw)?;
        return Ok(roots.iter().position(|r| *r == n));
    }
    Ok(roots.iter().position(|r| r.len() == raw.len() && r.as_bytes() == raw))
}

impl fiql::Expr {
    /// Whether the JSON object text `json` matches, building only the top-level attributes the
    /// filter reads (the others are delimited, not validated).
    pub fn matches_json(&self, json: &[u8]) -> std::result::Result<bool, String> {
        Ok(self.matches(&sparse::object(json, &self.roots())?))
    }
}

mod sparse {
    use serde_json::{Map, Value};

    fn ws(b: &[u8], mut i: usize) -> usize {
        while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        i
    }

    fn expect(b: &[u8], i: usize, c: u8) -> Result<usize, String> {
        if b.get(i) == Some(&c) { Ok(i + 1) } else { Err(format!("expected {:?} at byte {i}", c as char)) }
    }

    /// The end of the string whose opening quote is at `i`, and whether it holds escapes.
    fn string(b: &[u8], i: usize) -> Result<(usize, bool), String> {
        let mut j = expect(b, i, b'"')?;
        let mut escaped = false;
        loop {
            // Attribute names and most values are short: look at a few bytes before memchr.
            let near = b.len().min(j + 16);
            let found = match b[j..near].iter().position(|&c| c == b'"' || c == b'\\') {
                Some(n) => Some(n),
                None => memchr::memchr2(b'"', b'\\', &b[near..]).map(|n| n + near - j),
            };
            match found {
                Some(n) if b[j + n] == b'"' => return Ok((j + n + 1, escaped)),
                Some(n) => {
                    escaped = true;
                    j += n + 2;
                    if j > b.len() {
                        break;
                    }
                }
                None => break,
            }
        }
        Err(format!("unterminated string at byte {i}"))
    }

    /// The end of the value starting at `i`.
    fn skip(b: &[u8], i: usize) -> Result<usize, String> {
        let mut depth = 0usize;
        let mut j = i;
        loop {
            match b.get(j) {
                Some(b'"') => j = string(b, j)?.0,
                Some(b'{' | b'[') => {
                    depth += 1;
                    j += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    j += 1;
                }
                Some(b',' | b':' | b' ' | b'\n' | b'\r' | b'\t') if depth > 0 => j += 1,
                Some(c) if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.') => {
                    while b.get(j).is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.')) {
                        j += 1;
                    }
                }
                _ if j == i => return Err(format!("expected a value at byte {i}")),
                Some(_) if depth == 0 => return Ok(j),
                _ => return Err(format!("bad value at byte {j}")),
            }
            if depth == 0 {
                return Ok(j);
            }
        }
    }

    /// The attributes `roots` of the JSON object `b` (few: compared one by one).
    pub(super) fn object(b: &[u8], roots: &[String]) -> Result<Value, String> {
        let mut out = Map::new();
        let mut i = expect(b, ws(b, 0), b'{')?;
        i = ws(b, i);
        if b.get(i) == Some(&b'}') {
            i += 1;
        } else {
            loop {
                let (end, escaped) = string(b, i)?;
                let name: Option<std::borrow::Cow<'_, str>> = if escaped {
                    let n = serde_json::from_slice::<String>(&b[i..end]).map_err(|e| e.to_string())?;
                    roots.contains(&n).then(|| n.into())
                } else {
                    let raw = &b[i + 1..end - 1];
                    match roots.iter().any(|r| r.as_bytes() == raw) {
                        true => Some(std::str::from_utf8(raw).map_err(|e| e.to_string())?.into()),
                        false => None,
                    }
                };
                i = expect(b, ws(b, end), b':')?;
                i = ws(b, i);
                if let Some(name) = name {
                    let mut it = serde_json::Deserializer::from_slice(&b[i..]).into_iter::<Value>();
                    let v = it.next().ok_or("expected a value")?.map_err(|e| e.to_string())?;
                    i += it.byte_offset();
                    out.insert(name.into_owned(), v);
                } else {
                    i = skip(b, i)?;
                }
                i = ws(b, i);
                match b.get(i) {
                    Some(b',') => i = ws(b, i + 1),
                    Some(b'}') => {
                        i += 1;
                        break;
                    }
                    _ => return Err(format!("expected ',' or '}}' at byte {i}")),
                }
            }
        }
        if ws(b, i) != b.len() {
            return Err(format!("trailing bytes at byte {i}"));
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..5).prop_map(Value::from),
            (-5i64..5).prop_map(|n| Value::from(n as f64 + 0.5)),
            "[ab\"\\\\é\n]{0,3}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 16, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                proptest::collection::btree_map("[ab\"]{1,2}", inner, 0..3)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn object() -> impl Strategy<Value = Value> {
        proptest::collection::btree_map("[ab\"\\\\\n]{0,3}", json_value(), 0..6)
            .prop_map(|m| Value::Object(m.into_iter().collect()))
    }

    fn project(v: &Value, roots: &[String]) -> Value {
        let m = v.as_object().expect("object");
        Value::Object(m.iter().filter(|(k, _)| roots.contains(k)).map(|(k, v)| (k.clone(), v.clone())).collect())
    }

    proptest! {
        /// Format 2 gives back the object and version written, whole or by attribute.
        #[test]
        fn records_round_trip(obj in object(), version in any::<u64>(),
                              roots in proptest::collection::btree_set("[ab\"\\\\\n]{0,3}", 0..3)) {
            let b = encode(version, obj.as_object().unwrap());
            prop_assert_eq!(b[0], V2);
            let r = decode(b"k", &b).unwrap();
            prop_assert_eq!(r.version, version);
            prop_assert_eq!(&r.data, &obj);
            prop_assert_eq!(super::version(b"k", &b).unwrap(), version);
            let roots: Vec<String> = roots.into_iter().collect();
            prop_assert_eq!(decode_roots(b"k", &b, &roots).unwrap(), project(&obj, &roots));
            // The text after the table is the object as JSON.
            let text = &b[b.len() - serde_json::to_vec(&obj).unwrap().len()..];
            prop_assert_eq!(serde_json::from_slice::<Value>(text).unwrap(), obj);
        }

        /// Damaged format-2 records never panic, and whatever decodes whole decodes by
        /// attribute to the same values (a filter cannot tell the two apart).
        #[test]
        fn damaged_records_decode_consistently(obj in object(), at in any::<prop::sample::Index>(),
                                               byte in any::<u8>(), cut in any::<prop::sample::Index>(),
                                               roots in proptest::collection::btree_set("[ab\"]{1,2}", 0..3)) {
            let good = encode(7, obj.as_object().unwrap());
            let mut flipped = good.clone();
            flipped[at.index(good.len())] = byte;
            let roots: Vec<String> = roots.into_iter().collect();
            let e = fiql::parse("a==b*;b=gt=1,a=in=(null,true,'x')").unwrap();
            for b in [&flipped[..], &good[..cut.index(good.len())]] {
                let part = decode_roots(b"k", b, &roots);
                let m = matches(b"k", b, &e, &e.roots());
                if let Ok(r) = decode(b"k", b) {
                    prop_assert_eq!(part.unwrap(), project(&r.data, &roots));
                    prop_assert_eq!(m.unwrap(), e.matches(&r.data));
                }
            }
        }
    }

    proptest! {
        /// The word-at-a-time test agrees with the byte-by-byte one.
        #[test]
        fn plain_text_is_found_exactly(s in proptest::collection::vec(
            prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x20, 0x20u8..=0xFF, Just(0x7F), Just(0x80)], 0..40)) {
            prop_assert_eq!(plain(&s), s.iter().all(|&c| c >= 0x20 && c != b'"' && c != b'\\'));
        }
    }

    #[test]
    fn format_2_rejects_tables_that_disagree_with_the_text() {
        let good = encode(1, serde_json::json!({"a": 1, "bb": "x"}).as_object().unwrap());
        // [2][version 8][table length 4][1,1][2,3]{"a":1,"bb":"x"}
        assert_eq!(&good[9..14], &[4, 1, 1, 2, 3]);
        for (at, byte) in [(9, 3u8), (9, 5), (9, 2), (9, 0x80), (10, 2), (11, 2), (12, 1), (13, 2), (13, 0x80)] {
            let mut b = good.clone();
            b[at] = byte;
            assert!(decode(b"k", &b).is_err(), "table byte {at} = {byte}");
            assert!(decode_roots(b"k", &b, &["bb".into()]).is_err(), "table byte {at} = {byte}");
        }
        for at in 14..good.len() {
            if good[at].is_ascii_alphanumeric() {
                continue; // a changed name or value can still be a valid record
            }
            let mut b = good.clone();
            b[at] = b' ';
            assert!(decode(b"k", &b).is_err(), "text byte {at}");
        }
    }

    proptest! {
        /// A filter gives the same answer on the sparse decoding as on the whole record.
        #[test]
        fn sparse_records_match_like_whole_ones(
            attrs in proptest::collection::vec(("[ab\"]{1,2}", json_value()), 0..5),
            filter in "[ab](\\.[ab])?(==|!=|=lt=|=ge=|=in=\\()(-?[0-9](\\.5)?|a|b\\*|\\*\"|true|null|'a\\\\\"')(\\))?\
                       ([;,][ab](==|=gt=|=le=)[0-9a])?",
        ) {
            // Written by hand so that a key can repeat (the last one wins, as in serde_json).
            let body: Vec<String> = attrs.iter().map(|(k, v)| format!("{}:{v}", Value::from(k.as_str()))).collect();
            let mut b = vec![1u8];
            b.extend_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(format!("{{{}}}", body.join(",")).as_bytes());
            let whole = decode(b"k", &b).unwrap().data;
            let Ok(e) = fiql::parse(&filter) else { return Ok(()) };
            let sparse = decode_roots(b"k", &b, &e.roots()).unwrap();
            prop_assert_eq!(e.matches(&sparse), e.matches(&whole), "{} on {}", filter, whole);
            prop_assert_eq!(matches(b"k", &b, &e, &e.roots()).unwrap(), e.matches(&whole));
            // Format 2 (keys unique): scalars compared in place answer the same.
            let b = encode(1, whole.as_object().unwrap());
            prop_assert_eq!(matches(b"k", &b, &e, &e.roots()).unwrap(), e.matches(&whole), "{} on {}", filter, whole);
        }
    }

    proptest! {
        #[test]
        fn sparse_decoding_of_garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..64),
                                                   json in "[{}\\[\\]\":,ab1 \\\\]{0,40}") {
            for body in [&b[..], json.as_bytes()] {
                let mut rec = vec![1u8];
                rec.extend_from_slice(&1u64.to_le_bytes());
                rec.extend_from_slice(body);
                let _ = decode_roots(b"k", &rec, &["a".into()]);
                // Whatever the whole decoding accepts as an object, the sparse one accepts too.
                if let Ok(Value::Object(_)) = serde_json::from_slice::<Value>(body) {
                    prop_assert!(decode_roots(b"k", &rec, &["a".into()]).is_ok());
                }
            }
        }
    }

    #[test]
    fn sparse_decoding_rejects_what_whole_decoding_rejects() {
        // Records are objects (every write checks), so an array is damage too.
        for bad in [&b"{\"a\":1"[..], b"{\"a\":1} x", b"[1]", b"", b"{\"a\":tru}"] {
            let mut b = vec![1u8];
            b.extend_from_slice(&1u64.to_le_bytes());
            b.extend_from_slice(bad);
            assert!(decode_roots(b"k", &b, &["a".into()]).is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert!(decode(b"k", &b).is_err());
        }
        assert!(decode_roots(b"k", b"\x02short", &[]).is_err());
    }
}
