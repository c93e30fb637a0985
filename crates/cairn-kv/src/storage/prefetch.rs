//! Software prefetch: asks the CPU to start loading a cache line that a scan is about to read.
//!
//! A scan over data larger than the CPU caches touches each block entry and memtable node for
//! the first time, and every such touch is a wait of ~100 ns on memory. Asking for the next
//! entries while the current one is being merged overlaps those waits. A prefetch is only a
//! hint: it never faults, whatever the address, and does nothing where the target has no
//! prefetch instruction.
#![allow(unsafe_code)]

/// Starts loading the cache line holding `p` into all cache levels.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads nothing architecturally and cannot fault, for any address;
    // SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches the line holding byte `at` of `buf`, if `at` is inside it.
#[inline(always)]
pub(crate) fn prefetch_in(buf: &[u8], at: usize) {
    if at < buf.len() {
        prefetch(buf.as_ptr().wrapping_add(at));
    }
}
