//! Softmax with an analytic backward: `dx = y·(g − Σ g·y)` along the softmax dimension.

use std::sync::Arc;

use candle_core::{Result, Tensor, D};

use crate::autodiff::vjp::attach;

/// Differentiable softmax along `dim` (fused kernel forward on the last dimension).
pub(crate) fn softmax<Dim: candle_core::shape::Dim>(x: &Tensor, dim: Dim) -> Result<Tensor> {
    let dim = dim.to_index(x.shape(), "softmax")?;
    let last = x.rank() - 1;
    if dim != last {
        return softmax(&x.transpose(dim, last)?, D::Minus1)?.transpose(dim, last);
    }
    let y = candle_nn::ops::softmax_last_dim(&x.detach().contiguous()?)?;
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
