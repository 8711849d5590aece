//! The host heap counter: [`CountingAlloc`], the system allocator with live-byte and peak
//! counters. The binary, the benches and the tests install it as the `#[global_allocator]`; on
//! the CPU it counts every candle tensor, so it is the CPU's memory meter.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{PoisonError, RwLock};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// The peak a nested span reset away ([`super::SpanMeter`]); [`peak`] reports at least it.
static FLOOR: AtomicUsize = AtomicUsize::new(0);
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Taken shared by every [`reset_peak`], exclusively by a measurement no reset may interrupt.
static RESET_GATE: RwLock<()> = RwLock::new(());

/// The system allocator with live-byte and peak counters.
pub struct CountingAlloc;

// SAFETY: every call forwards to `System` unchanged; the counters are plain atomics.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            grow(layout.size());
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            grow(new_size);
        }
        p
    }
}

fn grow(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
    if !ACTIVE.load(Ordering::Relaxed) {
        ACTIVE.store(true, Ordering::Relaxed);
    }
}

/// Whether [`CountingAlloc`] is the process's allocator (it has seen an allocation).
pub fn is_counting() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// Live heap bytes now.
pub fn current() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Highest live heap bytes since the last [`reset_peak`].
pub(crate) fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
        .max(FLOOR.load(Ordering::Relaxed))
}

/// Sets the peak to the current live bytes and returns them (the baseline of a phase).
pub(crate) fn reset_peak() -> usize {
    let _shared = RESET_GATE.read().unwrap_or_else(PoisonError::into_inner);
    peak_to_current()
}

fn peak_to_current() -> usize {
    let now = current();
    FLOOR.store(0, Ordering::Relaxed);
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The peak reached while `f` runs, with the peak reset before it and no other [`reset_peak`]
/// (a concurrent test's) lowering it meanwhile.
#[cfg(test)]
pub(crate) fn peak_during(f: impl FnOnce()) -> usize {
    let _alone = RESET_GATE.write().unwrap_or_else(PoisonError::into_inner);
    peak_to_current();
    f();
    peak()
}

/// Makes [`peak`] report at least `bytes` until the next [`reset_peak`].
pub(super) fn raise_floor(bytes: usize) {
    FLOOR.fetch_max(bytes, Ordering::Relaxed);
}
