//! LayerNorm over the rows of plain arrays, forward (recording each row's mean and reciprocal
//! deviation) and backward to the input, one vectorised, multi-threaded pass each.

use rayon::prelude::*;

use super::fastmath::simd_dispatch;
use super::real::Real;

/// Rows per rayon task.
const ROWS_PER_TASK: usize = 32;

/// A row's mean and `1/√(var + eps)` (`inv` is `1/len`); inlined into the vectorised callers.
#[inline(always)]
fn row_stats<T: Real>(x: &[T], inv: T, eps: T) -> (T, T) {
    let mut s = T::zero();
    for &v in x {
        s += v;
    }
    let m = s * inv;
    let mut s2 = T::zero();
    for &v in x {
        s2 += (v - m) * (v - m);
    }
    (m, T::one() / T::from_f64((s2 * inv + eps).to_f64().sqrt()))
}

simd_dispatch!(ln_forward_rows<T: Real>(x: &[T], w: &[T], b: &[T], eps: T, y: &mut [T], mu: &mut [T], rstd: &mut [T]) {
    let d = w.len();
    let inv = T::one() / T::from_f64(d as f64);
    for (((x, y), mu), rstd) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(mu.iter_mut()).zip(rstd.iter_mut()) {
        let (m, r) = row_stats(x, inv, eps);
        for (((y, &v), &w), &b) in y.iter_mut().zip(x).zip(w).zip(b) {
            *y = (v - m) * r * w + b;
        }
        *mu = m;
        *rstd = r;
    }
});

/// `y = LayerNorm(x)` over rows of `w.len()`, recording each row's mean and `1/√(var + eps)`.
pub(crate) fn ln_forward<T: Real>(
    x: &[T],
    w: &[T],
    b: &[T],
    eps: T,
    y: &mut [T],
    mu: &mut [T],
    rstd: &mut [T],
) {
    let block = ROWS_PER_TASK * w.len();
    x.par_chunks(block)
        .zip(y.par_chunks_mut(block))
        .zip(mu.par_chunks_mut(ROWS_PER_TASK))
        .zip(rstd.par_chunks_mut(ROWS_PER_TASK))
        .for_each(|(((x, y), mu), rstd)| ln_forward_rows(x, w, b, eps, y, mu, rstd));
}

simd_dispatch!(ln_stats_rows<T: Real>(x: &[T], d: usize, eps: T, mu: &mut [T], rstd: &mut [T]) {
    let inv = T::one() / T::from_f64(d as f64);
    for ((x, mu), rstd) in x.chunks_exact(d).zip(mu.iter_mut()).zip(rstd.iter_mut()) {
        (*mu, *rstd) = row_stats(x, inv, eps);
    }
});

/// Each row's mean and `1/√(var + eps)` over rows of `d`, as [`ln_forward`] records them.
pub(crate) fn ln_stats<T: Real>(x: &[T], d: usize, eps: T, mu: &mut [T], rstd: &mut [T]) {
    x.par_chunks(ROWS_PER_TASK * d)
        .zip(mu.par_chunks_mut(ROWS_PER_TASK))
        .zip(rstd.par_chunks_mut(ROWS_PER_TASK))
        .for_each(|((x, mu), rstd)| ln_stats_rows(x, d, eps, mu, rstd));
}

simd_dispatch!(ln_backward_rows<T: Real>(gy: &[T], x: &[T], mu: &[T], rstd: &[T], w: &[T], dx: &mut [T], accumulate: bool) {
    let d = w.len();
    let inv = T::one() / T::from_f64(d as f64);
    for ((((gy, x), &m), &r), dx) in gy.chunks_exact(d).zip(x.chunks_exact(d)).zip(mu).zip(rstd).zip(dx.chunks_exact_mut(d)) {
        let (mut m1, mut m2) = (T::zero(), T::zero());
        for ((&g, &v), &w) in gy.iter().zip(x).zip(w) {
            let gh = g * w;
            m1 += gh;
            m2 += gh * (v - m) * r;
        }
        let (m1, m2) = (m1 * inv, m2 * inv);
        for (((dx, &g), &v), &w) in dx.iter_mut().zip(gy).zip(x).zip(w) {
            let v = r * (g * w - m1 - (v - m) * r * m2);
            *dx = if accumulate { *dx + v } else { v };
        }
    }
});

/// `dx (+)= ∂LayerNorm/∂x · gy` (weight `w`; the forward's `mu`, `rstd`):
/// `r·(ĝ − mean ĝ − x̂·mean(ĝ·x̂))` with `ĝ = gy·w`, `x̂ = (x − μ)·r`.
pub(crate) fn ln_backward<T: Real>(
    gy: &[T],
    x: &[T],
    mu: &[T],
    rstd: &[T],
    w: &[T],
    dx: &mut [T],
    accumulate: bool,
) {
    let block = ROWS_PER_TASK * w.len();
    gy.par_chunks(block)
        .zip(x.par_chunks(block))
        .zip(mu.par_chunks(ROWS_PER_TASK))
        .zip(rstd.par_chunks(ROWS_PER_TASK))
        .zip(dx.par_chunks_mut(block))
        .for_each(|((((gy, x), mu), rstd), dx)| {
            ln_backward_rows(gy, x, mu, rstd, w, dx, accumulate)
        });
}
