//! Helpers for the tests and benchmarks of cairn's crates.

/// `len` incompressible pseudo-random bytes (xorshift), the same for the same `seed`.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Options for [`layered_db`]: small tables, and level 0 merged down only by `compact_all`.
pub fn layered_options() -> crate::Options {
    crate::Options {
        memtable_size: 16 << 10,
        target_file_size: 8 << 10,
        level0_compaction_trigger: 1000,
        level0_slowdown_trigger: 1000,
        level0_stop_trigger: 1000,
        flush_on_close_bytes: 0,
        compression: crate::Compression::None,
        ..crate::Options::small_for_tests()
    }
}

/// A small database in `dir` of `storage`, closed cleanly, opened with [`layered_options`]:
/// 1,200 writes over 300 keys, tables on level 0 and on the last level holding different
/// versions of keys, a range deletion in the MANIFEST and writes only the log holds. For
/// damage tests and fuzz targets.
pub fn layered_db(storage: &crate::MemStorage, dir: &str) -> crate::Result<()> {
    let db = crate::Db::open_with_storage(dir, layered_options(), std::sync::Arc::new(storage.clone()))?;
    for i in 0..1200u32 {
        db.put(format!("key{:03}", (i * 7) % 300), format!("value{i}"))?;
        if i == 500 {
            db.compact_all()?;
        }
        if i == 900 {
            db.delete_range(b"key010", b"key020")?;
            db.flush()?;
        }
    }
    db.close()
}
