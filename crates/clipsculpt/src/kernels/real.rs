//! The float types of the kernels: f32, and f64 for finite-difference tests.

use candle_core::WithDType;

use super::fastmath::{self, exp_f32, exp_f32_as, mul_add_f32};

/// The float types of the fused pass (f32, and f64 for finite-difference tests).
pub(crate) trait Real: WithDType + std::ops::Neg<Output = Self> {
    /// `eˣ` as libm computes it.
    fn exp(self) -> Self;
    /// `eˣ` for the activations: vectorisable (within ~1 ulp in f32; libm's in f64).
    fn fast_exp(self) -> Self;
    /// [`Real::fast_exp`] with its arithmetic fused when `FUSED` (f32: [`exp_f32_as`]).
    fn fast_exp_as<const FUSED: bool>(self) -> Self;
    /// `self·a + b`, rounded once when `FUSED`: only inside [`fastmath::simd_dispatch!`] bodies
    /// (see [`mul_add_f32`]).
    fn mul_add_as<const FUSED: bool>(self, a: Self, b: Self) -> Self;
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
    #[inline(always)]
    fn fast_exp_as<const FUSED: bool>(self) -> Self {
        exp_f32_as::<FUSED>(self)
    }
    #[inline(always)]
    fn mul_add_as<const FUSED: bool>(self, a: Self, b: Self) -> Self {
        mul_add_f32::<FUSED>(self, a, b)
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
    #[inline(always)]
    fn fast_exp_as<const FUSED: bool>(self) -> Self {
        f64::exp(self)
    }
    #[inline(always)]
    fn mul_add_as<const FUSED: bool>(self, a: Self, b: Self) -> Self {
        if FUSED {
            self.mul_add(a, b)
        } else {
            self * a + b
        }
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
