//! Plain-array CPU kernels of the fused passes (the NeRSTF MLP of
//! `shap_e::fused_mlp`, which the renderer's fused NeRF pass and the graph-free field query of
//! the mesh export share): a strided matrix product on the `gemm` crate (the one candle uses)
//! and one-pass, multi-threaded bias + SiLU forward and backward.
//!
//! The SiLU kernels use the vectorisable `exp` of [`crate::autodiff::fastmath`], compiled for
//! AVX-512 or AVX2 when the CPU has them, so each activation costs a few vector instructions
//! instead of a libm call.

use candle_core::WithDType;
use rayon::prelude::*;

use super::fastmath::{self, exp_f32, simd_dispatch};

/// Rows per rayon task of the elementwise kernels.
const ROWS_PER_TASK: usize = 128;

/// The float types of the fused pass (f32, and f64 for finite-difference tests).
pub trait Real: WithDType + std::ops::Neg<Output = Self> {
    /// `eˣ` as libm computes it.
    fn exp(self) -> Self;
    /// `eˣ` for the activations: vectorisable (within ~1 ulp in f32; libm's in f64).
    fn fast_exp(self) -> Self;
    /// Hyperbolic tangent (libm).
    fn tanh(self) -> Self;
    /// The larger of two values.
    fn max_of(self, other: Self) -> Self;
    /// `v = sin(v)` elementwise: vectorised in f32 ([`fastmath::sin_in_place`], within one ulp
    /// of libm's `sinf`), libm's in f64.
    fn sin_in_place(v: &mut [Self]);
}

impl Real for f32 {
    fn exp(self) -> Self {
        f32::exp(self)
    }
    #[inline(always)]
    fn fast_exp(self) -> Self {
        exp_f32(self)
    }
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    #[inline(always)]
    fn max_of(self, other: Self) -> Self {
        f32::max(self, other)
    }
    fn sin_in_place(v: &mut [Self]) {
        fastmath::sin_in_place(v);
    }
}

