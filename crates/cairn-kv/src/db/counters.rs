//! The engine's running counters ([`Counters`]), updated by the write path and background
//! threads and read by [`crate::Db::stats`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::flow::writers::Stall;

/// Running counters, updated by the write path and background threads.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) user_bytes: AtomicU64,
    pub(crate) wal_bytes: AtomicU64,
    pub(crate) flush_bytes: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) compaction_read: AtomicU64,
    pub(crate) compaction_written: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) subcompactions: AtomicU64,
    pub(crate) intra_l0_compactions: AtomicU64,
    pub(crate) hot_blocks_rewarmed: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) stall_slowdown_micros: AtomicU64,
    pub(crate) stall_stop_micros: AtomicU64,
}

impl Counters {
    pub fn add_user_bytes(&self, n: u64) {
        self.user_bytes.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_wal_bytes(&self, n: u64) {
        self.wal_bytes.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_flush(&self, bytes: u64) {
        self.flush_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.flushes.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_compaction_bytes(&self, read: u64, written: u64) {
        self.compaction_read.fetch_add(read, Ordering::Relaxed);
        self.compaction_written.fetch_add(written, Ordering::Relaxed);
    }
    pub fn add_compaction(&self) {
        self.compactions.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_intra_l0_compaction(&self) {
        self.intra_l0_compactions.fetch_add(1, Ordering::Relaxed);
    }
    pub fn add_hot_blocks_rewarmed(&self, n: u64) {
        self.hot_blocks_rewarmed.fetch_add(n, Ordering::Relaxed);
    }
    pub fn add_subcompactions(&self, n: u64) {
        self.subcompactions.fetch_add(n, Ordering::Relaxed);
    }
    /// Adds time a writer waited, for `cause`.
    pub fn add_stall(&self, cause: Stall, d: Duration) {
        let us = d.as_micros() as u64;
        self.stall_micros.fetch_add(us, Ordering::Relaxed);
        match cause {
            Stall::Slowdown => self.stall_slowdown_micros.fetch_add(us, Ordering::Relaxed),
            Stall::Stop => self.stall_stop_micros.fetch_add(us, Ordering::Relaxed),
            Stall::Memtables => 0,
        };
    }
}
