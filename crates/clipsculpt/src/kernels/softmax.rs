//! Softmax over the rows of a plain array, with an optional additive mask, and the unmasked
//! softmax of f32 rows with the vectorised `exp` ([`softmax_rows_f32`]).

use rayon::prelude::*;

use super::fastmath::{exp_f32_as, simd_dispatch};
use super::real::Real;

/// Softmax of each row of `s (rows, t)` in place after adding the mask's rows (0 or −∞).
pub(crate) fn softmax_rows<T: Real>(s: &mut [T], t: usize, mask: Option<&[T]>) {
    for (i, row) in s.chunks_exact_mut(t).enumerate() {
        if let Some(mask) = mask {
            for (v, &m) in row.iter_mut().zip(&mask[i * t..(i + 1) * t]) {
                *v += m;
            }
        }
        let max = row
            .iter()
            .fold(T::from_f64(f64::NEG_INFINITY), |a, &b| a.max_of(b));
        let mut sum = T::zero();
        for v in row.iter_mut() {
            // A masked score (−∞) weighs exactly 0, as the composed softmax gives.
            *v = if *v == T::from_f64(f64::NEG_INFINITY) {
                T::zero()
            } else {
                (*v - max).exp()
            };
            sum += *v;
        }
        let inv = T::one() / sum;
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}

/// Rows per rayon task of [`softmax_rows_f32`].
const ROWS_PER_TASK: usize = 64;

/// Softmax of each row of `s (rows, t)` in place, rows in parallel, with the vectorised
/// [`exp_f32_as`] (fused); like libm's, the probabilities are within 2e-6 relative of an f64 softmax. The
/// scalar `expf` call per element was 8 % of the published prior's evaluation.
pub(crate) fn softmax_rows_f32(s: &mut [f32], t: usize) {
    if t == 0 {
        return;
    }
    s.par_chunks_mut(t * ROWS_PER_TASK)
        .for_each(|rows| softmax_block(rows, t));
}

/// [`softmax_rows_f32`] on the calling thread alone (for callers that parallelise over blocks).
pub(crate) fn softmax_rows_f32_serial(s: &mut [f32], t: usize) {
    if t > 0 {
        softmax_block(s, t);
    }
}

/// Lanes of the max and sum reductions: independent accumulators, so that the loops vectorise
/// (a single float accumulator is a serial dependency chain).
const LANES: usize = 16;

simd_dispatch!(
    /// [`softmax_rows_f32`] on one block of rows, compiled for the CPU's vector width: the row's
    /// max, the exponentials, their sum and the scaling are four separate vectorisable loops.
    softmax_block(rows: &mut [f32], t: usize) {
        for row in rows.chunks_exact_mut(t) {
            let mut lanes = [f32::NEG_INFINITY; LANES];
            let mut blocks = row.chunks_exact(LANES);
            for block in &mut blocks {
                for (m, &v) in lanes.iter_mut().zip(block) {
                    *m = if v > *m { v } else { *m };
                }
            }
            let tail = blocks.remainder().iter();
            let max = lanes.iter().chain(tail).fold(f32::NEG_INFINITY, |a, &b| a.max(b));
            for v in row.iter_mut() {
                // Below −87 (a masked −∞ included) the weight is 0, as libm's rounds it.
                let d = *v - max;
                *v = if d < -87.0 { 0.0 } else { exp_f32_as::<true>(d) };
            }
            let mut sums = [0f32; LANES];
            let mut blocks = row.chunks_exact(LANES);
            for block in &mut blocks {
                for (s, &v) in sums.iter_mut().zip(block) {
                    *s += v;
                }
            }
            let sum: f32 = sums.iter().chain(blocks.remainder()).sum();
            let inv = 1.0 / sum;
            for v in row.iter_mut() {
                *v *= inv;
            }
        }
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The vectorised softmax is as accurate as the libm one: both within 2e-6 relative of an f64
    /// softmax (1e-12 absolute for tiny probabilities), rows of any length.
    #[test]
    fn vectorised_rows_match_the_libm_ones() {
        for t in [1, 7, 64, 1026] {
            let rows = 3 * ROWS_PER_TASK + 5;
            let x: Vec<f32> = (0..rows * t)
                .map(|i| ((i as f32 * 0.618_034).fract() - 0.5) * 40.0)
                .collect();
            let mut exact: Vec<f64> = x.iter().map(|&v| v as f64).collect();
            softmax_rows(&mut exact, t, None);
            let (mut fast, mut libm) = (x.clone(), x);
            softmax_rows_f32(&mut fast, t);
            softmax_rows(&mut libm, t, None);
            for ((a, l), e) in fast.iter().zip(&libm).zip(&exact) {
                let tol = 2e-6 * e + 1e-12;
                assert!((*a as f64 - e).abs() <= tol, "fast {a} vs {e} (t {t})");
                assert!((*l as f64 - e).abs() <= tol, "libm {l} vs {e} (t {t})");
            }
            for row in fast.chunks(t) {
                let sum: f32 = row.iter().sum();
                assert!((sum - 1.0).abs() < 1e-5, "row sum {sum}");
            }
        }
    }
}
