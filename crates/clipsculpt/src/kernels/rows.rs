//! Row-wise fills and additions on plain arrays, multi-threaded, and new arrays filled chunk by
//! chunk in parallel.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::real::Real;

/// Rows per rayon task.
const ROWS_PER_TASK: usize = 32;

/// A new vector of `len` elements, filled by `f(i, chunk)` for its chunks of `chunk` elements
/// (the last may be shorter), in parallel, `init` making each task's scratch. Each chunk is zeroed
/// just before `f` sees it: no serial `memset` of the whole vector first (`vec![0; len]` is one,
/// on the calling thread, while the other threads wait).
pub(crate) fn new_by_chunks<T: Real, S>(
    len: usize,
    chunk: usize,
    init: impl Fn() -> S + Sync + Send,
    f: impl Fn(&mut S, usize, &mut [T]) + Sync + Send,
) -> Vec<T> {
    let mut out = Vec::with_capacity(len);
    out.spare_capacity_mut()[..len]
        .par_chunks_mut(chunk.max(1))
        .enumerate()
        .for_each_init(init, |scratch, (i, c)| f(scratch, i, zeroed(c)));
    // SAFETY: every chunk of the first `len` elements was initialised by `zeroed`.
    unsafe { out.set_len(len) };
    out
}

/// A vector of `len` zeros, zeroed in parallel.
pub(crate) fn zeros<T: Real>(len: usize) -> Vec<T> {
    new_by_chunks(len, ZEROS_PER_TASK, || (), |_, _, _| {})
}

/// Elements per task of [`zeros`].
const ZEROS_PER_TASK: usize = 1 << 16;

/// `c` set to zeros, as initialised elements.
fn zeroed<T: Real>(c: &mut [MaybeUninit<T>]) -> &mut [T] {
    for v in c.iter_mut() {
        v.write(T::zero());
    }
    // SAFETY: every element was just initialised; `MaybeUninit<T>` has `T`'s layout.
    unsafe { &mut *(c as *mut [MaybeUninit<T>] as *mut [T]) }
}

/// Every row of `dst` set to `row`.
pub(crate) fn fill_rows<T: Real>(dst: &mut [T], row: &[T]) {
    dst.par_chunks_mut(ROWS_PER_TASK * row.len())
        .for_each(|block| {
            for r in block.chunks_exact_mut(row.len()) {
                r.copy_from_slice(row);
            }
        });
}

/// `row` added to every row of `dst`.
pub(crate) fn add_row<T: Real>(dst: &mut [T], row: &[T]) {
    dst.par_chunks_mut(ROWS_PER_TASK * row.len()).for_each(|b| {
        for r in b.chunks_exact_mut(row.len()) {
            for (v, &bias) in r.iter_mut().zip(row) {
                *v += bias;
            }
        }
    });
}

/// Every element of `dst` (rows of `width`) times `by`.
pub(crate) fn scale<T: Real>(dst: &mut [T], by: T, width: usize) {
    dst.par_chunks_mut(ROWS_PER_TASK * width)
        .for_each(|b| b.iter_mut().for_each(|v| *v *= by));
}
