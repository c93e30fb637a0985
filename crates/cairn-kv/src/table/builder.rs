//! Writes an SSTable: sorted internal entries cut into data blocks, then the table filter, the
//! index block and a fixed footer ([`crate::table::format`]). Layout: `docs/format/sstable.md`.
//!
//! ```text
//! data block*   block bytes (maybe compressed) ++ tag u8 ++ masked CRC32C u32 LE
//! filter block  same framing, uncompressed (absent when bloom_bits_per_key == 0)
//! index block   same framing, uncompressed; key = last internal key of a data block,
//!               value = varint offset ++ varint size of that block
//! footer        48 bytes, see [`Footer`]
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use crate::block::builder::BlockBuilder;
use crate::block::{Block, BlockHandle};
use crate::cache::{BlockCache, Warmed};
use crate::error::IoContext;
use crate::key::{self, TRAILER_LEN, ValueKind};
use crate::key::{MAX_KEY_LEN, MAX_VALUE_LEN};
use crate::table::compression::{BlockCompressor, TAG_NONE};
use crate::table::filter::FilterBuilder;
use crate::table::format::{BLOCK_TRAILER_LEN, FOOTER_LEN, Footer, MAX_BLOCK_SIZE, block_checksum};
use crate::{Error, Result, TableOptions, WritableFile};

#[cfg(test)]
use crate::coding::mask_crc;

/// Restart interval of index blocks (every entry is a restart point).
const INDEX_RESTART_INTERVAL: usize = 1;

/// What a finished table holds, for the manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInfo {
    /// Length of the file in bytes.
    pub file_size: u64,
    /// Entries in the table.
    pub num_entries: u64,
    /// Smallest internal key (empty for an empty table).
    pub smallest: Vec<u8>,
    /// Largest internal key (empty for an empty table).
    pub largest: Vec<u8>,
    /// Smallest sequence number (0 for an empty table).
    pub min_seq: u64,
    /// Largest sequence number (0 for an empty table).
    pub max_seq: u64,
    /// Entries that are point deletions.
    pub num_deletions: u64,
    /// Numbers of the data blocks holding an entry marked hot ([`TableBuilder::add_marked`]),
    /// ascending.
    pub hot_blocks: Vec<usize>,
}

/// Writes one SSTable. Finish it with [`TableBuilder::finish`]; dropping it leaves a partial
/// file for the caller to delete.
pub struct TableBuilder {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    compressor: BlockCompressor,
    block_size: usize,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    filter: Option<FilterBuilder>,
    offset: u64,
    info: TableInfo,
    /// Set after a write failed: the file's state is unknown, so further calls fail.
    failed: bool,
    /// Where written data blocks go as they are written (see [`TableBuilder::warm`]).
    warm: Option<Warm>,
    /// Data blocks written so far (the next one's number, its index entry's).
    data_blocks: usize,
    /// Whether the data block being built holds an entry marked hot.
    block_hot: bool,
    /// Whether the data block being built holds an entry marked after it was added
    /// ([`TableBuilder::mark_last_hot`]): listed, but not cut around.
    block_marked_late: bool,
}

/// Which written data blocks a [`TableBuilder`] puts in the block cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WarmPolicy {
    /// Every block, evicting others as needed (flushed tables: their keys were just written,
    /// and recently written keys are the likeliest to be read).
    Always,
    /// Blocks that fit without evicting anything ([`BlockCache::warm`] with room): compaction
    /// output, which replaces blocks already cached when the data fits in the cache, and which
    /// must not push out hot blocks when it does not.
    IfRoom,
}

struct Warm {
    cache: Arc<BlockCache>,
    table_id: u64,
    policy: WarmPolicy,
    path: Arc<Path>,
    /// Running estimate of the cache's free bytes (for [`WarmPolicy::IfRoom`]).
    room: u64,
}

