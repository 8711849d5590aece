//! Vectorisable `exp` and `sin` for f32 (only arithmetic, selects and bit operations, so loops of
//! them compile to SIMD), and [`simd_dispatch!`], which compiles a loop for AVX-512 or AVX2 and
//! picks the version the CPU supports at run time (the default x86-64 target has only SSE2).
//!
//! Both stay within about 1 ulp of libm (tests below), so results differ from libm's in the last
//! bit at most.

/// `eˣ`: `x` clamped to `[−87, 88]`, `n = round(x·log₂e)` by the 1.5·2²³ rounding trick,
/// `r = x − n·ln 2` in two parts (exact products), `eʳ` by Cephes' `expf` polynomial, scaled by
/// `2ⁿ` built in the exponent bits.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    exp_f32_as::<false>(x)
}

/// `a·b + c`, rounded once (`f32::mul_add`) when `FUSED`, else twice. Fused is for the bodies of
/// [`simd_dispatch!`] only, whose AVX2 and AVX-512 builds have FMA instructions; elsewhere on
/// x86-64 `mul_add` is a call into libm.
#[inline(always)]
pub(crate) fn mul_add_f32<const FUSED: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FUSED {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// [`exp_f32`], its products and sums fused when `FUSED` ([`mul_add_f32`]): the same accuracy
/// (tested), one rounding fewer per step, fewer instructions.
#[inline(always)]
pub(crate) fn exp_f32_as<const FUSED: bool>(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5·2²³: adding it rounds to the nearest integer
    const LN2_HI: f32 = 0.693_359_4; // few mantissa bits: n·LN2_HI is exact
    const LN2_LO: f32 = -2.121_944_4e-4;
    let fma = mul_add_f32::<FUSED>;
    let x = x.clamp(-87.0, 88.0);
    let t = fma(x, std::f32::consts::LOG2_E, MAGIC);
    let n = t - MAGIC;
    let r = fma(-n, LN2_LO, fma(-n, LN2_HI, x));
    let p = [8.333_452e-3, 4.166_579_6e-2, 0.166_666_65, 0.5]
        .into_iter()
        .fold(fma(1.987_569_1e-4, r, 1.398_199_9e-3), |p, k| fma(p, r, k));
    let p = fma(p, r * r, r) + 1.0;
    // |n| ≤ 127 after the clamp: wrapping arithmetic only spares the overflow check that test
    // builds insert, which would keep the loops around this function scalar.
    let n_int = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    p * f32::from_bits((n_int.wrapping_add(127) << 23) as u32)
}

/// `sin x` of an f32 `x` with `|x| < 2²⁰`, evaluated in f64: `n = round(x·2/π)`,
/// `r = x − n·π/2` (Cody–Waite, two parts, the first product exact), Taylor polynomials of
/// `sin r` and `cos r` on `|r| ≤ π/4` (truncation below 1e-11), the quadrant `n mod 4` picking
/// `±sin r` or `±cos r`. Error: the final rounding to f32 plus ~1e-11.
#[inline(always)]
pub(crate) fn sin_f32(x: f32) -> f32 {
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5·2⁵²
    const PIO2_HI: f64 = 1.570_796_326_734_125_6; // 33 bits of π/2 (fdlibm's pio2_1)
    const PIO2_LO: f64 = 6.077_100_506_506_192e-11; // π/2 − PIO2_HI
    let x = x as f64;
    let q = x * std::f64::consts::FRAC_2_PI + MAGIC;
    let n = q - MAGIC;
    let r = x - n * PIO2_HI - n * PIO2_LO;
    let r2 = r * r;
    // r·(1 + r²·…) rather than r + r·r²·…: keeps the sign of sin(−0).
    let s = r
        * (1.0
            + r2 * (-1.0 / 6.0
                + r2 * (1.0 / 120.0
                    + r2 * (-1.0 / 5040.0 + r2 * (1.0 / 362_880.0 + r2 * (-1.0 / 39_916_800.0))))));
    let c = 1.0
        + r2 * (-0.5
            + r2 * (1.0 / 24.0
                + r2 * (-1.0 / 720.0
                    + r2 * (1.0 / 40_320.0
                        + r2 * (-1.0 / 3_628_800.0 + r2 * (1.0 / 479_001_600.0))))));
    let quadrant = q.to_bits() & 3;
    let v = if quadrant & 1 == 0 { s } else { c };
    let v = if quadrant & 2 == 0 { v } else { -v };
    v as f32
}

/// Defines `pub fn $name<T: $bound>(args)` running `$body` compiled for AVX-512F or AVX2+FMA
/// when the CPU has them (checked at run time, cached by std), else as built.
macro_rules! simd_dispatch {
    ($(#[$meta:meta])* $name:ident ($($arg:ident : $ty:ty),*) $body:block) => {
        $(#[$meta])*
        pub(crate) fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
    ($(#[$meta:meta])* $name:ident <$t:ident : $bound:path> ($($arg:ident : $ty:ty),*) $body:block) => {
        $(#[$meta])*
        pub(crate) fn $name<$t: $bound>($($arg: $ty),*) {
            #[inline(always)]
            fn body<$t: $bound>($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512<$t: $bound>($($arg: $ty),*) {
                    body::<$t>($($arg),*)
                }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2<$t: $bound>($($arg: $ty),*) {
                    body::<$t>($($arg),*)
                }
                if std::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU supports the features the function was compiled for.
                    return unsafe { avx512::<$t>($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2::<$t>($($arg),*) };
                }
            }
            body::<$t>($($arg),*)
        }
    };
}
pub(crate) use simd_dispatch;

simd_dispatch!(
    /// `v = sin(v)` for every element (see [`sin_f32`]).
    sin_in_place(v: &mut [f32]) {
        for x in v.iter_mut() {
            *x = sin_f32(*x);
        }
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Within 2.5e-7 relative of the exact exponential over the range the activations use.
    #[test]
    fn exp_is_accurate() {
        let mut worst = 0f64;
        for i in 0..200_001 {
            let x = -87.0 + 175.0 * i as f32 / 200_000.0;
            let (fast, exact) = (exp_f32(x) as f64, (x as f64).exp());
            worst = worst.max((fast - exact).abs() / exact);
        }
        assert!(worst < 2.5e-7, "relative error {worst:e}");
        let worst_fused = (0..200_001)
            .map(|i| -87.0 + 175.0 * i as f32 / 200_000.0)
            .map(|x| (exp_f32_as::<true>(x) as f64, (x as f64).exp()))
            .fold(0f64, |w, (fast, exact)| w.max((fast - exact).abs() / exact));
        assert!(
            worst_fused < 2.5e-7,
            "fused: relative error {worst_fused:e}"
        );
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(-1000.0) < 1e-37 && exp_f32(1000.0) > 1e38);
    }

    /// Correctly rounded or one ulp off the exact sine, and at most one ulp from libm's `sinf`,
    /// over the arguments the position encoding produces (`x·2ᵏ`, |x| ≤ 2, k < 15, ± π/2).
    #[test]
    fn sin_is_accurate() {
        let ulp = |v: f32| f32::from_bits(v.abs().to_bits() + 1) - v.abs();
        let mut args: Vec<f32> = (0..400_000)
            .map(|i| (i as f32 - 200_000.0) * 1.7e-1 + 0.013 * (i % 7) as f32)
            .collect();
        args.extend((0..100_000).map(|i| (i as f32 - 50_000.0) * 3.1e-5));
        args.extend([0.0, -0.0, 1e-30, -1e-7, 32_767.99, -32_767.99]);
        for x in args {
            let fast = sin_f32(x);
            let exact = (x as f64).sin();
            assert!(
                (fast as f64 - exact).abs() <= ulp(exact as f32) as f64,
                "sin({x}) = {fast}, exact {exact}"
            );
            assert!(
                (fast - x.sin()).abs() <= ulp(x.sin()),
                "sin({x}): {fast} vs libm"
            );
        }
        assert_eq!(sin_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        let mut v = vec![0.5f32, 1.0, 100.0];
        sin_in_place(&mut v);
        assert_eq!(v, vec![sin_f32(0.5), sin_f32(1.0), sin_f32(100.0)]);
    }
}
