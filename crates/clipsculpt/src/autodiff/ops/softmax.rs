//! Softmax with an analytic backward: `dx = y·(g − Σ g·y)` along the softmax dimension.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp1, Layout, Result, Shape, Tensor, D};

use super::contiguous_slice;
use super::rows::fused_on;
use crate::autodiff::vjp::attach;
use crate::kernels::softmax_rows_f32;

/// Softmax along the last dimension, without a graph: f32 on the CPU runs
/// [`softmax_rows_f32`] (vectorised `exp`, rows in parallel); other dtypes and devices run
/// candle's kernel.
pub(crate) fn softmax_last_dim(x: &Tensor) -> Result<Tensor> {
    let x = x.detach().contiguous()?;
    if fused_on(x.device()) && x.dtype() == candle_core::DType::F32 {
        x.apply_op1_no_bwd(&FastSoftmax)
    } else {
        candle_nn::ops::softmax_last_dim(&x)
    }
}

/// The CPU f32 kernel of [`softmax_last_dim`].
struct FastSoftmax;

impl CustomOp1 for FastSoftmax {
    fn name(&self) -> &'static str {
        "fast_softmax"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(v) = s else {
            candle_core::bail!("fast_softmax: f32 only (bug)");
        };
        let mut out = contiguous_slice(v, l, "fast_softmax")?.to_vec();
        softmax_rows_f32(&mut out, l.dims().last().copied().unwrap_or(1));
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

/// Differentiable softmax along `dim` (fused kernel forward on the last dimension).
pub(crate) fn softmax<Dim: candle_core::shape::Dim>(x: &Tensor, dim: Dim) -> Result<Tensor> {
    let dim = dim.to_index(x.shape(), "softmax")?;
    let last = x.rank() - 1;
    if dim != last {
        return softmax(&x.transpose(dim, last)?, D::Minus1)?.transpose(dim, last);
    }
    let y = softmax_last_dim(x)?;
    attach(
        "softmax",
        y,
        &[x],
        Arc::new(|v| {
            let (y, g) = (v.output, v.grad);
            let s = (g * y)?.sum_keepdim(D::Minus1)?;
            Ok(vec![Some((y * g.broadcast_sub(&s)?)?)])
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::Device;

    #[test]
    fn matches_composed_softmax() -> Result<()> {
        let x = randn(&[2, 3, 7], 7, &Device::Cpu)?;
        for dim in 0..3 {
            let err = (softmax(&x, dim)? - candle_nn::ops::softmax(&x, dim)?)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert!(err < 1e-6, "dim {dim}: max error {err}");
        }
        Ok(())
    }

    #[test]
    fn gradient_matches_finite_differences() -> Result<()> {
        let x = randn(&[3, 5], 8, &Device::Cpu)?;
        check_grad(std::slice::from_ref(&x), |t| softmax(&t[0], D::Minus1))?;
        check_grad(&[x], |t| softmax(&t[0], 0))
    }
}
