//! Giving memory the daemon freed back to the system. With glibc's allocator, memory freed by
//! the many threads that serve requests stays in the allocator's per-thread arenas, so the
//! resident set of a long-running daemon rose with each peak of its load (a flush of the
//! full-text index, compactions) and did not come back down
//! ([design](../../../docs/design/2026-12-08-daemon-memory.md)). `malloc_trim` returns the free
//! pages of every arena. This is the crate's only module with `unsafe` code.

#![allow(unsafe_code)]

use std::time::Duration;

/// How often the daemon trims.
pub const PERIOD: Duration = Duration::from_secs(2);

/// Trims every `period`, on a blocking thread (a trim walks every arena), until aborted.
pub async fn every(period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

/// Returns the allocator's free memory to the system, where the C library can.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` takes no pointers and may be called from any thread at any time;
    // it only releases memory no allocation holds.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    fn rss_mib() -> f64 {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let kib: f64 =
            s.lines().find(|l| l.starts_with("VmRSS:")).unwrap().split_whitespace().nth(1).unwrap().parse().unwrap();
        kib / 1024.0
    }

    /// Memory freed between blocks still in use (64 KiB holes, below the size glibc maps apart)
    /// is not returned by `free`; a trim returns it.
    #[test]
    fn a_trim_returns_memory_freed_between_live_blocks() {
        let (big, small): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            (0..3_200u32).map(|i| (vec![i as u8 | 1; 64 << 10], vec![1u8; 64])).unzip();
        drop(big);
        let before = rss_mib();
        super::trim();
        let after = rss_mib();
        assert_eq!(small.len(), 3_200);
        assert!(before - after > 100.0, "RSS {before:.0} MiB before the trim, {after:.0} after (200 MiB were free)");
    }
}
