//! Row-wise fills and additions on plain arrays, multi-threaded.

use rayon::prelude::*;

use super::real::Real;

/// Rows per rayon task.
const ROWS_PER_TASK: usize = 32;

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