impl Real for f64 {
    fn exp(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn fast_exp(self) -> Self {
        f64::exp(self)
    }
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    #[inline(always)]
    fn max_of(self, other: Self) -> Self {
        f64::max(self, other)
    }
    fn sin_in_place(v: &mut [Self]) {
        for x in v {
            *x = x.sin();
        }
    }
}

simd_dispatch!(bias_silu_rows<T: Real>(pre: &mut [T], h: &mut [T], bias: &[T]) {
    for (pre, h) in pre.chunks_exact_mut(bias.len()).zip(h.chunks_exact_mut(bias.len())) {
        for ((a, h), &b) in pre.iter_mut().zip(h.iter_mut()).zip(bias) {
            let v = *a + b;
            *a = v;
            *h = v / (T::one() + (-v).fast_exp());
        }
    }
});

simd_dispatch!(bias_silu_inplace_rows<T: Real>(a: &mut [T], bias: &[T]) {
    for row in a.chunks_exact_mut(bias.len()) {
        for (a, &b) in row.iter_mut().zip(bias) {
            let v = *a + b;
            *a = v / (T::one() + (-v).fast_exp());
        }
    }
});

simd_dispatch!(silu_grad_rows<T: Real>(pre: &[T], g: &mut [T]) {
    for (&a, g) in pre.iter().zip(g.iter_mut()) {
        let s = T::one() / (T::one() + (-a).fast_exp());
        *g *= s * (T::one() + a * (T::one() - s));
    }
});

simd_dispatch!(silu_grad_value_rows<T: Real>(pre: &[T], g: &mut [T], h: &mut [T]) {
    for ((&a, g), h) in pre.iter().zip(g.iter_mut()).zip(h.iter_mut()) {
        let d = T::one() + (-a).fast_exp();
        let s = T::one() / d;
        *g *= s * (T::one() + a * (T::one() - s));
        *h = a / d; // as the forward computes it
    }
});

simd_dispatch!(silu_value_rows<T: Real>(pre: &[T], h: &mut [T]) {
    for (&a, h) in pre.iter().zip(h.iter_mut()) {
        *h = a / (T::one() + (-a).fast_exp());
    }
});

/// `pre += bias` (per row of `width = bias.len()`) and `h = silu(pre)`, in parallel.
pub fn bias_silu<T: Real>(pre: &mut [T], h: &mut [T], bias: &[T]) {
    let block = ROWS_PER_TASK * bias.len();
    pre.par_chunks_mut(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(p, h)| bias_silu_rows(p, h, bias));
}

/// `a = silu(a + bias)` in place, in parallel.
pub fn bias_silu_inplace<T: Real>(a: &mut [T], bias: &[T]) {
    let block = ROWS_PER_TASK * bias.len();
    a.par_chunks_mut(block)
        .for_each(|a| bias_silu_inplace_rows(a, bias));
}

/// `g *= silu'(pre)` and, when `h` is given, `h = silu(pre)`, in parallel.
pub fn silu_grad<T: Real>(pre: &[T], g: &mut [T], h: Option<&mut [T]>, width: usize) {
    let block = ROWS_PER_TASK * width;
    match h {
        Some(h) => pre
            .par_chunks(block)
            .zip(g.par_chunks_mut(block))
            .zip(h.par_chunks_mut(block))
            .for_each(|((p, g), h)| silu_grad_value_rows(p, g, h)),
        None => pre
            .par_chunks(block)
            .zip(g.par_chunks_mut(block))
            .for_each(|(p, g)| silu_grad_rows(p, g)),
    }
}

/// `h = silu(pre)`, in parallel.
pub fn silu<T: Real>(pre: &[T], h: &mut [T], width: usize) {
    let block = ROWS_PER_TASK * width;
    pre.par_chunks(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(p, h)| silu_value_rows(p, h));
}

/// A read-only matrix operand: data with row and column strides (in elements).
#[derive(Clone, Copy)]
pub struct Mat<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Stride between rows.
    pub rs: usize,
    /// Stride between columns.
    pub cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A row-major `(rows, cols)` matrix.
    pub fn rows(data: &'a [T], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major `(rows, cols)` matrix.
    pub fn transposed(data: &'a [T], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }

    /// The transpose (the same data, strides swapped).
    pub fn t(self) -> Self {
        Self {
            data: self.data,
            rs: self.cs,
            cs: self.rs,
        }
    }

    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// How a product is written into its destination.
#[derive(Clone, Copy, Debug)]
pub struct Write {
    /// Stride between the destination's rows (its columns are contiguous).
    pub rs: usize,
    /// Add the product to what the destination holds instead of overwriting it.
    pub accumulate: bool,
    /// Use rayon's threads (false: the calling thread alone, for callers that parallelise
    /// over blocks themselves).
    pub parallel: bool,
}

impl Write {
    /// Overwrite a row-major `(_, n)` destination, multi-threaded.
    pub fn rows(n: usize) -> Self {
        Self {
            rs: n,
            accumulate: false,
            parallel: true,
        }
    }

    /// The same, adding to the destination.
    pub fn adding(self) -> Self {
        Self {
            accumulate: true,
            ..self
        }
    }

    /// The same, on the calling thread alone.
    pub fn serial(self) -> Self {
        Self {
            parallel: false,
            ..self
        }
    }
}

/// `dst (m, n, row-major) = lhs (m, k) · rhs (k, n)`, multi-threaded (rayon) on the `gemm`
/// crate, AVX-512 kernels included where the CPU has them.
///
/// # Panics
/// When an operand is too short for its shape and strides (a bug in the caller).
pub fn matmul<T: Real>(dst: &mut [T], m: usize, n: usize, k: usize, lhs: Mat<T>, rhs: Mat<T>) {
    matmul_with(dst, Write::rows(n), m, n, k, lhs, rhs);
}

/// [`matmul`] on the calling thread alone (for callers that parallelise over blocks of rows).
pub fn matmul_serial<T: Real>(
    dst: &mut [T],
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
) {
    matmul_with(dst, Write::rows(n).serial(), m, n, k, lhs, rhs);
}

/// `dst (m, n) (+)= lhs (m, k) · rhs (k, n)` written as `write` says (row stride, overwrite or
/// add, threads).
///
/// # Panics
/// When an operand or the destination is too short for its shape and strides (a bug in the
/// caller).
pub fn matmul_with<T: Real>(
    dst: &mut [T],
    write: Write,
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        write.rs >= n && dst.len() >= (m - 1) * write.rs + n && lhs.fits(m, k) && rhs.fits(k, n),
        "matmul operands do not match ({m}×{k} · {k}×{n})"
    );
    if k == 0 {
        if !write.accumulate {
            for row in dst.chunks_mut(write.rs).take(m) {
                row[..n].fill(T::zero());
            }
        }
        return;
    }
    let threads = rayon::current_num_threads();
    let parts = (n / MIN_COLUMNS_PER_TASK).min(TASKS_PER_THREAD * threads);
    if !write.parallel || threads < 2 || parts < 2 {
        // Serial, or too few columns to split: `gemm`'s own threads split the rows.
        let parallelism = if write.parallel && threads > 1 {
            gemm::Parallelism::Rayon(threads)
        } else {
            gemm::Parallelism::None
        };
        // SAFETY: the whole product is in bounds (checked above).
        unsafe { gemm_columns(dst.as_mut_ptr(), write, m, 0..n, k, lhs, rhs, parallelism) };
        return;
    }
    // Column blocks of the product, one serial `gemm` each: disjoint columns of `dst`. (With
    // `gemm`'s own threads a weight read transposed, as `x·Wᵀ` reads it, ran at half speed.)
    let dst_addr = dst.as_mut_ptr() as usize;
    (0..parts).into_par_iter().for_each(|p| {
        let cols = n * p / parts..n * (p + 1) / parts;
        // SAFETY: the blocks cover disjoint columns of `dst`, each in bounds (checked above);
        // `dst` is borrowed mutably for the whole call.
        unsafe {
            gemm_columns(
                dst_addr as *mut T,
                write,
                m,
                cols,
                k,
                lhs,
                rhs,
                gemm::Parallelism::None,
            )
        };
    });
}

/// Columns below this many per task are not split further.
const MIN_COLUMNS_PER_TASK: usize = 64;
/// Column blocks per thread: several, so that blocks of unequal speed balance out.
const TASKS_PER_THREAD: usize = 4;

/// The columns `cols` of `dst (m, n) (+)= lhs · rhs` (on `parallelism`'s threads).
///
/// # Safety
/// `dst` must be valid for writes at every `(i, j)` with `i < m`, `j ∈ cols` under `write.rs`,
/// not aliased by another thread's block, and the operands must fit the product.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_columns<T: Real>(
    dst: *mut T,
    write: Write,
    m: usize,
    cols: std::ops::Range<usize>,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
    parallelism: gemm::Parallelism,
) {
    // SAFETY: the caller's contract; the column offsets stay inside the checked operands.
    unsafe {
        gemm::gemm(
            m,
            cols.len(),
            k,
            dst.add(cols.start),
            1,
            write.rs as isize,
            write.accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr().add(cols.start * rhs.cs),
            rhs.cs as isize,
            rhs.rs as isize,
            T::one(),
            T::one(),
            false,
            false,
            false,
            parallelism,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strided product agrees with a naive triple loop, transposed operands included.
    #[test]
    fn matmul_matches_naive() {
        let (m, n, k) = (37, 19, 53);
        let a: Vec<f64> = (0..m * k).map(|i| ((i * 7 % 13) as f64) - 6.0).collect();
        let b: Vec<f64> = (0..n * k).map(|i| ((i * 5 % 11) as f64) * 0.5).collect();
        // dst = a (m, k) · bᵀ where b is stored (n, k) row-major.
        let mut dst = vec![0f64; m * n];
        matmul(&mut dst, m, n, k, Mat::rows(&a, k), Mat::transposed(&b, k));
        for i in 0..m {
            for j in 0..n {
                let want: f64 = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
                assert_eq!(dst[i * n + j], want);
            }
        }
    }

    /// A strided destination: the product lands in its columns, added to what was there, and
    /// the columns beyond `n` are untouched.
    #[test]
    fn matmul_with_writes_strided_and_adds() {
        let (m, n, k, rs) = (5, 3, 4, 7);
        let a: Vec<f64> = (0..m * k).map(|i| (i % 5) as f64 - 2.0).collect();
        let b: Vec<f64> = (0..k * n).map(|i| (i % 3) as f64 + 0.5).collect();
        let mut dst: Vec<f64> = (0..m * rs).map(|i| i as f64).collect();
        let before = dst.clone();
        let write = Write::rows(rs).adding().serial();
        matmul_with(&mut dst, write, m, n, k, Mat::rows(&a, k), Mat::rows(&b, n));
        for i in 0..m {
            for j in 0..rs {
                let add: f64 = if j < n {
                    (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum()
                } else {
                    0.0
                };
                assert_eq!(dst[i * rs + j], before[i * rs + j] + add);
            }
        }
    }

    #[test]
    fn silu_kernels_match_the_formula() {
        let pre0: Vec<f32> = (0..600).map(|i| (i as f32 - 300.0) * 0.05).collect();
        let bias = [0.25f32, -0.5, 1.0];
        let mut pre = pre0.clone();
        let mut h = vec![0f32; pre.len()];
        bias_silu(&mut pre, &mut h, &bias);
        let mut g = vec![1f32; pre.len()];
        let mut h2 = vec![0f32; pre.len()];
        silu_grad(&pre, &mut g, Some(&mut h2), 3);
        for (i, &x) in pre0.iter().enumerate() {
            let v = (x + bias[i % 3]) as f64;
            let s = 1.0 / (1.0 + (-v).exp());
            assert!((h[i] as f64 - v * s).abs() < 1e-6 * (1.0 + v.abs()));
            assert_eq!(h[i], h2[i]);
            assert!((g[i] as f64 - s * (1.0 + v * (1.0 - s))).abs() < 1e-6);
        }
    }
}
