//! Row keys and the order-preserving encoding of JSON scalars (docs/format/tables.md). Keys
//! are relative to the `tables` keyspace (physical prefix `tb/`).
//!
//! - `m/<table>`: the table definition (JSON).
//! - `r/<table>/<pk>`: a record: `0x01`, version (u64 LE), the JSON text.
//! - `g/<table>/<pk>`: the version (u64 LE) a deleted record had.
//! - `i/<table>/<index id u32 BE>/<value><pk>`: a range-index entry (empty value).
//! - `i/<table>/<index id u32 BE>/<xxh3-64 of value, BE><pk>`: a hash-index entry.
//!
//! Scalars encode so byte order is value order: null `01`; false `02`; true `03`; number `04`
//! then the f64's bits (sign bit flipped for positives, every bit for negatives), big-endian;
//! text `05` + the UTF-8 bytes with `00` written `00 FF`, then `00 00`. Each encoding is
//! self-delimiting, so an entry's primary key is what follows its value.

use serde_json::Value;

pub(crate) const META: &[u8] = b"m/";

pub(crate) fn meta_key(table: &str) -> Vec<u8> {
    [META, table.as_bytes()].concat()
}

pub(crate) fn records_prefix(table: &str) -> Vec<u8> {
    [b"r/", table.as_bytes(), b"/"].concat()
}

/// The row of the record with encoded primary key `pk` ([`crate::encode_id`]).
pub fn record_key(table: &str, pk: &[u8]) -> Vec<u8> {
    [&records_prefix(table)[..], pk].concat()
}

/// The row keeping the version of the deleted record with encoded key `pk`, so a record
/// created again under the key continues from it (a client holding the old version cannot
/// write the new record).
pub(crate) fn tombstone_key(table: &str, pk: &[u8]) -> Vec<u8> {
    [&tombstones_prefix(table)[..], pk].concat()
}

pub(crate) fn tombstones_prefix(table: &str) -> Vec<u8> {
    [b"g/", table.as_bytes(), b"/"].concat()
}

pub(crate) fn index_prefix(table: &str, id: u32) -> Vec<u8> {
    [b"i/", table.as_bytes(), b"/", &id.to_be_bytes()[..], b"/"].concat()
}

pub(crate) fn table_index_prefix(table: &str) -> Vec<u8> {
    [b"i/", table.as_bytes(), b"/"].concat()
}

/// Encodes a scalar; `None` for objects and arrays (not indexable).
pub fn encode_scalar(v: &Value, out: &mut Vec<u8>) -> Option<()> {
    match v {
        Value::Null => out.push(1),
        Value::Bool(false) => out.push(2),
        Value::Bool(true) => out.push(3),
        Value::Number(n) => {
            out.push(4);
            out.extend_from_slice(&encode_f64(n.as_f64()?));
        }
        Value::String(s) => {
            out.push(5);
            for &b in s.as_bytes() {
                out.push(b);
                if b == 0 {
                    out.push(0xFF);
                }
            }
            out.extend_from_slice(&[0, 0]);
        }
        _ => return None,
    }
    Some(())
}

/// Order-preserving bytes of a float (-0.0 is stored as 0.0).
pub fn encode_f64(f: f64) -> [u8; 8] {
    let f = if f == 0.0 { 0.0 } else { f };
    let b = f.to_bits();
    let b = if b >> 63 == 1 { !b } else { b | (1 << 63) };
    b.to_be_bytes()
}

/// Decodes one scalar from the front of `b`: the value and the bytes it took.
pub fn decode_scalar(b: &[u8]) -> Option<(Value, usize)> {
    match *b.first()? {
        1 => Some((Value::Null, 1)),
        2 => Some((Value::Bool(false), 1)),
        3 => Some((Value::Bool(true), 1)),
        4 => {
            let raw = u64::from_be_bytes(b.get(1..9)?.try_into().ok()?);
            let bits = if raw >> 63 == 1 { raw & !(1 << 63) } else { !raw };
            let f = f64::from_bits(bits);
            if f == 0.0 && f.is_sign_negative() {
                return None; // -0.0 is always written as 0.0
            }
            let n = if f.fract() == 0.0 && f.abs() < 9.007_199_254_740_992e15 {
                serde_json::Number::from(f as i64)
            } else {
                serde_json::Number::from_f64(f)?
            };
            Some((Value::Number(n), 9))
        }
        5 => {
            let mut s = Vec::new();
            let mut i = 1;
            loop {
                match (*b.get(i)?, b.get(i + 1).copied()) {
                    (0, Some(0)) => break,
                    (0, Some(0xFF)) => {
                        s.push(0);
                        i += 2;
                    }
                    (0, _) => return None,
                    (c, _) => {
                        s.push(c);
                        i += 1;
                    }
                }
            }
            Some((Value::String(String::from_utf8(s).ok()?), i + 2))
        }
        _ => None,
    }
}

/// The hash-index form of a scalar.
pub(crate) fn hash_scalar(v: &Value) -> Option<[u8; 8]> {
    let mut b = Vec::new();
    encode_scalar(v, &mut b)?;
    Some(xxhash_rust::xxh3::xxh3_64(&b).to_be_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn enc(v: &Value) -> Vec<u8> {
        let mut b = Vec::new();
        encode_scalar(v, &mut b).unwrap();
        b
    }

    #[test]
    fn order_and_round_trip() {
        let vals = [
            json!(null),
            json!(false),
            json!(true),
            json!(-1e300),
            json!(-2.5),
            json!(-1),
            json!(0),
            json!(0.5),
            json!(3),
            json!(1e20),
            json!(""),
            json!("a"),
            json!("a\u{0}"),
            json!("a\u{0}b"),
            json!("ab"),
            json!("b"),
        ];
        for w in vals.windows(2) {
            assert!(enc(&w[0]) < enc(&w[1]), "{} < {}", w[0], w[1]);
        }
        for v in &vals {
            let mut b = enc(v);
            b.extend_from_slice(b"tail");
            let (d, n) = decode_scalar(&b).unwrap();
            assert_eq!(&b[n..], b"tail");
            assert_eq!(enc(&d), enc(v));
        }
        assert!(encode_scalar(&json!([1]), &mut Vec::new()).is_none());
    }

    proptest! {
        #[test]
        fn numbers_sort_like_f64(a in any::<f64>().prop_filter("finite", |f| f.is_finite()), b in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let (ea, eb) = (encode_f64(a), encode_f64(b));
            if a < b { prop_assert!(ea < eb) } else if a > b { prop_assert!(ea > eb) }
        }

        #[test]
        fn strings_sort_like_bytes_and_decode(a in "\\PC{0,12}|\u{0}{0,3}", b in "\\PC{0,12}") {
            let (ea, eb) = (enc(&json!(a)), enc(&json!(b)));
            prop_assert_eq!(a.as_bytes().cmp(b.as_bytes()), ea.cmp(&eb));
            prop_assert_eq!(decode_scalar(&ea).unwrap().0, json!(a));
        }

        #[test]
        fn garbage_never_panics(b in proptest::collection::vec(any::<u8>(), 0..24)) {
            let _ = decode_scalar(&b);
        }
    }
}