impl TableBuilder {
    /// Starts a table written to `file` (named `path` in errors).
    pub fn new(file: Box<dyn WritableFile>, path: PathBuf, opts: TableOptions) -> Self {
        TableBuilder {
            file,
            path,
            block_size: opts.block_size.clamp(1, MAX_BLOCK_SIZE),
            data_block: BlockBuilder::new(opts.restart_interval),
            index_block: BlockBuilder::new(INDEX_RESTART_INTERVAL),
            filter: (opts.bloom_bits_per_key > 0).then(|| FilterBuilder::new(opts.bloom_bits_per_key)),
            compressor: BlockCompressor::new(opts.compression),
            offset: 0,
            info: TableInfo {
                file_size: 0,
                num_entries: 0,
                smallest: Vec::new(),
                largest: Vec::new(),
                min_seq: u64::MAX,
                max_seq: 0,
                num_deletions: 0,
                hot_blocks: Vec::new(),
            },
            failed: false,
            warm: None,
            data_blocks: 0,
            block_hot: false,
            block_marked_late: false,
        }
    }

    /// Puts the data blocks of this table, which will be table `table_id`, in `cache` as they
    /// are written, by `policy`, so that the first reads of a new table do not go to the file.
    pub fn warm(&mut self, cache: Arc<BlockCache>, table_id: u64, policy: WarmPolicy) {
        let path = Arc::from(self.path.as_path());
        self.warm = Some(Warm { cache, table_id, policy, path, room: 0 });
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            let e = std::io::Error::other("an earlier write to this table failed");
            return Err(Error::io(&self.path, e));
        }
        Ok(())
    }

    /// Lists the data block holding the last entry added in [`TableInfo::hot_blocks`], as if
    /// that entry had been marked ([`TableBuilder::add_marked`]); the block being built, or the
    /// last one written if the entry ended it. Blocks are not cut around it (too late for the
    /// block's start, and after it a run of such entries would each end a block).
    pub fn mark_last_hot(&mut self) {
        if !self.data_block.is_empty() {
            self.block_marked_late = true;
        } else if let Some(n) = self.data_blocks.checked_sub(1)
            && self.info.hot_blocks.last() != Some(&n)
        {
            self.info.hot_blocks.push(n);
        }
    }

    /// Adds an entry; internal keys must be strictly increasing by
    /// [`key::compare_internal`] (checked by `debug_assert`).
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.add_marked(ikey, value, false)
    }

    /// [`TableBuilder::add`], marking the entry, when `hot`, as read from a block readers come
    /// back to: its data block is listed in [`TableInfo::hot_blocks`]. Where the marking
    /// changes, the block being built ends early if it holds a quarter of the block size or
    /// more, so that marked entries and unmarked ones share blocks only where one side is that
    /// small. Cut only at the size limit, each run of marked entries would share its first and
    /// last blocks with unmarked neighbours, and a compaction's copies of a cache's hot blocks,
    /// which are read back into it ([`crate::Options::rewarm_hot_blocks`]), would take up to
    /// twice the blocks (and cache bytes) the originals took: in a test, 96-122 hot blocks
    /// became 156-208 copies, more than the cache that had held the originals, and the first
    /// copies read back were evicted by the last. The quarter keeps entries that alternate (a
    /// hot block's entries spread among a lower level's, new versions among hot ones) from
    /// cutting blocks of one entry each.
    pub fn add_marked(&mut self, ikey: &[u8], value: &[u8], hot: bool) -> Result<()> {
        self.check_usable()?;
        if ikey.len() < TRAILER_LEN {
            return Err(Error::InvalidArgument(format!("internal key of {} bytes", ikey.len())));
        }
        if ikey.len() - TRAILER_LEN > MAX_KEY_LEN {
            return Err(Error::KeyTooLarge { len: ikey.len() - TRAILER_LEN, max: MAX_KEY_LEN });
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(Error::ValueTooLarge { len: value.len(), max: MAX_VALUE_LEN });
        }
        debug_assert!(
            self.info.num_entries == 0 || key::compare_internal(&self.info.largest, ikey).is_lt(),
            "table keys out of order"
        );
        // Before `largest` moves on: the block's index entry is the last key in it.
        if hot != self.block_hot
            && !self.data_block.is_empty()
            && self.data_block.estimated_size() >= self.block_size / 4
        {
            self.flush_data_block()?;
        }
        if let Some(b) = &mut self.filter {
            b.add_key(key::user_key(ikey));
        }
        if self.info.num_entries == 0 {
            self.info.smallest = ikey.to_vec();
        }
        self.info.largest.clear();
        self.info.largest.extend_from_slice(ikey);
        self.info.num_entries += 1;
        let seq = key::seq_of(ikey);
        self.info.min_seq = self.info.min_seq.min(seq);
        self.info.max_seq = self.info.max_seq.max(seq);
        if key::kind_byte(ikey) == ValueKind::Delete as u8 {
            self.info.num_deletions += 1;
        }
        self.block_hot |= hot;
        self.data_block.add(ikey, value);
        if self.data_block.estimated_size() >= self.block_size {
            self.flush_data_block()?;
        }
        Ok(())
    }

    /// Bytes written so far plus the size of the block being built (for cutting output files).
    pub fn estimated_size(&self) -> u64 {
        self.offset + self.data_block.estimated_size() as u64
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.info.num_entries
    }

    fn flush_data_block(&mut self) -> Result<()> {
        let raw = self.data_block.finish();
        let (tag, stored) = self.compressor.compress_block(&raw);
        let handle = self.write_block(&stored, tag)?;
        drop(stored);
        let number = self.data_blocks;
        self.data_blocks += 1;
        if std::mem::take(&mut self.block_hot) | std::mem::take(&mut self.block_marked_late) {
            self.info.hot_blocks.push(number);
        }
        if let Some(w) = &mut self.warm {
            // A copy of exactly the block's size: the build buffer has spare capacity, which the
            // cache would hold without counting it.
            let block = Arc::new(Block::new(Bytes::copy_from_slice(&raw), w.path.clone(), handle.offset)?);
            let room = (w.policy == WarmPolicy::IfRoom).then_some(&mut w.room);
            // Once the cache is full, the rest of the table stays out of it too.
            if w.cache.warm(w.table_id, number, block, room) == Warmed::Full {
                self.warm = None;
            }
        }
        self.data_block.recycle(raw);
        let mut encoded = Vec::with_capacity(20);
        handle.encode_to(&mut encoded);
        self.index_block.add(&self.info.largest, &encoded);
        Ok(())
    }

    /// Appends `stored ++ tag ++ checksum` and returns the block's handle.
    fn write_block(&mut self, stored: &[u8], tag: u8) -> Result<BlockHandle> {
        let handle = BlockHandle { offset: self.offset, size: stored.len() as u64 };
        let mut trailer = [tag, 0, 0, 0, 0];
        trailer[1..].copy_from_slice(&block_checksum(stored, tag).to_le_bytes());
        let res = self.file.append(stored).and_then(|()| self.file.append(&trailer));
        if res.is_err() {
            self.failed = true;
        }
        res.at(&self.path)?;
        self.offset += (stored.len() + BLOCK_TRAILER_LEN) as u64;
        Ok(handle)
    }

    /// Writes the last data block, the filter, the index and the footer, then syncs the file.
    pub fn finish(mut self) -> Result<TableInfo> {
        self.check_usable()?;
        if !self.data_block.is_empty() {
            self.flush_data_block()?;
        }
        let mut footer = Footer::default();
        if let Some(b) = self.filter.take() {
            footer.filter = self.write_block(&b.finish(), TAG_NONE)?;
        }
        let index = self.index_block.finish();
        footer.index = self.write_block(&index, TAG_NONE)?;
        let res = self.file.append(&footer.encode()).and_then(|()| self.file.sync());
        res.at(&self.path)?;
        self.offset += FOOTER_LEN as u64;
        let mut info = self.info;
        info.file_size = self.offset;
        if info.num_entries == 0 {
            info.min_seq = 0;
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_round_trip_and_checks() {
        let f = Footer { filter: BlockHandle { offset: 100, size: 20 }, index: BlockHandle { offset: 125, size: 33 } };
        let enc = f.encode();
        assert_eq!(&enc[40..], b"1STCAIRN");
        let p = Path::new("f.sst");
        assert_eq!(Footer::decode(&enc, p, 0).unwrap(), f);
        for i in 0..FOOTER_LEN {
            let mut bad = enc;
            bad[i] ^= 0x10;
            assert!(Footer::decode(&bad, p, 0).unwrap_err().is_corruption(), "byte {i}");
        }
        assert!(Footer::decode(&enc[1..], p, 0).unwrap_err().is_corruption());
    }

    #[test]
    fn builders_can_move_to_a_background_thread() {
        fn check<T: Send>() {}
        check::<TableBuilder>();
    }

    #[test]
    fn mask_is_the_leveldb_mask() {
        assert_eq!(mask_crc(0), 0xa282_ead8);
        assert_ne!(mask_crc(1), mask_crc(2));
        assert_eq!(block_checksum(b"abc", 0), mask_crc(crc32c::crc32c(b"abc\0")));
    }

    mod round_trip {
        use std::sync::Arc;

        use proptest::prelude::*;

        use crate::cache::BlockCache;
        use crate::iter::InternalIterator;
        use crate::key::{self, compare_internal};
        use crate::table::table_cache::test_support::{build, open};
        use crate::{Compression, TableOptions};

        const KINDS: [Compression; 3] = [Compression::None, Compression::Lz4, Compression::Zstd(3)];

        /// `n` even-numbered user keys with 1 to 3 versions each; every 7th version a deletion.
        fn entries(n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
            let mut v = Vec::new();
            for i in 0..n {
                for s in 0..(i % 3 + 1) {
                    let seq = (3 * i + s + 1) as u64;
                    let kind = u8::from(!seq.is_multiple_of(7));
                    let ikey = key::internal_key(format!("key{:05}", 2 * i).as_bytes(), seq, kind);
                    v.push((ikey, format!("value-{i}-{s};").repeat(i % 23).into_bytes()));
                }
            }
            v.sort_by(|a, b| compare_internal(&a.0, &b.0));
            v
        }

        fn opts(compression: Compression, bloom: u32, block_size: usize) -> TableOptions {
            TableOptions { block_size, restart_interval: 4, bloom_bits_per_key: bloom, compression }
        }

        fn at(it: &impl InternalIterator) -> Option<(Vec<u8>, Vec<u8>)> {
            it.valid().then(|| (it.key().to_vec(), it.value().to_vec()))
        }

        #[test]
        fn tables_round_trip_with_every_compression_and_filter() {
            let model = entries(400);
            let mut sizes = Vec::new();
            for compression in KINDS {
                for bloom in [0, 10] {
                    let (data, info) = build(&model, opts(compression, bloom, 512));
                    assert_eq!(info.file_size, data.len() as u64);
                    assert_eq!(info.num_entries, model.len() as u64);
                    assert_eq!(info.smallest, model[0].0);
                    assert_eq!(info.largest, model[model.len() - 1].0);
                    assert_eq!((info.min_seq, info.max_seq), (1, 3 * 399 + 1));
                    let dels = model.iter().filter(|e| key::kind_byte(&e.0) == 0).count();
                    assert_eq!(info.num_deletions, dels as u64);
                    sizes.push(data.len());
                    let cache = Arc::new(BlockCache::new(1 << 20));
                    let t = open(data, &cache).unwrap();
                    assert_eq!(t.verify().unwrap(), model.len() as u64);
                    for i in 0..401 {
                        let uk = format!("key{:05}", i);
                        for seq in [0, 1, 3 * i as u64 / 2, 3 * i as u64 / 2 + 1, key::MAX_SEQ] {
                            let lk = key::lookup_key(uk.as_bytes(), seq);
                            let pos = model.partition_point(|e| compare_internal(&e.0, &lk).is_lt());
                            let want = model.get(pos).filter(|e| key::user_key(&e.0) == uk.as_bytes()).cloned();
                            let got = t.get(uk.as_bytes(), &lk).unwrap();
                            assert_eq!(got.map(|(k, v)| (k, v.to_vec())), want, "{uk}@{seq}");
                        }
                    }
                    let mut it = t.iter();
                    for pass in 0..2 {
                        it.seek_to_first().unwrap();
                        let mut fwd = Vec::new();
                        while let Some(e) = at(&it) {
                            fwd.push(e);
                            it.next().unwrap();
                        }
                        assert_eq!(fwd, model, "pass {pass}");
                    }
                    assert!(cache.stats().hits > 0);
                    it.seek_to_last().unwrap();
                    let mut back = Vec::new();
                    while let Some(e) = at(&it) {
                        back.push(e);
                        it.prev().unwrap();
                    }
                    back.reverse();
                    assert_eq!(back, model);
                }
            }
            // Compressed tables are smaller; the filter costs space.
            assert!(sizes[2] < sizes[0] && sizes[4] < sizes[0], "{sizes:?}");
            assert!(sizes[1] > sizes[0]);
        }

        #[test]
        fn empty_table() {
            let (data, info) = build(&[], opts(Compression::Lz4, 10, 512));
            assert_eq!((info.num_entries, info.min_seq, info.max_seq), (0, 0, 0));
            let t = open(data, &Arc::new(BlockCache::new(0))).unwrap();
            assert_eq!(t.verify().unwrap(), 0);
            assert!(t.get(b"a", &key::lookup_key(b"a", 1)).unwrap().is_none());
            let mut it = t.iter();
            it.seek_to_first().unwrap();
            assert!(!it.valid());
            it.seek_for_prev(&key::lookup_key(b"z", 1)).unwrap();
            assert!(!it.valid());
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(48))]
            #[test]
            fn iterator_walks_match_the_model(
                n in 0usize..120,
                kind in 0usize..3,
                bloom in prop::sample::select(vec![0u32, 10]),
                block_size in 32usize..700,
                ops in proptest::collection::vec((0u8..6, 0usize..250, 0u64..400), 1..60),
            ) {
                let model = entries(n);
                let (data, _) = build(&model, opts(KINDS[kind], bloom, block_size));
                let t = open(data, &Arc::new(BlockCache::new(4096))).unwrap();
                let mut it = t.iter();
                let mut pos: Option<usize> = None;
                for (op, k, seq) in ops {
                    let target = key::lookup_key(format!("key{k:05}").as_bytes(), seq);
                    let lt = model.partition_point(|e| compare_internal(&e.0, &target).is_lt());
                    let le = model.partition_point(|e| compare_internal(&e.0, &target).is_le());
                    let valid_at = |p: usize| (p < model.len()).then_some(p);
                    match op {
                        0 if pos.is_some() => {
                            it.next().unwrap();
                            pos = pos.and_then(|p| valid_at(p + 1));
                        }
                        1 if pos.is_some() => {
                            it.prev().unwrap();
                            pos = pos.and_then(|p| p.checked_sub(1));
                        }
                        2 => {
                            it.seek(&target).unwrap();
                            pos = valid_at(lt);
                        }
                        3 => {
                            it.seek_for_prev(&target).unwrap();
                            pos = le.checked_sub(1);
                        }
                        4 => {
                            it.seek_to_first().unwrap();
                            pos = valid_at(0);
                        }
                        _ => {
                            it.seek_to_last().unwrap();
                            pos = model.len().checked_sub(1);
                        }
                    }
                    prop_assert_eq!(at(&it), pos.map(|p| model[p].clone()));
                    if it.valid() {
                        prop_assert_eq!(&it.value_bytes()[..], it.value());
                    }
                }
            }
        }
    }
}
