//! Internal keys: a user key followed by an 8-byte trailer holding the sequence number and the
//! kind of entry. Internal keys sort by user key ascending, then by sequence number descending,
//! so the newest version of a key comes first.
//!
//! Encoding (see `docs/format/kv.md`): `user_key ++ be_u64((seq << 8) | kind)`.

use std::cmp::Ordering;

/// Largest accepted key, in bytes (64 KiB).
pub const MAX_KEY_LEN: usize = 64 << 10;
/// Largest accepted value, in bytes (64 MiB).
pub const MAX_VALUE_LEN: usize = 64 << 20;

/// The 64-bit hash of a user key that filters probe with (`xxh3_64`): the memtables' and the
/// tables' ([`crate::table::filter`]).
pub fn key_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// A sequence number. Only the low 56 bits are usable.
pub type SeqNo = u64;

/// The largest sequence number that fits in an internal key.
pub const MAX_SEQ: SeqNo = (1 << 56) - 1;

/// Length of the trailer appended to every user key.
pub const TRAILER_LEN: usize = 8;

/// What an internal entry says about its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum ValueKind {
    /// A point deletion (tombstone).
    Delete = 0,
    /// A value.
    Put = 1,
}

impl ValueKind {
    /// Decodes a kind byte.
    pub fn from_u8(b: u8) -> Option<ValueKind> {
        match b {
            0 => Some(ValueKind::Delete),
            1 => Some(ValueKind::Put),
            _ => None,
        }
    }
}

/// The kind used when building a lookup key: the highest kind value, so that a lookup key with
/// sequence `s` sorts before (or at) every entry of the same user key with sequence `<= s`.
pub const KIND_FOR_SEEK: u8 = 0xFF;

/// Packs a sequence number and a kind into a trailer value.
#[inline]
pub fn pack_trailer(seq: SeqNo, kind: u8) -> u64 {
    debug_assert!(seq <= MAX_SEQ);
    (seq << 8) | kind as u64
}

/// Appends the internal key for (`user_key`, `seq`, `kind`) to `out`.
#[inline]
pub fn encode_internal_key(out: &mut Vec<u8>, user_key: &[u8], seq: SeqNo, kind: u8) {
    out.reserve(user_key.len() + TRAILER_LEN);
    out.extend_from_slice(user_key);
    out.extend_from_slice(&pack_trailer(seq, kind).to_be_bytes());
}

/// Returns the internal key for (`user_key`, `seq`, `kind`).
#[inline]
pub fn internal_key(user_key: &[u8], seq: SeqNo, kind: u8) -> Vec<u8> {
    let mut v = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    encode_internal_key(&mut v, user_key, seq, kind);
    v
}

/// The lookup key that finds the newest version of `user_key` visible at `seq`.
#[inline]
pub fn lookup_key(user_key: &[u8], seq: SeqNo) -> Vec<u8> {
    internal_key(user_key, seq, KIND_FOR_SEEK)
}

/// Splits an internal key. Callers must have validated that `ikey.len() >= TRAILER_LEN`.
#[inline]
pub fn user_key(ikey: &[u8]) -> &[u8] {
    &ikey[..ikey.len() - TRAILER_LEN]
}

/// The trailer of an internal key (`seq << 8 | kind`).
#[inline]
pub fn trailer(ikey: &[u8]) -> u64 {
    let n = ikey.len();
    let mut b = [0u8; 8];
    b.copy_from_slice(&ikey[n - TRAILER_LEN..]);
    u64::from_be_bytes(b)
}

/// The sequence number of an internal key.
#[inline]
pub fn seq_of(ikey: &[u8]) -> SeqNo {
    trailer(ikey) >> 8
}

/// The raw kind byte of an internal key.
#[inline]
pub fn kind_byte(ikey: &[u8]) -> u8 {
    (trailer(ikey) & 0xFF) as u8
}

/// Parsed view of an internal key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The user's key.
    pub user_key: &'a [u8],
    /// Sequence number.
    pub seq: SeqNo,
    /// Entry kind.
    pub kind: ValueKind,
}

