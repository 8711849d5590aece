//! Matrix products on plain arrays: a strided product on the `gemm` crate (the one candle uses),
//! multi-threaded over column blocks, AVX-512 kernels included where the CPU has them.

use rayon::prelude::*;

use super::real::Real;

/// A read-only matrix operand: data with row and column strides (in elements).
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T> {
    /// The elements.
    pub(crate) data: &'a [T],
    /// Stride between rows.
    pub(crate) rs: usize,
    /// Stride between columns.
    pub(crate) cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A row-major `(rows, cols)` matrix.
    pub(crate) fn rows(data: &'a [T], cols: usize) -> Self {
        Self {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major `(rows, cols)` matrix.
    pub(crate) fn transposed(data: &'a [T], cols: usize) -> Self {
        Self {
            data,
            rs: 1,
            cs: cols,
        }
    }

    /// The transpose (the same data, strides swapped).
    pub(crate) fn t(self) -> Self {
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
pub(crate) struct Write {
    /// Stride between the destination's rows (its columns are contiguous).
    pub(crate) rs: usize,
    /// Add the product to what the destination holds instead of overwriting it.
    pub(crate) accumulate: bool,
    /// Use rayon's threads (false: the calling thread alone, for callers that parallelise
    /// over blocks themselves).
    pub(crate) parallel: bool,
}

impl Write {
    /// Overwrite a row-major `(_, n)` destination, multi-threaded.
    pub(crate) fn rows(n: usize) -> Self {
        Self {
            rs: n,
            accumulate: false,
            parallel: true,
        }
    }

    /// The same, adding to the destination.
    pub(crate) fn adding(self) -> Self {
        Self {
            accumulate: true,
            ..self
        }
    }

    /// The same, on the calling thread alone.
    pub(crate) fn serial(self) -> Self {
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
pub(crate) fn matmul<T: Real>(
    dst: &mut [T],
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
) {
    matmul_with(dst, Write::rows(n), m, n, k, lhs, rhs);
}

/// [`matmul`] on the calling thread alone (for callers that parallelise over blocks of rows).
pub(crate) fn matmul_serial<T: Real>(
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
pub(crate) fn matmul_with<T: Real>(
    dst: &mut [T],
    write: Write,
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
) {
    // SAFETY: `dst` is borrowed mutably for the call and holds `dst.len()` initialised elements.
    unsafe { matmul_raw(dst.as_mut_ptr(), dst.len(), write, m, n, k, lhs, rhs) }
}

/// `lhs (m, k) · rhs (k, n)` into a new row-major `(m, n)` vector, multi-threaded, whose memory
/// is never zeroed first: the product writes every element, and `gemm` reads no destination
/// when it overwrites.
pub(crate) fn matmul_new<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    lhs: Mat<T>,
    rhs: Mat<T>,
) -> Vec<T> {
    let len = m * n;
    let mut out = Vec::with_capacity(len);
    // SAFETY: the spare capacity holds `len` elements, only written through the pointer (an
    // overwriting product reads no destination); the product writes all `len` of them.
    unsafe {
        matmul_raw(out.as_mut_ptr(), len, Write::rows(n), m, n, k, lhs, rhs);
        out.set_len(len);
    }
    out
}

/// [`matmul_with`] on a destination given by pointer and length.
///
/// # Safety
/// `dst` must be valid for writes of `len` elements, and hold initialised ones when
/// `write.accumulate`; nothing else may access them during the call.
///
/// # Panics
/// As [`matmul_with`].
#[allow(clippy::too_many_arguments)]
unsafe fn matmul_raw<T: Real>(
    dst: *mut T,
    len: usize,
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
        write.rs >= n && len >= (m - 1) * write.rs + n && lhs.fits(m, k) && rhs.fits(k, n),
        "matmul operands do not match ({m}×{k} · {k}×{n})"
    );
    if k == 0 {
        if !write.accumulate {
            for (i, j) in (0..m).flat_map(|i| (0..n).map(move |j| (i, j))) {
                // SAFETY: `(i, j)` is in bounds (checked above).
                unsafe { dst.add(i * write.rs + j).write(T::zero()) };
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
        unsafe { gemm_columns(dst, write, m, 0..n, k, lhs, rhs, parallelism) };
        return;
    }
    // Column blocks of the product, one serial `gemm` each: disjoint columns of `dst`. (With
    // `gemm`'s own threads a weight read transposed, as `x·Wᵀ` reads it, ran at half speed.)
    let dst_addr = dst as usize;
    (0..parts).into_par_iter().for_each(|p| {
        let cols = n * p / parts..n * (p + 1) / parts;
        // SAFETY: the blocks cover disjoint columns of `dst`, each in bounds (checked above);
        // the caller gives `dst` to this call alone.
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

    /// A product into new memory equals the one into a zeroed buffer bit for bit, multi-threaded
    /// column blocks included; with `k = 0` it is all zeros.
    #[test]
    fn matmul_new_equals_matmul_into_zeros() {
        let (m, n, k) = (67, 300, 45);
        let a: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 13) as f32) * 0.37 - 2.0)
            .collect();
        let b: Vec<f32> = (0..n * k)
            .map(|i| ((i * 5 % 11) as f32) * 0.21 - 1.0)
            .collect();
        let (lhs, rhs) = (Mat::rows(&a, k), Mat::transposed(&b, k));
        let mut want = vec![0f32; m * n];
        matmul(&mut want, m, n, k, lhs, rhs);
        let got = matmul_new(m, n, k, lhs, rhs);
        assert!(got
            .iter()
            .zip(&want)
            .all(|(g, w)| g.to_bits() == w.to_bits()));
        assert_eq!(matmul_new(m, n, 0, lhs, rhs), vec![0f32; m * n]);
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
}

#[cfg(test)]
mod rates {
    use super::*;
    use candle_core::{Device, Tensor};
    use std::time::Instant;

    fn best(mut f: impl FnMut()) -> f64 {
        (0..5)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// GFLOP/s of candle's matmul and ours on the prior's linear layouts.
    /// `cargo test --release -p clipsculpt --lib linear_layout_rates -- --ignored --nocapture`
    #[test]
    #[ignore = "a timing printout"]
    fn linear_layout_rates() -> candle_core::Result<()> {
        let dev = Device::Cpu;
        for (m, k, n) in [(2052, 1024, 1024), (2052, 1024, 4096), (2052, 4096, 1024)] {
            let x = Tensor::randn(0f32, 1.0, (m, k), &dev)?;
            let w = Tensor::randn(0f32, 1.0, (n, k), &dev)?;
            let g = Tensor::randn(0f32, 1.0, (m, n), &dev)?;
            let flop = 2.0 * (m * k * n) as f64 / 1e9;
            let fwd_candle = best(|| drop(x.matmul(&w.t().unwrap()).unwrap()));
            let bwd_candle = best(|| drop(g.matmul(&w).unwrap()));
            let (xv, wv, gv) = (
                x.flatten_all()?.to_vec1::<f32>()?,
                w.flatten_all()?.to_vec1::<f32>()?,
                g.flatten_all()?.to_vec1::<f32>()?,
            );
            let mut y = vec![0f32; m * n];
            let fwd_ours =
                best(|| matmul(&mut y, m, n, k, Mat::rows(&xv, k), Mat::transposed(&wv, k)));
            let mut dx = vec![0f32; m * k];
            let bwd_ours = best(|| matmul(&mut dx, m, k, n, Mat::rows(&gv, n), Mat::rows(&wv, k)));
            println!(
                "({m}×{k})·({k}×{n}): x·wᵀ candle {:.0} ours {:.0}; g·w candle {:.0} ours {:.0} GFLOP/s",
                flop / fwd_candle,
                flop / fwd_ours,
                flop / bwd_candle,
                flop / bwd_ours
            );
        }
        Ok(())
    }
}
