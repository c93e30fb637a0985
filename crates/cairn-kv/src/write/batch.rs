//! [`WriteBatch`]: a group of updates applied atomically. Its operations are kept encoded as a
//! write-ahead-log record holds them ([`crate::wal::record`]), so that a group's record is the
//! batches' encodings behind one header.

use crate::coding::put_len_prefixed;
use crate::key::{MAX_KEY_LEN, MAX_VALUE_LEN, SeqNo};
use crate::wal::record::{BATCH_HEADER_LEN, BatchOp, TAG_DELETE, TAG_DELETE_RANGE, TAG_PUT, header, ops};
use crate::{Error, Result};

/// An atomic group of puts, deletes and range deletes.
///
/// Every operation in a batch becomes visible at once, or (after a crash) not at all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    count: u32,
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge { len: key.len(), max: MAX_KEY_LEN });
    }
    Ok(())
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> Self {
        WriteBatch::default()
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_key(key)?;
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE_LEN });
        }
        self.reserve_op(key.len() + value.len());
        self.rep.push(TAG_PUT);
        put_len_prefixed(&mut self.rep, key);
        put_len_prefixed(&mut self.rep, value);
        self.count += 1;
        Ok(())
    }

    /// Sets the key `prefix` + `key` to `value` without building the key first (keyspace
    /// writes).
    pub(crate) fn put_prefixed(&mut self, prefix: &[u8], key: &[u8], value: &[u8]) -> Result<()> {
        let len = prefix.len() + key.len();
        if len > MAX_KEY_LEN {
            return Err(Error::KeyTooLarge { len, max: MAX_KEY_LEN });
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE_LEN });
        }
        self.reserve_op(len + value.len());
        self.rep.push(TAG_PUT);
        crate::coding::put_varint(&mut self.rep, len as u64);
        self.rep.extend_from_slice(prefix);
        self.rep.extend_from_slice(key);
        put_len_prefixed(&mut self.rep, value);
        self.count += 1;
        Ok(())
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        check_key(key)?;
        self.reserve_op(key.len());
        self.rep.push(TAG_DELETE);
        put_len_prefixed(&mut self.rep, key);
        self.count += 1;
        Ok(())
    }

    /// Removes every key `k` with `start <= k < end`. An empty range (`start >= end`) is a no-op.
    pub fn delete_range(&mut self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        let (start, end) = (start.as_ref(), end.as_ref());
        check_key(start)?;
        check_key(end)?;
        if start >= end {
            return Ok(());
        }
        self.reserve_op(start.len() + end.len());
        self.rep.push(TAG_DELETE_RANGE);
        put_len_prefixed(&mut self.rep, start);
        put_len_prefixed(&mut self.rep, end);
        self.count += 1;
        Ok(())
    }

    /// Makes room for one more operation with `data` bytes of keys and values (a tag and two
    /// length prefixes besides) before it is encoded, so that encoding it grows the buffer at
    /// most once: a batch of one put costs one allocation instead of a chain of reallocations
    /// (with glibc each `realloc` takes its arena's lock, which a writer sharing the arena with
    /// a flush thread then waited on).
    fn reserve_op(&mut self, data: usize) {
        self.rep.reserve(1 + 2 * 10 + data);
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// Whether the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Encoded size in bytes (what the batch costs in the log).
    pub fn approximate_size(&self) -> usize {
        BATCH_HEADER_LEN + self.rep.len()
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.rep.clear();
        self.count = 0;
    }

    /// Iterates over the operations in order.
    pub fn iter(&self) -> impl Iterator<Item = BatchOp<'_>> {
        // The representation was built by this type, so decoding cannot fail.
        ops(&self.rep, self.count).map_while(|op| op.ok())
    }

    pub(crate) fn count(&self) -> u32 {
        self.count
    }
}

/// The log-record form of several batches numbered from `base_seq`, in parts: a header, then
/// each batch's encoded operations. The record's payload is their concatenation.
pub(crate) fn group_parts<'a>(
    base_seq: SeqNo,
    batches: impl Iterator<Item = &'a WriteBatch> + Clone,
) -> ([u8; BATCH_HEADER_LEN], impl Iterator<Item = &'a [u8]>) {
    let count: u64 = batches.clone().map(|b| b.count as u64).sum();
    (header(base_seq, count as u32), batches.map(|b| b.rep.as_slice()))
}

/// Appends the log-record form of several batches, numbered from `base_seq`, to `out`.
#[cfg(test)]
pub(crate) fn encode_group<'a>(
    out: &mut Vec<u8>,
    base_seq: SeqNo,
    batches: impl Iterator<Item = &'a WriteBatch> + Clone,
) {
    let (head, parts) = group_parts(base_seq, batches);
    out.extend_from_slice(&head);
    parts.for_each(|p| out.extend_from_slice(p));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wal::record::decode_record;
    use proptest::prelude::*;

    #[test]
    fn limits_are_enforced() {
        let mut b = WriteBatch::new();
        assert!(matches!(b.put(vec![0; MAX_KEY_LEN + 1], b"v"), Err(Error::KeyTooLarge { .. })));
        assert!(b.put(vec![0; MAX_KEY_LEN], b"v").is_ok());
        assert!(matches!(b.delete(vec![0; MAX_KEY_LEN + 1]), Err(Error::KeyTooLarge { .. })));
        assert_eq!(b.len(), 1);
        b.delete_range(b"b", b"a").unwrap();
        assert_eq!(b.len(), 1, "an empty range is dropped");
    }

    #[test]
    fn group_round_trip() {
        let mut a = WriteBatch::new();
        a.put(b"k1", b"v1").unwrap();
        a.delete(b"k2").unwrap();
        let mut b = WriteBatch::new();
        b.delete_range(b"a", b"z").unwrap();
        let mut out = Vec::new();
        encode_group(&mut out, 77, [&a, &b].into_iter());
        let rec = decode_record(&out).unwrap();
        assert_eq!(rec.base_seq, 77);
        assert_eq!(rec.ops, vec![BatchOp::Put(b"k1", b"v1"), BatchOp::Delete(b"k2"), BatchOp::DeleteRange(b"a", b"z")]);
    }

    proptest! {
        #[test]
        fn decode_never_panics(data: Vec<u8>) {
            let _ = decode_record(&data);
        }

        #[test]
        fn truncation_is_detected(ops in proptest::collection::vec((any::<bool>(), proptest::collection::vec(any::<u8>(), 0..20), proptest::collection::vec(any::<u8>(), 0..20)), 1..10)) {
            let mut b = WriteBatch::new();
            for (put, k, v) in &ops {
                if *put { b.put(k, v).unwrap() } else { b.delete(k).unwrap() }
            }
            let mut out = Vec::new();
            encode_group(&mut out, 1, std::iter::once(&b));
            prop_assert_eq!(decode_record(&out).unwrap().ops.len(), ops.len());
            for cut in 0..out.len() {
                prop_assert!(decode_record(&out[..cut]).is_err());
            }
        }
    }
}
