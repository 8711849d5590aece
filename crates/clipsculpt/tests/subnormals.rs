//! `device::flush_subnormals` (alone in this file: it changes the process's threads).

use clipsculpt::device::subnormals::{flush_subnormals, subnormals_flushed};
use std::hint::black_box;

/// A product whose exact value, 10⁻⁴⁰, is subnormal in f32.
fn tiny_product() -> f32 {
    black_box(1e-20f32) * black_box(1e-20f32)
}

/// Before: IEEE subnormals. After: zero on the calling thread, on every thread of rayon's pool
/// and on a thread started afterwards; a normal product is unchanged.
#[test]
fn flushes_on_the_caller_the_pool_and_later_threads() {
    assert!(!subnormals_flushed());
    assert!(tiny_product() > 0.0);
    let supported = flush_subnormals();
    if !supported {
        assert!(tiny_product() > 0.0, "unsupported targets keep subnormals");
        return;
    }
    assert!(subnormals_flushed());
    assert_eq!(tiny_product(), 0.0);
    assert_eq!(black_box(1e-20f32) * black_box(1e-10f32), 1e-30);
    let pool = rayon::broadcast(|_| (subnormals_flushed(), tiny_product()));
    assert!(pool.iter().all(|&(on, p)| on && p == 0.0), "{pool:?}");
    let later = std::thread::spawn(|| (subnormals_flushed(), tiny_product()))
        .join()
        .expect("thread");
    assert_eq!(later, (true, 0.0));
}
