//! Activations on plain arrays, one vectorised, multi-threaded pass each: bias + SiLU forward
//! and backward (the NeRSTF MLP), QuickGELU forward and backward (CLIP), the exact GELU forward
//! and backward (the prior), and the logistic sigmoid. They use the vectorisable `exp` of [`super::fastmath`] ([`Real::fast_exp`]),
//! compiled for AVX-512 or AVX2 when the CPU has them.

use rayon::prelude::*;

use super::fastmath::simd_dispatch;
use super::real::Real;
use super::rows::new_by_chunks;

/// Rows per rayon task of the SiLU kernels.
const ROWS_PER_TASK: usize = 128;

/// `1 / (1 + e^{−x})` with the vectorisable `exp` ([`Real::fast_exp`]; libm's in f64).
#[inline(always)]
pub(crate) fn sigmoid<T: Real>(x: T) -> T {
    T::one() / (T::one() + (-x).fast_exp())
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
pub(crate) fn bias_silu<T: Real>(pre: &mut [T], h: &mut [T], bias: &[T]) {
    let block = ROWS_PER_TASK * bias.len();
    pre.par_chunks_mut(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(p, h)| bias_silu_rows(p, h, bias));
}

/// `a = silu(a + bias)` in place, in parallel.
pub(crate) fn bias_silu_inplace<T: Real>(a: &mut [T], bias: &[T]) {
    let block = ROWS_PER_TASK * bias.len();
    a.par_chunks_mut(block)
        .for_each(|a| bias_silu_inplace_rows(a, bias));
}

/// `g *= silu'(pre)` and, when `h` is given, `h = silu(pre)`, in parallel.
pub(crate) fn silu_grad<T: Real>(pre: &[T], g: &mut [T], h: Option<&mut [T]>, width: usize) {
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
pub(crate) fn silu<T: Real>(pre: &[T], h: &mut [T], width: usize) {
    let block = ROWS_PER_TASK * width;
    pre.par_chunks(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(p, h)| silu_value_rows(p, h));
}

/// QuickGELU's slope: `x·σ(1.702·x)`.
pub(crate) const QUICK_GELU: f64 = 1.702;

/// Rows per rayon task of the QuickGELU kernels.
const GELU_ROWS_PER_TASK: usize = 32;

simd_dispatch!(quick_gelu_rows<T: Real>(pre: &[T], h: &mut [T]) {
    let a = T::from_f64(QUICK_GELU);
    for (&x, h) in pre.iter().zip(h.iter_mut()) {
        *h = x / (T::one() + (-(a * x)).fast_exp());
    }
});

simd_dispatch!(quick_gelu_grad_rows<T: Real>(pre: &[T], g: &mut [T]) {
    let a = T::from_f64(QUICK_GELU);
    for (&x, g) in pre.iter().zip(g.iter_mut()) {
        let s = T::one() / (T::one() + (-(a * x)).fast_exp());
        *g *= s + a * x * s * (T::one() - s);
    }
});

/// `h = quick_gelu(pre)` over rows of `width`, in parallel.
pub(crate) fn quick_gelu<T: Real>(pre: &[T], h: &mut [T], width: usize) {
    let block = GELU_ROWS_PER_TASK * width;
    pre.par_chunks(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(a, h)| quick_gelu_rows(a, h));
}

/// `g *= quick_gelu'(pre)` over rows of `width`, in parallel.
pub(crate) fn quick_gelu_grad<T: Real>(pre: &[T], g: &mut [T], width: usize) {
    let block = GELU_ROWS_PER_TASK * width;
    pre.par_chunks(block)
        .zip(g.par_chunks_mut(block))
        .for_each(|(a, g)| quick_gelu_grad_rows(a, g));
}

/// Elements per rayon task of the exact-GELU kernels.
const GELU_ERF_PER_TASK: usize = 1 << 14;

/// `Φ(x)`, the standard normal CDF, as `½·erfc(−x/√2)` from the Chebyshev fit of `erfc` in
/// Numerical Recipes (fractional error below 1.2e-7 over the whole line, so the tails keep their
/// relative accuracy), with the vectorisable `exp`.
#[inline(always)]
pub(crate) fn normal_cdf<T: Real>(x: T) -> T {
    normal_cdf_as::<T, false>(x)
}

/// [`normal_cdf`], its products and sums fused when `FUSED` (only in [`simd_dispatch!`] bodies:
/// see [`Real::mul_add_as`]); fused, the exact GELU's forward took 6.3 ms where unfused it took
/// 9.1 ms (8.4 M elements, two AVX-512 threads).
#[inline(always)]
fn normal_cdf_as<T: Real, const FUSED: bool>(x: T) -> T {
    let c = |v: f64| T::from_f64(v);
    let z = x.max_of(-x) * c(std::f64::consts::FRAC_1_SQRT_2);
    let t = T::one() / c(0.5).mul_add_as::<FUSED>(z, T::one());
    let p = [
        -0.822_152_23,
        1.488_515_87,
        -1.135_203_98,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_68,
        -1.265_512_23,
    ]
    .into_iter()
    .fold(c(0.170_872_77), |p, k| p.mul_add_as::<FUSED>(t, c(k)));
    let poly = (-z).mul_add_as::<FUSED>(z, p);
    let tail = c(0.5) * t * poly.fast_exp_as::<FUSED>(); // ½·erfc(|x|/√2) = Φ(−|x|)
    if x >= T::zero() {
        T::one() - tail
    } else {
        tail
    }
}

simd_dispatch!(gelu_erf_chunk<T: Real>(x: &[T], h: &mut [T]) {
    for (&x, h) in x.iter().zip(h.iter_mut()) {
        *h = x * normal_cdf_as::<T, true>(x);
    }
});

simd_dispatch!(gelu_erf_grad_chunk<T: Real>(x: &[T], g: &mut [T]) {
    let inv_sqrt_2pi = T::from_f64(0.5 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2);
    for (&x, g) in x.iter().zip(g.iter_mut()) {
        let pdf = (T::from_f64(-0.5) * x * x).fast_exp_as::<true>() * inv_sqrt_2pi;
        *g *= x.mul_add_as::<true>(pdf, normal_cdf_as::<T, true>(x));
    }
});

/// `x·Φ(x)` (the exact GELU) into a new vector, in parallel (no serial zeroing first).
pub(crate) fn gelu_erf<T: Real>(x: &[T]) -> Vec<T> {
    new_by_chunks(
        x.len(),
        GELU_ERF_PER_TASK,
        || (),
        |_, i, h: &mut [T]| gelu_erf_chunk(&x[i * GELU_ERF_PER_TASK..][..h.len()], h),
    )
}

/// `g·(Φ(x) + x·φ(x))` (through the exact GELU's derivative) into a new vector, in parallel.
pub(crate) fn gelu_erf_grad<T: Real>(x: &[T], g: &[T]) -> Vec<T> {
    new_by_chunks(
        x.len(),
        GELU_ERF_PER_TASK,
        || (),
        |_, i, out: &mut [T]| {
            let at = i * GELU_ERF_PER_TASK..i * GELU_ERF_PER_TASK + out.len();
            out.copy_from_slice(&g[at.clone()]);
            gelu_erf_grad_chunk(&x[at], out)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Φ against known values; the f32 kernels against the same formulas in f64 (libm's `exp`).
    #[test]
    fn exact_gelu_kernels_match_the_formula() {
        for (x, phi) in [
            (0.0f64, 0.5),
            (1.0, 0.841_344_746_068_543),
            (-2.0, 0.022_750_131_948_179),
        ] {
            assert!((normal_cdf(x) - phi).abs() < 2e-7 * phi, "Φ({x})");
        }
        let x: Vec<f32> = (0..40_000).map(|i| (i as f32 - 20_000.0) * 5e-4).collect();
        let h = gelu_erf(&x);
        let g = gelu_erf_grad(&x, &vec![1f32; x.len()]);
        for (i, &v) in x.iter().enumerate() {
            let v = v as f64;
            let cdf = normal_cdf(v);
            let want_h = v * cdf;
            let want_g = cdf + v * (-0.5 * v * v).exp() / (2.0 * std::f64::consts::PI).sqrt();
            assert!(
                (h[i] as f64 - want_h).abs() < 1e-6 * (1.0 + want_h.abs()),
                "h({v})"
            );
            assert!((g[i] as f64 - want_g).abs() < 1e-6, "g({v})");
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
