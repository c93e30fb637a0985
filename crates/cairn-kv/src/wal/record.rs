//! The payload of a write-ahead-log record: one write group (the batches of one group
//! commit), its operations numbered from a base sequence number (`docs/format/kv.md`). A
//! [`crate::write::batch::WriteBatch`] holds its operations in this encoding.

use crate::coding::Reader;
use crate::key::SeqNo;

/// Tag of a delete operation.
pub(crate) const TAG_DELETE: u8 = 0;
/// Tag of a put operation.
pub(crate) const TAG_PUT: u8 = 1;
/// Tag of a range-delete operation.
pub(crate) const TAG_DELETE_RANGE: u8 = 2;

/// Bytes of the header of a record: base sequence (u64) and count (u32).
pub(crate) const BATCH_HEADER_LEN: usize = 12;

/// One decoded operation of a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// Set `key` to `value`.
    Put(&'a [u8], &'a [u8]),
    /// Remove `key`.
    Delete(&'a [u8]),
    /// Remove every key in `[start, end)`.
    DeleteRange(&'a [u8], &'a [u8]),
}

impl<'a> BatchOp<'a> {
    /// The key the operation is about (the start key for a range).
    pub fn key(&self) -> &'a [u8] {
        match *self {
            BatchOp::Put(k, _) | BatchOp::Delete(k) | BatchOp::DeleteRange(k, _) => k,
        }
    }
}

/// The header of a record holding `count` operations numbered from `base_seq`.
pub(crate) fn header(base_seq: SeqNo, count: u32) -> [u8; BATCH_HEADER_LEN] {
    let mut head = [0u8; BATCH_HEADER_LEN];
    head[..8].copy_from_slice(&base_seq.to_le_bytes());
    head[8..].copy_from_slice(&count.to_le_bytes());
    head
}

/// The operations encoded in `ops` (`count` of them, no header), each decoded or the offset
/// within `ops` and reason it does not decode.
pub(crate) fn ops(ops: &[u8], count: u32) -> OpIter<'_> {
    OpIter { r: Reader::new(ops), left: count }
}

/// A decoded write-ahead-log record: the first sequence number and the operations, numbered in
/// order from it.
#[derive(Debug)]
pub struct DecodedRecord<'a> {
    /// Sequence number of the first operation.
    pub base_seq: SeqNo,
    /// The operations.
    pub ops: Vec<BatchOp<'a>>,
}

/// Decodes a write-ahead-log record payload. Errors carry the offset within the payload.
pub fn decode_record(payload: &[u8]) -> std::result::Result<DecodedRecord<'_>, (usize, String)> {
    let mut r = Reader::new(payload);
    let base_seq = r.u64().ok_or((0, "record shorter than its header".to_string()))?;
    let count = r.u32().ok_or((8, "record shorter than its header".to_string()))?;
    let mut ops = Vec::with_capacity((count as usize).min(payload.len() / 2));
    let mut it = OpIter { r, left: count };
    for op in it.by_ref() {
        ops.push(op?);
    }
    if !it.r.is_empty() {
        return Err((it.r.pos(), "trailing bytes after the last operation".into()));
    }
    Ok(DecodedRecord { base_seq, ops })
}

/// Decodes operations one by one (see [`ops`]).
pub(crate) struct OpIter<'a> {
    r: Reader<'a>,
    left: u32,
}

impl<'a> Iterator for OpIter<'a> {
    type Item = std::result::Result<BatchOp<'a>, (usize, String)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let at = self.r.pos();
        let bad = |what: &str| Some(Err((at, format!("malformed {what} operation"))));
        let op = match self.r.u8() {
            Some(TAG_PUT) => match (self.r.len_prefixed(), self.r.len_prefixed()) {
                (Some(k), Some(v)) => BatchOp::Put(k, v),
                _ => return bad("put"),
            },
            Some(TAG_DELETE) => match self.r.len_prefixed() {
                Some(k) => BatchOp::Delete(k),
                None => return bad("delete"),
            },
            Some(TAG_DELETE_RANGE) => match (self.r.len_prefixed(), self.r.len_prefixed()) {
                (Some(s), Some(e)) => BatchOp::DeleteRange(s, e),
                _ => return bad("range delete"),
            },
            Some(t) => return Some(Err((at, format!("unknown operation tag {t}")))),
            None => return Some(Err((at, "record ends before its last operation".into()))),
        };
        Some(Ok(op))
    }
}