/// Parses an internal key, returning `None` if it is too short or has an unknown kind.
#[inline]
pub fn parse_internal_key(ikey: &[u8]) -> Option<ParsedKey<'_>> {
    if ikey.len() < TRAILER_LEN {
        return None;
    }
    let t = trailer(ikey);
    let kind = ValueKind::from_u8((t & 0xFF) as u8)?;
    Some(ParsedKey { user_key: user_key(ikey), seq: t >> 8, kind })
}

/// Compares two internal keys: user key ascending, then trailer descending.
/// Both keys must be at least [`TRAILER_LEN`] bytes long.
#[inline]
pub fn compare_internal(a: &[u8], b: &[u8]) -> Ordering {
    match compare_bytes(user_key(a), user_key(b)) {
        Ordering::Equal => trailer(b).cmp(&trailer(a)),
        o => o,
    }
}

/// Lexicographic comparison, eight bytes at a time (short keys are the common case, where a
/// call into `memcmp` costs more than the comparison).
#[inline]
pub(crate) fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = u64::from_be_bytes(a[i..i + 8].try_into().unwrap_or_default());
        let y = u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
        if x != y {
            return x.cmp(&y);
        }
        i += 8;
    }
    if i < n {
        if n >= 8 {
            // The last eight bytes both share, overlapping bytes already found equal: their
            // first difference, if any, is the slices' first.
            let x = u64::from_be_bytes(a[n - 8..n].try_into().unwrap_or_default());
            let y = u64::from_be_bytes(b[n - 8..n].try_into().unwrap_or_default());
            if x != y {
                return x.cmp(&y);
            }
        } else {
            for j in i..n {
                if a[j] != b[j] {
                    return a[j].cmp(&b[j]);
                }
            }
        }
    }
    a.len().cmp(&b.len())
}

/// Whether two byte strings are equal, compared as [`compare_bytes`] compares them (without a
/// call into `memcmp` for short keys).
#[inline]
pub(crate) fn eq_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && compare_bytes(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Strings of every length around the eight-byte steps, mostly sharing long prefixes,
        /// compare and test equal as slices do.
        #[test]
        fn compare_bytes_matches_slices(
            stem in proptest::collection::vec(0u8..3, 0..20),
            a in proptest::collection::vec(0u8..3, 0..20),
            b in proptest::collection::vec(0u8..3, 0..20),
        ) {
            let (a, b) = ([&stem[..], &a].concat(), [&stem[..], &b].concat());
            proptest::prop_assert_eq!(compare_bytes(&a, &b), a.cmp(&b));
            proptest::prop_assert_eq!(eq_bytes(&a, &b), a == b);
            proptest::prop_assert!(eq_bytes(&a, &a.clone()));
        }
    }

    #[test]
    fn compare_bytes_matches_slice_order() {
        let keys: [&[u8]; 8] = [b"", b"a", b"ab", b"abcdefgh", b"abcdefghi", b"abcdefgi", b"b", b"\xffabcdefgh"];
        for a in keys {
            for b in keys {
                assert_eq!(compare_bytes(a, b), a.cmp(b), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn ordering_is_user_key_then_newest_first() {
        let a1 = internal_key(b"a", 1, 1);
        let a5 = internal_key(b"a", 5, 1);
        let ab = internal_key(b"ab", 9, 1);
        let b0 = internal_key(b"b", 0, 0);
        assert_eq!(compare_internal(&a5, &a1), Ordering::Less);
        assert_eq!(compare_internal(&a1, &ab), Ordering::Less);
        assert_eq!(compare_internal(&ab, &b0), Ordering::Less);
        // A lookup key at seq 5 sorts before the entry at seq 5 and after newer ones.
        let l5 = lookup_key(b"a", 5);
        assert_eq!(compare_internal(&l5, &a5), Ordering::Less);
        assert_eq!(compare_internal(&internal_key(b"a", 6, 1), &l5), Ordering::Less);
    }

    #[test]
    fn parse_round_trip() {
        let k = internal_key(b"hello", 42, ValueKind::Delete as u8);
        let p = parse_internal_key(&k).unwrap();
        assert_eq!(p.user_key, b"hello");
        assert_eq!(p.seq, 42);
        assert_eq!(p.kind, ValueKind::Delete);
        assert!(parse_internal_key(b"short").is_none());
    }
}
